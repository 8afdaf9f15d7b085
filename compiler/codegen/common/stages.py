"""MLIR stage helpers shared by the per-target pipelines.

A stage is a named pass pipeline. A stage that fails raises
``PipelineError`` after writing its input IR under the reproducer directory
(``compiler.reproducer.reproducer_dir()``); each target passes its own
``fail(stage, text, why, *rerun_args)`` so the message names that target's
pipeline and the command that reruns it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import shlex
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from compiler.errors import CodegenError, PipelineError
from compiler.mlir import MLIRError, arith, bufferization, func, ir, memref, passmanager, run_passes
# Imported for its side effect: the bindings find linalg's op classes in
# ``compiler.mlir.linalg`` when code here reads a parsed op's ``owner``,
# instead of importing the ``dialects.linalg`` package (0.07 s of CPU, once per
# process: a compile worker that never built a linalg op paid it at its first
# kernel; docs/compile-at-scale.md).
from compiler.mlir import linalg  # noqa: F401
from compiler.reproducer import reproducer_dir

Fail = Callable[..., PipelineError]


def pipeline_text(passes: Sequence[str]) -> str:
    """The textual pass pipeline ``builtin.module(p1, p2, ...)``."""
    return f"builtin.module({', '.join(passes)})"


@dataclasses.dataclass(frozen=True)
class Stage:
    """One MLIR stage of a pipeline: a name and its pass list."""

    name: str
    passes: tuple[str, ...]

    @property
    def pipeline(self) -> str:
        return pipeline_text(self.passes)


def write_reproducer(text: str, stage: str, suffix: str = ".mlir") -> Path:
    """Write ``text`` to the reproducer dir; the name is derived from its
    content so the same failure does not pile up files."""
    d = reproducer_dir()
    d.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = d / f"{stage}-{digest}{suffix}"
    path.write_text(text)
    return path.resolve()


def stage_failure(title: str, tool: str, stage: str, text: str, why: str, *args: str,
                  suffix: str = ".mlir", prefix: str = "") -> PipelineError:
    """The ``PipelineError`` of a failed stage: ``{title} stage '{stage}'
    failed: {why}``, the reproducer path and ``{tool} <file> {args}``."""
    path = write_reproducer(text, f"{prefix}{stage}", suffix)
    command = " ".join([tool, shlex.quote(str(path)), *args])
    return PipelineError(f"{title} stage '{stage}' failed: {why}\n"
                         f"  reproducer: {path}\n  rerun with: {command}")


def _default_fail(stage: str, text: str, why: str, *args: str, suffix: str = ".mlir"):
    # Any target's stage runner reruns a plain pass pipeline (--pipeline=...).
    return stage_failure("codegen pipeline", "python -m compiler.codegen.cpu", stage, text, why,
                         *args, suffix=suffix)


def parse_module(text: str, ctx: "ir.Context", fail: Optional[Fail] = None) -> "ir.Module":
    """Parse linalg-on-tensors text in ``ctx``; ``fail``'s PipelineError
    (with a reproducer) on malformed or unregistered IR."""
    try:
        with ctx:
            return ir.Module.parse(text)
    except MLIRError as e:
        raise (fail or _default_fail)("parse", text, str(e), "--pipeline='builtin.module()'") \
            from None


def run_stage(module: "ir.Module", stage: Stage, fail: Optional[Fail] = None) -> None:
    """Run one MLIR stage in place; ``fail``'s PipelineError (with a
    reproducer of the stage's input) on failure."""
    before = str(module)
    try:
        pm = passmanager.PassManager.parse(stage.pipeline, module.context)
        if not run_passes(pm, module.operation):  # the GIL released while it runs
            pm.run(ir.Module.parse(before, module.context).operation)  # its MLIRError
            raise ValueError("the pass pipeline failed (the bindings' rerun did not)")
    except (MLIRError, ValueError) as e:
        raise (fail or _default_fail)(stage.name, before, str(e),
                                      f"--pipeline={shlex.quote(stage.pipeline)}") from None


def _fully_dynamic_memref(t: "ir.RankedTensorType") -> "ir.MemRefType":
    dyn = ir.ShapedType.get_dynamic_stride_or_offset()
    layout = ir.StridedLayoutAttr.get(dyn, [dyn] * t.rank)
    return ir.MemRefType.get(t.shape, t.element_type, layout=layout)


#: Attribute on a ``math.exp`` whose operand is never above 0 (or NaN): the
#: scores less their row maximum in FlashAttn. The CPU's math expansion
#: (``fastmath``) then leaves out the upper clamp and the denormal scaling.
EXP_NONPOSITIVE_ATTR = "fuelc.exp_nonpositive"


