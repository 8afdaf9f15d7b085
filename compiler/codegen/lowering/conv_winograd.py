"""Winograd F(2x2, 3x3) for f32 3x3 stride-1 groups-1 convolutions on cpu.

Each 2x2 block of outputs (a *tile*) of output channel co is
``Y = A^T [sum_c U[co, c] * V[c]] A``, with ``U = G g G^T`` the 4x4
transformed 3x3 kernel ``g = w[co, c]`` and ``V = B^T d B`` the transformed
4x4 input patch ``d`` under the tile (rows 2ty.., columns 2tx.. of the
zero-padded image): 16 products per tile and input channel where the direct
kernel does 36 (``fused_conv._direct``). ``fuel-prepack-weights`` gives a
Conv2D over a constant w that ``takes`` accepts the param ``winograd`` and
U ``[16, Cout, Cin]`` as its w, which the plan folds at compile time
(``conv2d.winograd_weights``). The kernel (vector ops on tensors, as
``conv_spatial``'s; the cpu strategy ``vectorized``), per image:

* x is copied into a zero-padded plane (rows of 2*Tp + 2 columns, Tp the
  tiles of a row rounded up to whole register tiles);
* per band of R tile rows (``geometry``), the input transform writes V
  ``[16, Cin, R*Tw]``, the band's tiles one after the other: a patch's four
  columns are the even and odd columns of the padded rows at 2tx and 2tx + 2
  (``vector.deinterleave``), so each of the 16 entries of V is a vector
  along a tile row (adds and subtracts only);
* per block of m output channels and register tile of ``nr`` of the band's
  tiles, the 16 products ``U[nu] (m x Cin) x V[nu] (Cin x nr)`` accumulate in
  registers (m broadcast weights times the tile's vectors per input channel)
  into a scratch ``[16, m, nr]``; then the output transform (adds) gives the
  tiles' 2x2 outputs, plus the bias and the skip, clamped, written as pieces
  of two output rows, the two column phases interleaved (masked past Wo).

The sums round differently from the direct kernel's (docs/architecture.md,
"Convolutions on CPU": Winograd).
"""
from __future__ import annotations

import contextvars

from compiler.mlir import arith, ir, tensor, vector

from .core import Scalar, dims, empty, fill, index, rtt, slice_at
from .conv_spatial import _VectorScalar, generated_bits
from .fused_norm import _for

#: Register tiles per vector width: (m output channels, vectors of tiles):
#: m x v accumulators (AVX2 12 of 16 ymm, AVX-512 16 of 32 zmm).
_TILES = {256: (6, 2), 512: (8, 2)}
#: AVX-512 tiles of a band of at most 16 tiles.
_NARROW_TILES = (16, 1)
#: At most this many register tiles of tiles per band: each is unrolled code
#: (the products and the output transform; 28 of them, 3x3 8->8 at 56^2 in
#: bands of 16 tile rows, took LLVM over ten minutes).
MAX_BLOCKS = 8
#: The band's V (16 x Cin x R*Tp floats) is kept under this many bytes (an L2
#: share; U, 16 x Cout x Cin, is read alongside).
BAND_BYTES = 256 * 1024


#: Whether ``takes`` may choose the kernel (off: the direct one; A/B runs,
#: ``benchmarks/winograd_ab.py``).
ENABLED: contextvars.ContextVar[bool] = contextvars.ContextVar("winograd", default=True)


