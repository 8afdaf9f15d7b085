"""Structure of the lowered IR (named ops, dynamic dims, unsigned handling),
the fuel-to-linalg pass registration, and typed lowering errors."""
import pytest

from compiler.codegen.linalg import emit_single_op_module, lower_to_linalg
from compiler.dialect import parse_fuel_module
from compiler.errors import LoweringError
from compiler.graph.opdef import TensorType
from runtime.dtype import DType

F32 = DType.F32


def lowered(name, params, types, dynamic=False):
    m = emit_single_op_module(name, params, types, dynamic=dynamic)
    assert "llvm.emit_c_interface" in str(m)
    lower_to_linalg(m)
    m.operation.verify()
    text = str(m)
    assert "fuel." not in text
    return text


def test_matmul_uses_named_ops():
    assert "linalg.matmul" in lowered("MatMul", {}, [TensorType((4, 8), F32), TensorType((8, 2), F32)])
    assert "linalg.batch_matmul" in lowered(
        "MatMul", {}, [TensorType((3, 4, 8), F32), TensorType((3, 8, 2), F32)])
    gqa = lowered("MatMul", {}, [TensorType((4, 2, 8), F32), TensorType((2, 8, 2), F32)])
    assert "floordiv 2" in gqa


def test_layout_ops_use_named_ops():
    assert "linalg.transpose" in lowered("Transpose", {}, [TensorType((2, 3), F32)])
    assert "tensor.extract_slice" in lowered("Slice", {"dim": 0, "start": 1, "len": 1},
                                             [TensorType((2, 3), F32)])
    assert "tensor.expand_shape" in lowered("Unsqueeze", {"dim": 0}, [TensorType((2, 3), F32)])
    assert "tensor.collapse_shape" in lowered("Squeeze", {"dim": 0}, [TensorType((1, 3), F32)])
    assert "linalg.broadcast" in lowered("BroadcastTo", {"shape": (4, 2, 3)},
                                         [TensorType((2, 3), F32)])
    assert "tensor.insert_slice" in lowered("Concat", {"dim": 0},
                                            [TensorType((2, 3), F32), TensorType((1, 3), F32)])


def test_dynamic_kernels_have_question_dims_and_tensor_dim():
    text = lowered("Add", {}, [TensorType((4, 8), F32)] * 2, dynamic=True)
    assert "tensor<?x?xf32>" in text and "tensor.dim" in text
    text = lowered("SumDim", {"axis": 1}, [TensorType((4, 8), F32)], dynamic=True)
    assert "-> tensor<?xf32>" in text and '"reduction"' in text


def test_unsigned_become_signless_with_unsigned_arith():
    text = lowered("Div", {}, [TensorType((4,), DType.U8)] * 2)
    assert "ui8" not in text and "tensor<4xi8>" in text and "arith.divui" in text
    text = lowered("Lt", {}, [TensorType((4,), DType.U32)] * 2)
    assert "arith.cmpi ult" in text
    assert "arith.uitofp" in lowered("Cast", {"dtype": F32}, [TensorType((4,), DType.U8)])
    assert "arith.divsi" in lowered("Div", {}, [TensorType((4,), DType.I32)] * 2)


def test_half_precision_computes_in_f32():
    text = lowered("Exp", {}, [TensorType((4,), DType.BF16)])
    assert "arith.extf" in text and "math.exp" in text and ": f32" in text
    assert "arith.truncf" in text


def test_ne_is_unordered_and_others_ordered():
    assert "arith.cmpf une" in lowered("Ne", {}, [TensorType((4,), F32)] * 2)
    assert "arith.cmpf olt" in lowered("Lt", {}, [TensorType((4,), F32)] * 2)


def test_registered_pass_runs_through_the_pass_manager():
    from compiler.passes import run_pipeline
    m = emit_single_op_module("Relu", {}, [TensorType((4,), F32)])
    run_pipeline(m, "builtin.module(fuel-to-linalg)")
    assert "linalg.generic" in str(m) and "fuel.relu" not in str(m)


def test_op_without_rule_is_a_typed_error_and_leaves_module_unchanged(monkeypatch):
    from compiler.codegen import lowering
    m = parse_fuel_module(
        'func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n'
        '  %0 = "fuel.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>\n'
        '  %1 = "fuel.relu"(%0) : (tensor<4xf32>) -> tensor<4xf32>\n'
        '  return %1 : tensor<4xf32>\n}')
    monkeypatch.delitem(lowering.RULES, "Relu")
    before = str(m)
    with pytest.raises(LoweringError, match=r"fuel\.relu \(Relu\)"):
        lower_to_linalg(m)
    assert str(m) == before


def test_platform_rule_wins_over_the_generic_one_on_its_platform(monkeypatch):
    from compiler.codegen import lowering
    generic = lowering.RULES["Neg"]
    calls = []

    def cpu_neg(lw):
        calls.append(lw.name)
        return generic(lw)

    monkeypatch.setitem(lowering.PLATFORM_RULES, ("Neg", "cpu"), cpu_neg)
    assert lowering.rule_for("Neg", "cpu") is cpu_neg
    assert lowering.rule_for("Neg", "cuda") is generic and lowering.rule_for("Neg") is generic
    m = emit_single_op_module("Neg", {}, [TensorType((4,), F32)])
    lower_to_linalg(m)
    assert calls == []
    m = emit_single_op_module("Neg", {}, [TensorType((4,), F32)])
    lower_to_linalg(m, platform="cpu")
    assert calls == ["Neg"] and "fuel.neg" not in str(m)


def test_large_const_needs_the_side_dict():
    import numpy as np
    from compiler.dialect.emit import graph_to_module
    from compiler.graph.graph import Graph
    g = Graph()
    g.output(g.constant(np.ones((9, 9), dtype=np.float32), name="w"), "w")
    em = graph_to_module(g)
    with pytest.raises(LoweringError, match="'w'"):
        lower_to_linalg(graph_to_module(g).module)
    lower_to_linalg(em.module, constants=em.constants)
    assert "arith.constant dense<1.000000e+00> : tensor<9x9xf32>" in str(em.module)
