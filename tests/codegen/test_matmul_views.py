"""Batched MatMul / FusedLinear calls of any rank reach the 2-D / 3-D kernels:
batch axes merge into one, or fold into M when the rhs has no batch; views the
strides forbid keep the general kernel. Numerics against numpy."""
import numpy as np
import pytest

from compiler.codegen import kernels as K
from runtime import params as P
from runtime.binding import KernelBindingTable
from runtime.dtype import DType
from runtime.keys import BackendId
from runtime.layout import Layout
from runtime.opkind import OpKind
from runtime.storage import Storage
from compiler.targets import parse_target

F32 = DType.F32


def _mm(la, lb, lo, batch_a, batch_b, m, n, k):
    return K.collapse_matmul(la, lb, lo, P.Matmul(batch_a, batch_b, m, n, k))


def test_merge_axes_contiguous_broadcast_and_refused():
    lay = Layout.contiguous((2, 3, 4, 5))
    assert K.merge_axes(lay, 0, 3) == Layout((24, 5), (5, 1))
    assert K.merge_axes(lay, 1, 2) is lay
    # size-1 axes are ignored, stride-0 runs stay stride 0
    assert K.merge_axes(Layout((1, 3, 4), (99, 4, 1)), 0, 2) == Layout((3, 4), (4, 1))
    assert K.merge_axes(Layout((2, 3, 4), (0, 0, 1)), 0, 2) == Layout((6, 4), (0, 1))
    # transposed batch axes: no single stride walks them
    assert K.merge_axes(lay.permute((1, 0, 2, 3)), 0, 2) is None


def test_collapse_rules():
    a, b, o = (Layout.contiguous(s) for s in ((2, 3, 4, 5), (2, 3, 5, 6), (2, 3, 4, 6)))
    la, lb, lo, p = _mm(a, b, o, (2, 3), (2, 3), 4, 6, 5)
    assert (la.shape, lb.shape, lo.shape) == ((6, 4, 5), (6, 5, 6), (6, 4, 6))
    assert p == P.Matmul((6,), (6,), 4, 6, 5)
    # rhs broadcast over the batch (stride 0): the batch folds into M, a 2-D matmul
    bw = Layout.contiguous((5, 6)).broadcast_as((2, 3, 5, 6))
    la, lb, lo, p = _mm(a, bw, o, (2, 3), (2, 3), 4, 6, 5)
    assert (la.shape, lb, lo.shape, p) == ((24, 5), Layout((5, 6), (6, 1)), (24, 6),
                                           P.Matmul((), (), 24, 6, 5))
    # size-1 rhs batch (GQA-style 1) also folds
    b1 = Layout.contiguous((1, 1, 5, 6))
    assert _mm(a, b1, o, (2, 3), (1, 1), 4, 6, 5)[3] == P.Matmul((), (), 24, 6, 5)
    # rank 2, and GQA batches, stay as they are
    assert _mm(Layout.contiguous((4, 5)), Layout.contiguous((5, 6)),
               Layout.contiguous((4, 6)), (), (), 4, 6, 5) is None
    assert _mm(Layout.contiguous((4, 2, 5)), Layout.contiguous((2, 5, 6)),
               Layout.contiguous((4, 2, 6)), (4,), (2,), 2, 6, 5) is None
    # a transposed batch of the lhs: no merge
    at = Layout.contiguous((3, 2, 4, 5)).permute((1, 0, 2, 3))
    assert _mm(at, b, o, (2, 3), (2, 3), 4, 6, 5) is None
    # rows narrowed (m_compute) in a folded lhs: batch and M no longer merge
    an = Layout.contiguous((2, 8, 5)).narrow(1, 0, 4)
    assert _mm(an, Layout.contiguous((5, 6)).broadcast_as((2, 5, 6)),
               Layout.contiguous((2, 4, 6)), (2,), (2,), 4, 6, 5) is None


@pytest.fixture(scope="module")
def table():
    t = KernelBindingTable()
    K.register_primitive_kernels(t, parse_target("cpu"), dtypes=(F32,), kinds=[OpKind.MatMul])
    t.finalize()
    return t


def _call(table, a, b, la, lb, out_shape, batch_a, batch_b):
    m, k = la.shape[-2:]
    n = lb.shape[-1]
    sa, sb = Storage.from_numpy(a)[0], Storage.from_numpy(b)[0]
    out = Storage.zeros(F32, int(np.prod(out_shape)))
    lo = Layout.contiguous(out_shape)
    table.lookup(OpKind.MatMul, (F32,) * 3, BackendId.CPU)(
        [sa, sb], [out], [la, lb, lo], P.Matmul(batch_a, batch_b, m, n, k))
    return out.view(lo).copy()


def test_batched_matmul_of_rank_4_and_5_matches_numpy(table, rng):
    for shape_a, shape_b in (((1, 3, 7, 5), (1, 3, 5, 9)), ((2, 2, 3, 7, 5), (2, 2, 3, 5, 9))):
        a = rng.standard_normal(shape_a, dtype=np.float32)
        b = rng.standard_normal(shape_b, dtype=np.float32)
        got = _call(table, a, b, Layout.contiguous(shape_a), Layout.contiguous(shape_b),
                    shape_a[:-1] + shape_b[-1:], shape_a[:-2], shape_b[:-2])
        np.testing.assert_allclose(got, a @ b, rtol=2e-5, atol=1e-5)


