"""The mlir-cpu kernel family: registration, numerics against the runtime's
numpy reference kernels on strided/broadcast/flipped layouts, and compile-once."""
import numpy as np
import pytest

from compiler.codegen import kernels as K
from compiler.codegen.cache import default_cache
from runtime import params as P
from runtime.binding import KernelBindingTable
from runtime.dtype import DType
from runtime.errors import KernelError
from runtime.keys import BackendId
from runtime.layout import Layout
from runtime.numpy_kernels import register_numpy_kernels
from runtime.opkind import OpKind
from runtime.storage import Storage
from compiler.targets import parse_target

F32, F64, I32, U8, U32 = DType.F32, DType.F64, DType.I32, DType.U8, DType.U32
TOL = {F32: dict(rtol=2e-5, atol=1e-6), F64: dict(rtol=1e-12, atol=1e-13), I32: dict(rtol=0, atol=0)}


@pytest.fixture(scope="module")
def tables():
    mlir, ref = KernelBindingTable(), KernelBindingTable()
    K.register_primitive_kernels(mlir, parse_target("cpu"), dtypes=(F32, F64, I32))
    mlir.finalize()
    register_numpy_kernels(ref)
    return mlir, ref


def _run(table, kind, dtypes, inputs, out_shape, params):
    """inputs: (Storage, Layout) pairs; returns the output as numpy."""
    out = Storage.zeros(dtypes[-1], max(1, int(np.prod(out_shape))))
    ol = Layout.contiguous(out_shape)
    table.lookup(kind, dtypes, BackendId.CPU)(
        [s for s, _ in inputs], [out], [l for _, l in inputs] + [ol], params)
    return out.view(ol).copy()


def _check(tables, kind, dtypes, inputs, out_shape, params=P.NO_PARAMS):
    mlir, ref = tables
    got = _run(mlir, kind, dtypes, inputs, out_shape, params)
    want = _run(ref, kind, dtypes, inputs, out_shape, params)
    tol = TOL.get(dtypes[-1], dict(rtol=0, atol=0))
    np.testing.assert_allclose(got, want, **tol, err_msg=f"{kind.name} {dtypes}")


def _arr(rng, shape, dt, lo=-2.0, hi=2.0):
    x = rng.uniform(lo, hi, shape)
    return x.astype(dt.numpy)


def test_registration_keys_caps_precision_source(tables):
    mlir, _ = tables
    entry = mlir.lookup_entry(OpKind.AddElementwise, (F32, F32, F32), BackendId.CPU)
    assert entry.kernel_source == "mlir-cpu" and entry.caps.strided_input
    assert entry.precision.bit_stable_on_same_hardware and entry.precision.max_ulp == 0
    # exp on f32 is the fastmath polynomial with its measured bound; f64 keeps libm, no claim
    from compiler.codegen.cpu.fastmath import MAX_ULP
    assert mlir.lookup_precision(OpKind.ExpElementwise, (F32, F32), BackendId.CPU).max_ulp == MAX_ULP["exp"]
    assert mlir.lookup_precision(OpKind.ExpElementwise, (F64, F64), BackendId.CPU).max_ulp is None
    assert mlir.backend_supports(OpKind.GreaterElementwise, (I32, I32, U8), BackendId.CPU)
    assert mlir.backend_supports(OpKind.Where, (U8, F64, F64, F64), BackendId.CPU)
    assert mlir.backend_supports(OpKind.Cast, (F32, I32), BackendId.CPU)
    assert not mlir.backend_supports(OpKind.ExpElementwise, (I32, I32), BackendId.CPU)  # op table: floats
    assert not mlir.backend_supports(OpKind.MeanReduce, (I32, I32), BackendId.CPU)
    cost = mlir.lookup_cost(OpKind.MatMul, (F32, F32, F32), BackendId.CPU)
    assert cost([(4, 8), (8, 2), (4, 2)], [F32] * 3, P.Matmul((), (), 4, 2, 8)).flops > 0


