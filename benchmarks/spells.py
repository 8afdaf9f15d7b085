"""Whole models timed per state of the VM's vCPUs: quiet, one vCPU slow, or the
two sharing one core.

    python benchmarks/avx2_host.py benchmarks/spells.py --model mobilenet --batch 8 \\
        --threads 2 --target cpu:x86-64-v3 --blocks 60
    python benchmarks/spells.py --model bert --seq 32 --ab FUELC_TILE_SCHEDULE=even,halved
    python benchmarks/spells.py --model mobilenet --ab FUELC_NUM_THREADS=2,1

On the shared 2-vCPU VM one vCPU runs at about half speed for spells of 1-3 s
(likely the host's SMT sibling busy with another guest), in turn on either
vCPU. A process's median then depends on how many of its runs fell in a
spell. In other spells each vCPU alone runs at full speed but the two at once
run at half speed each, FMA-bound code only (a chain of dependent integer
multiplies keeps its speed): the host then runs the two vCPUs on the two
hardware threads of one core, and a 2-thread call gets one core's FMA units.
Here the runs come in blocks, each between two probes of the vCPUs'
speeds (``benchmarks/vcpus.py``: an FMA-bound loop pinned to each CPU in
turn, then on every CPU at once, one thread each); a block
whose two probes agree is filed under their state: ``quiet`` (no vCPU slower
than ``SLOW`` times the fastest probe of the process, alone or together),
``one slow`` or ``both slow`` (alone), ``shared core`` (full speed alone,
every vCPU ``SLOW`` times its own speed or more with the others running);
blocks whose probes differ are left out. Within a block fuelc
and onnxruntime (``--ab``: also each variant of a setting) take turns, the
order rotating from block to block. A row gives each one's median per state
and its ratio to onnxruntime. Spells are rare some hours: ``--log FILE``
appends every block to a file, ``--summary FILE`` reports all of them. docs/benchmarks.md, "Slow spells: one vCPU at
half speed" and "Slow spells are shared cores".
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402

from benchmarks import models, vcpus  # noqa: E402

#: The vCPUs' probes (each alone, then all at once) and states: benchmarks/vcpus.py.
probe, pair_probe, state = vcpus.alone, vcpus.together, vcpus.state
STATES, SLOW = vcpus.STATES, vcpus.SLOW


def classify(blocks: list[tuple]) -> dict[str, list[dict]]:
    """Blocks ``(probe before, probe after, times[, pair before, pair
    after])`` by state; a block whose probes disagree is left out (under
    ``mixed``)."""
    fastest = min(min(b) for before, after, *_ in blocks for b in (before, after))
    out: dict[str, list[dict]] = {s: [] for s in (*STATES, "mixed")}
    for before, after, ts, *pairs in blocks:
        pb, pa = pairs if pairs else (None, None)
        s0, s1 = state(before, fastest, pb), state(after, fastest, pa)
        out[s0 if s0 == s1 else "mixed"].append(ts)
    return out


def _variants(ab: str | None) -> list[tuple[str, str | None, str | None]]:
    """``[(label, variable, value)]``: fuelc as set, or once per ``VAR=a,b`` value."""
    if not ab:
        return [("fuelc", None, None)]
    var, _, values = ab.partition("=")
    return [(f"fuelc {v}", var, v) for v in values.split(",")]


def _set(var: str | None, value: str | None, threads: int) -> None:
    """The variant's setting (``FUELC_NUM_THREADS``: the thread count, else
    ``threads``; any other variable is set and read again)."""
    from compiler.codegen import parallel
    if var == parallel.ENV:
        parallel.set_num_threads(int(value))
        return
    parallel.set_num_threads(threads)
    if var is not None:
        os.environ[var] = value
        parallel.reload_settings()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", choices=sorted(models.MODELS), default=[])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--blocks", type=int, default=40, help="blocks of runs per model")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs of each per block")
    ap.add_argument("--ab", help="VAR=a,b: fuelc compiled and timed once per value of the "
                                 "environment variable (read again by compiler.codegen.parallel; "
                                 "FUELC_NUM_THREADS=2,1: the thread count)")
    ap.add_argument("--log", help="append each block (probes, times) to this file, one JSON line")
    ap.add_argument("--summary", help="only report the blocks of a --log file")
    args = ap.parse_args(argv)
    if args.summary:
        summary(args.summary)
        return 0
    from compiler import compile
    from compiler.codegen import parallel
    from compiler.frontends.onnx import import_model
    parallel.set_num_threads(args.threads)
    cpus = sorted(os.sched_getaffinity(0))
    print(f"target {args.target}, {args.threads} threads, CPUs {cpus}, "
          f"{args.blocks} blocks of {args.repeats} runs each; AVX-512 hidden: "
          f"{'yes' if os.environ.get('FUELC_BENCH_AVX512_HIDDEN') else 'no'}")
    for name in args.model:
        model = models.build(name, args.batch, args.seq)
        feeds = models.make_inputs(model)
        session = models.ort_session(model.SerializeToString(), args.threads)
        theirs = session.run(None, feeds)[0]
        runs = []
        for label, var, value in _variants(args.ab):
            _set(var, value, args.threads)
            m = compile(import_model(model), target=args.target)
            ours = m(**feeds)
            ours = next(iter(ours.values())) if isinstance(ours, dict) else ours
            diff = float(np.max(np.abs(np.asarray(ours) - theirs))) / float(np.max(np.abs(theirs)))
            runs.append((label, var, value, m, ours))
            print(f"{name} b{args.batch}: {label} compiled, rel diff {diff:.1e}")
        for i in range(1, len(runs)):
            same = np.array_equal(runs[0][4], runs[i][4])
            print(f"  {runs[i][0]} bit-identical to {runs[0][0]}: {same}")
        fns = [(label, var, value, lambda m=m: m(**feeds)) for label, var, value, m, _ in runs]
        fns.append(("ort", None, None, lambda: session.run(None, feeds)))
        blocks = []
        for b in range(args.blocks):
            before, pair_before = probe(cpus), pair_probe(cpus)
            ts: dict[str, list[float]] = {}
            k = b % len(fns)
            for label, var, value, fn in fns[k:] + fns[:k]:
                _set(var, value, args.threads)
                ts[label] = []
                for _ in range(args.repeats):
                    t = time.perf_counter()
                    fn()
                    ts[label].append(time.perf_counter() - t)
            blocks.append((before, probe(cpus), ts, pair_before, pair_probe(cpus)))
            if args.log:
                with open(args.log, "a") as f:
                    f.write(json.dumps({"model": name, "batch": args.batch, "target": args.target,
                                        "before": blocks[-1][0], "after": blocks[-1][1],
                                        "pair_before": pair_before, "pair_after": blocks[-1][4],
                                        "times": ts}) + "\n")
        report(name, args.batch, blocks, [f[0] for f in fns])
    return 0


def summary(path: str) -> None:
    """The report of every block appended to ``path`` (``--log``), per model
    and batch (several processes' blocks together)."""
    groups: dict[tuple, list] = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            groups.setdefault((r["model"], r["batch"]), []).append(
                (r["before"], r["after"], r["times"], r.get("pair_before"), r.get("pair_after")))
    for (name, batch), blocks in groups.items():
        report(name, batch, blocks, list(blocks[0][2]))


def report(name: str, batch: int, blocks, labels: list[str]) -> None:
    by = classify(blocks)
    fastest = min(min(b) for before, after, *_ in blocks for b in (before, after))
    print(f"{name} b{batch}: probe fastest {fastest:.1f} us; blocks "
          + ", ".join(f"{s} {len(v)}" for s, v in by.items()))
    for s in (*STATES, "mixed"):
        if not by[s]:
            continue
        med = {lab: statistics.median(t for ts in by[s] for t in ts[lab]) * 1e3 for lab in labels}
        cells = [f"{lab} {med[lab]:.2f} ms" for lab in labels]
        ratios = [f"{lab}/ort {med[lab] / med['ort']:.3f}" for lab in labels if lab != "ort"]
        n = sum(len(ts["ort"]) for ts in by[s])
        print(f"  {s:11s} ({n} runs each): " + ", ".join(cells) + "; " + ", ".join(ratios))


if __name__ == "__main__":
    raise SystemExit(main())
