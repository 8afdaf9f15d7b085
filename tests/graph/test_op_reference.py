"""Every op's numpy reference against hand-computed values or an independent
numpy/math computation, over several shapes (rank 0, size-1 axes) and dtypes.
Tolerances: f64 1e-12, f32 1e-6 relative, f16 1e-3, bf16 1e-2 (one rounding
of the output)."""
import math

import numpy as np
import pytest

from compiler.graph import OP_TABLE, check_params
from runtime.dtype import DType, bf16_to_f32, f32_to_bf16

RTOL = {DType.F64: 1e-12, DType.F32: 1e-6, DType.F16: 1e-3, DType.BF16: 1e-2}
SHAPES = [(), (1,), (3, 1), (2, 3, 4)]
RNG = np.random.default_rng(0)


def ref(op, *inputs, **params):
    opdef = OP_TABLE[op]
    return opdef.reference(list(inputs), check_params(opdef, params))


def store(values, dtype):
    """float values -> storage array of dtype."""
    v = np.asarray(values, dtype=np.float64)
    if dtype == DType.BF16:
        return f32_to_bf16(v.astype(np.float32)).reshape(v.shape)
    return v.astype(dtype.numpy)


def load(arr, dtype):
    return bf16_to_f32(arr).astype(np.float64) if dtype == DType.BF16 else \
        np.asarray(arr, dtype=np.float64)


def close(got, want, dtype):
    assert got.dtype == dtype.storage_numpy
    np.testing.assert_allclose(load(got, dtype), want, rtol=RTOL[dtype], atol=RTOL[dtype])


erf = np.vectorize(math.erf)
UNARY = {
    "Neg": lambda x: -x, "Sqr": lambda x: x * x, "Sqrt": np.sqrt, "Rsqrt": lambda x: 1 / np.sqrt(x),
    "Recip": lambda x: 1 / x, "Abs": np.abs, "Exp": np.exp, "Log": np.log, "Sin": np.sin,
    "Cos": np.cos, "Tanh": np.tanh, "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Silu": lambda x: x / (1 + np.exp(-x)),
    "Gelu": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "GeluErf": lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))),
    "Relu": lambda x: np.maximum(x, 0), "Step": lambda x: (x > 0) * 1.0, "Erf": erf,
    "Floor": np.floor, "Ceil": np.ceil, "Sign": np.sign,
}
POSITIVE = {"Sqrt", "Rsqrt", "Log", "Recip"}


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64, DType.F16, DType.BF16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_float(op, shape, dtype):
    x = RNG.uniform(0.1, 3, shape) if op in POSITIVE else RNG.uniform(-3, 3, shape)
    xs = store(x, dtype)
    close(ref(op, xs), UNARY[op](load(xs, dtype)), dtype)


def test_unary_special_values():
    x = np.array([-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, -0.0], np.float32)
    np.testing.assert_array_equal(ref("Round", x), [-2, -2, -0, 0, 0, 2, 2, 0])  # half-even
    np.testing.assert_array_equal(ref("Sign", x), [-1, -1, -1, 0, 1, 1, 1, 0])  # sign(0)=0
    np.testing.assert_array_equal(ref("Step", x), [0, 0, 0, 0, 1, 1, 1, 0])
    big = np.array([-100.0, 100.0], np.float32)
    np.testing.assert_allclose(ref("Sigmoid", big), [0.0, 1.0], atol=1e-40)  # no inf/NaN


def test_unary_integer():
    x = np.array([-3, 0, 5], np.int32)
    np.testing.assert_array_equal(ref("Neg", x), [3, 0, -5])
    np.testing.assert_array_equal(ref("Abs", x), [3, 0, 5])
    np.testing.assert_array_equal(ref("Relu", x), [0, 0, 5])
    np.testing.assert_array_equal(ref("Sign", x), [-1, 0, 1])
    np.testing.assert_array_equal(ref("Round", x), x)
    np.testing.assert_array_equal(ref("Sqr", np.array([16], np.uint8)), [0])  # wraps
    assert ref("Neg", x).dtype == np.int32


BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
          "Maximum": np.maximum, "Minimum": np.minimum, "Pow": np.power,
          "Rem": lambda a, b: a - np.floor(a / b) * b}


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64, DType.F16, DType.BF16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_float(op, shape, dtype):
    a = store(RNG.uniform(0.5, 3, shape) if op == "Pow" else RNG.uniform(-3, 3, shape), dtype)
    b = store(RNG.uniform(0.5, 2, shape) * RNG.choice([-1, 1], shape), dtype)
    got = ref(op, a, b)
    want = BINARY[op](load(a, dtype), load(b, dtype))
    if op == "Rem" and dtype != DType.F64:
        # a/b rounds in the compute dtype before floor: compare in f32 math
        af, bf = load(a, dtype).astype(np.float32), load(b, dtype).astype(np.float32)
        want = (af - np.floor(af / bf) * bf).astype(np.float64)
    close(got, want, dtype)


def test_rem_and_div_sign_conventions():
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([3, 3, -3, -3], np.int32)
    np.testing.assert_array_equal(ref("Rem", a, b), [1, 2, -2, -1])  # divisor's sign
    np.testing.assert_array_equal(ref("Div", a, b), [2, -2, -2, 2])  # truncation
    af, bf = a.astype(np.float32), b.astype(np.float32)
    np.testing.assert_array_equal(ref("Rem", af, bf), [1, 2, -2, -1])
    np.testing.assert_array_equal(ref("Div", np.array([5], np.uint8), np.array([0], np.uint8)), [0])


def test_maximum_propagates_nan():
    a = np.array([np.nan, 1.0], np.float32)
    b = np.array([0.0, np.nan], np.float32)
    assert np.isnan(ref("Maximum", a, b)).all()


def test_scalar_ops():
    x = np.array([[-2.0, 0.5, 3.0]], np.float32)
    np.testing.assert_array_equal(ref("AddScalar", x, value=1.5), x + 1.5)
    np.testing.assert_array_equal(ref("MulScalar", x, value=-2), x * -2)
    np.testing.assert_array_equal(ref("Clamp", x, min=-1, max=1), [[-1, 0.5, 1]])
    np.testing.assert_allclose(ref("PowI", x, n=3), x ** 3)
    np.testing.assert_allclose(ref("PowI", x, n=-2), x ** -2.0, rtol=1e-6)
    np.testing.assert_array_equal(ref("PowI", x, n=0), np.ones_like(x))
    u = np.array([1, 200], np.uint8)
    np.testing.assert_array_equal(ref("AddScalar", u, value=-3), [254, 197])  # wraps
    np.testing.assert_array_equal(ref("Clamp", u, min=-5, max=100), [1, 100])
    h = store([1.0, 2.0], DType.BF16)
    close(ref("MulScalar", h, value=0.5), [0.5, 1.0], DType.BF16)


@pytest.mark.parametrize("dtype", [DType.F32, DType.F16, DType.BF16, DType.I32])
def test_comparisons(dtype):
    a = store([1, 2, 3, 4], dtype)
    b = store([2, 2, 2, 5], dtype)
    exp = {"Equal": [0, 1, 0, 0], "Ne": [1, 0, 1, 1], "Lt": [1, 0, 0, 1],
           "Le": [1, 1, 0, 1], "Gt": [0, 0, 1, 0], "Ge": [0, 1, 1, 0]}
    for op, want in exp.items():
        got = ref(op, a, b)
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, want)


def test_comparisons_nan():
    n = np.array([np.nan, np.nan, 1.0], np.float32)
    m = np.array([np.nan, 1.0, np.nan], np.float32)
    for op in ("Equal", "Lt", "Le", "Gt", "Ge"):
        np.testing.assert_array_equal(ref(op, n, m), [0, 0, 0])
    np.testing.assert_array_equal(ref("Ne", n, m), [1, 1, 1])


def test_where_and_masked_fill():
    c = np.array([1, 0, 7], np.uint8)
    a = store([1.0, 2.0, 3.0], DType.BF16)
    b = store([-1.0, -2.0, -3.0], DType.BF16)
    close(ref("Where", c, a, b), [1, -2, 3], DType.BF16)
    x = np.arange(3, dtype=np.int32)
    np.testing.assert_array_equal(ref("MaskedFill", x, c, value=-9), [-9, 1, -9])
    close(ref("MaskedFill", a, c, value=0.5), [0.5, 2, 0.5], DType.BF16)


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64, DType.F16, DType.BF16])
@pytest.mark.parametrize("shape", [(1,), (3, 1), (2, 3, 4)])
def test_reductions(shape, dtype):
    xs = store(RNG.uniform(-2, 2, shape), dtype)
    x = load(xs, dtype)
    for kind, fn in (("Sum", np.sum), ("Max", np.max), ("Min", np.min), ("Mean", np.mean)):
        got = ref(f"{kind}All", xs)
        assert got.shape == ()
        close(got, fn(x), dtype)
        for axis in range(len(shape)):
            close(ref(f"{kind}Dim", xs, axis=axis), fn(x, axis=axis), dtype)
    for axis in range(len(shape)):
        np.testing.assert_array_equal(ref("ArgMaxDim", xs, axis=axis), np.argmax(x, axis))
        np.testing.assert_array_equal(ref("ArgMinDim", xs, axis=axis), np.argmin(x, axis))
        assert ref("ArgMaxDim", xs, axis=axis).dtype == np.uint32
        close(ref("CumSum", xs, axis=axis), np.cumsum(x, axis), dtype)


