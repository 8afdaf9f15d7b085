"""Recipes emitted into a real Graph and run by the reference interpreter,
against the fused node itself; the builders."""
import numpy as np
import pytest

from compiler.graph.graph import Graph
from compiler.graph.interpret import interpret
from compiler.graph.numerics import dtype_of
from compiler.registry import builders, default_registry, emit_recipe, normalize_params

from fused_cases import cases

CASES = cases()


def _graph_with_inputs(inputs):
    g = Graph()
    hs = [g.input(f"in{i}", np.shape(x), dtype_of(np.asarray(x))) for i, x in enumerate(inputs)]
    return g, hs


@pytest.mark.parametrize("name", sorted(CASES))
def test_emit_recipe_into_graph_matches_fused_node(name):
    entry = default_registry()[name]
    inputs, params = CASES[name][0]
    g, hs = _graph_with_inputs(inputs)
    fused = g.add_fused(entry, hs, normalize_params(entry, params))
    dec = emit_recipe(g, entry, hs, params)
    dec = dec if isinstance(dec, tuple) else (dec,)
    g.output(fused, "fused")
    for i, d in enumerate(dec):
        g.output(d, f"dec{i}")
    res = interpret(g, {f"in{i}": x for i, x in enumerate(inputs)})
    want = res["fused"] if isinstance(res["fused"], tuple) else (res["fused"],)
    assert len(want) == len(dec) == entry.num_outputs
    for i, w in enumerate(want):
        got = res[f"dec{i}"]
        assert got.dtype == w.dtype and got.shape == w.shape
        np.testing.assert_allclose(got.astype(np.float64), w.astype(np.float64),
                                   rtol=2e-5, atol=2e-5, equal_nan=True)


def _run(g, out, feeds):
    g.output(out, "y")
    return interpret(g, feeds)["y"]


def test_builders_norms_with_affine():
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 8), (8,), (8,)))
    g = Graph()
    hx, hw, hb = g.input("x", x.shape, "f32"), g.input("w", w.shape, "f32"), g.input("b", b.shape, "f32")
    y = _run(g, builders.layer_norm(hx, hw, hb, eps=1e-5), {"x": x, "w": w, "b": b})
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(y, (x - mu) / np.sqrt(var + 1e-5) * w + b, rtol=1e-5, atol=1e-5)
    g = Graph()
    hx, hw = g.input("x", x.shape, "f32"), g.input("w", w.shape, "f32")
    y = _run(g, builders.rms_norm(hx, hw, eps=1e-6), {"x": x, "w": w})
    np.testing.assert_allclose(y, x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w,
                               rtol=1e-5, atol=1e-6)


def test_builders_linear_flattens_batched_input_and_flash_attn_defaults():
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 4), (4, 5), (5,)))
    for bias in (None, b):
        g = Graph()
        hx, hw = g.input("x", x.shape, "f32"), g.input("w", w.shape, "f32")
        hb = g.input("b", b.shape, "f32") if bias is not None else None
        feeds = {"x": x, "w": w} | ({"b": b} if bias is not None else {})
        y = _run(g, builders.linear(hx, hw, hb), feeds)
        np.testing.assert_allclose(y, x @ w + (0 if bias is None else b), rtol=1e-5, atol=1e-5)
    q, k, v = (rng.standard_normal((1, 2, 4, 8)).astype(np.float32) for _ in range(3))
    g = Graph()
    hq, hk, hv = (g.input(n, q.shape, "f32") for n in "qkv")
    node = builders.flash_attn(hq, hk, hv, sliding_window=2)
    p = g.node(node).params
    assert p["causal"] is True and p["window_size_left"] == 1
    assert p["softmax_scale"] == pytest.approx(1 / np.sqrt(8))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(8)
    i, j = np.arange(4)[:, None], np.arange(4)[None]
    s = np.where((j > i) | (j < i - 1), -np.inf, s)
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(_run(g, node, {"q": q, "k": k, "v": v}),
                               (e / e.sum(-1, keepdims=True)) @ v, rtol=1e-5, atol=1e-6)


def test_builder_errors_name_the_op():
    from compiler.errors import GraphBuildError
    g = Graph()
    x = g.input("x", (2, 3, 5, 5), "f32")
    w = g.input("w", (4, 2, 3, 3), "f32")
    with pytest.raises(GraphBuildError, match="Conv2D.*groups"):
        builders.conv2d(x, w)
    with pytest.raises(GraphBuildError, match="Conv2D.*stride"):
        builders.conv2d(x, g.input("w2", (4, 3, 3, 3), "f32"), stride=(1, 2, 3))
