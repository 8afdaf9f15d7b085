"""Kernel families: how generated kernels are instantiated, compiled,
memoised, called and registered, once for every family and every target.

A *family* (``KernelFamily``) is one way of turning a binding-table call into
code: the primitive family (``compiler.codegen.kernels``: one fuel primitive
per kernel), the fused family (``compiler.codegen.fused``: one static fused
op) and the runtime-fused family (``compiler.codegen.runtime_fused``: one
``fuel.runtime_fused`` region as one loop nest). A family says three things:

* ``instance(key, dtypes, layouts, params, n_inputs) -> (instance, layouts)``:
  the op instance a call computes (hashable, with a ``memo_key``) and the
  possibly adapted layouts to build descriptors from;
* ``linalg_text(instance, target) -> str``: its linalg-on-tensors module
  with one ``@kernel`` entry;
* ``suffix``: appended to the target's kernel-source prefix
  (``"mlir-cpu"`` + ``"-fused"``).

Everything else is shared: ``GeneratedKernel`` is the callable behind each
``KernelRef`` (arity check, per-call memo, ``warm`` to compile ahead of
time), ``compiled_entry`` compiles an instance once per (target, instance)
through the target's codegen package and the kernel cache, and
``KernelFamily.register`` binds a kernel under ``(key, dtypes,
target.backend)``.

``CallMemo`` is the per-kernel layer: a call's ``(params, layouts)`` ->
(compiled function, descriptor templates), so a repeated call skips
re-deriving the op instance and rebuilding descriptors.
"""
from __future__ import annotations

import collections
import ctypes
import dataclasses
import functools
import threading
import weakref
from typing import Callable, Hashable, Sequence

from compiler.codegen import native_pool, parallel
from compiler.codegen.loader import KernelFunction
from compiler.codegen.memref import DescriptorTemplate
from compiler.errors import UnsupportedOpError
from compiler.graph.opdef import TensorType
from compiler.targets import parse_target
from runtime.binding import KernelCaps, KernelRef
from runtime.cpu_features import check_cpu_features, missing_cpu_features
from runtime.dtype import DType
from runtime.layout import Layout
# the matmul row classes (a symbolic .fuel file picks its objects with them at run time)
from runtime.rows import (FEW_ROWS, UNPACKED_ROWS, a_row_stride, aliased_b, aliased_packed, aliased_unpacked,  # noqa: F401
                          b_row_stride, few_rows, pack_a, unit_stride_args, unpacked_rows)

ENTRY = "kernel"

_addressof = ctypes.addressof


def _fn_address(fn: KernelFunction) -> int:
    return ctypes.cast(fn.raw, ctypes.c_void_p).value

#: Compiled entries memoised by ``compiled_entry``; beyond it the oldest are
#: dropped (and unloaded once no kernel's call memo refers to them), so a
#: process compiling ever-new graphs does not grow without bound.
MAX_COMPILED = 4096

_compiled: "collections.OrderedDict[Hashable, KernelFunction]" = collections.OrderedDict()
_lock = threading.Lock()
_key_locks: dict[Hashable, threading.Lock] = {}


def runnable_here(target) -> bool:
    """True when this machine can run code for ``target`` (its codegen
    package's ``runnable_here``: the CPU features, a CUDA device, ...)."""
    ask = getattr(target.codegen, "runnable_here", None)
    return ask(target) if ask is not None else not missing_cpu_features(target.features)


class StaticInstance:
    """An op instance compiled with static shapes (for a target whose
    codegen package sets ``STATIC_SHAPES``): ``dynamic`` is False and the
    memo key includes the input types."""

    __slots__ = ("inner",)
    dynamic = False

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @property
    def memo_key(self) -> tuple:
        return ("static", self.inner.memo_key, tuple(self.inner.input_types))


def for_target(inst, target):
    """``inst`` as ``target`` compiles it (static shapes where its codegen
    package needs them)."""
    if getattr(target.codegen, "STATIC_SHAPES", False) and getattr(inst, "dynamic", False):
        return StaticInstance(inst)
    return inst


def compiled_entry(target, key: Hashable, linalg_text: Callable[[], str], n_args: int, *,
                   load: bool = True) -> KernelFunction | None:
    """The kernel for ``key`` on ``target``: on first use, ``linalg_text()``
    (the instance's linalg-on-tensors module with one ``@kernel`` entry) is
    compiled through ``target.codegen.compile_module`` (kernel cache) and its
    C-interface entry taking ``n_args`` memref descriptors is memoised.

    ``load=False`` only makes sure the object is compiled and cached (for a
    target this machine cannot run) and returns what the codegen package's
    ``ensure_compiled`` returns (None on cpu targets; the compiled program
    on cuda targets)."""
    full = (target, key)
    if load:
        check_cpu_features(target.features, target=str(target), what="a generated kernel")
    fn = _compiled.get(full)
    if fn is not None:
        return fn
    with _lock:
        lock = _key_locks.setdefault(full, threading.Lock())
    with lock:
        fn = _compiled.get(full)
        if fn is None:
            if not load:
                return target.codegen.ensure_compiled(linalg_text(), [ENTRY], target=target)
            fn = target.codegen.compile_module(linalg_text(), [ENTRY], target=target).ciface(
                ENTRY, n_args)
            remember(target, key, fn)
    return fn


