"""FlashAttn (fused id 12) forward as one kernel: a few linalg ops in one function.

Inputs q ``[B,Hq,Sq,D]``, k, v ``[B,Hkv,Sk,D]`` (query head h reads kv head
h // (Hq/Hkv), via a floordiv indexing map: no repeated K/V is materialized),
optional alibi slopes ``[Hq]`` (arity 3 or 4). Params as the registry entry:
``softmax_scale``, ``causal``, ``window_size_left``/``window_size_right``,
``softcap`` (``None`` = unset) and ``k_len`` (attend the first k_len keys,
bottom-right aligned: offset o = k_len - Sq).

Stages, computed in f32 (f64 for f64 inputs), the storage dtype only at the end:

1. ``S = Q·Kᵀ`` (reduction over D);
2. scores: ``s = scale·S``; softcap ``cap·tanh(s/cap)``; alibi
   ``+= slope[h]·(j - (i + o))``; band masks (causal ``j > i+o``, right window
   ``j >= i+o+r+1``, left window ``j <= i+o-l-1``) give ``-inf``;
3. ``m = max_j s`` and ``P = exp(s - m)`` (numerically stable softmax);
4. ``l = Σ_j P`` and ``O = P·V``; ``out = O / l``.

A row whose keys are all masked (``m = -inf``) yields 0, as PyTorch's SDPA
and FlashAttention do: its P is 0, and so are l and O; out = 0 where l = 0.
"""
from __future__ import annotations

from compiler.errors import LoweringError
from compiler.mlir import arith, ir, math

from .core import (PARALLEL, REDUCTION, Lowering, Scalar, affine_map, empty, fill, from_compute,
                   generic, identity_map, loop_index, lowers, rtt, to_compute)
from .layout import extract_slice


