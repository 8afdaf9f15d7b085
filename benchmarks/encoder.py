"""One transformer encoder block, fuelc vs onnxruntime on the same model.

    python benchmarks/encoder.py                         # batch 1 and 8, seq 128
    python benchmarks/encoder.py --batch 1 --threads 1 --repeats 20
    python benchmarks/encoder.py --target cpu:x86-64-v3 --json out.json

The block (hidden 384, 12 heads, FFN 1536, seq 128, post-LayerNorm as in
BERT): q/k/v projections, softmax(q k^T / sqrt(d)) v, output projection +
residual + LayerNorm, erf-GELU FFN + residual + LayerNorm. fuelc builds it
with the builder API; onnxruntime runs the same weights as an ONNX model
built with onnx.helper (opset 17, the GELU as its erf formula). Both get
``--threads`` threads. Prints, per batch, the median wall time of each (and
p10/p90), fuelc / ort, the largest difference of the outputs, and which
kernels fuelc ran (OpKind[dtypes] (kernel source) x count). The machine is
shared and noisy: compare the two from the same run.
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))  # this checkout's compiler

from compiler import Graph, compile  # noqa: E402
from compiler.registry.builders import layer_norm, linear  # noqa: E402

HIDDEN, HEADS, FFN, SEQ, EPS = 384, 12, 1536, 128, 1e-12


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(seed)
    w = {}
    for name, k, m in (("q", HIDDEN, HIDDEN), ("k", HIDDEN, HIDDEN), ("v", HIDDEN, HIDDEN),
                       ("o", HIDDEN, HIDDEN), ("f1", HIDDEN, FFN), ("f2", FFN, HIDDEN)):
        w[name + ".w"] = (rng.randn(k, m) / math.sqrt(k)).astype(np.float32)
        w[name + ".b"] = (rng.randn(m) * 0.1).astype(np.float32)
    for ln in ("ln1", "ln2"):
        w[ln + ".g"] = (1 + rng.randn(HIDDEN) * 0.1).astype(np.float32)
        w[ln + ".b"] = (rng.randn(HIDDEN) * 0.1).astype(np.float32)
    return w


def fuelc_block(batch: int, w: dict) -> Graph:
    g = Graph()
    d = HIDDEN // HEADS
    x = g.input("x", (batch, SEQ, HIDDEN), "f32")
    c = {k: g.constant(v, name=k.replace(".", "_")) for k, v in w.items()}

    def lin(t, p):
        return linear(t, c[p + ".w"], c[p + ".b"])

    def heads(t):  # [B, S, H] -> [B, heads, S, d]
        return t.reshape(batch, SEQ, HEADS, d).permute((0, 2, 1, 3))

    q, k, v = heads(lin(x, "q")), heads(lin(x, "k")), heads(lin(x, "v"))
    probs = ((q @ k.permute((0, 1, 3, 2))) * (1 / math.sqrt(d))).softmax(-1)
    ctx = (probs @ v).permute((0, 2, 1, 3)).reshape(batch, SEQ, HIDDEN)
    h1 = layer_norm(lin(ctx, "o") + x, c["ln1.g"], c["ln1.b"], eps=EPS)
    y = layer_norm(lin(lin(h1, "f1").gelu(), "f2") + h1, c["ln2.g"], c["ln2.b"], eps=EPS)
    g.output(y, name="y")
    return g


def onnx_block(w: dict):
    """The same block as an ONNX model (dynamic batch)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    d = HIDDEN // HEADS
    inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    nodes = []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(kind, ins, out, **attrs):
        nodes.append(helper.make_node(kind, ins, [out], **attrs))
        return out

    def lin(t, p):
        return op("Add", [op("MatMul", [t, p + ".w"], p + ".mm"), p + ".b"], p + ".y")

    def heads(t, p):
        return op("Transpose", [op("Reshape", [t, "heads_shape"], p + ".r")], p + ".t",
                  perm=[0, 2, 1, 3])

    def ln(t, p):
        return op("LayerNormalization", [t, p + ".g", p + ".b"], p + ".y", axis=-1, epsilon=EPS)

    const("heads_shape", np.array([0, SEQ, HEADS, d], np.int64))
    const("out_shape", np.array([0, SEQ, HIDDEN], np.int64))
    const("scale", np.float32(1 / math.sqrt(d)))
    const("sqrt2", np.float32(math.sqrt(2)))
    const("one", np.float32(1))
    const("half", np.float32(0.5))
    q, k, v = (heads(lin("x", n), n) for n in ("q", "k", "v"))
    scores = op("Mul", [op("MatMul", [q, op("Transpose", [k], "kt", perm=[0, 1, 3, 2])], "qk"),
                        "scale"], "scores")
    probs = op("Softmax", [scores], "probs", axis=-1)
    ctx = op("Reshape", [op("Transpose", [op("MatMul", [probs, v], "ctx")], "ctx_t",
                            perm=[0, 2, 1, 3]), "out_shape"], "ctx_r")
    h1 = ln(op("Add", [lin(ctx, "o"), "x"], "res1"), "ln1")
    f = lin(h1, "f1")
    gelu = op("Mul", [op("Mul", [f, op("Add", [op("Erf", [op("Div", [f, "sqrt2"], "gd")], "ge"),
                                              "one"], "g1")], "gm"), "half"], "gelu")
    ln(op("Add", [lin(gelu, "f2"), h1], "res2"), "ln2")
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes, "encoder_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", SEQ, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", SEQ, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def times(fn, repeats: int) -> list[float]:
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return sorted(out)


