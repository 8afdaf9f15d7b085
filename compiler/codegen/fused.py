"""The fused kernel family: one compiled function per fused-op instance,
registered under the fused op's ``OpKind`` on the target's backend (kernel
source ``mlir-cpu-fused`` on cpu targets).

A fused registry entry gets a kernel here when two things exist:

* a **lowering** ``@lowers("<EntryName>")`` in ``compiler/codegen/lowering/``
  (``fused_norm.py``, ``fused_attention.py`` ...) that turns ``fuel.<mnemonic>``
  into linalg, and
* a **params mapping** registered with ``@fused_kernel("<EntryName>", ...)``
  on its *forward* function ``(graph params, input TensorTypes) -> OpParams``
  (what the planner puts on the ``KernelStep``), with a *reverse*
  ``from_params(OpParams, input TensorTypes) -> graph params`` (what the
  kernel uses to rebuild the op instance it compiles). The input types on
  the kernel side come from the call's layouts (shapes) and binding dtypes.

Adding an op (the whole recipe)::

    @fused_kernel("QMatMul", precision=QMATMUL,
                  from_params=lambda p, types: {"quant_type": p.quant_type.name.lower()},
                  keys=lambda t: [(t, DType.U8, t)])
    def _qmatmul_params(params, types):
        return P.QMatMul(...)

``keys(t)`` lists the binding dtype tuples (inputs then output) for data
dtype ``t`` (default: every operand and the output ``t``); ``dtypes`` limits
the data dtypes (default f32, f64, f16, bf16); ``strided`` says the kernel
reads any input strides (true for everything compiled here: every memref
argument has a fully dynamic strided layout).

Public API:

* ``fused_op_params(entry, params, in_types) -> OpParams`` (the planner hook)
  and ``instance_from_params(name, op_params, dtypes, layouts, n_inputs)``
  (its reverse; it re-derives the OpParams and refuses a mismatch);
* ``FAMILY`` (a ``family.KernelFamily``; its ``GeneratedKernel`` is the
  callable behind each ``KernelRef``), ``warm_instance(inst, target=...)``;
* ``register_fused_kernels(table, target)``: called by the target's
  ``build_table``;
* ``fused_specs()``, ``spec_for_kind(kind)``, and the
  per-op precision claims (``NORM_FAMILY`` ..., ``FusedPrecision``: the
  claim per target).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Optional, Sequence

from runtime.params import exact_key
from compiler.codegen import parallel
from compiler.codegen.family import (KernelFamily, a_row_stride, aliased_b, b_row_stride,
                                     few_rows, pack_a, unpacked_rows, single_op_linalg_text,
                                     unit_stride_args, SHORT_K_MAX)
from compiler.codegen.loader import KernelFunction
from compiler.errors import UnsupportedOpError
from compiler.registry.kernel_params import FusedParams, register_fused_params
# FusedLinear params with an epilogue (``lowering.fused_forward._linear_epilogue``)
from compiler.registry.ops.fused_linear import has_epilogue as linear_epilogue
from compiler.registry.kernel_params import fused_op_params as _registry_fused_op_params
from compiler.graph.opdef import TensorType
from runtime import params as P
from runtime.binding import KernelCaps
from runtime.cost import default_cost_for_op_kind
from runtime.dtype import DType
from runtime.layout import Layout
from runtime.opkind import OpKind
from runtime.params import OpParams
from runtime.precision import PrecisionGuarantee

FLOATS = (DType.F32, DType.F64, DType.F16, DType.BF16)


# -- precision claims -----------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class FusedPrecision:
    """What a fused kernel's lowering fixes on every target (``what``: its
    loop and accumulation order); ``for_target(target)`` is the claim a
    target's table registers, with that target's kernel source and its
    codegen package's ``PRECISION_NOTE`` (how it computes transcendentals)."""

    what: str

    def for_target(self, target) -> PrecisionGuarantee:
        return _claim(self.what, target)


@functools.lru_cache(maxsize=None)
def _claim(what: str, target) -> PrecisionGuarantee:
    return PrecisionGuarantee(
        True, None, None, None,
        f"{FAMILY.source(target)} {what} ({target}): one compiled function, deterministic "
        "sequential loop order (bit-stable per hardware); f16/bf16 compute and accumulate in "
        f"f32; {target.codegen.PRECISION_NOTE}")


NORM_FAMILY = FusedPrecision("norm family (softmax, rms/layer norm): max/sum/mean in one pass "
                             "order")
FUSED_LINEAR = FusedPrecision("FusedLinear: matmul accumulation over k in order, then + bias")
ROPE = FusedPrecision("Rope: x*cos + rotate_half(x)*sin, two products and one add per element")
SOFTMAX_CROSS_ENTROPY = FusedPrecision("FusedSoftmaxCrossEntropy: row max, row exp-sum, masked "
                                       "row-order sum")
ATTN = FusedPrecision("attention")
QMATMUL = FusedPrecision("quantized matmul (dequantize then accumulate in f32)")
CONV2D = FusedPrecision("Conv2D: accumulation over (c_in, kh, kw) in order")
MAX_POOL2D = FusedPrecision("MaxPool2D: exact (a maximum; NaN propagates)")


# -- per-op registration ----------------------------------------------------------
ToParams = Callable[[dict, Sequence[TensorType]], OpParams]
FromParams = Callable[[OpParams, Sequence[TensorType]], dict]
Keys = Callable[[DType], list]


@dataclasses.dataclass(frozen=True)
class FusedKernelSpec:
    """How one fused entry's kernel is planned, keyed and rebuilt."""

    name: str                 # registry entry name, e.g. "SoftmaxLastDim"
    to_params: ToParams
    from_params: FromParams
    keys: Keys
    dtypes: tuple[DType, ...]
    precision: FusedPrecision
    strided: bool = True
    #: keys of mixed operand dtypes, registered where the target asks
    #: (``register_fused_kernels(mixed=True)``)
    mixed: tuple = ()

    @property
    def entry(self):
        from compiler.registry import default_registry
        return default_registry()[self.name]

    @property
    def op_kind(self) -> OpKind:
        kind = self.entry.op_kind
        if kind is None:
            raise UnsupportedOpError(f"fused op {self.name} has no OpKind, so no kernel")
        return kind


