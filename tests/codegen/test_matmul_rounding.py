"""A matmul's result bits do not depend on which kernel or register tile
computed an element: every multiply-add of the cpu matmul kernels (main
tiles, remainder rows, remainder columns, their corners; the row kernel's N
and K remainders) is one FMA (``vector.fma`` -> ``llvm.fmuladd``, or a
multiply and add marked ``contract`` that LLVM fuses) in the order of K. So
a static and a run-time row extent, a thread split, the row class of a call
(``runtime/rows.py``) and the remainder an element falls in all give the
same bits (docs/toolchain.md: a 1x1x1 corner tile had been a separate
multiply and add, 1 ulp off its neighbours)."""
import itertools
import re

import numpy as np
import pytest

import runtime
from compiler import Graph, compile
from compiler.codegen import cpu, kernels as K, parallel
from compiler.codegen.family import ENTRY
from compiler.graph.opdef import TensorType
from compiler.targets import parse_target
from runtime.cpu_features import missing_cpu_features
from runtime.dtype import DType

TARGETS = [pytest.param(t, marks=pytest.mark.skipif(
    bool(missing_cpu_features(parse_target(t).features)), reason=f"this CPU cannot run {t}"))
    for t in ("cpu:x86-64-v3", "cpu:x86-64-v4")]
K_ = 37           # not a multiple of the row kernel's 4 steps of K
M_REF, N_REF = 144, 64   # whole register tiles on AVX2 (6x16) and AVX-512 (8x32)


@pytest.mark.parametrize("target", ["cpu:x86-64-v3", "cpu:x86-64-v4"])
@pytest.mark.parametrize("kind,rank,dt", [("packed", 2, DType.F32), ("unpacked", 3, DType.F32),
                                          ("few_rows", 2, DType.F32), ("few_rows", 3, DType.F64),
                                          ("strided", 2, DType.F64)])
def test_every_multiply_add_of_a_matmul_kernel_is_an_fma(target, kind, rank, dt):
    unit = () if kind == "strided" else (0, 1, 2)
    inst = K.OpInstance("MatMul", (), (TensorType((8,) * rank, dt),) * 2, True, unit,
                        few_rows=kind == "few_rows", unpacked=kind == "unpacked")
    res = cpu.lower(K.linalg_text(inst, platform="cpu"), [ENTRY], target=target)
    assert res.strategy.name.startswith("matmul-"), res.strategy.name
    ll = res.llvm_ir
    assert "@llvm.fmuladd" in ll
    # a lone multiply or add only where LLVM may contract it into an FMA
    # (the row kernel's N remainder, vectorized by LLVM); none is left in
    # the assembly
    assert not re.search(r"= (fmul|fadd) (?!contract)", ll), re.findall(r".*= (?:fmul|fadd) .*", ll)[:4]
    from compiler.codegen.cpu import llvm as L
    asm = L.target_machine(parse_target(target)).emit_assembly(L.parse_ir(ll, fixup=False))
    assert "vfmadd" in asm
    assert not re.search(r"\bv(mul|add)[sp][sd]\b", asm)


@pytest.mark.parametrize("target,nr", [("cpu:x86-64-v3", 16), ("cpu:x86-64-v4", 32)])
@pytest.mark.parametrize("dt", [DType.F32, DType.F64])
def test_every_multiply_add_of_the_packed_b_kernel_is_an_fma(target, nr, dt):
    from compiler.codegen import fused as F
    nr = nr if dt is DType.F32 else nr // 2
    inst = F.FusedInstance("FusedLinear", (("b_panel", nr),), (
        TensorType((8, 8), dt), TensorType((2, 8, nr), dt), TensorType((2 * nr,), dt)), (0, 1, 2, 3))
    res = cpu.lower(F.linalg_text(inst, platform="cpu"), [ENTRY], target=target)
    assert res.strategy.name.startswith("matmul-packed-b-"), res.strategy.name
    ll = res.llvm_ir
    assert "@llvm.fmuladd" in ll and not re.search(r"= (fmul|fadd) ", ll)
    from compiler.codegen.cpu import llvm as L
    asm = L.target_machine(parse_target(target)).emit_assembly(L.parse_ir(ll, fixup=False))
    assert "vfmadd" in asm and not re.search(r"\bv(mul|add)[sp][sd]\b", asm)


