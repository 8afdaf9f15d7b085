"""The compiler's exceptions, all under ``runtime.errors.FuelError``."""
from runtime.errors import FuelError


class CompilerError(FuelError):
    """Base of errors raised by the compiler."""


class GraphBuildError(CompilerError, ValueError):
    """A node could not be built: bad shapes, dtypes or params. The message
    names the node, the op, the operand shapes/dtypes and the rule broken."""


class UnsupportedOpError(CompilerError, NotImplementedError):
    """An op of the op table (``compiler/graph/ops.py``) that fuelc does not support yet."""


class DialectError(CompilerError, ValueError):
    """The fuel dialect rejected something: malformed dialect text, an op the
    verifier refuses, a dtype with no MLIR element type. The message carries
    MLIR's own diagnostic text."""


class LoweringError(CompilerError):
    """A fuel op could not be lowered to linalg/tensor/arith/math. The
    message names the op, its operand types and what would fix it."""


class CodegenError(CompilerError):
    """Machine-code generation failed after MLIR (LLVM rejected the IR, or
    the object could not be emitted). The message carries LLVM's text."""


class PipelineError(CompilerError):
    """An MLIR pass pipeline failed. The message carries MLIR's diagnostics,
    the path of the reproducer (the stage's input IR) and the exact command
    that reruns the failing stage."""


class PassError(CompilerError):
    """A pass pipeline could not be built or failed. ``diagnostics`` holds the
    diagnostics emitted (``compiler.passes.diagnostics.Diagnostic``);
    ``reproducer`` the path of the input IR written on failure (or None) and
    ``command`` the exact ``python -m compiler.opt`` line that reruns it."""

    def __init__(self, message: str, diagnostics=(), reproducer=None, command=None):
        super().__init__(message)
        self.diagnostics = list(diagnostics)
        self.reproducer = reproducer
        self.command = command


class PipelineSyntaxError(PassError, ValueError):
    """A pass pipeline string that does not parse, names an unknown pass or
    gives a pass an unknown/ill-typed option."""