_SPECS: dict[str, FusedKernelSpec] = {}


def _same_dtype_keys(arity: int) -> Keys:
    return lambda t: [(t,) * (arity + 1)]


def fused_kernel(name: str, *, from_params: FromParams = lambda p, types: {},
                 keys: Optional[Keys] = None, dtypes: Sequence[DType] = FLOATS,
                 precision: FusedPrecision = NORM_FAMILY, strided: bool = True,
                 serves=None, mixed: tuple = ()):
    """Register the decorated ``to_params(params, in_types) -> OpParams`` as
    the params mapping of fused entry ``name`` (see the module docstring).
    ``serves(params, in_types) -> bool``, when given, limits the instances
    the passes keep fused (``FusedParams.serves``); ``mixed``: keys of mixed
    operand dtypes (``FusedKernelSpec.mixed``)."""
    def deco(fn: ToParams) -> ToParams:
        if name in _SPECS:
            raise ValueError(f"fused kernel mapping for {name!r} registered twice")
        from compiler.registry import default_registry
        entry = default_registry()[name]
        k = keys or _same_dtype_keys(entry.min_arity)
        _SPECS[name] = FusedKernelSpec(name, fn, from_params, k, tuple(dtypes), precision,
                                       strided, tuple(mixed))
        register_fused_params(FusedParams(name, fn, from_params, k, tuple(dtypes), strided,
                                           serves))
        return fn
    return deco


def _load_lowerings() -> None:
    import compiler.codegen.lowering  # noqa: F401  (registers every rule)


def fused_specs() -> dict[str, FusedKernelSpec]:
    """Every registered mapping whose op also has a lowering rule."""
    _load_lowerings()
    from compiler.codegen.lowering import RULES
    return {n: s for n, s in _SPECS.items() if n in RULES}


def spec_for_kind(kind: OpKind) -> FusedKernelSpec:
    for s in fused_specs().values():
        if s.entry.op_kind is kind:
            return s
    raise UnsupportedOpError(f"no generated fused kernel for {kind.name}")


# -- params <-> instance ------------------------------------------------------------
def fused_op_params(entry, params: dict, in_types: Sequence[TensorType]) -> OpParams:
    """``compiler.registry.kernel_params.fused_op_params`` with every mapping
    of this family registered (the lowering modules register theirs)."""
    _load_lowerings()
    return _registry_fused_op_params(entry, params, in_types)


# Fused ops whose lowering is written shape-generically, and which extents
# their kernels take at run time: rule(input types, graph params) -> one per-dim mask per
# input and one for the result (True: ``?``), or None (static). Dynamic dims
# let the vectorizing matmul strategy apply (it needs them to peel remainder
# loops). FusedLinear's batch broadcasting (GQA, size-1 batch) needs static
# batch dims; its GELU epilogue kernel takes a's rows at run time, the weight
# and bias static. FlashAttn (the cpu rule) takes batch and sequence at run
# time, heads and head size static. The row norms keep the normalised axis
# static (it is the weight's: the same at every size) and take the rows at
# run time; softmax rows are a sequence length in attention, so every extent
# is dynamic.
def _all_dims(types):
    return tuple((True,) * len(t.shape) for t in types) + ((True,) * len(types[0].shape),)


def _softmax_dims(types):
    """Every extent at run time, but a mask's extents of 1: they broadcast
    (``lowering.fused_norm.over_rows`` reads index 0 there)."""
    dims = _all_dims(types)
    if len(types) < 2:
        return dims
    return (dims[0], tuple(d != 1 for d in types[1].shape), dims[-1])


def _row_dims(types):
    x = (True,) * (len(types[0].shape) - 1) + (False,)
    return (x,) + tuple((False,) * len(t.shape) for t in types[1:]) + (x,)


def _pool_batch(types, params):
    from compiler.codegen.lowering.fused_pool import batch_dims
    return batch_dims(types, params)


def _conv_batch(types, params):
    from compiler.codegen.lowering.fused_conv import batch_dims
    return batch_dims(types, params)


def _expand_batch(types, params):
    from compiler.codegen.lowering.fused_expand import batch_dims
    return batch_dims(types, params)


def _linear_dims(types, params):
    if linear_epilogue(params):  # the epilogue kernel (``_linear_epilogue``): a's rows
        rows = _row_dims(types)[0]  # a, the skip and the output (of a's rank): all axes but the last
        return (rows,) + tuple(rows if i == 3 else (False,) * len(t.shape)
                               for i, t in enumerate(types[1:], 1)) + (rows,)
    if params.get("b_panel"):  # packed b [?, ?, panel]: the panel width is static
        a, _b, bias = _all_dims(types)[:3]
        return a, (True, True, False), bias, a
    return _all_dims(types) if tuple(types[0].shape[:-2]) == tuple(types[1].shape[:-2]) else None


def _attn_dims(types, params):
    from compiler.codegen.lowering.fused_attention import dynamic_dims
    return dynamic_dims(types, params)


DYNAMIC_FUSED = {
    "FusedLinear": _linear_dims,
    "FlashAttn": _attn_dims,  # batch and sequence (the cpu rule)
    "SoftmaxLastDim": lambda types, _p: _softmax_dims(types),
    "LayerNormLastDim": lambda types, _p: _row_dims(types),
    "RmsNormLastDim": lambda types, _p: _row_dims(types),
    "Conv2D": _conv_batch,  # the direct kernels: the batch (an scf.for over images)
    "MaxPool2D": _pool_batch,
    "ExpandDepthwise": _expand_batch,
}


