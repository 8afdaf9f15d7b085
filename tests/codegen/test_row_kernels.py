"""Row kernels (softmax, log-softmax, LayerNorm, RMSNorm) run one loop over
the rows with a few passes over each row while it is in L1: no temporaries,
vectorized reductions at the target's width, numerics against f64."""
import re

import numpy as np
import pytest

from compiler import Graph, compile
from compiler.codegen import fused as F
from compiler.codegen import kernels as K
from compiler.codegen.cpu import lower
from compiler.graph.opdef import TensorType
from compiler.registry import builders as B
from runtime.dtype import DType

ROW_OPS = {  # name: (family instance maker, params)
    "SoftmaxLastDim": (), "RmsNormLastDim": (("eps", 1e-6),),
    "LayerNormLastDim": (("eps", 1e-5),), "LogSoftmaxLastDim": (),
}


def _text(name, dtype, shape=(64, 256), platform="cpu"):
    """The op's linalg with the cpu row-kernel rules (the generic rules are
    whole-tensor generics, what the cuda target lowers)."""
    params = ROW_OPS[name]
    if name == "LogSoftmaxLastDim":  # a primitive
        return K.linalg_text(K.OpInstance(name, params, (TensorType(shape, dtype),), False),
                             platform)
    return F.linalg_text(F.FusedInstance(name, params, (TensorType(shape, dtype),)), platform)


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64, DType.F16])
@pytest.mark.parametrize("name", sorted(ROW_OPS))
def test_row_kernels_allocate_nothing(name, dtype):
    # per-row statistics are loop-carried scalars; outputs are written in place
    ir = lower(_text(name, dtype), ["kernel"], keep_ir=True).stages["bufferize"]
    assert "memref.alloc" not in ir and "memref.copy" not in ir, name
    assert ir.count("scf.for") >= 3  # the row loop and the passes over a row


# The reductions over a row are vector loops at the target's width, never
# the host's: 8 floats on AVX2, 16 on AVX-512 (``SoftmaxLastDim``'s dynamic
# rows add a half-width epilogue loop).
@pytest.mark.parametrize("target,width", [("cpu:x86-64-v3", 8), ("cpu:x86-64-v4", 16)])
@pytest.mark.parametrize("name", sorted(ROW_OPS))
def test_row_reductions_are_vectorized(name, target, width):
    ll = lower(_text(name, DType.F32), ["kernel"], target=target).llvm_ir
    if name == "LayerNormLastDim":  # Σx, Σx² in f64: 8 doubles on AVX-512, 4 on AVX2
        assert re.search(rf"vector\.reduce\.fadd\.v{width // 2}f64", ll), target
    else:
        assert re.search(rf"vector\.reduce\.fadd\.v{width}f32", ll), target
    if "Softmax" in name:
        assert re.search(rf"vector\.reduce\.fmax\.v{width}f32", ll), target
    # never wider than the target; softmax rows have a run-time length (one
    # kernel for every sequence length), so LLVM vectorizes the remainder too,
    # at half width (epilogue), instead of leaving it scalar
    assert not re.search(rf"vector\.reduce\.\w+\.v{2 * width}f32", ll)


def _graph(name, shape, dtype):
    g = Graph()
    x = g.input("x", shape, dtype)
    y = {"SoftmaxLastDim": lambda: B.softmax_last_dim(x),
         "LogSoftmaxLastDim": lambda: g.add_node("LogSoftmaxLastDim", [x]),
         "RmsNormLastDim": lambda: B.rms_norm(x, eps=1e-6),
         "LayerNormLastDim": lambda: B.layer_norm(x, eps=1e-5)}[name]()
    g.output(y, name="y")
    return g


def _reference(name, x):
    x = x.astype(np.float64)
    if x.size == 0:
        return x
    if name in ("SoftmaxLastDim", "LogSoftmaxLastDim"):
        d = x - x.max(-1, keepdims=True)
        lz = np.log(np.exp(d).sum(-1, keepdims=True))
        return d - lz if name == "LogSoftmaxLastDim" else np.exp(d - lz)
    if name == "RmsNormLastDim":
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)


