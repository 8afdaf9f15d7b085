"""The closed set of element types and their numpy mapping.

``DType`` is the single source of truth for element types across the runtime
and the compiler. Seventeen variants; the sub-byte float formats report a byte
size of 0 (the cost model prices them at 1 byte per element).

Two numpy views of one element type:

* ``DType.numpy`` is the type tensors cross the Python API in. bf16 and the
  fp8/fp6/fp4 formats are the ``ml_dtypes`` types the ecosystem uses (JAX,
  ONNX, TensorFlow): ``ml_dtypes.bfloat16``, ``float8_e4m3fn``,
  ``float8_e8m0fnu``, ``float6_e2m3fn``, ``float6_e3m2fn``, ``float4_e2m1fn``
  (one element per byte). F8E6M2 has none (``None``).
* ``DType.storage_numpy`` is how storages and the reference numerics hold the
  elements: the same for numpy's own types, raw ``uint16``/``uint8`` bit
  patterns for the others. ``to_storage``/``from_storage`` convert between
  the two (zero-copy views), and ``bf16_to_f32``/``f32_to_bf16``/
  ``f16_to_f32``/``f32_to_f16`` convert bit patterns to and from numbers.
"""
from __future__ import annotations

import enum
import sys
import threading

import numpy as np

from .errors import UnknownDTypeError


class DType(enum.Enum):
    """An element type. ``value`` is the short lowercase name (``"f32"``)."""

    U8 = "u8"
    I8 = "i8"
    U32 = "u32"
    I16 = "i16"
    I32 = "i32"
    I64 = "i64"
    BF16 = "bf16"
    F16 = "f16"
    F32 = "f32"
    F64 = "f64"
    F8E4M3 = "f8e4m3"
    F6E2M3 = "f6e2m3"
    F6E3M2 = "f6e3m2"
    F4 = "f4"
    F8E8M0 = "f8e8m0"
    F8E6M2 = "f8e6m2"
    U64 = "u64"

    # Members are singletons compared by identity: hash them by identity too
    # (Enum's own __hash__ is Python code hashing the name, and the executor
    # looks dtypes up in dicts on every step of every run).
    __hash__ = object.__hash__

    # -- facts ------------------------------------------------------------
    @property
    def size_in_bytes(self) -> int:
        """Bytes per element; 0 for the sub-byte formats."""
        return _SIZES[self]

    @property
    def itemsize(self) -> int:
        """Bytes per element as stored in memory (sub-byte formats: 1)."""
        return max(1, _SIZES[self])

    @property
    def is_float(self) -> bool:
        return self not in _INTS

    @property
    def is_int(self) -> bool:
        return self in _INTS

    @property
    def is_signed(self) -> bool:
        return self not in _UNSIGNED and self not in (DType.F8E8M0, DType.F8E6M2)

    @property
    def is_unsigned_int(self) -> bool:
        """U8/U32/U64: integer arithmetic picks the unsigned ops
        (divui, cmpi ult, uitofp, extui)."""
        return self in _UNSIGNED

    @property
    def numpy(self) -> np.dtype | None:
        """The numpy dtype with the same semantics, the type arrays of this
        dtype cross the Python API in (``ml_dtypes.bfloat16`` for bf16, the
        ``ml_dtypes`` float8/6/4 types), or None (F8E6M2)."""
        npd = _NUMPY.get(self)
        if npd is None and self in _ML_NAMES:
            npd = _load_ml_dtypes()[self]
        return npd

    @property
    def storage_numpy(self) -> np.dtype:
        """The numpy dtype used to hold the raw elements in memory: ``numpy``
        for numpy's own types, else the unsigned bit patterns (bf16: uint16)."""
        if self in _BITS:
            return np.dtype(np.uint16) if self.itemsize == 2 else np.dtype(np.uint8)
        return _NUMPY[self]

    # -- conversions ------------------------------------------------------
    @classmethod
    def parse(cls, value: "DType | str | np.dtype | type") -> "DType":
        """Accept a DType, a short name ("f32"), a long name ("float32",
        "bfloat16"), or a numpy dtype/type. Raises UnknownDTypeError."""
        if isinstance(value, DType):
            return value
        if isinstance(value, str):
            key = value.strip().lower()
            if key in _ALIASES:
                return _ALIASES[key]
            raise UnknownDTypeError(
                f"unknown dtype {value!r}; expected one of "
                f"{', '.join(d.value for d in DType)} (or a numpy name such as 'float32')"
            )
        try:
            npd = np.dtype(value)
        except TypeError:
            raise UnknownDTypeError(f"cannot interpret {value!r} as a dtype") from None
        return cls.from_numpy(npd)

    @classmethod
    def from_numpy(cls, npd: np.dtype) -> "DType":
        """The DType whose ``numpy`` is ``npd`` (bool is U8). Raw ``uint16``
        has none: bf16 arrays are ``ml_dtypes.bfloat16``."""
        try:
            npd = np.dtype(npd)
        except TypeError:  # "bfloat16" and co. name a dtype once ml_dtypes is loaded
            _load_ml_dtypes()
            npd = np.dtype(npd)
        d = _FROM_NUMPY.get(npd)
        if d is None and "ml_dtypes" in sys.modules:  # an ml_dtypes array: the module is loaded
            _load_ml_dtypes()
            d = _FROM_NUMPY.get(npd)
        if d is not None:
            return d
        if npd == np.dtype(np.bool_):
            return DType.U8
        hint = (" (for bf16 bit patterns use bits.view(ml_dtypes.bfloat16))"
                if npd == np.dtype(np.uint16) else "")
        raise UnknownDTypeError(
            f"numpy dtype {npd} has no fuel DType{hint}; supported: "
            f"{', '.join(sorted([t.name for t in _NATIVE.values()] + list(_ML_NAMES.values())))}"
        )

    def __str__(self) -> str:  # "f32", as users write it
        return self.value


