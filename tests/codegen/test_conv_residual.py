"""The Conv2D residual: ``fuel-fuse`` folds ``Add(conv, skip)`` into the
conv's ``residual`` operand (``passes.fuse.fold_conv_residuals``) and a Relu
after it into the clamp (ResNet's ``Relu(conv + skip)``), the kernels add
the skip in their epilogue (the pointwise matmul tiles, the direct kernel's
crop, the stem's tiles, the generic path's bias pass), and the recipe adds it
after the bias. Numerics against the reference interpreter of the unfused
graph; the pass itself: tests/passes/fuse_conv_epilogue.mlir."""
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.errors import GraphBuildError
from compiler.graph.opdef import TensorType
from compiler.registry import default_registry
from compiler.registry.builders import conv2d
from runtime import params as P
from runtime.dtype import DType

# (x shape, w shape, stride, padding, groups, bias): every kernel path and
# the recipe (Cout not a multiple of 8 on the pointwise path; few pixels)
CONVS = {
    "direct": ((2, 5, 9, 11), (7, 5, 3, 3), 1, 1, 1, True),
    "direct-s2": ((1, 4, 12, 10), (6, 4, 3, 3), 2, 1, 1, True),
    "depthwise": ((2, 6, 9, 9), (6, 1, 3, 3), 1, 1, 6, True),
    "depthwise-s2": ((1, 8, 12, 12), (8, 1, 3, 3), 2, 1, 8, False),
    "grouped": ((1, 8, 7, 7), (8, 4, 3, 3), 1, 1, 2, True),
    "pointwise": ((2, 6, 5, 5), (8, 6, 1, 1), 1, 0, 1, True),
    "pointwise-nobias": ((2, 16, 9, 9), (16, 16, 1, 1), 1, 0, 1, False),
    "stem": ((2, 3, 16, 16), (8, 3, 3, 3), 2, 1, 1, True),
    # 22 columns: a block of 16 and the last 16 (fused_conv._stem_column_blocks)
    "stem-overlap": ((1, 3, 6, 44), (8, 3, 3, 3), 2, 1, 1, True),
    "pointwise-recipe": ((2, 6, 5, 5), (9, 6, 1, 1), 1, 0, 1, True),
    "few-pixels-recipe": ((2, 32, 4, 4), (32, 32, 3, 3), 1, 1, 1, True),
}
RECIPE = ("pointwise-recipe", "few-pixels-recipe")


def _graph(conv, act=None, dtype="f32", skip_first=False, batch=None):
    xs, ws, s, p, g, has_bias = CONVS[conv]
    rng = np.random.default_rng(1)
    npdt = np.float32 if dtype == "f32" else np.float64
    gr = Graph()
    x = gr.input("x", (batch or xs[0],) + xs[1:], dtype)
    w = gr.constant((rng.standard_normal(ws) * 0.5).astype(npdt), name="w")
    b = gr.constant(rng.standard_normal(ws[0]).astype(npdt), name="b") if has_bias else None
    y = conv2d(x, w, b, stride=s, padding=p, groups=g)
    oshape = (xs[0],) + tuple(y.shape[1:])
    skip = gr.input("skip", (batch or oshape[0],) + oshape[1:], dtype)
    y = skip + y if skip_first else y + skip
    gr.output(y.relu() if act == "relu" else y, name="y")
    return gr, {"x": rng.standard_normal(xs).astype(npdt) * 2,
                "skip": rng.standard_normal(oshape).astype(npdt)}


def _kernels(n_in, dtype="f32"):
    return [f"Conv2D[{','.join([dtype] * (n_in + 1))}] (mlir-cpu-fused)"]


@pytest.mark.parametrize("act", [None, "relu"])
@pytest.mark.parametrize("conv", sorted(CONVS))
def test_conv_plus_skip_is_one_kernel_and_matches_the_reference(conv, act):
    gr, feeds = _graph(conv, act, skip_first=conv == "direct")
    m = compile(gr, target="cpu")
    np.testing.assert_allclose(m.run(**feeds)["y"], interpret(gr, feeds)["y"],
                               rtol=1e-5, atol=1e-5)
    if conv not in RECIPE:   # x, w, [bias], skip -> out: the add and the relu are gone
        assert m.kernel_summary() == _kernels(3 + CONVS[conv][5]), m.kernel_summary()