TOL = {DType.F32: dict(rtol=2e-5, atol=2e-6), DType.F64: dict(rtol=1e-12, atol=1e-13),
       DType.F16: dict(rtol=2e-3, atol=2e-3)}


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64, DType.F16])
@pytest.mark.parametrize("shape", [(33, 257), (3, 5, 100), (2, 1), (4, 0)])
@pytest.mark.parametrize("name", sorted(ROW_OPS))
def test_row_kernels_match_the_f64_reference(name, shape, dtype, rng):
    # a large common offset: LayerNorm's one-pass Σx, Σx² (in f64) must not cancel
    base = 300.0 if name == "LayerNormLastDim" and dtype is not DType.F16 else 0.0
    x = (rng.standard_normal(shape) * 3 + base).astype(dtype.numpy)
    got = compile(_graph(name, shape, dtype.name.lower()), "cpu")(x=x)
    assert got.dtype == dtype.numpy and got.shape == shape
    np.testing.assert_allclose(got.astype(np.float64), _reference(name, x), **TOL[dtype])


@pytest.mark.parametrize("name", ["SoftmaxLastDim", "LogSoftmaxLastDim"])
def test_softmax_rows_with_nan_and_infinity(name):
    x = np.array([[1.0, np.nan, 2.0, 0.5], [1.0, 2.0, np.inf, 3.0], [1.0, 2.0, 3.0, 4.0],
                  [-np.inf, 0.0, 1.0, -np.inf]], np.float32)
    got = compile(_graph(name, x.shape, "f32"), "cpu")(x=x)
    assert np.isnan(got[0]).all() and np.isnan(got[1]).all()  # a NaN reaches every output
    with np.errstate(all="ignore"):
        want = _reference(name, x[2:])
    np.testing.assert_allclose(got[2:], want, rtol=2e-6, atol=1e-7)


def test_threads_do_not_change_row_results(rng):
    from compiler.testing import same_bits_at_threads
    x = rng.standard_normal((700, 96)).astype(np.float32)
    same_bits_at_threads(lambda: compile(_graph("SoftmaxLastDim", x.shape, "f32"), "cpu")(x=x))


@pytest.mark.parametrize("target", ["cpu:x86-64-v3", "cpu:x86-64-v4"])
@pytest.mark.parametrize("name,width,rolled", [
    ("RmsNormLastDim", 4096, True), ("LayerNormLastDim", 768, True),
    ("LayerNormLastDim", 1024, False), ("SoftmaxLastDim", 256, False),
    ("LogSoftmaxLastDim", 256, False)])
def test_norm_passes_are_vectorized_not_unrolled(name, width, rolled, target):
    # the norms' entries carry family.ROLLED_ATTR (LayerNorm's up to
    # LAYER_NORM_ROLLED_MAX elements a row): LOOPS_ROLLED, LLVM vectorizes the
    # passes over a row without unrolling them (docs/compile-at-scale.md,
    # "Seventeenth round"): less code, still the target's vector width; the
    # softmax rows keep LOOPS (as fast unrolled)
    from compiler.codegen.cpu import choose_strategy, strategy as S
    from compiler.codegen.family import ROLLED_ATTR
    from compiler.codegen.lowering.fused_norm import LAYER_NORM_ROLLED_MAX
    assert (name == "RmsNormLastDim" or (name == "LayerNormLastDim"
                                          and width <= LAYER_NORM_ROLLED_MAX)) is rolled
    text = _text(name, DType.F32, (64, width))
    assert (ROLLED_ATTR in text) is rolled
    strategy = choose_strategy(text, ["kernel"], target)
    assert strategy is (S.LOOPS_ROLLED if rolled else S.LOOPS), strategy.name
    if rolled:
        ll = lower(text, ["kernel"], target=target).llvm_ir
        unrolled = lower(text, ["kernel"], target=target, strategy=S.LOOPS).llvm_ir
        assert len(ll) < 0.9 * len(unrolled), (len(ll), len(unrolled))
        lanes = 8 if target.endswith("v3") else 16
        assert re.search(rf"<{lanes} x float>|<{lanes // 2} x double>", ll)