_SIZES = {
    DType.U8: 1, DType.I8: 1, DType.U32: 4, DType.I16: 2, DType.I32: 4, DType.I64: 8,
    DType.BF16: 2, DType.F16: 2, DType.F32: 4, DType.F64: 8, DType.F8E4M3: 1,
    DType.F6E2M3: 0, DType.F6E3M2: 0, DType.F4: 0, DType.F8E8M0: 1, DType.F8E6M2: 1,
    DType.U64: 8,
}
_UNSIGNED = frozenset({DType.U8, DType.U32, DType.U64})
_INTS = _UNSIGNED | {DType.I8, DType.I16, DType.I32, DType.I64}
_NATIVE: dict[DType, np.dtype] = {d: np.dtype(t) for d, t in {
    DType.U8: np.uint8, DType.I8: np.int8, DType.U32: np.uint32, DType.I16: np.int16,
    DType.I32: np.int32, DType.I64: np.int64, DType.F16: np.float16, DType.F32: np.float32,
    DType.F64: np.float64, DType.U64: np.uint64,
}.items()}
#: the API types from ml_dtypes, by name: importing ml_dtypes costs most of a
#: second, so it is loaded on first use (``_load_ml_dtypes``), never by
#: ``import runtime`` alone
_ML_NAMES: dict[DType, str] = {
    DType.BF16: "bfloat16", DType.F8E4M3: "float8_e4m3fn", DType.F8E8M0: "float8_e8m0fnu",
    DType.F6E2M3: "float6_e2m3fn", DType.F6E3M2: "float6_e3m2fn", DType.F4: "float4_e2m1fn",
}
#: DType -> its API numpy dtype (the ml_dtypes ones once loaded)
_NUMPY: dict[DType, np.dtype] = dict(_NATIVE)
#: dtypes whose storage holds bit patterns (numpy has no arithmetic type for them)
_BITS = frozenset(DType) - set(_NATIVE)
_FROM_NUMPY = {t: d for d, t in _NATIVE.items()}
_ml_lock = threading.Lock()


def _load_ml_dtypes() -> dict[DType, np.dtype]:
    """Import ml_dtypes and add its types to the tables; returns ``_NUMPY``."""
    if DType.BF16 not in _NUMPY:
        with _ml_lock:
            if DType.BF16 not in _NUMPY:
                import ml_dtypes
                types = {d: np.dtype(getattr(ml_dtypes, name)) for d, name in _ML_NAMES.items()}
                _FROM_NUMPY.update({t: d for d, t in types.items()})
                _NUMPY.update(types)  # last: BF16 present means every table is complete
    return _NUMPY


