"""bf16/f16 products on CPU: a ``linalg.matmul`` / ``linalg.batch_matmul`` of
bf16/f16 operands into an f32 init (``lowering.matmul``) takes the f32 tiles of
the vectorized schedule (``strategy.NARROW_TILES``): each operand extended
exactly, f32 FMAs, the result rounded once. Values within a bf16/f16 ulp or two
of the float64 product of the same operands, and equal to the reference
interpreter's within that, for shapes with row, column and K remainders; B an
input or a constant."""
import numpy as np
import pytest

from compiler import Graph, compile
from compiler.codegen.cpu.pipeline import choose_strategy
from compiler.codegen.family import single_op_linalg_text
from compiler.graph.interpret import interpret
from compiler.graph.opdef import TensorType
from compiler.registry.builders import linear
from runtime.dtype import DType

ml_dtypes = pytest.importorskip("ml_dtypes")
NP = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
DT = {"bf16": DType.BF16, "f16": DType.F16}
# bf16 keeps 8 significant bits, f16 11: two ulps of the larger values
TOL = {"bf16": 2.0 ** -7, "f16": 2.0 ** -10}


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
def test_narrow_matmul_selects_the_vectorized_strategy(dtype, target):
    def chosen(shapes, op="MatMul", **kw):
        text = single_op_linalg_text(op, {}, [TensorType(s, DT[dtype]) for s in shapes],
                                     True, "cpu", tuple(range(len(shapes) + 1)), **kw)
        return choose_strategy(text, ["kernel"], target).name
    assert chosen([(64, 256), (256, 128)]).startswith(f"matmul-matmul-{dtype}-")
    assert chosen([(2, 64, 256), (2, 256, 128)]).startswith(f"matmul-batch_matmul-{dtype}-")
    assert chosen([(3, 40), (40, 70)], few_rows=True).startswith(f"matmul-rows-matmul-{dtype}-")
    assert chosen([(20, 40), (40, 70)], unpacked=True).startswith(f"matmul-unpacked-matmul-{dtype}-")
    assert chosen([(64, 256), (256, 128), (128,)], "FusedLinear").startswith(f"matmul-matmul-{dtype}-")


def _check(got, a, b, dtype, g, feeds):
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    scale = np.abs(exact).max()
    got64 = np.asarray(got).astype(np.float64)
    assert got.dtype == NP[dtype]
    np.testing.assert_allclose(got64, exact, rtol=TOL[dtype], atol=TOL[dtype] * scale / 64)
    ref = np.asarray(interpret(g, feeds)["y"]).view(got.dtype).astype(np.float64)
    np.testing.assert_allclose(got64, ref, rtol=TOL[dtype], atol=TOL[dtype] * scale / 64)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
# M = 1 and 3: the row kernel; 9 and 31: B in place; 67, 130: packed B with row
# remainders; N 75 / 83 / 70: column remainders of 16 and 32; K odd
@pytest.mark.parametrize("m, k, n", [(1, 37, 75), (3, 64, 33), (9, 129, 83), (31, 37, 75),
                                     (67, 129, 83), (130, 513, 70)])
@pytest.mark.parametrize("const", [True, False])
def test_narrow_matmul_values(dtype, m, k, n, const):
    rng = np.random.default_rng(m * 1000 + k)
    a = rng.standard_normal((m, k)).astype(NP[dtype])
    b = rng.standard_normal((k, n)).astype(NP[dtype])
    g = Graph()
    x = g.input("x", a.shape, dtype)
    w = g.constant(b, name="w") if const else g.input("w", b.shape, dtype)
    g.output(x @ w, name="y")
    feeds = {"x": a} if const else {"x": a, "w": b}
    _check(compile(g)(**feeds), a, b, dtype, g, feeds)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("m", [1, 45])
def test_narrow_batched_matmul_values(dtype, m):
    rng = np.random.default_rng(m)
    a = rng.standard_normal((3, m, 71)).astype(NP[dtype])
    b = rng.standard_normal((3, 71, 50)).astype(NP[dtype])
    g = Graph()
    x, w = g.input("x", a.shape, dtype), g.input("w", b.shape, dtype)
    g.output(x @ w, name="y")
    feeds = {"x": a, "w": b}
    _check(compile(g)(**feeds), a, b, dtype, g, feeds)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("m, k, n", [(1, 37, 75), (67, 129, 83)])
@pytest.mark.parametrize("const", [True, False])
def test_narrow_linear_values(dtype, m, k, n, const):
    """FusedLinear (bias, no activation) accumulates into the f32 bias through
    the same named product."""
    rng = np.random.default_rng(m + n)
    a = rng.standard_normal((m, k)).astype(NP[dtype])
    b = rng.standard_normal((k, n)).astype(NP[dtype])
    bias = rng.standard_normal(n).astype(NP[dtype])
    g = Graph()
    x = g.input("x", a.shape, dtype)
    w = g.constant(b, name="w") if const else g.input("w", b.shape, dtype)
    g.output(linear(x, w, g.constant(bias, name="b")), name="y")
    feeds = {"x": a} if const else {"x": a, "w": b}
    got = compile(g)(**feeds)
    exact = a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64)
    tol = dict(rtol=TOL[dtype], atol=TOL[dtype] * np.abs(exact).max() / 64)
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), exact, **tol)
    ref = np.asarray(interpret(g, feeds)["y"]).view(got.dtype).astype(np.float64)
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), ref, **tol)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("m", [1, 67])
def test_narrow_matmul_over_a_transposed_b(dtype, m):
    """B a transposed view of an input: the strided kernel of the same strategy."""
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, 129)).astype(NP[dtype])
    bt = rng.standard_normal((83, 129)).astype(NP[dtype])
    g = Graph()
    x, w = g.input("x", a.shape, dtype), g.input("w", bt.shape, dtype)
    g.output(x @ w.transpose(), name="y")
    feeds = {"x": a, "w": bt}
    _check(compile(g)(**feeds), a, np.ascontiguousarray(bt.T), dtype, g, feeds)
