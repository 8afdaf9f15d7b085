"""Fused last-axis row ops, each lowered to one kernel (a few linalg ops in
one function): SoftmaxLastDim, RmsNormLastDim, LayerNormLastDim and
FusedSoftmaxCrossEntropy. f16/bf16 compute in f32, f64 in f64.

* SoftmaxLastDim: a max pass, then one pass that writes e = exp(x − max)
  and accumulates Σ e (one exp per element), then e / Σ.
* RmsNormLastDim: Σ x² per row, then x / sqrt(Σ/n + eps).
* LayerNormLastDim: mean, then the centred population variance (two-pass,
  no cancellation), then (x − mean) / sqrt(var + eps) [* weight] [+ bias]
  (the optional affine in the compute type, rounded once).
* FusedSoftmaxCrossEntropy: a max pass and a Σ exp(x − max) pass, then one pass
  over the rows picking x[t] (``tensor.extract``); rows whose target equals
  ``ignore_index`` give 0 and leave the Mean's divisor (the registry
  reference's rule: a Mean over only-ignored rows is 0/0 = NaN); a target
  outside [0, V) gives NaN (never an out-of-bounds read).
"""
from __future__ import annotations

from compiler.mlir import arith, ir, math, tensor

from .core import (PARALLEL, REDUCTION, Lowering, Scalar, affine_map, dims, empty, fill,
                   from_compute, generic, identity_map, loop_index, lowers, rank, rtt,
                   to_compute)
from runtime.dtype import DType


def _row_count(s: Scalar, d) -> "ir.Value":
    return s.const(d) if isinstance(d, int) else s.from_index(d)


def row_max(x, s: Scalar):
    """max over the last axis of ``x`` (accumulator tensor of ``s.ty``)."""
    n = rank(x)
    row = affine_map(n, list(range(n - 1)))
    m0 = fill(s.lowest(), empty(dims(x)[:-1], s.ty))
    m = generic([x], [m0], [identity_map(n), row], [PARALLEL] * (n - 1) + [REDUCTION],
                lambda a, c: arith.maximumf(to_compute(a, s), c))[0]
    return m, row


def row_max_sum(x, s: Scalar):
    """(m, z, row map): m = max over the last axis, z = Σ exp(x − m)."""
    n = rank(x)
    m, row = row_max(x, s)
    z0 = fill(s.const(0), empty(dims(x)[:-1], s.ty))
    z = generic([x, m], [z0], [identity_map(n), row, row], [PARALLEL] * (n - 1) + [REDUCTION],
                lambda a, mx, c: s.add(c, math.exp(s.sub(to_compute(a, s), mx))))[0]
    return m, z, row


@lowers("SoftmaxLastDim")
def _softmax(lw: Lowering):
    """max pass; e = exp(x − max) written once while Σ e accumulates (a
    two-output generic: e indexed by every loop, the sum by the row loops);
    e / Σ. One exp per element. When the output has the compute type, e is
    written into the output and divided in place (no full-size temporary)."""
    x = lw.operands[0]
    s = Scalar.compute(lw.in_dtypes[0])
    n = rank(x)
    xd = dims(x)
    m, row = row_max(x, s)
    z0 = fill(s.const(0), empty(xd[:-1], s.ty))

    def exp_sum(a, mx, _e, c):
        e = math.exp(s.sub(to_compute(a, s), mx))
        return [e, s.add(c, e)]

    e, z = generic([x, m], [empty(xd, s.ty), z0], [identity_map(n), row, identity_map(n), row],
                   [PARALLEL] * (n - 1) + [REDUCTION], exp_sum)
    if lw.out_elt == s.ty:  # e / Σ in place: e lives in the output, no temporary
        return generic([z], [e], [row, identity_map(n)], [PARALLEL] * n,
                       lambda sz, v: s.div(v, sz))[0]
    out = empty(xd, lw.out_elt)
    return generic([e, z], [out], [identity_map(n), row, identity_map(n)], [PARALLEL] * n,
                   lambda v, sz, _o: from_compute(s.div(v, sz), lw.out_elt))[0]


@lowers("RmsNormLastDim")
def _rms_norm(lw: Lowering):
    x = lw.operands[0]
    s = Scalar.compute(lw.in_dtypes[0])
    n = rank(x)
    xd = dims(x)
    row = affine_map(n, list(range(n - 1)))
    acc = fill(s.const(0), empty(xd[:-1], s.ty))
    iters = [PARALLEL] * (n - 1) + [REDUCTION]

    def sq(a, c):
        a = to_compute(a, s)
        return s.add(c, s.mul(a, a))

    ss = generic([x], [acc], [identity_map(n), row], iters, sq)[0]
    count = _row_count(s, xd[-1])
    eps = s.const(float(lw.param("eps")))
    out = empty(xd, lw.out_elt)
    return generic([x, ss], [out], [identity_map(n), row, identity_map(n)], [PARALLEL] * n,
                   lambda a, t, _o: from_compute(
                       s.div(to_compute(a, s), math.sqrt(s.add(s.div(t, count), eps))),
                       lw.out_elt))[0]


