"""The direct convolution (``transforms/conv.py``): the cpu Conv2D kernel of a
stride-1 groups-1 conv is one generic over the flat padded input, register-
tiled to FMA tiles by the ``conv-direct`` strategy on AVX2 and AVX-512 targets
(a depthwise conv: the same, a block of channels at a time, in 1 x nr1 tiles), and
its rewrites do what they claim on small IR. Numerics of the kernel
against the reference: tests/fused/test_fused_attention_quant_conv.py."""
import re

import numpy as np
import pytest

from compiler import Graph, compile
from compiler.codegen.cpu import pipeline as P
from compiler.codegen.cpu.strategy import Strategy, VECTOR_LOWERING
from compiler.codegen.cpu.transforms.conv import (DIRECT_CONV_ATTR, fold_unit_dims,
                                                  single_reduction_contracts)
from compiler.codegen.family import single_op_linalg_text
from compiler.codegen.lowering.fused_conv import direct, direct_depthwise
from compiler.errors import PipelineError
from compiler.graph.opdef import TensorType
from compiler.mlir import ir
from compiler.registry.builders import conv2d
from runtime.dtype import DType

PARAMS = dict(stride=(1, 1), padding=(1, 1), groups=1, dilation=(1, 1))


def _kernel_text(dtype=DType.F32, x=(2, 5, 9, 11), w=(13, 5, 3, 3), params=PARAMS):
    ts = [TensorType(x, dtype), TensorType(w, dtype), TensorType((w[0],), dtype)]
    return single_op_linalg_text("Conv2D", dict(params), ts, False, "cpu")


@pytest.mark.parametrize("target,dtype,tile,vec", [
    ("cpu:x86-64-v3", DType.F32, "6x16", "v16f32"),
    ("cpu:skylake-avx512", DType.F32, "8x32", "v32f32"),
    ("cpu:x86-64-v3", DType.F64, "6x8", "v8f64"),
    ("cpu:skylake-avx512", DType.F64, "8x16", "v16f64"),
])
def test_direct_conv_strategy_and_fma_tiles(target, dtype, tile, vec):
    # 13 columns of a 15-wide plane: no whole vectors of a row fit its pitch,
    # so the flat tiles compute it (``direct_rows`` leaves it)
    text = _kernel_text(dtype, x=(2, 5, 9, 13))
    assert DIRECT_CONV_ATTR in text
    elt = "f32" if dtype == DType.F32 else "f64"
    res = P.lower(text, ["kernel"], target=target)
    assert res.strategy.name == f"conv-direct-{elt}-{tile}"
    # the micro-kernel: mr broadcasts times one nr-wide vector of the plane
    assert re.search(rf"fmuladd\.{vec}", res.llvm_ir), "no vector FMA tile in the kernel"


def test_direct_class():
    assert direct(1, (1, 1), (3, 3), (1, 1)) and direct(1, (1, 1), (1, 1), (1, 1))
    assert direct(1, (2, 2), (3, 3), (1, 1)) and direct(1, (2, 1), (7, 7), (3, 3))
    assert direct(1, (2, 2), (1, 1), (0, 0))          # a ResNet downsample
    assert not direct(1, (1, 1), (1, 1), (0, 0))      # x itself is the matmul's B
    assert not direct(1, (2, 2), (2, 2), (0, 0))      # patches: one transposing copy
    assert direct(1, (1, 2), (1, 2), (0, 0))          # but a conv1d's pairs (wav2vec2)
    assert not direct(1, (3, 3), (3, 3), (1, 1))      # strides above 2
    assert not direct(1, (2, 2), (3, 3), (1, 1), (2, 2))   # stride and dilation
    assert not direct(2, (1, 1), (3, 3), (1, 1))


def test_stride_2_has_a_generic_per_phase_with_taps():
    # 3x3 stride 2: phases (0,0) 2x2 taps, (0,1) 2x1, (1,0) 1x2, (1,1) 1x1
    # (7 output columns: a row of 8-lane vectors fits the 8-wide phase)
    text = _kernel_text(x=(2, 5, 9, 13), params=dict(PARAMS, stride=(2, 2)))
    assert text.count(DIRECT_CONV_ATTR) == 4 and text.count("fuelc.direct_rows") == 4
    # 6 of a 7-wide phase: the phases stacked per channel, one generic of all 9 taps
    stacked = _kernel_text(x=(2, 5, 9, 11), params=dict(PARAMS, stride=(2, 2)))
    assert stacked.count(DIRECT_CONV_ATTR) == 1 and "fuelc.direct_rows" not in stacked
    assert "tensor<1x20x" in stacked and " mod 2" in stacked   # [1, C*4, rows, Wq]
    # 1x1 stride 2: one phase holds the only tap
    one = _kernel_text(w=(13, 5, 1, 1), params=dict(PARAMS, stride=(2, 2), padding=(0, 0)))
    assert one.count(DIRECT_CONV_ATTR) == 1
    assert P.lower(text, ["kernel"], target="cpu:x86-64-v3").strategy.name.startswith(
        "conv-direct-f32-")