def remember(target, key: Hashable, fn: KernelFunction) -> None:
    """Memoise ``fn`` as ``compiled_entry``'s result for ``(target, key)``
    (an object compiled elsewhere: ``compiler.codegen.jobs``)."""
    with _lock:
        _compiled[(target, key)] = fn
        while len(_compiled) > MAX_COMPILED:
            old, _ = _compiled.popitem(last=False)
            _key_locks.pop(old, None)


def is_compiled(target, key: Hashable) -> bool:
    """Whether ``compiled_entry`` has ``(target, key)`` memoised."""
    return (target, key) in _compiled


#: How many one-op modules a thread emits in one context before it takes a
#: fresh one (``emission_context``).
EMIT_CONTEXT_USES = 256
_EMIT = threading.local()


def emission_context():
    """An MLIR context with the fuel dialect loaded, shared by this thread's
    one-op emissions. Every compiled instance emits its module to get the text
    that keys the kernel cache, hit or miss; a fresh context plus the dialect
    load took ~9 ms, more than emitting most kernels (a sweep of 57 small
    graphs spent 16 of its 46 s there). The context is replaced after
    ``EMIT_CONTEXT_USES`` modules, so what it interns (types, attributes)
    stays bounded in a long-lived process."""
    from compiler.dialect.definition import load_fuel_dialect
    from compiler.mlir import ir
    ctx, uses = getattr(_EMIT, "ctx", None), getattr(_EMIT, "uses", 0)
    if ctx is None or uses >= EMIT_CONTEXT_USES:
        ctx, uses = ir.Context(), 0
        load_fuel_dialect(ctx)
    _EMIT.ctx, _EMIT.uses = ctx, uses + 1
    return ctx


def single_op_linalg_text(op_name: str, params: dict, input_types: Sequence, dynamic: bool,
                          platform: str | None = None, unit_stride: Sequence[int] = (),
                          few_rows: bool = False, zero_stride: Sequence[int] = (),
                          unpacked: bool = False, contiguous: Sequence[int] = (),
                          aliased: bool = False, pack_a: bool = False,
                          planes: Sequence[int] = (), short_k: bool = False) -> str:
    """The linalg-on-tensors module of one fuel op (a primitive or a static
    fused op) as a ``@kernel`` entry, lowered with ``platform``'s rules.
    ``unit_stride``: the arguments (inputs then outputs) every call passes
    with a unit innermost stride; on cpu the entry carries them in
    ``UNIT_STRIDE_ATTR`` (``codegen.cpu.pipeline.assume_unit_strides``).
    ``few_rows``: a matmul call of at most ``FEW_ROWS`` rows; on cpu the entry
    carries ``FEW_ROWS_ATTR``. ``zero_stride``: the arguments every call
    passes with innermost stride 0 (``ZERO_STRIDE_ATTR``). ``unpacked``: a
    matmul call of at most ``UNPACKED_ROWS`` rows (``UNPACKED_ATTR``);
    ``aliased``: one whose B rows fall in few cache sets (``ALIASED_ATTR``);
    ``pack_a``: a packed one that copies its blocks of A (``PACK_A_ATTR``);
    ``short_k``: a FusedLinear over a packed B of a short K (``SHORT_K_ATTR``).
    ``contiguous``: the arguments every call passes row-major
    (``common.stages.CONTIGUOUS_ATTR``); ``planes``: those it passes with
    row-major planes, the last two axes (``common.stages.PLANES_ATTR``)."""
    from compiler.codegen.linalg import emit_single_op_module, lower_to_linalg
    module = emit_single_op_module(op_name, dict(params), list(input_types),
                                   dynamic=dynamic, func_name=ENTRY, ctx=emission_context())
    if (unit_stride or few_rows or zero_stride or unpacked or contiguous or planes or short_k) \
            and platform == "cpu":
        from compiler.codegen.common.stages import CONTIGUOUS_ATTR, PLANES_ATTR
        from compiler.mlir import ir
        with module.context:
            i64 = ir.IntegerType.get_signless(64)
            for op in module.body.operations:
                if op.operation.name == "func.func":
                    for attr, args in ((UNIT_STRIDE_ATTR, unit_stride),
                                       (ZERO_STRIDE_ATTR, zero_stride),
                                       (CONTIGUOUS_ATTR, contiguous),
                                       (PLANES_ATTR, planes)):
                        if args:
                            op.attributes[attr] = ir.ArrayAttr.get(
                                [ir.IntegerAttr.get(i64, i) for i in args])
                    if few_rows:
                        op.attributes[FEW_ROWS_ATTR] = ir.UnitAttr.get()
                    if unpacked:
                        op.attributes[UNPACKED_ATTR] = ir.UnitAttr.get()
                    if aliased:
                        op.attributes[ALIASED_ATTR] = ir.UnitAttr.get()
                    if pack_a:
                        op.attributes[PACK_A_ATTR] = ir.UnitAttr.get()
                    if short_k:
                        op.attributes[SHORT_K_ATTR] = ir.UnitAttr.get()
    lower_to_linalg(module, platform=platform)     # (a rule may read these attributes)
    return str(module)


#: See ``compiler.codegen.cpu.pipeline.assume_unit_strides``.
UNIT_STRIDE_ATTR = "fuelc.unit_stride_args"
#: The arguments every call passes with innermost stride 0 (broadcast along
#: it); see ``compiler.codegen.cpu.pipeline.assume_unit_strides``.
ZERO_STRIDE_ATTR = "fuelc.zero_stride_args"


