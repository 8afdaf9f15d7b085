"""Identity types of the binding table: ``BackendId``, ``FusedOpId`` and
``BindingKey`` (static op kinds and runtime fused ids)."""
from __future__ import annotations

import dataclasses
import enum
from typing import Union

from .errors import BindingTableError
from .opkind import OpKind


class BackendId(enum.Enum):
    """A kernel backend. ``value`` is the lowercase name used in plans."""

    CPU = "cpu"
    CUDA = "cuda"
    VULKAN = "vulkan"
    METAL = "metal"

    @property
    def is_gpu_class(self) -> bool:
        """True for the GPU-class backends (GPU-class roofline rates)."""
        return self is not BackendId.CPU

    @classmethod
    def parse(cls, value: "BackendId | str") -> "BackendId":
        """Accept a BackendId or its name/value ("cpu", "CPU"); raise
        BindingTableError naming the known backends."""
        if isinstance(value, BackendId):
            return value
        if isinstance(value, str):
            for b in cls:
                if value.strip().lower() == b.value:
                    return b
        raise BindingTableError(
            f"unknown backend {value!r}; expected one of {', '.join(b.value for b in cls)}")

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True, order=True)
class FusedOpId:
    """A fused-op id (u16). ``0`` is UNASSIGNED; static ids are
    ``1..RUNTIME_FUSED_BASE``; runtime-registered ids are ``>= 0x8000``."""

    value: int

    RUNTIME_FUSED_BASE = 0x8000  # class constant, not a field (no annotation)

    def __post_init__(self):
        if isinstance(self.value, bool) or not isinstance(self.value, int) \
                or not 0 <= self.value <= 0xFFFF:
            raise BindingTableError(f"FusedOpId must be an integer in 0..=0xFFFF, got {self.value!r}")

    @property
    def is_runtime(self) -> bool:
        """True for runtime-registered (Tier-2) ids, ``>= RUNTIME_FUSED_BASE``."""
        return self.value >= self.RUNTIME_FUSED_BASE

    def __str__(self) -> str:
        return f"FusedOpId({self.value:#x})" if self.is_runtime else f"FusedOpId({self.value})"


FusedOpId.UNASSIGNED = FusedOpId(0)


_STATIC_KEYS: "dict[OpKind, BindingKey]" = {}


@dataclasses.dataclass(frozen=True)
class BindingKey:
    """The op half of a binding-table key: either a static ``OpKind`` or a
    runtime fused op's ``FusedOpId``. Build with ``BindingKey.static(op)`` /
    ``BindingKey.runtime_fused(fid)`` (aliases ``Static`` / ``RuntimeFused``)
    or coerce with ``BindingKey.of(x)``. Exactly one of ``op`` / ``fused`` is set.
    """

    op: OpKind | None = None
    fused: FusedOpId | None = None

    def __post_init__(self):
        if (self.op is None) == (self.fused is None):
            raise BindingTableError("BindingKey needs exactly one of op (OpKind) or fused (FusedOpId)")
        if self.op is not None:
            if not isinstance(self.op, OpKind):
                raise BindingTableError(f"BindingKey.op must be an OpKind, got {self.op!r}")
            if self.op is OpKind.RuntimeFused:
                raise BindingTableError(
                    "OpKind.RuntimeFused is a tag only and never a table key; "
                    "use BindingKey.runtime_fused(FusedOpId(...))")
        if self.fused is not None:
            if not isinstance(self.fused, FusedOpId):
                raise BindingTableError(f"BindingKey.fused must be a FusedOpId, got {self.fused!r}")
            if not self.fused.is_runtime:
                raise BindingTableError(
                    f"BindingKey.runtime_fused needs a runtime id (>= 0x8000), got {self.fused}; "
                    "static fused ops are keyed by their OpKind")

    @classmethod
    def static(cls, op: "OpKind | str") -> "BindingKey":
        return cls(op=OpKind.parse(op))

    @classmethod
    def runtime_fused(cls, fid: "FusedOpId | int") -> "BindingKey":
        return cls(fused=fid if isinstance(fid, FusedOpId) else FusedOpId(fid))

    Static = static
    RuntimeFused = runtime_fused

    @classmethod
    def of(cls, key: "BindingKeyLike") -> "BindingKey":
        """Coerce an OpKind, an OpKind name, a runtime FusedOpId or a
        BindingKey to a BindingKey."""
        if isinstance(key, BindingKey):
            return key
        if isinstance(key, FusedOpId):
            return cls.runtime_fused(key)
        if isinstance(key, OpKind) and cls is BindingKey:  # one frozen key per kind: a
            found = _STATIC_KEYS.get(key)  # table's build and its lookups ask thousands of times
            return found if found is not None else _STATIC_KEYS.setdefault(key, cls.static(key))
        if isinstance(key, (OpKind, str)):
            return cls.static(key)
        raise BindingTableError(
            f"cannot use {key!r} as a BindingKey; expected an OpKind, a FusedOpId or a BindingKey")

    @property
    def static_op(self) -> OpKind | None:
        """The OpKind of a static key; None for a runtime-fused key."""
        return self.op

    @property
    def is_runtime_fused(self) -> bool:
        return self.fused is not None

    def to_json(self) -> dict:
        return {"op": self.op.name} if self.op is not None else {"fused": self.fused.value}

    @classmethod
    def from_json(cls, d: dict) -> "BindingKey":
        if not isinstance(d, dict) or not ({"op"} == set(d) or {"fused"} == set(d)):
            raise BindingTableError(f"malformed BindingKey {d!r}; expected {{'op': name}} or {{'fused': int}}")
        return cls.static(d["op"]) if "op" in d else cls.runtime_fused(d["fused"])

    def __str__(self) -> str:
        return f"Static({self.op.name})" if self.op is not None else f"RuntimeFused({self.fused.value:#x})"


BindingKeyLike = Union[BindingKey, OpKind, FusedOpId, str]


def binding_dtypes(kind: OpKind, in_dtypes, out_dtypes) -> tuple:
    """The dtype part of a binding key for an op of ``kind`` with these
    operand and result dtypes: inputs then outputs, except variadic Concat,
    keyed ``[T_in, T_out]`` whatever its operand count (the one place that
    spells this convention; planner and passes derive keys from it)."""
    ins, outs = tuple(in_dtypes), tuple(out_dtypes)
    if kind is OpKind.Concat and ins and all(d == ins[0] for d in ins):
        return (ins[0],) + outs
    return ins + outs
