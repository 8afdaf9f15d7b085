"""The target a capability-gated pass asks: which binding table and which
candidate backends. Shared by fuel-fuse, fuel-decompose and
fuel-reconcile-dtypes so the three cannot disagree about "has a kernel".

A table option is ``""`` (the CPU target's table, ``compiler.targets.table_for("cpu")``:
the generated kernels plus the numpy reference kernels), ``"global"`` (the
runtime's process-wide ``runtime.global_table()``), a
``KernelBindingTable`` (programmatic use), or ``"module:attr"`` naming a
table or a zero-argument callable returning one (used by tests and by
reproducers of in-memory tables that live in a module).
"""
from __future__ import annotations

import importlib

from runtime.binding import KernelBindingTable, global_table
from runtime.keys import BackendId


class TargetError(ValueError):
    """A table or backend option that cannot be resolved."""


def resolve_table(spec) -> KernelBindingTable:
    if isinstance(spec, KernelBindingTable):
        return spec
    if spec in (None, "", "default", "cpu"):
        from compiler.targets import table_for
        return table_for("cpu")
    if spec == "global":
        return global_table()
    if isinstance(spec, str) and ":" in spec:
        mod, _, attr = spec.partition(":")
        try:
            obj = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as e:
            raise TargetError(f"cannot load binding table {spec!r}: {e}") from None
        if callable(obj) and not isinstance(obj, KernelBindingTable):
            obj = obj()
        if isinstance(obj, KernelBindingTable):
            return obj
        raise TargetError(f"{spec!r} is not a KernelBindingTable (got {type(obj).__name__})")
    raise TargetError(f"binding table option {spec!r}: expected '' (the CPU target table), 'global' "
                      f"or 'module:attribute'")


def resolve_backends(names) -> list[BackendId]:
    if isinstance(names, str):
        names = [n for n in names.split(",") if n.strip()]
    try:
        out = [BackendId.parse(n) for n in names]
    except Exception as e:
        raise TargetError(str(e)) from None
    if not out:
        raise TargetError("no candidate backend given")
    return list(dict.fromkeys(out))
