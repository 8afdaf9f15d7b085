"""ExpandDepthwise (fused id 27) as one cpu kernel: a 1x1 expansion conv
computed a block of channels at a time straight into the planes the
depthwise conv after it reads (docs/architecture.md, "Convolutions on CPU").

Per image and block of ``_EXPAND_BLOCK`` expanded channels, the expansion
``act_e(we[c:c+k] @ x[i] + be[c:c+k])`` is computed over the image's flat
pixels in register tiles (m channels x V vectors, ``_EXPAND_TILES``, the sum
over the input channels from 0, then the bias and the clamp: the pointwise
kernel's order) into a block tensor ``[1, k, H*W]`` (a few hundred KiB at
most: it stays in L2), and the depthwise conv of those k channels runs on it
as the depthwise kernel runs on a block of its input (``fused_conv._planes``:
rows scattered into the zero-padded stride-phase planes, the register-tiled
generic, the crop adding the bias and applying the epilogue). The expanded
tensor, the largest activation of an inverted residual block, is never
written to memory.
"""
from __future__ import annotations

from compiler.errors import LoweringError
from compiler.mlir import arith, ir, tensor, vector

from .conv_spatial import _VectorScalar, channel_sums, generated_bits
from .core import Scalar, collapse, dims, empty, expand, index, insert_at, lowers, rtt, slice_at
from .fused_conv import _Geometry, _activation, _bytes, _pair, _planes
from .fused_norm import _for

#: Expanded channels computed per block (``ExpandDepthwise``'s kernel serves
#: a Ce that is a multiple of it).
_EXPAND_BLOCK = 8
#: The fewest images of a call the kernel serves: at batch 1 the expanded
#: tensor (1.2 MB at 56^2) stays in cache between the two kernels, which then
#: ran faster (MobileNet b1, 2 znver4 threads, AVX-512: 0.74 ms as two
#: kernels, 0.83 fused; docs/benchmarks.md, "The expansion fused into the
#: depthwise conv").
EXPAND_MIN_BATCH = 2
#: The expansion's register tiles per vector width: (m channels, V vectors);
#: 16 of the 32 zmm and 8 of the 16 ymm registers accumulate.
_EXPAND_TILES = {512: (8, 2), 256: (4, 2)}


@lowers("ExpandDepthwise")
def _expand_depthwise_generic(lw):
    raise LoweringError("ExpandDepthwise has a cpu kernel only; other targets run its recipe "
                        "(two Conv2Ds)")