#: On a cpu matmul entry: every call has at most ``FEW_ROWS`` rows of A; the
#: strategy selector sees it as a feature of the same name and runs the
#: product as rows of B scaled into rows of C (``codegen.cpu.strategy``).
FEW_ROWS_ATTR = "fuelc.few_rows"
#: Marks the generic of a direct convolution (``lowering/fused_conv.py``), which
#: a target's strategy may tile as such (``codegen.cpu.transforms.conv``).
DIRECT_CONV_ATTR = "fuelc.direct_conv"
#: On a stride-1 depthwise ``DIRECT_CONV_ATTR`` generic: its pixels are whole
#: rows of this many (the plane's row pitch, a whole number of vectors), which
#: a target may compute a block of output rows at a time, each input row
#: loaded once for the taps of every row of the block
#: (``codegen.cpu.transforms.conv.depthwise_rows``).
DW_PITCH_ATTR = "fuelc.dw_pitch"
#: On a groups-1 ``DIRECT_CONV_ATTR`` generic: ``[Wq, Ho, Wo]``, its pixels'
#: row pitch and the output rows and columns they hold (pixel ``oy*Wq + ox``
#: is output pixel (oy, ox) for ox < Wo), so that a target may compute only
#: the first columns of each row, a block of rows at a time
#: (``codegen.cpu.transforms.conv.direct_rows``).
DIRECT_ROWS_ATTR = "fuelc.direct_rows"
#: On the one ``DIRECT_CONV_ATTR`` generic of a strided conv whose stride
#: phases are stacked into one plane (``lowering/fused_conv.py``,
#: ``_Geometry.stacked``): every tap of a channel in one pass, which a target
#: may code-generate with its own LLVM tuning (``codegen.cpu.transforms.conv.direct_rows``).
DIRECT_STACKED_ATTR = "fuelc.direct_stacked"
#: On a cpu kernel's module, set by a rewrite of its schedule: the LLVM CPU
#: name whose scheduling model its functions take (``"tune-cpu"``;
#: ``codegen.cpu.pipeline.tune_functions``).
TUNE_CPU_ATTR = "fuelc.tune_cpu"
#: Mark a matmul with an epilogue in one kernel (``lowering/fused_conv.py:
#: _pointwise``): the contraction, a ``linalg.generic`` over (batch, m, n | k),
#: and the element-wise generic over (batch, m, n) that consumes it (bias,
#: activation). A target's strategy may tile and fuse them as one
#: (``codegen.cpu.transforms.matmul.epilogue_script``).
CONTRACT_ATTR = "fuelc.mm_contract"
EPILOGUE_ATTR = "fuelc.mm_epilogue"
#: Marks the element-wise generic (bias, activation) after a stem's contraction
#: (``lowering/fused_conv.py: _stem``; the contraction carries ``CONTRACT_ATTR``):
#: a target's strategy may tile and fuse them as one (``transforms.conv.stem_scripts``).
STEM_ATTR = "fuelc.stem"
#: Marks the contraction of a pointwise conv (``lowering/fused_conv.py:
#: _pointwise``, the matmul-epilogue schedule) of at least
#: ``fused_conv.POINTWISE_LONG_K`` input channels: a target's strategy may give
#: it other register tiles than the short-K ones (``strategy._LONG_K_TILES``).
LONG_K_ATTR = "fuelc.long_k"
#: Marks the copy of a direct convolution's full-width rows into its output
#: (``lowering/fused_conv.py``): the schedule copies it a row at a time.
CROP_ATTR = "fuelc.crop"
#: On a cpu matmul entry: every call has more than ``FEW_ROWS`` and at most
#: ``UNPACKED_ROWS`` rows of A; the strategy selector then tiles it as usual but
#: reads B in place instead of packing its panels (``transforms.matmul``,
#: ``pack=False``).
UNPACKED_ATTR = "fuelc.unpacked"
#: On a cpu matmul entry marked ``UNPACKED_ATTR``: B's rows are a multiple of
#: 4 KiB apart in every call (``runtime.rows.aliased_unpacked``), so the rows a
#: panel of B spans fall in one or two L1 sets; the strategy selector may then
#: walk K in shorter blocks. On an entry of the packed class (17 to
#: ``UNPACKED_ROWS`` rows, ``runtime.rows.aliased_packed``): B is copied in
#: blocks of whole row segments.
ALIASED_ATTR = "fuelc.aliased_b"
#: On a cpu matmul entry of the packed class: A's rows are a multiple of 4 KiB
#: apart and the call has many columns (``runtime.rows.pack_a``); the strategy
#: selector may then copy each block of A into a contiguous buffer.
PACK_A_ATTR = "fuelc.pack_a"
#: On a cpu entry of a FusedLinear over a packed B without an epilogue, of
#: more than ``UNPACKED_ROWS`` rows: K is at most ``SHORT_K_MAX`` (the packed
#: kernel takes K at run time, so the class is the instance's), and the
#: target's codegen says its kernel for such a K differs from the plain one
#: (cpu: ``short_k``; AVX2 f32 with K past one plain block of 256); the
#: strategy selector then runs all of K in one block (``strategy._PACKED_SHORT_K``).
SHORT_K_ATTR = "fuelc.short_k"
SHORT_K_MAX = 768
#: Marks the contraction of a FusedLinear whose B is pre-packed (``b_panel``;
#: ``lowering/fused_forward.py``): a ``linalg.generic`` over (p, m, j | k),
#: ``out[m, p, j] += a[m, k] * b[p, k, j]``, which a target's strategy may
#: tile as a matmul over contiguous B panels (``transforms.matmul.packed_script``).
PACKED_B_ATTR = "fuelc.packed_b"
#: On a cpu entry whose lowering wrote its loops as they should run
#: (FlashAttn's register tiles, ``lowering/fused_attention.py``; RMSNorm's and
#: LayerNorm's passes, ``lowering/fused_norm.over_rows``; ``lowering.core.
#: mark_rolled``): the strategy selector sees it as a feature and lowers it
#: without LLVM's loop unrolling (``strategy.VECTORIZED_ROLLED``, ``LOOPS_ROLLED``).
ROLLED_ATTR = "fuelc.rolled"


