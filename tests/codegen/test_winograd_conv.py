"""Winograd F(2x2, 3x3) on cpu (``lowering/conv_winograd.py``): which convs
take it (``takes``, through ``fuel-prepack-weights``: the FileCheck test
``tests/passes/prepack_winograd.mlir``), the weight transform and its
inverse, the kernel's vector code, and its numerics against a float64
convolution for each epilogue, padding, odd sizes, channel counts off the
register tiles and batches (``FUELC_CPU`` picks the target of ``cpu``)."""
import numpy as np
import pytest

from compiler import Graph, compile
from compiler.codegen.cpu import pipeline as P
from compiler.codegen.family import single_op_linalg_text
from compiler.codegen.lowering import conv_winograd
from compiler.codegen.lowering.conv_winograd import geometry, takes, waste
from compiler.driver import WINOGRAD_MARK
from compiler.graph.opdef import TensorType
from compiler.registry.builders import fused
from compiler.registry.ops.conv2d import from_winograd, winograd_weights
from runtime.dtype import DType

PARAMS = dict(stride=(1, 1), padding=(1, 1), groups=1, dilation=(1, 1))


def _conv64(x, w, b, pad):
    """The cross-correlation in float64 from its definition."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0],) * 2, (pad[1],) * 2))
    ho, wo = xp.shape[2] - 2, xp.shape[3] - 2
    y = np.zeros((x.shape[0], w.shape[0], ho, wo))
    for ky in range(3):
        for kx in range(3):
            y += np.einsum("nchw,oc->nohw", xp[:, :, ky:ky + ho, kx:kx + wo], w[:, :, ky, kx])
    return y + (0 if b is None else b[None, :, None, None])


def _module(xs, cout, pad, bias, skip, clamp, rng, constant_w=True):
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal((cout, xs[1], 3, 3)) / np.sqrt(9 * xs[1])).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    want = _conv64(x.astype(np.float64), w.astype(np.float64),
                   None if b is None else b.astype(np.float64), pad)
    g = Graph()
    feed = {"x": x}
    xi = g.input("x", xs, "f32")
    wi = g.constant(w, name="w") if constant_w else g.input("w", w.shape, "f32")
    if not constant_w:
        feed["w"] = w
    si = None
    if skip:
        feed["s"] = rng.standard_normal(want.shape).astype(np.float32)
        si = g.input("s", want.shape, "f32")
        want = want + feed["s"]
    if clamp:
        want = np.clip(want, *clamp)
    extra = dict(clamp_min=clamp[0], clamp_max=clamp[1]) if clamp else {}
    g.output(fused("Conv2D", xi, wi, None if b is None else g.constant(b, name="b"), si,
                   stride=(1, 1), padding=pad, groups=1, dilation=(1, 1),
                   **({"residual": True} if skip else {}), **extra), "y")
    return g, feed, want


_EPILOGUES = [dict(bias=True), dict(bias=False), dict(bias=True, skip=True),
              dict(bias=True, clamp=(0.0, 6.0)), dict(bias=True, skip=True, clamp=(0.0, None))]


@pytest.mark.parametrize("xs,cout,pad,epilogue", [
    *[((2, 5, 9, 11), 13, (1, 1), e) for e in _EPILOGUES],   # odd sizes: an extra
    # output row, masked columns
    *[((1, 4, 5, 6), 2, (2, 2), e) for e in _EPILOGUES],     # padding 2, 2 channels
    ((1, 8, 8, 8), 8, (1, 1), _EPILOGUES[4]),         # one register tile of tiles
    ((1, 3, 7, 7), 4, (0, 0), _EPILOGUES[2]),         # unpadded, 5x5 output
    ((3, 16, 14, 14), 32, (1, 1), _EPILOGUES[3]),     # batch 3; 32 channels (AVX2 4x6 + 2x4)
    ((1, 7, 10, 13), 7, (0, 0), _EPILOGUES[1]),
    ((1, 32, 56, 56), 40, (1, 1), _EPILOGUES[4]),     # several bands; channels off the tiles
    ((2, 256, 14, 14), 20, (1, 1), _EPILOGUES[2]),    # bands of 2 tile rows and a last of 1
])
def test_winograd_conv_matches_float64(xs, cout, pad, epilogue, monkeypatch):
    # (small images and few channels too, which the rule leaves to the direct kernel)
    monkeypatch.setattr(conv_winograd, "MAX_WASTE", 16.0)
    monkeypatch.setattr(conv_winograd, "MIN_CHANNELS", 1)
    monkeypatch.setattr(conv_winograd, "ONE_IMAGE_MACS", 0)
    rng = np.random.default_rng(sum(xs) + cout)
    g, feed, want = _module(xs, cout, pad, epilogue.get("bias"), epilogue.get("skip"),
                            epilogue.get("clamp"), rng)
    m = compile(g)
    assert m.kernel_summary()[-1].endswith(WINOGRAD_MARK), m.kernel_summary()
    got = m(**feed)
    # the transforms round otherwise than the direct sums: within 1e-6 of the
    # largest output here (float32 sums of up to 256 x 9 terms)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()


def test_winograd_is_within_the_direct_kernels_error():
    """The same conv through the direct kernel (``ENABLED`` off) and
    Winograd: both near the float64 sums, Winograd's error at most a few
    times the direct kernel's."""
    rng = np.random.default_rng(7)
    g, feed, want = _module((1, 64, 28, 28), 64, (1, 1), True, False, None, rng)
    token = conv_winograd.ENABLED.set(False)
    try:
        direct = compile(g)
    finally:
        conv_winograd.ENABLED.reset(token)
    wino = compile(g)
    assert not any(WINOGRAD_MARK in k for k in direct.kernel_summary())
    assert WINOGRAD_MARK in wino.kernel_summary()[-1]
    scale = np.abs(want).max()
    e_direct = np.abs(direct(**feed) - want).max() / scale
    e_wino = np.abs(wino(**feed) - want).max() / scale
    assert e_wino < 1e-6 and e_wino < 8 * max(e_direct, 1e-8), (e_wino, e_direct)


