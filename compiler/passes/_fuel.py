"""What the passes need to know about fuel ops in MLIR: which op-table or
registry entry an ``fuel.*`` op is, its params, OpKind, operand/result
dtypes, whether it may be erased or merged, and walking helpers."""
from __future__ import annotations

import collections
from collections import deque
import importlib
import sys
import types
from typing import Callable, Iterator, Optional

from compiler.dialect.types import SymbolicDims
from compiler.graph.opdef import TensorType
from compiler.graph.ops import OP_TABLE
from compiler.graph.symbolic import unify
from compiler.mlir import ir, walk_ops
from runtime.dtype import DType
from runtime.symbols import Sym, shape_text
from runtime.opkind import OpKind

DIALECT_PREFIX = "fuel."

# Ops with effects (or identities) that CSE/DCE must never touch.
_EFFECTFUL_CATEGORIES = frozenset({"inplace", "memory", "control"})
_NEVER_ERASED = frozenset({"input", "alloc", "scan_placeholder"})
_NEVER_MERGED = _NEVER_ERASED | {"const"}  # Const is never CSE'd
#: Mnemonics of the op table's commutative rows.
COMMUTATIVE = frozenset(d.mnemonic for d in OP_TABLE.values() if d.commutative)

#: Work counters of the passes (ops visited, match attempts, ...), for tests
#: that check the passes scale linearly without timing them.
COUNTERS: collections.Counter = collections.Counter()


def count(key: str, n: int = 1) -> None:
    COUNTERS[key] += n


def _install_fuel_dialect_module() -> None:
    """Give the bindings an (empty) Python module for the ``fuel`` dialect.

    ``Value.owner`` and ``OpOperand.owner`` look up the OpView classes of an
    op's dialect by importing ``<bindings>.dialects.<namespace>``; a failed
    import is not cached, so for IRDL ops every access repeated a failing
    import (~0.2 ms each, most of a large module's pass time). An empty module
    is cached and yields the generic OpView, as before."""
    root = ir.__name__.rsplit(".", 3)[0]
    name = f"{root}.dialects.fuel"
    if name not in sys.modules:
        try:
            importlib.import_module(name)
        except ImportError:
            sys.modules[name] = types.ModuleType(
                name, "fuel has no generated OpView classes (IRDL dialect)")


_install_fuel_dialect_module()


def dialect_ops() -> dict:
    from compiler.dialect import default_ops
    return default_ops()


def mnemonic(op) -> Optional[str]:
    name = op.operation.name if hasattr(op, "operation") else op.name
    return name[len(DIALECT_PREFIX):] if name.startswith(DIALECT_PREFIX) else None


def dialect_op(op):
    """The ``DialectOp`` of a ``fuel.*`` operation (None for other ops or an
    op the dialect tables do not know)."""
    m = mnemonic(op)
    return dialect_ops().get(m) if m is not None else None


def registry():
    """The static fused-op registry, or None where it is not importable."""
    try:
        return importlib.import_module("compiler.registry").default_registry()
    except (ImportError, AttributeError):
        return None


def fused_entry(op):
    """The registry entry of a static fused ``fuel.*`` op, or None."""
    d = dialect_op(op)
    if d is None or not d.fused:
        return None
    return d.source


def op_kind(op) -> Optional[OpKind]:
    d = dialect_op(op)
    return getattr(d.source, "op_kind", None) if d is not None else None


def params(op) -> dict:
    from compiler.dialect import op_params
    return op_params(op)


def is_erasable(op) -> bool:
    """Pure: erasing it when unused changes nothing."""
    from compiler.dialect.structural import is_runtime_fused
    if is_runtime_fused(op):
        return True  # its body is primitive and pure (the recipe grammar cannot mutate)
    d = dialect_op(op)
    if d is None or d.mnemonic in _NEVER_ERASED:
        return False
    src = d.source
    if d.fused:
        return getattr(src, "destructive_input", None) is None
    return getattr(src, "category", "") not in _EFFECTFUL_CATEGORIES


def is_mergeable(op) -> bool:
    """Pure and deterministic in its operands and attributes (CSE-able)."""
    d = dialect_op(op)
    return (d is not None and d.mnemonic not in _NEVER_MERGED and is_erasable(op)
            and len(op.regions) == 0)


def _ranked(value):
    t = value.type
    try:
        return ir.RankedTensorType(t)
    except (ValueError, TypeError):
        raise ValueError(f"expected a ranked tensor, got {t}") from None


