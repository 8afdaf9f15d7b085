"""The stem Conv2D kernel (few input channels, stride 2: an image net's first
conv, ``lowering/fused_conv.py: _stem``, the cpu strategy ``conv-stem``,
``transforms/stem.py``): every tap of the stacked stride phases accumulated in
register tiles whose bias and activation run before the one store. Numerics
against the reference interpreter on both ISA levels (bias, clamp, SiLU, GELU, f32
and f64, batch 1 and 3, a run-time batch, partial tiles, threads), the tiles
it is lowered to, and the convs the class refuses, which keep their kernel."""
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.codegen.cpu import pipeline
from compiler.codegen.family import CONTRACT_ATTR, DIRECT_CONV_ATTR, STEM_ATTR, \
    single_op_linalg_text
from compiler.codegen.lowering.fused_conv import STEM_CHANNELS, _stem_column_blocks, stem
from compiler.graph.opdef import TensorType
from compiler.registry.builders import conv2d
from runtime.dtype import DType

KERNEL = ["Conv2D[f32,f32,f32,f32] (mlir-cpu-fused)"]


def _graph(xs, cout, k, pad, dtype="f32", bias=True, act=None, seed=1, stride=(2, 2)):
    rng = np.random.default_rng(seed)
    npdt = np.float32 if dtype == "f32" else np.float64
    g = Graph()
    x = g.input("x", xs, dtype)
    kh, kw = (k, k) if isinstance(k, int) else k
    w = g.constant((rng.standard_normal((cout, xs[1], kh, kw)) * 0.3).astype(npdt), name="w")
    b = g.constant(rng.standard_normal(cout).astype(npdt), name="b") if bias else None
    y = conv2d(x, w, b, stride=stride, padding=pad if isinstance(pad, tuple) else (pad, pad))
    if act == "relu6":
        y = y.clamp(0.0, 6.0)
    elif act == "silu":
        y = y * y.sigmoid()
    elif act == "gelu":
        y = y.gelu()
    g.output(y, name="y")
    shape = tuple(2 if isinstance(d, str) else d for d in xs)
    return g, (rng.standard_normal(shape) * 2).astype(npdt)


