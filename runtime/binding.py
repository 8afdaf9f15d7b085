"""The kernel binding table.

Key: ``(BindingKey, dtypes, BackendId)`` with ``dtypes`` = operand dtypes,
inputs in order then outputs (variadic Concat uses ``[T_in, T_out]``).
Value: the ordered sibling alternatives (``BindingEntry``). Registration only
appends; ``finalize()`` reports a kernel registered twice under one key.

Process-wide publication is copy-on-write: ``global_table()`` returns the
current frozen snapshot without locking; ``update_global_table(fn)`` clones
it under a lock, lets ``fn`` mutate the clone, finalizes and swaps it in.
The default global table is populated lazily, on first ``global_table()``,
with the numpy reference kernels (``runtime.numpy_kernels``) and the CPU
fill passes.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Iterator, Optional, Sequence

from .cost import CostEstimate, CostFn, default_cost_for_op_kind, unknown_cost
from .dtype import DType
from .errors import BindingTableError, FuelError, KernelError, NoBackendForOp
from .keys import BackendId, BindingKey, BindingKeyLike, FusedOpId
from .opkind import OpKind
from .params import OpParams
from .precision import PrecisionGuarantee


@dataclasses.dataclass(frozen=True)
class KernelCaps:
    """Per-binding capability flags.

    ``strided_input``: the kernel walks input strides itself, so the executor
    passes non-contiguous (offset-0) inputs through without contiguizing.
    ``view_input``: the kernel reads any well-formed view of an input's
    storage (any offset; any strides: 0 to broadcast, negative to flip; the
    storage may hold more or fewer elements than the view has), so the
    executor passes every input as it is. Without it the rule of
    ``strided_input`` applies. (Generated CPU kernels take memref
    descriptors with a fully dynamic layout and check the view's element
    span against the storage when they bind it.)
    ``requires_broadcast``: the kernel bakes a stride-0 broadcast pattern
    into its body; ``lookup_with_caps`` never picks it for a dense operand.
    ``full_write``: the kernel writes every element of each (whole) output
    layout, so the executor may allocate its outputs uninitialized; without
    it outputs are zero-filled. (A MatMul step computing only its first rows,
    ``m_compute`` not ``all``, still gets zeroed outputs.)
    """

    strided_input: bool = False
    requires_broadcast: bool = False
    full_write: bool = False
    view_input: bool = False

    @classmethod
    def empty(cls) -> "KernelCaps":
        return cls()

    @classmethod
    def strided(cls) -> "KernelCaps":
        return cls(strided_input=True)


class KernelRef:
    """A kernel: ``ref(inputs, outputs, layouts, params) -> None``.

    ``inputs``/``outputs`` are ``Storage`` lists (outputs pre-allocated by
    the caller; the kernel only fills bytes); ``layouts`` lists the input
    layouts then the output layouts; ``params`` is an ``OpParams``. Any
    exception escaping the wrapped callable is re-raised as ``KernelError``
    naming the kernel (the original chained as ``__cause__``).

    Identity (``==``/``hash``) is the wrapped callable's identity, the
    analogue of comparing function pointers.
    """

    __slots__ = ("fn", "name", "kernel_source")

    def __init__(self, fn: Callable[..., Any], name: str | None = None, kernel_source: str = ""):
        if isinstance(fn, KernelRef):
            fn = fn.fn
        if not callable(fn):
            raise BindingTableError(f"KernelRef needs a callable, got {fn!r}")
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", None) or repr(fn)
        self.kernel_source = kernel_source

    def __call__(self, inputs: Sequence, outputs: Sequence, layouts: Sequence, params: OpParams) -> None:
        from .layout import Layout
        from .storage import Storage
        if not all(isinstance(s, Storage) for s in inputs) or not all(isinstance(s, Storage) for s in outputs):
            raise KernelError(f"kernel {self.name}: inputs and outputs must be Storage objects")
        if len(layouts) != len(inputs) + len(outputs) or not all(isinstance(l, Layout) for l in layouts):
            raise KernelError(
                f"kernel {self.name}: got {len(layouts)} layouts for {len(inputs)} inputs + "
                f"{len(outputs)} outputs; layouts must list every input then every output")
        if not isinstance(params, OpParams):
            raise KernelError(f"kernel {self.name}: params must be an OpParams variant, got {params!r}")
        try:
            result = self.fn(inputs, outputs, layouts, params)
        except KernelError:
            raise
        except Exception as e:  # a kernel must never crash its caller
            raise KernelError(f"kernel {self.name} ({self.kernel_source or 'no source'}) failed: "
                              f"{type(e).__name__}: {e}") from e
        if result is not None:
            raise KernelError(f"kernel {self.name} returned {type(result).__name__}; kernels write into "
                              f"the pre-allocated outputs and return None")

    def __eq__(self, other) -> bool:
        return isinstance(other, KernelRef) and other.fn is self.fn

    def __hash__(self) -> int:
        return id(self.fn)

    def __repr__(self) -> str:
        src = f", source={self.kernel_source!r}" if self.kernel_source else ""
        return f"KernelRef({self.name}{src})"


@dataclasses.dataclass(frozen=True)
class BindingEntry:
    """One concrete kernel registered under a ``(key, dtypes, backend)``."""

    kernel: KernelRef
    caps: KernelCaps = KernelCaps()
    precision: PrecisionGuarantee = PrecisionGuarantee.UNAUDITED
    cost: CostFn = unknown_cost
    kernel_source: str = ""
    is_generic: bool = False
    kernel_revision_hash: int = 0
    cost_expr: Any = None


# -- unique_runtime_fused outcomes ---------------------------------------------------
@dataclasses.dataclass(frozen=True)
class NotBound:
    """No runtime-fused binding for ``(fid, backend)``."""


@dataclasses.dataclass(frozen=True)
class Unique:
    """Exactly one dtype tuple is bound; ``entry`` is its first alternative."""

    dtypes: tuple[DType, ...]
    entry: BindingEntry


@dataclasses.dataclass(frozen=True)
class Ambiguous:
    """Several dtype tuples share the id; no kernel is returned.
    ``signatures`` is sorted by (arity, spelling)."""

    signatures: tuple[tuple[DType, ...], ...]


RuntimeFusedLookup = NotBound | Unique | Ambiguous

CoverageBinding = tuple[BackendId, OpKind, tuple[DType, ...]]
_Key = tuple[BindingKey, tuple[DType, ...], BackendId]


def _dtypes(dtypes: Sequence) -> tuple[DType, ...]:
    if isinstance(dtypes, (str, DType)) or not hasattr(dtypes, "__iter__"):
        raise BindingTableError(f"dtypes must be a sequence of dtypes (inputs then outputs), got {dtypes!r}")
    out = tuple(DType.parse(d) for d in dtypes)
    if not out:
        raise BindingTableError("dtypes must list at least one operand dtype")
    return out


class KernelBindingTable:
    """Maps ``(BindingKey, dtypes, BackendId)`` to ordered sibling
    ``BindingEntry`` alternatives. See the module docstring."""

    def __init__(self):
        self._bindings: dict[_Key, list[BindingEntry]] = {}
        self._frozen = False

    # -- copy-on-write support --------------------------------------------------------
    def clone(self) -> "KernelBindingTable":
        """A mutable copy (entries are immutable, so the copy is shallow)."""
        t = KernelBindingTable()
        t._bindings = {k: list(v) for k, v in self._bindings.items()}
        return t

    def freeze(self) -> "KernelBindingTable":
        """Make this table read-only (published snapshots are frozen)."""
        self._frozen = True
        return self

    @property
    def frozen(self) -> bool:
        return self._frozen

    def _mutable(self):
        if self._frozen:
            raise BindingTableError(
                "this KernelBindingTable is a published (frozen) snapshot; mutate a clone(), "
                "or use runtime.update_global_table(fn)")

    @staticmethod
    def _key(op: BindingKeyLike, dtypes: Sequence, backend) -> _Key:
        return BindingKey.of(op), _dtypes(dtypes), BackendId.parse(backend)

    # -- registration ----------------------------------------------------------------
    def register(self, op, dtypes, backend, kernel) -> None:
        """Append ``kernel`` with empty caps, UNAUDITED precision, unknown cost."""
        self.register_full(op, dtypes, backend, kernel, KernelCaps(), PrecisionGuarantee.UNAUDITED, unknown_cost)

    def register_with_caps(self, op, dtypes, backend, kernel, caps: KernelCaps) -> None:
        self.register_full(op, dtypes, backend, kernel, caps, PrecisionGuarantee.UNAUDITED, unknown_cost)

    def register_with_precision(self, op, dtypes, backend, kernel, precision: PrecisionGuarantee) -> None:
        self.register_full(op, dtypes, backend, kernel, KernelCaps(), precision, unknown_cost)

    def register_with_caps_and_precision(self, op, dtypes, backend, kernel, caps, precision) -> None:
        self.register_full(op, dtypes, backend, kernel, caps, precision, unknown_cost)

    def register_full(self, op, dtypes, backend, kernel, caps: KernelCaps,
                      precision: PrecisionGuarantee, cost: CostFn) -> None:
        self.register_full_with_source(op, dtypes, backend, kernel, caps, precision, cost, "")

    def register_full_with_source(self, op, dtypes, backend, kernel, caps: KernelCaps,
                                  precision: PrecisionGuarantee, cost: CostFn, kernel_source: str) -> None:
        """Hand-written registration: ``is_generic=False``, revision 0, no cost_expr."""
        self.register_full_with_source_generic(op, dtypes, backend, kernel, caps, precision, cost,
                                               kernel_source, False, 0, None)

    def register_full_with_source_generic(self, op, dtypes, backend, kernel, caps: KernelCaps,
                                          precision: PrecisionGuarantee, cost: CostFn,
                                          kernel_source: str, is_generic: bool,
                                          kernel_revision_hash: int, cost_expr: Any = None) -> None:
        """The one registration primitive: append a sibling alternative.

        ``kernel`` is a KernelRef or a plain callable (wrapped, tagged with
        ``kernel_source``). Never rejects a duplicate kernel (``finalize``
        does); raises BindingTableError on malformed arguments.
        """
        self._mutable()
        key = self._key(op, dtypes, backend)
        if not isinstance(caps, KernelCaps):
            raise BindingTableError(f"caps must be KernelCaps, got {caps!r} (registering {key[0]})")
        if not isinstance(precision, PrecisionGuarantee):
            raise BindingTableError(f"precision must be a PrecisionGuarantee, got {precision!r}")
        if not callable(cost):
            raise BindingTableError(f"cost must be a cost function, got {cost!r}")
        if not isinstance(kernel_source, str):
            raise BindingTableError(f"kernel_source must be a str, got {kernel_source!r}")
        ref = kernel if isinstance(kernel, KernelRef) else KernelRef(kernel, kernel_source=kernel_source)
        entry = BindingEntry(ref, caps, precision, cost, kernel_source or ref.kernel_source,
                             bool(is_generic), int(kernel_revision_hash), cost_expr)
        self._bindings.setdefault(key, []).append(entry)

    def finalize(self) -> None:
        """Raise BindingTableError if one kernel appears twice among a key's
        alternatives (distinct kernels are fine)."""
        for (key, dtypes, backend), alts in self._bindings.items():
            seen: dict[KernelRef, int] = {}
            for i, e in enumerate(alts):
                if e.kernel in seen:
                    raise BindingTableError(
                        f"KernelBindingTable: duplicate KernelRef {e.kernel!r} registered for "
                        f"(op={key}, dtypes={_fmt(dtypes)}, backend={backend}) at alternatives "
                        f"{seen[e.kernel]} and {i}; sibling alternatives must be distinct kernels")
                seen[e.kernel] = i

    # -- fill passes ------------------------------------------------------------------
    def fill_unset_cpu_precision(self, default: PrecisionGuarantee) -> None:
        """Upgrade every CPU alternative that makes no static claim, except an
        audited ``PrecisionGuarantee.none(reason)``, to ``default``."""
        self._mutable()
        for (_, _, backend), alts in self._bindings.items():
            if backend is not BackendId.CPU:
                continue
            for i, e in enumerate(alts):
                if e.precision.makes_no_static_claim() and not e.precision.is_audited_no_bound():
                    alts[i] = dataclasses.replace(e, precision=default)

    def fill_unset_cpu_cost(self, dispatcher: Callable[[OpKind], CostFn] = default_cost_for_op_kind) -> None:
        self.fill_unset_cost_for_backend(BackendId.CPU, dispatcher)

    def fill_unset_cost_for_backend(self, backend, dispatcher: Callable[[OpKind], CostFn]
                                    = default_cost_for_op_kind) -> None:
        """Replace ``unknown_cost`` with ``dispatcher(op)`` on every
        alternative of ``backend``; runtime-fused keys keep the sentinel."""
        self._mutable()
        backend = BackendId.parse(backend)
        for (key, _, b), alts in self._bindings.items():
            if b is not backend or key.op is None:
                continue
            for i, e in enumerate(alts):
                if e.cost is unknown_cost:
                    alts[i] = dataclasses.replace(e, cost=dispatcher(key.op))

    # -- lookups ------------------------------------------------------------------------
    def lookup(self, op, dtypes, backend) -> KernelRef:
        """The first dense-safe alternative's kernel (see lookup_with_caps)."""
        return self.lookup_with_caps(op, dtypes, backend)[0]

    def lookup_with_caps(self, op, dtypes, backend, *, context: str = "") -> tuple[KernelRef, KernelCaps]:
        """The first alternative that does not set ``requires_broadcast``,
        with its caps. Raises NoBackendForOp (full coverage diagnostic; the
        optional ``context`` names the caller's node/step) on a miss."""
        e = self.lookup_entry(op, dtypes, backend, context=context)
        return e.kernel, e.caps

    def lookup_entry(self, op, dtypes, backend, *, context: str = "") -> BindingEntry:
        """As lookup_with_caps, returning the whole BindingEntry."""
        key = self._key(op, dtypes, backend)
        for e in self._bindings.get(key, ()):
            if not e.caps.requires_broadcast:
                return e
        backends, combos = self.coverage_diagnostic()
        raise NoBackendForOp(key[0], key[1], key[2], backends, combos, context)

    def backend_supports(self, op, dtypes, backend) -> bool:
        """Exactly lookup_with_caps' success condition, without the diagnostic."""
        key = self._key(op, dtypes, backend)
        return any(not e.caps.requires_broadcast for e in self._bindings.get(key, ()))

    def lookup_alternatives(self, op, dtypes, backend) -> tuple[BindingEntry, ...]:
        """Every alternative in registration order (broadcast-baked included);
        empty when nothing is bound."""
        return tuple(self._bindings.get(self._key(op, dtypes, backend), ()))

    def lookup_precision(self, op, dtypes, backend) -> PrecisionGuarantee:
        """First alternative's precision; UNAUDITED when unbound."""
        alts = self._bindings.get(self._key(op, dtypes, backend))
        return alts[0].precision if alts else PrecisionGuarantee.UNAUDITED

    def lookup_cost(self, op, dtypes, backend) -> CostFn:
        """First alternative's cost function; ``unknown_cost`` when unbound."""
        alts = self._bindings.get(self._key(op, dtypes, backend))
        return alts[0].cost if alts else unknown_cost

    # -- iteration (static keys only: the audit view) --------------------------------------
    def iter_entries(self) -> Iterator[tuple[OpKind, tuple[DType, ...], BackendId, BindingEntry]]:
        for (key, dtypes, backend), alts in self._bindings.items():
            if key.op is not None:
                for e in alts:
                    yield key.op, dtypes, backend, e

    def iter_precision(self) -> Iterator[tuple[OpKind, tuple[DType, ...], BackendId, PrecisionGuarantee]]:
        for op, dtypes, backend, e in self.iter_entries():
            yield op, dtypes, backend, e.precision

    def iter_cost(self) -> Iterator[tuple[OpKind, tuple[DType, ...], BackendId, CostFn]]:
        for op, dtypes, backend, e in self.iter_entries():
            yield op, dtypes, backend, e.cost

    def iter_keys(self) -> Iterator[tuple[OpKind, tuple[DType, ...], BackendId]]:
        for key, dtypes, backend in self._bindings:
            if key.op is not None:
                yield key.op, dtypes, backend

    # -- runtime-fused ----------------------------------------------------------------------
    def _runtime_keys(self, fid: FusedOpId, backend: BackendId):
        fid = fid if isinstance(fid, FusedOpId) else FusedOpId(fid)
        return [(k, alts) for k, alts in self._bindings.items()
                if k[2] is backend and k[0].fused == fid]

    def has_runtime_fused(self, fid: FusedOpId, backend) -> bool:
        """Whether any dtype tuple is bound for ``(fid, backend)``."""
        return bool(self._runtime_keys(fid, BackendId.parse(backend)))

    def unique_runtime_fused(self, fid: FusedOpId, backend) -> RuntimeFusedLookup:
        """``NotBound()``, ``Unique(dtypes, entry)``, or ``Ambiguous(signatures)``
        when several dtype tuples share the id (never guesses)."""
        found = self._runtime_keys(fid, BackendId.parse(backend))
        if not found:
            return NotBound()
        if len(found) > 1:
            sigs = sorted((k[1] for k, _ in found), key=lambda d: (len(d), [x.value for x in d]))
            return Ambiguous(tuple(sigs))
        (key, alts), = found
        return Unique(key[1], alts[0]) if alts else NotBound()

    def remove_runtime_fused_for_tests(self) -> None:
        """Drop every runtime-fused entry (static entries kept)."""
        self._mutable()
        self._bindings = {k: v for k, v in self._bindings.items() if k[0].op is not None}

    # -- diagnostics ---------------------------------------------------------------------------
    def coverage_diagnostic(self) -> tuple[list[BackendId], list[CoverageBinding]]:
        """(distinct registered backends, every static (backend, op, dtypes)),
        both sorted deterministically."""
        backends = sorted({b for _, _, b in self._bindings}, key=lambda b: b.value)
        combos = sorted(((b, k.op, d) for k, d, b in self._bindings if k.op is not None),
                        key=lambda c: (c[0].value, int(c[1]), [x.value for x in c[2]]))
        return backends, combos

    def __len__(self) -> int:
        """Total alternatives across all keys."""
        return sum(len(a) for a in self._bindings.values())

    def is_empty(self) -> bool:
        return not self._bindings

    def key_count(self) -> int:
        """Number of distinct ``(key, dtypes, backend)`` decision points."""
        return len(self._bindings)

    def __repr__(self) -> str:
        return (f"KernelBindingTable(keys={self.key_count()}, alternatives={len(self)}"
                f"{', frozen' if self._frozen else ''})")