def inner_strides(layouts: Sequence[Layout]) -> tuple[int, ...]:
    """Each layout's innermost stride when it is 1 (or the axis has at most
    one element) or 0 (a broadcast), else -1. A kernel specialised on them
    reads contiguous rows and hoists broadcast values out of its inner loop:
    with a stride known only at run time LLVM vectorizes a loop just for the
    stride-1 case, so one per-channel broadcast input of an NCHW tensor (a
    bias, a squeeze-excitation gate) made the whole loop scalar."""
    return tuple(1 if (not l.rank or l.shape[-1] <= 1 or l.stride[-1] == 1)
                 else 0 if l.stride[-1] == 0 else -1 for l in layouts)


def coalesce(layouts: Sequence[Layout]) -> list[Layout]:
    """Layouts of one shape with their axes merged wherever every layout
    allows it (numpy's iterator coalescing): axes of extent 1 dropped, and an
    axis merged into the next one in when each layout's stride on it is the
    next one's stride times its extent (a broadcast's 0 as well). An
    elementwise kernel on the result runs the same elements in the same
    order, over fewer and longer loops: [1,240,14,14] times a per-channel
    broadcast [1,240,1,1] becomes [240,196] times a [240,196] of strides
    (1, 0), and a static loop of 14 (too short for LLVM to vectorize) one of 196."""
    shape = layouts[0].shape
    axes = [a for a, d in enumerate(shape) if d != 1]
    if not axes:
        return [Layout._trusted((1,), (1,), l.start_offset) for l in layouts]
    merged = [shape[axes[-1]]]
    strides = [[l.stride[axes[-1]]] for l in layouts]
    for a in reversed(axes[:-1]):
        if all(l.stride[a] == st[0] * merged[0] for l, st in zip(layouts, strides)):
            merged[0] *= shape[a]
        else:
            merged.insert(0, shape[a])
            for l, st in zip(layouts, strides):
                st.insert(0, l.stride[a])
    return [Layout._trusted(tuple(merged), tuple(st), l.start_offset)
            for l, st in zip(layouts, strides)]


#: (family type, instance, target) -> KernelFamily.min_elements; bounded.
_MIN_ELEMENTS: dict = {}
#: (family type, instance, target) -> the text min_elements made, until
#: KernelFamily.text takes it (compile() makes each text once); bounded.
_TEXTS: dict = {}


