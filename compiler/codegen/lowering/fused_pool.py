"""MaxPool2D (fused id 26) as one kernel, written in vector ops: ``scf.for``
loops over the images, channels and output rows (the batch and the spatial
size are run-time extents, ``batch_dims``), the input read where it is (no
padded copy); each output row ``_LANES`` columns at a time: for each window
row, one read of the input row (``sw`` times as many columns), the rows'
maximum, and with a column stride of 2 that maximum ``vector.deinterleave``d
into its two phases, each tap's columns one phase of the read at its offset.
The padding: a window row outside the image is the window's nearest image
row (a maximum over a row twice is the same), a tap left of the image is a
phase shifted right behind the previous vector's lanes (``-inf`` before the
first), a read past the row's end masked with ``-inf``. No strided loads
(LLVM scalarized the strided loops and fully unrolled the short static
ones). ``arith.maximumf``: NaN propagates, as ``Maximum``'s. The
``vectorized`` cpu strategy lowers it as written (docs/architecture.md,
"Max pooling").
"""
from __future__ import annotations

import math

from compiler.errors import LoweringError
from compiler.mlir import arith, ir, scf, vector

from .core import Lowering, Scalar, dims, empty, index, lowers, rtt
from .fused_norm import _for


@lowers("MaxPool2D")
def _max_pool2d(lw: Lowering):
    (x,) = lw.operands
    t = rtt(x)
    if t.rank != 4 or t.is_dynamic_dim(1):
        raise LoweringError(f"MaxPool2D is lowered with static channels, got {x.type}")
    n, c, h, w = dims(x)   # the batch and the spatial size may be run-time extents
    (kh, kw), (sh, sw), (dh, dw) = lw.param("kernel"), lw.param("stride"), lw.param("dilation")
    top, left, bottom, right = lw.param("padding")
    if not serves_geometry(sw, left):
        raise LoweringError(f"MaxPool2D kernel: window {kh}x{kw} (dilation {dh}x{dw}, stride "
                            f"{sh}x{sw}, left padding {left}): needs a column stride of 1 or 2 "
                            f"and a left padding of at most {_LANES // 2 * sw}; other pools "
                            f"decompose into the recipe (the kernel's ``serves``)")
    ho = _out(_add(h, top + bottom), dh * (kh - 1) + 1, sh)
    wo = _out(_add(w, left + right), dw * (kw - 1) + 1, sw)
    if isinstance(ho, int) and isinstance(wo, int) and min(ho, wo) < 1:
        raise LoweringError(f"MaxPool2D kernel: window {kh}x{kw} (dilation {dh}x{dw}, stride "
                            f"{sh}x{sw}) on the padded input gives an empty output")
    elt = t.element_type
    s = Scalar.compute(lw.in_dtypes[0])
    if s.ty != elt:
        raise LoweringError(f"MaxPool2D kernel computes in its storage type, got {elt}")
    low = s.const(-math.inf)
    row = ir.AffineMap.get_minor_identity(4, 1)
    lanes = _LANES

    # tap kx reads input column ox*sw + d, d = kx*dw - left = q*sw + r: phase r
    # of the read at output column ox + q (a read of sw columns per output
    # column from column (ox + q)*sw), taps_at[q] = its phases. A negative q
    # (the left padding) is the q = 0 read's phase shifted right by -q lanes,
    # the lanes before the chunk from the previous chunk's (-inf before the
    # first): every read starts at a column >= 0
    taps_at: dict[int, list[int]] = {}
    for kx in range(kw):
        q, r = divmod(kx * dw - left, sw)
        taps_at.setdefault(q, []).append(r)
    reads = sorted({0} | {q for q in taps_at if q > 0}) if min(taps_at) < 0 else sorted(taps_at)
    carried = sorted({r for q, rs in taps_at.items() if q < 0 for r in rs})
    vt = ir.VectorType.get([lanes], elt)
    chunks = [(at, min(lanes, wo - at)) for at in range(0, wo, lanes)] if isinstance(wo, int) else None

    def read(src, at, m, in_bounds):
        return vector.TransferReadOp(ir.VectorType.get([m], elt), src, at, row, low,
                                     [in_bounds]).result

    def window_rows(oy):
        """The window's input rows; a row in the padding is the window's
        nearest row in the image (a maximum over a row twice is the same)."""
        y0 = arith.subi(arith.muli(oy, index(sh)), index(top))
        ys = []
        for ky in range(kh):
            y = arith.addi(y0, index(ky * dh))
            if ky * dh < top:          # above the image for the first output rows
                y = arith.maxsi(y, index(0)) if dh == 1 else arith.select(
                    arith.cmpi(arith.CmpIPredicate.slt, y, index(0)), _mod(y, dh), y)
            if not isinstance(ho, int) or (ho - 1) * sh - top + ky * dh >= h:   # below it
                last = index(h - 1) if isinstance(h, int) else arith.subi(h, index(1))
                y = arith.minsi(y, last) if dh == 1 else arith.select(
                    arith.cmpi(arith.CmpIPredicate.sgt, y, last),
                    arith.subi(last, _mod(arith.subi(last, y), dh)), y)
            ys.append(y)
        return ys

    def image(i, out):
        def channel(ch, out):
            def out_row(oy, out):
                ys = window_rows(oy)

                def chunk(at, m, acc, in_bounds=True, a=None, fit=False):
                    """Output columns ``at..at+m`` (``a``: ``at`` when static;
                    ``fit``: every read is in the row); ``acc`` = [out, the
                    previous chunk's carried phases]."""
                    out, prev = acc[0], acc[1:]
                    phases = {}     # q -> the phases of the rows' maximum read at q
                    for q in reads:
                        col = arith.muli(arith.addi(at, index(q)), index(sw))
                        fits = fit or a is not None and (a + q + m) * sw <= w
                        mx = None
                        for y in ys:
                            v = read(x, [i, ch, y, col], m * sw, fits)
                            mx = v if mx is None else s.max(mx, v)
                        phases[q] = [mx] if sw == 1 else list(vector.DeinterleaveOp(mx).results)
                    taps = [phases[q][r] for q in taps_at if q >= 0 for r in taps_at[q]]
                    for q in taps_at:
                        for r in taps_at[q] if q < 0 else ():
                            p = prev[carried.index(r)]   # [lanes] lanes before the chunk
                            taps.append(vector.shuffle(p, phases[0][r],
                                                       [lanes + j + q for j in range(m)]))
                    best = taps[0]
                    for v in taps[1:]:
                        best = s.max(best, v)
                    out = vector.TransferWriteOp(out.type, best, out, [i, ch, oy, at], row,
                                                 [in_bounds]).result
                    # the last `lanes` lanes of (prev, this chunk's phase) for the next chunk
                    nxt = [phases[0][r] if m == lanes else
                           vector.shuffle(p, phases[0][r], [m + j for j in range(lanes)])
                           for p, r in zip(prev, carried)]
                    return [out, *nxt]
                init = [out] + [vector.broadcast(vt, low) for _ in carried]
                if isinstance(wo, int):
                    acc = init
                    for a, m in chunks:
                        acc = chunk(index(a), m, acc, a=a)
                    return [acc[0]]
                # whole vectors whose reads are in the row (to column
                # (w // sw - the last read's q) * sw), then masked reads
                fit = arith.maxsi(arith.subi(arith.divui(w, index(sw)), index(reads[-1])),
                                  index(0))
                at, acc = _whole(arith.minsi(wo, fit), (lanes,), init,
                                 lambda at, m, acc: chunk(at, m, acc, fit=True))
                return [_pieces(wo, (lanes, lanes // 2), acc, chunk, start=at)[0]]
            return _for(ho, [out], out_row)
        return _for(c, [out], channel)

    return _for(n, [empty([n, c, ho, wo], elt)], image)[0]


def _add(a, b: int):
    """``a + b`` for an int or an index value ``a``."""
    return a + b if isinstance(a, int) else arith.addi(a, index(b))


def _out(padded, span: int, stride: int):
    """The windows of ``span`` at ``stride`` in ``padded`` (an int or an index
    value): ``(padded - span) // stride + 1``."""
    if isinstance(padded, int):
        return (padded - span) // stride + 1
    q = arith.floordivsi(arith.subi(padded, index(span)), index(stride))
    return arith.addi(q, index(1))


def _whole(extent, sizes, acc, piece, start=None):
    """``piece(at, size, acc)`` over ``start..extent`` (``start`` 0 unless
    given) in whole pieces of each of ``sizes`` in turn (an ``scf.for`` each;
    after the first, loops of 0 or 1 trips); ``acc`` one value or a list of
    them. Returns ``(where they end, acc)``."""
    at = index(0) if start is None else start
    for size in sizes:
        end = arith.addi(at, arith.muli(arith.divui(arith.subi(extent, at), index(size)),
                                        index(size)))
        at, acc = end, _loop(at, end, size, acc, lambda iv, a: piece(iv, size, a))
    return at, acc


def _pieces(extent, sizes, acc, piece, start=None):
    """``piece(at, size, acc[, in_bounds=False])`` over a run-time ``extent``:
    whole pieces of each of ``sizes`` in turn (``_whole``), then one piece of
    the last size whose transfers are masked where the extent leaves a part (a
    loop of 0 or 1 trips): the static kernel's narrower last vector, a mask
    for the columns past its width (from ``start``, as ``_whole``). Returns
    the final ``acc``."""
    at, acc = _whole(extent, sizes, acc, piece, start)
    return _loop(at, extent, sizes[-1], acc, lambda iv, a: piece(iv, sizes[-1], a, False))


def _loop(lo, hi, step: int, acc, body):
    """``scf.for`` from ``lo`` to ``hi`` by ``step`` carrying ``acc`` (a value
    or a list); ``body(iv, acc)`` returns the next ``acc``."""
    many = isinstance(acc, list)
    loop = scf.ForOp(lo, hi, index(step), acc if many else [acc])
    with ir.InsertionPoint(loop.body):
        nxt = body(loop.induction_variable, list(loop.inner_iter_args) if many
                   else loop.inner_iter_args[0])
        scf.YieldOp(nxt if many else [nxt])
    return list(loop.results) if many else loop.results[0]


def _mod(y, d: int):
    """``y mod d`` in ``[0, d)`` for an index value ``y``."""
    return arith.remsi(arith.addi(arith.remsi(y, index(d)), index(d)), index(d))


def serves_geometry(sw: int, left: int) -> bool:
    """The kernel's class: a column stride of 1 or 2 (a larger one would
    gather its windows' columns) and a left padding of at most half a vector
    of output columns (its taps are the previous piece's lanes)."""
    return sw <= 2 and left <= _LANES // 2 * sw


#: Output columns per vector of the pooling kernel (a zmm of f32).
_LANES = 16


def batch_dims(types, params) -> tuple:
    """The run-time extents of a MaxPool2D kernel (``codegen/fused.py:
    DYNAMIC_FUSED``): x's and the output's batch (the image loop's bound)
    and, where the graph's image size is symbolic (``image_at_run_time``,
    ``Graph.bind``), the spatial size (the row loops' bounds, the columns
    in whole vectors, a half and a masked half): one kernel for every image
    size. A static graph keeps the spatial size compiled in (its column
    pieces sized to the row)."""
    image = bool(params.get("image_at_run_time"))
    dyn = (True, False, image, image)
    return (dyn, dyn)


def _register_kernel() -> None:
    from compiler.codegen.fused import MAX_POOL2D, fused_kernel
    from compiler.registry import default_registry
    from runtime import params as P
    from runtime.dtype import DType

    def back(p, types):
        return {"kernel": tuple(p.kernel), "stride": tuple(p.stride),
                "dilation": tuple(p.dilation), "padding": tuple(p.padding),
                "image_at_run_time": True if p.image_at_run_time else None}

    # a column stride above 2 or a wide left padding decomposes (``serves_geometry``;
    # none of the image nets we run has one)
    @fused_kernel("MaxPool2D", precision=MAX_POOL2D, dtypes=(DType.F32, DType.F64),
                  from_params=back,
                  serves=lambda params, types: serves_geometry(params["stride"][1],
                                                               params["padding"][1]))
    def _pool_params(params, types):
        out = default_registry()["MaxPool2D"].infer(list(types), params)
        return P.MaxPool2D(tuple(types[0].shape), tuple(out.shape), tuple(params["kernel"]),
                           tuple(params["stride"]), tuple(params["dilation"]),
                           tuple(params["padding"]), bool(params.get("image_at_run_time", False)))


_register_kernel()
