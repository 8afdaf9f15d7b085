"""The lowering table and the helpers every fuel -> linalg rule shares.

A rule is registered once per op family::

    @lowers("Add", "Sub", "Mul", "Div")
    def _binary(lw: Lowering) -> ir.Value: ...

It runs with the insertion point and location at the fuel op and returns the
replacement value(s). What is handled here, centrally, and not in the rules:

* dtypes: ``lw.in_dtypes`` / ``lw.out_dtype`` are the *fuel* dtypes of the op
  (read before the unsigned -> signless rewrite), ``Scalar(dtype)`` picks the
  integer / unsigned / float arith op, and ``elementwise`` computes f16/bf16
  bodies in f32 (extf -> op -> truncf);
* shapes: ``dims(v)`` yields static ints or ``tensor.dim`` values, so rules
  written with it work on ``tensor<?x?xf32>``; a result whose type differs
  from the op's declared result type only in static-vs-dynamic dims gets a
  ``tensor.cast`` from the driver.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Sequence, Union

from compiler.mlir import arith, ir, linalg, math, memref, tensor
from runtime.dtype import DType

Rule = Callable[["Lowering"], Union["ir.Value", Sequence["ir.Value"]]]
#: The generic (target-neutral) rule of each op-table name.
RULES: dict[str, Rule] = {}
#: Rules specialised for one platform (a target kind, e.g. ``"cpu"``), keyed
#: ``(name, platform)``; they win over the generic rule on that platform.
PLATFORM_RULES: dict[tuple[str, str], Rule] = {}

FLOAT_DTYPES = frozenset({DType.BF16, DType.F16, DType.F32, DType.F64, DType.F8E4M3,
                          DType.F6E2M3, DType.F6E3M2, DType.F4, DType.F8E8M0})
NARROW_FLOATS = frozenset({DType.BF16, DType.F16, DType.F8E4M3, DType.F6E2M3,
                           DType.F6E3M2, DType.F4, DType.F8E8M0})


def lowers(*names: str, platform: Optional[str] = None):
    """Register the decorated function as the lowering of the op-table names:
    the generic rule, or with ``platform`` (a target kind such as ``"cpu"``)
    the rule used on that platform instead of the generic one."""
    def deco(fn: Rule) -> Rule:
        for n in names:
            table, key = (RULES, n) if platform is None else (PLATFORM_RULES, (n, platform))
            if key in table:
                raise ValueError(f"lowering for {key!r} registered twice "
                                 f"({table[key].__name__} and {fn.__name__})")
            table[key] = fn
        return fn
    return deco


def rule_for(name: str, platform: Optional[str] = None) -> Optional[Rule]:
    """The rule lowering op-table ``name`` on ``platform``: its platform rule,
    else the generic one, else None."""
    if platform is not None:
        rule = PLATFORM_RULES.get((name, platform))
        if rule is not None:
            return rule
    return RULES.get(name)


@dataclasses.dataclass
class Lowering:
    """Everything a rule may read about the op it lowers."""

    op: "ir.Operation"
    name: str                      # op-table name, e.g. "SumDim"
    operands: list                 # ir.Values (signless element types)
    in_dtypes: list                # fuel DTypes of the operands
    out_dtypes: list               # fuel DTypes of the results
    out_types: list                # declared result types (signless)
    params: dict

    @property
    def out_dtype(self) -> DType:
        return self.out_dtypes[0]

    @property
    def out_type(self) -> "ir.RankedTensorType":
        return ir.RankedTensorType(self.out_types[0])

    @property
    def out_elt(self) -> "ir.Type":
        return self.out_type.element_type

    def param(self, name: str):
        """The param ``name``; LoweringError if the op does not carry it."""
        try:
            return self.params[name]
        except KeyError:
            from compiler.errors import LoweringError
            raise LoweringError(
                f"{self.name}: missing param {name!r} (has {sorted(self.params)}); "
                f"the op table and the lowering disagree on the param name") from None

    def axis(self, name: str, rank: int) -> int:
        """A possibly negative axis param, normalised to 0..rank-1."""
        d = int(self.param(name))
        return d + rank if d < 0 else d


# -- types and shapes ------------------------------------------------------
def rtt(v) -> "ir.RankedTensorType":
    return ir.RankedTensorType(v.type if isinstance(v, ir.Value) else v)


def rank(v) -> int:
    return rtt(v).rank


def index(i: int) -> "ir.Value":
    return arith.constant(ir.IndexType.get(), int(i))


def dims(v) -> list:
    """Each dim of tensor (or memref) ``v``: an int when static, else a
    ``tensor.dim`` (``memref.dim``)."""
    t = ir.ShapedType(v.type)
    dim = memref.dim if isinstance(v.type, ir.MemRefType) else tensor.dim
    return [t.shape[i] if not t.is_dynamic_dim(i) else dim(v, index(i)) for i in range(t.rank)]


def _slice_at(at, sizes) -> tuple:
    """The operands of a slice at the dynamic leading offsets ``at`` (the
    other offsets 0), unit strides, each size an int or an index value."""
    dyn_off, dyn_size = ir.ShapedType.get_dynamic_stride_or_offset(), ir.ShapedType.get_dynamic_size()
    static = [s if isinstance(s, int) else dyn_size for s in sizes]
    return (list(at), [s for s in sizes if not isinstance(s, int)], [],
            [dyn_off] * len(at) + [0] * (len(sizes) - len(at)), static, [1] * len(sizes))


def slice_at(v, at, sizes, drop_leading: bool = False) -> "ir.Value":
    """``v[at..., 0...]`` of ``sizes`` (``tensor.extract_slice`` at the dynamic
    leading offsets ``at``); ``drop_leading`` drops the ``len(at)`` leading
    sizes (each 1) from the result's type, as a row ``v[at..., :]``."""
    ops = _slice_at(at, sizes)
    shape = ops[4][len(at):] if drop_leading else ops[4]
    return tensor.ExtractSliceOp(ir.RankedTensorType.get(shape, rtt(v).element_type), v,
                                 *ops).result


