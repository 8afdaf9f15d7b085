"""Winograd F(2x2, 3x3) against the direct kernel on one 3x3 stride-1 conv layer.

    python benchmarks/winograd_ab.py --layer 64,64,56 --threads 2 --target cpu
    python benchmarks/avx2_host.py benchmarks/winograd_ab.py --target cpu:x86-64-v3

The layer (``conv_layers.layer_model``: pads 1, a bias) is compiled twice in
one process, with ``conv_winograd.ENABLED`` off and on (the compiled-kernel
memos cleared in between, so the second module compiles its own kernels),
and the two modules are called in turns: ``--rounds`` rounds of
``--repeats`` calls, the round order alternating; prints the medians of the
round medians and the per-round ratios winograd / direct, and the largest
difference between the two outputs relative to the largest output.
"""
import sys, statistics, time, argparse, numpy as np
from benchmarks.conv_layers import layer_model
from benchmarks.encoder import times
from compiler import compile
from compiler.codegen import parallel, family
from compiler.frontends.onnx import import_model
from compiler.codegen.lowering import conv_winograd as cw
ap = argparse.ArgumentParser()
ap.add_argument("--layer", default="64,64,56")
ap.add_argument("--batch", type=int, default=1)
ap.add_argument("--target", default="cpu")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--rounds", type=int, default=9)
ap.add_argument("--repeats", type=int, default=20)
a = ap.parse_args()
cin, cout, size = map(int, a.layer.split(","))
parallel.set_num_threads(a.threads)
model, shape, flops = layer_model(cin, cout, size, 3, 1, 1)
for v in (*model.graph.input, *model.graph.output):   # the batch
    v.type.tensor_type.shape.dim[0].dim_value = a.batch
shape = [a.batch, *shape[1:]]
mods = {}
for on in (False, True):
    tok = cw.ENABLED.set(on)
    family._compiled.clear()
    import gc
    for o in gc.get_objects():
        if isinstance(o, family.GeneratedKernel):
            o._calls = family.CallMemo(o._prepare)
    mods[on] = compile(import_model(model), target=a.target)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    mods[on](x=x)
    cw.ENABLED.reset(tok)
x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
ref = mods[False](x=x); got = mods[True](x=x)
print("rel diff", float(np.abs(got - ref).max() / np.abs(ref).max()))
res = {False: [], True: []}
for r in range(a.rounds):
    for on in ((False, True) if r % 2 == 0 else (True, False)):
        res[on].append(statistics.median(times(lambda: mods[on](x=x), a.repeats)))
d, w = statistics.median(res[False]), statistics.median(res[True])
print(f"{a.layer} b{a.batch} {a.target} t{a.threads}: direct {d*1e3:.3f} ms  winograd {w*1e3:.3f} ms  w/d {w/d:.3f}  "
      f"(per-round ratios {sorted(round(b/c,3) for b,c in zip(res[True],res[False]))})")
