"""bf16/f16 products on CPU: a ``linalg.matmul`` / ``linalg.batch_matmul`` of
bf16/f16 operands into an f32 init (``lowering.matmul``) takes the f32 tiles of
the vectorized schedule (``strategy.NARROW_TILES``): each operand extended
exactly, f32 FMAs, the result rounded once. Values within a bf16/f16 ulp or two
of the float64 product of the same operands, and equal to the reference
interpreter's within that, for shapes with row, column and K remainders; B an
input or a constant. A constant bf16/f16 B is packed at compile time in its own
dtype (``fuel-prepack-weights``: ``packed_strategy`` on bf16/f16 panels), and
the mixed f32 x bf16 product (an f32 activation over a bf16 weight) is a
generated kernel, its constant weight packed in bf16 too."""
import re
import warnings

import numpy as np
import pytest

from compiler import Graph, compile
from compiler.codegen import fused as F
from compiler.codegen.cpu.pipeline import choose_strategy, lower
from compiler.codegen.family import ENTRY, single_op_linalg_text
from compiler.driver import FALLBACK_MARK, PACKED_B_MARK
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


@pytest.mark.parametrize("a, b", [("bf16", "bf16"), ("f16", "f16"), ("f32", "bf16")])
@pytest.mark.parametrize("target, nr", [("cpu:x86-64-v3", 16), ("cpu:x86-64-v4", 32)])
@pytest.mark.parametrize("cls", [{}, {"few_rows": True}, {"unpacked": True}])
def test_packed_narrow_kernel_is_f32_fmas_on_extended_panels(a, b, target, nr, cls):
    """The FusedLinear kernel over B packed in bf16/f16 (or an f32 a over bf16
    panels) takes the f32 packed strategy of its row class, named for a's
    type, and its tiles are f32 FMAs on the panels extended in registers."""
    types = (TensorType((8, 40), DType(a)), TensorType((3, 40, nr), DType(b)),
             TensorType((3 * nr,), DType(a)))
    inst = F.FusedInstance("FusedLinear", (("b_panel", nr),), types, (0, 1, 2, 3), **cls)
    res = lower(F.linalg_text(inst, platform="cpu"), [ENTRY], target=target)
    rows = "rows-" if cls.get("few_rows") else ""
    assert res.strategy.name.startswith(f"matmul-packed-b-{rows}{a}-"), res.strategy.name
    from compiler.codegen.cpu import llvm as L
    from compiler.targets import parse_target
    asm = L.target_machine(parse_target(target)).emit_assembly(L.parse_ir(res.llvm_ir, fixup=False))
    assert "vfmadd231ps" in asm
    assert not re.search(r"\bv(mul|add)ss\b", asm)
    assert ("vcvtph2ps" if b == "f16" else "vpmovzxwd") in asm


