"""Element-wise families: binary, unary, scalar-param, compare, select, cast."""
from __future__ import annotations

import math as pymath

from compiler.mlir import arith, ir, math

from .core import FLOAT_DTYPES, Lowering, Scalar, bool_to, elementwise, lowers, nonzero


def _rem(s: Scalar, a, b):
    """PyTorch remainder / numpy mod: the result has the sign of the divisor."""
    if s.is_float:
        # fmod, moved into the divisor's sign (x % inf is x for x >= 0, inf for
        # x < 0; a zero result is signed like the divisor), as numpy.mod does
        r = arith.remf(a, b)
        zero = s.const(0.0)
        wrong_sign = arith.andi(s.cmp("ne", r, zero),
                                arith.xori(s.cmp("lt", r, zero), s.cmp("lt", b, zero)))
        r = arith.select(wrong_sign, arith.addf(r, b), r)
        return arith.select(s.cmp("eq", r, zero), math.copysign(zero, b), r)
    safe, is_zero = s.safe_divisor(a, b)  # x % 0 is 0, as in the reference
    zero = s.const(0)
    if s.unsigned:
        return arith.select(is_zero, zero, arith.remui(a, safe))
    r = arith.remsi(a, safe)
    fix = arith.andi(s.cmp("ne", r, zero),
                     arith.xori(s.cmp("lt", r, zero), s.cmp("lt", safe, zero)))
    return arith.select(is_zero, zero, arith.select(fix, arith.addi(r, safe), r))


def _pow(s: Scalar, a, b):
    if s.is_float:
        return math.powf(a, b)
    return math.ipowi(a, b)


def _shift(left: bool):
    """``a << b`` / ``a >> b`` (logical for unsigned, arithmetic for signed); a
    count outside [0, width), negative ones included (they compare as huge
    unsigned), shifts every bit out: 0, or the sign fill of a signed right
    shift (where ``arith`` would give poison)."""
    def shift(s: Scalar, a, b):
        width = ir.IntegerType(s.ty).width
        out = arith.cmpi(arith.CmpIPredicate.uge, b, s.const(width))
        if left:
            return arith.select(out, s.const(0), arith.shli(a, b))
        if s.unsigned:
            return arith.select(out, s.const(0), arith.shrui(a, b))
        return arith.shrsi(a, arith.select(out, s.const(width - 1), b))
    return shift


BINARY = {
    "Add": Scalar.add, "Sub": Scalar.sub, "Mul": Scalar.mul, "Div": Scalar.div,
    "Maximum": Scalar.max, "Minimum": Scalar.min, "Rem": _rem, "Pow": _pow,
    "BitwiseAnd": lambda s, a, b: arith.andi(a, b),
    "BitwiseOr": lambda s, a, b: arith.ori(a, b),
    "BitwiseXor": lambda s, a, b: arith.xori(a, b),
    "BitShiftLeft": _shift(left=True),
    "BitShiftRight": _shift(left=False),
}


@lowers(*BINARY)
def _binary(lw: Lowering):
    fn = BINARY[lw.name]
    return elementwise(lw, lw.operands, fn)


def _sigmoid(s, x):
    one = s.const(1.0)
    return arith.divf(one, arith.addf(one, math.exp(arith.negf(x))))


def _gelu_tanh(s, x):
    """0.5 x (1 + tanh(u)) computed as x / (1 + exp(-2u)) (the same
    function): one exp and one division, and no cancellation in 1 + tanh(u)
    for large negative u. exp(-2u) overflowing to inf gives -0, the limit."""
    c = s.const(-2.0 * pymath.sqrt(2.0 / pymath.pi))
    x3 = arith.mulf(arith.mulf(x, x), x)
    minus_2u = arith.mulf(c, arith.addf(x, arith.mulf(s.const(0.044715), x3)))
    return arith.divf(x, arith.addf(s.const(1.0), math.exp(minus_2u)))


def _gelu_erf(s, x):
    e = math.erf(arith.mulf(x, s.const(1.0 / pymath.sqrt(2.0))))
    return arith.mulf(arith.mulf(s.const(0.5), x), arith.addf(s.const(1.0), e))


