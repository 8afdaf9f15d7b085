"""The primitives added from one record each: Atan, Asin, Acos (math dialect,
libm on cpu) and the integer bit ops BitwiseAnd/Or/Xor/Not, BitShiftLeft/Right,
compiled for the cpu (strict: no numpy fallback) against independent
references, and the ONNX node tests of their ops."""
import math

import numpy as np
import pytest

from compiler import Graph, compile
from compiler.errors import GraphBuildError
from compiler.graph.interpret import interpret
from runtime.dtype import DType

TRIG = {"Atan": ("atan", np.arctan), "Asin": ("asin", np.arcsin), "Acos": ("acos", np.arccos)}


def _run(op_method, xs: dict, dtype, arity=1):
    g = Graph()
    ins = [g.input(n, v.shape, dtype) for n, v in xs.items()]
    y = getattr(ins[0], op_method)(*ins[1:])
    g.output(y, name="y")
    return compile(g, "cpu", strict=True)(**xs), g


def _inputs(op, np_dtype):
    eps = np.finfo(np_dtype).eps
    k = np.arange(1, 40)
    near_one = np.concatenate([1 - k * eps / 2, -1 + k * eps / 2, [1.0, -1.0, 0.0, -0.0]])
    grid = np.linspace(-1, 1, 4001)
    x = np.concatenate([near_one, grid, [1e-30, -1e-30, 0.5, -0.5]])
    if op == "Atan":
        big = np.finfo(np_dtype).max
        x = np.concatenate([x, np.linspace(-60, 60, 2001), [1e10, -1e10, 1e30, -1e30, big, -big,
                                                            np.inf, -np.inf]])
    return x.astype(np_dtype)


def _ulps(got, want, np_dtype):
    """|got - want| in units of the spacing of ``want`` rounded to np_dtype."""
    w = want.astype(np_dtype)
    return np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(w)).astype(np.float64)


@pytest.mark.parametrize("op", sorted(TRIG))
@pytest.mark.parametrize("dtype,np_dtype", [("f32", np.float32), ("f64", np.float64)])
def test_inverse_trig_is_accurate_near_one_and_large(op, dtype, np_dtype):
    method, ref = TRIG[op]
    x = _inputs(op, np_dtype)
    got, g = _run(method, {"x": x}, dtype)
    want = ref(x.astype(np.float64))  # f64 libm: <1 ulp of f64, far below f32's
    assert got.dtype == np_dtype
    fin = np.isfinite(want)
    assert _ulps(got[fin], want[fin], np_dtype).max() <= (1.0 if dtype == "f32" else 2.0)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    # the reference interpreter agrees (its numpy formula, computed in the dtype)
    interp = interpret(g, {"x": x})["y"]
    assert _ulps(interp[fin], want[fin], np_dtype).max() <= (0.5 if dtype == "f32" else 2.0)


@pytest.mark.parametrize("op", ["Asin", "Acos"])
def test_asin_acos_outside_the_domain_are_nan(op):
    x = np.array([1.0000001, -1.0000001, 2.0, -3e38, np.inf, -np.inf, np.nan], np.float32)
    got, _ = _run(TRIG[op][0], {"x": x}, "f32")
    assert np.isnan(got).all()


def test_atan_limits_and_signed_zero():
    x = np.array([np.inf, -np.inf, 0.0, -0.0, 3e38], np.float32)
    got, _ = _run("atan", {"x": x}, "f32")
    np.testing.assert_array_equal(got[:2], np.float32([math.pi / 2, -math.pi / 2]))
    assert got[2] == 0 and not np.signbit(got[2]) and got[3] == 0 and np.signbit(got[3])


@pytest.mark.parametrize("op", sorted(TRIG))
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_inverse_trig_half_types_compute_in_f32(op, dtype):
    """f16/bf16 are widened to f32, computed and rounded once: within one ulp
    of the half type from the exact value (near ±1 included)."""
    method, ref = TRIG[op]
    x32 = _inputs(op, np.float32)
    x32 = x32[np.isfinite(x32) & (np.abs(x32) < 6e4)]
    x = x32.astype(np.float16 if dtype == "f16" else pytest.importorskip("ml_dtypes").bfloat16)
    got, g = _run(method, {"x": x}, dtype)
    exact, val = x.astype(np.float64), got.astype(np.float64)
    want = ref(exact)
    mant = 10 if dtype == "f16" else 7
    ulp = np.maximum(2.0 ** (np.floor(np.log2(np.maximum(np.abs(want), 1e-30))) - mant), 2.0 ** -24)
    ok = np.isfinite(want)
    assert (np.abs(val[ok] - want[ok]) <= ulp[ok]).all()
    want_bits = interpret(g, {"x": x})["y"]  # the reference agrees (its storage: bf16 as u16)
    np.testing.assert_array_equal(np.asarray(want_bits).view(np.uint16), got.view(np.uint16))


