"""The interpreter's input/output contract and the graph analyses."""
import networkx as nx
import numpy as np
import pytest

from compiler.graph import (Graph, GraphCycleError, InterpretError, consumers, dead_nodes,
                            eliminate_dead_code, interpret, reachable, to_networkx,
                            topological_order)
from runtime.dtype import DType, bf16_to_f32


def small_graph():
    g = Graph()
    x = g.input("x", (2, 3), "f32")
    y = g.input("y", (2, 3), "f32")
    a = x + y
    dead = (x * y).exp()  # noqa: F841 - an orphan
    b = a * a
    g.output(b, name="b")
    g.output(a, name="a")
    return g, x, y, a, b, dead


def test_interpret_inputs_and_outputs():
    g, x, y, a, b, dead = small_graph()
    xv = np.ones((2, 3), np.float32)
    yv = np.full((2, 3), 2, np.float32)
    out = interpret(g, {"x": xv, "y": yv})
    assert list(out) == ["b", "a"]
    np.testing.assert_array_equal(out["b"], np.full((2, 3), 9))
    only = interpret(g, {"x": xv, "y": yv}, outputs=["a"])
    assert list(only) == ["a"]
    extra = interpret(g, {"x": xv, "y": yv}, outputs=[dead, b])
    np.testing.assert_allclose(extra[dead.name], np.exp(np.full((2, 3), 2, np.float32)))
    np.testing.assert_array_equal(extra["b"], out["b"])
    # only what the requested outputs need is evaluated: y is not needed for x alone
    assert list(interpret(g, {"x": xv}, outputs=[x])) == ["x"]


def test_interpret_input_errors():
    g, *_ = small_graph()
    xv = np.ones((2, 3), np.float32)
    with pytest.raises(InterpretError, match="missing input 'y'"):
        interpret(g, {"x": xv})
    with pytest.raises(InterpretError, match="unknown input"):
        interpret(g, {"x": xv, "y": xv, "z": xv})
    with pytest.raises(InterpretError, match=r"input 'y': dtype float64 does not match declared "
                                             r"f32"):
        interpret(g, {"x": xv, "y": xv.astype(np.float64)})
    with pytest.raises(InterpretError, match=r"shape \[3, 2\] does not match declared \[2, 3\]"):
        interpret(g, {"x": xv, "y": xv.T})
    with pytest.raises(InterpretError, match="not a graph output"):
        interpret(g, {"x": xv, "y": xv}, outputs=["nope"])


def test_interpret_bf16_inputs_and_index_errors():
    g = Graph()
    x = g.input("x", (3,), "bf16")
    i = g.input("i", (2,), "u32")
    g.output(x.index_select(i), name="y")
    out = interpret(g, {"x": np.array([1.0, 2.0, 3.0], np.float32),
                        "i": np.array([2, 0], np.uint32)})
    assert out["y"].dtype == DType.BF16.numpy  # ml_dtypes.bfloat16
    np.testing.assert_array_equal(bf16_to_f32(out["y"]), [3.0, 1.0])
    with pytest.raises(InterpretError, match=r"node %\d+ .*IndexSelect: .*index 7 out of range"):
        interpret(g, {"x": np.zeros(3, np.float32), "i": np.array([7, 0], np.uint32)})


class _Liar:
    name = "Liar"

    def infer(self, types, params):
        return types[0]

    def reference(self, inputs, params):
        return inputs[0].astype(np.float64)


def test_interpret_checks_reference_types():
    g = Graph()
    x = g.input("x", (2,), "f32")
    g.output(g.add_fused(_Liar(), [x]), name="y")
    with pytest.raises(InterpretError, match=r"Fused\[Liar\]: reference slot 0 gave "
                                             r"float64\[2\], declared f32\[2\]"):
        interpret(g, {"x": np.zeros(2, np.float32)})


def test_topological_order_and_reachability():
    g, x, y, a, b, dead = small_graph()
    order = topological_order(g)
    assert order == [x.id, y.id, a.id, b.id]
    assert reachable(g) == {x.id, y.id, a.id, b.id}
    assert dead_nodes(g) == [dead.id - 1, dead.id]  # the Mul and the Exp
    assert topological_order(g, [dead]) == [x.id, y.id, dead.id - 1, dead.id]
    pos = {n: k for k, n in enumerate(order)}
    for n in order:
        assert all(pos[i] < pos[n] for i in g[n].inputs)


def test_topological_order_after_rewrite_to_later_node():
    # a rewrite may redirect an early node to a later one: order must follow edges, not ids
    g = Graph()
    x = g.input("x", (2,), "f32")
    n = x.exp()
    late = x.neg()
    g.rewrite_input(n, 0, late)
    g.output(n, name="n")
    order = topological_order(g)
    assert order.index(late.id) < order.index(n.id)
    np.testing.assert_allclose(interpret(g, {"x": np.ones(2, np.float32)})["n"],
                               np.exp(-np.ones(2)), rtol=1e-6)


def test_cycle_detected():
    g = Graph()
    x = g.input("x", (2,), "f32")
    a = x.exp()
    b = a.neg()
    g.rewrite_input(a, 0, b)
    g.output(b, name="b")
    with pytest.raises(GraphCycleError, match="cycle"):
        topological_order(g)


def test_consumers():
    g, x, y, a, b, dead = small_graph()
    c = consumers(g)
    assert c[a.id] == [b.id, b.id]  # b = a * a reads a twice
    assert c[x.id] == [a.id]
    assert c[b.id] == []
    assert dead.id not in c
    c_all = consumers(g, [a, b, dead])
    assert sorted(c_all[x.id]) == sorted([a.id, dead.id - 1])


def test_eliminate_dead_code():
    g, x, y, a, b, dead = small_graph()
    unused_input = g.input("unused", (1,), "f32")  # noqa: F841
    g.constant(np.zeros(3, np.float32), name="dead_const")
    new, remap = eliminate_dead_code(g)
    assert len(new) == 5  # x, y, unused input, add, mul
    assert [n.id for n in new] == list(range(len(new)))
    assert set(new.inputs) == {"x", "y", "unused"}
    assert "dead_const" not in new.constants
    assert dead.id not in remap
    xv = np.ones((2, 3), np.float32)
    feed = {"x": xv, "y": xv, "unused": np.zeros(1, np.float32)}
    got, want = interpret(new, feed), interpret(g, feed)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    assert len(g) == 8  # the original is untouched
    stripped, _ = eliminate_dead_code(g, keep_inputs=False)
    assert set(stripped.inputs) == {"x", "y"}


def test_to_networkx():
    g, x, y, a, b, dead = small_graph()
    nxg = to_networkx(g)
    assert set(nxg.nodes) == reachable(g)
    assert nxg.number_of_edges(a.id, b.id) == 2
    assert list(nx.topological_sort(nxg))[-1] == b.id
    assert nxg.nodes[a.id]["node"].op == "Add"