def test_elementwise_on_broadcast_flipped_and_transposed_layouts(tables, rng):
    a = _arr(rng, (5, 6), F32)
    b = _arr(rng, (6,), F32)
    sa, la = Storage.from_numpy(a)
    sb, lb = Storage.from_numpy(b)
    flipped = la.flip(0)                      # negative stride, offset
    bcast = lb.broadcast_as((5, 6))           # stride 0
    for kind in (OpKind.AddElementwise, OpKind.MulElementwise, OpKind.MaximumElementwise):
        _check(tables, kind, (F32,) * 3, [(sa, flipped), (sb, bcast)], (5, 6))
    sq, lq = Storage.from_numpy(_arr(rng, (6, 5), F32))
    _check(tables, OpKind.SubElementwise, (F32,) * 3, [(sa, la), (sq, lq.transpose())], (5, 6))


@pytest.mark.parametrize("kind", [OpKind.ExpElementwise, OpKind.TanhElementwise,
                                  OpKind.SigmoidElementwise, OpKind.GeluErfElementwise,
                                  OpKind.SqrtElementwise, OpKind.AbsElementwise])
def test_unary_f64(tables, rng, kind):
    x = np.abs(_arr(rng, (3, 7), F64)) if kind is OpKind.SqrtElementwise else _arr(rng, (3, 7), F64)
    _check(tables, kind, (F64, F64), [Storage.from_numpy(x[:, ::2])], (3, 4))


def test_compare_where_masked_fill(tables, rng):
    a, b = _arr(rng, (4, 5), F32), _arr(rng, (4, 5), F32)
    ins = [Storage.from_numpy(a), Storage.from_numpy(b)]
    _check(tables, OpKind.GreaterElementwise, (F32, F32, U8), ins, (4, 5))
    mask = Storage.from_numpy((a > 0).astype(np.uint8))
    _check(tables, OpKind.Where, (U8, F32, F32, F32), [mask] + ins, (4, 5))
    _check(tables, OpKind.MaskedFill, (F32, U8, F32), [ins[0], mask], (4, 5), P.MaskedFill(value=-7.5))


def test_scalar_param_ops(tables, rng):
    x = Storage.from_numpy(_arr(rng, (2, 9), F32))
    _check(tables, OpKind.Affine, (F32, F32), [x], (2, 9), P.Affine(mul=1.0, add=0.25))
    _check(tables, OpKind.Affine, (F32, F32), [x], (2, 9), P.Affine(mul=-3.0, add=0.0))
    _check(tables, OpKind.ClampElementwise, (F32, F32), [x], (2, 9), P.Clamp(min=-0.5, max=0.5))
    _check(tables, OpKind.PowIElementwise, (F32, F32), [x], (2, 9), P.PowI(exp=3))


def test_reductions(tables, rng):
    x = _arr(rng, (3, 4, 5), F32)
    s = Storage.from_numpy(x)
    _check(tables, OpKind.SumReduce, (F32, F32), [s], (3, 5), P.Reduce(dims=(1,)))
    _check(tables, OpKind.SumReduce, (F32, F32), [s], (3, 1, 5), P.Reduce(dims=(1,), keepdim=True))
    _check(tables, OpKind.MaxReduce, (F32, F32), [s], (), P.Reduce(dims=(0, 1, 2)))
    _check(tables, OpKind.MeanReduce, (F32, F32), [s], (3, 4), P.Reduce(dims=(2,)))
    _check(tables, OpKind.ArgMaxDim, (F32, U32), [s], (3, 4), P.Reduce(dims=(2,)))
    xi = Storage.from_numpy(rng.integers(-50, 50, (6, 3)).astype(np.int32))
    _check(tables, OpKind.MinReduce, (I32, I32), [xi], (3,), P.Reduce(dims=(0,)))


