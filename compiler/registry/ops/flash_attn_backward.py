"""FlashAttnBackwardQ / K / V (fused ids 22, 23, 24): the three gradients of
FlashAttn (offset 0, full K: there is no ``k_len``).

Inputs (q, k, v, dO, [alibi]); params as FlashAttn minus ``k_len``. Outputs
dQ ≡ q, dK ≡ k, dV ≡ v. Math: P recomputed as in the forward; dV = Pᵀ·dO;
dP = dO·V_repᵀ; dS = P·(dP - Σ_last dP·P) (a nested fused
``SoftmaxLastDimBackward``); with softcap dS ·= 1 - tanh²(scale·QKᵀ/cap);
dScores = scale·dS; dQ = dScores·K_rep; dK = dScoresᵀ·Q; for GQA dK and dV are
folded from Hq back to Hkv heads (sum over each group).

``op_kind``: OpKind.FlashAttnBackwardQ/K/V. The original has kernels under
these kinds but no op->kind arm; a user expects fused
backward nodes to reach those kernels, so the mapping is set here. All three
share the CSE tag 22 (the fused id in the key keeps them apart). dV does not
read v: its recipe declares input 2 in ``Recipe.unused_inputs`` instead of
staying imperative as in the original.
"""
from ..entry import NOT_DIFFERENTIABLE, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from . import _attention as A
from ._common import OpKind, dtype_of, fail, np, out, wide
from .flash_attn import PARAMS, check_qkv

INPUTS = ("q", "k", "v", "dO", "alibi")


def _infer(which, name):
    def infer(types, params):
        check_qkv(name, types, params, extra=("dO",))
        if types[3] != types[0]:
            raise fail(name, types, "dO must have q's shape and dtype")
        return types[which]
    return infer


def grads(inputs, params):
    """numpy dQ, dK, dV from the attention math (not the recipe)."""
    q, k, v, do = (wide(x) for x in inputs[:4])
    alibi = wide(inputs[4]) if len(inputs) == 5 else None
    hq, hkv = q.shape[1], k.shape[1]
    scale = params["softmax_scale"]
    kr, vr = A.repeat_heads(k, hq), A.repeat_heads(v, hq)
    raw = A.raw_scores(q, kr, scale)
    p = A.softmax(A.finish_scores(raw, params, alibi, 0, q.shape[2], k.shape[2]))
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(vr, -1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    if params.get("softcap") is not None:
        ds = ds * (1 - np.tanh(raw / params["softcap"]) ** 2)
    dsc = scale * ds
    dq = dsc @ kr
    dk = np.swapaxes(dsc, -1, -2) @ q

    def fold(t):
        b, _, s, d = t.shape
        return t.reshape(b, hkv, hq // hkv, s, d).sum(axis=2)
    return dq, fold(dk), fold(dv)


def _reference(which):
    def reference(inputs, params):
        return out(grads(inputs, params)[which], dtype_of(inputs[which]))
    return reference


def _build(which):
    def build(params, types):
        q, k = types[0], types[1]
        b, hq, sq, d = q.shape
        hkv, sk = k.shape[1], k.shape[2]
        g = hq // hkv
        alibi = Bind(4) if len(types) == 5 else None
        # Fully masked query rows (P = 0 there, as in the reference) are sliced
        # off: they add nothing to dK/dV and their dQ rows are zero-padded back.
        a, c = A.live_rows(params, 0, sq, sk)
        q_live, do_live = A.rows_node(Bind(0), a, c, sq), A.rows_node(Bind(3), a, c, sq)
        kr = A.rep_node(Bind(1), (b, hkv, sk, d), hq)
        s, th = A.scores_node(q_live, kr, params["softmax_scale"], params, alibi, a,
                              (b, hq, c - a, sk), q.dtype)
        p = op("SoftmaxLastDim", s)

        def fold(t, s_len):
            if g == 1:
                return t
            return op("SumDim", op("Reshape", t, shape=(b, hkv, g, s_len, d)), axis=2)

        if which == 2:
            return fold(op("MatMul", op("Transpose", p), do_live), sk)
        vr = A.rep_node(Bind(2), (b, hkv, sk, d), hq)
        dp = op("MatMul", do_live, op("Transpose", vr))
        ds = op("SoftmaxLastDimBackward", p, dp)
        if th is not None:
            ds = op("Mul", ds, op("AddScalar", op("Neg", op("Sqr", th)), value=1.0))
        dsc = op("MulScalar", ds, value=float(params["softmax_scale"]))
        if which == 0:
            return A.pad_rows_node(op("MatMul", dsc, kr), a, c, sq)
        return fold(op("MatMul", op("Transpose", dsc), q_live), sk)
    return build


def _entry(which, fid, suffix, kind):
    name = f"FlashAttnBackward{suffix}"
    return FusedOpEntry(
        id=fid, name=name, mnemonic=f"flash_attn_backward_{suffix.lower()}",
        family=Family.ATTENTION, arity=-1, min_arity=4, params=PARAMS,
        infer=_infer(which, name), reference=_reference(which),
        recipe=Recipe(build=_build(which), unused_inputs=(2,) if which == 2 else ()),
        backward=NOT_DIFFERENTIABLE, op_kind=kind, destructive_input=None, cse_tag=22,
        input_names=INPUTS, doc=__doc__,
    )


ENTRY_Q = _entry(0, 22, "Q", OpKind.FlashAttnBackwardQ)
ENTRY_K = _entry(1, 23, "K", OpKind.FlashAttnBackwardK)
ENTRY_V = _entry(2, 24, "V", OpKind.FlashAttnBackwardV)
