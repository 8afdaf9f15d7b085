"""Conv nets with a symbolic image size (docs/dynamic-shapes.md, "Dynamic
spatial size"). A window strided over a symbolic extent has the output
extent ``(H + 2p - k) // s + 1``, a floor division that a symbolic extent
(a polynomial) cannot hold: the import refuses it with a typed error naming
the node, the symbol, the input and axis declaring it and the fix
(``input_shapes=``). Where every window has stride 1 (a fully convolutional
net), the model imports with ``h``/``w`` symbolic and one ``compile()``
runs every size, the conv kernels compiled per image size; one ``.fuel``
file for every size is refused by name, a bundle of the sizes served runs
without the compiler."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import compiler  # noqa: E402
from compiler.errors import GraphBuildError  # noqa: E402
from compiler.export import ExportError  # noqa: E402
from compiler.frontends.onnx import OnnxImportError, import_model  # noqa: E402
from runtime.bundle import load_bundle  # noqa: E402

RNG = np.random.default_rng(5)
TOL = 1e-4  # max |fuelc - ort| / max |ort|


def _w(name, shape):
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def _model(nodes, inits, out_channels, dims=("batch", 3, "h", "w")):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", out_channels, 1, 1])
    graph = helper.make_graph(nodes + [helper.make_node("GlobalAveragePool", ["c"], ["y"])],
                              "net", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def strided_net():
    """A stride-2 conv, then a global average pool (any image size)."""
    return _model([helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1])],
                  [_w("w", (8, 3, 3, 3))], 8)


def fully_convolutional():
    """Stride-1 convs only (a 3x3 with bias and ReLU, a 3x3, a depthwise 3x3)."""
    return _model([helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
                   helper.make_node("Relu", ["c1"], ["r1"]),
                   helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
                   helper.make_node("Conv", ["c2", "w3"], ["c"], pads=[1, 1, 1, 1], group=16)],
                  [_w("w1", (8, 3, 3, 3)), _w("b1", (8,)), _w("w2", (16, 8, 3, 3)),
                   _w("w3", (16, 1, 3, 3))], 16)


def _check(run, model, shapes):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in shapes:
        x = RNG.standard_normal(shape).astype(np.float32)
        out = np.asarray(run(x=x))
        ref = sess.run(None, {"x": x})[0]
        assert out.shape == ref.shape
        assert np.abs(out - ref).max() / np.abs(ref).max() < TOL, shape


def test_strided_conv_over_symbolic_height_names_input_axis_and_fix():
    with pytest.raises(OnnxImportError) as e:
        import_model(strided_net())
    msg = str(e.value)
    assert "Conv node" in msg and "the output extent (h - 1) // 2 + 1 rounds on the " \
                                  "symbolic extent(s) 'h'" in msg
    assert "symbol 'h' is input 'x' axis 2" in msg
    assert "input_shapes={'h': 224}" in msg


@pytest.mark.parametrize("node,what", [
    (helper.make_node("MaxPool", ["x"], ["c"], kernel_shape=[3, 3], strides=[2, 2],
                      pads=[1, 1, 1, 1]),
     r"MaxPool node .*pooling window 3 stride 2 on axis 2: the output extent \(h - 1\) "
     r"// 2 \+ 1 rounds"),
    (helper.make_node("MaxPool", ["x"], ["c"], kernel_shape=[3, 3], strides=[2, 2],
                      pads=[1, 1, 1, 1], ceil_mode=1),
     r"MaxPool node .*the output extent ceil\(\(h - 1\) / 2\) rounds"),
    (helper.make_node("AveragePool", ["x"], ["c"], kernel_shape=[2, 2], strides=[2, 2],
                      auto_pad="SAME_UPPER"),
     r"AveragePool node .*SAME_UPPER pooling, stride 2 on axis 2: the output extent "
     r"ceil\(h / 2\) rounds"),
    (helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], auto_pad="SAME_UPPER"),
     r"Conv node .*SAME_UPPER padding, stride 2 on axis 2: the output extent ceil\(h / 2\)"),
], ids=["maxpool", "maxpool-ceil", "avgpool-same", "conv-same"])
def test_every_strided_window_over_a_symbolic_extent_is_refused_the_same_way(node, what):
    model = _model([node], [_w("w", (3, 3, 3, 3))] if node.op_type == "Conv" else [], 3)
    with pytest.raises(OnnxImportError, match=what + r".*input_shapes=\{'h': 224\}.*"
                                              r"\(symbol 'h' is input 'x' axis 2\)"):
        import_model(model)


def test_fixing_the_image_size_at_import_keeps_the_batch_symbolic():
    model = strided_net()
    m = compiler.compile(import_model(model, input_shapes={"h": 15, "w": 12}))
    assert m.signature["inputs"]["x"] == "f32[batch,3,15,12]"
    _check(m, model, [(1, 3, 15, 12), (3, 3, 15, 12)])


def test_graph_api_strided_symbol_error_and_exact_quotient():
    from compiler import Graph, Sym
    from compiler.registry import builders as B
    g = Graph()
    x = g.input("x", ("batch", 4, "h", 9), "f32")
    w = g.constant(RNG.standard_normal((8, 4, 3, 3)).astype(np.float32))
    with pytest.raises(StridedSymbolError) as e:
        B.conv2d(x, w, stride=(2, 2), padding=(1, 1))
    assert isinstance(e.value, GraphBuildError)
    assert e.value.symbols == ("h",) and e.value.stride == 2
    # declared as 2*k + 1, the quotient is exact: the output height is k + 1
    k = Sym("k", 1, 16)
    g = Graph()
    x = g.input("x", (1, 4, 2 * k + 1, 9), "f32")
    w = g.constant(RNG.standard_normal((8, 4, 3, 3)).astype(np.float32))
    y = B.conv2d(x, w, stride=(2, 2), padding=(1, 1))
    assert str(y.shape[2]) == "k + 1" and y.shape[3] == 5
    g.output(y, name="y")
    m = compiler.compile(g)
    for h in (3, 7):
        xv = RNG.standard_normal((1, 4, h, 9)).astype(np.float32)
        np.testing.assert_allclose(m(x=xv), compiler.interpret(g, {"x": xv})["y"],
                                   rtol=1e-4, atol=1e-4)


def test_fully_convolutional_net_runs_every_image_size(tmp_path):
    model = fully_convolutional()
    g = import_model(model)
    assert g.signature()["inputs"]["x"] == "f32[batch,3,h,w]"
    m = compiler.compile(g)
    _check(m, model, [(1, 3, 8, 8), (2, 3, 13, 9), (3, 3, 8, 8)])
    with pytest.raises(ExportError, match=r"Conv2D of x \[batch,3,h,w\] has the symbolic "
                                          r"spatial extent h \(axis 2\); its kernels are "
                                          r"specialised on the image size"):
        m.save(str(tmp_path / "all.fuel"))
    m.save_bundle(str(tmp_path / "b"), bindings=[{"batch": 2, "h": 13, "w": 9}])
    _check(load_bundle(str(tmp_path / "b")), model, [(2, 3, 13, 9)])