class KernelFamily:
    """One family of generated kernels (see the module docstring).
    Subclasses implement ``instance`` and ``linalg_text``."""

    suffix = ""

    def instance(self, key, dtypes: Sequence[DType], layouts: Sequence, params,
                 n_inputs: int, *, target=None) -> tuple[Hashable, list]:
        """The op instance of a call and its (possibly adapted) layouts;
        ``target``: the target it compiles for, where a class of calls is
        one only where that target's kernel differs (None: no such class)."""
        raise NotImplementedError

    def linalg_text(self, instance, target) -> str:
        raise NotImplementedError

    def key_name(self, key) -> str:
        return getattr(key, "name", str(key))

    def split(self, instance, layouts: Sequence, n_inputs: int,
              threads: int, min_elements: int = parallel.MIN_ELEMENTS, *,
              target=None) -> list[list] | None:
        """The operand layouts of up to ``threads`` tiles that together
        compute the call (``compiler.codegen.parallel``) on ``target``, or
        None to run it whole; elementwise and row calls of fewer than
        ``min_elements`` output elements run whole. Default: never split."""
        return None

    def b_panel(self, key, dtypes: Sequence[DType], target) -> int:
        """The panel width of a matmul B this family's kernel for ``key`` and
        ``dtypes`` reads pre-packed (``[N/panel, K, panel]``; FusedLinear's
        ``b_panel`` param), or 0 where it reads none. Default: none."""
        return 0

    def winograd(self, key, params: dict, shapes, target) -> bool:
        """Whether this family's kernel for ``key`` on ``target`` computes a
        Conv2D of ``params`` and operand ``shapes`` (x, w) as Winograd F(2x2,
        3x3) from transformed weights (Conv2D's ``winograd`` param, made by
        ``fuel-prepack-weights``). Default: no."""
        return False

    def attention_scores(self, key, dtypes: Sequence[DType], target) -> int | None:
        """The scores size (elements) from which this family's kernel for
        ``key`` and ``dtypes`` (FlashAttn) pays without a causal band on
        ``target`` (``fuse_attention.pays``), or None for the pass's own
        ``SCORES_FUSED``. Default: None."""
        return None

    def min_elements(self, instance, target) -> int:
        """``split``'s ``min_elements`` for ``instance``: lower when its kernel
        evaluates transcendentals (``parallel.min_elements``)."""
        key = (type(self), instance, getattr(target, "description", target))
        n = _MIN_ELEMENTS.get(key)
        if n is None:
            text = self.linalg_text(instance, target)
            n = parallel.min_elements(text)
            if len(_MIN_ELEMENTS) >= 4096:
                _MIN_ELEMENTS.clear()
            if len(_TEXTS) >= 256:
                _TEXTS.clear()
            _MIN_ELEMENTS[key] = n
            _TEXTS[key] = text
        return n

    def text(self, instance, target) -> str:
        """``linalg_text(instance, target)``, taking the one ``min_elements``
        made for the same instance if it is still kept."""
        text = _TEXTS.pop((type(self), instance, getattr(target, "description", target)), None)
        return self.linalg_text(instance, target) if text is None else text

    def subcalls(self, key, instance, layouts: Sequence, params,
                 n_inputs: int) -> list[tuple[list, object]] | None:
        """``[(layouts, params), ...]`` of smaller calls that together
        compute a call the kernel for ``instance`` would run slowly (each
        one a call of this family's kernel), or None to run it as it is.
        Default: None."""
        return None

    def with_shapes(self, instance, layouts: Sequence):
        """``instance`` on inputs of the shapes of ``layouts`` (a tile's
        inputs, then its output)."""
        types = tuple(TensorType(tuple(l.shape), t.dtype)
                      for l, t in zip(layouts, instance.input_types))
        return dataclasses.replace(instance, input_types=types)

    def accepts_arity(self, key, n_expected: int, n_inputs: int) -> bool:
        return n_inputs == n_expected

    def source(self, target) -> str:
        """The ``kernel_source`` of this family's kernels on ``target``."""
        return target.codegen.SOURCE + self.suffix

    def compiled(self, instance, target, *, load: bool = True) -> KernelFunction | None:
        """The compiled kernel of ``instance`` on ``target`` (a Target or its
        string; memoised)."""
        target = parse_target(target)
        instance = for_target(instance, target)
        return compiled_entry(target, self.entry_key(instance),
                              lambda: self.linalg_text(instance, target),
                              len(instance.input_types) + 1, load=load)

    def entry_key(self, instance) -> Hashable:
        """The compile-once memo key of ``instance`` (as ``for_target`` made it)."""
        return (type(self).__name__, instance.memo_key)

    def kernel(self, target, key, dtypes: Sequence[DType]) -> "GeneratedKernel":
        """This family's kernel callable for ``(key, dtypes)`` on ``target``."""
        return GeneratedKernel(self, parse_target(target), key, dtypes)

    def register(self, table, target, key, dtypes: Sequence[DType], precision, cost,
                 caps: KernelCaps | None = None) -> "GeneratedKernel":
        """Bind this family's kernel for ``(key, dtypes)`` on ``target`` in
        ``table`` (a mutable table). Nothing is compiled until it is called
        or warmed. A strided-input kernel also reads any view
        (``KernelCaps.view_input``) where the target's codegen package says
        so (``VIEW_INPUT``)."""
        fn = self.kernel(target, key, dtypes)
        source = fn.kernel_source
        caps = caps or _STRIDED_CAPS
        if caps.strided_input and getattr(target.codegen, "VIEW_INPUT", False):
            caps = _view_input(caps)
        table.register_full_with_source(key, fn.dtypes, target.backend,
                                        KernelRef(fn, fn.__qualname__, source), caps,
                                        precision, cost, source)
        return fn


def _cut_axes(tile: Sequence, layouts: Sequence) -> tuple:
    """The axes along which each operand of ``tile`` is narrower than in the
    whole call's ``layouts``: which cut a split made."""
    return tuple(tuple(a for a, (m, n) in enumerate(zip(t.shape, l.shape)) if m != n)
                 for t, l in zip(tile, layouts))


_STRIDED_CAPS = KernelCaps(strided_input=True, full_write=True)


@functools.lru_cache(maxsize=None)
def _view_input(caps: KernelCaps) -> KernelCaps:
    """``caps`` with ``view_input`` (one object per distinct caps: a table's
    build asks for some 800)."""
    return dataclasses.replace(caps, view_input=True)


