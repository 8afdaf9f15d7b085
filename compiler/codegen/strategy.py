"""Per-kernel CPU code-generation strategies.

The CPU pipeline (``compiler.codegen.cpu``) is a fixed list of named stages;
a ``Strategy`` fills its three pluggable slots:

* ``tensor_passes``   MLIR passes on linalg-on-tensors, before bufferization
                      (e.g. fusion, tiling on tensors);
* ``transform``       a transform-dialect script (text of a module holding a
                      ``transform.named_sequence @__transform_main``) applied
                      to the bufferized payload (tiling, packing, vectorizing:
                      toolchain.md §4);
* ``lowering``        the memref → LLVM-dialect pass list.

``select_strategy(op_names)`` picks one for a module from the linalg op names
it contains; the default is correctness-first loops. Strategies are part of the
kernel cache key (``Strategy.fingerprint``).
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Callable, Iterable

# memref + scf/cf → LLVM dialect; correct for every op the loops path emits.
LOOPS_LOWERING: tuple[str, ...] = (
    "convert-linalg-to-loops",
    "lower-affine",
    "convert-scf-to-cf",
    "arith-expand{include-bf16=true include-f8e8m0=true include-f4e2m1=true}",
    "expand-strided-metadata",
    "lower-affine",
    "finalize-memref-to-llvm",
    "convert-math-to-llvm",
    "convert-math-to-libm",
    "convert-arith-to-llvm",
    "convert-index-to-llvm",
    "convert-ub-to-llvm",
    "convert-func-to-llvm",
    "convert-cf-to-llvm",
    "reconcile-unrealized-casts",
)


@dataclasses.dataclass(frozen=True)
class Strategy:
    """How one kernel is code-generated; see the module docstring."""

    name: str
    tensor_passes: tuple[str, ...] = ()
    transform: str | None = None
    lowering: tuple[str, ...] = LOOPS_LOWERING
    doc: str = ""

    @property
    def fingerprint(self) -> str:
        """A digest of everything that changes the generated code."""
        h = hashlib.sha256()
        for part in (self.name, *self.tensor_passes, self.transform or "", *self.lowering):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:16]


LOOPS = Strategy(
    name="loops",
    doc="linalg → scalar loops; LLVM O3 for the host CPU does the rest. "
        "Correct for every op, any strides.")

# (predicate on the set of linalg op names, strategy), first match wins.
_RULES: list[tuple[Callable[[frozenset[str]], bool], Strategy]] = []


def register_strategy(predicate: Callable[[frozenset[str]], bool], strategy: Strategy) -> None:
    """Use ``strategy`` for modules whose op-name set satisfies ``predicate``
    (rules registered earlier win)."""
    _RULES.append((predicate, strategy))


def select_strategy(op_names: Iterable[str]) -> Strategy:
    """The strategy for a module containing ``op_names`` (default LOOPS)."""
    names = frozenset(op_names)
    for pred, strategy in _RULES:
        if pred(names):
            return strategy
    return LOOPS


__all__ = ["Strategy", "LOOPS", "LOOPS_LOWERING", "register_strategy", "select_strategy"]


def rules_fingerprint() -> str:
    """A digest of the registered strategy rules (the key of "auto" choice)."""
    h = hashlib.sha256(LOOPS.fingerprint.encode())
    for _, s in _RULES:
        h.update(s.fingerprint.encode())
    return h.hexdigest()[:16]
