"""Quantized matmul formats against their external conventions.

* QMatMul: every supported GGUF block type against the ``gguf`` package
  (``gguf.quants``, the reference quantizer of llama.cpp's Python tools):
  weights quantized by gguf where it can (Q4_0..Q8_0), random valid blocks
  dequantized by gguf for the K-quants (gguf has no K-quant quantizer);
  Q8_1, which gguf neither quantizes nor dequantizes, against ggml's
  ``quantize_row_q8_1_ref`` written out here. Both paths: the generated CPU
  kernel (``compile(g)``) and the recipe through primitives.
* Nf4Matmul: against bitsandbytes' NF4 layout, written out from its
  documented quantize/dequantize (bitsandbytes itself needs torch).
* AwqMatmul: against AutoAWQ's GEMM packer and ``dequantize_gemm``, written
  out from its documented algorithm.

Tolerance: the dequantized weights are exact, so only the f32 accumulation
differs from the f64 matmul: ``|got - want| <= 5e-6·(1 + |a| @ |w|)`` (the
bound of an f32 dot product's rounding, not of its possibly cancelled value).
"""
import numpy as np
import pytest

from compiler import Graph, awq_matmul, compile, interpret, nf4_matmul, qmatmul
from compiler.errors import GraphBuildError, UnsupportedOpError
from compiler.registry.ops import qmatmul as Q
from compiler.registry.ops.nf4_matmul import NF4  # bitsandbytes' code table

gguf_quants = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType  # noqa: E402

RECIPE = "builtin.module(fuel-decompose{all=true},fuel-reconcile-dtypes,fuel-cse,fuel-dce)"
TOL = 5e-6


@pytest.fixture
def rng():
    return np.random.default_rng(11)


def _matmul(a, w_kn):
    """(a @ w in f64, |a| @ |w|: the scale of its rounding errors)."""
    a, w_kn = np.asarray(a, np.float64), np.asarray(w_kn, np.float64)
    return a @ w_kn, np.abs(a) @ np.abs(w_kn)


def _close(got, want, what):
    want, scale = want
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    err = np.abs(got - want)
    assert (err <= TOL * (1.0 + scale)).all(), f"{what}: max err {err.max():.3g}"


def _run(build, feed, pipeline=None):
    """Compile the one-op graph ``build(g) -> node`` (kernel or recipe) and
    check it also against the numpy reference interpreter."""
    g = Graph()
    ins = {k: g.input(k, v.shape, _dt(v)) for k, v in feed.items()}
    g.output(build(**ins), "y")
    m = compile(g) if pipeline is None else compile(g, pipeline=pipeline)
    got = m(**feed)
    ref = interpret(g, feed)
    return got, np.asarray(ref["y"] if isinstance(ref, dict) else ref), m.kernel_summary()


def _dt(a):
    return {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.uint8): "u8",
            np.dtype(np.uint32): "u32", np.dtype(np.int32): "i32"}[a.dtype]


# -- QMatMul: GGUF ------------------------------------------------------------------
def _random_blocks(rng, qt, rows, k):
    """Random bytes for ``rows`` rows of ``qt`` blocks, with finite f16 scales."""
    nb, blocks = Q.BLOCK_BYTES[qt], k // Q.block_elems(qt)
    raw = rng.integers(0, 256, (rows * blocks, nb), dtype=np.uint8)
    halves = (rng.standard_normal((rows * blocks, 2)) * 0.05).astype(np.float16)
    at = 208 if qt == "Q6_K" else 0                      # Q6_K keeps its d last
    raw[:, at:at + 2 * (1 if qt == "Q6_K" else 2)] = \
        halves[:, :1 if qt == "Q6_K" else 2].view(np.uint8)
    return raw.reshape(rows, blocks * nb)


