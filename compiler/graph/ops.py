"""The primitive op table: ``OP_TABLE[name] -> OpDef``.

Every fact about a primitive op lives in its row here: mnemonic, arity,
params, category, dispatch kind, the shape/dtype rule (``infer``), the numpy
reference (``reference``), commutativity, recipe eligibility, precision class
and builder methods. An element-wise row's numpy formula, kernel dtypes, cost
family and ``OpKind`` are its runtime row's (``runtime/elementwise.py``;
``runtime`` cannot import this table); ``tests/graph/test_completeness.py``
checks the two agree and that no fact is missing. See ``compiler.graph.opdef`` for the record
and ``compiler.graph.numerics`` for the reference's numeric conventions.

Shape/dtype rules: element-wise binary ops need identical
shapes and dtypes (the builder in ``compiler.graph.graph`` inserts
``BroadcastTo`` for numpy-style broadcasting, once, centrally); there is no
implicit dtype promotion. Axis params are absolute (``0 <= axis < rank``);
the builder normalizes negative axes before a node is made.

Conventions stated once (``docs/architecture.md``: this table is the one source
of truth for the primitives):

* ``Input`` (a graph parameter; params ``name, shape, dtype``) is a leaf of
  this table so that every node's ``op`` is a key of ``OP_TABLE`` or
  ``"Fused"``. It has no dialect op of its own meaning: it is a function
  argument.
* ``Const`` params are ``name, shape, dtype``; the payload lives in
  ``Graph.constants[name]``, not in params.
* Float-only ops (``FLOAT_ONLY`` below: transcendental math, Pow, Mean,
  MatMul, the softmax family) reject integer operands instead of promoting.
* Integer ``Div`` truncates toward zero (like ``arith.divsi``/``divui``);
  integer ``Rem`` is a − floor(a/b)·b (the divisor's sign).
  Integer division by zero is undefined in compiled code; the reference
  yields 0.
* ``Ne`` is IEEE "unordered or not equal": true whenever an operand is NaN
  (so Ne(NaN, NaN) = 1); every other comparison is false on NaN.
* ``Maximum``/``Minimum``/``MaxDim``/``MaxAll``... propagate NaN.
* ``ArgMaxDim``/``ArgMinDim`` return the first index of the extreme value.
* ``Pow`` is IEEE 754 / C99 pow in every engine (pow(-0, 0.5) = +0,
  pow(-inf, 0.5) = +inf, pow(x, ±0) = 1, pow(1, NaN) = 1).
* ``PowI(n)`` multiplies by repeated squaring (as the kernels do); n < 0 takes the
  reciprocal (floats only); n = 0 gives ones.
* ``Cast`` float→int truncates toward zero and saturates (NaN → 0); int→int
  wraps; to float rounds to nearest even.
* Scalar params (AddScalar, MulScalar, Clamp, MaskedFill) on integer tensors
  must be integral. They are of kind ``num``: a python int stays an exact int
  through the attribute, the kernel's OpParams, the lowering and this
  reference (``x + (2**53 + 1)`` on i64 adds exactly that), a float a float.
"""
from __future__ import annotations

import math
import re
from typing import Callable, Optional, Sequence

import numpy as np

from runtime.dtype import DType
from runtime import elementwise as EW
from runtime.opkind import OpKind

from ..errors import GraphBuildError, UnsupportedOpError
from .numerics import (FLOATS, INTS, NUMERIC, cast_to_int, dtype_of,
                       from_compute, scalar_storage, to_compute)
from .opdef import ELEMENTWISE_CATEGORIES, VARIADIC, OpDef, ParamSpec, TensorType
from .symbolic import Sym, shape_text, unify

__all__ = ["OP_TABLE", "check_params", "mnemonic_of", "fmt_types", "broadcast_shapes",
           "FLOAT_ONLY"]

OP_TABLE: dict[str, OpDef] = {}

P = ParamSpec