def tensor_type(value, dims: Optional["SymbolicDims"] = None) -> TensorType:
    """The (shape, DType) of a tensor value. A dynamic (``?``) extent is the
    symbol ``dims`` gives it (``SymbolicDims``); without ``dims`` a dynamic
    shape raises ``ValueError``, as does a non-tensor. ``DialectError`` for
    an element type fuel has no DType for."""
    from compiler.dialect import mlir_to_dtype
    rt = _ranked(value)
    if rt.has_static_shape:
        shape = tuple(rt.shape)
    elif dims is None:
        raise ValueError(f"dynamic shape {value.type} is not supported")
    else:
        shape = dims.shape(value, rt)
    return TensorType(shape, mlir_to_dtype(rt.element_type))


def mlir_shape(shape) -> tuple:
    """``shape`` as MLIR writes it: a symbolic extent is ``?`` (-1 here)."""
    return tuple(d if isinstance(d, int) else -1 for d in shape)


def same_type(computed: TensorType, declared: TensorType) -> bool:
    """Whether ``computed`` (extents may be symbols) is ``declared`` (a
    value's type read with ``SymbolicDims``) up to the ``?``s: every static
    extent equal, a symbol where the type has ``?``."""
    return computed.dtype == declared.dtype and \
        mlir_shape(computed.shape) == mlir_shape(declared.shape)


def dialect_params(op_name: str, params: dict, in_types,
                   dims: Optional["SymbolicDims"] = None) -> dict:
    """``params`` of graph op ``op_name`` computed on symbolic ``in_types``
    as a fuel op's attributes can hold them. A symbolic ``BroadcastTo``
    extent on an axis where the input's extent is symbolic too is written ``-1``
    (keep it, as ``torch.Tensor.expand(-1, ...)``; fuel-to-linalg reads it
    with ``tensor.dim``). Any other symbolic extent in a param (a
    ``Reshape`` target, a ``Slice`` bound, a broadcast to a new symbolic
    axis) is kept where it is over named symbols (``dims.encodable``: the
    op's ``fuel.extents`` spells it, ``dialect/symbols.py``); else it has no
    encoding in the dialect: ``ValueError`` naming it."""
    out = dict(params)
    named = dims.encodable if dims is not None else (lambda d: False)
    if op_name == "BroadcastTo" and any(isinstance(d, Sym) for d in params["shape"]):
        shape, src = tuple(params["shape"]), tuple(in_types[0].shape)
        off = len(shape) - len(src)
        enc = []
        for i, d in enumerate(shape):
            # A ``?`` source axis is never 1 (symbols never broadcast), so
            # the target extent is its extent (``unify`` records it).
            if isinstance(d, Sym) and not (i < off or not isinstance(src[i - off], Sym)
                                           or unify(src[i - off], d) is None):
                d = -1
            elif isinstance(d, Sym) and not named(d):
                raise ValueError(
                    f"BroadcastTo to [{shape_text(shape)}]: the symbolic extent {d} of axis "
                    f"{i} is not the input's own extent there ([{shape_text(src)}]); fuel IR "
                    f"writes a ? extent of a broadcast only as -1 (keep the input's) or "
                    f"over the function's named symbols")
            enc.append(d)
        out["shape"] = tuple(enc)
    for k, v in out.items():
        if _holds_symbol(v, named):
            raise ValueError(f"{op_name} param {k!r} = {v} holds a symbolic extent; fuel IR "
                             f"has no encoding for it (only BroadcastTo's -1: keep the input's "
                             f"extent, and expressions over the function's named symbols, "
                             f"fuel.symbols)")
    return out


def _holds_symbol(v, named=lambda d: False) -> bool:
    """Whether ``v`` holds a symbolic extent ``named`` does not accept."""
    if isinstance(v, (tuple, list)):
        return any(_holds_symbol(x, named) for x in v)
    return isinstance(v, Sym) and not named(v)


def dtype_of(value) -> Optional[DType]:
    """The DType of a ranked tensor value, static or not; None otherwise."""
    from compiler.dialect import mlir_to_dtype
    try:
        return mlir_to_dtype(_ranked(value).element_type)
    except Exception:
        return None


