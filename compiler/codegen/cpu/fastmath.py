"""Branch-free polynomial expansions of f32 transcendentals, so LLVM vectorizes them.

LLVM lowers ``math.exp`` / ``math.tanh`` / ``math.log`` on f32 to scalar libm calls
(``expf``, ...), which stops the loop vectorizer. MLIR's own polynomial
approximation patterns are not reachable from this build's bindings (no
``math-polynomial-approximation`` pass, no ``transform.apply_patterns.math.*``
op; ``math-expand-ops`` only rewrites tanh via ``1 - exp``, which loses accuracy
near 0). So ``expand_math(module)`` rewrites them here, at the linalg level,
into arith/math ops that LLVM has vector instructions for (fma, roundeven,
integer shifts on the exponent bits, selects):

* ``exp``   Cody–Waite reduction x = k·ln2 + r (|r| <= ln2/2, ln2 split hi/lo,
            fma; k rounded by the 1.5·2^23 shifter, whose bits give k without a
            float→int conversion), Cephes' degree-7 ``expf`` polynomial, 2^k
            built from exponent bits in two halves (so k = 128 overflows to
            +inf and k < -126 gives correctly scaled denormals); x clamped to
            [-104, 89] first: +inf above, 0 below; NaN propagates through the
            arithmetic (no selects). About 21 vector ops per vector.
* ``tanh``  |x| < 0.625: Cephes' odd ``tanhf`` polynomial; else
            1 - 2/(exp(2|x|) + 1) with the exp above (1 for large |x|);
            copysign(., x) keeps -0 and the sign.
* ``log``   x = m·2^e (denormals scaled by 2^23 first), m in [sqrt(1/2),
            sqrt(2)), Cephes' ``logf`` polynomial, e·ln2 added in two parts;
            log(0) = -inf, log(x<0) = NaN, log(+inf) = +inf.
* ``erf``   |x| < 1: x + x·P(x²) (P of degree 6); else ±(1 − E(|x| − 2.5))
            with |x| clamped to 4 (erf rounds to ±1 beyond) and E a degree-14
            polynomial for erfc on [1, 4] (absolute error 1e-8, so 1 − E is
            within an ulp), E by second-order Horner (``_B.poly2``: two
            chains of 8 and 7 FMAs in (|x| − 2.5)²; one chain of 14 made
            the AVX2 kernel wait on FMA latency: 0.89 -> 0.65 ns per element
            on one znver4 core, AVX-512 0.43 either way); all in f32, coefficients fitted here (weighted
            near-minimax by Lawson's iteration, f32-rounded, checked over
            every input). About 30 vector ops per vector: 27% faster than the
            f64 rational it replaced with AVX-512 code (16 lanes instead of
            8, no division), as fast with AVX2 code (its 16 registers cannot
            hold the 22 coefficients).

f16/bf16 operands are widened to f32, expanded and rounded back. f64 is left
to LLVM / libm (scalar calls).

``MAX_ULP`` is the measured bound of each expansion: the ulp distance from the
float64 result (numpy / math.erf) rounded to f32, over ALL 2^32 f32 inputs
(AVX2+FMA host, 2026-11): exp, tanh, log max 1 (0.4%, 0.17%, 0.3% of inputs at
1); re-measured over all 2^32 inputs for fastmath-3 (AVX-512 host, 2026-12):
exp 1 (0.40%), tanh 1 (0.17%); erf (fastmath-4, AVX-512 and AVX2 code):
max 1 (0.76% of inputs at 1, the same results from both); fastmath-5 (E by
second-order Horner) over every f32 with 1 <= |x| <= 4 (the inputs it changed;
beyond, the clamp): max 1, 11.5% of them at 1 (Horner 11.0%), both ISAs.
``tests/codegen/test_fastmath.py`` re-checks it on a strided sweep of every binade, dense windows and the edge cases; the mlir-cpu
precision claims quote it. Bump ``VERSION`` when generated code changes (it is part of
the strategy fingerprint, so cached kernels are rebuilt).
"""
from __future__ import annotations

