"""The fuel dialect: IRDL generated from the op table, loading, verification,
the dtype mapping, params <-> attributes, and graph emission round trips."""
import numpy as np
import pytest

from compiler.dialect import (default_ops, dtype_to_mlir, fuel_irdl_text, load_fuel_dialect,
                              mlir_to_dtype, op_params, parse_fuel_module)
from compiler.dialect.emit import graph_to_module
from compiler.errors import DialectError
from compiler.graph.graph import Graph
from compiler.graph.opdef import OpDef, ParamSpec, TensorType
from compiler.graph.ops import OP_TABLE
from compiler.dialect import make_context
from compiler.mlir import ir
from runtime.dtype import DType


def test_irdl_has_every_supported_op_and_no_unsupported_one():
    text = fuel_irdl_text()
    for d in OP_TABLE.values():
        assert (f"irdl.operation @{d.mnemonic} {{" in text) == d.supported, d.name


def test_irdl_operands_get_separate_constraints_and_attr_kinds():
    text = fuel_irdl_text()
    matmul = text.split("irdl.operation @mat_mul {")[1].split("}")[0]
    assert "irdl.operands(x0: %x0, x1: %x1)" in matmul
    slice_ = text.split("irdl.operation @slice {")[1].split("  }")[0]
    assert '"dim" = %a_dim' in slice_ and '%a_dim = irdl.base "#builtin.integer"' in slice_
    pad = text.split("irdl.operation @pad {")[1].split("  }")[0]
    assert '%a_padding = irdl.base "#builtin.array"' in pad
    assert '%a_value = irdl.base "#builtin.float"' in pad
    assert '%a_mode = irdl.base "#builtin.string"' in pad
    concat = text.split("irdl.operation @concat {")[1].split("  }")[0]
    assert "irdl.operands(x0: %x0, xs: variadic %xs)" in concat


def test_custom_op_list_generates_only_those_ops():
    d = OpDef("Foo", "foo", 2, (ParamSpec("k", "i64"),), "binary", None,
              lambda t, p: t[0], None)
    text = fuel_irdl_text([d])
    assert "@foo" in text and "@add" not in text


def test_load_is_idempotent_and_registers_ops():
    ctx = ir.Context()
    load_fuel_dialect(ctx)
    load_fuel_dialect(ctx)  # a second irdl.load_dialects would segfault
    assert ctx.is_registered_operation("fuel.sum_dim")
    assert make_context().is_registered_operation("fuel.mat_mul")


def test_matmul_with_different_operand_shapes_verifies():
    m = parse_fuel_module(
        'func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) -> tensor<4x2xf32> {\n'
        '  %0 = "fuel.mat_mul"(%a, %b) : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>\n'
        '  return %0 : tensor<4x2xf32>\n}')
    assert "fuel.mat_mul" in str(m)


@pytest.mark.parametrize("text, needle", [
    ('%0 = "fuel.sum_dim"(%a) {axis = 1.0 : f64} : (tensor<4x8xf32>) -> tensor<4xf32>',
     "expected base attribute 'builtin.integer'"),
    ('%0 = "fuel.sum_dim"(%a) : (tensor<4x8xf32>) -> tensor<4xf32>',
     'attribute "axis" is expected'),
    ('%0 = "fuel.add"(%a) : (tensor<4x8xf32>) -> tensor<4x8xf32>', "expects exactly 2 operands"),
    ('%0 = "fuel.nope"(%a) : (tensor<4x8xf32>) -> tensor<4x8xf32>', "fuel.nope"),
])
def test_malformed_text_raises_dialect_error_with_mlir_diagnostic(text, needle):
    src = f"func.func @f(%a: tensor<4x8xf32>) {{\n  {text}\n  return\n}}"
    with pytest.raises(DialectError) as ei:
        parse_fuel_module(src)
    assert needle in str(ei.value)


@pytest.mark.parametrize("dt, spelled", [
    (DType.U8, "ui8"), (DType.U32, "ui32"), (DType.I8, "i8"), (DType.I64, "i64"),
    (DType.BF16, "bf16"), (DType.F16, "f16"), (DType.F32, "f32"), (DType.F64, "f64"),
    (DType.F8E4M3, "f8E4M3FN"), (DType.F4, "f4E2M1FN"), (DType.F8E8M0, "f8E8M0FNU"),
])
def test_dtype_mapping_round_trips(dt, spelled):
    with ir.Context(), ir.Location.unknown():
        t = dtype_to_mlir(dt)
        assert str(t) == spelled
        assert mlir_to_dtype(t) == dt
        assert mlir_to_dtype(ir.RankedTensorType.get([2], t)) == dt