class GeneratedKernel:
    """The callable behind a generated ``KernelRef``: one family, target,
    binding key and dtype tuple. ``kernel(inputs, outputs, layouts, params)``
    as the binding table calls it; ``warm(layouts, params, n_inputs)``
    compiles ahead of time what such a call would use."""

    def __init__(self, family: KernelFamily, target, key, dtypes: Sequence[DType]):
        self.family = family
        self.target = target
        self.key = key
        self.dtypes = tuple(DType.parse(d) for d in dtypes)
        self.n_inputs = len(self.dtypes) - 1
        self.kernel_source = family.source(target)
        self.__qualname__ = (f"{self.kernel_source}.{family.key_name(key)}"
                             f"[{','.join(d.value for d in self.dtypes)}]")
        self._calls = CallMemo(self._prepare)

    def _tiles(self, layouts, params, n_inputs: int) -> list[tuple]:
        """[(instance, layouts)] of the call's tiles (one when not split)."""
        inst, lays = self.family.instance(self.key, self.dtypes, layouts, params, n_inputs,
                                          target=self.target)
        subs = self.family.subcalls(self.key, inst, lays, params, n_inputs)
        if subs:  # run as sub-calls; run_tiles spreads them over the threads
            return [self.family.instance(self.key, self.dtypes, sl, sp, n_inputs, target=self.target)
                    for sl, sp in subs]
        # (a GPU kernel is one launch over the whole call: the host's threads
        # do not cut it into tiles)
        threads = 1 if self.target.backend.is_gpu_class else parallel.num_threads()
        parts = None
        if threads > 1:
            least = self._min_elements(inst, lays, n_inputs)
            parts = self.family.split(inst, lays, n_inputs, threads, least, target=self.target)
            finer = parallel.split_parts(threads)
            if parts and finer > threads:
                # more tiles of the same cut only: asked for more parts a
                # family may cut another way (a conv of 3 images by channels
                # where 2 threads cut it by images), which it never ran at
                # this size before
                fine = self.family.split(inst, lays, n_inputs, finer, least, target=self.target)
                if fine and len(fine) > len(parts) \
                        and _cut_axes(fine[0], lays) == _cut_axes(parts[0], lays):
                    parts = fine
        if not parts:
            return [(inst, lays)]
        return [(self.family.with_shapes(inst, sub), sub) for sub in parts]

    def _min_elements(self, inst, lays, n_inputs: int) -> int:
        # only a call between the two thresholds needs to know the kernel's math
        if parallel.MIN_ELEMENTS_TRANSCENDENTAL <= lays[n_inputs].numel < parallel.MIN_ELEMENTS:
            return self.family.min_elements(inst, self.target)
        return parallel.MIN_ELEMENTS

    def _prepare(self, layouts, params, n_inputs: int):
        return [(self.family.compiled(inst, self.target), lays)
                for inst, lays in self._tiles(layouts, params, n_inputs)]

    def instances(self, layouts: Sequence, params, n_inputs: int) -> list:
        """The distinct op instances ``warm`` with these arguments compiles."""
        return list(dict.fromkeys(i for i, _ in self._tiles(layouts, params, n_inputs)))

    def b_panel(self) -> int:
        """``KernelFamily.b_panel`` of this kernel: the passes ask the binding
        table's kernel whether it reads a pre-packed B (``fuel-prepack-weights``)."""
        return self.family.b_panel(self.key, self.dtypes, self.target)

    def winograd(self, params: dict, shapes) -> bool:
        """``KernelFamily.winograd`` of this kernel (``fuel-prepack-weights``
        asks it before transforming a Conv2D's weights)."""
        return self.family.winograd(self.key, params, shapes, self.target)

    def attention_scores(self) -> int | None:
        """``KernelFamily.attention_scores`` of this kernel: ``fuel-fuse`` asks
        the binding table's FlashAttn kernel from which size it pays."""
        return self.family.attention_scores(self.key, self.dtypes, self.target)

    def warm(self, layouts: Sequence, params, n_inputs: int) -> KernelFunction | None:
        """Compile the kernel(s) a call with these layouts and params would
        use (one per distinct tile shape) and return the first. On a machine
        that cannot run the target the objects are only compiled and cached
        (None is returned); calling the kernel then raises ``CpuFeatureError``."""
        load = runnable_here(self.target)
        fns = [self.family.compiled(inst, self.target, load=load)
               for inst in self.instances(layouts, params, n_inputs)]
        return fns[0]

    def _check_arity(self, n_inputs: int, n_outputs: int) -> None:
        if not self.family.accepts_arity(self.key, self.n_inputs, n_inputs) \
                or not n_inputs or n_outputs != 1:
            raise UnsupportedOpError(
                f"{self.__qualname__}: expects {self.n_inputs} inputs and 1 output, "
                f"got {n_inputs} and {n_outputs}")

    def __call__(self, inputs, outputs, layouts, params) -> None:
        self._check_arity(len(inputs), len(outputs))
        self._calls.call(inputs, outputs, layouts, params)

    def prepare_call(self, layouts: Sequence, params, n_inputs: int) -> Callable[[Sequence], None]:
        """A call bound to these layouts and params: ``run(storages)`` (the
        inputs then the output, with exactly these layouts) does what
        ``self(inputs, outputs, layouts, params)`` does, without the per-call
        lookups. It follows later thread-count changes. Raises like a call."""
        self._check_arity(n_inputs, len(layouts) - n_inputs)
        memo, threads = self._calls, parallel.num_threads()
        hit = memo.lookup(layouts, params, n_inputs)
        layouts = tuple(layouts)

        def fallback(storages):
            memo.call(storages[:n_inputs], storages[n_inputs:], layouts, params)

        if len(hit) != 1 or not isinstance(hit[0][0], KernelFunction):
            return lambda storages: (fallback(storages) if parallel.num_threads() != threads
                                     else run_tiles(hit, storages))
        raw, templates, addressof = hit[0][0].raw, hit[0][1], _addressof

        def run(storages):
            if parallel.num_threads() != threads:
                return fallback(storages)
            descs = [t.bind(s) for t, s in zip(templates, storages)]
            raw(*[addressof(d) for d in descs])  # descs stay alive across the call
        return run

    def prepare_raw(self, layouts: Sequence, params, n_inputs: int):
        """The call on these layouts and params as one raw function call, for a
        caller that builds and keeps the descriptors itself (the executor's
        direct path, ``runtime.direct``): ``(fn, templates, (probe, value))``;
        ``fn.raw(*addresses)`` runs it, ``templates`` are the arguments'
        ``DescriptorTemplate``s (inputs then outputs), and the call stays
        valid while ``probe()`` returns ``value`` (the thread count). None
        when a tile is not a compiled function. A call split into tiles (over
        threads, or into sub-calls) is one ``SplitCall``: its templates are
        every tile's, tile after tile. Raises like a call."""
        self._check_arity(n_inputs, len(layouts) - n_inputs)
        threads = parallel.num_threads()
        hit = self._calls.lookup(layouts, params, n_inputs)
        if not all(isinstance(fn, KernelFunction) for fn, _ in hit):
            return None
        if len(hit) == 1:
            return hit[0][0], hit[0][1], (parallel.num_threads, threads)
        return (SplitCall([fn for fn, _ in hit], len(layouts), threads),
                [t for _, templates in hit for t in templates], (parallel.num_threads, threads))

    def __repr__(self) -> str:
        return f"<GeneratedKernel {self.__qualname__} target={self.target}>"