# (x shape, Cout, kernel, padding, activation): ResNet's 7x7 and MobileNet's
# 3x3 stems at small sizes, odd sizes (a partial last column tile), Cout not a
# multiple of the tile's rows, one or four input channels, a rectangular kernel
CASES = [((1, 3, 19, 21), 16, 7, 3, "relu6"),
         ((3, 3, 16, 16), 24, 3, 1, "relu6"),
         ((1, 3, 34, 34), 32, 3, 1, "silu"),
         ((2, 1, 13, 11), 12, 5, 0, None),
         ((1, 4, 12, 18), 10, (3, 4), (1, 2), "silu")]


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_stem_matches_the_reference(case, target):
    xs, cout, k, pad, act = CASES[case]
    g, x = _graph(xs, cout, k, pad, act=act)
    if act == "relu6":
        x.reshape(-1)[::13] = np.nan                 # NaN stays NaN through the clamp
    m = compile(g, target=target)
    got, want = m.run(x=x)["y"], interpret(g, {"x": x})["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert m.kernel_summary() == KERNEL, m.kernel_summary()


# conv1d front ends (a Conv2D over [N, C, 1, W]) with a stride above 2: a
# wav2vec2-style 1->Cout k10 s5, a stride of 3 with padding, two channels
CONV1D = [((2, 1, 1, 803), 16, (1, 10), (0, 0), (1, 5), None),
          ((1, 2, 1, 97), 12, (1, 7), (0, 3), (1, 3), "relu6"),
          ((3, 1, 1, 200), 8, (1, 4), (0, 1), (1, 3), "silu")]


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
@pytest.mark.parametrize("case", range(len(CONV1D)))
def test_conv1d_stem_matches_the_reference(case, target):
    xs, cout, k, pad, stride, act = CONV1D[case]
    g, x = _graph(xs, cout, k, pad, act=act, stride=stride)
    m = compile(g, target=target)
    np.testing.assert_allclose(m.run(x=x)["y"], interpret(g, {"x": x})["y"],
                               rtol=1e-5, atol=1e-5)
    assert m.kernel_summary() == KERNEL, m.kernel_summary()


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
@pytest.mark.parametrize("batch,bias", [(1, False), ("batch", True)])
def test_conv1d_stem_takes_its_gelu(target, batch, bias):
    # wav2vec2's first conv (no bias): its erf GELU in the register tiles, one
    # kernel (a partial last tile: 158 columns); a bias and a run-time batch
    g, x = _graph((batch, 1, 1, 795), 12, (1, 10), (0, 0), bias=bias, act="gelu",
                  stride=(1, 5))
    x[0, 0, 0, ::7] = np.nan
    m = compile(g, target=target)
    want = interpret(g, {"x": x})["y"]
    assert np.isnan(want).any()
    got = m.run(x=x)["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    kernels = [k for k in m.kernel_summary() if not k.startswith("symbolic module")]
    assert kernels == ["Conv2D[f32,f32,f32" + (",f32]" if bias else "]") + " (mlir-cpu-fused)"
                       + (" [run-time extents]" if batch == "batch" else "")], kernels


def test_conv1d_stem_keeps_an_f64_gelu_a_kernel_of_its_own():
    # f64 erf has no vector expansion: the GeluErf stays a kernel of its own
    g, x = _graph((2, 1, 1, 203), 8, (1, 10), (0, 0), "f64", act="gelu", stride=(1, 5))
    m = compile(g, target="cpu")
    np.testing.assert_allclose(m.run(x=x)["y"], interpret(g, {"x": x})["y"],
                               rtol=1e-12, atol=1e-12)
    assert [k.split("[")[0] for k in m.kernel_summary()] == ["Conv2D", "GeluErfElementwise"], \
        m.kernel_summary()


@pytest.mark.parametrize("bias,act", [(False, None), (True, None), (False, "relu6"),
                                      (True, "silu")])
def test_stem_in_f64_with_and_without_bias(bias, act):
    g, x = _graph((3, 3, 15, 15), 8, 3, 1, "f64", bias=bias, act=act)
    m = compile(g, target="cpu:x86-64-v3")
    np.testing.assert_allclose(m.run(x=x)["y"], interpret(g, {"x": x})["y"],
                               rtol=1e-12, atol=1e-12)
    assert m.kernel_summary() == ["Conv2D[f64,f64,f64" + (",f64]" if bias else "]")
                                  + " (mlir-cpu-fused)"], m.kernel_summary()


def test_stem_with_a_run_time_batch():
    g, _ = _graph(("batch", 3, 20, 20), 16, 7, 3, act="relu6")
    m = compile(g, target="cpu")
    rng = np.random.default_rng(3)
    for n in (1, 3):
        x = rng.standard_normal((n, 3, 20, 20)).astype(np.float32)
        np.testing.assert_allclose(m(x=x), interpret(g, {"x": x})["y"], rtol=1e-5, atol=1e-5)


def test_conv1d_stem_with_a_run_time_batch():
    # one kernel with the batch at run time (a symbolic model's one .fuel file)
    g, _ = _graph(("batch", 1, 1, 803), 16, (1, 10), (0, 0), stride=(1, 5))
    m = compile(g, target="cpu")
    rng = np.random.default_rng(4)
    for n in (1, 3):
        x = rng.standard_normal((n, 1, 1, 803)).astype(np.float32)
        np.testing.assert_allclose(m(x=x), interpret(g, {"x": x})["y"], rtol=1e-5, atol=1e-5)
    assert m.kernel_summary()[1:] == [KERNEL[0] + " [run-time extents]"], m.kernel_summary()


@pytest.mark.parametrize("batch", [1, 3])
def test_stem_split_over_threads(batch):
    # batch 1: tiles of output channels; batch 3: tiles of 2 and 1 images
    from compiler.codegen import parallel
    before = parallel.num_threads()
    parallel.set_num_threads(2)
    try:
        g, x = _graph((batch, 3, 64, 64), 32, 7, 3, act="relu6")
        m = compile(g, target="cpu")
        np.testing.assert_allclose(m.run(x=x)["y"], interpret(g, {"x": x})["y"],
                                   rtol=1e-5, atol=1e-5)
        assert m.kernel_summary() == KERNEL, m.kernel_summary()
    finally:
        parallel.set_num_threads(before)


def _text(x=(2, 3, 18, 18), w=(16, 3, 7, 7), dtype=DType.F32, **params):
    params = dict(dict(stride=(2, 2), padding=(w[2] // 2, w[3] // 2), groups=1,
                       dilation=(1, 1)), **params)
    ts = [TensorType(x, dtype), TensorType(w, dtype), TensorType((w[0],), dtype)]
    return single_op_linalg_text("Conv2D", params, ts, False, "cpu")


@pytest.mark.parametrize("target,dtype,tile,vec", [
    ("cpu:x86-64-v3", DType.F32, "6x16", "v16f32"),
    ("cpu:skylake-avx512", DType.F32, "16x16", "v16f32"),
    ("cpu:x86-64-v3", DType.F64, "6x8", "v8f64"),
    ("cpu:skylake-avx512", DType.F64, "8x8", "v8f64"),
])
def test_stem_strategy_keeps_every_tap_in_registers(target, dtype, tile, vec):
    text = _text(x=(2, 3, 18, 40), dtype=dtype, clamp_min=0.0)   # 20 columns: 16 + 4
    assert STEM_ATTR in text and CONTRACT_ATTR in text and DIRECT_CONV_ATTR not in text
    r = pipeline.lower(text, ["kernel"], target=target, keep_ir=True)
    elt = "f32" if dtype == DType.F32 else "f64"
    assert r.strategy.name == f"conv-stem-{elt}-{tile}", r.strategy.name
    tiled = r.stages["tensor-transform"]
    # the contraction and its epilogue are vector code: the accumulator tile
    # is carried through the tap loops in registers
    mr, nr = tile.split("x")
    assert "linalg.generic" not in tiled, tiled
    assert f"-> (vector<{mr}x1x{nr}x{elt}>)" in tiled, tiled
    assert f"fmuladd.{vec}" in r.llvm_ir


@pytest.mark.parametrize("target,tile", [("cpu:x86-64-v3", "6x16"),
                                         ("cpu:skylake-avx512", "4x16")])
def test_conv1d_stem_with_gelu_takes_the_erf_tiles(target, tile):
    # the erf's temporaries beside 8 AVX-512 accumulators: 4 x 16 tiles there
    text = _text(x=(2, 1, 1, 803), w=(16, 1, 1, 10), stride=(1, 5), padding=(0, 0), gelu=True)
    r = pipeline.lower(text, ["kernel"], target=target, keep_ir=True)
    assert r.strategy.name == f"conv-stem-f32-{tile}", r.strategy.name
    mr, nr = tile.split("x")
    assert f"-> (vector<{mr}x1x{nr}xf32>)" in r.stages["tensor-transform"]


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
def test_a_partial_last_tile_is_the_last_whole_tile_of_columns(target):
    # 1599 columns (wav2vec2's first conv): not 99 tiles and a 15-wide one
    # (a vector<6x1x15xf32> became scalar code) but 99 and the last 16
    # columns, which recompute 15 of the tile before: the same bits as one
    # conv per column block (here: the reference's per-column sums agree,
    # and the overlapping columns equal a conv of the last 16 alone)
    assert _stem_column_blocks(1599) == [(0, 1584), (1583, 16)]
    assert _stem_column_blocks(56) == [(0, 56)] and _stem_column_blocks(16) == [(0, 16)]
    text = _text(x=(1, 1, 1, 8000), w=(16, 1, 1, 10), stride=(1, 5), padding=(0, 0), gelu=True)
    r = pipeline.lower(text, ["kernel"], target=target, keep_ir=True)
    tiled = r.stages["tensor-transform"]
    assert "x15xf32>" not in tiled and "x1x16xf32>" in tiled, tiled
    g, x = _graph((2, 1, 1, 8000), 16, (1, 10), (0, 0), act="gelu", stride=(1, 5))
    m = compile(g, target=target)
    got = m.run(x=x)["y"]
    np.testing.assert_allclose(got, interpret(g, {"x": x})["y"], rtol=1e-5, atol=1e-6)
    # the last 80 samples alone give the last 15 columns: bit for bit the same
    g2, _ = _graph((2, 1, 1, 80), 16, (1, 10), (0, 0), act="gelu", stride=(1, 5))
    tail = compile(g2, target=target).run(x=np.ascontiguousarray(x[..., -80:]))["y"]
    np.testing.assert_array_equal(got[..., -15:], tail)


def test_stem_class():
    assert stem(1, 3, (2, 2), (7, 7)) and stem(1, 3, (2, 2), (3, 3))
    assert stem(1, 1, (2, 2), (5, 5)) and stem(1, STEM_CHANNELS, (2, 2), (3, 4))
    assert not stem(1, STEM_CHANNELS + 1, (2, 2), (3, 3))   # a downsample: _planes
    assert not stem(1, 3, (1, 1), (3, 3))                   # stride 1: one plane already
    assert not stem(1, 3, (2, 1), (3, 3))                   # one axis strided
    assert not stem(1, 3, (2, 2), (3, 3), (2, 2))           # stride and dilation
    assert not stem(1, 3, (2, 2), (1, 1))                   # a phase without taps
    assert not stem(1, 3, (2, 2), (1, 3))
    assert not stem(1, 3, (2, 2), (2, 2))                   # patches: the recipe
    assert not stem(3, 3, (2, 2), (3, 3))                   # depthwise
    assert stem(1, 1, (1, 5), (1, 10)) and stem(1, 2, (1, 3), (1, 7))  # conv1d, stride > 2
    assert not stem(1, 1, (1, 2), (1, 3))                   # conv1d stride 2: _planes
    assert not stem(1, 1, (1, 5), (1, 5))                   # patches
    assert not stem(1, 1, (1, 5), (1, 3))                   # phases without taps
    assert not stem(1, 1, (2, 5), (2, 10))                  # two rows
    # what the class refuses keeps its kernel
    assert DIRECT_CONV_ATTR in _text(x=(1, 8, 18, 18), w=(16, 8, 3, 3))
    assert DIRECT_CONV_ATTR in _text(w=(16, 3, 1, 1), padding=(0, 0))
    assert DIRECT_CONV_ATTR in _text(stride=(1, 1))
    assert STEM_ATTR not in _text(stride=(1, 1))


@pytest.mark.parametrize("xs,cout,k,stride", [((1, 5, 16, 16), 16, 3, (2, 2)),
                                              ((1, 3, 16, 16), 16, 3, (1, 1)),
                                              ((1, 3, 16, 16), 16, 1, (2, 2))])
def test_convs_the_stem_refuses_are_computed_by_their_kernel(xs, cout, k, stride):
    rng = np.random.default_rng(5)
    g = Graph()
    x = g.input("x", xs, "f32")
    w = g.constant(rng.standard_normal((cout, xs[1], k, k)).astype(np.float32), name="w")
    b = g.constant(rng.standard_normal(cout).astype(np.float32), name="b")
    g.output(conv2d(x, w, b, stride=stride, padding=(k // 2, k // 2)).relu(), name="y")
    xv = rng.standard_normal(xs).astype(np.float32)
    m = compile(g, target="cpu")
    np.testing.assert_allclose(m.run(x=xv)["y"], interpret(g, {"x": xv})["y"],
                               rtol=1e-5, atol=1e-5)
