"""Winograd F(2x2, 3x3) against the direct kernel: one 3x3 conv layer or a model.

    python benchmarks/winograd_ab.py --layer 64,64,56 --batch 1 --threads 2
    python benchmarks/winograd_ab.py --model resnet --batch 8
    python benchmarks/avx2_host.py benchmarks/winograd_ab.py --target cpu:x86-64-v3

The layer (Cin,Cout,size: ``conv_layers.layer_model``, pads 1, a bias) or the
model (``models.build``) is compiled twice in one process, with
``conv_winograd.ENABLED`` off (the direct kernel) and on (the convs
``conv_winograd.takes`` accepts run as Winograd), and the two modules are
called in turns: ``--rounds`` rounds of ``--repeats`` calls, the round order
alternating. Prints the medians of the round medians, the per-round ratios
winograd / direct, and the largest difference between the two outputs
relative to the largest output.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

_ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)  # this checkout's compiler
from benchmarks.encoder import times  # noqa: E402


def main(argv=None) -> int:
    from benchmarks.conv_layers import layer_model
    from benchmarks.models import build
    from compiler import compile
    from compiler.codegen import parallel
    from compiler.codegen.lowering import conv_winograd
    from compiler.frontends.onnx import import_model
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layer", default="64,64,56", help="Cin,Cout,size of a 3x3 conv")
    ap.add_argument("--model", help="a benchmarks/models.py model instead of the layer")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--repeats", type=int, default=20)
    a = ap.parse_args(argv)
    parallel.set_num_threads(a.threads)
    if a.model:
        model, name = build(a.model, a.batch), a.model
    else:
        model = layer_model(*map(int, a.layer.split(",")), 3, 1, 1)[0]
        for v in (*model.graph.input, *model.graph.output):   # the batch
            v.type.tensor_type.shape.dim[0].dim_value = a.batch
        name = a.layer
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    mods = {}
    for on in (False, True):
        token = conv_winograd.ENABLED.set(on)
        try:
            mods[on] = compile(import_model(model), target=a.target)
            mods[on](**{inp.name: x})
        finally:
            conv_winograd.ENABLED.reset(token)
    ref, got = mods[False](**{inp.name: x}), mods[True](**{inp.name: x})
    print(f"rel diff {float(np.abs(got - ref).max() / np.abs(ref).max()):.2e}; winograd convs: "
          f"{sum('Winograd' in k for k in mods[True].kernel_summary())}")
    res = {False: [], True: []}
    for r in range(a.rounds):
        for on in ((False, True) if r % 2 == 0 else (True, False)):
            res[on].append(statistics.median(times(lambda: mods[on](**{inp.name: x}),
                                                   a.repeats)))
    d, w = statistics.median(res[False]), statistics.median(res[True])
    ratios = sorted(round(b / c, 3) for b, c in zip(res[True], res[False]))
    print(f"{name} b{a.batch} {a.target} t{a.threads}: direct {d * 1e3:.3f} ms  winograd "
          f"{w * 1e3:.3f} ms  w/d {w / d:.3f}  (per-round ratios {ratios})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