from typing import Callable

from compiler.errors import CodegenError
from compiler.codegen.common.stages import EXP_NONPOSITIVE_ATTR
from compiler.mlir import arith, ir, math

VERSION = "fastmath-5"  # fastmath-4: erf in f32; 5: its erfc polynomial by second-order Horner

#: measured max ulp error vs float64 numpy rounded to f32 (see module docstring).
MAX_ULP = {"exp": 1, "tanh": 1, "log": 1, "erf": 1}

_LOG2E = 1.44269504088896341
_LN2_HI = 0.693359375        # exact in f32 with few bits: k·LN2_HI is exact for |k| < 2^12
_LN2_LO = -2.12194440e-4     # ln2 - LN2_HI
_SHIFTER = 12582912.0        # 1.5 * 2^23: x + _SHIFTER rounds x to an integer in the low bits
_SHIFTER_BITS = 0x4B400000   # its f32 bit pattern
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
          1.6666665459e-1, 5.0000001201e-1)
_TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
           -3.33332819422e-1)
# erf, highest power first: |x| < 1: erf(x) = x + x·P(x²) (P ≈ erf(x)/x − 1);
# 1 <= |x| <= 4: erfc(|x|) = E(|x| − 2.5). Fitted to scipy.special.erf/erfc.
_ERF_P = (7.853980787331238e-05, -0.0008010232704691589, 0.005188332870602608,
          -0.026853814721107483, 0.1128358542919159, -0.3761262595653534, 0.12837916612625122)
_ERFC_E = (-8.961345088209782e-07, -5.093359050079016e-07, 1.5767986042192206e-05,
           -1.7681712051853538e-05, -8.125658496282995e-05, 0.0002703980717342347,
           -0.00025848078075796366, -0.0005600642180070281, 0.002797348890453577,
           -0.006109302863478661, 0.008622685447335243, -0.00835171528160572,
           0.005445676390081644, -0.002178188879042864, 0.0004069526621606201)
_LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
          1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
          3.3333331174e-1)


class _B:
    """Builds f32 (scalar or vector of f32) arith at the current insertion point."""

    def __init__(self, ty: "ir.Type"):
        self.f = ty
        if isinstance(ty, ir.VectorType):
            self.i = ir.VectorType.get(ty.shape, ir.IntegerType.get_signless(32))
            self.b = ir.VectorType.get(ty.shape, ir.IntegerType.get_signless(1))
        else:
            self.i = ir.IntegerType.get_signless(32)
            self.b = ir.IntegerType.get_signless(1)

    def _splat(self, ty, attr):
        if isinstance(ty, ir.VectorType):
            attr = ir.DenseElementsAttr.get_splat(ty, attr)
        return arith.constant(ty, attr)

    def c(self, v: float):
        elt = ir.VectorType(self.f).element_type if isinstance(self.f, ir.VectorType) else self.f
        return self._splat(self.f, ir.FloatAttr.get(elt, v))

    def ci(self, v: int):
        return self._splat(self.i, ir.IntegerAttr.get(ir.IntegerType.get_signless(32), v))

    def cf_bits(self, bits: int):
        return arith.bitcast(self.f, self.ci(bits))

    def cmp(self, pred: str, a, b):
        return arith.cmpf(getattr(arith.CmpFPredicate, pred), a, b)

    def poly(self, x, coeffs):
        """Horner with fma: ((c0·x + c1)·x + c2)... ."""
        y = self.c(coeffs[0])
        for cf in coeffs[1:]:
            y = math.fma(y, x, self.c(cf))
        return y

    def poly2(self, x, coeffs):
        """``poly`` by second-order Horner: E(x²) + x·O(x²), its even and
        odd powers as two chains of half the length (a degree-14 Horner chain
        is 14 dependent FMAs: the GELU kernel waited on their latency)."""
        even, odd = coeffs[len(coeffs) - 1::-2][::-1], coeffs[len(coeffs) - 2::-2][::-1]
        x2 = arith.mulf(x, x)
        return math.fma(self.poly(x2, odd), x, self.poly(x2, even))


