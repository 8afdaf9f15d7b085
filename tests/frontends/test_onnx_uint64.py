"""UINT64 is a graph dtype (DType.U64, MLIR ``ui64``): arithmetic, division,
comparisons, min/max, shifts and casts use the unsigned ops in generated code,
checked against ONNX's reference evaluator with values above 2**63."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from compiler import compile, interpret  # noqa: E402
from compiler.frontends.onnx import import_model  # noqa: E402

U64 = TensorProto.UINT64
BIG = np.array([2**64 - 1, 2**63 + 5, 2**63 - 1, 7, 0, 12345678901234567890], np.uint64)
SMALL = np.array([3, 2**63, 1, 7, 9, 10], np.uint64)


def _model(op, out_elem=U64, **attrs):
    g = helper.make_graph(
        [helper.make_node(op, ["x", "y"], ["z"], **attrs)], op.lower(),
        [helper.make_tensor_value_info("x", U64, (6,)), helper.make_tensor_value_info("y", U64, (6,))],
        [helper.make_tensor_value_info("z", out_elem, (6,))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("op,out,attrs", [
    ("Add", U64, {}), ("Sub", U64, {}), ("Mul", U64, {}), ("Div", U64, {}), ("Mod", U64, {}),
    ("Max", U64, {}), ("Min", U64, {}), ("Greater", TensorProto.BOOL, {}),
    ("LessOrEqual", TensorProto.BOOL, {}), ("BitwiseXor", U64, {}),
])
def test_uint64_binary_compiled_matches_reference(op, out, attrs):
    model = _model(op, out, **attrs)
    m = compile(import_model(model))
    summary = m.kernel_summary()
    assert summary and all("numpy" not in k for k in summary), summary
    assert any("u64" in k for k in summary), summary
    want = ReferenceEvaluator(model).run(None, {"x": BIG, "y": SMALL})[0]
    got = m(x=BIG, y=SMALL)
    np.testing.assert_array_equal(got.astype(want.dtype), want)
    np.testing.assert_array_equal(np.asarray(interpret(import_model(model), {"x": BIG, "y": SMALL})["z"])
                                  .astype(want.dtype), want)


@pytest.mark.parametrize("to", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64,
                                TensorProto.UINT32, TensorProto.INT8])
def test_uint64_cast_compiled_matches_reference(to):
    g = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["z"], to=to)], "cast",
        [helper.make_tensor_value_info("x", U64, (6,))],
        [helper.make_tensor_value_info("z", to, (6,))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m = compile(import_model(model))
    assert all("numpy" not in k for k in m.kernel_summary()), m.kernel_summary()
    want = ReferenceEvaluator(model).run(None, {"x": BIG})[0]
    np.testing.assert_array_equal(m(x=BIG), want)


def test_float_to_uint64_cast_saturates_above_2_63():
    g = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["z"], to=U64)], "cast",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, (4,))],
        [helper.make_tensor_value_info("z", U64, (4,))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    x = np.array([0.0, 3.7, 2.0**63 + 2.0**12, 1.5e19], np.float64)
    m = compile(import_model(model))
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(m(x=x), want)
