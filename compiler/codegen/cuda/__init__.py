"""The cuda target's codegen package: linalg on tensors → PTX/cubin kernel
programs for NVIDIA GPUs, launched through ``runtime.cuda``.

The package interface ``compiler.targets`` expects (``SOURCE``,
``build_table``, ``compile_module``, ``emit_object``, ``ensure_compiled``,
``describe_pipeline``, ``transcendental_ulp``, ``PRECISION_NOTE``), plus
``runnable_here(target)`` (a CUDA device is present) and ``STATIC_SHAPES``
(kernels are compiled per shape). ``pipeline.py`` holds the stages,
``ptx.py`` the llvmlite NVPTX / libdevice / ptxas steps.

A compiled kernel is a ``runtime.cuda.program.KernelProgram``; called
through the binding table, its inputs are copied to the device, its
launches run, and its output is copied back (one op at a time): the
fallback. When every step of a plan has a program, ``attach_residency``
gives the executor a ``runtime.cuda.resident.ResidentRunner``: the graph's
inputs are copied in, intermediates stay on the device, outputs come out.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from runtime.binding import KernelBindingTable
from runtime.cuda.program import KernelProgram
from runtime.dtype import DType

from .pipeline import CudaLowering, describe_pipeline, lower, main  # noqa: F401

#: The kernel-source prefix of generated cuda kernels.
SOURCE = "mlir-nvptx"
#: The data dtypes the primitive family registers on cuda targets.
DTYPES = (DType.F32, DType.F16, DType.BF16, DType.F64, DType.I32)
#: Kernels are compiled for static shapes (bare-pointer arguments).
STATIC_SHAPES = True

#: Primitive kinds the cuda target does not claim (none: serial loop nests run
#: as single-thread kernels, see ``pipeline.wrap_serial_code``).
UNSUPPORTED_KINDS: frozenset = frozenset()

PRECISION_NOTE = ("exp/tanh/log/erf/sin/cos/pow call CUDA libdevice (__nv_*), whose "
                  "documented bounds are 1-4 ulp on f32")

# libdevice's documented maximum ulp error (CUDA Math API, single precision).
_LIBDEVICE_ULP = {"exp": 2, "tanh": 2, "log": 1, "erf": 2}

_memo: dict = {}
_memo_lock = threading.Lock()


def transcendental_ulp(fn: str, dtype: DType) -> int | None:
    """libdevice's documented ulp bound of ``fn`` on f32; None elsewhere."""
    return _LIBDEVICE_ULP.get(fn) if dtype is DType.F32 else None


def runnable_here(target) -> bool:
    """True when cuda-python and a CUDA device are present."""
    import runtime.cuda
    return runtime.cuda.available()


def check_runnable(target) -> None:
    """Raise ``runtime.cuda.CudaUnavailableError`` unless code for ``target``
    can run here."""
    import runtime.cuda
    runtime.cuda.context()


def build_table(target) -> KernelBindingTable:
    """The frozen binding table of a cuda ``target``: the generated f32
    primitive kernels whose loops map to the GPU and the generated fused
    kernels (inputs made contiguous by the executor)."""
    from compiler.codegen.kernels import register_primitive_kernels, supported_kinds
    from compiler.codegen.fused import register_fused_kernels, fused_specs
    t = KernelBindingTable()
    kinds = [k for k in supported_kinds() if k not in UNSUPPORTED_KINDS]
    register_primitive_kernels(t, target, dtypes=DTYPES, kinds=kinds)
    register_fused_kernels(t, target, names=[n for n in sorted(fused_specs())
                                             if n in FUSED], arities=FUSED_ARITIES)
    t.finalize()
    return t.freeze()


#: The fused ops with a CUDA kernel (their loops map to the GPU).
FUSED = ("SoftmaxLastDim", "LayerNormLastDim", "RmsNormLastDim", "FusedLinear")
#: The keys' lengths (operands and output) claimed where a fused op has
#: more than the cuda kernels take: FusedLinear's residual skip (a fourth
#: input) and SoftmaxLastDim's additive mask (a second) are the cpu
#: kernels' (the cuda target keeps the Add).
FUSED_ARITIES = {"FusedLinear": (4,), "SoftmaxLastDim": (2,)}


def compile_program(text: str, entry_names, *, target) -> KernelProgram:
    """The kernel program of ``text`` for ``target`` (memoised per process)."""
    from compiler.targets import parse_target
    target = parse_target(target)
    key = (text, tuple(entry_names), target)
    with _memo_lock:
        hit = _memo.get(key)
    if hit is None:
        hit = lower(text, entry_names, target=target).program
        with _memo_lock:
            _memo[key] = hit
    return hit


def emit_object(text: str, entry_names, *, target, strategy=None) -> bytes:
    """The serialized kernel program (``KernelProgram.to_bytes``)."""
    return compile_program(text, entry_names, target=target).to_bytes()


