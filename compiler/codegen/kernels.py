"""The primitive kernel family: binding-table kernels compiled from one fuel
primitive through linalg to machine code for a target, one object per op
instance (kernel source ``mlir-cpu`` on cpu targets).

Each kernel (a ``family.GeneratedKernel`` of ``FAMILY``) is registered under
``(OpKind, dtypes, target.backend)``. When called with ``(inputs, outputs,
layouts, params)`` it

1. maps the runtime ``OpParams`` and the layouts to an *op instance*
   (``OpInstance``: op-table name, graph params, input ``TensorType``s,
   dynamic or static shapes) with the per-kind rule of ``_INSTANCE_RULES``;
   the rule may also adapt the layouts (stride-0 broadcast of elementwise
   inputs, dropping kept reduced axes, narrowing matmul rows);
2. gets the compiled function of that instance (memoised per process; the
   object comes from the kernel cache, so it is compiled once per machine:
   ``emit_single_op_module`` → ``lower_to_linalg`` → the target's
   ``compile_module``);
3. builds one memref descriptor per storage/layout and calls it. Outputs
   are pre-allocated by the caller; every descriptor may be strided.

Public: ``register_primitive_kernels(table, target, dtypes=...)``, ``warm(...)``
to compile ahead of time, ``instance_for(...)``, ``precision_for(...)``.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Iterable, Sequence

from runtime.params import exact_key
from compiler.codegen import parallel
from compiler.codegen.family import (KernelFamily, a_row_stride, aliased_b, b_row_stride,
                                     coalesce, few_rows, pack_a, unpacked_rows, inner_strides,
                                     single_op_linalg_text, unit_stride_args)
from compiler.codegen.loader import KernelFunction
from compiler.errors import UnsupportedOpError
from compiler.graph.opdef import ELEMENTWISE_CATEGORIES, TensorType
from runtime.cost import default_cost_for_op_kind
from runtime.dtype import DType
from runtime.layout import Layout
from runtime.opkind import OpKind
from runtime import params as P
from runtime.params import OpParams
from runtime.precision import PrecisionGuarantee


@dataclasses.dataclass(frozen=True)
class OpInstance:
    """One compilable op: op-table name, graph params (sorted items), input
    types and whether dims are dynamic (``?``) in the generated code."""

    op_name: str
    params: tuple[tuple[str, object], ...]
    input_types: tuple[TensorType, ...]
    dynamic: bool
    #: arguments (inputs then the output) the kernel reads / writes with a
    #: unit innermost stride (``family.unit_stride_args``; MatMul and the
    #: elementwise ops)
    unit_stride: tuple[int, ...] = ()
    #: a MatMul call of few rows (``family.few_rows``): the row kernel
    few_rows: bool = False
    #: arguments read with innermost stride 0 (broadcast; elementwise ops)
    zero_stride: tuple[int, ...] = ()
    #: a MatMul call of a few dozen rows (``family.unpacked_rows``): B read in place
    unpacked: bool = False
    #: ... whose B rows fall in few cache sets (``family.aliased_b``: ``aliased_unpacked``; 17-32 rows,
    #: packed: ``aliased_packed``)
    aliased: bool = False
    #: a MatMul call of the packed class that copies its blocks of A (``family.pack_a``)
    pack_a: bool = False

    @property
    def dynamic_dims(self) -> tuple | None:
        """Per input and the result, which extents are ``?`` when only some
        are (``PARTLY_DYNAMIC``); None when all or none are."""
        rule = PARTLY_DYNAMIC.get(self.op_name)
        return rule(self.input_types, dict(self.params)) if rule and self.dynamic else None

    @property
    def memo_key(self) -> tuple:
        """Instances that compile to the same code share a key: with dynamic
        dims only the ranks and dtypes of the inputs matter (and the static
        extents of a partly dynamic one)."""
        if self.dynamic_dims is not None:
            from compiler.codegen.fused import masked_types
            types = masked_types(self.input_types, self.dynamic_dims)
        elif self.dynamic:
            types = tuple((len(t.shape), t.dtype) for t in self.input_types)
        else:
            types = self.input_types
        key = (self.op_name, exact_key(self.params), types, self.dynamic)
        key = key + (("unit_stride",) + self.unit_stride,) if self.unit_stride else key
        key = key + (("zero_stride",) + self.zero_stride,) if self.zero_stride else key
        key = key + ("unpacked",) if self.unpacked else key
        key = key + ("aliased",) if self.aliased else key
        key = key + ("pack_a",) if self.pack_a else key
        return key + ("few_rows",) if self.few_rows else key


#: Matmul row tiles start at multiples of this (a multiple of the register
#: tile's rows of every CPU matmul schedule: 4 (f32) or 6 (f64) on AVX2, 8 on
#: AVX-512), so the
#: thread count never changes a result.
MATMUL_ROW_ALIGN = 24
#: Column tiles start at multiples of this (a multiple of the register tile's
#: columns of every CPU schedule: 16 / 32 f32, 8 / 16 f64).
MATMUL_COL_ALIGN = 32


def _index_select_dims(types, params) -> tuple:
    """IndexSelect: the table (a weight) static, the index count at run time."""
    data = types[0].shape
    d = params.get("dim", 0) % len(data)
    return ((False,) * len(data), (True,), tuple(i == d for i in range(len(data))))


def _batch_dims(types, params, rank: int):
    """The leading (batch) axis at run time, the others static."""
    lead = (True,) + (False,) * (rank - 1)
    return tuple(lead for _ in types) + (lead,)


def _pad_dims(types, params) -> tuple | None:
    """Pad: the batch at run time when it is not padded (a conv recipe's
    spatial padding); None (static) otherwise."""
    pad = tuple(params["padding"])
    rank = len(types[0].shape)
    return _batch_dims(types, params, rank) if rank >= 2 and pad[:2] == (0, 0) else None


def _concat_dims(types, params) -> tuple | None:
    """Concat along another axis than the batch (the im2col taps): the batch
    at run time; None (static) otherwise."""
    rank = len(types[0].shape)
    return _batch_dims(types, params, rank) if rank >= 2 and params["dim"] % rank else None


#: Primitives outside ``DYNAMIC_CATEGORIES`` compiled with some extents
#: dynamic: name -> rule(input types, params) -> per-dim masks (inputs, result),
#: or None: compiled static for these types.
PARTLY_DYNAMIC = {"IndexSelect": _index_select_dims, "Pad": _pad_dims, "Concat": _concat_dims}


def _params(**kw) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(kw.items()))


# -- OpKind → op instance ------------------------------------------------------------
# The mapping OpParams -> (primitive, graph params) is compiler.graph.kernel_params
# (the same module the planner uses for the other direction); here only the
# layout adaptations a generated kernel needs are made.
def _op_table():
    from compiler.graph.ops import OP_TABLE
    return OP_TABLE


def _squeeze_kept(out: Layout, dims: Sequence[int]) -> Layout:
    for d in sorted(dims, reverse=True):
        out = out.squeeze(d)
    return out


def merge_axes(lay: Layout, start: int, stop: int) -> Layout | None:
    """``lay`` with axes ``[start, stop)`` merged into one (a reshape view over
    the same memory), or None when their strides do not allow it. Size-1
    axes are ignored; a run of stride-0 axes merges into one stride-0 axis."""
    if stop - start <= 1:
        return lay
    shape, stride = lay.shape, lay.stride
    kept = [(d, s) for d, s in zip(shape[start:stop], stride[start:stop]) if d != 1]
    for (_, s0), (d1, s1) in zip(kept, kept[1:]):
        if s0 != s1 * d1:
            return None
    size = math.prod(shape[start:stop])
    merged = kept[-1][1] if kept and size else 0
    return Layout._trusted(shape[:start] + (size,) + shape[stop:],
                           stride[:start] + (merged,) + stride[stop:], lay.start_offset)


def collapse_matmul(a: Layout, b: Layout, out: Layout, p: "P.Matmul"):
    """Fewer-dimension views of a MatMul call that compute the same thing,
    so batched calls of any rank reach the one vectorized 2-D / 3-D kernel:

    * rhs read with no batch (every rhs batch axis of size 1 or stride 0):
      the lhs batch axes fold into M, ``[..b, M, K] @ [K, N]``;
    * equal batch dims of rank > 1: they merge into one batch axis.

    Returns ``(a, b, out, params)``, or None where the strides forbid it."""
    nb = len(p.lhs_batch_dims)
    if nb == 0:
        return None
    if all(d == 1 or s == 0 for d, s in zip(b.shape[:nb], b.stride[:nb])):
        a2, o2 = merge_axes(a, 0, nb + 1), merge_axes(out, 0, nb + 1)
        if a2 is not None and o2 is not None:
            b2 = Layout._trusted(b.shape[nb:], b.stride[nb:], b.start_offset)
            rows = a2.shape[0]
            return a2, b2, o2, dataclasses.replace(p, lhs_batch_dims=(), rhs_batch_dims=(),
                                                   m=rows)
    if nb > 1 and p.lhs_batch_dims == p.rhs_batch_dims:
        views = [merge_axes(v, 0, nb) for v in (a, b, out)]
        if None not in views:
            batch = (math.prod(p.lhs_batch_dims),)
            return (*views, dataclasses.replace(p, lhs_batch_dims=batch, rhs_batch_dims=batch))
    return None


def _adapt(kind: OpKind, in_l: list, out_l: list, p: OpParams):
    """(in layouts, out layouts, params) the compiled primitive sees."""
    if isinstance(p, P.Reduce) and p.keepdim:
        # the kept size-1 axes are dropped from the output view; same memory
        out_l = [_squeeze_kept(out_l[0], p.dims)]
        p = dataclasses.replace(p, keepdim=False)
    if isinstance(p, P.Matmul):
        mode = p.m_compute.mode
        if mode == "rows":  # data-determined M: compute only the first rows
            rows = p.m_compute.value
            a, out = in_l[0], out_l[0]
            in_l = [a.narrow(a.rank - 2, 0, rows), in_l[1]]
            out_l = [out.narrow(out.rank - 2, 0, rows)]
            p = dataclasses.replace(p, m=rows, m_compute=P.MatmulM.ALL)
        elif mode != "all":
            raise UnsupportedOpError("generated MatMul kernel: deferred row counts (MatmulM.deferred) "
                                     "must be resolved before the kernel is called")
        views = collapse_matmul(in_l[0], in_l[1], out_l[0], p)
        if views is not None:
            in_l, out_l, p = [views[0], views[1]], [views[2]], views[3]
    return in_l, out_l, p


def _kinds(pred) -> frozenset:
    """The kinds all of whose supported rows satisfy ``pred``."""
    rows: dict = {}
    for d in _op_table().values():
        if d.op_kind is not None and d.supported:
            rows.setdefault(d.op_kind, []).append(d)
    return frozenset(k for k, ds in rows.items() if all(pred(d) for d in ds))


_BINARY = _kinds(lambda d: d.category == "binary")
_COMPARE = _kinds(lambda d: d.category == "compare")

# Ops whose result is correctly rounded (or exact): 0 ulp from the IEEE result.
_EXACT = _kinds(lambda d: d.precision == "exact")

# Transcendentals whose accuracy the target's codegen states (its
# ``transcendental_ulp``); other non-exact ops make no ulp claim.
_STATED = ("exp", "tanh", "log", "erf")
_TRANSCENDENTAL = {k: next(d.precision for d in _op_table().values() if d.op_kind is k)
                   for k in _kinds(lambda d: d.precision in _STATED)}


def precision_for(kind: OpKind, dtypes: Sequence[DType], target) -> PrecisionGuarantee:
    """The static numeric claim of a generated kernel of ``kind`` with the
    dtype key ``dtypes`` (inputs then output; the output decides the
    transcendental bound) compiled for ``target``."""
    exact = kind in _EXACT
    ulp = target.codegen.transcendental_ulp(_TRANSCENDENTAL[kind], dtypes[-1]) \
        if not exact and kind in _TRANSCENDENTAL and dtypes else None
    return _claim(exact, ulp, target)


@functools.lru_cache(maxsize=64)
def _claim(exact: bool, ulp: "int | None", target) -> PrecisionGuarantee:
    """``precision_for``'s claim, made once per (exact, ulp bound, target):
    the same frozen value for the some 700 keys of a table's build."""
    source = FAMILY.source(target)
    if exact:
        return PrecisionGuarantee(True, 0, 0.0, 0.0,
                                  f"{source} ({target}): IEEE-exact op, deterministic loop order")
    codegen = target.codegen
    if ulp is not None:
        return PrecisionGuarantee(
            True, ulp, None, None,
            f"{source} ({target}): deterministic loop order (bit-stable per hardware); "
            f"{codegen.PRECISION_NOTE}")
    return PrecisionGuarantee(
        True, None, None, None,
        f"{source} ({target}): fixed loop order per build and target (bit-stable per "
        "hardware); float reductions are reassociated for vectorization (summation order "
        f"differs from a sequential loop); {codegen.PRECISION_NOTE}; accumulates in the "
        "operand dtype (f32 for f16/bf16)")


