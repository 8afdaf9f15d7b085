"""The cpu Conv2D kernel with a run-time image size (docs/dynamic-shapes.md,
"Dynamic spatial size"): x ``[N, C, ?, ?]``, one kernel for every batch and
image size of one weight shape.

The direct kernel (``fused_conv._direct``) is specialised on the image size:
the padded plane's row pitch is in every tap's offset and its pixel runs are
whole vectors of the flattened plane. Here the plane is a 4-D tensor whose
row pitch is a run-time value, and the kernel is written in vector ops (the
``vectorized`` strategy lowers it as written), so the size only changes loop
bounds:

* per image, x is copied row by row into a zero-padded plane ``[1, C, Hp,
  Wpl]`` (allocated and zeroed once; ``Wpl`` covers the last vector's reads
  past the image), a row a vector piece at a time, the last piece masked;
* the output is computed in register tiles of m channels x R rows x V
  vectors of ``lanes`` columns: the tile's accumulators are carried through
  an ``scf.for`` over the input channels whose body is every tap, unrolled
  (a plane vector is loaded once per tile row it serves: rows y + qy*dh
  shared across the tile's rows), then the bias, the skip and the clamp are
  applied in registers and the tile is stored. Stride 2 (undilated): the
  copy-in ``vector.deinterleave``s each row into its two column phases (a
  plane channel each), so every tap reads a unit-stride run. Groups 1: every
  channel block of a band of output rows before the next band (the plane
  rows the band reads stay in cache);
* run-time trip counts and peeled remainders: whole channel blocks then a
  static remainder block (Cout is static), blocks of R rows then single
  rows, blocks of V vectors then single vectors, then the rest of the row
  as one vector, or a half vector where the rest fits in one, whose skip
  read and store are masked (the columns past Wo); a rest that would be a
  vector and a masked vector is one masked V-vector tile.

A depthwise conv (groups = C = Cout) is computed channel by channel, each
copied into a one-channel plane just before its tiles read it (in cache), or,
where its output is small (``_FLAT_PIXELS``, decided at run time), as
flat pixel runs (``_flat_depthwise``); a pointwise one (1x1, stride 1, unpadded, groups 1)
is a product over its flat H*W pixels, x read in place (``_flat_pointwise``); a
groups-1 conv of few output pixels per image (``_FEW_PIXELS``, decided at run
time) is a product of the batch's pixels as im2col rows (``_few_pixels``). Each
output sums its taps in (c, qy, qx) order from the bias (groups 1) or from 0
(depthwise and pointwise: the bias added after), then the skip, then the clamp:
the static kernels' order (the few-pixel product: each lane of k's sum, then
across the lanes, then the bias, the skip and the clamp).
"""
from __future__ import annotations

import contextlib
import contextvars

from compiler.mlir import arith, bufferization, ir, memref, scf, tensor, vector

from .core import Scalar, collapse, dims, empty, expand, fill, index, rtt
from .fused_norm import _for, reassoc
from .fused_pool import _pieces, _whole

#: The vector width the kernel is generated for, in bits (``vector_bits``):
#: a zmm (AVX-512) or a ymm (AVX2, and targets without a vector ISA level).
_VECTOR_BITS: contextvars.ContextVar[int] = contextvars.ContextVar("conv_vector_bits",
                                                                  default=256)

#: Register tiles (m channels, R rows, V vectors) per vector width: 16 (8)
#: accumulators of the 32 zmm (16 ymm) registers, the rest for the plane
#: vectors of a tap and the weight broadcasts.
_TILES = {512: (4, 2, 2), 256: (4, 2, 1)}
#: Pointwise tiles (``_flat_pointwise``): m channels x V vectors of flat pixels.
_PW_TILES = {512: (8, 1), 256: (4, 2)}
#: Depthwise tiles (one channel): R rows x V vectors.
_DW_TILES = {512: (1, 4, 2), 256: (1, 2, 2)}


def generated_bits() -> int:
    """The vector width (bits) the kernel being lowered is generated for."""
    return _VECTOR_BITS.get()


@contextlib.contextmanager
def vector_bits(bits: int):
    """Generate the kernel for vectors of ``bits`` (the target's widest:
    ``FusedFamily.linalg_text`` sets it from the target's ISA level)."""
    token = _VECTOR_BITS.set(512 if bits >= 512 else 256)
    try:
        yield
    finally:
        _VECTOR_BITS.reset(token)


class _VectorScalar(Scalar):
    """``Scalar`` on vectors: constants are splats (``_activation``'s clamp)."""

    def __init__(self, s: Scalar, vt):
        super().__init__(s.dtype, s.ty)
        self.vt = vt

    def const(self, v):
        return vector.BroadcastOp(self.vt, super().const(v)).result


