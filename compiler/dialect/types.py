"""DType <-> MLIR element type: the one mapping every layer uses.

==========  ===============  ==========================================
DType       MLIR element     note
==========  ===============  ==========================================
U8          ``ui8``          signedness stays visible in fuel IR; the
U32/U64     ``ui32``/``ui64`` linalg lowering rewrites it to signless
                             ``i8``/``i32`` and picks unsigned arith
                             (divui, cmpi ult, uitofp, extui)
I8/I16/     ``i8``/``i16``/  signless, signed semantics
I32/I64     ``i32``/``i64``
BF16        ``bf16``         computed in f32 inside kernel bodies
F16         ``f16``          computed in f32 inside kernel bodies
F32, F64    ``f32``, ``f64``
F8E4M3      ``f8E4M3FN``     OCP fp8 e4m3 (finite, NaN only)
F6E2M3      ``f6E2M3FN``
F6E3M2      ``f6E3M2FN``
F4          ``f4E2M1FN``
F8E8M0      ``f8E8M0FNU``    block scale
F8E6M2      (none)           MLIR has no such type: DialectError
==========  ===============  ==========================================

Shapes: ``tensor_type(TensorType)`` builds ``tensor<AxBxT>``; ``dynamic=True``
makes every dim ``?``, a per-dim mask (``(True, False)``) the dims it marks.
"""
from __future__ import annotations

import contextlib
import contextvars

from compiler.errors import DialectError
from compiler.graph.opdef import TensorType
from compiler.graph.symbolic import Sym, recording
from compiler.mlir import ir
from runtime.dtype import DType

_SPELLING = {
    DType.U8: "ui8", DType.U32: "ui32", DType.U64: "ui64",
    DType.I8: "i8", DType.I16: "i16", DType.I32: "i32", DType.I64: "i64",
    DType.BF16: "bf16", DType.F16: "f16", DType.F32: "f32", DType.F64: "f64",
    DType.F8E4M3: "f8E4M3FN", DType.F6E2M3: "f6E2M3FN", DType.F6E3M2: "f6E3M2FN",
    DType.F4: "f4E2M1FN", DType.F8E8M0: "f8E8M0FNU",
}
_BY_SPELLING = {v: k for k, v in _SPELLING.items()}


def dtype_spelling(dt: DType) -> str:
    """The MLIR spelling of ``dt``'s element type (``"ui8"``, ``"f32"``)."""
    try:
        return _SPELLING[DType.parse(dt)]
    except KeyError:
        raise DialectError(
            f"dtype {dt} has no MLIR element type; supported: "
            f"{', '.join(str(d) for d in _SPELLING)}") from None


def dtype_to_mlir(dt: DType) -> "ir.Type":
    """The MLIR element type of ``dt`` (needs an active ``ir.Context``)."""
    return ir.Type.parse(dtype_spelling(dt))


def mlir_to_dtype(t: "ir.Type") -> DType:
    """The DType of an MLIR element type (or of a shaped type's element).
    Signless ``i8``/``i32`` map to I8/I32, ``ui8``/``ui32`` to U8/U32."""
    if isinstance(t, ir.ShapedType):
        t = t.element_type
    s = str(t)
    try:
        return _BY_SPELLING[s]
    except KeyError:
        raise DialectError(
            f"MLIR element type {s} has no fuel DType; supported: "
            f"{', '.join(sorted(_BY_SPELLING))}") from None


def tensor_type(tt: TensorType, dynamic=False) -> "ir.RankedTensorType":
    """``tensor<...>`` for a graph ``TensorType``; all dims ``?`` if ``dynamic``
    is True, the dims it marks if it is a per-dim mask."""
    mask = dynamic if isinstance(dynamic, (tuple, list)) else [dynamic] * len(tt.shape)
    dims = [ir.ShapedType.get_dynamic_size() if m else int(d) for d, m in zip(tt.shape, mask)]
    return ir.RankedTensorType.get(dims, dtype_to_mlir(tt.dtype))


