"""Compiling kernel instances in parallel: ``compile(graph, jobs=N, executor=...)``.

The calling process does what needs its own state: for every kernel
instance the plan calls, its linalg text, the strategy the target picks and
the kernel-cache lookup. Each *cold* instance (no loaded object, no verified
disk entry) becomes a task ``emit_object(text, target, strategy) -> bytes``
for a ``concurrent.futures.Executor``; the object that comes back is stored
in the kernel cache (disk and memory) by the calling process, which is the
only writer. The tasks go longest first (``expected_cost``; fuelc's own
workers get each as soon as it is found, ranked, and take the longest found
so far: ``ProcessExecutor.submit_ranked``), and
the calling process compiles too: once every instance is submitted it takes,
from the front, the tasks no worker has started (``Future.cancel``), so
whichever process is free takes the longest task left. An object depends only on
(text, strategy, target), so the result is bit-identical whatever the
number of jobs or the executor; a task that fails is compiled again in the
calling process, which raises the typed error with its reproducer.

``jobs`` counts the processes that compile at once, the caller included:
``jobs=1`` compiles everything in the calling process, ``jobs=N`` adds a
``ProcessExecutor`` of N-1 workers. Default: ``$FUELC_JOBS``, else the CPUs
this process may use (``os.sched_getaffinity``). A spawned worker costs
about a second of CPU to import the compiler, so ``compile()`` only starts workers
for a graph of at least ``MIN_NODES`` nodes, at its start (they import while
the passes run), and offers them every cold instance from the first one;
smaller graphs compile in the calling process alone.

``ProcessExecutor`` workers are forked from the calling process when it
runs no other Python thread (``fork_safe``), else fresh interpreters running
``python -m compiler.codegen.jobs`` (unlike ``multiprocessing``'s spawn they
never import the caller's ``__main__``); either way each is fed one pickled
call at a time over its stdin and answers on a private copy of its stdout. A
forked worker costs no interpreter start and none of the imports the caller
has made, so it is ready before the first task exists; a spawned one takes
about a second of CPU.
"""
from __future__ import annotations

import concurrent.futures
import gc
import heapq
import importlib
import itertools
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import warnings
from typing import Callable, Iterable

from compiler.errors import CompilerError
from runtime.cpu_features import usable_cpus
from runtime.errors import FuelError

#: Graphs with fewer nodes compile in the calling process (no workers). The
#: smallest benchmark model (``audio``: 52 nodes, 13 kernels, one of them 3 s
#: of LLVM) gains from a worker.
MIN_NODES = 32

_FRAME = struct.Struct("<Q")


class JobsError(CompilerError, ValueError):
    """A ``jobs`` count (or ``$FUELC_JOBS``) that is not a positive integer."""


class WorkerError(CompilerError):
    """A compile worker process died or answered garbage; the instance is
    compiled again in the calling process."""


def default_jobs() -> int:
    """``$FUELC_JOBS``, else the number of CPUs this process may run on."""
    env = os.environ.get("FUELC_JOBS")
    if env is not None and env.strip():
        return check_jobs(env, "FUELC_JOBS")
    return usable_cpus()


def check_jobs(jobs, what: str = "jobs") -> int:
    """``jobs`` as a positive int, else ``JobsError`` naming ``what``."""
    try:
        n = int(jobs)
        if n != float(jobs) or isinstance(jobs, bool):
            raise ValueError
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise JobsError(f"{what}={jobs!r}: expected a positive number of parallel compile "
                        "jobs (1 compiles in the calling process only)")
    return n


# -- the task ----------------------------------------------------------------------------
def emit_object(text: str, target, strategy) -> bytes:
    """The relocatable object of ``text`` (one ``@kernel`` entry) for
    ``target`` with ``strategy``: what a worker runs."""
    from compiler.codegen.family import ENTRY
    return target.codegen.emit_object(text, [ENTRY], target=target, strategy=strategy)


