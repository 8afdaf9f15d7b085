"""The Conv2D clamp epilogue: ``fuel-fuse`` folds a Relu / Clamp that is a
conv's only user into its ``clamp_min`` / ``clamp_max``
(``passes.fuse.fold_conv_epilogues``), the kernel applies it where it writes
its output (the direct kernel's crop, the generic path's bias pass) and the
recipe ends with the same Clamp. Numerics against the reference interpreter
of the unfused graph; the pass itself: tests/passes/fuse_conv_epilogue.mlir."""
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.graph.opdef import TensorType
from compiler.registry import default_registry
from compiler.registry.builders import conv2d
from runtime import params as P
from runtime.dtype import DType

# (x shape, w shape, stride, padding, groups): the direct kernel (stride 1 and
# 2), the depthwise direct kernel (stride 1 and 2), grouped (the generic
# path), a 1x1 conv (the pointwise matmul kernel) and one the kernel does not
# take (Cout not a multiple of 8: the im2col/matmul recipe)
CONVS = {
    "direct": ((2, 5, 9, 11), (7, 5, 3, 3), 1, 1, 1),
    "direct-s2": ((1, 4, 12, 10), (6, 4, 3, 3), 2, 1, 1),
    "depthwise": ((2, 6, 9, 9), (6, 1, 3, 3), 1, 1, 6),
    "depthwise-s2": ((1, 8, 12, 12), (8, 1, 3, 3), 2, 1, 8),
    "grouped": ((1, 8, 7, 7), (8, 4, 3, 3), 1, 1, 2),
    "pointwise": ((2, 6, 5, 5), (8, 6, 1, 1), 1, 0, 1),
    "pointwise-recipe": ((2, 6, 5, 5), (9, 6, 1, 1), 1, 0, 1),
}
ACTS = {"relu": lambda y: y.relu(), "relu6": lambda y: y.clamp(0.0, 6.0),
        "upper": lambda y: y.clamp(-np.inf, 0.25), "silu": lambda y: y * y.sigmoid(), "silu-op": lambda y: y.silu(),
        "gelu": lambda y: y.gelu()}


