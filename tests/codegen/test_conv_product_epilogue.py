"""A few-pixel conv (each row band's product of a banded one) and a
whole-image conv with a bias and a residual or a clamp run as FusedLinears
whose epilogue adds the bias, then the skip, then clamps
(registry/ops/conv2d.py ``product_epilogue``;
``passes.fuse.conv_available`` folds the Add(conv, skip) and the Relu into
such a conv; the FusedLinear ``residual`` / ``clamp_min`` epilogue:
``lowering.fused_forward._linear_epilogue``). Numerics against the
reference interpreter on both ISA levels, f32 and f64; the pass itself:
tests/passes/fuse_conv_product_epilogue.mlir."""
import numpy as np
import pytest

from compiler import Graph, compile
from compiler.errors import GraphBuildError
from compiler.graph.interpret import interpret
from compiler.registry.builders import conv2d, fused

TARGETS = ["cpu", "cpu:x86-64-v3"]


def _block(xshape, cout, k=3, stride=1, padding=1, dtype="f32", chain=False, relu=True):
    """``relu(conv(x) + skip)``: the skip an input of its own, or with
    ``chain`` the output of a conv before (ResNet's second conv of a block:
    a skip that is itself a product's output, laid out channels-last)."""
    rng = np.random.default_rng(0)
    npd = np.float32 if dtype == "f32" else np.float64
    g = Graph()
    x = g.input("x", xshape, dtype)
    cin = xshape[1]

    def conv(v, ci, co, kk, s, p, name):
        w = g.constant((rng.standard_normal((co, ci, kk, kk)) * 0.1).astype(npd), name=f"w{name}")
        b = g.constant(rng.standard_normal(co).astype(npd), name=f"b{name}")
        return conv2d(v, w, b, stride=s, padding=p)
    if chain:
        skip = conv(x, cin, cout, k, stride, padding, "0").relu()
        y = conv(skip, cout, cout, 3, 1, 1, "1") + skip
    else:
        y0 = conv(x, cin, cout, k, stride, padding, "1")
        skip = g.input("skip", tuple(y0.shape), dtype)
        y = y0 + skip
    g.output(y.relu() if relu else y, name="y")
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal(xshape).astype(npd)}
    if not chain:
        feeds["skip"] = rng.standard_normal(tuple(y.shape)).astype(npd)
    return g, feeds


def _kernels(m):
    from runtime.executor import KernelStep
    return [s.key.op.name if s.key.op is not None else "RuntimeFused"
            for s in m.plan.steps if isinstance(s, KernelStep)]


def _check(m, g, feeds, rtol):
    want = interpret(g, feeds)["y"]
    got = m(**feeds)
    np.testing.assert_allclose(got["y"] if isinstance(got, dict) else got, want, rtol=rtol,
                               atol=rtol * np.abs(want).max())