# -- the worker pool -----------------------------------------------------------------------
class ProcessExecutor(concurrent.futures.Executor):
    """A ``concurrent.futures.Executor`` over ``workers`` worker processes
    (see the module docstring). ``fn`` must be importable by name (a module
    function) and its arguments and result picklable. A worker that dies
    fails its task with ``WorkerError`` and is not replaced."""

    def __init__(self, workers: int, start: str | None = None):
        # the tasks no worker has taken: (rank, submission number, task), lowest first
        self._waiting: list = []
        self._count = itertools.count()
        self._cv = threading.Condition()  # guards _waiting, _alive and _closed
        self._closed = False
        n = check_jobs(workers, "workers")
        self.start = start or ("fork" if fork_safe() else "spawn")
        if self.start == "fork":
            sys.stdout.flush()  # else a worker could write what this process buffered
            sys.stderr.flush()
            self._procs = [_Forked() for _ in range(n)]
        elif self.start == "spawn":
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [root, *filter(None, [os.environ.get("PYTHONPATH")])]))
            self._procs = [subprocess.Popen([sys.executable, "-m", "compiler.codegen.jobs"],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            env=env) for _ in range(n)]
        else:
            raise JobsError(f"ProcessExecutor(start={start!r}): expected 'fork', 'spawn' or "
                            "None (fork when this process runs no other thread)")
        self._alive = len(self._procs)
        self._threads = [threading.Thread(target=self._feed, args=(p,), daemon=True,
                                          name="fuelc-compile-feeder") for p in self._procs]
        for t in self._threads:
            t.start()

    def submit(self, fn, /, *args, **kwargs) -> concurrent.futures.Future:
        return self.submit_ranked((), fn, *args, **kwargs)

    def submit_ranked(self, rank: tuple, fn, /, *args, **kwargs) -> concurrent.futures.Future:
        """``submit``, the task ranked: a free worker takes the waiting task
        of the lowest ``rank`` (a tuple; ``submit``'s is ``()``, first), of
        equal ranks the first submitted. ``precompile`` submits each cold
        instance as soon as it finds it, ranked longest first: a worker
        that is done takes the longest task found so far instead of waiting
        for every instance to be found (docs/compile-at-scale.md)."""
        future = concurrent.futures.Future()
        with self._cv:
            if self._alive and not self._closed:
                heapq.heappush(self._waiting, (rank, next(self._count), (future, fn, args, kwargs)))
                self._cv.notify()
            else:
                future.set_exception(WorkerError("every compile worker has exited"))
        return future

    def _take(self):
        """The waiting task of the lowest rank; None once shut down and none waits."""
        with self._cv:
            while not self._waiting and not self._closed:
                self._cv.wait()
            return heapq.heappop(self._waiting)[2] if self._waiting else None

    def _drain(self, why: "Exception | None") -> None:
        """Cancel (``why`` None) or fail every task no worker has taken."""
        with self._cv:
            waiting, self._waiting = self._waiting, []
        for _, _, (future, *_) in waiting:
            if why is None:
                future.cancel()
            elif future.set_running_or_notify_cancel():
                future.set_exception(why)

    def _feed(self, proc: subprocess.Popen) -> None:
        while True:
            item = self._take()
            if item is None:
                return
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                data = pickle.dumps((fn, args, kwargs))
                proc.stdin.write(_FRAME.pack(len(data)) + data)
                proc.stdin.flush()
                head = proc.stdout.read(_FRAME.size)
                if len(head) != _FRAME.size:
                    raise EOFError("the worker exited")
                ok, value = pickle.loads(proc.stdout.read(_FRAME.unpack(head)[0]))
            except Exception as e:  # a dead worker: fail this task, stop feeding it
                future.set_exception(WorkerError(f"compile worker {proc.pid}: {e}"))
                with self._cv:
                    self._alive -= 1
                    last = not self._alive
                if last:
                    self._drain(WorkerError("every compile worker has exited"))
                return
            (future.set_result if ok else future.set_exception)(value)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            self._drain(None)
        with self._cv:
            self._closed = True  # the feeders end once nothing waits
            self._cv.notify_all()
        for t in self._threads if wait else ():
            t.join()  # every task taken has its answer
        reap_workers(wait=True)  # an earlier pool's, killed long ago
        for p in self._procs:
            if not wait:
                p.kill()  # a task it runs is abandoned
            try:
                p.stdin.close()  # an idle worker exits at end of input
            except OSError:
                pass
            if wait or not isinstance(p, _Forked):
                p.wait()
            else:  # reaped later: its exit takes the kernel 5-10 ms of tearing down
                _KILLED.append(p.pid)  # its pages, which the caller need not wait for
        for t in self._threads if not wait else ():
            t.join()  # quick: their workers are gone; a later pool may fork again


