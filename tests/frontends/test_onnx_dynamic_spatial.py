"""Conv nets with a symbolic image size (docs/dynamic-shapes.md, "Dynamic
spatial size"). A window strided over a symbolic extent has the output
extent ``(H + 2p - k) // s + 1``, a floor quotient of the symbol
(``runtime.symbols.floor_div``: ``(h + 1) // 2``): the model imports with
``h``/``w`` symbolic, and one ``compile()`` runs every image size matching
onnxruntime, the conv and pool kernels taking the image size at run time;
one ``.fuel`` file serves every size the model allows (a window that does
not fit the smaller sizes the bounds allow is refused at import, naming it and
the bound to give), and a bundle of the sizes served runs without the
compiler. A strided average
pool is a depthwise conv of unit weights. What a floor cannot express
(``SAME`` padding of a window narrower than its stride, an average pool in
ceil mode) is refused by name at import."""
import pathlib
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import compiler  # noqa: E402
import runtime  # noqa: E402
from benchmarks import models as bm  # noqa: E402
from compiler.export import ExportError  # noqa: E402
from compiler.frontends.onnx import OnnxImportError, import_model  # noqa: E402
from runtime.bundle import UnsavedBindingError, load_bundle  # noqa: E402
from runtime.errors import ShapeSignatureError  # noqa: E402

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


def image_axes(model):
    """``model`` with ``batch``, ``h``, ``w`` dim_params on axes 0, 2, 3 of
    its image input (and ``batch`` on its output), as ``torch.onnx.export(...,
    dynamic_axes={"x": {0: "batch", 2: "h", 3: "w"}})`` writes them."""
    out = type(model)()
    out.CopyFrom(model)
    for vi in list(out.graph.input) + list(out.graph.output):
        dims = vi.type.tensor_type.shape.dim
        for axis, name in ((0, "batch"), (2, "h"), (3, "w")):
            if len(dims) > axis and (axis == 0 or len(dims) == 4):
                dims[axis].ClearField("dim_value")
                dims[axis].dim_param = name
    return out


def small_resnet():
    """The ResNet-style net of benchmarks/models.py, reduced: 7x7 s2 stem,
    3x3 s2 max pool, a stride-1 block and a stride-2 block with a 1x1 s2
    projection, global average pool, Gemm; batch, h, w symbolic."""
    return image_axes(bm.resnet(1, widths=(8, 16), blocks=1, classes=10, image=32))


def test_strided_conv_over_symbolic_size_runs_every_size():
    model = strided_net()
    g = import_model(model)
    assert g.signature()["inputs"]["x"] == "f32[batch,3,h,w]"
    conv = next(n for n in g.nodes if n.op == "Fused")
    assert str(conv.shape[2]) == "(h + 1) // 2" and str(conv.shape[3]) == "(w + 1) // 2"
    m = compiler.compile(g)
    _check(m, model, [(1, 3, 32, 32), (2, 3, 47, 47), (1, 3, 64, 40)])


@pytest.mark.parametrize("node", [
    helper.make_node("MaxPool", ["x"], ["c"], kernel_shape=[3, 3], strides=[2, 2],
                     pads=[1, 1, 1, 1]),
    helper.make_node("MaxPool", ["x"], ["c"], kernel_shape=[3, 3], strides=[2, 2],
                     pads=[1, 1, 1, 1], ceil_mode=1),
    helper.make_node("MaxPool", ["x"], ["c"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    helper.make_node("MaxPool", ["x"], ["c"], kernel_shape=[3, 3], strides=[2, 2],
                     auto_pad="SAME_UPPER"),
    # (stride 3: the generic conv kernel, 10-15 s to compile cold: slow lane)
    pytest.param(helper.make_node("Conv", ["x", "w"], ["c"], strides=[3, 2], pads=[0, 1, 2, 1]),
                 marks=pytest.mark.slow),
    helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], auto_pad="SAME_UPPER"),
    pytest.param(helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 3], auto_pad="SAME_LOWER"),
                 marks=pytest.mark.slow),
    helper.make_node("Conv", ["x", "w1"], ["c"], strides=[2, 2], auto_pad="SAME_UPPER"),
], ids=["maxpool", "maxpool-ceil", "maxpool-ceil-unpadded", "maxpool-same", "conv-asymmetric-pads",
        "conv-same", "conv-same-lower", "conv-same-1x1"])