#: Function attribute listing the entry's arguments (inputs then out-params)
#: that every call passes row-major (contiguous, any offset): they bufferize
#: with those static strides (``contiguous_layout``), so a reshape of them is
#: a view, not a copy (the pointwise convolution's [N,C,H,W] <-> [N,C,H*W]).
CONTIGUOUS_ATTR = "fuelc.contiguous_args"
#: Function attribute listing the entry's arguments that every call passes
#: with row-major planes (their last two axes) at any outer strides: a
#: one-image pointwise Conv2D's tile of pixel rows, whose [N,C,H,W] <->
#: [N,C,H*W] reshapes are views too (``contiguous_layout(shape, planes=True)``).
PLANES_ATTR = "fuelc.plane_args"


def contiguous_layout(shape, planes: bool = False) -> "ir.StridedLayoutAttr":
    """The row-major strides of static ``shape``, with a dynamic offset;
    ``planes``: those of the last two axes only, the outer ones dynamic."""
    dyn = ir.ShapedType.get_dynamic_stride_or_offset()
    strides, step = [], 1
    for d in reversed(list(shape)):
        strides.append(step)
        step *= d
    strides = strides[::-1]
    if planes:
        strides = [dyn] * (len(strides) - 2) + strides[-2:]
    return ir.StridedLayoutAttr.get(dyn, strides)


def _static_strides(t) -> bool:
    """Whether ``t``'s row-major strides are static: every extent but the
    outermost (a run-time batch) is."""
    return not any(t.is_dynamic_dim(i) for i in range(1, t.rank))


def _listed(f, attr: str) -> set[int]:
    """The argument positions function attribute ``attr`` lists (removed)."""
    if attr not in f.attributes:
        return set()
    listed = {int(ir.IntegerAttr(a).value) for a in ir.ArrayAttr(f.attributes[attr])}
    del f.attributes[attr]
    return listed


def _contiguous_args(f, n_inputs: int) -> dict[int, bool]:
    """The arguments ``CONTIGUOUS_ATTR`` and ``PLANES_ATTR`` list (removed
    from ``f``); each listed static-shaped input gets
    ``bufferization.buffer_layout``, a listed row-major input with run-time
    inner extents its reshapes as views (``_collapse_in_place``). Returns the
    listed out-params (their positions among the results), each mapped to
    whether only its planes are row-major."""
    planes = _listed(f, PLANES_ATTR)
    listed = _listed(f, CONTIGUOUS_ATTR) | planes
    if not listed:
        return {}
    block = f.regions[0].blocks[0]
    old = ir.ArrayAttr(f.attributes["arg_attrs"]) if "arg_attrs" in f.attributes else None
    attrs = []
    for i, arg in enumerate(block.arguments):
        entry = None if old is None else ir.DictAttr(old[i])
        d = {} if entry is None else {entry[j].name: entry[j].attr for j in range(len(entry))}
        t = arg.type
        if i in listed and isinstance(t, ir.RankedTensorType) and _static_strides(t):
            d["bufferization.buffer_layout"] = contiguous_layout(t.shape, i in planes)
        elif i in listed and i not in planes and isinstance(t, ir.RankedTensorType):
            _collapse_in_place(arg)
        attrs.append(ir.DictAttr.get(d))
    f.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
    return {i - n_inputs: i in planes for i in listed if i >= n_inputs}


def _row_major_view(buf, groups, shape, elt):
    """The row-major memref ``buf`` (run-time strides) collapsed by ``groups``
    to ``shape`` (ints, dynamic marked): a ``memref.reinterpret_cast`` with
    each group's size the product of its extents and its stride that of its
    last axis. Valid only for a buffer every call passes row-major
    (``CONTIGUOUS_ATTR``): memref.collapse_shape cannot prove that from run-time
    strides, and bufferization would copy the tensor instead."""
    meta = memref.ExtractStridedMetadataOp(buf)
    base, offset = meta.results[0], meta.results[1]
    rank = ir.MemRefType(buf.type).rank
    sizes, strides = meta.results[2:2 + rank], meta.results[2 + rank:2 + 2 * rank]
    dyn = ir.ShapedType.get_dynamic_stride_or_offset()
    new_sizes = []   # the run-time ones; the static ones are in ``shape``
    for g, extent in zip(groups, shape):
        if extent == ir.ShapedType.get_dynamic_size():
            n = sizes[g[0]]
            for i in g[1:]:
                n = arith.muli(n, sizes[i])
            new_sizes.append(n)
    # row-major: the last axis's stride is 1
    new_strides = [strides[g[-1]] for g in groups[:-1]]
    static_strides = [dyn] * (len(groups) - 1) + [1]
    view = ir.MemRefType.get(shape, elt, layout=ir.StridedLayoutAttr.get(dyn, static_strides))
    return memref.ReinterpretCastOp(view, base, [offset], new_sizes, new_strides, [dyn],
                                    shape, static_strides).result