def insert_at(v, dest, at, sizes=None) -> "ir.Value":
    """``dest`` with ``v`` written at the dynamic leading offsets ``at`` (the
    inverse of ``slice_at``); ``sizes`` defaults to ``v``'s static shape,
    behind unit dims up to ``dest``'s rank."""
    if sizes is None:
        sizes = [1] * (rank(dest) - rank(v)) + list(rtt(v).shape)
    return tensor.InsertSliceOp(v, dest, *_slice_at(at, sizes)).result


def empty(dlist, elt: "ir.Type") -> "ir.Value":
    return tensor.empty(list(dlist), elt)


def fill(value: "ir.Value", dest: "ir.Value") -> "ir.Value":
    return linalg.fill(value, outs=[dest])


# -- linalg.generic --------------------------------------------------------
PARALLEL = "parallel"
REDUCTION = "reduction"


def affine_map(n: int, exprs: Sequence) -> "ir.AffineMapAttr":
    """``exprs`` items: int k -> ``d_k``; None -> constant 0; an AffineExpr as is."""
    out = []
    for e in exprs:
        if e is None:
            out.append(ir.AffineConstantExpr.get(0))
        elif isinstance(e, int):
            out.append(ir.AffineDimExpr.get(e))
        else:
            out.append(e)
    return ir.AffineMapAttr.get(ir.AffineMap.get(n, 0, out))


def identity_map(n: int) -> "ir.AffineMapAttr":
    return affine_map(n, list(range(n)))


