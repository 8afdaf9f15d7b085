"""The CPU pipeline: linalg on tensors → x86-64 machine code for a cpu ``Target``.

Named stages, each a function of the previous stage's output:

  parse          text → ``ir.Module`` in a fresh context
  prepare        entry functions get ``llvm.emit_c_interface`` and their tensor
                 results become out-params: ``bufferization.materialize_in_destination``
                 into a fully-dynamic strided memref argument (so results are
                 written in place, with no copy, into ANY strided output)
  tensor-transform  the strategy's transform script on tensors (optional)
  tensor-opt     the strategy's passes on tensors (optional)
  bufferize      empty-tensor elimination + one-shot bufferization over function
                 boundaries with fully dynamic layouts (every memref argument
                 accepts any offset and strides: 0 to broadcast, negative to
                 flip) + deallocation
  transform      the strategy's transform script (optional)
  lower-to-llvm  the strategy's lowering to the LLVM dialect
  translate      LLVM dialect → LLVM IR text
  llvm           llvmlite: literal fix-ups, runtime support, O3 for the target's
                 CPU and features → relocatable ELF object (``compiler.codegen.cpu.llvm``)

Every entry point takes ``target=`` (a ``compiler.targets.Target`` or its
string; default ``"cpu"``: this machine, or ``$FUELC_CPU``).

Public: ``emit_object(module, entry_names, target=...) -> bytes``, ``compile_module(...) ->
CompiledObject`` (cached; ``.address(name)``, ``.ciface(name, nargs)``), and
``load_object(bytes)`` which needs no MLIR (``compiler.codegen.loader``).

An MLIR stage that fails raises ``PipelineError`` after writing the stage's input
IR under ``$FUELC_REPRO_DIR`` (default ``./fuelc-reproducers``); the message
holds the command that reruns it:
``python -m compiler.codegen.cpu <file> --target=<target> --pipeline='<stage pipeline>'``.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import shlex
import sys
from pathlib import Path
from typing import Sequence

from compiler.reproducer import reproducer_dir
from compiler.targets import TargetError
from compiler.errors import CodegenError, PipelineError
from compiler.mlir import MLIRError, ir, memref, passmanager
from compiler.codegen.cpu import fastmath
from compiler.codegen.common import stages
from compiler.codegen.common.stages import (Stage, pipeline_text, prepare_entries,  # noqa: F401
                                            stage_failure, write_reproducer)
from compiler.codegen.loader import CompiledObject, load_object
from compiler.codegen.cpu.strategy import (COPIES_ONLY, LOOPS, VECTOR_OPS, Strategy,
                                           rules_fingerprint, select_strategy)

# Bump when a change here changes generated code (invalidates cached objects).
PIPELINE_VERSION = "cpu-6"  # cpu-6: unit-stride arguments re-typed

BUFFERIZE: tuple[str, ...] = (
    "eliminate-empty-tensors",
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=fully-dynamic-layout-map "
    "unknown-type-conversion=fully-dynamic-layout-map}",
    "canonicalize",
    "buffer-deallocation-pipeline",
)

_DYN = None  # ir.ShapedType.get_dynamic_stride_or_offset(), read lazily


def stages_for(strategy: Strategy) -> list[Stage]:
    """The MLIR pass stages (after ``prepare``) for ``strategy``."""
    stages = []
    if strategy.tensor_passes:
        stages.append(Stage("tensor-opt", strategy.tensor_passes))
    stages.append(Stage("bufferize", BUFFERIZE))
    stages.append(Stage("lower-to-llvm", strategy.lowering))
    return stages


def describe_pipeline(strategy: Strategy | None) -> str:
    """Everything about the pipeline that changes the generated code (for
    cache keys); ``None``: the strategy the registered rules pick."""
    if strategy is None:
        return "|".join([PIPELINE_VERSION, "auto:" + rules_fingerprint(),
                         *(s.pipeline for s in stages_for(LOOPS))])
    parts = [PIPELINE_VERSION, strategy.fingerprint, *(s.pipeline for s in stages_for(strategy))]
    return "|".join(parts)


# -- reproducers ---------------------------------------------------------------
def _command(path: Path, *args: str) -> str:
    return " ".join(["python", "-m", "compiler.codegen.cpu", shlex.quote(str(path)), *args])


def _fail(stage: str, text: str, why: str, *args: str, suffix: str = ".mlir") -> PipelineError:
    return stage_failure("CPU pipeline", "python -m compiler.codegen.cpu", stage, text, why,
                         *args, suffix=suffix)


# -- stages ----------------------------------------------------------------------
def parse_module(text: str, ctx: "ir.Context") -> "ir.Module":
    """Parse linalg-on-tensors text in ``ctx``; PipelineError with a reproducer
    on malformed or unregistered IR."""
    return stages.parse_module(text, ctx, _fail)


#: Function attribute (set before ``prepare``) listing the entry's arguments,
#: inputs then out-params, that the caller passes with a unit innermost stride
#: (``Layout.stride[-1] == 1``). After bufferization each such argument is cast
#: to ``strided<[?, ..., 1], offset: ?>``, so copies and vector transfers of
#: its rows become contiguous loads and stores instead of strided scalar ones.
from compiler.codegen.family import (ALIASED_ATTR, FEW_ROWS_ATTR, PACK_A_ATTR, ROLLED_ATTR, SHORT_K_ATTR,  # noqa: E402
                                     UNIT_STRIDE_ATTR, UNPACKED_ATTR, ZERO_STRIDE_ATTR)
from compiler.codegen.cpu.transforms.conv import DIRECT_CONV_ATTR  # noqa: E402
from compiler.codegen.cpu.transforms.matmul import EPILOGUE_ATTR  # noqa: E402
from compiler.codegen.family import LONG_K_ATTR, PACKED_B_ATTR, STEM_ATTR, TUNE_CPU_ATTR  # noqa: E402


_MEMREF_COPY = re.compile(r"memref\.copy (%[\w#]+), (%[\w#]+) : (memref<[^>]*>(?:>)?) to "
                          r"(memref<[^>]*>(?:>)?)$", re.M)


def strided_copies_to_linalg(module: "ir.Module") -> "ir.Module":
    """``module`` with every ``memref.copy`` whose source or destination is a
    strided view (bufferization makes one per ``tensor.insert_slice`` of a
    Concat, Pad, Roll, ...) rewritten as ``linalg.copy``: loops that LLVM
    vectorizes (it versions unit strides) instead of a call of the
    rank-generic, element-at-a-time ``memrefCopy`` (the im2col Concat of a
    3x3 conv, [1,64,9,56,56] from nine strided views: 3.0 -> 0.67 ms on one
    znver4 core). Copies between dense buffers stay ``memref.copy`` (a
    memcpy)."""
    text = str(module)

    def sub(m):
        return (f"linalg.copy ins({m[1]} : {m[3]}) outs({m[2]} : {m[4]})"
                if "strided<" in m[3] or "strided<" in m[4] else m[0])
    new, n = _MEMREF_COPY.subn(sub, text)
    return ir.Module.parse(new, module.context) if new != text else module


def assume_unit_strides(module: "ir.Module") -> int:
    """Apply every entry's ``UNIT_STRIDE_ATTR``: each listed argument's type
    gets a static innermost stride of 1, and its old uses read it through a
    ``memref.cast`` back to the old, fully strided type. Canonicalization
    folds that cast into every user (the source is the more static type), so
    loads, stores, copies and vector transfers of its rows become contiguous.
    The memref descriptor is the same struct whatever its static strides, so
    the C interface is unchanged; the caller guarantees the stride (the
    kernel family keys such instances on it). (A cast or reinterpret_cast
    *to* the unit-stride type inside the body is not enough: loads, stores
    and linalg ops fold a ranked cast away whichever way it goes, and the
    matmul's accumulator hoisting refuses a view-like base.) The arguments
    in ``ZERO_STRIDE_ATTR`` get a static innermost stride of 0 the same way
    (a broadcast: their loads leave the inner loop). Returns the number of
    arguments re-typed."""
    n = 0
    for op in module.body.operations:
        if op.operation.name != "func.func":
            continue
        wanted = []
        for attr, stride in ((UNIT_STRIDE_ATTR, 1), (ZERO_STRIDE_ATTR, 0)):
            if attr in op.attributes:
                wanted += [(int(ir.IntegerAttr(a).value), stride)
                           for a in ir.ArrayAttr(op.attributes[attr])]
                del op.attributes[attr]
        if not wanted:
            continue
        block = op.regions[0].blocks[0]
        for i, stride in wanted:
            arg = block.arguments[i]
            t = ir.MemRefType(arg.type)
            if t.rank == 0 or not isinstance(t.layout, ir.StridedLayoutAttr):
                continue
            lay = ir.StridedLayoutAttr(t.layout)
            strides = list(lay.strides)
            if strides[-1] == stride:
                continue
            strides[-1] = stride
            with ir.InsertionPoint.at_block_begin(block), ir.Location.unknown():
                arg.set_type(ir.MemRefType.get(
                    t.shape, t.element_type, layout=ir.StridedLayoutAttr.get(lay.offset, strides)))
                cast = memref.CastOp(t, arg)
            arg.replace_all_uses_except(cast.result, cast.operation)
            n += 1
        fn_type = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in block.arguments], fn_type.results))
    return n


def run_stage(module: "ir.Module", stage: Stage) -> None:
    """Run one MLIR stage in place; PipelineError with a reproducer on failure."""
    stages.run_stage(module, stage, _fail)


def apply_transform(module: "ir.Module", script: str) -> None:
    """Apply a transform script (a module with ``@__transform_main``)."""
    from compiler.mlir import apply_named_sequence
    before = str(module)
    try:
        tmod = ir.Module.parse(script, module.context)
        seq = next(op for op in tmod.body.operations
                   if op.operation.name == "transform.named_sequence")
        apply_named_sequence(module, seq, tmod, before)
    except (MLIRError, StopIteration, ValueError) as e:
        path = write_reproducer(script, "transform-script")
        raise _fail("transform", before, f"{e} (script: {path})") from None


def apply_transforms(module: "ir.Module", steps: "str | Sequence[str]") -> None:
    """Apply a strategy's transform: one script, or a sequence of scripts and
    ``py:<name> [args..]`` steps (a rewrite of ``transforms.REWRITES`` run on
    the module between two scripts, with the step's words as arguments)."""
    from compiler.codegen.cpu.transforms import REWRITES
    for step in (steps,) if isinstance(steps, str) else steps:
        if step.startswith("py:"):
            before = str(module)
            name, *args = step[3:].split() or [""]
            if name not in REWRITES:
                raise _fail("transform", before, f"unknown rewrite step {step!r}; known: "
                            f"{', '.join(sorted(REWRITES))}")
            try:
                REWRITES[name](module, *args)
            except (MLIRError, ValueError) as e:
                raise _fail("transform", before, f"rewrite {name}: {e}") from None
        else:
            apply_transform(module, step)


# Dialects that LLVM IR translation accepts. Anything else left in the module
# makes ``translate_module_to_llvmir`` print an error and then segfault, so it
# is refused before translation.
_TRANSLATABLE = ("llvm.", "omp.", "builtin.module")


def leftover_ops(module: "ir.Module") -> dict[str, int]:
    """Ops (name → count) that are not in a translatable dialect."""
    left: dict[str, int] = {}

    def visit(op):
        if not op.name.startswith(_TRANSLATABLE):
            left[op.name] = left.get(op.name, 0) + 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return left


def translate(module: "ir.Module") -> str:
    """LLVM dialect → LLVM IR text. PipelineError (with reproducer) when ops
    of other dialects are left: a lowering stage is missing a pass."""
    left = leftover_ops(module)
    if left:
        ops = ", ".join(f"{n} x{c}" for n, c in sorted(left.items()))
        raise _fail("translate", str(module),
                    f"ops not lowered to the LLVM dialect remain: {ops}; the lowering "
                    "pipeline is missing the pass that converts them", "--translate")
    from compiler.mlir import translate_module_to_llvmir
    try:
        return translate_module_to_llvmir(module.operation)
    except (MLIRError, RuntimeError) as e:
        raise _fail("translate", str(module), str(e), "--translate") from None


def _shaped(t: "ir.Type") -> "ir.ShapedType | None":
    try:
        return ir.ShapedType(t)
    except ValueError:
        return None


#: The ops of a kernel that only copies (``COPIES_ONLY``), after ``prepare_entries``.
_COPY_OPS = frozenset({"builtin.module", "func.func", "func.return", "arith.constant",
                       "tensor.dim", "tensor.empty", "tensor.insert_slice", "tensor.extract_slice",
                       "tensor.pad", "tensor.yield", "linalg.fill", "linalg.yield",
                       "bufferization.materialize_in_destination"})


def tune_functions(module: "ir.Module") -> None:
    """Where a rewrite marked ``module`` with ``family.TUNE_CPU_ATTR`` (a CPU
    name), drop the mark and give every ``llvm.func`` definition LLVM's
    ``"tune-cpu"`` attribute of that name: its code is scheduled with that
    CPU's model and tuning, its instructions stay the target's."""
    attrs = module.operation.attributes
    if TUNE_CPU_ATTR not in attrs:
        return
    cpu = ir.StringAttr(attrs[TUNE_CPU_ATTR]).value
    del attrs[TUNE_CPU_ATTR]
    for op in module.body.operations:
        if op.operation.name == "llvm.func" and len(op.regions[0].blocks):
            op.attributes["tune_cpu"] = ir.StringAttr.get(cpu)


def linalg_op_names(module: "ir.Module") -> set[str]:
    """The strategy features of ``module``: the names of its linalg ops,
    ``"<name>:<element type>"`` of each op's first operand (``linalg.matmul:f32``)
    and ``"<name>:<element type>:dynamic"`` when every dim of its last operand
    (the init) is dynamic; ``fuelc.few_rows`` when an entry carries that
    attribute (``family.FEW_ROWS_ATTR``), and ``fuelc.unpacked``, ``fuelc.aliased_b``,
    ``fuelc.pack_a`` and ``fuelc.rolled`` likewise; ``fuelc.direct_conv`` when a linalg op
    carries that attribute (``transforms.conv.DIRECT_CONV_ATTR``), and
    ``fuelc.mm_epilogue``, ``fuelc.stem`` and ``fuelc.long_k`` likewise
    (``family.EPILOGUE_ATTR``, ``family.STEM_ATTR``, ``family.LONG_K_ATTR``); ``math.erf`` and ``math.exp`` when an op computes
    one (a GELU epilogue: ``strategy._STEM_ERF_TILES``, ``strategy._PACKED_EPILOGUE_EXP``); ``VECTOR_OPS`` when the lowering wrote ``vector`` ops
    itself; ``COPIES_ONLY``
    when every op only moves data (slices, inserts, pads, fills: a Concat, Slice
    or Pad)."""
    names: set[str] = set()
    copies_only = [True]

    def visit(op):
        if op.name not in _COPY_OPS:
            copies_only[0] = False
        if op.name == "func.func":
            names.update(a for a in (FEW_ROWS_ATTR, UNPACKED_ATTR, ALIASED_ATTR, PACK_A_ATTR,
                                     SHORT_K_ATTR, ROLLED_ATTR) if a in op.attributes)
        if op.name.startswith("vector."):
            names.add(VECTOR_OPS)
        if op.name in ("math.erf", "math.exp"):
            names.add(op.name)
        if op.name.startswith("linalg."):
            names.add(op.name)
            for attr in (DIRECT_CONV_ATTR, EPILOGUE_ATTR, STEM_ATTR, PACKED_B_ATTR, LONG_K_ATTR):
                if attr in op.attributes:
                    names.add(attr)
            if len(op.operands):
                first = _shaped(op.operands[0].type)
                elt = first.element_type if first is not None else op.operands[0].type
                names.add(f"{op.name}:{elt}")
                init = _shaped(op.operands[len(op.operands) - 1].type)
                if init is not None and all(init.is_dynamic_dim(i) for i in range(init.rank)):
                    names.add(f"{op.name}:{elt}:dynamic")
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if copies_only[0]:
        names.add(COPIES_ONLY)
    return names


_REASSOCIABLE = ("arith.addf", "arith.mulf")


def mark_reductions_reassociable(module: "ir.Module") -> int:
    """Give the float adds/muls inside reduction bodies (``linalg.generic``
    with a reduction iterator, ``linalg.reduce``) ``fastmath<reassoc,
    contract>``, so LLVM may vectorize the reduction. Returns how many ops."""
    flags = ir.Attribute.parse("#arith.fastmath<reassoc,contract>", module.context)
    count = 0

    def mark(op):
        nonlocal count
        if op.name in _REASSOCIABLE:
            op.attributes["fastmath"] = flags
            count += 1
        return ir.WalkResult.ADVANCE

    def visit(op):
        if op.name == "linalg.reduce" or (
                op.name == "linalg.generic"
                and "reduction" in str(op.attributes["iterator_types"])):
            for region in op.regions:
                for block in region.blocks:
                    for inner in block.operations:
                        inner.operation.walk(mark)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return count


@dataclasses.dataclass
class LoweringResult:
    """The artefacts of one compilation (for debugging and export)."""

    object: bytes
    llvm_ir: str
    strategy: Strategy
    stages: dict[str, str]  # stage name → IR after it (when keep_ir)


def _target(target):
    from compiler.targets import parse_target
    t = parse_target("cpu" if target is None else target)
    if t.kind != "cpu":
        raise CodegenError(f"the CPU pipeline compiles for cpu targets, not {t}")
    return t


#: MLIR contexts made ahead of the kernels that will use them (``spare_context``).
_SPARE: list = []


def spare_context() -> None:
    """Make now the fresh MLIR context of a later ``lower`` in this process
    (4-5 ms of CPU apiece: the dialect registry copied in). A compile worker
    makes some while it waits for its first task (``jobs._serve``), so that
    its tasks do not; each context still serves one kernel, as one made in
    ``lower`` does (docs/compile-at-scale.md)."""
    _SPARE.append(ir.Context())


def _fresh_context() -> "ir.Context":
    try:
        return _SPARE.pop()
    except IndexError:
        return ir.Context()


def lower(module_or_text, entry_names: Sequence[str], *, target=None,
          strategy: Strategy | None = None, keep_ir: bool = False) -> LoweringResult:
    """Run every stage for ``target``. Raises PipelineError (MLIR stages,
    with reproducer) or CodegenError (LLVM)."""
    target = _target(target)
    text = module_or_text if isinstance(module_or_text, str) else str(module_or_text)
    entry_names = list(entry_names)
    ctx = _fresh_context()
    module = parse_module(text, ctx)
    kept: dict[str, str] = {}
    with ctx:
        try:
            prepare_entries(module, entry_names)
        except MLIRError as e:
            entries = [a for n in entry_names for a in ("--entry", n)]
            raise _fail("prepare", text, str(e), *entries) from None
        strategy = strategy or select_strategy(linalg_op_names(module), target)
        if strategy.reassociate_reductions:
            mark_reductions_reassociable(module)
        if strategy.approximate_math:
            fastmath.expand_math(module)
        if keep_ir:
            kept["prepare"] = str(module)
        if strategy.tensor_transform:
            apply_transforms(module, strategy.tensor_transform)
            if keep_ir:
                kept["tensor-transform"] = str(module)
        for stage in stages_for(strategy):
            run_stage(module, stage)
            if keep_ir:
                kept[stage.name] = str(module)
            if stage.name == "bufferize":
                module = strided_copies_to_linalg(module)
                assume_unit_strides(module)
            if stage.name == "bufferize" and strategy.transform:
                apply_transforms(module, strategy.transform)
        tune_functions(module)
        ll = translate(module)
    from compiler.codegen.cpu import llvm as llvm_codegen  # llvmlite: on first use
    try:
        obj, optimized = llvm_codegen.compile_ir_to_object(ll, target,
                                                           unroll=strategy.llvm_unroll)
    except CodegenError as e:
        path = write_reproducer(ll, "llvm", ".ll")
        raise CodegenError(f"{e}\n  reproducer: {path}\n  rerun with: "
                           f"{_command(path, f'--target={target}')}") from None
    return LoweringResult(obj, optimized, strategy, kept)


def choose_strategy(text: str, entry_names: Sequence[str], target=None) -> Strategy:
    """The strategy ``lower`` would select for ``text`` (after ``prepare``)
    on ``target`` (default ``"cpu"``). Raises PipelineError like ``lower``
    for malformed IR. Parsed in this thread's emission context
    (``family.emission_context``): a fresh context took 6 of the 7-8 ms a
    choice cost, for every kernel instance of a compile, in the calling
    process."""
    from compiler.codegen.family import emission_context
    target = _target(target)
    ctx = emission_context()
    module = parse_module(text, ctx)
    with ctx:
        try:
            prepare_entries(module, list(entry_names))
        except MLIRError as e:
            entries = [a for n in entry_names for a in ("--entry", n)]
            raise _fail("prepare", text, str(e), *entries) from None
        return select_strategy(linalg_op_names(module), target)


def emit_object(module_or_text, entry_names: Sequence[str], *, target=None,
                strategy: Strategy | None = None) -> bytes:
    """Compile linalg-on-tensors IR to a relocatable x86-64 ELF object for
    ``target``. Entry ``f(ins...) -> outs...`` becomes
    ``_mlir_ciface_f(in_desc*..., out_desc*...)``, every descriptor fully
    dynamic (any offset/strides). Raises PipelineError / CodegenError."""
    return lower(module_or_text, entry_names, target=target, strategy=strategy).object


def compile_module(module_or_text, entry_names: Sequence[str], *, target=None,
                   strategy: Strategy | None = None, cache="default") -> CompiledObject:
    """Compile for ``target`` and load into this process, through the kernel
    cache (memory, then disk; pass ``cache=None`` to bypass it). Returns a
    CompiledObject: ``.address("_mlir_ciface_<entry>")`` or
    ``.ciface(entry, nargs)``. A target whose features this CPU lacks
    compiles (and is cached) but raises ``CpuFeatureError`` on loading."""
    target = _target(target)
    text = module_or_text if isinstance(module_or_text, str) else str(module_or_text)
    if strategy is None:
        # Key the cache by the strategy actually chosen: a rule change must
        # not hand back an object built by another strategy.
        strategy = choose_strategy(text, entry_names, target)
    if cache is None:
        return load_object(emit_object(text, entry_names, target=target, strategy=strategy),
                           target.features, str(target))
    from compiler.codegen.cache import default_cache
    c = default_cache() if cache == "default" else cache
    return c.get_or_compile(text, entry_names, strategy=strategy, target=target)


def ensure_compiled(module_or_text, entry_names: Sequence[str], *, target=None,
                    strategy: Strategy | None = None) -> None:
    """Make sure the object for ``target`` is in the kernel cache without
    loading it (for a target this machine cannot run)."""
    target = _target(target)
    text = module_or_text if isinstance(module_or_text, str) else str(module_or_text)
    if strategy is None:
        strategy = choose_strategy(text, entry_names, target)
    from compiler.codegen.cache import default_cache
    default_cache().get_or_compile(text, entry_names, strategy=strategy, target=target, load=False)


def object_bytes(module_or_text, entry_names: Sequence[str], *, target=None) -> bytes:
    """The relocatable object of ``module_or_text`` for ``target``, through
    the kernel cache, without loading it (what an exported artifact holds)."""
    target = _target(target)
    text = module_or_text if isinstance(module_or_text, str) else str(module_or_text)
    from compiler.codegen.cache import default_cache
    return default_cache().object_bytes(text, entry_names, target=target,
                                        strategy=choose_strategy(text, entry_names, target))


# -- command line ------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m compiler.codegen.cpu FILE [--pipeline=P | --entry E ... --emit=...]``

    With ``--pipeline`` run that MLIR pass pipeline on FILE and print the
    result; with a ``.ll`` FILE compile LLVM IR to an object; otherwise run
    the whole CPU pipeline for the given entries."""
    ap = argparse.ArgumentParser(prog="python -m compiler.codegen.cpu", description=main.__doc__)
    ap.add_argument("file")
    ap.add_argument("--pipeline", help="an MLIR pass pipeline to run on FILE")
    ap.add_argument("--translate", action="store_true",
                    help="translate FILE (LLVM dialect) to LLVM IR")
    ap.add_argument("--entry", action="append", default=[], help="entry function (repeatable)")
    ap.add_argument("--emit", choices=("mlir", "llvm", "asm", "obj"), default="llvm",
                    help="full pipeline output: LLVM dialect, optimised LLVM IR, its "
                         "assembly, or object")
    ap.add_argument("-o", "--output", help="write the output here instead of stdout")
    ap.add_argument("--target", default="cpu",
                    help="cpu target: cpu (this machine), cpu:x86-64-v3, cpu:znver3, ... "
                         "(default: cpu)")
    args = ap.parse_args(argv)
    text = Path(args.file).read_text()
    from compiler.codegen.cpu import llvm as llvm_codegen
    try:
        if args.file.endswith(".ll"):
            obj, ll = llvm_codegen.compile_ir_to_object(text, _target(args.target))
            out: str | bytes = obj if args.emit == "obj" else ll
        elif args.pipeline is not None or args.translate:
            with ir.Context():
                module = ir.Module.parse(text)
                if args.pipeline:
                    passmanager.PassManager.parse(args.pipeline).run(module.operation)
                out = translate(module) if args.translate else str(module)
        else:
            entries = args.entry or _public_functions(text)
            res = lower(text, entries, target=args.target, keep_ir=args.emit == "mlir")
            out = {"mlir": lambda: res.stages.get("lower-to-llvm", ""),
                   "llvm": lambda: res.llvm_ir, "obj": lambda: res.object,
                   "asm": lambda: llvm_codegen.assembly(res.llvm_ir, _target(args.target)),
                   }[args.emit]()
    except (MLIRError, PipelineError, CodegenError, TargetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.output:
        Path(args.output).write_bytes(out if isinstance(out, bytes) else out.encode())
    elif isinstance(out, bytes):
        sys.stdout.buffer.write(out)
    else:
        print(out)
    return 0


def _public_functions(text: str) -> list[str]:
    with ir.Context():
        m = ir.Module.parse(text)
        return [ir.StringAttr(op.attributes["sym_name"]).value for op in m.body.operations
                if op.operation.name == "func.func" and len(op.regions[0].blocks)
                and "sym_visibility" not in op.attributes]


__all__ = ["emit_object", "compile_module", "choose_strategy", "load_object", "lower", "LoweringResult",
           "prepare_entries", "stages_for", "describe_pipeline", "Stage", "BUFFERIZE",
           "reproducer_dir", "write_reproducer", "PIPELINE_VERSION", "main", "ensure_compiled"]