@lowers("ExpandDepthwise", platform="cpu")
def _expand_depthwise(lw):
    from compiler.registry.ops.expand_depthwise import conv_params
    x, we, be, w, bias = lw.operands
    _, cin, h, wd = rtt(x).shape
    n = dims(x)[0]   # a run-time batch stays one
    ce, _, kh, kw = rtt(w).shape
    stride = _pair(lw.param("stride"), "stride")
    pad = _pair(lw.param("padding"), "padding")
    elt, s = lw.out_elt, Scalar.compute(lw.in_dtypes[0])
    if s.ty != elt or ce % _EXPAND_BLOCK or any(
            rtt(v).is_dynamic_dim(i) for v in (x, we, w) for i in range(1, 4)):
        raise LoweringError(f"ExpandDepthwise kernel: f32/f64, static C/H/W, Ce a multiple of "
                            f"{_EXPAND_BLOCK}; got x {x.type}, wd {w.type}")
    pe, pd = conv_params(lw.params)
    if pe.get("silu"):
        raise LoweringError("ExpandDepthwise kernel: the expansion's epilogue is a clamp or none")
    ho = (h + 2 * pad[0] - kh) // stride[0] + 1
    wo = (wd + 2 * pad[1] - kw) // stride[1] + 1
    geo = _Geometry(pad, (1, 1), stride, (kh, kw), (h, wd), (ho, wo), True)
    k = _EXPAND_BLOCK
    kd = geo.channel_block(k, _bytes(elt))   # the depthwise kernel's own block
    act = _activation(s, pd)
    x3 = collapse(x, [[0], [1], [2, 3]])

    def image(i, out, blk, *scratch):
        def block(b, out, blk, *scratch):
            c = arith.muli(b, index(k))
            blk = _expand(x3, i, we, be, c, s, pe, blk)
            planes = expand(blk, [1, k, h, wd], [[0], [1], [2, 3]])

            def sub(j, out, *scratch):
                cj = arith.muli(j, index(kd))
                cc = arith.addi(c, cj)
                y, scratch = _planes(slice_at(planes, [index(0), cj], [1, kd, h, wd]),
                                     slice_at(w, [cc], [kd, 1, kh, kw]),
                                     slice_at(bias, [cc], [kd]), s, elt, geo, list(scratch), out,
                                     [i, cc], act)
                return [y, *scratch]
            out, *scratch = _for(k // kd, [out, *scratch], sub)
            return [out, blk, *scratch]
        return _for(ce // k, [out, blk, *scratch], block)

    inits = [empty([n, ce, ho, wo], elt), empty([1, k, h * wd], elt), *geo.scratch(s, elt, kd, kd)]
    return _for(n, inits, image)[0]


def _expand(x3, i, we, be, c0, s, pe, blk):
    """``blk[0, j, p] = act_e(sum_c we[c0 + j, c] * x3[i, c, p] + be[c0 + j])``
    for the block's channels j and every pixel p, in register tiles of m
    channels x V vectors (``_EXPAND_TILES``): the pieces of V vectors, then
    single vectors, then the rest in ever narrower vectors (whole vectors
    of 8, 4, 2, 1 lanes: as masked vectors they hung MLIR's canonicalizer,
    ``fold_memref_alias_ops`` with it, on a 7^2 image). The
    epilogue (``pe``: Conv2D's clamp params) runs on the registers."""
    elt = rtt(blk).element_type
    k, npix = rtt(blk).shape[1:]
    cin = rtt(x3).shape[1]
    bits = generated_bits()
    lanes = bits // ir.FloatType(elt).width
    m0, v0 = _EXPAND_TILES[bits]
    pix = ir.AffineMap.get_minor_identity(3, 1)
    zero = s.const(0)

    def tile(p, v, lw, blk):
        vt = ir.VectorType.get([lw], elt)
        vs = _VectorScalar(s, vt)
        clamp = _activation(vs, pe)
        cols = [arith.addi(p, index(j * lw)) if j else p for j in range(v)]
        for j0 in range(0, k, m0):
            chans = [arith.addi(c0, index(j0 + m)) for m in range(m0)]
            sums = channel_sums(cin, vt, chans, v, we, lambda c, jv: vector.TransferReadOp(
                vt, x3, [i, c, cols[jv]], pix, zero, [True]).result)
            for m in range(m0):
                bv = vector.BroadcastOp(vt, tensor.extract(be, [chans[m]])).result
                for jv in range(v):
                    val = vs.add(sums[m * v + jv], bv)
                    if clamp is not None:
                        val = clamp(val)
                    blk = vector.TransferWriteOp(blk.type, val, blk,
                                                 [index(0), index(j0 + m), cols[jv]], pix,
                                                 [True]).result
        return blk

    step = v0 * lanes
    whole = npix // step
    if whole:
        blk = _for(whole, [blk], lambda q, b: [tile(arith.muli(q, index(step)), v0, lanes, b)])[0]
    at, width = whole * step, lanes
    while at < npix:   # the rest: single vectors, then halves down to one lane
        if npix - at >= width:
            blk = tile(index(at), 1, width, blk)
            at += width
        else:
            width //= 2
    return blk


def serves(params, types) -> bool:
    """Whether the kernel takes this ExpandDepthwise: a stride the depthwise
    kernel computes directly (``fused_conv.direct_depthwise``), Ce a
    multiple of ``_EXPAND_BLOCK``, a static batch of at least
    ``EXPAND_MIN_BATCH`` images, the expansion's epilogue a clamp or none.
    (A SiLU on the expansion's registers, ``_silu`` on vectors, was slower
    than the two kernels on AVX2 and no faster on AVX-512: EfficientNet's
    pairs at batch 8, 2 znver4 threads, x86-64-v3 1.02-1.19x, AVX-512
    0.88-1.01x, the whole model 1.003x; docs/benchmarks.md.)"""
    from .fused_conv import direct_depthwise
    n = types[0].shape[0]
    return (isinstance(n, int) and n >= EXPAND_MIN_BATCH and not params.get("expand_silu")
            and types[1].shape[0] % _EXPAND_BLOCK == 0 and direct_depthwise(params["stride"]))


def batch_dims(types, params) -> tuple:
    """x's and the output's batch are run-time extents (an ``scf.for`` over
    the images)."""
    batch = (True, False, False, False)
    return (batch,) + tuple((False,) * len(t.shape) for t in types[1:]) + (batch,)


def _register_kernel() -> None:
    from compiler.codegen.fused import CONV2D, fused_kernel
    from compiler.registry import default_registry
    from runtime import params as P
    from runtime.dtype import DType

    names = ("expand_clamp_min", "expand_clamp_max", "clamp_min", "clamp_max")

    def back(p, types):
        d = {"stride": tuple(p.stride), "padding": tuple(p.padding),
             "expand_silu": True if p.expand_silu else None, "silu": True if p.silu else None}
        d.update({k: getattr(p, k) for k in names})
        return d

    @fused_kernel("ExpandDepthwise", precision=CONV2D, dtypes=(DType.F32, DType.F64),
                  from_params=back, serves=serves)
    def _params(params, types):
        out = default_registry()["ExpandDepthwise"].infer(list(types), params)
        return P.ExpandDepthwise(tuple(types[0].shape), tuple(types[3].shape), tuple(out.shape),
                                 tuple(params["stride"]), tuple(params["padding"]),
                                 *(params.get(k) for k in names[:2]),
                                 bool(params.get("expand_silu", False)),
                                 *(params.get(k) for k in names[2:]),
                                 bool(params.get("silu", False)))


_register_kernel()
