"""The LLVM 24 → 22 IR-text pitfalls, handled by compiler.codegen.cpu.llvm."""
import ctypes

import llvmlite.binding as llvm
import numpy as np
import pytest

from compiler.codegen.cpu import llvm as cg
from compiler.codegen.cpu import lower
from compiler.codegen.loader import ObjectLoadError, load_object
from compiler.codegen.memref import descriptor_from_array as D
from compiler.errors import CodegenError
from compiler.targets import parse_target

CPU = parse_target("cpu")


def _bits_of(ty: str, literal: str) -> int:
    """Compile ``bitcast <ty> <literal>`` and return the bits it produces."""
    ity = {"half": "i16", "bfloat": "i16", "float": "i32", "double": "i64"}[ty]
    text = f"define {ity} @bits() {{\n  %b = bitcast {ty} {literal} to {ity}\n  ret {ity} %b\n}}\n"
    co = load_object(cg.compile_ir_to_object(text, CPU)[0])
    restype = {"i16": ctypes.c_uint16, "i32": ctypes.c_uint32, "i64": ctypes.c_uint64}[ity]
    return ctypes.CFUNCTYPE(restype)(co.address("bits"))()


def test_llvmlite_rejects_llvm24_literals_unfixed():
    cg.ensure_llvm_initialized()
    with pytest.raises(RuntimeError, match="expected"):
        llvm.parse_assembly("define float @f() {\n  ret float -inf\n}\n")


@pytest.mark.parametrize("ty, literal, bits", [
    ("float", "-inf", 0xFF800000),
    ("float", "+inf", 0x7F800000),
    ("float", "+qnan", 0x7FC00000),
    ("float", "-qnan", 0xFFC00000),
    ("float", "+nan(0x1)", 0x7FC00001),
    ("float", "+snan(0x200000)", 0x7FA00000),
    ("double", "-inf", 0xFFF0000000000000),
    ("double", "+nan(0x1)", 0x7FF8000000000001),
    ("half", "-inf", 0xFC00),
    ("half", "+qnan", 0x7E00),
    ("bfloat", "+qnan", 0x7FC0),
    ("bfloat", "-inf", 0xFF80),
    ("float", "f0x4F000000", 0x4F000000),      # LLVM 24 raw-bits form
    ("float", "f0x00000001", 0x00000001),      # a denormal
    ("double", "f0x3FF0000000000001", 0x3FF0000000000001),
    ("half", "f0x3C01", 0x3C01),
    ("bfloat", "f0x3F81", 0x3F81),
])
def test_special_literals_keep_their_bits(ty, literal, bits):
    assert _bits_of(ty, literal) == bits


def test_fixup_rewrites_vector_splats_and_leaves_other_text():
    text = "store <4 x float> splat (float -inf), ptr %p\n%x = fadd float 1.0, 2.0 ; -inf\n"
    out = cg.fixup_ir_text(text)
    assert "splat (float 0xFFF0000000000000)" in out
    assert "fadd float 1.0, 2.0 ; -inf" in out


def test_raw_bits_literal_not_next_to_its_type():
    text = ("define i1 @ge(float %x) {\n  %c = fcmp oge float %x, f0x4F000000\n  ret i1 %c\n}\n")
    assert "float %x, 0x41E0000000000000" in cg.fixup_ir_text(text)
    co = load_object(cg.compile_ir_to_object(text, CPU)[0])
    ge = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_float)(co.address("ge"))
    assert ge(2.0 ** 31) and not ge(2.0 ** 30)


def test_mlir_constants_survive_the_whole_pipeline():
    # MLIR's LLVM 24 prints these constants in the new syntax (checked), and
    # the compiled kernel stores exactly their bits.
    src = """
    func.func @consts(%x: tensor<4xf32>) -> tensor<4xf32> {
      %c = arith.constant dense<[0xFF800000, 0x7F800000, 0x7FC00000, 0x7FC00001]> : tensor<4xf32>
      %e = tensor.empty() : tensor<4xf32>
      %r = linalg.add ins(%x, %c : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
      return %r : tensor<4xf32>
    }"""
    from compiler.mlir import ir, llvm as llvm_dialect
    with ir.Context():
        m = ir.Module.parse("""
        llvm.func @k(%p: !llvm.ptr) {
          %c = llvm.mlir.constant(0xFF800000 : f32) : f32
          llvm.store %c, %p : f32, !llvm.ptr
          llvm.return
        }""")
        assert "float -inf" in llvm_dialect.translate_module_to_llvmir(m.operation)
    res = lower(src, ["consts"])
    co = load_object(res.object)
    x = np.zeros(4, np.float32)
    y = np.zeros(4, np.float32)
    co.ciface("consts", 2)(D(x), D(y))
    assert list(y.view(np.uint32)[:3]) == [0xFF800000, 0x7F800000, 0x7FC00000]
    assert np.isnan(y[3])


def test_bad_llvm_ir_is_a_codegen_error():
    with pytest.raises(CodegenError, match="LLVM rejected the IR"):
        cg.compile_ir_to_object("define void @f( {", CPU)


def test_unresolvable_symbol_is_refused_before_it_can_segfault():
    text = ("declare void @fuelc_no_such_symbol()\n"
            "define void @f() {\n  call void @fuelc_no_such_symbol()\n  ret void\n}\n")
    obj, _ = cg.compile_ir_to_object(text, CPU)
    with pytest.raises(ObjectLoadError, match="fuelc_no_such_symbol"):
        load_object(obj)


def test_added_symbol_resolves():
    cb_type = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)
    cb = cb_type(lambda v: v * 3)
    llvm.add_symbol("fuelc_test_triple", ctypes.cast(cb, ctypes.c_void_p).value)
    text = ("declare i64 @fuelc_test_triple(i64)\n"
            "define i64 @f(i64 %x) {\n  %r = call i64 @fuelc_test_triple(i64 %x)\n  ret i64 %r\n}\n")
    co = load_object(cg.compile_ir_to_object(text, CPU)[0])
    assert ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(co.address("f"))(14) == 42


def test_each_emission_gets_its_own_target_machine_for_the_target():
    a = cg.target_machine(CPU)
    b = cg.target_machine(CPU)
    assert a is not b
    assert CPU.arch and CPU.arch != "generic"
    v3 = parse_target("cpu:x86-64-v3")
    assert "x86-64-v3" in str(v3) and cg.target_machine(v3).triple.startswith("x86_64")
