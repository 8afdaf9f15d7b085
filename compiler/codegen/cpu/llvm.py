"""LLVM IR text → optimised x86-64 machine code for a target, with llvmlite
(no MLIR here).

All the known pitfalls between MLIR's LLVM (24) and llvmlite's LLVM (22) live in
this one module (docs/toolchain.md):

* ``fixup_ir_text`` (``compiler.codegen.common.llvm_text``, shared with the cuda
  target): LLVM 24 prints special float literals (``-inf``,
  ``+qnan``, ``+snan(0x1)``, ``+nan(0x1)``) that LLVM 22 rejects; they are
  rewritten to the hex forms both versions read.
* ``link_runtime_support``: ``memrefCopy`` (called by lowered ``memref.copy``
  between non-contiguous memrefs) is linked in from LLVM IR text as an
  internal function, so objects are self-contained; ``malloc``/``free``/libm
  resolve from the process and ``load_object`` checks that they do.
* a new target machine per emission (never shared), for the ``Target``'s
  CPU and features — never the build machine's unless the target is it;
* ``check_portable``: an object that would need a compiler-runtime builtin
  (``__truncsfbf2``, ``__extendhfsf2``, ... — present in some libgcc
  versions, absent in others) is refused at compile time: every such
  operation must be expanded in IR (the pipeline's ``arith`` emulation and
  expansion passes do it for bf16).
"""
from __future__ import annotations

import llvmlite.binding as llvm

from compiler.errors import CodegenError
from compiler.codegen.common.llvm_text import fixup_ir_text  # noqa: F401 (shared with cuda)
from compiler.codegen.loader import elf_symbols, ensure_llvm_initialized

# -- runtime support linked into every module that needs it -----------------
# void memrefCopy(i64 elemSize, {i64 rank, ptr desc}* src, {...}* dst)
# desc = {ptr allocated, ptr aligned, i64 offset, i64 sizes[rank], i64 strides[rank]}
# A strided odometer copy of elemSize-byte elements; the same ABI as MLIR's
# CRunnerUtils memrefCopy.
MEMREF_COPY_IR = r"""
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

define void @memrefCopy(i64 %es, ptr %src, ptr %dst) {
entry:
  %rank = load i64, ptr %src
  %sdp = getelementptr i8, ptr %src, i64 8
  %sd = load ptr, ptr %sdp
  %ddp = getelementptr i8, ptr %dst, i64 8
  %dd = load ptr, ptr %ddp
  %sbp = getelementptr i8, ptr %sd, i64 8
  %sbase = load ptr, ptr %sbp
  %sop = getelementptr i8, ptr %sd, i64 16
  %soff0 = load i64, ptr %sop
  %ssizes = getelementptr i8, ptr %sd, i64 24
  %sstrides = getelementptr i64, ptr %ssizes, i64 %rank
  %dbp = getelementptr i8, ptr %dd, i64 8
  %dbase = load ptr, ptr %dbp
  %dop = getelementptr i8, ptr %dd, i64 16
  %doff0 = load i64, ptr %dop
  %dsizes = getelementptr i8, ptr %dd, i64 24
  %dstrides = getelementptr i64, ptr %dsizes, i64 %rank
  %idx = alloca i64, i64 %rank
  %soff = alloca i64
  %doff = alloca i64
  %dim = alloca i64
  store i64 %soff0, ptr %soff
  store i64 %doff0, ptr %doff
  br label %zero.check

zero.check:                       ; any zero-sized dim: nothing to copy
  %zi = phi i64 [ 0, %entry ], [ %zi.next, %zero.body ]
  %zdone = icmp sge i64 %zi, %rank
  br i1 %zdone, label %copy, label %zero.body

zero.body:
  %zsp = getelementptr i64, ptr %ssizes, i64 %zi
  %zs = load i64, ptr %zsp
  %zip = getelementptr i64, ptr %idx, i64 %zi
  store i64 0, ptr %zip
  %zi.next = add i64 %zi, 1
  %isempty = icmp sle i64 %zs, 0
  br i1 %isempty, label %done, label %zero.check

copy:
  %so = load i64, ptr %soff
  %do = load i64, ptr %doff
  %sbyte = mul i64 %so, %es
  %dbyte = mul i64 %do, %es
  %sp = getelementptr i8, ptr %sbase, i64 %sbyte
  %dp = getelementptr i8, ptr %dbase, i64 %dbyte
  call void @llvm.memcpy.p0.p0.i64(ptr %dp, ptr %sp, i64 %es, i1 false)
  %last = sub i64 %rank, 1
  store i64 %last, ptr %dim
  br label %inc

inc:
  %d = load i64, ptr %dim
  %neg = icmp slt i64 %d, 0
  br i1 %neg, label %done, label %inc.body

inc.body:
  %ip = getelementptr i64, ptr %idx, i64 %d
  %i = load i64, ptr %ip
  %i1 = add i64 %i, 1
  %szp = getelementptr i64, ptr %ssizes, i64 %d
  %sz = load i64, ptr %szp
  %sstp = getelementptr i64, ptr %sstrides, i64 %d
  %sst = load i64, ptr %sstp
  %dstp = getelementptr i64, ptr %dstrides, i64 %d
  %dst.s = load i64, ptr %dstp
  %so2 = load i64, ptr %soff
  %do2 = load i64, ptr %doff
  %more = icmp slt i64 %i1, %sz
  br i1 %more, label %step, label %carry

step:
  store i64 %i1, ptr %ip
  %so3 = add i64 %so2, %sst
  %do3 = add i64 %do2, %dst.s
  store i64 %so3, ptr %soff
  store i64 %do3, ptr %doff
  br label %copy

carry:
  store i64 0, ptr %ip
  %back = sub i64 %sz, 1
  %sback = mul i64 %back, %sst
  %dback = mul i64 %back, %dst.s
  %so4 = sub i64 %so2, %sback
  %do4 = sub i64 %do2, %dback
  store i64 %so4, ptr %soff
  store i64 %do4, ptr %doff
  %dnext = sub i64 %d, 1
  store i64 %dnext, ptr %dim
  br label %inc

done:
  ret void
}
"""

