"""Conv + inference BatchNormalization with constant parameters: the importer
folds the normalization into the convolution's weight and bias; results match
onnxruntime running the unfolded graph (its optimizations off)."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper as nh  # noqa: E402

from compiler import compile  # noqa: E402
from compiler.frontends.onnx import import_model  # noqa: E402


def _model(x_shape, w_shape, conv_bias, pads, group=1, eps=1e-3, extra_use=False):
    rng = np.random.RandomState(0)
    cout = w_shape[0]
    inits = {"w": rng.randn(*w_shape).astype(np.float32),
             "sc": (rng.rand(cout) + 0.5).astype(np.float32),
             "be": rng.randn(cout).astype(np.float32),
             "mu": rng.randn(cout).astype(np.float32),
             "var": (rng.rand(cout) + 0.1).astype(np.float32)}
    conv_in = ["x", "w"]
    if conv_bias:
        inits["b"] = rng.randn(cout).astype(np.float32)
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["c"], pads=pads, group=group),
             helper.make_node("BatchNormalization", ["c", "sc", "be", "mu", "var"], ["bn"],
                              epsilon=eps),
             helper.make_node("Relu", ["bn"], ["y"])]
    outs = ["y"]
    if extra_use:
        nodes.append(helper.make_node("Neg", ["c"], ["z"]))
        outs.append("z")
    nd = len(x_shape) - 2
    out_sp = [x_shape[2 + i] + pads[i] + pads[i + nd] - w_shape[2 + i] + 1 for i in range(nd)]
    g = helper.make_graph(
        nodes, "conv_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [x_shape[0], cout] + out_sp)
         for o in outs],
        [nh.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _unfolded(model, x):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})


@pytest.mark.parametrize("x_shape,w_shape,conv_bias,pads,group", [
    ((1, 4, 10, 10), (8, 4, 3, 3), True, [1, 1, 1, 1], 1),
    ((2, 4, 9, 7), (6, 4, 1, 1), False, [0, 0, 0, 0], 1),
    ((1, 6, 8, 8), (6, 1, 3, 3), False, [1, 1, 1, 1], 6),      # depthwise
    ((1, 3, 20), (5, 3, 4), True, [2, 1], 1),                 # conv1d, asymmetric pads
])
def test_batchnorm_folded_into_conv(x_shape, w_shape, conv_bias, pads, group):
    model = _model(x_shape, w_shape, conv_bias, pads, group)
    x = np.random.RandomState(1).randn(*x_shape).astype(np.float32)
    want = _unfolded(model, x)[0]
    g = import_model(model)
    m = compile(g)
    # no normalization arithmetic left: the folded conv, its bias, the ReLU
    assert not any(k.startswith(("Sub", "Div", "Sqrt", "Rsqrt", "Mul"))
                   for k in m.kernel_summary()), m.kernel_summary()
    got = m(x=x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_conv_output_used_elsewhere_is_not_folded():
    """The conv's output feeds another node too: folding would change it, so the
    import leaves the pair alone (and reports BatchNormalization if it cannot
    build it on its own)."""
    from compiler.frontends.onnx import OnnxImportError
    model = _model((1, 4, 6, 6), (4, 4, 3, 3), True, [1, 1, 1, 1], extra_use=True)
    x = np.random.RandomState(2).randn(1, 4, 6, 6).astype(np.float32)
    try:
        g = import_model(model)
    except OnnxImportError as e:
        assert "BatchNormalization" in str(e) and "Conv" not in str(e).split("BatchNormalization")[0]
        return
    want = _unfolded(model, x)
    got = compile(g)(x=x)
    np.testing.assert_allclose(got["z"], want[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1e-4)
