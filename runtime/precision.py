"""``PrecisionGuarantee``: a kernel's static numeric claim."""
from __future__ import annotations

import dataclasses
from typing import Optional

from .errors import BindingTableError

_UNAUDITED_NOTES = "unaudited: no precision claim has been made for this kernel"


@dataclasses.dataclass(frozen=True)
class PrecisionGuarantee:
    """What a kernel promises about its numerics. ``None`` bounds mean "no
    claim". Constants: ``REFERENCE``, ``PRIMITIVE_DETERMINISTIC_CPU``,
    ``UNAUDITED`` (the default of a plain ``register``); ``none(reason)``
    records an audited conclusion that no static bound applies."""

    bit_stable_on_same_hardware: bool = False
    max_ulp: Optional[int] = None
    max_relative: Optional[float] = None
    max_absolute: Optional[float] = None
    notes: str = ""

    def __post_init__(self):
        if not isinstance(self.bit_stable_on_same_hardware, bool):
            raise BindingTableError(f"PrecisionGuarantee.bit_stable_on_same_hardware must be a bool, got {self.bit_stable_on_same_hardware!r}")
        if self.max_ulp is not None and (isinstance(self.max_ulp, bool) or not isinstance(self.max_ulp, int) or self.max_ulp < 0):
            raise BindingTableError(f"PrecisionGuarantee.max_ulp must be an int >= 0 or None, got {self.max_ulp!r}")
        for name in ("max_relative", "max_absolute"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0):
                raise BindingTableError(f"PrecisionGuarantee.{name} must be a number >= 0 or None, got {v!r}")
        if not isinstance(self.notes, str):
            raise BindingTableError(f"PrecisionGuarantee.notes must be a str, got {self.notes!r}")

    @staticmethod
    def none(reason: str) -> "PrecisionGuarantee":
        """An audited "no static bound applies" conclusion (fields as
        UNAUDITED, ``notes = reason``). The reason must be non-empty."""
        if not isinstance(reason, str) or not reason.strip() or reason == _UNAUDITED_NOTES:
            raise BindingTableError("PrecisionGuarantee.none(reason) needs a non-empty audit reason")
        return PrecisionGuarantee(notes=reason)

    def makes_no_static_claim(self) -> bool:
        """Not bit-stable and no numeric bound (UNAUDITED and none(...))."""
        return (not self.bit_stable_on_same_hardware and self.max_ulp is None
                and self.max_relative is None and self.max_absolute is None)

    def is_audited_no_bound(self) -> bool:
        """``makes_no_static_claim`` with notes that are non-empty and not
        UNAUDITED's: an explicit audit conclusion the fill pass must keep."""
        return self.makes_no_static_claim() and bool(self.notes) and self.notes != _UNAUDITED_NOTES

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "PrecisionGuarantee":
        try:
            return cls(**d)
        except TypeError as e:
            raise BindingTableError(f"malformed PrecisionGuarantee {d!r}: {e}") from None


PrecisionGuarantee.REFERENCE = PrecisionGuarantee(True, 0, 0.0, 0.0, "reference: exact")
PrecisionGuarantee.PRIMITIVE_DETERMINISTIC_CPU = PrecisionGuarantee(
    True, None, None, None,
    "deterministic loop order; half-precision inputs accumulate in F32; bit-stable per hardware")
PrecisionGuarantee.UNAUDITED = PrecisionGuarantee(False, None, None, None, _UNAUDITED_NOTES)
