"""The CUDA pipeline: linalg on tensors → PTX (and a cubin) for a cuda ``Target``.

Stages:

  parse, prepare  as on the CPU, but the results become identity-layout
                  (dense row-major) out-params: kernels take bare pointers
  bufferize       one-shot bufferization with identity layouts (static shapes)
  to-gpu          linalg → scf.parallel, tiled (``tile_sizes``), mapped to
                  blocks (outer loops) and threads (tiles), the innermost
                  dimension on x so neighbouring threads touch neighbouring
                  elements; then ``gpu.launch`` → outlined ``gpu.func`` kernels
  to-nvvm         each ``gpu.module`` → the LLVM/NVVM dialects (bare pointers)
  translate       LLVM IR per device module, kernels renamed to their module
  ptx             llvmlite NVPTX for the target's ``sm_XX`` (libdevice linked,
                  non-kernels internal), one PTX module with every ``.entry``
  cubin           ``ptxas -arch=sm_XX`` when ptxas is on PATH

The host function left after ``to-gpu`` may only allocate temporaries and
launch kernels; it is read into a ``runtime.cuda.program.KernelProgram``
(launch geometry and argument ABI) and never compiled. A failing MLIR stage
raises PipelineError with a reproducer and the command
``python -m compiler.codegen.cuda <file> --pipeline='<stage pipeline>'``.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import shlex
import sys
from pathlib import Path
from typing import Sequence

from compiler.errors import CodegenError, PipelineError
from compiler.mlir import MLIRError, ir, passmanager
from compiler.mlir import llvm as llvm_dialect
# the gpu dialect's op classes: ``read_host`` reads a launch's geometry and
# operands by name (gpu ops are generic views until this import, compiler/mlir.py)
from compiler.mlir import gpu as _gpu_op_classes  # noqa: F401
from compiler.codegen.common.llvm_text import fixup_ir_text
from compiler.codegen.common.stages import (parse_module, pipeline_text, prepare_entries,
                                            write_reproducer)
from compiler.codegen.cuda import ptx as ptx_codegen
from compiler.codegen.cuda.strategy import STRATEGIES, apply_strategies
from compiler.targets import TargetError
from runtime.cuda.program import Buffer, KernelProgram, Launch

# Bump when a change here changes generated code.
PIPELINE_VERSION = "cuda-3"

BUFFERIZE = (
    "eliminate-empty-tensors",
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map}",
    "canonicalize",
)
#: Named ops become linalg.generic so ``parallel_dims_first`` can reorder
#: their loops.
GENERALIZE = ("func.func(linalg-generalize-named-ops)",)
TO_LOOPS = ("func.func(convert-linalg-to-parallel-loops)",)
OUTLINE = ("func.func(convert-parallel-loops-to-gpu)", "lower-affine", "canonicalize",
           "gpu-launch-sink-index-computations", "gpu-kernel-outlining", "convert-scf-to-cf",
           "canonicalize", "cse")
TO_NVVM = ("gpu.module(expand-strided-metadata, lower-affine, "
           "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1}, canonicalize, "
           "cse, reconcile-unrealized-casts)",)

#: Host ops a kernel program may contain (anything else is work left on the host).
HOST_OPS = frozenset({"arith.constant", "memref.alloc", "memref.dealloc", "gpu.launch_func",
                      "func.return"})

_PROCESSORS = ("block_x", "block_y", "block_z", "thread_x", "thread_y", "thread_z")


def tile_sizes(max_rank: int) -> tuple[int, ...]:
    """Tile sizes (threads per block along the leading loop dims) for a
    kernel whose widest parallel loop has ``max_rank`` dims: 256 threads
    along one dim, an 8x32 tile for two and more (innermost 32 wide)."""
    if max_rank <= 1:
        return (256,)
    return (1,) * (max_rank - 2) + (8, 32)


@dataclasses.dataclass
class CudaLowering:
    """The artefacts of one compilation."""

    program: KernelProgram
    llvm_ir: str
    stages: dict[str, str]  # stage name -> IR after it (when keep_ir)


def _command(path: Path, *args: str) -> str:
    return " ".join(["python", "-m", "compiler.codegen.cuda", shlex.quote(str(path)), *args])


def _fail(stage: str, text: str, why: str, *args: str, suffix: str = ".mlir") -> PipelineError:
    path = write_reproducer(text, f"cuda-{stage}", suffix)
    return PipelineError(f"CUDA pipeline stage '{stage}' failed: {why}\n"
                         f"  reproducer: {path}\n  rerun with: {_command(path, *args)}")


def _run(module: "ir.Module", name: str, passes: Sequence[str]) -> None:
    before = str(module)
    text = pipeline_text(passes)
    try:
        passmanager.PassManager.parse(text, module.context).run(module.operation)
    except (MLIRError, ValueError) as e:
        raise _fail(name, before, str(e), f"--pipeline={shlex.quote(text)}") from None


def _walk(op, fn) -> None:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                fn(inner.operation)


def _parallel_loops(op, depth: int, out: list) -> None:
    def visit(inner):
        if inner.name == "scf.parallel":
            out.append((inner, depth))
            _parallel_loops(inner, depth + 1, out)
        else:
            _parallel_loops(inner, depth, out)
    _walk(op, visit)


def max_parallel_rank(module: "ir.Module") -> int:
    loops: list = []
    _parallel_loops(module.operation, 0, loops)
    return max((len(op.operands) // 3 for op, _ in loops), default=0)


_MEMREF_COPY = re.compile(r"memref\.copy (%[\w#]+), (%[\w#]+) : (memref<[^>]*>(?:>)?) to "
                          r"(memref<[^>]*>(?:>)?)$", re.M)


def copies_to_linalg(module: "ir.Module") -> "ir.Module":
    """``module`` with every ``memref.copy`` (a copy bufferization made
    between buffers or views) rewritten as ``linalg.copy``, which becomes
    a parallel loop nest and so a kernel (``memref.copy`` would stay a
    host call of the MLIR runtime library)."""
    text = str(module)
    new, n = _MEMREF_COPY.subn(r"linalg.copy ins(\1 : \3) outs(\2 : \4)", text)
    if n != text.count("memref.copy"):
        raise CodegenError("a memref.copy the CUDA pipeline could not rewrite as linalg.copy "
                           "is left after bufferization")
    return ir.Module.parse(new, module.context) if n else module


def parallel_dims_first(module: "ir.Module") -> int:
    """Interchange the loops of every ``linalg.generic`` whose reduction
    dims come before a parallel dim (a reduction over a leading axis, a
    scan) so the parallel dims are outermost, in their order, then the
    reduction dims in theirs: the parallel loops map to threads and each
    thread runs the reduced dims as a serial loop. The order within the
    reduction dims is kept, so the accumulation order is the same. Returns
    how many ops changed."""
    changed = 0

    def visit(op):
        nonlocal changed
        if op.name != "linalg.generic":
            return ir.WalkResult.ADVANCE
        kinds = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
        perm = sorted(range(len(kinds)), key=lambda i: "reduction" in kinds[i])
        if perm == list(range(len(kinds))):
            return ir.WalkResult.ADVANCE
        inv = [perm.index(i) for i in range(len(perm))]
        to_new = ir.AffineMap.get_permutation(inv)  # old dim i -> new dim inv[i]
        maps = []
        for a in ir.ArrayAttr(op.attributes["indexing_maps"]):
            m = ir.AffineMapAttr(a).value
            maps.append(ir.AffineMapAttr.get(ir.AffineMap.get(
                m.n_dims, m.n_symbols, [e.compose(to_new) for e in m.results])))
        op.attributes["indexing_maps"] = ir.ArrayAttr.get(maps)
        op.attributes["iterator_types"] = ir.ArrayAttr.get(
            [ir.ArrayAttr(op.attributes["iterator_types"])[i] for i in perm])
        i64 = ir.IntegerType.get_signless(64)
        for inner in op.regions[0].blocks[0].operations:
            if inner.operation.name == "linalg.index":
                old = ir.IntegerAttr(inner.attributes["dim"]).value
                inner.attributes["dim"] = ir.IntegerAttr.get(i64, inv[old])
        changed += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return changed


#: Ops that only make a view of a buffer; ``sink_views`` moves them to
#: their uses, so they run where the view is read (in a kernel).
VIEW_OPS = frozenset({"memref.subview", "memref.expand_shape", "memref.collapse_shape",
                      "memref.cast", "memref.reinterpret_cast", "memref.transpose"})


def sink_views(module: "ir.Module") -> int:
    """Clone every top-level view op right before each of its users and
    erase it: a view used by several loop nests then lives inside each
    (and is outlined with it) instead of staying host code. Returns how
    many views were sunk."""
    sunk = 0
    for fn in module.body.operations:
        if fn.operation.name != "func.func" or not len(fn.regions[0].blocks):
            continue
        views = [op.operation for op in fn.regions[0].blocks[0].operations
                 if op.operation.name in VIEW_OPS]
        for view in reversed(views):  # a view of a view: its users are sunk first
            users = {id(u.owner): u.owner.operation for u in view.result.uses}
            for user in users.values():
                clone = view.clone(ir.InsertionPoint(user))
                user.operation.replace_uses_of_with(view.result, clone.result)
            view.erase()
            sunk += 1
    return sunk


_HOST_KEEP = frozenset({"scf.parallel", "gpu.launch_func", "memref.alloc", "memref.dealloc", "arith.constant",
                        "func.return"})


def wrap_serial_code(module: "ir.Module") -> int:
    """Put every run of top-level ops that is not a parallel loop (the
    serial loop nest of a full reduction or a scan, the scalar code of a
    rank-0 op) into a one-iteration ``scf.parallel``, so it runs as a
    single-thread kernel instead of staying on the host. Returns how many."""
    wrapped = 0
    index = ir.IndexType.get()
    for fn in module.body.operations:
        if fn.operation.name != "func.func" or not len(fn.regions[0].blocks):
            continue
        block = fn.regions[0].blocks[0]
        runs, current = [], []
        for op in block.operations:
            if op.operation.name in _HOST_KEEP:
                if current:
                    runs.append(current)
                current = []
            else:
                current.append(op.operation)
        if current:
            runs.append(current)
        for run in runs:
            with ir.InsertionPoint(run[0]):
                zero = ir.Operation.create("arith.constant", [index],
                                           attributes={"value": ir.IntegerAttr.get(index, 0)})
                one = ir.Operation.create("arith.constant", [index],
                                          attributes={"value": ir.IntegerAttr.get(index, 1)})
                loop = ir.Operation.create(
                    "scf.parallel", [], [zero.result, one.result, one.result], regions=1,
                    attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 1, 0])})
            body = loop.regions[0].blocks.append(index)
            with ir.InsertionPoint(body):
                ir.Operation.create("scf.reduce", [], [], regions=0,
                                    attributes={} )
            terminator = body.operations[0]
            for op in run:
                op.move_before(terminator)
            wrapped += 1
    return wrapped


def map_loops(module: "ir.Module") -> None:
    """Give every tiled ``scf.parallel`` a GPU mapping: the outer loop of a
    nest to blocks, the loop directly inside it to threads, the innermost
    dimension on x; deeper loops and dims beyond three stay sequential."""
    ctx = module.context
    loops: list = []
    _parallel_loops(module.operation, 0, loops)
    for op, depth in loops:
        rank = len(op.operands) // 3
        procs = []
        for i in range(rank):
            j = rank - 1 - i
            procs.append(_PROCESSORS[3 * depth + j] if depth < 2 and j < 3 else "sequential")
        op.attributes["mapping"] = ir.ArrayAttr.get([ir.Attribute.parse(
            f"#gpu.loop_dim_map<processor = {p}, map = (d0) -> (d0), bound = (d0) -> (d0)>", ctx)
            for p in procs])


# -- the host function → KernelProgram ------------------------------------------------
_ITEMSIZE = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i1": 1, "i8": 1, "i16": 2, "i32": 4,
             "i64": 8, "index": 8}


def _buffer(t: "ir.Type", where: str) -> Buffer:
    try:
        m = ir.MemRefType(t)
    except ValueError:
        raise CodegenError(f"{where}: {t} is not a memref") from None
    if not m.has_static_shape:
        raise CodegenError(f"{where}: {t} has a dynamic shape; CUDA kernels are compiled for "
                           "static shapes")
    if (not isinstance(m.layout, ir.AffineMapAttr)
            or m.layout.value != ir.AffineMap.get_identity(m.rank)):
        raise CodegenError(f"{where}: {t} is not dense row-major")
    elt = str(m.element_type)
    if elt not in _ITEMSIZE:
        raise CodegenError(f"{where}: element type {elt} has no CUDA buffer mapping")
    return Buffer(tuple(m.shape), elt, _ITEMSIZE[elt])


def _const(value: "ir.Value") -> int | None:
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "arith.constant":
        return None
    return ir.IntegerAttr(owner.attributes["value"]).value


def read_host(module: "ir.Module", entry: str) -> tuple[list[Buffer], list[Buffer], list[Launch]]:
    """(params, temps, launches) of ``entry``'s host function after the
    to-gpu stage. CodegenError when host code is left that is not an
    allocation or a launch with constant geometry."""
    fn = next((op for op in module.body.operations if op.operation.name == "func.func"
               and ir.StringAttr(op.attributes["sym_name"]).value == entry), None)
    if fn is None:
        raise CodegenError(f"entry function @{entry} is not in the module")
    block = fn.regions[0].blocks[0]
    params = [_buffer(a.type, f"@{entry} argument {i}") for i, a in enumerate(block.arguments)]
    left = sorted({op.operation.name for op in block.operations} - HOST_OPS)
    if left or len(fn.regions[0].blocks) != 1:
        raise CodegenError(
            f"@{entry}: host code left after mapping to the GPU ({', '.join(left) or 'branches'}); "
            "only loops linalg turns into scf.parallel run on a CUDA device (a full reduction "
            "or a copy between views has no parallel loop to map)")
    temps: list[Buffer] = []
    allocs: dict = {}
    launches: list[Launch] = []
    for op in block.operations:
        name = op.operation.name
        if name == "memref.alloc":
            allocs[op.result] = len(temps)
            temps.append(_buffer(op.result.type, f"@{entry} temporary"))
        elif name == "gpu.launch_func":
            dims = [op.gridSizeX, op.gridSizeY, op.gridSizeZ,
                    op.blockSizeX, op.blockSizeY, op.blockSizeZ]
            vals = [_const(v) for v in dims]
            shared = op.dynamicSharedMemorySize
            shared_v = 0 if shared is None else _const(shared)
            if None in vals or shared_v is None:
                raise CodegenError(f"@{entry}: a launch of {op.attributes['kernel']} has a "
                                   "grid or block size that is not a constant")
            args = []
            for v in op.kernelOperands:
                if isinstance(v.owner, ir.Block):
                    args.append(("param", v.arg_number))
                elif v in allocs:
                    args.append(("temp", allocs[v]))
                elif _const(v) is not None:
                    args.append(("i64", _const(v)))
                else:
                    raise CodegenError(f"@{entry}: kernel operand {v} of a launch is neither a "
                                       "parameter, a temporary nor a constant")
            kernel = ir.SymbolRefAttr(op.attributes["kernel"]).value[0]
            launches.append(Launch(kernel, tuple(vals[:3]), tuple(vals[3:]), shared_v,
                                   tuple(args)))
    return params, temps, launches


_TRANSLATABLE = ("llvm.", "nvvm.", "gpu.module", "builtin.module")


def _op_names(op) -> set[str]:
    names: set[str] = set()

    def visit(inner):
        names.add(inner.name)
        return ir.WalkResult.ADVANCE

    op.operation.walk(visit)
    return names


def device_modules(module: "ir.Module") -> list[tuple[str, str]]:
    """(kernel name, LLVM IR text) per ``gpu.module`` after to-nvvm; each
    kernel is renamed to its module's name (unique in the PTX)."""
    out = []
    for op in module.body.operations:
        if op.operation.name != "gpu.module":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        body = []
        for inner in op.regions[0].blocks[0].operations:
            if "nvvm.kernel" in inner.attributes or "gpu.kernel" in inner.attributes:
                inner.attributes["sym_name"] = ir.StringAttr.get(name, module.context)
            body.append(str(inner))
        text = "module {\n" + "\n".join(body) + "\n}"
        left = sorted({n for n in _op_names(op) if not n.startswith(_TRANSLATABLE)})
        if left:  # translation would crash the process on them
            raise _fail("translate", text, f"ops not lowered to LLVM/NVVM remain in the device "
                        f"code: {', '.join(left)}", "--translate")
        try:
            dev = ir.Module.parse(text, module.context)
            out.append((name, llvm_dialect.translate_module_to_llvmir(dev.operation)))
        except (MLIRError, RuntimeError) as e:
            raise _fail("translate", text, str(e), "--translate") from None
    return out