def generic(inputs: Sequence, inits: Sequence, maps: Sequence, iterators: Sequence[str],
            body: Callable[..., Union["ir.Value", Sequence["ir.Value"]]]) -> list:
    """Build a ``linalg.generic``; ``body(*block_args)`` returns the yielded
    value(s). Returns the op's results."""
    iters = ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{it}>")
                              for it in iterators])
    op = linalg.GenericOp([i.type for i in inits], list(inputs), list(inits),
                          ir.ArrayAttr.get(list(maps)), iters)
    elts = [rtt(v).element_type for v in list(inputs) + list(inits)]
    block = op.regions[0].blocks.append(*elts)
    with ir.InsertionPoint(block):
        ys = body(*block.arguments)
        linalg.YieldOp(list(ys) if isinstance(ys, (list, tuple)) else [ys])
    return list(op.results)


def mark_rolled() -> None:
    """Mark the function being lowered into (the kernel's entry, at the
    current insertion point) with ``family.ROLLED_ATTR``: its loops run as
    the rule wrote them, without LLVM's loop unrolling."""
    from compiler.codegen.family import ROLLED_ATTR
    op = ir.InsertionPoint.current.block.owner.operation
    while op is not None and op.name != "func.func":
        op = op.parent
    if op is not None:
        op.attributes[ROLLED_ATTR] = ir.UnitAttr.get()


def loop_index(d: int) -> "ir.Value":
    """``linalg.index d`` (inside a generic body)."""
    return linalg.IndexOp(d).result


def broadcast_map(in_shape, out_rank: int, out_shape=None) -> "ir.AffineMapAttr":
    """Right-aligned numpy broadcast of an input into an ``out_rank`` loop
    nest: size-1 input dims that stretch read index 0."""
    off = out_rank - len(in_shape)
    exprs = []
    for i, d in enumerate(in_shape):
        j = i + off
        stretch = d == 1 and (out_shape is None or out_shape[j] != 1)
        exprs.append(None if stretch else j)
    return affine_map(out_rank, exprs)