def step_times(m, inputs: dict, repeats: int) -> list[tuple[float, str]]:
    """(median ms, description) of each kernel step, slowest first (the
    executor's step runners wrapped with a timer for ``repeats`` runs)."""
    from runtime.executor import KernelStep
    ex = m.executor
    plain, acc = ex._runners, collections.defaultdict(list)

    def timed(i, run):
        def step(env, syms):
            t0 = time.perf_counter()
            run(env, syms)
            acc[i].append(time.perf_counter() - t0)
        return step

    ex._runners = tuple(timed(i, r) for i, r in enumerate(plain))
    try:
        for _ in range(repeats):
            m(**inputs)
    finally:
        ex._runners = plain
    out = []
    for i, ts in acc.items():
        s = m.plan.steps[i]
        if isinstance(s, KernelStep):
            lay = "x".join(str(d) for d in s.output_specs[0].shape)
            out.append((statistics.median(ts) * 1e3,
                        f"{s.name or s.key} -> [{lay}] ({ex.entries[i].kernel_source})"))
    return sorted(out, reverse=True)


def kernels_ran(m) -> list[str]:
    counts = collections.Counter(m.kernel_summary())
    return [f"{k} x{n}" for k, n in counts.items()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, action="append", help="batch sizes (default: 1 and 8)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for fuelc and onnxruntime (default: $FUELC_NUM_THREADS or CPUs)")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--steps", action="store_true", help="also time every kernel step")
    args = ap.parse_args(argv)
    from compiler.codegen import parallel
    if args.threads is not None:
        parallel.set_num_threads(args.threads)
    threads = parallel.num_threads()
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    w = weights()
    records = []
    print(f"encoder block (hidden {HIDDEN}, {HEADS} heads, FFN {FFN}, seq {SEQ}): target "
          f"{args.target}, {threads} threads, {args.repeats} runs")
    session = None
    if ort is not None:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        session = ort.InferenceSession(onnx_block(w).SerializeToString(), so,
                                       providers=["CPUExecutionProvider"])
    for batch in args.batch or [1, 8]:
        x = np.random.RandomState(batch).randn(batch, SEQ, HIDDEN).astype(np.float32)
        t0 = time.perf_counter()
        m = compile(fuelc_block(batch, w), args.target)
        compile_s = time.perf_counter() - t0
        ours = m(x=x)
        tf = times(lambda: m(x=x), args.repeats)
        rec = {"batch": batch, "fuelc_ms": statistics.median(tf) * 1e3, "compile_s": compile_s,
               "kernels": kernels_ran(m)}
        line = (f"batch {batch}: fuelc {rec['fuelc_ms']:8.3f} ms "
                f"(p10 {tf[len(tf) // 10] * 1e3:.3f}, p90 {tf[-1 - len(tf) // 10] * 1e3:.3f})")
        if session is not None:
            theirs = session.run(None, {"x": x})[0]
            to = times(lambda: session.run(None, {"x": x}), args.repeats)
            rec["ort_ms"] = statistics.median(to) * 1e3
            rec["max_abs_diff"] = float(np.max(np.abs(ours - theirs)))
            line += (f" | onnxruntime {rec['ort_ms']:8.3f} ms | fuelc/ort "
                     f"{rec['fuelc_ms'] / rec['ort_ms']:5.2f} | max |diff| {rec['max_abs_diff']:.1e}")
        print(line + f" | compiled in {compile_s:.1f} s", flush=True)
        print("  kernels: " + "; ".join(rec["kernels"]))
        if args.steps:
            rec["steps"] = step_times(m, {"x": x}, args.repeats)
            for ms, what in rec["steps"]:
                print(f"    {ms:8.3f} ms  {what}")
        records.append(rec)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": threads, "target": args.target, "cases": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
