"""Parallel compilation (compiler/codegen/jobs.py): cold kernel instances go
to an executor and the calling process; the objects are bit-identical
whatever the number of jobs or the executor."""
from __future__ import annotations

import collections
import concurrent.futures
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from compiler import Graph, compile
from compiler.codegen import cache as cache_mod
from compiler.codegen import family, jobs
from compiler.errors import PipelineError


def _graph(seed=0):
    """A small graph of a few distinct kernels (matmul, gelu, softmax)."""
    rng = np.random.default_rng(seed)
    g = Graph()
    x = g.input("x", (4, 24), "f32")
    h = (x @ g.constant(rng.standard_normal((24, 8)).astype(np.float32), name="w")).gelu()
    g.output(h.softmax(-1), name="y")
    return g


def _graph_reference(x):
    from compiler.graph.interpret import interpret
    return interpret(_graph(), {"x": x})["y"]


def _objects(d: pathlib.Path) -> dict:
    return {p.name: p.read_bytes() for p in (d / "objects").glob("*/*.o")}


@pytest.fixture
def cold(tmp_path, monkeypatch):
    """cold(name): a fresh kernel cache in tmp_path/name and an empty
    compile-once memo, so every instance is compiled again."""
    def fresh(name):
        monkeypatch.setattr(family, "_compiled", collections.OrderedDict())
        monkeypatch.setattr(family, "_key_locks", {})
        cache_mod.set_default_cache(cache_mod.KernelCache(tmp_path / name))
        return tmp_path / name
    yield fresh
    cache_mod.set_default_cache(None)


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    def __init__(self, fail=False):
        super().__init__(1)
        self.submitted, self.fail = 0, fail

    def submit(self, fn, /, *args, **kwargs):
        self.submitted += 1
        if self.fail:
            return super().submit(_raise)
        return super().submit(fn, *args, **kwargs)


def _raise():
    raise jobs.WorkerError("this executor loses every task")


def test_executor_objects_are_bit_identical_to_serial(cold):
    x = np.random.default_rng(1).standard_normal((4, 24)).astype(np.float32)
    serial_dir = cold("serial")
    seen = []
    want = compile(_graph(), jobs=1, progress=seen.append)(x=x)
    serial = _objects(serial_dir)
    assert len(serial) >= 3
    assert f"codegen {len(serial)}/{len(serial)}" in seen  # counted with one job too

    pool_dir = cold("pool")
    ex = CountingExecutor()
    with ex:
        got = compile(_graph(), jobs=2, executor=ex)(x=x)
    assert ex.submitted >= 1  # cold instances went to the executor
    assert _objects(pool_dir) == serial
    np.testing.assert_array_equal(got, want)



def test_constant_folding_kernels_go_to_the_executor(cold):
    """The kernels that the plan's constant folding runs (work on a weight
    alone) are compiled with the plan's others, each a task for the
    executor: every object in the cache was a task, and they are the
    serial compile's."""
    from runtime.executor import ConstStep
    rng = np.random.default_rng(3)
    g = Graph()
    x = g.input("x", (5, 24), "f32")
    w = g.constant(rng.standard_normal((24, 40)).astype(np.float32), name="w")
    g.output(x @ (w.transpose() * 2.0).transpose().contiguous(), name="y")
    serial_dir = cold("serial")
    want = compile(g, jobs=1)
    serial = _objects(serial_dir)
    assert any(isinstance(s, ConstStep) and s.const.startswith("folded:")
               for s in want.plan.steps), want.plan.steps
    pool_dir = cold("pool")
    with CountingExecutor() as ex:
        got = compile(g, jobs=2, executor=ex)
    assert ex.submitted == len(serial) >= 2
    assert _objects(pool_dir) == serial
    xv = rng.standard_normal((5, 24)).astype(np.float32)
    np.testing.assert_array_equal(got(x=xv), want(x=xv))


def test_failed_tasks_compile_here_and_progress_counts_instances(cold):
    """An executor that loses every task: this process compiles them all."""
    x = np.random.default_rng(1).standard_normal((4, 24)).astype(np.float32)
    cold("failing")
    seen = []
    with CountingExecutor(fail=True) as ex:
        m = compile(_graph(), jobs=2, executor=ex, progress=seen.append)
    assert ex.submitted >= 1
    np.testing.assert_allclose(m(x=x), _graph_reference(x), rtol=1e-5, atol=1e-6)
    counts = [s for s in seen if s.startswith("codegen ")]
    total = int(counts[0].split("/")[1])
    assert counts == [f"codegen {i}/{total}" for i in range(1, total + 1)]
    assert seen[:4] == ["emit", "passes", "plan", "codegen"]