def _kv_head(hq: int, hkv: int):
    """The affine expr of the kv head read by query head loop ``d1``."""
    h = ir.AffineDimExpr.get(1)
    if hq == hkv:
        return h
    return ir.AffineFloorDivExpr.get(h, ir.AffineConstantExpr.get(hq // hkv))


@lowers("FlashAttn")
def _flash_attn(lw: Lowering):
    ops = lw.operands
    if len(ops) not in (3, 4):
        raise LoweringError(f"FlashAttn takes 3 or 4 operands (q, k, v, [alibi]), got {len(ops)}")
    q, k, v = ops[:3]
    alibi = ops[3] if len(ops) == 4 else None
    b, hq, sq, d = rtt(q).shape
    _, hkv, sk, _ = rtt(k).shape
    if any(ir.ShapedType.is_dynamic_size(x) for x in (b, hq, sq, d, hkv, sk)):
        raise LoweringError("FlashAttn is lowered with static shapes only")
    kl = lw.params.get("k_len")
    off = 0
    if kl is not None:
        if not 1 <= kl <= sk:
            raise LoweringError(f"FlashAttn: k_len={kl} must be in [1, Sk={sk}]")
        if kl != sk:
            k = extract_slice(k, [0, 0, 0, 0], [b, hkv, kl, d])
            v = extract_slice(v, [0, 0, 0, 0], [b, hkv, kl, d])
        off = kl - sq
        sk = kl
    s = Scalar.compute(lw.in_dtypes[0])
    c = s.ty
    scale = float(lw.param("softmax_scale"))
    cap = lw.params.get("softcap")
    causal = bool(lw.params.get("causal"))
    wl, wr = lw.params.get("window_size_left"), lw.params.get("window_size_right")

    # 1. S[b,h,i,j] = sum_d q[b,h,i,d] * k[b,h//g,j,d]       loops (b,h,i,j,d)
    kvh = _kv_head(hq, hkv)
    raw = generic(
        [q, k], [fill(s.const(0), empty([b, hq, sq, sk], c))],
        [affine_map(5, [0, 1, 2, 4]), affine_map(5, [0, kvh, 3, 4]), affine_map(5, [0, 1, 2, 3])],
        [PARALLEL] * 4 + [REDUCTION],
        lambda x, y, acc: s.add(acc, s.mul(to_compute(x, s), to_compute(y, s))))[0]

    # 2. scale, softcap, alibi, band masks                    loops (b,h,i,j)
    i64 = ir.IntegerType.get_signless(64)

    def pos(dim):
        return arith.index_cast(i64, loop_index(dim))

    def score(*args):
        x = s.mul(args[0], s.const(scale))
        if cap is not None:
            x = s.mul(s.const(cap), math.tanh(arith.divf(x, s.const(cap))))
        i, j = pos(2), pos(3)
        ioff = arith.addi(i, arith.constant(i64, off)) if off else i
        if alibi is not None:
            dist = arith.sitofp(c, arith.subi(j, ioff))
            x = s.add(x, s.mul(to_compute(args[1], s), dist))
        masked = None

        def band(pred, bound):
            return arith.cmpi(pred, j, arith.addi(ioff, arith.constant(i64, bound)))

        conds = []
        if causal:
            conds.append(band(arith.CmpIPredicate.sgt, 0))
        if wr is not None:
            conds.append(band(arith.CmpIPredicate.sge, int(wr) + 1))
        if wl is not None:
            conds.append(band(arith.CmpIPredicate.sle, -int(wl) - 1))
        for cnd in conds:
            masked = cnd if masked is None else arith.ori(masked, cnd)
        if masked is not None:
            x = arith.select(masked, s.const(float("-inf")), x)
        return x

    ins, maps = [raw], [identity_map(4)]
    if alibi is not None:
        ins.append(alibi)
        maps.append(affine_map(4, [1]))
    scores = generic(ins, [empty([b, hq, sq, sk], c)], maps + [identity_map(4)],
                     [PARALLEL] * 4, score)[0]

    # 3. row max and P = exp(s - m)
    row = affine_map(4, [0, 1, 2])
    m = generic([scores], [fill(s.const(float("-inf")), empty([b, hq, sq], c))],
                [identity_map(4), row], [PARALLEL] * 3 + [REDUCTION],
                lambda x, acc: arith.maximumf(x, acc))[0]
    p = generic([scores, m], [empty([b, hq, sq, sk], c)], [identity_map(4), row, identity_map(4)],
                [PARALLEL] * 4,
                lambda x, mx, _o: arith.select(s.cmp("eq", mx, s.const(float("-inf"))),
                                               s.const(0), math.exp(arith.subf(x, mx))))[0]

    # 4. l = sum_j P; O = P·V (loops b,h,i,d,j); out = O / l
    lsum = generic([p], [fill(s.const(0), empty([b, hq, sq], c))], [identity_map(4), row],
                   [PARALLEL] * 3 + [REDUCTION], lambda x, acc: s.add(acc, x))[0]
    o = generic(
        [p, v], [fill(s.const(0), empty([b, hq, sq, d], c))],
        [affine_map(5, [0, 1, 2, 4]), affine_map(5, [0, kvh, 4, 3]), affine_map(5, [0, 1, 2, 3])],
        [PARALLEL] * 4 + [REDUCTION],
        lambda x, y, acc: s.add(acc, s.mul(x, to_compute(y, s))))[0]
    elt = lw.out_elt
    def finish(x, den, _o):
        empty_row = s.cmp("eq", den, s.const(0))
        return from_compute(arith.select(empty_row, s.const(0), arith.divf(x, den)), elt)
    return generic([o, lsum], [empty([b, hq, sq, d], elt)], [identity_map(4), row, identity_map(4)],
                   [PARALLEL] * 4, finish)[0]


# -- kernel params mapping (the mlir-cpu-fused family, compiler/codegen/fused.py) --
def _register_kernel() -> None:
    from compiler.codegen.fused import ATTN, fused_kernel
    from runtime import params as P
    from runtime.dtype import DType

    # OpParams.k_len is an int: 0 spells the unset k_len (all Sk keys, offset 0),
    # k >= 1 the first k keys, bottom-right aligned (offset k - Sq). k_len = Sk is
    # not the unset value when Sq != Sk (its offset is Sk - Sq).
    def back(p, types):
        return {"softmax_scale": float(p.softmax_scale), "causal": bool(p.causal),
                "window_size_left": p.window_size_left, "window_size_right": p.window_size_right,
                "softcap": p.softcap, "k_len": int(p.k_len) or None}

    # The alibi slopes are the optional 4th input: both arities get a key.
    @fused_kernel("FlashAttn", precision=ATTN, dtypes=(DType.F32, DType.F64),
                  from_params=back, keys=lambda t: [(t,) * 4, (t,) * 5])
    def _attn_params(params, types):
        (b, hq, sq, d), (_, hkv, sk, _) = types[0].shape, types[1].shape
        kl = params["k_len"]
        return P.FlashAttn(b, hq, hkv, sq, sk, d, 0 if kl is None else kl,
                           float(params["softmax_scale"]), bool(params["causal"]),
                           params["window_size_left"], params["window_size_right"],
                           params["softcap"])


_register_kernel()
