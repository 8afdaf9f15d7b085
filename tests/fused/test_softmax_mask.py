"""The softmax's folded additive mask (``fuel-fuse``: ``fold_softmax_scales``
with ``softmax_masks``, SoftmaxLastDim's ``mask`` operand; docs/architecture.md,
"The attention mask in the softmax"): ``softmax(x * s + mask)`` runs as one
kernel with the same bits as the separate scale, Add and softmax kernels, on
the host's AVX-512 and on x86-64-v3 code, on one thread and cut in row tiles
on two; it agrees with the numpy reference interpreter; a mask the kernel
does not take (f16, broadcast along a row) leaves the Add in place."""
import numpy as np
import pytest

from compiler import compile
from compiler.testing import same_bits_at_threads
from compiler.errors import GraphBuildError
from compiler.graph import Graph
from compiler.graph.opdef import TensorType
from compiler.passes import DEFAULT_PIPELINE
from compiler.registry.builders import softmax_last_dim
from compiler.registry.kernel_params import kernel_serves
from compiler.graph.interpret import interpret
from runtime.dtype import DType

UNFOLDED = DEFAULT_PIPELINE.replace("fuel-fuse{runtime=false}",
                                    "fuel-fuse{runtime=false softmax_masks=false}")
TARGETS = ["cpu", "cpu:x86-64-v3"]
NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16}


def _graph(shape, mshape, dtype, scale, div=False):
    """softmax(x * scale (or x / (1/scale)) + BroadcastTo(mask)), as importers
    write attention scores."""
    g = Graph()
    x = g.input("x", shape, dtype)
    m = g.input("m", mshape, dtype)
    s = x if scale is None else (x / (1 / scale) if div else x * scale)
    g.output(softmax_last_dim(s + m.broadcast_to(shape)), "y")
    return g


def _inputs(shape, mshape, dtype, seed=1):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 6).astype(NP[dtype])
    neg = np.finfo(NP[dtype]).min  # what HF models add at a padded key
    m = np.where(rng.random(mshape) < 0.3, neg, rng.standard_normal(mshape)).astype(NP[dtype])
    return {"x": x, "m": m}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape,mshape,dtype,scale,div", [
    ((2, 4, 16, 40), (2, 1, 1, 40), "f32", 0.125, True),   # BERT: / sqrt(64), [B,1,1,S]
    ((1, 3, 8, 33), (1, 3, 8, 33), "f32", None, False),   # a full bias, a vector tail
    ((2, 3, 5, 7), (1, 3, 1, 7), "f32", -0.7, False),     # a negative scale
    ((3, 6, 19), (19,), "f64", 0.3, False),               # fewer axes: a [1,1,19] view
])
def test_folded_mask_same_bits_as_the_ops(target, shape, mshape, dtype, scale, div):
    g = _graph(shape, mshape, DType.parse(dtype), scale, div)
    feeds = _inputs(shape, mshape, dtype)
    folded, ops = compile(g, target), compile(g, target, pipeline=UNFOLDED)
    assert folded.kernel_summary() == [f"SoftmaxLastDim[{dtype},{dtype},{dtype}] (mlir-cpu-fused)"]
    assert any(k.startswith("AddElementwise[") or "runtime-fused" in k
               for k in ops.kernel_summary()), ops.kernel_summary()
    got = folded(**feeds)
    np.testing.assert_array_equal(got, ops(**feeds))
    np.testing.assert_allclose(got, interpret(g, feeds)["y"],
                               rtol=2e-6 if dtype == "f32" else 1e-12, atol=1e-7)


def test_row_tiles_on_two_threads_same_bits():
    """[2,4,96,96] is cut in row tiles at two threads; the [2,1,1,96] mask is
    cut along its batch axis or read whole, as ``parallel.row_tiles`` says."""
    shape, mshape = (2, 4, 96, 96), (2, 1, 1, 96)
    g = _graph(shape, mshape, DType.F32, 0.125)
    feeds = _inputs(shape, mshape, "f32", seed=4)
    y = same_bits_at_threads(lambda: compile(g, "cpu")(**feeds))
    np.testing.assert_allclose(y, interpret(g, feeds)["y"], rtol=2e-6, atol=1e-7)


