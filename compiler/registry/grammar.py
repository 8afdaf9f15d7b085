"""The declarative pattern and recipe grammar.

One tree type serves three roles: a fused op's *recipe* (its decomposition
into primitives), a *fusion pattern* (what the matcher looks for), and a
runtime fused op's region. It is plain, immutable data:

* ``Op(op, operands, params)``: one primitive of ``compiler.graph.ops.OP_TABLE``
  (by its CamelCase name) or a nested static fused op (by its registry name).
  ``operands`` are the tensor inputs in order, with exact arity. ``params``
  are the primitive's ParamSpec names, as a sorted tuple of ``(name, value)``
  pairs (``Op.param_dict`` gives the dict); a value is either concrete (a
  python value of the ParamSpec's kind) or *relative* (below). Build nodes
  with ``op("SumDim", x, axis=LAST)``.
* ``Bind(index)``: a leaf; input ``index`` of the fused op. Over a recipe the
  indices must be exactly ``[0, n)``; a repeated index is the same input.
* ``SeeThrough(then)`` and ``Any()``: matcher-only (a recipe containing them
  is rejected with ``NonConcreteRegion``).

DAG recipes are written by reusing the same python object in several places
(softmax's ``e``); emission shares every structurally equal subtree that has
no scalar slot, so a DAG written as a tree stays a DAG. In a pattern, the
number of uses of an interior node inside the pattern is its required
consumer count in the graph (softmax ``e``: 2; every other interior node: 1).

Relative param values, resolved against the bind shapes at emission:

* ``LAST``: the operand's last axis: ``rank - 1`` of child 0, except for
  ``Unsqueeze``, where it means append (``rank``). Only for ``i64`` params.
* ``SLOT``: an open scalar slot, filled at emission from the entry's scalar
  projection in pre-order. Only ``AddScalar``/``MulScalar`` ``value`` carry
  slots; every other scalar is baked into the recipe.
* shape expressions (for ``i64s`` params): ``SameAs(i)`` (bind i's shape),
  ``WithDim(i, axis, dim)`` (bind i's shape with one axis replaced) and
  ``Dims((d0, d1, ...))``.
* dim expressions (for ``i64`` and ``f64`` params and inside shape
  expressions): ``Extent(i, axis)`` (axis may be ``LAST``), ints, and
  ``+ - * //`` between them (``DimBin``); ``Recip(d)`` gives ``1/d`` for
  ``f64`` params (the Mean-divisor of a reduction).

A rel value and a concrete value for the same param cannot both exist: a
param holds exactly one value.
"""
from __future__ import annotations

import dataclasses
import hashlib
import struct
from typing import Any, Iterator, Union

from compiler.graph.ops import OP_TABLE
from runtime.dtype import DType

from .errors import RecipeError


# -- markers ----------------------------------------------------------------
class _Last:
    """The ``LAST`` axis marker (the ``axis_last`` of the grammar)."""

    _inst = None

    def __new__(cls):
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "LAST"

    def __reduce__(self):
        return (_Last, ())


class _Slot:
    """The open scalar slot marker."""

    _inst = None

    def __new__(cls):
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "SLOT"

    def __reduce__(self):
        return (_Slot, ())


LAST = _Last()
SLOT = _Slot()


# -- dim and shape expressions ---------------------------------------------
class _DimOps:
    def __add__(self, o): return DimBin("+", self, o)
    def __radd__(self, o): return DimBin("+", o, self)
    def __sub__(self, o): return DimBin("-", self, o)
    def __rsub__(self, o): return DimBin("-", o, self)
    def __mul__(self, o): return DimBin("*", self, o)
    def __rmul__(self, o): return DimBin("*", o, self)
    def __floordiv__(self, o): return DimBin("//", self, o)
    def __rfloordiv__(self, o): return DimBin("//", o, self)


@dataclasses.dataclass(frozen=True)
class Extent(_DimOps):
    """The extent of bind ``operand`` along ``axis`` (an int or ``LAST``)."""
    operand: int
    axis: Any = LAST


@dataclasses.dataclass(frozen=True)
class DimBin(_DimOps):
    """``a <op> b`` with op in ``+ - * //`` (floor division)."""
    op: str
    a: Any
    b: Any


@dataclasses.dataclass(frozen=True)
class Recip:
    """``1 / d`` as a float (only valid for ``f64`` params)."""
    d: Any


