"""Plan-time constant folding (``compiler.plan.fold_constant_steps``): kernel,
reshape and contiguize steps whose inputs are all constants run once at
compile time, by the same kernels, and become constants."""
import numpy as np

from compiler import Graph, compile
from runtime.executor import ConstStep, KernelStep


def _graph(rng, w_shape=(24, 40)):
    g = Graph()
    x = g.input("x", (5, w_shape[0]), "f32")
    w = g.constant(rng.standard_normal(w_shape).astype(np.float32), name="w")
    wt = (w.transpose() * 2.0).transpose().contiguous()      # work on the weight alone
    g.output(x @ wt, name="y")
    return g


def _kernels(m):
    return [s for s in m.plan.steps if isinstance(s, KernelStep)]


def test_weight_work_is_done_at_compile_time():
    rng = np.random.default_rng(0)
    g = _graph(rng)
    folded, plain = compile(g), compile(g, warm=False)   # warm=False: no folding
    assert len(_kernels(plain)) > 1
    assert [k.key.op.name for k in _kernels(folded)] == ["MatMul"], folded.plan.steps
    names = [s.const for s in folded.plan.steps if isinstance(s, ConstStep)]
    assert any(n.startswith("folded:") for n in names) and "const:w" not in folded.plan.constants
    x = rng.standard_normal((5, 24)).astype(np.float32)
    np.testing.assert_array_equal(folded(x=x), plain(x=x))   # the same kernels, the same bits


def test_folding_never_grows_the_module():
    """A small constant broadcast to a large shape and copied stays a step:
    folding it would store the large array."""
    rng = np.random.default_rng(1)
    g = Graph()
    x = g.input("x", (512, 512), "f32")
    b = g.constant(rng.standard_normal((1, 512)).astype(np.float32), name="b")
    g.output(x + b.broadcast_to((512, 512)).contiguous(), name="y")
    m = compile(g)
    assert all(np.asarray(a).size <= 512 for a in m.plan.constants.values())
    xv = rng.standard_normal((512, 512)).astype(np.float32)
    np.testing.assert_array_equal(m(x=xv), xv + np.asarray(m.plan.constants["const:b"]))


def test_folded_module_saves_and_loads(tmp_path):
    import runtime
    rng = np.random.default_rng(2)
    m = compile(_graph(rng))
    m.save(tmp_path / "m.fuel")
    x = rng.standard_normal((5, 24)).astype(np.float32)
    np.testing.assert_array_equal(runtime.load(tmp_path / "m.fuel")(x=x), m(x=x))