def test_tasks_go_longest_first(cold):
    """The first cold instance is submitted as soon as it is found (a worker
    compiles it while this process makes the other texts); the others
    longest expected compile first, so the processes, each taking the
    longest task left, end together."""
    cold("order")
    costs = []

    class Recording(CountingExecutor):
        def submit(self, fn, /, *args, **kwargs):
            costs.append(jobs.expected_cost(args[0], args[2]))
            return super().submit(fn, *args, **kwargs)

    g = Graph()  # _graph's kernels and two more
    x = g.input("x", (4, 24), "f32")
    h = (x @ g.constant(np.ones((24, 8), np.float32), name="w")).gelu()
    g.output(h.softmax(-1), name="y")
    g.output((x.transpose() * 2.0).sum(axis=1), name="t")
    with Recording() as ex:
        compile(g, jobs=2, executor=ex)
    assert len(costs) >= 4 and len(set(costs[1:])) > 1
    assert costs[1:] == sorted(costs[1:], reverse=True)


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_process_executor_compiles_like_this_process(cold, start):
    from compiler.codegen.family import ENTRY
    from compiler.targets import parse_target
    cold("proc")
    target = parse_target("cpu")
    text = _graph_text()
    strategy = target.codegen.choose_strategy(text, [ENTRY], target)
    pool = jobs.ProcessExecutor(1, start=start)
    assert pool.start == start
    try:
        here = jobs.emit_object(text, target, strategy)
        assert pool.submit(jobs.emit_object, text, target, strategy).result() == here
        with pytest.raises(PipelineError):  # the task's own typed error comes back
            pool.submit(jobs.emit_object, "func.func @kernel(", target, strategy).result()
        with pytest.raises(jobs.WorkerError, match="exited"):  # a worker that dies
            pool.submit(os._exit, 3).result()
        with pytest.raises(jobs.WorkerError):  # ... and takes no more tasks
            pool.submit(jobs.emit_object, text, target, strategy).result(timeout=30)
    finally:
        pool.shutdown()


def test_process_executor_takes_the_lowest_rank_waiting():
    """A free worker takes the waiting task of the lowest rank, of equal
    ranks the first submitted (a plain ``submit`` ranks first); tasks still
    waiting when the last worker dies fail with WorkerError."""
    import time
    pool = jobs.ProcessExecutor(1)
    try:
        busy = pool.submit(time.sleep, 0.3)
        while not busy.running():  # the worker has it: the next ones wait
            time.sleep(0.002)
        ranks = [(3,), (1, 5), (2,), (1, 5), (1, -2)]
        waiting = [pool.submit_ranked(r, time.time) for r in ranks] + [pool.submit(time.time)]
        ran = [f.result(timeout=60) for f in waiting]
        order = sorted(range(len(ran)), key=ran.__getitem__)
        assert order == [5, 4, 1, 3, 2, 0], (order, ranks)
        busy = pool.submit(time.sleep, 0.3)
        while not busy.running():
            time.sleep(0.002)
        dies = pool.submit_ranked((0,), os._exit, 3)
        later = pool.submit_ranked((1,), time.time)
        with pytest.raises(jobs.WorkerError, match="exited"):
            dies.result(timeout=60)
        with pytest.raises(jobs.WorkerError, match="every compile worker has exited"):
            later.result(timeout=60)
    finally:
        pool.shutdown()


