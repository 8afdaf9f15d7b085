"""ONNX element types <-> fuelc dtypes and numpy dtypes."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto

from runtime.dtype import DType

from ._fold import Unsupported

#: ONNX element type -> (fuelc dtype, numpy dtype of folded values). BOOL is
#: u8 in the graph (0/1, as comparisons produce) and np.bool_ when folded.
_TYPES = {
    TensorProto.FLOAT: (DType.F32, np.float32),
    TensorProto.DOUBLE: (DType.F64, np.float64),
    TensorProto.FLOAT16: (DType.F16, np.float16),
    TensorProto.BFLOAT16: (DType.BF16, np.float32),
    TensorProto.INT8: (DType.I8, np.int8),
    TensorProto.UINT8: (DType.U8, np.uint8),
    TensorProto.INT16: (DType.I16, np.int16),
    TensorProto.INT32: (DType.I32, np.int32),
    TensorProto.INT64: (DType.I64, np.int64),
    TensorProto.UINT32: (DType.U32, np.uint32),
    TensorProto.UINT64: (DType.U64, np.uint64),
    TensorProto.BOOL: (DType.U8, np.bool_),
}


#: element types that exist only as constants folded at import, with why the
#: graph cannot hold them.
_FOLD_ONLY = {
    TensorProto.FLOAT8E4M3FN: (ml_dtypes.float8_e4m3fn,
                               "it matches runtime.DType.F8E4M3, but fuelc's graph ops (Cast "
                               "included) have no f8e4m3 support, so FLOAT8E4M3FN values exist "
                               "only as constants folded at import"),
    TensorProto.UINT16: (np.uint16, "runtime.DType has no U16; cast it to INT32 in the model "
                                    "(lossless), or keep it a constant folded at import"),
}

#: FLOAT8E4M3FN's largest finite value (Cast with saturate=1 clamps to it).
F8E4M3_MAX = 448.0


def _name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


def dtype_of(elem_type: int) -> DType:
    if elem_type in _FOLD_ONLY:
        raise Unsupported(f"element type {_name(elem_type)} has no fuelc graph dtype: "
                          f"{_FOLD_ONLY[elem_type][1]}")
    if elem_type not in _TYPES:
        raise Unsupported(f"element type {_name(elem_type)} has no fuelc dtype (supported: "
                          f"{', '.join(_name(t) for t in _TYPES)})")
    return _TYPES[elem_type][0]


def elem_type_of(dt: DType) -> int:
    """The ONNX element type of a graph value of dtype ``dt`` (not u8, which
    is UINT8 or BOOL)."""
    return next(et for et, (d, _) in _TYPES.items() if d == dt)


def numpy_of(elem_type: int):
    if elem_type in _FOLD_ONLY:
        return _FOLD_ONLY[elem_type][0]
    if elem_type not in _TYPES or elem_type == TensorProto.BFLOAT16:
        raise Unsupported(f"cannot fold a cast to {_name(elem_type)}")
    return _TYPES[elem_type][1]


def fold_only_reason(dtype: np.dtype):
    """Why a folded array of numpy ``dtype`` cannot become a graph constant
    (its ONNX element type has no fuelc dtype), or None."""
    for et, (npd, why) in _FOLD_ONLY.items():
        if np.dtype(npd) == dtype:
            return f"a constant of element type {_name(et)} feeds a graph op: {why}"
    for et, npd in list(_NARROW_FLOATS.items()) + [(e, n) for e, (_, n) in _NARROW_INTS.items()]:
        if np.dtype(npd) == dtype:
            return (f"a constant of element type {_name(et)} feeds a graph op; fuelc reads "
                    f"narrow-type values only in Cast, CastLike, DequantizeLinear and "
                    f"QuantizeLinear")
    return None


# -- narrow types: graph values held in a byte-wide carrier -----------------
#: ONNX element types narrower than fuelc's dtypes (the float8/float4 formats
#: and the 2- and 4-bit integers). A graph input of one of them is imported as
#: a one-element-per-byte carrier (unpacked at the IO boundary, ``to_carrier``):
#: the float formats as ``u8`` bit patterns, decoded by a 256-entry table
#: lookup in generated code; int4/int2 as ``i8`` values, uint4/uint2 as ``u8``
#: values. Only Cast, CastLike, DequantizeLinear and QuantizeLinear (its zero
#: point) read a carrier.
_NARROW_FLOATS = {
    TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
    TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
    TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
    TensorProto.FLOAT8E8M0: ml_dtypes.float8_e8m0fnu,
    TensorProto.FLOAT4E2M1: ml_dtypes.float4_e2m1fn,
}
_NARROW_INTS = {
    TensorProto.INT4: (DType.I8, ml_dtypes.int4), TensorProto.UINT4: (DType.U8, ml_dtypes.uint4),
    TensorProto.INT2: (DType.I8, ml_dtypes.int2), TensorProto.UINT2: (DType.U8, ml_dtypes.uint2),
}
NARROW = frozenset(_NARROW_FLOATS) | frozenset(_NARROW_INTS)
#: the value range of each narrow integer type (QuantizeLinear clamps to it)
NARROW_INT_RANGES = {TensorProto.INT4: (-8, 7), TensorProto.UINT4: (0, 15),
                     TensorProto.INT2: (-2, 1), TensorProto.UINT2: (0, 3)}


class Narrow:
    """A graph value of a narrow ONNX element type: ``carrier`` is the graph
    tensor (u8 bit patterns, or i8/u8 integer values), ``elem_type`` the
    ONNX type it carries."""

    def __init__(self, carrier, elem_type: int):
        self.carrier, self.elem_type = carrier, elem_type

    @property
    def name(self) -> str:
        return _name(self.elem_type)

    @property
    def is_float(self) -> bool:
        return self.elem_type in _NARROW_FLOATS

    def decode(self, g):
        """The values as a graph tensor: f32 for the float formats (a table
        lookup on the bit patterns: exact, NaN and -0 kept), the i8/u8
        carrier itself for the integer ones."""
        if not self.is_float:
            return self.carrier
        table = g.constant(decode_table(self.elem_type))
        x = self.carrier
        idx = x.cast(DType.U32).reshape(-1)
        return table.index_select(idx, 0).reshape(*x.shape)


#: the narrow types a Cast produces (``encode``)
ENCODABLE = frozenset({TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ,
                       TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ,
                       TensorProto.FLOAT4E2M1})


def encode(g, x, elem_type: int, saturate: bool):
    """``x`` (a float graph tensor) rounded to nearest even into the bit
    patterns (u8 carrier) of the narrow float ``elem_type``, as ONNX's Cast:
    ``saturate`` clamps overflow and infinities to +-max; without it they
    become what ``ml_dtypes`` gives (inf for e5m2, NaN for the others, max
    for float4, which has neither). In generated code, exactly: the magnitude's
    code is the number of rounding thresholds (the midpoints between
    neighbouring values, a tie going up only from an odd code) it reaches, the
    signed pattern a lookup on (code, sign), NaN a select."""
    ml = _NARROW_FLOATS[elem_type]
    codes = 8 if elem_type == TensorProto.FLOAT4E2M1 else 128
    pos = np.arange(codes, dtype=np.uint8).view(ml).astype(np.float64)
    k = int(np.nonzero(np.isfinite(pos))[0].max())  # largest finite positive code
    vals = pos[:k + 1]
    top = vals[k] + (vals[k] - vals[k - 1]) / 2  # from here RNE leaves the format
    mids = np.append((vals[:-1] + vals[1:]) / 2, top)
    odd = np.arange(k + 1) % 2 == 1  # a tie at mids[i] rounds up iff code i is odd
    wide = DType.F64 if x.dtype == DType.F64 else DType.F32
    a = (x if x.dtype == wide else x.cast(wide)).abs().unsqueeze(-1)

    def reached(ms, strict):
        c = g.constant(ms.astype(wide.numpy))
        return ((a > c) if strict else (a >= c)).cast(DType.I32).sum(-1)
    j = reached(mids[~odd], True) + reached(mids[odd], False)  # 0..k+1
    over = (np.array([np.inf, -np.inf]) if not saturate else
            np.array([vals[k], -vals[k]]))
    table = np.concatenate([vals, over[:1], -vals, over[1:]]).astype(ml).view(np.uint8)
    from compiler.graph import maximum  # the sign bit: x < 0, or -0 (1 / -0 = -inf)
    neg = maximum((x < 0.0).cast(DType.I32), ((1.0 / x) < 0.0).cast(DType.I32)) * (k + 2)
    code = g.constant(table).index_select((j + neg).reshape(-1).cast(DType.U32), 0)
    code = code.reshape(*x.shape)
    nan = np.array([np.nan]).astype(ml).view(np.uint8)
    return (x != x).where(g.constant(nan.reshape(())), code)


def encode_int(x, elem_type: int):
    """Float ``x`` cast to a narrow integer type as ONNX's reference
    (``ml_dtypes``) does: truncated toward zero, and 0 where that is outside
    the type's range (NaN and infinities included); an i8/u8 carrier."""
    lo, hi = NARROW_INT_RANGES[elem_type]
    t = x.cast(DType.I32)  # truncates; NaN -> 0, out of i32 range saturates
    inside = ((t >= lo).cast(DType.I32) * (t <= hi).cast(DType.I32)) != 0
    return inside.where(t, 0).cast(carrier_dtype(elem_type))


