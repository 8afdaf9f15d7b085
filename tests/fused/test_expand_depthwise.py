"""ExpandDepthwise (fused id 27): a 1x1 expansion conv fused into the
depthwise conv reading it (``lowering/fused_expand.py``). The kernel against
the reference interpreter on both ISA levels (strides 1 and 2, 3x3 and 5x5,
ReLU6 and a depthwise SiLU, images whose pixels end in partial vectors, a batch cut by
images and one image cut by channel blocks); ``fuel-fuse`` makes it from the
two Conv2Ds only where it may (``fuse_expand_depthwise``), and the recipe (the
two convs) runs where the kernel does not."""
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.codegen import parallel
from compiler.errors import GraphBuildError
from compiler.registry.builders import expand_depthwise, fused
from runtime.dtype import DType

RELU6 = dict(clamp_min=0.0, clamp_max=6.0)
CONV = dict(dilation=(1, 1))
FUSED = "ExpandDepthwise[f32,f32,f32,f32,f32,f32] (mlir-cpu-fused)"


def _weights(cin, ce, k, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((ce, cin, 1, 1)).astype(np.float32) * 0.4,
            rng.standard_normal(ce).astype(np.float32),
            rng.standard_normal((ce, 1, k, k)).astype(np.float32) * 0.4,
            rng.standard_normal(ce).astype(np.float32)]


def _two_convs(xs, ce, k, stride, act, *, extra_user=False, seed=0):
    """x -> 1x1 conv + act -> depthwise kxk conv + act, as an importer writes it."""
    g = Graph()
    x = g.input("x", xs, DType.F32)
    we, be, wd, bd = [g.constant(a) for a in _weights(xs[1], ce, k, seed)]
    e = fused("Conv2D", x, we, be, stride=(1, 1), padding=(0, 0), groups=1, **CONV)
    ea, da = act.split("/") if "/" in act else (act, act)   # the expansion's, the depthwise's
    e = e.clamp(0.0, 6.0) if ea == "relu6" else e * e.sigmoid()
    y = fused("Conv2D", e, wd, bd, stride=(stride, stride), padding=(k // 2, k // 2),
              groups=ce, **CONV)
    y = y.clamp(0.0, 6.0) if da == "relu6" else y * y.sigmoid()
    g.output(y, name="y")
    if extra_user:
        g.output(e, name="e")
    return g


def _x(xs, seed=1):
    return np.random.default_rng(seed).standard_normal(xs).astype(np.float32)


CASES = [
    # (x shape, Ce, kernel, stride, activation)
    ((2, 16, 20, 20), 96, 3, 2, "relu6"),
    ((2, 8, 14, 14), 48, 3, 1, "relu6"),      # 196 pixels: a 4-lane tail
    ((2, 12, 7, 7), 32, 3, 1, "relu6"),       # 49 pixels: 32 + 16 + 1
    ((2, 8, 14, 14), 16, 5, 2, "relu6/silu"),
    ((3, 6, 9, 11), 24, 5, 1, "relu6/silu"),
]


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_kernel_matches_the_reference(case, target):
    xs, ce, k, stride, act = CASES[case]
    g = _two_convs(xs, ce, k, stride, act)
    m = compile(g, target=target)
    assert m.kernel_summary() == [FUSED]
    x = _x(xs)
    want = interpret(g, {"x": x})["y"]
    # each conv sums in order as its own kernel does; the SiLU within 4 ulp
    np.testing.assert_allclose(m.run(x=x)["y"], want, rtol=2e-6, atol=2e-6 * np.abs(want).max())


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threads_cut_by_images_or_channel_blocks(threads):
    # 2 images at 3 threads: cut by blocks of 8 channels
    for xs in ((3, 8, 14, 14), (2, 8, 14, 14)):
        g = _two_convs(xs, 48, 3, 2, "relu6")
        m = compile(g, target="cpu")
        x = _x(xs)
        with parallel.threads(threads):
            got = m.run(x=x)["y"]
        np.testing.assert_allclose(got, interpret(g, {"x": x})["y"], rtol=2e-6, atol=1e-5)


def test_not_fused_where_it_may_not_be():
    # the expanded tensor has another user: it must be written anyway
    g = _two_convs((2, 8, 14, 14), 48, 3, 1, "relu6", extra_user=True)
    assert not any("ExpandDepthwise" in k for k in compile(g, target="cpu").kernel_summary())
    # one image: the two kernels ran faster (``fused_expand.EXPAND_MIN_BATCH``)
    g = _two_convs((1, 8, 14, 14), 48, 3, 1, "relu6")
    assert not any("ExpandDepthwise" in k for k in compile(g, target="cpu").kernel_summary())
    # a SiLU on the expansion (slower on AVX2, no faster on AVX-512)
    g = _two_convs((2, 8, 14, 14), 48, 3, 1, "silu")
    assert not any("ExpandDepthwise" in k for k in compile(g, target="cpu").kernel_summary())
    # Ce not a multiple of the kernel's channel block (8)
    g = _two_convs((2, 8, 14, 14), 20, 3, 1, "relu6")
    assert not any("ExpandDepthwise" in k for k in compile(g, target="cpu").kernel_summary())


@pytest.mark.parametrize("case", [0, 3])
def test_recipe_runs_the_two_convs(case):
    xs, ce, k, stride, act = CASES[case]
    g = Graph()
    x = g.input("x", xs, DType.F32)
    epi = dict(expand_clamp_min=0.0, expand_clamp_max=6.0, **RELU6) if act == "relu6" \
        else dict(expand_silu=True, silu=True)
    act = "silu" if act != "relu6" else act   # a SiLU on both: the recipe takes any epilogue
    g.output(expand_depthwise(x, *[g.constant(a) for a in _weights(xs[1], ce, k)],
                              stride=stride, padding=k // 2, **epi), name="y")
    m = compile(g, pipeline="base-map")      # every fused op decomposed
    assert not any("ExpandDepthwise" in s for s in m.kernel_summary())
    xv = _x(xs)
    want = interpret(_two_convs(xs, ce, k, stride, act), {"x": xv})["y"]
    np.testing.assert_allclose(interpret(g, {"x": xv})["y"], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(m.run(x=xv)["y"], want, rtol=2e-6, atol=2e-6 * np.abs(want).max())


def test_shape_errors():
    g = Graph()
    x = g.input("x", (1, 8, 6, 6), DType.F32)
    we, be = g.constant(np.zeros((16, 8, 1, 1), np.float32)), g.constant(np.zeros(16, np.float32))
    with pytest.raises(GraphBuildError, match="we must be"):
        expand_depthwise(x, we, be, g.constant(np.zeros((16, 2, 3, 3), np.float32)), be,
                         padding=1)
    with pytest.raises(GraphBuildError):
        expand_depthwise(x, we, be, g.constant(np.zeros((8, 1, 3, 3), np.float32)), be,
                         padding=1)
