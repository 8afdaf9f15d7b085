"""Single convolution layers, fuelc vs onnxruntime on the same ONNX ``Conv``.

    python benchmarks/conv_layers.py                       # every layer class, 2 threads
    python benchmarks/conv_layers.py --target cpu:x86-64-v3 --threads 1 --only dw
    python benchmarks/conv_layers.py --dynamic --batch 1,8   # run-time batch vs static kernels

One layer per class the convolution issue names (3x3, 1x1, strided, 7x7 stem,
depthwise, strided depthwise, 5x5 depthwise, conv1d), each an ONNX model of one
``Conv`` node with constant weights and bias, imported with ``import_model``.
Both run with the same thread count (onnxruntime's spinning off, so it does not
steal the next run's cores), in turns: ``--rounds`` rounds of ``--repeats`` calls
each, the figure is the median of the round medians. Prints milliseconds,
GFLOP/s and fuelc / onnxruntime (> 1: fuelc slower), the largest difference to
onnxruntime relative to its largest output, and fuelc's kernels.
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
from benchmarks import vcpus  # noqa: E402
from benchmarks.encoder import times, width_note  # noqa: E402  (one timer for every benchmark)

#: name -> (Cin, Cout, spatial size (an int: square 2-D; a 1-tuple: 1-D), kernel, stride, groups)
LAYERS = {
    "3x3 64->64 56^2": (64, 64, 56, 3, 1, 1),
    "1x1 256->64 56^2": (256, 64, 56, 1, 1, 1),
    "3x3 s2 128->256 28^2": (128, 256, 28, 3, 2, 1),
    "7x7 s2 stem 3->64 224^2": (3, 64, 224, 7, 2, 1),
    "dw 3x3 x144 56^2": (144, 144, 56, 3, 1, 144),
    "dw 3x3 s2 x96 56^2": (96, 96, 56, 3, 2, 96),
    "dw 5x5 x240 14^2": (240, 240, 14, 5, 1, 240),
    "conv1d k3 s2 128->128 1600": (128, 128, (1600,), 3, 2, 1),
}


def layer_model(cin, cout, size, k, stride, groups, seed=0):
    """The ONNX model of one Conv (pads k//2 on each side) with its weights."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    spatial = list(size) if isinstance(size, tuple) else [size, size]
    ks = [k] * len(spatial)
    w = (rng.standard_normal((cout, cin // groups, *ks)) / np.sqrt(cin // groups * k ** len(ks)))
    b = rng.standard_normal(cout) * 0.1
    out = [(s + 2 * (k // 2) - k) // stride + 1 for s in spatial]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=ks,
                            strides=[stride] * len(ks), pads=[k // 2] * (2 * len(ks)), group=groups)
    graph = helper.make_graph(
        [node], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, *spatial])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, *out])],
        [numpy_helper.from_array(w.astype(np.float32), "w"),
         numpy_helper.from_array(b.astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    flops = 2 * cout * (cin // groups) * k ** len(ks) * int(np.prod(out))
    return model, [1, cin, *spatial], flops


def dynamic_vs_static(args, only) -> int:
    """``--dynamic``: each conv layer's kernel with a run-time batch
    (the one symbolic and static graphs run, ``fused_conv.batch_dims``)
    against the same instance compiled with a static batch, called directly
    on one thread in interleaved rounds (each round's order alternating),
    medians; dynamic/static per batch size (and the ratio of the fastest calls,
    steadier on a loaded machine)."""
    import dataclasses

    from compiler.codegen.family import StaticInstance
    from compiler.codegen.fused import FAMILY, FusedInstance
    from compiler.codegen.lowering.fused_conv import batch_dims
    from compiler.graph.opdef import TensorType
    from compiler.registry import default_registry
    from compiler.registry.entry import normalize_params
    from runtime.dtype import DType
    from runtime.memref import descriptor_from_array
    rng = np.random.default_rng(1)
    print(f"target {args.target}, one thread, {args.rounds} rounds of {args.repeats}; "
          "dynamic: the batch a run-time extent; dynamic/static > 1: dynamic slower")
    print(f"{'layer':28s} {'batch':>5s} {'static ms':>9s} {'dynamic ms':>10s} {'dyn/static':>10s} "
          f"{'of mins':>8s}")
    ratios = []
    for name, (cin, cout, size, k, stride, groups) in LAYERS.items():
        if only and not any(s in name for s in only):
            continue
        one_d = isinstance(size, tuple)
        hw, kk = ((1, size[0]), (1, k)) if one_d else ((size, size), (k, k))
        params = normalize_params(default_registry()["Conv2D"], {
            "stride": (1, stride) if one_d else (stride, stride), "groups": groups,
            "padding": (0, k // 2) if one_d else (k // 2, k // 2)})
        for batch in args.batch:
            types = (TensorType((batch, cin, *hw), DType.F32),
                     TensorType((cout, cin // groups, *kk), DType.F32),
                     TensorType((cout,), DType.F32))
            if batch_dims(types, params) is None:
                print(f"{name:28s} {batch:5d}  (a static kernel: no run-time batch)")
                break
            inst = dataclasses.replace(FusedInstance("Conv2D", tuple(sorted(params.items())),
                                                     types), unit_stride=(0, 1, 2, 3))
            fns = [FAMILY.compiled(StaticInstance(inst), args.target),
                   FAMILY.compiled(inst, args.target)]
            arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in types]
            arrays.append(np.empty(inst.output_type().shape, np.float32))
            descs = [descriptor_from_array(a) for a in arrays]
            got = []
            for fn in fns:
                fn(*descs)
                got.append(arrays[-1].copy())
            assert np.array_equal(got[0], got[1]), name  # the same code per image
            acc = [[], []]
            for r in range(args.rounds):
                for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                    acc[i] += times(lambda: fns[i](*descs), args.repeats)
            st, dy = (statistics.median(a) for a in acc)
            ratios.append(dy / st)
            print(f"{name:28s} {batch:5d} {st * 1e3:9.3f} {dy * 1e3:10.3f} {dy / st:10.2f} "
                  f"{min(acc[1]) / min(acc[0]):8.2f}", flush=True)
    if ratios:
        print(f"geometric mean dynamic/static {float(np.exp(np.mean(np.log(ratios)))):.2f} "
              f"over {len(ratios)} cases")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for both (default: $FUELC_NUM_THREADS or the CPUs)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--only", default="", help="comma-separated substrings of layer names")
    ap.add_argument("--dynamic", action="store_true",
                    help="instead: each conv kernel with a run-time batch vs static")
    ap.add_argument("--batch", default="1,8", type=lambda t: [int(v) for v in t.split(",")],
                    help="batch sizes of --dynamic (1,8)")
    args = ap.parse_args(argv)
    if args.dynamic:
        return dynamic_vs_static(args, [s for s in args.only.split(",") if s])
    import onnxruntime as ort
    from compiler import compile
    from compiler.codegen import parallel
    from compiler.frontends.onnx import import_model
    threads = args.threads or parallel.num_threads()
    parallel.set_num_threads(threads)
    only = [s for s in args.only.split(",") if s]
    print(f"target {args.target}, {threads} threads each, onnxruntime {ort.__version__}, "
          f"{args.rounds} rounds of {args.repeats}; fuelc/ort > 1: fuelc slower")
    if note := width_note(args.target):
        print(note)
    probe = vcpus.probe_for(threads, "layer")
    print(f"{'layer':28s} {'fuelc ms':>9s} {'ort ms':>8s} {'fuelc/ort':>9s} {'GFLOP/s':>8s} "
          f"{'rel diff':>8s}  kernels")
    ratios = []
    for name, spec in LAYERS.items():
        if only and not any(s in name for s in only):
            continue
        model, shape, flops = layer_model(*spec)
        m = compile(import_model(model), target=args.target)
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        want = sess.run(None, {"x": x})[0]
        diff = float(np.abs(m(x=x) - want).max() / np.abs(want).max())
        ours, theirs, states = [], [], []
        for _ in range(args.rounds):
            before = probe.now() if probe else None
            ours.append(statistics.median(times(lambda: m(x=x), args.repeats)))
            theirs.append(statistics.median(times(lambda: sess.run(None, {"x": x}), args.repeats)))
            if probe:
                states.append(probe.round_state(before))
        a, b = statistics.median(ours), statistics.median(theirs)
        ratios.append(a / b)
        kernels = ", ".join(k.split("[")[0] + (" (Winograd)" if "Winograd" in k else "")
                            for k in m.kernel_summary())
        print(f"{name:28s} {a * 1e3:9.3f} {b * 1e3:8.3f} {a / b:9.2f} {flops / a / 1e9:8.1f} "
              f"{diff:8.1e}  {kernels}")
        qline = None
        if q := vcpus.quiet_medians(states, {"fuelc": ours, "ort": theirs}):
            qa, qb = q["fuelc"], q["ort"]
            qline = f"fuelc {qa * 1e3:.3f} ms, ort {qb * 1e3:.3f} ms, fuelc/ort {qa / qb:.2f}"
        if states and (text := vcpus.note(states, qline)) is not None:
            print(text, flush=True)
    if ratios:
        print(f"geometric mean fuelc/ort {float(np.exp(np.mean(np.log(ratios)))):.2f} "
              f"over {len(ratios)} layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
