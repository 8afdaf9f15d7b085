"""compile() of a graph with symbolic extents: the first stage, one static
compile per input-shape binding (docs/dynamic-shapes.md)."""
import numpy as np
import pytest

from compiler import Graph, ShapeSignatureError, compile, interpret
from compiler.driver import CompiledModule, SymbolicModule
from compiler.export import ExportError

RNG = np.random.default_rng(1)


@pytest.fixture(scope="module")
def graph():
    g = Graph()
    x = g.input("x", ("batch", ("seq", 1, 16), 8), "f32")
    m = g.input("m", ("batch", "seq"), "f32")
    w = g.constant(RNG.standard_normal((8, 8)).astype(np.float32), name="w")
    b = g.constant(RNG.standard_normal(8).astype(np.float32), name="b")
    g.output(((x @ w + b).gelu().softmax(-1)).sum(-1) + m, name="y")
    return g


@pytest.fixture(scope="module")
def module(graph):
    return compile(graph)


def _inputs(batch, seq):
    return {"x": RNG.standard_normal((batch, seq, 8)).astype(np.float32),
            "m": RNG.standard_normal((batch, seq)).astype(np.float32)}


def test_one_compile_runs_every_size(graph, module):
    assert isinstance(module, SymbolicModule)
    assert module.signature["inputs"] == {"x": "f32[batch,seq,8]", "m": "f32[batch,seq]"}
    for batch, seq in ((2, 5), (1, 16), (3, 1), (2, 5)):
        feeds = _inputs(batch, seq)
        y = module(**feeds)
        assert y.shape == (batch, seq)
        np.testing.assert_allclose(y, interpret(graph, feeds)["y"], rtol=1e-5, atol=1e-5)
    assert module.bindings[-1] == {"batch": 2, "seq": 5} and len(module.bindings) == 3
    summary = module.kernel_summary()
    assert summary[0].startswith("symbolic module, first stage") and "batch=3, seq=1" in summary[0]
    assert any("FusedLinear" in line for line in summary[1:])


@pytest.mark.parametrize("shapes,match", [
    ({"x": (2, 5), "m": (2, 5)}, "input 'x': rank 2"),
    ({"x": (2, 5, 4), "m": (2, 5)}, "axis 2: size 4.*fixes 8"),
    ({"x": (2, 5, 8), "m": (2, 6)}, "symbol 'seq': input 'x' axis 1 gives 5, input 'm' axis 1 gives 6"),
    ({"x": (2, 17, 8), "m": (2, 17)}, "symbol 'seq' = 17 .*bounds 1..16"),
])
def test_contradicting_calls_raise_before_compiling(module, shapes, match):
    before = module.bindings
    with pytest.raises(ShapeSignatureError, match=match):
        module(**{k: np.zeros(v, np.float32) for k, v in shapes.items()})
    assert module.bindings == before


def test_recorded_equality_is_checked_per_call():
    g = Graph()
    a, b = g.input("a", ("m", "k"), "f32"), g.input("b", ("k2", 3), "f32")
    g.output(a @ b, name="y")
    mod = compile(g)
    y = mod(a=np.ones((2, 4), np.float32), b=np.ones((4, 3), np.float32))
    np.testing.assert_array_equal(y, np.full((2, 3), 4, np.float32))
    with pytest.raises(ShapeSignatureError, match="k = 4 but k2 = 5"):
        mod(a=np.ones((2, 4), np.float32), b=np.ones((5, 3), np.float32))


def test_specialize_keep_and_save(module, tmp_path):
    static = module.specialize(batch=1, seq=3)
    assert isinstance(static, CompiledModule)
    assert static.plan.inputs["x"].shape == (1, 3, 8)
    with pytest.raises(ShapeSignatureError, match="bounds"):
        module.specialize(batch=1, seq=40)
    with pytest.raises(ExportError, match=r"m.specialize\(batch=..., seq=...\).save"):
        module.save(tmp_path / "m.fuel")
    small = SymbolicModule(module.graph, module.target, {})
    small.KEEP = 2
    for seq in (1, 2, 3):
        small.specialize(batch=1, seq=seq)
    assert small.bindings == [{"batch": 1, "seq": 2}, {"batch": 1, "seq": 3}]
