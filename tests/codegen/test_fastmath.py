"""compiler.codegen.cpu.fastmath: the polynomial exp/tanh/log/erf run through the real CPU
pipeline, measured in ulp against float64 numpy rounded to f32 (the correctly
rounded result up to double rounding) over every f32 binade, dense windows
and the edge cases; and the kernels vectorize (no libm call left)."""
import math
import re

import numpy as np
import pytest

from compiler.codegen.cpu import fastmath
from compiler.codegen.cpu import compile_module, lower
from compiler.codegen.kernels import precision_for
from compiler.codegen.memref import descriptor_from_array as D
from compiler.codegen.cpu.strategy import LOOPS
from compiler.mlir import ir
from runtime.dtype import DType
from runtime.opkind import OpKind
from compiler.targets import parse_target

UNARY = """
func.func @f(%x: tensor<?xT>) -> tensor<?xT> {
  %c0 = arith.constant 0 : index
  %d = tensor.dim %x, %c0 : tensor<?xT>
  %e = tensor.empty(%d) : tensor<?xT>
  %y = linalg.generic {indexing_maps = [affine_map<(d0)->(d0)>, affine_map<(d0)->(d0)>],
                       iterator_types = ["parallel"]} ins(%x : tensor<?xT>) outs(%e : tensor<?xT>) {
  ^bb0(%a: T, %o: T):
    %r = math.OP %a : T
    linalg.yield %r : T
  } -> tensor<?xT>
  return %y : tensor<?xT>
}
"""
_erf64 = np.frompyfunc(math.erf, 1, 1)
REF = {"exp": np.exp, "tanh": np.tanh, "log": np.log,
       "erf": lambda x: _erf64(x).astype(np.float64)}
LIBM = {"exp": "expf", "tanh": "tanhf", "log": "logf", "erf": "erff"}
OPS = ["exp", "tanh", "log", "erf"]
F32_MIN_NORMAL = np.float32(1.1754944e-38)


def _text(op, ty="f32"):
    return UNARY.replace("OP", op).replace("T", ty)


_KERNELS = {}


def _run(op, x, ty="f32"):
    if (op, ty) not in _KERNELS:
        _KERNELS[op, ty] = compile_module(_text(op, ty), ["f"], cache=None)
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    _KERNELS[op, ty].ciface("f", 2)(D(x), D(y))
    return y


def _ordered(a):
    """f32 bit patterns as integers monotone in the value (+0 and -0 both 0)."""
    i = a.view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def _ulp(y, x, op):
    """Integer ulp distance of f32 ``y`` from op(x) in float64 rounded to f32;
    a NaN mismatch counts as 2**40."""
    with np.errstate(all="ignore"):
        ref = REF[op](x.astype(np.float64)).astype(np.float32)
    d = np.abs(_ordered(y) - _ordered(ref))
    yn, rn = np.isnan(y), np.isnan(ref)
    d[yn & rn] = 0
    d[yn != rn] = 1 << 40
    return d