def masked_types(types, masks) -> tuple:
    """The types a kernel compiled with per-dim ``masks`` serves: each
    dynamic extent as None (the memo key of a dynamic instance)."""
    return tuple((tuple(None if m else d for d, m in zip(t.shape, mask)), t.dtype)
                 for t, mask in zip(types, masks))


@dataclasses.dataclass(frozen=True)
class FusedInstance:
    """One compilable fused op: entry name, graph params (sorted items) and
    static input types."""

    name: str
    params: tuple[tuple[str, object], ...]
    input_types: tuple[TensorType, ...]
    #: arguments (inputs then the output) passed with a unit innermost
    #: stride (``family.unit_stride_args``; FusedLinear and Conv2D)
    unit_stride: tuple[int, ...] = ()
    #: a FusedLinear call of few rows (``family.few_rows``): the row kernel
    few_rows: bool = False
    #: a FusedLinear call of a few dozen rows (``family.unpacked_rows``)
    unpacked: bool = False
    #: ... whose B rows fall in few cache sets (``family.aliased_b``: ``aliased_unpacked``; 17-32 rows,
    #: packed: ``aliased_packed``)
    aliased: bool = False
    #: a FusedLinear call of the packed class that copies its blocks of A (``family.pack_a``)
    pack_a: bool = False
    #: a FusedLinear call over a packed B, no epilogue, more than ``family.UNPACKED_ROWS``
    #: rows, K at most ``family.SHORT_K_MAX`` where the target's kernel for it differs
    #: (``family.SHORT_K_ATTR``)
    short_k: bool = False
    #: arguments passed row-major (a pointwise Conv2D: its reshapes are views)
    contiguous: tuple[int, ...] = ()
    #: arguments passed with row-major planes, the last two axes (a pointwise
    #: Conv2D's tile of pixel rows: its reshapes are views too)
    planes: tuple[int, ...] = ()

    @property
    def dynamic_dims(self) -> tuple | None:
        """Per input and the result, which extents the kernel takes at run
        time (``DYNAMIC_FUSED``); None: compiled for these static types."""
        rule = DYNAMIC_FUSED.get(self.name)
        return rule(self.input_types, dict(self.params)) if rule is not None else None

    @property
    def dynamic(self) -> bool:
        """Compiled with ``?`` dims (one kernel for every size of those dims)."""
        return self.dynamic_dims is not None

    @property
    def memo_key(self) -> tuple:
        masks = self.dynamic_dims
        key = (self.name, exact_key(self.params),
               self.input_types if masks is None else masked_types(self.input_types, masks))
        key = key + (("unit_stride",) + self.unit_stride,) if self.unit_stride else key
        key = key + ("unpacked",) if self.unpacked else key
        key = key + ("aliased",) if self.aliased else key
        key = key + ("pack_a",) if self.pack_a else key
        key = key + ("short_k",) if self.short_k else key
        key = key + (("contiguous",) + self.contiguous,) if self.contiguous else key
        key = key + (("planes",) + self.planes,) if self.planes else key
        return key + ("few_rows",) if self.few_rows else key

    def output_type(self) -> TensorType:
        from compiler.registry import default_registry
        return default_registry()[self.name].infer(list(self.input_types), dict(self.params))


def _types(types) -> str:
    return ", ".join(f"{t.dtype}{list(t.shape)}" for t in types)


def instance_from_params(name: str, op_params: OpParams, dtypes: Sequence[DType],
                         layouts: Sequence[Layout], n_inputs: int) -> FusedInstance:
    """Rebuild the op instance of a kernel call: the input types from the
    layouts' shapes and the binding dtypes, the graph params from the
    OpParams. The OpParams are re-derived from the result and must equal
    the call's, else ``UnsupportedOpError`` (a call the instance would
    compute wrongly); so must the output layout's shape."""
    spec = _SPECS.get(name)
    if spec is None:
        raise UnsupportedOpError(f"no generated fused kernel for {name}")
    types = tuple(TensorType(tuple(l.shape), DType.parse(d))
                  for l, d in zip(layouts[:n_inputs], dtypes))
    gp = dict(spec.from_params(op_params, types))
    from compiler.registry.entry import normalize_params
    gp = normalize_params(spec.entry, gp)
    again = spec.to_params(gp, list(types))
    if again != op_params:
        raise UnsupportedOpError(
            f"mlir-cpu-fused {name}: the call's params {op_params!r} do not describe inputs "
            f"{_types(types)} (they give {again!r})")
    inst = FusedInstance(name, tuple(sorted(gp.items())), types)
    if len(layouts) > n_inputs:
        out = inst.output_type()
        if tuple(layouts[n_inputs].shape) != tuple(out.shape):
            raise UnsupportedOpError(
                f"mlir-cpu-fused {name}: output layout {list(layouts[n_inputs].shape)} but the "
                f"op computes {out.dtype}{list(out.shape)} for inputs {_types(types)}")
    return inst


# -- the family ------------------------------------------------------------------


def _rows_2d(lay: Layout) -> Layout:
    """``lay`` with every axis but the last merged (a packed FusedLinear's a
    and output); UnsupportedOpError where the strides forbid it."""
    if lay.rank == 2:
        return lay
    from compiler.codegen.kernels import merge_axes
    out = merge_axes(lay, 0, lay.rank - 1)
    if out is None:
        raise UnsupportedOpError(
            f"mlir-cpu-fused FusedLinear with a packed b: operand {list(lay.shape)} strides "
            f"{list(lay.stride)} do not fold its batch axes into rows; pass it contiguous")
    return out


def _short_k(dtype: DType, k: int, target) -> bool:
    """Whether ``target``'s packed FusedLinear kernel for a K of ``k`` on
    ``dtype`` differs in the short-K class (the codegen package's
    ``short_k``): where it does not, the class would compile the same code
    under another attribute, one kernel more."""
    differs = getattr(getattr(target, "codegen", None), "short_k", None)
    return bool(differs and differs(dtype, k, target))