@lowers("LayerNormLastDim")
def _layer_norm(lw: Lowering):
    x = lw.operands[0]
    s = Scalar.compute(lw.in_dtypes[0])
    n = rank(x)
    xd = dims(x)
    row = affine_map(n, list(range(n - 1)))
    iters = [PARALLEL] * (n - 1) + [REDUCTION]
    count = _row_count(s, xd[-1])
    acc = fill(s.const(0), empty(xd[:-1], s.ty))
    total = generic([x], [acc], [identity_map(n), row], iters,
                    lambda a, c: s.add(c, to_compute(a, s)))[0]
    mean = generic([total], [empty(xd[:-1], s.ty)], [identity_map(n - 1)] * 2,
                   [PARALLEL] * (n - 1), lambda t, _o: s.div(t, count))[0]

    def sq_dev(a, mu, c):
        d = s.sub(to_compute(a, s), mu)
        return s.add(c, s.mul(d, d))

    acc2 = fill(s.const(0), empty(xd[:-1], s.ty))
    ssd = generic([x, mean], [acc2], [identity_map(n), row, row], iters, sq_dev)[0]
    eps = s.const(float(lw.param("eps")))
    out = empty(xd, lw.out_elt)
    affine = list(lw.operands[1:])  # weight [D], bias [D]: applied in s.ty, one rounding
    col = affine_map(n, [n - 1])

    def normalize(a, mu, v, *rest):
        y = s.div(s.sub(to_compute(a, s), mu), math.sqrt(s.add(s.div(v, count), eps)))
        for vec, combine in zip(rest[:-1], (s.mul, s.add)):
            y = combine(y, to_compute(vec, s))
        return from_compute(y, lw.out_elt)

    return generic([x, mean, ssd] + affine, [out],
                   [identity_map(n), row, row] + [col] * len(affine) + [identity_map(n)],
                   [PARALLEL] * n, normalize)[0]


@lowers("FusedSoftmaxCrossEntropy")
def _softmax_cross_entropy(lw: Lowering):
    logits, targets = lw.operands
    s = Scalar.compute(lw.in_dtypes[0])
    n = rank(logits)
    r = n - 1  # row loops
    ld = dims(logits)
    vocab = ld[-1]
    m, z, _ = row_max_sum(logits, s)
    i64 = ir.IntegerType.get_signless(64)
    tdt = lw.in_dtypes[1]
    ignore = arith.constant(i64, int(lw.param("ignore_index")))
    zero64 = arith.constant(i64, 0)
    v64 = arith.index_cast(i64, vocab if not isinstance(vocab, int) else
                           arith.constant(ir.IndexType.get(), vocab))
    nan = s.const(float("nan"))
    f32 = ir.F32Type.get()
    reduction = lw.param("reduction")

    def row_nll(t, mx, sz):
        """(nll of the row in s.ty, 1.0 if the row counts else 0.0)."""
        if t.type != i64:
            t = arith.extui(i64, t) if tdt is DType.U32 else arith.extsi(i64, t)
        valid = arith.cmpi(arith.CmpIPredicate.ne, t, ignore)
        inrange = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, t, zero64),
                             arith.cmpi(arith.CmpIPredicate.slt, t, v64))
        safe = arith.select(arith.andi(valid, inrange), t, zero64)
        at = [loop_index(i) for i in range(r)] + [arith.index_cast(ir.IndexType.get(), safe)]
        picked = to_compute(tensor.extract(logits, at), s)
        nll = s.sub(s.add(mx, math.log(sz)), picked)  # -(x_t - m - log z)
        nll = arith.select(inrange, nll, nan)
        nll = arith.select(valid, nll, s.const(0))
        return nll, arith.select(valid, s.const(1), s.const(0))

    row = identity_map(r)
    if reduction == "none":
        out = empty(ld[:-1], f32)
        return generic([targets, m, z], [out], [row, row, row, row], [PARALLEL] * r,
                       lambda t, mx, sz, _o: from_compute(row_nll(t, mx, sz)[0], f32))[0]
    scalar = affine_map(r, [])
    tot = fill(s.const(0), empty([], s.ty))
    cnt = fill(s.const(0), empty([], s.ty))

    def acc(t, mx, sz, c_tot, c_cnt):
        nll, valid = row_nll(t, mx, sz)
        return [s.add(c_tot, nll), s.add(c_cnt, valid)]

    tot, cnt = generic([targets, m, z], [tot, cnt], [row, row, row, scalar, scalar],
                       [REDUCTION] * r, acc)
    out = empty([], f32)
    if reduction == "sum":
        return generic([tot], [out], [affine_map(0, [])] * 2, [],
                       lambda a, _o: _to_f32(a, f32))[0]
    return generic([tot, cnt], [out], [affine_map(0, [])] * 3, [],
                   lambda a, c, _o: _to_f32(s.div(a, c), f32))[0]


def _to_f32(v, f32):
    if v.type == f32:
        return v
    return arith.truncf(f32, v)
