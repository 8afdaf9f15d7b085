"""Pass-pipeline time on large modules: how the passes scale with op count.

    python benchmarks/passes.py                 # 1k, 10k and 50k ops
    python benchmarks/passes.py --sizes 1000 4000
    python benchmarks/passes.py --profile 10000 # cProfile of the default pipeline, top 25

Modules, each a single function of fuel text:

* ``chain``: an elementwise chain (mul_scalar, add, tanh, mul, neg, repeated);
  the default pipeline turns it into runtime fused ops;
* ``mixed``: repeated transformer-ish blocks (matmul + bias, a spelled-out
  softmax and RMS norm, which fuel-fuse rewrites to fused ops, plus
  elementwise tails and some duplicated ops for fuel-cse and dead ops for
  fuel-dce).

Prints the time of each pass of the default pipeline and the total, per
module and size, plus the time per op: near-linear passes keep it flat as the
size grows. The machine is shared and noisy: compare ratios, not absolutes.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from compiler.mlir import ir, make_context  # noqa: E402
from compiler.passes import DEFAULT_PIPELINE, run_pipeline  # noqa: E402
from compiler.passes.pipeline import parse_pipeline, render_pipeline  # noqa: E402

T = "tensor<4x8xf32>"
R = "tensor<4xf32>"
U = "tensor<4x1xf32>"
W = "tensor<8x8xf32>"


def chain_module(n_ops: int) -> str:
    """``n_ops`` elementwise ops in one chain over two inputs."""
    lines = [f"func.func @chain(%x: {T}, %y: {T}) -> {T} {{"]
    cur = "%x"
    for i in range(n_ops):
        k = i % 5
        if k == 0:
            lines.append(f'  %v{i} = "fuel.mul_scalar"({cur}) {{value = 1.5 : f64}} : ({T}) -> {T}')
        elif k == 1:
            lines.append(f'  %v{i} = "fuel.add"({cur}, %y) : ({T}, {T}) -> {T}')
        elif k == 2:
            lines.append(f'  %v{i} = "fuel.tanh"({cur}) : ({T}) -> {T}')
        elif k == 3:
            lines.append(f'  %v{i} = "fuel.mul"({cur}, %x) : ({T}, {T}) -> {T}')
        else:
            lines.append(f'  %v{i} = "fuel.neg"({cur}) : ({T}) -> {T}')
        cur = f"%v{i}"
    lines += [f"  return {cur} : {T}", "}"]
    return "\n".join(lines)


def _block(i: int, cur: str) -> tuple[list[str], str, int]:
    """One block of the mixed model: (lines, its output value, ops in it)."""
    p = f"%b{i}_"
    lines = [
        f'  {p}mm = "fuel.mat_mul"({cur}, %w) : ({T}, {W}) -> {T}',
        f'  {p}lin = "fuel.add"({p}mm, %bias) : ({T}, {T}) -> {T}',
        # softmax over the last axis, spelled out
        f'  {p}mx = "fuel.max_dim"({p}lin) {{axis = 1 : i64}} : ({T}) -> {R}',
        f'  {p}mu = "fuel.unsqueeze"({p}mx) {{dim = 1 : i64}} : ({R}) -> {U}',
        f'  {p}mb = "fuel.broadcast_to"({p}mu) {{shape = [4, 8]}} : ({U}) -> {T}',
        f'  {p}sh = "fuel.sub"({p}lin, {p}mb) : ({T}, {T}) -> {T}',
        f'  {p}ex = "fuel.exp"({p}sh) : ({T}) -> {T}',
        f'  {p}sm = "fuel.sum_dim"({p}ex) {{axis = 1 : i64}} : ({T}) -> {R}',
        f'  {p}su = "fuel.unsqueeze"({p}sm) {{dim = 1 : i64}} : ({R}) -> {U}',
        f'  {p}sb = "fuel.broadcast_to"({p}su) {{shape = [4, 8]}} : ({U}) -> {T}',
        f'  {p}soft = "fuel.div"({p}ex, {p}sb) : ({T}, {T}) -> {T}',
        # an elementwise tail (a runtime fused group), a duplicate, a dead op
        f'  {p}t0 = "fuel.mul_scalar"({p}soft) {{value = 2.0 : f64}} : ({T}) -> {T}',
        f'  {p}t1 = "fuel.tanh"({p}t0) : ({T}) -> {T}',
        f'  {p}t1d = "fuel.tanh"({p}t0) : ({T}) -> {T}',
        f'  {p}t2 = "fuel.add"({p}t1, {p}t1d) : ({T}, {T}) -> {T}',
        f'  {p}dead = "fuel.exp"({p}t2) : ({T}) -> {T}',
        f'  {p}out = "fuel.add"({p}t2, {cur}) : ({T}, {T}) -> {T}',
    ]
    return lines, f"{p}out", len(lines)


def mixed_module(n_ops: int) -> str:
    """Blocks of ``_block`` until about ``n_ops`` ops."""
    lines = [f"func.func @mixed(%x: {T}, %w: {W}, %bias: {T}) -> {T} {{"]
    cur, count, i = "%x", 0, 0
    while count < n_ops:
        blk, cur, k = _block(i, cur)
        lines += blk
        count += k
        i += 1
    lines += [f"  return {cur} : {T}", "}"]
    return "\n".join(lines)


MODULES = {"chain": chain_module, "mixed": mixed_module}


def pass_times(text: str) -> dict[str, float]:
    """Seconds per pass of the default pipeline (each pass run on its own,
    in order, on the same module), plus ``parse`` and ``total``."""
    times: dict[str, float] = {}
    with make_context(), ir.Location.unknown():
        t0 = time.perf_counter()
        m = ir.Module.parse(text)
        times["parse"] = time.perf_counter() - t0
        for elem in parse_pipeline(DEFAULT_PIPELINE):
            t0 = time.perf_counter()
            run_pipeline(m, render_pipeline([elem]), reproducer=False)
            times[elem.name] = time.perf_counter() - t0
    times["total"] = sum(v for k, v in times.items() if k != "parse")
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 50000])
    ap.add_argument("--modules", nargs="+", default=list(MODULES), choices=list(MODULES))
    ap.add_argument("--profile", type=int, metavar="N", default=None,
                    help="profile the default pipeline on the N-op chain and exit")
    args = ap.parse_args(argv)
    if args.profile:
        text = chain_module(args.profile)
        prof = cProfile.Profile()
        prof.enable()
        pass_times(text)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        return 0
    for name in args.modules:
        for n in args.sizes:
            text = MODULES[name](n)
            t = pass_times(text)
            per = " ".join(f"{k}={v:.2f}s" for k, v in t.items())
            print(f"{name:6s} n={n:6d}  {per}  ({1e6 * t['total'] / n:.0f} us/op)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