def _as_output(lay: Layout, out: Layout) -> Layout:
    """FusedLinear's skip ``lay`` viewed in the shape its output is read in
    (the batch axes folded into rows as the output's are);
    UnsupportedOpError where its strides forbid it."""
    if tuple(lay.shape) == tuple(out.shape):
        return lay
    view = lay.reshaped(tuple(out.shape))
    if view is None:
        raise UnsupportedOpError(
            f"mlir-cpu-fused FusedLinear with a residual: the skip {list(lay.shape)} strides "
            f"{list(lay.stride)} cannot be read as the output {list(out.shape)}; pass it "
            f"contiguous")
    return view


class FusedFamily(KernelFamily):
    """One static fused op per kernel; the binding key is its OpKind."""

    suffix = "-fused"

    def instance(self, key, dtypes, layouts, params, n_inputs, *, target=None):
        spec = spec_for_kind(key)
        layouts = list(layouts)
        if spec.name == "FusedLinear" and len(layouts) > n_inputs and isinstance(params, P.Matmul):
            # batch axes fold into M / merge into one, as for MatMul
            from compiler.codegen.kernels import collapse_matmul
            views = collapse_matmul(layouts[0], layouts[1], layouts[n_inputs], params)
            if views is not None:
                layouts[0], layouts[1], layouts[n_inputs], params = views
            if params.b_panel:  # packed b: a's batch axes fold into M
                layouts[0], layouts[n_inputs] = _rows_2d(layouts[0]), _rows_2d(layouts[n_inputs])
            if params.residual:  # the skip is read as the output is
                layouts[n_inputs - 1] = _as_output(layouts[n_inputs - 1], layouts[n_inputs])
        inst = instance_from_params(spec.name, params, dtypes, layouts, n_inputs)
        if spec.name == "FusedLinear":
            # as MatMul: a kernel for unit-stride rows, one for calls of few
            # rows, one for a few dozen (packed B: another register tile on
            # AVX2), one for the others. The GELU epilogue kernel over packed
            # B has two: calls of at most UNPACKED_ROWS rows (few rows too)
            # and the others, each with its own register tile on AVX2
            # (``strategy.packed_epilogue_strategy``); over B in place, one
            unit = unit_stride_args(layouts)
            few = few_rows(layouts[0].shape, unit, n_inputs)
            b_stride = b_row_stride(layouts)
            dozen = unpacked_rows(layouts[0].shape, unit, n_inputs, b_stride)
            epilogue = linear_epilogue(params)
            if epilogue:
                few, dozen = False, bool(params.b_panel) and (few or dozen)
            aliased = not epilogue and not params.b_panel \
                and aliased_b(layouts[0].shape, unit, n_inputs, b_stride)
            copy_a = not epilogue and not params.b_panel and pack_a(
                layouts[0].shape, unit, n_inputs, a_row_stride(layouts), layouts[1].shape[-1])
            short_k = bool(params.b_panel) and not (epilogue or few or dozen) \
                and len(layouts[1].shape) == 3 and layouts[1].shape[1] <= SHORT_K_MAX \
                and _short_k(dtypes[0], layouts[1].shape[1], target)
            inst = dataclasses.replace(inst, unit_stride=unit, few_rows=few, unpacked=dozen,
                                       aliased=aliased, pack_a=copy_a, short_k=short_k)
        elif spec.name == "FlashAttn":
            # contiguous rows: the output's and K's tiles move as vectors
            # (``fused_attention._flash_attn_cpu``), not element by element
            inst = dataclasses.replace(inst, unit_stride=unit_stride_args(layouts))
        elif spec.name == "ExpandDepthwise":
            # x read as [N, Cin, H*W] (``lowering/fused_expand.py``): a view
            # where its planes are row-major; rows moved as vectors
            inst = dataclasses.replace(
                inst, unit_stride=unit_stride_args(layouts),
                planes=(0,) if _row_major_planes(layouts[0]) else ())
        elif spec.name in ("Conv2D", "MaxPool2D"):
            # their copies in and out (padding, cropping; the pool's rows read
            # and written a vector at a time) move contiguous rows; with strides
            # known only at run time LLVM vectorized them as scatters (a
            # depthwise 3x3 x144 at 56^2: 0.46 -> 0.2 ms)
            inst = dataclasses.replace(inst, unit_stride=unit_stride_args(layouts))
            p = dict(inst.params)
            if spec.name == "Conv2D" and _is_pointwise(p, inst.input_types[1].shape):
                inst = _with_row_major(inst, layouts)
            elif spec.name == "Conv2D" and p.get("image_at_run_time") and p["groups"] == 1 \
                    and layouts[1].is_contiguous():
                # a run-time image's few-pixel product reads the weight as
                # [Cout, Cin*Kh*Kw] rows (``conv_spatial._few_pixels``): a view
                inst = dataclasses.replace(inst, contiguous=(1,))
        return inst, layouts

    def linalg_text(self, inst: FusedInstance, target) -> str:
        # the run-time image size conv kernel writes its register tiles in
        # the target's vector width (``lowering/conv_spatial.py``), which the
        # target kind's codegen tells (cpu: ``vector_bits``)
        bits = getattr(target.codegen, "vector_bits", None)
        if bits is None:
            return linalg_text(inst, platform=target.kind)
        from compiler.codegen.lowering.conv_spatial import vector_bits
        with vector_bits(bits(target)):
            return linalg_text(inst, platform=target.kind)

    def b_panel(self, key, dtypes, target) -> int:
        # FusedLinear, where the target's codegen packs B: a's dtype picks the
        # tiles (f32 for an f32 a over bf16 panels)
        packed = getattr(target.codegen, "packed_panel", None)
        if packed is None or spec_for_kind(key).name != "FusedLinear":
            return 0
        return packed(dtypes[0], target)

    def winograd(self, key, params, shapes, target) -> bool:
        # a Conv2D on cpu, where the kernel's rule takes it (``conv_winograd.takes``)
        if spec_for_kind(key).name != "Conv2D" or target.kind != "cpu":
            return False
        from compiler.codegen.lowering.conv_winograd import takes
        bits = getattr(target.codegen, "vector_bits", None)
        return takes(params, shapes, bits(target) if bits else 256)

    def attention_scores(self, key, dtypes, target) -> int | None:
        # FlashAttn, where the target's codegen says from which size it pays
        size = getattr(target.codegen, "attention_scores", None)
        if size is None or spec_for_kind(key).name != "FlashAttn":
            return None
        return size(dtypes[0], target)

    def split(self, inst: FusedInstance, layouts, n_inputs: int, threads: int,
              min_elements: int = parallel.MIN_ELEMENTS, *, target=None):
        if inst.name == "FusedLinear":
            from compiler.codegen.kernels import matmul_split
            panel = dict(inst.params).get("b_panel")
            if panel:
                return _packed_linear_tiles(layouts, threads, panel)
            skip = (3,) if dict(inst.params).get("residual") else ()   # cut as the output
            return matmul_split(inst, layouts, n_inputs, threads, target, like_out=skip)
        if inst.name in ROW_PARALLEL:
            return parallel.row_tiles(layouts, n_inputs, threads, keep_last=True,
                                      min_elements=min_elements)
        if inst.name == "Conv2D":
            return _conv_group_tiles(dict(inst.params), layouts, n_inputs, threads)
        if inst.name == "MaxPool2D":
            return _pool_tiles(layouts, n_inputs, threads)
        if inst.name == "ExpandDepthwise":
            return _expand_tiles(layouts, n_inputs, threads)
        if inst.name == "FlashAttn":
            return _attn_tiles(layouts, n_inputs, threads)
        return None

    def with_shapes(self, instance, layouts):
        inst = super().with_shapes(instance, layouts)
        if inst.name != "Conv2D":
            return inst
        params = dict(inst.params)
        if (inst.contiguous or inst.planes) and _is_pointwise(params, inst.input_types[1].shape):
            # a pointwise conv's tile: which operands are still row-major
            # (a tile of pixel rows is only in its planes); another conv's
            # ``contiguous`` (a run-time image's weight) is the whole call's
            inst = _with_row_major(inst, layouts)
        # a tile of whole groups: as many groups as its share of the channels
        cpg = instance.input_types[0].shape[1] // params["groups"]
        params["groups"] = inst.input_types[0].shape[1] // cpg
        return dataclasses.replace(inst, params=tuple(sorted(params.items())))