def signless(t: "ir.Type") -> "ir.Type":
    """``ui8`` -> ``i8`` (also inside a tensor type); other types unchanged."""
    if isinstance(t, ir.RankedTensorType):
        rt = ir.RankedTensorType(t)
        return ir.RankedTensorType.get(rt.shape, signless(rt.element_type), rt.encoding)
    if isinstance(t, ir.IntegerType):
        it = ir.IntegerType(t)
        if not it.is_signless:
            return ir.IntegerType.get_signless(it.width)
    return t


def tensor_types(values) -> list[TensorType]:
    """TensorTypes of MLIR tensor values (or types)."""
    out = []
    for v in values:
        t = ir.RankedTensorType(getattr(v, "type", v))
        out.append(TensorType(tuple(t.shape), mlir_to_dtype(t.element_type)))
    return out


class SymbolicDims:
    """The symbols the passes and the type verifier read ``?`` extents as
    (docs/dynamic-shapes.md, "Passes on ? extents"). In a function that
    names its symbols (``fuel.symbols``, ``symbols.py``) a value's ``?``
    extent is the expression the shape rules compute from the arguments'
    ``fuel.dims`` and the params' ``fuel.extents`` (``batch*seq``); any other
    ``?`` (hand-written IR, an extent no rule names) is an atom ``d0``, ``d1``,
    ... (bounds 1.., as a graph symbol: never assumed to be 1 by
    broadcasting), the same atom for the same value and axis every time.
    Shape rules then compute with them as they do with graph symbols; run
    them inside ``recording()``, so that two ``?`` extents an op needs equal
    (the operands of an add) unify, as the op itself asserts."""

    def __init__(self):
        self._atoms: dict = {}
        # value -> (``_content(value)``, its extents from the rules or None):
        # shared by the instances of one pass run (``shared_extents``)
        self._named: dict = _SHARED.get()
        if self._named is None:
            self._named = {}
        self.fresh: set = set()  # the names of the atoms
        self.equalities: list = []

    def shape(self, value, rt=None) -> tuple:
        """``value``'s shape (``rt``: its ranked tensor type), ``?`` as symbols."""
        rt = rt or ir.RankedTensorType(value.type)
        dyn = ir.ShapedType.get_dynamic_size()
        if rt.has_static_shape:
            return tuple(rt.shape)
        named = self.named(value) or ()
        return tuple(d if d != dyn else named[i] if i < len(named) and isinstance(
            named[i], Sym) else self._atom(value, i) for i, d in enumerate(rt.shape))

    def _atom(self, value, axis: int):
        key = (value, axis)
        if key not in self._atoms:
            from .symbols import enclosing_func, func_symbols
            owner = value.owner
            owner = owner.owner if isinstance(owner, ir.Block) else owner
            reserved = func_symbols(enclosing_func(owner)) or ()
            n = len(self._atoms)
            while f"d{n}" in reserved or f"d{n}" in self.fresh:  # not a function's own symbol
                n += 1
            self._atoms[key] = Sym(f"d{n}")
            self.fresh.add(f"d{n}")
        return self._atoms[key]

    def encodable(self, d) -> bool:
        """Whether the symbolic extent ``d`` is over named symbols only (the
        IR can spell it: ``fuel.extents``)."""
        return isinstance(d, Sym) and not (set(d.atoms) & self.fresh)

    def named(self, value) -> "tuple | None":
        """``value``'s extents from the rules of a function naming its
        symbols (None where not): its producers first, without recursion."""
        from .structural import is_runtime_fused
        from .symbols import enclosing_func, func_symbols, value_dims
        known = self._known
        stack = [value]
        while stack:
            v = stack[-1]
            if known(v):
                stack.pop()
                continue
            d = v.maybe_downcast()
            if isinstance(d, ir.BlockArgument):
                owner = d.owner.owner
                owner = getattr(owner, "operation", owner)
                if owner.name == "func.func":
                    self._named[stack.pop()] = (_content(v), value_dims(d))
                    continue
                # a runtime fused body's arguments mirror the op's operands
                src = owner.operands[d.arg_number] if is_runtime_fused(owner) else None
                deps, extents = [src] if src is not None else [], lambda: [self._named[src][1]]
            else:
                owner = d.owner
                owner = getattr(owner, "operation", owner)
                op = owner
                if not op.name.startswith("fuel.") or func_symbols(enclosing_func(op)) is None:
                    deps, extents = [], lambda: [None] * len(op.results)
                elif is_runtime_fused(op):  # its result is the body's yielded value
                    y = list(op.regions[0].blocks[0].operations)[-1].operands[0]
                    deps, extents = [y], lambda: [self._named[y][1]]
                else:
                    deps, extents = list(op.operands), lambda: self._rule_extents(op)
            pending = [o for o in deps if not known(o)]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            if isinstance(d, ir.BlockArgument):
                self._named[v] = (_content(v), extents()[0] if deps else None)
            else:
                for r, shape in zip(op.results, extents()):
                    self._named[r] = (_content(r), shape)
        return self._named[value][1]

    def _known(self, v) -> bool:
        """Whether ``v``'s extents are computed, for what ``v`` is now: an
        entry is the extents of its op's name, attributes, operands and
        result type (a new op at an erased op's address is not the old one)."""
        entry = self._named.get(v)
        return entry is not None and entry[0] == _content(v)

    def _rule_extents(self, op) -> list:
        from .verify import rule_types
        try:
            with recording([], op.name):
                want = rule_types(op, self)
        except Exception:  # any refusal: the verifier reports it, the extents stay atoms
            want = None
        return [w.shape for w in want] if want else [None] * len(op.results)

    def recording(self, where: str = "fuel pass"):
        return recording(self.equalities, where)