def test_dtype_without_mlir_type_is_a_typed_error():
    with ir.Context(), pytest.raises(DialectError, match="f8e6m2"):
        dtype_to_mlir(DType.F8E6M2)


def _graph():
    g = Graph()
    x = g.input("x", (4, 8))
    m = g.input("m", (4, 8), "u8")
    w = g.constant(np.arange(8, dtype=np.float32), name="w")
    big = g.constant(np.ones((16, 8), dtype=np.float32), name="big")
    y = g.add_node("Mul", [x, g.add_node("BroadcastTo", [w], {"shape": (4, 8)})])
    y = g.add_node("MaskedFill", [y, m], {"value": -1.0})
    s = g.add_node("SumDim", [y], {"axis": 1})
    c = g.add_node("Concat", [x, g.add_node("Slice", [big], {"dim": 0, "start": 0, "len": 3})],
                   {"dim": 0})
    g.output(s, "s")
    g.output(c, "c")
    return g


def test_graph_emission_round_trips_and_keeps_big_constants_aside():
    em = graph_to_module(_graph())
    text = str(em.module)
    assert em.input_names == ["x", "m"] and em.output_names == ["s", "c"]
    assert '{fuel.name = "x"}' in text and 'fuel.output_names = ["s", "c"]' in text
    assert "tensor<4x8xui8>" in text
    assert 'name = "w"' in text and "value = dense<[0.000000e+00, 1.0" in text
    assert list(em.constants) == ["big"] and em.constants["big"].shape == (16, 8)
    assert '"fuel.concat"(%arg0, %' in text  # heterogeneous operands: x0 + tail
    again = parse_fuel_module(text)
    again.operation.verify()
    assert str(again) == text


def test_op_params_reads_attributes_back_by_the_opdef():
    em = graph_to_module(_graph())
    found = {}

    def cb(op):
        if op.name.startswith("fuel."):
            found[op.name] = op_params(op)
        return ir.WalkResult.ADVANCE

    em.module.operation.walk(cb)
    assert found["fuel.sum_dim"] == {"axis": 1}
    assert found["fuel.slice"] == {"dim": 0, "start": 0, "len": 3}
    assert found["fuel.masked_fill"] == {"value": -1.0}
    assert found["fuel.const"]["dtype"] == DType.F32
    assert found["fuel.broadcast_to"] == {"shape": (4, 8)}


def test_every_supported_op_is_in_the_dialect_table():
    ops = default_ops()
    assert all(d.mnemonic in ops for d in OP_TABLE.values() if d.supported)


class _TwoOptional:
    """A fused-entry stand-in with two optional operands, (a, b, [c], [d]):
    the ``late`` param says the lone optional operand is d, not c."""
    name, mnemonic, arity, min_arity, num_outputs = "TwoOpt", "two_opt", -1, 2, 1
    params = (ParamSpec("late", "bool", False),)
    input_names = ("a", "b", "c", "d")
    max_arity = 4

    @staticmethod
    def operand_slots(n, params):
        return (0, 1, 3) if n == 3 and params.get("late") else tuple(range(n))


def _two_opt_module(operands, types, late, segments):
    attrs = f'late = {"true" if late else "false"}'
    if segments is not None:
        attrs += f", operandSegmentSizes = array<i32: {', '.join(map(str, segments))}>"
    return (f"func.func @f(%a: tensor<4xf32>, %b: tensor<2x4xf32>, %c: tensor<8xf32>, "
            f"%d: tensor<1x4xf32>) {{\n"
            f'  %0 = "fuel.two_opt"({", ".join(operands)}) {{{attrs}}} : '
            f"({', '.join(types)}) -> tensor<4xf32>\n  return\n}}")