def _groups(op) -> list:
    return [[int(ir.IntegerAttr(i).value) for i in ir.ArrayAttr(g)]
            for g in ir.ArrayAttr(op.attributes["reassociation"])]


def _collapse_in_place(arg) -> None:
    """Each ``tensor.collapse_shape`` of the row-major input ``arg`` (run-time
    inner extents: no static layout for it) read through a view of its buffer
    (``_row_major_view``), not a collapsed copy: the pointwise convolution of a
    run-time image size reading x ``[N, C, H, W]`` as ``[N, C, H*W]``."""
    t = ir.RankedTensorType(arg.type)
    for use in list(arg.uses):
        op = use.owner
        op = getattr(op, "operation", op)
        if op.name != "tensor.collapse_shape":
            continue
        res = ir.RankedTensorType(op.results[0].type)
        with ir.InsertionPoint(op), op.location:
            buf = bufferization.ToBufferOp(_fully_dynamic_memref(t), arg, read_only=True).result
            view = _row_major_view(buf, _groups(op), list(res.shape), res.element_type)
            new = bufferization.ToTensorOp(res, view, restrict=True).result
        op.results[0].replace_all_uses_with(new)
        op.erase()


def _write_through_reshape(value, dest):
    """A result that is the ``tensor.expand_shape`` of ``v``, written to a
    row-major out-param: ``v`` written into the out-param's collapsed view
    instead (bufferization would otherwise compute ``v`` in a buffer of its
    own and copy it out)."""
    owner = getattr(value.owner, "operation", value.owner)  # an OpView, or a Block
    if not isinstance(owner, ir.Operation) or owner.name != "tensor.expand_shape":
        return value, dest
    src = owner.operands[0]
    st, dt = ir.RankedTensorType(src.type), ir.MemRefType(dest.type)
    if not _static_strides(st):   # run-time inner extents: a view by their run-time strides
        return src, _row_major_view(dest, _groups(owner), list(st.shape), st.element_type)
    groups = owner.attributes["reassociation"]
    strides = list(ir.StridedLayoutAttr(dt.layout).strides)
    ends = [int(ir.IntegerAttr(ir.ArrayAttr(g)[len(ir.ArrayAttr(g)) - 1]).value)
            for g in ir.ArrayAttr(groups)]
    view = ir.MemRefType.get(st.shape, st.element_type, layout=ir.StridedLayoutAttr.get(
        ir.ShapedType.get_dynamic_stride_or_offset(), [strides[e] for e in ends]))
    return src, memref.CollapseShapeOp(view, dest, groups).result


#: Marks a ``tensor.collapse_shape`` result whose source a kernel writes into
#: the expanded view of its out-param (``_write_through_collapse``).
WRITE_THROUGH_ATTR = "fuelc.write_through"


def _write_through_collapse(value, dest):
    """A result that is a ``WRITE_THROUGH_ATTR`` ``tensor.collapse_shape`` of
    ``v`` (at most one run-time extent per collapsed group: its size is the
    out-param's over the group's static extents): ``v`` written into the
    out-param's expanded view
    (valid for any strides: each collapsed group is split, not merged), not
    computed in a buffer of its own and copied out (FusedLinear's epilogue
    kernel: ``[M, P, nr]`` -> ``[M, N]``)."""
    owner = getattr(value.owner, "operation", value.owner)
    if not isinstance(owner, ir.Operation) or owner.name != "tensor.collapse_shape" \
            or WRITE_THROUGH_ATTR not in owner.attributes:
        return value, dest
    src = owner.operands[0]
    st = ir.RankedTensorType(src.type)
    groups = [[int(ir.IntegerAttr(i).value) for i in ir.ArrayAttr(g)]
              for g in ir.ArrayAttr(owner.attributes["reassociation"])]
    sizes = []  # a run-time extent: the out-param's extent over the group's static ones
    for k, g in enumerate(groups):
        dyn_dims = [i for i in g if st.is_dynamic_dim(i)]
        if len(dyn_dims) > 1:
            return value, dest
        if dyn_dims:
            index = ir.IndexType.get()
            extent = memref.dim(dest, arith.constant(index, k))
            rest = math.prod(st.shape[i] for i in g if i != dyn_dims[0])
            sizes.append(extent if rest == 1 else
                         arith.divui(extent, arith.constant(index, rest)))
    dyn = ir.ShapedType.get_dynamic_stride_or_offset()
    view = ir.MemRefType.get(st.shape, st.element_type,
                             layout=ir.StridedLayoutAttr.get(dyn, [dyn] * st.rank))
    return src, memref.ExpandShapeOp(view, dest, owner.attributes["reassociation"], sizes,
                                     list(st.shape)).result


