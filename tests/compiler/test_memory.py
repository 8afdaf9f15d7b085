"""Compiling ever-new graphs in one process stays bounded: the compiled
kernels of modules that are gone are released (in-process memos are bounded,
runtime-fused kernels belong to their module), so memory mappings stay
flat; recompiling from the disk cache does not grow the process at all.

What still grows while kernels are *compiled* (about 50-100 KB per new
kernel) is inside llvmlite's new pass manager (LLVMPY_RunNewModulePassManager
leaks per run, measured with llvmlite alone); it stops once kernels come
from the cache."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_many_distinct_graphs_keep_mappings_flat_and_warm_runs_do_not_grow(tmp_path):
    env = dict(os.environ, FUELC_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("memory_child.py")),
                           "8", "15", "3"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines()]
    cold = [(int(m), int(r)) for p, _, m, r in rows if p == "cold"]
    warm = [(int(m), int(r)) for p, _, m, r in rows if p == "warm"]
    assert len(cold) == len(warm) == 3
    maps = [m for m, _ in cold + warm]
    # before: every compiled module left its MCJIT objects mapped (~2 mappings a graph)
    assert max(maps) - min(maps) <= 8, maps
    # the same 45 graphs again, kernels from disk: the process does not grow
    assert warm[-1][1] - warm[0][1] < 2048, warm
    # compiling: bounded per graph (the llvmlite pass-manager growth, not fuelc's caches)
    assert (cold[-1][1] - cold[0][1]) / 30 < 400, cold