INT_DTYPES = ["i8", "i16", "i32", "i64", "u8", "u32"]


def _wrap(v: int, bits: int, signed: bool) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def _py_shift(a: int, b: int, bits: int, signed: bool, left: bool) -> int:
    """Independent reference: counts outside [0, bits) shift every bit out."""
    if not 0 <= b < bits:
        return -1 if (not left and a < 0) else 0
    return _wrap(a << b, bits, signed) if left else a >> b


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bitwise_ops_on_every_integer_dtype(dtype):
    npdt = np.dtype(DType(dtype).numpy)
    info = np.iinfo(npdt)
    bits, signed = info.bits, info.min < 0
    rng = np.random.default_rng(7)
    a = np.concatenate([[info.min, info.max, 0, 1, -1 if signed else 2],
                        rng.integers(info.min, info.max, 59, endpoint=True)]).astype(npdt)
    b = rng.integers(info.min, info.max, a.size, endpoint=True).astype(npdt)
    count = np.concatenate([np.arange(-3, bits + 4), rng.integers(0, bits, a.size)])[:a.size]
    count = count.astype(npdt) if signed else np.where(count < 0, info.max, count).astype(npdt)
    ai, bi, ci = (list(map(int, v)) for v in (a, b, count))
    cases = {
        "bitwise_and": (b, [x & y for x, y in zip(ai, bi)]),
        "bitwise_or": (b, [x | y for x, y in zip(ai, bi)]),
        "bitwise_xor": (b, [x ^ y for x, y in zip(ai, bi)]),
        "shift_left": (count, [_py_shift(x, c, bits, signed, True) for x, c in zip(ai, ci)]),
        "shift_right": (count, [_py_shift(x, c, bits, signed, False) for x, c in zip(ai, ci)]),
    }
    for method, (rhs, want) in cases.items():
        got, g = _run(method, {"a": a, "b": rhs}, dtype)
        np.testing.assert_array_equal(got, np.array(want).astype(npdt), err_msg=method)
        np.testing.assert_array_equal(interpret(g, {"a": a, "b": rhs})["y"], got, err_msg=method)
    got, _ = _run("bitwise_not", {"a": a}, dtype)
    np.testing.assert_array_equal(got, np.array([_wrap(~x, bits, signed) for x in ai]).astype(npdt))


def test_operators_and_scalar_operands():
    g = Graph()
    a = g.input("a", (4,), "i32")
    g.output(((a & 6) | (a ^ 1)) + (a << 2) + (a >> 1) + ~a, name="y")
    x = np.array([-5, 0, 7, 2 ** 30], np.int32)
    with np.errstate(over="ignore"):
        want = ((x & 6) | (x ^ 1)) + (x << 2) + (x >> 1) + ~x
    np.testing.assert_array_equal(compile(g, "cpu", strict=True)(a=x), want)


@pytest.mark.parametrize("method,op", [("bitwise_and", "BitwiseAnd"), ("bitwise_xor", "BitwiseXor"),
                                       ("shift_left", "BitShiftLeft"),
                                       ("shift_right", "BitShiftRight")])
def test_a_float_operand_of_a_bit_op_is_a_typed_error(method, op):
    g = Graph()
    x, y = g.input("x", (3,), "f32"), g.input("y", (3,), "f32")
    with pytest.raises(GraphBuildError, match=rf"{op}\(f32\[3\], f32\[3\]\): operand 0 dtype f32 "
                                              r"not supported \(accepted: .*i32.*\); Cast it to "
                                              r"an integer dtype first"):
        getattr(x, method)(y)


def test_float_only_and_int_only_errors_name_the_fix():
    g = Graph()
    with pytest.raises(GraphBuildError, match=r"BitwiseNot\(bf16\[2\]\): .*Cast it to an integer"):
        g.input("h", (2,), "bf16").bitwise_not()
    with pytest.raises(GraphBuildError, match=r"Acos\(i32\[2\]\): .*Cast it to a float dtype"):
        g.input("i", (2,), "i32").acos()


ONNX_OPS = ("test_bitwise_", "test_bitshift_", "test_atan", "test_asin", "test_acos")


def test_onnx_node_tests_of_these_ops_compile_and_pass():
    """The ONNX node tests: every one passes compiled, except those whose
    tensors are u16, which fuelc has no dtype for (refused at import)."""
    pytest.importorskip("onnx")
    from compiler.frontends.onnx.backend import node_cases, run_case
    names = [n for n in sorted(node_cases()) if n.startswith(ONNX_OPS)
             and not n.startswith(("test_atanh", "test_asinh", "test_acosh"))]
    assert len(names) >= 47
    for n in names:
        r = run_case(node_cases()[n], mode="compile")
        if r.status == "refused":
            assert "UINT16" in r.reason, (n, r.reason)
        else:
            assert r.status == "passed", (n, r.reason)