def test_cold_instances_go_to_the_pool_as_they_are_found(cold, monkeypatch):
    """With fuelc's own workers every cold instance is submitted as soon as
    its text and strategy exist, ranked longest first (the calling process
    makes the other texts meanwhile; a worker done with its task takes the
    longest one found so far instead of waiting for them all): the objects
    are the serial compile's."""
    g = Graph()  # _chain's and a few more kernels
    x = g.input("x", (64, 48), "f32")
    h = x
    for i in range(jobs.MIN_NODES // 2):
        h = (h * (1.0 + i / 64)).tanh() if i % 2 else (h + 0.5).exp().log()
    g.output((h @ g.constant(np.ones((48, 16), np.float32), name="w")).gelu().softmax(-1),
             name="y")
    g.output((x.transpose() * 2.0).sum(axis=1), name="t")
    serial_dir = cold("serial")
    compile(g, jobs=1)
    serial = _objects(serial_dir)
    made, seen = [0], []
    job = jobs._Job.__init__

    def counted(self, *args):
        made[0] += 1
        job(self, *args)

    class Recording(jobs.ProcessExecutor):
        def submit_ranked(self, rank, fn, /, *args, **kwargs):
            seen.append((made[0], rank, jobs.expected_cost(args[0], args[2])))
            return super().submit_ranked(rank, fn, *args, **kwargs)

    monkeypatch.setattr(jobs._Job, "__init__", counted)
    monkeypatch.setattr(jobs, "ProcessExecutor", Recording)
    pool_dir = cold("pool")
    compile(g, jobs=2)
    assert [n for n, _, _ in seen] == list(range(1, len(serial) + 1)), seen
    assert all(rank == (True, -cost) for _, rank, cost in seen), seen
    assert len(set(cost for _, _, cost in seen)) > 1
    assert _objects(pool_dir) == serial


def test_forked_worker_objects_are_those_of_this_process(cold):
    """A worker forked from this process (every module already imported)
    compiles the same objects as a serial compile."""
    x = np.random.default_rng(2).standard_normal((4, 24)).astype(np.float32)
    serial_dir = cold("serial")
    want = compile(_graph(), jobs=1)(x=x)
    forked_dir = cold("forked")
    pool = jobs.ProcessExecutor(1, start="fork")
    try:
        got = compile(_graph(), executor=pool)(x=x)
    finally:
        pool.shutdown()
    assert pool._procs[0].returncode == 0  # it served its tasks and ended at end of input
    assert _objects(forked_dir) == _objects(serial_dir)
    np.testing.assert_array_equal(got, want)


def test_idle_worker_makes_contexts_until_a_task_comes(monkeypatch):
    """While no task is readable a worker makes the MLIR contexts of its next
    kernels (at most SPARE_CONTEXTS), none once one is; lower() takes them,
    one per kernel, and compiles the same object as with a context of its own."""
    from compiler.codegen.cpu import pipeline
    from compiler.targets import parse_target
    monkeypatch.setattr(pipeline, "_SPARE", [])
    monkeypatch.setattr(jobs, "SPARE_CONTEXTS", 3)
    r, w = os.pipe()
    try:
        jobs._while_idle(r)
        assert len(pipeline._SPARE) == 3
        spares = list(pipeline._SPARE)
        os.write(w, b"a task")
        jobs._while_idle(r)
        assert pipeline._SPARE == spares
    finally:
        os.close(r)
        os.close(w)
    target = parse_target("cpu")
    text = IR_ADD
    strategy = target.codegen.choose_strategy(text, [family.ENTRY], target)
    with_spare = jobs.emit_object(text, target, strategy)
    assert pipeline._SPARE == spares[:2]
    pipeline._SPARE.clear()
    assert jobs.emit_object(text, target, strategy) == with_spare


IR_ADD = """func.func @kernel(%a: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8xf32>
    attributes {llvm.emit_c_interface} {
  %e = tensor.empty() : tensor<8xf32>
  %s = linalg.add ins(%a, %b : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  return %s : tensor<8xf32>
}"""


def test_forked_worker_holds_none_of_the_callers_files():
    """The caller's other files are closed in a forked worker: a pipe whose
    writer the caller closes reads end of input while the worker lives (a
    worker holding it would keep, say, another pool's worker waiting for its
    input to end)."""
    import select
    r, w = os.pipe()
    pool = jobs.ProcessExecutor(1, start="fork")
    try:
        os.close(w)
        assert select.select([r], [], [], 10)[0] and os.read(r, 1) == b""
        assert pool.submit(sum, [1, 2]).result(timeout=30) == 3  # the worker still serves
    finally:
        os.close(r)
        pool.shutdown()


def test_workers_are_spawned_while_another_thread_runs():
    """A fork is only taken from a process with no other Python thread (one
    holding a lock at the fork would leave it held in the worker)."""
    import threading
    go = threading.Event()
    t = threading.Thread(target=go.wait)
    t.start()
    try:
        assert not jobs.fork_safe()
        pool = jobs.ProcessExecutor(1)
        assert pool.start == "spawn"
        assert pool.submit(sum, [2, 3]).result(timeout=60) == 5
        pool.shutdown()
    finally:
        go.set()
        t.join()
    with pytest.raises(jobs.JobsError, match=r"start='thread'.*'fork', 'spawn'"):
        jobs.ProcessExecutor(1, start="thread")


def _graph_text() -> str:
    from compiler.codegen.family import single_op_linalg_text
    from compiler.graph.opdef import TensorType
    from runtime.dtype import DType
    t = TensorType((4, 8), DType.F32)
    return single_op_linalg_text("Add", {}, [t, t], dynamic=True, platform="cpu")


def test_jobs_count_is_checked(monkeypatch):
    monkeypatch.setenv("FUELC_JOBS", "3")
    assert jobs.default_jobs() == 3
    monkeypatch.delenv("FUELC_JOBS")
    assert jobs.default_jobs() == len(os.sched_getaffinity(0))
    for bad in ("0", "two", "1.5"):
        monkeypatch.setenv("FUELC_JOBS", bad)
        with pytest.raises(jobs.JobsError, match="FUELC_JOBS"):
            jobs.default_jobs()
    monkeypatch.delenv("FUELC_JOBS")
    with pytest.raises(jobs.JobsError, match="jobs=0: expected a positive number"):
        compile(_graph(), jobs=0)


@pytest.mark.slow
def test_conv_net_compiles_bit_identical_with_worker_processes(cold):
    """A benchmark CNN through fuelc's own worker pool (graph of more than
    MIN_NODES nodes), forked and spawned: the same objects as a serial
    compile."""
    from benchmarks import models
    from compiler.frontends.onnx import import_model
    graph = import_model(models.build("mobilenet", 1), {})
    assert len(graph) >= jobs.MIN_NODES
    serial_dir = cold("serial")
    compile(graph, jobs=1)
    serial = _objects(serial_dir)
    real = jobs.ProcessExecutor
    for start in ("fork", "spawn"):
        pool_dir = cold(start)
        started = []

        class Recording(real):
            def __init__(self, workers):
                super().__init__(workers, start=start)

            def submit_ranked(self, rank, fn, /, *args, **kwargs):  # every task's door
                started.append(fn)
                return super().submit_ranked(rank, fn, *args, **kwargs)

        jobs.ProcessExecutor = Recording
        try:
            compile(graph, jobs=2)
        finally:
            jobs.ProcessExecutor = real
        assert started, start
        assert _objects(pool_dir) == serial, start


def _chain():
    """A graph of MIN_NODES nodes: compile() starts its workers for it."""
    g = Graph()
    x = g.input("x", (64, 48), "f32")
    h = x
    for i in range(jobs.MIN_NODES // 2):
        h = (h * (1.0 + i / 64)).tanh() if i % 2 else (h + 0.5).exp().log()
    g.output(h, name="y")
    assert len(g) >= jobs.MIN_NODES
    return g


def test_started_workers_take_tasks_from_the_first_cold_instance(cold):
    """Workers that compile() started (a graph of MIN_NODES nodes or more)
    are offered every cold instance from the first one, however few: a warm
    cache's last few instances also spread over them. Same objects as serial."""
    g = _chain()
    serial_dir = cold("serial")
    compile(g, jobs=1)
    serial = _objects(serial_dir)
    pool_dir = cold("pool")
    real, started = jobs.ProcessExecutor, []

    class Recording(real):
        def submit_ranked(self, rank, fn, /, *args, **kwargs):  # every task's door
            started.append(fn)
            return super().submit_ranked(rank, fn, *args, **kwargs)

    jobs.ProcessExecutor = Recording
    try:
        m = compile(g, jobs=2)
    finally:
        jobs.ProcessExecutor = real
    assert 1 <= len(started) == len(serial) < 8, (len(started), len(serial))
    assert _objects(pool_dir) == serial
    xv = np.random.default_rng(0).standard_normal((64, 48)).astype(np.float32)
    from compiler.graph.interpret import interpret
    y = m(x=xv)
    np.testing.assert_allclose(y["y"] if isinstance(y, dict) else y,
                               interpret(g, {"x": xv})["y"], rtol=2e-5, atol=2e-6)


def test_compile_does_not_wait_for_its_killed_workers(cold, monkeypatch):
    """compile() kills its forked workers and returns without waiting for
    their exit (the kernel tearing down their pages); the next pool's
    shutdown reaps them, so only the last pool's are left to reap, and
    ``reap_workers(wait=True)`` reaps those."""
    if not jobs.fork_safe():
        pytest.skip("workers are spawned while another thread runs")
    g, pids = _chain(), []
    real = jobs.ProcessExecutor

    class Recording(real):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            pids.append([p.pid for p in self._procs])

    monkeypatch.setattr(jobs, "ProcessExecutor", Recording)
    for name in ("first", "second"):
        cold(name)
        compile(g, jobs=2)
        assert jobs._KILLED == pids[-1], (pids, jobs._KILLED)
    jobs.reap_workers(wait=True)
    assert jobs._KILLED == []
    for pid in pids[0] + pids[1]:
        with pytest.raises(ChildProcessError):  # reaped: no longer this process's child
            os.waitpid(pid, os.WNOHANG)


def test_objects_made_before_the_fork_are_frozen_while_compile_runs(cold, monkeypatch):
    """compile() freezes the garbage collector's objects before it forks its
    workers (a full collection would copy every page they share) and
    unfreezes them when it returns; a freeze of the caller's own is left
    as it was."""
    import gc
    if not jobs.fork_safe():
        pytest.skip("workers are spawned while another thread runs")
    g, seen = _chain(), []
    real = jobs.ProcessExecutor

    class Recording(real):
        def submit_ranked(self, rank, fn, /, *args, **kwargs):  # every task's door
            seen.append(gc.get_freeze_count())
            return super().submit_ranked(rank, fn, *args, **kwargs)

    monkeypatch.setattr(jobs, "ProcessExecutor", Recording)
    assert gc.get_freeze_count() == 0
    cold("first")
    compile(g, jobs=2)
    assert seen and min(seen) > 0 and gc.get_freeze_count() == 0, seen
    gc.freeze()  # the caller's own
    try:
        mine, seen[:] = gc.get_freeze_count(), []
        cold("second")
        compile(g, jobs=2)
        # left frozen, not frozen again (the count falls as frozen objects die)
        assert seen and all(0 < n <= mine for n in seen), (seen, mine)
        assert 0 < gc.get_freeze_count() <= mine
    finally:
        gc.unfreeze()


def test_the_front_collects_no_garbage_until_the_first_task(cold, monkeypatch):
    """A pooled compile's serial front (from its target check to its first
    task: 60-75 young collections otherwise) runs no collection; the
    collector runs again from the first task on, in the calling process and
    in the worker, and is enabled when compile() returns. A collector the
    caller disabled stays disabled."""
    import gc
    if not jobs.fork_safe():
        pytest.skip("workers are spawned while another thread runs")
    g, events, marks = _chain(), [], []
    real, pause = jobs.ProcessExecutor, jobs.pause_collection

    class Recording(real):
        def submit_ranked(self, rank, fn, /, *args, **kwargs):  # every task's door
            if len(marks) == 1:
                marks.append((len(events), gc.isenabled()))
                marks.append(super().submit_ranked((), gc.isenabled).result())  # the worker's
            return super().submit_ranked(rank, fn, *args, **kwargs)

    def paused():
        marks.append(len(events))
        pause()

    def collected(phase, info):
        if phase == "start":
            events.append(info["generation"])

    monkeypatch.setattr(jobs, "ProcessExecutor", Recording)
    monkeypatch.setattr(jobs, "pause_collection", paused)
    gc.callbacks.append(collected)
    try:
        cold("first")
        compile(g, jobs=2)
        assert len(marks) == 3 and marks[1] == (marks[0], False) and marks[2] is True, marks
        assert gc.isenabled() and gc.get_freeze_count() == 0
        gc.disable()  # the caller's: left as it is
        try:
            marks.clear()
            cold("second")
            compile(g, jobs=2)
            assert marks[1][1] is False and not gc.isenabled(), marks
        finally:
            gc.enable()
    finally:
        gc.callbacks.remove(collected)


# The Ray part runs in a child interpreter: ray.init() starts native threads
# that outlive ray.shutdown() and replaces the process's SIGSEGV/SIGABRT
# handlers (faulthandler's, pytest's) with its own, which shutdown resets to
# the default. In the test process, a later crash in any other test would then
# end the run with no message at all.
_CHILD = """
import json, sys
from benchmarks import models
from compiler import compile
from compiler.codegen.jobs import ProcessExecutor
from compiler.frontends.onnx import import_model

if sys.argv[1] == "ray":
    from compiler.codegen.ray_executor import RayExecutor as Base
    make = lambda: Counting(num_cpus=2)
else:
    Base = ProcessExecutor
    make = lambda: Counting(1)

class Counting(Base):
    submitted = 0

    def submit(self, fn, /, *args, **kwargs):
        Counting.submitted += 1
        return super().submit(fn, *args, **kwargs)

if hasattr(Base, "submit_ranked"):  # fuelc's pool: every task goes through it, submit too
    del Counting.submit

    def submit_ranked(self, rank, fn, /, *args, **kwargs):
        Counting.submitted += 1
        return Base.submit_ranked(self, rank, fn, *args, **kwargs)
    Counting.submit_ranked = submit_ranked

graph = import_model(models.build("mobilenet", 1), {})
with make() as ex:
    compile(graph, executor=ex)
print(json.dumps({"submitted": Counting.submitted}))
"""


def _compile_in_child(how: str, cache_dir: pathlib.Path) -> int:
    """``_CHILD`` in a fresh interpreter with its own cold kernel cache (this
    process's memos would hide kernels from the executor);
    the number of tasks its executor was given."""
    root = pathlib.Path(__file__).resolve().parents[2]
    env = dict(os.environ, FUELC_CACHE_DIR=str(cache_dir),
               PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", _CHILD, how], cwd=root, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])["submitted"]


@pytest.mark.slow
def test_ray_executor_compiles_the_same_objects_as_the_local_pool(tmp_path):
    """A benchmark CNN (mobilenet, batch 1) through a local Ray instance and
    through fuelc's own worker pool, each in a fresh interpreter (Ray runs in
    a child: see below): the executors are given the same cold instances,
    one task each (the kernels the plan's constant folding runs, the padded
    classifier's Pad, included), and the two caches hold the same objects,
    bit for bit."""
    if importlib.util.find_spec("ray") is None:  # not imported here: ray.init replaces signal handlers
        pytest.skip("the Ray executor needs ray: pip install 'fuelc[ray]'")
    pool_submitted = _compile_in_child("pool", tmp_path / "pool")
    pool = _objects(tmp_path / "pool")
    assert pool_submitted >= 10 and len(pool) == pool_submitted
    assert _compile_in_child("ray", tmp_path / "ray") == pool_submitted
    assert _objects(tmp_path / "ray") == pool


def test_ray_executor_without_ray_names_the_extra(monkeypatch):
    import builtins
    from compiler.codegen.ray_executor import RayExecutor, RayUnavailableError
    real = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(RayUnavailableError, match=r"pip install 'fuelc\[ray\]'"):
        RayExecutor()


def test_expected_cost_counts_the_schedule():
    """A tiled product's schedule makes it compile long for its short text
    (BERT's batch matmuls): the schedules' lengths count with the text's."""
    from compiler.codegen.cpu.strategy import Strategy
    assert jobs.expected_cost("x" * 10) == 10
    assert jobs.expected_cost("x" * 10, Strategy("s", transform="t" * 5,
                                                 tensor_transform=("a" * 3, "b"))) == 19


def test_expected_cost_weighs_loops_llvm_unrolls():
    """A kernel without schedules whose loops LLVM unrolls (an unrolled
    softmax: 0.17 s for 4 KB of text) ranks above a rolled norm of the same
    length (a LayerNorm: 0.07 s): the encoder b1's softmax had run alone at
    the end, 0.2 s after the other process's last kernel."""
    from compiler.codegen.cpu.strategy import (COPIES, LOOPS, LOOPS_ROLLED, Strategy,
                                               VECTORIZED_ROLLED)
    text = "x" * 10
    assert jobs.expected_cost(text, LOOPS) == 10 * jobs.UNROLLED_LOOPS_WEIGHT
    assert jobs.expected_cost(text, Strategy("s", transform="t" * 5)) == 15  # scheduled
    for rolled in (LOOPS_ROLLED, COPIES, VECTORIZED_ROLLED):
        assert jobs.expected_cost(text, rolled) == 10
    assert jobs.expected_cost("x" * 3984, LOOPS) > jobs.expected_cost("x" * 4167, LOOPS_ROLLED)