def instance_for(kind: OpKind, dtypes: Sequence[DType], layouts: Sequence[Layout],
                 params: OpParams, n_inputs: int) -> tuple[OpInstance, list[Layout]]:
    """The op instance for a call, and the (possibly adapted) layouts to
    build descriptors from (inputs then outputs). Raises UnsupportedOpError."""
    from compiler.codegen.linalg import DYNAMIC_CATEGORIES, STATIC_ONLY
    from compiler.graph.kernel_params import KernelParamsError, from_op_params
    in_l, out_l = list(layouts[:n_inputs]), list(layouts[n_inputs:])
    in_l, out_l, params = _adapt(kind, in_l, out_l, params)
    in_dts = list(dtypes[:-1]) if len(dtypes) - 1 == len(in_l) else [dtypes[0]] * len(in_l)
    in_types = [TensorType(tuple(l.shape), DType.parse(dt)) for l, dt in zip(in_l, in_dts)]
    out_types = [TensorType(tuple(l.shape), DType.parse(dtypes[-1])) for l in out_l]
    try:
        name, gparams = from_op_params(kind, params, in_types, out_types)
    except KernelParamsError as e:
        raise UnsupportedOpError(f"generated {kind.name} kernel: {e}") from None
    opdef = _op_table()[name]
    unit: tuple[int, ...] = ()
    zero: tuple[int, ...] = ()
    if opdef.category in ELEMENTWISE_CATEGORIES and len(out_l) == 1:
        # stride-0 views of broadcast inputs, then the axes merged where every
        # operand allows (family.coalesce) and the kernel specialised on unit /
        # zero innermost strides: with a run-time stride LLVM vectorizes only
        # the stride-1 case, so a per-channel broadcast operand of an NCHW
        # tensor left the whole loop scalar
        shape = out_l[0].shape
        in_l = [l if l.shape == shape else l.broadcast_as(shape) for l in in_l]
        merged = coalesce(in_l + out_l)
        in_l, out_l = merged[:len(in_l)], merged[len(in_l):]
        in_types = [TensorType(tuple(l.shape), t.dtype) for l, t in zip(in_l, in_types)]
        strides = inner_strides(in_l + out_l)
        unit = tuple(i for i, v in enumerate(strides) if v == 1)
        zero = tuple(i for i, v in enumerate(strides) if v == 0)
    dynamic = (opdef.category in DYNAMIC_CATEGORIES and name not in STATIC_ONLY) \
        or name in PARTLY_DYNAMIC and PARTLY_DYNAMIC[name](in_types, gparams) is not None
    if name == "MatMul":  # batch broadcasting needs the static shapes
        dynamic = in_types[0].shape[:-2] == in_types[1].shape[:-2]
        # a kernel specialised on unit-stride rows packs B and moves C tiles
        # with vector loads; other layouts keep the fully strided kernel
        unit = unit_stride_args(in_l + out_l)
    return (OpInstance(name, tuple(sorted(gparams.items())), tuple(in_types), dynamic, unit,
                       name == "MatMul" and few_rows(in_types[0].shape, unit, 2), zero,
                       name == "MatMul" and unpacked_rows(in_types[0].shape, unit, 2,
                                                         b_row_stride(in_l)),
                       name == "MatMul" and aliased_b(in_types[0].shape, unit, 2,
                                                      b_row_stride(in_l)),
                       name == "MatMul" and pack_a(in_types[0].shape, unit, 2,
                                                   a_row_stride(in_l), in_types[1].shape[-1])),
            in_l + out_l)


