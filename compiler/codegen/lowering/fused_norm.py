"""Fused last-axis row ops, each lowered to one kernel: SoftmaxLastDim,
RmsNormLastDim, LayerNormLastDim and FusedSoftmaxCrossEntropy (and, from
``reduce.py``, LogSoftmaxLastDim). f16/bf16 compute in f32, f64 in f64.

The first three (and log-softmax) are one loop over the rows with a few
passes over each row while it sits in L1 (``over_rows``): memory sees one
read of the input and one write of the output, reductions are vectorized
(``reassoc`` sums, ``nnan`` maxima) and nothing is allocated.

* SoftmaxLastDim: a max pass, then one pass that writes e = exp(x − max)
  and accumulates Σ e (one exp per element), then e · (1/Σ) in place.
* RmsNormLastDim: Σ x², then x · 1/sqrt(Σ/n + eps) [* weight].
* LayerNormLastDim: f32/f16/bf16: Σ x and Σ x² in one pass, accumulated in
  f64; f64: mean, then the centred variance; then (x − mean) · 1/sqrt(var + eps)
  [* weight] [+ bias] (the optional affine in the compute type, rounded once).
* FusedSoftmaxCrossEntropy: a max pass and a Σ exp(x − max) pass, then one pass
  over the rows picking x[t] (``tensor.extract``); rows whose target equals
  ``ignore_index`` give 0 and leave the Mean's divisor (the registry
  reference's rule: a Mean over only-ignored rows is 0/0 = NaN); a target
  outside [0, V) gives NaN (never an out-of-bounds read).
"""
from __future__ import annotations

from compiler.mlir import arith, ir, math, scf, tensor

from .core import (PARALLEL, REDUCTION, Lowering, Scalar, affine_map, dims, empty, fill,
                   from_compute, generic, identity_map, index, insert_at, loop_index, lowers,
                   mark_rolled, rank, rtt, slice_at, to_compute)
from runtime.dtype import DType


# -- row loops -----------------------------------------------------------------
# The row kernels below run one loop nest over the rows (every axis but the
# last) and, inside it, a few scalar loops over one row: a row (4 KiB for
# 1024 f32) stays in L1 between them, so memory sees one read of the input
# and one write of the output. Reductions inside a row are scalar
# ``scf.for`` recurrences whose float ops carry ``reassoc``, so LLVM
# vectorizes them (lane-wise partial sums and maxima, combined at the end).

def reassoc():
    return ir.Attribute.parse("#arith.fastmath<reassoc,contract>")


def _for(upper, inits, body) -> list:
    """``scf.for i = 0 to upper`` carrying ``inits``; ``body(i, *carried)``
    returns the next values. Returns the final values."""
    op = scf.ForOp(index(0), upper if isinstance(upper, ir.Value) else index(upper),
                   index(1), list(inits))
    with ir.InsertionPoint(op.body):
        scf.YieldOp(list(body(op.induction_variable, *op.inner_iter_args)))
    return list(op.results)


#: LayerNorm rows of at most this many elements (static) run their passes
#: rolled (``over_rows``): [1024,384] f32 119 -> 94 us with AVX-512; longer
#: ones ran 1-2% faster unrolled ([512,1024], [128,4096]).
LAYER_NORM_ROLLED_MAX = 768


def over_rows(xs, out, row_fn, rolled: bool = False):
    """For every row index ``at`` of ``out`` (all axes but the last):
    ``row_fn([x[at, :] for x in xs], out[at, :], n) -> new out row`` (1-D
    tensors; ``n`` the row length). Returns the filled ``out``. An ``x`` of
    a static extent 1 on an axis is read at index 0 there: it broadcasts
    over that axis (softmax's additive mask). ``rolled`` (the norms): LLVM
    vectorizes the passes over a row but does not unroll them
    (``core.mark_rolled``; unrolled, RMSNorm and short LayerNorm rows ran
    15-35% slower; softmax ran as fast unrolled, f16 and AVX2 0.3-2% faster:
    docs/compile-at-scale.md "Seventeenth round")."""
    od = dims(out)
    n = od[-1]
    if n == 0:  # static empty rows: nothing to compute (nor to slice)
        return out
    if rolled:
        mark_rolled()

    def row_of(x, at):
        shape = rtt(x).shape
        at = [index(0) if shape[d] == 1 else a for d, a in enumerate(at)]
        return slice_at(x, at, [1] * len(at) + [n], True)

    def nest(level, acc, at):
        if level == len(od) - 1:
            sizes = [1] * len(at) + [n]
            row = row_fn([row_of(x, at) for x in xs],
                         slice_at(acc, at, sizes, True), n)
            return insert_at(row, acc, at, sizes)
        return _for(od[level], [acc], lambda i, a: [nest(level + 1, a, at + [i])])[0]

    return nest(0, out, [])


