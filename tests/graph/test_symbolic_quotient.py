"""Floor quotients of symbolic extents: a window strided over a symbolic
image size (docs/dynamic-shapes.md, "Dynamic spatial size"). ``floor_div``
normalises, evaluates, bounds, prints and serialises them; the conv and
pool rules produce them; a call binds them (``ShapeSignatureError`` naming
the symbol on a contradiction)."""
import numpy as np
import pytest

from compiler import Graph, GraphBuildError, ShapeSignatureError, Sym, concat, interpret
from compiler.registry import builders as B
from runtime.symbols import SymbolicError, bind_symbols, floor_div, shape_text

RNG = np.random.default_rng(3)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# -- floor_div -------------------------------------------------------------
def test_quotients_normalise_so_equal_expressions_compare_equal():
    h = Sym("h")
    q = floor_div(h - 1, 2) + 1                       # a 3x3 stride-2 pad-1 conv
    assert q == floor_div(h + 1, 2) and hash(q) == hash(floor_div(h + 1, 2))
    assert q == floor_div(h - 1, 2) + 1 == floor_div(h + 2 - 1, 2)   # a 1x1 stride-2 shortcut
    assert str(q) == "(h + 1) // 2" and q.is_quotient and not q.is_atom
    assert floor_div(2 * h + 2, 4) == floor_div(h + 1, 2)           # common divisor
    assert floor_div(3 * h + 1, 2) == h + floor_div(h + 1, 2)       # the exact part stays polynomial
    assert floor_div(2 * h + 6, 2) == h + 3 and floor_div(7, 2) == 3
    assert floor_div(h, 1) == h
    # nested: a stride-2 pool of a stride-2 conv is one quotient by 4
    assert floor_div(q - 1, 2) + 1 == floor_div(h + 3, 4)
    assert str(floor_div(q - 1, 2) + 1) == "(h + 3) // 4"
    assert floor_div(h, 2) != floor_div(h + 1, 2) and floor_div(h, 2) != floor_div(h, 3)
    # a remainder that the bounds keep below the divisor is 0
    assert floor_div(Sym("r", 0, 1), 2) == 0


