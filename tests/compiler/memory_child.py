"""Child process of test_memory.py: compile many distinct graphs with small
in-process bounds, and print "<phase> <graphs> <maps> <rss_kb>" after each
batch: first cold (every kernel compiled), then the same graphs again (every
kernel from the disk cache, the in-process memos long evicted)."""
import ctypes
import gc
import sys

import numpy as np

from compiler import Graph, compile
from compiler.codegen import family
from compiler.codegen.cache import KernelCache

bound, batch, batches = (int(a) for a in sys.argv[1:4])
family.MAX_COMPILED = bound
KernelCache.MAX_LOADED = bound
_libc = ctypes.CDLL(None)


def snapshot():
    gc.collect()
    _libc.malloc_trim(0)  # what is free goes back: RSS then counts what is live
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return maps, rss


x = np.linspace(-1, 1, 16, dtype=np.float32)
for phase in ("cold", "warm"):
    for b in range(batches):
        for i in range(b * batch, (b + 1) * batch):
            g = Graph()
            t = g.input("x", (16,), "f32")
            c = 1.0 + i / 1024  # a new scalar: a new runtime-fused kernel instance
            g.output((t * c).exp() + c, name="y")
            m = compile(g)
            np.testing.assert_allclose(m(x=x), np.exp(x * np.float32(c)) + np.float32(c),
                                       rtol=1e-5)
            del m
        print(phase, (b + 1) * batch, *snapshot(), flush=True)
