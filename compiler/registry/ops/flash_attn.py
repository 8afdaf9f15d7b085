"""FlashAttn (fused id 12): scaled-dot-product attention.

Inputs q ``[B,Hq,Sq,D]``, k, v ``[B,Hkv,Sk,D]`` (Hq a multiple of Hkv; query
head h uses kv head h // (Hq/Hkv)), then optionally either alibi slopes
``[Hq]`` or an additive mask (rank 2 to 4, broadcast right-aligned to the
scores ``[B,Hq,Sq,Sk]``: each extent 1 or the scores' own, the key extent
Sk; e.g. BERT's ``[B,1,1,Sk]``, ``[B,1,Sq,Sk]``, ``[Sq,Sk]``; not with
``k_len``), told apart by rank: arity 3 or 4. Params: ``softmax_scale`` (f64), ``causal``,
``window_size_left``/``window_size_right`` (optional i64), ``softcap``
(optional f64), ``k_len`` (optional i64: attend only the first k_len keys,
bottom-right aligned, offset o = k_len - Sq; symbolic lengths are not
representable in params, so there is nothing to decline for).
Math: S = scale·QKᵀ; softcap S = cap·tanh(S/cap); alibi S += slope[h]·(j-(i+o));
S += mask; band masks: causal j > i+o, right window j >= i+o+r+1, left window j <= i+o-l-1;
P = softmax; out = P·V. Rows with every key masked (band masks, or a mask
of ``-inf`` at every key) are 0, as in PyTorch's SDPA and FlashAttention
(the unfused Add + Softmax computes 0/0 there); a finite mask value
(``-10000``, ``finfo.min``) is added as any other.
Recipe: per call; the softmax is a nested fused ``SoftmaxLastDim`` node, over
the query rows that have a key (a static prefix of rows is fully masked when
k_len < Sq with causal or right-window masks); the others are padded with 0.
Backward: autograd emits FlashAttnBackwardQ/K/V (``custom``), which take no
mask.
"""
from ..entry import CUSTOM, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from . import _attention as A
from ._common import OpKind, ParamSpec, check_arity, check_float, dtype_of, fail, out, wide

NAME = "FlashAttn"

PARAMS = (ParamSpec("softmax_scale", "f64"), ParamSpec("causal", "bool", False),
          ParamSpec("window_size_left", "i64", None), ParamSpec("window_size_right", "i64", None),
          ParamSpec("softcap", "f64", None))


def check_qkv(name, types, params, extra=(), mask=False):
    """Shape rule shared with FlashAttnBackward: (q, k, v, *extra, [alibi]);
    with ``mask`` (FlashAttn) the optional input may instead be an additive
    mask, told by its rank (``_attention.split_extras``)."""
    n = 3 + len(extra)
    opt = "mask or alibi" if mask else "alibi"
    check_arity(name, types, n, n + 1, ("q", "k", "v") + tuple(extra) + (opt,))
    check_float(name, types, range(len(types)))
    q, k, v = types[:3]
    if len(q.shape) != 4 or len(k.shape) != 4 or k.shape != v.shape:
        raise fail(name, types, "q must be [B,Hq,Sq,D], k and v [B,Hkv,Sk,D]")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise fail(name, types, "q, k, v must agree on B and D")
    if k.shape[1] < 1 or q.shape[1] % k.shape[1]:
        raise fail(name, types, f"Hq={q.shape[1]} must be a multiple of Hkv={k.shape[1]}")
    if any(t.dtype != q.dtype for t in types):
        raise fail(name, types, "all inputs must share q's dtype")
    m, alibi = A.split_extras(types[n:]) if mask else (None, types[n] if len(types) > n else None)
    if alibi is not None and tuple(alibi.shape) != (q.shape[1],):
        raise fail(name, types, f"alibi slopes must be [Hq] = [{q.shape[1]}]")
    if m is not None:
        full = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        why = A.mask_mismatch(tuple(m.shape), full)
        if why is not None:
            raise fail(name, types, f"the additive mask {list(m.shape)} does not broadcast to "
                                    f"the scores [B,Hq,Sq,Sk] = {list(full)}: {why}")
        if params.get("k_len") is not None:
            raise fail(name, types, "an additive mask is not taken with k_len (slice the keys "
                                    "and the mask instead)")
    for w in ("window_size_left", "window_size_right"):
        if params.get(w) is not None and params[w] < 0:
            raise fail(name, types, f"{w} must be >= 0")
    if params.get("softcap") is not None and params["softcap"] <= 0:
        raise fail(name, types, "softcap must be > 0")


def infer(types, params):
    check_qkv(NAME, types, params, mask=True)
    kl = params["k_len"]
    if kl is not None and not 1 <= kl <= types[1].shape[2]:
        raise fail(NAME, types, f"k_len={kl} must be in [1, Sk={types[1].shape[2]}]")
    return types[0]


def reference(inputs, params):
    q, k, v = (wide(x) for x in inputs[:3])
    mask, alibi = (None if x is None else wide(x) for x in A.split_extras(inputs[3:]))
    kl = params["k_len"]
    sq = q.shape[2]
    if kl is not None:
        k, v = k[:, :, :kl], v[:, :, :kl]
    off = 0 if kl is None else kl - sq
    hq = q.shape[1]
    s = A.finish_scores(A.raw_scores(q, A.repeat_heads(k, hq), params["softmax_scale"]),
                        params, alibi, off, sq, k.shape[2], mask)
    return out(A.softmax(s) @ A.repeat_heads(v, hq), dtype_of(inputs[0]))


def build(params, types):
    q, k = types[0], types[1]
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    kn, vn = Bind(1), Bind(2)
    kl = params["k_len"]
    if kl is not None and kl != sk:
        kn = op("Slice", kn, dim=2, start=0, len=kl)
        vn = op("Slice", vn, dim=2, start=0, len=kl)
        sk = kl
    off = 0 if kl is None else kl - sq
    mt, at = A.split_extras(types[3:])
    alibi = Bind(3) if at is not None else None
    a, c = A.live_rows(params, off, sq, sk)  # c = sq: the last row sees key k_len-1
    shape4 = (b, hq, c - a, sk)
    mask = A.mask_node(Bind(3), tuple(mt.shape), a, c, sq, shape4) if mt is not None else None
    s, _ = A.scores_node(A.rows_node(Bind(0), a, c, sq), A.rep_node(kn, (b, hkv, sk, d), hq),
                         params["softmax_scale"], params, alibi, off + a, shape4, q.dtype, mask)
    o = op("MatMul", op("SoftmaxLastDim", s), A.rep_node(vn, (b, hkv, sk, d), hq))
    return A.pad_rows_node(o, a, c, sq)


ENTRY = FusedOpEntry(
    id=12, name=NAME, mnemonic="flash_attn", family=Family.ATTENTION,
    arity=-1, min_arity=3, params=PARAMS + (ParamSpec("k_len", "i64", None),),
    infer=infer, reference=reference, recipe=Recipe(build=build), backward=CUSTOM,
    op_kind=OpKind.FlashAttn, destructive_input=None, cse_tag=12,
    input_names=("q", "k", "v", "mask_or_alibi"), doc=__doc__,
)
