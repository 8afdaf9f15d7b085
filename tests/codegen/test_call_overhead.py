"""The executor's low-overhead call path: generated kernels bound once per
step (``GeneratedKernel.prepare_call``) and outputs handed out without a
copy where this run allocated them. Results must not change."""
import numpy as np
import pytest

from compiler import Graph, compile
from compiler.codegen import kernels as K
from compiler.codegen import parallel
from compiler.errors import UnsupportedOpError
from compiler.targets import parse_target
from runtime import params as P
from runtime.dtype import DType
from runtime.layout import Layout
from runtime.opkind import OpKind
from runtime.storage import Storage


def _chain(shape=(8, 64)):
    g = Graph()
    x = g.input("x", shape, "f32")
    w = g.constant(np.full(shape[-1], 2.0, np.float32), name="w")
    y = ((x * 1.5 + 0.25).relu() * w).exp()
    g.output(y, name="y")
    g.output(x, name="same_x")   # an input handed back: must be a copy
    g.output(w, name="w_out")    # a constant handed back: must be a copy
    return g


def test_outputs_are_fresh_and_never_alias_inputs_or_constants(rng):
    m = compile(_chain(), "cpu", pipeline="no-fusion")
    x = rng.standard_normal((8, 64)).astype(np.float32)
    a, b = m.run(x=x), m.run(x=x)
    want = np.exp(np.maximum(x * 1.5 + 0.25, 0) * 2)
    np.testing.assert_allclose(a["y"], want, rtol=1e-5)
    assert not np.shares_memory(a["y"], b["y"])          # each run its own output
    assert not np.shares_memory(a["same_x"], x)
    a["y"][:] = 0
    a["w_out"][:] = -1                                   # the module's constant is untouched
    np.testing.assert_allclose(m.run(x=x)["y"], want, rtol=1e-5)
    np.testing.assert_array_equal(m.run(x=x)["w_out"], 2.0)


def test_an_output_named_twice_is_copied(rng):
    g = Graph()
    x = g.input("x", (4, 4), "f32")
    y = x + 1.0
    g.output(y, name="a")
    g.output(y, name="b")
    out = compile(g, "cpu").run(x=np.zeros((4, 4), np.float32))
    assert not np.shares_memory(out["a"], out["b"])


def test_bound_calls_follow_thread_count_changes(rng):
    g = Graph()
    x = g.input("x", (512, 256), "f32")
    g.output((x * 2.0).exp(), name="y")
    m = compile(g, "cpu")
    xs = rng.standard_normal((512, 256)).astype(np.float32)
    try:
        parallel.set_num_threads(1)
        one = m(x=xs)
        parallel.set_num_threads(2)   # the bound step re-plans its tiles
        two = m(x=xs)
    finally:
        parallel.set_num_threads(None)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_allclose(one, np.exp(xs * 2), rtol=1e-5)


def _matmul_kernel():
    return K.FAMILY.kernel(parse_target("cpu"), OpKind.MatMul, (DType.F32,) * 3)


def test_prepare_call_matches_a_plain_call(rng):
    k = _matmul_kernel()
    a = rng.standard_normal((7, 5)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    lays = [Layout.contiguous(a.shape), Layout.contiguous(b.shape), Layout.contiguous((7, 3))]
    p = P.Matmul((), (), 7, 3, 5)
    outs = [np.zeros((7, 3), np.float32) for _ in range(2)]
    sa, sb = Storage.from_numpy(a)[0], Storage.from_numpy(b)[0]
    k([sa, sb], [Storage.from_numpy(outs[0])[0]], lays, p)
    k.prepare_call(lays, p, 2)([sa, sb, Storage.from_numpy(outs[1])[0]])
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], a @ b, rtol=1e-5, atol=1e-6)


def test_prepare_call_refuses_a_wrong_arity():
    lays = [Layout.contiguous((2, 2))] * 4
    with pytest.raises(UnsupportedOpError, match="expects 2 inputs and 1 output, got 3 and 1"):
        _matmul_kernel().prepare_call(lays, P.Matmul((), (), 2, 2, 2), 3)