def _sign(s, x):
    if s.is_float:  # sign(0) = 0 (keeps -0.0), sign(NaN) = NaN
        neg = arith.select(s.cmp("lt", x, s.const(0)), s.const(-1.0), x)
        return arith.select(s.cmp("gt", x, s.const(0)), s.const(1.0), neg)
    pos = bool_to(s.ty, s.cmp("gt", x, s.const(0)))
    if s.unsigned:
        return pos
    return arith.subi(pos, bool_to(s.ty, s.cmp("lt", x, s.const(0))))


def _abs(s, x):
    if s.is_float:
        return math.absf(x)
    return x if s.unsigned else math.absi(x)


def _float_only(fn):
    """Math that is the identity on integers (floor/ceil/round)."""
    return lambda s, x: fn(x) if s.is_float else x


UNARY = {
    "Neg": lambda s, x: s.neg(x),
    "Sqr": lambda s, x: s.mul(x, x),
    "Sqrt": lambda s, x: math.sqrt(x),
    "Rsqrt": lambda s, x: math.rsqrt(x),
    "Recip": lambda s, x: s.div(s.const(1), x),
    "Abs": _abs,
    "Exp": lambda s, x: math.exp(x),
    "Log": lambda s, x: math.log(x),
    "Sin": lambda s, x: math.sin(x),
    "Cos": lambda s, x: math.cos(x),
    "Tanh": lambda s, x: math.tanh(x),
    "Erf": lambda s, x: math.erf(x),
    "Sigmoid": _sigmoid,
    "Silu": lambda s, x: arith.mulf(x, _sigmoid(s, x)),
    "Gelu": _gelu_tanh,
    "GeluErf": _gelu_erf,
    "Relu": lambda s, x: s.max(x, s.const(0)),
    "Step": lambda s, x: arith.select(s.cmp("gt", x, s.const(0)), s.const(1), s.const(0)),
    "Floor": _float_only(math.floor),
    "Ceil": _float_only(math.ceil),
    "Round": _float_only(math.roundeven),
    "Sign": _sign,
    "Atan": lambda s, x: math.atan(x),   # libm atanf/atan on cpu, libdevice on cuda
    "Asin": lambda s, x: math.asin(x),
    "Acos": lambda s, x: math.acos(x),
    "BitwiseNot": lambda s, x: arith.xori(x, s.const(-1)),
}


@lowers(*UNARY)
def _unary(lw: Lowering):
    return elementwise(lw, lw.operands, UNARY[lw.name])


def _powi(s: Scalar, x, n: int):
    """x**n by repeated squaring; negative n is 1/x**|n| (floats)."""
    result, base, k = None, x, abs(n)
    while k:
        if k & 1:
            result = base if result is None else s.mul(result, base)
        k >>= 1
        if k:
            base = s.mul(base, base)
    if result is None:
        result = s.const(1)
    return s.div(s.const(1), result) if n < 0 else result


@lowers("AddScalar", "MulScalar", "PowI", "Clamp")
def _scalar_param(lw: Lowering):
    name = lw.name
    if name == "AddScalar":
        c = lw.param("value")
        return elementwise(lw, lw.operands, lambda s, x: s.add(x, s.const(c)))
    if name == "MulScalar":
        c = lw.param("value")
        return elementwise(lw, lw.operands, lambda s, x: s.mul(x, s.const(c)))
    if name == "PowI":
        n = int(lw.param("n"))
        return elementwise(lw, lw.operands, lambda s, x: _powi(s, x, n))
    lo, hi = lw.param("min"), lw.param("max")
    return elementwise(lw, lw.operands,
                       lambda s, x: s.min(s.max(x, s.saturated_const(lo)), s.saturated_const(hi)))


COMPARE = {"Equal": "eq", "Ne": "ne", "Lt": "lt", "Le": "le", "Gt": "gt", "Ge": "ge",
           "NotEqual": "ne", "Less": "lt", "LessEqual": "le", "Greater": "gt",
           "GreaterEqual": "ge"}


@lowers(*COMPARE)
def _compare(lw: Lowering):
    pred = COMPARE[lw.name]
    elt = lw.out_elt
    return elementwise(lw, lw.operands, lambda s, a, b: bool_to(elt, s.cmp(pred, a, b)))


@lowers("Where")
def _where(lw: Lowering):
    cond, a, b = lw.operands
    return elementwise(lw, [cond, a, b], lambda s, c, x, y: arith.select(nonzero(c), x, y),
                       dtype=lw.in_dtypes[1], widen=[False, True, True])