Prepare = Callable[[Sequence, object, int], "tuple[KernelFunction, Sequence]"]


def _weak(fn, callback=None):
    """A weak reference to ``fn`` (``callback`` called once it dies), or (for
    a callable that takes none) a callable returning it."""
    try:
        return weakref.ref(fn, callback)
    except TypeError:
        return lambda: fn


class CallMemo:
    """Memoised calls of one kernel callable (fixed OpKind and dtypes).

    ``prepare(layouts, params, n_inputs) -> [(fn, layouts')]`` is the
    family's pure mapping from a call's layouts, OpParams and input count to
    its tiles: each a compiled function and the (possibly adapted) layouts to
    build descriptors from; it may raise (nothing is memoised then). ``call``
    looks the tiles up by ``(params, threads, *layouts)`` (OpParams and
    Layout are frozen and hashable; unhashable params fall back to
    ``prepare`` every call) and calls each ``fn`` with one descriptor per
    storage, several tiles concurrently (``compiler.codegen.parallel``).
    Safe to share between threads: entries are immutable and a racing miss
    only prepares the same entry twice. Entries refer to their compiled
    functions weakly: the memo of a process-wide kernel never keeps machine
    code mapped once the modules, the compile-once memo and the kernel cache
    have let go of it, and an entry leaves the memo when one of its functions
    goes (so a long-lived process compiling ever-new graphs keeps no entries
    for them; a later call prepares it again).
    """

    MAX_ENTRIES = 1024  # a kernel called with ever-new layouts must not grow without bound

    __slots__ = ("_prepare", "_calls")

    def __init__(self, prepare: Prepare):
        self._prepare = prepare
        self._calls: dict = {}

    def __len__(self) -> int:
        return len(self._calls)

    def lookup(self, layouts: Sequence, params, n_inputs: int) -> tuple:
        """The memoised tiles of a call: ``((fn, descriptor templates), ...)``."""
        key = (params, n_inputs, parallel.split_setting(), *layouts)
        try:
            weak = self._calls.get(key)
        except TypeError:  # an unhashable params object: no memo
            key = weak = None
        if weak is not None:
            hit = tuple((ref(), templates) for ref, templates in weak)
            if all(fn is not None for fn, _ in hit):
                return hit
        hit = tuple((fn, tuple(DescriptorTemplate(l) for l in lays))
                    for fn, lays in self._prepare(layouts, params, n_inputs))
        if key is not None:
            if len(self._calls) >= self.MAX_ENTRIES:
                self._calls.clear()
            self._calls[key] = tuple((_weak(fn, self._dropper(key)), templates)
                                     for fn, templates in hit)
        return hit

    def _dropper(self, key):
        """The weakref callback that removes ``key``'s entry once one of its
        functions is gone (not a newer entry under the same key)."""
        calls = self._calls

        def drop(ref):
            entry = calls.get(key)
            if entry is not None and any(r is ref for r, _ in entry):
                calls.pop(key, None)
        return drop

    def call(self, inputs: Sequence, outputs: Sequence, layouts: Sequence, params) -> None:
        run_tiles(self.lookup(layouts, params, len(inputs)), (*inputs, *outputs))


