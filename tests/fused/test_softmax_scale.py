"""The softmax's folded scale (``fuel-fuse``: ``fold_softmax_scales``, the
SoftmaxLastDim ``scale`` param; docs/architecture.md, "The attention scale in
the softmax"): ``softmax(x * s)`` runs as one kernel with the same bits as
the separate MulScalar and softmax kernels, on the host's AVX-512 and on
x86-64-v3 code; where the kernel does not serve the scale (f16) the pair
stays, and the registry reference agrees."""
import numpy as np
import pytest

from compiler import compile
from compiler.graph import Graph
from compiler.graph.opdef import TensorType
from compiler.passes import DEFAULT_PIPELINE
from compiler.registry import default_registry
from compiler.registry.builders import softmax_last_dim
from compiler.registry.kernel_params import kernel_serves
from runtime.dtype import DType

UNFOLDED = DEFAULT_PIPELINE.replace("fuel-fuse{runtime=false}",
                                    "fuel-fuse{runtime=false softmax_scales=false}")
TARGETS = ["cpu", "cpu:x86-64-v3"]


def _graph(shape, dtype, scale):
    g = Graph()
    x = g.input("x", shape, dtype)
    g.output(softmax_last_dim(x * scale), "y")
    return g


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape,dtype,scale", [
    ((2, 3, 128), "f32", float(1 / np.sqrt(32))),   # attention rows (d = 32)
    ((3, 33), "f32", 0.125),                 # a vector tail
    ((5, 7), "f32", -0.7),                   # a negative scale: max(s x) is s min(x)
    ((4, 19), "f64", 0.3),
])
def test_folded_scale_same_bits_as_pair(target, shape, dtype, scale):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 6).astype({"f32": np.float32, "f64": np.float64}[dtype])
    x.reshape(-1, shape[-1])[0, :3] = -np.inf if scale > 0 else np.inf  # masked: exp(-inf) = 0
    g = _graph(shape, DType.parse(dtype), scale)
    folded = compile(g, target)
    pair = compile(g, target, pipeline=UNFOLDED)
    assert folded.kernel_summary() == [f"SoftmaxLastDim[{dtype},{dtype}] (mlir-cpu-fused)"]
    assert any(k.startswith("Affine[") for k in pair.kernel_summary())
    got, want = folded(x=x), pair(x=x)
    np.testing.assert_array_equal(got, want)
    ref = default_registry()["SoftmaxLastDim"].reference([x], {"scale": scale})
    np.testing.assert_allclose(got, ref, rtol=2e-6 if dtype == "f32" else 1e-12, atol=1e-7)


def test_f16_scale_is_not_served_and_the_pair_stays():
    import compiler.codegen.fused  # noqa: F401  (registers the kernels' serves predicates)
    t = [TensorType((4, 16), DType.F16)]
    assert not kernel_serves("SoftmaxLastDim", {"scale": 0.5}, t)
    assert kernel_serves("SoftmaxLastDim", {"scale": 0.5}, [TensorType((4, 16), DType.F32)])
    m = compile(_graph((4, 16), DType.F16, 0.5))
    assert any(k.startswith("Affine[f16") for k in m.kernel_summary()), m.kernel_summary()


@pytest.mark.parametrize("target", TARGETS)
def test_div_by_power_of_two_folds_with_the_same_bits(target):
    """ViT's scores / sqrt(64): / 8 is * 0.125 to the bit, so it folds."""
    g = Graph()
    x = g.input("x", (2, 4, 64), DType.F32)
    g.output(softmax_last_dim(x / 8.0), "y")
    xs = (np.random.default_rng(2).standard_normal((2, 4, 64)) * 30).astype(np.float32)
    folded, pair = compile(g, target), compile(g, target, pipeline=UNFOLDED)
    assert folded.kernel_summary() == ["SoftmaxLastDim[f32,f32] (mlir-cpu-fused)"]
    assert len(pair.kernel_summary()) == 2, pair.kernel_summary()
    np.testing.assert_array_equal(folded(x=xs), pair(x=xs))
