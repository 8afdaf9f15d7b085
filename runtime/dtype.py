"""The closed set of element types (fuel-spec §2.1) and their numpy mapping.

``DType`` is the single source of truth for element types across the runtime
and the compiler. Sixteen variants; the sub-byte float formats report a byte
size of 0 (the cost model prices them at 1 byte per element).

bf16 and the fp8/fp6/fp4 formats have no numpy dtype: their tensors are
carried as raw ``uint8``/``uint16`` bit patterns (``DType.storage_numpy``), and
``bf16_to_f32``/``f32_to_bf16``/``f16_to_f32``/``f32_to_f16`` convert them.
"""
from __future__ import annotations

import enum

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

    # -- facts ------------------------------------------------------------
    @property
    def size_in_bytes(self) -> int:
        """Bytes per element; 0 for the sub-byte formats (spec §2.1)."""
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
        return self not in (DType.U8, DType.U32, DType.F8E8M0, DType.F8E6M2)

    @property
    def numpy(self) -> np.dtype | None:
        """The numpy dtype with the same semantics, or None (bf16, fp8, ...)."""
        name = _NUMPY.get(self)
        return np.dtype(name) if name else None

    @property
    def storage_numpy(self) -> np.dtype:
        """The numpy dtype used to hold the raw elements in memory."""
        n = self.numpy
        if n is not None:
            return n
        return np.dtype(np.uint16) if self.itemsize == 2 else np.dtype(np.uint8)

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
        npd = np.dtype(npd)
        for d, name in _NUMPY.items():
            if np.dtype(name) == npd:
                return d
        if npd == np.dtype(np.bool_):
            return DType.U8
        raise UnknownDTypeError(
            f"numpy dtype {npd} has no fuel DType; supported: "
            f"{', '.join(sorted(set(_NUMPY.values())))}"
        )

    def __str__(self) -> str:  # "f32", as users write it
        return self.value


_SIZES = {
    DType.U8: 1, DType.I8: 1, DType.U32: 4, DType.I16: 2, DType.I32: 4, DType.I64: 8,
    DType.BF16: 2, DType.F16: 2, DType.F32: 4, DType.F64: 8, DType.F8E4M3: 1,
    DType.F6E2M3: 0, DType.F6E3M2: 0, DType.F4: 0, DType.F8E8M0: 1, DType.F8E6M2: 1,
}
_INTS = frozenset({DType.U8, DType.I8, DType.U32, DType.I16, DType.I32, DType.I64})
_NUMPY = {
    DType.U8: "uint8", DType.I8: "int8", DType.U32: "uint32", DType.I16: "int16",
    DType.I32: "int32", DType.I64: "int64", DType.F16: "float16", DType.F32: "float32",
    DType.F64: "float64",
}
_ALIASES: dict[str, DType] = {d.value: d for d in DType}
_ALIASES.update({d.name.lower(): d for d in DType})
_ALIASES.update({name: d for d, name in _NUMPY.items()})
_ALIASES.update({
    "bfloat16": DType.BF16, "half": DType.F16, "float": DType.F32, "double": DType.F64,
    "bool": DType.U8, "uint8": DType.U8, "int": DType.I64, "long": DType.I64,
    "float8_e4m3": DType.F8E4M3, "float8_e4m3fn": DType.F8E4M3,
    "float8_e8m0": DType.F8E8M0, "float4": DType.F4,
})


# -- raw-bit conversions for formats numpy lacks ---------------------------
def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (round-to-nearest-even), returning the
    uint16 bit patterns. NaN stays NaN."""
    x = np.require(x, np.float32, "C")  # (ascontiguousarray would make rank 0 rank 1)
    bits = x.view(np.uint32).astype(np.uint64)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    out = ((bits + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen bfloat16 bit patterns (uint16) to float32 exactly."""
    b = np.require(bits, np.uint16, "C")
    return (b.astype(np.uint32) << 16).view(np.float32)


def f32_to_f16(x: np.ndarray) -> np.ndarray:
    """Round to IEEE half; returns the uint16 bit patterns."""
    return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)


def f16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen IEEE half bit patterns (uint16) to float32 exactly."""
    return np.require(bits, np.uint16, "C").view(np.float16).astype(np.float32)
