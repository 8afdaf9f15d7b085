"""Graph builders for every fused op, on ``Graph.add_fused`` (and
``Graph.add_node`` for the few primitives around them: affine weights, the
bias-less linear). Each takes graph handles (``compiler.graph.Tensor``) and
returns the new handle; params are normalized (defaults filled) before the
node is made, so the node's params are complete for CSE and the dialect.
Errors are ``GraphBuildError``s naming the node, the fused op and the rule.

Multi-output ops (``selective_scan``, ``ssd_chunk_scan``) return the fused
node's handle; its ``node.output_types`` lists both slots (slot 0 is y).
"""
from __future__ import annotations

import math
from typing import Optional

from .entry import normalize_params
from .registry import default_registry


def _graph(*handles):
    for h in handles:
        if h is not None and hasattr(h, "graph"):
            return h.graph
    raise TypeError("builders take graph Tensor handles")


def fused(name: str, *inputs, **params):
    """Append the static fused op ``name`` over ``inputs`` with ``params``."""
    entry = default_registry()[name]
    ins = [i for i in inputs if i is not None]
    return _graph(*ins).add_fused(entry, ins, normalize_params(entry, params))


def _pair(v, what, op):
    if isinstance(v, int):
        return (v, v)
    v = tuple(v)
    if len(v) != 2:
        from compiler.errors import GraphBuildError
        raise GraphBuildError(f"{op}: {what} must be an int or an (h, w) pair, got {v!r}")
    return v


def _lift(x, vec):
    """Broadcast a ``[D]`` vector to x's shape (leading-1 Reshape, BroadcastTo)."""
    g = x.graph
    r = g.add_node("Reshape", [vec], {"shape": (1,) * (x.ndim - 1) + tuple(vec.shape)})
    return g.add_node("BroadcastTo", [r], {"shape": tuple(x.shape)})


def softmax_last_dim(x, mask=None, scale=None):
    """SoftmaxLastDim of ``x`` [* ``scale``] [+ ``mask``]: the additive mask of
    x's rank, each extent 1 or x's, the last x's (broadcast over the rest)."""
    params = {} if scale is None else {"scale": float(scale)}
    return fused("SoftmaxLastDim", x, *(() if mask is None else (mask,)), **params)


def rms_norm(x, weight=None, eps: float = 1e-6):
    """RmsNormLastDim with its optional ``weight`` (``[D]``) applied inside
    the fused op (f16/bf16: computed in f32, rounded once)."""
    return fused("RmsNormLastDim", x, *(() if weight is None else (weight,)), eps=eps)


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5):
    """LayerNormLastDim with its optional ``weight`` and ``bias`` (each
    ``[D]``) applied inside the fused op (f16/bf16: computed in f32, rounded
    once). A bias without a weight is a separate Add after the op."""
    if weight is not None:
        return fused("LayerNormLastDim", x, weight, *(() if bias is None else (bias,)), eps=eps)
    y = fused("LayerNormLastDim", x, eps=eps)
    return y if bias is None else x.graph.add_node("Add", [y, _lift(y, bias)])


def linear(x, w, bias=None):
    """``x [..,M,K] @ w [K,N] (+ bias [N])``. A rank-2 ``w`` with a batched x
    flattens x to ``[M',K]`` and reshapes back. With a bias this is the fused
    FusedLinear; without, a plain MatMul."""
    g = x.graph
    lead = tuple(x.shape[:-1])
    flat = len(x.shape) > 2 and len(w.shape) == 2
    a = g.add_node("Reshape", [x], {"shape": (math.prod(lead), x.shape[-1])}) if flat else x
    if bias is None:
        y = g.add_node("MatMul", [a, w])
    else:
        y = fused("FusedLinear", a, w, bias)
    return g.add_node("Reshape", [y], {"shape": lead + (w.shape[-1],)}) if flat else y


def rope(x, cos, sin, interleaved: bool = False):
    """Rotary embedding x·cos + rot(x)·sin. ``interleaved=False`` rotates the
    two halves of the last axis (NeoX/Llama); ``True`` rotates the pairs
    (x[2i], x[2i+1]) (GPT-J, ONNX RotaryEmbedding ``interleaved=1``)."""
    return fused("Rope", x, cos, sin, interleaved=interleaved)