def _sweep(op):
    # Every 4099th f32 bit pattern (all binades, both signs, denormals, inf, NaN)
    # plus dense windows where the expansions switch or lose bits.
    bits = np.arange(0, 1 << 32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    windows = {
        "exp": [np.linspace(-104.5, 89.5, 400_001, dtype=np.float32),
                np.linspace(-1e-3, 1e-3, 100_001, dtype=np.float32),
                np.linspace(-0.5, 0.5, 100_001, dtype=np.float32)],
        "tanh": [np.linspace(-12, 12, 400_001, dtype=np.float32),
                 np.linspace(0.6, 0.65, 100_001, dtype=np.float32),
                 np.linspace(-1e-3, 1e-3, 100_001, dtype=np.float32)],
        "log": [np.linspace(0.5, 2.0, 400_001, dtype=np.float32),
                np.linspace(0.7, 0.72, 100_001, dtype=np.float32),
                np.linspace(1e-45, 2.4e-38, 100_001, dtype=np.float32)],
        "erf": [np.linspace(-4.5, 4.5, 400_001, dtype=np.float32),
                np.linspace(0.99, 1.01, 100_001, dtype=np.float32),   # the switch at |x| = 1
                np.linspace(-1.01, -0.99, 100_001, dtype=np.float32),
                np.linspace(3.8, 4.2, 100_001, dtype=np.float32),     # rounding to 1, the clamp
                np.linspace(-1e-3, 1e-3, 100_001, dtype=np.float32)],
    }[op]
    return np.concatenate([bits, *windows])


@pytest.mark.parametrize("op", OPS)
def test_ulp_sweep_within_stated_bound(op):
    x = _sweep(op)
    d = _ulp(_run(op, x), x, op)
    worst = int(np.argmax(d))
    assert d[worst] <= fastmath.MAX_ULP[op], (
        f"{op}({x[worst]!r}) is {d[worst]} ulp off; fastmath.MAX_ULP says {fastmath.MAX_ULP[op]}")


EDGES = {
    "exp": [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0,
            88.72283, 88.72284, 88.7229, 89.0, 100.0, 3e38,
            -87.33654, -87.33655, -100.0, -103.27893, -103.97208, -103.972084, -104.0,
            -200.0, -3e38, 1e-45, -1e-45, F32_MIN_NORMAL],
    "tanh": [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, F32_MIN_NORMAL, 1e-20,
             0.625, -0.625, 0.62499994, 8.0, 9.01, 10.0, 44.4, 50.0, -50.0, 3e38, -3e38],
    "log": [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, 2e-45, F32_MIN_NORMAL,
            1.1754942e-38, 3.4028235e38, 0.70710677, 0.7071068, 2.0, 0.5, 1.0000001,
            0.99999994],
    "erf": [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, F32_MIN_NORMAL, 1e-20, 3.9,
            3.99, 4.0, 4.01, -4.0, 10.0, 3e38, -3e38, 1.0, -1.0, 0.99999994, -0.99999994,
            1.0000001, 3.832, 3.833],
}


@pytest.mark.parametrize("op", OPS)
def test_edge_cases(op):
    x = np.array(EDGES[op], dtype=np.float32)
    y = _run(op, x)
    assert (_ulp(y, x, op) <= fastmath.MAX_ULP[op]).all(), list(zip(x, y))
    with np.errstate(all="ignore"):
        ref = REF[op](x.astype(np.float64)).astype(np.float32)
    # Exact specials: inf/0/NaN where the reference has them, signs of zero kept.
    special = ~np.isfinite(ref) | (ref == 0) | (np.abs(ref) == 1)
    np.testing.assert_array_equal(y[special], ref[special])
    signed = special & ~np.isnan(ref)  # a NaN's sign bit carries nothing
    assert (np.signbit(y[signed]) == np.signbit(ref[signed])).all()
    if op == "log":
        assert _run(op, np.array([1.0], np.float32))[0] == 0.0
    if op == "tanh":  # tiny x: tanh(x) == x exactly, sign included
        tiny = np.array([1e-45, -1e-45, 1e-30, -0.0], np.float32)
        np.testing.assert_array_equal(_run(op, tiny), tiny)
        assert np.signbit(_run(op, tiny)[3])


# The vector width is the target's, never the host's: AVX2 has 256-bit
# registers (8 floats), AVX-512 512-bit (16 floats: AVX-512 targets do not
# prefer 256-bit vectors).
_WIDTH = {"cpu:x86-64-v3": 8, "cpu:x86-64-v4": 16}


@pytest.mark.parametrize("target", sorted(_WIDTH))
@pytest.mark.parametrize("op", OPS)
def test_kernel_is_a_vector_loop_without_libm_call(op, target):
    ll = lower(_text(op), ["f"], target=target).llvm_ir
    vector = rf"<{_WIDTH[target]} x float>"
    assert re.search(vector, ll), f"no {vector} vectors in the {target} kernel"
    assert " double" not in ll, "every op in f32"  # erf once ran in f64 (half the lanes)
    assert "@llvm.fma.v" in ll
    assert f"@{LIBM[op]}(" not in ll and f"@llvm.{op}." not in ll
    # The libm path is what the option turns off: the check above can fail.
    import dataclasses
    plain = lower(_text(op), ["f"], target=target,
                  strategy=dataclasses.replace(LOOPS, approximate_math=False))
    # (exp/log stay scalar llvm.exp.f32 / llvm.log.f32 intrinsics: expf/logf at isel)
    assert f"@{LIBM[op]}(" in plain.llvm_ir or f"@llvm.{op}.f32(" in plain.llvm_ir


def test_f16_computes_in_f32_and_rounds_once(rng):
    x = np.concatenate([rng.uniform(-11, 11, 20_000),
                        [0, -0.0, np.inf, -np.inf, np.nan, 11.1, -17.4]]).astype(np.float16)
    for op in ("exp", "tanh"):
        y = _run(op, x, "f16")
        with np.errstate(all="ignore"):
            ref = REF[op](x.astype(np.float64)).astype(np.float16)
        i = lambda a: a.view(np.int16).astype(np.int64)  # same sign here: distance in f16 ulp
        same_nan = np.isnan(y) & np.isnan(ref)
        assert (np.isnan(y) == np.isnan(ref)).all()
        assert (np.abs(i(y) - i(ref))[~same_nan] <= 1).all(), op


def test_f64_and_other_ops_are_left_to_libm():
    with ir.Context():
        m = ir.Module.parse(_text("exp", "f64"))
        assert fastmath.expand_math(m) == {}
        assert "math.exp" in str(m)
        m = ir.Module.parse(_text("exp"))
        assert fastmath.expand_math(m) == {"math.exp": 1}
        assert "math.exp" not in str(m) and "math.fma" in str(m)


def test_strategy_fingerprint_covers_the_expansion():
    import dataclasses
    assert LOOPS.approximate_math
    assert dataclasses.replace(LOOPS, approximate_math=False).fingerprint != LOOPS.fingerprint


def test_precision_claim_quotes_the_measured_bound():
    for kind, op in ((OpKind.ExpElementwise, "exp"), (OpKind.TanhElementwise, "tanh"),
                     (OpKind.LogElementwise, "log"), (OpKind.ErfElementwise, "erf")):
        for t in (DType.F32, DType.F16, DType.BF16):
            p = precision_for(kind, (t, t), parse_target("cpu"))
            assert p.max_ulp == fastmath.MAX_ULP[op] and p.bit_stable_on_same_hardware
        assert precision_for(kind, (DType.F64, DType.F64), parse_target("cpu")).max_ulp is None