@pytest.mark.parametrize("target", ["cpu:x86-64-v3", "cpu:znver3"])
@pytest.mark.parametrize("x,w,stride", [
    ((1, 8, 28, 28), (12, 8, 3, 3), (2, 2)),   # stacked phases: 14 of 15 columns
    ((1, 16, 8, 8), (12, 16, 3, 3), (1, 1)),   # row tiles: 8 of 10 columns
])
def test_tap_blocks_keep_their_values_in_registers(target, x, w, stride):
    """A stacked stride-2 conv and ``direct_rows`` tiles (every tap of a
    channel in one block of FMAs) take ``strategy._BLOCK_TUNE``'s LLVM
    tuning on AVX2 targets: with the Haswell and Zen 3 models LLVM spilled
    ymm registers inside the stacked block."""
    from compiler.codegen.cpu.llvm import assembly
    from compiler.targets import parse_target
    text = _kernel_text(x=x, w=w, params=dict(PARAMS, stride=stride))
    assert ("fuelc.direct_stacked" in text) == (stride == (2, 2))
    res = P.lower(text, ["kernel"], target=target)
    assert '"tune-cpu"="znver4"' in res.llvm_ir and "fuelc.tune_cpu" not in res.llvm_ir
    blocks = re.split(r"\n(?=\.LBB\d+_\d+:)", assembly(res.llvm_ir, parse_target(target)))
    taps = max(blocks, key=lambda b: b.count("vfmadd"))
    assert taps.count("vfmadd") % 9 == 0   # a block of every tap of a channel
    if stride == (2, 2):
        assert not re.findall(r"vmovu?ps\s+%ymm\d+, -?\d+\(%rsp\)", taps)   # no spill
    # the flat tiles of a stride-1 conv (13 of 15 columns) keep the target's tuning
    plain = P.lower(_kernel_text(x=(1, 8, 9, 13), w=(12, 8, 3, 3)), ["kernel"], target=target)
    assert "tune-cpu" not in plain.llvm_ir


def test_depthwise_class():
    assert direct_depthwise((1, 1)) and direct_depthwise((1, 1), (2, 2))
    assert direct_depthwise((2, 2)) and direct_depthwise((2, 1))
    assert not direct_depthwise((2, 2), (2, 2)) and not direct_depthwise((3, 3))


def test_conv_kernel_outside_the_direct_class_keeps_the_loops():
    strided = dict(PARAMS, stride=(3, 3))
    assert DIRECT_CONV_ATTR not in _kernel_text(params=strided)
    # grouped but not depthwise (two input channels per group)
    grouped = dict(PARAMS, groups=2)
    assert DIRECT_CONV_ATTR not in _kernel_text(x=(2, 4, 9, 11), w=(6, 2, 3, 3),
                                                params=grouped)
    depthwise_s3 = dict(PARAMS, groups=5, stride=(3, 3))
    assert DIRECT_CONV_ATTR not in _kernel_text(w=(5, 1, 3, 3), params=depthwise_s3)


@pytest.mark.parametrize("target,dtype,vec", [
    ("cpu:x86-64-v3", DType.F32, "v64f32"), ("cpu:skylake-avx512", DType.F32, "v64f32"),
    ("cpu:x86-64-v3", DType.F64, "v32f64"), ("cpu:skylake-avx512", DType.F64, "v32f64"),
])
def test_depthwise_kernel_is_a_channel_loop_of_fma_rows(target, dtype, vec):
    """groups = C: an scf.for over the channels around a one-channel direct
    conv, tiled 1 x nr1: one broadcast weight times nr1 pixels per tap (the
    ``_axpy`` rewrite: no element-by-element contraction), its scratch planes
    allocated once, outside the loops."""
    # 25 columns of a 27-wide plane: no row pitch, no whole vectors of a row
    # within it, so the 1 x nr1 tiles compute it (``depthwise_rows`` leaves it)
    text = _kernel_text(dtype, x=(2, 5, 30, 25), w=(5, 1, 3, 3), params=dict(PARAMS, groups=5))
    assert text.count(DIRECT_CONV_ATTR) == 1 and "scf.for" in text
    res = P.lower(text, ["kernel"], target=target, keep_ir=True)
    assert res.strategy.name.startswith("conv-direct-")
    assert re.search(rf"fmuladd\.{vec}", res.llvm_ir), "no 1 x nr1 FMA row in the kernel"
    loop = res.stages["bufferize"].split("scf.for", 1)[1]
    assert "memref.alloc" not in loop
    # the planes' padding is zeroed once; in the loop only the accumulator
    # [1, 1, pixels] is filled (with the channel's bias)
    fills = re.findall(r"linalg\.fill .*outs\(\S+ : memref<([0-9x]+)x", loop)
    assert fills and all(f.count("x") == 2 for f in fills), fills
    # no padded copy: the rows go straight into the (zeroed-once) planes,
    # and the next channel's rows are prefetched
    assert "memref.copy" not in loop and "linalg.copy" not in loop
    assert "llvm.prefetch" in res.llvm_ir


@pytest.mark.parametrize("target,vec,loads", [("cpu:x86-64-v3", "8xf32", 2 * 4 * 3 * 4),
                                               ("cpu:skylake-avx512", "16xf32", 6 * 3 * 4)])
def test_depthwise_rows_load_each_input_vector_once_per_block(target, vec, loads):
    """A stride-1 depthwise plane 56 wide (+ 2 padding) gets a 64-element row
    pitch (``DW_PITCH_ATTR``) and ``depthwise_rows`` computes blocks of output
    rows, each input vector loaded once for the rows and taps that read it:
    AVX-512 4 rows x 4 vectors (6 input rows x 3 taps x 4 vectors loaded for
    4 x 9 x 4 FMAs), AVX2 2 rows x 4 vectors, twice per 64-wide row (4 x 3 x
    4 each, for 2 x 9 x 4 FMAs); the 1 x nr1 tiles loaded a vector per FMA."""
    text = _kernel_text(x=(1, 3, 56, 56), w=(3, 1, 3, 3), params=dict(PARAMS, groups=3))
    assert "fuelc.dw_pitch = 64" in text
    body = P.lower(text, ["kernel"], target=target, keep_ir=True).stages["lower-to-llvm"]
    fmas = len(re.findall(rf"llvm.intr.fmuladd.*vector<{vec}>", body))
    reads = len(re.findall(rf"llvm.load .*-> vector<{vec}>", body))
    assert (fmas, reads) == (4 * 9 * 4 if "avx512" in target else 2 * 2 * 9 * 4, loads)


