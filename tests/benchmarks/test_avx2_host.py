"""benchmarks/avx2_host.py: a process started through it (and the processes
it starts) sees no AVX-512 in CPUID, real faults still kill it, and the
runner refuses clearly where CPUID faulting or a C compiler is missing."""
import ast
import pathlib
import signal
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import avx2_host  # noqa: E402

needs_mask = pytest.mark.skipif(
    "cpuid_fault" not in avx2_host.cpu_flags() or avx2_host.shutil.which("cc") is None,
    reason="no CPUID faulting or no cc on this machine")

FEATURES = ("import llvmlite.binding as llvm; "
            "print(sorted(k for k, v in llvm.get_host_cpu_features().items() if v))")


def _features(env) -> set:
    out = subprocess.run([sys.executable, "-c", FEATURES], env=env, capture_output=True,
                         text=True, check=True).stdout
    return set(ast.literal_eval(out))


@needs_mask
def test_masked_process_and_its_children_see_no_avx512():
    env = avx2_host.masked_env()
    seen = _features(env)
    assert not any(f.startswith("avx512") for f in seen)
    assert {"avx", "avx2", "fma"} <= seen  # the rest of CPUID is the host's
    # a grandchild: exec clears CPUID faulting in the kernel, LD_PRELOAD sets it again
    code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {FEATURES!r}], check=True)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert not any(f.startswith("avx512") for f in ast.literal_eval(out))


@needs_mask
def test_check_command_passes():
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "avx2_host.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "avx2" in res.stdout and "avx512" not in res.stdout


@needs_mask
def test_a_real_segfault_still_kills_the_process():
    res = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.string_at(0)"],
                         env=avx2_host.masked_env(), capture_output=True, timeout=60)
    assert res.returncode == -signal.SIGSEGV


def test_refuses_without_cpuid_faulting(monkeypatch):
    monkeypatch.setattr(avx2_host, "cpu_flags", lambda: {"avx2", "fma"})
    with pytest.raises(avx2_host.MaskUnavailable, match="cpuid_fault"):
        avx2_host.masked_env()


def test_refuses_without_a_compiler(monkeypatch):
    monkeypatch.setattr(avx2_host, "cpu_flags", lambda: {"cpuid_fault"})
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(avx2_host.MaskUnavailable, match="install gcc or set CC"):
        avx2_host.masked_env()


def test_main_reports_refusal_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(avx2_host, "cpu_flags", lambda: set())
    assert avx2_host.main(["--check"]) == 2
    assert "CPUID faulting" in capsys.readouterr().err