# -- the family ------------------------------------------------------------------


class PrimitiveFamily(KernelFamily):
    """One fuel primitive per kernel; the binding key is its OpKind."""

    suffix = ""

    def instance(self, key, dtypes, layouts, params, n_inputs, *, target=None):
        return instance_for(key, dtypes, layouts, params, n_inputs)

    def linalg_text(self, inst: OpInstance, target) -> str:
        return linalg_text(inst, platform=target.kind)

    def accepts_arity(self, key, n_expected: int, n_inputs: int) -> bool:
        return key is OpKind.Concat or n_inputs == n_expected  # Concat: [T_in, T_out] any arity

    def subcalls(self, key, inst: OpInstance, layouts, params, n_inputs: int):
        """A MatMul whose batch axes could not merge into one (a permuted
        operand, e.g. attention heads of [B, S, heads, d] viewed as
        [B, heads, S, d]) runs as one rank-3 batched call per index of the
        leading batch axes, each on the vectorized batch_matmul kernel
        (any strides), instead of scalar loops over four or more axes."""
        if inst.op_name != "MatMul" or n_inputs != 2 or not isinstance(params, P.Matmul):
            return None
        a, b, out = layouts
        nb = len(params.lhs_batch_dims)
        if nb < 2 or params.lhs_batch_dims != params.rhs_batch_dims or out.rank != nb + 2 \
                or params.m_compute.mode != "all":
            return None
        lead = params.lhs_batch_dims[:-1]
        sub_p = P.Matmul(params.lhs_batch_dims[-1:], params.rhs_batch_dims[-1:],
                         params.m, params.n, params.k)
        calls = []
        for idx in itertools.product(*(range(d) for d in lead)):
            views = []
            for lay in (a, b, out):
                for axis, i in enumerate(idx):
                    lay = lay.narrow(axis, i, 1)
                views.append(merge_axes(lay, 0, nb))
            calls.append((views, sub_p))
        return calls

    def split(self, inst: OpInstance, layouts, n_inputs: int, threads: int,
              min_elements: int = parallel.MIN_ELEMENTS, *, target=None):
        category = _op_table()[inst.op_name].category
        if category in ELEMENTWISE_CATEGORIES:
            return parallel.row_tiles(layouts, n_inputs, threads, keep_last=False,
                                      min_elements=min_elements)
        if category == "softmax":  # LogSoftmaxLastDim(+Backward): rows independent
            return parallel.row_tiles(layouts, n_inputs, threads, keep_last=True,
                                      min_elements=min_elements)
        params = dict(inst.params)
        if category == "reduce" and "axis" in params:  # SumDim .. ArgMinDim: the other axes independent
            return parallel.reduce_tiles(layouts, n_inputs, threads, params["axis"], min_elements)
        if inst.op_name == "Concat" and params["dim"] % len(inst.input_types[0].shape) != 0 \
                or inst.op_name == "Pad" and tuple(params["padding"][:2]) == (0, 0):
            return parallel.image_tiles(layouts, n_inputs, threads)
        if inst.op_name == "MatMul":
            return matmul_split(inst, layouts, n_inputs, threads, target)
        return None