def test_a_weight_input_keeps_the_direct_kernel():
    # the transform is folded at compile time: only a constant w takes it
    rng = np.random.default_rng(1)
    g, feed, want = _module((1, 16, 16, 16), 16, (1, 1), True, False, None, rng,
                            constant_w=False)
    m = compile(g)
    assert not any(WINOGRAD_MARK in k for k in m.kernel_summary()), m.kernel_summary()
    assert np.abs(m(**feed) - want).max() <= 1e-6 * np.abs(want).max()


def test_the_weight_transform_folds_at_compile_time():
    rng = np.random.default_rng(2)
    g, feed, want = _module((1, 64, 16, 16), 64, (1, 1), True, False, None, rng)
    m = compile(g)
    # no MatMul step (the transform's) is left in the plan: one conv kernel
    assert m.kernel_summary() == [f"Conv2D[f32,f32,f32,f32] (mlir-cpu-fused){WINOGRAD_MARK}"]
    assert any(k.startswith("folded:") for k in m.plan.constants)


def test_transform_and_inverse():
    w = np.random.default_rng(3).standard_normal((5, 3, 3, 3))
    u = winograd_weights(w)
    assert u.shape == (16, 5, 3)
    np.testing.assert_allclose(from_winograd(u), w, rtol=1e-14, atol=1e-14)
    # U = G g G^T for one kernel, written out
    g = w[2, 1]
    G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    np.testing.assert_allclose(u[:, 2, 1].reshape(4, 4), G @ g @ G.T, rtol=1e-14)


def _types(xs, ws):
    return [TensorType(xs, DType.F32), TensorType(ws, DType.F32)]


def test_the_rule():
    ok = dict(PARAMS)
    assert takes(ok, [(1, 64, 56, 56), (64, 64, 3, 3)])
    assert takes(ok, [(-1, 32, 16, 16), (32, 32, 3, 3)])          # a run-time batch
    assert takes(dict(ok, clamp_min=0.0, residual=True), [(2, 16, 8, 8), (16, 16, 3, 3)])
    for params, shapes in [
            (dict(ok, stride=(2, 2)), [(1, 64, 56, 56), (64, 64, 3, 3)]),
            (dict(ok, dilation=(2, 2)), [(1, 64, 56, 56), (64, 64, 3, 3)]),
            (dict(ok, groups=2), [(1, 64, 56, 56), (64, 32, 3, 3)]),
            (dict(ok, padding=(2, 2)), [(1, 64, 56, 56), (64, 64, 5, 5)]),
            (dict(ok, silu=True), [(1, 64, 56, 56), (64, 64, 3, 3)]),
            (dict(ok, gelu=True), [(1, 64, 56, 56), (64, 64, 3, 3)]),
            (dict(ok, image_at_run_time=True), [(1, 64, 56, 56), (64, 64, 3, 3)]),
            (ok, [(1, 512, 7, 7), (512, 512, 3, 3)]),    # 32 tiles computed for 16
            (ok, [(1, 128, 4, 4), (128, 128, 3, 3)]),
            (ok, [(1, 32, 16, 16), (32, 32, 3, 3)]),     # one image of 2.4M multiply-adds
            (ok, [(1, 8, 56, 56), (64, 8, 3, 3)]),       # few input channels
            (ok, [(1, 64, 56, 56), (8, 64, 3, 3)])]:     # few output channels
        assert not takes(params, shapes), (params, shapes)
    token = conv_winograd.ENABLED.set(False)
    try:
        assert not takes(ok, [(1, 64, 56, 56), (64, 64, 3, 3)])
    finally:
        conv_winograd.ENABLED.reset(token)


