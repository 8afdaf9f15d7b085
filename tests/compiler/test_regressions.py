"""Focused checks for the bugs the end-to-end compiler tests found (one each)."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.codegen.cpu.llvm import fixup_ir_text
from runtime.dtype import DType, bf16_to_f32, f32_to_bf16
from runtime.keys import binding_dtypes
from runtime.opkind import OpKind
from runtime.storage import Storage


def test_rank0_arrays_keep_rank_through_storage():
    s, lay = Storage.from_numpy(np.asarray(np.float32(2.5)))
    assert lay.shape == () and lay.start_offset == 0
    assert s.to_numpy(lay).shape == ()
    assert bf16_to_f32(f32_to_bf16(np.float32(1.5))).shape == ()


def test_rank0_graph_end_to_end():
    g = Graph()
    x = g.input("x", (), "f32")
    g.output(x.sum(), name="s")
    g.output(x + g.constant(np.float32(1)), name="c")
    out = compile(g)(x=np.asarray(np.float32(2)))
    assert out["s"].shape == () and out["c"].shape == () and float(out["c"]) == 3.0


def test_concat_binding_key_is_t_in_t_out():
    f = DType.F32
    assert binding_dtypes(OpKind.Concat, [f, f, f], [f]) == (f, f)
    assert binding_dtypes(OpKind.AddElementwise, [f, f], [f]) == (f, f, f)


def test_identity_cast_compiles():
    g = Graph()
    g.output(g.input("x", (3,)).cast("f32").exp(), name="y")
    x = np.linspace(-1, 1, 3, dtype=np.float32)
    np.testing.assert_allclose(compile(g)(x=x), np.exp(x), rtol=1e-6)


def test_f64_to_f16_cast_is_correctly_rounded():
    # 1 + 2^-11 + 2^-40: just above the f16 tie between 1 and 1+2^-10; rounding
    # through f32 to nearest would land on the tie and round down to 1.
    g = Graph()
    g.output(g.input("x", (4,), "f64").cast("f16"), name="y")
    x = np.array([1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -11, -70000.0, np.nan])
    got = compile(g)(x=x)
    want = interpret(g, {"x": x})["y"]
    assert got.view(np.uint16).tolist() == want.view(np.uint16).tolist()
    assert got[0] == np.float16(1 + 2 ** -10)


@pytest.mark.parametrize("text,want", [
    ("%c = fcmp oge half %x, +inf", "%c = fcmp oge half %x, 0xH7C00"),
    ("%s = select i1 %c, double -nan, double %y", "%s = select i1 %c, double 0xFFF8000000000000, double %y"),
    ("%c = fcmp oge bfloat %x, 2.147480e+09", "%c = fcmp oge bfloat %x, 0xR4F00"),
    ("%n = fcmp olt float %x, %inf ; +inf", "%n = fcmp olt float %x, %inf ; +inf"),
])
def test_llvm_fixups_for_operand_specials_and_bfloat_decimals(text, want):
    assert fixup_ir_text(text) == want


def test_signed_zero_params_compile_distinct_kernels():
    """Affine(mul=-0.0) after Affine(mul=0.0): the compiled kernel is keyed by
    the params' bits, so the sign of zero products is right for both."""
    from compiler.targets import table_for
    from runtime import params as P
    from runtime.keys import BackendId
    from runtime.layout import Layout
    from runtime.opkind import OpKind
    from runtime.storage import Storage
    kernel = table_for("cpu").lookup(OpKind.Affine, (DType.F32, DType.F32), BackendId.CPU)
    st, lay = Storage.from_numpy(np.array([1.0, -2.0], np.float32))
    for mul in (0.0, -0.0):
        out = Storage.zeros(DType.F32, 2)
        kernel([st], [out], [lay, Layout.contiguous((2,))], P.Affine(mul=mul, add=0.0))
        got = out.view(Layout.contiguous((2,)))
        np.testing.assert_array_equal(np.signbit(got), np.signbit(np.float32(mul) * np.array([1, -2], np.float32)))


def test_zero_extent_axes_compile_for_cpu():
    """Concat with a zero-sized operand (the exported RotaryEmbedding spelling
    concatenates an empty pass-through half), empty slices, sums over an empty
    axis and a K=0 matmul, compiled for the cpu target."""
    from compiler.graph import concat, matmul
    g = Graph()
    x = g.input("x", (2, 8), "f32")
    e = g.input("e", (2, 0), "f32")
    empty = x.slice(1, 8, 0)
    g.output(concat([x.slice(1, 0, 3), x.slice(1, 3, 0), x.slice(1, 3, 5)], 1) * 2.0, name="mid")
    g.output(concat([x, empty, e], 1) + 1.0, name="end")
    g.output(empty.sum(1) + e.sum(1), name="sum0")
    g.output(matmul(e, e.transpose()) + 1.0, name="k0")
    g.output(x.slice(0, 2, 0).softmax(-1), name="rows0")
    xv = np.random.default_rng(0).random((2, 8), dtype=np.float32)
    feeds = {"x": xv, "e": np.zeros((2, 0), np.float32)}
    want = interpret(g, feeds)
    got = compile(g, target="cpu")(**feeds)
    for k, w in want.items():
        assert got[k].shape == w.shape, k
        np.testing.assert_allclose(got[k], w, rtol=1e-6, err_msg=k)
    np.testing.assert_array_equal(got["k0"], np.ones((2, 2), np.float32))
