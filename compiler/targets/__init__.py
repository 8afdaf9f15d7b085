"""Compilation targets as values.

A ``Target`` is parsed once from what a user types — ``"cpu"`` (this
machine), ``"cpu:x86-64-v3"`` (the AVX2+FMA baseline), ``"cpu:x86-64-v4"``,
``"cpu:znver3"`` — and carried through everything below ``compile()``: the
binding table the capability-gated passes consult, the plan's backend, the
codegen package that compiles kernels, the kernel cache key and the
precision claims. Nothing below the driver names a backend; it asks the
target.

Each target kind (``cpu``; more register themselves the same way) is a
``TargetKind``: how to parse the part after the colon, which backend its
kernels bind under, and which codegen package compiles them. A codegen
package (``compiler/codegen/<kind>/``) provides:

* ``SOURCE``: the kernel-source prefix of its kernels (``"mlir-cpu"``);
* ``build_table(target) -> KernelBindingTable``: the kernels the target runs;
* ``compile_module(text, entry_names, *, target) -> CompiledObject``: linalg
  on tensors to loaded machine code (through the kernel cache);
* ``emit_object(text, entry_names, *, target) -> bytes``: the same, unloaded;
* ``transcendental_ulp(fn, dtype) -> int | None`` and ``PRECISION_NOTE``:
  what its precision claims say about exp/tanh/log/erf.

``docs/architecture.md`` lists the files a new target touches.
"""
from __future__ import annotations

import dataclasses
import importlib
import sys
import threading
from types import ModuleType
from typing import Callable

from runtime.binding import KernelBindingTable
from runtime.keys import BackendId

from ..errors import CompilerError


class TargetError(CompilerError, ValueError):
    """An unknown, malformed or unavailable compilation target."""


@dataclasses.dataclass(frozen=True)
class Target:
    """One compilation target.

    ``kind``: ``"cpu"``; ``arch``: the LLVM CPU name code is generated for
    (``"x86-64-v3"``, ``"znver3"``, or the host's name); ``features``: the
    instruction-set extensions generated code may use, so the CPU running
    it must have them; ``llvm_features``: the feature string given to LLVM
    (empty when ``arch`` implies them); ``triple``: the LLVM target triple;
    ``host``: parsed from plain ``"cpu"`` (this machine). ``str(target)`` is
    the canonical spelling, which ``parse_target`` reads back."""

    kind: str
    arch: str
    features: frozenset = dataclasses.field(default_factory=frozenset, compare=True)
    llvm_features: str = ""
    triple: str = ""
    host: bool = False

    def __str__(self) -> str:
        return self.kind if self.host else f"{self.kind}:{self.arch}"

    def __repr__(self) -> str:
        return f"Target({str(self)!r}, arch={self.arch!r})"

    @property
    def spec(self) -> str:
        """The string that parses back to this target (``str(target)``)."""
        return str(self)

    @property
    def backend(self) -> BackendId:
        """The backend its kernels bind under."""
        return target_kind(self.kind).backend

    @property
    def codegen(self) -> ModuleType:
        """The codegen package of this target's kind (imported on first use;
        then a ``sys.modules`` lookup: building a binding table asks some
        3,500 times)."""
        name = target_kind(self.kind).codegen
        return sys.modules.get(name) or importlib.import_module(name)

    @property
    def description(self) -> str:
        """Everything about the target that changes generated code (a part
        of every kernel cache key)."""
        return "|".join((self.kind, self.triple, self.arch, self.llvm_features,
                         ",".join(sorted(self.features))))

    def table(self) -> KernelBindingTable:
        """The target's frozen binding table (built once per process)."""
        return _tables.get(self)

    def extend_table(self, fn: Callable[[KernelBindingTable], None]) -> KernelBindingTable:
        """Copy-on-write update of the target's table: clone, ``fn(clone)``,
        finalize, publish; returns the new table."""
        return _tables.extend(self, fn)


@dataclasses.dataclass(frozen=True)
class TargetKind:
    """How one kind of target is parsed and compiled for.

    ``parse(arch)`` gets the text after the colon (``None`` for the bare
    kind) and returns a ``Target`` or raises ``TargetError``; ``accepted()``
    lists example spellings for error messages; ``codegen`` is the module
    path of the codegen package."""

    name: str
    backend: BackendId
    parse: Callable[[str | None], Target]
    accepted: Callable[[], list[str]]
    codegen: str


_KINDS: dict[str, TargetKind] = {}


def register_target_kind(kind: TargetKind) -> None:
    """Make ``kind`` parseable (``"<name>"`` and ``"<name>:<arch>"``)."""
    if kind.name in _KINDS:
        raise TargetError(f"target kind {kind.name!r} is registered twice")
    _KINDS[kind.name] = kind


def target_kind(name: str) -> TargetKind:
    try:
        return _KINDS[name]
    except KeyError:
        raise TargetError(f"unknown target kind {name!r}; known: {', '.join(_KINDS)}") from None


def accepted_targets() -> list[str]:
    """Example spellings of every registered kind."""
    return [s for k in _KINDS.values() for s in k.accepted()]


def parse_target(spec: "str | Target") -> Target:
    """A ``Target`` from what a user types (or a Target, returned as is).

    Raises ``TargetError`` listing the accepted spellings."""
    if isinstance(spec, Target):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise TargetError(f"a target is a string such as 'cpu' or 'cpu:x86-64-v3', got {spec!r}; "
                          f"accepted: {', '.join(accepted_targets())}")
    text = spec.strip().lower()
    name, sep, arch = text.partition(":")
    kind = _KINDS.get(name)
    if kind is None:
        raise TargetError(f"unknown target {spec!r}; accepted: {', '.join(accepted_targets())}")
    if sep and not arch:
        raise TargetError(f"target {spec!r} has an empty architecture after ':'; accepted: "
                          f"{', '.join(kind.accepted())}")
    return kind.parse(arch if sep else None)


def table_for(spec: "str | Target") -> KernelBindingTable:
    """The binding table of the target ``spec`` names."""
    return parse_target(spec).table()


class _TableRegistry:
    """One frozen binding table per target, built lazily, swapped on extend."""

    def __init__(self):
        self._lock = threading.Lock()
        self._tables: dict[Target, KernelBindingTable] = {}

    def get(self, target: Target) -> KernelBindingTable:
        t = self._tables.get(target)
        if t is not None:
            return t
        with self._lock:
            t = self._tables.get(target)
            if t is None:
                t = self._tables[target] = target.codegen.build_table(target)
            return t

    def extend(self, target: Target, fn) -> KernelBindingTable:
        base = self.get(target)
        with self._lock:
            clone = self._tables.get(target, base).clone()
            fn(clone)
            clone.finalize()
            self._tables[target] = clone = clone.freeze()
            return clone


_tables = _TableRegistry()

from . import cpu as _cpu  # noqa: E402,F401  (registers the cpu kind)
from . import cuda as _cuda  # noqa: E402,F401  (registers the cuda kind)

__all__ = ["Target", "TargetKind", "TargetError", "parse_target", "table_for",
           "register_target_kind", "target_kind", "accepted_targets"]
