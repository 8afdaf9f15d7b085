"""Per-call overhead of compiled fuelc models (Python work around the kernels).

    python benchmarks/overhead.py            # 2000 calls per case
    python benchmarks/overhead.py --calls 500
    python benchmarks/overhead.py --profile  # cProfile of the chain, top 25

Cases, each tiny so kernel time is negligible and what is measured is the
executor / kernel-call path:

* ``mlp``: the MLP of ``examples/mlp.py`` (8x64 -> 128 -> 32, 4 kernels);
* ``chain20``: 20 elementwise ops on an [8, 64] f32 input compiled with the
  ``no-fusion`` pipeline (20 kernel steps);
* ``chain20-fused``: the same chain through the default pipeline;
* ``chain100``: 100 elementwise ops, ``no-fusion`` (100 kernel steps; the
  goal is under 10 us per op);
* ``numpy-mlp``: ``examples/mlp.py``'s numpy version of the MLP, the peer the
  compiled MLP should not be slower than.

Prints the median and p10/p90 wall time per call in microseconds, the
kernel-step count and the median per kernel step. Kernels run on one thread
(tiny ops never split). The machine is shared and noisy: quote medians.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))  # this checkout's compiler

from compiler import Graph, compile  # noqa: E402
from runtime.executor import KernelStep  # noqa: E402


def chain_graph(n_ops: int = 20, shape=(8, 64)):
    g = Graph()
    x = g.input("x", shape, "f32")
    y = x
    ops = [lambda v: v * 1.01, lambda v: v + 0.5, lambda v: v.relu(), lambda v: v - 0.25,
           lambda v: v * 0.99]
    for i in range(n_ops):
        y = ops[i % len(ops)](y)
    g.output(y, name="y")
    return g


class _Numpy:
    """A numpy function posing as a compiled module (no plan, no kernels)."""

    def __init__(self, fn, consts):
        self.fn, self.consts, self.plan = fn, consts, None

    def __call__(self, **inputs):
        return self.fn(*inputs.values(), *self.consts)


def cases():
    import mlp
    g, consts = mlp.build()
    x_mlp = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    x_chain = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)
    return [("mlp", compile(g, target="cpu"), {"x": x_mlp}),
            ("numpy-mlp", _Numpy(mlp.numpy_mlp, consts), {"x": x_mlp}),
            ("chain20", compile(chain_graph(), target="cpu", pipeline="no-fusion"),
             {"x": x_chain}),
            ("chain20-fused", compile(chain_graph(), target="cpu"), {"x": x_chain}),
            ("chain100", compile(chain_graph(100), target="cpu", pipeline="no-fusion"),
             {"x": x_chain})]


def per_call(fn, calls: int, warmup: int = 50) -> list[float]:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return ts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)
    from compiler.codegen import parallel
    parallel.set_num_threads(1)
    all_cases = cases()
    if args.profile:
        import cProfile
        import pstats
        for name, m, inputs in all_cases[:2]:
            print(f"== {name}")
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(args.calls):
                m(**inputs)
            pr.disable()
            pstats.Stats(pr).sort_stats("tottime").print_stats(25)
        return
    for name, m, inputs in all_cases:
        steps = m.plan.steps if m.plan is not None else []
        n_kernels = sum(isinstance(s, KernelStep) for s in steps)
        ts = sorted(per_call(lambda: m(**inputs), args.calls))
        q = statistics.quantiles(ts, n=10)
        med = statistics.median(ts) * 1e6
        per_op = f"  {med / n_kernels:6.1f} us/kernel" if n_kernels else ""
        print(f"{name:<14} {n_kernels:3d} kernels, {len(steps):3d} steps: "
              f"median {med:8.1f} us  (p10 {q[0] * 1e6:7.1f}, p90 {q[-1] * 1e6:7.1f}){per_op}",
              flush=True)


if __name__ == "__main__":
    main()
