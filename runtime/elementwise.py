"""The element-wise primitives' runtime facts: one row per op.

A row holds what the runtime needs to know about an element-wise primitive
(``compiler.graph.ops`` holds the rest of its record): the numpy formula the
reference kernel and the reference interpreter compute, the dtypes the numpy
kernel is registered for, and the cost family of the static cost model. The
op's dispatch kind is ``OpKind[<name>Elementwise]``: a name not yet among the
fixed kinds of ``runtime/opkind.py`` is appended there from this table, in
table order (so new rows go at the end of their dict).

This module imports no other runtime module that depends on ``OpKind``
(``opkind`` reads it), and ``runtime/`` never imports ``compiler``: the
completeness test (``tests/graph/test_completeness.py``) checks that every
element-wise row of the op table has a row here and that they agree.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from .dtype import DType

D = DType
FLOATS = (D.F16, D.F32, D.F64)
INTS = (D.I32, D.I64)
NUMERIC = FLOATS + INTS
BITS = INTS + (D.U8, D.U32)  # the integer dtypes the numpy kernels store

#: Cost families (``runtime.cost``): a cheap op (one instruction or so per
#: element), a transcendental (a libm call or a polynomial: ~10), a binary op.
COST_FAMILIES = ("cheap", "transcendental", "binary")


@dataclasses.dataclass(frozen=True)
class Row:
    formula: Callable       # numpy arrays in (f16 widened to f32), the result out
    dtypes: tuple           # the numpy kernel's dtypes
    cost: str               # one of COST_FAMILIES

    def __post_init__(self):
        if self.cost not in COST_FAMILIES:
            raise ValueError(f"cost family {self.cost!r} is not one of {COST_FAMILIES}")


_ERF = np.vectorize(math.erf, otypes=[np.float64])


# -- formulas (also the reference interpreter's: one formula per op) ---------------
def divide(a, b):
    """Division: floats IEEE; integers truncate toward zero and ``x / 0`` is 0."""
    if not np.issubdtype(a.dtype, np.integer):
        return a / b
    safe = np.where(b == 0, 1, b)
    q = a // safe  # floor, moved toward zero (abs() would wrap the most negative value)
    q = np.where((np.mod(a, safe) != 0) & ((a < 0) != (safe < 0)), q + 1, q)
    return np.where(b == 0, 0, q).astype(a.dtype)


def remainder(a, b):
    """The remainder with the divisor's sign (numpy ``mod``, PyTorch
    ``remainder``, ONNX ``Mod`` with fmod=0): ``x % inf`` is x for x >= 0;
    integers: ``x % 0`` is 0."""
    if np.issubdtype(a.dtype, np.integer):
        safe = np.where(b == 0, 1, b)
        return np.where(b == 0, 0, np.mod(a, safe)).astype(a.dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.mod(a, b).astype(a.dtype)


def erf(x):
    return _ERF(x.astype(np.float64)).astype(x.dtype)


def sigmoid(x):
    # two-branch form: no overflow in exp for large |x|
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


def gelu_tanh(x):
    c = x.dtype.type(math.sqrt(2.0 / math.pi))
    inner = c * (x + x.dtype.type(0.044715) * x * x * x)
    return (x.dtype.type(0.5) * x * (1 + np.tanh(inner))).astype(x.dtype)


def gelu_erf(x):
    return (x.dtype.type(0.5) * x * (1 + erf(x / x.dtype.type(math.sqrt(2.0))))).astype(x.dtype)


def ieee_pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE 754 / C99 ``pow`` element-wise, whatever the operands' strides.
    ``np.power`` takes ``sqrt`` when the exponent is a broadcast 0.5, which
    differs from ``pow`` at -0 (sqrt: -0, pow: +0) and -inf (sqrt: NaN, pow:
    +inf); those two cases are set to pow's values."""
    with np.errstate(all="ignore"):
        out = np.asarray(np.power(a, b))
    half = np.asarray(b) == 0.5
    out = np.where(half & (a == 0), out.dtype.type(0), out)
    return np.where(half & np.isneginf(a), out.dtype.type(np.inf), out).astype(out.dtype)


def shift_left(a, b):
    """``a << b`` wrapping in a's width; a count outside [0, width) gives 0."""
    bits = 8 * a.dtype.itemsize
    out = b.astype(np.uint64) >= bits  # a negative count is out of range too
    return np.where(out, 0, a << np.where(out, 0, b).astype(a.dtype)).astype(a.dtype)