def _content(v) -> tuple:
    """What ``v``'s extents are a function of: its op's name, attributes
    (uniqued: hashed by identity), operands and result type and number; a
    block argument's block owner and operands, its number and type."""
    owner = v.owner
    if isinstance(owner, ir.Block):
        op, n = owner.owner.operation, v.maybe_downcast().arg_number
    else:
        op, n = owner.operation, v.maybe_downcast().result_number
    attrs = op.attributes
    return (op.name, n, hash(v.type), tuple(hash(attrs[i].attr) for i in range(len(attrs))),
            tuple(op.operands))


_SHARED: contextvars.ContextVar = contextvars.ContextVar("fuelc_named_extents", default=None)


@contextlib.contextmanager
def shared_extents():
    """The ``SymbolicDims`` made inside share the extents they compute (one
    pass run: a rewrite keeps the extents of the values it leaves)."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def broadcast_keeps(shape, src) -> tuple:
    """A ``BroadcastTo`` target ``shape`` with -1 where a symbolic extent is
    the input's own (``src``, right-aligned): how fuel IR writes it."""
    off = len(shape) - len(src)
    return tuple(-1 if isinstance(d, Sym) and i >= off and src[i - off] == d else d
                 for i, d in enumerate(shape))


def keep_extents(shape, src) -> list:
    """A ``fuel.broadcast_to`` target ``shape`` with each -1 (keep the
    input's extent: how the passes write a ``?`` extent) replaced by the
    input's extent ``src[i - off]`` (right-aligned; an int, symbol or index
    value). -1 on a new leading axis is a ``DialectError``."""
    off = len(shape) - len(src)
    if any(d == -1 and i < off for i, d in enumerate(shape)):
        raise DialectError(f"BroadcastTo to {list(shape)}: -1 (keep the input's extent) on a new "
                           f"leading axis of a rank-{len(src)} input")
    return [src[i - off] if d == -1 else d for i, d in enumerate(shape)]
