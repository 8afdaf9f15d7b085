"""Memref descriptors live in the runtime (``runtime.memref``: ctypes and
numpy only), so exported artifacts call kernels without the compiler; this
module re-exports them for the compiler's codegen and tests."""
from runtime.memref import *  # noqa: F401,F403
from runtime.memref import __all__  # noqa: F401
