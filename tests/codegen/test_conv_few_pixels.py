"""Conv2D of few output pixels per image (a CNN's late layers: 2x2, 4x4), the
recipe's ``_few_pixels`` form (compiler/registry/ops/conv2d.py): an im2col
of x with its channels last, one matmul whose rows are the pixels of every
image and whose columns are the Cout channels, the weight reordered at
compile time and packed by fuel-prepack-weights. Against the reference
interpreter on both ISA levels, f32 and f64, a run-time batch included."""
import numpy as np
import pytest

from compiler import Graph, compile
from compiler.graph.interpret import interpret
from compiler.registry.builders import conv2d

TARGETS = ["cpu", "cpu:x86-64-v3"]


def _graph(xshape, cout, k, stride=1, padding=0, dilation=1, bias=True, dtype="f32", seed=0):
    rng = np.random.default_rng(seed)
    npd = np.float32 if dtype == "f32" else np.float64
    kh, kw = (k, k) if isinstance(k, int) else k
    g = Graph()
    x = g.input("x", xshape, dtype)
    w = g.constant((rng.standard_normal((cout, xshape[1], kh, kw)) * 0.1).astype(npd), name="w")
    b = g.constant(rng.standard_normal(cout).astype(npd), name="b") if bias else None
    g.output(conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation).relu(), name="y")
    return g


def _check(m, g, x, rtol):
    want = interpret(g, {"x": x})["y"]
    np.testing.assert_allclose(m(x=x), want, rtol=rtol, atol=rtol * np.abs(want).max())


