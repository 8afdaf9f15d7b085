"""Weight-only quantized matmuls as one kernel each: dequantize the weight
into a tensor (one ``linalg.generic`` reading the packed words/bytes), then
one reduction ``linalg.generic`` with the activations.

* ``QMatMul`` (fused id 14): GGUF Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q4_K
  and Q6_K (ggml's block layouts, spelled out in the registry entry
  ``compiler/registry/ops/qmatmul.py`` and in each decoder below). ``w_q`` is
  the flat u32 stream of the raw little-endian block bytes of an ``[n, k]``
  weight, row after row; the weight tensor is built by one ``linalg.generic``
  whose body reads the bytes of element (n, k)'s block. f16 fields are
  decoded exactly (bitcast + extf) and every product is exact in f32, so the
  weights equal ggml's f32 dequantization bit for bit. Out ``[..,M,n]`` f32.
* ``Nf4Matmul`` (id 21, bitsandbytes' layout): code of (n, k) is the high
  nibble of ``w_packed[n, k/2]`` for even k, the low nibble for odd k;
  w = NF4[code]·absmax[n, k/bs] (f32), rounded to act's dtype.
* ``AwqMatmul`` (id 25, AutoAWQ's GEMM layout): qweight ``[K, N/8]`` and
  qzeros ``[K/gs, N/8]`` (i32 or u32) pack 8 columns per word, physical
  nibble p (LSB first) holding column [0,2,4,6,1,3,5,7][p], so column j sits
  at p = j/2 + 4·(j mod 2); dequant[k, n] = (q[k, n] - z[k/gs, n])·s[k/gs, n]
  in f32 (f16 scales widened exactly), rounded to act's dtype.

The matmul accumulates in f32 (f64 for f64 activations) in k order, and the
result is rounded once to the activation dtype. Other GGUF types raise
``LoweringError`` (the registry's shape rule refuses them first).
"""
from __future__ import annotations

import numpy as np

from compiler.errors import LoweringError
from compiler.mlir import arith, ir, tensor

from .core import (PARALLEL, REDUCTION, Lowering, Scalar, affine_map, empty, fill, generic,
                   identity_map, loop_index, lowers, rtt, to_compute)

_NF4 = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
        -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
        0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
        0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0)


def _i32(v: int) -> "ir.Value":
    return arith.constant(ir.IntegerType.get_signless(32), v)


def _idx(v: int) -> "ir.Value":
    return arith.constant(ir.IndexType.get(), v)


def _nibble(word: "ir.Value", pos: "ir.Value") -> "ir.Value":
    """Bits [4·pos, 4·pos+4) of an i32 ``word``; ``pos`` an index value."""
    shift = arith.muli(arith.index_cast(ir.IntegerType.get_signless(32), pos), _i32(4))
    return arith.andi(arith.shrui(word, shift), _i32(0xF))


def _convert(x: "ir.Value", elt: "ir.Type") -> "ir.Value":
    """A float value converted (rounded or widened) to float type ``elt``."""
    if x.type == elt:
        return x
    xw, ew = ir.FloatType(x.type).width, ir.FloatType(elt).width
    if ew > xw:
        return arith.extf(elt, x)
    return arith.truncf(elt, x)


def _static(lw: Lowering):
    for v in lw.operands:
        if not rtt(v).has_static_shape:
            raise LoweringError(f"{lw.name} is lowered with static shapes only, got {v.type}")


def _matmul(lw: Lowering, act, w, n: int, w_is_nk: bool):
    """``act [..,M,K] @ W`` with W ``[n, K]`` (``w_is_nk``) or ``[K, n]``;
    accumulates in the activation's compute type, rounds once to the output."""
    shape = list(rtt(act).shape)
    r = len(shape)
    loops = r + 1                      # (lead.., m, n, k): m = r-2, n = r-1, k = r
    m_, n_, k_ = r - 2, r - 1, r
    lead = list(range(r - 2))
    s = Scalar.compute(lw.in_dtypes[0])
    out_dims = shape[:-1] + [n]
    a_map = affine_map(loops, lead + [m_, k_])
    w_map = affine_map(loops, [n_, k_] if w_is_nk else [k_, n_])
    o_map = affine_map(loops, lead + [m_, n_])
    acc = fill(s.const(0), empty(out_dims, s.ty))
    red = generic([act, w], [acc], [a_map, w_map, o_map], [PARALLEL] * r + [REDUCTION],
                  lambda x, y, c: s.add(c, s.mul(to_compute(x, s), to_compute(y, s))))[0]
    elt = lw.out_elt
    if s.ty == elt:
        return red
    return generic([red], [empty(out_dims, elt)], [identity_map(r), identity_map(r)],
                   [PARALLEL] * r, lambda x, _o: _convert(x, elt))[0]


