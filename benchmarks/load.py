"""``runtime.load`` of saved ``.fuel`` files, each load in a fresh process:
wall and CPU seconds of the call (medians), the resident memory it adds, and
the bytes it reads (``rchar``). The cases run interleaved, round after round,
with the page cache warm (every file is read once first).

    python benchmarks/load.py [--runs 7] [--code NAME=DIR ...] [--threads N ...]
                              [--buffer BYTES ...] FUEL ...

``--code before=DIR`` loads with the ``runtime`` package found in DIR instead
of this checkout's (for a before/after in one run: ``git archive main runtime
| tar -x -C DIR``). ``--threads`` sets ``runtime.artifact.MAX_HASH_THREADS``
(the threads that hash a digest tree; the CPUs the process may use, at most
that), ``--buffer`` its ``READ_BUFFER``; each value is a case of its own.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = r"""
import json, sys, time
import runtime, runtime.artifact as a
threads, buffer = int(sys.argv[2]), int(sys.argv[3])
if threads:
    a.MAX_HASH_THREADS = threads
if buffer:
    a.READ_BUFFER = buffer
def field(name, key):
    with open(f"/proc/self/{name}") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key + ":"))
rss, read = field("status", "VmRSS"), field("io", "rchar")
t, cpu = time.perf_counter(), time.process_time()
runtime.load(sys.argv[1])
print(json.dumps({"wall": time.perf_counter() - t, "cpu": time.process_time() - cpu,
                  "rss_mib": (field("status", "VmRSS") - rss) / 1024,
                  "read_mib": (field("io", "rchar") - read) / 2**20}))
"""


def _files(fuel: str) -> list[Path]:
    side = Path(fuel).with_suffix(".weights")
    return [Path(fuel)] + ([side] if side.exists() else [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fuel", nargs="+")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--code", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--threads", type=int, action="append", default=[])
    ap.add_argument("--buffer", type=int, action="append", default=[])
    args = ap.parse_args()
    codes = [c.split("=", 1) for c in args.code] or [["this", str(ROOT)]]
    cases = list(itertools.product(codes, args.fuel, args.threads or [0], args.buffer or [0]))
    for fuel in args.fuel:  # the page cache warm
        for p in _files(fuel):
            with open(p, "rb") as f:
                while f.read(16 << 20):
                    pass
    got = {i: [] for i in range(len(cases))}
    for _ in range(args.runs):
        for i, ((_, code), fuel, threads, buffer) in enumerate(cases):
            env = dict(os.environ, PYTHONPATH=code)
            out = subprocess.run([sys.executable, "-c", CHILD, fuel, str(threads), str(buffer)],
                                 env=env, capture_output=True, text=True, check=True).stdout
            got[i].append(json.loads(out.splitlines()[-1]))
    print(f"{'code':8} {'file':36} {'MiB':>6} thr  buffer  wall s (min-max)      "
          f"CPU s (min-max)       RSS MiB  read MiB")
    for i, ((name, _), fuel, threads, buffer) in enumerate(cases):
        rows = got[i]
        def med(k):
            v = [r[k] for r in rows]
            return f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"
        size = sum(p.stat().st_size for p in _files(fuel)) / 2**20
        print(f"{name:8} {fuel[-36:]:36} {size:6.0f} {threads or '-':>3} {buffer or '-':>7}  "
              f"{med('wall'):21} {med('cpu'):21} {statistics.median(r['rss_mib'] for r in rows):7.1f}"
              f"  {statistics.median(r['read_mib'] for r in rows):8.1f}")


if __name__ == "__main__":
    main()
