"""The op table: completeness of the primitive set, record invariants, and
every shape/dtype rule's accept and reject paths."""
import pytest

from compiler.errors import GraphBuildError, UnsupportedOpError
from compiler.graph import (CATEGORIES, OP_TABLE, PARAM_KINDS, VARIADIC, TensorType,
                            check_params)
from runtime.dtype import DType
from runtime.opkind import OpKind

F32, F16, BF16, I32, U8, U32, I64 = (DType.F32, DType.F16, DType.BF16, DType.I32, DType.U8,
                                     DType.U32, DType.I64)

SPEC_PRIMITIVES = """
Add Sub Mul Div Maximum Minimum Pow Rem
Neg Sqr Sqrt Rsqrt Recip Abs Exp Log Sin Cos Tanh Sigmoid Silu Gelu GeluErf Relu Step Erf
Floor Ceil Round Sign AddScalar MulScalar PowI Clamp Equal Ne Lt Le Gt Ge Where MaskedFill
SumAll MaxAll MinAll MeanAll SumDim MaxDim MinDim MeanDim ArgMaxDim ArgMinDim ReduceSumTo
ReduceMaxTo CumSum MatMul Transpose Permute Reshape BroadcastTo Unsqueeze Squeeze Slice Flip
Contiguize Cast Concat Roll Triu Tril Pad PadBackward IndexSelect Gather IndexAdd ScatterAdd
Iota Const LogSoftmaxLastDim LogSoftmaxLastDimBackward
""".split()
SPEC_UNSUPPORTED = """
Alloc Copy Move Release ZeroFill WriteSlice WriteSliceRotating WriteSliceDoff NonZeroIndices
View ViewOwned ScatterIntoSlot Branch Scan ScanPlaceholder
""".split() + [f"{b}Inplace" for b in
               "Relu Silu Gelu Tanh Sigmoid Neg Abs Sqr Sqrt Rsqrt Recip Exp Log Sin Cos Sign "
               "Floor Ceil Round Erf GeluErf Clamp PowI".split()]


def t(shape, dtype=F32):
    return TensorType(tuple(shape), dtype)


def infer(op, types, **params):
    opdef = OP_TABLE[op]
    return opdef.infer(list(types), check_params(opdef, params))


def test_table_covers_the_spec():
    for name in SPEC_PRIMITIVES:
        assert OP_TABLE[name].supported, name
    for name in SPEC_UNSUPPORTED:
        assert not OP_TABLE[name].supported, name
    assert len(SPEC_UNSUPPORTED) == 15 + 23
    # beyond the spec: Input, and fuelc's own primitives (supported; the
    # completeness test checks their records)
    extra = set(OP_TABLE) - set(SPEC_PRIMITIVES) - set(SPEC_UNSUPPORTED) - {"Input"}
    assert all(OP_TABLE[n].supported for n in extra), extra


def test_record_invariants():
    mnemonics = set()
    for name, op in OP_TABLE.items():
        assert op.name == name
        assert op.category in CATEGORIES
        assert all(p.kind in PARAM_KINDS for p in op.params)
        assert op.arity == VARIADIC or op.arity >= 0
        assert op.mnemonic not in mnemonics
        mnemonics.add(op.mnemonic)
        if op.supported and name not in ("Input", "Const"):
            assert op.reference is not None, name
    assert OP_TABLE["SumDim"].mnemonic == "sum_dim"
    assert OP_TABLE["AddScalar"].mnemonic == "add_scalar"
    assert OP_TABLE["GeluErf"].mnemonic == "gelu_erf"
    assert OP_TABLE["LogSoftmaxLastDim"].mnemonic == "log_softmax_last_dim"
    assert OP_TABLE["Concat"].arity == VARIADIC


@pytest.mark.parametrize("op,kind", [
    ("Add", OpKind.AddElementwise), ("Ne", OpKind.NotEqualElementwise),
    ("Lt", OpKind.LessElementwise), ("AddScalar", OpKind.Affine),
    ("MulScalar", OpKind.Affine), ("Clamp", OpKind.ClampElementwise),
    ("SumDim", OpKind.SumReduce), ("MinAll", OpKind.MinReduce), ("MeanDim", OpKind.MeanReduce),
    ("ArgMaxDim", OpKind.ArgMaxDim), ("Flip", OpKind.Flip), ("Cast", OpKind.Cast),
    ("GeluErf", OpKind.GeluErfElementwise), ("Rem", OpKind.RemElementwise),
    ("Transpose", None), ("Reshape", None), ("Const", None), ("Iota", None),
    ("Contiguize", None), ("BroadcastTo", None), ("Move", OpKind.Copy),
])
def test_op_kinds(op, kind):
    assert OP_TABLE[op].op_kind == kind