def conv2d(x, w, bias=None, stride=1, padding=0, groups: int = 1, dilation=1, residual=None):
    """Conv2D (NCHW x, FCHW w); ``stride``, ``padding``, ``dilation``: an int
    or an (h, w) pair; ``residual``: a skip of the output's shape added to it."""
    OPNAME = "Conv2D"
    return fused("Conv2D", x, w, bias, residual, stride=_pair(stride, "stride", OPNAME),
                 padding=_pair(padding, "padding", OPNAME), groups=groups,
                 dilation=_pair(dilation, "dilation", OPNAME),
                 **({} if residual is None else {"residual": True}))


def expand_depthwise(x, we, be, wd, bd, stride=1, padding=0, **epilogues):
    """ExpandDepthwise: the 1x1 conv (we, be) of NCHW x feeding the depthwise
    conv (wd, bd); ``stride``, ``padding``: the depthwise conv's, an int or
    an (h, w) pair; ``epilogues``: ``expand_clamp_min`` / ``expand_clamp_max``
    / ``expand_silu`` for the expansion, ``clamp_min`` / ``clamp_max`` /
    ``silu`` for the depthwise conv."""
    OPNAME = "ExpandDepthwise"
    return fused(OPNAME, x, we, be, wd, bd, stride=_pair(stride, "stride", OPNAME),
                 padding=_pair(padding, "padding", OPNAME), **epilogues)


def max_pool2d(x, kernel, stride=1, padding=0, dilation=1):
    """MaxPool2D over NCHW x; ``kernel``, ``stride``, ``dilation``: an int or
    an (h, w) pair; ``padding`` (-inf): an int, an (h, w) pair or (top, left,
    bottom, right)."""
    OPNAME = "MaxPool2D"
    if isinstance(padding, int):
        padding = (padding,) * 4
    padding = tuple(padding)
    if len(padding) == 2:
        padding = padding * 2
    return fused("MaxPool2D", x, kernel=_pair(kernel, "kernel", OPNAME),
                 stride=_pair(stride, "stride", OPNAME), padding=padding,
                 dilation=_pair(dilation, "dilation", OPNAME))


def conv_transpose2d(x, w, bias=None, stride=1, padding=0, output_padding=0, dilation=1,
                     groups: int = 1):
    OPNAME = "ConvTranspose2D"
    return fused("ConvTranspose2D", x, w, bias, stride=_pair(stride, "stride", OPNAME),
                 padding=_pair(padding, "padding", OPNAME),
                 output_padding=_pair(output_padding, "output_padding", OPNAME),
                 dilation=_pair(dilation, "dilation", OPNAME), groups=groups)


def flash_attn(q, k, v, causal: bool = True, scale: Optional[float] = None,
               sliding_window: Optional[int] = None, softcap: Optional[float] = None,
               alibi_slopes=None, k_len: Optional[int] = None,
               window_size_right: Optional[int] = None, mask=None):
    """Scaled-dot-product attention. ``scale`` defaults to 1/sqrt(D).
    ``sliding_window=W`` lets each query see itself and the W-1 keys before
    it (``window_size_left = W - 1``, the Mistral convention). ``mask``: an
    additive mask added to the scaled scores, broadcast to [B,Hq,Sq,Sk]
    (rank 2 to 4, a value per key: BERT's [B,1,1,Sk]); not with alibi slopes."""
    if sliding_window is not None and sliding_window < 1:
        raise ValueError(f"sliding_window must be >= 1, got {sliding_window}")
    if mask is not None and alibi_slopes is not None:
        raise ValueError("flash_attn takes an additive mask or alibi slopes, not both")
    return fused("FlashAttn", q, k, v, alibi_slopes if mask is None else mask,
                 softmax_scale=1.0 / math.sqrt(q.shape[-1]) if scale is None else scale,
                 causal=causal,
                 window_size_left=None if sliding_window is None else sliding_window - 1,
                 window_size_right=window_size_right, softcap=softcap, k_len=k_len)


