"""The numpy reference kernels, called through the global table with
strided inputs, against direct numpy."""
import math

import numpy as np
import pytest

from runtime import DType, KernelError, Layout, OpKind, Storage, global_table
from runtime import params as P
from runtime.dtype import bf16_to_f32, f32_to_bf16

RNG = np.random.default_rng(0)
D = DType


def call(op, dtypes, arrays, out_shapes, params=P.NO_PARAMS, out_dtypes=None):
    """Look up (op, dtypes) on the CPU and run it; inputs passed as strided
    views (transposed twice / flipped twice) to exercise layout handling."""
    k = global_table().lookup(op, dtypes, "cpu")
    ins, lays = [], []
    for a in arrays:
        a = np.asarray(a)
        if a.ndim >= 1:  # a reversed copy read back through a negative stride
            a = np.ascontiguousarray(a[::-1])[::-1]
        s, l = Storage.from_numpy(a, dtype=dtypes[min(len(ins), len(dtypes) - 2)])
        ins.append(s)
        lays.append(l)
    out_dtypes = out_dtypes or dtypes[len(dtypes) - len(out_shapes):]
    outs = [Storage.zeros(dt, math.prod(sh)) for dt, sh in zip(out_dtypes, out_shapes)]
    out_lays = [Layout.contiguous(sh) for sh in out_shapes]
    k(ins, outs, lays + out_lays, params)
    return [o.view(l) for o, l in zip(outs, out_lays)]


def rand(dt, shape, lo=-3, hi=3):
    if dt.is_float:
        return RNG.uniform(lo, hi, shape).astype(dt.numpy)
    return RNG.integers(lo, hi, shape).astype(dt.storage_numpy)


TOL = {D.F16: 2e-3, D.F32: 1e-6, D.F64: 1e-12}


def close(got, want, dt):
    if dt.is_float:
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64),
                                   rtol=TOL[dt], atol=TOL[dt], equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dt", [D.F16, D.F32, D.F64, D.I32, D.I64])
@pytest.mark.parametrize("op, f", [
    (OpKind.AddElementwise, np.add), (OpKind.SubElementwise, np.subtract),
    (OpKind.MulElementwise, np.multiply), (OpKind.MaximumElementwise, np.maximum),
    (OpKind.MinimumElementwise, np.minimum),
])
def test_binary(op, f, dt):
    a, b = rand(dt, (3, 4)), rand(dt, (3, 4))
    (y,) = call(op, [dt] * 3, [a, b], [(3, 4)])
    close(y, f(a, b), dt)


def test_integer_div_truncates_rem_floors_and_zero_divisor_yields_zero():
    a = np.array([7, -7, 7, -7, 5], np.int32)
    b = np.array([2, 2, -2, -2, 0], np.int32)
    (q,) = call(OpKind.DivElementwise, [D.I32] * 3, [a, b], [(5,)])
    (r,) = call(OpKind.RemElementwise, [D.I32] * 3, [a, b], [(5,)])
    assert q.tolist() == [3, -3, -3, 3, 0] and r.tolist() == [1, 1, -1, -1, 0]
    (rf,) = call(OpKind.RemElementwise, [D.F32] * 3, [a.astype(np.float32), np.full(5, 2.5, np.float32)], [(5,)])
    np.testing.assert_allclose(rf, a - np.floor(a / 2.5) * 2.5, rtol=1e-6)
    lo = np.array([-2 ** 31, -2 ** 31, 1 - 2 ** 31], np.int32)  # |INT_MIN| would wrap
    (q,) = call(OpKind.DivElementwise, [D.I32] * 3, [lo, np.array([2, 3, 2], np.int32)], [(3,)])
    assert q.tolist() == [-2 ** 30, -715827882, 1 - 2 ** 30]
    from runtime.numpy_kernels import divide  # the reference interpreter's formula, any int type
    assert divide(np.array([-128, -127], np.int8), np.array([64, -2], np.int8)).tolist() == [-2, 63]


@pytest.mark.parametrize("dt", [D.F16, D.F32, D.F64])
@pytest.mark.parametrize("op, f", [
    (OpKind.ExpElementwise, np.exp), (OpKind.TanhElementwise, np.tanh),
    (OpKind.SigmoidElementwise, lambda x: 1 / (1 + np.exp(-x))),
    (OpKind.SiluElementwise, lambda x: x / (1 + np.exp(-x))),
    (OpKind.GeluErfElementwise, lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))),
    (OpKind.GeluElementwise, lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    (OpKind.RoundElementwise, np.rint), (OpKind.SignElementwise, np.sign),
    (OpKind.StepElementwise, lambda x: (x > 0).astype(x.dtype)),
])
def test_unary_floats(op, f, dt):
    x = rand(dt, (2, 5))
    (y,) = call(op, [dt, dt], [x], [(2, 5)])
    close(y, f(x.astype(np.float64)), dt)