def _packed_linear_tiles(layouts, threads: int, panel: int):
    """Tiles of a FusedLinear call over a packed b ``[P, K, panel]`` (a and
    the output 2-D): by whole panels, ``MATMUL_COL_ALIGN`` columns or more
    (b's axis 0, the bias's and the output's columns), when every tile gets
    ``MIN_COL_PANELS`` of them, as ``parallel.matmul_tiles`` cuts N; else by
    rows of M in multiples of ``MATMUL_ROW_ALIGN``. A skip (``residual``: a
    fourth input, 2-D as the output) is cut as the output."""
    from compiler.codegen.kernels import MATMUL_COL_ALIGN, MATMUL_ROW_ALIGN
    a, b, bias, *skip, out = layouts
    if out.numel * a.shape[-1] < parallel.MIN_MACS:
        return None
    align = max(1, MATMUL_COL_ALIGN // panel)
    if b.shape[0] >= threads * parallel.MIN_COL_PANELS * align:
        tiles = parallel.chunks(b.shape[0], threads, align)
        if len(tiles) > 1:
            return [[a, b.narrow(0, p, n), bias.narrow(0, p * panel, n * panel)]
                    + [v.narrow(1, p * panel, n * panel) for v in skip + [out]]
                    for p, n in tiles]
        return None
    return parallel.split_layouts(list(layouts), [0, None, None] + [0] * len(skip) + [0],
                                  out.shape[0], threads, MATMUL_ROW_ALIGN)


#: A direct conv of one image cut by output channels into at most as many
#: tiles as leave this many multiply-adds per element of x to each: every
#: tile writes the whole image's planes (its padded copy or stride phases)
#: for its share of the FMAs. conv1d k3 s2 128->128 at 1600 (192 per
#: element) in 4 tiles at 2 threads: 1.44-1.61 ms, in 2: 1.24. A 3x3 of 64
#: or 128 output channels (576 and 1152 per element) in 2 tiles, not 4: two
#: Zen 5 threads, AVX-512, 64->64 at 56^2 0.59-0.70 -> 0.49-0.51 ms, 128->128
#: at 28^2 0.51 -> 0.50, the 7x7 stem (784) 0.63-0.64 -> 0.60 (x86-64-v3
#: even or 2-8% faster); 256->256 at 14^2 (2304) keeps 4.
DIRECT_TILE_MACS = 512


def _direct_channel_tiles(params: dict, x, w, out, parts: int) -> int:
    """How many channel tiles to cut a one-image Conv2D call into (at most
    ``parts``): where its kernel is the direct one (``fused_conv.direct``),
    no more than leave each ``DIRECT_TILE_MACS``, nor fewer than the
    threads (``parts`` may be the finer split, ``parallel.split_parts``)."""
    from compiler.codegen.lowering.fused_conv import direct
    if len(x.shape) != 4 or not direct(1, params.get("stride", (1, 1)), w.shape[2:],
                                       params.get("padding", (0, 0)),
                                       params.get("dilation", (1, 1))):
        return parts
    per_input = math.prod(w.shape[:1] + w.shape[2:]) * math.prod(out.shape[2:]) \
        / math.prod(x.shape[2:])
    return min(parts, max(parallel.num_threads(), int(per_input // DIRECT_TILE_MACS)))


def _with_row_major(inst: FusedInstance, layouts) -> FusedInstance:
    """A pointwise Conv2D ``inst`` with the operands of ``layouts`` (inputs,
    then the output) that are row-major as ``contiguous``, and those that
    are in their planes only (a tile of pixel rows) as ``planes``."""
    whole = [lay.is_contiguous() for lay in layouts]
    return dataclasses.replace(
        inst, contiguous=tuple(i for i, c in enumerate(whole) if c),
        planes=tuple(i for i, lay in enumerate(layouts) if not whole[i] and _row_major_planes(lay)))


def _is_pointwise(params: dict, w_shape) -> bool:
    from compiler.codegen.lowering.fused_conv import pointwise
    return pointwise(params["groups"], params["stride"], tuple(w_shape[2:]), params["padding"])


def _row_major_planes(lay) -> bool:
    """Whether ``lay`` (rank 4) is row-major over its last two axes, whatever
    its outer strides: a pixel-row tile of an [N,C,H,W] tensor."""
    if len(lay.shape) != 4:
        return False
    (h, w), (sh, sw) = lay.shape[2:], lay.stride[2:]
    return (sw == 1 or w == 1) and (sh == w or h == 1)


def _pixel_row_align(params: dict, x, w) -> int:
    """For a one-image pointwise Conv2D call (``fused_conv.pointwise``) of
    more pixels than output channels, whose pixels are a multiple of the
    register tiles' width (``fused_conv.POINTWISE_COLUMNS``): the multiple
    of rows a tile of pixel rows starts at, so each tile's pixels are one
    too; else 0 (cut by output channels). Two znver3 threads, one process,
    channels -> rows: 16->96 at 56^2 0.095 -> 0.077-0.084 ms, 144->24 at
    28^2 0.050-0.054 -> 0.041-0.043; 256->64 at 56^2 the same (0.99-1.09)
    (docs/benchmarks.md, "A one-image pointwise conv cut by pixel rows")."""
    from compiler.codegen.lowering.fused_conv import POINTWISE_COLUMNS
    if len(x.shape) != 4 or params.get("image_at_run_time") or not _is_pointwise(params, w.shape):
        return 0
    h, wd = x.shape[2:]
    if h * wd <= w.shape[0] or (h * wd) % POINTWISE_COLUMNS or not _row_major_planes(x):
        return 0
    return POINTWISE_COLUMNS // math.gcd(wd, POINTWISE_COLUMNS)


def _conv_group_tiles(params: dict, layouts, n_inputs: int, threads: int):
    """Tiles of a Conv2D call. groups = 1 (the direct kernel): by images, or
    by output channels. Otherwise by images when there are as many as threads,
    else by whole groups along the channel axis
    (x's axis 1, w's and the bias's axis 0, the output's axis 1), when a group
    has as many output as input channels (depthwise: one each), so one cut
    fits every operand. Calls of fewer than ``MIN_ELEMENTS_TRANSCENDENTAL``
    outputs (groups > 1: each output costs Kh*Kw multiply-adds, not one op),
    or of fewer than ``MIN_CONV_MACS`` multiply-adds (groups = 1), run whole."""
    from compiler.registry.ops.conv2d import split_operands
    g = params["groups"]
    x, w, out = layouts[0], layouts[1], layouts[n_inputs]
    if len(layouts) != n_inputs + 1:
        return None
    skip = split_operands(range(n_inputs), params)[3]

    def axes(image: bool, x_axis, w_axis):
        """The cut axis of each operand: x, w and the bias as given, the skip
        (the residual) and the output by images (0) or channels (1)."""
        cut = 0 if image else 1
        return [x_axis, w_axis] + [cut if i == skip else w_axis for i in range(2, n_inputs)] \
            + [cut]
    if g == 1:
        # the direct convolution: by images when there are enough, else by
        # blocks of output channels (8: the register tile's rows); from
        # ``MIN_CONV_MACS`` multiply-adds (a late ResNet layer has 1024 outputs
        # of 2304 each: 0.15 ms on one core)
        macs = w.shape[2] * 9 if params.get("winograd") else math.prod(w.shape[1:])
        if out.numel * macs < MIN_CONV_MACS:
            return None
        # (channels only for one image: the pointwise kernel's channel tiles
        # read the output as row-major for one image; 3 images at 4 threads
        # cut by channels came out wrong)
        if x.shape[0] > 1:
            return parallel.split_layouts(list(layouts), axes(True, 0, None), x.shape[0], threads)
        rows = _pixel_row_align(params, x, w)
        if rows:
            # a pointwise conv of more pixels than output channels: by rows
            # of pixels, each tile reading its share of x (a channel tile
            # reads all of it) and all of the smaller w
            return parallel.split_layouts(list(layouts), [2, None] + [
                2 if i == skip else None for i in range(2, n_inputs)] + [2],
                x.shape[2], threads, rows)
        if params.get("winograd"):
            # w the transformed kernels [16, Cout, Cin]: cut along its axis 1;
            # each tile transforms the whole image, so no more tiles than
            # threads (``conv_winograd.ONE_IMAGE_MACS``: no small image)
            return parallel.split_layouts(
                list(layouts), [None, 1] + [1 if i == skip else 0 for i in range(2, n_inputs)]
                + [1], w.shape[1], min(threads, parallel.num_threads()), 8)
        return parallel.split_layouts(list(layouts), axes(False, None, 0), w.shape[0],
                                      _direct_channel_tiles(params, x, w, out, threads), 8)
    if g < 2 or out.numel < parallel.MIN_ELEMENTS_TRANSCENDENTAL:
        return None
    if x.shape[0] >= threads:
        # by images: every tile runs the kernel of the whole channel range,
        # whose batch is a run-time extent (a symbolic batch compiles no
        # kernel per tile size)
        return parallel.split_layouts(list(layouts), axes(True, 0, None), x.shape[0], threads)
    cpg, opg = x.shape[1] // g, w.shape[0] // g
    if cpg != opg:
        return None
    return parallel.split_layouts(list(layouts), axes(False, 1, 0), x.shape[1], threads, cpg)


def _expand_tiles(layouts, n_inputs: int, threads: int):
    """Tiles of an ExpandDepthwise call: by images when there are as many as
    threads, else by blocks of 8 expanded channels (each tile reads all of
    x, its rows of the weights and biases); calls of fewer than
    ``MIN_ELEMENTS_TRANSCENDENTAL`` outputs run whole."""
    x, out = layouts[0], layouts[n_inputs]
    if len(layouts) != 6 or out.numel < parallel.MIN_ELEMENTS_TRANSCENDENTAL:
        return None
    if x.shape[0] >= threads:
        return parallel.split_layouts(list(layouts), [0, None, None, None, None, 0],
                                      x.shape[0], threads)
    return parallel.split_layouts(list(layouts), [None, 0, 0, 0, 0, 1], out.shape[1], threads, 8)


def _pool_tiles(layouts, n_inputs: int, threads: int):
    """Tiles of a MaxPool2D call: by images when there are as many as
    threads, else by channels; calls of fewer than
    ``MIN_ELEMENTS_TRANSCENDENTAL`` outputs (each a window's maxima) run whole."""
    x, out = layouts[0], layouts[n_inputs]
    if len(layouts) != 2 or out.numel < parallel.MIN_ELEMENTS_TRANSCENDENTAL:
        return None
    axis = 0 if x.shape[0] >= threads else 1
    return parallel.split_layouts(list(layouts), [axis, axis], x.shape[axis], threads)


def _attn_tiles(layouts, n_inputs: int, threads: int):
    """Tiles of a FlashAttn call: by batch when there are as many images as
    threads, else by kv heads (each tile its query heads, and alibi slopes);
    calls of fewer than ``parallel.MIN_MACS`` multiply-adds run whole. An
    additive mask (rank 2 to 4, right-aligned to [B,Hq,Sq,Sk]) is cut along
    its batch or head axis where it has one of its own, else read whole."""
    q, k = layouts[0], layouts[1]
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    if len(layouts) != n_inputs + 1 or 2 * b * hq * sq * sk * d < parallel.MIN_MACS:
        return None
    mask = layouts[3] if n_inputs == 4 and len(layouts[3].shape) >= 2 else None

    def mask_axis(scores_axis, extent):
        """The mask's axis for the scores' axis 0 or 1, where it is not a broadcast 1."""
        a = scores_axis - (4 - len(mask.shape))
        return a if a >= 0 and mask.shape[a] == extent != 1 else None
    if b >= threads:
        extra = [None] * (n_inputs - 3)
        if mask is not None:
            extra = [mask_axis(0, b)]
        return parallel.split_layouts(list(layouts), [0, 0, 0] + extra + [0], b, threads)
    g = hq // hkv
    tiles = parallel.chunks(hkv, threads)
    if len(tiles) < 2:
        return None
    m_axis = mask_axis(1, hq) if mask is not None else None

    def cut(i, lay, start, n):
        if i in (1, 2):
            return lay.narrow(1, start, n)
        if i == 3 and mask is not None:
            return lay if m_axis is None else lay.narrow(m_axis, start * g, n * g)
        return lay.narrow(1 if i < 3 or i == n_inputs else 0, start * g, n * g)
    return [[cut(i, lay, start, n) for i, lay in enumerate(layouts)] for start, n in tiles]


#: A groups-1 Conv2D call of fewer multiply-adds runs on one thread (about 10 us
#: of FMAs: more than a hand-off to the other thread costs).
MIN_CONV_MACS = 1 << 20

#: Fused ops whose output rows (every axis but the last) are independent.
ROW_PARALLEL = frozenset({"SoftmaxLastDim", "RmsNormLastDim", "LayerNormLastDim", "Rope"})

FAMILY = FusedFamily()


def linalg_text(inst: FusedInstance, platform: str | None = None) -> str:
    """The linalg-on-tensors module of one fused instance."""
    masks = inst.dynamic_dims if inst.dynamic else False  # a StaticInstance: static
    return single_op_linalg_text(inst.name, dict(inst.params), inst.input_types, masks,
                                 platform, inst.unit_stride, inst.few_rows, (), inst.unpacked,
                                 inst.contiguous, inst.aliased, inst.pack_a, inst.planes,
                                 inst.short_k)


def warm_instance(inst: FusedInstance, *, target) -> KernelFunction:
    """Compile (or fetch from the caches) the kernel of ``inst`` on ``target``."""
    return FAMILY.compiled(inst, target)


def register_fused_kernels(table, target, names: Optional[Sequence[str]] = None,
                           arities: Optional[dict] = None, mixed: bool = False) -> int:
    """Register every fused op with a mapping and a lowering (or ``names``)
    under ``(OpKind, dtypes, target.backend)``, with its precision claim for
    ``target`` (``FusedPrecision.for_target``) and
    the default cost of its OpKind; ``arities`` (op name -> the key lengths
    to register) leaves out the operand counts a target has no kernel for;
    ``mixed``: each op's keys of mixed operand dtypes too (``FusedKernelSpec.mixed``).
    Nothing is compiled until a kernel is first called or warmed. Returns
    the key count."""
    specs = fused_specs()
    n = 0
    for name in (sorted(specs) if names is None else names):
        spec = specs.get(name)
        if spec is None:
            raise UnsupportedOpError(f"{FAMILY.source(target)} has no kernel for {name} "
                                     "(a @fused_kernel mapping and a lowering are both needed)")
        kind = spec.op_kind
        caps = KernelCaps(strided_input=spec.strided, full_write=True)
        for key in [k for t in spec.dtypes for k in spec.keys(t)] + list(spec.mixed if mixed else ()):
            if arities and name in arities and len(key) not in arities[name]:
                continue
            FAMILY.register(table, target, kind, tuple(key), spec.precision.for_target(target),
                            default_cost_for_op_kind(kind), caps)
            n += 1
    return n


# -- the mappings of the ops lowered in compiler/codegen/lowering/fused_norm.py -----
def _rows(shape) -> int:
    return math.prod(shape[:-1])


def _softmax_serves(params, types) -> bool:
    """``scale`` and the additive mask: x of f32 or f64, its own compute type
    (``lowering.fused_norm.softmax_rows`` reads x · scale + mask with the one
    rounding each of a MulScalar and an Add makes)."""
    return (params.get("scale") is None and len(types) < 2) \
        or types[0].dtype in (DType.F32, DType.F64)


@fused_kernel("SoftmaxLastDim", precision=NORM_FAMILY, serves=_softmax_serves,
              from_params=lambda p, types: {"scale": p.scale},
              keys=lambda t: [(t,) * 2, (t,) * 3])  # x [, mask]
def _softmax_params(params, types):
    x = types[0].shape
    return P.SoftmaxLastDim(_rows(x), x[-1], scale=params.get("scale"))


def _norm_params(params, types):
    x = types[0].shape
    return P.NormLastDim(_rows(x), x[-1], float(params["eps"]))


def _eps_back(p, types):
    return {"eps": float(p.eps)}


fused_kernel("RmsNormLastDim", from_params=_eps_back, precision=NORM_FAMILY,
             keys=lambda t: [(t,) * 2, (t,) * 3])(_norm_params)  # x [, weight]
fused_kernel("LayerNormLastDim", from_params=_eps_back, precision=NORM_FAMILY,
             keys=lambda t: [(t,) * 2, (t,) * 3, (t,) * 4])(_norm_params)  # x [, weight [, bias]]


def _linear_serves(params, types) -> bool:
    """The epilogues (``lowering.fused_forward._linear_epilogue``): b packed
    or of unit batch axes (one panel); the ``gelu`` / ``gelu_tanh`` one f32
    only (an f64 erf has no vector expansion: the GeluErf stays a kernel of
    its own; the tanh form likewise), the residual and clamp f32 or f64."""
    if not linear_epilogue(params):
        return True
    floats = (DType.F32,) if params.get("gelu") or params.get("gelu_tanh") \
        else (DType.F32, DType.F64)
    return all(t.dtype in floats for t in types) and (
        bool(params.get("b_panel")) or all(d == 1 for d in types[1].shape[:-2]))


def _linear_keys(t):
    """(a, b, bias[, skip], out): the residual epilogue's skip is a fourth input."""
    return [(t,) * 4, (t,) * 5]


@fused_kernel("FusedLinear", precision=FUSED_LINEAR,
              dtypes=(DType.F32, DType.F64, DType.F16, DType.BF16),
              from_params=lambda p, types: {"b_panel": int(p.b_panel) or None,
                                            "gelu": True if p.gelu else None,
                                            "gelu_tanh": True if p.gelu_tanh else None,
                                            "residual": True if p.residual else None,
                                            "clamp_min": p.clamp_min, "clamp_max": p.clamp_max},
              serves=_linear_serves, keys=_linear_keys,
              # an f32 a over a bf16 b (packed: bf16 panels), as MatMul's mixed key
              mixed=((DType.F32, DType.BF16, DType.F32, DType.F32),))
def _linear_params(params, types):
    a, b = types[0].shape, types[1].shape
    panel = params.get("b_panel", 0)
    act = {"gelu": bool(params.get("gelu")), "gelu_tanh": bool(params.get("gelu_tanh")),
           "residual": bool(params.get("residual")),
           "clamp_min": params.get("clamp_min"), "clamp_max": params.get("clamp_max")}
    if panel:  # packed b [N/panel, K, panel]; a's batch axes fold into M
        return P.Matmul((), (), math.prod(a[:-1]), b[0] * panel, a[-1], b_panel=panel, **act)
    return P.Matmul(tuple(a[:-2]), tuple(b[:-2]), a[-2], b[-1], a[-1], **act)


@fused_kernel("Rope", precision=ROPE,
              from_params=lambda p, types: {"interleaved": bool(p.interleaved)})
def _rope_params(params, types):
    x = types[0].shape
    seq = x[-2] if len(x) >= 2 else 1
    return P.Rope(math.prod(x[:-2]), seq, x[-1], bool(params["interleaved"]))


_REDUCTION = {"mean": P.Reduction.MEAN, "sum": P.Reduction.SUM, "none": P.Reduction.NONE}


@fused_kernel("FusedSoftmaxCrossEntropy", precision=SOFTMAX_CROSS_ENTROPY,
              from_params=lambda p, types: {
                  "reduction": {v: k for k, v in _REDUCTION.items()}[p.reduction],
                  "ignore_index": int(p.ignore_index)},
              keys=lambda t: [(t, ti, DType.F32) for ti in (DType.I64, DType.I32, DType.U32)])
def _fsce_params(params, types):
    lg = types[0].shape
    return P.FusedSoftmaxCrossEntropy(_rows(lg), lg[-1], _REDUCTION[params["reduction"]],
                                      int(params["ignore_index"]))


__all__ = ["FusedKernelSpec", "FusedInstance", "FusedFamily", "FAMILY", "fused_kernel",
           "fused_specs", "spec_for_kind", "fused_op_params", "instance_from_params",
           "linalg_text", "warm_instance", "register_fused_kernels",
           "NORM_FAMILY", "FUSED_LINEAR", "ROPE", "SOFTMAX_CROSS_ENTROPY",
           "ATTN", "QMATMUL", "CONV2D", "FusedPrecision", "FLOATS"]
