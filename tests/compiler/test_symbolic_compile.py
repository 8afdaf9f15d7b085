"""compile() of a graph with symbolic extents: the first stage, one static
compile per input-shape binding (docs/dynamic-shapes.md)."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler import Graph, ShapeSignatureError, compile, interpret
from compiler.driver import CompiledModule, SymbolicModule

RNG = np.random.default_rng(1)


def small_graph():
    """batch x seq(1..16) x 8 through a linear, GELU, softmax and a reduction,
    plus a second input (also tests/artifact/test_symbolic_artifact.py)."""
    g = Graph()
    x = g.input("x", ("batch", ("seq", 1, 16), 8), "f32")
    m = g.input("m", ("batch", "seq"), "f32")
    w = g.constant(RNG.standard_normal((8, 8)).astype(np.float32), name="w")
    b = g.constant(RNG.standard_normal(8).astype(np.float32), name="b")
    g.output(((x @ w + b).gelu().softmax(-1)).sum(-1) + m, name="y")
    return g


@pytest.fixture(scope="module")
def graph():
    return small_graph()


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
    assert summary[0].startswith("symbolic module: passes and plan per input-shape binding") and "batch=3, seq=1" in summary[0]
    assert any("FusedLinear" in line for line in summary[1:])


#: Calls of the small graph that contradict its signature, and the error's text.
BAD_SHAPES = [
    ({"x": (2, 5), "m": (2, 5)}, "input 'x': rank 2"),
    ({"x": (2, 5, 4), "m": (2, 5)}, "axis 2: size 4.*fixes 8"),
    ({"x": (2, 5, 8), "m": (2, 6)}, "symbol 'seq': input 'x' axis 1 gives 5, input 'm' axis 1 gives 6"),
    ({"x": (2, 17, 8), "m": (2, 17)}, "symbol 'seq' = 17 .*bounds 1..16"),
]


@pytest.mark.parametrize("shapes,match", BAD_SHAPES)
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


def test_specialize_and_keep(module):
    static = module.specialize(batch=1, seq=3)
    assert isinstance(static, CompiledModule)
    assert static.plan.inputs["x"].shape == (1, 3, 8)
    with pytest.raises(ShapeSignatureError, match="bounds"):
        module.specialize(batch=1, seq=40)
    small = SymbolicModule(module.graph, module.target, {})
    small.KEEP = 2
    for seq in (1, 2, 3):
        small.specialize(batch=1, seq=seq)
    assert small.bindings == [{"batch": 1, "seq": 2}, {"batch": 1, "seq": 3}]


def test_bundle_runs_saved_bindings_without_the_compiler(graph, module, tmp_path):
    from runtime.bundle import UnsavedBindingError, load_bundle
    path = module.save_bundle(tmp_path / "m.bundle", bindings=[{"batch": 1, "seq": 4},
                                                               {"batch": 2, "seq": 5}])
    b = load_bundle(path)
    assert b.signature["inputs"] == module.signature["inputs"]
    for batch, seq in ((1, 4), (2, 5)):
        feeds = _inputs(batch, seq)
        np.testing.assert_array_equal(b(**feeds), module(**feeds))
    with pytest.raises(UnsavedBindingError, match="batch=1, seq=4; batch=2, seq=5"):
        b(**_inputs(3, 5))
    with pytest.raises(ShapeSignatureError, match="symbol 'batch'"):
        b(x=np.zeros((2, 5, 8), np.float32), m=np.zeros((1, 5), np.float32))

    # a process that cannot import the compiler (nor MLIR) runs the bundle
    np.savez(tmp_path / "in.npz", **_inputs(2, 5))
    code = f"""
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("compiler", "torch_mlir", "mlir"):
            raise ImportError(name)
sys.meta_path.insert(0, _Block())
import numpy as np
from runtime.bundle import load_bundle
feeds = dict(np.load({str(tmp_path / 'in.npz')!r}))
np.save({str(tmp_path / 'y.npy')!r}, load_bundle({str(path)!r})(**feeds))
"""
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    feeds = dict(np.load(tmp_path / "in.npz"))
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), module(**feeds))