@pytest.mark.parametrize("lanes", [8, 16])
def test_geometry_computes_few_tiles_more_than_the_image_has(lanes):
    # 56^2: bands of 2 tile rows (56 tiles: 64 computed); 14^2 at 256
    # channels: bands of 2 rows and one of 1 (64 for 49); 8^2: one band
    assert geometry(56, 56, (1, 1), 64, lanes)[4] == 2
    assert waste(56, 56, (1, 1), 64, lanes) == pytest.approx(64 * 14 / 784)
    assert waste(14, 14, (1, 1), 256, lanes) == pytest.approx(64 / 49)
    assert geometry(8, 8, (1, 1), 64, lanes)[4] == 4 and waste(8, 8, (1, 1), 64, lanes) == 1
    # AVX-512: a band of 16 tiles takes 1-vector tiles of 16 channels
    assert geometry(8, 8, (1, 1), 64, lanes)[5] == ((16, 1) if lanes == 16 else (6, 2))


@pytest.mark.parametrize("target,vec", [("cpu:x86-64-v3", "v8f32"),
                                        ("cpu:skylake-avx512", "v16f32")])
def test_kernel_is_vector_code(target, vec):
    """The kernel's IR: the input transform's deinterleaved rows, the
    products' FMAs on vectors of the target's width, the output transform's
    interleaved rows; lowered by the ``vectorized`` strategy."""
    from compiler.codegen.lowering.conv_spatial import vector_bits
    params = dict(PARAMS, winograd=True)
    ts = [TensorType((2, 8, 16, 16), DType.F32), TensorType((16, 12, 8), DType.F32),
          TensorType((12,), DType.F32)]
    with vector_bits(512 if "avx512" in target else 256):
        text = single_op_linalg_text("Conv2D", params, ts, False, "cpu")
    for op in ("vector.deinterleave", "vector.interleave", "vector.fma"):
        assert op in text, op
    assert "linalg.generic" not in text
    res = P.lower(text, ["kernel"], target=target)
    assert res.strategy.name == "vectorized"
    assert f"fmuladd.{vec}" in res.llvm_ir


def test_a_saved_module_keeps_the_transformed_weights(tmp_path):
    # the folded U is a constant of the .fuel file; the loaded plan's conv is Winograd's
    import runtime
    rng = np.random.default_rng(4)
    g, feed, want = _module((2, 16, 12, 12), 16, (1, 1), True, True, (0.0, None), rng)
    m = compile(g)
    assert m.kernel_summary()[-1].endswith(WINOGRAD_MARK)
    m.save(tmp_path / "m.fuel")
    got = runtime.load(tmp_path / "m.fuel")(**feed)
    np.testing.assert_array_equal(got, m(**feed))
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()


@pytest.mark.parametrize("bits", [256, 512])
def test_output_transform_is_a_loop_over_the_blocks_channels(bits):
    """The output transform of a register tile of tiles is one loop over the
    channel block, not unrolled m times: 32 -> 40 channels at 56^2 (bands of
    several register tiles, a last band of fewer rows) was 1.1-1.4 MB of
    IR unrolled and took 20 s to compile; rolled, about a quarter of a MB."""
    from compiler.codegen.lowering.conv_spatial import vector_bits
    params = dict(PARAMS, winograd=True)
    ts = [TensorType((1, 32, 56, 56), DType.F32), TensorType((16, 40, 32), DType.F32),
          TensorType((40,), DType.F32)]
    with vector_bits(bits):
        text = single_op_linalg_text("Conv2D", params, ts, False, "cpu")
    assert len(text) < 400_000, len(text)
    # per channel-block class, band and register tile of tiles: one transform
    # of each vector of tiles, two interleaved rows each (unrolled: m times that)
    _, _, th, tw, r, (m, nvec) = geometry(56, 56, (1, 1), 32, bits // 32)
    nr = nvec * bits // 32
    tiles = -(-r * tw // nr) + -(-(th % r) * tw // nr)
    assert text.count("vector.interleave") <= 2 * nvec * tiles * len(conv_winograd._blocks(40, m))
