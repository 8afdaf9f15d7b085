"""ONNX Pow with a constant integral exponent of 3..8 on a float base imports as
PowI (repeated multiplication, as the tanh-GELU's x**3), not a pow() call.
Div(1, x) imports as Recip.
"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper as nh  # noqa: E402

from compiler import compile  # noqa: E402
from compiler.frontends.onnx import import_model  # noqa: E402


@pytest.mark.parametrize("e,powi", [(3.0, True), (8.0, True), (2.5, False), (9.0, False)])
def test_integral_exponent_is_powi(e, powi):
    g = helper.make_graph(
        [helper.make_node("Pow", ["x", "e"], ["y"])], "pow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 33))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4, 33))],
        [nh.from_array(np.array(e, np.float32), "e")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).uniform(0.5, 1.5, (4, 33)).astype(np.float32)
    m = compile(import_model(model))
    assert any(k.startswith("PowI") for k in m.kernel_summary()) == powi, m.kernel_summary()
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(m(x=x), want, rtol=2e-6)


def _int_base_model(exp_elem):
    g = helper.make_graph(
        [helper.make_node("Pow", ["x", "e"], ["y"], name="pow")], "pow",
        [helper.make_tensor_value_info("x", TensorProto.INT32, (2, 5)),
         helper.make_tensor_value_info("e", exp_elem, (2, 5))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, (2, 5))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_integer_base_with_a_run_time_float_exponent_truncates_as_onnxruntime():
    model = _int_base_model(TensorProto.FLOAT)
    rng = np.random.default_rng(1)
    x = rng.integers(1, 9, (2, 5)).astype(np.int32)
    e = rng.uniform(0, 3, (2, 5)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x, "e": e})[0]
    np.testing.assert_array_equal(compile(import_model(model))(x=x, e=e), want)


def test_integer_base_with_a_run_time_integer_exponent_is_refused():
    from compiler.frontends.onnx import OnnxImportError
    with pytest.raises(OnnxImportError, match="Pow node 'pow': the integer exponent of an "
                                              "integer base is computed at run time"):
        import_model(_int_base_model(TensorProto.INT32))


@pytest.mark.parametrize("one,recip", [(1.0, True), (2.0, False)])
def test_one_over_x_is_recip(one, recip):
    # Div(1, x) (HF's RMSNorm spells rsqrt so) imports as Recip, the same
    # division; any other numerator stays a Div
    g = helper.make_graph(
        [helper.make_node("Div", ["one", "x"], ["y"])], "recip",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 33))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4, 33))],
        [nh.from_array(np.array(one, np.float32), "one")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).uniform(0.5, 1.5, (4, 33)).astype(np.float32)
    m = compile(import_model(model))
    assert any(k.startswith("Recip") for k in m.kernel_summary()) == recip, m.kernel_summary()
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(m(x=x), want)
