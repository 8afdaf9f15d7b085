"""The runtime's exception hierarchy. Every error users can see derives from
``FuelError``; messages name the key or op, the operands, and what exists."""


class FuelError(Exception):
    """Base of every error raised by fuelc (runtime and compiler)."""


class UnknownDTypeError(FuelError, ValueError):
    """A dtype name or numpy dtype that has no fuel DType."""
