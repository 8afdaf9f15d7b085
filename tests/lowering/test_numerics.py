"""fuel-to-linalg numerics: every supported primitive op, lowered, bufferized
and run with MLIR's ExecutionEngine, against the op table's numpy reference.
f32 everywhere, plus integer (i32 / u8 / i8) and f16/bf16 cases."""
import numpy as np
import pytest

from compiler.codegen.lowering import RULES
from compiler.graph.ops import OP_TABLE
from runtime.dtype import DType, f32_to_bf16

from .jit import reference, run_op

R = np.random.default_rng(7)


def f32(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, shape).astype(np.float32)


def ints(dtype, *shape, lo=-50, hi=50):
    return R.integers(lo, hi, shape).astype(dtype)


def u32(*vals):
    return np.array(vals, dtype=np.uint32)


A = f32(3, 5)
POS = f32(3, 5, lo=0.1, hi=3.0)
I = ints(np.int32, 3, 5)
J = np.where(ints(np.int32, 3, 5) == 0, 3, ints(np.int32, 3, 5)).astype(np.int32)
U = ints(np.uint8, 3, 5, lo=0, hi=255)
V = ints(np.uint8, 3, 5, lo=0, hi=9)  # includes 0: x / 0 and x % 0 are 0
MASK = (f32(3, 5) > 0).astype(np.uint8)

UNARY_FLOAT = ["Neg", "Sqr", "Abs", "Exp", "Sin", "Cos", "Tanh", "Sigmoid", "Silu", "Gelu",
               "GeluErf", "Relu", "Step", "Erf", "Floor", "Ceil", "Round", "Sign"]
