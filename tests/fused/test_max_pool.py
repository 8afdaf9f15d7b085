"""MaxPool2D: the cpu kernel (``codegen/lowering/fused_pool.py``) and the
recipe against the reference (a maximum is exact: results are compared bit
for bit), on both ISA levels; the classes the kernel refuses decompose; the
shape rules' errors; the ONNX importer's MaxPool becomes the fused op."""
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.errors import GraphBuildError
from compiler.registry.builders import max_pool2d

# (x shape, kernel, stride, padding (top, left, bottom, right), dilation, dtype)
CASES = [
    ((2, 3, 9, 8), 3, 2, (1, 1, 1, 1), 1, "f32"),      # a ResNet stem pool, odd/even sizes
    ((1, 4, 16, 70), 3, 2, (1, 1, 1, 1), 1, "f32"),    # several 16-column pieces, one partial
    ((3, 2, 11, 37), 2, 2, (0, 0, 0, 0), 1, "f64"),    # 2x2 s2, an input column left over
    ((1, 2, 12, 21), 3, 1, (1, 1, 1, 1), 1, "f32"),    # stride 1 (shifted reads, no phases)
    ((2, 3, 13, 19), (2, 3), (1, 2), (0, 1, 1, 0), (2, 1), "f64"),  # asymmetric, dilated
    ((1, 1, 7, 40), (3, 5), 2, (1, 2, 1, 2), (1, 2), "f32"),        # dilated columns, sw = 2
    # rows above and below the image with dilated rows (the window's nearest
    # image row stands in), a left padding of two lanes (two carried lanes)
    ((1, 2, 10, 37), (3, 5), 1, (2, 2, 3, 2), (2, 1), "f32"),
]


def _graph(xs, kernel, stride, padding, dilation, dtype):
    g = Graph()
    x = g.input("x", xs, dtype)
    g.output(max_pool2d(x, kernel, stride, padding, dilation), name="y")
    return g


def _data(xs, dtype, seed=0):
    x = np.random.default_rng(seed).standard_normal(xs).astype({"f32": np.float32, "f64": np.float64}[dtype])
    x.reshape(-1)[::13] = np.nan         # a window holding a NaN gives NaN
    x.reshape(-1)[5::17] = -np.inf
    return x


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_kernel_equals_the_reference_bit_for_bit(case, target):
    xs, kernel, stride, padding, dilation, dtype = CASES[case]
    g = _graph(xs, kernel, stride, padding, dilation, dtype)
    m = compile(g, target=target)
    assert m.kernel_summary() == [f"MaxPool2D[{dtype},{dtype}] (mlir-cpu-fused)"]
    x = _data(xs, dtype)
    np.testing.assert_array_equal(m.run(x=x)["y"], interpret(g, {"x": x})["y"])


@pytest.mark.parametrize("case", [0, 4])
def test_recipe_equals_the_reference(case):
    xs, kernel, stride, padding, dilation, dtype = CASES[case]
    g = _graph(xs, kernel, stride, padding, dilation, dtype)
    m = compile(g, pipeline="base-map")      # every fused op decomposed
    assert not any("MaxPool2D" in k for k in m.kernel_summary())
    x = _data(xs, dtype)
    np.testing.assert_array_equal(m.run(x=x)["y"], interpret(g, {"x": x})["y"])


def test_reference_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).standard_normal((2, 3, 10, 11)).astype(np.float32)
    g = _graph(x.shape, 3, 2, (1, 1, 1, 1), 2, "f32")
    want = torch.nn.functional.max_pool2d(torch.from_numpy(x), 3, 2, 1, 2).numpy()
    np.testing.assert_array_equal(interpret(g, {"x": x})["y"], want)


@pytest.mark.parametrize("xs,kernel,stride,padding", [
    ((1, 2, 9, 14), 3, 3, (1, 1, 1, 1)),
    ((1, 2, 3, 30), (1, 19), 1, (0, 9, 0, 9)),   # a left padding past half a vector
])
def test_a_column_stride_above_2_or_a_wide_left_padding_decomposes(xs, kernel, stride, padding):
    g = _graph(xs, kernel, stride, padding, 1, "f32")
    m = compile(g)
    assert not any("MaxPool2D" in k for k in m.kernel_summary()), m.kernel_summary()
    x = _data(xs, "f32")
    np.testing.assert_array_equal(m.run(x=x)["y"], interpret(g, {"x": x})["y"])