# -- scalar arith by dtype ---------------------------------------------------
class Scalar:
    """Scalar arith on one fuel dtype: picks addi/addf, divsi/divui/divf,
    cmpi/cmpf predicates. ``ty`` is the (signless) MLIR type computed in."""

    def __init__(self, dtype: DType, ty: "ir.Type"):
        self.dtype = dtype
        self.ty = ty
        self.is_float = dtype in FLOAT_DTYPES
        self.unsigned = dtype.is_unsigned_int

    @classmethod
    def compute(cls, dtype: DType) -> "Scalar":
        """The Scalar a body computes ``dtype`` in (f32 for narrow floats)."""
        from compiler.dialect.types import dtype_to_mlir, signless
        if dtype in NARROW_FLOATS:
            return cls(dtype, ir.F32Type.get())
        return cls(dtype, signless(dtype_to_mlir(dtype)))

    def const(self, v) -> "ir.Value":
        """``v`` in this type; an integer wraps modulo 2^width, as the
        reference's scalar params do (AddScalar(-3) on u8 adds 253)."""
        if self.is_float:
            return arith.constant(self.ty, float(v))
        width = ir.IntegerType(self.ty).width
        iv = int(v) % (2 ** width)
        if iv >= 2 ** (width - 1):      # two's complement: the signless constant
            iv -= 2 ** width
        return arith.constant(self.ty, iv)

    def saturated_const(self, v) -> "ir.Value":
        """``v`` clipped to this type's range (Clamp bounds: clamp(x, 0, 1000)
        on u8 is clamp(x, 0, 255))."""
        if self.is_float:
            return self.const(v)
        width = ir.IntegerType(self.ty).width
        lo, hi = (0, 2 ** width - 1) if self.unsigned else (-(2 ** (width - 1)), 2 ** (width - 1) - 1)
        return self.const(min(max(int(v), lo), hi))

    def add(self, a, b):
        return arith.addf(a, b) if self.is_float else arith.addi(a, b)

    def sub(self, a, b):
        return arith.subf(a, b) if self.is_float else arith.subi(a, b)

    def mul(self, a, b):
        return arith.mulf(a, b) if self.is_float else arith.muli(a, b)

    def safe_divisor(self, a, b):
        """``b`` with the divisions that trap on x86 (by 0, MIN / -1) replaced
        by 1; returns (divisor, is_zero)."""
        zero = arith.cmpi(arith.CmpIPredicate.eq, b, self.const(0))
        bad = zero
        if not self.unsigned:
            width = ir.IntegerType(self.ty).width
            ovf = arith.andi(arith.cmpi(arith.CmpIPredicate.eq, a, self.const(-(2 ** (width - 1)))),
                             arith.cmpi(arith.CmpIPredicate.eq, b, self.const(-1)))
            bad = arith.ori(zero, ovf)
        return arith.select(bad, self.const(1), b), zero

    def div(self, a, b):
        """Float division, or integer division truncating toward zero where
        division by zero yields 0 and MIN / -1 wraps (the reference rule)."""
        if self.is_float:
            return arith.divf(a, b)
        safe, zero = self.safe_divisor(a, b)
        q = arith.divui(a, safe) if self.unsigned else arith.divsi(a, safe)
        return arith.select(zero, self.const(0), q)

    def max(self, a, b):
        if self.is_float:
            return arith.maximumf(a, b)
        return arith.maxui(a, b) if self.unsigned else arith.maxsi(a, b)

    def min(self, a, b):
        if self.is_float:
            return arith.minimumf(a, b)
        return arith.minui(a, b) if self.unsigned else arith.minsi(a, b)

    def neg(self, a):
        return arith.negf(a) if self.is_float else arith.subi(self.const(0), a)

    _FPRED = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}

    def cmp(self, pred: str, a, b) -> "ir.Value":
        """``pred`` in eq/ne/lt/le/gt/ge; floats: ordered (NaN -> false)
        except ``ne`` which is unordered (NaN != NaN is true)."""
        if self.is_float:
            return arith.cmpf(getattr(arith.CmpFPredicate, self._FPRED[pred].upper()), a, b)
        if pred in ("eq", "ne"):
            p = pred
        else:
            p = ("u" if self.unsigned else "s") + pred
        return arith.cmpi(getattr(arith.CmpIPredicate, p), a, b)

    def lowest(self) -> "ir.Value":
        """The identity of max: -inf, or the type's smallest integer."""
        if self.is_float:
            return self.const(float("-inf"))
        width = ir.IntegerType(self.ty).width
        return self.const(0 if self.unsigned else -(2 ** (width - 1)))

    def highest(self) -> "ir.Value":
        if self.is_float:
            return self.const(float("inf"))
        width = ir.IntegerType(self.ty).width
        return self.const(2 ** width - 1 if self.unsigned else 2 ** (width - 1) - 1)

    def from_index(self, i: "ir.Value") -> "ir.Value":
        """An ``index`` value converted to this scalar type."""
        if self.is_float:
            return arith.sitofp(self.ty, arith.index_cast(ir.IntegerType.get_signless(64), i))
        return arith.index_cast(self.ty, i)


def to_compute(x: "ir.Value", s: Scalar) -> "ir.Value":
    """A body argument widened to the compute type (f16/bf16 -> f32)."""
    return arith.extf(s.ty, x) if x.type != s.ty and s.is_float else x


def from_compute(x: "ir.Value", elt: "ir.Type") -> "ir.Value":
    """A computed value narrowed back to the storage element type."""
    if x.type == elt:
        return x
    if isinstance(x.type, ir.FloatType) and isinstance(elt, ir.FloatType):
        return arith.truncf(elt, x)
    raise TypeError(f"cannot narrow {x.type} to {elt}")