def ensure_compiled(text: str, entry_names, *, target, strategy=None) -> KernelProgram:
    """Compile without loading (no device needed); returns the program."""
    return compile_program(text, entry_names, target=target)


class CudaObject:
    """A compiled kernel program, loaded on the device on first call."""

    def __init__(self, program: KernelProgram):
        self.program = program
        self._loaded = None
        self._lock = threading.Lock()

    def loaded(self):
        with self._lock:
            if self._loaded is None:
                from runtime.cuda import LoadedProgram
                self._loaded = LoadedProgram(self.program)
            return self._loaded

    def ciface(self, name: str, nargs: int) -> "CudaKernelFunction":
        if nargs != len(self.program.params):
            from compiler.errors import CodegenError
            raise CodegenError(f"the CUDA kernel takes {len(self.program.params)} buffers, "
                               f"not {nargs}")
        return CudaKernelFunction(self)


def _host_view(desc, buf) -> np.ndarray:
    """The numpy view (raw bytes per element) of a memref descriptor."""
    rank = len(buf.shape)
    sizes = [desc.sizes[i] for i in range(rank)] if rank else []
    strides = [desc.strides[i] for i in range(rank)] if rank else []
    if tuple(sizes) != tuple(buf.shape):
        from compiler.errors import CodegenError
        raise CodegenError(f"a CUDA kernel for {buf.element}{list(buf.shape)} was called with "
                           f"a buffer of shape {sizes}")
    isz = buf.itemsize
    span = [desc.offset + sum(min(0, (n - 1) * s) for n, s in zip(sizes, strides)),
            desc.offset + sum(max(0, (n - 1) * s) for n, s in zip(sizes, strides))]
    count = span[1] - span[0] + 1 if all(sizes) else 0
    raw = np.dtype(f"u{isz}")
    base = (ctypes.c_char * max(count * isz, 1)).from_address(desc.aligned + span[0] * isz)
    flat = np.frombuffer(base, dtype=raw, count=count)
    if not count:
        return np.empty(sizes, raw)
    return np.lib.stride_tricks.as_strided(flat[desc.offset - span[0]:], sizes,
                                           [s * isz for s in strides])


class CudaKernelFunction:
    """``fn(*descriptors)`` as the kernel families call it: inputs are
    gathered to dense host arrays, copied to the device, the program runs,
    and the output is copied back into the output descriptor's memory."""

    def __init__(self, obj: CudaObject):
        self.owner = obj
        self.program = obj.program

    def __call__(self, *descriptors) -> None:
        params = self.program.params
        views = [_host_view(d, b) for d, b in zip(descriptors, params)]
        host = [np.ascontiguousarray(v) for v in views[:-1]]
        out = np.empty(params[-1].shape, views[-1].dtype)
        self.owner.loaded().run(host + [out])
        np.copyto(views[-1], out)


def compile_module(text: str, entry_names, *, target, strategy=None, cache=None) -> CudaObject:
    """Compile and wrap for launching (loading needs a device; see
    ``runnable_here``)."""
    check_runnable(target)
    return CudaObject(compile_program(text, entry_names, target=target))


def attach_residency(executor, warmed: dict) -> None:
    """Run ``executor``'s whole plan on the device when every step allows
    it (``runtime.cuda.resident``): ``warmed`` maps step indices to what
    warming them returned (programs, or loaded kernel functions). The
    reason a plan stays kernel by kernel is kept in
    ``executor.resident_reason``."""
    from runtime.cuda.resident import CudaDevice, ResidentRunner, plan_residency
    programs = {}
    for i, r in warmed.items():
        p = r if isinstance(r, KernelProgram) else getattr(r, "program", None)
        if isinstance(p, KernelProgram):
            programs[i] = p
    residency, why = plan_residency(executor.plan, executor.specs, programs)
    executor.resident = ResidentRunner(residency, programs, CudaDevice) if residency else None
    executor.resident_reason = why


def module_ir(results) -> dict[str, str]:
    """``module.ir`` entries of the programs ``warm`` returned: ``ptx`` (every
    kernel's PTX) and ``launches`` (geometry and arguments per launch)."""
    progs = []
    for r in results:
        p = r if isinstance(r, KernelProgram) else getattr(getattr(r, "program", None), "ptx", None) \
            and r.program
        if isinstance(p, KernelProgram) and p not in progs:
            progs.append(p)
    return {"ptx": "\n".join(p.ptx for p in progs),
            "launches": "\n".join(f"{l.kernel} grid={list(l.grid)} block={list(l.block)} "
                                  f"shared={l.shared_bytes} args={list(l.args)}"
                                  for p in progs for l in p.launches)}


__all__ = ["SOURCE", "DTYPES", "STATIC_SHAPES", "PRECISION_NOTE", "FUSED", "transcendental_ulp",
           "runnable_here", "check_runnable", "build_table", "compile_program", "emit_object",
           "ensure_compiled", "compile_module", "describe_pipeline", "lower", "CudaLowering",
           "CudaObject", "CudaKernelFunction", "module_ir", "attach_residency", "main"]