def _run_kernel(text, args, out_shape, target):
    """The kernel of ``text`` lowered for ``target`` and run on ``args``:
    its f32 output of ``out_shape``."""
    from compiler.targets import parse_target
    from runtime.memref import descriptor_from_array
    tg = parse_target(target)
    res = P.lower(text, ["kernel"], target=target)
    fn = P.load_object(res.object, tg.features, str(tg)).ciface("kernel", 4)
    out = np.zeros(out_shape, np.float32)
    fn(*[descriptor_from_array(a) for a in (*args, out)])
    return out


def test_depthwise_rows_are_bit_identical_to_the_tiles(monkeypatch):
    """``depthwise_rows`` sums each pixel's taps in the tiles' (qy, qx) order:
    the same bits as the 1 x nr1 tiles on the flat plane (the row pitch turned
    off), a clamp epilogue, two images, a tail block."""
    from compiler.codegen.lowering import fused_conv
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((2, 6, 11, 28), (6, 1, 3, 3), (6,))]
    params = dict(PARAMS, groups=6, clamp_min=0.0, clamp_max=6.0)

    def run():
        text = _kernel_text(x=args[0].shape, w=args[1].shape, params=params)
        return text, _run_kernel(text, args, (2, 6, 11, 28), "cpu")

    text, rows = run()
    monkeypatch.setattr(fused_conv, "_dw_pitch", lambda wp: None)
    flat_text, flat = run()
    assert "fuelc.dw_pitch = 32" in text and "fuelc.dw_pitch" not in flat_text
    np.testing.assert_array_equal(rows, flat)


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
def test_stride_2_depthwise_phases_have_a_row_pitch(monkeypatch, target):
    """A stride-2 depthwise conv's phases (15 wide for 28 + 2 padded columns)
    get the row pitch of whole vectors (16), each phase generic marked: the
    same bits as without the pitch, two images, a clamp, an odd row count."""
    from compiler.codegen.lowering import fused_conv
    rng = np.random.default_rng(6)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((2, 6, 13, 28), (6, 1, 3, 3), (6,))]
    params = dict(PARAMS, groups=6, stride=(2, 2), clamp_min=0.0, clamp_max=6.0)

    def run():
        text = _kernel_text(x=args[0].shape, w=args[1].shape, params=params)
        return text, _run_kernel(text, args, (2, 6, 7, 14), target)

    text, rows = run()
    monkeypatch.setattr(fused_conv, "_dw_pitch", lambda wp: None)
    flat_text, flat = run()
    assert text.count("fuelc.dw_pitch = 16") == 4 and "fuelc.dw_pitch" not in flat_text
    np.testing.assert_array_equal(rows, flat)


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
@pytest.mark.parametrize("x,w,params", [
    ((2, 32, 8, 8), (64, 32, 3, 3), dict(clamp_min=0.0)),          # ResNet's 8x8: R > 1
    ((1, 5, 7, 16), (13, 5, 3, 3), {}),                 # a remainder of channels, a row tail
    pytest.param((1, 4, 9, 24), (6, 4, 3, 3), dict(clamp_min=0.0, clamp_max=6.0),
                 marks=pytest.mark.slow),   # column blocks
    ((2, 6, 16, 16), (8, 6, 3, 3), dict(stride=(2, 2))),     # stride 2: one per phase
    pytest.param((1, 3, 10, 12), (7, 3, 3, 3), dict(dilation=(2, 2), padding=(2, 2)),
                 marks=pytest.mark.slow),
    # depthwise (``depthwise_rows``): EfficientNet's 5x5 at 14^2, a 7^2 plane
    ((2, 12, 14, 14), (12, 1, 5, 5), dict(groups=12, padding=(2, 2), silu=True)),
    pytest.param((1, 6, 7, 7), (6, 1, 3, 3), dict(groups=6, clamp_min=0.0, clamp_max=6.0),
                 marks=pytest.mark.slow),
    # depthwise stride 2, each phase's plane (14^2 -> 7^2: 9-wide phases, no row pitch)
    ((2, 12, 14, 14), (12, 1, 3, 3), dict(groups=12, stride=(2, 2), clamp_min=0.0)),
    ((1, 6, 14, 14), (6, 1, 5, 5), dict(groups=6, stride=(2, 2), padding=(2, 2), silu=True)),
])
def test_direct_rows_are_bit_identical_to_the_tiles(monkeypatch, target, x, w, params):
    """``direct_rows`` (and ``depthwise_rows`` on the same mark) computes
    only the first whole vectors of each output row, each pixel's taps in
    the tiles' (c, qy, qx) order: the same bits as the flat ``mr x nr`` (1 x
    nr1) tiles (the rewrite turned off), with the bias and epilogue of the
    crop."""
    from compiler.codegen.cpu.transforms import REWRITES
    from compiler.codegen.family import DIRECT_ROWS_ATTR
    from compiler.targets import parse_target
    from runtime.memref import descriptor_from_array
    rng = np.random.default_rng(7)
    params = dict(PARAMS, **params)
    args = [rng.standard_normal(s).astype(np.float32) for s in (x, w, (w[0],))]
    text = _kernel_text(x=x, w=w, params=params)
    assert DIRECT_ROWS_ATTR in text
    tg = parse_target(target)

    def run():
        res = P.lower(text, ["kernel"], target=target)
        fn = P.load_object(res.object, tg.features, str(tg)).ciface("kernel", 4)
        ho = (x[2] + 2 * params["padding"][0] - params["dilation"][0] * (w[2] - 1) - 1) \
            // params["stride"][0] + 1
        wo = (x[3] + 2 * params["padding"][1] - params["dilation"][1] * (w[3] - 1) - 1) \
            // params["stride"][1] + 1
        out = np.zeros((x[0], w[0], ho, wo), np.float32)
        fn(*[descriptor_from_array(a) for a in (*args, out)])
        return res, out

    calls = []
    name = "depthwise_rows" if params["groups"] > 1 else "direct_rows"
    real = REWRITES[name]
    monkeypatch.setitem(REWRITES, name, lambda *a: calls.append(real(*a)) or calls[-1])
    res, rows = run()
    assert calls and calls[-1] >= 1, f"{name} left the conv to the flat tiles"
    assert re.search(r"fmuladd\.v(8|16)f32", res.llvm_ir)
    monkeypatch.setitem(REWRITES, name, lambda *a: 0)
    _, flat = run()
    np.testing.assert_array_equal(rows, flat)