#: Marks a ``memref.alloc`` that a kernel writes its result into in place and
#: returns as ``bufferization.to_tensor`` (``lowering.conv_spatial._output``):
#: the entry's out-param takes its place (``_output_in_place``).
OUTPUT_BUFFER_ATTR = "fuelc.output_buffer"
#: The ops an ``OUTPUT_BUFFER_ATTR`` buffer may reach for its out-param to
#: replace it: loops carrying it, writes, reads, extents, its tensor.
_IN_PLACE_USERS = {"scf.for", "scf.yield", "vector.transfer_write", "vector.transfer_read",
                   "memref.store", "memref.load", "memref.dim", "bufferization.to_tensor"}


def _output_in_place(value, dest) -> bool:
    """Where the result ``value`` is the ``bufferization.to_tensor`` of an
    ``OUTPUT_BUFFER_ATTR`` buffer (and that is its only tensor), the
    out-param ``dest`` replaces the buffer: its writes go to the caller's
    memory, the loops carry ``dest``'s type. Returns whether it did (else
    the result is materialized into ``dest``, a copy)."""
    owner = getattr(value.owner, "operation", value.owner)
    if not isinstance(owner, ir.Operation) or owner.name != "bufferization.to_tensor":
        return False
    alloc = getattr(owner.operands[0].owner, "operation", owner.operands[0].owner)
    if not isinstance(alloc, ir.Operation) or OUTPUT_BUFFER_ATTR not in alloc.attributes:
        return False
    carried, todo = [], [alloc.results[0]]   # the buffer and the loop values carrying it
    while todo:
        v = todo.pop()
        carried.append(v)
        for use in v.uses:
            op = getattr(use.owner, "operation", use.owner)
            if op.name not in _IN_PLACE_USERS:
                return False
            if op.name == "bufferization.to_tensor" and op != owner:
                return False
            if op.name == "scf.for" and use.operand_number >= 3:   # an init: its block argument and result
                k = use.operand_number - 3
                todo += [op.regions[0].blocks[0].arguments[k + 1], op.results[k]]
    for v in carried:
        v.set_type(dest.type)
    alloc.results[0].replace_all_uses_with(dest)
    alloc.erase()
    return True


def prepare_entries(module: "ir.Module", entry_names: Iterable[str], *,
                    identity_outputs: bool = False) -> None:
    """Give each entry the C interface and turn its tensor results into
    trailing out-params (fully dynamic strided memrefs; identity-layout
    memrefs with ``identity_outputs``) written through
    ``bufferization.materialize_in_destination``. Raises CodegenError for a
    missing entry or a non-tensor result."""
    funcs = {}
    for op in module.body.operations:
        if op.operation.name == "func.func":
            funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op
    with module.context, ir.Location.unknown(module.context):
        for name in entry_names:
            f = funcs.get(name)
            if f is None:
                raise CodegenError(f"entry function @{name} is not in the module; it defines "
                                   f"{', '.join('@' + n for n in funcs) or 'no functions'}")
            if len(f.regions[0].blocks) == 0:
                raise CodegenError(f"entry function @{name} is a declaration; it needs a body")
            ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
            results = list(ftype.results)
            for t in results:
                if not isinstance(t, ir.RankedTensorType):
                    raise CodegenError(f"entry function @{name} returns {t}; generated "
                                       "kernels return ranked tensors only")
            row_major = _contiguous_args(f, len(ftype.inputs))
            out_types = [ir.MemRefType.get(t.shape, t.element_type) if identity_outputs
                         else ir.MemRefType.get(t.shape, t.element_type,
                                                layout=contiguous_layout(t.shape, row_major[i]))
                         if i in row_major and _static_strides(t)
                         else _fully_dynamic_memref(t) for i, t in enumerate(results)]
            entry_block = f.regions[0].blocks[0]
            out_args = [entry_block.add_argument(t, ir.Location.unknown()) for t in out_types]
            for block in f.regions[0].blocks:
                ret = block.operations[len(block.operations) - 1]
                if ret.operation.name != "func.return":
                    continue
                with ir.InsertionPoint(ret):
                    for i, (value, dest) in enumerate(zip(ret.operands, out_args)):
                        if _output_in_place(value, dest):
                            continue
                        if i in row_major:
                            value, dest = _write_through_reshape(value, dest)
                        value, dest = _write_through_collapse(value, dest)
                        bufferization.MaterializeInDestinationOp(
                            None, value, dest, restrict=True, writable=True)
                    func.ReturnOp([])
                ret.operation.erase()
            f.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get(list(ftype.inputs) + out_types, []))
            if "arg_attrs" in f.attributes:  # one dictionary per argument
                old = ir.ArrayAttr(f.attributes["arg_attrs"])
                f.attributes["arg_attrs"] = ir.ArrayAttr.get(
                    [old[i] for i in range(len(old))] + [ir.DictAttr.get({}) for _ in out_types])
            if "res_attrs" in f.attributes:
                del f.attributes["res_attrs"]
            f.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