def test_two_optional_operands_get_their_own_groups_and_segment_sizes():
    from compiler.dialect.definition import collect_ops
    spec = collect_ops([_TwoOptional])["two_opt"]
    assert spec.segmented and not spec.one_optional
    text = fuel_irdl_text([_TwoOptional])
    assert "irdl.operands(x0: %x0, x1: %x1, x2: optional %x2, x3: optional %x3)" in text
    assert spec.segment_sizes(3, {"late": True}) == [1, 1, 0, 1]
    assert spec.segment_sizes(3, {"late": False}) == [1, 1, 1, 0]
    assert spec.segment_sizes(4, {"late": False}) == [1, 1, 1, 1]
    with pytest.raises(DialectError, match="fuel.two_opt: 5 operands"):
        spec.segment_sizes(5, {"late": False})
    # operands of different types (c and d) each verify against their own slot
    ctx = ir.Context()
    load_fuel_dialect(ctx, [_TwoOptional])
    with ctx, ir.Location.unknown():
        for ops, tys, late, seg in [
                (["%a", "%b", "%d"], ["tensor<4xf32>", "tensor<2x4xf32>", "tensor<1x4xf32>"],
                 True, [1, 1, 0, 1]),
                (["%a", "%b", "%c", "%d"], ["tensor<4xf32>", "tensor<2x4xf32>", "tensor<8xf32>",
                                            "tensor<1x4xf32>"], False, [1, 1, 1, 1])]:
            m = ir.Module.parse(_two_opt_module(ops, tys, late, seg))
            m.operation.verify()
            assert str(m) == str(ir.Module.parse(str(m)))  # prints and parses back
        with pytest.raises(Exception, match="operandSegmentSizes"):
            ir.Module.parse(_two_opt_module(["%a", "%b", "%d"], ["tensor<4xf32>", "tensor<2x4xf32>",
                                                                 "tensor<1x4xf32>"], True, None))


def test_build_fuel_op_writes_the_segments_its_params_give():
    from compiler.dialect.attrs import params_to_attributes
    from compiler.dialect.definition import SEGMENTS_ATTR, build_fuel_op, collect_ops
    spec = collect_ops([_TwoOptional])["two_opt"]
    ctx = ir.Context()
    load_fuel_dialect(ctx, [_TwoOptional])
    with ctx, ir.Location.unknown():
        m = ir.Module.create()
        f32 = ir.F32Type.get()
        types = [ir.RankedTensorType.get(s, f32) for s in ([4], [2, 4], [1, 4])]
        with ir.InsertionPoint(m.body):
            from compiler.mlir import func
            fn = func.FuncOp("f", ir.FunctionType.get(types, []))
            with ir.InsertionPoint(fn.add_entry_block()):
                attrs = params_to_attributes(spec, {"late": True})
                op = build_fuel_op(spec, list(fn.arguments), [types[0]], attrs)
                func.ReturnOp([])
        assert list(ir.DenseI32ArrayAttr(op.attributes[SEGMENTS_ATTR])) == [1, 1, 0, 1]
        m.operation.verify()


def test_conv2d_with_a_residual_round_trips_and_its_segments_must_match_its_params():
    from compiler.registry.builders import conv2d
    g = Graph()
    x = g.input("x", (2, 4, 6, 6))
    skip = g.input("skip", (2, 8, 6, 6))
    w = g.constant(np.ones((8, 4, 3, 3), np.float32), name="w")
    g.output(conv2d(x, w, padding=1, residual=skip), "y")   # no bias: slots x, w, residual
    text = str(graph_to_module(g).module)
    assert "operandSegmentSizes = array<i32: 1, 1, 0, 1>" in text and "residual = true" in text
    again = parse_fuel_module(text)
    assert str(again) == text
    found = []
    again.operation.walk(lambda op: (found.append(op_params(op)) if op.name == "fuel.conv2d"
                                     else None) or ir.WalkResult.ADVANCE)
    assert found[0]["residual"] is True
    # the same operands read as a bias by the segments: refused, naming both
    bad = text.replace("array<i32: 1, 1, 0, 1>", "array<i32: 1, 1, 1, 0>")
    with pytest.raises(DialectError, match=r"operandSegmentSizes \[1, 1, 1, 0\] but its 3 "
                                           r"operands under its params fill the slots "
                                           r"\[1, 1, 0, 1\] \(x, w, bias, residual\)"):
        parse_fuel_module(bad)


def test_find_is_lookup_without_the_error():
    """``find`` (the type check's question for every op it walks) answers
    None for an op outside the table where ``lookup`` raises with its hint."""
    from compiler.dialect.definition import find, lookup
    assert find("fuel.sum_dim") is lookup("sum_dim") is find("sum_dim")
    assert find("fuel.runtime_fused") is None and find("func.func") is None
    with pytest.raises(DialectError, match="did you mean sum_dim"):
        lookup("fuel.sum_dimm")