def test_fully_masked_row_is_uniform_as_the_ops():
    """Every key of a row masked with finfo.min: the row's scores all round to
    about -3.4e38, the softmax spreads over them as the separate ops do."""
    shape, mshape = (1, 2, 4, 8), (1, 1, 1, 8)
    g = _graph(shape, mshape, DType.F32, 0.125, div=True)
    feeds = _inputs(shape, mshape, "f32")
    feeds["m"][:] = np.finfo(np.float32).min
    got = compile(g)(**feeds)
    np.testing.assert_array_equal(got, compile(g, pipeline=UNFOLDED)(**feeds))
    np.testing.assert_allclose(got, 1 / 8, rtol=1e-6)


def test_f16_mask_is_not_served_and_the_add_stays():
    import compiler.codegen.fused  # noqa: F401  (registers the kernels' serves predicates)
    t16 = [TensorType((4, 16), DType.F16)] * 2
    assert not kernel_serves("SoftmaxLastDim", {}, t16)
    assert kernel_serves("SoftmaxLastDim", {}, [TensorType((4, 16), DType.F32)] * 2)
    g = _graph((4, 16), (1, 16), DType.F16, None)
    m = compile(g)
    assert not any(k.startswith("SoftmaxLastDim[f16,f16,f16]") for k in m.kernel_summary())
    feeds = _inputs((4, 16), (1, 16), "f16")
    np.testing.assert_allclose(np.asarray(m(**feeds), np.float32),
                               interpret(g, feeds)["y"].astype(np.float32), atol=2e-3)


def test_row_broadcast_mask_is_left_alone():
    """A [B,S,1] mask gives a whole row one value: not the mask operand; the
    Add stays (and the scale before it), the result as the reference."""
    g = _graph((2, 8, 16), (2, 8, 1), DType.F32, 0.5)
    m = compile(g)
    assert not any(k.startswith("SoftmaxLastDim[f32,f32,f32]") for k in m.kernel_summary())
    feeds = _inputs((2, 8, 16), (2, 8, 1), "f32")
    np.testing.assert_allclose(m(**feeds), interpret(g, feeds)["y"], rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("mshape,what", [
    ((2, 8, 1), "last extent 1, the rows have 16"),
    ((3, 1, 16), "extent 3 on axis 0"),
    ((16,), "rank 1, x has 3"),
])
def test_bad_mask_operand_is_a_typed_error(mshape, what):
    g = Graph()
    x = g.input("x", (2, 8, 16), DType.F32)
    m = g.input("m", mshape, DType.F32)
    with pytest.raises(GraphBuildError, match="SoftmaxLastDim") as e:
        softmax_last_dim(x, m)
    assert what in str(e.value) and "add it before the softmax instead" in str(e.value)


def test_mask_of_another_dtype_is_a_typed_error():
    g = Graph()
    x = g.input("x", (2, 16), DType.F32)
    m = g.input("m", (1, 16), DType.F64)
    with pytest.raises(GraphBuildError, match=r"SoftmaxLastDim.*dtype f64, not x's f32"):
        softmax_last_dim(x, m)


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64])
def test_masked_row_kernel_allocates_nothing(dtype):
    """The masked row kernel reads x and the mask row in place (the mask at
    index 0 on its extents of 1): no temporary, the output written once."""
    from compiler.codegen import fused as F
    from compiler.codegen.cpu import lower
    inst = F.FusedInstance("SoftmaxLastDim", (("scale", 0.125),),
                           (TensorType((2, 4, 16, 64), dtype), TensorType((2, 1, 1, 64), dtype)))
    assert inst.dynamic_dims[1] == (True, False, False, True)
    ir = lower(F.linalg_text(inst, "cpu"), ["kernel"], keep_ir=True).stages["bufferize"]
    assert "memref.alloc" not in ir and "memref.copy" not in ir