def test_broadcast_rhs_folds_and_transposed_batch_falls_back(table, rng):
    a = rng.standard_normal((2, 3, 7, 5), dtype=np.float32)
    w = rng.standard_normal((5, 9), dtype=np.float32)
    lw = Layout.contiguous((5, 9)).broadcast_as((2, 3, 5, 9))
    got = _call(table, a, w, Layout.contiguous(a.shape), lw, (2, 3, 7, 9), (2, 3), (2, 3))
    np.testing.assert_allclose(got, a @ w, rtol=2e-5, atol=1e-5)
    # batch axes of the lhs swapped in memory: the general kernel, same numbers
    at = np.ascontiguousarray(a.transpose(1, 0, 2, 3))
    la = Layout.contiguous(at.shape).permute((1, 0, 2, 3))
    got = _call(table, at, w, la, lw, (2, 3, 7, 9), (2, 3), (2, 3))
    np.testing.assert_allclose(got, a @ w, rtol=2e-5, atol=1e-5)


def test_fused_linear_rank_4_matches_numpy(rng):
    from compiler import Graph, compile
    from compiler.registry.builders import fused
    g = Graph()
    x = g.input("x", (2, 3, 7, 5), "f32")
    w = g.input("w", (2, 3, 5, 9), "f32")
    bias = g.input("bias", (9,), "f32")
    g.output(fused("FusedLinear", x, w, bias), name="y")
    m = compile(g, "cpu")
    assert m.kernel_summary() == ["FusedLinear[f32,f32,f32,f32] (mlir-cpu-fused)"]
    xs = rng.standard_normal((2, 3, 7, 5), dtype=np.float32)
    ws = rng.standard_normal((2, 3, 5, 9), dtype=np.float32)
    bs = rng.standard_normal(9, dtype=np.float32)
    np.testing.assert_allclose(m(x=xs, w=ws, bias=bs), xs @ ws + bs, rtol=2e-5, atol=1e-5)


def test_unmergeable_batch_axes_run_as_rank_3_subcalls(table, rng):
    # attention heads: v [B, S, heads, d] viewed as [B, heads, S, d]; the batch
    # axes (B, heads) cannot merge, so each B runs the rank-3 batch_matmul kernel
    from compiler.codegen.cpu import choose_strategy
    bsz, heads, s, d = 3, 4, 13, 8
    probs = rng.standard_normal((bsz, heads, s, s), dtype=np.float32)
    v = rng.standard_normal((bsz, s, heads, d), dtype=np.float32)
    lv = Layout.contiguous(v.shape).permute((0, 2, 1, 3))
    p = P.Matmul((bsz, heads), (bsz, heads), s, d, s)
    lays = [Layout.contiguous(probs.shape), lv, Layout.contiguous((bsz, heads, s, d))]
    inst, adapted = K.FAMILY.instance(OpKind.MatMul, (F32,) * 3, lays, p, 2)
    subs = K.FAMILY.subcalls(OpKind.MatMul, inst, adapted, p, 2)
    assert len(subs) == bsz and all(sp == P.Matmul((heads,), (heads,), s, d, s) for _, sp in subs)
    sub_inst, sub_lays = K.FAMILY.instance(OpKind.MatMul, (F32,) * 3, *subs[1], 2)
    assert [l.rank for l in sub_lays] == [3, 3, 3]
    assert choose_strategy(K.linalg_text(sub_inst), ["kernel"]).name.startswith(
        "matmul-batch_matmul-f32")
    want = probs @ v.transpose(0, 2, 1, 3)
    got = _call(table, probs, v, lays[0], lv, (bsz, heads, s, d), (bsz, heads), (bsz, heads))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)
    # mergeable batch axes collapse instead (no sub-calls)
    inst2, adapted2 = K.FAMILY.instance(OpKind.MatMul, (F32,) * 3, [
        Layout.contiguous(probs.shape), Layout.contiguous((bsz, heads, s, d)),
        Layout.contiguous((bsz, heads, s, d))], p, 2)
    assert K.FAMILY.subcalls(OpKind.MatMul, inst2, adapted2, p, 2) is None


def test_subcalls_spread_over_threads_give_the_same_result(rng):
    from compiler import Graph, compile
    from compiler.codegen import parallel
    g = Graph()
    q = g.input("q", (4, 16, 3, 8), "f32")
    k = g.input("k", (4, 16, 3, 8), "f32")
    g.output(q.permute((0, 2, 1, 3)) @ k.permute((0, 2, 3, 1)), name="s")
    qs = rng.standard_normal((4, 16, 3, 8), dtype=np.float32)
    ks = rng.standard_normal((4, 16, 3, 8), dtype=np.float32)
    outs = []
    try:
        for n in (1, 2, 3):
            parallel.set_num_threads(n)
            outs.append(compile(g, "cpu")(q=qs, k=ks))
    finally:
        parallel.set_num_threads(None)
    want = qs.transpose(0, 2, 1, 3) @ ks.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(outs[0], want, rtol=2e-5, atol=1e-5)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


@pytest.mark.parametrize("seq", [33, 129])
def test_attention_with_remainder_rows_and_columns_matches_the_interpreter(rng, seq):
    # ViT's token count (patches + a class token) is odd: both attention
    # products have remainder rows and QK^T a remainder column (sub-calls of
    # the batch_matmul kernel on permuted heads)
    from compiler import Graph, compile
    from compiler.graph.interpret import interpret
    g = Graph()
    q, k, v = (g.input(n, (2, seq, 4, 64), "f32") for n in "qkv")
    s = q.permute((0, 2, 1, 3)) @ k.permute((0, 2, 3, 1))
    g.output((s / 8.0).softmax(-1) @ v.permute((0, 2, 1, 3)), name="o")
    feeds = {n: rng.standard_normal((2, seq, 4, 64), dtype=np.float32) for n in "qkv"}
    got = compile(g, "cpu")(**feeds)
    np.testing.assert_allclose(got, interpret(g, feeds)["o"], rtol=1e-5, atol=1e-6)
