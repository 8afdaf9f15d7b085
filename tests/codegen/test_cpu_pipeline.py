"""linalg-on-tensors → x86 through the CPU pipeline, run against numpy, with
strided, broadcast (stride 0), flipped (negative stride) and rank-0 operands."""
import math

import numpy as np
import pytest

import codegen_ir as IR
from compiler.codegen.cpu import compile_module, lower
from compiler.codegen.memref import descriptor_from_array as D
from compiler.errors import CodegenError


def _compile(text, *entries):
    return compile_module(text, list(entries), cache=None)


def test_entry_results_become_strided_out_params_without_copy():
    res = lower(IR.ADD_DYN, ["add"], keep_ir=True)
    buf = res.stages["bufferize"]
    sig = "memref<4x?xf32, strided<[?, ?], offset: ?>>"
    assert f"@add(%arg0: {sig}, %arg1: {sig}, %arg2: {sig})" in buf
    assert "memref.copy" not in buf and "memref.alloc" not in buf  # written in place
    assert "llvm.emit_c_interface" in buf
    assert "_mlir_ciface_add" in res.llvm_ir


def test_add_with_flipped_broadcast_and_transposed_operands(rng):
    co = _compile(IR.ADD_DYN, "add")
    a = rng.standard_normal((4, 6)).astype(np.float32)[::-1]          # negative stride
    b = np.broadcast_to(rng.standard_normal(6).astype(np.float32), (4, 6))  # stride 0
    out = np.zeros((6, 4), np.float32).T                                # column-major out
    co.ciface("add", 3)(D(a), D(b), D(out))
    np.testing.assert_array_equal(out, a + b)


def test_add_dynamic_size_changes_per_call(rng):
    co = _compile(IR.ADD_DYN, "add")
    for n in (1, 5, 33):
        a = rng.standard_normal((4, n)).astype(np.float32)
        b = rng.standard_normal((4, n)).astype(np.float32)
        out = np.full((4, n), np.nan, np.float32)
        co.ciface("add", 3)(D(a), D(b), D(out))
        np.testing.assert_array_equal(out, a + b)


def test_softmax_matches_numpy(rng):
    co = _compile(IR.SOFTMAX, "softmax")
    x = rng.standard_normal((4, 128)).astype(np.float32) * 4
    y = np.empty_like(x)
    co.ciface("softmax", 2)(D(x), D(y))
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_matmul_dynamic_shapes_and_transposed_input(rng):
    co = _compile(IR.MATMUL_DYN, "mm")
    a = rng.standard_normal((7, 5)).astype(np.float32).T      # 5x7, strides (1, 5)
    b = rng.standard_normal((7, 3)).astype(np.float32)
    c = np.empty((5, 3), np.float32)
    co.ciface("mm", 3)(D(a), D(b), D(c))
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_memref_copy_runtime_function_handles_any_strides(rng):
    co = _compile(IR.IDENTITY_F64, "ident")
    assert "memrefCopy" not in co.symbols  # linked in as an internal function
    x = rng.standard_normal((5, 3)).T                  # 3x5, transposed
    y = np.zeros((3, 10))[:, ::-2]                     # negative stride out
    co.ciface("ident", 2)(D(x), D(y))
    np.testing.assert_array_equal(y, x)
    z = np.zeros((3, 5))
    co.ciface("ident", 2)(D(np.broadcast_to(x[:1], (3, 5))), D(z))
    np.testing.assert_array_equal(z, np.broadcast_to(x[:1], (3, 5)))


def test_libm_functions_resolve(rng):
    co = _compile(IR.TANH_ERF, "tanh_erf")
    x = rng.standard_normal(7).astype(np.float32)
    y = np.empty_like(x)
    co.ciface("tanh_erf", 2)(D(x), D(y))
    ref = np.array([math.erf(math.tanh(v)) for v in x.astype(np.float64)])
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_rank0_result():
    co = _compile(IR.SUM_TO_SCALAR, "sum")
    x = np.arange(10, dtype=np.float32)[::2]  # strided input
    s = np.zeros((), np.float32)
    co.ciface("sum", 2)(D(x), D(s))
    assert s == x.sum()


def test_two_results_and_integers(rng):
    co = _compile(IR.TWO_RESULTS_I32, "addsub")
    a = rng.integers(-100, 100, 6, dtype=np.int32)
    b = rng.integers(-100, 100, 6, dtype=np.int32)
    s, d = np.zeros(6, np.int32), np.zeros(12, np.int32)[::2]
    co.ciface("addsub", 4)(D(a), D(b), D(s), D(d))
    np.testing.assert_array_equal(s, a + b)
    np.testing.assert_array_equal(d, a - b)


def test_f16_add(rng):
    co = _compile(IR.ADD_F16, "add16")
    a = rng.standard_normal(8).astype(np.float16)
    b = rng.standard_normal(8).astype(np.float16)
    out = np.zeros(8, np.float16)
    co.ciface("add16", 3)(D(a), D(b), D(out))
    np.testing.assert_array_equal(out, a + b)