@pytest.mark.parametrize("target", TARGETS)
def test_a_packed_weight_gives_the_unpacked_kernels_bits(target, rng):
    # fuel-prepack-weights packs the constant B of a FusedLinear (and of a
    # MatMul, made a FusedLinear with a zero bias); every row
    # class (1, 4, 7, 33, 129 rows, a batch folded into M) and thread split
    # gives the bits of the kernels reading B unpacked
    plain = "no-prepack"
    w = rng.standard_normal((K_, 96)).astype(np.float32)
    bias = rng.standard_normal(96).astype(np.float32)
    x = rng.standard_normal((258, K_)).astype(np.float32)
    try:
        for dims, b in itertools.product(((1,), (4,), (7,), (1, 33), (2, 129)), (bias, None)):
            xs = x[:int(np.prod(dims))].reshape(dims + (K_,))
            parallel.set_num_threads(1)
            want = compile(_linear(dims, w, b), target, pipeline=plain)(x=xs)
            for threads in (1, 2):
                parallel.set_num_threads(threads)
                m = compile(_linear(dims, w, b), target)  # a MatMul without the bias
                assert "b_panel" in m.ir["optimized"]
                np.testing.assert_array_equal(m(x=xs), want, err_msg=f"{dims}, {threads} threads")
    finally:
        parallel.set_num_threads(None)


def _matmul(target, m, n, a, b):
    g = Graph()
    ai, bi = g.input("a", (m, K_), "f32"), g.input("b", (K_, n), "f32")
    g.output(ai @ bi, name="c")
    return compile(g, target)(a=np.ascontiguousarray(a[:m]), b=np.ascontiguousarray(b[:, :n]))


@pytest.mark.parametrize("target", TARGETS)
def test_an_element_does_not_depend_on_its_kernel_tile_or_thread_split(target, rng):
    # The reference: whole tiles only (144 x 64), the packed kernel. Each
    # smaller product puts its elements in other tiles (remainder rows, the
    # N % nr columns, their corners, the half-width panel of N % nr >= nr/2:
    # 56 columns on AVX-512, 47 on AVX2) or kernels (1 and 4 rows: the row kernel;
    # 7: the unpacked kernel), with and without a thread split.
    a = rng.standard_normal((M_REF, K_)).astype(np.float32)
    b = rng.standard_normal((K_, N_REF)).astype(np.float32)
    try:
        parallel.set_num_threads(1)
        ref = _matmul(target, M_REF, N_REF, a, b)
        np.testing.assert_allclose(ref, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
        for threads in (1, 2):
            parallel.set_num_threads(threads)
            for m, n in ((1, 47), (4, 47), (7, 47), (33, 47), (129, 47), (129, 64), (33, 1),
                         (7, 15), (33, 56), (7, 56), (M_REF, N_REF)):
                np.testing.assert_array_equal(_matmul(target, m, n, a, b), ref[:m, :n],
                                              err_msg=f"{m}x{K_}x{n}, {threads} threads")
    finally:
        parallel.set_num_threads(None)


def _linear(dims, w, b):
    g = Graph()
    x = g.input("x", dims + (K_,), "f32")
    y = x @ g.constant(w, name="w")
    g.output(y if b is None else y + g.constant(b, name="b"), name="y")
    return g


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", [47, 96])
def test_a_symbolic_linear_matches_the_static_one_bit_for_bit(target, n, rng, tmp_path):
    # FusedLinear with run-time batch and sequence (in process and from its
    # .fuel file, which picks an object per row class) against a static
    # compile of each binding: 33, 7, 1 and 129 rows, each grouping of rows
    # into batch and sequence, 47 columns (N % nr remainder columns) or 96
    # (whole panels: B packed at compile time, fuel-prepack-weights)
    w = rng.standard_normal((K_, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    symbolic = compile(_linear(("batch", ("seq", 1, 64)), w, bias), target)
    assert ("b_panel" in symbolic.specialize(batch=1, seq=2).ir["optimized"]) == (n == 96)
    assert ("[B packed]" in "".join(symbolic.specialize(batch=1, seq=2).kernel_summary())) == (n == 96)
    loaded = runtime.load(symbolic.save(tmp_path / "linear.fuel"))
    x = rng.standard_normal((129, K_)).astype(np.float32)
    ref = compile(_linear((129,), w, bias), target)(x=x)   # whole tiles but the columns
    for batch, seq in ((1, 33), (3, 11), (7, 1), (1, 7), (1, 1), (3, 43), (43, 3)):
        xs = x[:batch * seq].reshape(batch, seq, K_)
        want = compile(_linear((batch, seq), w, bias), target)(x=xs)
        np.testing.assert_array_equal(want.reshape(-1, n), ref[:batch * seq])
        for name, module in (("in process", symbolic), ("loaded", loaded)):
            np.testing.assert_array_equal(module(x=xs), want, err_msg=f"{name}, {batch}x{seq}")
