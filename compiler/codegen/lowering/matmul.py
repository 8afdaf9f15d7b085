"""MatMul: ``[..b, M, K] @ [..b', K, N] -> [..b, M, N]``.

* rank 2, float operands: ``linalg.matmul``; rank 3 with equal batch:
  ``linalg.batch_matmul`` (the named ops CPU codegen tiles and vectorizes);
  f16/bf16 operands, and the mixed f32 x bf16, into an f32 accumulator (the
  named op extends each operand on its own), a bf16/f16 product rounded once
  by an element-wise generic;
* otherwise one ``linalg.generic`` over (batch.., m, n, k): GQA batch axes
  (lhs b a multiple of rhs b') read rhs batch ``j floordiv (b/b')``, size-1
  rhs batch axes read 0, mixed f32 x bf16 accumulates in f32.
"""
from __future__ import annotations

from compiler.mlir import ir, linalg

from .core import (PARALLEL, REDUCTION, Lowering, Scalar, affine_map, dims, empty, fill,
                   from_compute, generic, identity_map, lowers, rank, rtt, to_compute)


@lowers("MatMul")
def _matmul(lw: Lowering):
    a, b = lw.operands
    s = Scalar.compute(lw.out_dtype)
    acc = fill(s.const(0), empty(dims(a)[:-1] + [dims(b)[-1]], s.ty))
    return matmul_into(a, b, acc, lw.out_dtype, lw.out_elt)


def matmul_into(a, b, acc, out_dtype, elt) -> "ir.Value":
    """``acc + a @ b`` with MatMul's batch rules; ``acc`` is in the compute
    type (f32 for narrow floats), the result in ``elt``. MatMul starts from
    zeros, FusedLinear from the broadcast bias."""
    n = rank(a)
    ad, bd = dims(a), dims(b)
    out_dims = ad[:-1] + [bd[-1]]
    batch_a, batch_b = ad[:-2], bd[:-2]
    floats = (ir.F32Type, ir.F64Type, ir.BF16Type, ir.F16Type)
    if isinstance(elt, floats) and (
            n == 2 or (n == 3 and _same_dim(batch_a[0], batch_b[0]))):
        # bf16/f16 (and f32 x bf16): the named op extends each operand to the
        # f32 of acc in its region; a bf16/f16 product is rounded to elt once, below
        named = linalg.matmul if n == 2 else linalg.batch_matmul
        red = named(a, b, outs=[acc])
        if rtt(acc).element_type == elt:
            return red
        return round_to(red, out_dims, elt)
    s = Scalar.compute(out_dtype)
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
        else:  # GQA: lhs batch j uses rhs batch j // (b / b')
            rhs_batch.append(ir.AffineFloorDivExpr.get(
                ir.AffineDimExpr.get(i), ir.AffineConstantExpr.get(sa[i] // sb[i])))
    a_map = affine_map(loops, list(range(nb)) + [m_, k_])
    b_map = affine_map(loops, rhs_batch + [k_, n_])
    o_map = affine_map(loops, list(range(nb)) + [m_, n_])
    iters = [PARALLEL] * (nb + 2) + [REDUCTION]
    red = generic([a, b], [acc], [a_map, b_map, o_map], iters,
                  lambda x, y, c: s.add(c, s.mul(to_compute(x, s), to_compute(y, s))))[0]
    if rtt(acc).element_type == elt:
        return red
    return round_to(red, out_dims, elt)


def round_to(red, out_dims, elt) -> "ir.Value":
    """``red`` (the compute type) converted to ``elt`` elementwise."""
    n = len(out_dims)
    return generic([red], [empty(out_dims, elt)], [identity_map(n), identity_map(n)],
                   [PARALLEL] * n, lambda v, _o: from_compute(v, elt))[0]


def _same_dim(x, y) -> bool:
    """Statically equal, or both dynamic (a shape-generic kernel assumes the
    builder checked them)."""
    if isinstance(x, int) and isinstance(y, int):
        return x == y
    return not isinstance(x, int) and not isinstance(y, int)