def _fmt(dtypes) -> str:
    return "[" + ", ".join(d.value for d in dtypes) + "]"


# -- the process-wide copy-on-write table ------------------------------------------------
_GLOBAL: Optional[KernelBindingTable] = None
_WRITE_LOCK = threading.Lock()


def _default_table() -> KernelBindingTable:
    from .numpy_kernels import register_numpy_kernels
    t = KernelBindingTable()
    register_numpy_kernels(t)
    t.fill_unset_cpu_precision(PrecisionGuarantee.PRIMITIVE_DETERMINISTIC_CPU)
    t.fill_unset_cpu_cost(default_cost_for_op_kind)
    t.finalize()
    return t.freeze()


def global_table() -> KernelBindingTable:
    """The current published (frozen) snapshot. Never blocks once built;
    the first call builds the default table (numpy reference kernels)."""
    t = _GLOBAL
    if t is not None:
        return t
    with _WRITE_LOCK:
        return _ensure_global()


def _ensure_global() -> KernelBindingTable:
    global _GLOBAL
    if _GLOBAL is None:
        _GLOBAL = _default_table()
    return _GLOBAL


def update_global_table(fn: Callable[[KernelBindingTable], None]) -> KernelBindingTable:
    """Clone the published table, run ``fn(clone)``, ``finalize()`` it and
    publish it; returns the new snapshot. Writers are serialized; readers
    keep whatever snapshot they already hold. If ``fn`` or ``finalize``
    raises, nothing is published."""
    global _GLOBAL
    with _WRITE_LOCK:
        clone = _ensure_global().clone()
        fn(clone)
        clone.finalize()
        _GLOBAL = clone.freeze()
        return _GLOBAL


def reset_global_table() -> None:
    """Forget the published table; the next ``global_table()`` rebuilds the
    default one (for tests and for unloading compiled modules)."""
    global _GLOBAL
    with _WRITE_LOCK:
        _GLOBAL = None