def test_bf16_conversions_need_no_runtime_library():
    from runtime.dtype import bf16_to_f32, f32_to_bf16
    co = _compile(IR.BF16_ROUNDTRIP, "bf")
    x = np.array([1.0, 1.00390625, -3.14159, 1e-3, 65504.0, -0.0, np.inf, 3.0e38], np.float32)
    y = np.empty_like(x)
    co.ciface("bf", 2)(D(x), D(y))
    np.testing.assert_array_equal(y, bf16_to_f32(f32_to_bf16(x)))


def test_several_entries_in_one_object():
    co = _compile(IR.ADD_DYN + IR.MATMUL_DYN, "add", "mm")
    assert {"_mlir_ciface_add", "_mlir_ciface_mm"} <= set(co.symbols)


def test_missing_entry_is_a_typed_error():
    with pytest.raises(CodegenError, match=r"@nope is not in the module; it defines @add"):
        lower(IR.ADD_DYN, ["nope"])


def test_descriptor_count_is_checked():
    co = _compile(IR.ADD_DYN, "add")
    with pytest.raises(TypeError, match="takes 3 memref descriptors, got 2"):
        co.ciface("add", 3)(D(np.zeros((4, 1), np.float32)), D(np.zeros((4, 1), np.float32)))


def test_a_failing_transform_script_is_a_pipeline_error_with_its_reproducer():
    """Transform scripts run through the bindings' native interpreter
    (``compiler.mlir.apply_named_sequence``): its failure is still the
    stage's typed error, naming the diagnostic and the script written out."""
    from compiler.codegen.cpu import pipeline as P
    from compiler.errors import PipelineError
    from compiler.mlir import ir
    with ir.Context():
        module = ir.Module.parse("func.func @kernel() { return }")
    script = """module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %f = transform.cast %root : !transform.any_op to !transform.op<"scf.for">
    transform.yield
  }
}"""
    with pytest.raises(PipelineError, match=r"stage 'transform'(.|\n)*expected scf.for(.|\n)*"
                                            r"transform-script-\w+\.mlir"):
        P.apply_transform(module, script)


def test_command_line_prints_the_assembly(tmp_path, capsys):
    from compiler.codegen.cpu import main
    src = tmp_path / "add.mlir"
    src.write_text(IR.ADD_DYN)
    assert main([str(src), "--entry", "add", "--emit", "asm", "--target", "cpu:x86-64-v3"]) == 0
    asm = capsys.readouterr().out
    assert "_mlir_ciface_add:" in asm and "vaddps" in asm   # AVX: the target's code


# A result written in place into a buffer of the kernel's own
# (``stages.OUTPUT_BUFFER_ATTR``: ``lowering.conv_spatial._output``): the
# out-param takes the buffer's place, through the loops carrying it, where
# every use of it is a loop, a read, a write or an extent; else it is copied.
OUTPUT_BUFFER = """
func.func @fill(%x: tensor<?xf32>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = tensor.dim %x, %c0 : tensor<?xf32>
  %buf = memref.alloc(%n) {fuelc.output_buffer} : memref<?xf32>
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%b = %buf) -> (memref<?xf32>) {
    %v = tensor.extract %x[%i] : tensor<?xf32>
    %w = arith.addf %v, %v : f32
    memref.store %w, %b[%i] : memref<?xf32>
    USE
    scf.yield %b : memref<?xf32>
  }
  %t = bufferization.to_tensor %buf restrict : memref<?xf32> to tensor<?xf32>
  return %t : tensor<?xf32>
}
"""


@pytest.mark.parametrize("use", ["", "%s = memref.subview %b[0] [1] [1] : memref<?xf32> to "
                                     "memref<1xf32, strided<[1]>>"])
def test_an_output_buffer_is_replaced_by_the_out_param(use, rng):
    from compiler.testing import filecheck
    text = OUTPUT_BUFFER.replace("USE", use)
    buf = lower(text, ["fill"], keep_ir=True).stages["bufferize"]
    if use:   # a view of it: the buffer stays, copied into the out-param
        filecheck(buf, "CHECK: memref.alloc\nCHECK: scf.for\nCHECK: memref.copy %alloc, %arg1")
    else:
        filecheck(buf, "CHECK: func.func @fill(%arg0: {{.*}}, %arg1: memref<?xf32, strided<[?], "
                       "offset: ?>>)\nCHECK-NOT: memref.alloc\nCHECK: scf.for\n"
                       "CHECK: memref.store {{.*}}, %arg1[\nCHECK-NOT: memref.copy")
    x = rng.standard_normal(37).astype(np.float32)
    out = np.zeros((37, 2), np.float32)[:, 0]   # a strided out-param
    _compile(text, "fill").ciface("fill", 2)(D(x), D(out))
    np.testing.assert_array_equal(out, x + x)