def test_reduce_rank0_and_ints():
    assert ref("SumAll", np.array(2.5, np.float32)) == 2.5
    assert ref("SumAll", np.zeros((0,), np.float32)) == 0
    x = np.array([[100, 100], [100, 100]], np.uint8)
    assert ref("SumAll", x) == 144  # wraps in u8
    assert ref("SumDim", x, axis=0).dtype == np.uint8
    np.testing.assert_array_equal(ref("ArgMaxDim", np.array([1, 3, 3], np.int32), axis=0), 1)


def test_reduce_to():
    x = RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(ref("ReduceSumTo", x, shape=(3, 1)), x.sum((0, 2))[:, None],
                               rtol=1e-6)
    np.testing.assert_allclose(ref("ReduceSumTo", x, shape=(1, 3, 4)), x.sum(0, keepdims=True),
                               rtol=1e-6)
    np.testing.assert_array_equal(ref("ReduceMaxTo", x, shape=(2, 1, 1)),
                                  x.max((1, 2), keepdims=True))
    np.testing.assert_allclose(ref("ReduceSumTo", x, shape=()), x.sum(), rtol=1e-6)
    np.testing.assert_array_equal(ref("ReduceSumTo", x, shape=(2, 3, 4)), x)


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64, DType.F16, DType.BF16])
def test_matmul(dtype):
    a = store(RNG.uniform(-1, 1, (2, 4, 3)), dtype)
    b = store(RNG.uniform(-1, 1, (2, 3, 5)), dtype)
    close(ref("MatMul", a, b), load(a, dtype) @ load(b, dtype), dtype)


