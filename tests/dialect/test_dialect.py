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
