"""LLVM IR (NVVM) → PTX with llvmlite's NVPTX backend, libdevice linking, and
cubin assembly with ``ptxas`` (no MLIR here).

* The MLIR in the bindings has no NVPTX backend; llvmlite's LLVM does
  (``initialize_all_targets`` / ``initialize_all_asmprinters``).
* ``math`` functions lower to ``__nv_*`` calls; they are linked from the
  CUDA toolkit's ``libdevice.10.bc`` and every non-kernel function is then
  made internal, so O3 drops what the kernels do not call (the PTX stays a
  few KB instead of ~700 KB).
* The float literal fix-ups between MLIR's and llvmlite's LLVM are shared with the CPU
  path (``compiler.codegen.common.llvm_text.fixup_ir_text``).
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import llvmlite.binding as llvm

from compiler.codegen.common.llvm_text import fixup_ir_text
from compiler.errors import CodegenError

_init_lock = threading.Lock()
_initialized = False
_libdevice_lock = threading.Lock()
_libdevice_bytes: bytes | None = None

#: Where libdevice is looked for, after ``$FUELC_LIBDEVICE`` and ``$CUDA_HOME``.
LIBDEVICE_GLOBS = (
    "/usr/local/cuda/nvvm/libdevice/libdevice*.bc",
    "/usr/local/cuda-*/nvvm/libdevice/libdevice*.bc",
    "/usr/lib/nvidia-cuda-toolkit/libdevice/libdevice*.bc",
    "/usr/lib/cuda/nvvm/libdevice/libdevice*.bc",
)


class LibdeviceNotFound(CodegenError):
    """A kernel calls libdevice (``__nv_*``) and no ``libdevice.10.bc`` was found."""


class PtxasError(CodegenError):
    """``ptxas`` rejected generated PTX; the message carries its diagnostics."""


def ensure_nvptx_initialized() -> None:
    """Initialise all of llvmlite's targets and asm printers once (NVPTX is
    not the native target)."""
    global _initialized
    with _init_lock:
        if not _initialized:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            llvm.initialize_native_asmparser()
            _initialized = True


def _wheel_libdevice() -> list[str]:
    try:
        import nvidia.cuda_nvcc as wheel  # the nvidia-cuda-nvcc wheel
    except ImportError:
        return []
    roots = [str(p) for p in getattr(wheel, "__path__", [])]
    return [f for r in roots for f in glob.glob(os.path.join(r, "nvvm", "libdevice", "libdevice*.bc"))]


def find_libdevice() -> Path:
    """The path of ``libdevice.10.bc``: ``$FUELC_LIBDEVICE``, then
    ``$CUDA_HOME/nvvm/libdevice``, the usual CUDA toolkit locations and the
    ``nvidia-cuda-nvcc`` wheel. Raises ``LibdeviceNotFound`` saying how to
    get it."""
    explicit = os.environ.get("FUELC_LIBDEVICE")
    if explicit:
        if not os.path.isfile(explicit):
            raise LibdeviceNotFound(f"$FUELC_LIBDEVICE={explicit!r} is not a file; point it at "
                                    "the CUDA toolkit's nvvm/libdevice/libdevice.10.bc")
        return Path(explicit)
    candidates = []
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if home:
            candidates += glob.glob(os.path.join(home, "nvvm", "libdevice", "libdevice*.bc"))
    for pattern in LIBDEVICE_GLOBS:
        candidates += sorted(glob.glob(pattern), reverse=True)
    candidates += _wheel_libdevice()
    if not candidates:
        raise LibdeviceNotFound(
            "the kernel calls CUDA math functions (__nv_*) but libdevice.10.bc was not found; "
            "install the CUDA toolkit (nvvm/libdevice) or `pip install nvidia-cuda-nvcc` (the "
            "'cuda' extra: pip install 'fuelc[cuda]'), or set $FUELC_LIBDEVICE to the file")
    return Path(candidates[0])


def _libdevice() -> bytes:
    global _libdevice_bytes
    with _libdevice_lock:
        if _libdevice_bytes is None:
            _libdevice_bytes = find_libdevice().read_bytes()
        return _libdevice_bytes


def _calls_libdevice(mod: "llvm.ModuleRef") -> bool:
    return any(f.is_declaration and f.name.startswith("__nv_") for f in mod.functions)


def target_machine(target, opt: int = 3) -> "llvm.TargetMachine":
    """A new NVPTX target machine for a cuda ``target`` (its ``arch``, e.g.
    sm_90, and PTX feature string)."""
    ensure_nvptx_initialized()
    t = llvm.Target.from_triple(target.triple)
    return t.create_target_machine(cpu=target.arch, features=target.llvm_features, opt=opt)


def compile_ir_to_ptx(text: str, kernels: list[str], target) -> tuple[str, str]:
    """LLVM IR text of one device module → (PTX for ``target``, the optimised
    IR). ``kernels`` are the entry points kept external; everything else
    (libdevice included) becomes internal. Raises CodegenError."""
    ensure_nvptx_initialized()
    try:
        mod = llvm.parse_assembly(fixup_ir_text(text))
        mod.verify()
    except RuntimeError as e:
        raise CodegenError(f"LLVM rejected the device IR: {e}") from None
    tm = target_machine(target)
    mod.triple = target.triple
    mod.data_layout = str(tm.target_data)
    if _calls_libdevice(mod):
        ld = llvm.parse_bitcode(_libdevice())
        ld.triple = target.triple
        ld.data_layout = mod.data_layout
        mod.link_in(ld)
    keep = set(kernels)
    for f in mod.functions:
        if not f.is_declaration and f.name not in keep:
            f.linkage = llvm.Linkage.internal
    for g in mod.global_variables:
        if not g.is_declaration and g.linkage != llvm.Linkage.internal:
            g.linkage = llvm.Linkage.internal
    try:
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        mod.verify()
        ptx = tm.emit_assembly(mod)
    except RuntimeError as e:
        raise CodegenError(f"LLVM NVPTX code generation failed: {e}") from None
    unresolved = sorted(f.name for f in mod.functions
                        if f.is_declaration and not f.name.startswith("llvm."))
    if unresolved:
        raise CodegenError(f"the device code for {target} calls functions nothing defines: "
                           f"{', '.join(unresolved)}")
    return ptx, str(mod)


_ENTRY = re.compile(r"^\.visible\s+\.entry\s+([A-Za-z_$][\w$]*)", re.M)


def ptx_entries(ptx: str) -> list[str]:
    """The ``.entry`` (kernel) names of a PTX text."""
    return _ENTRY.findall(ptx)


def ptxas_path() -> str | None:
    """``ptxas`` on PATH (or ``$CUDA_HOME/bin``), or None."""
    found = shutil.which("ptxas")
    if found:
        return found
    home = os.environ.get("CUDA_HOME")
    cand = os.path.join(home, "bin", "ptxas") if home else None
    return cand if cand and os.access(cand, os.X_OK) else None


def assemble(ptx: str, arch: str, *, timeout: float = 120.0) -> bytes:
    """``ptxas -arch=<arch>`` on ``ptx`` → the cubin bytes. Raises
    ``PtxasError`` with ptxas' diagnostics, CodegenError without ptxas."""
    exe = ptxas_path()
    if exe is None:
        raise CodegenError("ptxas is not on PATH; install the CUDA toolkit or the "
                           "nvidia-cuda-nvcc wheel, or load the PTX (the driver JITs it)")
    with tempfile.TemporaryDirectory(prefix="fuelc-ptxas-") as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        Path(src).write_text(ptx)
        r = subprocess.run([exe, f"-arch={arch}", "-o", out, src], capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode != 0:
            raise PtxasError(f"ptxas -arch={arch} rejected the PTX (rc={r.returncode}): "
                             f"{(r.stderr or r.stdout).strip()}")
        return Path(out).read_bytes()


__all__ = ["LibdeviceNotFound", "PtxasError", "ensure_nvptx_initialized", "find_libdevice",
           "target_machine", "compile_ir_to_ptx", "ptx_entries", "ptxas_path", "assemble"]
