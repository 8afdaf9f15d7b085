"""Conv2D (fused id 6) as one kernel: 2-D cross-correlation, NCHW / FCHW.

Inputs x ``[N,Cin,H,W]``, w ``[Cout,Cin/g,Kh,Kw]``, optional bias ``[Cout]``.
Params ``stride`` (sh, sw), ``padding`` (ph, pw), ``groups``, ``dilation``
(dh, dw).

* zero padding: ``linalg.fill`` + ``tensor.insert_slice`` of x;
* groups = 1 with f32/f64: the named ``linalg.conv_2d_nchw_fchw`` (strides,
  dilations as attributes);
* otherwise (groups > 1, or f16/bf16 accumulated in f32): one
  ``linalg.generic`` over the grouped views x ``[N,G,Cin/g,Hp,Wp]``,
  w ``[G,Cout/g,Cin/g,Kh,Kw]``, loops (n, g, o, oh, ow | c, kh, kw);
* bias add and the rounding to the storage dtype in one elementwise generic.

Accumulation runs over (c, kh, kw) in order, in f32 (f64 for f64 inputs).
"""
from __future__ import annotations

from compiler.errors import LoweringError
from compiler.mlir import arith, ir, linalg

from .core import (PARALLEL, REDUCTION, Lowering, Scalar, affine_map, empty, expand, fill,
                   collapse, from_compute, generic, identity_map, lowers, rtt, to_compute)
from .layout import insert_slice


def _pair(v, what) -> tuple[int, int]:
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise LoweringError(f"Conv2D: {what} must be an (h, w) pair, got {v}")
    return v


@lowers("Conv2D")
def _conv2d(lw: Lowering):
    ops = lw.operands
    if len(ops) not in (2, 3):
        raise LoweringError(f"Conv2D takes 2 or 3 operands (x, w, [bias]), got {len(ops)}")
    x, w = ops[0], ops[1]
    bias = ops[2] if len(ops) == 3 else None
    for v in ops:
        if not rtt(v).has_static_shape:
            raise LoweringError(f"Conv2D is lowered with static shapes only, got {v.type}")
    n, cin, h, wd = rtt(x).shape
    cout, cpg, kh, kw = rtt(w).shape
    sh, sw = _pair(lw.param("stride"), "stride")
    ph, pw = _pair(lw.param("padding"), "padding")
    dh, dw = _pair(lw.params.get("dilation", (1, 1)), "dilation")
    g = int(lw.param("groups"))
    if g < 1 or cin % g or cout % g or cpg * g != cin:
        raise LoweringError(f"Conv2D: groups={g} must divide Cin={cin} and Cout={cout} "
                            f"with w's axis 1 = Cin/groups (got {cpg})")
    hp, wp = h + 2 * ph, wd + 2 * pw
    ho, wo = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    if min(sh, sw, dh, dw) < 1 or ho < 1 or wo < 1:
        raise LoweringError(f"Conv2D: stride {sh, sw} / dilation {dh, dw} / kernel {kh}x{kw} "
                            f"give an empty output for the padded input {hp}x{wp}")
    elt = lw.out_elt
    s = Scalar.compute(lw.in_dtypes[0])
    if ph or pw:
        x = insert_slice(x, fill(s.const(0) if s.ty == elt else _zero(elt),
                                 empty([n, cin, hp, wp], elt)), [0, 0, ph, pw])
    out_shape = [n, cout, ho, wo]
    if g == 1 and s.ty == elt:
        y = linalg.conv_2d_nchw_fchw(x, w, outs=[fill(s.const(0), empty(out_shape, elt))],
                                     strides=[sh, sw], dilations=[dh, dw])
    else:
        opg = cout // g
        xg = expand(x, [n, g, cpg, hp, wp], [[0], [1, 2], [3], [4]])
        wg = expand(w, [g, opg, cpg, kh, kw], [[0, 1], [2], [3], [4]])
        # Loops n g o oh | c kh kw | ow: the output column innermost, so each
        # (c, kh, kw) tap is one pass of vector FMAs along an output row (x read
        # at stride sw, the tap's weight broadcast, the row's partial sums in
        # L1). With the reductions innermost (the natural order) every output
        # was a scalar 9-term dot product: depthwise 3x3 x144 at 56^2 took
        # 1.36 ms, 4.4x onnxruntime.
        d = [ir.AffineDimExpr.get(i) for i in range(8)]   # n g o oh c kh kw ow
        row = d[3] * sh + d[5] * dh
        col = d[7] * sw + d[6] * dw
        acc = generic(
            [xg, wg], [fill(s.const(0), empty([n, g, opg, ho, wo], s.ty))],
            [affine_map(8, [0, 1, 4, row, col]), affine_map(8, [1, 2, 4, 5, 6]),
             affine_map(8, [0, 1, 2, 3, 7])],
            [PARALLEL] * 4 + [REDUCTION] * 3 + [PARALLEL],
            lambda a, b, c: s.add(c, s.mul(to_compute(a, s), to_compute(b, s))))[0]
        y = collapse(acc, [[0], [1, 2], [3], [4]])
    if bias is None and rtt(y).element_type == elt:
        return y
    ins, maps = [y], [identity_map(4)]
    if bias is not None:
        ins.append(bias)
        maps.append(affine_map(4, [1]))

    def finish(v, *rest):
        v = to_compute(v, s)
        if bias is not None:
            v = s.add(v, to_compute(rest[0], s))
        return from_compute(v, elt)

    return generic(ins, [empty(out_shape, elt)], maps + [identity_map(4)], [PARALLEL] * 4,
                   finish)[0]


def _zero(elt: "ir.Type") -> "ir.Value":
    return arith.constant(elt, 0.0)


# -- kernel params mapping (the mlir-cpu-fused family, compiler/codegen/fused.py) --
def _register_kernel() -> None:
    from compiler.codegen.fused import CONV2D, fused_kernel
    from compiler.registry import default_registry
    from runtime import params as P
    from runtime.dtype import DType

    def back(p, types):
        return {"stride": tuple(p.stride), "padding": tuple(p.padding), "groups": p.groups,
                "dilation": tuple(p.dilation)}

    from compiler.registry.ops.conv2d import is_depthwise

    # groups = 1 takes the recipe (im2col + the tiled, threaded MatMul kernel):
    # 20-50x faster than this kernel's loops (docs/architecture.md); so does a
    # depthwise conv (its taps' Mul/Add chain, fused into one elementwise kernel).
    @fused_kernel("Conv2D", precision=CONV2D, dtypes=(DType.F32, DType.F64),
                  from_params=back, keys=lambda t: [(t,) * 3, (t,) * 4],
                  serves=lambda params, types: (params["groups"] != 1
                                                and not is_depthwise(types, params)))
    def _conv_params(params, types):
        out = default_registry()["Conv2D"].infer(list(types), params)
        return P.Conv2D(tuple(types[0].shape), tuple(types[1].shape), tuple(out.shape),
                        tuple(params["stride"]), tuple(params["padding"]),
                        tuple(params["dilation"]), params["groups"])


_register_kernel()