class SplitCall:
    """The tiles of one split call as one raw function (the executor's direct
    path, ``GeneratedKernel.prepare_raw``): ``raw(*addresses)`` takes each
    tile's descriptor addresses, tile after tile. At two threads (``width``,
    the thread count) the tiles are one task of the native pool
    (``native_pool.NativePool.run_tiles``): this thread and the worker take
    them one by one until none is left. At more threads they run in rounds
    of ``width`` tiles, the first of each on this thread and the others on
    the native workers (``NativePool.run``). Either way all run in turn on
    this thread when the pool is busy or missing. Tiles come from the thread
    split (``parallel.split_parts``) or from sub-calls
    (``KernelFamily.subcalls``: a 4-D attention product runs as one batched
    call per image)."""

    __slots__ = ("fns", "n_args", "width", "_addrs", "_last", "_tiles")

    def __init__(self, fns: Sequence[KernelFunction], n_args: int, width: int = 0):
        self.fns = list(fns)                       # keeps the machine code mapped
        self.n_args = n_args
        self.width = max(1, width or len(self.fns))
        self._addrs = [_fn_address(fn) for fn in self.fns]
        self._last = None    # (addrs, the first tile's call, the others' tasks): one round
        self._tiles = None   # (addrs, native_pool.Tiles): kept as long as this call

    def _dynamic(self) -> bool:
        return self.width == 2 and 2 <= len(self.fns) <= native_pool.MAX_TILES \
            and self.n_args <= native_pool.MAX_ARGS

    def _table(self, addrs) -> "native_pool.Tiles":
        if self._tiles is None or self._tiles[0] != addrs:
            n = self.n_args
            self._tiles = (addrs, native_pool.Tiles(
                [(fn, addrs[i * n:(i + 1) * n]) for i, fn in enumerate(self._addrs)]))
        return self._tiles[1]

    def native_row(self, *addrs: int):
        """This call with ``addrs`` as a row of a native run of several calls
        (the direct path, ``runtime.native_plan``): ``(function address,
        argument addresses, pool, argument slots)`` at two threads, run as
        ``native_pool.NativePool.tiles_row`` between the pool's ``hold()``
        and ``release()``; None otherwise (or without the native pool): the
        caller calls ``raw``."""
        if not self._dynamic():
            return None
        pool = native_pool.pool(1)
        if pool is None:
            return None
        fn, args = pool.tiles_row(self._table(addrs))
        return fn, args, pool, self.n_args

    def raw(self, *addrs: int) -> None:
        n, width, fns = self.n_args, self.width, self.fns
        if self._dynamic():
            pool = native_pool.pool(1)
            if pool is not None and pool.run_tiles(self._table(addrs)):
                return
            for i, fn in enumerate(fns):
                fn.raw(*addrs[i * n:(i + 1) * n])
            return
        last = self._last
        if last is not None and last[0] == addrs:
            # the direct path calls with the same descriptors every time: the
            # tasks of a one-round split are made once
            pool = native_pool.pool(len(last[2]))
            if pool is not None and pool.run(last[1], last[2]):
                return
        elif 1 < len(fns) <= width:
            head, first = addrs[:n], fns[0].raw
            rest = [(self._addrs[i], addrs[i * n:(i + 1) * n]) for i in range(1, len(fns))]
            self._last = (addrs, lambda: first(*head), rest)
        for start in range(0, len(fns), width):
            stop = min(start + width, len(fns))
            first = fns[start].raw
            head = addrs[start * n:(start + 1) * n]
            if stop - start > 1:
                pool = native_pool.pool(stop - start - 1)
                rest = [(self._addrs[i], addrs[i * n:(i + 1) * n]) for i in range(start + 1, stop)]
                if pool is not None and pool.run(lambda: first(*head), rest):
                    continue
            for i in range(start, stop):
                fns[i].raw(*addrs[i * n:(i + 1) * n])


def run_tiles(hit: tuple, storages: Sequence) -> None:
    """Call each tile of ``hit`` (``CallMemo.lookup``) on ``storages``,
    several concurrently (``compiler.codegen.parallel``): more tiles than
    threads run as one sequential group per thread."""
    if len(hit) == 1:
        fn, templates = hit[0]
        fn(*[t.bind(s) for t, s in zip(templates, storages)])
        return
    threads = parallel.num_threads()
    descs = [[t.bind(s) for t, s in zip(templates, storages)] for _, templates in hit]
    native = all(isinstance(fn, KernelFunction) for fn, _ in hit)
    if native and threads == 2 and len(hit) <= native_pool.MAX_TILES:
        # the tiles as one task, taken one by one by this thread and the worker
        pool = native_pool.pool(1)
        calls = [(_fn_address(fn), [_addressof(d) for d in ds]) for (fn, _), ds in zip(hit, descs)]
        if pool is not None and all(len(a) <= native_pool.MAX_ARGS for _, a in calls) \
                and pool.run_tiles(native_pool.Tiles(calls)):
            return
    if len(hit) <= threads and native:
        # one tile per thread: the others run on native workers (no GIL, no
        # thread wake-up while they are polling)
        pool = native_pool.pool(len(hit) - 1)
        fn0, d0 = hit[0][0], descs[0]
        rest = [(_fn_address(fn), [_addressof(d) for d in ds])
                for (fn, _), ds in zip(hit[1:], descs[1:])]
        if pool is not None and pool.run(lambda: fn0(*d0), rest):
            return
    calls = [lambda fn=fn, ds=ds: fn(*ds) for (fn, _), ds in zip(hit, descs)]
    if len(calls) > threads:
        groups = [calls[start:start + length]
                  for start, length in parallel.chunks(len(calls), threads)]
        calls = [lambda group=group: [c() for c in group] for group in groups]
    parallel.run_all(calls)


def last_blocks(mr: int, cout: int, least: int) -> tuple[int, int] | None:
    """(The cpu conv schedules' and the Winograd kernel's: target-neutral.)
    Where the ``mr``-channel tiles of ``cout`` channels leave a remainder
    of fewer than ``least`` channels (``least`` 0: never): ``(k, h)``, the
    channels from ``k`` on (the last whole tile and the remainder) tiled by
    ``h`` = half of them, rounded up (AVX2, mr 6: 32 channels as 4 x 6 + 2 x
    4 instead of 5 x 6 + 2; each pixel's sum unchanged); else None."""
    r = cout % mr
    if not r or r >= least or cout < mr:
        return None
    return cout - mr - r, -(-(mr + r) // 2)
