"""PagedAttn (fused id 13): decode attention over a paged KV cache.

Inputs q ``[B,Hq,Sq,D]``, k_cache and v_cache ``[num_blocks, block_size, Hkv,
D]``, block_table ``[B, max_blk]`` (u32 physical block ids), context_lens
``[B]`` (u32), optional alibi ``[Hq]``. Params ``softmax_scale``,
``block_size`` (must equal the caches' axis 1), optional ``softcap``.
Output ≡ q. Key position t of batch b lives in block block_table[b, t //
block_size] at row t % block_size and is attended iff t < context_lens[b];
no causal mask; alibi uses offset 0: slope[h]·(t - i). A batch with
context_len 0 gives zeros (PyTorch's SDPA on fully masked rows). Recipe (capacity-sized, a correctness floor):
IndexSelect the blocks, Reshape/Permute to ``[B,Hkv,kv_len,D]``, GQA repeat,
scores, ``Ge(Iota, context_lens)`` mask via MaskedFill(-inf), nested fused
softmax, MatMul with V.
"""
from ..entry import NOT_DIFFERENTIABLE, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from . import _attention as A
from ._common import (DType, OpKind, ParamSpec, check_arity, check_float, dtype_of, fail, np,
                      out, wide)

NAME = "PagedAttn"


def infer(types, params):
    check_arity(NAME, types, 5, 6, ("q", "k_cache", "v_cache", "block_table", "context_lens",
                                     "alibi"))
    q, kc, vc, bt, cl = types[:5]
    check_float(NAME, types, (0, 1, 2) + ((5,) if len(types) == 6 else ()))
    if len(q.shape) != 4 or len(kc.shape) != 4 or kc.shape != vc.shape:
        raise fail(NAME, types, "q must be [B,Hq,Sq,D], caches [blocks,block_size,Hkv,D]")
    b, hq, _, d = q.shape
    if kc.shape[1] != params["block_size"] or kc.shape[3] != d:
        raise fail(NAME, types, f"cache block axis must equal block_size="
                                f"{params['block_size']} and head dim D={d}")
    if kc.shape[2] < 1 or hq % kc.shape[2]:
        raise fail(NAME, types, "Hq must be a multiple of the caches' Hkv")
    if bt.dtype != DType.U32 or len(bt.shape) != 2 or bt.shape[0] != b:
        raise fail(NAME, types, "block_table must be u32 [B, max_blk]")
    if cl.dtype != DType.U32 or tuple(cl.shape) != (b,):
        raise fail(NAME, types, "context_lens must be u32 [B]")
    if any(t.dtype != q.dtype for t in (kc, vc) + tuple(types[5:])):
        raise fail(NAME, types, "q, caches and alibi must share one dtype")
    if len(types) == 6 and tuple(types[5].shape) != (hq,):
        raise fail(NAME, types, f"alibi must be [Hq] = [{hq}]")
    if params["softcap"] is not None and params["softcap"] <= 0:
        raise fail(NAME, types, "softcap must be > 0")
    return q


def reference(inputs, params):
    q = wide(inputs[0])
    kc, vc = wide(inputs[1]), wide(inputs[2])
    bt, cl = np.asarray(inputs[3]).astype(np.int64), np.asarray(inputs[4]).astype(np.int64)
    alibi = wide(inputs[5]) if len(inputs) == 6 else None
    b, hq, sq, d = q.shape
    kv_len = bt.shape[1] * params["block_size"]
    t = np.arange(kv_len)
    blk = bt[:, t // params["block_size"]]                         # [B, kv_len]
    k = np.transpose(kc[blk, t % params["block_size"]], (0, 2, 1, 3))  # [B,Hkv,kv,D]
    v = np.transpose(vc[blk, t % params["block_size"]], (0, 2, 1, 3))
    s = A.finish_scores(A.raw_scores(q, A.repeat_heads(k, hq), params["softmax_scale"]),
                        {"softcap": params["softcap"]}, alibi, 0, sq, kv_len)
    s = np.where((t[None, :] >= cl[:, None])[:, None, None, :], -np.inf, s)
    return out(A.softmax(s) @ A.repeat_heads(v, hq), dtype_of(inputs[0]))


def build(params, types):
    q, kc, bt = types[0], types[1], types[3]
    b, hq, sq, d = q.shape
    nblk, bs, hkv, _ = kc.shape
    mb = bt.shape[1]
    kv = mb * bs
    flat = op("Reshape", Bind(3), shape=(b * mb,))

    def gather(cache):
        g = op("Reshape", op("IndexSelect", cache, flat, dim=0), shape=(b, kv, hkv, d))
        return A.rep_node(op("Permute", g, perm=(0, 2, 1, 3)), (b, hkv, kv, d), hq)

    shape4 = (b, hq, sq, kv)
    alibi = Bind(5) if len(types) == 6 else None
    s, _ = A.scores_node(Bind(0), gather(Bind(1)), params["softmax_scale"],
                         {"softcap": params["softcap"]}, alibi, 0, shape4, q.dtype)
    pos = op("BroadcastTo", op("Iota", len=kv), shape=shape4)
    lens = op("BroadcastTo", op("Reshape", op("Cast", Bind(4), dtype=DType.F32),
                                shape=(b, 1, 1, 1)), shape=shape4)
    s = op("MaskedFill", s, op("Ge", pos, lens), value=float("-inf"))
    o = op("MatMul", op("SoftmaxLastDim", s), gather(Bind(2)))
    n = op("Reshape", op("Cast", Bind(4), dtype=DType.F32), shape=(b, 1, 1, 1))
    empty_ctx = op("Ge", op("MulScalar", n, value=0.0), n)  # 0 >= context_len
    return op("MaskedFill", o, op("BroadcastTo", empty_ctx, shape=(b, hq, sq, d)), value=0.0)


ENTRY = FusedOpEntry(
    id=13, name=NAME, mnemonic="paged_attn", family=Family.ATTENTION,
    arity=-1, min_arity=5,
    params=(ParamSpec("softmax_scale", "f64"), ParamSpec("block_size", "i64"),
            ParamSpec("softcap", "f64", None)),
    infer=infer, reference=reference, recipe=Recipe(build=build), backward=NOT_DIFFERENTIABLE,
    op_kind=OpKind.PagedAttn, destructive_input=None, cse_tag=13,
    input_names=("q", "k_cache", "v_cache", "block_table", "context_lens", "alibi"), doc=__doc__,
)
