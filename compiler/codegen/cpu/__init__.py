"""The cpu target's codegen package: linalg on tensors → x86-64 objects.

What every codegen package provides to ``compiler.targets`` (see its
docstring): ``SOURCE``, ``build_table``, ``compile_module``, ``emit_object``,
``ensure_compiled``, ``describe_pipeline``, ``transcendental_ulp`` and
``PRECISION_NOTE``. The pipeline itself is ``pipeline.py`` (stages and
reproducers), ``strategy.py`` (per-kernel schedules), ``transforms/``
(transform-dialect scripts), ``fastmath.py`` (vectorizable transcendentals)
and ``llvm.py`` (llvmlite: LLVM IR → object for the target's CPU).
"""
from __future__ import annotations

from runtime.binding import KernelBindingTable
from runtime.cost import default_cost_for_op_kind
from runtime.dtype import DType
from runtime.numpy_kernels import register_numpy_kernels
from runtime.precision import PrecisionGuarantee

from . import fastmath
from .pipeline import (BUFFERIZE, LoweringResult, Stage, choose_strategy, compile_module,
                       describe_pipeline, emit_object, ensure_compiled, load_object, lower, main,
                       object_bytes,
                       prepare_entries, run_stage, spare_context, stages_for, write_reproducer)

#: The kernel-source prefix of generated cpu kernels.
SOURCE = "mlir-cpu"
#: Generated cpu kernels read any well-formed view of their inputs
#: (``KernelCaps.view_input``): every memref argument has a fully dynamic
#: layout (offset and strides, ``pipeline.BUFFERIZE``), and binding a
#: descriptor checks the view's element span against its storage.
VIEW_INPUT = True
#: The data dtypes the primitive family registers on cpu targets.
DTYPES = (DType.F32, DType.F64, DType.F16, DType.BF16, DType.I32, DType.I64, DType.I8,
          DType.I16, DType.U8, DType.U32, DType.U64)

PRECISION_NOTE = (
    "exp/tanh/log/erf on f32/f16/bf16 are branch-free polynomials (compiler.codegen.cpu."
    "fastmath, <= {exp} / {tanh} / {log} / {erf} ulp from the correctly rounded f32 result, "
    "measured over all f32 inputs); f64 and sin/cos/pow via LLVM intrinsics / libm"
).format(**fastmath.MAX_ULP)


def transcendental_ulp(fn: str, dtype: DType) -> int | None:
    """The measured ulp bound of ``fn`` (exp, tanh, log, erf) on ``dtype``
    in generated code, or None where no bound is claimed (f64: libm)."""
    if dtype in (DType.F32, DType.F16, DType.BF16):
        return fastmath.MAX_ULP.get(fn)
    return None


def packed_panel(dtype: DType, target) -> int:
    """The panel width of a matmul B packed at compile time for ``target``
    (the register tile's ``nr``: ``strategy.packed_strategy``; bf16/f16
    panels take f32's), or 0 for dtypes the packed kernel does not take
    (integers)."""
    from compiler.codegen.cpu.strategy import isa_level, packed_panel as panel
    if dtype not in (DType.F32, DType.F64, DType.BF16, DType.F16):
        return 0
    return panel(dtype.value, isa_level(target) or "avx2")


def copies_a(dtype: DType, target) -> bool:
    """Whether a matmul of the ``fuelc.pack_a`` class copies its blocks of A
    on ``target`` (``strategy._PACK_A_TILES``: AVX2 f32)."""
    from compiler.codegen.cpu.strategy import copies_a as copies, isa_level
    return copies(dtype.value, isa_level(target) or "avx2")


def short_k(dtype: DType, k: int, target) -> bool:
    """Whether the packed FusedLinear kernel of the short-K class
    (``fuelc.short_k``) differs on ``target`` from the plain one for a K of
    ``k`` (``strategy.short_k_differs``: AVX2 f32, K past one plain block)."""
    from compiler.codegen.cpu.strategy import isa_level, short_k_differs
    return short_k_differs(dtype.value, isa_level(target) or "avx2", k)


def a_block_rows(dtype: DType, target) -> int:
    """The rows of A per copied block of a ``fuelc.pack_a`` matmul on
    ``target`` (``strategy.a_block_rows``), or 0 where it reads A in place."""
    from compiler.codegen.cpu.strategy import a_block_rows as rows, isa_level
    return rows(dtype.value, isa_level(target) or "avx2")


def vector_bits(target) -> int:
    """The widest vector ``target`` has, in bits (512 with AVX-512, else 256):
    the width the run-time image size conv kernels tile in
    (``lowering/conv_spatial.py``)."""
    from compiler.codegen.cpu.strategy import isa_level
    return 512 if isa_level(target) == "avx512" else 256


#: AVX2 f32 FlashAttn without a causal band pays from scores of this many
#: elements (``attention_scores``): the smallest measured, [1,4,32,64] with
#: BERT's mask, 0.73-0.97 of the unfused steps; ViT's [1,4,129,64] 0.77-0.90,
#: [8,4,33,64] 0.49-0.64 (one and two znver3 threads; docs/benchmarks.md,
#: "ViT against onnxruntime on AVX2").
AVX2_ATTENTION_SCORES = 1 << 12


def attention_scores(dtype: DType, target) -> int | None:
    """The scores size from which attention without a causal band runs as
    FlashAttn on ``target`` (``fuse_attention.pays``): ``AVX2_ATTENTION_SCORES``
    for f32 on AVX2 targets, else None (the pass's ``SCORES_FUSED``, measured
    with AVX-512)."""
    from compiler.codegen.cpu.strategy import isa_level
    return AVX2_ATTENTION_SCORES if dtype is DType.F32 and isa_level(target) == "avx2" else None


def build_table(target) -> KernelBindingTable:
    """The frozen binding table of a cpu ``target``: the generated primitive
    and fused kernels first (so ``lookup_with_caps`` picks them), the numpy
    reference kernels after them as sibling alternatives, then the CPU fill
    passes."""
    from compiler.codegen.fused import register_fused_kernels
    from compiler.codegen.kernels import register_primitive_kernels
    t = KernelBindingTable()
    # and the f32 x bf16 products (an f32 activation over a bf16 weight)
    register_primitive_kernels(t, target, dtypes=DTYPES, mixed=True)
    register_fused_kernels(t, target, mixed=True)
    register_numpy_kernels(t)
    t.fill_unset_cpu_precision(PrecisionGuarantee.PRIMITIVE_DETERMINISTIC_CPU)
    t.fill_unset_cpu_cost(default_cost_for_op_kind)
    t.finalize()
    return t.freeze()


__all__ = ["SOURCE", "VIEW_INPUT", "packed_panel", "copies_a", "short_k", "a_block_rows", "vector_bits", "attention_scores",
           "DTYPES", "PRECISION_NOTE", "transcendental_ulp", "build_table",
           "compile_module", "emit_object", "ensure_compiled", "object_bytes", "describe_pipeline", "lower",
           "LoweringResult", "choose_strategy", "load_object", "prepare_entries", "stages_for",
           "run_stage", "Stage", "BUFFERIZE", "write_reproducer", "main", "spare_context"]