def test_strided_windows_over_a_symbolic_extent_match_onnxruntime(node):
    """SAME pads on a symbolic extent are quotients too: ``s*((h + s - 1) // s) - h +
    k - s`` in all, which the bounds keep in ``k - s .. k - 1`` (0 for a 1x1)."""
    model = _model([node], [_w(n, s) for n, s in (("w", (3, 3, 3, 3)), ("w1", (3, 3, 1, 1)))
                            if n in node.input], 3)
    _check(compiler.compile(import_model(model)), model, [(1, 3, 9, 8), (2, 3, 12, 13)])


@pytest.mark.parametrize("node,what", [
    (helper.make_node("AveragePool", ["x"], ["c"], kernel_shape=[3, 3], strides=[2, 2],
                      ceil_mode=1),
     r"AveragePool node .*AveragePool with stride 2 over the symbolic extent h \(axis 2\): "
     r"a strided pool over a symbolic image size is .* AveragePool/LpPool \(no ceil_mode"),
    (helper.make_node("LpPool", ["x"], ["c"], kernel_shape=[2, 2], strides=[2, 2]),
     r"LpPool node .*Conv2D.*its window of extent 2 does not fit the extent h for h < 2 "
     r"\(h in 1\.\.\): bound it at import, input_shapes=\{'h': \(2, None\)\}"),
    (helper.make_node("Conv", ["x", "w"], ["c"], strides=[3, 3], auto_pad="SAME_UPPER"),
     r"Conv node .*auto_pad=SAME_UPPER with stride 3 and window 2 over the symbolic extent h "
     r"\(axis 2\): its padding 3\*\(\(h \+ 2\) // 3\) - h - 1 is negative for some sizes"),
    (helper.make_node("MaxPool", ["x"], ["c"], kernel_shape=[2, 2], strides=[2, 2],
                      auto_pad="VALID"),
     r"MaxPool node .*MaxPool2D.*its window of extent 2 does not fit the extent h for h < 2 "
     r"\(h in 1\.\.\): bound it at import, input_shapes=\{'h': \(2, None\)\}"),
], ids=["avgpool-ceil", "lppool-window-too-large", "conv-same-window-below-stride",
        "maxpool-window-too-large"])
def test_what_a_floor_cannot_express_is_refused_by_name(node, what):
    model = _model([node], [_w("w", (3, 3, 2, 2))] if node.op_type == "Conv" else [], 3)
    with pytest.raises(OnnxImportError, match=what + r".*"):
        import_model(model)


@pytest.mark.parametrize("node", [
    helper.make_node("MaxPool", ["x"], ["c"], kernel_shape=[2, 2], strides=[2, 2],
                     auto_pad="VALID"),
    helper.make_node("LpPool", ["x"], ["c"], kernel_shape=[2, 2], strides=[2, 2], p=2),
    helper.make_node("AveragePool", ["x"], ["c"], kernel_shape=[2, 2], strides=[2, 2]),
], ids=["maxpool", "lppool", "avgpool"])
def test_bounds_that_fit_the_window_admit_it(node):
    model = _model([node], [], 3)
    g = import_model(model, input_shapes={"h": (2, 64), "w": (2, 64)})
    _check(compiler.compile(g), model, [(1, 3, 5, 2), (2, 3, 8, 9)])


