"""Input generators for every static fused op: name -> list of (inputs, params)."""
import numpy as np

from compiler.registry.ops import qmatmul

SEED = 1234
R = np.random.default_rng(SEED)


def f(*shape, lo=-1.0, hi=1.0):
    return R.uniform(lo, hi, shape).astype(np.float32)


def u32(*vals):
    return np.asarray(vals, dtype=np.uint32)


def q_blocks(qt, n, k):
    """Random valid GGUF blocks (finite f16 scales) as a u32 stream."""
    nb = qmatmul.BLOCK_BYTES[qt]
    blocks = n * (k // 32)
    raw = R.integers(0, 256, (blocks, nb), dtype=np.uint8)
    d = R.uniform(-0.1, 0.1, blocks).astype(np.float16).view(np.uint8).reshape(blocks, 2)
    raw[:, :2] = d
    if qt in ("Q4_1", "Q5_1", "Q8_1"):
        raw[:, 2:4] = R.uniform(-0.1, 0.1, blocks).astype(np.float16).view(np.uint8).reshape(blocks, 2)
    d[0] = np.asarray([np.float16(6e-8)]).view(np.uint8)  # a subnormal scale too
    raw[0, :2] = d[0]
    return raw.reshape(-1).view("<u4").copy()


def attn(b, hq, hkv, sq, sk, d, alibi=False, extra=False, mask=None):
    ins = [f(b, hq, sq, d), f(b, hkv, sk, d), f(b, hkv, sk, d)]
    if extra:
        ins.append(f(b, hq, sq, d))
    if mask is not None:  # an additive mask of that shape: 0 or -10000, never on key 0
        m = np.where(f(*mask) > 0.3, np.float32(-10000), np.float32(0))
        m[..., 0] = 0  # (a query whose keys are all at -10000 + s: its softmax is
        ins.append(m)  # ill-conditioned, the rounding of s + -10000 differs by order)
    if alibi:
        ins.append(f(hq, lo=0.0, hi=0.5))
    return ins


def paged(b, hq, hkv, sq, d, nblk, bs, mb, alibi=False):
    bt = R.integers(0, nblk, (b, mb)).astype(np.uint32)
    cl = R.integers(1, mb * bs + 1, (b,)).astype(np.uint32)
    ins = [f(b, hq, sq, d), f(nblk, bs, hkv, d), f(nblk, bs, hkv, d), bt, cl]
    if alibi:
        ins.append(f(hq, lo=0.0, hi=0.5))
    return ins


def fab_cases():
    return [
        (attn(1, 2, 2, 3, 5, 4, extra=True), {"softmax_scale": 0.5}),
        (attn(2, 4, 2, 4, 4, 3, extra=True, alibi=True),
         {"softmax_scale": 0.7, "causal": True, "softcap": 2.0}),
        (attn(1, 2, 1, 3, 6, 2, extra=True),
         {"softmax_scale": 1.0, "window_size_left": 1, "window_size_right": 2}),
        # Sq > Sk + window_size_left: the last query rows see no key (P = 0, grads 0)
        (attn(1, 4, 2, 7, 3, 2, extra=True, alibi=True),
         {"softmax_scale": 0.6, "window_size_left": 1, "softcap": 3.0}),
    ]


def cases():
    """The same inputs at every call (four test modules call it at import, in
    whatever order pytest imports them: each draw used to depend on the calls
    before it, so a case's inputs differed between a file run alone and the
    whole suite)."""
    global R
    R = np.random.default_rng(SEED)
    return {
        "SoftmaxLastDim": [([f(7)], {}), ([f(2, 3, 5, lo=-30, hi=30)], {}), ([f(1, 1)], {}),
                           ([f(2, 3, 6, lo=-30, hi=30)], {"scale": 0.125}),
                           ([f(4, 5)], {"scale": -0.7}),
                           # an additive mask: BERT's [B,1,1,S], a per-row one, with a scale
                           ([f(2, 3, 4, 6, lo=-30, hi=30), f(2, 1, 1, 6, lo=-9, hi=0)], {}),
                           ([f(3, 5), f(3, 5)], {"scale": 0.25}),
                           ([f(2, 4, 7), f(1, 4, 7)], {"scale": 0.125})],
        "FusedLinear": [([f(3, 4), f(4, 5), f(5)], {}), ([f(2, 3, 4), f(2, 4, 6), f(6)], {}),
                        ([f(4, 3, 2), f(2, 2, 3), f(3)], {})],
        "RmsNormLastDim": [([f(5)], {"eps": 1e-6}), ([f(2, 3, 8)], {"eps": 0.1}),
                           ([f(3, 6), f(6)], {"eps": 1e-5})],
        "LayerNormLastDim": [([f(6)], {"eps": 1e-5}), ([f(3, 2, 7)], {"eps": 0.5}),
                             ([f(3, 5), f(5)], {"eps": 1e-5}),
                             ([f(2, 3, 4), f(4), f(4)], {"eps": 0.1})],
        "Rope": [([f(3, 4), f(3, 4), f(3, 4)], {}),
                 ([f(3, 4), f(3, 4), f(3, 4)], {"interleaved": True}), ([f(2, 2, 5, 6), f(5, 6), f(5, 6)], {}),
                 ([f(2, 4, 8), f(1, 4, 8), f(4, 1)], {})],
        "Conv2D": [([f(1, 2, 5, 5), f(3, 2, 3, 3)], {}),
                   ([f(2, 3, 7, 6), f(4, 3, 3, 2), f(4)], {"stride": (2, 1), "padding": (1, 0)}),
                   ([f(1, 4, 6, 5), f(6, 2, 2, 3), f(6)],
                    {"stride": (1, 2), "padding": (1, 1), "groups": 2}),
                   ([f(1, 2, 9, 8), f(4, 1, 3, 2), f(4)],
                    {"stride": (2, 1), "padding": (1, 0), "groups": 2, "dilation": (3, 2)}),
                   ([f(1, 3, 6, 5), f(4, 3, 3, 3), f(4)], {"padding": (1, 1), "gelu": True}),
                   # the residual: with a bias and a relu after it (ResNet), without a bias
                   ([f(2, 3, 6, 5), f(4, 3, 3, 3), f(4), f(2, 4, 6, 5)],
                    {"padding": (1, 1), "residual": True, "clamp_min": 0.0}),
                   ([f(1, 4, 5, 5), f(4, 1, 3, 3), f(1, 4, 3, 3)],
                    {"stride": (2, 2), "padding": (1, 1), "groups": 4, "residual": True}),
                   # fewer pixels than taps: one map of the whole image (conv2d.whole_image)
                   ([f(2, 3, 2, 2), f(4, 3, 3, 3), f(4), f(2, 4, 2, 2)],
                    {"padding": (1, 1), "residual": True, "clamp_min": 0.0}),
                   ([f(3, 2, 2, 3), f(5, 2, 3, 5)], {"padding": (1, 2)})],
        "ExpandDepthwise": [([f(2, 3, 6, 5), f(8, 3, 1, 1), f(8), f(8, 1, 3, 3), f(8)],
                             {"stride": (2, 2), "padding": (1, 1), "expand_clamp_min": 0.0,
                              "expand_clamp_max": 6.0, "clamp_min": 0.0, "clamp_max": 6.0}),
                            ([f(1, 2, 5, 5), f(4, 2, 1, 1), f(4), f(4, 1, 5, 5), f(4)],
                             {"padding": (2, 2), "expand_silu": True, "silu": True})],
        "MaxPool2D": [([f(1, 2, 5, 5)], {"kernel": (3, 3), "stride": (2, 2),
                                         "padding": (1, 1, 1, 1)}),
                      ([f(2, 3, 7, 6)], {"kernel": (2, 3), "stride": (1, 2),
                                         "padding": (0, 1, 1, 0), "dilation": (2, 1)}),
                      ([f(1, 1, 9, 8)], {"kernel": (3, 2), "stride": (3, 3)})],
        "SoftmaxLastDimBackward": [([f(4, lo=0, hi=1), f(4)], {}),
                                   ([f(2, 3, 5, lo=0, hi=1), f(2, 3, 5)], {})],
        "LayerNormLastDimBackward": [([f(6), f(6)], {"eps": 1e-5}),
                                     ([f(2, 3, 4), f(2, 3, 4)], {"eps": 0.01})],
        "RmsNormLastDimBackward": [([f(6), f(6)], {"eps": 1e-6}),
                                   ([f(3, 5), f(3, 5)], {"eps": 0.1})],
        "ReduceMaxToBackward": [
            ([f(3, 4), f(3, 1)], {}), ([f(2, 3, 4), f(4)], {}),
            ([np.asarray([[1, 3, 3], [2, 2, 0]], np.float32), f(2, 1)], {}),  # ties
            ([f(2, 3), f(1, 1)], {})],
        "ConvTranspose2D": [
            ([f(1, 2, 3, 3), f(2, 3, 2, 2)], {}),
            ([f(2, 3, 4, 5), f(3, 2, 3, 2)],
             {"stride": (2, 1), "padding": (1, 0), "output_padding": (1, 0), "dilation": (1, 2)}),
            ([f(1, 4, 3, 3), f(4, 3, 2, 2), f(6)], {"stride": (2, 2), "padding": (0, 1), "groups": 2})],
        "FlashAttn": [
            (attn(1, 2, 2, 3, 5, 4), {"softmax_scale": 0.5}),
            (attn(2, 4, 2, 4, 4, 3, alibi=True), {"softmax_scale": 0.7, "causal": True,
                                                  "softcap": 2.0}),
            (attn(1, 2, 1, 3, 6, 2), {"softmax_scale": 1.0, "window_size_left": 1,
                                      "window_size_right": 2}),
            (attn(1, 2, 2, 2, 6, 4, alibi=True), {"softmax_scale": 0.3, "causal": True,
                                                  "k_len": 4}),
            (attn(2, 4, 2, 3, 5, 4, mask=(2, 1, 1, 5)), {"softmax_scale": 0.5}),
            (attn(1, 2, 2, 4, 4, 4, mask=(4, 4)), {"softmax_scale": 0.5, "causal": True})],
        "PagedAttn": [(paged(2, 2, 1, 1, 4, 5, 2, 3), {"softmax_scale": 0.5, "block_size": 2}),
                      (paged(1, 4, 2, 2, 3, 4, 3, 2, alibi=True),
                       {"softmax_scale": 0.8, "block_size": 3, "softcap": 1.5})],
        "QMatMul": [([f(3, 64), q_blocks("Q4_0", 5, 64)], {"quant_type": "Q4_0", "k": 64, "n": 5}),
                    ([f(2, 2, 32), q_blocks("Q8_0", 4, 32)], {"quant_type": "Q8_0", "k": 32, "n": 4})],
        "PowIBackward": [([f(5, lo=0.5, hi=2), f(5)], {"exp": 3}),
                         ([f(2, 3, lo=0.5, hi=2), f(2, 3)], {"exp": -2}),
                         ([f(4), f(4)], {"exp": 1})],
        "InplaceAffine": [([f(5)], {"mul": 2.5, "add": -1.0}), ([f(2, 3)], {"mul": 0.0, "add": 3.0})],
        "FusedSoftmaxCrossEntropy": [
            ([f(4, 5, lo=-3, hi=3), np.asarray([0, 4, -100, 2], np.int64)], {}),
            ([f(2, 3, 6), np.asarray([[1, 2, 3], [5, 0, 0]], np.int64)], {"reduction": "sum"}),
            ([f(3, 4), np.asarray([1, 7, 3], np.uint32)], {"reduction": "none", "ignore_index": 7}),
            ([f(5), np.asarray(2, np.int64)], {"reduction": "mean"})],
        "CausalConv1d": [([f(2, 3, 6), f(3, 1, 3), f(3)], {}),
                         ([f(1, 2, 4), f(2, 1, 1), f(2)], {"use_silu": True})],
        "SelectiveScan": [([f(1, 1, 2), f(1, 1, 2), f(2, 2), f(1, 1, 2), f(1, 1, 2)], {}),
                          ([f(2, 3, 4), f(2, 3, 4), f(4, 2), f(2, 3, 2), f(2, 3, 2)], {}),
                          ([f(1, 4, 2), f(1, 4, 2), f(2, 3), f(1, 4, 3), f(1, 4, 3)],
                           {"delta_softplus": True})],
        "SsdChunkScan": [([f(1, 4, 2, 3), f(1, 4, 2), f(2), f(1, 4, 2, 2), f(1, 4, 2, 2)],
                          {"chunk_size": 2}),
                         ([f(2, 1, 1, 2), f(2, 1, 1), f(1), f(2, 1, 1, 3), f(2, 1, 1, 3)],
                          {"chunk_size": 1})],
        "Nf4Matmul": [([f(3, 8), R.integers(0, 256, (5, 4)).astype(np.uint8), f(5, 2, lo=0.1)],
                       {"block_size": 4}),
                      ([f(2, 2, 16), R.integers(0, 256, (3, 8)).astype(np.uint8), f(3, 1, lo=0.1)],
                       {"block_size": 16})],
        "FlashAttnBackwardQ": fab_cases(),
        "FlashAttnBackwardK": fab_cases(),
        "FlashAttnBackwardV": fab_cases(),
        "AwqMatmul": [([f(3, 16), R.integers(0, 2**32, (16, 1), dtype=np.uint64).astype(np.uint32),
                        R.integers(0, 2**32, (2, 1), dtype=np.uint64).astype(np.uint32),
                        f(2, 8, lo=0.01, hi=0.1)], {"group_size": 8}),
                      ([f(2, 2, 32), R.integers(-2**31, 2**31, (32, 2)).astype(np.int32),
                        R.integers(-2**31, 2**31, (1, 2)).astype(np.int32),
                        f(1, 16, lo=0.01, hi=0.1).astype(np.float16)], {"group_size": 32, "split_k_iters": 4})],
    }