def row_reduce(rows, n, inits, step) -> list:
    """Scalar reduction over ``n`` elements: ``step(j, [row[j]...], *acc)``
    returns the next accumulators."""
    return _for(n, inits, lambda j, *acc: step(j, [tensor.extract(r, [j]) for r in rows], *acc))


def row_write(orow, n, body, carried=()) -> list:
    """One pass over ``orow``: ``body(j, orow, *carried) -> (element, [next
    carried])`` stores ``element`` at ``orow[j]`` (``orow`` as the pass has
    it so far: ``tensor.extract(orow, [j])`` reads what an earlier pass
    wrote). Returns ``[orow, *carried]``."""
    def step(j, o, *acc):
        v, nxt = body(j, o, *acc)
        return [tensor.insert(v, o, [j]), *nxt]
    return _for(n, [orow, *carried], step)


def _fadd(a, b):
    return arith.addf(a, b, fastmath=reassoc())


def _fmul(a, b):
    return arith.mulf(a, b, fastmath=reassoc())


def softmax_rows(x, s: Scalar, out_elt, log: bool = False, scale=None, mask=None):
    """Softmax (``log``: log-softmax) over the last axis of ``x``, row by
    row: a max pass; then e = exp(x − max) (log: d = x − max) written into
    the output while Σ exp accumulates; then the output row scaled by 1/Σ
    (log: minus log Σ) in place. When the output is narrower than the
    compute type the second pass only sums and the third recomputes from x.
    The input is read twice, the output row once more while in L1.
    ``scale`` (softmax only, x of the compute type): every element is read as
    x · scale (the scale rounded to the compute type, one rounded product:
    the bits a separate ``MulScalar`` stores) in the exp pass (a multiply per
    vector beside the exp's ~21 ops); the max pass takes max(x) · scale for a
    positive scale (the same value: rounding is monotone), else max(x · scale).
    ``mask`` (softmax only, of x's rank and compute type, each extent 1 or
    x's): every element is read as (x [· scale]) + mask, the rounded sum a
    separate ``Add`` stores, in the max pass and again in the exp pass (the
    x and mask rows are in L1: two loads and an add, no full-size store)."""
    same = out_elt == s.ty
    k_scale = None if scale is None else s.const(float(scale))

    def load(v, mr=None, j=None):
        v = to_compute(v, s)
        v = v if k_scale is None else s.mul(v, k_scale)
        return v if mr is None else s.add(v, tensor.extract(mr, [j]))

    def row(xs, orow, n):
        xr, mr = (xs[0], xs[1]) if mask is not None else (xs[0], None)
        if mr is not None:
            m, = row_reduce([xr, mr], n, [s.lowest()],
                            lambda j, v, c: [max_nnan(s.add(load(v[0]), v[1]), c)])
        elif k_scale is not None and scale > 0:
            # rounding is monotone, so max(x · s) = max(x) · s for s > 0: one multiply
            m, = row_reduce([xr], n, [s.lowest()], lambda j, v, c: [max_nnan(v[0], c)])
            m = s.mul(m, k_scale)
        else:
            m, = row_reduce([xr], n, [s.lowest()], lambda j, v, c: [max_nnan(load(v[0]), c)])

        def shifted(j):
            return s.sub(load(tensor.extract(xr, [j]), mr, j), m)

        if same:
            def exp_sum(j, _o, z):
                d = shifted(j)
                e = math.exp(d)
                return (d if log else e), [_fadd(z, e)]
            orow, z = row_write(orow, n, exp_sum, [s.const(0)])
            k = math.log(z) if log else s.div(s.const(1), z)
            return row_write(orow, n, lambda j, o: (
                (s.sub if log else s.mul)(tensor.extract(o, [j]), k), []))[0]
        z, = row_reduce([xr], n, [s.const(0)],
                        lambda j, v, c: [_fadd(c, math.exp(shifted(j)))])
        k = math.log(z) if log else s.div(s.const(1), z)
        return row_write(orow, n, lambda j, _o: (from_compute(
            s.sub(shifted(j), k) if log else s.mul(math.exp(shifted(j)), k), out_elt), []))[0]

    return over_rows([x] if mask is None else [x, mask], empty(dims(x), out_elt), row)