def test_row_tiles_of_resnet_planes():
    """``_row_tile``'s (channels, rows) per target: AVX2 (12 accumulators, 16
    registers) 8x8 rows of one vector take 6 channels x 2 rows (the 3 vectors
    kept for the next tap row one register over: ``REUSE_SLACK``), 16x16
    rows of two vectors 6 x 1 and their 2-channel remainder 2 x 2; AVX-512
    (24, 32) keeps 8 x 3; a tile whose kept vectors are far over the file
    (2 channels x 6 rows on AVX2: 29 counted) is not taken."""
    from compiler.codegen.cpu.transforms.conv import _row_tile
    divisors = lambda c, accs: sorted({d for d in range(1, accs + 1) if c % d == 0})
    assert _row_tile(sorted({6, *divisors(64, 12)}), 1, 8, 3, 12, 16) == (6, 2)
    assert _row_tile(sorted({6, *divisors(32, 12)}), 2, 16, 3, 12, 16) == (6, 1)
    assert _row_tile([2], 2, 16, 3, 12, 16) == (2, 2)
    assert _row_tile(sorted({8, *divisors(64, 24)}), 1, 8, 3, 24, 32) == (8, 3)
    assert _row_tile([2], 1, 8, 3, 12, 16) != (2, 6)


def test_depthwise_small_planes_are_computed_a_block_of_channels_at_a_time():
    """Planes of a few hundred bytes: an iteration scatters a block of
    channels (the largest divisor of C that fits ``_DW_BLOCK_BYTES``) into
    its planes, then computes them, a channel's pixels at a time."""
    text = _kernel_text(x=(2, 12, 5, 6), w=(12, 1, 3, 3), params=dict(PARAMS, groups=12))
    res = P.lower(text, ["kernel"], target="cpu:x86-64-v3", keep_ir=True)
    assert re.search(r"memref\.alloc\(\) .*: memref<1x6x\d+x8xf32>", res.stages["bufferize"])
    assert "scf.for %arg5 = %c0 to %c2 step %c1" in res.stages["bufferize"]


@pytest.mark.parametrize("xs,k,stride,pad,dil,bias", [
    ((2, 7, 13, 17), 3, (1, 1), (1, 1), (1, 1), True),     # remainders, two images
    ((1, 5, 14, 15), 3, (2, 2), (1, 1), (1, 1), True),     # stride 2: phases
    ((1, 4, 9, 9), 5, (1, 1), (2, 2), (1, 1), False),      # 5x5, no bias
    ((1, 3, 12, 12), 3, (1, 1), (2, 2), (2, 2), True),     # dilation
    ((1, 6, 11, 10), 7, (2, 1), (3, 3), (1, 1), True),     # 7x7, stride on one axis
    ((1, 1, 5, 7), 3, (2, 2), (0, 0), (1, 1), True),       # one channel, tiles without loops
    ((2, 3, 3, 3), 3, (2, 2), (0, 0), (1, 1), False),      # one output pixel
    ((1, 2, 9, 150), 5, (2, 2), (2, 2), (1, 1), True),     # rows read in pieces, pad 2
    ((1, 2, 6, 131), 3, (2, 2), (1, 1), (1, 1), False),    # odd long rows: a last column
    ((2, 12, 5, 6), 3, (1, 1), (1, 1), (1, 1), True),      # small planes: blocks of 6
    ((2, 10, 7, 7), 3, (2, 2), (1, 1), (1, 1), True),      # strided blocks
    # stride 1 on rows of a pitch of whole vectors (``depthwise_rows``)
    ((2, 3, 7, 30), 3, (1, 1), (1, 1), (1, 1), True),      # pitch 32, a tail block
    ((1, 2, 21, 14), 3, (1, 1), (1, 1), (1, 1), False),    # pitch 16: full blocks + tail
    ((1, 2, 5, 13), 3, (1, 1), (1, 1), (1, 1), True),      # odd width below a vector
    ((1, 2, 9, 58), 5, (1, 1), (2, 2), (1, 1), True),      # 5x5, pitch 64
    ((1, 1, 3, 120), 3, (1, 1), (1, 1), (1, 1), True),     # pitch 128: row chunks
    ((1, 2, 6, 28), 3, (1, 1), (2, 2), (2, 2), True),      # dilation 2, pitch 32
    ((1, 2, 4, 29), 3, (1, 1), (2, 1), (1, 1), True),      # uneven padding, 1 row
])
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_depthwise_direct_conv_matches_numpy(xs, k, stride, pad, dil, bias, dt):
    rng = np.random.default_rng(11)
    npdt = np.float32 if dt == "f32" else np.float64
    c = xs[1]
    x = rng.standard_normal(xs).astype(npdt)
    w = rng.standard_normal((c, 1, k, k)).astype(npdt)
    b = rng.standard_normal(c).astype(npdt)
    g = Graph()
    xi = g.input("x", xs, dt)
    bi = [g.constant(b, name="b")] if bias else []
    g.output(conv2d(xi, g.constant(w, name="w"), *bi, stride=stride, padding=pad,
                    dilation=dil, groups=c), "y")
    m = compile(g)
    assert m.kernel_summary() == [f"Conv2D[{','.join([dt] * (4 if bias else 3))}] "
                                  f"(mlir-cpu-fused)"]
    want = _depthwise_ref(x, w, b if bias else None, stride, pad, dil)
    tol = 1e-5 if dt == "f32" else 1e-12
    np.testing.assert_allclose(m(x=x), want, rtol=tol, atol=tol * 10)