def _q8_1_ref(w):
    """ggml's ``quantize_row_q8_1_ref``: per 32 values, d = amax/127,
    q = round(x/d), s = d·Σq; block = f16 d, f16 s, 32 int8 (36 bytes).
    Dequantization is d·q (ggml has no Q8_1 ``to_float``; s feeds dot products)."""
    x = w.reshape(-1, 32).astype(np.float32)
    d = np.abs(x).max(axis=1, keepdims=True) / 127
    inv = np.where(d == 0, 0, 1 / np.where(d == 0, 1, d))
    q = np.round(x * inv).astype(np.int8)
    s = d[:, 0] * q.astype(np.float32).sum(axis=1)
    blocks = np.concatenate([d.astype(np.float16).view(np.uint8),
                             s.astype(np.float16)[:, None].view(np.uint8), q.view(np.uint8)], 1)
    deq = d.astype(np.float16).astype(np.float32) * q.astype(np.float32)
    return blocks.reshape(w.shape[0], -1), deq.reshape(w.shape)


def _gguf_case(rng, qt, n, k):
    """(the block bytes [n, row bytes], gguf's dequantized f32 weight [n, k])."""
    if qt == "Q8_1":
        return _q8_1_ref(rng.standard_normal((n, k)).astype(np.float32))
    kind = GGMLQuantizationType[qt]
    if qt.endswith("_K"):
        raw = _random_blocks(rng, qt, n, k)
    else:
        raw = gguf_quants.quantize(rng.standard_normal((n, k)).astype(np.float32), kind)
    return raw, gguf_quants.dequantize(raw, kind)


def _words(raw):
    """The u32 stream of the bytes, the last word zero-padded."""
    b = raw.reshape(-1)
    return np.concatenate([b, np.zeros(-len(b) % 4, np.uint8)]).view("<u4").copy()


FORMATS = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q4_K", "Q6_K"]


@pytest.mark.parametrize("qt", FORMATS)
def test_qmatmul_dequantize_is_gguf_bit_exact(rng, qt):
    k = 512
    raw, want = _gguf_case(rng, qt, 3, k)
    got = Q.dequantize(_words(raw), qt, k, 3).astype(np.float32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("qt", FORMATS)
def test_qmatmul_kernel_and_recipe_match_gguf(rng, qt):
    n, k = (3, 256) if qt.endswith("_K") else (5, 64)
    raw, w = _gguf_case(rng, qt, n, k)
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    want = _matmul(a, w.T)
    feed = dict(a=a, w=_words(raw))

    def build(a, w):
        return qmatmul(a, w, qt, k, n)
    got, ref, summary = _run(build, feed)
    assert summary == ["QMatMul[f32,u32,f32] (mlir-cpu-fused)"], summary
    _close(got, want, f"{qt} kernel")
    _close(ref, want, f"{qt} interpreter")
    got, _, summary = _run(build, feed, RECIPE)
    assert not any("QMatMul" in s for s in summary), summary
    _close(got, want, f"{qt} recipe")


def test_qmatmul_padded_stream(rng):
    """Q6_K with an odd block count: 210 bytes arrive as 53 words (2 padding
    bytes); a stream without the padding word is refused by name."""
    raw, w = _gguf_case(rng, "Q6_K", 1, 256)
    words = _words(raw)
    assert words.shape == (53,)
    a = rng.standard_normal((2, 256)).astype(np.float32)
    got, _, _ = _run(lambda a, w: qmatmul(a, w, "Q6_K", 256, 1), dict(a=a, w=words))
    _close(got, _matmul(a, w.T), "Q6_K padded")
    g = Graph()
    x, wq = g.input("a", (2, 256), "f32"), g.input("w", (52,), "u32")
    with pytest.raises(GraphBuildError, match=r"QMatMul.*Q6_K weight \[1,256\] needs 210 bytes"
                                              r" = 53 u32 words.*holds 52"):
        qmatmul(x, wq, "Q6_K", 256, 1)


def test_qmatmul_refusals():
    g = Graph()
    a, w = g.input("a", (2, 128), "f32"), g.input("w", (36,), "u32")
    with pytest.raises(UnsupportedOpError, match="Q5_K is not supported yet"):
        qmatmul(a, w, "Q5_K", 128, 1)
    with pytest.raises(GraphBuildError, match=r"k=128 must be a positive multiple of the Q4_K "
                                              r"block \(256\)"):
        qmatmul(a, w, "Q4_K", 128, 1)


# -- Nf4Matmul: bitsandbytes ----------------------------------------------------------
def _bnb_nf4_quantize(w, blocksize):
    """bitsandbytes ``quantize_4bit(quant_type="nf4")``, written out: the
    flattened weight in blocks of ``blocksize``, absmax per block, each value
    x/absmax mapped to the nearest of the 16 NF4 code values, and two codes
    per byte with the *first* element in the high nibble
    (``packed[i] = code[2i] << 4 | code[2i+1]``), as NF4 checkpoints store it."""
    flat = w.reshape(-1, blocksize).astype(np.float32)
    absmax = np.abs(flat).max(axis=1)
    table = np.asarray(NF4, np.float32)
    codes = np.abs((flat / absmax[:, None])[..., None] - table).argmin(-1).reshape(-1)
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8)
    return packed, absmax