def takes(params, shapes, bits: int = 256) -> bool:
    """Whether a Conv2D (``params``; ``shapes`` of x and w, x's batch may be
    run-time) runs as Winograd F(2x2, 3x3) on a target of ``bits``-bit
    vectors: groups 1, a 3x3 kernel, stride and dilation 1, no silu/gelu
    epilogue, a static image size, at least ``MIN_CHANNELS`` input and
    output channels, at most ``MAX_BLOCKS`` register tiles of tiles in a
    band, at most ``MAX_WASTE`` times as many tiles computed as the image
    has (``geometry``: whole register tiles), and for a batch of one at
    least ``ONE_IMAGE_MACS`` multiply-adds."""
    x, w = shapes[0], shapes[1]
    if not (ENABLED.get() and params.get("groups") == 1 and len(x) == 4
            and tuple(w[2:]) == (3, 3) and tuple(params.get("stride")) == (1, 1)
            and tuple(params.get("dilation", (1, 1))) == (1, 1)
            and not (params.get("silu") or params.get("gelu")
                     or params.get("image_at_run_time"))):
        return False
    lanes, pad = bits // 32, params.get("padding", (0, 0))
    _, _, _, tw, r, (_, v) = geometry(x[2], x[3], pad, x[1], lanes)
    macs = w[0] * x[1] * 9 * (x[2] + 2 * pad[0] - 2) * (x[3] + 2 * pad[1] - 2)
    return min(x[1], w[0]) >= MIN_CHANNELS and -(-r * tw // (v * lanes)) <= MAX_BLOCKS \
        and waste(x[2], x[3], pad, x[1], lanes) <= MAX_WASTE \
        and (x[0] != 1 or macs >= ONE_IMAGE_MACS)


#: A batch of one image of fewer (direct) multiply-adds keeps the direct
#: kernel: cut by channels over the threads, each tile would repeat the
#: image's input transform (3x3 32->32 at 16^2, 2.4M: 0.048 ms on two
#: threads, 0.036 on one, the direct kernel 0.036-0.047), and on one thread
#: the ResNet-style model at batch 1 read 0.89-1.10 of the direct kernels'
#: time over five runs (docs/benchmarks.md, "Winograd F(2x2,3x3) on CPU").
ONE_IMAGE_MACS = 1 << 23


#: Fewer input or output channels keep the direct kernel: the input
#: transform's work per tile and input channel is some 30 adds against 16 x
#: Cout multiply-adds, the output transform's per output channel some 25
#: against 16 x Cin.
MIN_CHANNELS = 16


#: The most tiles computed per tile of the image ``takes`` accepts: 14^2 at
#: 256 channels computes 64 for 49 (1.31: 0.55-0.68 of the direct kernel's
#: time at two threads), 7^2 at 512 32 for 16 (2.0: 1.55-1.68).
MAX_WASTE = 1.5


def waste(h: int, wd: int, pad, cin: int, lanes: int) -> float:
    """Tiles computed (``geometry``) per tile of the output."""
    _, _, th, tw, r, (_, v) = geometry(h, wd, pad, cin, lanes)
    return _computed(th, tw, r, v * lanes) / (th * tw)


def _computed(th: int, tw: int, r: int, nr: int) -> int:
    """The tiles computed in bands of ``r`` tile rows, in register tiles of ``nr``."""
    whole, rest = divmod(th, r)
    return whole * -(-r * tw // nr) * nr + -(-rest * tw // nr) * nr


def _blocks(cout: int, mr: int) -> list[tuple[int, int, int]]:
    """(first channel, m, count) of the channel blocks: ``mr``-channel blocks
    and a remainder; a remainder of fewer than 3 channels (too few
    accumulators to cover the FMA latency) shares the last whole block's
    channels in two halves (``family.last_blocks``, the cpu conv tiles' rule)."""
    from compiler.codegen.family import last_blocks
    split = last_blocks(mr, cout, 3)
    if split:
        k, h = split
        return [b for b in ((0, mr, k // mr),) if b[2]] + \
            [(k, h, 1), (k + h, cout - k - h, 1)]
    whole, rest = divmod(cout, mr)
    return [b for b in ((0, min(mr, cout), whole or 1), (whole * mr, rest, 1)) if b[1] and b[2]
            and b[0] < cout]


def geometry(h: int, wd: int, pad, cin: int, lanes: int):
    """(Ho, Wo, tile rows Th, tiles per row Tw, band rows R, (m, v) register
    tile). The bands of R tile rows (the last one what is left) whose V fits
    ``BAND_BYTES`` and the register tiles (on AVX-512 also 1-vector tiles,
    ``_NARROW_TILES``) that compute the fewest tiles in all (a band's tiles
    in whole register tiles), the larger R and the 2-vector tiles on a tie:
    14^2 (7 x 7 tiles) at 256 channels in bands of 2 rows (14 of 16 tiles),
    not 1 (7 of 16)."""
    ph, pw = pad
    ho, wo = h + 2 * ph - 2, wd + 2 * pw - 2
    th, tw = -(-ho // 2), -(-wo // 2)
    fit = max(1, min(th, BAND_BYTES // (16 * cin * tw * 4)))
    tiles = [_TILES[lanes * 32]] + ([_NARROW_TILES] if lanes == 16 else [])
    fits = [(r, mv) for r in range(1, fit + 1) for mv in tiles
            if r == 1 or -(-r * tw // (mv[1] * lanes)) <= MAX_BLOCKS]
    r, mv = min(fits, key=lambda c: (_computed(th, tw, c[0], c[1][1] * lanes), -c[0], -c[1][1]))
    return ho, wo, th, tw, r, mv


def winograd(x, u, bias, s: Scalar, elt, pad, act=None, skip=None):
    """``act(conv(x, w) + bias + skip)`` for x ``[N, Cin, H, W]`` (N may be
    a run-time extent), 3x3 kernels w given as their transforms u ``[16,
    Cout, Cin]`` (``conv2d.winograd_weights``), stride 1: see the module
    docstring. ``act``: the clamp (``fused_conv._activation_of``)."""
    lanes = generated_bits() // 32
    n = dims(x)[0]
    _, cin, h, wd = rtt(x).shape
    cout = rtt(u).shape[1]
    ho, wo, th, tw, r_band, (mr, nvec) = geometry(h, wd, pad, cin, lanes)
    nr = nvec * lanes
    tp = -(-tw // nr) * nr        # a tile row's input transform: whole register tiles
    nblk = -(-r_band * tw // nr)  # register tiles of a band's tiles (pitch Tw)
    vt = ir.VectorType.get([lanes], elt)
    clamps = {}

    def clamp(v):   # the clamp epilogue on a vector of any width
        width = ir.VectorType(v.type).shape[0]
        if width not in clamps:
            clamps[width] = act(_VectorScalar(s, ir.VectorType.get([width], elt)))
        return clamps[width](v)
    zero = arith.constant(elt, 0.0)
    row = ir.AffineMap.get_minor_identity(4, 1)
    row3 = ir.AffineMap.get_minor_identity(3, 1)
    ho2 = 2 * th   # an odd Ho: the last tile row's second row lands in an extra row

    def read(src, at, size, m=row, in_bounds=True):
        return vector.TransferReadOp(ir.VectorType.get([size], elt), src, at, m, zero,
                                     [in_bounds]).result

    def write(v, dest, at, m=row, in_bounds=True):
        return vector.TransferWriteOp(dest.type, v, dest, at, m, [in_bounds]).result

    def add(a, b):
        return arith.addf(a, b)

    def sub(a, b):
        return arith.subf(a, b)

    def transform_in(y_band, rows, xp, v):
        """V of the band's ``rows`` tile rows (output rows ``y_band``..) from
        the padded plane ``xp``."""
        def channel(c, v):
            def tile_row(r, v):
                y = arith.addi(y_band, arith.muli(r, index(2)))
                for j in range(tp // nr):
                    t = []   # t[p][b]: row p of the patch times B
                    for p in range(4):
                        at = [index(0), c, arith.addi(y, index(p)), index(2 * j * nr)]
                        e0, o0 = vector.DeinterleaveOp(read(xp, at, 2 * nr)).results
                        at[3] = index(2 * j * nr + 2)
                        e1, o1 = vector.DeinterleaveOp(read(xp, at, 2 * nr)).results
                        t.append([sub(e0, e1), add(o0, e1), sub(e1, o0), sub(o0, o1)])
                    # (a row's last tile overruns into the next row's first,
                    # written after it)
                    col = arith.addi(arith.muli(r, index(tw)), index(j * nr))
                    for b in range(4):
                        for a, val in enumerate((sub(t[0][b], t[2][b]), add(t[1][b], t[2][b]),
                                                 sub(t[2][b], t[1][b]), sub(t[1][b], t[3][b]))):
                            v = write(val, v, [index(a * 4 + b), c, col], row3)
                return [v]
            return _for(rows, [v], tile_row)
        return _for(cin, [v], channel)[0]

    def products(co, m, col, v, scr):
        """scr[nu, k, :] = sum_c U[nu, co + k, c] V[nu, c, col:col+nr]."""
        def one(nu, scr):
            def step(c, *acc):
                vv = [read(v, [nu, c, arith.addi(col, index(q * lanes))], lanes, row3)
                      for q in range(nvec)]
                acc = list(acc)
                for k in range(m):
                    wv = vector.BroadcastOp(vt, tensor.extract(
                        u, [nu, arith.addi(co, index(k)), c])).result
                    for q in range(nvec):
                        acc[k * nvec + q] = vector.FMAOp(vv[q], wv, acc[k * nvec + q]).result
                return acc
            zeros = [vector.BroadcastOp(vt, zero).result for _ in range(m * nvec)]
            acc = _for(cin, zeros, step)
            for k in range(m):
                for q in range(nvec):
                    scr = write(acc[k * nvec + q], scr, [nu, index(k), index(q * lanes)], row3)
            return [scr]
        return _for(16, [scr], one)[0]

    def segments(f0: int, nt: int):
        """(r, tx, L, off) of the band's tiles f0..f0+lanes (of ``nt``): L
        tiles of tile row r from column tx, lane off on."""
        out, f = [], f0
        while f < min(f0 + lanes, nt):
            r, tx = divmod(f, tw)
            n_ = min(tw - tx, f0 + lanes - f, nt - f)
            out.append((r, tx, n_, f - f0))
            f += n_
        return out

    def transform_out(i, co, m, y_band, nt, blk, scr, out):
        """The 2x2 outputs of the band's tiles blk*nr.. (static; of ``nt``),
        output rows from ``y_band`` on, one output channel of the block a
        step (a loop: unrolled over the block's m channels, a band's output
        transforms were most of the kernel's code, 1.5 MB of IR for 32->40
        channels at 56^2, 20 s to compile)."""
        def channel(k, out):   # output channel co + k
            ch = arith.addi(co, k)
            bv = None if bias is None else vector.BroadcastOp(
                vt, tensor.extract(bias, [ch])).result
            for q in range(nvec):
                segs = segments(blk * nr + q * lanes, nt)
                if not segs:
                    continue
                mm = [read(scr, [index(nu), k, index(q * lanes)], lanes, row3)
                      for nu in range(16)]
                srow = []   # rows of A^T M
                for b in range(4):
                    srow.append((add(add(mm[b], mm[4 + b]), mm[8 + b]),
                                 sub(sub(mm[4 + b], mm[8 + b]), mm[12 + b])))
                for a in range(2):
                    y00 = add(add(srow[0][a], srow[1][a]), srow[2][a])
                    y01 = sub(sub(srow[1][a], srow[2][a]), srow[3][a])
                    if bv is not None:
                        y00, y01 = add(y00, bv), add(y01, bv)
                    val = vector.InterleaveOp(y00, y01).result
                    for r, tx, n_, off in segs:
                        piece = val if n_ == lanes else vector.extract_strided_slice(
                            ir.VectorType.get([2 * n_], elt), val, [2 * off], [2 * n_], [1])
                        x0, y = 2 * tx, arith.addi(y_band, index(2 * r + a))
                        inb = x0 + 2 * n_ <= wo
                        if skip is not None:   # (an odd Ho's extra row reads the last one)
                            sy = y if ho2 == ho else arith.minui(y, index(ho - 1))
                            piece = add(piece, read(skip, [i, ch, sy, index(x0)], 2 * n_,
                                                    in_bounds=inb))
                        if act is not None:
                            piece = clamp(piece)
                        out = write(piece, out, [i, ch, y, index(x0)], in_bounds=inb)
            return out
        return _for(m, [out], lambda k, out: [channel(k, out)])[0]

    blocks = _blocks(cout, mr)

    def image(i, out, xp, v, scr):
        xp = tensor.InsertSliceOp(slice_at(x, [i], [1, cin, h, wd]), xp, [], [], [],
                                  [0, 0, pad[0], pad[1]], [1, cin, h, wd], [1, 1, 1, 1]).result

        def band(y_band, rows, out, v, scr):
            """The ``rows`` tile rows from output row ``y_band``."""
            v = transform_in(y_band, rows, xp, v)
            nt = rows * tw

            def rows_of(co, m, out, scr):
                for blk in range(-(-nt // nr)):
                    scr = products(co, m, index(blk * nr), v, scr)
                    out = transform_out(i, co, m, y_band, nt, blk, scr, out)
                return [out, scr]
            for first, m, count in blocks:
                out, scr = _for(count, [out, scr], lambda cb, out, scr: rows_of(
                    arith.addi(index(first), arith.muli(cb, index(m))), m, out, scr))
            return [out, v, scr]
        whole, rest = divmod(th, r_band)
        out, v, scr = _for(whole, [out, v, scr], lambda bi, out, v, scr: band(
            arith.muli(bi, index(2 * r_band)), r_band, out, v, scr))
        if rest:   # the last band: fewer tile rows
            out, v, scr = band(index(2 * whole * r_band), rest, out, v, scr)
        return [out, xp, v, scr]

    out0 = empty([n, cout, ho2, wo], elt)
    xp0 = fill(zero, empty([1, cin, 2 * th + 2, 2 * tp + 2], elt))
    v0 = empty([16, cin, max(nblk * nr, (r_band - 1) * tw + tp)], elt)
    scr0 = empty([16, mr, nr], elt)
    out = _for(n, [out0, xp0, v0, scr0], image)[0]
    if ho2 != ho:   # (a copy: odd output heights only)
        out = slice_at(out, [index(0)], [n, cout, ho, wo])
    return out
