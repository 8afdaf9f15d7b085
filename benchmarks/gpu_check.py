"""GPU check: the CUDA target's tests and a few figures, within five minutes.

    python benchmarks/gpu_check.py

Always runs the PTX checks (tests/cuda, no device needed). Without a CUDA
device (or cuda-python) it says so and exits 0. With one it also runs the
``gpu`` tests and prints: elementwise bandwidth (GB/s and the fraction of the
device's peak), softmax / layer-norm rows per second, matmul TFLOP/s and an
encoder-style block, each next to torch on the same GPU when torch is
installed. The figures time whole calls: a plan whose every step has a CUDA
kernel runs resident on the device (``runtime.cuda.resident``: the graph's
inputs are copied in and its outputs out, intermediates stay on the
device), so the input/output copies are included and the figures bound what
the kernels alone reach from below; each line says whether it ran resident and
which GPU strategies its launches used (``compiler.codegen.cuda.strategy``:
matmul-smem, row-reduce, grid-stride, or the generic tiled path).
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _pytest(*args: str) -> int:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", str(ROOT / "tests" / "cuda"),
                           *args], cwd=ROOT, timeout=240).returncode


def _time(fn, reps: int = 10) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def _peak_bandwidth() -> float | None:
    import runtime.cuda as rc
    driver, dev, _ = rc.context()
    a = driver.CUdevice_attribute
    clock = driver.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev)[1]  # kHz
    width = driver.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev)[1]
    return 2.0 * clock * 1e3 * width / 8 / 1e9 if clock and width else None


def _strategies(m) -> str:
    """Which GPU strategies the launches of compiled module ``m`` used, with
    counts (``row-reduce x2, generic x3``)."""
    from compiler.codegen.cuda.strategy import strategy_of
    counts: dict = {}
    for line in m.ir.get("launches", "").splitlines():
        if line.strip():
            name = strategy_of(line.split()[0])
            counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) or "no launches"


def _torch():
    try:
        import torch
        return torch if torch.cuda.is_available() else None
    except ImportError:
        return None


def benchmarks() -> None:
    from compiler import Graph, compile
    torch = _torch()
    rng = np.random.default_rng(0)
    peak = _peak_bandwidth()

    def row(name, ours_s, torch_s, work, unit):
        t = f"  torch {work / torch_s:10.2f} {unit}" if torch_s else ""
        where = "resident" if m.executor.resident is not None else "per-kernel"
        print(f"{name:28s} fuelc {work / ours_s:10.2f} {unit}{t}  ({where}; {_strategies(m)})")

    n = 1 << 24
    g = Graph()
    x = g.input("x", (n,), "f32")
    g.output(x * x + x, name="y")
    m = compile(g, "cuda")
    xv = rng.standard_normal(n).astype(np.float32)
    s = _time(lambda: m(x=xv))
    gb = 2 * 4 * n / 1e9
    ts = None
    if torch:
        xt = torch.from_numpy(xv).cuda()
        ts = _time(lambda: (xt * xt + xt, torch.cuda.synchronize()))
    row("elementwise (GB/s)", s, ts, gb, "GB/s")
    if peak:
        print(f"  device peak {peak:.0f} GB/s: fuelc {gb / s / peak:.1%} of peak (copies included)")

    for name, build, tfn in [
        ("softmax 4096x1024", lambda g, x: x.softmax(-1), lambda t: torch.softmax(t, -1)),
        ("layernorm 4096x1024", lambda g, x: x.layer_norm(
            g.constant(np.ones(1024, np.float32), name="w"),
            g.constant(np.zeros(1024, np.float32), name="b")),
         lambda t: torch.nn.functional.layer_norm(t, (1024,)))]:
        g = Graph()
        x = g.input("x", (4096, 1024), "f32")
        g.output(build(g, x), name="y")
        m = compile(g, "cuda")
        xv = rng.standard_normal((4096, 1024)).astype(np.float32)
        s = _time(lambda: m(x=xv))
        ts = None
        if torch:
            xt = torch.from_numpy(xv).cuda()
            ts = _time(lambda: (tfn(xt), torch.cuda.synchronize()))
        row(f"{name} (Mrows/s)", s, ts, 4096 / 1e6, "Mrows/s")

    k = 1024
    g = Graph()
    a, b = g.input("a", (k, k), "f32"), g.input("b", (k, k), "f32")
    g.output(a @ b, name="y")
    m = compile(g, "cuda")
    av, bv = (rng.standard_normal((k, k)).astype(np.float32) for _ in range(2))
    s = _time(lambda: m(a=av, b=bv), reps=3)
    ts = None
    if torch:
        at, bt = torch.from_numpy(av).cuda(), torch.from_numpy(bv).cuda()
        ts = _time(lambda: (at @ bt, torch.cuda.synchronize()))
    row("matmul 1024^3 (TFLOP/s)", s, ts, 2 * k ** 3 / 1e12, "TFLOP/s")

    d, seq = 256, 128
    g = Graph()
    x = g.input("x", (seq, d), "f32")
    w = lambda name, shape: g.constant((rng.standard_normal(shape) / np.sqrt(shape[0]))  # noqa: E731
                                       .astype(np.float32), name=name)
    h = x.layer_norm(w("g1", (d,)), w("b1", (d,)))
    q, kk, v = h @ w("wq", (d, d)), h @ w("wk", (d, d)), h @ w("wv", (d, d))
    att = (q @ kk.swapaxes(-1, -2)).softmax(-1) @ v
    y = x + att @ w("wo", (d, d))
    y = y + (y.layer_norm(w("g2", (d,)), w("b2", (d,))) @ w("w1", (d, 4 * d))).gelu() \
        @ w("w2", (4 * d, d))
    g.output(y, name="y")
    m = compile(g, "cuda")
    xv = rng.standard_normal((seq, d)).astype(np.float32)
    want = compile(g, "cpu")(x=xv)
    got = m(x=xv)
    err = float(np.max(np.abs(got - want)))
    s = _time(lambda: m(x=xv), reps=3)
    print(f"{'encoder block 128x256':28s} fuelc {s * 1e3:10.2f} ms   max |gpu - cpu| = {err:.2e}"
          f"  ({_strategies(m)})")


def main() -> int:
    t0 = time.perf_counter()
    rc = _pytest("-m", "not gpu and not slow")
    if rc != 0:
        print("gpu_check: the PTX checks failed")
        return rc
    import runtime.cuda
    if not runtime.cuda.available():
        print("gpu_check: no CUDA device (or cuda-python) here; the PTX checks passed, "
              "nothing to benchmark")
        return 0
    rc = _pytest("-m", "gpu and not slow")
    if rc != 0:
        print("gpu_check: GPU tests failed")
        return rc
    benchmarks()
    print(f"gpu_check: done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