def test_params_declared():
    def spec(op):
        return [(p.name, p.kind) for p in OP_TABLE[op].params]
    assert spec("SumDim") == [("axis", "i64")]
    assert spec("AddScalar") == [("value", "num")]
    assert spec("Clamp") == [("min", "num"), ("max", "num")]
    assert spec("PowI") == [("n", "i64")]
    assert spec("Reshape") == spec("BroadcastTo") == spec("ReduceSumTo") == [("shape", "i64s")]
    assert spec("Permute") == [("perm", "i64s")]
    assert spec("Slice") == [("dim", "i64"), ("start", "i64"), ("len", "i64")]
    assert spec("Cast") == [("dtype", "dtype")]
    assert spec("Pad") == [("padding", "i64s"), ("mode", "str"), ("value", "f64")]
    assert spec("Iota") == [("len", "i64")]


def test_check_params():
    assert check_params(OP_TABLE["Pad"], {"padding": [1, 2]}) == {
        "padding": (1, 2), "mode": "constant", "value": 0.0}
    assert check_params(OP_TABLE["Cast"], {"dtype": "float16"}) == {"dtype": F16}
    with pytest.raises(GraphBuildError, match="missing required param 'axis'"):
        check_params(OP_TABLE["SumDim"], {})
    with pytest.raises(GraphBuildError, match="unknown param"):
        check_params(OP_TABLE["SumDim"], {"axis": 0, "keepdims": True})
    with pytest.raises(GraphBuildError, match="must be i64"):
        check_params(OP_TABLE["SumDim"], {"axis": 1.5})
    with pytest.raises(GraphBuildError, match="must be i64"):
        check_params(OP_TABLE["SumDim"], {"axis": True})
    with pytest.raises(GraphBuildError, match="must be dtype"):
        check_params(OP_TABLE["Cast"], {"dtype": "float13"})


# -- accept paths ----------------------------------------------------------
@pytest.mark.parametrize("shape", [(), (1,), (3, 1), (2, 3, 4)])
def test_elementwise_preserve_type(shape):
    for op in ("Add", "Mul", "Rem", "Maximum"):
        assert infer(op, [t(shape), t(shape)]) == t(shape)
    for op in ("Exp", "Neg", "GeluErf", "Round"):
        assert infer(op, [t(shape, F16)]) == t(shape, F16)
    for op in ("Equal", "Ne", "Lt", "Ge"):
        assert infer(op, [t(shape, BF16), t(shape, BF16)]) == t(shape, U8)
    assert infer("Where", [t(shape, U8), t(shape, I32), t(shape, I32)]) == t(shape, I32)
    assert infer("MaskedFill", [t(shape), t(shape, U8)], value=1.0) == t(shape)
    assert infer("AddScalar", [t(shape, I32)], value=3.0) == t(shape, I32)
    assert infer("Clamp", [t(shape)], min=-1, max=1) == t(shape)
    assert infer("SumAll", [t(shape, I32)]) == t((), I32)
    assert infer("Cast", [t(shape)], dtype="bf16") == t(shape, BF16)


