"""Transformer encoders, fuelc vs onnxruntime on the same model.

    python benchmarks/encoder.py                         # every model below, batch 1 and 8
    python benchmarks/encoder.py --model builder --batch 1 --threads 1 --repeats 20
    python benchmarks/encoder.py --model torch --layers 6 --steps
    python benchmarks/encoder.py --target cpu:x86-64-v3 --json out.json
    python benchmarks/encoder.py --model onnx --dynamic  # also one compile for every batch

The block (hidden 384, 12 heads, FFN 1536, seq 128, post-LayerNorm as in
BERT): q/k/v projections, softmax(q k^T / sqrt(d)) v, output projection +
residual + LayerNorm, erf-GELU FFN + residual + LayerNorm. Models
(``--model``, repeatable; default all three, ``--layers`` blocks each,
default 1 block and a 6-layer encoder):

* ``builder``: fuelc builds it with the builder API; onnxruntime runs the
  same weights as an ONNX model built with onnx.helper (opset 17, the GELU
  as its erf formula);
* ``onnx``: that ONNX model, imported by fuelc's ONNX importer;
* ``torch``: ``torch.nn.TransformerEncoder`` of the same size (GELU, post
  norm, random weights per layer) exported by ``torch.onnx.export`` (needs
  torch), imported by fuelc; onnxruntime runs the exported file.

Both get ``--threads`` threads and take turns (``--rounds`` rounds of
``--repeats`` runs each, each block after a pause of ``SETTLE_S`` and one
untimed run; onnxruntime keeps its default thread spinning). Prints, per model and batch, the median wall
time of each over all its runs (and fuelc's p10/p90), fuelc / ort, the
largest difference of the outputs, and which kernels fuelc ran
(OpKind[dtypes] (kernel source) x count). The machine is shared and noisy:
compare the two from the same run. ``--dynamic`` also compiles the ONNX
models once with their batch axis symbolic (``docs/dynamic-shapes.md``) and
times that module in the same rounds: dynamic / static at each batch.
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

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)  # this checkout's compiler

from benchmarks import vcpus  # noqa: E402
from compiler import Graph, compile  # noqa: E402
from compiler.frontends.onnx import import_model  # noqa: E402
from compiler.registry.builders import layer_norm, linear  # noqa: E402

HIDDEN, HEADS, FFN, SEQ, EPS = 384, 12, 1536, 128, 1e-12
#: Seconds between two blocks of timed runs. After a run onnxruntime's idle
#: intra-op threads spin on a core for about 45 ms (fuelc's worker polls for
#: about 1 ms): without the pause the other side's first runs had one core
#: less (docs/benchmarks.md, "encoder.py's bimodal first case").
SETTLE_S = 0.1


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


def fuelc_encoder(batch: int, layers: list[dict]) -> Graph:
    """The encoder (one block per weight dict) with fuelc's builder API."""
    g = Graph()
    d = HIDDEN // HEADS
    x = g.input("x", (batch, SEQ, HIDDEN), "f32")
    for i, w in enumerate(layers):
        c = {k: g.constant(v, name=f"l{i}_" + k.replace(".", "_")) for k, v in w.items()}

        def lin(t, p):
            return linear(t, c[p + ".w"], c[p + ".b"])

        def heads(t):  # [B, S, H] -> [B, heads, S, d]
            return t.reshape(batch, SEQ, HEADS, d).permute((0, 2, 1, 3))

        q, k, v = heads(lin(x, "q")), heads(lin(x, "k")), heads(lin(x, "v"))
        probs = ((q @ k.permute((0, 1, 3, 2))) * (1 / math.sqrt(d))).softmax(-1)
        ctx = (probs @ v).permute((0, 2, 1, 3)).reshape(batch, SEQ, HIDDEN)
        h1 = layer_norm(lin(ctx, "o") + x, c["ln1.g"], c["ln1.b"], eps=EPS)
        x = layer_norm(lin(lin(h1, "f1").gelu(), "f2") + h1, c["ln2.g"], c["ln2.b"], eps=EPS)
    g.output(x, name="y")
    return g


