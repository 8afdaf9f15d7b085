"""What x86-64 code needs from the CPU it runs on, and what this CPU has.

Generated CPU code is compiled for a *target* (an x86-64 feature level such
as ``x86-64-v3``, a named CPU such as ``znver3``, or the build machine
itself) and may use every instruction-set extension that target names. Code
built for a target must therefore refuse to run on a CPU without those
extensions — an AVX-512 instruction on an AVX2-only CPU is a SIGILL, not an
exception. ``check_cpu_features(required, what=...)`` is that refusal: it
raises ``CpuFeatureError`` naming the missing extensions before any code is
mapped.

Feature names are LLVM's (``avx2``, ``fma``, ``avx512f``, ``sse4.2``, ...),
the same names ``llvmlite.binding.get_host_cpu_features()`` reports, so a
requirement list can be recorded at compile time (in a kernel cache key or
an artifact manifest) and checked in a process that has only the runtime.

This module needs llvmlite only when the host is first queried (its shared
library, read through ctypes: ``_host``).
"""
from __future__ import annotations

import functools
import os
from typing import Iterable

from .errors import FuelError

#: The x86-64 micro-architecture levels (the psABI's), as LLVM feature sets.
X86_64_V1 = frozenset({"64bit", "cmov", "cx8", "fxsr", "mmx", "sse", "sse2"})
X86_64_V2 = X86_64_V1 | {"cx16", "crc32", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3"}
X86_64_V3 = X86_64_V2 | {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"}
X86_64_V4 = X86_64_V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}

_SKYLAKE = X86_64_V3 | {"adx", "aes", "clflushopt", "fsgsbase", "invpcid", "pclmul", "prfchw",
                        "rdrnd", "rdseed", "xsavec", "xsaveopt", "xsaves"}
_SKX = _SKYLAKE | X86_64_V4 | {"clwb"}
_ICX = _SKX | {"avx512vnni", "avx512vbmi", "avx512vbmi2", "avx512ifma", "avx512bitalg",
               "avx512vpopcntdq", "gfni", "vaes", "vpclmulqdq", "sha", "rdpid"}
_ZEN2 = X86_64_V3 | {"adx", "aes", "clflushopt", "clwb", "clzero", "fsgsbase", "pclmul",
                     "prfchw", "rdpid", "rdrnd", "rdseed", "sha", "sse4a", "xsavec",
                     "xsaveopt", "xsaves"}
_ZEN3 = _ZEN2 | {"invpcid", "vaes", "vpclmulqdq"}

#: Every CPU name a target may give, with the extensions code built for it
#: may use (LLVM's definition of that CPU, restricted to instruction sets).
KNOWN_CPUS: dict[str, frozenset[str]] = {
    "x86-64": X86_64_V1,
    "x86-64-v2": X86_64_V2,
    "x86-64-v3": X86_64_V3,
    "x86-64-v4": X86_64_V4,
    "haswell": X86_64_V3 | {"aes", "fsgsbase", "invpcid", "pclmul", "rdrnd", "xsaveopt"},
    "skylake": _SKYLAKE,
    "skylake-avx512": _SKX,
    "cascadelake": _SKX | {"avx512vnni"},
    "icelake-server": _ICX,
    "sapphirerapids": _ICX | {"avx512bf16", "avx512fp16", "amx-tile", "amx-int8", "amx-bf16",
                              "avxvnni"},
    "znver2": _ZEN2,
    "znver3": _ZEN3,
    "znver4": _ZEN3 | X86_64_V4 | {"avx512bf16", "avx512vnni", "avx512vbmi", "avx512vbmi2",
                                   "avx512ifma", "avx512bitalg", "avx512vpopcntdq", "gfni"},
}


class CpuFeatureError(FuelError, RuntimeError):
    """Code built for CPU features this machine does not have.

    Attributes: ``missing`` (sorted feature names), ``target`` (what the code
    was built for)."""

    def __init__(self, message: str, missing: Iterable[str] = (), target: str = ""):
        super().__init__(message)
        self.missing = sorted(missing)
        self.target = target


def usable_cpus() -> int:
    """How many CPUs this process may run on: its affinity mask where the
    OS has one (a container or ``taskset`` narrows it), else every CPU of
    the machine. The default for kernel threads, compile workers and the
    weights' hashing threads alike."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):   # not Linux
        return max(1, os.cpu_count() or 1)


@functools.lru_cache(maxsize=1)
def _host() -> tuple[str, frozenset[str]]:
    """LLVM's name and features of this CPU, as llvmlite reports them
    (``get_host_cpu_name``, ``get_host_cpu_features``): read from llvmlite's
    library through ctypes, without importing ``llvmlite.binding`` (some 25
    ms of Python modules that ``compile()``'s serial front would pay before
    its first task: docs/compile-at-scale.md); through ``llvmlite.binding``
    where that library is not found."""
    try:
        return _host_from_library()
    except (ImportError, OSError, AttributeError, ValueError):
        import llvmlite.binding as llvm
        features = llvm.get_host_cpu_features()
        return llvm.get_host_cpu_name(), frozenset(k for k, on in features.items() if on)


def _host_from_library() -> tuple[str, frozenset[str]]:
    """``_host`` from the functions of llvmlite's shared library that
    ``llvmlite.binding`` calls (the same library: loading it here maps it
    once for both)."""
    import ctypes
    import importlib.util
    spec = importlib.util.find_spec("llvmlite")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("llvmlite is not installed")
    lib = ctypes.CDLL(os.path.join(list(spec.submodule_search_locations)[0], "binding",
                                   "libllvmlite.so"))
    lib.LLVMPY_GetHostCPUName.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.LLVMPY_GetHostCPUFeatures.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.LLVMPY_GetHostCPUFeatures.restype = ctypes.c_int
    lib.LLVMPY_DisposeString.argtypes = [ctypes.c_void_p]

    def text(fn) -> tuple[int, str]:
        out = ctypes.c_void_p()
        ok = fn(ctypes.byref(out))
        try:
            return ok, ctypes.string_at(out.value).decode() if out.value else ""
        finally:
            lib.LLVMPY_DisposeString(out)
    ok, flat = text(lib.LLVMPY_GetHostCPUFeatures)
    if not ok:   # LLVM could not tell: llvmlite.binding's error, not "no features"
        raise ValueError("LLVM did not report the host's CPU features")
    # "+avx2,-avx512f,...": llvmlite's FeatureMap, keeping the features that are on
    flags = {"+": True, "-": False}
    features = frozenset(f[1:] for f in flat.split(",") if f and flags[f[0]])
    return text(lib.LLVMPY_GetHostCPUName)[1], features


def host_cpu_name() -> str:
    """LLVM's name for this machine's CPU (``znver3``, ``skylake-avx512``, ...)."""
    return _host()[0]


def host_cpu_features() -> frozenset[str]:
    """The LLVM feature names this machine's CPU has.

    ``FUELC_HOST_FEATURES_MASK`` (comma-separated names) removes features, so
    the refusal path can be exercised on a machine that has them all."""
    have = _host()[1]
    masked = os.environ.get("FUELC_HOST_FEATURES_MASK", "")
    return have - {f.strip() for f in masked.split(",") if f.strip()}


def missing_cpu_features(required: Iterable[str]) -> list[str]:
    """The features among ``required`` this CPU lacks (sorted)."""
    return sorted(set(required) - host_cpu_features())


def check_cpu_features(required: Iterable[str], *, target: str = "", what: str = "code") -> None:
    """Raise ``CpuFeatureError`` if this CPU lacks any of ``required``.

    ``target`` names what the code was built for and ``what`` what is being
    loaded, both for the message."""
    missing = missing_cpu_features(required)
    if missing:
        built = f" for {target}" if target else ""
        raise CpuFeatureError(
            f"{what} was compiled{built} and needs CPU features this machine "
            f"({host_cpu_name()}) lacks: {', '.join(missing)}; compile for this machine "
            "(target 'cpu') or for a level it supports (e.g. 'cpu:x86-64-v3')",
            missing, target)


__all__ = ["CpuFeatureError", "KNOWN_CPUS", "X86_64_V1", "X86_64_V2", "X86_64_V3", "X86_64_V4",
           "host_cpu_name", "host_cpu_features", "missing_cpu_features", "check_cpu_features"]
