"""``KernelCaps.view_input`` on generated cpu kernels: the executor hands
broadcast (stride 0), offset and flipped (negative stride) operands to them
as they are, without a copy, and the results match numpy for every thread
count."""
import numpy as np
import pytest

from compiler.codegen import parallel
from compiler.targets import parse_target
from runtime import params as P
from runtime.dtype import DType
from runtime.executor import Executor, KernelStep, Plan, ValueSpec, ViewStep
from runtime.opkind import OpKind
from runtime.storage import Storage

F32 = DType.F32
R, D = 256, 1024  # 256K elements: parallel.MIN_ELEMENTS, so the calls split in row tiles


def vs(*shape):
    return ValueSpec(shape, "f32")


@pytest.fixture
def copies(monkeypatch):
    made = []
    real = Storage.contiguize
    monkeypatch.setattr(Storage, "contiguize", lambda st, lay: made.append(lay) or real(st, lay))
    yield made
    parallel.set_num_threads(None)


def test_generated_cpu_kernels_claim_view_input():
    table = parse_target("cpu").table()
    for key, dts in ((OpKind.MulElementwise, (F32,) * 3), (OpKind.SoftmaxLastDim, (F32,) * 2),
                     (OpKind.RmsNormLastDim, (F32,) * 2), (OpKind.LayerNormLastDim, (F32,) * 3)):
        caps = table.lookup_entry(key, dts, "cpu").caps
        assert caps.view_input and caps.strided_input and caps.full_write


def _plan():
    """y = x[1:] (offset) * broadcast w; s = softmax(flip(x[1:], last axis));
    r = rms_norm(broadcast w, rows)."""
    return Plan({"x": vs(R + 1, D), "w": vs(D)}, {"y": "y", "s": "s", "r": "r"}, [
        ViewStep("narrow", {"dim": 0, "start": 1, "length": R}, "x", "xo"),
        ViewStep("broadcast_as", {"shape": (R, D)}, "w", "wb"),
        ViewStep("flip", {"dim": 1}, "xo", "xf"),
        KernelStep(OpKind.MulElementwise, [F32] * 3, "cpu", P.NO_PARAMS, ["xo", "wb"], ["y"], [vs(R, D)]),
        KernelStep(OpKind.SoftmaxLastDim, [F32] * 2, "cpu", P.SoftmaxLastDim(R, D), ["xf"], ["s"],
                   [vs(R, D)]),
        KernelStep(OpKind.RmsNormLastDim, [F32] * 2, "cpu", P.NormLastDim(R, D, 1e-6), ["wb"], ["r"],
                   [vs(R, D)]),
    ])


@pytest.mark.parametrize("threads", [1, 2])
def test_views_reach_generated_kernels_without_copies(threads, copies, rng):
    parallel.set_num_threads(threads)
    x = rng.standard_normal((R + 1, D)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, D).astype(np.float32)
    out = Executor(_plan(), parse_target("cpu").table()).run(x=x, w=w)
    assert copies == []
    np.testing.assert_array_equal(out["y"], x[1:] * w)
    f = x[1:, ::-1].astype(np.float64)
    e = np.exp(f - f.max(-1, keepdims=True))
    np.testing.assert_allclose(out["s"], e / e.sum(-1, keepdims=True), rtol=2e-6, atol=1e-9)
    w64 = w.astype(np.float64)
    want = w64 / np.sqrt(np.mean(w64 * w64) + 1e-6)
    np.testing.assert_allclose(out["r"], np.broadcast_to(want, (R, D)), rtol=2e-6)


def test_view_results_do_not_depend_on_the_thread_count(copies, rng):
    assert R * D >= parallel.MIN_ELEMENTS
    x = rng.standard_normal((R + 1, D)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, D).astype(np.float32)
    runs = []
    for threads in (1, 2, 3):
        parallel.set_num_threads(threads)
        runs.append(Executor(_plan(), parse_target("cpu").table()).run(x=x, w=w))
    for other in runs[1:]:
        for k in ("y", "s", "r"):
            np.testing.assert_array_equal(other[k], runs[0][k])