def _bnb_nf4_dequantize(packed, absmax, blocksize, shape):
    """bitsandbytes ``dequantize_4bit``: high nibble first, value = NF4[code]·absmax."""
    codes = np.stack([packed >> 4, packed & 0xF], axis=-1).reshape(-1)
    vals = np.asarray(NF4, np.float32)[codes].reshape(-1, blocksize) * absmax[:, None]
    return vals.reshape(shape)


@pytest.mark.parametrize("n,k,bs", [(4, 128, 64), (3, 64, 16)])
def test_nf4_matches_bitsandbytes_layout(rng, n, k, bs):
    w = rng.standard_normal((n, k)).astype(np.float32)
    packed, absmax = _bnb_nf4_quantize(w, bs)
    deq = _bnb_nf4_dequantize(packed, absmax, bs, (n, k))
    a = rng.standard_normal((3, k)).astype(np.float32)
    want = _matmul(a, deq.T)
    feed = dict(a=a, p=packed.reshape(n, k // 2), s=absmax.reshape(n, k // bs))

    def build(a, p, s):
        return nf4_matmul(a, p, s, block_size=bs)
    got, ref, summary = _run(build, feed)
    assert summary == ["Nf4Matmul[f32,u8,f32,f32] (mlir-cpu-fused)"], summary
    _close(got, want, "NF4 kernel")
    _close(ref, want, "NF4 interpreter")
    got, _, _ = _run(build, feed, RECIPE)
    _close(got, want, "NF4 recipe")


def test_nf4_first_element_is_the_high_nibble():
    """packed 0x0F: element 0 has code 0 (-1.0), element 1 code 15 (+1.0)."""
    a = np.eye(2, dtype=np.float32)
    feed = dict(a=a, p=np.asarray([[0x0F]], np.uint8), s=np.ones((1, 1), np.float32))
    got, ref, _ = _run(lambda a, p, s: nf4_matmul(a, p, s, block_size=2), feed)
    np.testing.assert_array_equal(got, [[-1.0], [1.0]])
    np.testing.assert_array_equal(ref, [[-1.0], [1.0]])


# -- AwqMatmul: AutoAWQ GEMM ---------------------------------------------------------
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]           # AutoAWQ's pack order_map
AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]   # its unpack order