def _graph(conv, act, dtype="f32", extra_use=False):
    xs, ws, s, p, g = CONVS[conv]
    rng = np.random.default_rng(0)
    npdt = np.float32 if dtype == "f32" else np.float64
    gr = Graph()
    x = gr.input("x", xs, dtype)
    w = gr.constant((rng.standard_normal(ws) * 0.5).astype(npdt), name="w")
    b = gr.constant(rng.standard_normal(ws[0]).astype(npdt), name="b")
    y = conv2d(x, w, b, stride=s, padding=p, groups=g)
    gr.output(ACTS[act](y), name="y")
    if extra_use:
        gr.output(y, name="pre")
    return gr, rng.standard_normal(xs).astype(npdt) * 2


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("conv", sorted(CONVS))
def test_clamped_conv_matches_the_reference(conv, act):
    gr, x = _graph(conv, act)
    x.reshape(-1)[::7] = np.nan                      # NaN stays NaN, as Relu/Clamp keep it
    m = compile(gr, target="cpu")
    got, want = m.run(x=x)["y"], interpret(gr, {"x": x})["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    summary = m.kernel_summary()
    if conv != "pointwise-recipe":   # the fused kernel computes the activation: one kernel
        assert summary == ["Conv2D[f32,f32,f32,f32] (mlir-cpu-fused)"], summary


@pytest.mark.parametrize("act", ["relu6", "silu", "gelu"])
@pytest.mark.parametrize("conv", ["direct", "depthwise-s2", "pointwise"])
def test_clamped_conv_on_the_avx2_baseline_and_in_f64(conv, act):
    for target, dtype in (("cpu:x86-64-v3", "f32"), ("cpu", "f64")):
        gr, x = _graph(conv, act, dtype)
        m = compile(gr, target=target)
        np.testing.assert_allclose(m.run(x=x)["y"], interpret(gr, {"x": x})["y"],
                                   rtol=1e-6 if dtype == "f32" else 1e-12, atol=1e-6)
        # (an f64 gelu does not fold: its erf would be a libm call per element)
        assert len(m.kernel_summary()) == 1 + (act == "gelu" and dtype == "f64"), \
            m.kernel_summary()


def test_an_activation_of_a_conv_used_elsewhere_stays_a_kernel_of_its_own():
    gr, x = _graph("direct", "relu", extra_use=True)
    m = compile(gr, target="cpu")
    out, want = m.run(x=x), interpret(gr, {"x": x})
    for name in ("y", "pre"):
        np.testing.assert_allclose(out[name], want[name], rtol=1e-5, atol=1e-5)
    assert any(k.startswith("Relu") for k in m.kernel_summary()), m.kernel_summary()
    assert (out["pre"] < 0).any()                     # the conv's own output is unclamped


def test_clamp_bounds_out_of_order_are_refused_naming_them():
    f32 = DType.F32
    types = [TensorType((1, 2, 5, 5), f32), TensorType((3, 2, 3, 3), f32)]
    params = dict(stride=(1, 1), padding=(1, 1), groups=1, dilation=(1, 1),
                  clamp_min=6.0, clamp_max=0.0)
    with pytest.raises(Exception, match="clamp_min=6.0 must be <= clamp_max=0.0"):
        default_registry()["Conv2D"].infer(types, params)
    with pytest.raises(P.OpParamsError, match="clamp_min 6.0 must be <= clamp_max 0.0"):
        P.Conv2D((1, 2, 5, 5), (3, 2, 3, 3), (1, 3, 5, 5), clamp_min=6.0, clamp_max=0.0)


@pytest.mark.parametrize("act", ["gelu", "relu"])
def test_a_conv1d_activation_behind_its_squeeze_folds(act):
    # a conv1d as exporters' importers make it: Conv2D over [N, C, 1, W], then
    # the height squeezed away, then the activation
    rng = np.random.default_rng(4)
    gr = Graph()
    x = gr.input("x", (2, 8, 1, 40), "f32")
    w = gr.constant((rng.standard_normal((16, 8, 1, 3)) * 0.4).astype(np.float32), name="w")
    b = gr.constant(rng.standard_normal(16).astype(np.float32), name="b")
    y = conv2d(x, w, b, stride=(1, 2), padding=(0, 1)).reshape(2, 16, 20)
    gr.output(ACTS[act](y), name="y")
    m = compile(gr, target="cpu")
    xv = rng.standard_normal((2, 8, 1, 40)).astype(np.float32)
    np.testing.assert_allclose(m.run(x=xv)["y"], interpret(gr, {"x": xv})["y"],
                               rtol=1e-5, atol=1e-5)
    assert m.kernel_summary() == ["Conv2D[f32,f32,f32,f32] (mlir-cpu-fused)"], m.kernel_summary()


def test_gelu_with_another_activation_is_refused_naming_both():
    f32 = DType.F32
    types = [TensorType((1, 2, 5, 5), f32), TensorType((3, 2, 3, 3), f32)]
    params = dict(stride=(1, 1), padding=(1, 1), groups=1, dilation=(1, 1), gelu=True,
                  clamp_min=0.0)
    with pytest.raises(Exception, match="gelu epilogue excludes the clamp and silu"):
        default_registry()["Conv2D"].infer(types, params)
    with pytest.raises(P.OpParamsError, match="gelu epilogue excludes the clamp and silu"):
        P.Conv2D((1, 2, 5, 5), (3, 2, 3, 3), (1, 3, 5, 5), silu=True, gelu=True)


def test_kernel_params_carry_the_clamp_and_round_trip():
    p = P.Conv2D((1, 2, 5, 5), (3, 2, 3, 3), (1, 3, 5, 5), (1, 1), (1, 1), clamp_min=0.0)
    q = P.OpParams.from_dict(p.to_dict())
    assert q == p and q.clamp_min == 0.0 and q.clamp_max is None
    # an older manifest without the fields reads as an unclamped conv
    d = p.to_dict()
    del d["clamp_min"], d["clamp_max"]
    assert P.OpParams.from_dict(d).clamp_min is None


def _silu_ulps(target, conv):
    """Max ulp distance of the conv's silu epilogue from silu in float64
    rounded to f32, over a sweep of every binade to |v| = 100 and the edges;
    the conv is an identity (1x1 eye, or a depthwise 3x3 with one centre
    tap), so its output is v exactly."""
    v = np.concatenate([np.geomspace(1e-30, 100, 60000), np.linspace(-100, 100, 60001)])
    v = np.concatenate([v, -v, [0.0, -0.0, 88.0, -88.0, -88.5, -87.9, 1e-45]]).astype(np.float32)
    c = 8
    v = np.concatenate([v, np.zeros(-len(v) % (c * 64), np.float32)])
    x = v.reshape(1, c, -1, 64)
    gr = Graph()
    xi = gr.input("x", x.shape, "f32")
    if conv == "pointwise":
        w = np.eye(c, dtype=np.float32).reshape(c, c, 1, 1)
        y = conv2d(xi, gr.constant(w, name="w"), padding=0)
    else:
        w = np.zeros((c, 1, 3, 3), np.float32)
        w[:, 0, 1, 1] = 1.0
        y = conv2d(xi, gr.constant(w, name="w"), padding=1, groups=c)
    gr.output(y * y.sigmoid(), name="y")
    m = compile(gr, target=target)
    assert len(m.kernel_summary()) == 1, m.kernel_summary()
    got = m.run(x=x)["y"].reshape(-1)
    want = (v.astype(np.float64) / (1.0 + np.exp(-v.astype(np.float64)))).astype(np.float32)
    ulp = np.spacing(np.abs(want)).astype(np.float64)
    err = np.abs(got.astype(np.float64) - want) / ulp
    big = v < -88.0               # the sigmoid is 0 there: v * 0 (true |silu| < 6e-37)
    assert np.all(got[big] == 0) and np.all(np.abs(want[big]) < 6e-37)
    return float(err[~big].max())


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
@pytest.mark.parametrize("conv", ["pointwise", "depthwise"])
def test_silu_epilogue_is_within_a_few_ulp_on_both_isas(conv, target):
    # the reciprocal is an estimate and one Newton step (AVX-512 rcp14: 28 bits;
    # AVX2 rcp: 23 bits) and a degree-5 exp: measured 4 ulp (AVX-512), 3 (AVX2)
    assert _silu_ulps(target, conv) <= 4


def test_silu_epilogue_keeps_nan_and_infinities_as_the_recipe():
    x = np.array([np.nan, np.inf, -np.inf, -1000.0, 1000.0, -0.0, 0.0, 1.0], np.float32)
    x = np.tile(x, 8 * 64 // 8).reshape(1, 8, 1, 64)
    gr = Graph()
    xi = gr.input("x", x.shape, "f32")
    # a depthwise 1x1 of weight 1: y = x exactly (a channel mix would add 0 * inf)
    y = conv2d(xi, gr.constant(np.ones((8, 1, 1, 1), np.float32), name="w"), groups=8)
    gr.output(y * y.sigmoid(), name="y")
    m = compile(gr, target="cpu")
    assert len(m.kernel_summary()) == 1, m.kernel_summary()
    got = m.run(x=x)["y"]
    want = interpret(gr, {"x": x})["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))   # NaN, -inf * 0
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-6)
