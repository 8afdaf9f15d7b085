"""The target a capability-gated pass asks: which binding table and which
candidate backends. Shared by fuel-fuse, fuel-fuse-runtime, fuel-decompose and
fuel-reconcile-dtypes so they cannot disagree about "has a kernel".

Pipeline text names tables, it never runs code. The options are:

* ``target=<string>`` (``cpu``, ``cpu:x86-64-v3``): the target's binding
  table, from ``compiler.targets.parse_target(...).table()``; its backends are the candidates
  unless ``backend(s)=`` says otherwise;
* ``table=<name>``: a *named* table: ``cpu`` (the CPU target's table, also
  the default), ``global`` (the runtime's process-wide ``global_table()``), or
  one registered with ``register_table(name, factory)`` -- by fuelc itself or
  by a plugin module the driver was told to load (``fuelc opt --load-plugin
  MODULE``). A ``KernelBindingTable`` object is accepted from the Python API
  only (``run_pipeline(..., options={"table": table})``).
"""
from __future__ import annotations

import re
from typing import Callable, Optional

from runtime.binding import KernelBindingTable, global_table
from runtime.keys import BackendId


class TargetError(ValueError):
    """A table, target or backend option that cannot be resolved."""


_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*\Z")
_TABLES: dict[str, Callable[[], KernelBindingTable]] = {}
_ORIGIN: dict[str, str] = {}   # table name -> module that registered it


def register_table(name: str, factory: Callable[[], KernelBindingTable]) -> None:
    """Make ``factory()`` (a zero-argument callable returning a
    ``KernelBindingTable``) selectable as ``table=<name>`` in pipelines.
    Registering the same factory again is a no-op; another factory under a
    taken name is a ``TargetError``."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise TargetError(f"register_table: table name {name!r} must be a letter or '_' "
                          f"followed by letters, digits, '_', '.' or '-'")
    if not callable(factory):
        raise TargetError(f"register_table({name!r}, ...): the factory must be a zero-argument "
                          f"callable returning a KernelBindingTable, got {type(factory).__name__}")
    prev = _TABLES.get(name)
    if prev is not None and prev is not factory:
        raise TargetError(f"register_table: binding table {name!r} is already registered by "
                          f"{_ORIGIN[name]}; register this one under another name")
    _TABLES[name] = factory
    _ORIGIN[name] = getattr(factory, "__module__", None) or "?"


def table_names() -> list[str]:
    return sorted(_TABLES)


def _cpu_table() -> KernelBindingTable:
    from compiler.targets import table_for
    return table_for("cpu")


register_table("cpu", _cpu_table)
register_table("global", global_table)


def resolve_table(spec) -> KernelBindingTable:
    """The table of a ``table=`` option: a ``KernelBindingTable`` (Python API),
    ``""`` (the CPU target's table) or a registered name."""
    if isinstance(spec, KernelBindingTable):
        return spec
    if spec in (None, ""):
        spec = "cpu"
    factory = _TABLES.get(spec) if isinstance(spec, str) else None
    if factory is None:
        raise TargetError(f"unknown binding table {spec!r}; known tables: "
                          f"{', '.join(table_names())} (a test or plugin table must be "
                          f"registered first: fuelc opt --load-plugin MODULE)")
    table = factory()
    if not isinstance(table, KernelBindingTable):
        raise TargetError(f"binding table {spec!r} (registered by {_ORIGIN[spec]}) is not a "
                          f"KernelBindingTable: its factory returned {type(table).__name__}")
    return table


def table_name(table: KernelBindingTable) -> Optional[str]:
    """The registered name whose table is ``table`` (identity), or None."""
    for name, factory in _TABLES.items():
        try:
            if factory() is table:
                return name
        except Exception:  # a broken factory names nothing
            continue
    return None


def plugin_of(name: str) -> Optional[str]:
    """The module to ``--load-plugin`` for table ``name`` (None for fuelc's own)."""
    mod = _ORIGIN.get(name)
    if mod is None or mod.split(".")[0] in ("compiler", "runtime"):
        return None
    return mod


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


def resolve_target(table, target: str, backends) -> tuple[KernelBindingTable, list[BackendId]]:
    """(binding table, candidate backends) of a pass's ``table``, ``target``
    and ``backend(s)`` options. ``target`` and ``table`` exclude each other;
    empty ``backends`` means the target's (``cpu`` without a target)."""
    if target:
        if table not in (None, ""):
            raise TargetError(f"give either target={target} or table=..., not both")
        from compiler.targets import parse_target
        try:
            resolved = parse_target(target)
            table = resolved.table()
        except Exception as e:
            raise TargetError(f"target {target!r}: {e}") from None
        default_backend = resolved.backend.value
        return table, resolve_backends(backends or default_backend)
    return resolve_table(table), resolve_backends(backends or "cpu")


def target_of_pass(module, pass_name: str, table, target: str, backends):
    """``resolve_target`` for a pass's ``apply``: the (binding table,
    candidate backends), or None after reporting the option error on
    ``module`` as ``<pass_name>: <error>`` (the pass then does nothing)."""
    from compiler.passes.diagnostics import emit_error
    try:
        return resolve_target(table, target, backends)
    except TargetError as e:
        emit_error(module, f"{pass_name}: {e}")
        return None
