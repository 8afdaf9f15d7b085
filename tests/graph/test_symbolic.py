"""Symbolic extents in the graph: Sym arithmetic, shape rules, signature,
binding errors, the reference interpreter at several sizes
(docs/dynamic-shapes.md)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from compiler import Graph, GraphBuildError, ShapeSignatureError, Sym, concat, interpret
from runtime.errors import PlanError
from runtime.symbols import SymbolicError

RNG = np.random.default_rng(0)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# -- Sym -------------------------------------------------------------------
def test_sym_polynomial_arithmetic_and_equality():
    b, s = Sym("b"), Sym("s", 1, 512)
    assert b * s * 256 == s * (b * 4) * 64
    assert (b * s) // s == b and (b * s * 8) // 4 == 2 * b * s
    assert s + 1 - 1 == s and (s - s) == 0 and isinstance(s - s, int)
    assert str(2 * s + 3) == "2*s + 3" and str(b * s - 1) == "b*s - 1"
    assert (s - 1).bounds == (0, 511) and (b * s).bounds == (1, None)
    with pytest.raises(SymbolicError):
        (s + 1) // s
    with pytest.raises(SymbolicError):
        (b * s) // 3


def test_sym_comparisons_decided_by_bounds_or_refused():
    s = Sym("s", 1, 512)
    assert s >= 1 and s - 1 >= 0 and not (s < 1) and s <= 512 and s < 513
    with pytest.raises(SymbolicError, match="cannot decide"):
        s > 1
    with pytest.raises(SymbolicError, match="symbolic"):
        int(s)


# -- declaring symbols -----------------------------------------------------
def test_input_spellings_and_signature():
    g = Graph()
    x = g.input("x", ("batch", ("seq", 1, 64), 8), "f32")
    m = g.input("m", (Sym("batch"), "seq"), "f32")
    assert x.shape[0] == m.shape[0] and x.shape[1] == m.shape[1]
    g.output(x.sum(-1) + m, name="y")
    assert g.signature() == {"inputs": {"x": "f32[batch,seq,8]", "m": "f32[batch,seq]"},
                             "outputs": {"y": "f32[batch,seq]"},
                             "symbols": {"batch": [1, None], "seq": [1, 64]}}
    assert "f32[batch,seq,8]" in g.dump() and "symbol seq in 1..64" in g.dump()


def test_conflicting_bounds_and_bad_extents_refused():
    g = Graph()
    g.input("x", (("n", 1, 8),), "f32")
    with pytest.raises(GraphBuildError, match="bounds 1..16 after 1..8"):
        g.input("y", (("n", 1, 16),), "f32")
    with pytest.raises(GraphBuildError, match="not an int"):
        g.input("z", ((1, 2),), "f32")
    with pytest.raises(GraphBuildError, match="identifier"):
        g.input("w", ("not a name",), "f32")


# -- shape rules -----------------------------------------------------------
def test_broadcast_one_and_reshape_minus_one():
    g = Graph()
    x = g.input("x", ("b", "s", 8), "f32")
    y = x + g.input("bias", (8,), "f32")
    assert y.shape == x.shape
    flat = y.reshape(-1, 8)
    assert flat.shape == (Sym("b") * Sym("s"), 8)
    back = flat.reshape(x.shape[0], -1, 2, 4)
    assert back.shape == (Sym("b"), Sym("s"), 2, 4)
    assert not g.equalities
    with pytest.raises(GraphBuildError, match="cannot infer -1"):
        x.reshape(-1, 3)


def test_concat_slice_pad_reduce_shapes():
    g = Graph()
    x = g.input("x", ("b", "s", 4), "f32")
    c = concat([x, x[:, :1]], axis=1)
    assert c.shape == (Sym("b"), Sym("s") + 1, 4)
    assert x[:, 1:].shape == (Sym("b"), Sym("s") - 1, 4)
    assert x[:, -1].shape == (Sym("b"), 4)
    assert x.pad(((0, 0), (2, 3), (0, 0))).shape == (Sym("b"), Sym("s") + 5, 4)
    assert x.mean(1).shape == (Sym("b"), 4) and x.sum().shape == ()
    with pytest.raises(GraphBuildError, match="cannot decide"):
        x[:, 2:3]  # s >= 3 is not known from s >= 1
    with pytest.raises(GraphBuildError, match="must be 1"):
        x.squeeze(0)
    with pytest.raises(GraphBuildError, match="symbolic"):
        len(x)


def test_different_symbols_are_assumed_equal_and_recorded():
    g = Graph()
    a = g.input("a", ("m", "k"), "f32")
    b = g.input("b", ("k2", 3), "f32")
    y = a @ b
    assert y.shape == (Sym("m"), 3)
    assert [(str(l), str(r)) for l, r, _ in g.equalities] == [("k", "k2")]
    assert "MatMul" in g.equalities[0][2]
    z = g.input("z", ("n",), "f32") + g.input("w", ("p",), "f32")
    assert z.shape in ((Sym("n"),), (Sym("p"),)) and len(g.equalities) == 2
    with pytest.raises(GraphBuildError, match="contraction"):
        g.input("d", (2, 2), "f32") @ g.input("e", (3, 2), "f32")


def test_static_mismatch_with_symbol_records_fixed_size():
    g = Graph()
    x = g.input("x", ("n", 4), "f32")
    y = x + g.input("v", (6, 4), "f32")
    assert y.shape == (6, 4)  # n is assumed to be 6 and checked per call
    g.output(y, name="y")
    interpret(g, {"x": f32(6, 4), "v": f32(6, 4)})
    with pytest.raises(ShapeSignatureError, match="n = 5 but 6 = 6|6 = 6 but n = 5"):
        interpret(g, {"x": f32(5, 4), "v": f32(6, 4)})


def test_matmul_rhs_batch_of_one_serves_any_batch():
    # [batch, s, 8] @ [1, 8, 4] (a weight viewed [1, K, N]): no batch == 1 assumed
    g = Graph()
    x = g.input("x", ("batch", "s", 8), "f32")
    w = g.constant(f32(1, 8, 4), name="w")
    g.output(g.add_node("MatMul", [x, w]), name="y")
    assert g.equalities == []
    x3 = f32(3, 2, 8)
    np.testing.assert_allclose(interpret(g, {"x": x3})["y"], x3 @ g.constants["w"], rtol=1e-5)


# -- the reference interpreter at several sizes ------------------------------
def _encoder_like():
    g = Graph()
    x = g.input("x", ("batch", ("seq", 1, 32), 8), "f32")
    mask = g.input("mask", ("batch", "seq"), "f32")
    w = g.constant(f32(8, 8), name="w")
    q = (x.reshape(-1, 8) @ w).reshape(x.shape[0], x.shape[1], 2, 4).permute((0, 2, 1, 3))
    scores = q @ q.swapaxes(-1, -2) + mask.unsqueeze(1).unsqueeze(1) * -1e4
    ctx = (scores.softmax(-1) @ q).permute((0, 2, 1, 3)).reshape(x.shape)
    g.output(ctx.layer_norm(), name="y")
    return g, w


def _numpy_encoder(x, mask, w):
    b, s, _ = x.shape
    q = (x.reshape(-1, 8) @ w).reshape(b, s, 2, 4).transpose(0, 2, 1, 3).astype(np.float64)
    sc = q @ q.swapaxes(-1, -2) + mask[:, None, None, :] * -1e4
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ctx = (p @ q).transpose(0, 2, 1, 3).reshape(x.shape)
    mu = ctx.mean(-1, keepdims=True)
    return (ctx - mu) / np.sqrt(((ctx - mu) ** 2).mean(-1, keepdims=True) + 1e-5)


@pytest.mark.parametrize("batch,seq", [(1, 1), (2, 5), (3, 32)])
def test_interpret_symbolic_graph_at_any_size(batch, seq):
    g, w = _encoder_like()
    x, mask = f32(batch, seq, 8), (RNG.random((batch, seq)) < 0.3).astype(np.float32)
    y = interpret(g, {"x": x, "mask": mask})["y"]
    assert y.shape == (batch, seq, 8)
    np.testing.assert_allclose(y, _numpy_encoder(x, mask, g.constants["w"]), rtol=1e-4,
                               atol=1e-4)


# -- a call contradicting the signature: one typed error, nothing runs --------
@pytest.mark.parametrize("shapes,match,fields", [
    ({"x": (2, 5), "mask": (2, 5)}, "input 'x': rank 2", ("x", None, None)),
    ({"x": (2, 5, 9), "mask": (2, 5)}, "input 'x' axis 2: size 9.*fixes 8", ("x", 2, None)),
    ({"x": (2, 5, 8), "mask": (3, 5)}, "symbol 'batch': input 'x' axis 0 gives 2, input "
                                       "'mask' axis 0 gives 3", ("mask", 0, "batch")),
    ({"x": (2, 33, 8), "mask": (2, 33)}, "symbol 'seq' = 33 .*outside its bounds 1..32",
     ("x", 1, "seq")),
])
def test_contradicting_call_raises_shape_signature_error(shapes, match, fields):
    g, _ = _encoder_like()
    inputs = {k: np.zeros(v, np.float32) for k, v in shapes.items()}
    with pytest.raises(ShapeSignatureError, match=match) as e:
        interpret(g, inputs)
    assert isinstance(e.value, PlanError)
    assert (e.value.input, e.value.axis, e.value.symbol) == fields


def test_bind_gives_a_static_graph_with_the_same_names():
    g, _ = _encoder_like()
    s = g.bind({"batch": 2, "seq": 3})
    assert not s.is_symbolic and s.signature()["inputs"] == {"x": "f32[2,3,8]",
                                                             "mask": "f32[2,3]"}
    assert [n.name for n in s.nodes] == [n.name for n in g.nodes]
    with pytest.raises(GraphBuildError, match="no value for symbol"):
        g.bind({"batch": 2})


def test_derived_input_extent_solves_or_checks_its_symbol():
    g = Graph()
    s = Sym("s", 1, 8)
    x = g.input("x", (s, 4), "f32")       # torch.export: s = Dim("s", min=1, max=8)
    y = g.input("y", (2 * s + 1, 4), "f32")  # a derived Dim: 2*s + 1
    g.output(concat([x, y], axis=0), name="z")
    assert g.signature()["inputs"] == {"x": "f32[s,4]", "y": "f32[(2*s + 1),4]"}
    out = interpret(g, {"x": f32(3, 4), "y": f32(7, 4)})["z"]
    assert out.shape == (10, 4)
    with pytest.raises(ShapeSignatureError, match="symbol 's': input 'x' axis 0 gives 3, "
                                                  "input 'y' axis 0 gives 4 as 2\\*s \\+ 1 = 9"):
        interpret(g, {"x": f32(3, 4), "y": f32(9, 4)})
    with pytest.raises(ShapeSignatureError, match="size 8 is not 2\\*s \\+ 1 for any integer s"):
        interpret(g, {"x": f32(3, 4), "y": f32(8, 4)})
    g2 = Graph()
    g2.input("y", (2 * s + 1,), "f32")
    with pytest.raises(ShapeSignatureError, match="s' = 9 .*as 2\\*s \\+ 1 = 19.*bounds 1..8"):
        g2.bind_shapes({"y": (19,)})
    with pytest.raises(GraphBuildError, match="a\\*Sym \\+ b"):
        Graph().input("z", (s * s,), "f32")




# -- soundness: what Sym decides holds at every size within the bounds ----------
_ATOMS = {"a": (1, 6), "b": (0, 4), "c": (2, None)}


@st.composite
def _polys(draw, depth=3):
    if depth == 0 or draw(st.booleans()):
        if draw(st.booleans()):
            return draw(st.integers(-5, 5))
        n = draw(st.sampled_from(sorted(_ATOMS)))
        return Sym(n, *_ATOMS[n])
    x, y = draw(_polys(depth - 1)), draw(_polys(depth - 1))
    return draw(st.sampled_from([x + y, x - y, x * y]))


def _value(p, env):
    return p.evaluate(env) if isinstance(p, Sym) else p


@settings(max_examples=100, deadline=None)
@given(_polys(), _polys(), st.fixed_dictionaries(
    {"a": st.integers(1, 6), "b": st.integers(0, 4), "c": st.integers(2, 40)}))
def test_sym_decisions_hold_at_every_in_bounds_size(p, q, env):
    """Arithmetic evaluates like ints, and a comparison Sym answers (instead of
    raising SymbolicError) is true at every size within the atoms' bounds."""
    for got, want in ((p + q, _value(p, env) + _value(q, env)),
                      (p - q, _value(p, env) - _value(q, env)),
                      (p * q, _value(p, env) * _value(q, env))):
        assert _value(got, env) == want
    if isinstance(p, Sym):
        lo, hi = p.bounds
        v = p.evaluate(env)
        assert (lo is None or lo <= v) and (hi is None or v <= hi)
        for op in ("__lt__", "__le__", "__gt__", "__ge__"):
            try:
                decided = getattr(p, op)(q)
            except SymbolicError:
                continue
            assert decided == getattr(v, op)(_value(q, env)), (p, op, q, env)


def test_dead_code_elimination_keeps_symbols_and_equalities():
    from compiler.graph import eliminate_dead_code
    g = Graph()
    a, b = g.input("a", ("m", "k"), "f32"), g.input("b", ("k2", 3), "f32")
    (a * 2.0).exp()  # dead
    g.output(a @ b, name="y")
    new, _ = eliminate_dead_code(g)
    assert new.signature() == g.signature() and new.equalities == g.equalities
    with pytest.raises(ShapeSignatureError, match="k = 4 but k2 = 5"):
        interpret(new, {"a": f32(2, 4), "b": f32(5, 3)})
