"""A kernel family's ``serves`` predicate that fails (a bug: anything but
``SymbolicError``, which means "undecidable on symbolic extents") stops the
pass with ``KernelPredicateError`` naming the op, instead of deciding the
fusion or the decomposition as if the kernel did not (or did) serve it."""
import dataclasses

import pytest

from compiler.registry import kernel_params
from compiler.registry.errors import KernelPredicateError
from compiler.testing import run_pipeline_on_text
from runtime.errors import SymbolicError

IR = """
func.func @f(%a: tensor<8x32xf32>, %b: tensor<32x64xf32>, %bias: tensor<64xf32>) -> tensor<8x64xf32> {
  %0 = "fuel.fused_linear"(%a, %b, %bias) : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %1 = "fuel.gelu_erf"(%0) : (tensor<8x64xf32>) -> tensor<8x64xf32>
  return %1 : tensor<8x64xf32>
}
"""
FUSE = "builtin.module(fuel-fuse{table=linear_f32_f64 runtime=false})"


@pytest.fixture
def serves(monkeypatch):
    """Replace FusedLinear's predicate by one raising the given exception."""
    import compiler.codegen.fused  # noqa: F401  (registers the mappings)

    def use(exc):
        def predicate(params, types):
            raise exc
        spec = kernel_params.fused_params("FusedLinear")
        monkeypatch.setitem(kernel_params._MAPPINGS, "FusedLinear",
                            dataclasses.replace(spec, serves=predicate))
    return use


def test_kernel_serves_wraps_a_failing_predicate(serves):
    from compiler.graph.opdef import TensorType
    from runtime.dtype import DType
    serves(ZeroDivisionError("boom"))
    t = TensorType((8, 32), DType.F32)
    with pytest.raises(KernelPredicateError, match=r"FusedLinear: the kernel's serves "
                                                   r"predicate failed .*ZeroDivisionError: boom"):
        kernel_params.kernel_serves("FusedLinear", {"gelu": True}, [t, t])


def test_fuse_stops_on_a_failing_predicate(serves):
    serves(ZeroDivisionError("boom"))
    with pytest.raises(Exception, match="serves predicate failed") as e:
        run_pipeline_on_text(IR, FUSE, plugins=["tests.passes.kernel_tables"])
    assert "FusedLinear" in str(e.value)


def test_an_undecidable_predicate_leaves_the_op_unfused(serves):
    serves(SymbolicError("cannot decide"))
    out = run_pipeline_on_text(IR, FUSE, plugins=["tests.passes.kernel_tables"])
    assert '"fuel.gelu_erf"' in out and "gelu = true" not in out


def test_decompose_stops_on_a_failing_predicate(serves):
    serves(KeyError("b_panel"))
    ir_text = IR.replace('"fuel.fused_linear"(%a, %b, %bias)',
                         '"fuel.fused_linear"(%a, %b, %bias) {gelu = true}').replace(
        '  %1 = "fuel.gelu_erf"(%0) : (tensor<8x64xf32>) -> tensor<8x64xf32>\n  return %1',
        '  return %0')
    with pytest.raises(Exception, match="serves predicate failed"):
        run_pipeline_on_text(ir_text, "builtin.module(fuel-decompose{table=linear_f32_f64})",
                             plugins=["tests.passes.kernel_tables"])