def test_the_smallest_size_valid_windows_allow_bounds_one_file(tmp_path):
    """A 1x1 conv, then two VALID 2x2 stride-2 max pools: unbounded, the
    import names the first pool's window and the bound it needs (h >= 2);
    with it, the second's (the first gives h // 2 rows: h >= 4); with h, w
    >= 4 one file runs every size from 4x4 without the compiler, giving the
    outputs of its plan in process (``export_sample``: the 1x1 conv's
    kernel at every size, where the module's own 4x4 plan takes the recipe),
    and a smaller image is the bound's typed error."""
    sys.path.insert(0, str(ROOT / "tests" / "artifact"))
    from test_symbolic_artifact import _outputs_without_compiler
    model = _model([helper.make_node("Conv", ["x", "w", "b"], ["v"]),
                    helper.make_node("MaxPool", ["v"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                    helper.make_node("MaxPool", ["p"], ["c"], kernel_shape=[2, 2], strides=[2, 2])],
                   [_w("w", (8, 3, 1, 1)), _w("b", (8,))], 8)
    with pytest.raises(OnnxImportError, match=r"MaxPool node .*height: its window of extent 2 "
                       r"does not fit the extent h for h < 2 .*input_shapes=\{'h': \(2, None\)\}"):
        import_model(model)
    with pytest.raises(OnnxImportError, match=r"MaxPool node .*height: its window of extent 2 "
                       r"does not fit the extent h // 2 for h < 4 .*"
                       r"input_shapes=\{'h': \(4, None\)\}"):
        import_model(model, input_shapes={"h": (2, None), "w": (2, None)})
    m = compiler.compile(import_model(model, input_shapes={"h": (4, None), "w": (4, None)}))
    path = m.save(str(tmp_path / "valid.fuel"))
    loaded = runtime.load(path)
    assert loaded.signature["symbols"] == {"batch": [1, None], "h": [4, None], "w": [4, None]}
    sizes = {"4x4": (1, 3, 4, 4), "5x11": (2, 3, 5, 11)}
    feeds = {k: {"x": RNG.standard_normal(s).astype(np.float32)} for k, s in sizes.items()}
    out = _outputs_without_compiler(path, feeds, tmp_path)
    for k, f in feeds.items():
        b, _, h, w = sizes[k]
        np.testing.assert_array_equal(out[k], m.export_sample({"batch": b, "h": h, "w": w})(**f))
    _check(loaded, model, [(1, 3, 4, 4), (2, 3, 5, 11), (1, 3, 20, 13)])
    with pytest.raises(ShapeSignatureError, match=r"symbol 'h' = 3 .* outside its bounds 4\.\."):
        loaded(x=np.zeros((1, 3, 3, 8), np.float32))


@pytest.mark.parametrize("node", [
    helper.make_node("AveragePool", ["x"], ["c"], kernel_shape=[3, 3], strides=[2, 2],
                     pads=[1, 1, 1, 1]),
    helper.make_node("AveragePool", ["x"], ["c"], kernel_shape=[3, 3], strides=[2, 2],
                     pads=[1, 0, 1, 2], count_include_pad=1),
    helper.make_node("AveragePool", ["x"], ["c"], kernel_shape=[3, 3], strides=[2, 2],
                     auto_pad="SAME_UPPER"),
], ids=["padded", "count-include-pad", "same"])
def test_strided_average_pool_is_a_depthwise_conv(node):
    """Window sums by a depthwise Conv2D of unit weights, divided by the
    window size or by the same conv of a ones image (positions inside)."""
    model = _model([node], [], 3)
    g = import_model(model)
    assert sum(n.op == "Fused" and n.fused.name == "Conv2D" for n in g.nodes) == \
        (1 if any(a.name == "count_include_pad" for a in node.attribute) else 2)
    _check(compiler.compile(g), model, [(1, 3, 9, 8), (2, 3, 12, 13)])


def test_fixing_the_image_size_at_import_keeps_the_batch_symbolic():
    model = strided_net()
    m = compiler.compile(import_model(model, input_shapes={"h": 15, "w": 12}))
    assert m.signature["inputs"]["x"] == "f32[batch,3,15,12]"
    _check(m, model, [(1, 3, 15, 12), (3, 3, 15, 12)])


def test_graph_api_strided_conv_over_a_symbol():
    from compiler import Graph, Sym
    from compiler.registry import builders as B
    g = Graph()
    x = g.input("x", ("batch", 4, "h", 9), "f32")
    w = g.constant(RNG.standard_normal((8, 4, 3, 3)).astype(np.float32))
    y = B.conv2d(x, w, stride=(2, 2), padding=(1, 1))
    assert str(y.shape[2]) == "(h + 1) // 2" and y.shape[3] == 5
    # declared as 2*k + 1, the quotient is exact: the output height is k + 1
    k = Sym("k", 1, 16)
    g2 = Graph()
    x2 = g2.input("x", (1, 4, 2 * k + 1, 9), "f32")
    w2 = g2.constant(RNG.standard_normal((8, 4, 3, 3)).astype(np.float32))
    assert str(B.conv2d(x2, w2, stride=(2, 2), padding=(1, 1)).shape[2]) == "k + 1"
    g.output(y, name="y")
    m = compiler.compile(g)
    for h in (3, 8):
        xv = RNG.standard_normal((2, 4, h, 9)).astype(np.float32)
        np.testing.assert_allclose(m(x=xv), compiler.interpret(g, {"x": xv})["y"],
                                   rtol=1e-4, atol=1e-4)


def test_fully_convolutional_net_runs_every_image_size(tmp_path):
    model = fully_convolutional()
    g = import_model(model)
    assert g.signature()["inputs"]["x"] == "f32[batch,3,h,w]"
    m = compiler.compile(g)
    _check(m, model, [(1, 3, 8, 8), (2, 3, 13, 9), (3, 3, 8, 8)])
    # one file for every size, down to 1x1 (its convs take one form at
    # every size, docs/dynamic-shapes.md)
    loaded = runtime.load(m.save(str(tmp_path / "all.fuel")))
    assert loaded.signature["symbols"] == {"batch": [1, None], "h": [1, None], "w": [1, None]}
    _check(loaded, model, [(1, 3, 8, 8), (2, 3, 13, 9), (3, 3, 5, 40), (1, 3, 1, 1),
                           (2, 3, 2, 4)])
    m.save_bundle(str(tmp_path / "b"), bindings=[{"batch": 2, "h": 13, "w": 9}])
    _check(load_bundle(str(tmp_path / "b")), model, [(2, 3, 13, 9)])


def test_resnet_style_net_compiles_once_and_runs_every_image_size(tmp_path):
    """ResNet-style (strided stem, max pool, a stride-2 block with its 1x1
    s2 projection): one compile, image sizes 32, 47, 64 match onnxruntime,
    and a new size compiles no kernel (every conv and pool takes the image
    size at run time); the shapes of the two residual branches are one
    quotient (no recorded equality); a bundle of two sizes runs them and
    refuses the others by name (one file for every size:
    tests/artifact/test_symbolic_conv_artifact.py)."""
    from compiler.codegen import family
    model = small_resnet()
    g = import_model(model)
    assert not g.equalities
    assert g.signature() == {"inputs": {"x": "f32[batch,3,h,w]"}, "outputs": {"y": "f32[batch,10]"},
                             "symbols": {"batch": [1, None], "h": [1, None], "w": [1, None]}}
    assert "(h + 7) // 8" in g.dump()
    m = compiler.compile(g)
    _check(m, model, [(1, 3, 32, 32)])
    kernels = len(family._compiled)
    _check(m, model, [(2, 3, 47, 47), (1, 3, 33, 47), (1, 3, 64, 40)])
    assert len(family._compiled) == kernels   # the kernels of the first size serve all
    x = RNG.standard_normal((1, 3, 33, 47)).astype(np.float32)   # and the reference
    np.testing.assert_allclose(m(x=x), compiler.interpret(g, {"x": x})["y"], rtol=1e-4,
                               atol=1e-5)
    summary = m.kernel_summary()
    assert "[run-time batch, per image size] ones per image size" in summary[0]
    assert all(s.endswith("[run-time extents]") for s in summary[1:]), summary
    assert sum(s.startswith("Conv2D") for s in summary) == 6, summary
    m.save_bundle(str(tmp_path / "b"), bindings=[{"batch": 1, "h": 47, "w": 47},
                                                 {"batch": 2, "h": 64, "w": 40}])
    loaded = load_bundle(str(tmp_path / "b"))
    _check(loaded, model, [(1, 3, 47, 47), (2, 3, 64, 40)])
    with pytest.raises(UnsavedBindingError, match="batch=1, h=47, w=47"):
        loaded(x=np.zeros((1, 3, 32, 32), np.float32))
    with pytest.raises(ShapeSignatureError, match=r"input 'x' axis 1: size 4 .* fixes 3"):
        loaded(x=np.zeros((1, 4, 47, 47), np.float32))


@pytest.mark.slow  # ~40 s: subprocesses importing the compiler, one file for every size
def test_cli_writes_one_file_or_a_bundle_for_a_symbolic_image(tmp_path):
    onnx.save(small_resnet(), str(tmp_path / "r.onnx"))

    def fuelc(*args):
        return subprocess.run([sys.executable, "-m", "compiler.cli", *map(str, args)], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
    r = fuelc("compile", tmp_path / "r.onnx", "-o", tmp_path / "r.fuel")
    assert r.returncode == 0, r.stderr
    r = fuelc("inspect", tmp_path / "r.fuel")
    assert r.returncode == 0 and "h in 1.. (one file for every size)" in r.stdout, r.stdout
    _check(runtime.load(str(tmp_path / "r.fuel")), small_resnet(), [(2, 3, 33, 47),
                                                                    (1, 3, 16, 16)])
    r = fuelc("compile", tmp_path / "r.onnx", "-o", tmp_path / "r.fuelbundle", "--binding",
              "batch=1,h=33,w=33")
    assert r.returncode == 0, r.stderr
    _check(load_bundle(str(tmp_path / "r.fuelbundle")), small_resnet(), [(1, 3, 33, 33)])


@pytest.mark.slow  # ~15 s: the MobileNet-style net (depthwise stride-2 convs) at three sizes
def test_mobilenet_style_net_runs_every_image_size():
    """Its pointwise, depthwise and stem convs take the image size at run
    time; a size whose layers have few pixels plans the conv recipe (a
    matmul with run-time extents) instead, so sizes compile no conv kernel
    after the first of each form."""
    model = image_axes(bm.mobilenet(1, classes=10, image=32))
    m = compiler.compile(import_model(model))
    _check(m, model, [(1, 3, 32, 32), (2, 3, 47, 47), (1, 3, 33, 47), (1, 3, 64, 40)])
    convs = [s for s in m.kernel_summary()[1:] if s.startswith("Conv2D")]
    assert convs and all(s.endswith("[run-time extents]") for s in convs), convs


def test_a_conv_compiled_per_image_size_is_refused_in_one_file(tmp_path):
    """A conv with a SiLU epilogue (EfficientNet's) takes only its batch at
    run time: one file for every image size cannot hold it, and says so by
    step; a bundle still serves the sizes."""
    w = _w("ws", (8, 3, 3, 3))
    model = _model([helper.make_node("Conv", ["x", "ws"], ["s"], pads=[1, 1, 1, 1]),
                    helper.make_node("Sigmoid", ["s"], ["g"]),
                    helper.make_node("Mul", ["s", "g"], ["c"])], [w], 8)
    m = compiler.compile(import_model(model))
    with pytest.raises(ExportError, match=r"is compiled per shape or per image size"):
        m.save(str(tmp_path / "all.fuel"))
    m.save_bundle(str(tmp_path / "b"), bindings=[{"batch": 2, "h": 13, "w": 9}])
    _check(load_bundle(str(tmp_path / "b")), model, [(2, 3, 13, 9)])


def test_bundle_keeps_an_equality_on_a_quotient(tmp_path):
    """A second input the rules assume as large as a strided conv's output:
    the equality ``(h + 1) // 2 == hh`` is written to bundle.json as a floor
    factor and checked by the loaded bundle's calls."""
    from compiler import Graph
    from compiler.registry import builders as B
    g = Graph()
    x = g.input("x", ("batch", 3, "h", 6), "f32")
    z = g.input("z", ("batch", 4, "hh", 3), "f32")
    y = B.conv2d(x, g.constant(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)),
                 stride=2, padding=1)
    g.output(y + z, name="y")
    m = compiler.compile(g)
    m.save_bundle(str(tmp_path / "b"), bindings=[{"batch": 2, "h": 9, "hh": 5}])
    loaded = load_bundle(str(tmp_path / "b"))
    feeds = {"x": RNG.standard_normal((2, 3, 9, 6)).astype(np.float32),
             "z": RNG.standard_normal((2, 4, 5, 3)).astype(np.float32)}
    np.testing.assert_allclose(loaded(**feeds), compiler.interpret(g, feeds)["y"],
                               rtol=1e-4, atol=1e-4)
    feeds["x"] = feeds["x"][:, :, :7]     # (7 + 1) // 2 = 4, not 5
    with pytest.raises(ShapeSignatureError, match=r"(hh = 5 but \(h \+ 1\) // 2 = 4|"
                                                  r"\(h \+ 1\) // 2 = 4 but hh = 5) .*assumed them "
                                                  r"equal") as e:
        loaded(**feeds)
    assert e.value.symbol in ("h", "hh")


@pytest.mark.slow  # ~10 s: torch.onnx.export, then two image sizes compiled
def test_torch_exported_resnet_block_with_dynamic_image_axes(tmp_path):
    """torch.onnx.export(..., dynamic_axes={"x": {0: "batch", 2: "h", 3: "w"}})
    of a ResNet-style net (BN, a strided block with its projection, adaptive
    average pool, ``x.view(x.size(0), -1)``: Shape/Gather/Concat over the
    quotient extents into a Reshape) runs two image sizes against onnxruntime."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            self.c1 = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                    nn.ReLU(), nn.Conv2d(16, 16, 3, 1, 1))
            self.down = nn.Conv2d(8, 16, 1, 2)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            x = self.stem(x)
            x = torch.relu(self.c1(x) + self.down(x))
            x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
            return self.fc(x.view(x.size(0), -1))

    torch.manual_seed(0)
    net = Net().eval()
    path = tmp_path / "net.onnx"
    torch.onnx.export(net, (torch.randn(1, 3, 32, 32),), str(path), input_names=["x"],
                      output_names=["y"], opset_version=17, dynamo=False,
                      dynamic_axes={"x": {0: "batch", 2: "h", 3: "w"}, "y": {0: "batch"}})
    model = onnx.load(str(path))
    assert {"Shape", "Gather", "Reshape", "MaxPool"} <= {n.op_type for n in model.graph.node}
    g = import_model(model)
    assert g.signature()["inputs"]["x"] == "f32[batch,3,h,w]" and not g.equalities
    _check(compiler.compile(g), model, [(1, 3, 32, 32), (2, 3, 47, 53)])
