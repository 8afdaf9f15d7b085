"""Whole-graph device residency: the plan/copy decisions, checked without a
GPU against a recording double of the device API (alloc, copy_in, copy_out,
launch, free); with a GPU (``gpu``), numerics against the CPU target."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import Graph
from compiler.driver import compile
from runtime.cuda.program import KernelProgram
from runtime.cuda.resident import ResidentRunner, plan_residency
from runtime.executor import ConstStep


class RecordingDevice:
    """Device buffers are host byte arrays; launches are recorded (not run)."""

    def __init__(self):
        self.log, self.live, self.next = [], {}, 0

    def alloc(self, nbytes):
        self.next += 1
        self.live[self.next] = np.zeros(nbytes, np.uint8)
        self.log.append(("alloc", self.next, nbytes))
        return self.next

    def copy_in(self, h, array):
        assert array.flags.c_contiguous and array.nbytes == self.live[h].nbytes
        self.live[h][:] = array.reshape(-1).view(np.uint8)
        self.log.append(("in", h))

    def copy_out(self, h, array):
        assert array.nbytes == self.live[h].nbytes
        array.reshape(-1).view(np.uint8)[:] = self.live[h]
        self.log.append(("out", h))

    def launch(self, program, handles):
        assert isinstance(program, KernelProgram)
        for h, buf in zip(handles, program.params):
            assert self.live[h].nbytes == buf.nbytes
        self.log.append(("launch", tuple(handles)))

    def free(self, h):
        del self.live[h]
        self.log.append(("free", h))

    def count(self, what):
        return sum(1 for e in self.log if e[0] == what)


def _mlp():
    g = Graph()
    x = g.input("x", (8, 32), "f32")
    w = g.constant(np.full((32, 16), 0.25, np.float32), name="w")
    b = g.constant(np.zeros(16, np.float32), name="b")
    h = (x @ w + b).relu()
    g.output((h * h).exp().sum(-1), name="y")
    return g


def _with_device(m):
    """Swap the real device for a recording one (``m.executor.run``: the
    module's own call checks for a CUDA device first)."""
    dev = RecordingDevice()
    runner = m.executor.resident
    assert isinstance(runner, ResidentRunner), getattr(m.executor, "resident_reason", None)
    m.executor.resident = ResidentRunner(runner.residency, runner.programs, lambda: dev)
    return dev


def test_whole_graph_runs_resident_copying_only_inputs_and_outputs():
    m = compile(_mlp(), "cuda:sm_90")
    dev = _with_device(m)
    out = m.executor.run(x=np.ones((8, 32), np.float32))["y"]
    launches = [s for s in m.plan.steps if type(s).__name__ == "KernelStep"]
    consts = [s for s in m.plan.steps if isinstance(s, ConstStep)]
    assert out.shape == (8,) and out.dtype == np.float32
    assert dev.count("launch") == len(launches) >= 2
    # one input and each constant in, one output out: intermediates never cross
    assert dev.count("in") == 1 + len(consts) and dev.count("out") == 1
    # every buffer but the (kept) constants is freed
    assert len(dev.live) == len(consts)
    # a second run copies the input again but reuses the device constants
    m.executor.run(x=np.ones((8, 32), np.float32))
    assert dev.count("in") == 2 + len(consts) and dev.count("out") == 2
    assert dev.count("launch") == 2 * len(launches)


def test_intermediates_are_freed_after_their_last_use():
    m = compile(_mlp(), "cuda:sm_90")
    dev = _with_device(m)
    m.executor.run(x=np.ones((8, 32), np.float32))
    peak, live = 0, 0
    for e in dev.log:
        live += {"alloc": 1, "free": -1}.get(e[0], 0)
        peak = max(peak, live)
    # never more than the constants, the input, and the operands of one launch
    widest = max(len(e[1]) for e in dev.log if e[0] == "launch")
    assert peak <= 1 + sum(isinstance(s, ConstStep) for s in m.plan.steps) + widest


def test_outputs_that_alias_inputs_or_each_other_are_copied_out():
    g = Graph()
    x = g.input("x", (4, 6), "f32")
    y = x.exp()
    g.output(y, name="a")
    g.output(y.reshape((24,)), name="b")
    m = compile(g, "cuda:sm_90")
    dev = _with_device(m)
    out = m.executor.run(x=np.zeros((4, 6), np.float32))
    assert out["a"].shape == (4, 6) and out["b"].shape == (24,)
    assert dev.count("out") == 2 and dev.count("in") == 1 and not dev.live


def test_mixed_plans_keep_the_per_kernel_round_trip():
    m = compile(_mlp(), "cuda:sm_90")
    plan, specs = m.executor.plan, m.executor.specs
    runner = m.executor.resident
    progs = dict(runner.programs)
    first = min(progs)
    del progs[first]  # as if that step ran on the host
    residency, why = plan_residency(plan, specs, progs)
    assert residency is None and f"step {first}" in why and "no CUDA kernel program" in why


def test_strided_views_keep_the_per_kernel_round_trip():
    g = Graph()
    x = g.input("x", (4, 6), "f32")
    g.output(x.transpose().exp(), name="y")
    m = compile(g, "cuda:sm_90")
    assert m.executor.resident is None
    assert "step 0 (transpose_1): a strided view" in m.executor.resident_reason


def test_a_failing_launch_names_the_step_and_frees_everything():
    from runtime.errors import KernelError
    m = compile(_mlp(), "cuda:sm_90")
    dev = _with_device(m)

    def boom(program, handles):
        raise KernelError("cuLaunchKernel(kernel_kernel) failed: CUDA_ERROR_LAUNCH_FAILED")

    dev.launch = boom
    with pytest.raises(KernelError, match=r"step \d+ .*CUDA_ERROR_LAUNCH_FAILED"):
        m.executor.run(x=np.ones((8, 32), np.float32))
    consts = sum(isinstance(s, ConstStep) for s in m.plan.steps)
    assert len(dev.live) <= consts  # only device constants (kept for the next run) remain


@pytest.mark.gpu
def test_gpu_resident_graph_matches_cpu():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 32)).astype(np.float32)
    want = compile(_mlp(), "cpu")(x=x)
    m = compile(_mlp(), "cuda")
    assert m.executor.resident is not None
    np.testing.assert_allclose(m(x=x), want, rtol=1e-4, atol=1e-5)
