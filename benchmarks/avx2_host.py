"""Run a benchmark as on an AVX2-only machine: AVX-512 hidden from CPUID.

    python benchmarks/avx2_host.py benchmarks/models.py --threads 2 --target cpu:x86-64-v3
    python benchmarks/avx2_host.py --check

onnxruntime (MLAS), numpy's OpenBLAS, torch and LLVM's host detection pick
their kernels by what the CPUID instruction reports, and none of them can be
told to stop at AVX2 (OpenBLAS can: ``OPENBLAS_CORETYPE``). On a host with
AVX-512 the ``cpu:x86-64-v3`` rows would then compare fuelc's AVX2 code with
the peers' AVX-512 kernels, which is not what a user of an AVX2-only machine
sees. This runner compiles ``cpuid_mask.c`` (with ``cc``, once, into the
user's cache directory) and runs the script with it in ``LD_PRELOAD``: the
library turns on the kernel's CPUID faulting (``arch_prctl(ARCH_SET_CPUID)``,
CPUs with ``cpuid_fault`` in /proc/cpuinfo) and answers every CPUID of the
process, and of any process it starts, with the AVX-512 bits cleared. So the
peers and fuelc's own target ``cpu`` all take their AVX2 paths, on the same
cores, caches and clock: the microarchitecture stays the host's (a Zen 4
with AVX-512 hidden is not a Zen 3). ``--check`` prints what the masked
process sees. docs/benchmarks.md, "Peers on AVX2 (CPUID masked)".
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "cpuid_mask.c")
#: Set in the masked process, so the benchmarks' headers can say so.
MARK = "FUELC_BENCH_AVX512_HIDDEN"

_CHECK = """
import llvmlite.binding as llvm
have = llvm.get_host_cpu_features()
avx = sorted(k for k, v in have.items() if v and k.startswith("avx"))
print("LLVM host:", llvm.get_host_cpu_name(), " ".join(avx))
if any(k.startswith("avx512") for k in avx):
    raise SystemExit("AVX-512 still visible")
"""


class MaskUnavailable(RuntimeError):
    """CPUID faulting or a C compiler is missing on this machine."""


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return set(f.read().split())
    except OSError:
        return set()


def library() -> str:
    """The compiled mask, built on first use (keyed by the source's hash)."""
    if "cpuid_fault" not in cpu_flags():
        raise MaskUnavailable("this CPU (or its hypervisor) offers no CPUID faulting "
                              "('cpuid_fault' is not in /proc/cpuinfo): AVX-512 cannot be hidden")
    cc = shutil.which(os.environ.get("CC") or "cc")
    if cc is None:
        raise MaskUnavailable(f"no C compiler ({os.environ.get('CC') or 'cc'}) to build "
                              f"benchmarks/cpuid_mask.c: install gcc or set CC")
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fuelc")
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, f"cpuid_mask-{digest}-{os.path.basename(cc)}.so")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        res = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", tmp, SOURCE],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise MaskUnavailable(f"{cc} failed on {SOURCE}:\n{res.stderr}")
        os.replace(tmp, path)
    return path


def masked_env(env: "dict[str, str] | None" = None) -> dict:
    env = dict(os.environ if env is None else env)
    lib = library()
    env["LD_PRELOAD"] = ":".join(p for p in (lib, env.get("LD_PRELOAD", "")) if p)
    env[MARK] = "1"
    return env


def main(argv: "list[str]") -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    try:
        env = masked_env()
    except MaskUnavailable as e:
        print(f"avx2_host: {e}", file=sys.stderr)
        return 2
    cmd = [sys.executable, "-c", _CHECK] if argv == ["--check"] else [sys.executable, *argv]
    os.execve(sys.executable, cmd, env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
