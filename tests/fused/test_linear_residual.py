"""The residual Add after a FusedLinear folded into its ``residual`` operand
(``fuel-fuse``: ``fold_linear_residuals``; docs/architecture.md, "The residual
in the product"): a transformer's ``x + proj(..)`` as one kernel, on the
host's vector width and on x86-64-v3, against the reference interpreter, the
unfused kernels (bit-identical with a zero bias: the same FMA chain over K,
then the skip's one rounded add; with a bias they differ by its rounding, as
the GELU epilogue does), and one thread against two."""
import numpy as np
import pytest

from compiler import compile
from compiler.testing import same_bits_at_threads
from compiler.graph import Graph
from compiler.graph.interpret import interpret
from compiler.passes import DEFAULT_PIPELINE
from compiler.registry.builders import linear
from runtime.dtype import DType

UNFOLDED = DEFAULT_PIPELINE.replace("fuel-fuse{runtime=false}",
                                    "fuel-fuse{runtime=false linear_residuals=false}")
TARGETS = ["cpu", "cpu:x86-64-v3"]


def _graph(x_shape, n, bias_scale=1.0, seed=0):
    """``skip + linear(x)`` with x and the skip [B, S, .] (the product on the
    [B*S, K] view, reshaped back: BERT's output projection)."""
    rng = np.random.default_rng(seed)
    k = x_shape[-1]
    g = Graph()
    x = g.input("x", x_shape, DType.F32)
    s = g.input("s", tuple(x_shape[:-1]) + (n,), DType.F32)
    w = g.constant((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), name="w")
    b = g.constant((rng.standard_normal(n) * bias_scale).astype(np.float32), name="b")
    g.output(s + linear(x, w, b), "y")
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32),
             "s": rng.standard_normal(tuple(x_shape[:-1]) + (n,)).astype(np.float32)}
    return g, feeds


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("x_shape,n", [((1, 128, 256), 256), ((2, 16, 1024), 256),
                                       ((3, 40), 48)])
def test_folded_residual_matches_the_reference(target, x_shape, n):
    g, feeds = _graph(x_shape, n)
    m = compile(g, target)
    steps = m.kernel_summary()
    assert [s.split(" ")[0] for s in steps] == ["FusedLinear[f32,f32,f32,f32,f32]"], steps
    np.testing.assert_allclose(m(**feeds), interpret(g, feeds)["y"], rtol=2e-5, atol=2e-5)
    ops = compile(g, target, pipeline=UNFOLDED)
    assert any(s.startswith("AddElementwise") for s in ops.kernel_summary())
    np.testing.assert_allclose(m(**feeds), ops(**feeds), rtol=1e-5, atol=4e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_zero_bias_is_bit_identical_to_the_unfused_kernels(target):
    g, feeds = _graph((1, 64, 256), 256, bias_scale=0.0)
    np.testing.assert_array_equal(compile(g, target)(**feeds),
                                  compile(g, target, pipeline=UNFOLDED)(**feeds))


def test_two_threads_same_bits():
    g, feeds = _graph((4, 128, 256), 256, seed=3)
    same_bits_at_threads(lambda: compile(g, "cpu")(**feeds))
