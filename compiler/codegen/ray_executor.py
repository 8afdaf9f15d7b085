"""A Ray-backed ``concurrent.futures.Executor`` for ``compile(..., executor=)``.

    from compiler.codegen.ray_executor import RayExecutor
    with RayExecutor() as ex:             # ray.init() here unless Ray is up
        m = compile(graph, executor=ex)

Each ``submit(fn, *args)`` is one Ray task (``ray.remote(fn)``); its future is
marked running at once, so ``compiler.codegen.jobs.precompile`` leaves every
submitted instance to Ray instead of compiling it again in this process. The
objects are the same as the local pool's (``docs/compile-at-scale.md``). Ray
is an optional extra (``pip install 'fuelc[ray]'``).
"""
from __future__ import annotations

import concurrent.futures
import os

from compiler.errors import CompilerError


class RayUnavailableError(CompilerError, ImportError):
    """Ray is not installed; the message names the extra that installs it."""


class RayExecutor(concurrent.futures.Executor):
    """Tasks as Ray tasks. ``address``: a running cluster (``ray.init``'s);
    default: a local Ray started here if none is, whose workers get this
    checkout on ``PYTHONPATH`` (so they import the same fuelc).
    ``shutdown`` stops only a Ray this executor started."""

    def __init__(self, address: str | None = None, **init_options):
        try:
            import ray
        except ImportError:
            raise RayUnavailableError("the Ray executor needs ray: pip install 'fuelc[ray]' "
                                      "(or pip install ray)") from None
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            path = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
            init_options.setdefault("runtime_env", {"env_vars": {"PYTHONPATH": path}})
            init_options.setdefault("include_dashboard", False)
            init_options.setdefault("log_to_driver", False)
            ray.init(address=address, **init_options)
        self._remote = {}

    def submit(self, fn, /, *args, **kwargs) -> concurrent.futures.Future:
        remote = self._remote.get(fn)
        if remote is None:
            remote = self._remote[fn] = self._ray.remote(fn)
        future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()  # Ray owns it now: never taken back
        ref = remote.remote(*args, **kwargs)

        def done(ray_future):
            try:
                future.set_result(ray_future.result())
            except BaseException as e:  # noqa: BLE001 - the task's error, to the caller
                future.set_exception(e)
        ref.future().add_done_callback(done)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
            self._started = False
