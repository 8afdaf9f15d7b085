"""Shared math of the attention family (FlashAttn, its backward, PagedAttn):
the numpy score computation and the recipe fragments (GQA repeat, scaled
scores, softcap, alibi, band masks)."""
from __future__ import annotations

from ..grammar import op
from ._common import DType, np


# -- numpy ------------------------------------------------------------------
def repeat_heads(k, hq):
    """[B,Hkv,S,D] -> [B,Hq,S,D]: query head h uses kv head h // (Hq/Hkv)."""
    return np.repeat(k, hq // k.shape[1], axis=1)


def raw_scores(q, k, scale):
    return scale * np.matmul(q, np.swapaxes(k, -1, -2))


def finish_scores(s_raw, params, alibi, offset, sq, sk, mask=None):
    """softcap, alibi, the additive ``mask`` (broadcast to ``[B,Hq,Sq,Sk]``)
    and band masks on the scaled scores ``[B,Hq,Sq,Sk]``."""
    s = s_raw
    cap = params.get("softcap")
    if cap is not None:
        s = cap * np.tanh(s / cap)
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    if alibi is not None:
        s = s + alibi[None, :, None, None] * (j - (i + offset))[None, None]
    if mask is not None:
        s = s + mask
    mask = np.zeros((sq, sk), dtype=bool)
    if params.get("causal"):
        mask |= j > i + offset
    if params.get("window_size_right") is not None:
        mask |= j >= i + offset + params["window_size_right"] + 1
    if params.get("window_size_left") is not None:
        mask |= j <= i + offset - params["window_size_left"] - 1
    return np.where(mask[None, None], -np.inf, s)


def softmax(s):
    """Softmax over keys; a row whose keys are all masked (-inf) is all zeros,
    as PyTorch's SDPA and FlashAttention return 0 there (not 0/0)."""
    m = s.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.where(m == -np.inf, 0.0, np.exp(s - m))
        den = e.sum(axis=-1, keepdims=True)
        return np.where(den == 0, 0.0, e / np.where(den == 0, 1.0, den))


def live_rows(params, offset, sq, sk):
    """``(a, c)``: query rows ``[a, c)`` have at least one unmasked key under
    the band masks (causal, windows) at key offset ``offset``; the others are
    fully masked. Both band edges grow with the row, so the masked rows are a
    prefix and a suffix."""
    def live(i):
        hi, lo = sk - 1, 0
        if params.get("causal"):
            hi = min(hi, i + offset)
        if params.get("window_size_right") is not None:
            hi = min(hi, i + offset + params["window_size_right"])
        if params.get("window_size_left") is not None:
            lo = max(lo, i + offset - params["window_size_left"])
        return lo <= hi
    rows = [i for i in range(sq) if live(i)]
    return (rows[0], rows[-1] + 1) if rows else (0, 0)


def rows_node(x, a, c, sq):
    """Rows ``[a, c)`` of axis 2 of ``x`` (identity when all)."""
    return x if (a, c) == (0, sq) else op("Slice", x, dim=2, start=a, len=c - a)


def pad_rows_node(x, a, c, sq):
    """Zero rows around ``x`` (the rows ``[a, c)`` of axis 2) up to ``sq``."""
    if (a, c) == (0, sq):
        return x
    return op("Pad", x, padding=(0, 0, 0, 0, a, sq - c, 0, 0), mode="constant", value=0.0)


def split_extras(extras):
    """``(mask, alibi)`` of FlashAttn's inputs after q, k, v (types or
    arrays; at most one): an additive mask has rank 2 to 4, alibi slopes
    rank 1."""
    x = extras[0] if len(extras) else None
    if x is None:
        return None, None
    return (x, None) if len(x.shape) >= 2 else (None, x)


def mask_mismatch(mshape, full) -> str | None:
    """Why an additive mask of shape ``mshape`` does not broadcast to the
    scores ``full`` = [B,Hq,Sq,Sk] as FlashAttn reads it (rank 2 to 4,
    right-aligned, each extent 1 or the scores' own, the key extent Sk),
    or None. A ``?`` (None or negative) extent counts as the scores' own."""
    if not 2 <= len(mshape) <= 4:
        return f"rank {len(mshape)} (2 to 4 wanted)"
    for m, f in zip(reversed(tuple(mshape)), reversed(tuple(full))):
        own = m is None or m < 0 or f is None or f < 0 or m == f
        if not own and m != 1:
            return f"extent {m} where the scores have {f}"
    if mshape[-1] == 1 and full[-1] != 1:
        return "a key extent of 1 (the mask must give every key its own value)"
    return None


# -- recipe fragments ---------------------------------------------------------
def rep_node(k, shape, hq):
    """GQA repeat as Reshape -> BroadcastTo -> Reshape (identity when equal)."""
    b, hkv, s, d = shape
    if hq == hkv:
        return k
    g = hq // hkv
    k5 = op("Reshape", k, shape=(b, hkv, 1, s, d))
    return op("Reshape", op("BroadcastTo", k5, shape=(b, hkv, g, s, d)), shape=(b, hq, s, d))


def mask_node(mask, mshape, a, c, sq, shape4):
    """The additive mask input ``mask`` of shape ``mshape`` as the scores'
    ``shape4`` (its query rows ``[a, c)`` where it has Sq of them)."""
    m4 = (1,) * (4 - len(mshape)) + tuple(mshape)
    m = mask if len(mshape) == 4 else op("Reshape", mask, shape=m4)
    if m4[2] != 1:
        m = rows_node(m, a, c, sq)
    m4 = m4[:2] + ((c - a) if m4[2] != 1 else 1,) + m4[3:]
    return m if tuple(m4) == tuple(shape4) else op("BroadcastTo", m, shape=shape4)


def scores_node(q, k_rep, scale, params, alibi, offset, shape4, dtype, mask=None):
    """Scaled scores with softcap, alibi, band masks and the additive ``mask``
    (a node of ``shape4``: ``mask_node``): ``[B,Hq,Sq,Sk]``.
    Returns ``(masked_scores, tanh_node_or_None)``."""
    b, hq, sq, sk = shape4
    s = op("MulScalar", op("MatMul", q, op("Transpose", k_rep)), value=float(scale))
    th = None
    cap = params.get("softcap")
    if cap is not None:
        th = op("Tanh", op("MulScalar", s, value=1.0 / cap))
        s = op("MulScalar", th, value=float(cap))
    if alibi is not None:
        dist = op("Sub", op("BroadcastTo", op("Reshape", op("Iota", len=sk), shape=(1, sk)),
                            shape=(sq, sk)),
                  op("BroadcastTo", op("Reshape", op("Iota", len=sq), shape=(sq, 1)),
                     shape=(sq, sk)))
        if offset:
            dist = op("AddScalar", dist, value=float(-offset))
        if dtype != DType.F32:
            dist = op("Cast", dist, dtype=dtype)
        slopes = op("BroadcastTo", op("Reshape", alibi, shape=(1, hq, 1, 1)), shape=shape4)
        s = op("Add", s, op("Mul", slopes, op("BroadcastTo", dist, shape=shape4)))
    bands = []
    if params.get("causal"):
        bands.append(("Triu", offset + 1))
    if params.get("window_size_right") is not None:
        bands.append(("Triu", offset + params["window_size_right"] + 1))
    if params.get("window_size_left") is not None:
        bands.append(("Tril", offset - params["window_size_left"] - 1))
    if bands:
        neg_inf = op("AddScalar", op("MulScalar", s, value=0.0), value=float("-inf"))
        for kind, diag in bands:
            s = op("Add", s, op(kind, neg_inf, diagonal=diag))
    if mask is not None:  # after the bands: their -inf comes from 0·s, finite without it
        s = op("Add", s, mask)
    return s, th