def _awq_pack(intweight):
    """AutoAWQ ``WQLinear_GEMM.from_linear`` packing of a [rows, cols] int
    matrix: word ``col`` of a row ORs ``intweight[:, 8·col + AWQ_ORDER[i]] << 4i``,
    stored as int32."""
    rows, cols = intweight.shape
    packed = np.zeros((rows, cols // 8), np.uint32)
    for col in range(cols // 8):
        for i in range(8):
            packed[:, col] |= intweight[:, col * 8 + AWQ_ORDER[i]].astype(np.uint32) << (4 * i)
    return packed.view(np.int32)


def _awq_dequantize_gemm(qweight, qzeros, scales, group_size):
    """AutoAWQ ``dequantize_gemm``: unpack_awq (arithmetic shifts by 0, 4, ..
    28), reverse_awq_order, mask to 4 bits, (iweight - izeros)·scales with
    scales and zeros repeated ``group_size`` times along in_features."""
    def unpack(x):
        shifted = x[:, :, None].astype(np.int64) >> np.arange(0, 32, 4)
        order = np.arange(shifted.shape[1] * 8).reshape(-1, 8)[:, AWQ_REVERSE_ORDER].reshape(-1)
        return shifted.reshape(x.shape[0], -1)[:, order] & 0xF
    iw, iz = unpack(qweight), unpack(qzeros)
    s = np.repeat(scales.astype(np.float32), group_size, axis=0)
    return (iw - np.repeat(iz, group_size, axis=0)).astype(np.float32) * s


def _awq_checkpoint(rng, k, n, gs):
    """A random AutoAWQ GEMM checkpoint: qweight int32 [K, N/8], qzeros int32
    [K/gs, N/8], scales f16 [K/gs, N]."""
    iw = rng.integers(0, 16, (k, n))
    iz = rng.integers(0, 16, (k // gs, n))
    scales = rng.uniform(0.01, 0.1, (k // gs, n)).astype(np.float16)
    return _awq_pack(iw), _awq_pack(iz), scales


@pytest.mark.parametrize("k,n,gs", [(64, 64, 32), (128, 16, 64), (32, 24, 32)])
def test_awq_matches_autoawq_gemm(rng, k, n, gs):
    qw, qz, sc = _awq_checkpoint(rng, k, n, gs)
    deq = _awq_dequantize_gemm(qw, qz, sc, gs)
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    want = _matmul(a, deq)
    feed = dict(a=a, qw=qw, qz=qz, sc=sc)

    def build(a, qw, qz, sc):
        return awq_matmul(a, qw, qz, sc, group_size=gs)
    got, ref, summary = _run(build, feed)
    assert summary == ["AwqMatmul[f32,i32,i32,f16,f32] (mlir-cpu-fused)"], summary
    _close(got, want, "AWQ kernel")
    _close(ref, want, "AWQ interpreter")
    got, _, _ = _run(build, feed, RECIPE)
    _close(got, want, "AWQ recipe")
    # the same checkpoint with u32 words and f32 scales
    feed = dict(a=a, qw=qw.view(np.uint32), qz=qz.view(np.uint32), sc=sc.astype(np.float32))
    got, _, _ = _run(build, feed)
    _close(got, want, "AWQ kernel (u32, f32 scales)")


def test_awq_unpacks_negative_int32_words(rng):
    """Words with the top nibble >= 8 are negative int32: every path unpacks
    their nibbles as AutoAWQ does (shift, then mask)."""
    k, n, gs = 32, 8, 32
    iw = np.full((k, n), 15)
    qw, qz, sc = _awq_pack(iw), _awq_pack(np.zeros((1, n), np.int64)), np.ones((1, n), np.float16)
    assert (qw < 0).all()
    a = np.ones((1, k), np.float32)
    for pipeline in (None, RECIPE):
        got, ref, _ = _run(lambda a, qw, qz, sc: awq_matmul(a, qw, qz, sc, group_size=gs),
                           dict(a=a, qw=qw, qz=qz, sc=sc), pipeline)
        np.testing.assert_array_equal(got, np.full((1, n), 15.0 * k, np.float32))
        np.testing.assert_array_equal(ref, got)


@pytest.mark.parametrize("qw,qz,sc,match", [
    # the pre-AutoAWQ layout [N, K/8] of a non-square weight
    (((16, 8), "i32"), ((2, 2), "i32"), ((2, 16), "f16"),
     r"qweight must be i32/u32 \[in_features, out_features // 8\] = \[K=64, N/8\].*"
     r"got i32\[16, 8\]"),
    (((64, 2), "i32"), ((2, 1), "i32"), ((2, 16), "f16"),
     r"qzeros must be i32 \[K/group_size, N/8\] = \[2, 2\], got i32\[2, 1\]"),
    (((64, 2), "i32"), ((2, 2), "u32"), ((2, 16), "f16"), r"qzeros must be i32"),
    (((64, 2), "i32"), ((2, 2), "i32"), ((16, 2), "f16"),
     r"scales must be f16/f32 \[K/group_size, N\] = \[2, 16\], got f16\[16, 2\]"),
    (((64, 2), "u8"), ((2, 2), "u8"), ((2, 16), "f16"), r"qweight must be i32/u32"),
])
def test_awq_refuses_other_layouts(qw, qz, sc, match):
    g = Graph()
    a = g.input("a", (3, 64), "f32")
    ins = [g.input(name, shape, dt) for name, (shape, dt) in zip(("qw", "qz"), (qw, qz))]
    s = g.input("sc", *sc)
    with pytest.raises(GraphBuildError, match=r"AwqMatmul\(.*\): " + match):
        awq_matmul(a, *ins, s, group_size=32)