def drive(items, rewrite: Callable, counter: str) -> None:
    """The passes' one walk-and-rewrite idiom: a worklist seeded with
    ``items`` (ops, or (op, state) pairs), all collected before the first
    rewrite, so ``rewrite(item)`` may replace or erase the op it is given (and
    no other seeded op). It returns the items to visit in turn (the ops it
    created that may match again), or None. Each visit counts once under
    ``counter`` in ``COUNTERS`` (the scaling tests read them)."""
    work = deque(items)
    while work:
        count(counter)
        work.extend(rewrite(work.popleft()) or ())


def replace_op(op, values, *, dead=(), forget: Optional[Callable] = None) -> None:
    """Retire ``op``: point every use of its results at ``values``, then erase
    it and the ops of ``dead`` (a matched region) as they become unused; a
    DAG may free a producer only after a later consumer is gone, hence the
    fixpoint (one sweep when ``dead`` lists consumers first). An op still used
    from outside is kept. ``forget(o)`` is called just before ``o`` is erased."""
    for old, new in zip(op.results, values):
        old.replace_all_uses_with(new)
    pending = list(dict.fromkeys(getattr(o, "operation", o) for o in (op, *dead)))
    progress = True
    while pending and progress:
        progress, keep = False, []
        for o in pending:
            if all(not list(r.uses) for r in o.results):
                if forget is not None:
                    forget(o)
                o.erase()
                progress = True
            else:
                keep.append(o)
        pending = keep


def fuel_ops(root) -> list:
    return walk_ops(root, lambda o: o.name.startswith(DIALECT_PREFIX))


def blocks(root) -> Iterator:
    """Every block nested under ``root``, outermost first."""
    for o in walk_ops(root):
        for r in o.regions:
            yield from r.blocks


def users(value) -> list:
    """The operations using ``value`` (one per use)."""
    return [u.owner for u in value.uses]


def describe(op) -> str:
    """``'fuel.add' (%3)`` style name for diagnostics."""
    name = op.operation.name if hasattr(op, "operation") else op.name
    try:
        res = op.results[0].get_name() if len(op.results) else ""
    except Exception:
        res = ""
    return f"'{name}'" + (f" ({res})" if res else "")


def dtype_list(dtypes) -> str:
    return "[" + ", ".join(str(d) for d in dtypes) + "]"


def attributes_of(op) -> dict:
    attrs = op.attributes
    return {na.name: na.attr for na in (attrs[i] for i in range(len(attrs)))}


def create(op_name: str, operands, result_types, attributes=None, loc=None):
    """Create ``op_name`` at the current insertion point (generic builder:
    IRDL ops have no OpView classes). A fuel op with several optional
    operands gets the ``operandSegmentSizes`` its params give."""
    attributes = dict(attributes or {})
    if op_name.startswith("fuel."):
        from compiler.dialect.definition import default_ops, with_segments
        spec = default_ops().get(op_name.removeprefix("fuel."))  # None: a structural op
        if spec is not None and spec.segmented:
            attributes = with_segments(spec, len(operands), attributes)
    return ir.Operation.create(op_name, results=list(result_types), operands=list(operands),
                               attributes=attributes, loc=loc)


def create_op(mnemonic: str, operands, result_types, params: dict, loc=None):
    """Create ``fuel.<mnemonic>`` with ``params`` (graph param values) as its
    attributes, at the current insertion point."""
    from compiler.dialect import lookup, params_to_attributes
    return create(f"fuel.{mnemonic}", operands, result_types,
                  params_to_attributes(lookup(mnemonic), params), loc=loc)


def replace_activation(act, view, fused, dead) -> None:
    """Replace activation ``act`` by ``fused`` (its producer with the
    activation as an epilogue). When a view op ``view`` stood between the
    producer and ``act``, the activation has moved above it: ``view`` now
    reads ``fused`` and replaces ``act``."""
    if view is not None:
        view.operands[0] = fused.results[0]
        replace_op(act, [view.results[0]], dead=dead)
    else:
        replace_op(act, [fused.results[0]], dead=dead)


def with_element_type(t, dtype: DType):
    """``t`` (a ranked tensor type) with its element type replaced."""
    from compiler.dialect import dtype_to_mlir
    rt = ir.RankedTensorType(t)
    return ir.RankedTensorType.get(list(rt.shape), dtype_to_mlir(dtype), rt.encoding)


def cast_attributes(dtype: DType) -> dict:
    from compiler.dialect import lookup, params_to_attributes
    return params_to_attributes(lookup("cast"), {"dtype": dtype})
