"""Ahead of time, end to end: a small BERT-style encoder built with
onnx.helper (Gather embeddings, attention with a padding mask, erf GELU,
residuals, LayerNorm) -> ``fuelc compile`` -> ``fuelc inspect`` ->
``fuelc run``, checked against onnxruntime.

    python examples/export_onnx.py            # hidden 384, 12 heads, FFN 1536, seq 128
    python examples/export_onnx.py --small    # hidden 64, 4 heads, FFN 256, seq 16

The compile runs twice, with a fresh kernel cache and then with that cache
warm, and both times are printed.
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def encoder(vocab: int, hidden: int, heads: int, ffn: int, seq: int) -> onnx.ModelProto:
    """input_ids [1, seq] (int64) and mask [1, seq] (1 keep, 0 pad) -> y [1, seq, hidden]."""
    rng = np.random.RandomState(0)
    d = hidden // heads
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(name, *shape, scale=None):
        s = scale if scale is not None else 1 / math.sqrt(shape[0])
        return const(name, (rng.randn(*shape) * s).astype(np.float32))

    def op(kind, ins, out, **attrs):
        nodes.append(helper.make_node(kind, ins, [out], **attrs))
        return out

    def linear(x, p, k, m):
        return op("Add", [op("MatMul", [x, weight(p + ".w", k, m)], p + ".mm"),
                          weight(p + ".b", m, scale=0.1)], p + ".y")

    def layer_norm(x, p):
        return op("LayerNormalization", [x, weight(p + ".g", hidden, scale=1.0),
                                         weight(p + ".b", hidden, scale=0.1)], p + ".y",
                  axis=-1, epsilon=1e-12)

    def split_heads(x, p):  # [1, S, H] -> [1, heads, S, d]
        return op("Transpose", [op("Reshape", [x, "heads_shape"], p + ".r")], p + ".t",
                  perm=[0, 2, 1, 3])

    const("heads_shape", np.array([1, seq, heads, d], np.int64))
    const("out_shape", np.array([1, seq, hidden], np.int64))
    const("positions", np.arange(seq, dtype=np.int64).reshape(1, seq))
    const("mask_axes", np.array([1, 2], np.int64))
    for name, v in {"sqrt_d": math.sqrt(d), "sqrt2": math.sqrt(2), "one": 1.0, "half": 0.5,
                    "neg": -10000.0}.items():
        const(name, np.float32(v))
    emb = op("Add", [op("Gather", [weight("word_emb", vocab, hidden, scale=0.5), "input_ids"],
                        "we", axis=0),
                     op("Gather", [weight("pos_emb", seq, hidden, scale=0.1), "positions"],
                        "pe", axis=0)], "emb")
    x = layer_norm(emb, "ln0")
    q, k, v = (split_heads(linear(x, n, hidden, hidden), n) for n in ("q", "k", "v"))
    scores = op("Div", [op("MatMul", [q, op("Transpose", [k], "kt", perm=[0, 1, 3, 2])], "qk"),
                        "sqrt_d"], "scores")
    madd = op("Mul", [op("Sub", ["one", op("Cast", ["mask"], "mf", to=F)], "inv"), "neg"], "madd")
    probs = op("Softmax", [op("Add", [scores, op("Unsqueeze", [madd, "mask_axes"], "mu")],
                              "masked")], "probs", axis=-1)
    ctx = op("Reshape", [op("Transpose", [op("MatMul", [probs, v], "ctx")], "ctx_t",
                            perm=[0, 2, 1, 3]), "out_shape"], "ctx_r")
    h1 = layer_norm(op("Add", [linear(ctx, "o", hidden, hidden), x], "res1"), "ln1")
    f = linear(h1, "f1", hidden, ffn)
    gelu = op("Mul", [op("Mul", [f, op("Add", [op("Erf", [op("Div", [f, "sqrt2"], "gd")], "ge"),
                                              "one"], "g1")], "gm"), "half"], "gelu")
    layer_norm(op("Add", [linear(gelu, "f2", ffn, hidden), h1], "res2"), "ln2")
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes, "encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", F, ["batch", "seq", hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def fuelc(*args: str, env=None) -> str:
    cmd = [sys.executable, "-m", "compiler.cli", *args]
    print("$ fuelc " + " ".join(args))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env,
                       cwd=Path(__file__).resolve().parents[1])
    sys.stderr.write(r.stderr)
    if r.returncode:
        sys.exit(f"fuelc {args[0]} failed with status {r.returncode}")
    return r.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="a small encoder (fast)")
    ap.add_argument("--dir", help="where to write the files (default: a temp dir)")
    args = ap.parse_args()
    vocab, hidden, heads, ffn, seq = (100, 64, 4, 256, 16) if args.small else \
        (1000, 384, 12, 1536, 128)
    work = Path(args.dir or tempfile.mkdtemp(prefix="fuelc-export-"))
    work.mkdir(parents=True, exist_ok=True)
    onnx.save(encoder(vocab, hidden, heads, ffn, seq), str(work / "encoder.onnx"))
    rng = np.random.RandomState(1)
    ids = rng.randint(0, vocab, (1, seq)).astype(np.int64)
    mask = np.ones((1, seq), np.int64)
    mask[:, -3:] = 0
    np.save(work / "ids.npy", ids)
    np.save(work / "mask.npy", mask)

    env = dict(os.environ, FUELC_CACHE_DIR=str(work / "kernel-cache"))
    times = []
    for _ in ("cold", "warm"):
        t0 = time.perf_counter()
        print(fuelc("compile", str(work / "encoder.onnx"), "-o", str(work / "encoder.fuel"),
                    "--input-shape", f"input_ids=1,{seq}", "--input-shape", f"mask=1,{seq}",
                    "--progress", env=env), end="")
        times.append(time.perf_counter() - t0)
    print(f"compile: cold {times[0]:.1f}s, warm (kernel cache) {times[1]:.1f}s")
    print(fuelc("inspect", str(work / "encoder.fuel")), end="")
    print(fuelc("run", str(work / "encoder.fuel"), "--input", f"input_ids={work / 'ids.npy'}",
                "--input", f"mask={work / 'mask.npy'}", "--output-dir", str(work / "out")), end="")

    got = np.load(work / "out" / "y.npy")
    want = ort.InferenceSession(str(work / "encoder.onnx")).run(
        None, {"input_ids": ids, "mask": mask})[0]
    err = float(np.max(np.abs(got - want)))
    print(f"max |fuelc - onnxruntime| = {err:.2e}")
    if not np.allclose(got, want, rtol=1e-4, atol=5e-4):
        sys.exit("outputs differ from onnxruntime")
    print(f"ok ({work})")


if __name__ == "__main__":
    main()