def onnx_encoder(layers: list[dict]):
    """The same encoder as an ONNX model built with onnx.helper (dynamic batch)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    d = HIDDEN // HEADS
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(kind, ins, out, **attrs):
        nodes.append(helper.make_node(kind, ins, [out], **attrs))
        return out

    const("heads_shape", np.array([0, SEQ, HEADS, d], np.int64))
    const("out_shape", np.array([0, SEQ, HIDDEN], np.int64))
    const("scale", np.float32(1 / math.sqrt(d)))
    const("sqrt2", np.float32(math.sqrt(2)))
    const("one", np.float32(1))
    const("half", np.float32(0.5))
    x = "x"
    for i, w in enumerate(layers):
        p = f"l{i}."
        for k, v in w.items():
            const(p + k, v)

        def lin(t, n):
            return op("Add", [op("MatMul", [t, p + n + ".w"], p + n + ".mm"), p + n + ".b"],
                      p + n + ".y")

        def heads(t, n):
            return op("Transpose", [op("Reshape", [t, "heads_shape"], p + n + ".r")],
                      p + n + ".t", perm=[0, 2, 1, 3])

        def ln(t, n):
            return op("LayerNormalization", [t, p + n + ".g", p + n + ".b"], p + n + ".y",
                      axis=-1, epsilon=EPS)

        q, k, v = (heads(lin(x, n), n) for n in ("q", "k", "v"))
        kt = op("Transpose", [k], p + "kt", perm=[0, 1, 3, 2])
        scores = op("Mul", [op("MatMul", [q, kt], p + "qk"), "scale"], p + "scores")
        probs = op("Softmax", [scores], p + "probs", axis=-1)
        ctx = op("Reshape", [op("Transpose", [op("MatMul", [probs, v], p + "ctx")], p + "ctx_t",
                                perm=[0, 2, 1, 3]), "out_shape"], p + "ctx_r")
        h1 = ln(op("Add", [lin(ctx, "o"), x], p + "res1"), "ln1")
        f = lin(h1, "f1")
        erf = op("Erf", [op("Div", [f, "sqrt2"], p + "gd")], p + "ge")
        gelu = op("Mul", [op("Mul", [f, op("Add", [erf, "one"], p + "g1")], p + "gm"), "half"],
                  p + "gelu")
        x = ln(op("Add", [lin(gelu, "f2"), h1], p + "res2"), "ln2")
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes, "encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", SEQ, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", SEQ, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def torch_encoder(n_layers: int, seed: int = 0):
    """``torch.nn.TransformerEncoder`` of the block's size exported to ONNX
    (bytes), or None (with the reason printed) when torch cannot export it."""
    try:
        import torch
    except ImportError:
        print("  torch model skipped: torch is not installed (pip install -e '.[bench]')")
        return None
    import io
    import warnings
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(HIDDEN, HEADS, FFN, dropout=0.0, activation="gelu",
                                             batch_first=True, layer_norm_eps=EPS)
    enc = torch.nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False).eval()
    with torch.no_grad():  # the layers are deep copies: give each its own weights
        for name, p in enc.named_parameters():
            if p.dim() > 1:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[-1]))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(enc, (torch.randn(1, SEQ, HIDDEN),), buf, dynamo=False,
                              opset_version=17, input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    except Exception as e:  # the exporter moves between torch releases
        print(f"  torch model skipped: torch.onnx.export failed: {type(e).__name__}: {e}")
        return None
    return buf.getvalue()


def width_note(spec: str) -> "str | None":
    """A header line where the host has AVX-512 and the target ``spec`` does
    not (``cpu:x86-64-v3`` on a Zen 4/5 or a Xeon): onnxruntime and numpy's
    OpenBLAS choose their kernels by the host, so the ratios then compare the
    target's AVX2 code with their AVX-512 kernels, not what a user of an
    AVX2-only machine sees (docs/benchmarks.md). Under benchmarks/avx2_host.py
    (AVX-512 hidden from the whole process) the line says that instead."""
    from compiler.targets import parse_target
    if os.environ.get("FUELC_BENCH_AVX512_HIDDEN"):
        return ("note: AVX-512 hidden from CPUID (benchmarks/avx2_host.py): onnxruntime, numpy, "
                "torch and target cpu take their AVX2 paths on this host's cores")
    if "avx512f" in parse_target("cpu").features and "avx512f" not in parse_target(spec).features:
        return (f"note: this host has AVX-512 and {spec} has not: onnxruntime and numpy choose "
                f"their kernels by the host, so the ratios compare AVX2 code with AVX-512 kernels")
    return None


def times(fn, repeats: int) -> list[float]:
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return sorted(out)


def step_medians(m, inputs: dict, repeats: int) -> dict[int, float]:
    """The median seconds of each step of ``m``'s plan over ``repeats`` runs
    (step index -> seconds). Where the plan takes the direct path
    (``runtime.direct``), its calls run one by one, each timed in the order
    of a run (``_direct_step_medians``: the kernels' own time, with the
    caches as a call leaves them); otherwise the executor's step runners are
    wrapped with a timer (the general path: each step's time includes its
    Python dispatch, 5-10 us, which a small copy's kernel is far below)."""
    m(**inputs)
    direct = getattr(m.executor, "_direct", None)
    got = _direct_step_medians(m, direct, inputs, repeats) if direct is not None else None
    if got:   # (empty: these inputs took the general path)
        return got
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
    return {i: statistics.median(ts) for i, ts in acc.items()}


def _direct_step_medians(m, direct, inputs: dict, repeats: int) -> dict[int, float]:
    """``step_medians`` on the direct path: its calls one by one (no native
    runs), each wrapped with a timer, summed per step (a kernel step's
    zeroing call counts with it; a copy step is named by its name or
    output)."""
    from runtime.executor import ContiguizeStep
    steps, owner, last = m.plan.steps, [], 0
    for w in direct.where:   # in plan order: a copy is the next copy step of its name
        head = w.split(" (")[0]
        at = int(head[5:]) if head.startswith("step ") else next(
            (i for i in range(last, len(steps)) if isinstance(steps[i], ContiguizeStep)
             and (steps[i].name or steps[i].output) == w), None)
        owner.append(at)
        last = last if at is None else at
    calls, segments = direct.calls, direct.segments
    acc = collections.defaultdict(float)
    runs = []

    def timed(j, raw):
        def call(*args):
            t0 = time.perf_counter()
            raw(*args)
            acc[j] += time.perf_counter() - t0
        return call

    direct.calls = [(timed(j, raw), args) for j, (raw, args) in enumerate(calls)]
    direct.segments = None
    try:
        for _ in range(repeats):
            acc.clear()
            m(**inputs)
            per_step = collections.defaultdict(float)
            for j, t in acc.items():
                if owner[j] is not None:
                    per_step[owner[j]] += t
            runs.append(per_step)
    finally:
        direct.calls, direct.segments = calls, segments
    return {i: statistics.median(r.get(i, 0.0) for r in runs) for i in set().union(*runs)}


def step_times(m, inputs: dict, repeats: int) -> list[tuple[float, str]]:
    """(median ms, description) of each kernel step, slowest first
    (``step_medians``)."""
    from runtime.executor import KernelStep
    out = []
    for i, t in step_medians(m, inputs, repeats).items():
        s = m.plan.steps[i]
        if isinstance(s, KernelStep):
            lay = "x".join(str(d) for d in s.output_specs[0].shape)
            out.append((t * 1e3, f"{s.name or s.key} -> [{lay}] "
                                 f"({m.executor.entries[i].kernel_source})"))
    return sorted(out, reverse=True)


def ort_node_times(proto: bytes, threads: int, inputs: dict, repeats: int) -> list[tuple[float, str]]:
    """(median ms, "node (OpType)") of each node onnxruntime ran, slowest
    first, from its own profiler (a separate session with profiling on)."""
    import tempfile
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    session = ort.InferenceSession(proto, so, providers=["CPUExecutionProvider"])
    for _ in range(repeats + 1):
        session.run(None, inputs)
    path = session.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    acc = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            acc[f"{e['name'][:-len('_kernel_time')]} ({e.get('args', {}).get('op_name', '?')})"].append(
                e["dur"] / 1e3)
    return sorted(((statistics.median(v), k) for k, v in acc.items()), reverse=True)


def kernels_ran(m) -> list[str]:
    counts = collections.Counter(m.kernel_summary())
    return [f"{k} x{n}" for k, n in counts.items()]


MODELS = ("builder", "onnx", "torch")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", choices=MODELS,
                    help="which models (default: all; see the module docstring)")
    ap.add_argument("--layers", type=int, action="append",
                    help="encoder layers (default: 1 and 6)")
    ap.add_argument("--batch", type=int, action="append", help="batch sizes (default: 1 and 8)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for fuelc and onnxruntime (default: $FUELC_NUM_THREADS or CPUs)")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--repeats", type=int, default=15, help="timed runs per round")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of fuelc then onnxruntime, in turn (the median is over all runs)")
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--dynamic", action="store_true",
                    help="onnx/torch models: also time one compile with a symbolic batch")
    ap.add_argument("--steps", action="store_true",
                    help="also time every kernel step, and every onnxruntime node (its profiler)")
    args = ap.parse_args(argv)
    from compiler.codegen import parallel
    if args.threads is not None:
        parallel.set_num_threads(args.threads)
    threads = parallel.num_threads()
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    records = []
    print(f"encoder (hidden {HIDDEN}, {HEADS} heads, FFN {FFN}, seq {SEQ}): target "
          f"{args.target}, {threads} threads, {args.rounds} rounds of {args.repeats} runs each")
    probe = vcpus.probe_for(threads, "case")
    if note := width_note(args.target):
        print(note)
    for n_layers in args.layers or [1, 6]:
        layers = [weights(seed) for seed in range(n_layers)]
        for model in args.model or MODELS:
            if model == "torch":
                proto = torch_encoder(n_layers)
                if proto is None:
                    continue
            else:
                proto = onnx_encoder(layers).SerializeToString()
            session = None
            if ort is not None:
                so = ort.SessionOptions()
                so.intra_op_num_threads = threads
                so.inter_op_num_threads = 1
                session = ort.InferenceSession(proto, so, providers=["CPUExecutionProvider"])
            dyn = compile(import_model(proto), args.target) \
                if args.dynamic and model != "builder" else None
            for batch in args.batch or [1, 8]:
                x = np.random.RandomState(batch).randn(batch, SEQ, HIDDEN).astype(np.float32)
                t0 = time.perf_counter()
                if model == "builder":
                    graph = fuelc_encoder(batch, layers)
                else:
                    graph = import_model(proto, input_shapes={"x": (batch, SEQ, HIDDEN)})
                m = compile(graph, args.target)
                compile_s = time.perf_counter() - t0
                ours = m(x=x)
                tf, to, td = [], [], []
                if dyn is not None:
                    dyn(x=x)  # plans this batch (kernels compiled once, for every batch)
                blocks = [(tf, lambda: m(x=x))]
                if session is not None:
                    blocks.append((to, lambda: session.run(None, {"x": x})))
                if dyn is not None:
                    blocks.append((td, lambda: dyn(x=x)))
                states, per_round = [], [[] for _ in blocks]   # each block's runs per round
                for _ in range(args.rounds):  # in turn: a slow spell lands on both
                    before = probe.now() if probe else None
                    for (acc, fn), runs in zip(blocks, per_round):
                        time.sleep(SETTLE_S)  # the other side's threads go idle
                        runs.append(times(fn, args.repeats))
                        acc += runs[-1]
                    if probe:
                        states.append(probe.round_state(before))
                tf.sort()
                to.sort()
                rec = {"model": model, "layers": n_layers, "batch": batch,
                       "fuelc_ms": statistics.median(tf) * 1e3, "compile_s": compile_s,
                       "kernels": kernels_ran(m)}
                line = (f"{model:7s} x{n_layers} batch {batch}: fuelc {rec['fuelc_ms']:8.3f} ms "
                        f"(p10 {tf[len(tf) // 10] * 1e3:.3f}, p90 {tf[-1 - len(tf) // 10] * 1e3:.3f})")
                if session is not None:
                    theirs = session.run(None, {"x": x})[0]
                    rec["ort_ms"] = statistics.median(to) * 1e3
                    rec["max_abs_diff"] = float(np.max(np.abs(ours - theirs)))
                    line += (f" | onnxruntime {rec['ort_ms']:8.3f} ms | fuelc/ort "
                             f"{rec['fuelc_ms'] / rec['ort_ms']:5.2f} | max |diff| "
                             f"{rec['max_abs_diff']:.1e}")
                if dyn is not None:
                    rec["dynamic_ms"] = statistics.median(td) * 1e3
                    rec["dynamic_max_abs_diff"] = float(np.max(np.abs(dyn(x=x) - ours)))
                    line += (f" | dynamic batch {rec['dynamic_ms']:8.3f} ms, dynamic/static "
                             f"{rec['dynamic_ms'] / rec['fuelc_ms']:5.2f}")
                print(line + f" | compiled in {compile_s:.1f} s", flush=True)
                if states:
                    rec["round_states"] = states
                    qline = None
                    if session is not None and (   # blocks: fuelc, ort[, dyn]
                            q := vcpus.quiet_medians(states, {"fuelc": per_round[0],
                                                              "ort": per_round[1]})):
                        qf, qo = q["fuelc"], q["ort"]
                        qline = f"fuelc {qf * 1e3:.3f} ms, ort {qo * 1e3:.3f} ms, fuelc/ort {qf / qo:.2f}"
                    if (text := vcpus.note(states, qline)) is not None:
                        print(text, flush=True)
                print("  kernels: " + "; ".join(rec["kernels"]))
                if args.steps:
                    rec["steps"] = step_times(m, {"x": x}, args.repeats)
                    print(f"    fuelc steps (sum {sum(ms for ms, _ in rec['steps']):.3f} ms):")
                    for ms, what in rec["steps"]:
                        print(f"    {ms:8.3f} ms  {what}")
                    if session is not None:
                        rec["ort_nodes"] = ort_node_times(proto, threads, {"x": x}, args.repeats)
                        print(f"    onnxruntime nodes (sum {sum(ms for ms, _ in rec['ort_nodes']):.3f} ms):")
                        for ms, what in rec["ort_nodes"]:
                            print(f"    {ms:8.3f} ms  {what}")
                records.append(rec)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": threads, "target": args.target, "cases": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