def test_reductions_and_shapes():
    x = t((2, 3, 4))
    assert infer("SumDim", [x], axis=1) == t((2, 4))
    assert infer("ArgMinDim", [x], axis=2) == t((2, 3), U32)
    assert infer("CumSum", [x], axis=0) == x
    assert infer("ReduceSumTo", [x], shape=(3, 1)) == t((3, 1))
    assert infer("ReduceMaxTo", [x], shape=(1, 1, 4)) == t((1, 1, 4))
    assert infer("ReduceSumTo", [x], shape=()) == t(())
    assert infer("Transpose", [x]) == t((2, 4, 3))
    assert infer("Permute", [x], perm=(2, 0, 1)) == t((4, 2, 3))
    assert infer("Reshape", [x], shape=(6, 4)) == t((6, 4))
    assert infer("BroadcastTo", [t((3, 1))], shape=(2, 3, 5)) == t((2, 3, 5))
    assert infer("Unsqueeze", [x], dim=3) == t((2, 3, 4, 1))
    assert infer("Squeeze", [t((2, 1))], dim=1) == t((2,))
    assert infer("Slice", [x], dim=2, start=1, len=3) == t((2, 3, 3))
    assert infer("Slice", [x], dim=2, start=4, len=0) == t((2, 3, 0))
    assert infer("Concat", [x, t((2, 5, 4))], dim=1) == t((2, 8, 4))
    assert infer("Pad", [x], padding=(0, 1, 2, 0, 1, 1)) == t((3, 5, 6))
    assert infer("PadBackward", [t((3, 5, 6))], in_shape=(2, 3, 4),
                 padding=(0, 1, 2, 0, 1, 1)) == x
    assert infer("Triu", [x], diagonal=-1) == x
    assert infer("Iota", [], len=5) == t((5,))
    assert infer("Const", [], name="c", shape=(2,), dtype="u8") == t((2,), U8)


def test_matmul_rules():
    assert infer("MatMul", [t((4, 3)), t((3, 5))]) == t((4, 5))
    assert infer("MatMul", [t((2, 4, 3)), t((2, 3, 5))]) == t((2, 4, 5))
    assert infer("MatMul", [t((2, 8, 4, 3)), t((2, 2, 3, 5))]) == t((2, 8, 4, 5))  # GQA
    assert infer("MatMul", [t((4, 3)), t((3, 5), BF16)]) == t((4, 5))  # f32 x bf16
    with pytest.raises(GraphBuildError, match="contraction mismatch"):
        infer("MatMul", [t((4, 3)), t((4, 5))])
    with pytest.raises(GraphBuildError, match="GQA"):
        infer("MatMul", [t((3, 4, 3)), t((2, 3, 5))])
    with pytest.raises(GraphBuildError, match="same rank"):
        infer("MatMul", [t((2, 4, 3)), t((3, 5))])
    with pytest.raises(GraphBuildError, match="mixed pair"):
        infer("MatMul", [t((4, 3), BF16), t((3, 5))])
    with pytest.raises(GraphBuildError, match="not supported"):
        infer("MatMul", [t((4, 3), I32), t((3, 5), I32)])


def test_indexing_rules():
    d = t((5, 4))
    assert infer("IndexSelect", [d, t((7,), U32)], dim=0) == t((7, 4))
    assert infer("Gather", [d, t((5, 2), U32)], dim=1) == t((5, 2))
    assert infer("IndexAdd", [d, t((3,), U32), t((5, 3))], dim=1) == d
    assert infer("ScatterAdd", [d, t((2, 4), U32), t((2, 4))], dim=0) == d
    with pytest.raises(GraphBuildError, match="must be u32"):
        infer("IndexSelect", [d, t((7,), I64)], dim=0)
    with pytest.raises(GraphBuildError, match="1-D"):
        infer("IndexSelect", [d, t((7, 1), U32)], dim=0)
    with pytest.raises(GraphBuildError, match="rank"):
        infer("Gather", [d, t((5,), U32)], dim=0)
    with pytest.raises(GraphBuildError, match="src must be"):
        infer("IndexAdd", [d, t((3,), U32), t((5, 4))], dim=1)
    with pytest.raises(GraphBuildError, match="one shape"):
        infer("ScatterAdd", [d, t((2, 4), U32), t((2, 3))], dim=0)


