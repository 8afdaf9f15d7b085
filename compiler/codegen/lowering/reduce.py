"""Reductions (Sum/Max/Min/Mean Dim and All, ArgMax/ArgMin, ReduceSumTo/MaxTo,
CumSum) and the log-softmax primitives. f16/bf16 accumulate in f32."""
from __future__ import annotations

from compiler.mlir import arith, ir, math

from .core import (PARALLEL, REDUCTION, Lowering, Scalar, affine_map, dims, empty, fill, lowers,
                   from_compute, generic, identity_map, loop_index, rank, reshape, rtt,
                   to_compute)


def _combine(kind: str):
    return {"Sum": Scalar.add, "Mean": Scalar.add, "Max": Scalar.max, "Min": Scalar.min}[kind]


def _init(kind: str, s: Scalar):
    return {"Sum": lambda: s.const(0), "Mean": lambda: s.const(0),
            "Max": s.lowest, "Min": s.highest}[kind]()


def _narrow(v, out_elt, post=None):
    """Map accumulator tensor ``v`` to ``out_elt`` (post(x) applied first)."""
    if post is None and rtt(v).element_type == out_elt:
        return v
    n = rank(v)
    init = empty(dims(v), out_elt)
    return generic([v], [init], [identity_map(n), identity_map(n)], [PARALLEL] * n,
                   lambda x, _o: from_compute(post(x) if post else x, out_elt))[0]


def reduce_axes(x, dtype, kind: str, axes, out_elt):
    """Reduce ``x`` over ``axes`` (dropped from the shape) with Sum/Max/Min/Mean."""
    s = Scalar.compute(dtype)
    n = rank(x)
    axes = sorted(set(axes))
    xd = dims(x)
    kept = [i for i in range(n) if i not in axes]
    acc = fill(_init(kind, s), empty([xd[i] for i in kept], s.ty))
    comb = _combine(kind)
    iters = [REDUCTION if i in axes else PARALLEL for i in range(n)]
    red = generic([x], [acc], [identity_map(n), affine_map(n, kept)], iters,
                  lambda a, c: comb(s, to_compute(a, s), c))[0]
    post = None
    if kind == "Mean":
        count = None
        for i in axes:
            d = xd[i]
            dv = s.const(d) if isinstance(d, int) else s.from_index(d)
            count = dv if count is None else s.mul(count, dv)
        if count is not None:
            post = lambda v: s.div(v, count)  # noqa: E731
    return _narrow(red, out_elt, post)


@lowers("SumDim", "MaxDim", "MinDim", "MeanDim")
def _reduce_dim(lw: Lowering):
    x = lw.operands[0]
    return reduce_axes(x, lw.in_dtypes[0], lw.name[:-3], [lw.axis("axis", rank(x))], lw.out_elt)


@lowers("SumAll", "MaxAll", "MinAll", "MeanAll")
def _reduce_all(lw: Lowering):
    x = lw.operands[0]
    return reduce_axes(x, lw.in_dtypes[0], lw.name[:-3], range(rank(x)), lw.out_elt)


@lowers("ReduceSumTo", "ReduceMaxTo")
def _reduce_to(lw: Lowering):
    x = lw.operands[0]
    shape = rtt(x).shape
    target = list(lw.param("shape"))
    padded = [1] * (len(shape) - len(target)) + target
    axes = [i for i, (d, t) in enumerate(zip(shape, padded)) if t == 1 and d != 1]
    kind = "Sum" if lw.name == "ReduceSumTo" else "Max"
    out = reduce_axes(x, lw.in_dtypes[0], kind, axes, lw.out_elt) if axes else x
    return reshape(out, target)