def _target(target):
    from compiler.targets import parse_target
    t = parse_target("cuda" if target is None else target)
    if t.kind != "cuda":
        raise CodegenError(f"the CUDA pipeline compiles for cuda targets, not {t}")
    return t


def lower(module_or_text, entry_names: Sequence[str], *, target=None, keep_ir: bool = False,
          assemble: bool | None = None) -> CudaLowering:
    """Run every stage for ``target`` (one entry). ``assemble``: run ptxas
    (default: when it is on PATH). Raises PipelineError / CodegenError."""
    target = _target(target)
    entry_names = list(entry_names)
    if len(entry_names) != 1:
        raise CodegenError(f"the CUDA pipeline compiles one entry per module, got {entry_names}")
    text = module_or_text if isinstance(module_or_text, str) else str(module_or_text)
    ctx = ir.Context()
    module = parse_module(text, ctx, _fail)
    kept: dict[str, str] = {}
    with ctx, ir.Location.unknown():
        try:
            prepare_entries(module, entry_names, identity_outputs=True)
        except MLIRError as e:
            raise _fail("prepare", text, str(e), "--entry", entry_names[0]) from None
        _run(module, "bufferize", BUFFERIZE)
        module.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
        module = copies_to_linalg(module)
        _run(module, "generalize", GENERALIZE)
        parallel_dims_first(module)
        strategies = apply_strategies(module, entry_names[0])
        if keep_ir:
            kept["strategies"] = "\n".join(f"{k} {s}" for k, s in strategies)
        _run(module, "to-loops", TO_LOOPS)
        sink_views(module)
        wrap_serial_code(module)
        sizes = ",".join(map(str, tile_sizes(max_parallel_rank(module))))
        _run(module, "tile", (f"func.func(scf-parallel-loop-tiling{{parallel-loop-tile-sizes="
                              f"{sizes} no-min-max-bounds=true}})",))
        map_loops(module)
        _run(module, "to-gpu", OUTLINE)
        if keep_ir:
            kept["gpu"] = str(module)
        params, temps, launches = read_host(module, entry_names[0])
        _run(module, "to-nvvm", TO_NVVM)
        if keep_ir:
            kept["nvvm"] = str(module)
        devices = device_modules(module)
    ll = _link_ir(devices)
    try:
        ptx, optimized = ptx_codegen.compile_ir_to_ptx(ll, [n for n, _ in devices], target)
    except CodegenError as e:
        path = write_reproducer(ll, "cuda-llvm", ".ll")
        raise type(e)(f"{e}\n  reproducer: {path}\n  rerun with: "
                      f"{_command(path, f'--target={target}')}") from None
    if assemble is None:
        assemble = ptx_codegen.ptxas_path() is not None
    cubin = ptx_codegen.assemble(ptx, target.arch) if assemble else None
    program = KernelProgram(target.arch, ptx, cubin, tuple(params), tuple(temps), tuple(launches))
    return CudaLowering(program, optimized, kept)


