"""Compiled fuelc models vs numpy (and onnxruntime / torch when installed), in one run.

    python benchmarks/ops.py                                # full sizes
    python benchmarks/ops.py --quick                        # small sizes, fewer repeats
    python benchmarks/ops.py --target cpu:x86-64-v3 --threads 2 --json out.json
    python benchmarks/ops.py --only softmax,gelu            # cases whose name contains these

Prints, per case, the median wall time of each implementation and its ratio
to numpy (``x numpy`` > 1 means slower than numpy; the implementations take
turns, ``--rounds`` rounds of ``--repeats`` calls each, and the figure is the
median of the round medians), then a summary table (fuelc / numpy, fuelc /
best peer, and for the row ops fuelc / the memory-bandwidth time: bytes moved
at the bandwidth of a numpy copy measured in the same run); ``--json`` writes every measurement. Cases: matmul
256-2048, batched matmul of rank 3 and 4, softmax / log-softmax / layernorm /
rmsnorm / GELU (tanh, erf) over [4096, 1024] (the norms both fused and as the
primitive composition, pipeline ``no-fusion``), linear+bias, rope,
cross-entropy and the two-layer MLP of ``examples/mlp.py``. Kernels use
``--threads`` threads (default ``$FUELC_NUM_THREADS`` or the CPU count); the
peers get the same count (numpy's BLAS through ``OPENBLAS_NUM_THREADS`` /
``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS``, set from ``--threads`` unless already
set). The machine is shared and noisy: quote medians,
repeat runs, compare peers from the same run.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time


def _argv_threads(argv) -> str | None:
    """The value of ``--threads N`` / ``--threads=N`` in ``argv``, if any."""
    for i, a in enumerate(argv):
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
    return None


_THREADS_ARG = _argv_threads(sys.argv[1:]) if __name__ == "__main__" else None
if (_THREADS_ARG or "").isdigit():
    # numpy's BLAS fixes its thread count when it loads: the peers' count too
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, _THREADS_ARG)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))  # this checkout's compiler

from compiler import Graph, compile  # noqa: E402
from benchmarks import vcpus  # noqa: E402


def median_time(fn, repeats: int, warmup: int = 1) -> float:
    """Median of ``repeats`` timed calls, after a settle: a pause (numpy's
    OpenBLAS worker threads busy-wait for ~0.1 s after each call and take
    the cores from whatever runs next; fuelc's native workers poll for
    ~1 ms) and at least 20 ms of untimed calls (cores wake up, caches warm)."""
    time.sleep(0.25)
    t_end = time.perf_counter() + 0.02
    for i in range(max(warmup, 1) * 1000):
        fn()
        if i + 1 >= warmup and time.perf_counter() >= t_end:
            break
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


THREADS = 2   # set by main() from --threads
#: The vCPUs' probe (``benchmarks/vcpus.py``), set by main() at 2+ threads.
PROBE = None
TARGET = "cpu"
ROUNDS = 3    # set by main() from --rounds
RECORDS: list[dict] = []


def _peers():
    """Installed peers: name -> module."""
    peers = {}
    try:
        import torch
        torch.set_num_threads(THREADS)
        peers["torch"] = torch
    except ImportError:
        pass
    try:
        import onnxruntime
        if importlib.util.find_spec("onnx") is not None:  # builds the models
            peers["onnxruntime"] = onnxruntime
    except ImportError:
        pass
    return peers


PEERS: dict = {}


def _torch_fn(case: str, consts: dict):
    """A torch implementation of ``case`` over numpy inputs (+ ``consts``), or None."""
    if "torch" not in PEERS:
        return None
    torch = PEERS["torch"]
    F = torch.nn.functional
    fns = {
        "matmul": lambda a, b: a @ b,
        "softmax": lambda x: torch.softmax(x, -1),
        "layernorm": lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5),
        "rmsnorm": lambda x, w: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w,
        "linear": lambda x, w, b: torch.addmm(b, x, w),
        "gelu": lambda x: F.gelu(x, approximate="tanh"),
        "gelu_erf": lambda x: F.gelu(x),
        "logsoftmax": lambda x: torch.log_softmax(x, -1),
    }
    fn = fns.get(case)
    if fn is None:
        return None

    def run(**kw):
        with torch.no_grad():
            return fn(**{k: torch.from_numpy(v) for k, v in {**kw, **consts}.items()}).numpy()
    return run


def _ort_fn(case: str, inputs: dict, consts: dict):
    """An onnxruntime session for ``case`` (standard ONNX ops only; ``consts``
    become initializers), or None."""
    if "onnxruntime" not in PEERS:
        return None
    from onnx import TensorProto, helper, numpy_helper
    ort = PEERS["onnxruntime"]
    names = list(inputs) + list(consts)
    nodes = {
        "matmul": [helper.make_node("MatMul", names, ["y"])],
        "softmax": [helper.make_node("Softmax", names, ["y"], axis=-1)],
        "layernorm": [helper.make_node("LayerNormalization", names, ["y"], axis=-1, epsilon=1e-5)],
        "gelu": [helper.make_node("Gelu", names, ["y"], approximate="tanh")],
        "gelu_erf": [helper.make_node("Gelu", names, ["y"])],
        "logsoftmax": [helper.make_node("LogSoftmax", names, ["y"], axis=-1)],
    }.get(case)
    if nodes is None:
        return None
    try:
        ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in inputs.items()]
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        inits = [numpy_helper.from_array(v, n) for n, v in consts.items()]
        model = helper.make_model(helper.make_graph(nodes, case, ins, [out], initializer=inits),
                                  opset_imports=[helper.make_opsetid("", 20)])
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = THREADS
        # idle ORT threads spin by default, stealing the 2 cores from the others
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # an old onnxruntime without opset 20: say so, skip the cell
        print(f"  (onnxruntime: {case} unavailable: {str(e).splitlines()[0][:80]})")
        return None
    return lambda **kw: sess.run(None, kw)[0]


def _row(name, t_np, results, bw_bytes=None, compile_s=None, rounds=None, states=None):
    cells = [f"numpy {t_np * 1e3:9.3f} ms"]
    for who, t in results.items():
        cells.append(f"{who} {t * 1e3:9.3f} ms ({t / t_np:6.2f}x numpy)")
    print(f"{name:<34} " + " | ".join(cells), flush=True)
    rec = {"case": name, "numpy_s": t_np, "times_s": dict(results),
           "bytes_moved": bw_bytes, "compile_s": compile_s or {}}
    if rounds:
        rec["rounds_s"] = rounds
    if states is not None:
        rec["round_states"] = states
        line = None
        if rounds and (q := vcpus.quiet_medians(states, rounds)):
            rec["quiet_s"] = q
            line = ", ".join(f"{k} {t / q['numpy']:.2f}x numpy" for k, t in q.items()
                             if k != "numpy")
        if (text := vcpus.note(states, line)) is not None:
            print(text, flush=True)
    RECORDS.append(rec)


_BANDWIDTH = None


def bandwidth() -> float:
    """Bytes per second of a 64 MiB numpy copy (read + write), this run."""
    global _BANDWIDTH
    if _BANDWIDTH is None:
        src = np.ones(1 << 24, np.float32)
        dst = np.empty_like(src)
        _BANDWIDTH = 2 * src.nbytes / median_time(lambda: np.copyto(dst, src), 9)
    return _BANDWIDTH


def summary() -> None:
    """The table of ratios: fuelc (each variant) / numpy, / the best peer,
    and / the memory-bandwidth time where the case states its bytes."""
    peers = set(PEERS)
    print(f"\nsummary (medians; bandwidth {bandwidth() / 1e9:.1f} GB/s from a numpy copy)")
    print(f"{'case':<46} {'variant':<12} {'ms':>9} {'/numpy':>7} {'/peer':>7} {'/bw':>6}")
    for r in RECORDS:
        peer_t = [t for k, t in r["times_s"].items() if k in peers]
        best = min(peer_t) if peer_t else None
        for k, t in r["times_s"].items():
            if k in peers:
                continue
            bw = r["bytes_moved"] / bandwidth() if r["bytes_moved"] else None
            print(f"{r['case']:<46} {k:<12} {t * 1e3:9.3f} {t / r['numpy_s']:7.2f} "
                  f"{(f'{t / best:7.2f}' if best else '      -')} "
                  f"{(f'{t / bw:6.2f}' if bw else '     -')}")


# -- graphs -------------------------------------------------------------------
def g_matmul(n):
    g = Graph()
    a, b = g.input("a", (n, n), "f32"), g.input("b", (n, n), "f32")
    g.output(a @ b, name="y")
    return g


def g_softmax(shape, fused: bool):
    g = Graph()
    x = g.input("x", shape, "f32")
    if fused:
        from compiler.registry.builders import softmax_last_dim
        y = softmax_last_dim(x)
    else:
        e = (x - x.max(-1, keepdims=True)).exp()
        y = e / e.sum(-1, keepdims=True)
    g.output(y, name="y")
    return g


def g_layernorm(shape, fused: bool, eps=1e-5):
    g = Graph()
    x = g.input("x", shape, "f32")
    w = g.constant(np.linspace(0.5, 1.5, shape[-1]).astype(np.float32), name="w")
    b = g.constant(np.linspace(-0.1, 0.1, shape[-1]).astype(np.float32), name="b")
    if fused:
        from compiler.registry.builders import layer_norm
        y = layer_norm(x, w, b, eps=eps)
    else:
        mu = x.mean(-1, keepdims=True)
        d = x - mu
        var = (d * d).mean(-1, keepdims=True)
        y = d * (var + eps).rsqrt() * w + b
    g.output(y, name="y")
    return g


def g_rmsnorm(shape, fused: bool, eps=1e-6):
    g = Graph()
    x = g.input("x", shape, "f32")
    w = g.constant(np.linspace(0.5, 1.5, shape[-1]).astype(np.float32), name="w")
    if fused:
        from compiler.registry.builders import rms_norm
        y = rms_norm(x, w, eps=eps)
    else:
        y = x * ((x * x).mean(-1, keepdims=True) + eps).rsqrt() * w
    g.output(y, name="y")
    return g


def g_linear(m, k, n, fused: bool):
    """x [m,k] @ w [k,n] + b [n]: the fused FusedLinear kernel, or MatMul then
    a broadcast Add (compiled with "no-fusion", so it stays two kernels)."""
    g = Graph()
    x, w, b = g.input("x", (m, k), "f32"), g.input("w", (k, n), "f32"), g.input("b", (n,), "f32")
    if fused:
        from compiler.registry.builders import fused as fused_op
        y = fused_op("FusedLinear", x, w, b)
    else:
        bb = g.add_node("BroadcastTo", [g.add_node("Reshape", [b], {"shape": (1, n)})],
                        {"shape": (m, n)})
        y = g.add_node("Add", [g.add_node("MatMul", [x, w]), bb])
    g.output(y, name="y")
    return g


def g_rope(shape):
    """Rope over x [b, seq, d] with cos/sin [seq, d] (compiled as the fused
    kernel, or with "base-map" as its recipe: slices, concat, products)."""
    g = Graph()
    x = g.input("x", shape, "f32")
    cos, sin = g.input("cos", shape[-2:], "f32"), g.input("sin", shape[-2:], "f32")
    from compiler.registry.builders import rope
    g.output(rope(x, cos, sin), name="y")
    return g


def g_cross_entropy(rows, vocab):
    g = Graph()
    lg, t = g.input("logits", (rows, vocab), "f32"), g.input("t", (rows,), "i64")
    from compiler.registry.builders import cross_entropy
    g.output(cross_entropy(lg, t), name="y")
    return g


def g_gelu(shape, erf: bool = False):
    g = Graph()
    x = g.input("x", shape, "f32")
    g.output(x.gelu() if erf else x.gelu(approximate="tanh"), name="y")
    return g


def g_logsoftmax(shape):
    g = Graph()
    x = g.input("x", shape, "f32")
    g.output(g.add_node("LogSoftmaxLastDim", [x]), name="y")
    return g


def g_bmm(sa, sb):
    g = Graph()
    a, b = g.input("a", tuple(sa), "f32"), g.input("b", tuple(sb), "f32")
    g.output(a @ b, name="y")
    return g


# -- numpy references -----------------------------------------------------------
def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_layernorm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def np_rmsnorm(x, w, eps=1e-6):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def np_gelu(x):
    c = np.float32(np.sqrt(2 / np.pi))
    return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(c * (x + np.float32(0.044715) * (x * x * x))))


def np_logsoftmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def np_gelu_erf(x):
    """GELU with erf from Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7), vectorized."""
    z = np.abs(x) / np.float32(np.sqrt(2))
    t = 1 / (1 + np.float32(0.3275911) * z)
    poly = ((((np.float32(1.061405429) * t - np.float32(1.453152027)) * t
              + np.float32(1.421413741)) * t - np.float32(0.284496736)) * t
            + np.float32(0.254829592)) * t
    return np.float32(0.5) * x * (1 + np.sign(x) * (1 - poly * np.exp(-z * z)))


def np_rope(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., h:], x[..., :h]], axis=-1) * sin


def np_cross_entropy(logits, t):
    m = logits.max(-1, keepdims=True)
    ls = logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
    return np.float32(-np.take_along_axis(ls, t[:, None], -1).mean())


def run_case(name, builders, np_fn, inputs, repeats, check_tol=1e-4, peer=None, consts=None,
             bytes_moved=None):
    """builders: {label: (graph, pipeline or None)}; ``peer``: the case's name
    for the installed peers (torch, onnxruntime), or None; ``consts``: the
    weights the fuelc graphs hold as constants, handed to the peers;
    ``bytes_moved``: the least memory traffic of the op (for the /bw ratio)."""
    if ONLY and not any(o in name for o in ONLY):
        return
    ref = np_fn(**inputs)
    fns, compile_s = {"numpy": lambda: np_fn(**inputs)}, {}
    for label, (graph, pipeline) in builders.items():
        kwargs = {} if pipeline is None else {"pipeline": pipeline}
        t0 = time.perf_counter()
        m = compile(graph, TARGET, **kwargs)
        t_compile = compile_s[label] = time.perf_counter() - t0
        out = m(**inputs)
        err = float(np.max(np.abs(out - ref)) / (np.max(np.abs(ref)) + 1e-30))
        if not err < check_tol:
            print(f"  !! {name}/{label}: relative error {err:.2e} exceeds {check_tol:g}")
        fns[label] = lambda m=m: m(**inputs)
        print(f"  {name}/{label}: compiled in {t_compile:.2f} s", flush=True)
    if peer is not None:
        consts = consts or {}
        for who, fn in (("torch", _torch_fn(peer, consts)), ("onnxruntime", _ort_fn(peer, inputs, consts))):
            if fn is not None:
                fns[who] = lambda fn=fn: fn(**inputs)
    rounds, states = interleaved_rounds(fns, repeats)
    results = {k: statistics.median(v) for k, v in rounds.items()}
    t_np = results.pop("numpy")
    _row(name, t_np, results, bytes_moved, compile_s, rounds, states)


def interleaved_rounds(fns: dict, repeats: int) -> tuple[dict, list[str] | None]:
    """``({name: [seconds per round]}, states)``: for each of ``ROUNDS``
    rounds, the median of ``repeats`` calls of every function in turn, so a
    slow spell of the shared machine lands on every implementation alike
    instead of on whichever ran during it (a case quotes the median of its
    rounds); ``states``: each round's state of the vCPUs, probed before and
    after it (``benchmarks/vcpus.py``; None when not probed: one thread)."""
    rounds: dict = {k: [] for k in fns}
    states = [] if PROBE else None
    for _ in range(ROUNDS):
        before = PROBE.now() if PROBE else None
        for k, fn in fns.items():
            rounds[k].append(median_time(fn, repeats))
        if PROBE:
            states.append(PROBE.round_state(before))
    return rounds, states


ONLY: list[str] = []


def main(argv=None):
    global THREADS, TARGET, ONLY, PEERS, ROUNDS, PROBE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, 3 repeats")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per round (median)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds over all implementations of a case, in turn (default 3, --quick 1)")
    ap.add_argument("--target", default="cpu", help="fuelc target (cpu, cpu:x86-64-v3, ...)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for fuelc and the peers (default: $FUELC_NUM_THREADS or CPUs)")
    ap.add_argument("--json", help="write every measurement to this file")
    ap.add_argument("--only", default="", help="comma-separated substrings of case names")
    args = ap.parse_args(argv)
    from compiler.codegen import parallel
    if args.threads is not None:
        parallel.set_num_threads(args.threads)
    THREADS, TARGET = parallel.num_threads(), args.target
    ONLY = [o for o in args.only.split(",") if o]
    PEERS = _peers()
    repeats = args.repeats or (3 if args.quick else 7)
    ROUNDS = args.rounds or (1 if args.quick else 3)
    sizes = (256, 512) if args.quick else (256, 512, 1024, 2048)
    rows = (256, 1024) if args.quick else (4096, 1024)
    rng = np.random.default_rng(0)
    print(f"fuelc benchmarks: target {TARGET}, {THREADS} threads, median of {ROUNDS} rounds "
          f"of {repeats} runs each, implementations in turn; "
          "ratios are fuelc time / numpy time")
    print(f"numpy {np.__version__}; peers installed: {', '.join(PEERS) or 'none'}")
    from benchmarks.encoder import width_note
    if note := width_note(TARGET):
        print(note)
    PROBE = vcpus.probe_for(THREADS, "case")

    bh, s_, d_ = (4, 64, 16) if args.quick else (12, 128, 32)
    qa = rng.standard_normal((1, bh, s_, d_), dtype=np.float32)
    ka = rng.standard_normal((1, bh, d_, s_), dtype=np.float32)
    run_case(f"batched matmul 4-D {list(qa.shape)}@{list(ka.shape)}",
             {"fuelc": (g_bmm(qa.shape, ka.shape), None)}, lambda a, b: a @ b,
             {"a": qa, "b": ka}, repeats * 3, peer="matmul")
    run_case(f"batched matmul 3-D {list(qa.shape[1:])}@{list(ka.shape[1:])}",
             {"fuelc": (g_bmm(qa.shape[1:], ka.shape[1:]), None)}, lambda a, b: a @ b,
             {"a": qa[0], "b": ka[0]}, repeats * 3, peer="matmul")

    for n in sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        run_case(f"matmul {n}x{n}x{n} f32", {"fuelc": (g_matmul(n), None)},
                 lambda a, b: a @ b, {"a": a, "b": b}, repeats if n < 2048 else max(3, repeats // 2),
                 check_tol=1e-4, peer="matmul")

    x = rng.standard_normal(rows, dtype=np.float32)
    w = np.linspace(0.5, 1.5, rows[-1]).astype(np.float32)
    bb = np.linspace(-0.1, 0.1, rows[-1]).astype(np.float32)
    run_case(f"softmax {list(rows)}", {"fused": (g_softmax(rows, True), None),
                                       "primitives": (g_softmax(rows, False), "no-fusion")},
             lambda x: np_softmax(x), {"x": x}, repeats, peer="softmax", bytes_moved=2 * x.nbytes)
    run_case(f"logsoftmax {list(rows)}", {"fuelc": (g_logsoftmax(rows), None)},
             lambda x: np_logsoftmax(x), {"x": x}, repeats, peer="logsoftmax",
             bytes_moved=2 * x.nbytes)
    run_case(f"layernorm {list(rows)}", {"fused": (g_layernorm(rows, True), None),
                                         "primitives": (g_layernorm(rows, False), "no-fusion")},
             lambda x: np_layernorm(x, w, bb), {"x": x}, repeats, peer="layernorm",
             consts={"w": w, "b": bb}, bytes_moved=2 * x.nbytes)
    run_case(f"rmsnorm {list(rows)}", {"fused": (g_rmsnorm(rows, True), None),
                                       "primitives": (g_rmsnorm(rows, False), "no-fusion")},
             lambda x: np_rmsnorm(x, w), {"x": x}, repeats, peer="rmsnorm", consts={"w": w},
             bytes_moved=2 * x.nbytes)
    lm, lk, ln = (64, 256, 128) if args.quick else (512, 1024, 1024)
    xl = rng.standard_normal((lm, lk), dtype=np.float32)
    wl = rng.standard_normal((lk, ln), dtype=np.float32)
    bl = rng.standard_normal(ln, dtype=np.float32)
    run_case(f"linear+bias {lm}x{lk}x{ln}", {"fused": (g_linear(lm, lk, ln, True), None),
                                              "primitives": (g_linear(lm, lk, ln, False), "no-fusion")},
             lambda x, w, b: x @ w + b, {"x": xl, "w": wl, "b": bl}, repeats, peer="linear")
    # the rows of batch-1 inference and decoding (M = 1, 8, 32) through a
    # BERT-base-sized projection
    for sm in ((1, 8) if args.quick else (1, 8, 32)):
        sk, sn = (128, 512) if args.quick else (768, 3072)
        xs = rng.standard_normal((sm, sk), dtype=np.float32)
        ws = rng.standard_normal((sk, sn), dtype=np.float32)
        bs = rng.standard_normal(sn, dtype=np.float32)
        run_case(f"linear+bias {sm}x{sk}x{sn}", {"fused": (g_linear(sm, sk, sn, True), None)},
                 lambda x, w, b: x @ w + b, {"x": xs, "w": ws, "b": bs}, repeats, peer="linear")
    rs = (4, 128, 64) if args.quick else (32, 512, 128)
    xr = rng.standard_normal(rs, dtype=np.float32)
    cr, sr = np.cos(xr[0]), np.sin(xr[0])
    run_case(f"rope {list(rs)}", {"fused": (g_rope(rs), None),
                                  "primitives": (g_rope(rs), "base-map")},
             np_rope, {"x": xr, "cos": cr, "sin": sr}, repeats)
    cv = (256, 1024) if args.quick else (2048, 8192)
    lg = rng.standard_normal(cv, dtype=np.float32)
    tg = rng.integers(0, cv[1], cv[0]).astype(np.int64)
    run_case(f"cross-entropy {list(cv)}", {"fused": (g_cross_entropy(*cv), None),
                                            "primitives": (g_cross_entropy(*cv), "base-map")},
             np_cross_entropy, {"logits": lg, "t": tg}, repeats)
    run_case(f"gelu {list(rows)}", {"fuelc": (g_gelu(rows), None)}, lambda x: np_gelu(x), {"x": x},
             repeats, peer="gelu", bytes_moved=2 * x.nbytes)
    run_case(f"gelu-erf {list(rows)}", {"fuelc": (g_gelu(rows, erf=True), None)},
             lambda x: np_gelu_erf(x), {"x": x}, repeats, peer="gelu_erf",
             bytes_moved=2 * x.nbytes, check_tol=2e-4)

    import mlp
    g, weights = mlp.build()
    xm = rng.standard_normal((8, 64), dtype=np.float32)
    run_case("mlp 8x64 -> 128 -> 32", {"fuelc": (g, None)},
             lambda x: mlp.numpy_mlp(x, *weights), {"x": xm}, repeats * 5)
    summary()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": TARGET, "threads": THREADS, "repeats": repeats,
                       "numpy": np.__version__, "peers": sorted(PEERS),
                       "bandwidth_bytes_per_s": bandwidth(), "cases": RECORDS}, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
