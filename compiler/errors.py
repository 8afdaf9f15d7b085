"""The compiler's exceptions, all under ``runtime.errors.FuelError``."""
from runtime.errors import FuelError


class CompilerError(FuelError):
    """Base of errors raised by the compiler."""


class GraphBuildError(CompilerError, ValueError):
    """A node could not be built: bad shapes, dtypes or params. The message
    names the node, the op, the operand shapes/dtypes and the rule broken."""


class UnsupportedOpError(CompilerError, NotImplementedError):
    """An op that exists in the spec but is not supported (yet)."""