_DYNAMIC_SHARED = re.compile(r"^(@__dynamic_shmem__\d+) = internal (?:unnamed_addr )?"
                             r"addrspace\(3\) global \[0 x i8\] (?:undef|zeroinitializer)", re.M)


def extern_dynamic_shared(text: str) -> str:
    """LLVM IR ``text`` with the zero-size workgroup global that
    ``gpu.dynamic_shared_memory`` lowers to made an external declaration:
    NVPTX then declares it ``.extern .shared .b8 name[]`` (the dynamic
    shared memory of the launch), not a one-byte static variable."""
    return _DYNAMIC_SHARED.sub(r"\1 = external addrspace(3) global [0 x i8]", text)


def _link_ir(devices: list[tuple[str, str]]) -> str:
    """One LLVM IR text of every device module (llvmlite links them)."""
    import llvmlite.binding as llvm
    ptx_codegen.ensure_nvptx_initialized()
    if not devices:
        raise CodegenError("the kernel has no device code (nothing was mapped to the GPU)")
    try:
        base = llvm.parse_assembly(extern_dynamic_shared(fixup_ir_text(devices[0][1])))
        for _, text in devices[1:]:
            base.link_in(llvm.parse_assembly(extern_dynamic_shared(fixup_ir_text(text))))
    except RuntimeError as e:
        raise CodegenError(f"LLVM rejected the device IR: {e}") from None
    return str(base)