@pytest.mark.parametrize("batch", [1, 3])
def test_split_over_threads(batch):
    # batch 1: by channels; batch 3 over 2 threads: tiles of 2 and 1 images
    from compiler.codegen import parallel
    before = parallel.num_threads()
    parallel.set_num_threads(2)
    try:
        xs = (batch, 64, 72, 72)   # 82944 outputs per image: above MIN_ELEMENTS_TRANSCENDENTAL
        g = _graph(xs, 3, 2, (1, 1, 1, 1), 1, "f32")
        m = compile(g)
        x = _data(xs, "f32")
        np.testing.assert_array_equal(m.run(x=x)["y"], interpret(g, {"x": x})["y"])
        from runtime.executor import KernelStep
        from runtime.layout import Layout
        step = next(s for s in m.plan.steps if isinstance(s, KernelStep))
        lays = [Layout.contiguous(m.executor.specs[v].shape) for v in (*step.inputs, *step.outputs)]
        fn = next(iter(m.executor.entries.values())).kernel.fn
        # TILES_PER_THREAD tiles per thread by channels at batch 1; by images
        # (one tile per thread) at batch 3, where 4 parts would cut channels
        assert len(fn._calls.lookup(lays, step.params, 1)) == (parallel.split_parts(2) if batch == 1 else 2)
    finally:
        parallel.set_num_threads(before)


def test_run_time_batch_one_kernel_for_every_batch():
    g = Graph()
    x = g.input("x", ("n", 4, 12, 12), "f32")
    g.output(max_pool2d(x, 3, 2, 1), name="y")
    m = compile(g)
    for n in (1, 3, 5):
        xv = _data((n, 4, 12, 12), "f32", seed=n)
        np.testing.assert_array_equal(m.run(x=xv)["y"], interpret(g, {"x": xv})["y"])
    assert "MaxPool2D[f32,f32] (mlir-cpu-fused) [run-time extents]" in m.kernel_summary()


@pytest.mark.parametrize("xs,kw,match", [
    ((4, 9, 9), dict(kernel=3), r"MaxPool2D\(f32\[4, 9, 9\]\): x must be \[N,C,H,W\]"),
    ((1, 1, 4, 4), dict(kernel=3, stride=2, padding=(3, 0, 0, 0)),
     r"MaxPool2D.*wholly in the padding"),
    ((1, 1, 4, 4), dict(kernel=5), r"MaxPool2D.*window 5x5 larger than the padded input 4x4"),
    ((1, 1, 4, 4), dict(kernel=2, stride=0), r"MaxPool2D.*must be >= 1"),
])
def test_shape_rule_errors_name_the_op_and_the_rule(xs, kw, match):
    g = Graph()
    x = g.input("x", xs, "f32")
    with pytest.raises(GraphBuildError, match=match):
        max_pool2d(x, **kw)


def test_integer_input_is_refused_naming_the_dtype():
    g = Graph()
    x = g.input("x", (1, 1, 4, 4), "i32")
    with pytest.raises(GraphBuildError, match=r"MaxPool2D.*float tensor.*got i32"):
        max_pool2d(x, 2)


def test_onnx_maxpool_imports_as_the_fused_op():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from compiler.frontends.onnx import import_model
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 1, 1], ceil_mode=1)
    model = helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 5, 5])]),
        opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    m = compile(import_model(model))
    assert m.kernel_summary() == ["MaxPool2D[f32,f32] (mlir-cpu-fused)"]
    x = np.arange(128, dtype=np.float32).reshape(1, 2, 8, 8)
    # ceil_mode: the last window starts at row/column 7 (padded 8): its rows 7 and
    # the -inf padding past the end
    want = np.maximum.reduce([np.pad(x, ((0, 0), (0, 0), (1, 2), (1, 2)), constant_values=-np.inf)
                              [:, :, ky:ky + 9:2, kx:kx + 9:2]
                              for ky in range(3) for kx in range(3)])
    np.testing.assert_array_equal(m.run(x=x)["y"], want)