def _depthwise_ref(x, w, b, stride, pad, dil):
    """A depthwise conv in float64 numpy (b: None or the bias)."""
    (sh, sw), (ph, pw), (dh, dw) = stride, pad, dil
    k = w.shape[2]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    ho = (xp.shape[2] - dh * (k - 1) - 1) // sh + 1
    wo = (xp.shape[3] - dw * (k - 1) - 1) // sw + 1
    want = np.zeros((x.shape[0], x.shape[1], ho, wo))
    if b is not None:
        want += b[None, :, None, None]
    for ky in range(k):
        for kx in range(k):
            y0, x0 = ky * dh, kx * dw
            win = xp[:, :, y0:y0 + sh * (ho - 1) + 1:sh, x0:x0 + sw * (wo - 1) + 1:sw]
            want += win * w[None, :, 0, ky, kx, None, None]
    return want


def test_depthwise_rows_take_the_batch_at_run_time():
    """A run-time batch (``batch_dims``) on the ``depthwise_rows`` path: one
    kernel, 1 and 3 images."""
    from compiler.codegen.lowering.fused_conv import batch_dims
    from compiler.targets import parse_target
    from runtime.memref import descriptor_from_array
    rng = np.random.default_rng(2)
    w, b = rng.standard_normal((4, 1, 3, 3)).astype(np.float32), np.ones(4, np.float32)
    params = dict(PARAMS, groups=4)
    ts = [TensorType((2, 4, 6, 28), DType.F32), TensorType(w.shape, DType.F32),
          TensorType((4,), DType.F32)]
    text = single_op_linalg_text("Conv2D", params, ts, batch_dims(ts, params), "cpu")
    assert "tensor<?x4x6x28xf32>" in text and "fuelc.dw_pitch = 32" in text
    tg = parse_target("cpu")
    res = P.lower(text, ["kernel"], target=tg)
    fn = P.load_object(res.object, tg.features, str(tg)).ciface("kernel", 4)
    for n in (1, 3):
        x = rng.standard_normal((n, 4, 6, 28)).astype(np.float32)
        out = np.zeros((n, 4, 6, 28), np.float32)
        fn(*[descriptor_from_array(a) for a in (x, w, b, out)])
        np.testing.assert_allclose(out, _depthwise_ref(x, w, b, (1, 1), (1, 1), (1, 1)),
                                   rtol=1e-5, atol=1e-4)