# name -> IR text defining it (internal linkage).
RUNTIME_SUPPORT = {"memrefCopy": MEMREF_COPY_IR}


def link_runtime_support(mod: "llvm.ModuleRef") -> list[str]:
    """Define in ``mod`` every runtime-support function it declares but does
    not define (internal linkage, so the object stays self-contained).
    Returns the names linked."""
    linked = []
    for name, text in RUNTIME_SUPPORT.items():
        try:
            fn = mod.get_function(name)
        except NameError:
            continue
        if not fn.is_declaration:
            continue
        # the same LLVM context as ``mod`` (llvmlite keeps it as ``_context``)
        support = llvm.parse_assembly(text, context=getattr(mod, "_context", None))
        support.triple = mod.triple
        support.data_layout = mod.data_layout
        mod.link_in(support)
        mod.get_function(name).linkage = llvm.Linkage.internal
        linked.append(name)
    return linked


# -- parse / optimise / emit ------------------------------------------------
def parse_ir(text: str, *, fixup: bool = True) -> "llvm.ModuleRef":
    """Parse LLVM IR text (after ``fixup_ir_text``) and verify it, in a fresh
    LLVM context: the global one interns every constant and type of every
    module for ever, so a process compiling ever-new kernels would grow
    without bound. Raises CodegenError with llvmlite's diagnostic."""
    ensure_llvm_initialized()
    try:
        mod = llvm.parse_assembly(fixup_ir_text(text) if fixup else text,
                                  context=llvm.create_context())
        mod.verify()
    except RuntimeError as e:
        raise CodegenError(f"LLVM rejected the IR: {e}") from None
    return mod


def optimize(mod: "llvm.ModuleRef", tm: "llvm.TargetMachine", speed_level: int = 3, *,
             unroll: bool = True) -> None:
    """Run LLVM's standard O<speed_level> module pipeline for ``tm``
    (without loop unrolling when not ``unroll``)."""
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_unrolling = unroll
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def target_machine(target, *, jit: bool = False, opt: int = 3) -> "llvm.TargetMachine":
    """A NEW LLVM target machine for ``target`` (a cpu ``Target``): its
    triple, CPU name and feature string. Never share one between engines."""
    ensure_llvm_initialized()
    t = llvm.Target.from_triple(target.triple)
    return t.create_target_machine(cpu=target.arch, features=llvm_features(target), opt=opt,
                                   reloc="pic", codemodel="default", jit=jit)


def llvm_features(target) -> str:
    """The LLVM feature string for ``target``: its features, and on AVX-512
    targets ``-prefer-256-bit``, so the loop vectorizer uses 16-float zmm
    vectors (LLVM's tuning for most AVX-512 CPUs would keep 8-float ymm), and
    ``+prefer-no-scatter`` (it had vectorized a padding copy across rows with
    scatters, slower than the scalar copy)."""
    feats = target.llvm_features
    if "avx512f" in target.features:
        feats = ",".join(f for f in (feats, "-prefer-256-bit", "+prefer-no-scatter") if f)
    return feats


def check_portable(obj: bytes, target) -> None:
    """Refuse an object that needs a compiler-runtime builtin (any undefined
    ``__``-prefixed symbol): whether the process provides one depends on
    the host's libgcc / compiler-rt, not on the target. CodegenError."""
    _, undefined = elf_symbols(obj)
    builtins = sorted(n for n in undefined if n.startswith("__"))
    if builtins:
        raise CodegenError(
            f"the object for target {target} calls compiler-runtime builtins "
            f"{', '.join(builtins)}, which not every process provides; the operation that "
            "needs them must be expanded in IR before LLVM (an arith emulation/expansion "
            "pass or the op's lowering)")


def compile_ir_to_object(text: str, target, *, speed_level: int = 3,
                         unroll: bool = True) -> tuple[bytes, str]:
    """LLVM IR text → (relocatable x86-64 ELF object for ``target``, the
    optimised IR text; ``unroll``: ``optimize``'s). Raises CodegenError."""
    mod = parse_ir(text)
    tm = target_machine(target, jit=False, opt=speed_level)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    link_runtime_support(mod)
    try:
        optimize(mod, tm, speed_level, unroll=unroll)
        mod.verify()
        obj = tm.emit_object(mod)
    except RuntimeError as e:
        raise CodegenError(f"LLVM code generation failed: {e}") from None
    check_portable(obj, target)
    return obj, str(mod)


def assembly(text: str, target) -> str:
    """The x86-64 assembly of LLVM IR ``text`` (as ``compile_ir_to_object``
    returns it, already optimised) for ``target``: what the object holds, to
    read. Raises CodegenError."""
    mod = parse_ir(text)
    tm = target_machine(target)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    try:
        return tm.emit_assembly(mod)
    except RuntimeError as e:
        raise CodegenError(f"LLVM code generation failed: {e}") from None


__all__ = ["fixup_ir_text", "assembly", "ensure_llvm_initialized", "target_machine", "llvm_features", "check_portable",
           "link_runtime_support", "parse_ir", "optimize", "compile_ir_to_object",
           "MEMREF_COPY_IR"]