# (kernel, stride, padding, dilation, dtype) of run-time image sizes; the
# sizes cross the kernel's column pieces (16-wide vectors whose reads are in
# the row, then 16- and 8-wide ones, a masked last one)
IMAGE_CASES = [
    (3, 2, (1, 1, 1, 1), 1, "f32"),               # the ResNet stem pool
    ((2, 3), (1, 2), (0, 1, 1, 0), (2, 1), "f64"),  # asymmetric, dilated rows
    ((3, 5), 2, (1, 2, 1, 2), (1, 2), "f32"),       # dilated columns, sw = 2
    (3, 1, (1, 1, 1, 1), 1, "f32"),               # stride 1
    ((3, 5), 1, (2, 2, 3, 2), (2, 1), "f32"),       # rows in the padding, dilated; 2 carried lanes
]


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
@pytest.mark.parametrize("case", range(len(IMAGE_CASES)))
def test_run_time_image_size_one_kernel_for_every_size(case, target):
    """Batch, height and width symbolic: one kernel (its memo key does not
    hold the sizes) runs every size bit for bit as the reference."""
    kernel, stride, padding, dilation, dtype = IMAGE_CASES[case]
    g = Graph()
    x = g.input("x", ("n", 3, ("h", 6, 512), ("w", 6, 512)), dtype)
    g.output(max_pool2d(x, kernel, stride, padding, dilation), name="y")
    m = compile(g, target=target)
    for xs in ((1, 3, 33, 47), (2, 3, 9, 8), (1, 3, 16, 70), (1, 3, 7, 129)):
        xv = _data(xs, dtype, seed=xs[2])
        np.testing.assert_array_equal(m.run(x=xv)["y"], interpret(g, {"x": xv})["y"])
    assert f"MaxPool2D[{dtype},{dtype}] (mlir-cpu-fused) [run-time extents]" in m.kernel_summary()


def test_run_time_image_size_shares_the_memo_key():
    """With ``image_at_run_time`` (what ``Graph.bind`` sets for a symbolic
    image) one kernel serves every batch and image size of a channel count;
    without it (a static graph) the image size is compiled in."""
    from compiler.codegen.fused import FusedInstance
    from compiler.graph.opdef import TensorType
    from runtime.dtype import DType
    base = dict(kernel=(3, 3), stride=(2, 2), dilation=(1, 1), padding=(1, 1, 1, 1))

    def keys(run_time, *shapes):
        params = tuple(sorted(dict(base, **({"image_at_run_time": True} if run_time else {})
                                   ).items()))
        return {FusedInstance("MaxPool2D", params, (TensorType(xs, DType.F32),)).memo_key
                for xs in shapes}
    assert len(keys(True, (1, 8, 33, 47), (4, 8, 224, 224))) == 1
    assert len(keys(True, (1, 8, 33, 47), (1, 9, 33, 47))) == 2   # the channels compiled in
    assert len(keys(False, (1, 8, 33, 47), (4, 8, 33, 47))) == 1  # the batch at run time
    assert len(keys(False, (1, 8, 33, 47), (1, 8, 32, 47))) == 2


def test_an_image_below_the_window_is_a_typed_shape_error():
    """A 3x3 VALID pool needs h, w >= 3: bounds that admit less are refused
    when the graph is built, a call below the bounds names the input, the
    symbol and the sizes."""
    from runtime.errors import ShapeSignatureError
    g = Graph()
    x = g.input("x", ("n", 3, "h", "w"), "f32")
    with pytest.raises(GraphBuildError, match=r"MaxPool2D.*h"):
        max_pool2d(x, 3)
    g = Graph()
    x = g.input("x", ("n", 3, ("h", 3, 64), ("w", 3, 64)), "f32")
    g.output(max_pool2d(x, 3), name="y")
    m = compile(g)
    with pytest.raises(ShapeSignatureError, match=r"symbol 'w' = 2 \(input 'x' axis 3\) is "
                                                  r"outside its bounds 3..64"):
        m.run(x=np.zeros((1, 3, 5, 2), np.float32))