def test_round_is_half_to_even_and_sqrt_log_recip_rsqrt():
    x = np.array([0.5, 1.5, 2.5, -0.5, 4.0], np.float32)
    (y,) = call(OpKind.RoundElementwise, [D.F32] * 2, [x], [(5,)])
    assert y.tolist() == [0.0, 2.0, 2.0, -0.0, 4.0]
    for op, f in ((OpKind.SqrtElementwise, np.sqrt), (OpKind.LogElementwise, np.log),
                  (OpKind.RecipElementwise, lambda v: 1 / v), (OpKind.RsqrtElementwise, lambda v: 1 / np.sqrt(v))):
        (y,) = call(op, [D.F64] * 2, [x.astype(np.float64)], [(5,)])
        np.testing.assert_allclose(y, f(x.astype(np.float64)))


@pytest.mark.parametrize("dt", [D.F32, D.I64, D.U8])
def test_comparisons_write_u8_and_where_selects(dt):
    a, b = rand(dt, (4,), 0, 3), rand(dt, (4,), 0, 3)
    for op, f in ((OpKind.LessElementwise, np.less), (OpKind.EqualElementwise, np.equal),
                  (OpKind.NotEqualElementwise, np.not_equal), (OpKind.GreaterEqualElementwise, np.greater_equal)):
        (m,) = call(op, [dt, dt, D.U8], [a, b], [(4,)])
        assert m.dtype == np.uint8 and m.tolist() == f(a, b).astype(np.uint8).tolist()
    (w,) = call(OpKind.Where, [D.U8, dt, dt, dt], [m, a, b], [(4,)])
    np.testing.assert_array_equal(w, np.where(m != 0, a, b))
    (mf,) = call(OpKind.MaskedFill, [dt, D.U8, dt], [a, m], [(4,)], P.MaskedFill(2.0))
    np.testing.assert_array_equal(mf, np.where(m != 0, 2, a).astype(a.dtype))


def test_not_equal_on_nan_is_true():
    a = np.array([np.nan, 1.0], np.float32)
    (m,) = call(OpKind.NotEqualElementwise, [D.F32, D.F32, D.U8], [a, a], [(2,)])
    assert m.tolist() == [1, 0]


@pytest.mark.parametrize("dt", [D.F32, D.I32])
def test_affine_clamp_powi(dt):
    x = rand(dt, (6,))
    (y,) = call(OpKind.Affine, [dt, dt], [x], [(6,)], P.Affine(3.0, -2.0))
    close(y, x * 3 - 2, dt)
    (y,) = call(OpKind.ClampElementwise, [dt, dt], [x], [(6,)], P.Clamp(-1.0, 2.0))
    close(y, np.clip(x, -1, 2), dt)
    (y,) = call(OpKind.PowIElementwise, [dt, dt], [x], [(6,)], P.PowI(3))
    close(y, x * x * x, dt)
    if dt.is_int:
        with pytest.raises(KernelError, match="scalar 0.5 must be integral for a i32 tensor"):
            call(OpKind.Affine, [dt, dt], [x], [(6,)], P.Affine(0.5, 0.0))


@pytest.mark.parametrize("dt", [D.F16, D.F32, D.I64])
def test_reductions(dt):
    x = rand(dt, (2, 3, 4))
    (y,) = call(OpKind.SumReduce, [dt, dt], [x], [(2, 4)], P.Reduce((1,)))
    close(y, x.astype(np.float64 if dt.is_float else x.dtype).sum(axis=1), dt)
    (y,) = call(OpKind.MaxReduce, [dt, dt], [x], [(1, 3, 1)], P.Reduce((0, 2), keepdim=True))
    close(y, x.max(axis=(0, 2), keepdims=True), dt)
    (y,) = call(OpKind.MinReduce, [dt, dt], [x], [()], P.Reduce((0, 1, 2)))
    close(y, x.min(), dt)
    (i,) = call(OpKind.ArgMaxDim, [dt, D.U32], [x], [(2, 3)], P.Reduce((2,)))
    assert i.dtype == np.uint32 and i.tolist() == x.argmax(axis=2).tolist()
    (y,) = call(OpKind.ReduceSumTo, [dt, dt], [x], [(3, 1)], P.ReduceSumTo((2, 3, 4), (3, 1)))
    close(y, x.astype(np.float64 if dt.is_float else x.dtype).sum(axis=(0, 2)).reshape(3, 1), dt)
    (y,) = call(OpKind.ReduceMaxTo, [dt, dt], [x], [(2, 1, 4)], P.ReduceMaxTo((2, 3, 4), (2, 1, 4)))
    close(y, x.max(axis=1, keepdims=True), dt)
    (y,) = call(OpKind.CumSum, [dt, dt], [x], [(2, 3, 4)], P.CumSum(2, 3, 4, 1))
    close(y, np.cumsum(x.astype(np.float64 if dt.is_float else x.dtype), axis=1), dt)