@lowers("MaskedFill")
def _masked_fill(lw: Lowering):
    x, mask = lw.operands
    v = lw.param("value")
    return elementwise(lw, [x, mask], lambda s, a, m: arith.select(nonzero(m), s.const(v), a),
                       widen=[True, False])


def convert_scalar(x: "ir.Value", src, dst, dst_ty: "ir.Type") -> "ir.Value":
    """Convert a scalar of fuel dtype ``src`` (signless MLIR type) to ``dst``."""
    src_f, dst_f = src in FLOAT_DTYPES, dst in FLOAT_DTYPES
    src_u = src.is_unsigned_int
    dst_u = dst.is_unsigned_int
    if src_f and dst_f:
        sw, dw = ir.FloatType(x.type).width, ir.FloatType(dst_ty).width
        if x.type == dst_ty:
            return x
        if sw == dw:  # bf16 <-> f16: through f32
            x = arith.extf(ir.F32Type.get(), x)
            sw = 32
        if sw == 64 and dw == 16:  # no __truncdf{hf,bf}2 libcall in-process: via f32
            # f16: rounded to odd first, so the result is correctly rounded (the
            # reference's f64 -> f16); bf16: the reference's f64 -> f32 -> bf16.
            x = _f64_to_f32_round_to_odd(x) if dst == dst.F16 else arith.truncf(ir.F32Type.get(), x)
            sw = 32
        return arith.extf(dst_ty, x) if dw > sw else arith.truncf(dst_ty, x)
    if src_f:  # float -> int: truncate, saturate, NaN -> 0 (the reference rule)
        return _float_to_int_sat(x, dst, dst_ty)
    if dst_f:  # int -> float
        return arith.uitofp(dst_ty, x) if src_u else arith.sitofp(dst_ty, x)
    sw, dw = ir.IntegerType(x.type).width, ir.IntegerType(dst_ty).width
    if sw == dw:
        return x
    if dw < sw:
        return arith.trunci(dst_ty, x)
    return arith.extui(dst_ty, x) if src_u else arith.extsi(dst_ty, x)


def _f64_to_f32_round_to_odd(x):
    """f64 -> f32 rounded to odd (truncate toward zero, then set the last
    bit if inexact): a second rounding to a type of <= 22 mantissa bits
    (f16) then gives the correctly rounded result, without the
    ``__truncdfhf2`` libcall a direct ``truncf`` needs. (bf16 keeps the
    reference's documented f64 -> f32 -> bf16 double rounding.)"""
    f32, i32 = ir.F32Type.get(), ir.IntegerType.get_signless(32)
    t = arith.truncf(f32, x)
    back = arith.extf(x.type, t)
    inexact = arith.cmpf(arith.CmpFPredicate.ONE, back, x)  # false on NaN
    away = arith.cmpf(arith.CmpFPredicate.OGT, math.absf(back), math.absf(x))
    bits = arith.bitcast(i32, t)
    one = arith.constant(i32, 1)
    toward_zero = arith.select(away, arith.subi(bits, one), bits)
    odd = arith.bitcast(f32, arith.ori(toward_zero, one))
    return arith.select(inexact, odd, t)


def _float_to_int_sat(x, dst, dst_ty):
    s = Scalar(dst, dst_ty)
    hi_v, lo_v = (2 ** (dst.itemsize * 8) - 1, 0) if s.unsigned else (
        2 ** (dst.itemsize * 8 - 1) - 1, -(2 ** (dst.itemsize * 8 - 1)))
    f = Scalar(src_dtype_of(x), x.type)
    high = f.cmp("ge", x, f.const(float(hi_v)))
    low = f.cmp("le", x, f.const(float(lo_v)))
    nan = arith.cmpf(arith.CmpFPredicate.UNO, x, x)
    mid = arith.select(arith.ori(arith.ori(high, low), nan), f.const(0.0), x)
    r = arith.fptoui(dst_ty, mid) if s.unsigned else arith.fptosi(dst_ty, mid)
    r = arith.select(high, s.const(hi_v), r)
    return arith.select(low, s.const(lo_v), r)


def src_dtype_of(x) -> "DType":
    from compiler.dialect.types import mlir_to_dtype
    return mlir_to_dtype(x.type)


@lowers("Cast")
def _cast(lw: Lowering):
    src, dst = lw.in_dtypes[0], lw.out_dtype
    elt = lw.out_elt
    return elementwise(lw, lw.operands, lambda s, x: convert_scalar(x, src, dst, elt),
                       widen=[False])
