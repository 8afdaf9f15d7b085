"""bf16 (and the fp8/fp6/fp4 formats) cross the Python API as ml_dtypes
arrays, the numpy types of JAX, ONNX and TensorFlow; raw uint16 is refused."""
import ml_dtypes
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.errors import GraphBuildError
from compiler.graph.interpret import InterpretError
from runtime import DType, PlanError
from runtime.dtype import bf16_to_f32, f32_to_bf16, from_storage, to_storage
from runtime.errors import UnknownDTypeError

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(7)


def _graph():
    g = Graph()
    x = g.input("x", (4, 8), "bf16")
    w = g.constant((RNG.standard_normal((8, 3)) / 3).astype(BF16), name="w")
    g.output(x * x + 1.0, name="sq")                    # bf16 out
    g.output(x.cast("f32") @ w.cast("f32"), name="mm")  # f32 out of a bf16 constant
    return g, w


@pytest.fixture(scope="module")
def compiled():
    g, _ = _graph()
    return g, compile(g)


def test_compiled_module_takes_and_returns_ml_dtypes_bfloat16(compiled):
    g, m = compiled
    x = RNG.uniform(-3, 3, (4, 8)).astype(BF16)
    out = m.run(x=x)
    assert out["sq"].dtype == BF16 and out["mm"].dtype == np.float32
    xf = x.astype(np.float32)
    # the external convention: each op computes in f32 and rounds once to bf16 (as ml_dtypes does)
    sq = (xf * xf).astype(BF16).astype(np.float32)
    np.testing.assert_array_equal(out["sq"], (sq + np.float32(1)).astype(BF16))
    w = g.constants["w"]
    np.testing.assert_allclose(out["mm"], xf.astype(np.float64) @ bf16_to_f32(w), rtol=1e-5, atol=1e-5)
    ref = interpret(g, {"x": x})
    assert ref["sq"].dtype == BF16
    np.testing.assert_array_equal(out["sq"].view(np.uint16), ref["sq"].view(np.uint16))


def test_raw_uint16_for_a_bf16_input_is_refused_with_the_fix(compiled):
    g, m = compiled
    bits = f32_to_bf16(np.ones((4, 8), np.float32))
    with pytest.raises(PlanError, match=r"input 'x': expected bf16\[4,8\] \(numpy bfloat16\), got numpy "
                                        r"uint16\[4, 8\]; from raw bit patterns: bits.view\(ml_dtypes.bfloat16\)"):
        m.run(x=bits)
    with pytest.raises(InterpretError, match=r"input 'x': dtype uint16 .* bits.view\(ml_dtypes.bfloat16\)"):
        interpret(g, {"x": bits})
    with pytest.raises(PlanError, match="got numpy float32"):  # numbers: the caller rounds them
        m.run(x=np.ones((4, 8), np.float32))
    np.testing.assert_array_equal(m.run(x=bits.view(BF16))["sq"].astype(np.float32), 2.0)


def test_graph_constant_takes_bf16_arrays_and_refuses_raw_bits():
    g = Graph()
    v = np.array([1.5, -2.0, 3.25], np.float32).astype(BF16)
    c = g.constant(v, name="c")
    assert c.dtype == DType.BF16 and g.constants["c"].dtype == np.uint16  # stored as bit patterns
    d = g.constant(v, name="d", dtype="bf16")
    np.testing.assert_array_equal(g.constants["d"], v.view(np.uint16))
    with pytest.raises(GraphBuildError, match=r"constant 'e': .*not raw uint16.*bits.view\(ml_dtypes.bfloat16\)"):
        g.constant(v.view(np.uint16), name="e", dtype="bf16")
    with pytest.raises(GraphBuildError, match=r"uint16 has no fuel DType .*bits.view\(ml_dtypes.bfloat16\)"):
        g.constant(v.view(np.uint16), name="f")
    g.output(c * 2.0, name="y")
    out = interpret(g, {})["y"]
    assert out.dtype == BF16 and out.astype(np.float32).tolist() == [3.0, -4.0, 6.5]


def test_dtype_numpy_types_are_ml_dtypes_and_storage_stays_bits():
    pairs = {DType.BF16: ml_dtypes.bfloat16, DType.F8E4M3: ml_dtypes.float8_e4m3fn,
             DType.F8E8M0: ml_dtypes.float8_e8m0fnu, DType.F6E2M3: ml_dtypes.float6_e2m3fn,
             DType.F6E3M2: ml_dtypes.float6_e3m2fn, DType.F4: ml_dtypes.float4_e2m1fn}
    for d, t in pairs.items():
        assert d.numpy == np.dtype(t) and DType.parse(t) is d and DType.parse(np.dtype(t).name) is d
        assert d.storage_numpy.kind == "u" and d.storage_numpy.itemsize == d.itemsize
        vals = np.array([0.5, 1.0, 2.0], np.float32).astype(t)
        bits = to_storage(vals, d)
        assert bits.dtype == d.storage_numpy and np.shares_memory(bits, vals)
        np.testing.assert_array_equal(from_storage(bits, d).astype(np.float32), [0.5, 1.0, 2.0])
    assert DType.F8E6M2.numpy is None and to_storage(np.zeros(2, np.uint8), DType.F8E6M2).dtype == np.uint8
    with pytest.raises(UnknownDTypeError, match="a f32 array must have numpy dtype float32, got float64"):
        to_storage(np.zeros(2), DType.F32)


def test_bit_helpers_agree_with_ml_dtypes():
    x = np.concatenate([RNG.standard_normal(2000).astype(np.float32) * 10.0 ** RNG.integers(-30, 30, 2000),
                        np.array([0.0, -0.0, np.inf, -np.inf, 3.0e38, 1e-40], np.float32)])
    np.testing.assert_array_equal(f32_to_bf16(x), x.astype(BF16).view(np.uint16))  # round to nearest even
    b = x.astype(BF16)
    np.testing.assert_array_equal(bf16_to_f32(b), b.astype(np.float32))          # ml_dtypes arrays
    np.testing.assert_array_equal(bf16_to_f32(b.view(np.uint16)), b.astype(np.float32))  # raw bits


def test_a_bool_array_is_taken_for_a_u8_input_as_0_and_1():
    # ONNX bool tensors are held as u8; onnxruntime takes numpy bool for them
    from compiler import Graph, compile
    from runtime.dtype import DType, to_storage
    g = Graph()
    m_in = g.input("m", (2, 3), "u8")
    g.output(m_in + m_in, name="y")
    m = compile(g)
    b = np.array([[True, False, True], [False, False, True]])
    np.testing.assert_array_equal(m.run(m=b)["y"], b.astype(np.uint8) * 2)
    np.testing.assert_array_equal(to_storage(b, DType.U8), b.astype(np.uint8))
    with pytest.raises(UnknownDTypeError, match="a i8 array must have numpy dtype int8, got bool"):
        to_storage(b, DType.I8)          # only u8 holds bools
