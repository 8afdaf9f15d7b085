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
    return None
