"""Fused kernels with run-time extents against the same instance compiled for
its static shape, called directly on one thread.

    python benchmarks/dynamic_kernels.py                      # host target
    python benchmarks/dynamic_kernels.py --target cpu:x86-64-v3 --only attn

The kernels a symbolic module shares across sizes (docs/dynamic-shapes.md): the
FlashAttn cpu kernel with run-time batch and sequence (causal, as
``fuel-fuse`` creates it; BERT-sized heads), the FusedLinear GELU epilogue
with run-time rows (an encoder's FFN over a packed B), and the Conv2D
(direct classes) and MaxPool2D kernels with run-time batch and image size. Each case's dynamic
kernel (what static and symbolic compiles run) and the ``StaticInstance`` of
the same op (extents compiled in) are checked bit-identical, then called in
``--rounds`` interleaved rounds of ``--repeats`` calls (each round's order
alternating); the figure per kernel is the median (and the minimum) of the
calls' thread CPU time, so another process on the machine costs a call
little. dynamic/static > 1: the run-time extents cost time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

_ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)  # this checkout's compiler

#: name -> (batch, heads, seq, head size): causal self-attention
ATTN = {"attn b1 s32": (1, 4, 32, 64), "attn b1 s128": (1, 4, 128, 64),
        "attn b8 s32": (8, 4, 32, 64), "attn b8 s128": (8, 4, 128, 64),
        "attn b2 s77": (2, 12, 77, 64)}
#: name -> (rows, K, N): x [rows, K] @ W [K, N] + bias, then the erf GELU
GELU = {"gelu rows 32": (32, 256, 1024), "gelu rows 256": (256, 256, 1024),
        "gelu rows 1024": (1024, 256, 1024), "gelu rows 77": (77, 768, 3072)}
#: name -> (x shape, Cout, kernel, stride, groups): Conv2D + bias + ReLU with
#: run-time batch and image size (ResNet- and MobileNet-style layers)
CONV = {"conv3x3 b1 64x56^2": ((1, 64, 56, 56), 64, 3, 1, 1),
        "conv3x3 b8 128x28^2": ((8, 128, 28, 28), 128, 3, 1, 1),
        "conv3x3 s2 b1 64x56^2": ((1, 64, 56, 56), 128, 3, 2, 1),
        "conv3x3 b1 32x33x47": ((1, 32, 33, 47), 32, 3, 1, 1),
        "conv3x3 b8 256x7^2": ((8, 256, 7, 7), 256, 3, 1, 1),
        "conv3x3 b1 256x1^2": ((1, 256, 1, 1), 256, 3, 1, 1),
        "conv3x3 b1 256x2^2": ((1, 256, 2, 2), 256, 3, 1, 1),
        "conv3x3 b8 256x2^2": ((8, 256, 2, 2), 256, 3, 1, 1),
        "conv3x3 b1 128x4^2": ((1, 128, 4, 4), 128, 3, 1, 1),
        "conv3x3 s2 b1 128x4^2": ((1, 128, 4, 4), 256, 3, 2, 1),
        "dw3x3 b1 144x56^2": ((1, 144, 56, 56), 144, 3, 1, 144),
        "dw3x3 s2 b8 96x28^2": ((8, 96, 28, 28), 96, 3, 2, 96),
        "dw3x3 b8 384x7^2": ((8, 384, 7, 7), 384, 3, 1, 384),
        "stem7x7 s2 b1 3x112^2": ((1, 3, 112, 112), 64, 7, 2, 1),
        "pw1x1 b8 32x28^2 192": ((8, 32, 28, 28), 192, 1, 1, 1),
        "pw1x1 b1 256x14^2 64": ((1, 256, 14, 14), 64, 1, 1, 1),
        "pw1x1 b1 16x56^2 96": ((1, 16, 56, 56), 96, 1, 1, 1),
        "pw1x1 b1 144x28^2 24": ((1, 144, 28, 28), 24, 1, 1, 1),
        "pw1x1 b1 192x14^2 32": ((1, 192, 14, 14), 32, 1, 1, 1),
        "pw1x1 b8 384x7^2 64": ((8, 384, 7, 7), 64, 1, 1, 1)}
#: name -> (x shape, kernel, stride, padding): MaxPool2D with run-time batch
#: and image size (a ResNet stem pool; odd sizes leave a masked last vector)
POOL = {"pool b1 64x112^2": ((1, 64, 112, 112), 3, 2, 1),
        "pool b8 32x32^2": ((8, 32, 32, 32), 3, 2, 1),
        "pool b2 16x33x47": ((2, 16, 33, 47), 3, 2, 1),
        "pool b1 8x64x40 s1": ((1, 8, 64, 40), 3, 1, 1)}


def _thread_times(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.thread_time()
        fn()
        out.append(time.thread_time() - t0)
    return out


def _instances(name: str, target):
    """``(instance, input arrays, output array)`` of case ``name``."""
    from compiler.codegen.fused import FusedInstance
    from compiler.graph.opdef import TensorType
    from runtime.dtype import DType
    rng = np.random.default_rng(1)
    f32 = DType.F32
    if name in CONV:
        xs, cout, k, st, groups = CONV[name]
        x = rng.standard_normal(xs).astype(np.float32)
        w = (rng.standard_normal((cout, xs[1] // groups, k, k)) / k).astype(np.float32)
        b = rng.standard_normal(cout).astype(np.float32)
        params = dict(stride=(st, st), padding=(k // 2, k // 2), groups=groups, dilation=(1, 1),
                      clamp_min=0.0, clamp_max=None, silu=None, gelu=None, residual=None,
                      image_at_run_time=True)
        inst = FusedInstance("Conv2D", tuple(sorted(params.items())),
                             tuple(TensorType(a.shape, f32) for a in (x, w, b)))
        import dataclasses
        inst = dataclasses.replace(inst, unit_stride=(0, 1, 2, 3))
        if (k, st) == (1, 1):   # a pointwise conv's contiguous operands (FusedFamily.instance)
            inst = dataclasses.replace(inst, contiguous=(0, 1, 2, 3))
        elif groups == 1:   # the weight's rows (a few-pixel product: FusedFamily.instance)
            inst = dataclasses.replace(inst, contiguous=(1,))
        return inst, [x, w, b], np.empty(inst.output_type().shape, np.float32)
    if name in POOL:
        xs, k, st, pad = POOL[name]
        x = rng.standard_normal(xs).astype(np.float32)
        params = dict(kernel=(k, k), stride=(st, st), dilation=(1, 1), padding=(pad,) * 4,
                      image_at_run_time=True)
        inst = FusedInstance("MaxPool2D", tuple(sorted(params.items())),
                             (TensorType(x.shape, f32),))
        import dataclasses
        inst = dataclasses.replace(inst, unit_stride=(0, 1))
        out = inst.output_type().shape
        return inst, [x], np.empty(out, np.float32)
    if name in ATTN:
        b, h, s, d = ATTN[name]
        arrays = [rng.standard_normal((b, h, s, d)).astype(np.float32) for _ in range(3)]
        params = dict(softmax_scale=d ** -0.5, causal=True, window_size_left=None,
                      window_size_right=None, softcap=None, k_len=None)
        inst = FusedInstance("FlashAttn", tuple(sorted(params.items())),
                             tuple(TensorType(a.shape, f32) for a in arrays))
        return inst, arrays, np.empty((b, h, s, d), np.float32)
    import dataclasses
    from compiler.codegen.fused import FAMILY
    m, k, n = GELU[name]
    from runtime.opkind import OpKind
    panel = FAMILY.b_panel(OpKind.FusedLinear, (f32,) * 4, target)  # the matmul's nr
    arrays = [rng.standard_normal((m, k)).astype(np.float32),
              (rng.standard_normal((n // panel, k, panel)) / np.sqrt(k)).astype(np.float32),
              rng.standard_normal(n).astype(np.float32)]
    inst = FusedInstance("FusedLinear", (("b_panel", panel), ("gelu", True)),
                         tuple(TensorType(a.shape, f32) for a in arrays))
    inst = dataclasses.replace(inst, unit_stride=(0, 1, 2, 3))
    return inst, arrays, np.empty((m, n), np.float32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--only", default="", help="comma-separated substrings of case names")
    args = ap.parse_args(argv)
    from compiler.codegen.family import StaticInstance
    from compiler.codegen.fused import FAMILY
    from compiler.targets import parse_target
    from runtime.memref import descriptor_from_array
    target = parse_target(args.target)
    only = [s for s in args.only.split(",") if s]
    print(f"target {args.target} ({target.arch}), one thread, {args.rounds} rounds of "
          f"{args.repeats} calls, thread CPU time; dynamic/static > 1: dynamic slower")
    print(f"{'kernel':16s} {'static ms':>9s} {'dynamic ms':>10s} {'dyn/static':>10s} "
          f"{'min static':>10s} {'min dynamic':>11s} {'of mins':>8s}")
    ratios = []
    for name in list(ATTN) + list(GELU) + list(CONV) + list(POOL):
        if only and not any(s in name for s in only):
            continue
        inst, arrays, out = _instances(name, target)
        assert inst.dynamic, name
        fns = [FAMILY.compiled(StaticInstance(inst), target), FAMILY.compiled(inst, target)]
        descs = [descriptor_from_array(a) for a in (*arrays, out)]
        got = []
        for fn in fns:
            out.fill(np.nan)
            fn(*descs)
            got.append(out.copy())
        if name in CONV:   # the same sums in the same order; LLVM may contract differently
            err = np.abs(got[0] - got[1]).max() / np.abs(got[0]).max()
            assert err < 1e-5, f"{name}: dynamic and static kernels differ by {err}"
        else:
            assert np.array_equal(got[0], got[1]), f"{name}: dynamic and static kernels differ"
        acc = [[], []]
        for r in range(args.rounds):
            for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                acc[i] += _thread_times(lambda: fns[i](*descs), args.repeats)
        st, dy = (statistics.median(a) for a in acc)
        ratios.append(dy / st)
        print(f"{name:16s} {st * 1e3:9.3f} {dy * 1e3:10.3f} {dy / st:10.2f} "
              f"{min(acc[0]) * 1e3:10.3f} {min(acc[1]) * 1e3:11.3f} "
              f"{min(acc[1]) / min(acc[0]):8.2f}", flush=True)
    if ratios:
        print(f"geometric mean dynamic/static {float(np.exp(np.mean(np.log(ratios)))):.2f} "
              f"over {len(ratios)} kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