def test_matmul_plain_batched_and_rows(tables, rng):
    a, b = _arr(rng, (6, 4), F32), _arr(rng, (4, 3), F32)
    sa, la = Storage.from_numpy(a)
    sb, lb = Storage.from_numpy(b)
    _check(tables, OpKind.MatMul, (F32,) * 3, [(sa, la), (sb, lb)], (6, 3), P.Matmul((), (), 6, 3, 4))
    bt = Storage.from_numpy(np.ascontiguousarray(b.T))
    _check(tables, OpKind.MatMul, (F32,) * 3, [(sa, la), (bt[0], bt[1].transpose())], (6, 3),
           P.Matmul((), (), 6, 3, 4))
    xa, xb = _arr(rng, (2, 3, 4), F64), _arr(rng, (2, 4, 5), F64)
    _check(tables, OpKind.MatMul, (F64,) * 3, [Storage.from_numpy(xa), Storage.from_numpy(xb)],
           (2, 3, 5), P.Matmul((2,), (2,), 3, 5, 4))
    # Only the first 2 rows are computed; the rest of the output stays zero.
    mlir, _ = tables
    got = _run(mlir, OpKind.MatMul, (F32,) * 3, [(sa, la), (sb, lb)], (6, 3),
               P.Matmul((), (), 6, 3, 4, P.MatmulM.rows(2)))
    np.testing.assert_allclose(got[:2], a[:2] @ b, rtol=1e-5)
    assert not got[2:].any()


def test_cast_log_softmax_cumsum_flip_triu(tables, rng):
    x = _arr(rng, (4, 6), F32) * 10
    s = Storage.from_numpy(x)
    _check(tables, OpKind.Cast, (F32, I32), [s], (4, 6), P.Cast())
    _check(tables, OpKind.Cast, (F32, F64), [s], (4, 6), P.Cast())
    _check(tables, OpKind.LogSoftmaxLastDim, (F32, F32), [s], (4, 6), P.LogSoftmaxLastDim(4, 6))
    _check(tables, OpKind.CumSum, (F32, F32), [s], (4, 6), P.CumSum(4, 6, 1, 1))
    _check(tables, OpKind.Flip, (F32, F32), [s], (4, 6), P.Flip(1, 4, 6, 0))
    _check(tables, OpKind.Triu, (F32, F32), [s], (4, 6), P.Triangular(1, 4, 6, 1))


def test_each_instance_compiles_once_and_warm_precompiles(tables, rng):
    mlir, _ = tables
    kind, dts = OpKind.SubElementwise, (F64, F64, F64)
    lay = Layout.contiguous((7, 3))
    fn = K.warm(kind, dts, [lay, lay, lay], P.NO_PARAMS, 2, target="cpu")
    assert K.warm(kind, dts, [lay] * 3, P.NO_PARAMS, 2, target="cpu") is fn
    compiles = default_cache().stats.compiles
    # Other shapes of the same rank reuse the dynamic-shape kernel: no compile.
    for shape in ((7, 3), (2, 9), (1, 1)):
        a, b = _arr(rng, shape, F64), _arr(rng, shape, F64)
        got = _run(mlir, kind, dts, [Storage.from_numpy(a), Storage.from_numpy(b)], shape, P.NO_PARAMS)
        np.testing.assert_array_equal(got, a - b)
    assert default_cache().stats.compiles == compiles


def test_instance_for_maps_params_and_layouts():
    lay = Layout.contiguous((3, 4))
    inst, lays = K.instance_for(OpKind.SumReduce, (F32, F32), [lay, Layout.contiguous((3, 1))],
                                P.Reduce(dims=(1,), keepdim=True), 1)
    assert (inst.op_name, inst.params, inst.dynamic) == ("SumDim", (("axis", 1),), True)
    assert lays[1].shape == (3,)
    inst, lays = K.instance_for(OpKind.AddElementwise, (F32,) * 3,
                                [lay, Layout.contiguous((4,)), lay], P.NO_PARAMS, 2)
    assert lays[1].stride == (0, 1) and inst.input_types[1].shape == (3, 4)


def test_unsupported_requests_are_typed_errors(tables):
    mlir, _ = tables
    s = Storage.from_numpy(np.ones(4, np.float32))
    with pytest.raises(KernelError, match=r"Affine\(mul=2.0, add=1.0\) is not a single primitive"):
        mlir.lookup(OpKind.Affine, (F32, F32), BackendId.CPU)(
            [s[0]], [Storage.zeros(F32, 4)], [s[1], Layout.contiguous((4,))], P.Affine(mul=2.0, add=1.0))
    with pytest.raises(Exception, match="no kernel for Conv2D"):
        K.register_primitive_kernels(KernelBindingTable(), parse_target("cpu"), kinds=[OpKind.Conv2D])