def test_matmul_gqa_and_mixed():
    q = RNG.uniform(-1, 1, (1, 4, 2, 3)).astype(np.float32)
    k = RNG.uniform(-1, 1, (1, 2, 3, 5)).astype(np.float32)
    got = ref("MatMul", q, k)
    for h in range(4):  # query head h reads kv head h // 2
        np.testing.assert_allclose(got[0, h], q[0, h] @ k[0, h // 2], rtol=1e-5)
    kb = f32_to_bf16(k)
    got = ref("MatMul", q, kb)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got[0, 3], q[0, 3] @ bf16_to_f32(kb)[0, 1], rtol=1e-5)


def test_layout_ops():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(ref("Transpose", x), x.swapaxes(1, 2))
    np.testing.assert_array_equal(ref("Permute", x, perm=(2, 0, 1)), x.transpose(2, 0, 1))
    np.testing.assert_array_equal(ref("Reshape", x, shape=(4, 6)), x.reshape(4, 6))
    np.testing.assert_array_equal(ref("BroadcastTo", x[:, :1], shape=(5, 2, 3, 4)),
                                  np.broadcast_to(x[:, :1], (5, 2, 3, 4)))
    np.testing.assert_array_equal(ref("Unsqueeze", x, dim=3), x[..., None])
    np.testing.assert_array_equal(ref("Squeeze", x[:, :1], dim=1), x[:, 0])
    np.testing.assert_array_equal(ref("Slice", x, dim=2, start=1, len=2), x[:, :, 1:3])
    np.testing.assert_array_equal(ref("Flip", x, dim=1), x[:, ::-1])
    np.testing.assert_array_equal(ref("Roll", x, dim=2, shift=-1), np.roll(x, -1, 2))
    np.testing.assert_array_equal(ref("Roll", x, dim=2, shift=1)[..., 0], x[..., 3])
    np.testing.assert_array_equal(ref("Triu", x, diagonal=1), np.triu(x, 1))
    np.testing.assert_array_equal(ref("Tril", x, diagonal=-1), np.tril(x, -1))
    np.testing.assert_array_equal(ref("Concat", x, x[:, :1], dim=1),
                                  np.concatenate([x, x[:, :1]], 1))
    p = ref("Pad", x, padding=(0, 0, 1, 0, 0, 2), value=-1)
    np.testing.assert_array_equal(p, np.pad(x, [(0, 0), (1, 0), (0, 2)], constant_values=-1))
    np.testing.assert_array_equal(
        ref("PadBackward", p, in_shape=(2, 3, 4), padding=(0, 0, 1, 0, 0, 2)), x)
    c = ref("Contiguize", x.swapaxes(1, 2))
    assert c.flags.c_contiguous
    np.testing.assert_array_equal(ref("Iota", len=4), [0, 1, 2, 3])
    assert ref("Iota", len=4).dtype == np.float32


def test_pad_bf16_value():
    x = store([1.0, 2.0], DType.BF16)
    close(ref("Pad", x, padding=(1, 1), value=0.25), [0.25, 1, 2, 0.25], DType.BF16)


def test_cast():
    x = np.array([-1.7, -0.5, 0.5, 2.5, 300.0, np.nan, -1e10], np.float32)
    np.testing.assert_array_equal(ref("Cast", x, dtype="i32"),
                                  [-1, 0, 0, 2, 300, 0, np.iinfo(np.int32).min])
    np.testing.assert_array_equal(ref("Cast", x, dtype="u8"), [0, 0, 0, 2, 255, 0, 0])
    np.testing.assert_array_equal(ref("Cast", np.array([257, -1], np.int32), dtype="u8"),
                                  [1, 255])
    b = ref("Cast", np.array([1.0, 1.00390625, 3.0], np.float32), dtype="bf16")
    assert b.dtype == np.uint16
    np.testing.assert_array_equal(bf16_to_f32(b), [1.0, 1.0, 3.0])  # half to even
    np.testing.assert_array_equal(ref("Cast", b, dtype="f32"), [1.0, 1.0, 3.0])
    np.testing.assert_array_equal(ref("Cast", np.array([1, 0], np.uint8), dtype="f16"), [1, 0])
    assert ref("Cast", x, dtype="f32") is x


def test_indexing():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([2, 0, 2], np.uint32)
    np.testing.assert_array_equal(ref("IndexSelect", x, idx, dim=0), x[[2, 0, 2]])
    np.testing.assert_array_equal(ref("IndexSelect", x, idx, dim=1), x[:, [2, 0, 2]])
    g = np.array([[3, 0], [1, 1], [0, 2]], np.uint32)
    np.testing.assert_array_equal(ref("Gather", x, g, dim=1), [[3, 0], [5, 5], [8, 10]])
    g0 = np.array([[2, 0]], np.uint32)  # idx extent < data extent on the other axis
    np.testing.assert_array_equal(ref("Gather", x, g0, dim=0), [[8, 1]])
    base = np.zeros((3, 2), np.float32)
    src = np.ones((3, 2), np.float32)
    np.testing.assert_array_equal(ref("IndexAdd", base, idx, src, dim=0),
                                  [[1, 1], [0, 0], [2, 2]])
    sidx = np.array([[0, 2], [0, 0]], np.uint32)
    np.testing.assert_array_equal(
        ref("ScatterAdd", base, sidx, np.array([[1, 2], [3, 4]], np.float32), dim=0),
        [[4, 4], [0, 0], [0, 2]])
    with pytest.raises(IndexError, match="index 5 out of range"):
        ref("IndexSelect", x, np.array([5], np.uint32), dim=0)


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64, DType.F16, DType.BF16])
@pytest.mark.parametrize("shape", [(1,), (3, 1), (2, 3, 5)])
def test_log_softmax(shape, dtype):
    xs = store(RNG.uniform(-3, 3, shape), dtype)
    x = load(xs, dtype)
    want = x - x.max(-1, keepdims=True)
    want = want - np.log(np.exp(want).sum(-1, keepdims=True))
    y = ref("LogSoftmaxLastDim", xs)
    close(y, want, dtype)
    gs = store(RNG.uniform(-1, 1, shape), dtype)
    g = load(gs, dtype)
    close(ref("LogSoftmaxLastDimBackward", y, gs),
          g - np.exp(load(y, dtype)) * g.sum(-1, keepdims=True), dtype)
