"""MaxPool2D (fused id 26) as one kernel, written in vector ops: ``scf.for``
loops over the images and channels (the batch and the spatial size are
run-time extents, ``batch_dims``); each channel's plane is copied, a row piece at a time, into a
plane padded with -inf (filled once, before the loops: every channel
overwrites the same interior, and the plane stays in cache between being
written and read), then each output row is computed ``_LANES`` columns at a
time: for each window row, one read of the padded row (``sw`` times as many
columns), the rows' maximum, and with a column stride of 2 that maximum
``vector.deinterleave``d into its two phases, each tap's columns one phase
(shifted reads for the taps past the first pair). No padded copy and stride-
phase copy of the whole batch through memory, as the recipe makes, and no
strided loads (LLVM scalarized the strided loops and fully unrolled the
short static ones). ``arith.maximumf``: NaN propagates, as ``Maximum``'s.
The ``vectorized`` cpu strategy lowers it as written.
"""
from __future__ import annotations

import math

from compiler.errors import LoweringError
from compiler.mlir import arith, ir, scf, vector

from .core import Lowering, Scalar, dims, empty, fill, index, lowers, rtt
from .fused_norm import _for


@lowers("MaxPool2D")
def _max_pool2d(lw: Lowering):
    (x,) = lw.operands
    t = rtt(x)
    if t.rank != 4 or t.is_dynamic_dim(1):
        raise LoweringError(f"MaxPool2D is lowered with static channels, got {x.type}")
    n, c, h, w = dims(x)   # the batch and the spatial size may be run-time extents
    (kh, kw), (sh, sw) = lw.param("kernel"), lw.param("stride")
    (dh, dw), (top, left, bottom, right) = lw.param("dilation"), lw.param("padding")
    if sw > 2:
        raise LoweringError(f"MaxPool2D kernel: window {kh}x{kw} (dilation {dh}x{dw}, stride "
                            f"{sh}x{sw}): needs a column stride of 1 or 2 (``serves``)")
    hp, wp = _add(h, top + bottom), _add(w, left + right)
    ho, wo = _out(hp, dh * (kh - 1) + 1, sh), _out(wp, dw * (kw - 1) + 1, sw)
    if isinstance(ho, int) and isinstance(wo, int) and min(ho, wo) < 1:
        raise LoweringError(f"MaxPool2D kernel: window {kh}x{kw} (dilation {dh}x{dw}, stride "
                            f"{sh}x{sw}) on the padded input {hp}x{wp} gives an empty output")
    elt = t.element_type
    s = Scalar.compute(lw.in_dtypes[0])
    if s.ty != elt:
        raise LoweringError(f"MaxPool2D kernel computes in its storage type, got {elt}")
    low = s.const(-math.inf)
    row = ir.AffineMap.get_minor_identity(4, 1)
    lanes = _LANES

    # the taps by the offset of the row read holding them (a multiple of sw),
    # each as its phase in that read
    taps_at: dict[int, list[int]] = {}
    for kx in range(kw):
        taps_at.setdefault(kx * dw - (kx * dw) % sw, []).append((kx * dw) % sw)
    offsets = sorted(taps_at)
    if isinstance(wo, int):
        chunks = [(at, min(lanes, wo - at)) for at in range(0, wo, lanes)]
        # the padded plane's rows are as wide as the widest read (-inf past
        # wp), so every read is in bounds: a read that may not be was a
        # scalar loop
        width = max([wp] + [at * sw + off + n * sw for at, n in chunks for off in offsets])
    else:
        # run-time columns: whole vectors, a half one, then a masked half
        # (``_pieces``); the rows are wide enough for a whole vector's reads
        # past the last column and for the copy-in's last (masked) piece
        width = _add(wp, lanes * sw + offsets[-1])

    def read(src, at, n, in_bounds=True):
        """``n`` elements of a row of ``src`` from ``at`` (index values)."""
        return vector.TransferReadOp(ir.VectorType.get([n], elt), src, at, row, low,
                                     [in_bounds]).result

    def write(v, dest, at, in_bounds=True):
        return vector.TransferWriteOp(dest.type, v, dest, at, row, [in_bounds]).result

    def image(i, out, xp):
        def channel(ch, out, xp):
            # the channel's plane into the padded buffer, a row piece at a time
            def copy_row(y, xp):
                def piece(at, n, xp, in_bounds=True):
                    return write(read(x, [i, ch, y, at], n, in_bounds), xp,
                                 [index(0), index(0), arith.addi(y, index(top)),
                                  arith.addi(at, index(left))])
                if isinstance(w, int):
                    for at in range(0, w, 4 * lanes):
                        xp = piece(index(at), min(4 * lanes, w - at), xp)
                    return [xp]
                return [_pieces(w, (4 * lanes, lanes), xp, piece)]
            xp = _for(h, [xp], copy_row)[0]

            def out_row(oy, out):
                y0 = arith.muli(oy, index(sh))
                rows = [arith.addi(y0, index(ky * dh)) for ky in range(kh)]

                def chunk(at, n, out, in_bounds=True):
                    taps = []
                    # columns ox*sw + kx*dw of the rows' maximum; with sw = 2
                    # a read of 2n columns deinterleaved into its two phases
                    for off in offsets:
                        col = arith.addi(arith.muli(at, index(sw)), index(off))
                        m = None
                        for y in rows:
                            v = read(xp, [index(0), index(0), y, col], n * sw)
                            m = v if m is None else s.max(m, v)
                        phases = [m] if sw == 1 else list(vector.DeinterleaveOp(m).results)
                        taps += [phases[r] for r in taps_at[off]]
                    best = taps[0]
                    for v in taps[1:]:
                        best = s.max(best, v)
                    return write(best, out, [i, ch, oy, at], in_bounds)
                if isinstance(wo, int):
                    for at, n in chunks:
                        out = chunk(index(at), n, out)
                    return [out]
                return [_pieces(wo, (lanes, lanes // 2), out, chunk)]
            return [_for(ho, [out], out_row)[0], xp]
        return _for(c, [out, xp], channel)

    # one channel's padded plane (in cache between being written and read)
    xp0 = fill(low, empty([1, 1, hp, width], elt))
    return _for(n, [empty([n, c, ho, wo], elt), xp0], image)[0]


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


def _whole(extent, sizes, acc, piece):
    """``piece(at, size, acc)`` over ``0..extent`` in whole pieces of each of
    ``sizes`` in turn (an ``scf.for`` each; after the first, loops of 0 or 1
    trips). Returns ``(where they end, acc)``."""
    at = index(0)
    for size in sizes:
        end = arith.addi(at, arith.muli(arith.divui(arith.subi(extent, at), index(size)),
                                        index(size)))
        loop = scf.ForOp(at, end, index(size), [acc])
        with ir.InsertionPoint(loop.body):
            scf.YieldOp([piece(loop.induction_variable, size, loop.inner_iter_args[0])])
        at, acc = end, loop.results[0]
    return at, acc


def _pieces(extent, sizes, acc, piece):
    """``piece(at, size, acc[, in_bounds=False])`` over a run-time ``extent``:
    whole pieces of each of ``sizes`` in turn (``_whole``), then one piece of
    the last size whose transfers are masked where the extent leaves a part (a
    loop of 0 or 1 trips): the static kernel's narrower last vector, a mask
    for the columns past its width. Returns the final ``acc``."""
    at, acc = _whole(extent, sizes, acc, piece)
    last = scf.ForOp(at, extent, index(sizes[-1]), [acc])
    with ir.InsertionPoint(last.body):
        scf.YieldOp([piece(last.induction_variable, sizes[-1], last.inner_iter_args[0], False)])
    return last.results[0]


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

    # a column stride above 2 decomposes (its windows' columns would be a
    # gather; none of the image nets we run has one)
    @fused_kernel("MaxPool2D", precision=MAX_POOL2D, dtypes=(DType.F32, DType.F64),
                  from_params=back, serves=lambda params, types: params["stride"][1] <= 2)
    def _pool_params(params, types):
        out = default_registry()["MaxPool2D"].infer(list(types), params)
        return P.MaxPool2D(tuple(types[0].shape), tuple(out.shape), tuple(params["kernel"]),
                           tuple(params["stride"]), tuple(params["dilation"]),
                           tuple(params["padding"]), bool(params.get("image_at_run_time", False)))


_register_kernel()