CASES = [  # x shape, Cout, kernel, stride, padding, chain: one FusedLinear per conv
    ((1, 64, 4, 4), 64, 3, 1, 1, False),    # ResNet's 4x4 stage, one image
    ((1, 64, 4, 4), 64, 3, 1, 1, True),     # ... the skip a product's channels-last output
    ((1, 64, 8, 8), 128, 3, 2, 1, False),   # stride 2 into 4x4
    ((1, 128, 2, 2), 128, 3, 1, 1, False),  # the 2x2 stage, one image
    ((2, 64, 2, 2), 64, 3, 1, 1, False),    # whole image, a batch of 2
    ((3, 32, 4, 4), 64, 1, 1, 0, False),    # a 1x1 conv (one band) of 3 images: 48 rows
    ((2, 64, 4, 4), 128, 1, 2, 0, True),    # a strided 1x1 of 2 images, chained
    ((8, 64, 2, 2), 64, 3, 1, 1, True),     # whole image, a batch of 8, chained
    ((2, 64, 4, 4), 64, 3, 1, 1, False),    # row bands (top, middle, bottom rows) of 2 images
    ((8, 64, 4, 4), 64, 3, 1, 1, True),     # ResNet's 4x4 stage at batch 8: bands, chained
    ((8, 32, 8, 8), 64, 3, 2, 1, True),     # stride 2 into 4x4: two bands, chained
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("xshape,cout,k,stride,padding,chain", CASES)
def test_residual_and_relu_run_in_the_product(target, xshape, cout, k, stride, padding, chain):
    g, feeds = _block(xshape, cout, k, stride, padding, chain=chain)
    m = compile(g, target=target)
    _check(m, g, feeds, 2e-5)
    kernels = _kernels(m)
    # no Add, Clamp or runtime fused step after the products
    assert not {"RuntimeFused", "AddElementwise", "Clamp", "Relu"} & set(kernels), kernels
    products = [s for s in m.plan.steps if getattr(getattr(s, "key", None), "op", None) is not None
                and s.key.op.name == "FusedLinear"]
    assert products[-1].params.residual and products[-1].params.clamp_min == 0.0, products[-1]


@pytest.mark.parametrize("target", TARGETS)
def test_f64_and_no_relu(target):
    # f64 (the epilogue takes f32 and f64), and a residual without a clamp
    g, feeds = _block((1, 32, 4, 4), 64, dtype="f64", relu=False)
    m = compile(g, target=target)
    _check(m, g, feeds, 1e-12)
    assert _kernels(m).count("FusedLinear") == 1 and "RuntimeFused" not in _kernels(m)


@pytest.mark.parametrize("target", TARGETS)
def test_each_band_takes_its_rows_of_the_skip(target):
    # a few-pixel conv of 2 images is banded (conv2d._row_bands): each band's
    # product adds a channels-last copy of its own rows of the skip and clamps
    g, feeds = _block((2, 64, 4, 4), 64)
    m = compile(g, target=target)
    _check(m, g, feeds, 2e-5)
    products = [s for s in m.plan.steps if getattr(getattr(s, "key", None), "op", None) is not None
                and s.key.op.name == "FusedLinear"]
    assert [tuple(s.output_specs[0].shape) for s in products] == [(2, 4, 64), (2, 8, 64), (2, 4, 64)]
    assert all(s.params.residual and s.params.clamp_min == 0.0 for s in products), products


@pytest.mark.parametrize("target", TARGETS)
def test_bands_with_the_epilogue_same_bits_as_without(target):
    # the bands' epilogue adds the bias, the skip and clamps in the recipe's
    # order: the same bits as the bands' products followed by the fused
    # bias/skip/ReLU kernel (conv2d.product_epilogue off)
    from unittest import mock
    from compiler.registry.ops import conv2d as c2d
    g, feeds = _block((8, 64, 4, 4), 64, chain=True)
    with_epilogue = compile(g, target=target)(**feeds)
    with mock.patch.object(c2d, "product_epilogue", lambda types, params: False):
        m = compile(g, target=target)
    assert "RuntimeFused" in _kernels(m), _kernels(m)
    np.testing.assert_array_equal(m(**feeds), with_epilogue)


def test_without_the_fused_kernel_the_recipes_decompose():
    # every fused op decomposed (the base map): the conv's recipe emits the
    # FusedLinear with the epilogue, whose own recipe is MatMul + bias, the
    # skip's Add and the Clamp
    g, feeds = _block((1, 32, 4, 4), 64)
    m = compile(g, pipeline="base-map")
    _check(m, g, feeds, 2e-5)
    assert "FusedLinear" not in _kernels(m) and "Conv2D" not in _kernels(m), _kernels(m)


def _linear_graph(skip_shape, skip_dtype="f32", **params):
    g = Graph()
    a = g.input("a", (4, 8), "f32")
    w = g.constant(np.ones((8, 16), np.float32), name="w")
    b = g.constant(np.zeros(16, np.float32), name="b")
    s = g.input("s", skip_shape, skip_dtype)
    return fused("FusedLinear", a, w, b, s, residual=True, **params)


def test_a_skip_not_of_the_output_type_is_refused():
    with pytest.raises(GraphBuildError, match=r"FusedLinear.*residual must be the output's type"):
        _linear_graph((1, 16))               # a broadcast skip
    with pytest.raises(GraphBuildError, match=r"FusedLinear.*residual must be the output's type"):
        _linear_graph((4, 16), "f64")        # another dtype
    with pytest.raises(GraphBuildError, match=r"FusedLinear.*clamp and gelu"):
        _linear_graph((4, 16), clamp_min=0.0, gelu=True)
    with pytest.raises(GraphBuildError, match=r"FusedLinear.*clamp_min=1.0 must be <= clamp_max=0.0"):
        _linear_graph((4, 16), clamp_min=1.0, clamp_max=0.0)
