"""Hypothesis-built random graphs (DAGs of element-wise ops, reductions,
matmul, views and casts) compiled for the CPU and compared with the
reference interpreter. Bounded ``max_examples`` keeps it fast; kernels are
shared across examples through the caches."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from compiler import Graph, matmul, where

from oracle import compile_and_compare

UNARY = {
    "neg": lambda t: -t, "abs": lambda t: t.abs(), "tanh": lambda t: t.tanh(),
    "sigmoid": lambda t: t.sigmoid(), "relu": lambda t: t.relu(), "sin": lambda t: t.sin(),
    "exp": lambda t: (t.clamp(-4, 4)).exp(), "affine": lambda t: t * 0.5 + 1,
    "clamp": lambda t: t.clamp(-1, 1), "gelu": lambda t: t.gelu(), "floor": lambda t: t.floor(),
    "sqrt": lambda t: t.abs().sqrt(), "powi": lambda t: t ** 2,
}
BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "max": lambda a, b: a.maximum(b), "min": lambda a, b: a.minimum(b),
    "where": lambda a, b: where(a > b, a, b),
}


def _view(draw, t):
    """A random view of ``t`` (transpose, slice, flip, unsqueeze+broadcast, permute)."""
    kinds = ["flip"] * (t.ndim >= 1) + ["T"] * (t.ndim >= 2) + ["slice"] * (t.ndim >= 1) \
        + ["perm"] * (t.ndim == 3) + ["bcast"] * (t.ndim <= 2)
    if not kinds:
        return t
    k = draw(st.sampled_from(kinds))
    if k == "flip":
        return t.flip(draw(st.integers(0, t.ndim - 1)))
    if k == "T":
        return t.swapaxes(-1, -2)
    if k == "perm":
        return t.permute(draw(st.permutations(range(3))))
    if k == "slice":
        a = draw(st.integers(0, t.ndim - 1))
        n = t.shape[a]
        start = draw(st.integers(0, n - 1))
        return t.slice(a, start, draw(st.integers(1, n - start)))
    return t.unsqueeze(0).broadcast_to((2,) + t.shape)


@st.composite
def programs(draw):
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    dtype = draw(st.sampled_from(["f32", "f32", "f64"]))
    g = Graph()
    feed = {}
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))

    def new_input(shape):
        name = f"x{len(feed)}"
        feed[name] = rng.uniform(-2, 2, shape).astype({"f32": np.float32, "f64": np.float64}[dtype])
        return g.input(name, shape, dtype)

    pool = [new_input(shape)]
    for _ in range(draw(st.integers(1, 8))):
        t = draw(st.sampled_from(pool))
        kind = draw(st.sampled_from(["unary", "binary", "reduce", "view", "matmul", "cast",
                                     "softmax"]))
        if kind == "unary":
            t = UNARY[draw(st.sampled_from(sorted(UNARY)))](t)
        elif kind == "binary":
            others = [p for p in pool if p.shape == t.shape and p is not t]
            other = draw(st.sampled_from(others)) if others and draw(st.booleans()) else \
                new_input(t.shape[draw(st.integers(0, t.ndim)):])  # a broadcast operand
            a, b = (t, other) if draw(st.booleans()) else (other, t)
            t = BINARY[draw(st.sampled_from(sorted(BINARY)))](a, b)
        elif kind == "reduce" and t.ndim >= 1:
            op = draw(st.sampled_from(["sum", "max", "min", "mean"]))
            axis = draw(st.one_of(st.none(), st.integers(-t.ndim, t.ndim - 1)))
            t = getattr(t, op)(axis, keepdims=draw(st.booleans()))
        elif kind == "view":
            t = _view(draw, t)
        elif kind == "matmul" and t.ndim >= 1:
            w = new_input((t.shape[-1], draw(st.integers(1, 4))))
            t = matmul(t, w)
        elif kind == "cast":
            # a round trip (no math in the narrow type, so the output dtype's
            # tolerance still applies): f64 -> f32 rounds identically in both
            other = draw(st.sampled_from(["f64", "f32", "f16"] if t.dtype.value == "f32" else ["f32"]))
            t = t.cast(other).cast(t.dtype)
        elif kind == "softmax" and t.ndim >= 1:
            t = t.softmax(-1) if draw(st.booleans()) else t.log_softmax(-1)
        pool.append(t)
    outs = draw(st.lists(st.sampled_from(pool[1:] or pool), min_size=1, max_size=3, unique_by=id))
    for i, o in enumerate(outs):
        g.output(o, name=f"out{i}")
    return g, feed


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True)
@given(programs())
def test_random_graph_compiles_and_matches_reference(program):
    g, feed = program
    # a chain of up to 8 ops, matmuls and reductions over <= 4 terms each: 16 terms of slack
    compile_and_compare(g, feed, tol_terms=16)
