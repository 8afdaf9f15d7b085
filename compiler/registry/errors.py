"""The registry's exceptions (all under ``compiler.errors.CompilerError``).

    RegistryError          an unknown fused op / id, a malformed entry or registry
    ├── FusedParamsError   a fused node's params do not fit its entry's ParamSpecs
    ├── RecipeError        a recipe or pattern that fails ``validate_recipe``
    ├── RuntimeFusedError  a region that cannot be registered (id space exhausted, ...)
    └── KernelPredicateError  a kernel's ``serves`` predicate failed (a compiler bug)

Messages name the fused op, the offending part and what would fix it.
"""
from __future__ import annotations

from compiler.errors import CompilerError, GraphBuildError  # noqa: F401 (re-exported)


class RegistryError(CompilerError, ValueError):
    """An unknown fused op or id, or a malformed registry entry."""


class FusedParamsError(RegistryError, GraphBuildError):
    """Params for a fused node that do not match the entry's ParamSpecs."""


class RecipeError(RegistryError):
    """A recipe (or pattern) that is not well formed.

    ``reason`` is one of the stable decline codes, so callers can
    branch on it: ``NonContiguousBinds``, ``NonConcreteRegion``,
    ``UnRepresentable``, ``BadArity``, ``BadAttrs``, ``BadSlot``.
    """

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(f"{reason}: {message}")


class RuntimeFusedError(RegistryError):
    """A runtime fused-op registration that cannot be honoured."""


class KernelPredicateError(RegistryError):
    """A fused kernel's ``serves`` predicate raised on an instance (other than
    ``SymbolicError``: undecidable on symbolic extents). A bug in the kernel
    family, never a reason to fuse or not: the passes let it through."""