@lowers("ArgMaxDim", "ArgMinDim")
def _arg_reduce(lw: Lowering):
    """One 2-output generic carrying (best value, its index); the first
    occurrence wins; a NaN beats every number (numpy's argmax/argmin)."""
    x = lw.operands[0]
    n = rank(x)
    axis = lw.axis("axis", n)
    s = Scalar.compute(lw.in_dtypes[0])
    better = "gt" if lw.name == "ArgMaxDim" else "lt"
    xd = dims(x)
    kept = [i for i in range(n) if i != axis]
    out_dims = [xd[i] for i in kept]
    idx_ty = lw.out_elt
    best = fill(s.lowest() if better == "gt" else s.highest(), empty(out_dims, s.ty))
    where = fill(arith.constant(idx_ty, 0), empty(out_dims, idx_ty))
    iters = [REDUCTION if i == axis else PARALLEL for i in range(n)]
    out_map = affine_map(n, kept)

    def body(a, v, i):
        a = to_compute(a, s)
        take = s.cmp(better, a, v)
        if s.is_float:
            a_nan = arith.cmpf(arith.CmpFPredicate.UNO, a, a)
            v_num = arith.cmpf(arith.CmpFPredicate.ORD, v, v)
            take = arith.ori(take, arith.andi(a_nan, v_num))
        k = arith.index_cast(idx_ty, loop_index(axis))
        return [arith.select(take, a, v), arith.select(take, k, i)]

    return generic([x], [best, where], [identity_map(n), out_map, out_map], iters, body)[1]


@lowers("CumSum")
def _cumsum(lw: Lowering):
    """out[.., i, ..] = sum_{k <= i} x[.., k, ..]: a generic with an extra
    reduction loop k masked to k <= i (O(n^2) along the axis)."""
    x = lw.operands[0]
    n = rank(x)
    axis = lw.axis("axis", n)
    s = Scalar.compute(lw.in_dtypes[0])
    acc = fill(s.const(0), empty(dims(x), s.ty))
    x_map = affine_map(n + 1, [n if i == axis else i for i in range(n)])
    out_map = affine_map(n + 1, list(range(n)))

    def body(a, c):
        keep = arith.cmpi(arith.CmpIPredicate.ule, loop_index(n), loop_index(axis))
        return s.add(c, arith.select(keep, to_compute(a, s), s.const(0)))

    red = generic([x], [acc], [x_map, out_map], [PARALLEL] * n + [REDUCTION], body)[0]
    return _narrow(red, lw.out_elt)


@lowers("LogSoftmaxLastDim", platform="cpu")
def _log_softmax_cpu(lw: Lowering):
    """Row by row (``fused_norm.softmax_rows``): max, then x − max written
    while Σ exp accumulates, then − log Σ in place."""
    from .fused_norm import softmax_rows
    return softmax_rows(lw.operands[0], Scalar.compute(lw.in_dtypes[0]), lw.out_elt, log=True)


def _last_dim_stats(x, s):
    """(max, sum(exp(x - max))) over the last axis, as accumulator tensors."""
    n = rank(x)
    xd = dims(x)
    row = affine_map(n, list(range(n - 1)))
    iters = [PARALLEL] * (n - 1) + [REDUCTION]
    m = fill(s.lowest(), empty(xd[:-1], s.ty))
    m = generic([x], [m], [identity_map(n), row], iters,
                lambda a, c: s.max(to_compute(a, s), c))[0]
    z = fill(s.const(0), empty(xd[:-1], s.ty))
    z = generic([x, m], [z], [identity_map(n), row, row], iters,
                lambda a, mx, c: s.add(c, math.exp(s.sub(to_compute(a, s), mx))))[0]
    return m, z, row


@lowers("LogSoftmaxLastDim")
def _log_softmax(lw: Lowering):
    x = lw.operands[0]
    s = Scalar.compute(lw.in_dtypes[0])
    n = rank(x)
    m, z, row = _last_dim_stats(x, s)
    out = empty(dims(x), lw.out_elt)
    return generic([x, m, z], [out], [identity_map(n), row, row, identity_map(n)],
                   [PARALLEL] * n,
                   lambda a, mx, sz, _o: from_compute(
                       s.sub(s.sub(to_compute(a, s), mx), math.log(sz)), lw.out_elt))[0]


@lowers("LogSoftmaxLastDimBackward")
def _log_softmax_bw(lw: Lowering):
    """inputs (y, g): g - exp(y) * sum_last(g)."""
    y, g = lw.operands
    s = Scalar.compute(lw.in_dtypes[0])
    n = rank(y)
    gsum = reduce_axes(g, lw.in_dtypes[1], "Sum", [n - 1], s.ty)
    row = affine_map(n, list(range(n - 1)))
    out = empty(dims(y), lw.out_elt)
    return generic([y, g, gsum], [out], [identity_map(n), identity_map(n), row, identity_map(n)],
                   [PARALLEL] * n,
                   lambda a, b, t, _o: from_compute(
                       s.sub(to_compute(b, s), s.mul(math.exp(to_compute(a, s)), t)),
                       lw.out_elt))[0]