CASES = (
    [(n, [A, f32(3, 5)], {}) for n in ["Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "Rem"]]
    + [("Pow", [POS, A], {})]
    + [(n, [A], {}) for n in UNARY_FLOAT]
    + [(n, [POS], {}) for n in ["Sqrt", "Rsqrt", "Recip", "Log"]]
    + [("AddScalar", [A], {"value": 1.5}), ("MulScalar", [A], {"value": -3.0}),
       ("PowI", [A], {"n": 5}), ("PowI", [POS], {"n": -2}),
       ("Clamp", [A], {"min": -0.5, "max": 0.75})]
    + [(n, [A, np.where(MASK == 1, A, f32(3, 5))], {}) for n in ["Equal", "Ne", "Lt", "Le", "Gt", "Ge"]]
    + [("Where", [MASK, A, f32(3, 5)], {}), ("MaskedFill", [A, MASK], {"value": 9.0})]
    + [(n, [A], {"axis": ax}) for n in ["SumDim", "MaxDim", "MinDim", "MeanDim", "ArgMaxDim",
                                        "ArgMinDim", "CumSum"] for ax in (0, 1)]
    + [(n, [A], {}) for n in ["SumAll", "MaxAll", "MinAll", "MeanAll"]]
    + [("ReduceSumTo", [f32(2, 3, 4)], {"shape": (3, 1)}),
       ("ReduceMaxTo", [f32(2, 3, 4)], {"shape": (2, 1, 4)})]
    + [("MatMul", [f32(3, 4), f32(4, 5)], {}), ("MatMul", [f32(2, 3, 4), f32(2, 4, 5)], {}),
       ("MatMul", [f32(2, 4, 3, 4), f32(2, 2, 4, 5)], {}),   # GQA
       ("MatMul", [f32(2, 3, 4), f32(1, 4, 5)], {})]         # broadcast batch
    + [("Transpose", [f32(2, 3, 4)], {}), ("Permute", [f32(2, 3, 4)], {"perm": (2, 0, 1)}),
       ("Reshape", [A], {"shape": (5, 3)}), ("Reshape", [f32(1, 1)], {"shape": ()}),
       ("BroadcastTo", [f32(3, 1)], {"shape": (2, 3, 4)}),
       ("BroadcastTo", [f32(5)], {"shape": (3, 5)}),
       ("Unsqueeze", [A], {"dim": 2}), ("Squeeze", [f32(3, 1, 2)], {"dim": 1}),
       ("Slice", [A], {"dim": 1, "start": 1, "len": 3}), ("Flip", [A], {"dim": 1}),
       ("Contiguize", [A], {}),
       ("Concat", [A, f32(3, 2), f32(3, 1)], {"dim": 1}), ("Concat", [A, A], {"dim": 0}),
       ("Roll", [A], {"dim": 1, "shift": 2}), ("Roll", [A], {"dim": 0, "shift": -1}),
       ("Triu", [f32(2, 4, 4)], {"diagonal": 1}), ("Tril", [f32(4, 5)], {"diagonal": -1}),
       ("Pad", [A], {"padding": (1, 0, 2, 3), "value": 7.0}),
       ("PadBackward", [A], {"in_shape": (2, 3), "padding": (1, 0, 1, 1)}),
       ("Cast", [f32(3, 5, lo=-300, hi=300)], {"dtype": DType.I8}),
       ("Cast", [f32(3, 5, lo=-10, hi=300)], {"dtype": DType.U8}),
       ("Cast", [A], {"dtype": DType.F64}),
       ("Cast", [U], {"dtype": DType.F32}), ("Cast", [I], {"dtype": DType.I8})]
    + [("IndexSelect", [A, u32(2, 0, 2, 1)], {"dim": 0}),
       ("Gather", [A, np.array([[4, 0], [1, 1]], dtype=np.uint32)], {"dim": 1}),
       ("IndexAdd", [A, u32(1, 1, 4), f32(3, 3)], {"dim": 1}),
       ("ScatterAdd", [A, np.array([[1, 1], [0, 2]], dtype=np.uint32), f32(2, 2)], {"dim": 0}),
       ("Iota", [], {"len": 6})]
    + [("LogSoftmaxLastDim", [A], {}), ("LogSoftmaxLastDimBackward", [f32(3, 5, hi=0.0), A], {})]
)

INT_CASES = (
    [(n, [I, J], {}) for n in ["Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "Rem"]]
    + [(n, [U, V], {}) for n in ["Add", "Sub", "Mul", "Div", "Rem", "Maximum", "Lt", "Ge", "Ne"]]
    + [(n, [I, J], {}) for n in ["Lt", "Le", "Gt", "Ge", "Equal"]]
    + [(n, [I], {}) for n in ["Neg", "Sqr", "Abs", "Relu", "Step", "Sign", "Floor", "Round"]]
    + [("Sign", [U], {}), ("Abs", [U], {}),
       ("AddScalar", [U], {"value": 200.0}), ("MulScalar", [I], {"value": -3.0}),
       ("PowI", [I], {"n": 3}), ("Clamp", [I], {"min": -10.0, "max": 10.0}),
       ("Where", [MASK, I, J], {}), ("MaskedFill", [U, MASK], {"value": 7.0})]
    + [(n, [I], {"axis": 1}) for n in ["SumDim", "MaxDim", "MinDim", "ArgMaxDim", "ArgMinDim",
                                       "CumSum"]]
    + [(n, [U], {"axis": 0}) for n in ["SumDim", "MaxDim", "ArgMinDim"]]
    + [("SumAll", [I], {}), ("MaxAll", [U], {}), ("ReduceSumTo", [I], {"shape": (1, 5)}),
       ("Cast", [I], {"dtype": DType.F32}), ("Cast", [I], {"dtype": DType.U8}),
       ("Cast", [U], {"dtype": DType.I32}), ("Cast", [U], {"dtype": DType.I64}),
       ("Transpose", [I], {}), ("Concat", [U, U[:1]], {"dim": 0}),
       ("Pad", [I], {"padding": (0, 1, 1, 0), "value": -4.0}),
       ("IndexAdd", [I, u32(0, 0), ints(np.int32, 2, 5)], {"dim": 0}),
       ("ScatterAdd", [U, np.array([[2, 2, 0, 1, 1]], dtype=np.uint32),
                       ints(np.uint8, 1, 5, lo=0, hi=9)], {"dim": 0}),
       ("Gather", [I, np.array([[2], [0]], dtype=np.uint32)], {"dim": 0})]
)


E = np.zeros((3, 0), np.float32)  # a zero-extent axis is legal everywhere
ZERO_EXTENT_CASES = [
    ("Concat", [A, E, A], {"dim": 1}), ("Concat", [A, E], {"dim": 1}),
    ("Concat", [E, E], {"dim": 1}), ("Slice", [A], {"dim": 1, "start": 5, "len": 0}),
    ("Slice", [A], {"dim": 1, "start": 2, "len": 0}), ("SumDim", [E], {"axis": 1}),
    ("MatMul", [E, np.zeros((0, 4), np.float32)], {}),  # K = 0: zeros
    ("MatMul", [np.zeros((0, 5), np.float32), f32(5, 3)], {}),
    ("Pad", [E], {"padding": (0, 0, 1, 2), "value": 3.0}), ("CumSum", [E], {"axis": 1}),
    ("Roll", [E], {"dim": 1, "shift": 1}), ("ReduceSumTo", [E], {"shape": (3, 1)}),
    ("IndexSelect", [A, np.zeros((0,), np.uint32)], {"dim": 1}),
]


def _id(case):
    name, ins, params = case
    return f"{name}-" + "x".join(str(a.dtype) for a in ins) + (f"-{params}" if params else "")


def _check(name, ins, params, r, rtol, atol, dtypes=None):
    ref = reference(name, ins, params)
    assert r.shape == ref.shape, (r.shape, ref.shape)
    assert r.dtype == ref.dtype, (r.dtype, ref.dtype)
    if np.issubdtype(ref.dtype, np.integer):
        np.testing.assert_array_equal(r, ref)
    else:
        np.testing.assert_allclose(r.astype(np.float64), ref.astype(np.float64),
                                   rtol=rtol, atol=atol)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_f32_lowering_matches_reference(case):
    name, ins, params = case
    _check(name, ins, params, run_op(name, ins, params), 1e-5, 1e-5)


@pytest.mark.parametrize("case", ZERO_EXTENT_CASES, ids=_id)
def test_zero_extent_operands_lower(case):
    """A zero-sized operand or result: no out-of-bounds slice offsets (MLIR's
    verifier rejects an offset equal to the dim even for an empty slice)."""
    name, ins, params = case
    _check(name, ins, params, run_op(name, ins, params), 1e-6, 1e-6)


@pytest.mark.parametrize("case", INT_CASES, ids=_id)
def test_int_lowering_matches_reference(case):
    name, ins, params = case
    _check(name, ins, params, run_op(name, ins, params), 0, 0)


@pytest.mark.parametrize("name, ins, params", [
    ("Add", [A, f32(3, 5)], {}), ("Exp", [A], {}), ("SumDim", [A], {"axis": 1}),
    ("ArgMaxDim", [A], {"axis": 0}), ("MatMul", [f32(2, 3, 4), f32(2, 4, 5)], {}),
    ("MatMul", [f32(3, 4), f32(4, 5)], {}), ("LogSoftmaxLastDim", [A], {}),
    ("Lt", [U, V], {}), ("Cast", [A], {"dtype": DType.I32}), ("MeanAll", [A], {}),
])
def test_dynamic_shape_kernels_match_reference(name, ins, params):
    _check(name, ins, params, run_op(name, ins, params, dynamic=True), 1e-5, 1e-5)


@pytest.mark.parametrize("name, params", [
    ("Add", {}), ("Exp", {}), ("Gelu", {}), ("SumDim", {"axis": 1}), ("MaxDim", {"axis": 0}),
    ("MeanAll", {}), ("LogSoftmaxLastDim", {}), ("Cast", {"dtype": DType.F32}),
])
def test_f16_computes_in_f32(name, params):
    ins = [A.astype(np.float16)] + ([f32(3, 5).astype(np.float16)] if name == "Add" else [])
    _check(name, ins, params, run_op(name, ins, params), 2e-3, 2e-3)


def test_bf16_matmul_and_mixed_f32_bf16():
    a, b = f32(2, 3), f32(3, 4)
    a16, b16 = f32_to_bf16(a), f32_to_bf16(b)
    r = run_op("MatMul", [a16, b16], dtypes=[DType.BF16, DType.BF16])
    _check("MatMul", [a16, b16], {}, r, 1e-2, 1e-2)
    r = run_op("MatMul", [a, b16], dtypes=[DType.F32, DType.BF16])
    np.testing.assert_allclose(r, reference("MatMul", [a, b16]), rtol=1e-5, atol=1e-5)


def test_nan_rules():
    nan = np.float32("nan")
    a = np.array([nan, 1.0, nan, 2.0], dtype=np.float32)
    b = np.array([nan, nan, 1.0, 2.0], dtype=np.float32)
    assert run_op("Ne", [a, b]).tolist() == [1, 1, 1, 0]
    assert run_op("Equal", [a, b]).tolist() == [0, 0, 0, 1]
    assert run_op("Lt", [a, b]).tolist() == [0, 0, 0, 0]
    assert np.isnan(run_op("MaxAll", [a])) and np.isnan(run_op("Relu", [a])[0])
    assert run_op("ArgMaxDim", [np.array([1.0, nan, 3.0, nan], dtype=np.float32)],
                  {"axis": 0}).tolist() == 1
    assert run_op("Cast", [a], {"dtype": DType.I32}).tolist() == [0, 1, 0, 2]


def test_integer_division_edge_cases_do_not_trap():
    a = np.array([-128, 7, -7, 5], dtype=np.int8)
    b = np.array([-1, 0, 2, -3], dtype=np.int8)
    for name in ("Div", "Rem"):
        np.testing.assert_array_equal(run_op(name, [a, b]), reference(name, [a, b]))


def test_every_supported_op_has_a_lowering():
    leaves = {"Input"}  # graph inputs become function arguments
    missing = [d.name for d in OP_TABLE.values()
               if d.supported and d.name not in leaves and d.name not in RULES]
    assert missing == []