def max_nnan(a, c):
    """max(a, c) for a row maximum: ``maxnumf`` with ``nnan``, which x86
    does in one instruction and LLVM vectorizes. A NaN in the row may be
    dropped from the maximum, but every consumer here also sums exp(x − max)
    over the row, so the NaN still reaches every output of that row."""
    return arith.maxnumf(a, c, fastmath=ir.Attribute.parse("#arith.fastmath<nnan,reassoc>"))


def rms_norm_rows(x, s: Scalar, eps: float, out_elt, weight=None):
    """x · 1/sqrt(mean(x²) + eps) [* weight] row by row: Σ x² (vectorized,
    reassociated), then one normalizing pass (the row is still in L1); the
    optional 1-D ``weight`` over the last axis is applied in the compute
    type, rounded once."""
    def row(xs, orow, n):
        xr, = xs
        ss, = row_reduce([xr], n, [s.const(0)], lambda j, v, c: [
            _fadd(c, _fmul(to_compute(v[0], s), to_compute(v[0], s)))])
        inv = s.div(s.const(1), math.sqrt(s.add(s.div(ss, _row_count(s, n)), s.const(eps))))

        def norm(j, _o):
            y = s.mul(to_compute(tensor.extract(xr, [j]), s), inv)
            if weight is not None:
                y = s.mul(y, to_compute(tensor.extract(weight, [j]), s))
            return from_compute(y, out_elt), []
        return row_write(orow, n, norm)[0]

    return over_rows([x], empty(dims(x), out_elt), row, rolled=True)


def layer_norm_rows(x, s: Scalar, eps: float, out_elt, affine=()):
    """(x − mean) · 1/sqrt(var + eps) row by row (population variance), then
    ``* weight`` and ``+ bias`` for the optional 1-D ``affine`` operands
    (weight[, bias] over the last axis), in the compute type, rounded once.
    f32/f16/bf16: one pass accumulating Σ x and Σ x² in f64 (no cancellation
    at f32 precision), then one normalizing pass. f64: a mean pass and a
    centred-variance pass (both over the row in L1), then the normalizing
    pass."""
    f64 = ir.F64Type.get()
    w = Scalar.compute(DType.F64)

    def _affine(c: Scalar, j, y):
        for vec, combine in zip(affine, (c.mul, c.add)):
            y = combine(y, to_compute(tensor.extract(vec, [j]), c))
        return y

    def row(xs, orow, n):
        xr, = xs
        count = _row_count(w, n)
        if s.ty == f64:
            tot, = row_reduce([xr], n, [w.const(0)], lambda j, v, c: [_fadd(c, v[0])])
            mean = w.div(tot, count)
            ssd, = row_reduce([xr], n, [w.const(0)], lambda j, v, c: [
                _fadd(c, _fmul(w.sub(v[0], mean), w.sub(v[0], mean)))])
            var = w.div(ssd, count)
        else:
            def acc(j, v, c1, c2):
                a = arith.extf(f64, to_compute(v[0], s))
                return [_fadd(c1, a), _fadd(c2, _fmul(a, a))]
            tot, sq = row_reduce([xr], n, [w.const(0), w.const(0)], acc)
            mean = w.div(tot, count)
            # E[x²] − mean², clamped at 0 against rounding
            var = w.max(w.sub(w.div(sq, count), w.mul(mean, mean)), w.const(0))
        inv = w.div(w.const(1), math.sqrt(w.add(var, w.const(eps))))
        if s.ty == f64:
            return row_write(orow, n, lambda j, _o: (from_compute(_affine(
                w, j, w.mul(w.sub(tensor.extract(xr, [j]), mean), inv)), out_elt), []))[0]
        # the mean as hi + lo in the compute type: x − hi is exact near the
        # mean, so (x − hi − lo) keeps the f64 mean's accuracy
        hi = arith.truncf(s.ty, mean)
        lo = arith.truncf(s.ty, w.sub(mean, arith.extf(f64, hi)))
        inv = arith.truncf(s.ty, inv)
        return row_write(orow, n, lambda j, _o: (from_compute(_affine(s, j, s.mul(s.sub(
            s.sub(to_compute(tensor.extract(xr, [j]), s), hi), lo), inv)), out_elt), []))[0]

    n = dims(x)[-1]
    return over_rows([x], empty(dims(x), out_elt), row,
                     rolled=isinstance(n, int) and n <= LAYER_NORM_ROLLED_MAX)


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


