"""Graphs with symbolic dims whose ``?`` emission the tests run the passes on
(``symbolic_block.mlir`` holds ``emitted()``; ``tests/dialect/test_symbolic_emit.py``
checks it is the emission, to the letter, and the passes' output at a binding)."""
import numpy as np

from compiler.dialect.emit import graph_to_module
from compiler.graph import Graph

HIDDEN, HEADS, FFN = 32, 4, 64


def encoder_block() -> Graph:
    """A BERT-style block over ``[batch, seq, 32]``: attention (q, k, v
    linears, reshapes to heads and back, a scaled additive-mask softmax), the
    output linear, residuals, LayerNorms, and a GELU feed-forward."""
    rng = np.random.default_rng(0)
    g = Graph()
    x = g.input("x", ("batch", ("seq", 1, 512), HIDDEN), "f32")
    mask = g.input("mask", ("batch", "seq"), "f32")

    def linear(t, n, m, name):
        w = g.constant((rng.standard_normal((n, m)) * 0.1).astype(np.float32), name=name + "_w")
        return t @ w + g.constant(rng.standard_normal(m).astype(np.float32), name=name + "_b")

    def heads(t):
        return t.reshape(x.shape[0], x.shape[1], HEADS, HIDDEN // HEADS).permute((0, 2, 1, 3))

    q, k, v = (heads(linear(x, HIDDEN, HIDDEN, n)) for n in "qkv")
    scores = (q @ k.swapaxes(-1, -2)) * (HEADS / HIDDEN) ** 0.5 \
        + mask.unsqueeze(1).unsqueeze(1) * -1e4
    ctx = (scores.softmax(-1) @ v).permute((0, 2, 1, 3)).reshape(x.shape)
    h = (x + linear(ctx, HIDDEN, HIDDEN, "o")).layer_norm()
    ffn = linear(linear(h, HIDDEN, FFN, "up").gelu(), FFN, HIDDEN, "down")
    g.output((h + ffn).layer_norm(), name="y")
    return g


def flat_f16() -> Graph:
    """``exp`` of an f16 ``[batch, 8]`` flattened twice to ``[batch*8]``
    (``fuel.extents``; two equal reshapes for fuel-cse), added."""
    g = Graph()
    x = g.input("x", ("batch", 8), "f16")
    g.output(x.reshape(-1).exp() + x.reshape(-1), name="y")
    return g


GRAPHS = {"encoder_block": encoder_block, "flat_f16": flat_f16}


def emitted(name: str) -> str:
    """The emission of graph ``name`` (constants out of line: no payloads)."""
    return str(graph_to_module(GRAPHS[name](), func_name=name, inline_limit=0))


if __name__ == "__main__":
    print("\n// -----\n".join(emitted(n) for n in GRAPHS))