def matmul_split(inst, layouts, n_inputs: int, threads: int, target, like_out=()):
    """The tiles of a matmul call that packs B per call (MatMul; FusedLinear
    over a B input, its skip ``like_out``): where its kernel copies its blocks
    of A (``inst.pack_a`` on a target that copies), M is cut into
    ``_block_row_tiles`` (every column tile would copy all of A); else
    ``parallel.matmul_tiles`` by batch, columns or rows."""
    if inst.pack_a and _copies_a(inst.input_types[0].dtype, target):
        return parallel.matmul_tiles(layouts, n_inputs,
                                     _block_row_tiles(layouts[n_inputs], inst.input_types[0].dtype,
                                                      target),
                                     MATMUL_ROW_ALIGN, like_out=like_out)
    return parallel.matmul_tiles(layouts, n_inputs, threads, MATMUL_ROW_ALIGN,
                                 MATMUL_COL_ALIGN, like_out=like_out)


def _block_row_tiles(out, dtype: DType, target) -> int:
    """How many row tiles a MatMul call that copies its blocks of A (output
    layout ``out``) is cut into. Each tile packs all of B once per block of
    its rows (``a_block_rows``), so at two threads (tiles taken one by one,
    ``parallel.split_parts``) the fewest, an even number, of at most one
    block each: 1024 rows 4 of 264 (4 packings of B, as 2 tiles of 528 in
    blocks of 360 and 168), 2048 rows 6 of 360 (as 2 tiles of 3 blocks);
    a thread that starts late takes fewer. Else one tile per thread.
    (docs/benchmarks.md, "Row tiles of one block of A".)"""
    threads = parallel.num_threads()
    mc = _a_block_rows(dtype, target)
    if parallel.split_parts(threads) <= threads or not mc or out.rank != 2 or not out.shape[0]:
        return threads
    parts = threads
    while parallel.chunks(out.shape[0], parts, MATMUL_ROW_ALIGN)[0][1] > mc:
        parts += threads
    return parts