def _packed_case(dtype, wdtype, m, k, n, bias, rng):
    """``x @ w (+ bias)`` over a constant w of ``wdtype`` (x of ``dtype``),
    compiled strictly (no fallback); the module, the operands and the graph."""
    a = rng.standard_normal((m, k)).astype(NP.get(dtype, np.float32))
    b = rng.standard_normal((k, n)).astype(NP[wdtype])
    c = rng.standard_normal(n).astype(NP.get(dtype, np.float32)) if bias else None
    g = Graph()
    x = g.input("x", a.shape, dtype)
    w = g.constant(b, name="w")
    g.output(linear(x, w, g.constant(c, name="b")) if bias else x @ w, name="y")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no FallbackWarning
        mod = compile(g, strict=True)
    return mod, a, b, c, g


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("bias", [False, True])
# N 120: not a multiple of either panel (padded to 128); K 129 odd, 300 past
# AVX2's K block (its short-K class)
@pytest.mark.parametrize("k, n", [(129, 120), (300, 64)])
def test_packed_narrow_values(dtype, bias, k, n):
    """A constant bf16/f16 B is packed at compile time in its own dtype; every
    row class (1-4 rows, a few dozen, more; row remainders of each tile) gives
    the float64 product within a bf16/f16 ulp or two, as the interpreter."""
    rng = np.random.default_rng(k + n)
    for m in (1, 2, 3, 4, 5, 9, 31, 33, 67, 130):
        mod, a, b, c, g = _packed_case(dtype, dtype, m, k, n, bias, rng)
        (line,) = mod.kernel_summary()
        assert line.startswith(f"FusedLinear[{dtype},{dtype},{dtype},{dtype}]") \
            and line.endswith(PACKED_B_MARK), line
        got = mod(x=a)
        assert got.dtype == NP[dtype]
        exact = a.astype(np.float64) @ b.astype(np.float64) + (c.astype(np.float64) if bias else 0)
        kw = dict(rtol=TOL[dtype], atol=TOL[dtype] * np.abs(exact).max() / 64)
        got64 = np.asarray(got).astype(np.float64)
        np.testing.assert_allclose(got64, exact, **kw)
        ref = np.asarray(interpret(g, {"x": a})["y"]).view(got.dtype).astype(np.float64)
        np.testing.assert_allclose(got64, ref, **kw)


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_packed_bf16_weight_stays_bf16(dtype):
    """The packed constant is the bf16 weight's panels, half the bytes of an
    f32 copy; under an f32 x (the mixed product) too."""
    mod, *_ = _packed_case(dtype, "bf16", 8, 256, 128, False, np.random.default_rng(1))
    big = max((np.asarray(v) for v in mod.plan.constants.values()), key=lambda v: v.nbytes)
    assert big.nbytes == 256 * 128 * 2 and big.itemsize == 2, (big.dtype, big.shape)


# M: the row kernel (1, 3), B in place (9, 20, 31), packed per call (67, 130);
# N 83 a column remainder of either tile (B an input); K odd
@pytest.mark.parametrize("m", [1, 3, 9, 20, 31, 67, 130])
@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("bias", [False, True])
def test_mixed_f32_bf16_product_is_generated(m, const, bias):
    """f32 x bf16 -> f32 (MatMul's mixed pair; with a bias, FusedLinear) runs a
    generated kernel, not the numpy fallback (no FallbackWarning, none marked,
    ``strict`` compiles), each operand widened to f32 in the product: within
    f32 rounding of the float64 product of the same (bf16-valued) operands, as
    the interpreter. A constant weight is packed (in bf16)."""
    rng = np.random.default_rng(m * 7 + const)
    k, n = 129, 96 if const else 83
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = rng.standard_normal(n).astype(np.float32)
    g = Graph()
    x = g.input("x", a.shape, "f32")
    w = g.constant(b, name="w") if const else g.input("w", b.shape, "bf16")
    y = x @ w
    g.output(y + g.constant(c, name="b") if bias else y, name="y")
    feeds = {"x": a} if const else {"x": a, "w": b}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mod = compile(g, strict=True)
    lines = mod.kernel_summary()
    assert not any(FALLBACK_MARK in ln for ln in lines), lines
    kind = "FusedLinear[f32,bf16,f32,f32]" if bias or const else "MatMul[f32,bf16,f32]"
    assert len(lines) == 1 and lines[0].startswith(kind), lines
    assert lines[0].endswith(PACKED_B_MARK) == const, lines
    got = mod(**feeds)
    assert got.dtype == np.float32
    exact = a.astype(np.float64) @ b.astype(np.float64) + (c if bias else 0)
    kw = dict(rtol=1e-5, atol=1e-5 * np.abs(exact).max())
    np.testing.assert_allclose(got, exact, **kw)
    np.testing.assert_allclose(got, np.asarray(interpret(g, feeds)["y"]), **kw)


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_packed_bf16_weight_saves_and_loads(dtype, tmp_path):
    """The folded packed bf16 weight is held as the plan holds bf16 constants
    (its uint16 bits), so ``save`` stores it (as U16) and the loaded module
    gives the same bits."""
    import runtime
    mod, a, *_ = _packed_case(dtype, "bf16", 5, 256, 128, True, np.random.default_rng(2))
    loaded = runtime.load(mod.save(tmp_path / "m.fuel"))
    want = np.asarray(mod(x=a))
    np.testing.assert_array_equal(np.asarray(loaded(x=a)).view(np.uint8), want.view(np.uint8))
