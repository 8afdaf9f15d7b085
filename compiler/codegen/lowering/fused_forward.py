"""FusedLinear and Rope, each lowered to one kernel.

* FusedLinear ``a [..,M,K] @ b [..,K,N] + bias [N]``: the accumulator is
  initialised with the broadcast bias and the matmul accumulates into it
  (``linalg.matmul`` / ``batch_matmul`` for one f32/f64 dtype and rank 2 or
  equal-batch rank 3; otherwise one ``linalg.generic`` over (batch.., m, n, k)
  with MatMul's batch rules: GQA lhs batch j reads rhs batch j // (b/b'),
  size-1 rhs batch axes read 0; f16/bf16 and f32 x bf16 accumulate in f32).
* Rope (rotate-half, NeoX): with h = d/2, x1 = x[.., :h], x2 = x[.., h:],
  out[.., :h] = x1·cos[.., :h] − x2·sin[.., :h] and
  out[.., h:] = x2·cos[.., h:] + x1·sin[.., h:]: one two-output generic over
  the half shape on static slices, inserted into the result. cos/sin
  broadcast numpy-style (a size-1 last axis is read whole).
"""
from __future__ import annotations

from compiler.mlir import ir, linalg

from .core import (PARALLEL, REDUCTION, Lowering, Scalar, affine_map, broadcast_map, dims,
                   empty, from_compute, generic, identity_map, lowers, rank, rtt, to_compute)
from .layout import extract_slice, insert_slice
from .matmul import _same_dim


@lowers("FusedLinear")
def _fused_linear(lw: Lowering):
    a, b, bias = lw.operands
    n = rank(a)
    ad, bd = dims(a), dims(b)
    out_dims = ad[:-1] + [bd[-1]]
    elt = lw.out_elt
    s = Scalar.compute(lw.out_dtype)
    same = lw.in_dtypes[0] == lw.in_dtypes[1]
    wide_float = isinstance(elt, (ir.F32Type, ir.F64Type))
    batch_a, batch_b = ad[:-2], bd[:-2]
    # accumulator = bias broadcast over every axis but the last
    acc = generic([bias], [empty(out_dims, s.ty)], [affine_map(n, [n - 1]), identity_map(n)],
                  [PARALLEL] * n, lambda v, _o: to_compute(v, s))[0]
    if same and wide_float and (n == 2 or (n == 3 and _same_dim(batch_a[0], batch_b[0]))):
        named = linalg.matmul if n == 2 else linalg.batch_matmul
        return named(a, b, outs=[acc])
    nb = n - 2
    loops = nb + 3
    m_, n_, k_ = nb, nb + 1, nb + 2
    sa, sb = rtt(a).shape, rtt(b).shape
    rhs_batch = []
    for i in range(nb):
        if _same_dim(batch_a[i], batch_b[i]):
            rhs_batch.append(i)
        elif sb[i] == 1:
            rhs_batch.append(None)
        else:
            rhs_batch.append(ir.AffineFloorDivExpr.get(
                ir.AffineDimExpr.get(i), ir.AffineConstantExpr.get(sa[i] // sb[i])))
    a_map = affine_map(loops, list(range(nb)) + [m_, k_])
    b_map = affine_map(loops, rhs_batch + [k_, n_])
    o_map = affine_map(loops, list(range(nb)) + [m_, n_])
    red = generic([a, b], [acc], [a_map, b_map, o_map], [PARALLEL] * (nb + 2) + [REDUCTION],
                  lambda x, y, c: s.add(c, s.mul(to_compute(x, s), to_compute(y, s))))[0]
    if s.ty == elt:
        return red
    return generic([red], [empty(out_dims, elt)], [identity_map(n)] * 2, [PARALLEL] * n,
                   lambda v, _o: from_compute(v, elt))[0]


def _halves(v, n: int, h: int):
    """(first half, second half) of ``v``'s last axis, or (v, v) when that
    axis has size 1 (a broadcast cos/sin)."""
    shape = list(rtt(v).shape)
    if shape[-1] == 1:
        return v, v
    lo = [0] * len(shape)
    hi = [0] * (len(shape) - 1) + [h]
    size = shape[:-1] + [h]
    return extract_slice(v, lo, size), extract_slice(v, hi, size)


@lowers("Rope")
def _rope(lw: Lowering):
    x, cos, sin = lw.operands
    s = Scalar.compute(lw.in_dtypes[0])
    shape = list(rtt(x).shape)
    n = len(shape)
    h = shape[-1] // 2
    half = shape[:-1] + [h]
    x1, x2 = _halves(x, n, h)
    c1, c2 = _halves(cos, n, h)
    s1, s2 = _halves(sin, n, h)
    ins = [x1, x2, c1, c2, s1, s2]
    maps = [broadcast_map(rtt(v).shape, n, half) for v in ins] + [identity_map(n)] * 2
    elt = lw.out_elt

    def body(a1, a2, k1, k2, n1, n2, _o1, _o2):
        a1, a2, k1, k2, n1, n2 = (to_compute(v, s) for v in (a1, a2, k1, k2, n1, n2))
        lo = s.sub(s.mul(a1, k1), s.mul(a2, n1))
        hi = s.add(s.mul(a2, k2), s.mul(a1, n2))
        return [from_compute(lo, elt), from_compute(hi, elt)]

    o1, o2 = generic(ins, [empty(half, elt), empty(half, elt)], maps, [PARALLEL] * n, body)
    out = empty(shape, elt)
    out = insert_slice(o1, out, [0] * n)
    return insert_slice(o2, out, [0] * (n - 1) + [h])
