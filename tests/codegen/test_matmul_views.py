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