# -- reject paths: each rule, with the message naming op and operands ------
@pytest.mark.parametrize("op,types,params,match", [
    ("Add", [t((2, 3)), t((3,))], {}, r"Add\(f32\[2,3\], f32\[3\]\): .*identical shapes"),
    ("Add", [t((2,)), t((2,), F16)], {}, r"dtype f16 != operand 0 dtype f32"),
    ("Exp", [t((2,), I32)], {}, r"Exp\(i32\[2\]\): operand 0 dtype i32 not supported"),
    ("Pow", [t((2,), I32), t((2,), I32)], {}, "not supported"),
    ("Add", [t((2,), DType.F8E4M3)] * 2, {}, "not supported"),
    ("Lt", [t((2,)), t((2, 1))], {}, "identical shapes"),
    ("Where", [t((2,)), t((2,)), t((2,))], {}, "condition dtype f32 must be u8"),
    ("Where", [t((2,), U8), t((2,)), t((2,), F16)], {}, "branch dtypes"),
    ("Where", [t((3,), U8), t((2,)), t((2,))], {}, "identical shapes"),
    ("MaskedFill", [t((2,)), t((2,), I32)], {"value": 0.0}, "mask dtype"),
    ("MaskedFill", [t((2,), I32), t((2,), U8)], {"value": 0.5}, "integral"),
    ("AddScalar", [t((2,), I32)], {"value": 0.5}, "integral"),
    ("Clamp", [t((2,))], {"min": 2.0, "max": 1.0}, "min 2.0 must be <= max 1.0"),
    ("PowI", [t((2,), I32)], {"n": -2}, "negative exponent"),
    ("SumDim", [t((2, 3))], {"axis": 2}, "axis 2 out of range for rank 2"),
    ("SumDim", [t((2, 3))], {"axis": -1}, "out of range"),
    ("MaxDim", [t((2, 0))], {"axis": 1}, "extent 0"),
    ("MaxAll", [t((0,))], {}, "zero elements"),
    ("MeanAll", [t((3,), I32)], {}, "not supported"),
    ("ReduceSumTo", [t((2, 3))], {"shape": (2,)}, "not broadcast-compatible"),
    ("ReduceSumTo", [t((2, 3))], {"shape": (1, 2, 3)}, "not broadcast-compatible"),
    ("CumSum", [t(())], {"axis": 0}, "out of range for rank 0"),
    ("Transpose", [t((3,))], {}, "rank >= 2"),
    ("Permute", [t((2, 3))], {"perm": (0, 0)}, "not a permutation"),
    ("Reshape", [t((2, 3))], {"shape": (4,)}, "same element count"),
    ("BroadcastTo", [t((2, 3))], {"shape": (3,)}, "cannot broadcast"),
    ("BroadcastTo", [t((2, 3))], {"shape": (4, 3)}, "cannot broadcast"),
    ("Unsqueeze", [t((2,))], {"dim": 2}, "dim 2 out of range"),
    ("Squeeze", [t((2,))], {"dim": 0}, "extent 2, must be 1"),
    ("Slice", [t((4,))], {"dim": 0, "start": 2, "len": 3}, "must lie within"),
    ("Flip", [t((4,))], {"dim": 1}, "out of range"),
    ("Cast", [t((4,))], {"dtype": "f4"}, "no supported conversion"),
    ("Concat", [t((2, 3)), t((3, 3))], {"dim": 1}, "must match operand 0 on every axis"),
    ("Concat", [t((2, 3)), t((2, 3), I32)], {"dim": 0}, "dtype"),
    ("Triu", [t((3,))], {"diagonal": 0}, "rank >= 2"),
    ("Pad", [t((3,))], {"padding": (1,)}, "pair per axis"),
    ("Pad", [t((3,))], {"padding": (1, -1)}, "non-negative"),
    ("Pad", [t((3,))], {"padding": (1, 1), "mode": "wrap"}, "unknown pad mode"),
    ("LogSoftmaxLastDim", [t(())], {}, "rank >= 1"),
    ("LogSoftmaxLastDimBackward", [t((2,)), t((3,))], {}, "identical shapes"),
    ("Iota", [], {"len": -1}, "must be >= 0"),
])
def test_rule_violations(op, types, params, match):
    with pytest.raises(GraphBuildError, match=match) as e:
        infer(op, types, **params)
    assert str(e.value).startswith(op)


def test_pad_reflect_is_unsupported():
    with pytest.raises(UnsupportedOpError, match="'reflect' is not supported yet"):
        infer("Pad", [t((3,))], padding=(1, 1), mode="reflect")


@pytest.mark.parametrize("op", SPEC_UNSUPPORTED)
def test_unsupported_ops_raise(op):
    opdef = OP_TABLE[op]
    n = 1 if opdef.arity == VARIADIC else opdef.arity
    with pytest.raises(UnsupportedOpError, match="not supported yet"):
        opdef.infer([t((2,))] * n, {})