def _preload() -> None:
    """Import what a task needs (the cpu codegen package, looked up through
    its target: MLIR bindings, llvmlite; most of a worker's second of
    start-up) before the first task is read, so that a worker started at
    the start of ``compile()`` does it while the calling process runs the
    passes, not when it is handed its first kernel."""
    from compiler.codegen.family import ENTRY  # noqa: F401
    from compiler.targets import parse_target
    parse_target("cpu:host").codegen
    import llvmlite.binding  # noqa: F401 - the calling process imports it after its first task
    import compiler.mlir as mlir
    # imported on a task's first use (compiler.mlir), the calling process
    # imports those its first kernel text does not use after that task
    mlir.load("func", "arith", "math", "tensor", "linalg", "bufferization", "scf", "memref",
              "vector")
    # builtin: what the bindings import the first time a task reads a module's ops;
    # the native modules of the transform interpreter (mlir.apply_named_sequence)
    # and of the LLVM dialect (translation: mlir.translate_module_to_llvmir)
    for name in ("dialects.builtin", "_mlir_libs._mlirTransformInterpreter",
                 "_mlir_libs._mlirDialectsLLVM"):
        importlib.import_module(f"{mlir._root.__name__}.{name}")


#: At most this many MLIR contexts a worker makes ahead while it waits for
#: its first task (``_while_idle``): some 3 MiB of memory each.
SPARE_CONTEXTS = 8


def _while_idle(fd: int) -> None:
    """Until a task comes (``fd`` readable) make the MLIR contexts of the
    worker's next kernels (the codegen's ``spare_context``, 4-5 ms of CPU
    each), at most ``SPARE_CONTEXTS``: a forked worker is ready some 0.1 s
    before the calling process has its first instance, and its tasks then
    skip that part (docs/compile-at-scale.md). The next task waits for one
    context at most; the objects are the same (a fresh context either way)."""
    import select
    from compiler.targets import parse_target
    make = getattr(parse_target("cpu:host").codegen, "spare_context", None)
    for _ in range(SPARE_CONTEXTS if make is not None else 0):
        try:
            if select.select([fd], [], [], 0)[0]:
                return
        except (OSError, ValueError):  # a pipe select() cannot wait on: no spares
            return
        make()


#: Forked workers that ``shutdown(wait=False)`` killed and has not reaped yet.
_KILLED: list[int] = []


def reap_workers(wait: bool = False) -> None:
    """Reap the forked workers ``shutdown(wait=False)`` killed: those that
    have exited, or with ``wait`` all of them (their CPU seconds then count
    in ``RUSAGE_CHILDREN``). Each shutdown reaps the earlier pools' first, so
    at most the last pool's are zombies (none once this process exits)."""
    for pid in list(_KILLED):
        try:
            done = os.waitpid(pid, 0 if wait else os.WNOHANG)[0]
        except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored)
            done = pid
        if done:
            _KILLED.remove(pid)


_PAUSED: list[bool] = []  # the calling process's collector paused by pause_collection


def pause_collection() -> None:
    """Collect no garbage in the calling process until its first task is
    submitted (``resume_collection``, which ``precompile`` calls): the serial
    front of a pooled compile, whose imports, passes and plan made some 60-75
    young collections, 6-9 ms of its CPU (docs/compile-at-scale.md)."""
    if gc.isenabled() and not _PAUSED:
        gc.disable()
        _PAUSED.append(True)


def resume_collection(freeze: bool = True) -> None:
    """End ``pause_collection``: the objects the front made (modules, the
    binding table, the plan: most live as long as the compile or the process)
    are frozen (``freeze``) like those made before the fork, so that the
    collections after it do not walk them (``compile()`` unfreezes them all
    when it returns), and the collector runs again."""
    if _PAUSED:
        _PAUSED.clear()
        if freeze:
            gc.freeze()
        gc.enable()


def fork_safe() -> bool:
    """Whether workers may be forked from this process: Linux, and no
    Python thread but this one (the kernels' native worker threads,
    another pool's feeders and any thread of the caller's are Python
    threads; a thread holding a lock at the fork would leave it held in the
    worker forever). The native threads of the libraries fuelc loads are
    safe to fork over: OpenBLAS's reset in the child (``pthread_atfork``),
    and MLIR starts none for fuelc's one-function modules."""
    return sys.platform == "linux" and threading.active_count() == 1