@pytest.mark.parametrize("conv", ["direct", "depthwise-s2", "pointwise", "stem", "stem-overlap"])
def test_residual_on_the_avx2_baseline_and_in_f64(conv):
    for target, dtype in (("cpu:x86-64-v3", "f32"), ("cpu", "f64")):
        gr, feeds = _graph(conv, "relu", dtype)
        m = compile(gr, target=target)
        np.testing.assert_allclose(m.run(**feeds)["y"], interpret(gr, feeds)["y"],
                                   rtol=1e-6 if dtype == "f32" else 1e-12, atol=1e-6)
        assert m.kernel_summary() == _kernels(3 + CONVS[conv][5], dtype), m.kernel_summary()


@pytest.mark.parametrize("conv", ["direct", "pointwise"])
def test_residual_threads_cut_the_skip_with_the_output(conv, monkeypatch):
    # batch 1: the direct kernel splits by output channels, so the skip is cut
    # on its channel axis; batch 4: by images
    for n in (1, 4):
        xs, ws, s, p, g, has_bias = CONVS[conv]
        CONVS["tmp"] = ((n, 16) + xs[2:], (64, 16) + ws[2:], s, p, g, has_bias)
        try:
            gr, feeds = _graph("tmp")
        finally:
            del CONVS["tmp"]
        monkeypatch.setenv("FUELC_NUM_THREADS", "3")
        m = compile(gr, target="cpu")
        np.testing.assert_allclose(m.run(**feeds)["y"], interpret(gr, feeds)["y"],
                                   rtol=1e-5, atol=1e-5)


def test_a_broadcast_skip_folds_and_a_shared_conv_keeps_its_add():
    rng = np.random.default_rng(2)
    gr = Graph()
    x = gr.input("x", (1, 4, 6, 6), "f32")
    w = gr.constant(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), name="w")
    y = conv2d(x, w, padding=1)
    # a broadcast plane is a BroadcastTo of the conv's type: the kernel reads it as a view
    gr.output(y + gr.input("bias_plane", (1, 8, 1, 1), "f32"), name="a")
    y2 = conv2d(x, w, padding=1)
    gr.output(y2 + gr.input("s", (1, 8, 6, 6), "f32"), name="b")
    gr.output(y2, name="pre")                                          # a second use
    m = compile(gr, target="cpu")
    feeds = {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32),
             "bias_plane": rng.standard_normal((1, 8, 1, 1)).astype(np.float32),
             "s": rng.standard_normal((1, 8, 6, 6)).astype(np.float32)}
    got, want = m.run(**feeds), interpret(gr, feeds)
    for k in ("a", "b", "pre"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
    assert sorted(m.kernel_summary()) == ["AddElementwise[f32,f32,f32] (mlir-cpu)",
                                          "Conv2D[f32,f32,f32,f32] (mlir-cpu-fused)",
                                          "Conv2D[f32,f32,f32] (mlir-cpu-fused)"], m.kernel_summary()


def test_a_residual_of_another_shape_or_a_missing_one_is_refused_naming_it():
    f32 = DType.F32
    conv = default_registry()["Conv2D"]
    x, w = TensorType((2, 4, 6, 6), f32), TensorType((8, 4, 3, 3), f32)
    params = dict(padding=(1, 1), residual=True)
    with pytest.raises(GraphBuildError, match=r"Conv2D.*residual must have the output's shape "
                                              r"\[2, 8, 6, 6\]"):
        conv.infer([x, w, TensorType((2, 8, 1, 1), f32)], params)
    with pytest.raises(GraphBuildError, match=r"Conv2D.*takes 3 to 4 input\(s\) \(x, w, bias, "
                                              r"residual\), got 2"):
        conv.infer([x, w], params)
    # without the param, a fourth operand is one too many
    with pytest.raises(GraphBuildError, match=r"takes 2 to 3 input\(s\)"):
        conv.infer([x, w, TensorType((8,), f32), TensorType((2, 8, 6, 6), f32)], {})


def test_kernel_params_carry_the_residual_and_round_trip():
    p = P.Conv2D((1, 2, 5, 5), (3, 2, 3, 3), (1, 3, 5, 5), (1, 1), (1, 1), residual=True)
    q = P.OpParams.from_dict(p.to_dict())
    assert q == p and q.residual
    d = p.to_dict()
    del d["residual"]   # an older manifest: no residual
    assert not P.OpParams.from_dict(d).residual