def shift_right(a, b):
    """``a >> b``: logical for unsigned, arithmetic (sign fill) for signed a;
    a count outside [0, width) shifts every bit out (0, or -1 for a negative
    signed a)."""
    bits = 8 * a.dtype.itemsize
    count = np.where(b.astype(np.uint64) >= bits, bits - 1, b).astype(a.dtype)
    shifted = a >> count
    if a.dtype.kind == "u":
        return np.where(b.astype(np.uint64) >= bits, 0, shifted).astype(a.dtype)
    return shifted.astype(a.dtype)


def _relu(x):
    if np.issubdtype(x.dtype, np.integer):
        return np.where(x > 0, x, np.zeros_like(x))
    return np.maximum(x, x.dtype.type(0))


def _in_f64(fn):
    """``fn`` evaluated in f64 and rounded once to x's type: numpy's f32 loops
    of arcsin and friends are ~2 ulp off; the oracle must beat the kernels."""
    return lambda x: fn(x.astype(np.float64)).astype(x.dtype)


def _keep_int(fn):
    """Rounding that is the identity on integers (floor/ceil/round)."""
    return lambda x: x if x.dtype.kind in "iu" else fn(x)


R = Row
#: name -> Row: element-wise binary primitives (operands of one dtype).
BINARY = {
    "Add": R(np.add, NUMERIC, "binary"),
    "Sub": R(np.subtract, NUMERIC, "binary"),
    "Mul": R(np.multiply, NUMERIC, "binary"),
    "Div": R(divide, NUMERIC, "binary"),
    "Maximum": R(np.maximum, NUMERIC, "binary"),
    "Minimum": R(np.minimum, NUMERIC, "binary"),
    "Pow": R(ieee_pow, FLOATS, "binary"),
    "Rem": R(remainder, NUMERIC, "binary"),
    # appended kinds (OpKind 119 on)
    "BitwiseAnd": R(np.bitwise_and, BITS, "binary"),
    "BitwiseOr": R(np.bitwise_or, BITS, "binary"),
    "BitwiseXor": R(np.bitwise_xor, BITS, "binary"),
    "BitShiftLeft": R(shift_left, BITS, "binary"),
    "BitShiftRight": R(shift_right, BITS, "binary"),
}

#: name -> Row: element-wise unary primitives.
UNARY = {
    "Relu": R(_relu, NUMERIC, "cheap"),
    "Neg": R(np.negative, NUMERIC, "cheap"),
    "Sqr": R(lambda x: x * x, NUMERIC, "cheap"),
    "Sqrt": R(np.sqrt, FLOATS, "cheap"),
    "Recip": R(lambda x: x.dtype.type(1) / x, FLOATS, "cheap"),
    "Abs": R(np.abs, NUMERIC, "cheap"),
    "Tanh": R(np.tanh, FLOATS, "transcendental"),
    "Exp": R(np.exp, FLOATS, "transcendental"),
    "Log": R(np.log, FLOATS, "transcendental"),
    "Sin": R(np.sin, FLOATS, "transcendental"),
    "Cos": R(np.cos, FLOATS, "transcendental"),
    "Sigmoid": R(sigmoid, FLOATS, "transcendental"),
    "Silu": R(lambda x: (x * sigmoid(x)).astype(x.dtype), FLOATS, "transcendental"),
    "Gelu": R(gelu_tanh, FLOATS, "transcendental"),
    "GeluErf": R(gelu_erf, FLOATS, "transcendental"),
    "Step": R(lambda x: (x > 0).astype(x.dtype), NUMERIC, "cheap"),
    "Erf": R(erf, FLOATS, "transcendental"),
    "Floor": R(_keep_int(np.floor), FLOATS, "cheap"),
    "Ceil": R(_keep_int(np.ceil), FLOATS, "cheap"),
    "Round": R(_keep_int(np.rint), FLOATS, "cheap"),
    "Sign": R(np.sign, NUMERIC, "cheap"),
    "Rsqrt": R(lambda x: x.dtype.type(1) / np.sqrt(x), FLOATS, "transcendental"),
    # appended kinds
    "Atan": R(_in_f64(np.arctan), FLOATS, "transcendental"),
    "Asin": R(_in_f64(np.arcsin), FLOATS, "transcendental"),
    "Acos": R(_in_f64(np.arccos), FLOATS, "transcendental"),
    "BitwiseNot": R(np.invert, BITS, "cheap"),
}

ROWS = {**BINARY, **UNARY}


def kind_name(op: str) -> str:
    """The ``OpKind`` name of element-wise primitive ``op``."""
    return f"{op}Elementwise"