@lowers("SoftmaxLastDim", platform="cpu")
def _softmax_cpu(lw: Lowering):
    return softmax_rows(lw.operands[0], Scalar.compute(lw.in_dtypes[0]), lw.out_elt,
                        scale=_scale_param(lw), mask=_mask_operand(lw))


def _scale_param(lw: Lowering):
    """SoftmaxLastDim's ``scale`` (None: off); the kernel serves it where x
    has its compute type (``codegen.fused._softmax_serves``), where reading
    x · scale in the compute type is the rounded product a MulScalar stores."""
    from compiler.errors import LoweringError
    scale = lw.params.get("scale")
    elt = ir.RankedTensorType(lw.operands[0].type).element_type
    if scale is not None and Scalar.compute(lw.in_dtypes[0]).ty != elt:
        raise LoweringError(f"SoftmaxLastDim scale={scale}: the kernel takes x of its compute "
                            f"type (f32, f64), got {lw.in_dtypes[0]}; leave the MulScalar "
                            "unfolded (fuel-fuse does where the kernel does not serve it)")
    return scale


def _mask_operand(lw: Lowering):
    """SoftmaxLastDim's additive mask (None: none), served as the scale is:
    x of its compute type, where x [· scale] + mask in it is the sum an Add
    stores."""
    from compiler.errors import LoweringError
    if len(lw.operands) < 2:
        return None
    elt = ir.RankedTensorType(lw.operands[0].type).element_type
    if Scalar.compute(lw.in_dtypes[0]).ty != elt:
        raise LoweringError(f"SoftmaxLastDim with an additive mask: the kernel takes x and the "
                            f"mask of x's compute type (f32, f64), got {lw.in_dtypes[0]}; leave "
                            "the Add unfolded (fuel-fuse does where the kernel does not serve it)")
    return lw.operands[1]


@lowers("RmsNormLastDim", platform="cpu")
def _rms_norm_cpu(lw: Lowering):
    return rms_norm_rows(lw.operands[0], Scalar.compute(lw.in_dtypes[0]),
                         float(lw.param("eps")), lw.out_elt,
                         lw.operands[1] if len(lw.operands) > 1 else None)


@lowers("LayerNormLastDim", platform="cpu")
def _layer_norm_cpu(lw: Lowering):
    return layer_norm_rows(lw.operands[0], Scalar.compute(lw.in_dtypes[0]),
                           float(lw.param("eps")), lw.out_elt, affine=lw.operands[1:])


# -- the generic rules: whole-tensor linalg generics (what targets without a
#    specialised row kernel, e.g. cuda, lower) -------------------------------------
@lowers("SoftmaxLastDim")
def _softmax(lw: Lowering):
    """max pass; e = exp(x − max) written once while Σ e accumulates (a
    two-output generic: e indexed by every loop, the sum by the row loops);
    e / Σ. One exp per element. When the output has the compute type, e is
    written into the output and divided in place (no full-size temporary).
    ``scale``: x · scale first (a generic of its own, the MulScalar's product)."""
    x = lw.operands[0]
    s = Scalar.compute(lw.in_dtypes[0])
    n = rank(x)
    xd = dims(x)
    scale, mask = _scale_param(lw), _mask_operand(lw)
    if scale is not None:  # x · scale in the compute type (x has it), as MulScalar
        x = generic([x], [empty(xd, s.ty)], [identity_map(n)] * 2, [PARALLEL] * n,
                    lambda a, _o: s.mul(a, s.const(float(scale))))[0]
    if mask is not None:  # x + mask (index 0 on its extents of 1), as Add
        bmap = affine_map(n, [None if d == 1 else i for i, d in enumerate(rtt(mask).shape)])
        x = generic([x, mask], [empty(xd, s.ty)], [identity_map(n), bmap, identity_map(n)],
                    [PARALLEL] * n, lambda a, b, _o: s.add(a, b))[0]
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
    weight = list(lw.operands[1:])  # [D]: applied in s.ty, one rounding

    def normalize(a, t, *rest):
        y = s.div(to_compute(a, s), math.sqrt(s.add(s.div(t, count), eps)))
        if weight:
            y = s.mul(y, to_compute(rest[0], s))
        return from_compute(y, lw.out_elt)

    return generic([x, ss] + weight, [out],
                   [identity_map(n), row] + [affine_map(n, [n - 1])] * len(weight)
                   + [identity_map(n)], [PARALLEL] * n, normalize)[0]


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
