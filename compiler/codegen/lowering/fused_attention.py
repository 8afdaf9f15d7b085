"""FlashAttn (fused id 12) forward as one kernel. The generic rule (below, what
targets without a rule of their own lower): a few linalg ops in one function.
The cpu rule (``_flash_attn_cpu``): a query-row-tiled loop nest in vector ops,
visiting only the keys of each row's band, with no [Sq, Sk] intermediate.

Inputs q ``[B,Hq,Sq,D]``, k, v ``[B,Hkv,Sk,D]`` (query head h reads kv head
h // (Hq/Hkv), via a floordiv indexing map: no repeated K/V is materialized),
then optionally alibi slopes ``[Hq]`` or an additive mask broadcast to the
scores (rank 2 to 4, told by rank: ``_attention.split_extras``). Params as the
registry entry:
``softmax_scale``, ``causal``, ``window_size_left``/``window_size_right``,
``softcap`` (``None`` = unset) and ``k_len`` (attend the first k_len keys,
bottom-right aligned: offset o = k_len - Sq).

Stages, computed in f32 (f64 for f64 inputs), the storage dtype only at the end:

1. ``S = Q·Kᵀ`` (reduction over D);
2. scores: ``s = scale·S``; softcap ``cap·tanh(s/cap)``; alibi
   ``+= slope[h]·(j - (i + o))``; ``+= mask``; band masks (causal ``j > i+o``, right window
   ``j >= i+o+r+1``, left window ``j <= i+o-l-1``) give ``-inf``;
3. ``m = max_j s`` and ``P = exp(s - m)`` (numerically stable softmax);
4. ``l = Σ_j P`` and ``O = P·V``; ``out = O / l``.

A row whose keys are all masked (``m = -inf``) yields 0, as PyTorch's SDPA
and FlashAttention do: its P is 0, and so are l and O; out = 0 where l = 0.
"""
from __future__ import annotations

from compiler.errors import LoweringError
from compiler.mlir import arith, ir, math, scf, tensor, vector

from .core import (PARALLEL, REDUCTION, Lowering, Scalar, affine_map, dims, empty, fill,
                   from_compute, generic, identity_map, index, insert_at, loop_index, lowers,
                   mark_rolled, rtt, slice_at, to_compute)
from .layout import extract_slice