@lowers("QMatMul")
def _qmatmul(lw: Lowering):
    _static(lw)
    a, wq = lw.operands
    qt, k, n = lw.param("quant_type"), int(lw.param("k")), int(lw.param("n"))
    if qt not in _DECODERS:
        raise LoweringError(f"QMatMul: the CPU kernel covers {', '.join(_DECODERS)}, not {qt}; "
                            f"decompose it or use another backend")
    qk, nb = _BLOCKS[qt]
    words = rtt(wq).shape[0]
    if k % qk or words != -(-n * (k // qk) * nb // 4):
        raise LoweringError(f"QMatMul {qt}: w_q holds {words} u32 words, an [{n},{k}] weight "
                            f"needs {n * (k // qk) * nb} bytes (padded to whole words)")
    i32 = ir.IntegerType.get_signless(32)
    f32 = ir.F32Type.get()

    def body(_o):
        nn, kk = loop_index(0), loop_index(1)
        blk = arith.addi(arith.muli(nn, _idx(k // qk)), arith.divui(kk, _idx(qk)))
        base = arith.muli(blk, _idx(nb))

        def byte(off):
            """Byte ``base + off`` (``off`` an int or index value) as i32 in [0, 255]."""
            p = arith.addi(base, _idx(off) if isinstance(off, int) else off)
            word = tensor.extract(wq, [arith.divui(p, _idx(4))])
            shift = arith.muli(arith.index_cast(i32, arith.remui(p, _idx(4))), _i32(8))
            return arith.andi(arith.shrui(word, shift), _i32(0xFF))

        return _DECODERS[qt](_Block(byte), arith.remui(kk, _idx(qk)))

    w = generic([], [empty([n, k], f32)], [identity_map(2)], [PARALLEL] * 2, body)[0]
    return _matmul(lw, a, w, n, w_is_nk=True)


class _Block:
    """Scalar reads of one GGUF block inside a ``linalg.generic`` body."""

    def __init__(self, byte):
        self.byte = byte            # byte(offset) -> i32 in [0, 255]

    def f16(self, off: int) -> "ir.Value":
        """The little-endian f16 at ``off``, exactly widened to f32."""
        bits = arith.ori(self.byte(off), arith.shli(self.byte(off + 1), _i32(8)))
        half = arith.bitcast(ir.F16Type.get(), arith.trunci(ir.IntegerType.get_signless(16), bits))
        return arith.extf(ir.F32Type.get(), half)

    def int8(self, off) -> "ir.Value":
        """The int8 at ``off`` as f32."""
        return _f32(arith.trunci(ir.IntegerType.get_signless(8), self.byte(off)), signed=True)

    def nibble(self, qs: int, e) -> "ir.Value":
        """Element ``e`` (< 32) of 16 nibble bytes at ``qs``: low nibbles are
        elements 0..15, high nibbles 16..31."""
        return _nibble(self.byte(arith.addi(_idx(qs), arith.remui(e, _idx(16)))),
                       arith.divui(e, _idx(16)))

    def bit(self, at: int, j) -> "ir.Value":
        """Bit ``j`` of the little-endian bit field at ``at``, as i32."""
        b = self.byte(arith.addi(_idx(at), arith.divui(j, _idx(8))))
        return arith.andi(arith.shrui(b, arith.index_cast(ir.IntegerType.get_signless(32),
                                                          arith.remui(j, _idx(8)))), _i32(1))


def _f32(x: "ir.Value", signed: bool) -> "ir.Value":
    f32 = ir.F32Type.get()
    return arith.sitofp(f32, x) if signed else arith.uitofp(f32, x)


def _q4(b: _Block, e, qs: int, offset: int):
    return _f32(arith.subi(b.nibble(qs, e), _i32(offset)), signed=True)


def _q5(b: _Block, e, qh: int, qs: int):
    return arith.ori(b.nibble(qs, e), arith.shli(b.bit(qh, e), _i32(4)))


def _q4_k(b: _Block, e):
    """Sub-block j = e/32: 6-bit scale and min unpacked from bytes 4..15
    (j < 4: low 6 bits of bytes j, j+4; j >= 4: nibbles of byte j+4 with the
    top 2 bits of bytes j-4, j), nibble of byte 16 + 32·(e/64) + e%32."""
    j = arith.divui(e, _idx(32))
    jj = arith.remui(j, _idx(4))
    lo, mid, hi = (b.byte(arith.addi(jj, _idx(4 + 4 * i))) for i in range(3))
    first = arith.cmpi(arith.CmpIPredicate.ult, j, _idx(4))
    top = lambda v: arith.shli(arith.shrui(v, _i32(6)), _i32(4))  # noqa: E731
    sc = arith.select(first, arith.andi(lo, _i32(63)),
                      arith.ori(arith.andi(hi, _i32(15)), top(lo)))
    mn = arith.select(first, arith.andi(mid, _i32(63)),
                      arith.ori(arith.shrui(hi, _i32(4)), top(mid)))
    r = arith.remui(e, _idx(64))
    qb = b.byte(arith.addi(_idx(16), arith.addi(arith.muli(arith.divui(e, _idx(64)), _idx(32)),
                                                arith.remui(r, _idx(32)))))
    q = _f32(_nibble(qb, arith.divui(r, _idx(32))), signed=False)
    return arith.subf(arith.mulf(arith.mulf(b.f16(0), _f32(sc, signed=False)), q),
                      arith.mulf(b.f16(2), _f32(mn, signed=False)))


def _q6_k(b: _Block, e):
    """half h = e/128, t = (e%128)/32, l = e%32: low 4 bits from nibble t/2 of
    byte 64h + 32·(t%2) + l, high 2 bits from bits 2t of byte 128 + 32h + l;
    int8 scale at 192 + e/16, f16 d at 208; w = d·sc·(q - 32)."""
    h, r = arith.divui(e, _idx(128)), arith.remui(e, _idx(128))
    t, l = arith.divui(r, _idx(32)), arith.remui(r, _idx(32))
    ql = b.byte(arith.addi(arith.addi(arith.muli(h, _idx(64)),
                                      arith.muli(arith.remui(t, _idx(2)), _idx(32))), l))
    low = _nibble(ql, arith.divui(t, _idx(2)))
    qh = b.byte(arith.addi(_idx(128), arith.addi(arith.muli(h, _idx(32)), l)))
    shift = arith.muli(arith.index_cast(ir.IntegerType.get_signless(32), t), _i32(2))
    high = arith.andi(arith.shrui(qh, shift), _i32(3))
    q = _f32(arith.subi(arith.ori(low, arith.shli(high, _i32(4))), _i32(32)), signed=True)
    sc = b.int8(arith.addi(_idx(192), arith.divui(e, _idx(16))))
    return arith.mulf(arith.mulf(b.f16(208), sc), q)


#: quant type -> body(block, element index in the block) -> the f32 weight.
_DECODERS = {
    "Q4_0": lambda b, e: arith.mulf(b.f16(0), _q4(b, e, 2, 8)),
    "Q4_1": lambda b, e: arith.addf(arith.mulf(b.f16(0), _q4(b, e, 4, 0)), b.f16(2)),
    "Q5_0": lambda b, e: arith.mulf(b.f16(0), _f32(arith.subi(_q5(b, e, 2, 6), _i32(16)),
                                                  signed=True)),
    "Q5_1": lambda b, e: arith.addf(arith.mulf(b.f16(0), _f32(_q5(b, e, 4, 8), signed=False)),
                                    b.f16(2)),
    "Q8_0": lambda b, e: arith.mulf(b.f16(0), b.int8(arith.addi(_idx(2), e))),
    "Q8_1": lambda b, e: arith.mulf(b.f16(0), b.int8(arith.addi(_idx(4), e))),
    "Q4_K": _q4_k,
    "Q6_K": _q6_k,
}
#: quant type -> (elements, bytes) per block.
_BLOCKS = {"Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
           "Q8_0": (32, 34), "Q8_1": (32, 36), "Q4_K": (256, 144), "Q6_K": (256, 210)}


@lowers("Nf4Matmul")
def _nf4_matmul(lw: Lowering):
    _static(lw)
    act, packed, absmax = lw.operands
    k = rtt(act).shape[-1]
    n = rtt(packed).shape[0]
    bs = int(lw.param("block_size"))
    if bs < 1 or k % bs or k % 2:
        raise LoweringError(f"Nf4Matmul: block_size={bs} must divide K={k} (K even)")
    f32 = ir.F32Type.get()
    lut_ty = ir.RankedTensorType.get([16], f32)
    lut = arith.constant(lut_ty, ir.DenseElementsAttr.get(np.asarray(_NF4, np.float32),
                                                          type=lut_ty))
    welt = rtt(act).element_type
    i32 = ir.IntegerType.get_signless(32)
    half = ir.AffineFloorDivExpr.get(ir.AffineDimExpr.get(1), ir.AffineConstantExpr.get(2))
    blk = ir.AffineFloorDivExpr.get(ir.AffineDimExpr.get(1), ir.AffineConstantExpr.get(bs))

    def body(b, amax, _o):
        odd = arith.remui(loop_index(1), _idx(2))          # even k: the high nibble
        code = _nibble(arith.extui(i32, b), arith.subi(_idx(1), odd))
        val = tensor.extract(lut, [arith.index_castui(ir.IndexType.get(), code)])
        return _convert(arith.mulf(val, amax), welt)

    w = generic([packed, absmax], [empty([n, k], welt)],
                [affine_map(2, [0, half]), affine_map(2, [0, blk]), identity_map(2)],
                [PARALLEL] * 2, body)[0]
    return _matmul(lw, act, w, n, w_is_nk=True)


@lowers("AwqMatmul")
def _awq_matmul(lw: Lowering):
    _static(lw)
    act, qweight, qzeros, scales = lw.operands
    k = rtt(act).shape[-1]
    n = rtt(qweight).shape[1] * 8
    gs = int(lw.param("group_size"))
    if gs < 1 or k % gs or rtt(qweight).shape[0] != k:
        raise LoweringError(f"AwqMatmul: qweight {rtt(qweight)} must be [K={k}, N/8] and "
                            f"group_size={gs} must divide K")
    f32 = ir.F32Type.get()
    welt = rtt(act).element_type
    d0, d1 = ir.AffineDimExpr.get(0), ir.AffineDimExpr.get(1)   # loops (k, n)

    def fdiv(e, c):
        return ir.AffineFloorDivExpr.get(e, ir.AffineConstantExpr.get(c))

    def body(wq, wz, sc, _o):
        # column j of a word sits in physical nibble AWQ_REVERSE_ORDER[j] = j/2 + 4·(j mod 2)
        col = arith.remui(loop_index(1), _idx(8))
        phys = arith.addi(arith.divui(col, _idx(2)),
                          arith.muli(arith.remui(col, _idx(2)), _idx(4)))
        q = _nibble(wq, phys)
        z = _nibble(wz, phys)
        return _convert(arith.mulf(arith.sitofp(f32, arith.subi(q, z)), _convert(sc, f32)), welt)

    w = generic([qweight, qzeros, scales], [empty([k, n], welt)],
                [affine_map(2, [d0, fdiv(d1, 8)]), affine_map(2, [fdiv(d0, gs), fdiv(d1, 8)]),
                 affine_map(2, [fdiv(d0, gs), d1]), identity_map(2)],
                [PARALLEL] * 2, body)[0]
    return _matmul(lw, act, w, n, w_is_nk=False)


# -- kernel params mapping (the mlir-cpu-fused family, compiler/codegen/fused.py) --
def _register_kernels() -> None:
    import math as _m

    from compiler.codegen.fused import QMATMUL, fused_kernel
    from compiler.registry import default_registry
    from runtime import params as P
    from runtime.dtype import DType

    def lead(shape):
        return _m.prod(shape[:-2]), shape[-2]

    @fused_kernel("QMatMul", precision=QMATMUL, dtypes=(DType.F32,),
                  keys=lambda t: [(t, DType.U32, t)],
                  from_params=lambda p, types: {"quant_type": p.quant_type.name, "k": p.k,
                                                "n": p.n})
    def _qmatmul_params(params, types):
        if params["quant_type"] not in _DECODERS:
            raise ValueError(f"the CPU kernel covers {', '.join(_DECODERS)}, "
                             f"not {params['quant_type']}")
        batch, m = lead(types[0].shape)
        return P.QMatMul(P.QuantType[params["quant_type"]], batch, m, params["n"], params["k"])

    @fused_kernel("Nf4Matmul", precision=QMATMUL,
                  dtypes=(DType.F32, DType.F64, DType.F16, DType.BF16),
                  keys=lambda t: [(t, DType.U8, DType.F32, t)],
                  from_params=lambda p, types: {"block_size": p.block_size})
    def _nf4_params(params, types):
        batch, m = lead(types[0].shape)
        return P.Nf4Matmul(batch, m, types[1].shape[0], types[0].shape[-1],
                           params["block_size"])

    # AwqMatmul gets its kernel once its registry entry names an OpKind (the
    # family keys kernels by OpKind; an entry without one gets no kernel).
    if default_registry()["AwqMatmul"].op_kind is not None:
        @fused_kernel("AwqMatmul", precision=QMATMUL,
                      dtypes=(DType.F32, DType.F64, DType.F16, DType.BF16),
                      keys=lambda t: [(t, wd, wd, sd, t) for wd in (DType.I32, DType.U32)
                                      for sd in (DType.F16, DType.F32)],
                      from_params=lambda p, types: {"group_size": p.group_size})
        def _awq_params(params, types):
            batch, m = lead(types[0].shape)
            return P.AwqMatmul(batch, m, types[1].shape[1] * 8, types[0].shape[-1],
                               params["group_size"])


_register_kernels()
