"""Runtime-registered ("Tier-2") fused ops, ids >= 0x8000.

``register_runtime_fused(region, name=None) -> int`` validates the region
(``validate_recipe``), computes its structural hash (``structural_hash``:
independent of object identity and of tree-vs-DAG spelling, commutative
children sorted, slot values excluded, stable across processes), and under a
lock either returns the id already registered for that hash (the first
registration's name and region are kept) or appends a new entry with id
``0x8000 + count``. Ids are never reused; past 0xFFFF registration raises
``RuntimeFusedError``.

A runtime entry behaves like a static one for instantiation and the graph:
it has ``name``, ``arity`` (its bind count), ``params`` (one ``scalars``
param, kind ``i64s``, holding the slot values as signed binary64 bit
patterns: PARAM_KINDS has no float list; ``runtime_params`` /
``runtime_scalars`` convert), ``infer`` (the region's output type, via
instantiation), ``reference`` (the region run on the primitive references),
``recipe`` (the region itself), ``destructive_input = None`` always (the
grammar cannot express mutation) and ``op_kind = None`` (bound under
``BindingKey.runtime_fused(id)``, tag ``OpKind.RuntimeFused``).
"""
from __future__ import annotations

import dataclasses
import struct
import threading
from typing import Optional

from compiler.graph.opdef import ParamSpec
from runtime.params import JitScalars, NoParams, OpParams

from .entry import (NOT_DIFFERENTIABLE, RUNTIME_CSE_TAG, RUNTIME_FUSED_BASE, Decline, Family,
                    FusedOpEntry, Recipe)
from .errors import GraphBuildError, RegistryError, RuntimeFusedError
from .grammar import bind_indices, count_scalar_slots, structural_hash, validate_recipe

_LOCK = threading.Lock()
_ENTRIES: list[FusedOpEntry] = []
_BY_HASH: dict[str, int] = {}
MAX_ID = 0xFFFF


def runtime_params(scalars) -> dict:
    """Params of a runtime fused node from its slot values (pre-order)."""
    return {"scalars": tuple(struct.unpack("<q", struct.pack("<d", float(v)))[0]
                             for v in scalars)}


def kernel_params(scalars) -> OpParams:
    """The kernel's OpParams of a runtime fused op with these slot values:
    ``JitScalars`` (``NoParams`` when the region has no slots)."""
    return JitScalars(tuple(float(s) for s in scalars)) if scalars else NoParams()


def runtime_scalars(params: dict) -> tuple[float, ...]:
    """The slot values stored in a runtime fused node's params."""
    return tuple(struct.unpack("<d", struct.pack("<q", int(b)))[0]
                 for b in params.get("scalars", ()))


def _make_entry(fid: int, name: str, region) -> FusedOpEntry:
    from .recipe import evaluate_dag, try_instantiate_recipe

    roots = region if isinstance(region, tuple) else (region,)
    n_in = len(bind_indices(roots))
    n_slots = count_scalar_slots(roots)
    holder: dict = {}

    def instantiate(types, params):
        dag = try_instantiate_recipe(holder["entry"], params, types)
        if isinstance(dag, Decline):
            raise GraphBuildError(f"{name} (runtime fused {fid:#x}): {dag.reason}")
        return dag

    def infer(types, params):
        if len(runtime_scalars(params)) != n_slots:
            raise GraphBuildError(f"{name} (runtime fused {fid:#x}) has {n_slots} scalar "
                                  f"slot(s); params carry {len(runtime_scalars(params))}")
        outs = instantiate(list(types), params).output_types()
        return outs[0] if len(outs) == 1 else outs

    def reference(inputs, params):
        from compiler.graph.numerics import dtype_of
        from compiler.graph.opdef import TensorType
        import numpy as np
        types = [TensorType(np.shape(x), dtype_of(np.asarray(x))) for x in inputs]
        outs = evaluate_dag(instantiate(types, params), list(inputs))
        return outs[0] if len(outs) == 1 else outs

    entry = FusedOpEntry(
        id=fid, name=name, mnemonic=f"runtime_fused_{fid:x}", family=Family.FORWARD,
        arity=n_in, params=(ParamSpec("scalars", "i64s", ()),), infer=infer,
        reference=reference,
        recipe=Recipe(roots=roots[0] if len(roots) == 1 else roots,
                      scalars=lambda p: runtime_scalars(p)),
        backward=NOT_DIFFERENTIABLE, op_kind=None, destructive_input=None,
        cse_tag=RUNTIME_CSE_TAG, input_names=tuple(f"in{i}" for i in range(n_in)),
        num_outputs=len(roots), is_runtime=True,
        doc=f"runtime-registered fused op {fid:#x} ({n_slots} scalar slot(s))",
    )
    holder["entry"] = entry
    return entry


def register_runtime_fused(region, name: Optional[str] = None) -> int:
    """Register a region (one root or a tuple of roots) as a runtime fused
    op; returns its id (>= 0x8000). Identical regions (structural hash) get
    the same id. Raises ``RecipeError`` for an invalid region and
    ``RuntimeFusedError`` when the id space is exhausted."""
    roots = tuple(region) if isinstance(region, (tuple, list)) else (region,)
    validate_recipe(roots)
    h = structural_hash(roots)
    with _LOCK:
        if h in _BY_HASH:
            return _BY_HASH[h]
        fid = RUNTIME_FUSED_BASE + len(_ENTRIES)
        if fid > MAX_ID:
            raise RuntimeFusedError(f"runtime fused id space exhausted ({len(_ENTRIES)} ops "
                                    f"registered, ids 0x8000..0xFFFF); reuse existing regions")
        entry = _make_entry(fid, name or f"RuntimeFused{fid:#x}", roots if len(roots) > 1
                            else roots[0])
        _ENTRIES.append(entry)
        _BY_HASH[h] = fid
        return fid


def runtime_entry(fid: int) -> FusedOpEntry:
    """The entry of a registered runtime fused op; RegistryError otherwise."""
    i = fid - RUNTIME_FUSED_BASE
    with _LOCK:
        if 0 <= i < len(_ENTRIES):
            return _ENTRIES[i]
        n = len(_ENTRIES)
    raise RegistryError(f"no runtime fused op {fid:#x} ({n} registered, ids 0x8000.."
                        f"{RUNTIME_FUSED_BASE + n - 1:#x})")


def runtime_entries() -> list[FusedOpEntry]:
    with _LOCK:
        return list(_ENTRIES)


def is_runtime(fid: int) -> bool:
    return fid >= RUNTIME_FUSED_BASE


def lookup(key):
    """Any fused entry: a static or runtime id, a static name/mnemonic, or an
    entry itself. Raises RegistryError."""
    from .registry import default_registry
    if isinstance(key, FusedOpEntry):
        return key
    if isinstance(key, int) and is_runtime(key):
        return runtime_entry(key)
    return default_registry()[key]


def recipe_for(fused, params: Optional[dict] = None, input_types=None):
    """Any fused op's recipe as data: the region of a runtime op, the static
    roots of a rank-polymorphic static op, or (for a per-call recipe) the
    tree built for ``params`` and ``input_types`` (required then; a builder
    decline is returned as the ``Decline``). ``fused`` is an id, name or
    entry. Raises RegistryError for unknown ops or missing input types."""
    from .entry import normalize_params
    entry = lookup(fused)
    r = entry.recipe
    if r.build is None:
        return r.roots
    if input_types is None:
        raise RegistryError(f"{entry.name}: its recipe is built per call from concrete shapes; "
                            f"pass params and input_types")
    return r.build(normalize_params(entry, params), list(input_types))