def _kv_head(hq: int, hkv: int):
    """The affine expr of the kv head read by query head loop ``d1``."""
    h = ir.AffineDimExpr.get(1)
    if hq == hkv:
        return h
    return ir.AffineFloorDivExpr.get(h, ir.AffineConstantExpr.get(hq // hkv))


def _mask_rows(mask):
    """Per axis of the scores [B,Hq,Sq,Sk], whether the additive ``mask``
    (right-aligned) has that extent of its own (not a broadcast 1)."""
    t = rtt(mask)
    own = [t.is_dynamic_dim(i) or t.shape[i] != 1 for i in range(t.rank)]
    return [False] * (4 - t.rank) + own


def _mask_index(mask, axis: int, i):
    """Index ``i`` of the scores as the mask's ``axis`` reads it, numpy's
    broadcast: 0 for a static extent 1, ``min(i, n - 1)`` for a run-time
    extent n (0 where n is 1, i where n is the scores' own)."""
    t = rtt(mask)
    if not t.is_dynamic_dim(axis):
        return i if t.shape[axis] != 1 else index(0)
    n = tensor.dim(mask, index(axis))
    return arith.minsi(i, arith.subi(n, index(1)))


def _operands(lw: Lowering, run_time: bool = False):
    """``(q, k, v, alibi or None, mask or None, (B, Hq, Sq, D, Hkv, Sk),
    k_len)``, checked:
    3 or 4 operands, k_len in [1, Sk], static shapes or, with ``run_time``
    (the cpu rule), B, Sq and Sk as run-time extents (``tensor.dim`` values)
    where k_len is unset (``dynamic_dims``); heads and head size static."""
    ops = lw.operands
    if len(ops) not in (3, 4):
        raise LoweringError(f"FlashAttn takes 3 or 4 operands (q, k, v, [mask or alibi]), "
                            f"got {len(ops)}")
    b, hq, sq, d = dims(ops[0])
    _, hkv, sk, _ = dims(ops[1])
    kl = lw.params.get("k_len")
    dynamic = [n for n, x in (("B", b), ("Sq", sq), ("Sk", sk)) if not isinstance(x, int)]
    static = [n for n, x in (("Hq", hq), ("D", d), ("Hkv", hkv)) if not isinstance(x, int)]
    if static or (dynamic and (not run_time or kl is not None)):
        raise LoweringError(
            f"FlashAttn: {', '.join(static or dynamic)} must be static here (q "
            f"{rtt(ops[0])}, k {rtt(ops[1])}); run-time extents are B, Sq and Sk, on the cpu "
            f"rule, without k_len")
    if kl is not None and not 1 <= kl <= sk:
        raise LoweringError(f"FlashAttn: k_len={kl} must be in [1, Sk={sk}]")
    mask = ops[3] if len(ops) == 4 and rtt(ops[3]).rank >= 2 else None
    alibi = ops[3] if len(ops) == 4 and mask is None else None
    if mask is not None and (kl is not None or not 2 <= rtt(mask).rank <= 4):
        raise LoweringError(f"FlashAttn: an additive mask {rtt(mask)} must have rank 2 to 4 "
                            f"and comes without k_len")
    return (*ops[:3], alibi, mask, (b, hq, sq, d, hkv, sk), kl)


def dynamic_dims(types, params):
    """The extents the cpu kernel takes at run time (``codegen.fused.
    DYNAMIC_FUSED``): q, k, v and the output's batch and sequence, where
    k_len is unset (its offset k_len - Sq is a static param); heads, head
    size and the alibi slopes stay static; an additive mask's batch, query and
    key axes are run-time whatever their extent (the kernel reads a run-time
    extent of 1 as broadcast, numpy's rule: one kernel serves BERT's
    ``[b,1,1,s]`` at every size, b = 1 or s = 1 included). None: compiled
    per shape."""
    if params.get("k_len") is not None:
        return None
    bs = (True, False, True, False)
    extra = ()
    if len(types) == 4:
        rank = len(types[3].shape)
        extra = ((True, False, True, True)[4 - rank:] if rank >= 2 else (False,),)
    return (bs, bs, bs) + extra + (bs,)


@lowers("FlashAttn")
def _flash_attn(lw: Lowering):
    q, k, v, alibi, mask, (b, hq, sq, d, hkv, sk), kl = _operands(lw)
    off = 0
    if kl is not None:
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
        if mask is not None:
            x = s.add(x, to_compute(args[1], s))
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
    if mask is not None:
        own = _mask_rows(mask)
        ins.append(mask)
        maps.append(affine_map(4, [i if own[i] else None for i in range(4 - rtt(mask).rank, 4)]))
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


# -- cpu: a few query rows at a time, in vector ops ---------------------------------
# The generic rule above materializes S, P and O for all heads and reduces over
# the innermost loop, a scalar recurrence per output ([8,4,128,64] took 38 ms
# where the unfused steps took 2). The cpu rule is written in vector ops (the
# ``vectorized`` strategy lowers it as written, as MaxPool2D):
#
# * per (batch, kv head), K is copied transposed to kt [D, Skp] and V to
#   vc [Skp, D] in the compute type (any input view; Skp is Sk rounded up to
#   ``_LANES``, the pad zeros), then its query heads are computed;
# * per block of ``_ROWS`` query rows, only the key chunks of ``_LANES`` that hold
#   a key of the rows' bands [lo, hi) (causal: hi = i+o+1; windows; k_len) are
#   visited. Per chunk the scores of the rows Σ_d q[i,d]·kt[d,chunk] accumulate in
#   registers (one kt load per d serves every row), the scale, softcap, alibi and
#   additive mask apply (a row's mask row is first copied into its score row, so
#   the chunks read it in bounds), keys outside a row's [lo, hi) become -inf, and
#   the row maxima are kept per lane (one reduction per row after the chunks: a
#   horizontal one per chunk cost [1,12,128,32] 0.59 against 0.36 ms with AVX-512);
#   the chunks go to a score buffer [_ROWS, Skp] (in L1);
# * a pass over the same chunks writes p = exp(s - m) and sums it per lane; then
#   o = Σ_j p[j]·vc[j,:] in registers, ``_PIECE`` columns at a time (one vc load
#   per key serves every row); out = o / l (0 for a row without keys).
#
# Code for 256-bit vectors (AVX2; AVX-512's is as above, not timed with these) differs
# in four places, each with the same bits (docs/benchmarks.md, "FlashAttn on AVX2"):
# the chunks inside every row's band skip the band test; the exp pass
# runs a row at a time (four rows' exps spilled 16 registers) with
# ``_exp_nonpositive``; P·V runs over the rows' keys, not the chunks' padding; and a
# K with unit-stride rows (the instance says so: ``_unit_stride_args``) is copied
# transposed in 8x8 register tiles (the element-wise copy was 6% of ViT's attention).
#
# No [Sq, Sk] intermediate exists. f32 (f64 in f64), as the generic rule.
#: A register tile: _ROWS query rows x _LANES keys of scores, then _ROWS x _PIECE
#: outputs: 8 ymm accumulators with AVX2, 4 zmm with AVX-512. (3 x 32 spilled
#: with AVX2's 16 registers: [8,4,32,64] causal 274 us against 209 us for 4 x 16;
#: with AVX-512, 189 against 195 us. One core, thread time.) f32 kernels generated
#: for 512-bit vectors (``conv_spatial.vector_bits``, set from the target) take
#: ``_ROWS_WIDE`` rows: 8 zmm accumulators cover the FMA latency where 4 did not.
#: One znver5 thread, thread time, the attention step: ViT b8 s128 ([8,4,129,64])
#: 1.65 -> 1.25 ms, Llama b8 s128 ([8,8,128,32] causal) 0.90 -> 0.78; as AVX2 code
#: 8 rows spilled (2.58 -> 2.91, 1.31 -> 1.54 ms).
_ROWS, _LANES, _PIECE = 4, 16, 16
_ROWS_WIDE = 8


def _exp_nonpositive(x):
    """``math.exp`` of an f32 vector ``x`` <= 0 (or -inf: the scores less their
    row maximum), marked so (``EXP_NONPOSITIVE_ATTR``): the CPU's math expansion
    then leaves out what x <= 0 does not need (``fastmath``)."""
    from compiler.codegen.common.stages import EXP_NONPOSITIVE_ATTR
    y = math.exp(x)
    y.owner.attributes[EXP_NONPOSITIVE_ATTR] = ir.UnitAttr.get()
    return y


def _unit_stride_args(op) -> set:
    """The arguments the kernel's entry (``op``'s function) takes with a unit
    innermost stride (``family.UNIT_STRIDE_ATTR``, set before lowering)."""
    from compiler.codegen.family import UNIT_STRIDE_ATTR
    fn = op.operation.parent
    while fn is not None and fn.name != "func.func":
        fn = fn.parent
    if fn is None or UNIT_STRIDE_ATTR not in fn.attributes:
        return set()
    return {int(ir.IntegerAttr(a).value) for a in ir.ArrayAttr(fn.attributes[UNIT_STRIDE_ATTR])}


def _loop(lo, hi, inits, body, step=1) -> list:
    """``scf.for i = lo to hi step step`` (index values or ints) carrying ``inits``."""
    as_index = lambda x: x if isinstance(x, ir.Value) else index(x)
    op = scf.ForOp(as_index(lo), as_index(hi), index(step), list(inits))
    with ir.InsertionPoint(op.body):
        scf.YieldOp(list(body(op.induction_variable, *op.inner_iter_args)))
    return list(op.results)


@lowers("FlashAttn", platform="cpu")
def _flash_attn_cpu(lw: Lowering):
    from .fused_norm import reassoc
    q, k, v, alibi, mask, (b, hq, sq, d, hkv, sk), kl = _operands(lw, run_time=True)
    off = 0 if kl is None else kl - sq
    nk = sk if kl is None else kl              # keys [0, nk) exist (B, Sq, Sk: ints or values)
    s = Scalar.compute(lw.in_dtypes[0])
    c, elt = s.ty, lw.out_elt
    scale = float(lw.param("softmax_scale"))
    cap = lw.params.get("softcap")
    causal = bool(lw.params.get("causal"))
    wl, wr = lw.params.get("window_size_left"), lw.params.get("window_size_right")
    g = hq // hkv
    idx, i32 = ir.IndexType.get(), ir.IntegerType.get_signless(32)
    lanes = _LANES
    from .conv_spatial import generated_bits
    wide = generated_bits() >= 512
    nrow = _ROWS_WIDE if wide and str(c) == "f32" else _ROWS
    # 256-bit code: exp for x <= 0 (f32), P·V over the rows' keys only (not AVX-512's:
    # not timed there)
    exp = _exp_nonpositive if not wide and str(c) == "f32" else math.exp

    def ci(x):
        return x if isinstance(x, ir.Value) else arith.constant(idx, int(x))

    # Sk rounded up to whole chunks
    skp = -(-sk // lanes) * lanes if isinstance(sk, int) else \
        arith.muli(arith.divui(arith.addi(sk, ci(lanes - 1)), ci(lanes)), ci(lanes))
    vl = ir.VectorType.get([lanes], c)
    rd = ir.AffineMap.get_minor_identity(4, 1)
    r2 = ir.AffineMap.get_minor_identity(2, 1)
    r1 = ir.AffineMap.get_minor_identity(1, 1)

    zero = s.const(0)

    def head_copy(src, bi, kh, perm, dest):
        """``dest`` [.., Skp or D] with k/v[bi, kh] (perm (1, 0): transposed)
        written in the compute type into its first Sk rows/columns."""
        rows = slice_at(src, [bi, kh], [1, 1, sk, d], True)
        shape = [sk, d] if perm == (0, 1) else [d, sk]
        part = slice_at(dest, [], shape)
        part = generic([rows], [part], [affine_map(2, list(perm)), identity_map(2)],
                       [PARALLEL] * 2, lambda x, _o: to_compute(x, s))[0]
        return insert_at(part, dest, [], shape)

    k_rows = 1 in _unit_stride_args(lw.op)

    def k_transposed(bi, kh, kt):
        """``head_copy(k, bi, kh, (1, 0), kt)`` for an f32 k: 8 x 8 tiles
        transposed in registers (unpack, shuffle and 128-bit lane moves, as
        AVX2's vunpcklps/vshufps/vperm2f128), the keys and columns past the
        last whole tile one element at a time."""
        v8 = ir.VectorType.get([8], c)
        half = lambda lo, hi: [lo, hi, lo + 1, hi + 1, lo + 4, hi + 4, lo + 5, hi + 5]
        pair = lambda lo, hi: [lo, lo + 1, hi, hi + 1, lo + 4, lo + 5, hi + 4, hi + 5]
        lane = lambda lo: [lo, lo + 1, lo + 2, lo + 3, lo + 8, lo + 9, lo + 10, lo + 11]
        fj = arith.muli(arith.divui(ci(sk), ci(8)), ci(8)) if not isinstance(sk, int) \
            else sk // 8 * 8
        fd = d // 8 * 8

        def tile(j0, kt_):
            def cols(d0, kt2):
                r = [read(k, [bi, kh, arith.addi(j0, ci(i)), d0], v8) for i in range(8)]
                t = [vector.shuffle(r[i], r[i + 1], half(0, 8) if u == 0 else half(2, 10))
                     for i in range(0, 8, 2) for u in (0, 1)]      # t0..t7 as r0r1 lo, hi, ...
                w = [vector.shuffle(t[a], t[a + 2], pair(o, o + 8))
                     for a in (0, 1, 4, 5) for o in (0, 2)]       # s0 s1 s2 s3 s4 s5 s6 s7
                for i in range(8):                                 # column i of the tile
                    lo_, hi_ = w[i % 4], w[4 + i % 4]
                    col = vector.shuffle(lo_, hi_, lane(0 if i < 4 else 4))
                    kt2 = write(col, kt2, [arith.addi(d0, ci(i)), j0], r2)
                return [kt2]
            return _loop(0, fd, [kt_], cols, step=8)

        kt = _loop(0, fj, [kt], tile, step=8)[0]

        def one(j, dd, kt_):
            x = to_compute(tensor.extract(k, [bi, kh, j, dd]), s)
            return tensor.insert(x, kt_, [dd, j])
        kt = _loop(fj, sk, [kt], lambda j, kt_: _loop(0, d, [kt_], lambda dd, kt2: [
            one(j, dd, kt2)]))[0]
        if fd < d:
            kt = _loop(0, fj, [kt], lambda j, kt_: _loop(fd, d, [kt_], lambda dd, kt2: [
                one(j, dd, kt2)]))[0]
        return kt

    def read(src, at, vt, m=rd):
        return vector.TransferReadOp(vt, src, at, m, zero, [True]).result

    def write(val, dest, at, m=rd):
        return vector.TransferWriteOp(dest.type, val, dest, at, m, [True]).result

    def splat(x, vt):
        return vector.BroadcastOp(vt, x).result

    vi_t = ir.VectorType.get([lanes], i32)
    iota = arith.constant(vi_t, ir.DenseElementsAttr.get(
        __import__("numpy").arange(lanes, dtype="int32"), type=vi_t))
    neg = splat(s.const(float("-inf")), vl)
    kind = lambda k_: ir.Attribute.parse(f"#vector.kind<{k_}>")

    def block(bi, kh, h, i0, rows, kt, vc, out, srow):
        """Query rows [i0, i0 + rows) of head h: their keys [lo, hi) (the
        union of the rows' bands, each row masked to its own)."""
        vi = ir.VectorType.get([lanes], i32)
        bands = []
        for r in range(rows):
            io = arith.addi(i0, ci(off + r))            # the row's diagonal key
            hi_, lo = ci(nk), ci(0)
            if causal:
                hi_ = arith.minsi(hi_, arith.addi(io, ci(1)))
            if wr is not None:
                hi_ = arith.minsi(hi_, arith.addi(io, ci(int(wr) + 1)))
            if wl is not None:
                lo = arith.maxsi(lo, arith.subi(io, ci(int(wl))))
            hi_ = arith.maxsi(hi_, ci(0))
            lo = arith.minsi(lo, hi_)                      # [lo, hi) may be empty
            bands.append((io, lo, hi_))
        c0 = arith.muli(arith.divui(bands[0][1], ci(lanes)), ci(lanes))
        c1 = arith.muli(arith.divui(arith.addi(bands[-1][2], ci(lanes - 1)), ci(lanes)),
                        ci(lanes))
        c1 = arith.maxsi(c1, c0)
        slope = to_compute(tensor.extract(alibi, [h]), s) if alibi is not None else None
        if mask is not None:                        # the mask's row of each query row
            mrank = rtt(mask).rank
            mrow = lambda r: [_mask_index(mask, a - (4 - mrank), ix) for a, ix in
                              enumerate((bi, h, arith.addi(i0, ci(r)))) if a >= 4 - mrank]

        def at_lanes(x):
            return splat(arith.index_cast(i32, x), vi)

        def scores(edge):
            """The score pass's chunk body; ``edge``: a chunk that may hold keys
            outside a row's [lo, hi) (they become -inf)."""
            def body(j0, r_, *ms):
                def dot(dd, *acc):
                    kv = read(kt, [dd, j0], vl, r2)
                    return [math.fma(splat(to_compute(tensor.extract(
                        q, [bi, h, arith.addi(i0, ci(r)), dd]), s), vl), kv, acc[r])
                            for r in range(rows)]
                acc = _loop(0, d, [splat(zero, vl)] * rows, dot)
                jv = arith.addi(iota, at_lanes(j0))
                new_m = []
                for r, (x, (io, lo, hi_)) in enumerate(zip(acc, bands)):
                    x = arith.mulf(x, splat(s.const(scale), vl))
                    if cap is not None:
                        x = s.mul(splat(s.const(cap), vl),
                                  math.tanh(arith.divf(x, splat(s.const(cap), vl))))
                    if slope is not None:
                        dist = arith.sitofp(vl, arith.subi(jv, at_lanes(io)))
                        x = s.add(x, s.mul(splat(slope, vl), dist))
                    if mask is not None:    # the mask row, copied into the score row below
                        x = s.add(x, read(r_, [ci(r), j0], vl, r2))
                    if edge:
                        keep = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, jv, at_lanes(lo)),
                                          arith.cmpi(arith.CmpIPredicate.slt, jv, at_lanes(hi_)))
                        x = arith.select(keep, x, neg)
                    r_ = write(x, r_, [ci(r), j0], r2)
                    new_m.append(arith.maxnumf(ms[r], x))
                return [r_, *new_m]
            return body
        # the row maxima and sums kept per lane, reduced once after the chunks
        if mask is not None:
            # each row's mask row into its score row (in bounds for whole chunks: the
            # columns past Sk hold stale values, their keys dropped by ``keep``); a
            # chunk's scores then overwrite the mask values they have read
            for r in range(rows):
                at = mrow(r)
                srow = insert_at(slice_at(mask, at, [1] * len(at) + [sk], True), srow,
                                 [ci(r)], [1, sk])
        ms = [neg] * rows
        if wide:
            spans = [(c0, c1, True)]
        else:   # the chunks inside every row's band, without the band test
            ca = arith.minsi(arith.maxsi(arith.muli(arith.divui(
                arith.addi(bands[-1][1], ci(lanes - 1)), ci(lanes)), ci(lanes)), c0), c1)
            cb = arith.maxsi(arith.muli(arith.divui(bands[0][2], ci(lanes)), ci(lanes)), ca)
            cb = arith.minsi(cb, c1)
            spans = [(c0, ca, True), (ca, cb, False), (cb, c1, True)]
        for a, z, edge in spans:
            srow, *ms = _loop(a, z, [srow] + ms, scores(edge), step=lanes)
        ms = [vector.ReductionOp(c, kind("maxnumf"), m).result for m in ms]
        ms = [arith.select(s.cmp("eq", m, s.const(float("-inf"))), zero, m) for m in ms]

        def expo(rs):
            """The exp pass over rows ``rs``: p = exp(s - m), summed per lane."""
            def body(j0, r_, *zs):
                new_z = []
                for r, z in zip(rs, zs):
                    e = exp(arith.subf(read(r_, [ci(r), j0], vl, r2), splat(ms[r], vl)))
                    r_ = write(e, r_, [ci(r), j0], r2)
                    new_z.append(arith.addf(z, e))
                return [r_, *new_z]
            return body
        # 256-bit code: a row at a time (the rows' exps together spilled, 16 registers)
        zs = []
        for rs in ([list(range(rows))] if wide else [[r] for r in range(rows)]):
            srow, *z = _loop(c0, c1, [srow] + [splat(zero, vl)] * len(rs), expo(rs), step=lanes)
            zs += z
        zs = [vector.ReductionOp(c, kind("add"), z, fastmath=reassoc()).result for z in zs]
        invs = [arith.select(s.cmp("eq", z, zero), zero, s.div(s.const(1), z)) for z in zs]

        # P·V over the chunks (AVX-512 code) or only the rows' keys: the keys a chunk
        # adds past them have p = 0 (exact: acc + 0·v = acc, the same bits)
        j0, j1 = (c0, c1) if wide else (bands[0][1], bands[-1][2])
        for p0 in range(0, d, _PIECE):                  # o = P·V, a column piece at a time
            vp = ir.VectorType.get([min(_PIECE, d - p0)], c)

            def pv(j, *acc):
                vrow = read(vc, [j, ci(p0)], vp, r2)
                return [math.fma(splat(tensor.extract(srow, [ci(r), j]), vp), vrow, acc[r])
                        for r in range(rows)]
            acc = _loop(j0, j1, [splat(zero, vp)] * rows, pv)
            for r in range(rows):
                o = arith.mulf(acc[r], splat(invs[r], vp))
                if elt != c:
                    o = arith.truncf(ir.VectorType.get(vp.shape, elt), o)
                out = write(o, out, [bi, h, arith.addi(i0, ci(r)), ci(p0)])
        return [out, srow]

    def kv_head(bi, kh, kt, vc, out, srow):
        if not wide and k_rows and str(rtt(k).element_type) == "f32":
            kt = k_transposed(bi, kh, kt)
        else:
            kt = head_copy(k, bi, kh, (1, 0), kt)
        vc = head_copy(v, bi, kh, (0, 1), vc)

        def query_head(gg, out, srow):
            h = arith.addi(arith.muli(kh, ci(g)), gg) if g > 1 else kh
            if isinstance(sq, int):
                full = sq // nrow * nrow
            else:
                full = arith.muli(arith.divui(sq, ci(nrow)), ci(nrow))
            out, srow = _loop(0, full, [out, srow], lambda i0, o, r: block(
                bi, kh, h, i0, nrow, kt, vc, o, r), step=nrow)
            if not isinstance(sq, int):
                # a run-time Sq: the rows left over one at a time (each row's
                # result does not depend on its block: the keys a block adds
                # outside a row's band are 0 in its sums)
                out, srow = _loop(full, sq, [out, srow], lambda i0, o, r: block(
                    bi, kh, h, i0, 1, kt, vc, o, r))
            elif sq % nrow:
                out, srow = block(bi, kh, h, ci(full), sq % nrow, kt, vc, out, srow)
            return [out, srow]
        return [kt, vc, *_loop(0, g, [out, srow], query_head)]

    mark_rolled()  # its loops run as written: LLVM's unrolling doubled the code for no speed
    # scratch: one kv head's K transposed and V (the pad stays 0), one score row
    carried = [fill(zero, empty([d, skp], c)), fill(zero, empty([skp, d], c)),
               empty([b, hq, sq, d], elt), fill(zero, empty([nrow, skp], c))]
    return _loop(0, b, carried, lambda bi, *a: _loop(
        0, hkv, a, lambda kh, *a2: kv_head(bi, kh, *a2)))[2]


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
