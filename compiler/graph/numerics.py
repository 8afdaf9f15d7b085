"""How the numpy reference represents and computes each element type.

One place states the reference's numeric conventions, so every op's
``reference`` follows them without restating them:

* A tensor value is a numpy array in its dtype's ``DType.storage_numpy``:
  bf16 travels as ``uint16`` bit patterns, f16 as ``float16``. Because no
  other DType is stored as ``uint16``, an array's numpy dtype identifies its
  fuel dtype (``dtype_of``).
* Element-wise float math runs in float32 for bf16/f16/f32 and in float64 for
  f64; the result is rounded once to the output dtype (round to nearest even).
* Accumulations (sums, means, cumulative sums, matmul, softmax family,
  index/scatter adds) run in float64 and round once at the end, so the oracle
  is at least as accurate as any kernel it judges.
* Integer arithmetic wraps (two's complement) in the operand dtype.
* The fp8/fp6/fp4 formats have no reference numerics; ops reject them at
  build time through ``OpDef.dtypes``.
"""
from __future__ import annotations

import numpy as np

from runtime.dtype import DType, bf16_to_f32, f32_to_bf16

#: dtypes the reference interpreter can compute on.
NUMERIC = frozenset({DType.U8, DType.I8, DType.U32, DType.U64, DType.I16, DType.I32, DType.I64,
                     DType.BF16, DType.F16, DType.F32, DType.F64})
FLOATS = frozenset({DType.BF16, DType.F16, DType.F32, DType.F64})
INTS = NUMERIC - FLOATS


def dtype_of(arr: np.ndarray) -> DType:
    """The fuel dtype of a storage array (``uint16`` is bf16)."""
    if arr.dtype == np.uint16:
        return DType.BF16
    return DType.from_numpy(arr.dtype)


def to_compute(arr: np.ndarray, wide: bool = False) -> np.ndarray:
    """Decode a storage array into numbers: floats as float32 (float64 when
    ``wide`` or f64), integers unchanged."""
    arr = np.asarray(arr)
    dt = dtype_of(arr)
    if dt == DType.BF16:
        out = bf16_to_f32(arr)
    elif dt.is_float:
        out = arr.astype(np.float32) if dt == DType.F16 else arr
    else:
        return arr
    return out.astype(np.float64) if wide else out


def from_compute(values, dtype: DType) -> np.ndarray:
    """Round computed numbers to ``dtype`` and return its storage array."""
    values = np.asarray(values)
    if dtype == DType.BF16:
        return f32_to_bf16(values.astype(np.float32)).reshape(values.shape)
    if dtype.is_float:
        return values.astype(dtype.numpy)
    return cast_to_int(values, dtype)


def cast_to_int(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Convert numbers to an integer dtype: floats truncate toward zero and
    saturate at the type's range (NaN becomes 0); integers wrap."""
    values = np.asarray(values)
    target = dtype.numpy
    if values.dtype.kind == "f":
        info = np.iinfo(target)
        v = np.trunc(values.astype(np.float64))
        out = np.zeros(v.shape, dtype=target)
        high = v >= float(info.max)
        low = v <= float(info.min)
        mid = ~(high | low | np.isnan(v))
        out[high] = info.max
        out[low] = info.min
        out[mid] = v[mid].astype(target)
        return out
    return values.astype(target)


def scalar_storage(value: float, dtype: DType) -> np.ndarray:
    """A rank-0 storage array holding ``value`` in ``dtype``."""
    if dtype.is_float:
        return from_compute(np.asarray(value, dtype=np.float64), dtype)
    return np.asarray(int(value)).astype(dtype.numpy)