def flash_attn_backward(which: str, q, k, v, d_out, causal: bool = True,
                        scale: Optional[float] = None, window_size_left=None,
                        window_size_right=None, softcap=None, alibi_slopes=None):
    """One of dQ/dK/dV (``which`` in "q", "k", "v") of FlashAttn."""
    return fused(f"FlashAttnBackward{which.upper()}", q, k, v, d_out, alibi_slopes,
                 softmax_scale=1.0 / math.sqrt(q.shape[-1]) if scale is None else scale,
                 causal=causal, window_size_left=window_size_left,
                 window_size_right=window_size_right, softcap=softcap)


def paged_attn(q, k_cache, v_cache, block_table, context_lens, scale: Optional[float] = None,
               softcap: Optional[float] = None, alibi_slopes=None):
    return fused("PagedAttn", q, k_cache, v_cache, block_table, context_lens, alibi_slopes,
                 softmax_scale=1.0 / math.sqrt(q.shape[-1]) if scale is None else scale,
                 block_size=k_cache.shape[1], softcap=softcap)


def qmatmul(a, w_q, quant_type: str, k: int, n: int):
    """``a @ dequant(W)ᵀ`` for a GGUF tensor W ``[n, k]``: ``w_q`` is its raw
    block bytes as a u32 stream (``quant_type`` Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
    Q8_1, Q4_K or Q6_K, ggml's layouts; the last word zero-padded)."""
    return fused("QMatMul", a, w_q, quant_type=quant_type, k=k, n=n)


def nf4_matmul(act, w_packed, absmax, block_size: int = 64):
    """``act @ Wᵀ`` for a bitsandbytes NF4 weight: ``w_packed`` u8 ``[N, K/2]``
    (first element in the high nibble), ``absmax`` f32 ``[N, K/block_size]``."""
    return fused("Nf4Matmul", act, w_packed, absmax, block_size=block_size)


def awq_matmul(act, qweight, qzeros, scales, group_size: int = 128, split_k_iters: int = 1):
    """``act @ W`` for an AutoAWQ GEMM checkpoint: ``qweight`` i32/u32
    ``[K, N/8]``, ``qzeros`` ``[K/group_size, N/8]`` (AWQ_ORDER packing),
    ``scales`` f16/f32 ``[K/group_size, N]``."""
    return fused("AwqMatmul", act, qweight, qzeros, scales, group_size=group_size,
                 split_k_iters=split_k_iters)


def cross_entropy(logits, targets, reduction: str = "mean", ignore_index: int = -100):
    """FusedSoftmaxCrossEntropy (honours ignore_index, PyTorch semantics)."""
    return fused("FusedSoftmaxCrossEntropy", logits, targets, reduction=reduction,
                 ignore_index=ignore_index)


def causal_conv1d(x, w, bias, use_silu: bool = False):
    return fused("CausalConv1d", x, w, bias, use_silu=use_silu)


def selective_scan(u, delta, a, b, c, delta_softplus: bool = False):
    return fused("SelectiveScan", u, delta, a, b, c, delta_softplus=delta_softplus)


def ssd_chunk_scan(x, dt, a, b, c, chunk_size: int = 1):
    return fused("SsdChunkScan", x, dt, a, b, c, chunk_size=chunk_size)


def inplace_affine(x, mul: float, add: float):
    return fused("InplaceAffine", x, mul=mul, add=add)


def powi_backward(x, up, exp: int):
    return fused("PowIBackward", x, up, exp=exp)


def softmax_last_dim_backward(s, g):
    return fused("SoftmaxLastDimBackward", s, g)


def layer_norm_last_dim_backward(x, g, eps: float = 1e-5):
    return fused("LayerNormLastDimBackward", x, g, eps=eps)


def rms_norm_last_dim_backward(x, g, eps: float = 1e-6):
    return fused("RmsNormLastDimBackward", x, g, eps=eps)


def reduce_max_to_backward(x, up):
    return fused("ReduceMaxToBackward", x, up)
