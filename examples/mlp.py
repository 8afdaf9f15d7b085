"""A two-layer MLP with GELU and softmax, compiled ahead of time for the CPU and
checked against numpy.

    python examples/mlp.py

Builds the graph with the Python API, compiles it through the default pass
pipeline (fusion, decompose-via-recipe, dtype reconciliation) to x86 code,
runs it, and compares the result with a plain numpy implementation.
"""
import time

import numpy as np

from compiler import Graph, compile


def build(batch=8, d_in=64, d_hidden=128, d_out=32, seed=0):
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((d_in, d_hidden)) / np.sqrt(d_in)).astype(np.float32)
    b1 = (0.1 * rng.standard_normal(d_hidden)).astype(np.float32)
    w2 = (rng.standard_normal((d_hidden, d_out)) / np.sqrt(d_hidden)).astype(np.float32)
    b2 = (0.1 * rng.standard_normal(d_out)).astype(np.float32)

    g = Graph()
    x = g.input("x", (batch, d_in), "f32")
    h = (x @ g.constant(w1, name="w1") + g.constant(b1, name="b1")).gelu(approximate="tanh")
    logits = h @ g.constant(w2, name="w2") + g.constant(b2, name="b2")
    g.output(logits.softmax(-1), name="probs")
    return g, (w1, b1, w2, b2)


def numpy_mlp(x, w1, b1, w2, b2):
    z = x @ w1 + b1
    h = 0.5 * z * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z**3)))
    logits = h @ w2 + b2
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def main():
    g, weights = build()
    t0 = time.perf_counter()
    m = compile(g, target="cpu")
    t_compile = time.perf_counter() - t0

    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    out = m(x=x)  # one output: a single array
    ref = numpy_mlp(x.astype(np.float64), *(w.astype(np.float64) for w in weights))
    err = float(np.max(np.abs(out - ref)))
    print(f"compiled in {t_compile:.2f} s; kernels: {', '.join(m.kernel_summary())}")
    print(f"output {out.shape} {out.dtype}; max |fuelc - numpy| = {err:.2e}")
    if not err < 1e-5:
        raise SystemExit(f"MISMATCH: max abs error {err:.3e} exceeds 1e-5")
    print("OK")


if __name__ == "__main__":
    main()
