"""Child process of test_mapped_weights.py: import an ONNX model whose
weights are external data, compile it, save it, load it and run it, twice
(the first round warms the kernel cache and the compiler's own memory), and
print one JSON line: per step of the second round, the peak growth of
anonymous (RssAnon) memory over the step, sampled every millisecond, and
its seconds; the growth of resident memory (VmRSS: mapped file pages too)
over the load; whether the loaded weights are a read-only map; the largest
difference of the output from numpy's."""
import ctypes
import gc
import json
import mmap
import os
import sys
import threading
import time

import numpy as np

from compiler import compile
from compiler.frontends.onnx import import_model
import runtime

model, out = sys.argv[1:3]
_libc = ctypes.CDLL(None)


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def anon_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))


class Peak:
    """The largest RssAnon seen while the block runs, minus the one before."""

    def __enter__(self):
        gc.collect()
        _libc.malloc_trim(0)
        self.start = self.peak = anon_kb()
        self.stop = False
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        self.t0 = time.perf_counter()
        return self

    def _sample(self):
        while not self.stop:
            self.peak = max(self.peak, anon_kb())
            time.sleep(0.001)

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        self.stop = True
        self.thread.join()
        self.peak = max(self.peak, anon_kb())
        self.growth_kb = self.peak - self.start


def mapped(arr) -> bool:
    base = arr
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):  # np.frombuffer over a map
        base = base.obj
    return isinstance(base, mmap.mmap) and memoryview(base).readonly


x = np.random.default_rng(1).standard_normal((1, 1024)).astype(np.float32)
for round_ in ("warm-up", "measured"):
    steps = {}
    with Peak() as p:
        g = import_model(model)
    steps["import"] = p
    with Peak() as p:
        # without fuel-prepack-weights, which makes a packed copy of each weight
        m = compile(g, pipeline="no-prepack")
    steps["compile"] = p
    with Peak() as p:
        m.save(out)
    steps["save"] = p
    del m, g
    rss0 = rss_kb()
    with Peak() as p:
        loaded = runtime.load(out)
    steps["load"] = p
    load_rss_kb = rss_kb() - rss0  # file pages too: the map is not read by load
    with Peak() as p:
        y = loaded(x=x)
    steps["run"] = p
    consts = list(loaded.plan.constants.values())
    ref = x.astype(np.float64)
    for w in consts:  # the model is a chain of MatMuls in constant order
        ref = ref @ w.astype(np.float64)
    result = {"steps": {k: {"anon_growth_kb": v.growth_kb, "seconds": round(v.seconds, 3)}
                        for k, v in steps.items()},
              "mapped": all(mapped(w) for w in consts), "n_constants": len(consts),
              "load_rss_growth_kb": load_rss_kb,
              "max_abs_err": float(np.max(np.abs(y - ref)) / np.max(np.abs(ref)))}
    del loaded, consts
print(json.dumps(result))