def _exp_reduced(b: _B, xc):
    """``(e^r, t)`` for a clamped ``xc`` = k·ln2 + r: t holds k in its low
    mantissa bits (the shifter), e^r by the polynomial; exp(xc) = e^r · 2^k."""
    t = math.fma(xc, b.c(_LOG2E), b.c(_SHIFTER))
    kf = arith.subf(t, b.c(_SHIFTER))
    r = math.fma(arith.negf(kf), b.c(_LN2_HI), xc)
    r = math.fma(arith.negf(kf), b.c(_LN2_LO), r)
    r2 = arith.mulf(r, r)
    p = math.fma(b.poly(r, _EXP_P), r2, r)          # e^r - 1
    return arith.addf(p, b.c(1.0)), t


def _exp_f32(b: _B, x):
    # Clamp with ordered compares: a NaN passes through, and then through
    # every float op below, so the result is NaN with no select.
    xc = arith.select(b.cmp("OGT", x, b.c(89.0)), b.c(89.0), x)
    xc = arith.select(b.cmp("OLT", xc, b.c(-104.0)), b.c(-104.0), xc)
    # k = round(x·log2e) by the 1.5·2^23 shifter: t's ulp is 1, so t holds k
    # in its low mantissa bits (|k| <= 150), read back by integer ops (defined
    # for any bits, NaN's too, unlike fptosi).
    p, t = _exp_reduced(b, xc)
    # 2^k in two halves (k = 128 overflows to +inf, k < -126 scales into the
    # denormals with one rounding): with m = k + 254, h = m >> 1,
    # 2^k = 2^(h - 127) · 2^(m - h - 127), both factors normal.
    m = arith.subi(arith.bitcast(b.i, t), b.ci(_SHIFTER_BITS - 254))
    h = arith.shrsi(m, b.ci(1))
    s1 = arith.bitcast(b.f, arith.shli(h, b.ci(23)))
    s2 = arith.bitcast(b.f, arith.shli(arith.subi(m, h), b.ci(23)))
    return arith.mulf(arith.mulf(p, s1), s2)


def _exp_nonpositive_f32(b: _B, x):
    # exp of x <= 0 (a math.exp marked EXP_NONPOSITIVE_ATTR): _exp_f32's
    # reduction and polynomial, so the same bits wherever exp(x) is a normal
    # float, less what x <= 0 does not need: no upper clamp, 2^k in one step,
    # x clamped at -88 where k = -127 and 2^k's bits are 0 (below x = -87.68
    # the result is 0 where _exp_f32 gives denormals down to x = -103.3).
    # NaN passes.
    lo = b.c(-88.0)
    p, t = _exp_reduced(b, arith.select(b.cmp("OLT", x, lo), lo, x))
    e = arith.shli(arith.subi(arith.bitcast(b.i, t), b.ci(_SHIFTER_BITS - 127)), b.ci(23))
    return arith.mulf(p, arith.bitcast(b.f, e))               # p·2^k


def _tanh_f32(b: _B, x):
    ax = math.absf(x)
    s = arith.mulf(ax, ax)
    small = math.fma(arith.mulf(b.poly(s, _TANH_P), s), ax, ax)
    e = _exp_f32(b, arith.addf(ax, ax))
    large = arith.subf(b.c(1.0), arith.divf(b.c(2.0), arith.addf(e, b.c(1.0))))
    y = arith.select(b.cmp("OLT", ax, b.c(0.625)), small, large)
    return math.copysign(y, x)