def _a_block_rows(dtype: DType, target) -> int:
    """The codegen package's ``a_block_rows`` for ``target`` (0 without one)."""
    rows = getattr(getattr(target, "codegen", None), "a_block_rows", None)
    return rows(dtype, target) if rows else 0


def _copies_a(dtype: DType, target) -> bool:
    """Whether ``target``'s matmul kernel of the ``pack_a`` class copies its
    blocks of A (the codegen package's ``copies_a``)."""
    copies = getattr(getattr(target, "codegen", None), "copies_a", None)
    return bool(copies and copies(dtype, target))


FAMILY = PrimitiveFamily()


def linalg_text(inst: OpInstance, platform: str | None = None) -> str:
    """The linalg-on-tensors module of one op instance."""
    dyn = (inst.dynamic_dims or True) if inst.dynamic else False  # StaticInstance: static
    return single_op_linalg_text(inst.op_name, dict(inst.params), inst.input_types, dyn,
                                 platform, inst.unit_stride, inst.few_rows, inst.zero_stride,
                                 inst.unpacked, aliased=inst.aliased, pack_a=inst.pack_a)


def warm(kind: OpKind, dtypes: Sequence[DType], layouts: Sequence[Layout], params: OpParams,
         n_inputs: int, *, target) -> KernelFunction | None:
    """Compile ahead of time the kernel a call with these arguments would use."""
    return FAMILY.kernel(target, kind, dtypes).warm(layouts, params, n_inputs)