def direct_spatial(x, w, bias, s, elt, wshape, pad, dil, stride, act, skip, depthwise):
    """``act(conv(x, w) + bias + skip)`` for x ``[N, C, ?, ?]`` (the batch
    may be run-time too); ``act`` takes a ``Scalar`` and returns the clamp
    (``fused_conv._activation``) or None."""
    (cout, kh, kw), (ph, pw), (dh, dw), (sh, sw) = wshape, pad, dil, stride
    bits = _VECTOR_BITS.get()
    lanes = bits // ir.FloatType(elt).width
    m0, r0, v0 = (_DW_TILES if depthwise else _TILES)[bits]
    m0 = min(m0, cout)
    n, cin, h, wd = dims(x)
    hp, wp = arith.addi(h, index(2 * ph)), arith.addi(wd, index(2 * pw))
    ho = _windows(hp, dh * (kh - 1) + 1, sh)
    wo = _windows(wp, dw * (kw - 1) + 1, sw)
    nv = arith.divui(arith.addi(wo, index(lanes - 1)), index(lanes))
    # the plane's rows hold every vector read (whole vectors past Wo: the
    # last tap's read ends at (nv*lanes - 1)*sw + (kw-1)*dw + sw) and the
    # copy-in's last piece (a whole vector written from pw + a column < W)
    reach = arith.addi(arith.muli(nv, index(lanes * sw)), index((kw - 1) * dw + sw))
    wpl = arith.maxui(reach, arith.addi(wp, index(lanes)))
    # stride 2 (undilated): the plane holds each channel's two column phases
    # (padded columns 2q and 2q + 1 at q), split at the copy-in, so every tap
    # reads a unit-stride run (no deinterleave per read)
    split = sw == 2 and dw == 1
    if split:
        # the taps' last reads, and the copy-in's last piece (a masked 2-vector
        # read at a column < W, each phase's vector written from column // 2
        # + (1 + pw) // 2)
        reach = arith.addi(arith.muli(nv, index(lanes)), index((kw - 1) // 2))
        wpl = arith.maxui(reach, arith.addi(arith.divui(wd, index(2)),
                                            index((1 + pw) // 2 + lanes)))
    row = ir.AffineMap.get_minor_identity(4, 1)
    zero = arith.constant(elt, 0.0)

    def read(src, at, n=lanes, in_bounds=True):
        return vector.TransferReadOp(ir.VectorType.get([n], elt), src, at, row, zero,
                                     [in_bounds]).result

    def write(v, dest, at, in_bounds=True):
        return _store(v, dest, at, row, [in_bounds])

    def at(base, off):
        return arith.addi(base, index(off)) if off else base

    # a 1x1 stride-1 unpadded conv (pointwise) reads x in place: no plane
    direct_x = (kh, kw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0)

    def image(i, out, plane):

        def channel(c, plane, to=None):
            """x's channel c into the plane's channel ``to`` (default c)."""
            dest = c if to is None else to

            def copy_row(y, plane):
                def piece(col, size, plane, in_bounds=True):
                    v = read(x, [i, c, y, col], size, in_bounds)
                    if not split:
                        return write(v, plane, [index(0), dest, at(y, ph), at(col, pw)])
                    half = arith.divui(col, index(2))
                    for d, part in enumerate(vector.DeinterleaveOp(v).results):
                        # input columns col + d, + 2, ...: padded col + d + pw
                        rx, off = (d + pw) % 2, (d + pw) // 2
                        plane = write(part, plane, [index(0), at(arith.muli(dest, index(2)), rx),
                                                    at(y, ph), at(half, off)])
                    return plane
                sizes = (4 * lanes, 2 * lanes) if split else (4 * lanes, lanes)
                return [_pieces(wd, sizes, plane, piece)]
            return _for(h, [plane], copy_row)
        if not (direct_x or depthwise):
            plane = _for(cin, [plane], channel)[0]

        def tile(co, m, oy, r, ox, v, lw, out, plane, masked=False):
            """Channels co.., rows oy.., output columns ox.. (index values)
            of the image: m x r x v vectors of ``lw`` lanes."""
            vt = ir.VectorType.get([lw], elt)
            vs = _VectorScalar(s, vt)
            clamp = act(vs) if act is not None else None
            keys = [(k, y, j) for k in range(m) for y in range(r) for j in range(v)]

            def init(k):
                if bias is None or depthwise:
                    return vector.BroadcastOp(vt, zero).result
                return vector.BroadcastOp(vt, tensor.extract(bias, [at(co, k)])).result
            inits = [init(k) for k, _, _ in keys]
            col0 = arith.muli(ox, index(sw))

            def taps(c, sums):
                loads = {}

                def plane_vec(k, rowoff, colread, phase):
                    # the plane vector of tap row offset rowoff (rows oy*sh + ..)
                    # and read column colread (an int offset), its phase
                    ch = index(0) if depthwise else c   # depthwise: its channel's plane
                    key = (k if depthwise else 0, rowoff, colread)
                    if split:
                        key = key + (phase,)
                    if key not in loads:
                        prow = arith.addi(arith.muli(oy, index(sh)), index(rowoff))
                        if split:   # phase ``phase`` of the columns, unit stride
                            pch = at(arith.muli(ch, index(2)), phase)
                            loads[key] = read(plane, [index(0), pch, prow, at(ox, colread // 2)], lw)
                            return loads[key]
                        if direct_x:   # x itself: a masked tile's read stops at the row's end
                            v_ = read(x, [i, ch, prow, at(col0, colread)], lw, not masked)
                        else:
                            v_ = read(plane, [index(0), ch, prow, at(col0, colread)], lw * sw)
                        loads[key] = [v_] if sw == 1 else list(vector.DeinterleaveOp(v_).results)
                    return loads[key] if split else loads[key][phase]
                for qy in range(kh):
                    for qx in range(kw):
                        off = qx * dw
                        colread, phase = off - off % sw, off % sw
                        for k in range(m):
                            wi = [at(co, k), index(0) if depthwise else c, index(qy), index(qx)]
                            wv = vector.BroadcastOp(vt, tensor.extract(w, wi)).result
                            for y in range(r):
                                for j in range(v):
                                    xv = plane_vec(k, y * sh + qy * dh, j * lw * sw + colread,
                                                   phase)
                                    t = keys.index((k, y, j))
                                    sums[t] = vector.FMAOp(xv, wv, sums[t]).result
                return sums
            if depthwise:
                sums = taps(None, list(inits))
            else:
                loop = scf.ForOp(index(0), index(cin) if isinstance(cin, int) else cin,
                                 index(1), inits)
                with ir.InsertionPoint(loop.body):
                    scf.YieldOp(taps(loop.induction_variable, list(loop.inner_iter_args)))
                sums = list(loop.results)
            for t, (k, y, j) in enumerate(keys):
                where = [i, at(co, k), at(oy, y), at(ox, j * lw)]
                val = sums[t]
                if depthwise and bias is not None:
                    val = vs.add(val, vector.BroadcastOp(vt, tensor.extract(bias, [at(co, k)])).result)
                if skip is not None:
                    val = vs.add(val, read(skip, where, lw, not masked))
                if clamp is not None:
                    val = clamp(val)
                out = write(val, out, where, not masked)
            return out

        def rows(co, m, oy, r, out, plane):
            def cols(ox, size, out, in_bounds=True):
                v, lw = (size // lanes, lanes) if size >= lanes else (1, size)
                return tile(co, m, oy, r, ox, v, lw, out, plane, not in_bounds)
            # blocks of v0 vectors, single vectors, then the rest: a masked
            # vector when it is over half a vector, else a masked half (a
            # 3-wide rest: 4 lanes, not a mostly empty 8)
            sizes = (v0 * lanes, lanes) if v0 > 1 else (lanes,)
            return _rest(wo, sizes, lanes // 2, out, cols, merge=True)

        def by_rows(body, out):
            """``body(oy, r, out)`` over the output rows: blocks of r0 rows,
            then single rows (no masked rows)."""
            return _whole(ho, (r0, 1) if r0 > 1 else (1,), out,
                          lambda oy, size, out: body(oy, size, out))[1]

        if depthwise:   # channel by channel, its plane in cache from copy to read
            def one(co, out, plane):
                plane = channel(co, plane, index(0))[0]
                return [by_rows(lambda oy, r, out: rows(co, 1, oy, r, out, plane), out),
                        plane]
            return _for(cout, [out, plane], one)

        def band(oy, r, out):
            """Every channel block of output rows oy..oy+r: the plane rows they
            read stay in cache across the blocks (a block over the whole
            image first streamed the plane through the cache per block)."""
            whole, rest = divmod(cout, m0)
            out = _for(index(whole), [out], lambda cb, out: [
                rows(arith.muli(cb, index(m0)), m0, oy, r, out, plane)])[0]
            if rest:
                out = rows(index(whole * m0), rest, oy, r, out, plane)
            return out
        return [by_rows(band, out), plane]

    if direct_x and not depthwise:
        return _flat_pointwise(x, w, bias, s, elt, cout, act, skip)
    out0 = _output([n, cout, ho, wo], elt)

    def by_rows(_, out):
        planes = 1 if direct_x or depthwise else cin
        if split:   # two column phases per channel
            planes = 2 * planes if isinstance(planes, int) else arith.muli(planes, index(2))
        plane0 = fill(zero, empty([1, planes, hp if not direct_x else 1,
                                   wpl if not direct_x else 1], elt))
        return [_for(n, [out, plane0], image)[0]]
    if not depthwise:
        # few output pixels per image (``_FEW_PIXELS``, decided at run time):
        # the pixels as rows of a product over (c, qy, qx) (``_few_pixels``);
        # two loops of 0 or 1 trips carrying the output, as below
        few = arith.select(_few(arith.muli(ho, wo), cout), index(1), index(0))
        out = _for(few, [out0], lambda _, out: [
            _few_pixels(x, w, bias, s, elt, (ph, pw), (dh, dw), (sh, sw), act, skip, out)])[0]
        _for(arith.subi(index(1), few), [out], by_rows)
        return _result(out0)

    # a small depthwise plane: flat pixel runs (``_flat_depthwise``). The
    # choice is two loops of 0 or 1 trips carrying the output (an ``scf.if``
    # yielding it bufferized to a buffer of its own, copied out after)
    geo = _FlatGeometry(hp, wp, ho, (kh, kw), (dh, dw), (sh, sw), lanes)
    fits = arith.cmpi(arith.CmpIPredicate.ule, geo.npix, index(_FLAT_PIXELS))
    flat = arith.select(fits, index(1), index(0))
    out = _for(flat, [out0], lambda _, out: [
        _flat_depthwise(x, w, bias, s, elt, geo, (ph, pw), out, act, skip)])[0]
    _for(arith.subi(index(1), flat), [out], by_rows)
    return _result(out0)


#: A groups-1 conv of at most this many output pixels per image (and fewer
#: than min(Cout, 64): ``fused_conv.FEW_PIXELS``' rule, decided at run time)
#: is a product of its pixels as rows (``_few_pixels``): the row tiles
#: computed a 1-4 pixel row in whole vectors.
_FEW_PIXELS = 16
#: Register tiles of ``_few_pixels`` per vector width: ((m0 channels, q0
#: pixels) for the pixel blocks, m1 channels per block: single pixels in
#: one tile of m1). AVX2, one znver3 thread (``benchmarks/dynamic_kernels.py``,
#: 3x3 256->256 at 2x2 batch 8 / 128->128 at 4x4 batch 1): 4 x 2 0.65 / 0.081
#: ms, 4 x 3 0.56 / 0.072, 2 x 4 0.62 / 0.070, 4 x 4 (spills) 0.84 / 0.105.
_FEW_TILES = {512: ((4, 4), 8), 256: ((4, 3), 8)}


def _few(pixels, cout: int, most: int = _FEW_PIXELS):
    """Whether an image of ``pixels`` output pixels (an index value) takes
    ``_few_pixels``: at most ``most`` and fewer than min(Cout, 64)."""
    return arith.andi(arith.cmpi(arith.CmpIPredicate.ule, pixels, index(most)),
                      arith.cmpi(arith.CmpIPredicate.ult, pixels, index(min(cout, 64))))


def _few_pixels(x, w, bias, s, elt, pad, dil, stride, act, skip, out):
    """A groups-1 conv of few output pixels per image as the product it is:
    ``out[co, p] = sum_k W[co, k] A[p, k]`` over k = (c, qy, qx), W the
    weight ``[Cout, Cin*Kh*Kw]`` as it lies (a view where the plan passes it
    row-major: ``FusedInstance.contiguous``), A the batch's output pixels as
    rows of their taps (an im2col copy, 0 for a tap in the padding). Both
    operands are read along k in whole vectors (the static rest masked), in
    register tiles of m channels x q pixels whose accumulators are summed
    across their lanes at the end; then the bias, the skip and the clamp.
    Every channel block runs over all pixel blocks (its weight rows stay in
    cache). The row tiles had computed a 1-2 pixel row in whole vectors."""
    (ph, pw), (dh, dw), (sh, sw) = pad, dil, stride
    bits = _VECTOR_BITS.get()
    lanes = bits // ir.FloatType(elt).width
    (m0, q0), m1 = _FEW_TILES[bits]
    cout, cin, kh, kw = rtt(w).shape
    ntaps, k_all = kh * kw, cin * kh * kw
    n, _, h, wd = (v if isinstance(v, ir.Value) else index(v) for v in dims(x))
    # a pointwise conv's output (and skip) is [N, Cout, H*W] (``_flat_pointwise``)
    flat = ir.ShapedType(out.type).rank == 3
    ho, wo = (h, wd) if flat else dims(out)[2:]
    hw = arith.muli(ho, wo)
    npix = arith.muli(n, hw)
    zero = arith.constant(elt, 0.0)
    vt = ir.VectorType.get([lanes], elt)
    slt = arith.CmpIPredicate.slt

    def pixel_at(p):
        img, r = arith.divui(p, hw), arith.remui(p, hw)
        return img, arith.divui(r, wo), arith.remui(r, wo), r

    def im2col(p, a):
        img, oy, ox, _ = pixel_at(p)

        def axis(o, q, st, di, pd, extent):
            """The clamped input index of tap q along one axis, and whether
            it lies in the image."""
            at = arith.subi(arith.addi(arith.muli(o, index(st)), index(q * di)), index(pd))
            inside = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, at, index(0)),
                                arith.cmpi(slt, at, extent))
            return arith.select(inside, at, index(0)), inside
        ys = [axis(oy, q, sh, dh, ph, h) for q in range(kh)]
        xs = [axis(ox, q, sw, dw, pw, wd) for q in range(kw)]
        taps = [(ys[qy][0], xs[qx][0], arith.andi(ys[qy][1], xs[qx][1]))
                for qy in range(kh) for qx in range(kw)]

        def channel(c, a):
            k0 = arith.muli(c, index(ntaps))
            for t, (iy, ix, inside) in enumerate(taps):
                v = arith.select(inside, tensor.extract(x, [img, c, iy, ix]), zero)
                a = tensor.insert(v, a, [p, at(k0, t)])
            return [a]
        return _for(index(cin), [a], channel)

    a = _for(npix, [empty([npix, k_all], elt)], im2col)[0]
    wk = collapse(w, [[0], [1, 2, 3]])
    row = ir.AffineMap.get_minor_identity(2, 1)
    kind = ir.Attribute.parse("#vector.kind<add>")
    clamp = act(s) if act is not None else None
    whole_k = k_all - k_all % lanes

    def read(src, i, k, in_bounds=True):
        return vector.TransferReadOp(vt, src, [i, k], row, zero, [in_bounds]).result

    def tile(co, m, p, q, out):
        chans = [at(co, k) for k in range(m)]
        pixs = [at(p, j) for j in range(q)]

        def step(k, sums, in_bounds=True):
            ws = [read(wk, c, k, in_bounds) for c in chans]
            xs = [read(a, px, k, in_bounds) for px in pixs]
            return [vector.FMAOp(xs[j], ws[i], sums[i * q + j]).result
                    for i in range(m) for j in range(q)]
        sums = [vector.BroadcastOp(vt, zero).result] * (m * q)
        if whole_k:
            loop = scf.ForOp(index(0), index(whole_k), index(lanes), sums)
            with ir.InsertionPoint(loop.body):
                scf.YieldOp(step(loop.induction_variable, list(loop.inner_iter_args)))
            sums = list(loop.results)
        if whole_k < k_all:   # the static rest: reads masked past k_all (zeros)
            sums = step(index(whole_k), sums, False)
        for j, px in enumerate(pixs):
            img, oy, ox, r = pixel_at(px)
            for i, c in enumerate(chans):
                where = [img, c, r] if flat else [img, c, oy, ox]
                val = vector.ReductionOp(elt, kind, sums[i * q + j], fastmath=reassoc()).result
                if bias is not None:
                    val = s.add(val, tensor.extract(bias, [c]))
                if skip is not None:
                    val = s.add(val, tensor.extract(skip, where))
                if clamp is not None:
                    val = clamp(val)
                out = _insert(val, out, where)
        return out

    def block(co, m, out):
        """Channels co..co+m (m <= m1): pixel blocks of q0 in tiles of m0
        channels, then single pixels in one tile of m."""
        def piece(p, q, out):
            if q == 1:
                return tile(co, m, p, 1, out)
            for c0 in range(0, m, m0):
                out = tile(at(co, c0), min(m0, m - c0), p, q, out)
            return out
        return _whole(npix, (q0, 1), out, piece)[1]

    whole, rest = divmod(cout, m1)
    out = _for(index(whole), [out], lambda cb, out: [block(arith.muli(cb, index(m1)), m1, out)])[0]
    if rest:
        out = block(index(whole * m1), rest, out)
    return out


def _output(shape, elt) -> "ir.Value":
    """The kernel's output as a buffer (``memref.alloc``; ``shape``: ints, or
    index values for run-time extents) that every tile writes in place
    (``_store``, ``_insert``), the loops carrying it unchanged, and that the
    entry's out-param replaces (``stages.OUTPUT_BUFFER_ATTR``). Carried as a
    tensor, the output was the last of a chain of some 40-70 loops (per
    path, per rest and per tile size), and One-Shot Bufferize works out a
    loop result's buffer type by walking back through the loop's init value
    (the loop before it) two to three times per loop: with a rest of output
    channels (Cout not a multiple of the tile's 4) that took 5-6 s of a
    kernel's compile (docs/dynamic-shapes.md, "The output is a buffer, not a
    loop-carried tensor")."""
    from compiler.codegen.common.stages import OUTPUT_BUFFER_ATTR
    static = [d if isinstance(d, int) else ir.ShapedType.get_dynamic_size() for d in shape]
    alloc = memref.AllocOp(ir.MemRefType.get(static, elt),
                           [d for d in shape if not isinstance(d, int)], [])
    alloc.attributes[OUTPUT_BUFFER_ATTR] = ir.UnitAttr.get()
    return alloc.result


def _result(buf) -> "ir.Value":
    """The tensor of the output buffer ``buf`` (``_output``), made after
    every loop writing it: ``bufferization.to_tensor restrict`` (no other
    tensor aliases the buffer)."""
    t = ir.MemRefType(buf.type)
    return bufferization.ToTensorOp(ir.RankedTensorType.get(t.shape, t.element_type), buf,
                                    restrict=True).result


def _store(v, dest, at, perm, in_bounds, mask=None) -> "ir.Value":
    """``vector.transfer_write`` of ``v`` to ``dest`` at ``at``: the written
    tensor, or ``dest`` itself where it is the output buffer (``_output``)."""
    if isinstance(dest.type, ir.MemRefType):
        vector.TransferWriteOp(None, v, dest, at, perm, in_bounds, mask=mask)
        return dest
    return vector.TransferWriteOp(dest.type, v, dest, at, perm, in_bounds, mask=mask).result


def _insert(v, dest, at) -> "ir.Value":
    """``_store`` of one element."""
    if isinstance(dest.type, ir.MemRefType):
        memref.StoreOp(v, dest, at)
        return dest
    return tensor.insert(v, dest, at)


def at(base, off: int):
    """``base + off`` of an index value (``base`` where off is 0)."""
    return arith.addi(base, index(off)) if off else base


#: A depthwise conv of at most this many flat output pixels per channel (Ho
#: rows of the phases' pitch: a 7^2 image 63, 14^2 224, a 28^2 one of stride 2
#: 210) is computed as flat pixel runs (``_flat_depthwise``); a larger one in
#: row tiles (one thread, batch 8: 3x3 x192 at 28^2, 840 pixels, measured
#: 1.25 -> 1.56x of the static kernel flat on AVX-512, 1.60 -> 1.93 on AVX2).
_FLAT_PIXELS = 256
#: Channels per block of the flat depthwise kernel (the largest divisor of
#: C up to this): their planes are written before the first is read (a
#: plane read right after its rows were stored waits on the stores).
_FLAT_BLOCK = 4
#: Vectors per register tile of the flat depthwise kernel.
_FLAT_TILE = 4
#: Per vector width, the narrowest unmasked piece of the flat depthwise crop
#: (``_OverlapTail``): an output row narrower than this is stored as one
#: masked vector. AVX2 only: AVX-512's masked store is as fast as a plain
#: one (a 14-wide row in two 8-lane pieces measured slower than masked).
_NARROW = {256: 4}


class _FlatGeometry:
    """The stride-phase planes of ``_flat_depthwise`` (run-time sizes, index
    values): phase (ry, rx) holds the padded pixels (qy*sh + ry, qx*sw + rx)
    in rows of ``pitch`` = ceil(Wp / sw) elements, ``rows`` = ceil(Hp / sh)
    of them, then a row and a tile of slack (the last tile's reads, the
    copy-in's last vector); each output pixel (oy, ox) is flat pixel
    oy*pitch + ox, ``npix`` = Ho*pitch of them in whole vectors."""

    def __init__(self, hp, wp, ho, kernel, dil, stride, lanes):
        (kh, kw), (self.dh, self.dw), (self.sh, self.sw) = kernel, dil, stride
        self.kernel, self.lanes = kernel, lanes
        self.nph = self.sh * self.sw
        self.rows = _ceil(hp, self.sh)
        self.pitch = _ceil(wp, self.sw)
        tile = _FLAT_TILE * lanes
        self.length = arith.addi(arith.muli(arith.addi(self.rows, index(1)), self.pitch),
                                 index(tile))
        self.npix = arith.muli(_ceil(arith.muli(ho, self.pitch), lanes), index(lanes))

    def taps(self):
        """(ky, kx, phase, offset in its plane: an index value) per tap."""
        kh, kw = self.kernel
        for ky in range(kh):
            for kx in range(kw):
                y, x_ = ky * self.dh, kx * self.dw
                off = arith.addi(arith.muli(index(y // self.sh), self.pitch), index(x_ // self.sw))
                yield ky, kx, (y % self.sh) * self.sw + x_ % self.sw, off


def _ceil(v, d: int):
    return arith.divui(arith.addi(v, index(d - 1)), index(d)) if d > 1 else v


def _flat_depthwise(x, w, bias, s, elt, g, pad, out0, act, skip):
    """A depthwise conv (groups = C = Cout) of a small run-time image as the
    static kernel computes it (``fused_conv._planes``): per image and block
    of B channels, each channel's zero-padded image is scattered into its
    stride phases (``_FlatGeometry``; stride 2: each input row read two
    vectors at a time and ``vector.deinterleave``d, as ``fused_conv.
    _scatter_rows``), the B planes written before the first is read; the
    output is Ho rows of ``pitch`` flat pixels, computed in register tiles
    of ``_FLAT_TILE`` vectors (then single vectors) whose tap (ky, kx) reads
    its phase at the pixel plus a run-time offset: a unit-stride run, no
    shuffle. The sums go to a flat accumulator and the first Wo columns of
    each row are the output (bias, skip, clamp, a masked last vector)."""
    (ph, pw), lanes = pad, g.lanes
    n, cin, h, wd = dims(x)
    cout, (ho, wo) = cin, dims(out0)[2:]
    blk = max(d for d in range(1, min(_FLAT_BLOCK, cout) + 1) if cout % d == 0)
    zero = arith.constant(elt, 0.0)
    vt = ir.VectorType.get([lanes], elt)
    # the rows' pieces and the last one's mask, made once per call
    in_row, out_row = _Tail(wd, lanes * g.sw), _OverlapTail(wo, lanes, _NARROW.get(lanes * ir.FloatType(elt).width, lanes))
    flat_map = ir.AffineMap.get_minor_identity(2, 1)
    row4 = ir.AffineMap.get_minor_identity(4, 1)
    taps = list(g.taps())

    def read2(src, a, b, size=lanes):
        return vector.TransferReadOp(ir.VectorType.get([size], elt), src, [a, b], flat_map,
                                     zero, [True]).result

    def write2(v, dest, a, b):
        return vector.TransferWriteOp(dest.type, v, dest, [a, b], flat_map, [True]).result

    def block(i, cb, out, planes, acc):
        c0 = arith.muli(cb, index(blk))
        # copy-in: input row r is padded row r + ph, phase row (r + ph) % sh
        for b in range(blk):
            c = arith.addi(c0, index(b)) if b else c0

            def copy(r, col, size, planes, mask=None, b=b, c=c):
                """Input row r's columns col.. into their phase planes."""
                pr = arith.addi(r, index(ph))
                ry, q = (arith.remui(pr, index(g.sh)), arith.divui(pr, index(g.sh))) \
                    if g.sh > 1 else (index(0), pr)
                start = arith.addi(arith.muli(q, g.pitch),
                                   arith.divui(col, index(g.sw)) if g.sw > 1 else col)
                v = vector.TransferReadOp(ir.VectorType.get([size], elt), x, [i, c, r, col],
                                          row4, zero, [True], mask=mask).result
                parts = [v] if g.sw == 1 else list(vector.DeinterleaveOp(v).results)
                for d, part in enumerate(parts):   # input columns col + d, + sw, ...
                    rx, off = (d + pw) % g.sw, (d + pw) // g.sw
                    k = arith.addi(arith.muli(ry, index(g.sw)), index(rx)) \
                        if g.sh > 1 else index(rx)
                    planes = write2(part, planes, arith.addi(index(b * g.nph), k),
                                    arith.addi(start, index(off)) if off else start)
                return planes
            # per column piece, every row (the rest first: its masked-off
            # lanes are zeros written on into the next rows, whose pieces
            # come after)
            planes = in_row.over(planes, lambda col, size, planes, *m, copy=copy: _for(
                h, [planes], lambda r, planes: [copy(r, col, size, planes, *m)])[0],
                rest_first=True)
        # the B channels' flat pixels: tiles of T vectors, then single vectors
        for b in range(blk):
            c = arith.addi(c0, index(b)) if b else c0
            wv = [vector.BroadcastOp(vt, tensor.extract(w, [c, index(0), index(ky), index(kx)]))
                  .result for ky, kx, _, _ in taps]

            def pixels(p, size, acc, b=b, wv=wv):
                nv = size // lanes
                sums = [vector.BroadcastOp(vt, zero).result for _ in range(nv)]
                for t, (_, _, k, off) in enumerate(taps):
                    at_ = arith.addi(p, off)
                    for j in range(nv):
                        xv = read2(planes, index(b * g.nph + k),
                                   arith.addi(at_, index(j * lanes)) if j else at_)
                        sums[j] = vector.FMAOp(xv, wv[t], sums[j]).result
                for j in range(nv):
                    acc = write2(sums[j], acc, index(b),
                                 arith.addi(p, index(j * lanes)) if j else p)
                return acc
            acc = _whole(g.npix, (_FLAT_TILE * lanes, lanes), acc, pixels)[1]
        # the crop: the first Wo columns of each row, bias, skip, clamp; a
        # loop over the block's channels (unrolled, its pieces' tensor ops
        # had made one-shot-bufferize's analysis run for minutes)
        def crop_channel(b, out):
            c = arith.addi(c0, b)
            bc = None if bias is None else tensor.extract(bias, [c])
            per_size = {}   # piece size -> (its Scalar ops, clamp, bias vector)
            for size in out_row.sizes:
                vt_ = ir.VectorType.get([size], elt)
                vs_ = _VectorScalar(s, vt_)
                per_size[size] = (vs_, act(vs_) if act is not None else None,
                                  None if bc is None else vector.BroadcastOp(vt_, bc).result)

            def crop(oy, ox, size, out, mask=None):
                vs_, clamp_, bv_ = per_size[size]
                where, pix = [i, c, oy, ox], arith.addi(arith.muli(oy, g.pitch), ox)
                val = read2(acc, b, pix, size)
                if bv_ is not None:
                    val = vs_.add(val, bv_)
                if skip is not None:
                    val = vs_.add(val, vector.TransferReadOp(
                        ir.VectorType.get([size], elt), skip, where, row4, zero, [True],
                        mask=mask).result)
                if clamp_ is not None:
                    val = clamp_(val)
                return _store(val, out, where, row4, [True], mask)
            return out_row.over(out, lambda ox, size, out, *m: _for(
                ho, [out], lambda oy, out: [crop(oy, ox, size, out, *m)])[0])
        out = _for(index(blk), [out], lambda b, out: [crop_channel(b, out)])[0]
        return [out, planes, acc]

    def image(i, out, planes, acc):
        return _for(cout // blk, [out, planes, acc],
                    lambda cb, *carried: block(i, cb, *carried))

    planes0 = fill(zero, empty([blk * g.nph, g.length], elt))
    acc0 = empty([blk, g.npix], elt)
    return _for(n, [out0, planes0, acc0], image)[0]


def _flat_pointwise(x, w, bias, s, elt, cout: int, act, skip):
    """A pointwise conv (1x1, stride 1, unpadded, groups 1) of a run-time
    image as the product it is: per image, the ``H*W`` pixels are one flat
    run (x ``[N, C, H, W]`` viewed as ``[N, C, H*W]``, no copy), computed in
    register tiles of m channels x V vectors (``_PW_TILES``), every channel
    block of a piece of pixels before the next piece (its x columns stay in
    cache), whose sums run over the input channels from 0, then the bias, the
    skip and the clamp (the static kernel's order: ``fused_conv._pointwise``);
    pieces of V vectors, single vectors, then the image's rest as one masked
    vector or a masked half. Row tiles left a short row's rest masked in every
    row (a 7-wide row: 7 of 16 lanes) and a 28-wide one in two vector tiles.
    The views of x, the skip and the output are free where the plan passes
    them row-major (``FusedInstance.contiguous``: ``common/stages.py``,
    ``_row_major_view``), else bufferization copies them. An image of at
    most half a vector of pixels is the product of pixel rows instead
    (``_few_pixels``: the flat tiles' vectors were mostly empty)."""
    bits = _VECTOR_BITS.get()
    lanes = bits // ir.FloatType(elt).width
    m0, v0 = _PW_TILES[bits]
    m0 = min(m0, cout)
    n, cin, h, wd = dims(x)
    npix = arith.muli(h, wd)
    groups = [[0], [1], [2, 3]]
    x3 = collapse(x, groups)
    skip3 = collapse(skip, groups) if skip is not None else None
    pix = ir.AffineMap.get_minor_identity(3, 1)
    zero = arith.constant(elt, 0.0)

    def read(src, at, n_, in_bounds):
        return vector.TransferReadOp(ir.VectorType.get([n_], elt), src, at, pix, zero,
                                     [in_bounds]).result

    def image(i, out):
        def tile(co, m, p, size, out, in_bounds=True):
            v, lw = (size // lanes, lanes) if size >= lanes else (1, size)
            vt = ir.VectorType.get([lw], elt)
            vs = _VectorScalar(s, vt)
            clamp = act(vs) if act is not None else None
            cols = [arith.addi(p, index(j * lw)) if j else p for j in range(v)]
            chans = [arith.addi(co, index(k)) if k else co for k in range(m)]
            sums = channel_sums(cin, vt, chans, v, w,
                                lambda c, j: read(x3, [i, c, cols[j]], lw, in_bounds))
            for k in range(m):
                for j in range(v):
                    where = [i, chans[k], cols[j]]
                    val = sums[k * v + j]
                    if bias is not None:
                        val = vs.add(val, vector.BroadcastOp(
                            vt, tensor.extract(bias, [chans[k]])).result)
                    if skip3 is not None:
                        val = vs.add(val, read(skip3, where, lw, in_bounds))
                    if clamp is not None:
                        val = clamp(val)
                    out = _store(val, out, where, pix, [in_bounds])
            return out

        def channels(p, size, out, *in_bounds):
            # every channel block of one pixel piece: its x columns stay in
            # cache across the blocks (the static schedule's loop order)
            whole, rest = divmod(cout, m0)
            blocks = scf.ForOp(index(0), index(whole * m0), index(m0), [out])
            with ir.InsertionPoint(blocks.body):
                scf.YieldOp([tile(blocks.induction_variable, m0, p, size,
                                  blocks.inner_iter_args[0], *in_bounds)])
            out = blocks.results[0]
            if rest:
                out = tile(index(whole * m0), rest, p, size, out, *in_bounds)
            return out
        sizes = (v0 * lanes, lanes) if v0 > 1 else (lanes,)
        return [_rest(npix, sizes, lanes // 2, out, channels)]
    # at most half a vector of pixels per image: the product of pixel rows
    # (``_few_pixels``), as for a larger kernel. One thread, AVX2, dynamic/
    # static kernel: 2x2 384->64 1.28 -> 0.77, 64->384 1.27 -> 1.08, 64->320
    # batch 8 1.42 -> 1.13; but 4x4 (two whole vectors here) 32->192 1.05 ->
    # 2.02, 192->32 1.00 -> 1.15: the flat tiles' vectors were full
    few = arith.select(_few(npix, cout, lanes // 2), index(1), index(0))
    out3 = _for(few, [empty([n, cout, npix], elt)], lambda _, out: [
        _few_pixels(x, w, bias, s, elt, (0, 0), (1, 1), (1, 1), act, skip3, out)])[0]
    out3 = _for(arith.subi(index(1), few), [out3], lambda _, out: _for(n, [out], image))[0]
    return expand(out3, [n, cout, h, wd], groups)


def channel_sums(cin, vt, chans, nvec: int, w, read_x) -> list:
    """The register tile of a pointwise product: ``sums[k * nvec + j]`` =
    the sum over c < ``cin`` (an int or an index value) of ``w[chans[k], c,
    0, 0] * read_x(c, j)`` (vectors of type ``vt``), one ``scf.for`` over
    the input channels carrying the accumulators from 0, one FMA per term
    in channel order (``_flat_pointwise``, ``fused_expand._expand``)."""
    zero = arith.constant(ir.VectorType(vt).element_type, 0.0)
    loop = scf.ForOp(index(0), index(cin) if isinstance(cin, int) else cin, index(1),
                     [vector.BroadcastOp(vt, zero).result] * (len(chans) * nvec))
    with ir.InsertionPoint(loop.body):
        c = loop.induction_variable
        xs = [read_x(c, j) for j in range(nvec)]
        sums = list(loop.inner_iter_args)
        for k, ch in enumerate(chans):
            wv = vector.BroadcastOp(vt, tensor.extract(w, [ch, c, index(0), index(0)])).result
            for j in range(nvec):
                sums[k * nvec + j] = vector.FMAOp(xs[j], wv, sums[k * nvec + j]).result
        scf.YieldOp(sums)
    return list(loop.results)


def _windows(padded, span: int, stride: int):
    """``(padded - span) // stride + 1`` of an index value."""
    q = arith.floordivsi(arith.subi(padded, index(span)), index(stride))
    return arith.addi(q, index(1))


class _Tail:
    """The pieces of a row of a run-time ``extent``, split once (outside the
    row loops): whole vectors of ``lanes``, then the rest as one vector
    under a mask made here."""

    def __init__(self, extent, lanes: int):
        self.lanes = lanes
        rest = arith.remui(extent, index(lanes))
        self.whole = arith.subi(extent, rest)
        self.mask = vector.CreateMaskOp(
            ir.VectorType.get([lanes], ir.IntegerType.get_signless(1)), [rest]).result
        wide = arith.cmpi(arith.CmpIPredicate.ne, rest, index(0))
        self.end = arith.select(wide, extent, self.whole)
        self.sizes = (lanes,)

    def over(self, acc, piece, rest_first: bool = False):
        """``piece(at, lanes, acc[, mask])`` over the row (the whole vectors,
        then the masked rest, a loop of 0 or 1 trips; ``rest_first``: the
        rest first); returns ``acc``."""
        loops = [(index(0), self.whole, ()), (self.whole, self.end, (self.mask,))]
        for lo, hi, mask in (loops[::-1] if rest_first else loops):
            loop = scf.ForOp(lo, hi, index(self.lanes), [acc])
            with ir.InsertionPoint(loop.body):
                scf.YieldOp([piece(loop.induction_variable, self.lanes,
                                   loop.inner_iter_args[0], *mask)])
            acc = loop.results[0]
        return acc


class _OverlapTail(_Tail):
    """A row of a run-time ``extent`` in unmasked pieces that may overlap
    (for a piece that writes the same values wherever it lands: the flat
    depthwise crop): whole vectors of ``lanes``, then the rest as one whole
    vector ending at the row's end; a row narrower than a vector as two
    pieces of the widest size ``h`` (``lanes/2``, ``lanes/4``, .. down to
    ``narrow``) with ``h <= extent < 2h``, at 0 and ``extent - h``; a row
    narrower than ``narrow``, the masked vector of ``_Tail``. AVX2 has no
    fast masked store (``vmaskmov``: the crop was about half of a 7^2
    depthwise kernel's time on x86-64-v3); the static kernel's crop stores
    a 7-wide row as 4 + 2 + 1 elements, unmasked."""

    def __init__(self, extent, lanes: int, narrow: int):
        super().__init__(extent, lanes)
        self.extent, self.narrow = extent, narrow
        self.sizes = tuple(lanes >> k for k in range(lanes.bit_length())
                           if lanes >> k >= narrow)

    def over(self, acc, piece, rest_first: bool = False):
        assert not rest_first, "the overlapping pieces are for a crop (written in any order)"
        lanes, wo = self.lanes, self.extent

        def once(cond, body, acc):
            """``body(acc)`` in a loop of ``cond`` ? 1 : 0 trips."""
            return _for(arith.select(cond, index(1), index(0)), [acc],
                        lambda _, acc: [body(acc)])[0]

        def ge(a, b: int):
            return arith.cmpi(arith.CmpIPredicate.uge, a, index(b))
        loop = scf.ForOp(index(0), self.whole, index(lanes), [acc])
        with ir.InsertionPoint(loop.body):
            scf.YieldOp([piece(loop.induction_variable, lanes, loop.inner_iter_args[0])])
        acc = loop.results[0]
        # the rest of a row of at least a vector: the row's last vector
        rest = arith.andi(ge(wo, lanes), arith.cmpi(arith.CmpIPredicate.ne, self.whole, wo))
        acc = once(rest, lambda acc: piece(arith.subi(wo, index(lanes)), lanes, acc), acc)
        h = lanes // 2
        while h >= self.narrow:   # a row of h .. 2h - 1: two pieces of h
            fits = arith.andi(ge(wo, h), arith.cmpi(arith.CmpIPredicate.ult, wo, index(2 * h)))
            acc = once(fits, lambda acc, h=h: piece(
                arith.subi(wo, index(h)), h, piece(index(0), h, acc)), acc)
            h //= 2
        # a row narrower than ``narrow``: one masked vector
        return once(arith.cmpi(arith.CmpIPredicate.ult, wo, index(self.narrow)),
                    lambda acc: piece(index(0), lanes, acc, self.mask), acc)


def _rest(extent, sizes, half: int, acc, piece, merge: bool = False):
    """``piece(at, size, acc[, in_bounds=False])`` over ``0..extent``: whole
    pieces of each of ``sizes`` in turn (``fused_pool._whole``), then what is left
    (less than ``sizes[-1]``) as one masked piece of ``sizes[-1]`` when it is
    more than ``half``, else of ``half`` (loops of 0 or 1 trips, their bounds
    selected). ``merge``: a rest after the pieces of ``sizes[0]`` that would
    end in such a masked whole piece of ``sizes[-1]`` is one masked piece of
    ``sizes[0]`` instead (the same lanes, a larger register tile: a 28-wide
    row in one 2-vector tile, not a vector and a masked vector)."""
    start, acc = _whole(extent, sizes[:1], acc, piece)
    if merge and len(sizes) > 1:
        left = arith.subi(extent, start)
        wide = arith.cmpi(arith.CmpIPredicate.ugt, left, index(sizes[0] - sizes[-1] + half))
        split = arith.select(wide, extent, start)
        loop = scf.ForOp(start, split, index(sizes[0]), [acc])
        with ir.InsertionPoint(loop.body):
            scf.YieldOp([piece(loop.induction_variable, sizes[0], loop.inner_iter_args[0],
                               False)])
        start, acc = split, loop.results[0]
    start, acc = _whole(extent, sizes[1:], acc, piece, start)
    wide = arith.cmpi(arith.CmpIPredicate.ugt, arith.subi(extent, start), index(half))
    split = arith.select(wide, extent, start)   # the masked whole piece runs to here
    for lo, hi, size in ((start, split, sizes[-1]), (split, extent, half)):
        loop = scf.ForOp(lo, hi, index(size), [acc])
        with ir.InsertionPoint(loop.body):
            scf.YieldOp([piece(loop.induction_variable, size, loop.inner_iter_args[0], False)])
        acc = loop.results[0]
    return acc