def test_mean_and_log_softmax():
    x = rand(D.F64, (3, 5))
    (y,) = call(OpKind.MeanReduce, [D.F64] * 2, [x], [(3,)], P.Reduce((1,)))
    np.testing.assert_allclose(y, x.mean(axis=1))
    (y,) = call(OpKind.LogSoftmaxLastDim, [D.F64] * 2, [x], [(3, 5)], P.LogSoftmaxLastDim(3, 5))
    np.testing.assert_allclose(np.exp(y).sum(axis=1), 1.0)
    np.testing.assert_allclose(y, x - np.log(np.exp(x).sum(axis=1, keepdims=True)))


@pytest.mark.parametrize("dt", [D.F16, D.F32, D.F64, D.I32])
def test_matmul_batched_and_gqa(dt):
    a, b = rand(dt, (4, 2, 3)), rand(dt, (2, 3, 5))
    (y,) = call(OpKind.MatMul, [dt] * 3, [a, b], [(4, 2, 5)], P.Matmul((4,), (2,), 2, 5, 3))
    want = np.stack([a[i].astype(np.float64) @ b[i // 2].astype(np.float64) for i in range(4)])
    close(y, want, dt)


def test_matmul_rows_and_mixed_bf16():
    a, b = rand(D.F32, (3, 2)), rand(D.F32, (2, 4))
    (y,) = call(OpKind.MatMul, [D.F32] * 3, [a, b], [(3, 4)], P.Matmul((), (), 3, 4, 2, P.MatmulM.rows(2)))
    np.testing.assert_allclose(y[:2], a[:2] @ b, rtol=1e-6)
    assert (y[2] == 0).all()
    bits = f32_to_bf16(b)
    (y,) = call(OpKind.MatMul, [D.F32, D.BF16, D.F32], [a, bits], [(3, 4)], P.Matmul((), (), 3, 4, 2))
    np.testing.assert_allclose(y, a @ bf16_to_f32(bits), rtol=1e-6)
    with pytest.raises(KernelError, match="do not match params"):
        call(OpKind.MatMul, [D.F32] * 3, [a, b], [(3, 4)], P.Matmul((), (), 3, 4, 3))


def test_cast_semantics_including_bf16_bits():
    x = np.array([1.7, -1.7, np.nan, 1e10, -1e10, 2.5], np.float32)
    (y,) = call(OpKind.Cast, [D.F32, D.I32], [x], [(6,)], P.Cast())
    assert y.tolist() == [1, -1, 0, 2**31 - 1, -2**31, 2]
    (y,) = call(OpKind.Cast, [D.I64, D.U8], [np.array([256, 257, -1], np.int64)], [(3,)], P.Cast())
    assert y.tolist() == [0, 1, 255]
    (b,) = call(OpKind.Cast, [D.F32, D.BF16], [np.array([1.0, 3.140625, -2.0], np.float32)], [(3,)], P.Cast())
    assert b.dtype == np.uint16 and b.tolist() == [0x3F80, 0x4049, 0xC000]
    (f,) = call(OpKind.Cast, [D.BF16, D.F64], [b], [(3,)], P.Cast())
    assert f.tolist() == [1.0, 3.140625, -2.0]
    assert not global_table().backend_supports(OpKind.Cast, [D.F32, D.F32], "cpu")


@pytest.mark.parametrize("dt", [D.F32, D.U8, D.BF16])
def test_movement_ops(dt):
    x = rand(D.I32, (2, 3, 4), 0, 9).astype(dt.storage_numpy)
    (y,) = call(OpKind.Flip, [dt, dt], [x], [(2, 3, 4)], P.Flip(2, 3, 4, 1))
    np.testing.assert_array_equal(y, x[:, ::-1])
    (y,) = call(OpKind.Roll, [dt, dt], [x], [(2, 3, 4)], P.Roll(6, 4, 1, -1, 2))
    np.testing.assert_array_equal(y, np.roll(x, -1, axis=2))
    (y,) = call(OpKind.Triu, [dt, dt], [x], [(2, 3, 4)], P.Triangular(2, 3, 4, 1))
    np.testing.assert_array_equal(y, np.triu(x, 1))
    (y,) = call(OpKind.Tril, [dt, dt], [x], [(2, 3, 4)], P.Triangular(2, 3, 4, -1))
    np.testing.assert_array_equal(y, np.tril(x, -1))
    x2 = rand(D.I32, (2, 1, 4), 0, 9).astype(dt.storage_numpy)
    (y,) = call(OpKind.Concat, [dt, dt], [x, x2], [(2, 4, 4)], P.Concat(2, (3, 1), 4, 1))
    np.testing.assert_array_equal(y, np.concatenate([x, x2], axis=1))
    idx = np.array([2, 0, 2], np.uint32)
    (y,) = call(OpKind.IndexSelect, [dt, D.U32, dt], [x, idx], [(2, 3, 4)], P.IndexSelect(2, 3, 3, 4))
    np.testing.assert_array_equal(y, x[:, [2, 0, 2]])
    gi = RNG.integers(0, 3, (2, 2, 4)).astype(np.uint32)
    (y,) = call(OpKind.Gather, [dt, D.U32, dt], [x, gi], [(2, 2, 4)], P.Gather((2, 3, 4), (2, 2, 4), 1))
    np.testing.assert_array_equal(y, np.take_along_axis(x, gi.astype(np.intp), axis=1))


def test_pad_constant_and_unsupported_mode():
    x = rand(D.F32, (2, 3))
    p = P.Pad((2, 3), (3, 6), ((1, 0), (1, 2)), value=-1.0)
    (y,) = call(OpKind.Pad, [D.F32] * 2, [x], [(3, 6)], p)
    np.testing.assert_array_equal(y, np.pad(x, ((1, 0), (1, 2)), constant_values=-1.0))
    with pytest.raises(KernelError, match="REFLECT is not implemented"):
        call(OpKind.Pad, [D.F32] * 2, [x], [(3, 6)], P.Pad((2, 3), (3, 6), ((1, 0), (1, 2)), P.PadMode.REFLECT))


@pytest.mark.parametrize("dt", [D.F32, D.I64])
def test_index_add_and_scatter_add(dt):
    base, src = rand(dt, (2, 4, 3)), rand(dt, (2, 3, 3))
    idx = np.array([1, 3, 1], np.uint32)
    (y,) = call(OpKind.IndexAdd, [dt, D.U32, dt, dt], [base, idx, src], [(2, 4, 3)], P.IndexAdd(2, 4, 3, 3))
    want = base.astype(np.float64 if dt.is_float else base.dtype).copy()
    np.add.at(want, (slice(None), idx.astype(np.intp)), src)
    close(y, want, dt)
    si = RNG.integers(0, 4, (2, 3, 3)).astype(np.uint32)
    (y,) = call(OpKind.ScatterAdd, [dt, D.U32, dt, dt], [base, si, src], [(2, 4, 3)],
                P.ScatterAdd((2, 4, 3), (2, 3, 3), 1))
    want = base.astype(np.float64 if dt.is_float else base.dtype).copy()
    for i, j, k in np.ndindex(src.shape):
        want[i, si[i, j, k], k] += src[i, j, k]
    close(y, want, dt)


def test_out_of_range_index_is_a_kernel_error_naming_index_and_size():
    x = rand(D.F32, (3, 2))
    with pytest.raises(KernelError, match="index 5 out of range for an axis of size 3"):
        call(OpKind.IndexSelect, [D.F32, D.U32, D.F32], [x, np.array([5], np.uint32)], [(1, 2)],
             P.IndexSelect(1, 3, 1, 2))


def test_kernels_reject_wrong_arity_and_wrong_output_shape():
    k = global_table().lookup(OpKind.AddElementwise, [D.F32] * 3, "cpu")
    s, l = Storage.from_numpy(np.ones(3, np.float32))
    with pytest.raises(KernelError, match="expected 2 inputs and 1 output"):
        k([s], [s], [l, l], P.NO_PARAMS)
    out = Storage.zeros(D.F32, 4)
    with pytest.raises(KernelError, match=r"computed shape \[3\] does not match .* \[4\]"):
        k([s, s], [out], [l, l, Layout.contiguous((4,))], P.NO_PARAMS)


def test_nonzero_indices_fills_a_two_slot_bundle():
    x = np.array([0, 3, 0, 1, 2, 0], np.int32)
    k = global_table().lookup(OpKind.NonZeroIndices, [D.I32, D.U32], "cpu")
    s, l = Storage.from_numpy(x)
    b = Storage.bundle([(D.U32, (6,)), (D.U32, (1,))])
    k([s], [b], [l, b.bundle_views[0].layout], P.NonZeroIndices(6, 0))
    assert b.slot_view(0).tolist() == [1, 3, 4, 0, 0, 0] and b.slot_view(1).tolist() == [3]


def test_f32_to_bf16_keeps_rank_0_nan():
    """A rank-0 NaN (an out-of-domain Asin of a bf16 scalar) stays a rank-0 NaN:
    arithmetic on rank-0 arrays gives numpy scalars, which took no assignment."""
    out = f32_to_bf16(np.array(np.nan, np.float32))
    assert out.shape == () and np.isnan(bf16_to_f32(out))
    assert f32_to_bf16(np.array(1.0, np.float32)).shape == ()
