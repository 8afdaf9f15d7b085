"""Hypothesis-built random graphs: every step is mirrored in plain numpy, and
the interpreter must agree with the mirror; every node's declared shape/dtype
must match the value it evaluates to."""
import numpy as np
from hypothesis import given, settings, strategies as st

from compiler.graph import Graph, interpret, topological_order, where

UNARY = {
    "neg": (lambda t: -t, lambda v: -v),
    "abs": (lambda t: t.abs(), np.abs),
    "tanh": (lambda t: t.tanh(), np.tanh),
    "sigmoid": (lambda t: t.sigmoid(), lambda v: 1 / (1 + np.exp(-v))),
    "relu": (lambda t: t.relu(), lambda v: np.maximum(v, 0)),
    "sin": (lambda t: t.sin(), np.sin),
    "scale": (lambda t: t * 0.5 + 1, lambda v: v * 0.5 + 1),
    "clamp": (lambda t: t.clamp(-1, 1), lambda v: np.clip(v, -1, 1)),
}
BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "max": (lambda a, b: a.maximum(b), np.maximum),
    "where": (lambda a, b: where(a > b, a, b), lambda a, b: np.where(a > b, a, b)),
}


def broadcastable_shape(draw, shape):
    """A shape that numpy-broadcasts with ``shape`` (drop leading axes, set 1s)."""
    drop = draw(st.integers(0, len(shape)))
    return tuple(1 if draw(st.booleans()) else d for d in shape[drop:])


@st.composite
def programs(draw):
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    steps = draw(st.lists(st.integers(0, 10 ** 6), min_size=1, max_size=12))
    return shape, steps, draw(st.data())


@settings(max_examples=60, deadline=None)
@given(programs())
def test_random_graph_matches_numpy(program):
    shape, steps, data = program
    rng = np.random.default_rng(len(steps))
    g = Graph()
    feed = {"x0": rng.uniform(-2, 2, shape)}
    pool = [(g.input("x0", shape, "f64"), feed["x0"])]
    for k, _ in enumerate(steps):
        t, v = pool[data.draw(st.integers(0, len(pool) - 1))]
        kind = data.draw(st.sampled_from(["unary", "binary", "reduce", "shape", "softmax"]))
        if kind == "unary":
            name = data.draw(st.sampled_from(sorted(UNARY)))
            build, ref = UNARY[name]
            t, v = build(t), ref(v)
        elif kind == "binary":
            other_shape = broadcastable_shape(data.draw, t.shape)
            name = f"x{len(feed)}"
            feed[name] = rng.uniform(-2, 2, other_shape)
            o = g.input(name, other_shape, "f64")
            build, ref = BINARY[data.draw(st.sampled_from(sorted(BINARY)))]
            if data.draw(st.booleans()):
                t, v = build(t, o), ref(v, feed[name])
            else:
                t, v = build(o, t), ref(feed[name], v)
        elif kind == "reduce" and t.ndim:
            axis = data.draw(st.integers(-t.ndim, t.ndim - 1))
            keep = data.draw(st.booleans())
            m = data.draw(st.sampled_from(["sum", "max", "min", "mean"]))
            t, v = getattr(t, m)(axis, keepdims=keep), getattr(np, m)(v, axis=axis, keepdims=keep)
        elif kind == "shape" and t.ndim:
            op = data.draw(st.sampled_from(["T", "flat", "slice", "flip", "unsq"]))
            if op == "T":
                t, v = t.T, v.T
            elif op == "flat":
                t, v = t.reshape(-1), v.reshape(-1)
            elif op == "slice":
                n = t.shape[0]
                lo = data.draw(st.integers(0, n - 1))
                t, v = t[lo:], v[lo:]
            elif op == "flip":
                t, v = t.flip(-1), np.flip(v, -1)
            else:
                t, v = t.unsqueeze(0), v[None]
        elif kind == "softmax" and t.ndim:
            e = np.exp(v - v.max(-1, keepdims=True))
            t, v = t.softmax(-1), e / e.sum(-1, keepdims=True)
        pool.append((t, v))
    for k, (t, _) in enumerate(pool):
        if t.id not in g.outputs.values():
            g.output(t, name=f"out{k}")
    got = interpret(g, feed)
    by_id = {nid: name for name, nid in g.outputs.items()}
    for t, v in pool:
        r = got[by_id[t.id]]
        assert r.shape == np.shape(v) == t.shape
        np.testing.assert_allclose(r, v, rtol=1e-10, atol=1e-12)
    every = interpret(g, feed, outputs=topological_order(g))
    for nid in topological_order(g):
        node = g[nid]
        val = every[by_id.get(nid, node.name)]
        assert val.shape == node.shape and val.dtype == node.dtype.numpy
