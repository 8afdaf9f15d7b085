"""ONNX element types <-> fuelc dtypes and numpy dtypes."""
from __future__ import annotations

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
    TensorProto.BOOL: (DType.U8, np.bool_),
}


def _name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


def dtype_of(elem_type: int) -> DType:
    if elem_type not in _TYPES:
        raise Unsupported(f"element type {_name(elem_type)} has no fuelc dtype (supported: "
                          f"{', '.join(_name(t) for t in _TYPES)})")
    return _TYPES[elem_type][0]


def numpy_of(elem_type: int):
    if elem_type not in _TYPES or elem_type == TensorProto.BFLOAT16:
        raise Unsupported(f"cannot fold a cast to {_name(elem_type)}")
    return _TYPES[elem_type][1]