# -- registration -------------------------------------------------------------------
_FLOATS = (DType.F32, DType.F64, DType.F16, DType.BF16)


def binding_keys(kind: OpKind, dtypes: Iterable[DType]) -> list[tuple[DType, ...]]:
    """The dtype keys (inputs then output) registered for ``kind`` over the
    data dtypes ``dtypes``, limited to what the op table accepts."""
    table = _op_table()
    dtypes = list(dtypes)
    u32, u8 = DType.U32, DType.U8
    shapes = {  # key template per kind; t is the data dtype
        OpKind.Where: lambda t: (u8, t, t, t), OpKind.MaskedFill: lambda t: (t, u8, t),
        OpKind.ArgMaxDim: lambda t: (t, u32), OpKind.ArgMinDim: lambda t: (t, u32),
        OpKind.MatMul: lambda t: (t, t, t), OpKind.LogSoftmaxLastDimBackward: lambda t: (t, t, t),
        OpKind.IndexSelect: lambda t: (t, u32, t), OpKind.Gather: lambda t: (t, u32, t),
        OpKind.IndexAdd: lambda t: (t, u32, t, t), OpKind.ScatterAdd: lambda t: (t, u32, t, t),
    }
    keys = []
    names = [n for n, d in table.items() if d.op_kind is kind and d.supported]
    allowed = [table[n].dtypes for n in names]
    for t in dtypes:
        if not all(a is None or t in a for a in allowed):
            continue
        if kind is OpKind.Cast:
            keys += [(t, d) for d in dtypes if d is not t]
        elif kind in _COMPARE:
            keys.append((t, t, u8))
        elif kind in _BINARY:
            keys.append((t, t, t))
        else:
            keys.append(shapes.get(kind, lambda t: (t, t))(t))
    return keys