def decode_table(elem_type: int) -> np.ndarray:
    """The f32 value of each of the 256 bit patterns of a narrow float type."""
    return np.arange(256, dtype=np.uint8).view(_NARROW_FLOATS[elem_type]).astype(np.float32)


def carrier_dtype(elem_type: int) -> DType:
    return DType.U8 if elem_type in _NARROW_FLOATS else _NARROW_INTS[elem_type][0]


def to_carrier(arr, elem_type: int) -> np.ndarray:
    """An array of a narrow type (the ``ml_dtypes`` type ONNX uses) as the
    graph's carrier: bit patterns for the float formats, i8/u8 values for
    the integer ones. Raises ValueError for an array of another dtype."""
    arr = np.asarray(arr)
    want = _NARROW_FLOATS.get(elem_type) or _NARROW_INTS[elem_type][1]
    if arr.dtype != np.dtype(want):
        raise ValueError(f"an input of element type {_name(elem_type)} takes an array of "
                         f"ml_dtypes.{np.dtype(want).name}, got {arr.dtype}")
    if elem_type in _NARROW_FLOATS:
        return arr.view(np.uint8)
    return arr.astype(carrier_dtype(elem_type).numpy)


def from_carrier(arr, elem_type: int) -> np.ndarray:
    """A narrow output's carrier (bit patterns, or i8/u8 values) as its
    ``ml_dtypes`` array."""
    if elem_type in _NARROW_FLOATS:
        return np.asarray(arr).view(_NARROW_FLOATS[elem_type])
    return np.asarray(arr).astype(_NARROW_INTS[elem_type][1])


def narrow_constant(arr: np.ndarray):
    """A folded constant of a narrow float type as f32 values (exact), or
    None for any other array."""
    for npd in _NARROW_FLOATS.values():
        if arr.dtype == np.dtype(npd):
            return arr.astype(np.float32)
    for _, npd in _NARROW_INTS.values():
        if arr.dtype == np.dtype(npd):
            return arr.astype(np.int32)
    return None
