"""PyTorch/ONNX/numpy conventions the compiled kernels and the reference
interpreter must both follow (each test states the convention as a numpy
formula and checks ``compile(g)`` and ``interpret`` against it)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from runtime.dtype import bf16_to_f32, f32_to_bf16


def _both(g, **inputs):
    """(compiled, interpreted) outputs of a one-output graph."""
    (name,) = g.outputs
    return compile(g)(**inputs), interpret(g, inputs)[name]


# -- bf16 constants inline in the IR (at most 64 elements) --------------------
def test_bf16_splat_constant_compiles():
    g = Graph()
    x = g.input("x", (8,), "bf16")
    g.output(2.5 / x, name="y")
    bits = f32_to_bf16(np.linspace(1, 2, 8, dtype=np.float32))
    got, ref = _both(g, x=bits.view(ml_dtypes.bfloat16))
    want = f32_to_bf16(np.float32(2.5) / bf16_to_f32(bits))
    assert got.dtype == ref.dtype == ml_dtypes.bfloat16
    assert got.view(np.uint16).tolist() == ref.view(np.uint16).tolist() == want.tolist()


def test_bf16_dense_constant_compiles_bit_exact():
    g = Graph()
    x = g.input("x", (2, 4), "bf16")
    c = np.array([[.5, 1.5, np.inf, np.nan], [-0.0, 1e-40, 3, -2]], np.float32)
    g.output(x * g.constant(c, dtype="bf16"), name="y")
    xv = np.ones((2, 4), ml_dtypes.bfloat16)
    got, ref = _both(g, x=xv)
    assert got.view(np.uint16).tolist() == ref.view(np.uint16).tolist() == f32_to_bf16(c).tolist()


# -- powi_backward ----------------------------------------------------------------
@pytest.mark.parametrize("exp", [0, 1, 2, -1])
def test_powi_backward_matches_d_dx_x_pow_n(exp):
    from compiler.registry.builders import powi_backward
    g = Graph()
    x, up = g.input("x", (5,)), g.input("up", (5,))
    g.output(powi_backward(x, up, exp), name="y")
    xv = np.array([0.0, 1.0, -2.0, 0.5, 3.0], np.float32)
    uv = np.array([1.0, 2.0, 0.5, -1.0, 1.0], np.float32)
    got, ref = _both(g, x=xv, up=uv)
    with np.errstate(divide="ignore"):  # d/dx x^n = n x^(n-1), and 0 for n = 0
        want = np.zeros(5, np.float32) if exp == 0 else exp * xv ** np.float32(exp - 1) * uv
    np.testing.assert_allclose(ref, want, rtol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6)


# -- integer scalars: wrap like numpy, refuse what the dtype cannot hold --------------
@pytest.mark.parametrize("dtype,op,value", [
    ("u8", "AddScalar", -3), ("u8", "AddScalar", 300), ("i8", "AddScalar", 128),
    ("i8", "MulScalar", 200), ("u32", "AddScalar", -1), ("i32", "MulScalar", -(2 ** 31) - 1),
])
def test_integer_scalar_params_wrap_in_kernel_and_interpreter(dtype, op, value):
    g = Graph()
    x = g.input("x", (6,), dtype)
    g.output(g.add_node(op, [x], {"value": value}), name="y")
    npd = np.dtype({"u8": np.uint8, "i8": np.int8, "u32": np.uint32, "i32": np.int32}[dtype])
    info = np.iinfo(npd)
    xv = np.array([info.min, info.max, 0, 1, 2, 100], dtype=npd)
    # numpy's modular arithmetic: the scalar taken modulo 2^bits, then the op wraps
    c = np.array(value % (1 << (8 * npd.itemsize)), dtype=np.uint64).astype(npd)
    want = (xv + c) if op == "AddScalar" else (xv * c)
    got, ref = _both(g, x=xv)
    assert ref.tolist() == want.tolist()
    assert got.tolist() == want.tolist()


def test_builder_subtracting_scalars_on_unsigned_wraps():
    g = Graph()
    x = g.input("x", (3,), "u8")
    g.output(x - 3, name="y")
    xv = np.array([0, 2, 200], np.uint8)
    got, ref = _both(g, x=xv)
    assert got.tolist() == ref.tolist() == (xv - np.uint8(3)).tolist()


def test_clamp_bounds_saturate_in_kernel_and_interpreter():
    g = Graph()
    x = g.input("x", (4,), "u8")
    g.output(g.add_node("Clamp", [x], {"min": -5, "max": 1000}), name="y")
    xv = np.array([0, 1, 128, 255], np.uint8)
    got, ref = _both(g, x=xv)
    assert got.tolist() == ref.tolist() == xv.tolist()


@pytest.mark.parametrize("build,match", [
    (lambda x: x + 300, r"AddScalar\(u8\[3\]\).*300.*u8"),
    (lambda x: x - 256, r"AddScalar\(u8\[3\]\).*256.*u8"),
    (lambda x: x * -1, r"MulScalar\(u8\[3\]\).*-1.*u8"),
    (lambda x: x / 1000, r"Div\(u8\[3\]\).*1000.*u8"),
    (lambda x: x.masked_fill(x > 1, 256), r"MaskedFill.*256.*u8"),
    (lambda x: x.pad(1, value=-1), r"Pad\(u8\[3\]\).*-1.*u8"),
    (lambda x: __import__("compiler").graph.graph.where(x > 1, x, 999), r"Where.*999.*u8"),
    (lambda x: x + 1.5, r"AddScalar\(u8\[3\]\).*1.5.*u8"),
])
def test_builder_refuses_scalars_the_dtype_cannot_hold(build, match):
    from compiler.errors import GraphBuildError
    g = Graph()
    x = g.input("x", (3,), "u8")
    with pytest.raises(GraphBuildError, match=match):
        build(x)


# -- pow: IEEE 754 pow for the op, numpy's/PyTorch's sqrt for `x ** 0.5` -----------
_BASES = [-np.inf, -3.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 3.0, np.inf, np.nan]
_EXPS = [0.5, 3.0, -3.0, 2.0, -2.0, -1.0, 1 / 3, -0.5, 0.0, -0.0, 1.0, 2.5, np.inf, -np.inf,
         np.nan]


def _ieee_pow_table(a, b):
    """C99 Annex F pow on the special values, as a numpy formula per case."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    out = np.empty(a.shape)
    for i, (x, y) in enumerate(zip(a.ravel(), b.ravel())):
        odd = np.isfinite(y) and y == np.trunc(y) and y % 2 == 1
        if y == 0 or x == 1:
            r = 1.0
        elif np.isnan(x) or np.isnan(y):
            r = np.nan
        elif x == 0:
            mag = np.inf if y < 0 else 0.0
            r = np.copysign(mag, x) if odd else mag
        elif np.isneginf(x):
            mag = 0.0 if y < 0 else np.inf
            r = -mag if odd else mag
        elif np.isinf(y):
            r = (np.inf if y > 0 else 0.0) if abs(x) > 1 else \
                (1.0 if abs(x) == 1 else (0.0 if y > 0 else np.inf))
        elif x < 0 and y != np.trunc(y):
            r = np.nan
        else:
            r = float(np.power(x, y))
        out.ravel()[i] = r
    return out