def supported_kinds() -> tuple[OpKind, ...]:
    """Every OpKind the primitive family compiles: the kinds of the supported
    primitives that have a lowering rule."""
    from compiler.codegen.lowering import RULES
    kinds = []
    for name, d in _op_table().items():
        if d.supported and d.op_kind is not None and name in RULES:
            if d.op_kind not in kinds:
                kinds.append(d.op_kind)
    return tuple(kinds)


#: The keys of mixed operand dtypes a target may register (``mixed=True``):
#: MatMul's f32 x bf16 -> f32 (an f32 activation over a bf16 weight), whose
#: named product extends each operand to f32 on its own (``lowering.matmul``).
MIXED_KEYS = {OpKind.MatMul: ((DType.F32, DType.BF16, DType.F32),)}


def register_primitive_kernels(table, target, dtypes: Sequence[DType] = (DType.F32, DType.F64),
                               kinds: Iterable[OpKind] | None = None, mixed: bool = False) -> int:
    """Register generated kernels for ``kinds`` (default: all supported) over
    ``dtypes`` on ``target`` (its backend) in ``table`` (caps strided_input
    and full_write, a precision claim per kind, the default cost model), and
    with ``mixed`` the ``MIXED_KEYS`` of those kinds.
    Nothing is compiled until a kernel is first called or warmed. Returns
    the number of keys."""
    n = 0
    known = supported_kinds()
    for kind in (known if kinds is None else kinds):
        if kind not in known:
            raise UnsupportedOpError(f"{FAMILY.source(target)} has no kernel for {kind.name}")
        for key in binding_keys(kind, dtypes) + list(MIXED_KEYS.get(kind, ()) if mixed else ()):
            FAMILY.register(table, target, kind, key, precision_for(kind, key, target),
                            default_cost_for_op_kind(kind))
            n += 1
    return n


__all__ = ["OpInstance", "PrimitiveFamily", "FAMILY", "instance_for", "warm", "linalg_text",
           "register_primitive_kernels", "binding_keys", "supported_kinds", "precision_for"]