_ALIASES: dict[str, DType] = {d.value: d for d in DType}
_ALIASES.update({d.name.lower(): d for d in DType})
_ALIASES.update({t.name: d for d, t in _NATIVE.items()})
_ALIASES.update({name: d for d, name in _ML_NAMES.items()})
_ALIASES.update({
    "bfloat16": DType.BF16, "half": DType.F16, "float": DType.F32, "double": DType.F64,
    "bool": DType.U8, "uint8": DType.U8, "int": DType.I64, "long": DType.I64,
    "float8_e4m3": DType.F8E4M3, "float8_e4m3fn": DType.F8E4M3,
    "float8_e8m0": DType.F8E8M0, "float4": DType.F4,
})


# -- the API type <-> the storage type -------------------------------------
def to_storage(arr, dtype: DType, what: str = "array") -> np.ndarray:
    """``arr``, an array of ``dtype.numpy`` (``ml_dtypes.bfloat16`` for bf16),
    as ``dtype.storage_numpy`` (a zero-copy view for the bit-pattern types).
    Raises UnknownDTypeError naming ``what`` for any other numpy dtype. Raw
    ``uint16`` is refused for bf16, as JAX, ONNX Runtime and TensorFlow do
    (numbers or bit patterns would be a guess): wrap bit patterns with
    ``bits.view(ml_dtypes.bfloat16)``. (F8E6M2 has no API type: raw uint8.)
    A numpy ``bool`` array is taken for u8 (as 0 and 1: how fuelc holds ONNX
    bool tensors, and what onnxruntime takes for them)."""
    arr = np.asarray(arr)
    want = dtype.numpy if dtype.numpy is not None else dtype.storage_numpy
    if arr.dtype == np.bool_ and dtype == DType.U8:
        return arr.view(np.uint8)   # 0 and 1, as ONNX bool tensors are held (lossless)
    if arr.dtype != want:
        hint = ""
        if dtype.numpy is not None and dtype in _BITS:
            t = f"ml_dtypes.{want.name}"
            hint = f"; from raw bit patterns: bits.view({t}), from numbers: x.astype({t})"
        raise UnknownDTypeError(f"{what}: a {dtype} array must have numpy dtype {want}, "
                                f"got {arr.dtype}{hint}")
    return arr.view(dtype.storage_numpy) if arr.dtype != dtype.storage_numpy else arr


def from_storage(arr: np.ndarray, dtype: DType) -> np.ndarray:
    """A storage array of ``dtype`` as ``dtype.numpy`` (a zero-copy view);
    the inverse of ``to_storage``. F8E6M2 stays raw ``uint8``."""
    want = dtype.numpy
    if dtype in _BITS and want is not None:
        return np.asarray(arr).view(want)
    return np.asarray(arr)


# -- raw-bit conversions for formats numpy lacks ---------------------------
def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (round-to-nearest-even), returning the
    uint16 bit patterns. NaN stays NaN."""
    x = np.require(x, np.float32, "C")  # (ascontiguousarray would make rank 0 rank 1)
    bits = x.view(np.uint32).astype(np.uint64)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    # (arithmetic on a rank-0 array gives a numpy scalar, which NaNs cannot be assigned into)
    out = np.asarray((bits + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen bfloat16 bit patterns (uint16), or an ``ml_dtypes.bfloat16``
    array, to float32 exactly."""
    bits = np.asarray(bits)
    if bits.dtype == DType.BF16.numpy:
        bits = bits.view(np.uint16)
    b = np.require(bits, np.uint16, "C")
    return (b.astype(np.uint32) << 16).view(np.float32)


def f32_to_f16(x: np.ndarray) -> np.ndarray:
    """Round to IEEE half; returns the uint16 bit patterns."""
    return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)


def f16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen IEEE half bit patterns (uint16), or a float16 array, to float32
    exactly."""
    bits = np.asarray(bits)
    if bits.dtype == np.float16:
        return bits.astype(np.float32)
    return np.require(bits, np.uint16, "C").view(np.float16).astype(np.float32)
