"""The direct path's calls one by one against runs of them as native calls.

    FUELC_NUM_THREADS=1 python benchmarks/direct_run.py --model mobilenet --batch 1
    FUELC_NUM_THREADS=2 python benchmarks/direct_run.py --model resnet --model bert --target cpu:x86-64-v3

For each model of ``benchmarks/models.py`` (``--seq`` 32 for the
transformers) compiled for ``--target``: the kernel calls of its direct path
(``runtime.direct``) and the native runs they make (``DirectRun.segments``,
``runtime.native_plan``); then ``--calls`` whole-model calls ``m(**inputs)``
in each of two modes, alternating call by call in one process: "one by one"
(``segments`` set aside: one ctypes call per step, the split calls through
Python) and "native". Prints the min and median caller-thread CPU time and
wall time per mode, after checking the two give bit-identical outputs. The
machine is shared and noisy: compare the two modes of the same run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)  # this checkout's compiler

from benchmarks.models import MODELS, build, make_inputs  # noqa: E402


def _outputs(out) -> dict:
    return out if isinstance(out, dict) else {"out": out}


def run(name: str, batch: int, seq: int, target: str, calls: int) -> None:
    from compiler import compile
    from compiler.codegen import parallel
    from compiler.frontends.onnx import import_model
    model = build(name, batch, seq) if MODELS[name].uses_seq else build(name, batch)
    feeds = make_inputs(model)
    m = compile(import_model(model), target=target)
    m(**feeds)
    d = m.executor._direct
    if d is None or d.segments is None:
        print(f"{name} b{batch}: {'no direct path' if d is None else 'no native runs (no JIT)'}")
        return
    segments = d.segments
    modes = {"one by one": None, "native": segments}
    got = {}
    for mode, seg in modes.items():
        d.segments = seg
        got[mode] = _outputs(m(**feeds))
    for k, v in got["native"].items():
        if not np.array_equal(v, got["one by one"][k]):
            raise AssertionError(f"{name}: output {k} differs between the modes")
    print(f"{name} b{batch} {target} threads {parallel.num_threads()}: {len(d.calls)} calls, "
          f"{len(segments)} segments, {len(d.pools)} pool(s) held")
    cpu = {mode: [] for mode in modes}
    wall = {mode: [] for mode in modes}
    order = list(modes.items())
    try:
        for r in range(calls):
            for mode, seg in (order if r % 2 == 0 else order[::-1]):
                d.segments = seg
                t0, w0 = time.thread_time(), time.perf_counter()
                m(**feeds)
                w1, t1 = time.perf_counter(), time.thread_time()
                cpu[mode].append(t1 - t0)
                wall[mode].append(w1 - w0)
    finally:
        d.segments = segments
    for mode in modes:
        c, w = sorted(cpu[mode]), sorted(wall[mode])
        print(f"  {mode:10s} thread min {c[0] * 1e3:.3f} med {statistics.median(c) * 1e3:.3f} ms"
              f" | wall min {w[0] * 1e3:.3f} med {statistics.median(w) * 1e3:.3f} ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--calls", type=int, default=150, help="calls per mode")
    args = ap.parse_args(argv)
    for name in args.model or ["mobilenet", "resnet", "bert"]:
        run(name, args.batch, args.seq, args.target, args.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