def test_direct_conv_compiles_through_compile_and_matches_numpy():
    """Through compile(): the fused kernel, channel and pixel remainders, three
    images, no bias, dilation; stride 2 (phases) with an odd padded extent."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 6, 10, 12)).astype(np.float32)
    w = rng.standard_normal((11, 6, 3, 3)).astype(np.float32)
    g = Graph()
    xi = g.input("x", x.shape, "f32")
    g.output(conv2d(xi, g.constant(w, name="w"), padding=(2, 1), dilation=(2, 1)), "y")
    m = compile(g)
    assert m.kernel_summary() == ["Conv2D[f32,f32,f32] (mlir-cpu-fused)"]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (2, 2), (1, 1)))
    want = np.zeros((3, 11, 10, 12))
    for ky in range(3):
        for kx in range(3):
            want += np.einsum("nchw,oc->nohw", xp[:, :, 2 * ky:2 * ky + 10, kx:kx + 12],
                              w[:, :, ky, kx].astype(np.float64))
    np.testing.assert_allclose(m(x=x), want, rtol=1e-5, atol=1e-4)


_GENERIC = """
#x = affine_map<(co, p, c, kh, kw) -> (c, p + kh * 7 + kw)>
#w = affine_map<(co, p, c, kh, kw) -> (co, c, kh, kw)>
#o = affine_map<(co, p, c, kh, kw) -> (co, p)>
func.func @f(%x: memref<1x8xf32>, %w: memref<4x1x1x1xf32>, %o: memref<4x8xf32>) {
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel",
      "reduction", "reduction", "reduction"]} ins(%x, %w : memref<1x8xf32>, memref<4x1x1x1xf32>)
      outs(%o : memref<4x8xf32>) attrs = {fuelc.direct_conv} {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  }
  return
}
"""


def test_fold_unit_dims_leaves_projected_permutations():
    with ir.Context():
        m = ir.Module.parse(_GENERIC)
        assert fold_unit_dims(m) == 1
        text = str(m)
        # the tap offset p + kh*7 + kw reads p once kh and kw have extent 1
        assert "(d2, d1)" in text and "d3 * 7" not in text
        assert fold_unit_dims(m) == 0            # nothing left to fold
        unmarked = ir.Module.parse(_GENERIC.replace("attrs = {fuelc.direct_conv} ", ""))
        assert fold_unit_dims(unmarked) == 0     # only the marked generic is touched


_CONTRACT = """
#l = affine_map<(n, co, p, c, kh, kw) -> (n, c, p)>
#r = affine_map<(n, co, p, c, kh, kw) -> (co, c, kh, kw)>
#a = affine_map<(n, co, p, c, kh, kw) -> (n, co, p)>
func.func @f(%l: vector<1x1x16xf32>, %r: vector<8x1x1x1xf32>, %a: vector<1x8x16xf32>) -> vector<1x8x16xf32> {
  %0 = vector.contract {indexing_maps = [#l, #r, #a], iterator_types = ["parallel",
      "parallel", "parallel", "reduction", "reduction", "reduction"], kind = #vector.kind<add>}
      %l, %r, %a : vector<1x1x16xf32>, vector<8x1x1x1xf32> into vector<1x8x16xf32>
  return %0 : vector<1x8x16xf32>
}
"""


def test_single_reduction_contracts_is_an_mk_kn_product():
    with ir.Context():
        m = ir.Module.parse(_CONTRACT)
        assert single_reduction_contracts(m) == 1
        m.operation.verify()
        text = str(m)
        assert "vector<8x1xf32>, vector<1x16xf32> into vector<8x16xf32>" in text
        assert text.count("vector.contract") == 1
        assert single_reduction_contracts(m) == 0


_AXPY = """
#l = affine_map<(p, c, kh, kw) -> (c, p)>
#r = affine_map<(p, c, kh, kw) -> (c, kh, kw)>
#a = affine_map<(p, c, kh, kw) -> (p)>
func.func @f(%l: vector<1x64xf32>, %r: vector<1x1x1xf32>, %a: vector<64xf32>) -> vector<64xf32> {
  %0 = vector.contract {indexing_maps = [#l, #r, #a], iterator_types = ["parallel",
      "reduction", "reduction", "reduction"], kind = #vector.kind<add>}
      %l, %r, %a : vector<1x64xf32>, vector<1x1x1xf32> into vector<64xf32>
  return %0 : vector<64xf32>
}
"""


def test_one_channel_contraction_becomes_an_fma_of_a_broadcast():
    """A 1 x nr1 tile (depthwise) leaves one parallel dim once the unit dims
    are cast away; the outer-product lowering would take it element by
    element."""
    with ir.Context():
        m = ir.Module.parse(_AXPY)
        assert single_reduction_contracts(m) == 1
        m.operation.verify()
        out = str(m)
        assert "vector.contract" not in out and "vector.fma" in out
        assert "vector.broadcast" in out
        assert single_reduction_contracts(m) == 0
        mul = ir.Module.parse(_AXPY.replace("#vector.kind<add>", "#vector.kind<mul>"))
        assert single_reduction_contracts(mul) == 0   # only a sum of products


def test_unknown_rewrite_step_is_a_pipeline_error():
    bad = Strategy(name="bad", transform=("py:no_such_rewrite",), lowering=VECTOR_LOWERING)
    with pytest.raises(PipelineError, match="unknown rewrite step 'py:no_such_rewrite'.*known"):
        P.lower(_kernel_text(), ["kernel"], strategy=bad)


@pytest.mark.parametrize("xs,ws,stride,pad", [
    ((2, 3, 15, 13), (9, 3, 7, 7), (2, 2), (3, 3)),     # a 7x7 stem, odd extents
    ((1, 6, 9, 10), (14, 6, 3, 3), (2, 1), (1, 1)),     # stride on one axis
    ((3, 8, 11, 11), (17, 8, 1, 1), (2, 2), (0, 0)),    # a downsample
    ((2, 16, 1, 49), (24, 16, 1, 2), (1, 2), (0, 0)),   # a conv1d's pairs, an odd width
    # a long odd row (stacked): ``_scatter_rows`` reads it in a loop of pieces, then the tail
    ((1, 8, 1, 1105), (8, 8, 1, 3), (1, 2), (0, 1)),
    ((2, 5, 9, 9), (7, 5, 3, 3), (2, 2), (1, 1)),       # odd rows: a last column alone
    # phases stacked (``_Geometry.stacked``): 14 of 15 columns, a 5x5, one row
    ((2, 8, 28, 28), (13, 8, 3, 3), (2, 2), (1, 1)),
    ((1, 6, 28, 25), (9, 6, 5, 5), (2, 2), (2, 2)),
    ((2, 16, 1, 28), (8, 16, 1, 3), (1, 2), (0, 1)),
])
def test_strided_direct_conv_matches_numpy(xs, ws, stride, pad):
    from compiler.codegen.lowering.fused_conv import STEM_CHANNELS, _Geometry
    (sh, sw), (ph, pw), (kh, kw) = stride, pad, ws[2:]
    ho, wo = (xs[2] + 2 * ph - kh) // sh + 1, (xs[3] + 2 * pw - kw) // sw + 1
    if xs[1] > STEM_CHANNELS:   # (not a stem) the stacked cases: 8-lane rows pass the phase
        geo = _Geometry(pad, (1, 1), stride, (kh, kw), xs[2:], (ho, wo), False)
        assert geo.stacked == (xs[2:] in ((9, 10), (1, 1105), (9, 9), (28, 28), (28, 25),
                                          (1, 28))), geo.wq
    rng = np.random.default_rng(5)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    g = Graph()
    xi = g.input("x", xs, "f32")
    g.output(conv2d(xi, g.constant(w, name="w"), g.constant(b, name="b"), stride=stride,
                    padding=pad), "y")
    m = compile(g)
    assert m.kernel_summary() == ["Conv2D[f32,f32,f32,f32] (mlir-cpu-fused)"]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    ho, wo = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    want = np.zeros((xs[0], ws[0], ho, wo)) + b[None, :, None, None]
    for ky in range(kh):
        for kx in range(kw):
            win = xp[:, :, ky:ky + sh * (ho - 1) + 1:sh, kx:kx + sw * (wo - 1) + 1:sw]
            want += np.einsum("nchw,oc->nohw", win, w[:, :, ky, kx].astype(np.float64))
    np.testing.assert_allclose(m(x=x), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("x,w,stride", [
    ((1, 8, 1, 400), (8, 8, 1, 3), (1, 2)),     # a 1-D conv's long rows (audio front ends)
    ((1, 16, 20, 20), (16, 16, 3, 3), (1, 1)),  # the whole-image padding copy
])
def test_copies_are_vectorized_a_row_piece_at_a_time(x, w, stride):
    # the padding copy and the crop move rows in vectors of at most ROW_VECTOR
    # elements: the vectorizer made one vector of a whole untiled copy
    # (<400 x float> ops by the hundred for the 1-D conv, a minute of LLVM;
    # ResNet-style nets compiled in 67 s cold instead of 5)
    from compiler.codegen.cpu.transforms.conv import ROW_VECTOR
    params = dict(PARAMS, stride=stride, padding=(0, 0) if x[2] == 1 else (1, 1))
    res = P.lower(_kernel_text(DType.F32, x, w, params), ["kernel"], target="cpu")
    widths = {int(n) for n in re.findall(r"<(\d+) x float>", res.llvm_ir)}
    assert widths and max(widths) <= ROW_VECTOR, sorted(widths)


# outputs whose rows of whole vectors pass the plane's pitch: the flat tiles
@pytest.mark.parametrize("x,w,stride,pad,unrolled", [
    # phases of 2x2, 2x1, 1x2 and 1x1 taps (14 columns of a 15-wide phase): all unrolled
    ((1, 16, 12, 28), (12, 16, 3, 3), (2, 2), (1, 1), 16),
    ((1, 16, 9, 13), (12, 16, 3, 3), (1, 1), (1, 1), 16),   # 3x3: 9 taps
    ((1, 16, 9, 9), (12, 16, 5, 5), (1, 1), (2, 2), 5),     # 25: a loop of rows of 5 taps
])
def test_tap_loops_are_unrolled_into_the_channel_loop(monkeypatch, x, w, stride, pad, unrolled):
    """``unroll_tap_loops``: a register tile's FMAs sit directly in the loop
    over the input channels (the tap loops unrolled, at most ``UNROLL_TAPS``
    taps), which keeps the mark that LLVM must not unroll it."""
    from compiler.codegen.cpu.transforms import REWRITES
    from compiler.codegen.cpu.transforms.conv import _trip
    from compiler.mlir import walk_ops
    seen = []

    def after(module, *args):
        n = original(module, *args)
        for loop in walk_ops(module, lambda o: o.name == "scf.for" and any(
                op.name == "vector.fma" for op in o.operation.regions[0].blocks[0].operations)):
            seen.append((_trip(loop), "loop_annotation" in loop.attributes))
        return n
    original = REWRITES["unroll_tap_loops"]
    monkeypatch.setitem(REWRITES, "unroll_tap_loops", after)
    text = _kernel_text(x=x, w=w, params=dict(PARAMS, stride=stride, padding=pad))
    P.lower(text, ["kernel"], target="cpu:x86-64-v3")
    assert seen and all(marked for _, marked in seen), seen
    assert {trip for trip, _ in seen} == ({16} if unrolled == 16 else {unrolled}), seen


def test_one_image_channel_tiles_leave_each_enough_work(monkeypatch):
    """A direct conv of one image cut by output channels: every tile writes
    the whole image's planes, so no more tiles than leave each
    ``DIRECT_TILE_MACS`` multiply-adds per input element (and never fewer
    than the threads); the pointwise kernel (no planes) keeps the finer cut,
    by rows of pixels when it has more pixels than output channels (w whole
    in each tile)."""
    from compiler.codegen import parallel
    from compiler.codegen.fused import DIRECT_TILE_MACS, _conv_group_tiles
    from runtime.layout import Layout

    def tiles(x, w, out, parts, threads, **params):
        monkeypatch.setattr(parallel, "num_threads", lambda: threads)
        lays = [Layout.contiguous(s) for s in (x, w, (w[0],), out)]
        cut = _conv_group_tiles(dict(PARAMS, **params), lays, 3, parts)
        return [t[1].shape[0] for t in cut]
    conv1d = ((1, 128, 1, 1600), (128, 128, 1, 3), (1, 128, 1, 800))
    assert 128 * 3 * 800 / 1600 < 3 * DIRECT_TILE_MACS   # 192 per element: 2 tiles
    assert tiles(*conv1d, 4, 2, stride=(1, 2), padding=(0, 1)) == [64, 64]
    assert tiles(*conv1d, 4, 4, stride=(1, 2), padding=(0, 1)) == [32] * 4
    s2 = ((1, 128, 28, 28), (256, 128, 3, 3), (1, 256, 14, 14))   # 576 per element
    assert tiles(*s2, 4, 2, stride=(2, 2), padding=(1, 1)) == [128] * 2
    wide = ((1, 256, 14, 14), (256, 256, 3, 3), (1, 256, 14, 14))   # 2304 per element
    assert tiles(*wide, 4, 2, padding=(1, 1)) == [88, 88, 40, 40]    # halved (parallel.chunks)
    pointwise = ((1, 256, 56, 56), (64, 256, 1, 1), (1, 64, 56, 56))   # 64 per element
    assert tiles(*pointwise, 4, 2, padding=(0, 0)) == [64] * 4
    few_pixels = ((1, 256, 8, 8), (128, 256, 1, 1), (1, 128, 8, 8))   # 64 pixels, 128 channels
    assert tiles(*few_pixels, 4, 2, padding=(0, 0)) == [40, 40, 24, 24]


def test_bias_broadcast_stays_a_rolled_loop():
    # a small image's bias broadcast (32 channels of a 16 x 18 plane, unit
    # strides known) was unrolled by LLVM into ~1200 vector stores, 0.3 MB of
    # IR; ``roll_broadcasts`` keeps it a loop (run time unchanged)
    import dataclasses
    from compiler.codegen import fused as F
    from compiler.registry import default_registry
    from compiler.registry.entry import normalize_params
    params = normalize_params(default_registry()["Conv2D"], {
        "stride": (1, 1), "groups": 1, "padding": (1, 1), "residual": True, "clamp_min": 0.0})
    x = TensorType((1, 32, 16, 16), DType.F32)
    ts = (x, TensorType((32, 32, 3, 3), DType.F32), TensorType((32,), DType.F32), x)
    inst = dataclasses.replace(F.FusedInstance("Conv2D", tuple(sorted(params.items())), ts),
                               unit_stride=(0, 1, 2, 3))
    res = P.lower(F.linalg_text(inst, "cpu"), ["kernel"], target="cpu:x86-64-v3")
    assert "py:roll_broadcasts" in res.strategy.transform
    assert len(re.findall(r"store <\d+ x float>", res.llvm_ir)) < 200
    assert len(res.llvm_ir) < 150_000


def test_last_blocks_balance_a_short_remainder():
    from compiler.codegen.cpu.transforms.conv import last_blocks
    assert last_blocks(6, 32, 3) == (24, 4)     # 4 x 6 + 2 x 4, not 5 x 6 + 2
    assert last_blocks(6, 13, 3) == (6, 4)      # 6 + 4 + 3
    assert last_blocks(6, 8, 3) == (0, 4)       # 2 x 4
    assert last_blocks(6, 64, 3) is None        # 10 x 6 + 4: 8 accumulators
    assert last_blocks(6, 36, 3) is None and last_blocks(6, 32, 0) is None
    assert last_blocks(6, 5, 3) is None         # one tile of 5


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
@pytest.mark.parametrize("x,w,params", [
    ((2, 5, 9, 13), (32, 5, 3, 3), {}),                 # 4 x 6 + 2 x 4, a pixel remainder
    ((1, 5, 9, 13), (13, 5, 3, 3), dict(clamp_min=0.0)),  # 6 + 4 + 3
    ((2, 4, 9, 13), (8, 4, 3, 3), {}),                   # 2 x 4
    ((1, 6, 28, 28), (32, 6, 3, 3), dict(stride=(2, 2))),   # stride 2: stacked phases
])
def test_balanced_remainder_tiles_are_bit_identical(monkeypatch, target, x, w, params):
    """A remainder of fewer than ``least`` output channels tiled with the last
    whole tile in two blocks of half (``last_blocks``): each pixel's FMAs in
    the same (c, kh, kw) order, so the same bits as ``mr`` tiles and the
    remainder (13 columns of a 15-wide plane: the flat tiles, not
    ``direct_rows``). An AVX2 tile rule (``_CONV_TILES``' ``least``): where
    this host's ``cpu`` target is AVX-512 (8-channel tiles, no such
    remainder) its case is left to ``cpu:x86-64-v3``."""
    from compiler.codegen.cpu.strategy import isa_level
    from compiler.codegen.cpu.transforms import REWRITES
    from compiler.targets import parse_target
    isa = isa_level(parse_target(target))
    if isa != "avx2":
        pytest.skip(f"{target} is {isa} here: the balanced remainder is the AVX2 tiles' rule")
    rng = np.random.default_rng(8)
    params = dict(PARAMS, **params)
    args = [rng.standard_normal(s).astype(np.float32) for s in (x, w, (w[0],))]
    text = _kernel_text(x=x, w=w, params=params)
    s = params["stride"][0]
    out = (x[0], w[0], (x[2] - 1) // s + 1, (x[3] - 1) // s + 1)
    real = REWRITES["tile_direct_conv"]
    ir_of = {}
    for least in ("0", "3"):
        monkeypatch.setitem(REWRITES, "tile_direct_conv",
                            lambda m, mr, nr, nr1=None, _=None, least=least:
                            real(m, mr, nr, nr1, least))
        ir_of[least] = (P.lower(text, ["kernel"], target=target).llvm_ir,
                        _run_kernel(text, args, out, target))
    assert ir_of["0"][0] != ir_of["3"][0], "the remainder was not balanced"
    np.testing.assert_array_equal(ir_of["3"][1], ir_of["0"][1])
    want = _conv_ref(*args, params)
    np.testing.assert_allclose(ir_of["3"][1], want, rtol=1e-4, atol=1e-4)


def _conv_ref(x, w, b, params):
    """A groups-1 conv (3x3, padding 1) in float64 numpy, its ``clamp_min``."""
    s = params["stride"][0]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ho, wo = (xp.shape[2] - 3) // s + 1, (xp.shape[3] - 3) // s + 1
    want = np.zeros((x.shape[0], w.shape[0], ho, wo)) + b[None, :, None, None]
    for ky in range(3):
        for kx in range(3):
            win = xp[:, :, ky:ky + s * (ho - 1) + 1:s, kx:kx + s * (wo - 1) + 1:s]
            want += np.einsum("nchw,oc->nohw", win, w[:, :, ky, kx].astype(np.float64))
    return np.maximum(want, params["clamp_min"]) if "clamp_min" in params else want