def _log_f32(b: _B, x):
    tiny = b.cmp("OLT", x, b.cf_bits(0x00800000))   # denormal (or <= 0): scale up
    xs = arith.select(tiny, arith.mulf(x, b.c(8388608.0)), x)
    bits = arith.bitcast(b.i, xs)
    e = arith.subi(arith.shrsi(bits, b.ci(23)), b.ci(126))
    e = arith.select(tiny, arith.subi(e, b.ci(23)), e)
    m = arith.bitcast(b.f, arith.ori(arith.andi(bits, b.ci(0x007FFFFF)), b.ci(0x3F000000)))
    low = b.cmp("OLT", m, b.c(0.707106781186547524))  # m in [0.5, 1): fold to [sqrt(1/2), sqrt(2))
    e = arith.select(low, arith.subi(e, b.ci(1)), e)
    f = arith.subf(arith.select(low, arith.addf(m, m), m), b.c(1.0))
    fe = arith.sitofp(b.f, e)
    z = arith.mulf(f, f)
    y = arith.mulf(arith.mulf(b.poly(f, _LOG_P), f), z)
    y = math.fma(fe, b.c(_LN2_LO), y)
    y = math.fma(z, b.c(-0.5), y)
    y = arith.addf(f, y)
    y = math.fma(fe, b.c(_LN2_HI), y)
    # Specials: NaN and x < 0 → NaN, 0 → -inf, +inf → +inf.
    y = arith.select(b.cmp("OEQ", x, b.c(0.0)), b.cf_bits(0xFF800000), y)
    y = arith.select(b.cmp("OEQ", x, b.cf_bits(0x7F800000)), x, y)
    return arith.select(b.cmp("ULT", x, b.c(0.0)), b.cf_bits(0x7FC00000), y)


def _erf_f32(b: _B, x):
    ax = math.absf(x)
    small = math.fma(x, b.poly(arith.mulf(x, x), _ERF_P), x)         # keeps -0 and tiny x
    t = arith.select(b.cmp("OGT", ax, b.c(4.0)), b.c(4.0), ax)          # NaN passes through
    large = math.copysign(arith.subf(b.c(1.0), b.poly2(arith.subf(t, b.c(2.5)), _ERFC_E)), x)
    return arith.select(b.cmp("OLT", ax, b.c(1.0)), small, large)


EXPANSIONS: dict[str, Callable] = {"math.exp": _exp_f32, "math.tanh": _tanh_f32,
                                   "math.log": _log_f32, "math.erf": _erf_f32}
_NARROW = ("f16", "bf16")


def _element(t: "ir.Type") -> str:
    return str(ir.VectorType(t).element_type) if isinstance(t, ir.VectorType) else str(t)


def expand_math(module: "ir.Module") -> dict[str, int]:
    """Replace every f32/f16/bf16 (scalar or vector) ``math.exp``, ``math.tanh``,
    ``math.log`` and ``math.erf`` in ``module`` by its branch-free expansion (module
    docstring); f64 and other math ops are kept. A ``math.exp`` marked
    ``EXP_NONPOSITIVE_ATTR`` (its operand never above 0) takes the shorter
    expansion for x <= 0. Returns the count per op name.
    Raises CodegenError if an op to expand does not have exactly one operand."""
    todo = []

    def visit(op):
        if op.name in EXPANSIONS and _element(op.results[0].type) in ("f32", *_NARROW):
            todo.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    counts: dict[str, int] = {}
    with module.context:
        f32 = ir.F32Type.get()
        for op in todo:
            if len(op.operands) != 1:
                raise CodegenError(f"fastmath: {op.name} has {len(op.operands)} operands, "
                                   "expected 1")
            ty = op.results[0].type
            with ir.InsertionPoint(op), op.location:
                x = op.operands[0]
                narrow = _element(ty) in _NARROW
                cty = (ir.VectorType.get(ir.VectorType(ty).shape, f32)
                       if isinstance(ty, ir.VectorType) else f32) if narrow else ty
                if narrow:
                    x = arith.extf(cty, x)
                expand = EXPANSIONS[op.name]
                if op.name == "math.exp" and EXP_NONPOSITIVE_ATTR in op.attributes:
                    expand = _exp_nonpositive_f32
                y = expand(_B(cty), x)
                if narrow:
                    y = arith.truncf(ty, y)
            name = op.name
            op.results[0].replace_all_uses_with(y)
            op.erase()
            counts[name] = counts.get(name, 0) + 1
    return counts


__all__ = ["expand_math", "EXPANSIONS", "MAX_ULP", "VERSION"]