def describe_pipeline(strategy=None) -> str:
    """Everything about the pipeline that changes generated code."""
    return "|".join([PIPELINE_VERSION, pipeline_text(BUFFERIZE), pipeline_text(GENERALIZE),
                     "parallel-dims-first",
                     "strategies:" + ",".join(s.name for s in STRATEGIES), pipeline_text(TO_LOOPS), "sink-views",
                     "tiles:" + ",".join(map(str, tile_sizes(2))), pipeline_text(OUTLINE),
                     pipeline_text(TO_NVVM)])


# -- command line ------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m compiler.codegen.cuda FILE [--pipeline=P | --emit=gpu|nvvm|llvm|ptx]``

    With ``--pipeline`` run that MLIR pass pipeline on FILE and print the
    result; otherwise run the CUDA pipeline on FILE's entry and print the
    chosen stage (``gpu``: after outlining; ``ptx`` by default)."""
    ap = argparse.ArgumentParser(prog="python -m compiler.codegen.cuda", description=main.__doc__)
    ap.add_argument("file")
    ap.add_argument("--pipeline", help="an MLIR pass pipeline to run on FILE")
    ap.add_argument("--translate", action="store_true", help="translate FILE to LLVM IR")
    ap.add_argument("--entry", default="kernel", help="entry function (default: kernel)")
    ap.add_argument("--emit", choices=("gpu", "nvvm", "llvm", "ptx", "launches"), default="ptx")
    ap.add_argument("--target", default="cuda:sm_90", help="cuda:sm_90 (default), cuda:sm_80, ...")
    ap.add_argument("-o", "--output", help="write the output here instead of stdout")
    args = ap.parse_args(argv)
    text = Path(args.file).read_text()
    try:
        if args.file.endswith(".ll"):
            out, _ = ptx_codegen.compile_ir_to_ptx(text, [], _target(args.target))
        elif args.pipeline is not None or args.translate:
            with ir.Context():
                module = ir.Module.parse(text)
                if args.pipeline:
                    passmanager.PassManager.parse(args.pipeline).run(module.operation)
                out = (llvm_dialect.translate_module_to_llvmir(module.operation)
                       if args.translate else str(module))
        else:
            res = lower(text, [args.entry], target=args.target,
                        keep_ir=args.emit in ("gpu", "nvvm"), assemble=False)
            p = res.program
            out = {"gpu": lambda: res.stages["gpu"], "nvvm": lambda: res.stages["nvvm"],
                   "llvm": lambda: res.llvm_ir, "ptx": lambda: p.ptx,
                   "launches": lambda: "\n".join(
                       f"launch {l.kernel} grid={list(l.grid)} block={list(l.block)} "
                       f"shared={l.shared_bytes} args={[f'{k}:{v}' for k, v in l.args]}"
                       for l in p.launches)}[args.emit]()
    except (MLIRError, PipelineError, CodegenError, TargetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.output:
        Path(args.output).write_text(out)
    else:
        print(out)
    return 0


__all__ = ["lower", "CudaLowering", "read_host", "map_loops", "tile_sizes", "describe_pipeline",
           "device_modules", "main", "PIPELINE_VERSION", "HOST_OPS"]