class _Forked:
    """A worker forked from the calling process, with the part of
    ``subprocess.Popen`` the pool uses (``pid``, ``stdin``, ``stdout``,
    ``kill``, ``wait``). It starts with every module the caller has
    imported (no interpreter start, no second import of those) and imports
    the rest of the codegen while the caller runs its passes."""

    def __init__(self):
        req_r, req_w = os.pipe()
        ans_r, ans_w = os.pipe()
        with warnings.catch_warnings():  # Python 3.12+ warns of any native thread (OpenBLAS's)
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the worker: never returns into the caller's code
            code = 1
            try:
                os.dup2(req_r, 0)
                os.dup2(ans_w, 1)
                # Hold none of the caller's files: another pool's pipe kept open
                # here would never see its end of input.
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))
                gc.freeze()  # the caller's objects: never collected, never copied
                resume_collection(freeze=False)  # a collector the caller paused for its front
                _serve()
                code = 0
            finally:
                os._exit(code)
        os.close(req_r)
        os.close(ans_w)
        self.pid, self.returncode = pid, None
        self.stdin, self.stdout = os.fdopen(req_w, "wb"), os.fdopen(ans_r, "rb")

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self) -> int:
        if self.returncode is None:
            try:
                self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored), as Popen has it
                self.returncode = 0
        return self.returncode


