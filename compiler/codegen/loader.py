"""The object loader lives in the runtime (``runtime.cpu_loader``: llvmlite
only, no MLIR), so exported artifacts load without the compiler; this module
re-exports it for the compiler's codegen."""
from runtime.cpu_loader import *  # noqa: F401,F403
from runtime.cpu_loader import __all__  # noqa: F401