def _assert_same_specials(got, want, rtol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert (np.isnan(got) == np.isnan(want)).all(), (got, want)
    ok = ~np.isnan(want)
    assert (np.signbit(got[ok]) == np.signbit(want[ok])).all(), (got, want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=rtol)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_pow_is_ieee_pow_on_special_values(dtype):
    npd = np.float32 if dtype == "f32" else np.float64
    a, b = (np.array(v, npd) for v in zip(*[(x, y) for x in _BASES for y in _EXPS]))
    g = Graph()
    g.output(g.input("a", a.shape, dtype) ** g.input("b", b.shape, dtype), name="y")
    got, ref = _both(g, a=a, b=b)
    want = _ieee_pow_table(a, b)
    _assert_same_specials(ref, want, 1e-6)
    _assert_same_specials(got, want, 1e-6)


@pytest.mark.parametrize("e", [e for e in _EXPS if e != 0.5])
def test_pow_by_a_float_constant_is_ieee_pow(e):
    a = np.array(_BASES, np.float32)
    g = Graph()
    g.output(g.input("a", a.shape, "f32") ** e, name="y")
    got, ref = _both(g, a=a)
    want = _ieee_pow_table(a, e)
    _assert_same_specials(ref, want, 1e-6)
    _assert_same_specials(got, want, 1e-6)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_pow_one_half_is_numpy_and_torch_sqrt(dtype):
    npd = np.float32 if dtype == "f32" else np.float64
    a = np.array(_BASES, npd)
    g = Graph()
    g.output(g.input("a", a.shape, dtype) ** 0.5, name="y")
    got, ref = _both(g, a=a)
    with np.errstate(invalid="ignore"):
        want = a ** 0.5  # numpy (and PyTorch) take sqrt: NaN at -inf, -0 at -0
    _assert_same_specials(ref, want, 0)
    _assert_same_specials(got, want, 0)
    assert np.signbit(got[4]) and np.isnan(got[0])


# -- Rem on floats: the divisor's sign, as numpy.mod / torch.remainder / ONNX Mod --------
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_float_rem_follows_numpy_mod_on_special_values(dtype):
    vals = np.array([5, -5, 0, -0.0, np.inf, -np.inf, np.nan, 3.5, -3.5, 1e-30])
    a, b = (v.ravel().astype(dtype.replace("f", "float")) for v in np.meshgrid(vals, vals))
    g = Graph()
    g.output(g.add_node("Rem", [g.input("a", a.shape, dtype), g.input("b", b.shape, dtype)]),
             name="r")
    got, ref = _both(g, a=a, b=b)
    with np.errstate(all="ignore"):
        want = np.mod(a, b)  # e.g. 5 % inf = 5, -5 % inf = inf, -4 % 2 = +0, 4 % -2 = -0
    for out in (got, ref):
        np.testing.assert_array_equal(out, want)
        finite = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(out[finite]), np.signbit(want[finite]))