def _serve() -> None:
    """A worker's loop: read a pickled call from stdin, answer on stdout."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller handles Ctrl-C
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the answers
    _preload()
    _while_idle(0)
    inp = os.fdopen(0, "rb", closefd=False)  # not sys.stdin: a forked one buffers the caller's
    while True:
        head = inp.read(_FRAME.size)
        if len(head) != _FRAME.size:
            return
        fn, args, kwargs = pickle.loads(inp.read(_FRAME.unpack(head)[0]))
        try:
            reply = pickle.dumps((True, fn(*args, **kwargs)))
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            try:
                reply = pickle.dumps((False, e))
            except Exception:
                reply = pickle.dumps((False, WorkerError(f"{type(e).__name__}: {e}")))
        out.write(_FRAME.pack(len(reply)) + reply)
        out.flush()


# -- compiling a plan's instances ------------------------------------------------------------
class _Job:
    __slots__ = ("family", "instance", "text", "strategy", "future")

    def __init__(self, family, instance, text, strategy):
        self.family, self.instance, self.text, self.strategy = family, instance, text, strategy
        self.future = None


def precompile(items: Iterable[tuple], target, *,
               executor: "concurrent.futures.Executor | None" = None,
               progress: Callable[[str], None] = lambda stage: None,
               then: "Callable[[], None] | None" = None) -> None:
    """Compile the ``(family, instance, first)`` triples in ``items`` (any
    iterable: the caller's generator of them runs while the first task
    compiles) for a cpu ``target`` this machine runs, so that
    ``family.compiled(instance, target)`` is then a memo hit. Cold instances
    go to ``executor`` (fuelc's workers or the caller's), each as soon as it
    is found, and to the calling process (all of them without an executor).
    An instance that fails is left out: the caller's own warm-up compiles it
    again and reports the error. ``progress("codegen D/T")`` as instances
    finish. ``then()``, when given, runs in the calling process as soon as
    every instance marked ``first`` is compiled (they are offered before the
    others), between two of its own compiles: work that needs only those
    (constant folding) is done while the workers compile the rest, and the
    workers take the tasks it would have taken."""
    from compiler.codegen.cache import default_cache
    from compiler.codegen.family import ENTRY, for_target, is_compiled, remember

    cache, codegen = default_cache(), target.codegen
    pool, cold, texts, seen = executor, [], [], set()
    done, total = [0], [0]
    wanted, pending_then = set(), [then] if then is not None else []  # then(): once

    def finish(job_key, job, obj) -> None:
        remember(target, job_key, obj.ciface(ENTRY, len(job.instance.input_types) + 1))
        done[0] += 1
        progress(f"codegen {done[0]}/{total[0]}")

    def maybe_then() -> None:
        if pending_then and all(is_compiled(target, k) for k in wanted):
            pending_then.pop()()

    def local(job_key, job) -> None:
        try:
            finish(job_key, job, cache.get_or_compile(job.text, [ENTRY], strategy=job.strategy,
                                                      target=target))
        except FuelError:
            pass  # warmed again by the caller, which raises it with the step's name

    ranked = getattr(pool, "submit_ranked", None)  # fuelc's workers: a task as soon as found

    def rank(job_key, job) -> tuple:  # those then() waits for first, then the longest
        return job_key not in wanted, -expected_cost(job.text, job.strategy)

    def offer(job_key, job) -> bool:
        """Submit ``job`` if it is cold (no loaded object, no verified disk
        entry); False: this process loads or compiles it."""
        if pool is None or cache.has(job.text, [ENTRY], strategy=job.strategy, target=target):
            return False
        cold.append((job_key, job))
        job.future = (ranked(rank(job_key, job), emit_object, job.text, target, job.strategy)
                      if ranked is not None else
                      pool.submit(emit_object, job.text, target, job.strategy))
        return True

    try:
        # Every instance's text and strategy first (cheap), then the rest
        # longest first: the processes take the longest task left whenever they
        # are free (LPT list scheduling), so the last tasks are short ones and
        # no core idles long at the end while another compiles a long kernel.
        # The first cold instance is offered at once, so that a worker compiles
        # it while this process makes the other texts; fuelc's own workers are
        # offered every cold instance as it is found, ranked, and take the
        # longest one found so far (docs/compile-at-scale.md).
        for family, inst, first in items:
            inst = for_target(inst, target)
            job_key = family.entry_key(inst)
            if first and then is not None:
                wanted.add(job_key)
            if job_key in seen or is_compiled(target, job_key):
                continue
            seen.add(job_key)
            try:
                job = _Job(family, inst, family.text(inst, target), None)
                job.strategy = codegen.choose_strategy(job.text, [ENTRY], target)
            except FuelError:
                continue  # warmed again by the caller, which raises it
            here = ((ranked is not None or not cold) and pool is not None
                    and not offer(job_key, job))  # a cache hit
            resume_collection()  # the front is over
            if job.future is None:
                texts.append((job_key, job, here))
        total[0] = len(seen)
        texts.sort(key=lambda item: rank(item[0], item[1]))  # stable: deterministic
        for job_key, job, here in texts:
            if here or not offer(job_key, job):
                local(job_key, job)
                maybe_then()
        cold.sort(key=lambda item: rank(*item))  # the order this process takes them in
        pending = {job.future: (job_key, job) for job_key, job in cold if job.future}

        def collect(futures) -> None:  # store what the workers sent back
            for future in futures:
                job_key, job = pending.pop(future)
                try:
                    data = future.result()
                except Exception:  # WorkerError, or the task's own error: compile here
                    local(job_key, job)
                else:
                    finish(job_key, job, cache.put(job.text, [ENTRY], data,
                                                   strategy=job.strategy, target=target))
                maybe_then()

        for job_key, job in cold:  # the longest task no worker has started: compile it here
            collect([f for f in pending if f.done()])
            maybe_then()
            if job.future is None or job.future.cancel():
                pending.pop(job.future, None)
                job.future = None
                local(job_key, job)
        collect(concurrent.futures.as_completed(list(pending)))
        if pending_then:  # an instance failed: then() meets the error itself
            pending_then.pop()()
    finally:
        for _, job in cold:
            if job.future is not None:
                job.future.cancel()


#: How much more a kernel without transform schedules whose loops LLVM
#: unrolls (``llvm_unroll``: the cpu ``loops`` strategy) costs per character
#: of text: O3 multiplies its loops. Per character of text, such kernels
#: compiled in 42-96 us (softmax, Adds, MeanDim, a runtime-fused body), the
#: scheduled ones (text and schedules) and the rolled norms in 14-36 us
#: (docs/compile-at-scale.md, "Eighteenth round").
UNROLLED_LOOPS_WEIGHT = 3


def expected_cost(text: str, strategy=None) -> int:
    """How long ``text`` is expected to take to compile with ``strategy``,
    relative to other kernels: the length of the text plus that of the
    strategy's transform schedules, or, without schedules, the text's
    length times ``UNROLLED_LOOPS_WEIGHT`` where LLVM unrolls its loops.
    Over the cold instances of ``benchmarks/models.py`` it ranks first the
    direct convolutions (long texts) and the tiled products whose schedules
    unroll the most (BERT's batch matmuls: 1.7 KB of text, 12 KB of
    schedule, its longest kernels), and an unrolled softmax above a rolled
    LayerNorm of the same length; the order only decides which task starts
    first, never what an object contains."""
    cost = len(text)
    for script in (getattr(strategy, "tensor_transform", None),
                   getattr(strategy, "transform", None)):
        for part in (script,) if isinstance(script, str) else script or ():
            cost += len(part)
    if cost == len(text) and getattr(strategy, "llvm_unroll", False):
        cost *= UNROLLED_LOOPS_WEIGHT
    return cost


if __name__ == "__main__":
    _serve()
