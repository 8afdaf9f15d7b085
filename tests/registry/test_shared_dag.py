"""Regions with shared subexpressions (a DAG, ``y = x*x; z = y*y; ...``) are
handled in time linear in their distinct nodes: hashing, equality, slot
counting, instantiation and the compile path never walk one path per
occurrence. Structural checks (node counts), not timings."""
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.registry import (SLOT, Bind, count_scalar_slots, grammar, op,
                               register_runtime_fused, runtime_entry, structural_hash,
                               try_instantiate_recipe)
from compiler.graph.opdef import TensorType
from runtime.dtype import DType

DEPTH = 40


def squaring_chain(depth, leaf):
    n = leaf
    for _ in range(depth):
        n = op("Mul", n, n)
    return n


@pytest.fixture
def op_count(monkeypatch):
    """Counts grammar nodes built; raises past a bound, so an exponential
    walk fails the test instead of hanging it."""
    count = {"n": 0}
    orig = grammar.Op.__post_init__

    def counted(self):
        count["n"] += 1
        if count["n"] > 20_000:
            raise RuntimeError("exponential node construction")
        orig(self)
    monkeypatch.setattr(grammar.Op, "__post_init__", counted)
    return count


def test_hash_equality_and_slot_count_are_linear():
    leaf = op("MulScalar", Bind(0), value=SLOT)
    a, b = squaring_chain(DEPTH, leaf), squaring_chain(DEPTH, op("MulScalar", Bind(0), value=SLOT))
    assert len(list(grammar.iter_unique(a))) == DEPTH + 2
    assert hash(a) == hash(b) and a == b and a != squaring_chain(DEPTH - 1, leaf)
    assert structural_hash(a) == structural_hash(b)
    assert count_scalar_slots(a) == 2 ** DEPTH       # one slot per occurrence, counted fast
    assert count_scalar_slots(squaring_chain(DEPTH, Bind(0))) == 0
    # tree and DAG spellings of one structure hash alike
    tree = op("Mul", op("Mul", op("Exp", Bind(0)), op("Exp", Bind(0))),
              op("Mul", op("Exp", Bind(0)), op("Exp", Bind(0))))
    assert structural_hash(tree) == structural_hash(squaring_chain(2, op("Exp", Bind(0))))
    # slots of shared nodes fill per occurrence, in pre-order; slot-free parts are skipped
    s1, s2 = op("AddScalar", Bind(0), value=SLOT), op("MulScalar", Bind(1), value=SLOT)
    dag = op("Add", op("Mul", s1, s2), op("Exp", s1))
    assert [n is s1 for n in grammar.iter_slot_occurrences(dag)] == [True, False, True]
    assert count_scalar_slots(dag) == 3


def test_deep_squaring_region_instantiates_linearly(op_count):
    region = op("AddScalar", squaring_chain(DEPTH, op("Exp", Bind(0))), value=SLOT)
    fid = register_runtime_fused(region)
    assert register_runtime_fused(squaring_chain(0, region)) == fid
    dag = try_instantiate_recipe(runtime_entry(fid), {"scalars": (0,)},
                                 [TensorType((3,), DType.F32)])
    assert len(dag.nodes) == DEPTH + 2
    assert op_count["n"] < 1000


def test_deep_squaring_graph_compiles(op_count):
    """``x*c`` under 40 squarings: the shared MulScalar keeps its value as a
    constant (one slot per occurrence would be 2**40 slots); the top
    AddScalar stays a slot. Compiles, agrees with the interpreter, and
    building a second equal graph reuses the registered region."""
    def build(c):
        g = Graph()
        x = g.input("x", (6,), "f32")
        y = x * c
        for _ in range(DEPTH):
            y = y * y
        g.output(y + 0.25, name="y")
        return g
    xs = np.array([1.0, -1.0, 0.0, 0.5, 1.0 + 2 ** -23, -1.0 + 2 ** -24], np.float32)
    for c in (1.0, 1.0, -1.0):
        g = build(c)
        m = compile(g)
        [kernel] = m.kernel_summary()
        assert kernel.endswith("(mlir-cpu-runtime-fused)"), kernel
        np.testing.assert_array_equal(m(x=xs), interpret(g, {"x": xs})["y"])
    assert op_count["n"] < 20_000