def mnemonic_of(name: str) -> str:
    """CamelCase op name -> snake_case mnemonic (``GeluErf`` -> ``gelu_erf``)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def fmt_types(types: Sequence[TensorType]) -> str:
    """Operand types as ``(f32[8,64], u8[8])`` for error messages."""
    return "(" + ", ".join(f"{t.dtype.value}[{shape_text(t.shape)}]" for t in types) + ")"


def _fail(op: str, types: Sequence[TensorType], rule: str) -> GraphBuildError:
    return GraphBuildError(f"{op}{fmt_types(types)}: {rule}")


def _register(name: str, arity: int, params: tuple, category: str,
              op_kind: Optional[OpKind], infer, reference, *, dtypes=None,
              supported: bool = True, doc: str = "", commutative: bool = False,
              recipe: Optional[bool] = None, precision: Optional[str] = None,
              methods: tuple = ()) -> OpDef:
    if recipe is None:  # element-wise rows are in the recipe vocabulary by default
        recipe = supported and category in ELEMENTWISE_CATEGORIES
    op = OpDef(name=name, mnemonic=mnemonic_of(name), arity=arity, params=tuple(params),
               category=category, op_kind=op_kind, infer=infer, reference=reference,
               supported=supported, doc=doc, dtypes=dtypes, commutative=commutative,
               recipe=recipe, precision=precision, methods=tuple(methods))
    if name in OP_TABLE:
        raise ValueError(f"op {name!r} registered twice")
    OP_TABLE[name] = op
    return op


# ---------------------------------------------------------------------------
# params: one validator for every op
# ---------------------------------------------------------------------------
def _in_i64(op: str, spec: ParamSpec, v: int) -> int:
    if not -(1 << 63) <= v < 1 << 63:
        raise GraphBuildError(f"{op}: param {spec.name!r} has value {v}, outside int64 "
                              f"[-2**63, 2**63 - 1]")
    return v


def _coerce(op: str, spec: ParamSpec, value):
    kind = spec.kind
    bad = GraphBuildError(
        f"{op}: param {spec.name!r} must be {kind}, got {value!r} ({type(value).__name__})")
    if kind == "i64":
        if isinstance(value, Sym):  # a symbolic extent (docs/dynamic-shapes.md)
            return value
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise bad
        return _in_i64(op, spec, int(value))
    if kind == "f64":
        if isinstance(value, (bool, np.bool_)) or not isinstance(
                value, (int, float, np.integer, np.floating)):
            raise bad
        return float(value)
    if kind == "num":  # an integer scalar stays an exact int (int64 range), a float a float
        if isinstance(value, (bool, np.bool_)) or not isinstance(
                value, (int, float, np.integer, np.floating)):
            raise bad
        if isinstance(value, (int, np.integer)):
            return _in_i64(op, spec, int(value))
        return float(value)
    if kind == "i64s":
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise bad
        items = tuple(value)
        if any(isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer, Sym))
               for v in items):
            raise bad
        return tuple(v if isinstance(v, Sym) else _in_i64(op, spec, int(v)) for v in items)
    if kind == "dtype":
        if value is None:
            raise bad
        try:
            return DType.parse(value)
        except Exception:
            raise bad from None
    if kind == "str":
        if not isinstance(value, str):
            raise bad
        return value
    if kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise bad
        return bool(value)
    if kind == "bytes":
        if not isinstance(value, (bytes, bytearray)):
            raise bad
        return bytes(value)
    raise bad  # unreachable: ParamSpec validates kinds


def check_params(opdef: OpDef, params: Optional[dict]) -> dict:
    """Validate ``params`` against ``opdef.params``: fill defaults, coerce to the
    declared python types (ints, floats, tuples, DType), reject unknown or
    missing names. Returns a new dict in declaration order. Raises
    GraphBuildError."""
    params = dict(params or {})
    out = {}
    for spec in opdef.params:
        if spec.name in params:
            out[spec.name] = _coerce(opdef.name, spec, params.pop(spec.name))
        elif not spec.required:
            out[spec.name] = spec.default
        else:
            raise GraphBuildError(
                f"{opdef.name}: missing required param {spec.name!r} "
                f"(params: {', '.join(p.name for p in opdef.params)})")
    if params:
        raise GraphBuildError(
            f"{opdef.name}: unknown param(s) {sorted(params)}; declared: "
            f"{[p.name for p in opdef.params] or 'none'}")
    return out


# ---------------------------------------------------------------------------
# shared shape/dtype helpers
# ---------------------------------------------------------------------------
def _check_dtypes(op: str, types, allowed, which=(0,)):
    for i in which:
        if i < len(types) and types[i].dtype not in allowed:
            names = ", ".join(sorted(d.value for d in allowed))
            fix = "; Cast it to an integer dtype first" if allowed <= INTS else \
                "; Cast it to a float dtype first" if allowed <= FLOATS else ""
            raise _fail(op, types, f"operand {i} dtype {types[i].dtype.value} not supported "
                                   f"(accepted: {names}){fix}")


def _check_axis(op: str, types, axis: int, rank: int, *, name="axis", allow_end=False):
    hi = rank + 1 if allow_end else rank
    if not 0 <= axis < hi:
        raise _fail(op, types, f"{name} {axis} out of range for rank {rank} "
                               f"(need 0 <= {name} < {hi}; the builder normalizes negatives)")


def broadcast_shapes(a: Sequence[int], b: Sequence[int]) -> Optional[tuple[int, ...]]:
    """NumPy right-aligned broadcast of two shapes, or None if incompatible.
    A symbol is never assumed to be 1: two different non-1 extents where one
    is symbolic are unified (``symbolic.unify``; b's extent is kept)."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and x != 1 and y != 1:
            u = unify(y, x)
            if u is None:
                return None
            out.append(u)
            continue
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def same_shape(a: Sequence, b: Sequence) -> Optional[tuple]:
    """``a`` and ``b`` as one shape (extents unified), or None if they differ."""
    if len(a) != len(b):
        return None
    out = tuple(unify(x, y) for x, y in zip(a, b))
    return None if None in out else out


def _numel(shape):
    n = math.prod(shape)
    return n if isinstance(n, Sym) else int(n)


# ---------------------------------------------------------------------------
# reference helpers
# ---------------------------------------------------------------------------
def _math(fn: Callable, wide: bool = False):
    """Reference for a same-dtype element-wise op: decode, compute, round back."""
    def ref(inputs, params):
        dt = dtype_of(inputs[0])
        with np.errstate(all="ignore"):
            vals = [to_compute(x, wide) for x in inputs]
            out = fn(*vals, params) if _takes_params(fn) else fn(*vals)
        return from_compute(out, dt)
    return ref


def _takes_params(fn) -> bool:
    return getattr(fn, "_params", False)


def _with_params(fn):
    fn._params = True
    return fn


# The element-wise formulas are the runtime's rows' (runtime/elementwise.py, one
# formula per op): the interpreter computes exactly what the numpy kernels do.


# ---------------------------------------------------------------------------
# leaves
# ---------------------------------------------------------------------------
def _infer_declared(name):
    def infer(types, params):
        shape = params["shape"]
        if any(d < 0 for d in shape):
            raise _fail(name, types, f"declared shape {list(shape)} has a negative extent")
        return TensorType(tuple(shape), params["dtype"])
    return infer


_register("Input", 0, (P("name", "str"), P("shape", "i64s"), P("dtype", "dtype")), "leaf",
          None, _infer_declared("Input"), None,
          doc="A graph parameter (a function argument); value supplied at call time.")
_register("Const", 0, (P("name", "str"), P("shape", "i64s"), P("dtype", "dtype")), "leaf",
          None, _infer_declared("Const"), None,
          doc="A constant; its payload is Graph.constants[name]. Never CSE'd.")


def _infer_iota(types, params):
    if params["len"] < 0:
        raise _fail("Iota", types, f"len {params['len']} must be >= 0")
    return TensorType((params["len"],), DType.F32)


_register("Iota", 0, (P("len", "i64"),), "leaf", None, _infer_iota,
          lambda inputs, p: np.arange(p["len"], dtype=np.float32),
          doc="[len] F32 holding 0..len-1 (exact below 2^24).", recipe=True)

# ---------------------------------------------------------------------------
# element-wise binary
# ---------------------------------------------------------------------------
FLOAT_ONLY: set[str] = set()


def _infer_same(name, allowed):
    def infer(types, params):
        _check_dtypes(name, types, allowed, range(len(types)))
        a, shape = types[0], types[0].shape
        for i, t in enumerate(types[1:], 1):
            if t.dtype != a.dtype:
                raise _fail(name, types, f"operand {i} dtype {t.dtype.value} != operand 0 "
                                         f"dtype {a.dtype.value} (no implicit promotion; "
                                         f"insert a Cast)")
            shape = shape if t.shape == shape else same_shape(shape, t.shape)
            if shape is None:
                raise _fail(name, types, f"operand {i} shape {list(t.shape)} != operand 0 "
                                         f"shape {list(a.shape)} (element-wise ops need "
                                         f"identical shapes; insert BroadcastTo)")
        return a if shape == a.shape else TensorType(shape, a.dtype)
    return infer


# name: (dtypes, precision, commutative, builder methods); the formula, kind and
# cost family are the runtime row's (runtime/elementwise.py)
_BINARY = {
    "Add": (NUMERIC, "exact", True, ()),
    "Sub": (NUMERIC, "exact", False, ()),
    "Mul": (NUMERIC, "exact", True, ()),
    "Div": (NUMERIC, "exact", False, ()),
    "Maximum": (NUMERIC, "exact", True, ()),
    "Minimum": (NUMERIC, "exact", True, ()),
    "Pow": (FLOATS, "approx", False, ()),
    "Rem": (NUMERIC, "approx", False, ()),
    "BitwiseAnd": (INTS, "exact", True, ("bitwise_and", "__and__")),
    "BitwiseOr": (INTS, "exact", True, ("bitwise_or", "__or__")),
    "BitwiseXor": (INTS, "exact", True, ("bitwise_xor", "__xor__")),
    "BitShiftLeft": (INTS, "exact", False, ("shift_left", "__lshift__")),
    "BitShiftRight": (INTS, "exact", False, ("shift_right", "__rshift__")),
}


def _elementwise(table, arity, category):
    for name, (allowed, precision, commutative, methods) in table.items():
        if allowed == FLOATS:
            FLOAT_ONLY.add(name)
        row = EW.ROWS[name]
        _register(name, arity, (), category, OpKind[EW.kind_name(name)],
                  _infer_same(name, allowed), _math(row.formula), dtypes=allowed,
                  commutative=commutative, precision=precision, methods=methods)


_elementwise(_BINARY, 2, "binary")

# ---------------------------------------------------------------------------
# element-wise unary
# ---------------------------------------------------------------------------
_EXACT, _ULP = "exact", "approx"
_UNARY = {
    # name: (dtypes, precision, builder methods)
    "Neg": (NUMERIC, _EXACT, ("neg",)),
    "Sqr": (NUMERIC, _EXACT, ("sqr", "square")),
    "Sqrt": (FLOATS, _EXACT, ("sqrt",)),
    "Rsqrt": (FLOATS, _ULP, ("rsqrt",)),
    "Recip": (FLOATS, _ULP, ("recip", "reciprocal")),
    "Abs": (NUMERIC, _EXACT, ("abs",)),
    "Exp": (FLOATS, "exp", ("exp",)),
    "Log": (FLOATS, "log", ("log",)),
    "Sin": (FLOATS, _ULP, ("sin",)),
    "Cos": (FLOATS, _ULP, ("cos",)),
    "Tanh": (FLOATS, "tanh", ("tanh",)),
    "Sigmoid": (FLOATS, _ULP, ("sigmoid",)),
    "Silu": (FLOATS, _ULP, ("silu",)),
    "Gelu": (FLOATS, _ULP, ()),        # x.gelu("tanh")
    "GeluErf": (FLOATS, _ULP, ()),     # x.gelu()
    "Relu": (NUMERIC, _EXACT, ("relu",)),
    "Step": (NUMERIC, _EXACT, ("step",)),
    "Erf": (FLOATS, "erf", ("erf",)),
    "Floor": (NUMERIC, _EXACT, ("floor",)),
    "Ceil": (NUMERIC, _EXACT, ("ceil",)),
    "Round": (NUMERIC, _EXACT, ("round",)),  # half to even
    "Sign": (NUMERIC, _EXACT, ("sign",)),
    "Atan": (FLOATS, _ULP, ("atan", "arctan")),
    "Asin": (FLOATS, _ULP, ("asin", "arcsin")),
    "Acos": (FLOATS, _ULP, ("acos", "arccos")),
    "BitwiseNot": (INTS, _EXACT, ("bitwise_not", "__invert__")),
}
_elementwise({n: (d, p, False, m) for n, (d, p, m) in _UNARY.items()}, 1, "unary")

# ---------------------------------------------------------------------------
# scalar-parameter ops
# ---------------------------------------------------------------------------
def _infer_scalar(name, scalar_names, extra=None):
    def infer(types, params):
        _check_dtypes(name, types, NUMERIC)
        t = types[0]
        if t.dtype in INTS:
            for s in scalar_names:
                v = params[s]
                if not (math.isfinite(v) and float(v).is_integer()):
                    raise _fail(name, types, f"{s}={v} must be integral for an integer "
                                             f"operand (no implicit promotion)")
        if extra:
            extra(name, types, params)
        return t
    return infer


def _scalar_of(x, v, wrap=True):
    """The scalar param ``v`` in x's compute dtype. For integers it wraps
    modulo 2^bits (so AddScalar(-3) on u8 is x - 3 mod 256) or, with
    ``wrap=False`` (clamp bounds), saturates to the dtype's range."""
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        if wrap:
            bits = 8 * x.dtype.itemsize
            return np.asarray(int(v) % (1 << bits)).astype(np.uint64).astype(x.dtype)
        return np.asarray(min(max(int(v), int(info.min)), int(info.max))).astype(x.dtype)
    return x.dtype.type(v)


def _clamp_extra(name, types, params):
    if not params["min"] <= params["max"]:
        raise _fail(name, types, f"min {params['min']} must be <= max {params['max']}")


def _powi_extra(name, types, params):
    n = params["n"]
    if not -(2 ** 31) <= n < 2 ** 31:
        raise _fail(name, types, f"exponent {n} does not fit in i32")
    if n < 0 and types[0].dtype in INTS:
        raise _fail(name, types, f"negative exponent {n} needs a float operand")


@_with_params
def _powi(x, p):
    from runtime.numpy_kernels import powi
    return powi(x, p["n"])


_register("AddScalar", 1, (P("value", "num"),), "scalar", OpKind.Affine,
          _infer_scalar("AddScalar", ("value",)),
          _math(_with_params(lambda x, p: x + _scalar_of(x, p["value"]))), dtypes=NUMERIC,
          doc="x + value (Affine with mul=1).", precision="approx")
_register("MulScalar", 1, (P("value", "num"),), "scalar", OpKind.Affine,
          _infer_scalar("MulScalar", ("value",)),
          _math(_with_params(lambda x, p: x * _scalar_of(x, p["value"]))), dtypes=NUMERIC,
          doc="value * x (Affine with add=0).", precision="approx")
_register("PowI", 1, (P("n", "i64"),), "scalar", OpKind.PowIElementwise,
          _infer_scalar("PowI", (), _powi_extra), _math(_powi), dtypes=NUMERIC,
          doc="x**n by left-to-right repeated multiplication.", precision="approx")
_register("Clamp", 1, (P("min", "num"), P("max", "num")), "scalar", OpKind.ClampElementwise,
          _infer_scalar("Clamp", ("min", "max"), _clamp_extra),
          _math(_with_params(lambda x, p: np.minimum(np.maximum(x, _scalar_of(x, p["min"], False)),
                                                     _scalar_of(x, p["max"], False)))),
          dtypes=NUMERIC, precision="exact")

# ---------------------------------------------------------------------------
# comparisons -> U8
# ---------------------------------------------------------------------------
def _infer_compare(name):
    same = _infer_same(name, NUMERIC)

    def infer(types, params):
        return TensorType(same(types, params).shape, DType.U8)
    return infer


def _cmp_ref(fn):
    def ref(inputs, params):
        a, b = (to_compute(x) for x in inputs)
        with np.errstate(invalid="ignore"):
            return fn(a, b).astype(np.uint8)
    return ref


_COMPARE = {
    "Equal": (np.equal, OpKind.EqualElementwise),
    "Ne": (np.not_equal, OpKind.NotEqualElementwise),
    "Lt": (np.less, OpKind.LessElementwise),
    "Le": (np.less_equal, OpKind.LessEqualElementwise),
    "Gt": (np.greater, OpKind.GreaterElementwise),
    "Ge": (np.greater_equal, OpKind.GreaterEqualElementwise),
}
for _name, (_fn, _kind) in _COMPARE.items():
    _register(_name, 2, (), "compare", _kind, _infer_compare(_name), _cmp_ref(_fn),
              dtypes=NUMERIC, doc="U8 mask (1/0), input 0's shape.", precision="exact")

# ---------------------------------------------------------------------------
# select and mask
# ---------------------------------------------------------------------------
def _infer_where(types, params):
    c, a, b = types
    if c.dtype != DType.U8:
        raise _fail("Where", types, f"condition dtype {c.dtype.value} must be u8")
    _check_dtypes("Where", types, NUMERIC, (1, 2))
    if a.dtype != b.dtype:
        raise _fail("Where", types, f"branch dtypes {a.dtype.value} and {b.dtype.value} "
                                    f"differ (no implicit promotion)")
    shape = same_shape(c.shape, a.shape)
    shape = None if shape is None else same_shape(shape, b.shape)
    if shape is None:
        raise _fail("Where", types, "condition and both branches need identical shapes "
                                    "(insert BroadcastTo)")
    return TensorType(shape, a.dtype)


_register("Where", 3, (), "select", OpKind.Where, _infer_where,
          lambda i, p: np.where(np.asarray(i[0]) != 0, i[1], i[2]), dtypes=NUMERIC,
          doc="cond != 0 ? a : b; key [U8, T, T, T].", precision="exact")


def _infer_masked_fill(types, params):
    x, m = types
    _check_dtypes("MaskedFill", types, NUMERIC)
    if m.dtype != DType.U8:
        raise _fail("MaskedFill", types, f"mask dtype {m.dtype.value} must be u8")
    if same_shape(m.shape, x.shape) is None:
        raise _fail("MaskedFill", types, "mask needs the same shape as x (insert BroadcastTo)")
    if x.dtype in INTS and not float(params["value"]).is_integer():
        raise _fail("MaskedFill", types, f"value={params['value']} must be integral for an "
                                         f"integer operand")
    return x


_register("MaskedFill", 2, (P("value", "num"),), "select", OpKind.MaskedFill,
          _infer_masked_fill,
          lambda i, p: np.where(np.asarray(i[1]) != 0,
                                scalar_storage(p["value"], dtype_of(i[0])), i[0]),
          dtypes=NUMERIC, doc="mask != 0 ? value : x.", precision="exact")

# ---------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------
_REDUCE = {"Sum": OpKind.SumReduce, "Max": OpKind.MaxReduce, "Min": OpKind.MinReduce,
           "Mean": OpKind.MeanReduce}


def _reduce_values(kind, x, axis):
    """Reduce storage array ``x`` along ``axis`` (None: all); storage out."""
    dt = dtype_of(x)
    if kind in ("Sum", "Mean"):
        if dt.is_float:
            v = to_compute(x, wide=True)
            out = v.sum(axis=axis) if kind == "Sum" else v.mean(axis=axis)
            return from_compute(out, dt)
        return np.asarray(x.sum(axis=axis, dtype=x.dtype))
    v = to_compute(x)
    out = v.max(axis=axis) if kind == "Max" else v.min(axis=axis)
    return from_compute(out, dt)


def _infer_reduce_all(name, kind):
    allowed = FLOATS if kind == "Mean" else NUMERIC

    def infer(types, params):
        _check_dtypes(name, types, allowed)
        if kind in ("Max", "Min", "Mean") and _numel(types[0].shape) == 0:
            raise _fail(name, types, f"{kind.lower()} of zero elements is undefined")
        return TensorType((), types[0].dtype)
    return infer


def _infer_reduce_dim(name, kind, out_dtype=None):
    allowed = FLOATS if kind == "Mean" else NUMERIC

    def infer(types, params):
        _check_dtypes(name, types, allowed)
        t = types[0]
        _check_axis(name, types, params["axis"], len(t.shape))
        if kind != "Sum" and t.shape[params["axis"]] == 0:
            raise _fail(name, types, f"axis {params['axis']} has extent 0; "
                                     f"{kind.lower()} of zero elements is undefined")
        shape = t.shape[:params["axis"]] + t.shape[params["axis"] + 1:]
        return TensorType(shape, out_dtype or t.dtype)
    return infer


for _kind, _opkind in _REDUCE.items():
    _allowed = FLOATS if _kind == "Mean" else NUMERIC
    if _kind == "Mean":
        FLOAT_ONLY.update({"MeanAll", "MeanDim"})
    _register(f"{_kind}All", 1, (), "reduce", _opkind, _infer_reduce_all(f"{_kind}All", _kind),
              (lambda k: lambda i, p: _reduce_values(k, np.asarray(i[0]), None))(_kind),
              dtypes=_allowed, doc="rank-0 result, input dtype.", recipe=True,
              precision="exact" if _kind in ("Max", "Min") else None)
    _register(f"{_kind}Dim", 1, (P("axis", "i64"),), "reduce", _opkind,
              _infer_reduce_dim(f"{_kind}Dim", _kind),
              (lambda k: lambda i, p: _reduce_values(k, np.asarray(i[0]), p["axis"]))(_kind),
              dtypes=_allowed, doc="axis removed, input dtype.", recipe=_kind != "Min",
              precision="exact" if _kind in ("Max", "Min") else None)


def _arg_ref(fn):
    def ref(inputs, params):
        return fn(to_compute(inputs[0]), axis=params["axis"]).astype(np.uint32)
    return ref


_register("ArgMaxDim", 1, (P("axis", "i64"),), "reduce", OpKind.ArgMaxDim,
          _infer_reduce_dim("ArgMaxDim", "ArgMax", DType.U32), _arg_ref(np.argmax),
          dtypes=NUMERIC, doc="axis removed, U32; first index of the maximum.", precision="exact")
_register("ArgMinDim", 1, (P("axis", "i64"),), "reduce", OpKind.ArgMinDim,
          _infer_reduce_dim("ArgMinDim", "ArgMin", DType.U32), _arg_ref(np.argmin),
          dtypes=NUMERIC, doc="axis removed, U32; first index of the minimum.", precision="exact")


def _reduce_to_axes(in_shape, target):
    """Axes of ``in_shape`` reduced to reach ``target`` (left-padded with 1s)."""
    padded = (1,) * (len(in_shape) - len(target)) + tuple(target)
    return tuple(i for i, (d, s) in enumerate(zip(in_shape, padded)) if s == 1 and d != 1)


def _infer_reduce_to(name):
    def infer(types, params):
        _check_dtypes(name, types, NUMERIC)
        t, s = types[0], params["shape"]
        ok = len(s) <= len(t.shape) and all(
            d == 1 or d == e for d, e in zip(reversed(s), reversed(t.shape)))
        if not ok:
            raise _fail(name, types, f"target shape {list(s)} is not broadcast-compatible "
                                     f"into the input (each target axis, right-aligned, "
                                     f"must be 1 or equal)")
        if name == "ReduceMaxTo" and _numel(t.shape) == 0 and _reduce_to_axes(t.shape, s):
            raise _fail(name, types, "max of zero elements is undefined")
        return TensorType(tuple(s), t.dtype)
    return infer


def _reduce_to_ref(kind):
    def ref(inputs, params):
        x = np.asarray(inputs[0])
        axes = _reduce_to_axes(x.shape, params["shape"])
        out = _reduce_values(kind, x, axes) if axes else x
        return np.asarray(out).reshape(params["shape"])
    return ref


_register("ReduceSumTo", 1, (P("shape", "i64s"),), "reduce", OpKind.ReduceSumTo,
          _infer_reduce_to("ReduceSumTo"), _reduce_to_ref("Sum"), dtypes=NUMERIC,
          doc="sum along every axis where the target (left-padded with 1s) is 1.", recipe=True)
_register("ReduceMaxTo", 1, (P("shape", "i64s"),), "reduce", OpKind.ReduceMaxTo,
          _infer_reduce_to("ReduceMaxTo"), _reduce_to_ref("Max"), dtypes=NUMERIC,
          doc="max along every axis where the target (left-padded with 1s) is 1.", recipe=True)


def _infer_cumsum(types, params):
    _check_dtypes("CumSum", types, NUMERIC)
    _check_axis("CumSum", types, params["axis"], len(types[0].shape))
    return types[0]


def _cumsum_ref(inputs, params):
    x = np.asarray(inputs[0])
    dt = dtype_of(x)
    if dt.is_float:
        return from_compute(np.cumsum(to_compute(x, wide=True), axis=params["axis"]), dt)
    return np.cumsum(x, axis=params["axis"], dtype=x.dtype)


_register("CumSum", 1, (P("axis", "i64"),), "reduce", OpKind.CumSum, _infer_cumsum,
          _cumsum_ref, dtypes=NUMERIC, doc="inclusive prefix sum along axis.", recipe=True)

# ---------------------------------------------------------------------------
# matmul
# ---------------------------------------------------------------------------
def _infer_matmul(types, params):
    a, b = types
    ok_dtypes = a.dtype == b.dtype or (a.dtype == DType.F32 and b.dtype == DType.BF16)
    _check_dtypes("MatMul", types, FLOATS, (0, 1))
    if not ok_dtypes:
        raise _fail("MatMul", types, "operand dtypes must match (the only mixed pair is "
                                     "f32 x bf16 -> f32)")
    if len(a.shape) < 2 or len(a.shape) != len(b.shape):
        raise _fail("MatMul", types, "operands need the same rank >= 2 (the builder "
                                     "broadcasts a lower-rank operand)")
    if unify(a.shape[-1], b.shape[-2]) is None:
        raise _fail("MatMul", types, f"contraction mismatch: lhs K={a.shape[-1]} vs rhs "
                                     f"K={b.shape[-2]}")
    for i, (x, y) in enumerate(zip(a.shape[:-2], b.shape[:-2])):
        if isinstance(x, Sym) or isinstance(y, Sym):  # GQA multiples need static extents
            if y == 1:
                continue  # any batch is a multiple of 1 (a weight viewed as [1.., K, N])
            if unify(x, y) is None:
                raise _fail("MatMul", types, f"batch axis {i}: lhs {x} must equal rhs {y}")
        elif x != y and (y == 0 or x % y != 0):
            raise _fail("MatMul", types, f"batch axis {i}: lhs {x} must equal rhs {y} or be "
                                         f"an integer multiple of it (GQA)")
    return TensorType(a.shape[:-1] + (b.shape[-1],), a.dtype)


def _matmul_ref(inputs, params):
    a = to_compute(np.asarray(inputs[0]), wide=True)
    b = to_compute(np.asarray(inputs[1]), wide=True)
    for i, (x, y) in enumerate(zip(a.shape[:-2], b.shape[:-2])):
        if x != y:  # GQA: lhs batch index j uses rhs batch index j // (x // y)
            b = np.repeat(b, x // y, axis=i)
    return from_compute(np.matmul(a, b), dtype_of(np.asarray(inputs[0])))


FLOAT_ONLY.add("MatMul")
_register("MatMul", 2, (), "matmul", OpKind.MatMul, _infer_matmul, _matmul_ref,
          dtypes=FLOATS,
          doc="[..b, M, K] @ [..b', K, N] -> [..b, M, N]; each b a multiple of b' (GQA: "
              "lhs batch j uses rhs batch j // (b/b')); f32 x bf16 allowed; lhs dtype.", recipe=True)

# ---------------------------------------------------------------------------
# views and shape ops (raw-bit data movement: dtypes unconstrained)
# ---------------------------------------------------------------------------
def _infer_transpose(types, params):
    s = types[0].shape
    if len(s) < 2:
        raise _fail("Transpose", types, "needs rank >= 2 (swaps the last two axes)")
    return TensorType(s[:-2] + (s[-1], s[-2]), types[0].dtype)


def _infer_permute(types, params):
    s, p = types[0].shape, params["perm"]
    if sorted(p) != list(range(len(s))):
        raise _fail("Permute", types, f"perm {list(p)} is not a permutation of "
                                      f"0..{len(s) - 1}")
    return TensorType(tuple(s[i] for i in p), types[0].dtype)


def _infer_reshape(types, params):
    s = params["shape"]
    if any(d < 0 for d in s) or _numel(s) != _numel(types[0].shape):
        raise _fail("Reshape", types, f"target {list(s)} must be non-negative with the same "
                                      f"element count ({_numel(types[0].shape)})")
    return TensorType(tuple(s), types[0].dtype)


def _infer_broadcast_to(types, params):
    s, t = tuple(params["shape"]), types[0].shape
    if len(s) < len(t) or broadcast_shapes(t, s) != s:
        raise _fail("BroadcastTo", types, f"cannot broadcast to {list(s)} (right-aligned: "
                                          f"each input axis must be 1 or equal)")
    return TensorType(s, types[0].dtype)


def _infer_unsqueeze(types, params):
    s = types[0].shape
    _check_axis("Unsqueeze", types, params["dim"], len(s), name="dim", allow_end=True)
    d = params["dim"]
    return TensorType(s[:d] + (1,) + s[d:], types[0].dtype)


def _infer_squeeze(types, params):
    s, d = types[0].shape, params["dim"]
    _check_axis("Squeeze", types, d, len(s), name="dim")
    if s[d] != 1:
        raise _fail("Squeeze", types, f"dim {d} has extent {s[d]}, must be 1")
    return TensorType(s[:d] + s[d + 1:], types[0].dtype)


def _infer_slice(types, params):
    s, d, start, n = types[0].shape, params["dim"], params["start"], params["len"]
    _check_axis("Slice", types, d, len(s), name="dim")
    if start < 0 or n < 0 or start + n > s[d]:
        raise _fail("Slice", types, f"[start={start}, len={n}) must lie within dim {d} of "
                                    f"extent {s[d]}")
    return TensorType(s[:d] + (n,) + s[d + 1:], types[0].dtype)


def _infer_on_dim(name, key="dim", min_rank=1, allowed=None):
    def infer(types, params):
        if allowed is not None:
            _check_dtypes(name, types, allowed)
        _check_axis(name, types, params[key], len(types[0].shape), name=key)
        return types[0]
    return infer


def _infer_identity(name, allowed=None):
    def infer(types, params):
        if allowed is not None:
            _check_dtypes(name, types, allowed)
        return types[0]
    return infer


def _slice_ref(i, p):
    idx = [slice(None)] * np.ndim(i[0])
    idx[p["dim"]] = slice(p["start"], p["start"] + p["len"])
    return np.asarray(i[0])[tuple(idx)]


_register("Transpose", 1, (), "view", None, _infer_transpose,
          lambda i, p: np.swapaxes(np.asarray(i[0]), -1, -2), doc="swap the last two axes.", recipe=True)
_register("Permute", 1, (P("perm", "i64s"),), "view", None, _infer_permute,
          lambda i, p: np.transpose(np.asarray(i[0]), p["perm"]), doc="out[i] = in[perm[i]].", recipe=True)
_register("Reshape", 1, (P("shape", "i64s"),), "shape", None, _infer_reshape,
          lambda i, p: np.reshape(np.asarray(i[0]), p["shape"]),
          doc="row-major reshape; materializes a non-contiguous input.", recipe=True)
_register("BroadcastTo", 1, (P("shape", "i64s"),), "view", None, _infer_broadcast_to,
          lambda i, p: np.broadcast_to(np.asarray(i[0]), p["shape"]),
          doc="numpy right-aligned broadcast (stride 0 on broadcast axes).", recipe=True)
_register("Unsqueeze", 1, (P("dim", "i64"),), "view", None, _infer_unsqueeze,
          lambda i, p: np.expand_dims(np.asarray(i[0]), p["dim"]),
          doc="insert a size-1 axis at dim (0 <= dim <= rank).", recipe=True)
_register("Squeeze", 1, (P("dim", "i64"),), "view", None, _infer_squeeze,
          lambda i, p: np.squeeze(np.asarray(i[0]), p["dim"]), doc="remove a size-1 axis.", recipe=True)
_register("Slice", 1, (P("dim", "i64"), P("start", "i64"), P("len", "i64")), "view", None,
          _infer_slice, _slice_ref, doc="axis dim narrowed to [start, start+len).", recipe=True)
_register("Flip", 1, (P("dim", "i64"),), "view", OpKind.Flip, _infer_on_dim("Flip"),
          lambda i, p: np.flip(np.asarray(i[0]), p["dim"]),
          doc="reverse axis dim (a negative-stride view).", recipe=True, precision="exact")
_register("Contiguize", 1, (), "shape", None, _infer_identity("Contiguize"),
          lambda i, p: np.array(i[0], order="C"), doc="materialize row-major, offset 0.", recipe=True)


def _infer_cast(types, params):
    _check_dtypes("Cast", types, NUMERIC)
    if params["dtype"] not in NUMERIC:
        raise _fail("Cast", types, f"target dtype {params['dtype'].value} has no "
                                   f"supported conversion")
    return TensorType(types[0].shape, params["dtype"])


def _cast_ref(inputs, params):
    x = np.asarray(inputs[0])
    src, dst = dtype_of(x), params["dtype"]
    if src == dst:
        return x
    v = to_compute(x, wide=src == DType.F64)
    if not dst.is_float:
        return cast_to_int(v, dst)
    if src.is_int:
        v = v.astype(np.float64)
    return from_compute(v, dst)


_register("Cast", 1, (P("dtype", "dtype"),), "cast", OpKind.Cast, _infer_cast, _cast_ref,
          dtypes=NUMERIC, doc="convert to dtype; key [src, dst].", precision="exact")


def _infer_concat(types, params):
    if not types:
        raise _fail("Concat", types, "needs at least one operand")
    first, d = types[0], params["dim"]
    _check_axis("Concat", types, d, len(first.shape), name="dim")
    total = 0
    for i, t in enumerate(types):
        if t.dtype != first.dtype:
            raise _fail("Concat", types, f"operand {i} dtype {t.dtype.value} != "
                                         f"{first.dtype.value}")
        if len(t.shape) != len(first.shape) or any(
                unify(b, a) is None for k, (a, b) in enumerate(zip(t.shape, first.shape))
                if k != d):
            raise _fail("Concat", types, f"operand {i} shape {list(t.shape)} must match "
                                         f"operand 0 on every axis but {d}")
        total += t.shape[d]
    return TensorType(first.shape[:d] + (total,) + first.shape[d + 1:], first.dtype)


_register("Concat", VARIADIC, (P("dim", "i64"),), "shape", OpKind.Concat, _infer_concat,
          lambda i, p: np.concatenate([np.asarray(x) for x in i], axis=p["dim"]),
          doc="join along dim; key [T_in, T_out].", recipe=True)
_register("Roll", 1, (P("dim", "i64"), P("shift", "i64")), "shape", OpKind.Roll,
          _infer_on_dim("Roll"), lambda i, p: np.roll(np.asarray(i[0]), p["shift"], p["dim"]),
          doc="cyclic shift: out[(j + shift) mod n] = in[j].", recipe=True)


def _infer_tri(name):
    def infer(types, params):
        if len(types[0].shape) < 2:
            raise _fail(name, types, "needs rank >= 2 (acts on the last two axes)")
        return types[0]
    return infer


_register("Triu", 1, (P("diagonal", "i64", 0),), "shape", OpKind.Triu, _infer_tri("Triu"),
          lambda i, p: np.triu(np.asarray(i[0]), p["diagonal"]),
          doc="zero below diagonal (last two axes).", recipe=True, precision="exact")
_register("Tril", 1, (P("diagonal", "i64", 0),), "shape", OpKind.Tril, _infer_tri("Tril"),
          lambda i, p: np.tril(np.asarray(i[0]), p["diagonal"]),
          doc="zero above diagonal (last two axes).", recipe=True, precision="exact")

PAD_MODES = ("constant", "reflect", "replicate")


def _check_pad(name, types, shape, padding, mode):
    if mode not in PAD_MODES:
        raise _fail(name, types, f"unknown pad mode {mode!r} (modes: {', '.join(PAD_MODES)})")
    if mode != "constant":
        raise UnsupportedOpError(f"{name}{fmt_types(types)}: pad mode {mode!r} is not "
                                 f"supported yet (only 'constant')")
    if len(padding) != 2 * len(shape) or any(v < 0 for v in padding):
        raise _fail(name, types, f"padding {list(padding)} must hold one non-negative "
                                 f"(before, after) pair per axis ({2 * len(shape)} values)")


def _infer_pad(types, params):
    s, pad = types[0].shape, params["padding"]
    _check_pad("Pad", types, s, pad, params["mode"])
    _check_dtypes("Pad", types, NUMERIC)
    return TensorType(tuple(d + pad[2 * i] + pad[2 * i + 1] for i, d in enumerate(s)),
                      types[0].dtype)


def _pad_ref(inputs, params):
    x = np.asarray(inputs[0])
    pad = params["padding"]
    pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(x.ndim)]
    if x.ndim == 0:  # nothing to pad (np.pad rejects an empty pad_width)
        return x.copy()
    return np.pad(x, pairs, constant_values=scalar_storage(params["value"], dtype_of(x)))


def _infer_pad_backward(types, params):
    s, pad, ins = types[0].shape, params["padding"], params["in_shape"]
    _check_pad("PadBackward", types, ins, pad, params["mode"])
    want = tuple(d + pad[2 * i] + pad[2 * i + 1] for i, d in enumerate(ins))
    if want != s:
        raise _fail("PadBackward", types, f"gradient shape {list(s)} != padded in_shape "
                                          f"{list(want)}")
    return TensorType(tuple(ins), types[0].dtype)


def _pad_backward_ref(inputs, params):
    pad, ins = params["padding"], params["in_shape"]
    idx = tuple(slice(pad[2 * i], pad[2 * i] + d) for i, d in enumerate(ins))
    return np.asarray(inputs[0])[idx]


_register("Pad", 1, (P("padding", "i64s"), P("mode", "str", "constant"), P("value", "f64", 0.0)),
          "shape", OpKind.Pad, _infer_pad, _pad_ref, dtypes=NUMERIC,
          doc="padding = (before_0, after_0, before_1, after_1, ...); only constant mode.", recipe=True)
_register("PadBackward", 1, (P("in_shape", "i64s"), P("padding", "i64s"),
                             P("mode", "str", "constant")),
          "shape", OpKind.PadBackward, _infer_pad_backward, _pad_backward_ref,
          doc="gradient of constant Pad: the interior slice of shape in_shape.")

# ---------------------------------------------------------------------------
# indexing (indices are U32)
# ---------------------------------------------------------------------------
def _check_idx(name, types, k):
    if types[k].dtype != DType.U32:
        raise _fail(name, types, f"index operand {k} dtype {types[k].dtype.value} must be u32")


def _infer_index_select(types, params):
    d, s = params["dim"], types[0].shape
    _check_axis("IndexSelect", types, d, len(s), name="dim")
    _check_idx("IndexSelect", types, 1)
    if len(types[1].shape) != 1:
        raise _fail("IndexSelect", types, "indices must be 1-D")
    return TensorType(s[:d] + types[1].shape + s[d + 1:], types[0].dtype)


def _check_indices(name, idx, extent):
    idx = np.asarray(idx)
    if idx.size and int(idx.max()) >= extent:
        raise IndexError(f"{name}: index {int(idx.max())} out of range for extent {extent}")
    return idx.astype(np.int64)


def _index_select_ref(i, p):
    x = np.asarray(i[0])
    return np.take(x, _check_indices("IndexSelect", i[1], x.shape[p["dim"]]), axis=p["dim"])


def _infer_gather(types, params):
    d, s, idx = params["dim"], types[0].shape, types[1].shape
    _check_axis("Gather", types, d, len(s), name="dim")
    _check_idx("Gather", types, 1)
    if len(idx) != len(s) or any(a > b for k, (a, b) in enumerate(zip(idx, s)) if k != d):
        raise _fail("Gather", types, f"indices need the data's rank and extents <= the "
                                     f"data's on every axis but {d}")
    return TensorType(idx, types[0].dtype)


def _gather_ref(i, p):
    x, d = np.asarray(i[0]), p["dim"]
    idx = _check_indices("Gather", i[1], x.shape[d])
    window = tuple(slice(None) if k == d else slice(0, n) for k, n in enumerate(idx.shape))
    return np.take_along_axis(x[window], idx, axis=d)


def _accumulate_ref(name, scatter):
    def ref(inputs, params):
        base, idx, src = (np.asarray(v) for v in inputs)
        d, dt = params["dim"], dtype_of(base)
        idx = _check_indices(name, idx, base.shape[d])
        acc = to_compute(base, wide=True).copy() if dt.is_float else base.copy()
        val = to_compute(src, wide=True) if dt.is_float else src
        if scatter:
            where = list(np.indices(idx.shape, sparse=True))
            where[d] = idx
        else:
            where = [slice(None)] * base.ndim
            where[d] = idx
        np.add.at(acc, tuple(where), val)
        return from_compute(acc, dt) if dt.is_float else acc
    return ref


def _infer_index_add(types, params):
    d, b = params["dim"], types[0]
    _check_axis("IndexAdd", types, d, len(b.shape), name="dim")
    _check_dtypes("IndexAdd", types, NUMERIC, (0, 2))
    _check_idx("IndexAdd", types, 1)
    if len(types[1].shape) != 1:
        raise _fail("IndexAdd", types, "indices must be 1-D")
    want = b.shape[:d] + types[1].shape + b.shape[d + 1:]
    if types[2].shape != want or types[2].dtype != b.dtype:
        raise _fail("IndexAdd", types, f"src must be {b.dtype.value}{list(want)} (base shape "
                                       f"with dim {d} := len(indices))")
    return b


def _infer_scatter_add(types, params):
    d, b, idx, src = params["dim"], types[0], types[1], types[2]
    _check_axis("ScatterAdd", types, d, len(b.shape), name="dim")
    _check_dtypes("ScatterAdd", types, NUMERIC, (0, 2))
    _check_idx("ScatterAdd", types, 1)
    if src.dtype != b.dtype:
        raise _fail("ScatterAdd", types, "src dtype must equal base dtype")
    if idx.shape != src.shape or len(idx.shape) != len(b.shape) or any(
            a > c for k, (a, c) in enumerate(zip(idx.shape, b.shape)) if k != d):
        raise _fail("ScatterAdd", types, f"indices and src need one shape, the base's rank, "
                                         f"and extents <= the base's on every axis but {d}")
    return b


_register("IndexSelect", 2, (P("dim", "i64"),), "index", OpKind.IndexSelect,
          _infer_index_select, _index_select_ref, doc="data.take(idx, axis=dim); idx 1-D u32.", recipe=True)
_register("Gather", 2, (P("dim", "i64"),), "index", OpKind.Gather, _infer_gather, _gather_ref,
          doc="out[..i..] = data[.., idx[..i..] at dim, ..]; idx's shape.", recipe=True)
_register("IndexAdd", 3, (P("dim", "i64"),), "index", OpKind.IndexAdd, _infer_index_add,
          _accumulate_ref("IndexAdd", False), dtypes=NUMERIC,
          doc="base[.., idx[i], ..] += src[.., i, ..] (repeated indices accumulate).", recipe=True)
_register("ScatterAdd", 3, (P("dim", "i64"),), "index", OpKind.ScatterAdd, _infer_scatter_add,
          _accumulate_ref("ScatterAdd", True), dtypes=NUMERIC,
          doc="base[.., idx[..i..] at dim, ..] += src[..i..]; the adjoint of Gather.", recipe=True)

# ---------------------------------------------------------------------------
# softmax-family primitives
# ---------------------------------------------------------------------------
def _infer_log_softmax(types, params):
    _check_dtypes("LogSoftmaxLastDim", types, FLOATS)
    if len(types[0].shape) < 1:
        raise _fail("LogSoftmaxLastDim", types, "needs rank >= 1")
    return types[0]


def _log_softmax_ref(inputs, params):
    x = to_compute(np.asarray(inputs[0]), wide=True)
    m = x.max(axis=-1, keepdims=True)
    s = x - m
    return from_compute(s - np.log(np.exp(s).sum(axis=-1, keepdims=True)),
                        dtype_of(np.asarray(inputs[0])))


def _log_softmax_bw_ref(inputs, params):
    y, g = (to_compute(np.asarray(v), wide=True) for v in inputs)
    return from_compute(g - np.exp(y) * g.sum(axis=-1, keepdims=True),
                        dtype_of(np.asarray(inputs[0])))


_same_f = _infer_same("LogSoftmaxLastDimBackward", FLOATS)


def _infer_log_softmax_bw(types, params):
    t = _same_f(types, params)
    if len(t.shape) < 1:
        raise _fail("LogSoftmaxLastDimBackward", types, "needs rank >= 1")
    return t


FLOAT_ONLY.update({"LogSoftmaxLastDim", "LogSoftmaxLastDimBackward"})
_register("LogSoftmaxLastDim", 1, (), "softmax", OpKind.LogSoftmaxLastDim, _infer_log_softmax,
          _log_softmax_ref, dtypes=FLOATS, doc="x - max - log(sum(exp(x - max))) on the last axis.", recipe=True)
_register("LogSoftmaxLastDimBackward", 2, (), "softmax", OpKind.LogSoftmaxLastDimBackward,
          _infer_log_softmax_bw, _log_softmax_bw_ref, dtypes=FLOATS,
          doc="inputs (y, g): g - exp(y) * sum_last(g).")

# ---------------------------------------------------------------------------
# spec ops rejected with "not supported yet"
# ---------------------------------------------------------------------------
def _unsupported(name):
    def infer(types, params):
        raise UnsupportedOpError(
            f"{name}{fmt_types(types)}: op {name} exists in the fuel spec but is not "
            f"supported yet by fuelc")
    return infer


_INPLACE = ["Relu", "Silu", "Gelu", "Tanh", "Sigmoid", "Neg", "Abs", "Sqr", "Sqrt", "Rsqrt",
            "Recip", "Exp", "Log", "Sin", "Cos", "Sign", "Floor", "Ceil", "Round", "Erf",
            "GeluErf", "Clamp", "PowI"]
for _base in _INPLACE:
    _name = f"{_base}Inplace"
    _params = OP_TABLE[_base].params
    _register(_name, 1, _params, "inplace", OpKind[_name], _unsupported(_name), None,
              supported=False, doc=f"in-place {_base} (destructive on input 0).")

_UNSUPPORTED = [
    # (name, arity, params, category, op_kind)
    ("Alloc", 0, (P("target", "str"), P("shape", "i64s"), P("dtype", "dtype")), "leaf", None),
    ("Copy", 1, (P("target", "str"),), "memory", OpKind.Copy),
    ("Move", 1, (P("target", "str"),), "memory", OpKind.Copy),
    ("Release", 1, (), "memory", None),
    ("ZeroFill", 1, (), "memory", None),
    ("WriteSlice", 2, (P("ranges", "i64s"),), "memory", OpKind.WriteSlice),
    ("WriteSliceRotating", 3, (P("axis", "i64"), P("modulus", "i64"), P("ranges", "i64s")),
     "memory", OpKind.WriteSliceRotating),
    ("WriteSliceDoff", 3, (P("axis", "i64"), P("ranges", "i64s")), "memory",
     OpKind.WriteSliceDoff),
    ("NonZeroIndices", 1, (P("count_sym", "i64"),), "index", OpKind.NonZeroIndices),
    ("View", 1, (P("slot", "i64"),), "view", None),
    ("ViewOwned", 1, (P("slot", "i64"),), "view", None),
    ("ScatterIntoSlot", 2, (P("slot", "i64"),), "memory", None),
    ("Branch", VARIADIC, (P("reconverge_at", "i64"),), "control", None),
    ("Scan", VARIADIC, (P("n_xs", "i64"), P("bound", "i64"), P("emit", "bool"),
                        P("early_exit", "bool")), "control", None),
    ("ScanPlaceholder", 0, (P("role", "str"), P("index", "i64")), "control", None),
]
for _name, _arity, _params, _cat, _kind in _UNSUPPORTED:
    _register(_name, _arity, _params, _cat, _kind, _unsupported(_name), None, supported=False)

FLOAT_ONLY = frozenset(FLOAT_ONLY)