def elementwise(lw: Lowering, inputs: Sequence, body: Callable, *, dtype: Optional[DType] = None,
                out_elt: Optional["ir.Type"] = None, widen: Optional[Sequence[bool]] = None):
    """``out[i] = body(s, *xs[i])`` over the output's shape. Inputs broadcast
    numpy-style against the largest-rank input; ``s`` is the ``Scalar`` of
    ``dtype`` (default: the first input's dtype) in compute precision.
    Arguments are widened to the compute type unless ``widen[k]`` is False
    (masks, conditions); the result is narrowed to ``out_elt``."""
    dtype = dtype or lw.in_dtypes[0]
    s = Scalar.compute(dtype)
    out_elt = out_elt or lw.out_elt
    ref = max(inputs, key=rank)
    out_rank = rank(ref)
    out_dims = dims(ref)
    out_static = rtt(ref).shape
    init = empty(out_dims, out_elt)
    maps = [broadcast_map(rtt(x).shape, out_rank, out_static) for x in inputs]
    maps.append(identity_map(out_rank))
    widen = list(widen) if widen is not None else [True] * len(inputs)

    def _body(*args):
        xs = [to_compute(a, s) if w else a for a, w in zip(args[:len(inputs)], widen)]
        return from_compute(body(s, *xs), out_elt)

    return generic(inputs, [init], maps, [PARALLEL] * out_rank, _body)[0]


def _reassoc(groups) -> "ir.ArrayAttr":
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, i) for i in g])
                             for g in groups])


def collapse(v, groups) -> "ir.Value":
    """``tensor.collapse_shape`` of ``v`` by reassociation ``groups`` (a
    group holding a run-time extent is one)."""
    t = rtt(v)
    shape = [ir.ShapedType.get_dynamic_size() if any(t.is_dynamic_dim(i) for i in g)
             else _prod(t.shape[i] for i in g) for g in groups]
    return tensor.collapse_shape(ir.RankedTensorType.get(shape, t.element_type), v,
                                 _reassoc(groups))


def expand(v, shape, groups) -> "ir.Value":
    """``tensor.expand_shape`` of ``v`` to ``shape`` (ints, or index values
    for run-time extents)."""
    t = rtt(v)
    static = [d if isinstance(d, int) else ir.ShapedType.get_dynamic_size() for d in shape]
    return tensor.expand_shape(ir.RankedTensorType.get(static, t.element_type), v,
                               _reassoc(groups), [d for d in shape if not isinstance(d, int)],
                               static)


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def reshape(v, shape) -> "ir.Value":
    """Row-major reshape of static-shaped ``v`` to ``shape`` (collapse to 1-D,
    expand to the target)."""
    t = rtt(v)
    shape = [int(d) for d in shape]
    if list(t.shape) == shape:
        return v
    if t.rank == 0:
        flat = expand(v, [1], [])
    elif t.rank == 1:
        flat = v
    else:
        flat = collapse(v, [list(range(t.rank))])
    if len(shape) == 0:
        return collapse(flat, [])
    if len(shape) == 1:
        return flat
    return expand(flat, shape, [list(range(len(shape)))])


def bool_to(elt: "ir.Type", b: "ir.Value") -> "ir.Value":
    """An i1 as 1/0 of ``elt`` (integer or float)."""
    if isinstance(elt, ir.FloatType):
        return arith.uitofp(elt, b)
    return arith.extui(elt, b)


def nonzero(x: "ir.Value") -> "ir.Value":
    """``x != 0`` as i1 (for U8 masks and conditions)."""
    if isinstance(x.type, ir.FloatType):
        return arith.cmpf(arith.CmpFPredicate.UNE, x, arith.constant(x.type, 0.0))
    return arith.cmpi(arith.CmpIPredicate.ne, x, arith.constant(x.type, 0))


__all__ = ["RULES", "PLATFORM_RULES", "rule_for", "lowers", "Lowering", "Scalar", "generic", "elementwise", "dims", "empty",
           "fill", "index", "affine_map", "identity_map", "broadcast_map", "loop_index",
           "PARALLEL", "REDUCTION", "rtt", "rank", "math", "arith", "tensor", "linalg"]