CASES = [  # x shape, Cout, kernel, stride, padding, dilation
    ((1, 128, 2, 2), 128, 3, 1, 1, 1),      # ResNet's last stage, one image
    ((8, 64, 4, 4), 128, 3, 1, 1, 1),       # a batch: 8 x 16 pixel rows
    ((3, 64, 4, 4), 128, 3, 2, 1, 1),       # stride 2 (the stage's first block)
    ((2, 64, 4, 4), 128, 1, 2, 0, 1),       # the 1x1 stride-2 shortcut
    ((2, 64, 5, 5), 128, 1, 2, 0, 1),       # ... of an odd size: padded to the stride
    ((2, 32, 4, 4), 96, 1, (2, 1), 0, 1),   # a stride on one axis
    ((2, 32, 2, 2), 64, 1, 1, 0, 1),        # a 1x1 conv at 2x2
    ((2, 32, 5, 5), 96, 3, 1, 0, 2),        # dilated: one pixel
    ((2, 16, 3, 7), 80, (1, 3), (1, 2), (0, 1), 1),  # uneven kernel, stride and pads
    ((8, 96, 1, 1), 8, 1, 1, 0, 1),         # squeeze-excite's 1x1 convs on a 1x1 image
    ((3, 8, 1, 1), 96, 1, 1, 0, 1),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("xshape,cout,k,stride,padding,dilation", CASES)
def test_few_pixel_conv_matches_the_reference(target, xshape, cout, k, stride, padding, dilation):
    g = _graph(xshape, cout, k, stride, padding, dilation)
    m = compile(g, target=target)
    x = np.random.default_rng(1).standard_normal(xshape).astype(np.float32)
    _check(m, g, x, 2e-5)
    summary = m.kernel_summary()
    assert not any(s.startswith("Conv2D[") for s in summary), summary
    if cout % 32 == 0:  # a whole number of panels on both ISA levels: the weight is packed
        assert any(s.startswith("FusedLinear[") and s.endswith("[B packed]") for s in summary), summary


@pytest.mark.parametrize("target", TARGETS)
def test_few_pixel_conv_in_f64(target):
    g = _graph((2, 32, 4, 4), 64, 3, 1, 1, dtype="f64")
    m = compile(g, target=target)
    x = np.random.default_rng(2).standard_normal((2, 32, 4, 4))
    _check(m, g, x, 1e-12)


def test_few_pixel_conv_without_bias_and_a_run_time_batch():
    g = _graph(("batch", 64, 4, 4), 128, 3, 1, 1, bias=False)
    m = compile(g)
    rng = np.random.default_rng(3)
    for n in (1, 3, 8):
        _check(m, g, rng.standard_normal((n, 64, 4, 4)).astype(np.float32), 2e-5)


def test_many_pixels_per_image_in_a_batch_multiply_per_image():
    # 7x7 = 49 pixels (MobileNet's and EfficientNet's last stage), batch 4:
    # w @ cols per image, no transposing copy in or out
    g = _graph((4, 64, 7, 7), 320, 1)
    m = compile(g)
    _check(m, g, np.random.default_rng(4).standard_normal((4, 64, 7, 7)).astype(np.float32), 2e-5)
    assert any(s.startswith("MatMul[") for s in m.kernel_summary()), m.kernel_summary()


@pytest.mark.parametrize("target", TARGETS)
def test_strided_shortcut_copies_only_its_subsample(target):
    # a 1x1 stride-2 conv (a ResNet shortcut) reads one pixel of each 2x2
    # block: one copy of that subsample, channels last, is the matmul's rows
    # (no copy of all of x); a run-time batch as well
    g = _graph(("batch", 64, 8, 8), 128, 1, 2, 0)
    m = compile(g, target=target)
    rng = np.random.default_rng(5)
    for n in (1, 3):
        _check(m, g, rng.standard_normal((n, 64, 8, 8)).astype(np.float32), 2e-5)
    steps = m.specialize(batch=3).plan.steps
    kinds = [type(s).__name__ for s in steps]
    assert kinds.count("ContiguizeStep") == 1, steps
    narrows = [i for i, s in enumerate(steps) if getattr(s, "op", None) == "narrow"]
    assert narrows and max(narrows) < kinds.index("ContiguizeStep"), steps  # the subsample is copied


@pytest.mark.parametrize("target", TARGETS)
def test_a_one_pixel_image_is_channels_last_already(target):
    # squeeze-excite's 1x1 convs on [N, C, 1, 1]: x is the im2col and the
    # product [N, 1, Cout] the NCHW output, both reshapes: no copy step
    from runtime.executor import ContiguizeStep
    g = _graph((8, 96, 1, 1), 24, 1)
    m = compile(g, target=target)
    assert not any(isinstance(s, ContiguizeStep) for s in m.plan.steps), m.plan.steps
    rng = np.random.default_rng(5)
    _check(m, g, rng.standard_normal((8, 96, 1, 1)).astype(np.float32), 2e-5)
    g = _graph(("batch", 96, 1, 1), 24, 1)   # a run-time batch
    m = compile(g, target=target)
    for n in (1, 8):
        _check(m, g, rng.standard_normal((n, 96, 1, 1)).astype(np.float32), 2e-5)


WHOLE_IMAGE_CASES = [  # x shape, Cout, kernel, padding: fewer input pixels than taps, stride 1
    ((8, 64, 2, 2), 64, 3, 1),      # ResNet's last stage at batch 8
    ((3, 16, 1, 1), 32, 3, 1),      # a padded 1x1 image: the centre tap alone
    ((2, 8, 3, 3), 64, 5, 2),       # 5x5 over 3x3
    ((2, 8, 2, 3), 64, (3, 5), (1, 2)),  # uneven
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("xshape,cout,k,padding", WHOLE_IMAGE_CASES)
def test_whole_image_conv_is_one_matmul(target, xshape, cout, k, padding):
    # an image of fewer pixels than the kernel has taps multiplies x [N,
    # Cin*H*W] by a weight that maps the whole image (built and packed at
    # compile time): no pad, no im2col, no copy in or out; the bias and the
    # ReLU run in the product's epilogue (conv2d.product_epilogue): one kernel
    from runtime.executor import ContiguizeStep, KernelStep
    g = _graph(xshape, cout, k, 1, padding)
    m = compile(g, target=target)
    x = np.random.default_rng(6).standard_normal(xshape).astype(np.float32)
    _check(m, g, x, 2e-5)
    kernels = [s.key.op.name if s.key.op is not None else "RuntimeFused"
               for s in m.plan.steps if isinstance(s, KernelStep)]
    assert kernels == ["FusedLinear"], kernels
    assert not any(isinstance(s, ContiguizeStep) for s in m.plan.steps), m.plan.steps


def test_whole_image_conv_in_f64_with_a_skip():
    from compiler.registry.builders import conv2d as conv
    rng = np.random.default_rng(7)
    g = Graph()
    x = g.input("x", (4, 32, 2, 2), "f64")
    w = g.constant(rng.standard_normal((32, 32, 3, 3)) * 0.1, name="w")
    b = g.constant(rng.standard_normal(32), name="b")
    g.output((conv(x, w, b, padding=1) + x).relu(), name="y")
    m = compile(g)
    _check(m, g, rng.standard_normal((4, 32, 2, 2)), 1e-12)


def test_whole_image_needs_a_static_batch_of_images():
    # a run-time batch keeps the im2col form (its plan serves every batch),
    # and so does one image (its one-row product would read a larger weight)
    g = _graph(("batch", 32, 2, 2), 64, 3, 1, 1)
    m = compile(g)
    rng = np.random.default_rng(8)
    for n in (1, 5):
        _check(m, g, rng.standard_normal((n, 32, 2, 2)).astype(np.float32), 2e-5)
    g = _graph((1, 32, 2, 2), 64, 3, 1, 1)
    m = compile(g)
    _check(m, g, rng.standard_normal((1, 32, 2, 2)).astype(np.float32), 2e-5)
    assert any(s.startswith("Concat[") for s in m.kernel_summary()), m.kernel_summary()


BAND_CASES = [  # x shape, Cout, kernel, stride, padding, bands
    ((8, 32, 4, 4), 64, 3, 1, 1, 3),        # ResNet's 4x4 stage: top, middle, bottom rows
    ((8, 32, 4, 4), 64, 3, 2, 1, 2),        # stride 2 into 2x2: the top row reads padding
    ((8, 16, 8, 8), 64, 3, 2, 1, 2),        # stride 2 into 4x4: the top row as well
    ((4, 16, 4, 4), 64, (5, 3), 1, (2, 1), 4),  # 5 kernel rows, pad 2: bands of 3, 4, 4, 3 rows
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("xshape,cout,k,stride,padding,bands", BAND_CASES)
def test_padded_rows_multiply_only_the_kernel_rows_they_read(target, xshape, cout, k, stride,
                                                             padding, bands):
    # output rows whose top or bottom taps read padding are products of their
    # own over the kernel rows that read the image (conv2d._row_bands), each
    # reading a slice of the one packed weight
    from runtime.executor import KernelStep
    g = _graph(xshape, cout, k, stride, padding)
    m = compile(g, target=target)
    _check(m, g, np.random.default_rng(8).standard_normal(xshape).astype(np.float32), 2e-5)
    products = [s for s in m.plan.steps if isinstance(s, KernelStep) and s.key.op is not None
                and s.key.op.name == "FusedLinear"]
    assert len(products) == bands, m.plan.steps
    assert all(s.params.b_panel for s in products)
    packed = [a for a in m.plan.constants.values() if a.ndim == 3]
    assert len(packed) == 1, {k_: a.shape for k_, a in m.plan.constants.items()}


def test_row_bands_in_f64_bit_identical_over_threads():
    from compiler.codegen import parallel
    g = _graph((8, 32, 4, 4), 64, 3, 1, 1, dtype="f64")
    x = np.random.default_rng(9).standard_normal((8, 32, 4, 4))
    before, ys = parallel.num_threads(), []
    try:
        for t in (1, 2):
            parallel.set_num_threads(t)
            m = compile(g)
            _check(m, g, x, 1e-12)
            ys.append(m(x=x))
    finally:
        parallel.set_num_threads(before)
    np.testing.assert_array_equal(ys[0], ys[1])


def test_one_image_keeps_one_product():
    # bands from a batch of 2 (conv2d._BAND_MIN_BATCH): one image's row would
    # be a product of 4 rows
    g = _graph((1, 32, 4, 4), 64, 3, 1, 1)
    m = compile(g)
    _check(m, g, np.random.default_rng(10).standard_normal((1, 32, 4, 4)).astype(np.float32), 2e-5)
    assert sum(s.startswith("FusedLinear[") for s in m.kernel_summary()) == 1, m.kernel_summary()


def test_row_bands_group_rows_by_the_kernel_rows_they_read():
    from compiler.registry.ops.conv2d import _row_bands
    # 4 rows, 3 kernel rows, pad 1, stride 1, a batch of 8 (and of 2: the same bands)
    bands = [(0, 1, 1, 3), (1, 3, 0, 3), (3, 4, 0, 2)]
    assert _row_bands(4, 1, 1, 1, 3, 4, 8) == bands == _row_bands(4, 1, 1, 1, 3, 4, 2)
    # stride 2 from 8 into 4: only the top row reads padding
    assert _row_bands(4, 2, 1, 1, 3, 8, 8) == [(0, 1, 1, 3), (1, 4, 0, 3)]
    # one image; unpadded
    assert _row_bands(4, 1, 1, 1, 3, 4, 1) == [(0, 4, 0, 3)]
    assert _row_bands(2, 1, 0, 1, 3, 4, 8) == [(0, 2, 0, 3)]


def test_row_bands_round_trip_through_a_fuel_file(tmp_path):
    # the packed weight is one constant of the file, each band's slice of its
    # panels a view step
    import runtime
    g = _graph((8, 32, 4, 4), 64, 3, 1, 1)
    m = compile(g)
    m.save(str(tmp_path / "m.fuel"))
    x = np.random.default_rng(11).standard_normal((8, 32, 4, 4)).astype(np.float32)
    got = runtime.load(str(tmp_path / "m.fuel"))(x=x)
    np.testing.assert_array_equal(got["y"] if isinstance(got, dict) else got, m(x=x))