@dataclasses.dataclass(frozen=True)
class SameAs:
    """The shape of bind ``operand``."""
    operand: int


@dataclasses.dataclass(frozen=True)
class WithDim:
    """Bind ``operand``'s shape with ``axis`` (int or LAST) replaced by ``dim``."""
    operand: int
    axis: Any
    dim: Any


@dataclasses.dataclass(frozen=True)
class Dims:
    """An explicit shape of dim expressions / ints."""
    dims: tuple


DIM_EXPRS = (Extent, DimBin, Recip)
SHAPE_EXPRS = (SameAs, WithDim, Dims)


# -- nodes --------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Bind:
    index: int


@dataclasses.dataclass(frozen=True)
class Op:
    """One op node. Nodes form a DAG (an operand object may be shared); the
    hash is computed once from the children's hashes and equality compares
    each pair of nodes once, so both are linear in the distinct nodes."""
    op: str
    operands: tuple = ()
    params: tuple = ()  # sorted ((name, value), ...)

    def __post_init__(self):
        object.__setattr__(self, "_hash", hash((self.op, self.operands, self.params)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if not isinstance(other, Op):
            return NotImplemented
        seen = set()
        stack = [(self, other)]
        while stack:
            a, b = stack.pop()
            if a is b or (id(a), id(b)) in seen:
                continue
            seen.add((id(a), id(b)))
            if not (isinstance(a, Op) and isinstance(b, Op)):
                if a != b:
                    return False
                continue
            if (a._hash != b._hash or a.op != b.op or a.params != b.params
                    or len(a.operands) != len(b.operands)):
                return False
            stack.extend(zip(a.operands, b.operands))
        return True

    @property
    def param_dict(self) -> dict:
        return dict(self.params)

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={v!r}" for k, v in self.params)
        args = ", ".join(repr(o) for o in self.operands)
        sep = ", " if args and ps else ""
        return f"{self.op}({args}{sep}{ps})"


@dataclasses.dataclass(frozen=True)
class SeeThrough:
    then: Any


@dataclasses.dataclass(frozen=True)
class Any_:
    """Matcher-only wildcard (spelled ``Any_`` to keep ``typing.Any`` free)."""


PatternNode = Union[Op, Bind, SeeThrough, Any_]


def _freeze(v):
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, tuple):
        return tuple(_freeze(x) for x in v)
    return v


def op(name: str, *operands, **params) -> Op:
    """Build an ``Op`` node: ``op("SumDim", Bind(0), axis=LAST)``."""
    return Op(name, tuple(operands), tuple(sorted((k, _freeze(v)) for k, v in params.items())))


# -- traversal helpers ------------------------------------------------------------
def iter_preorder(node) -> Iterator:
    """Every node occurrence of the tree, parents before children (a shared
    object is visited once per occurrence: exponential on a deep DAG; see
    ``iter_slot_occurrences`` and ``iter_unique`` for the linear walks)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, Op):
            stack.extend(reversed(n.operands))
        elif isinstance(n, SeeThrough):
            stack.append(n.then)


def iter_unique(node) -> Iterator:
    """Every distinct node (by identity) under ``node``, at its first
    pre-order occurrence: linear in the distinct nodes."""
    seen = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        if isinstance(n, Op):
            stack.extend(reversed(n.operands))
        elif isinstance(n, SeeThrough):
            stack.append(n.then)


_iter_unique = iter_unique


def _kids(n) -> tuple:
    return n.operands if isinstance(n, Op) else (n.then,) if isinstance(n, SeeThrough) else ()


def _postorder(node) -> list:
    """The distinct nodes under ``node`` (by identity), children before parents."""
    out, seen = [], set()
    stack = [(node, False)]
    while stack:
        n, expanded = stack.pop()
        if expanded:
            out.append(n)
        elif id(n) not in seen:
            seen.add(id(n))
            stack.append((n, True))
            stack.extend((c, False) for c in reversed(_kids(n)))
    return out


def iter_slot_occurrences(node) -> Iterator:
    """The slot op nodes under ``node``, once per occurrence in pre-order
    (the order slots fill in), without entering subtrees that hold no slot:
    the walk costs the distinct nodes plus the slot occurrences, not the
    occurrences of every node."""
    free: dict = {}
    for n in _postorder(node):
        free[id(n)] = not is_slot_op(n) and all(free[id(c)] for c in _kids(n))
    stack = [node]
    while stack:
        n = stack.pop()
        if free[id(n)]:
            continue
        if is_slot_op(n):
            yield n
        stack.extend(reversed(_kids(n)))


def _roots(recipe) -> tuple:
    return tuple(recipe) if isinstance(recipe, (tuple, list)) else (recipe,)


def bind_indices(recipe) -> list[int]:
    """Sorted distinct bind indices of a recipe (one root or a tuple of roots)."""
    out = set()
    for r in _roots(recipe):
        for n in _iter_unique(r):
            if isinstance(n, Bind):
                out.add(n.index)
    return sorted(out)


def is_slot_op(n) -> bool:
    return isinstance(n, Op) and any(v is SLOT for _, v in n.params)


def count_scalar_slots(recipe) -> int:
    """Number of open scalar slots, counted per occurrence in pre-order over
    every root in order (a shared slot node fills one slot per occurrence):
    the length the scalar projection of the recipe's params must have.
    Linear in the distinct nodes."""
    memo: dict = {}
    for r in _roots(recipe):
        for n in _postorder(r):
            if id(n) not in memo:
                memo[id(n)] = int(is_slot_op(n)) + sum(memo[id(c)] for c in _kids(n))
    return sum(memo[id(r)] for r in _roots(recipe))


# -- validation ---------------------------------------------------------------
#: The functional subset a recipe or region may contain: the op-table rows
#: marked ``recipe`` (every element-wise row unless it says otherwise). MinDim,
#: ArgMax/ArgMin, in-place, memory and control ops are not in it. Clamp *is*
#: re-emittable here: its two scalars are ordinary params.
RECIPE_VOCABULARY = frozenset(n for n, d in OP_TABLE.items() if d.recipe)

#: Ops whose ``value`` param may be an open scalar slot.
SLOT_OPS = frozenset({"AddScalar", "MulScalar"})

#: The commutative binary ops (matching tries both operand orders; the
#: structural hash sorts their children): the rows marked ``commutative``.
COMMUTATIVE = frozenset(n for n, d in OP_TABLE.items() if d.commutative)


def _op_table():
    from compiler.graph.ops import OP_TABLE
    return OP_TABLE


def _fused_entry(name: str):
    from .registry import default_registry
    return default_registry().get(name)


def _check_dim_expr(d, n_binds: int, where: str, allow_recip: bool):
    if isinstance(d, bool):
        raise RecipeError("BadAttrs", f"{where}: a dim expression cannot be a bool")
    if isinstance(d, int):
        return
    if isinstance(d, Extent):
        if not (0 <= d.operand < n_binds):
            raise RecipeError("BadAttrs", f"{where}: Extent operand {d.operand} is out of "
                                          f"range for {n_binds} binds")
        if d.axis is not LAST and not isinstance(d.axis, int):
            raise RecipeError("BadAttrs", f"{where}: Extent axis must be an int or LAST")
        return
    if isinstance(d, DimBin):
        if d.op not in ("+", "-", "*", "//"):
            raise RecipeError("BadAttrs", f"{where}: unknown dim operator {d.op!r}")
        _check_dim_expr(d.a, n_binds, where, False)
        _check_dim_expr(d.b, n_binds, where, False)
        return
    if isinstance(d, Recip) and allow_recip:
        _check_dim_expr(d.d, n_binds, where, False)
        return
    raise RecipeError("BadAttrs", f"{where}: {d!r} is not a dim expression")


def _check_value(opname: str, spec, value, n_binds: int, pattern: bool = False):
    """``pattern``: a fusion pattern, where a ``SLOT`` on any f64 param only
    reads the matched op's value (a recipe emits slots, on AddScalar/MulScalar
    ``value`` only)."""
    where = f"{opname}.{spec.name}"
    kind = spec.kind
    if value is LAST:
        if kind != "i64":
            raise RecipeError("BadAttrs", f"{where}: LAST is only valid for axis params "
                                          f"(kind i64), this one is {kind}")
        return
    if value is SLOT:
        if (opname not in SLOT_OPS and not pattern) or kind not in ("f64", "num"):
            raise RecipeError("BadSlot", f"{where}: only AddScalar/MulScalar 'value' may be "
                                         f"an open scalar slot; bake this scalar in")
        return
    if isinstance(value, SHAPE_EXPRS):
        if kind != "i64s":
            raise RecipeError("BadAttrs", f"{where}: a shape expression needs an i64s param")
        if isinstance(value, SameAs):
            _check_dim_expr(Extent(value.operand, 0), n_binds, where, False)
        elif isinstance(value, WithDim):
            _check_dim_expr(Extent(value.operand, value.axis), n_binds, where, False)
            _check_dim_expr(value.dim, n_binds, where, False)
        else:
            for d in value.dims:
                _check_dim_expr(d, n_binds, where, False)
        return
    if isinstance(value, DIM_EXPRS):
        if kind not in ("i64", "f64", "num"):
            raise RecipeError("BadAttrs", f"{where}: a dim expression needs an i64/f64/num param")
        _check_dim_expr(value, n_binds, where, allow_recip=(kind in ("f64", "num")))
        return
    if not value_fits_kind(value, kind, allow_none=spec.default is None):
        raise RecipeError("BadAttrs", f"{where}: {value!r} is not a value of kind {kind}")


def value_fits_kind(value, kind: str, allow_none: bool = False) -> bool:
    """Whether a concrete python value is of ParamSpec kind ``kind``."""
    if value is None:
        return allow_none
    if kind == "i64":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind in ("f64", "num"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "i64s":
        return isinstance(value, tuple) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value)
    if kind == "dtype":
        return isinstance(value, DType)
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "bytes":
        return isinstance(value, (bytes, bytearray))
    return False


def op_signature(name: str):
    """``(arity, params, fused_entry_or_None)`` of a recipe op name.
    Raises RecipeError(UnRepresentable) for names outside the vocabulary."""
    table = _op_table()
    if name in table:
        if name not in RECIPE_VOCABULARY:
            raise RecipeError("UnRepresentable", f"{name} is a primitive outside the recipe "
                                                 f"vocabulary; spell it with "
                                                 f"vocabulary ops")
        d = table[name]
        return d.arity, d.params, None
    entry = _fused_entry(name)
    if entry is not None and not getattr(entry, "is_runtime", False):
        return entry.arity, entry.params, entry
    raise RecipeError("UnRepresentable", f"{name!r} is neither a primitive of OP_TABLE nor a "
                                         f"static fused op of the registry")


def validate_recipe(recipe, unused_inputs=()) -> None:
    """Check a recipe (one root or a tuple of roots) before any use.

    Raises ``RecipeError`` with ``reason``:
    ``NonContiguousBinds`` (bind indices not exactly [0, n)),
    ``NonConcreteRegion`` (SeeThrough/Any, or a node that is not a grammar node),
    ``UnRepresentable`` (op outside the vocabulary / unknown),
    ``BadArity`` (operand count differs from the op's arity),
    ``BadAttrs`` (unknown or missing param, value of the wrong kind, bad rel
    expression, rel index out of range), ``BadSlot`` (a slot on a param that
    cannot carry one). ``unused_inputs`` are fused inputs the recipe does
    not read; they count as bound. Returns None when the recipe is well formed.
    """
    roots = _roots(recipe)
    if not roots:
        raise RecipeError("NonConcreteRegion", "a recipe needs at least one root")
    for r in roots:
        for n in _iter_unique(r):
            if isinstance(n, (SeeThrough, Any_)):
                raise RecipeError("NonConcreteRegion", f"{type(n).__name__} is matcher-only; "
                                                       f"a recipe must be concrete")
            if not isinstance(n, (Op, Bind)):
                raise RecipeError("NonConcreteRegion", f"{n!r} is not a pattern node")
            if isinstance(n, Bind) and (not isinstance(n.index, int) or n.index < 0):
                raise RecipeError("NonContiguousBinds", f"bad bind index {n.index!r}")
    binds = sorted(set(bind_indices(recipe)) | set(unused_inputs))
    if binds != list(range(len(binds))):
        raise RecipeError("NonContiguousBinds", f"bind indices {binds} are not exactly "
                                                f"[0, {len(binds)}); every fused input must be "
                                                f"bound, in order")
    n_binds = len(binds)
    for r in roots:
        for n in _iter_unique(r):
            if isinstance(n, Op):
                _validate_op(n, n_binds)


def _validate_op(n: Op, n_binds: int):
    from compiler.graph.opdef import VARIADIC
    arity, specs, _ = op_signature(n.op)
    if not isinstance(n.operands, tuple):
        raise RecipeError("NonConcreteRegion", f"{n.op}: operands must be a tuple")
    if arity == VARIADIC:
        if len(n.operands) < 1:
            raise RecipeError("BadArity", f"{n.op} needs at least one operand")
    elif len(n.operands) != arity:
        raise RecipeError("BadArity", f"{n.op} takes {arity} tensor operand(s), the recipe "
                                      f"gives {len(n.operands)}")
    by_name = {s.name: s for s in specs}
    given = n.param_dict
    for k in given:
        if k not in by_name:
            raise RecipeError("BadAttrs", f"{n.op} has no param {k!r}; it takes "
                                          f"{sorted(by_name) or 'none'}")
    for s in specs:
        if s.name not in given:
            if s.required:
                raise RecipeError("BadAttrs", f"{n.op} needs param {s.name!r} ({s.kind})")
            continue
        _check_value(n.op, s, given[s.name], n_binds)


# -- structural hashing ----------------------------------------------------------
def _canon_value(v):
    if isinstance(v, float):
        return ("f", struct.unpack("<Q", struct.pack("<d", v))[0])
    if isinstance(v, bool):
        return ("b", int(v))
    if isinstance(v, int):
        return ("i", v)
    if isinstance(v, DType):
        return ("t", v.value)
    if isinstance(v, (bytes, bytearray)):
        return ("y", hashlib.sha256(bytes(v)).hexdigest())
    if isinstance(v, tuple):
        return ("T",) + tuple(_canon_value(x) for x in v)
    if v is LAST or v is SLOT or v is None:
        return ("m", repr(v))
    if dataclasses.is_dataclass(v):
        return (type(v).__name__,) + tuple(_canon_value(getattr(v, f.name))
                                           for f in dataclasses.fields(v))
    return ("s", repr(v))


def structural_hash(recipe, ignore_slot_values: bool = True) -> str:
    """A content hash of a recipe that does not depend on object identity or
    on how a DAG was spelled (tree vs shared objects), with the children of
    commutative ops sorted. Deterministic across processes (sha256)."""
    memo: dict[int, str] = {}

    def h(n) -> str:
        k = id(n)
        if k in memo:
            return memo[k]
        if isinstance(n, Bind):
            out = f"B{n.index}"
        elif isinstance(n, Op):
            kids = [h(c) for c in n.operands]
            if n.op in COMMUTATIVE and len(kids) == 2:
                kids.sort()
            body = repr((n.op, tuple((k2, _canon_value(v)) for k2, v in n.params), tuple(kids)))
            out = hashlib.sha256(body.encode()).hexdigest()
        elif isinstance(n, SeeThrough):
            out = hashlib.sha256(("S" + h(n.then)).encode()).hexdigest()
        else:
            out = "ANY"
        memo[k] = out
        return out

    roots = _roots(recipe)
    return hashlib.sha256("|".join(h(r) for r in roots).encode()).hexdigest()


def float_bits(x: float) -> int:
    """The IEEE-754 binary64 bit pattern of ``x`` as an unsigned int."""
    return struct.unpack("<Q", struct.pack("<d", float(x)))[0]


def validate_pattern(pattern) -> None:
    """Check a fusion pattern: like ``validate_recipe`` except that
    ``SeeThrough``/``Any_`` are allowed and a missing param is a wildcard
    (matches any value: wildcard-on-unset). Raises RecipeError."""
    from compiler.graph.opdef import VARIADIC
    binds = bind_indices(pattern)
    if binds != list(range(len(binds))):
        raise RecipeError("NonContiguousBinds", f"pattern bind indices {binds} are not "
                                                f"[0, {len(binds)})")
    for n in _iter_unique(pattern):
        if isinstance(n, Op):
            arity, specs, _ = op_signature(n.op)
            if arity != VARIADIC and len(n.operands) != arity:
                raise RecipeError("BadArity", f"{n.op} takes {arity} operand(s), the pattern "
                                              f"gives {len(n.operands)}")
            by_name = {s.name: s for s in specs}
            for k, v in n.params:
                if k not in by_name:
                    raise RecipeError("BadAttrs", f"{n.op} has no param {k!r}")
                _check_value(n.op, by_name[k], v, len(binds), pattern=True)
        elif not isinstance(n, (Bind, SeeThrough, Any_)):
            raise RecipeError("NonConcreteRegion", f"{n!r} is not a pattern node")