@pytest.mark.parametrize("v", [1, 2, 7, 8, 31, 224])
def test_quotients_evaluate_as_python_floor_division(v):
    h, w = Sym("h"), Sym("w")
    e = floor_div(floor_div(h - 1, 2) + 1 - 1, 2) + 1
    assert e.evaluate({"h": v}) == ((v - 1) // 2 + 1 - 1) // 2 + 1
    prod = 2 * floor_div(h + 1, 2) * floor_div(w, 3) - h
    assert prod.evaluate({"h": v, "w": v + 5}) == 2 * ((v + 1) // 2) * ((v + 5) // 3) - v
    with pytest.raises(SymbolicError, match=r"no value for symbol\(s\) \['w'\]"):
        prod.evaluate({"h": v})


def test_quotient_bounds_and_comparisons():
    h = Sym("h", 1, 64)
    q = floor_div(h + 1, 2)
    assert q.bounds == (1, 32) and floor_div(Sym("w", 1, 64), 2).bounds == (0, 32)
    assert floor_div(Sym("u"), 4).bounds == (0, None)
    # 2*q lies in h .. h + 1: comparisons a pool's rule needs are decided
    assert 2 * q - h >= 0 and 2 * q - h <= 1 and 2 * q - 2 < h + 1 and not (2 * q > h + 1)
    assert q >= 1 and q <= 32 and q < h + 1
    with pytest.raises(SymbolicError, match=r"cannot decide .* from the symbols' bounds"):
        q > 3
    with pytest.raises(SymbolicError, match="symbolic; it has no int value"):
        int(q)
    with pytest.raises(SymbolicError, match="not a multiple"):
        (h + q) // 2        # exact division stays exact
    for bad in (0, -2, 1.5, True, h):
        with pytest.raises(SymbolicError, match="the divisor must be an int >= 1"):
            floor_div(h, bad)


def test_quotient_text_and_json_round_trip():
    h, w = Sym("h", 1, 512), Sym("w")
    a, b = floor_div(h + 1, 2), floor_div(w, 2)
    assert str(a * b) == "((h + 1) // 2)*(w // 2)" and str(2 * a + 1) == "2*((h + 1) // 2) + 1"
    assert str(a + 1) == "(h + 1) // 2 + 1" and str(2 * a - h) == "2*((h + 1) // 2) - h"
    assert shape_text(["batch", 8, a, b + 1]) == "batch,8,(h + 1) // 2,(w // 2 + 1)"
    bounds = {"h": (1, 512), "w": (1, None)}
    for e in (a, b, a * b - 3 * h, floor_div(a + 2, 3)):
        back = Sym.from_json(e.to_json(), bounds)
        assert back == e and back.bounds == e.bounds and str(back) == str(e)
    assert a.to_json() == [[1, [{"floor": [[1, []], [1, ["h"]]], "by": 2}]]]
    # a leading minus is not read as a floor of the negation
    assert str(-a) == "-((h + 1) // 2)" and str(h - a) == "-((h + 1) // 2) + h"
    assert str(1 - 2 * a) == "-2*((h + 1) // 2) + 1"


def test_manifest_expressions_with_floor_factors_evaluate_as_sym():
    """A symbolic .fuel file's expressions hold ``to_json``'s floor factors
    (docs/dynamic-shapes.md, "One file for every image size"): the runtime's
    ``expression_value`` gives ``Sym.evaluate``'s value, and the name
    listing of ``shape_json_text`` reads them."""
    from runtime.symbolic import SYM, expression_value, shape_json_text
    h, w = Sym("h", 1, 512), Sym("w")
    e = 3 * floor_div(h + 1, 2) * floor_div(floor_div(w + 1, 2) + 1, 2) - h + 7
    for v in ({"h": 1, "w": 1}, {"h": 33, "w": 47}, {"h": 64, "w": 40}):
        assert expression_value({SYM: e.to_json()}, v) == e.evaluate(v)
    assert shape_json_text([{SYM: floor_div(h + 3, 4).to_json()}, 8]) == "(h + 3) // 4,8"


def test_nested_quotients_are_bounded_level_by_level():
    """SAME padding of a 3-wide stride-3 window: the total ``3*q - w`` with
    ``q = (w + 2) // 3`` is 0..2, and its halves (a quotient of a quotient)
    both 0..1."""
    w = Sym("w")
    total = 3 * floor_div(w + 2, 3) - w
    small = floor_div(total, 2)
    assert total.decided_bounds() == (0, 2) and small.decided_bounds() == (0, 1)
    assert (total - small).decided_bounds() == (0, 1) and small >= 0 and total - small >= 0
    for v in range(1, 20):
        t = 3 * ((v + 2) // 3) - v
        assert (total.evaluate({"w": v}), small.evaluate({"w": v})) == (t, t // 2)


# -- shape rules and calls ---------------------------------------------------
def _resnet_stem(g, x):
    w = g.constant(f32(8, 3, 7, 7) * 0.1)
    y = B.conv2d(x, w, stride=2, padding=3).relu()
    return B.max_pool2d(y, 3, 2, 1)


def test_strided_conv_and_pool_shapes_and_signature():
    g = Graph()
    x = g.input("x", ("batch", 3, ("h", 1, 256), "w"), "f32")
    y = _resnet_stem(g, x)
    assert str(y.shape[2]) == "(h + 3) // 4" and str(y.shape[3]) == "(w + 3) // 4"
    s = B.conv2d(y, g.constant(f32(8, 8, 1, 1)), stride=2)       # 1x1 s2 shortcut
    m = B.conv2d(B.conv2d(y, g.constant(f32(8, 8, 3, 3)), stride=2, padding=1),
                 g.constant(f32(8, 8, 3, 3)), padding=1)        # 3x3 s2 then 3x3 s1
    assert s.shape == m.shape                                   # one extent, no equality
    g.output(s + m, name="y")
    assert not g.equalities
    assert g.signature()["outputs"]["y"] == "f32[batch,8,(h + 7) // 8,(w + 7) // 8]"
    for shape in [(1, 3, 32, 32), (2, 3, 47, 33), (1, 3, 9, 64)]:
        out = interpret(g, {"x": f32(*shape)})["y"]
        ho = [((n + 7) // 8) for n in shape[2:]]
        assert out.shape == (shape[0], 8, *ho)
    with pytest.raises(ShapeSignatureError, match=r"symbol 'h' = 300 .* outside its bounds"):
        interpret(g, {"x": f32(1, 3, 300, 8)})


def test_window_the_bounds_cannot_fit_is_refused_at_build():
    g = Graph()
    x = g.input("x", (1, 3, "h", 8), "f32")
    with pytest.raises(GraphBuildError, match=r"MaxPool2D.*height: its window of extent 2 does "
                                              r"not fit the extent h for h < 2 \(h in 1\.\.\): "
                                              r"bound it at import, input_shapes=\{'h': \(2, None\)\}"):
        B.max_pool2d(x, 2, 2, 0)
    g = Graph()
    x = g.input("x", (1, 3, ("h", 2, None), 8), "f32")
    assert str(B.max_pool2d(x, 2, 2, 0).shape[2]) == "h // 2"


def test_equality_with_a_quotient_is_checked_per_call():
    """A second input whose extent the rules assume equal to a strided
    conv's output: recorded, and a call contradicting it names the symbols."""
    g = Graph()
    x = g.input("x", ("batch", 3, "h", "w"), "f32")
    z = g.input("z", ("batch", 4, "hh", "ww"), "f32")
    y = B.conv2d(x, g.constant(f32(4, 3, 3, 3)), stride=2, padding=1)
    g.output(y + z, name="y")
    assert {frozenset(map(str, (a, b))) for a, b, _ in g.equalities} == \
        {frozenset(("(h + 1) // 2", "hh")), frozenset(("(w + 1) // 2", "ww"))}
    out = interpret(g, {"x": f32(2, 3, 9, 6), "z": f32(2, 4, 5, 3)})["y"]
    assert out.shape == (2, 4, 5, 3)
    with pytest.raises(ShapeSignatureError, match=r"(\(h \+ 1\) // 2 = 5 but hh = 4|hh = 4 but "
                                                  r"\(h \+ 1\) // 2 = 5) \(\w+ node .* assumed "
                                                  r"them equal; bound (h=9, hh=4|hh=4, h=9)\)") as e:
        interpret(g, {"x": f32(2, 3, 9, 6), "z": f32(2, 4, 4, 3)})
    assert e.value.symbol in ("h", "hh") and {e.value.seen, e.value.expected} == {5, 4}
    # the binding itself evaluates the quotient from the bound atoms
    decl = {"x": x.shape, "z": z.shape}
    assert bind_symbols(decl, {"x": (1, 3, 10, 7), "z": (1, 4, 5, 4)}, g.equalities) == \
        {"batch": 1, "h": 10, "w": 7, "hh": 5, "ww": 4}


def test_quotient_extents_through_reshape_slice_concat_and_broadcast():
    g = Graph()
    x = g.input("x", ("batch", 3, "h", "w"), "f32")
    y = B.conv2d(x, g.constant(f32(4, 3, 3, 3)), stride=2, padding=1)   # [b,4,qh,qw]
    qh, qw = y.shape[2], y.shape[3]
    flat = y.reshape(x.shape[0], -1)                                    # [b, 4*qh*qw]
    assert flat.shape[1] == 4 * qh * qw and str(flat.shape[1]) == "4*((h + 1) // 2)*((w + 1) // 2)"
    back = flat.reshape(x.shape[0], 4, qh, -1)
    assert back.shape == y.shape
    tail = y[:, :, 1:]                                                  # qh >= 1 from the bounds
    assert str(tail.shape[2]) == "(h + 1) // 2 - 1"
    cat = concat([y, tail], 2)
    assert str(cat.shape[2]) == "2*((h + 1) // 2) - 1"
    g.output(cat * y[:, :, :1], name="c")   # a broadcast of 1 against the quotient
    g.output(back - y, name="d")
    assert g.signature()["outputs"] == {"c": "f32[batch,4,(2*((h + 1) // 2) - 1),(w + 1) // 2]",
                                        "d": "f32[batch,4,(h + 1) // 2,(w + 1) // 2]"}
    assert not g.equalities
    xv = f32(2, 3, 7, 10)
    out = interpret(g, {"x": xv})
    assert out["c"].shape == (2, 4, 7, 5) and not out["d"].any()
