"""Per-kernel CPU code-generation strategies.

The CPU pipeline (``compiler.codegen.cpu``) is a fixed list of named stages;
a ``Strategy`` fills its four pluggable slots:

* ``tensor_passes``   MLIR passes on linalg-on-tensors, before bufferization
                      (e.g. fusion, tiling on tensors);
* ``tensor_transform`` a transform-dialect script applied to linalg on
                      tensors, before bufferization (tile-and-fuse: a matmul
                      with its producers and epilogue in one register tile);
* ``transform``       a transform-dialect script (text of a module holding a
                      ``transform.named_sequence @__transform_main``) applied
                      to the bufferized payload (tiling, packing, vectorizing:
                      docs/toolchain.md);
* ``lowering``        the memref → LLVM-dialect pass list.

``select_strategy(features, target)`` picks one for a module from its
*features*: the names of the linalg ops it contains, plus ``"<op>:<element
type>"`` for each (``"linalg.matmul:f32"``; the element type of the op's first
operand), and from the ``target`` (a cpu ``Target``: its instruction-set
extensions choose between per-ISA variants of a strategy). The default is
correctness-first loops. Registered here:

* ``linalg.matmul`` / ``linalg.batch_matmul`` on f32 or f64 with dynamic dims
  (alone in a module; ``mlir-cpu`` MatMul instances are shape-generic; bf16
  and f16 into an f32 init take the f32 tiles, ``NARROW_TILES``):
  the register-tiled, B-packed, vectorized schedule of
  ``compiler.codegen.cpu.transforms.matmul``; tiles per ISA: AVX2 (16 ymm)
  6x16 f32 / 6x8 f64, AVX-512 (32 zmm) 8x32 f32 / 8x16 f64 (any sizes, any
  strides; remainder rows and columns as 1 x nr and mr x 1 register tiles). An entry marked ``fuelc.few_rows`` (calls
  of at most ``family.FEW_ROWS`` rows) reads B in place instead, in 1 x nr x kr
  tiles ordered K, M, N (``rows_strategy``): packing B would cost as much as
  the product. An entry marked ``fuelc.unpacked`` (more rows, at most
  ``family.UNPACKED_ROWS``) gets the tiled schedule without the packing of B;
  one marked ``fuelc.pack_a`` (A's rows a multiple of 4 KiB apart; 1024 or more
  columns) copies each block of A as well (``_PACK_A_TILES``).
* a module that only copies (``COPIES_ONLY``: no linalg op, only tensor
  slices, inserts and pads, as Concat, Slice and Pad lower): ``COPIES``, the
  loops without LLVM's loop unrolling. Unrolled, the copy loops of a Concat
  became megabytes of IR and seconds of LLVM per kernel (a 9-way im2col Concat
  of [8, 256, 1, 2, 2]: 3-4 s, 1.8 MB of IR; rolled 0.2 s); the rolled copy of
  small inner rows runs slower (a module of that Concat: 76-88 -> 88-111 us a
  call); of long rows it is no slower. A batch-generic copy reads its run-time
  batch (``tensor.dim``) and is still one: ResNet's im2col Concats had taken
  LOOPS that way, 2.3-2.5 s of LLVM each for [?, 4, 4, 9, 128].

Strategies are part of the kernel cache key (``Strategy.fingerprint``).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
from typing import Callable, Iterable

from compiler.codegen.cpu import fastmath

# memref + scf/cf → LLVM dialect; correct for every op the loops path emits.
LOOPS_LOWERING: tuple[str, ...] = (
    "convert-linalg-to-loops",
    "lower-affine",
    "convert-scf-to-cf",
    # bf16 arithmetic and int<->bf16 conversions computed in f32, and every
    # f32<->bf16 conversion expanded to integer ops: LLVM would otherwise
    # call __truncsfbf2, which not every libgcc has (GCC 12's lacks it).
    "func.func(arith-emulate-unsupported-floats{source-types=bf16 target-type=f32})",
    "arith-expand{include-bf16=true include-f8e8m0=true include-f4e2m1=true}",
    "expand-strided-metadata",
    "lower-affine",
    "finalize-memref-to-llvm",
    "convert-math-to-llvm",
    "convert-math-to-libm",
    "convert-arith-to-llvm",
    "convert-index-to-llvm",
    "convert-ub-to-llvm",
    "convert-func-to-llvm",
    "convert-cf-to-llvm",
    "reconcile-unrealized-casts",
)


@dataclasses.dataclass(frozen=True)
class Strategy:
    """How one kernel is code-generated; see the module docstring."""

    name: str
    tensor_passes: tuple[str, ...] = ()
    tensor_transform: str | tuple[str, ...] | None = None
    transform: str | tuple[str, ...] | None = None
    lowering: tuple[str, ...] = LOOPS_LOWERING
    #: mark float add/mul in reduction bodies ``reassoc`` so LLVM vectorizes
    #: the reduction (the order changes, still fixed per build and hardware).
    reassociate_reductions: bool = False
    #: expand f32/f16/bf16 exp/tanh/log into vectorizable polynomials
    #: (``compiler.codegen.cpu.fastmath``, measured ulp bounds) instead of libm calls.
    approximate_math: bool = True
    #: let LLVM unroll loops (O3's full and partial unrolling). Off for pure
    #: copies: a concatenation of ten [8, 1599] rows came out 2.4 MB of
    #: unrolled IR and took LLVM 3-4 s; vectorized, not unrolled, 0.1 s.
    llvm_unroll: bool = True
    doc: str = ""

    @property
    def fingerprint(self) -> str:
        """A digest of everything that changes the generated code."""
        h = hashlib.sha256()
        steps = (self.transform,) if isinstance(self.transform, str) else self.transform or ()
        tsteps = (self.tensor_transform,) if isinstance(self.tensor_transform, str) \
            else self.tensor_transform or ("",)
        for part in (self.name, *self.tensor_passes, *tsteps, *steps,
                     *self.lowering,
                     f"reassoc={self.reassociate_reductions}",
                     f"approx={self.approximate_math and fastmath.VERSION}",
                     *(() if self.llvm_unroll else ("no-unroll",))):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:16]


# Vector dialect → LLVM, for strategies whose transform leaves vector ops
# (docs/toolchain.md); the scalar tail is LOOPS_LOWERING's.
VECTOR_LOWERING: tuple[str, ...] = (
    "convert-linalg-to-loops",
    "convert-vector-to-scf{full-unroll=true}",
    "lower-affine",
    "canonicalize",
    "cse",
    "convert-vector-to-llvm{vector-contract-lowering=outerproduct}",
    *LOOPS_LOWERING[2:],
)

LOOPS = Strategy(
    name="loops",
    reassociate_reductions=True,
    doc="linalg → scalar loops; LLVM O3 for the host CPU does the rest (its loop "
        "vectorizer versions unit strides; reductions are marked reassociable). "
        "Correct for every op, any strides.")

#: The strategy feature of a module that only copies (``pipeline.linalg_op_names``).
COPIES_ONLY = "fuelc.copies_only"
COPIES = dataclasses.replace(
    LOOPS, name="copies", llvm_unroll=False,
    doc="a kernel without linalg ops: only tensor slices, inserts and pads (Concat, "
        "Slice, Pad). LOOPS without LLVM's loop unrolling: the copy loops are "
        "vectorized; unrolled they made megabytes of IR and seconds of LLVM per kernel.")

#: The strategy feature of a module whose lowering wrote vector ops itself
#: (``vector.transfer_read`` ... on tensors: the MaxPool2D kernel).
VECTOR_OPS = "fuelc.vector_ops"
#: Its strategy: no transform script; the vector ops lowered with the matmul's
#: and the direct convolution's ``VECTOR_LOWERING`` (LOOPS cannot lower them).
VECTORIZED = Strategy(
    name="vectorized", lowering=VECTOR_LOWERING,
    doc="a kernel its lowering vectorized (vector ops on tensors); lowered as written")
#: The feature of a kernel whose loops its lowering wrote as they should run
#: (``family.ROLLED_ATTR``: FlashAttn's register tiles, the norms' passes).
ROLLED = "fuelc.rolled"
#: VECTORIZED without LLVM's loop unrolling. Unrolled, BERT b8's attention
#: kernel grew from 154 to 336 KB of optimized IR and took 0.56-0.65 s to
#: compile; not unrolled 0.39 s, and it ran 1-2% faster (one znver4 thread,
#: the same buffers; docs/compile-at-scale.md, "Seventeenth round").
VECTORIZED_ROLLED = dataclasses.replace(
    VECTORIZED, name="vectorized-rolled", llvm_unroll=False,
    doc="a kernel its lowering vectorized and tiled for the registers; lowered as "
        "written, without LLVM's loop unrolling")
#: LOOPS without LLVM's loop unrolling (the norms' row kernels: LLVM still
#: vectorizes the passes over a row): f32 LayerNorm [1024,384] 102 -> 80 us
#: with AVX-512, 82 -> 81 with AVX2, RMSNorm 62 -> 45 and 112 -> 73, each
#: compiled in 0.05-0.07 s instead of 0.07-0.15 (one thread, the same buffers).
LOOPS_ROLLED = dataclasses.replace(
    LOOPS, name="loops-rolled", llvm_unroll=False,
    doc="linalg and scalar loops that LLVM vectorizes but does not unroll (the norms' "
        "passes over a row)")

#: ISA levels a strategy may have variants for, best first: (name, the
#: target features it needs).
ISA_LEVELS: tuple[tuple[str, frozenset[str]], ...] = (
    ("avx512", frozenset({"avx512f"})),
    ("avx2", frozenset({"avx2", "fma"})),
)

# (predicate on the set of linalg op names, {isa level or "": strategy}),
# first match wins.
_RULES: list[tuple[Callable[[frozenset[str]], bool], dict[str, Strategy]]] = []


def isa_level(target) -> str:
    """The best entry of ``ISA_LEVELS`` whose features ``target`` (a cpu
    Target; None: no vector ISA assumed) has, or ``""``."""
    features = frozenset(getattr(target, "features", ()) or ())
    return next((name for name, need in ISA_LEVELS if need <= features), "")


def register_strategy(predicate: Callable[[frozenset[str]], bool],
                      strategy: "Strategy | dict[str, Strategy]") -> None:
    """Use ``strategy`` for modules whose op-name set satisfies ``predicate``
    (rules registered earlier win). A dict maps ISA levels (``ISA_LEVELS``
    names; ``""`` is the fallback) to the variant used on targets of that
    level."""
    _RULES.append((predicate, strategy if isinstance(strategy, dict) else {"": strategy}))


def select_strategy(op_names: Iterable[str], target=None) -> Strategy:
    """The strategy for a module with these features (op names and
    ``op:element-type`` entries, see the module docstring) on ``target``
    (its ISA level picks the variant); default LOOPS."""
    names = frozenset(op_names)
    level = isa_level(target)
    for pred, variants in _RULES:
        if pred(names):
            order = [name for name, _ in ISA_LEVELS]
            usable = order[order.index(level):] if level else []
            return next((variants[k] for k in usable + [""] if k in variants), LOOPS)
    return LOOPS


# -- built-in strategies ---------------------------------------------------------
register_strategy(lambda names: COPIES_ONLY in names, COPIES)
# AVX2 (16 ymm): f32 6x16 = 12 ymm accumulators; f64 6x8 = 12. AVX-512 (32
# zmm): f32 8x32 = 16 zmm accumulators, f64 8x16 = 16 (two zmm of B and a
# broadcast leave room). kc rows of B per packed panel, mc rows of A per
# block (a multiple of mr), the A block (mc x kc) within the L2:
#   AVX2 f32: kc=256 (a 16 KiB panel), mc=240 (240 KiB, half a Zen 3 L2; B
#     packed per call: _PER_CALL_TILES);
#     on znver4 2048^3 ran at 86 GFLOP/s vs 82 with kc=512, mc=120;
#   AVX-512 f32: kc=512 (a 64 KiB panel, streamed from L2: 5-10% faster than
#     kc=256 on znver4, fewer C tile loads/stores per FMA), mc=384 (768 KiB
#     of a 1 MiB L2; a little faster than 240 at 256-512 rows).
# Measured: benchmarks/kernels.py, benchmarks/ops.py.
_MATMUL_TILES = {
    ("f32", "avx2"): dict(mr=6, nr=16, kc=256, mc=240), ("f64", "avx2"): dict(mr=6, nr=8, kc=512, mc=60),
    ("f32", "avx512"): dict(mr=8, nr=32, kc=512, mc=384), ("f64", "avx512"): dict(mr=8, nr=16, kc=256, mc=120),
}
_MATMUL_OPS = ("linalg.matmul", "linalg.batch_matmul")
#: The element types whose matmuls take another type's tiles: a bf16/f16
#: ``linalg.matmul`` with an f32 init (``lowering.matmul``) extends each
#: operand to f32 in its region, so its vectorized tiles load bf16/f16
#: vectors (B packed in bf16/f16), convert them exactly and run f32 FMAs into
#: f32 accumulators, rounded once by the module's truncf generic
#: (docs/benchmarks.md, "bf16 products on CPU"). No AVX-512 BF16 instruction
#: is assumed: the conversions are integer shifts (``arith-expand``).
NARROW_TILES = {"bf16": "f32", "f16": "f32"}
#: The element types a matmul strategy is registered for.
_MATMUL_TYPES = ("f32", "f64", *NARROW_TILES)
#: Where the tiles of a matmul that packs B on every call (``matmul_strategy``,
#: B an input) differ from ``_MATMUL_TILES``. AVX2 f32: kc = 512 (a 32 KiB
#: panel; the C tiles loaded and stored half as often) and mc = 360 (the 720
#: KiB block of A within a 1 MiB L2; B packed once per 360 rows, not 240).
#: One znver4 thread, thread time, min of 5-20 calls, numpy (OpenBLAS) in the
#: same process, fuelc/numpy over 2-3 processes each: 512^3 1.01-1.04 ->
#: 0.97-1.00, 1024^3 1.05-1.09 -> 1.01-1.03, 2048^3 1.11 -> 1.06, linear+bias
#: 512x1024x1024 1.05-1.07 -> 0.99-1.00 (kc = 512 with mc = 240: 1.02-1.05 at
#: 1024^3, with mc = 120: 1.10; kc = 128: 1.18). The tiles of B packed at
#: compile time (``packed_strategy``) are left as they were.
_PER_CALL_TILES = {("f32", "avx2"): dict(kc=512, mc=360)}
#: Where the tiles of a matmul reading B in place whose B rows are a multiple
#: of 4 KiB apart (entries marked ``fuelc.aliased_b``: ``runtime.rows.
#: aliased_unpacked``, 5 to ``ALIASED_ROWS`` (16) rows) differ from
#: ``_MATMUL_TILES``. All the rows of such a B map to the same L1 set (and to
#: few L2 sets), so a panel walked over a K block of 256-512 rows is evicted,
#: with the lines of the next panels the prefetchers brought, before they are
#: used: every row tile and panel re-reads B from L3. With K blocks of 8 (kc),
#: the 8 rows x nr columns a block reads fit in their sets' 8 ways, and every
#: row tile of the block reads them from L1. The output (as long as a row of B)
#: falls in few sets too, and its tiles are now loaded and stored once per 8
#: steps of K: blocks of 8 rows (mc) keep the 8 rows x nr columns of C a block
#: touches within 8 ways as well. AVX2 f32 4 x 16, so that 8 rows are two
#: whole tiles (not a 6-row tile and a 2-row one of 4 accumulators).
#: One AVX2 znver4 thread, [M,768]x[768,3072] + bias, B an input, thread time,
#: min ms of 150 calls in 5 rounds, numpy (OpenBLAS) in the same process; M = 8:
#: 6 x 16, kc 256 1.26-1.32 (numpy 0.74-0.80); 6 x 16, kc 8 0.80-0.92; 4 x 16,
#: kc 8 0.62-0.66, kc 4 1.08, kc 256 1.26. M = 12 / 16: 1.06-1.10 / 1.62-1.69
#: before, 4 x 16 kc 8 1.26 / 2.2 with one block of all rows, 0.91 / 1.21 with
#: blocks of 8 (numpy 0.98 / 1.20); M = 5 1.56-1.78 -> 0.53-0.64 (numpy
#: 0.86-0.95). Not measured on AVX-512 (no such host): its tiles are left as
#: they were.
_ALIASED_TILES = {("f32", "avx2"): dict(mr=4, kc=8, mc=8)}
#: Where the tiles of a matmul that packs B per call whose B rows are a
#: multiple of 4 KiB apart (entries marked ``fuelc.aliased_b`` without
#: ``fuelc.unpacked``: ``runtime.rows.aliased_packed``, 17-32 rows) differ
#: from ``_PER_CALL_TILES``. Packed a panel (kc x 16) at a time, the copy
#: reads one 64-byte line per row of B, each in another 4 KiB page (12 KiB
#: apart at N = 3072): at 32 rows it took about 38% of the call (perf
#: samples). ``nb``: B is copied a block of kc x nb at a time
#: (``transforms.matmul.matmul_script``), whole row segments of nb columns
#: in order, and the panels of the block are read from that buffer (rows nb
#: apart: 448 bytes, 7 lines, spread over the L1 sets). One znver3 thread,
#: [M,768]x[768,3072] + bias, docs/benchmarks.md ("Products of 17-32 rows
#: over such a B"), kc 128 nb 240 (a 120 KiB block) against the panels:
#: fuelc/numpy, M = 32 1.33-1.35 -> 1.07-1.16, 24 1.37-1.40 -> 0.99-1.06, 17
#: 0.95-1.50 -> 0.87-0.89. kc 768, nb 112 (a 336 KiB block, within a Zen 3
#: L2 too): K = 768 in one block, so each register tile of C (its rows as
#: far apart as B's, at one page offset) is loaded and stored once a call,
#: not once per 128 of K; same FMAs in the same order (same bits). Two Zen 4
#: threads, AVX2, M = 32 (docs/benchmarks.md, "Issue 17's AVX2 products at
#: two threads: matmul 512 and M = 32"): per-round median 0.919-0.928 of kc
#: 128 nb 240's time (16-18 of 25 rounds faster; a second copy of the old
#: kernel 1.008-1.016).
#: ``copy_rows``, ``prefetch``: the block's copy in loops of 2 rows (now 4), each
#: prefetching the first and last line of the rows 8 further on
#: (``transforms.matmul.prefetch_copy_rows``): with B out of the caches (a
#: cold call, or the host's memory-slow state) the copy waited on every
#: row's first line. Same FMAs, same bits. Two Zen 4 threads, AVX2,
#: per-round median of the plain copy's time (docs/benchmarks.md, "Issue
#: 17's M = 32 on AVX2: the copy of B from memory"): B evicted from the L3
#: before each call, M = 32 0.93-0.96, M = 24 0.95; B in the L3, M = 32
#: 0.97-1.00, M = 17-24 0.87-1.05 (a second copy of the plain kernel
#: 0.94-1.07 in the same runs), the fastest calls 1-2% slower.
#: ``copy_rows`` 4 with ``vector_copy``: each whole piece of 4 rows x 112
#: columns copied as 56 straight 8-float loads and stores
#: (``transforms.matmul.vector_copy_rows``), where the copy had been a libc
#: ``memcpy`` call per row (448 bytes): with B in the L3 the copy took
#: 0.34-0.37 ms of the 2 ms one-thread call (the register tiles' K loops cut
#: to one step), 0.22-0.26 with B's block in the L2, and B hot brought the
#: kernel to about numpy's time: the copy is the gap, not the FMAs. Same
#: bits. Zen 4, AVX2, per-round median of the 2-row memcpy kernel's time
#: (docs/benchmarks.md, "Issue 17's M = 32 on AVX2: the copy is the gap"):
#: M = 32 two threads warm 0.94-1.02, from memory 0.89-0.90, one thread
#: 0.90-0.91; M = 24 0.95 / 0.92, M = 17 0.89 / 0.95 (a second copy of the
#: old kernel 0.93-1.05 in the same runs).
_ALIASED_PACKED_TILES = {("f32", "avx2"): dict(kc=768, nb=112, copy_rows=4, prefetch=8, vector_copy=8)}
#: Where a matmul that packs B per call also copies each ``mc x kc`` block of A
#: into a contiguous buffer (entries marked ``fuelc.pack_a``:
#: ``runtime.rows.pack_a``, A's rows a multiple of 4 KiB apart, at least 1024
#: columns). Such A rows fall in few L2 sets (a row's
#: 2 KiB of the block in 32 of the 1024 sets of a 512 KiB Zen 3 L2, the next
#: row 128 sets on), so the block read in place does not stay in the L2 across
#: the panels of B; copied, it is contiguous, and the register tiles read it
#: at constant offsets. AVX2 f32: one znver3 thread
#: (AVX2 only), thread time, min of 5 rounds, both kernels and numpy
#: (OpenBLAS) in turns in one process, fuelc/numpy, in place -> copied:
#: [2048,2048] x [2048,512] (a 2-thread call's column tile of 2048^3) 1.13 ->
#: 1.09, 2048^3 whole 1.16 -> 1.10; where the copy is not repaid (few
#: columns per call, or A rows not aliased) it was not taken: [1024,1024] x
#: [1024,256] 1.05 -> 1.10, 256^3 1.01 -> 1.08, 1024^3 whole 1.10 -> 1.06.
#: ``a_panels``: the copy lays the block out in ``mr``-row K-major panels
#: (``transforms.matmul.pack_a_panels``), so a register tile reads its six
#: rows of A as one stream (OpenBLAS's packed A), not from six lines 2 KiB
#: apart; same FMAs, same bits. One znver3 thread, min of 7 rounds in turns
#: in one process, new/old: 2048^3 0.97, 0.97, 0.91 (3 processes), 1024^3
#: 1.00, 1.00, 0.98; 2 threads 0.97 / 1.00. Tried with it and left out: kc
#: 256 or 384, mc 240 or 528 (1.02-1.07 against kc 512, mc 360); the copy
#: into panels row by row (scalar, 1024^3 1.00-1.05); taking the copy for
#: [1024,768]x[768,3072] and [1024,3072]x[3072,768] (1.01, 0.99: even).
#: docs/benchmarks.md, "A copied into 6-row K-major panels".
#: AVX-512 f32 likewise (8-row panels, the blocks of ``_MATMUL_TILES``: 384 x
#: 512, 768 KiB of a Zen 4's 1 MiB L2), and so cut at two threads into row
#: tiles of one block (``kernels.matmul_split``) where the column tiles each
#: read all of A in place. One Zen 4 VM (2 vCPUs), the variants in one
#: process, per-round ratio to A in place, median (rounds faster) of 16-24
#: rounds: 2 threads 2048^3 0.954-0.971 (11-14 of 16), 1024^3 0.957-0.982
#: (13-19 of 20-24), linear+bias 512x1024x1024 (B an input) 0.942-0.951
#: (18-22 of 24); one thread 2048^3 0.977, 1024^3 0.999 (a second copy of
#: A in place: 1.000-1.011). Left out: the copy row-major (2048^3 0.997-1.013),
#: kc 768 / mc 264 or kc 1024 / mc 192 with it (0.961, 1.039), mc 480 (0.984);
#: without it, kc 256 / 384 / 1024 and mc 192 / 768 (0.981-1.051) and LLVM's
#: x86-64-v4, generic or skylake-avx512 model (1.04-1.06).
#: docs/benchmarks.md, "The per-call matmul's blocks on AVX-512 (Zen 4)".
#: ``c_after_k`` (AVX2 f32, with kc 256 and mc 720): each register tile sums
#: its block of K from zero and then adds it to C (``transforms.matmul.
#: c_after_k``, OpenBLAS's order; another rounding than one chain over K:
#: ``k_block_from_zero``). C's rows lie a multiple of 4 KiB apart here, and
#: the tile loaded them at the start, just after the previous tile's stores
#: to the same page offsets: with the accumulators from zero the loop does
#: not wait on them (2048 x 2048 x 2064, C's rows not 4 KiB apart: no gain).
#: Then kc 256 (a 16 KiB panel of B, half of a 32 KiB L1) gains, where with
#: C loaded first it lost (C's tiles loaded twice as often), and mc 720 (the
#: 720 KiB block of A as before; B packed once per 720 rows). Zen 4, AVX-512
#: hidden, one process, per-round ratio to kc 512 / mc 360 from C, median
#: (rounds faster): 2048^3 1 thread 0.955-0.964 (8-9 of 9), 2 threads
#: 0.954-0.958; 1024^3 0.992 (14/15) / 0.967 (10/15); linear+bias
#: 512x1024x1024 1 thread 0.948 (15/15). Without kc 256 (from zero alone)
#: 0.98-0.99; kc 256 alone 1.011. docs/benchmarks.md, "The AVX2
#: micro-kernel against OpenBLAS's Haswell kernel". Not on AVX-512 f32 (C
#: first): there from zero 1.003-1.018 of it at 1024^3 / 2048^3, with kc 256
#: / mc 768 1.039-1.052 (docs/benchmarks.md, "Issue 17's products on
#: AVX-512: C after K, matmul 256, M = 1").
_PACK_A_TILES = {("f32", "avx2"): dict(pack_a=True, a_panels=True, kc=256, mc=720, c_after_k=True),
                 ("f32", "avx512"): dict(pack_a=True, a_panels=True)}


def copies_a(element_type: str, isa: str) -> bool:
    """Whether the ``fuelc.pack_a`` matmul on ``element_type`` tiled for
    ``isa`` copies its blocks of A (``_PACK_A_TILES``)."""
    return bool(_PACK_A_TILES.get((element_type, isa), {}).get("pack_a"))


def a_block_rows(element_type: str, isa: str) -> int:
    """The rows of A per block (``mc``) of the ``fuelc.pack_a`` matmul on
    ``element_type`` tiled for ``isa`` where it copies its blocks of A, else 0."""
    if not copies_a(element_type, isa):
        return 0
    return {**_MATMUL_TILES[element_type, isa], **_PER_CALL_TILES.get((element_type, isa), {}),
            **_PACK_A_TILES[element_type, isa]}["mc"]


def k_block_from_zero(element_type: str, isa: str) -> int:
    """The block of K that the ``fuelc.pack_a`` matmul on ``element_type``
    tiled for ``isa`` sums from zero before adding it to C
    (``transforms.matmul.c_after_k``: its ``kc``), else 0 (one chain of FMAs
    over all of K, from C)."""
    tiles = _PACK_A_TILES.get((element_type, isa), {})
    return tiles["kc"] if tiles.get("c_after_k") else 0


#: LLVM's ``tune-cpu`` for the matmul kernels that take it (``matmul_strategy``,
#: ``packed_strategy``: ``_tune_steps``), per (element type, isa): the
#: scheduling model and tuning of that CPU, the target's instructions. On
#: znver3 (the host, target ``cpu``), under LLVM's Zen 3 model
#: (docs/benchmarks.md, "matmul under LLVM's Zen 3 scheduling model"), at two
#: threads 1024^3 and 2048^3 ran 1.14-1.17x the time of the same code built
#: for x86-64-v3 (the same bits), at one thread 1.00-1.03x; scheduled as
#: x86-64-v3's (or Haswell's, or generic) they run even with it. The packed
#: products over B packed at compile time, up to 1.08x (their K loop reloads
#: a spilled address from the stack twice a step under the Zen 3 model), run even
#: (docs/benchmarks.md, "The other hot kernels under LLVM's Zen 3 model"). Not
#: taken where it measured no gap or a loss: ``packed_rows_strategy`` (the Zen
#: 3 model 2-9% faster), the epilogue, conv, stem, attention and row kernels.
#: x86-64-v3 itself is unchanged (its own model).
_MATMUL_TUNE = {("f32", "avx2"): "x86-64-v3"}


def _tune_steps(element_type: str, isa: str) -> tuple[str, ...]:
    """The last strategy step of a kernel scheduled with ``_MATMUL_TUNE``'s
    LLVM model (``py:tune_cpu``), or none."""
    tune = _MATMUL_TUNE.get((element_type, isa), "")
    return (f"py:tune_cpu {tune}",) if tune else ()


def matmul_strategy(op: str, element_type: str, isa: str = "avx2", pack: bool = True,
                    aliased: bool = False, pack_a: bool = False) -> Strategy:
    """The vectorized strategy for ``op`` (``linalg.matmul`` or
    ``linalg.batch_matmul``) on ``element_type`` (``f32``/``f64``), tiled
    for ``isa`` (``avx2`` or ``avx512``); ``pack=False``: B read in place
    (entries marked ``fuelc.unpacked``); ``aliased``: and its rows a multiple
    of 4 KiB apart (``fuelc.aliased_b``, ``_ALIASED_TILES``; with ``pack``,
    17-32 rows: ``_ALIASED_PACKED_TILES``); ``pack_a``: A's
    rows as far apart (``fuelc.pack_a``, ``_PACK_A_TILES``)."""
    from compiler.codegen.cpu.transforms.matmul import matmul_script
    narrow, element_type = element_type, NARROW_TILES.get(element_type, element_type)
    tiles = {**_MATMUL_TILES[element_type, isa],
             **(_PER_CALL_TILES.get((element_type, isa), {}) if pack else {}),
             **((_ALIASED_TILES if not pack else _ALIASED_PACKED_TILES).get((element_type, isa), {})
                if aliased else {}),
             **(_PACK_A_TILES.get((element_type, isa), {}) if pack_a else {})}
    panels = tiles.pop("a_panels", False) and tiles.get("pack_a")
    c_after = tiles.pop("c_after_k", False)
    prefetch = tiles.pop("prefetch", 0)
    vector_copy = tiles.pop("vector_copy", 0)
    script = matmul_script(op, pack=pack, **tiles)
    steps = (script, *((f"py:pack_a_panels {tiles['mr']}",) if panels else ()),
             *(("py:c_after_k",) if c_after else ()),
             *((f"py:prefetch_copy_rows {prefetch}",) if prefetch else ()),
             *((f"py:vector_copy_rows {vector_copy}",) if vector_copy else ()),
             *(("py:sink_hoisted_deallocs",) if tiles.get("pack_a") or tiles.get("nb") else ()),
             *_tune_steps(element_type, isa))
    return Strategy(
        name=f"matmul-{'' if pack else 'unpacked-'}{op.split('.')[1]}-{narrow}-"
             f"{tiles['mr']}x{tiles['nr']}" + (f"-k{tiles['kc']}" if aliased else "")
             + ("-pack-a" if tiles.get("pack_a") else "") + ("-panels" if panels else "")
             + (f"-b{tiles['nb']}" if tiles.get("nb") else "") + (f"-pf{prefetch}" if prefetch else "")
             + ("-vc" if vector_copy else ""),
        transform=steps if len(steps) > 1 else script,
        lowering=VECTOR_LOWERING,
        doc="register-tiled matmul: B panels " + ("packed" if pack else "read in place")
            + ", mr x nr FMA micro-kernel, peeled remainders; any sizes and strides")


def _matmul_rule(op: str, elt: str) -> Callable[[frozenset[str]], bool]:
    others = frozenset(o for o in _MATMUL_OPS if o != op)

    def rule(names: frozenset[str]) -> bool:
        # Only when it is the one contraction in the module, its type matches (a
        # module mixing element types keeps the loops) and its dims are dynamic
        # (transform.loop.peel fails on a statically divisible loop).
        return (f"{op}:{elt}:dynamic" in names and not (others & names)
                and not any(n.split(":")[1] != elt for n in names if n.startswith(op + ":")))
    return rule


#: The feature of an entry whose matmul calls have few rows (``family.FEW_ROWS_ATTR``).
FEW_ROWS = "fuelc.few_rows"
#: The feature of an unpacked matmul entry whose B rows fall in few cache sets
#: (``family.ALIASED_ATTR``).
ALIASED = "fuelc.aliased_b"
#: The feature of a packed matmul entry that copies its blocks of A (``family.PACK_A_ATTR``).
PACK_A = "fuelc.pack_a"


#: The few-rows tiles (``transforms.matmul.rows_script``): 1 row x ``nr`` columns
#: (two vectors) x ``kr`` steps of K. Measured on [4,2304]x[2304,256] (a ResNet
#: stage-4 conv at 2x2 pixels, batch 1) on 2 znver3 threads: 0.19-0.21 ms, vs
#: 0.23-0.28 ms for loops M, K, N vectorized by LLVM (B read once per row) and
#: 0.15 ms for numpy; [1,768]x[768,3072] one thread: 0.17-0.2 ms, numpy 0.19.
#: f32 ``kr`` = 8: each C tile is loaded and stored once per 8 FMAs per vector,
#: not 4 (one znver4 thread, thread time, min of 60-100 calls, B an input, 4
#: A/B process pairs: [1,768]x[768,3072] AVX2 0.153-0.157 -> 0.142-0.151 ms,
#: AVX-512 0.156-0.162 -> 0.149-0.164; [2,768]x[768,3072] 0.271-0.279 ->
#: 0.257-0.268, AVX-512 0.290-0.300 -> 0.275-0.292; [4,2304]x[2304,256] even;
#: 16 steps ran 2-2.5x slower).
_FEW_ROWS_TILES = {("f32", "avx2"): dict(nr=16, kr=8), ("f64", "avx2"): dict(nr=8, kr=4),
                   ("f32", "avx512"): dict(nr=32, kr=8), ("f64", "avx512"): dict(nr=16, kr=4)}


def rows_strategy(op: str, element_type: str, isa: str = "avx2") -> Strategy:
    """The strategy of a matmul entry whose calls have at most
    ``family.FEW_ROWS`` rows: B read in place (no packing), once per call,
    ``kr`` rows at a time for every row of A."""
    from compiler.codegen.cpu.transforms.matmul import rows_script
    tiles = _FEW_ROWS_TILES[NARROW_TILES.get(element_type, element_type), isa]
    return Strategy(
        name=f"matmul-rows-{op.split('.')[1]}-{element_type}-{tiles['nr']}x{tiles['kr']}",
        transform=rows_script(op, **tiles), lowering=VECTOR_LOWERING,
        doc="a matmul of few rows: 1 x nr x kr FMA tiles in loop order K, M, N over "
            "B in place (unpacked); K remainder as FMA tiles, N remainder as loops of contractible "
            "multiply-adds (FMAs)")


def _rows_rule(op: str, elt: str) -> Callable[[frozenset[str]], bool]:
    rule = _matmul_rule(op, elt)
    return lambda names: FEW_ROWS in names and rule(names)


#: The direct convolution's register tiles (``transforms.conv``): ``mr`` output
#: channels x ``nr`` output pixels, as the matmul's (``_MATMUL_TILES``); a
#: depthwise generic (a block of channels, each reading its own plane) is tiled
#: 1 x ``nr1``: 8 accumulators on AVX2 (MobileNetV2 batch 8 on x86-64-v3: each
#: depthwise layer 1-7% faster than with 4), 4 on AVX-512 (8 were no faster at
#: 56^2, 3x slower at 14^2). ``lanes``: a vector's elements; ``dw_accs``: the
#: accumulators of a ``depthwise_rows`` block (12 on AVX2 spilled: 3x3 x32 at
#: 56^2 and x144 at 28^2, batch 8, 1.9x and 1.7x slower than 8). ``accs``,
#: ``regs``: the accumulators of a ``direct_rows`` tile and the vector
#: registers its live values must fit in (docs/architecture.md). ``least``:
#: a remainder of fewer output channels is tiled with the last whole tile as
#: two halves (``transforms.conv.last_blocks``: AVX2 f32, 32 channels as 4 x 6
#: + 2 x 4, not 5 x 6 + 2, whose 4 accumulators wait on the FMA latency).
_CONV_TILES = {("f32", "avx2"): dict(mr=6, nr=16, nr1=64, lanes=8, dw_accs=8, accs=12, regs=16,
                                     least=3),
               ("f64", "avx2"): dict(mr=6, nr=8, nr1=32, lanes=4, dw_accs=8, accs=12, regs=16),
               ("f32", "avx512"): dict(mr=8, nr=32, nr1=64, lanes=16, dw_accs=16, accs=24, regs=32),
               ("f64", "avx512"): dict(mr=8, nr=16, nr1=32, lanes=8, dw_accs=16, accs=24, regs=32)}
#: The feature of a module holding a direct-convolution generic.
DIRECT_CONV = "fuelc.direct_conv"
#: LLVM's ``tune-cpu`` (its scheduling model; the instructions stay the
#: target's) for a direct conv whose channel loop is one unrolled block of
#: taps held in registers: ``direct_rows`` tiles and stacked stride phases
#: (``transforms.conv.direct_rows``), per (element type, isa). In that block
#: (3x3: 108 FMAs into 12 accumulators) LLVM's pre-RA scheduler with the
#: Haswell model (x86-64-v3's) and the Zen 3 one (znver3's) hoisted the next
#: taps' loads and spilled ymm registers (stacked 3x3 s2 of 8 to 128
#: channels: 2-16 spill stores a pass), at a cost that moved from one process
#: to the next with the stack's address. Zen 4's model (as Ice Lake's or Alder
#: Lake's; not Zen 2's) spilled none there. One thread, thread time: 3x3 s2
#: 128->256 28^2 1.48-2.10 -> 1.40 ms on both targets; row tiles of 64->64 at
#: 8^2, batch 8, on znver3 0.44-0.86 -> 0.41 (x86-64-v3 0.41 either way).
#: The flat tiles of wide images keep the target's model (Zen 4's made 3x3
#: 64->64 56^2 2% slower on x86-64-v3), and so do depthwise blocks.
#: AVX-512 (32 registers) and f64: unmeasured, the target's.
_BLOCK_TUNE = {("f32", "avx2"): "znver4"}


def conv_strategy(element_type: str, isa: str = "avx2") -> Strategy:
    """The direct convolution (``transforms.conv``) on ``element_type``
    (f32/f64), tiled for ``isa``."""
    from compiler.codegen.cpu.transforms.conv import conv_scripts
    tiles = _CONV_TILES[element_type, isa]
    return Strategy(
        name=f"conv-direct-{element_type}-{tiles['mr']}x{tiles['nr']}",
        transform=conv_scripts(**tiles, tune=_BLOCK_TUNE.get((element_type, isa), "")),
        lowering=VECTOR_LOWERING,
        doc="direct convolution on the flat padded input: mr channels x nr pixels "
            "FMA tiles over (c, kh, kw), no im2col, no packing")


#: The register tiles of a matmul with its epilogue (``transforms.matmul.
#: epilogue_script``): ``mr`` rows x ``nr`` columns, 8 accumulator registers
#: (enough to cover the FMA latency). ``mr`` divides the channel counts CNNs
#: use (the kernel is only chosen for multiples of 8: a masked row remainder
#: ran at 10 GFLOP/s); ``nr`` is one or two vectors and a power of two (a
#: 24-wide f32 tile on AVX2 was split into scalar code: 2 GFLOP/s). One znver4
#: core, A/B on the same calls: AVX-512 8x16 ran MobileNet's 1x1 convs as fast
#: as 8x32 on whole tiles and 1.3-1.8x faster where 28^2 or 14^2 pixels leave
#: a partial column tile; AVX2 4x16 as fast as 8x8 or 2x32.
_EPILOGUE_TILES = {("f32", "avx2"): dict(mr=4, nr=16), ("f64", "avx2"): dict(mr=4, nr=8),
                   ("f32", "avx512"): dict(mr=8, nr=16), ("f64", "avx512"): dict(mr=8, nr=8)}
#: The feature of a module holding a matmul with an epilogue (``transforms.matmul.EPILOGUE_ATTR``).
MATMUL_EPILOGUE = "fuelc.mm_epilogue"


#: ``epilogue_strategy``'s tiles for a pointwise conv of a long contraction
#: (``family.LONG_K_ATTR``: 64 input channels or more), where they differ: AVX2
#: f32 6 x 16 (12 accumulators), its rows left over from the 6-row tiles in
#: blocks of 4 and 2 (every Cout is a multiple of 8). Per input channel 2 loads
#: of x and 6 broadcasts feed 12 FMAs, where 4 x 16 had 2 and 4 for 8. The
#: expansions (16 or 24 input channels) ran slower as 6 x 16 (a 4 x 16 tile is
#: mostly its bias, clamp and stores there). One znver3 thread, batch 8, the
#: layer alone, thread time, min of 120 calls, three rounds in turns:
#: MobileNet's 96->24 at 28^2 0.363-0.364 -> 0.328-0.330 ms, 144->24 + skip
#: 0.509-0.517 -> 0.482-0.536; 16->96 + clamp at 56^2 0.95 -> 1.11 (not taken).
_LONG_K_TILES = {("f32", "avx2"): dict(mr=6, nr=16, blocks=(4, 2))}


def epilogue_strategy(element_type: str, isa: str = "avx2", long_k: bool = False) -> Strategy:
    """A matmul whose init (zeros or the bias) and epilogue (activation,
    rounding) run in its register tiles (``transforms.matmul.epilogue_script``;
    ``long_k``: a pointwise conv's long contraction, ``_LONG_K_TILES``)."""
    from compiler.codegen.cpu.transforms.matmul import epilogue_script
    tiles = _EPILOGUE_TILES[element_type, isa]
    if long_k:
        tiles = _LONG_K_TILES.get((element_type, isa), tiles)
    blocks = "".join(f"-{b}" for b in tiles.get("blocks", ()))
    return _fused_on_tensors(
        f"matmul-epilogue-{element_type}-{tiles['mr']}x{tiles['nr']}{blocks}", epilogue_script(**tiles),
        "matmul + epilogue tiled and fused on tensors: mr x nr register tiles whose "
        "accumulators start as the bias and leave through the epilogue; B read in "
        "place, K whole; partial column tiles masked, left-over rows 1 x nr tiles")


def _fused_on_tensors(name: str, tensor_transform, doc: str, prefetch: bool = False) -> Strategy:
    """A strategy whose kernel is tiled and vectorized on tensors; after
    bufferization its vectors are lowered (``epilogue_lowering_script``;
    ``prefetch``: then ``transforms.matmul.prefetch_next_panel``)."""
    from compiler.codegen.cpu.transforms.matmul import epilogue_lowering_script
    lower = epilogue_lowering_script()
    return Strategy(name=name, tensor_transform=tensor_transform,
                    transform=(lower, "py:prefetch_next_panel") if prefetch else lower,
                    lowering=VECTOR_LOWERING, doc=doc)


def _register_per_element_type(feature: "str | tuple[str, ...]", make,
                               elts: tuple[str, ...] = ("f32", "f64")) -> None:
    """``make(element type, isa)`` for the generics of ``elts`` (default
    f32/f64; the first listed wins where a module has generics of several)
    of a module with ``feature`` (or every feature of a tuple)."""
    features = (feature,) if isinstance(feature, str) else feature
    for elt in elts:
        v = {isa: make(elt, isa) for isa in ("avx512", "avx2")}
        register_strategy((lambda e: lambda names: all(f in names for f in features)
                           and f"linalg.generic:{e}" in names)(elt), {**v, "": v["avx2"]})


#: The kernels over a packed B (``packed_strategy``, ``packed_epilogue_strategy``)
#: that prefetch the next panel of B (``transforms.matmul.prefetch_next_panel``):
#: f32. One znver4 thread, thread time, min of 30 calls, A/B process pairs:
#: ``encoder.py --model onnx`` 6 layers b1 (weights cold from L3, as in a
#: model), steps summed, AVX2: FFN down and output products 11.9-12.0 -> 11.0
#: ms, q/k/v 7.3 -> 6.6-6.7, FFN up + GELU 10.3-10.6 -> 9.6-9.9, the model
#: 31.4-32.3 -> 29.6-30.0 (the plain products alone prefetching); AVX-512: the products
#: 26.3 -> 25.8-26.1, the model 28.5-29.3 -> 28.3-28.4; 1 layer b8 even
#: (AVX2 39.4-39.5 -> 38.7-38.8, AVX-512 38.9-39.3 -> 39.3-39.6 whole, the
#: products 36.1-37.1 -> 35.1-35.7). 8 [M,768]x[768,3072] / [M,3072]x[3072,768]
#: linears in a row (75 MiB of weights): AVX2 M = 32 14.3-15.1 -> 12.5-12.8,
#: M = 24 11.8 -> 9.2-9.4; AVX-512 M = 32 11.4-11.5 -> 11.1-11.2, M = 128
#: 44.5-45.1 -> 43.3-43.5. To L1 (locality 3) instead of L2: no gain (AVX2).
_PACKED_PREFETCH = {("f32", "avx2"), ("f32", "avx512")}

#: The register tiles of ``packed_epilogue_strategy``: one panel wide (``nr``
#: of ``_MATMUL_TILES``); AVX2 f32 6 x 16 (12 accumulators, as the plain
#: packed product), the rows left over in ``_PACKED_EPILOGUE_BLOCKS``. An
#: earlier measurement had the erf's temporaries beside 12 accumulators spill
#: ([1024,256]x[256,1024] + erf GELU: 6x16 8.7, 9.1 ms against 4x16 6.9, 6.8);
#: with today's erf (``fastmath``) it does not: one znver4 thread, thread time,
#: min of 60 calls, two A/B process pairs, 4x16 -> 6x16 with the blocks:
#: [128,384]x[384,1536] 1.618, 1.641 -> 1.542, 1.515 ms, [1024,384]x[384,1536]
#: 14.4, 14.3 -> 12.7, 13.5, [50,256]x[256,1024] 0.32 -> 0.29, 33 rows even
#: (docs/architecture.md, "GELU epilogue"). AVX-512 8x32 and 8x16 were even.
_PACKED_EPILOGUE_TILES = {("f32", "avx2"): dict(mr=6, nr=16), ("f64", "avx2"): dict(mr=4, nr=8),
                          ("f32", "avx512"): dict(mr=8, nr=32),
                          ("f64", "avx512"): dict(mr=8, nr=16)}
#: ``packed_epilogue_strategy``'s tiles for calls of at most
#: ``family.UNPACKED_ROWS`` rows (entries marked ``fuelc.unpacked``), where they
#: differ: AVX2 f32 4 x 16, so 8 or 32 rows are whole tiles; as 6-row tiles the
#: rows left over run as single rows (``epilogue_script``), one znver4 thread,
#: [M,768]x[768,3072] + erf GELU, min, 4x16 against 6x16: M = 5 0.37 against
#: 0.84 ms, 8 0.40 against 0.61-0.63, 10 0.74-0.75 against 1.03-1.06, 32
#: 1.84-1.90 against 1.94-2.05 (3 rows even, 0.50-0.51).
_PACKED_EPILOGUE_DOZEN = {("f32", "avx2"): dict(mr=4, nr=16)}
#: ``packed_epilogue_strategy``'s tiles where the epilogue computes an exp
#: (the feature ``math.exp``: the tanh GELU, ``x / (1 + exp(-2u))``), where
#: they differ: AVX-512 f32 4 x 32. Beside 16 accumulators, 8 broadcasts of A
#: and 2 vectors of B, the exp's ~17 constants (hoisted out of the tile loops)
#: made LLVM spill accumulators in the K loop of the tiles after the first
#: ``_PACKED_EPILOGUE_MC``-row block (every tile of a call of fewer rows): a
#: load and a store per FMA. One znver5 thread, thread time, median of 500
#: calls, [M,256]x[256,1024] + tanh GELU, 8 x 32 -> 4 x 32: M = 8 40.9 -> 25.5
#: us, 32 204 -> 92, 128 417 -> 345 (the erf GELU at 8 x 32: 23.4, 81, 308;
#: 4 x 32 is slower there).
_PACKED_EPILOGUE_EXP = {("f32", "avx512"): dict(mr=4, nr=32)}
#: The row blocks of ``packed_epilogue_strategy``'s rows left over from its
#: ``mr``-row tiles, before single rows (``epilogue_script``'s ``blocks``), per
#: (element type, ISA, mr): a single row is one chain of dependent FMAs per
#: vector. Left single, the rows past the 6-row tiles made 6 x 16 slower than
#: 4 x 16 at 33 and 65 rows (0.213 -> 0.230, 0.39 -> 0.43 ms at
#: [M,256]x[256,1024]). One znver4 thread, thread time, min of 60 calls, two
#: A/B process pairs, single rows -> blocks, + erf GELU: AVX2 4 x 16
#: [M,768]x[768,3072] M = 2 0.338 -> 0.182 ms, 3 0.50 -> 0.345, 7 0.69-0.70 ->
#: 0.54, 30 1.67-1.69 -> 1.53, [10,256]x[256,1024] 0.095 -> 0.078; AVX-512 8 x 32
#: [7,768]x[768,3072] 0.63-0.67 -> 0.374, [38,768]x[768,3072] 1.88-1.91 -> 1.64,
#: [134,384]x[384,1536] 1.54-1.55 -> 1.49-1.50, [50,256]x[256,1024] 0.276 ->
#: 0.268, 128 rows (no rows left over) even.
_PACKED_EPILOGUE_BLOCKS = {("f32", "avx2", 6): (4, 2), ("f32", "avx2", 4): (2,),
                           ("f32", "avx512", 8): (4, 2), ("f32", "avx512", 4): (2,)}
#: Rows of A per block of ``packed_epilogue_strategy`` (a multiple of every
#: ``mr``): the block (96 x 768 f32: 288 KiB) stays in L2 while the panels pass.
#: AVX-512 as above, minima: no block 5.66, 6.00 ms; 96 rows 5.62, 5.59; 192
#: rows 5.79, 5.75.
_PACKED_EPILOGUE_MC = 96


def packed_epilogue_strategy(element_type: str, isa: str = "avx2", dozen: bool = False,
                             exp: bool = False) -> Strategy:
    """A FusedLinear with an activation over a pre-packed B
    (``lowering.fused_forward._linear_epilogue``): ``epilogue_script`` with
    ``_PACKED_EPILOGUE_TILES`` (one panel wide; ``dozen``: calls of at most
    ``family.UNPACKED_ROWS`` rows, ``_PACKED_EPILOGUE_DOZEN``; ``exp``: an
    epilogue computing an exp, ``_PACKED_EPILOGUE_EXP``), blocks of
    ``_PACKED_EPILOGUE_MC`` rows first."""
    from compiler.codegen.cpu.transforms.matmul import epilogue_script
    tiles = dict(_PACKED_EPILOGUE_TILES[element_type, isa])
    if dozen:
        tiles.update(_PACKED_EPILOGUE_DOZEN.get((element_type, isa), {}))
    if exp:
        tiles.update(_PACKED_EPILOGUE_EXP.get((element_type, isa), {}))
    mr, nr = tiles["mr"], tiles["nr"]
    prefetch = (element_type, isa) in _PACKED_PREFETCH
    return _fused_on_tensors(
        f"matmul-packed-epilogue-{element_type}-{mr}x{nr}",
        epilogue_script(mr=mr, nr=nr, mc=_PACKED_EPILOGUE_MC,
                        blocks=_PACKED_EPILOGUE_BLOCKS.get((element_type, isa, mr), ())),
        "matmul over B packed at compile time + its epilogue, tiled and fused on tensors: "
        "mr x nr (one panel) register tiles from zero over all of K, the bias and "
        "activation in the registers, the output stored once", prefetch)


# the most specific first: an exp epilogue of few rows, an exp epilogue, few rows, any
for _exp, _dozen in ((True, True), (True, False), (False, True), (False, False)):
    _register_per_element_type(
        (MATMUL_EPILOGUE, "fuelc.packed_b") + (("math.exp",) if _exp else ())
        + (("fuelc.unpacked",) if _dozen else ()),
        functools.partial(packed_epilogue_strategy, dozen=_dozen, exp=_exp))
#: The feature of a pointwise conv's long contraction (``family.LONG_K_ATTR``).
LONG_K = "fuelc.long_k"
_register_per_element_type((MATMUL_EPILOGUE, LONG_K), functools.partial(epilogue_strategy, long_k=True))
_register_per_element_type(MATMUL_EPILOGUE, epilogue_strategy)
#: The register tiles of a stem (``transforms.stem``): the epilogue's, but 6
#: rows on AVX2 (12 accumulators; with 8, each tap's FMAs waited on the
#: previous tap's: 7x7 3->64 at 224^2 on one znver4 core, fastest calls, 2.96
#: -> 2.43 ms; the direct kernel took 2.58). AVX-512 8x32 ran MobileNet's
#: 56-wide rows as a 32 + 24 split into shuffles (0.47 -> 4.7 ms). AVX-512
#: f32 16 x 16 (16 accumulators; 8 x 16 was no faster overall on znver4):
#: one Zen 5 thread, thread time, min of 60 calls in turns, 7x7 3->64 at
#: 224^2 1.16-1.17 -> 1.06-1.07 ms (2 threads 0.60 -> 0.55), 3x3 3->32
#: 0.143 -> 0.131-0.135, 3x3 3->48 0.200 -> 0.197; the pointwise convs of
#: 14^2 and 7^2 pixels (this schedule, ``fused_conv._pointwise_row``) 6-12%
#: faster: 1x1 576->96 at 14^2 0.118-0.122 -> 0.105-0.109, 96->576 0.125-0.127
#: -> 0.115-0.116, 960->160 at 7^2 0.098-0.101 -> 0.088-0.090, 240->40 at 14^2
#: (a peeled 8-row tile) 0.023 -> 0.021.
_STEM_TILES = {**_EPILOGUE_TILES, ("f32", "avx2"): dict(mr=6, nr=16),
               ("f64", "avx2"): dict(mr=6, nr=8), ("f32", "avx512"): dict(mr=16, nr=16)}
#: A stem whose epilogue is an erf GELU (the feature ``math.erf``: wav2vec2's
#: first conv): on AVX-512 4 x 16, the erf's temporaries beside 8 accumulators
#: of 8 x 16 made it slower than the conv and a GELU kernel. 1->128 k10 s5 at
#: 8000, batch 8, one znver4 thread, fastest calls, five rounds in turns: two
#: kernels 1.168-1.181 ms, 8 x 16 1.181-1.295, 4 x 16 1.161-1.173.
_STEM_ERF_TILES = {**_STEM_TILES, ("f32", "avx512"): dict(mr=4, nr=16)}
#: The feature of a module holding a stem convolution (``family.STEM_ATTR``).
STEM = "fuelc.stem"


def stem_strategy(element_type: str, isa: str = "avx2", erf: bool = False) -> Strategy:
    """A stem convolution (``transforms.stem``): the matmul-epilogue tiles,
    all taps accumulated in registers, the bias and activation applied there
    (``erf``: a GELU epilogue's tiles, ``_STEM_ERF_TILES``)."""
    from compiler.codegen.cpu.transforms.stem import stem_scripts
    tiles = (_STEM_ERF_TILES if erf else _STEM_TILES)[element_type, isa]
    return _fused_on_tensors(
        f"conv-stem-{element_type}-{tiles['mr']}x{tiles['nr']}", stem_scripts(**tiles),
        "stem convolution (few input channels, stride 2) tiled and fused on tensors: "
        "mr channels x nr columns register tiles over every tap of the stacked stride "
        "phases; bias and activation in the registers, the output stored once")


_register_per_element_type((STEM, "math.erf"), lambda e, i: stem_strategy(e, i, erf=True))
_register_per_element_type(STEM, stem_strategy)
#: The feature of a module holding a FusedLinear over a pre-packed B (``family.PACKED_B_ATTR``).
PACKED_B = "fuelc.packed_b"
#: The feature of a matmul entry whose calls have a few dozen rows (``family.UNPACKED_ATTR``).
UNPACKED = "fuelc.unpacked"


#: ``packed_strategy``'s tiles for calls of more than ``family.FEW_ROWS`` and
#: at most ``family.UNPACKED_ROWS`` rows (entries marked ``fuelc.unpacked``),
#: where they differ from ``_MATMUL_TILES``. AVX2 f32: a 4 x 16 register tile
#: (8 accumulators, as the packed epilogue's) instead of 6 x 16, so 8 or 32
#: rows are whole tiles, not 6-row tiles and a 2-row remainder of 4
#: accumulators (too few to cover the FMA latency). One znver4 thread, B
#: packed, min of 210 calls, 3 A/B rounds: [8,320]x[320,1008] 0.070-0.087 ->
#: 0.061-0.065 ms, [8,768]x[768,3072] 0.46-0.51 -> 0.41-0.43, [32,768]x
#: [768,3072] 1.63-2.23 -> 1.57-1.78; at 128 rows even (6.5-7.0 ms), at 512
#: 2-4% slower, so larger calls keep 6 x 16. kc = 1024 (f32): with so few
#: rows the block of A is small, and one K block reads each panel once, in
#: order, and loads and stores each C tile once (2 A/B rounds, AVX2 / AVX-512:
#: [8,768]x[768,3072] 0.415-0.429 -> 0.378-0.381 / 0.344 -> 0.338-0.340 ms,
#: [32,768]x[768,3072] 1.78-2.21 -> 1.52-1.58 / 1.370 -> 1.324-1.334; AVX2
#: [8,320]x[320,1000] with caches flushed 0.209-0.218 -> 0.130-0.177).
_PACKED_DOZEN = {("f32", "avx2"): dict(mr=4, kc=1024), ("f32", "avx512"): dict(kc=1024)}


#: The feature of a packed FusedLinear of a short K (``family.SHORT_K_ATTR``).
SHORT_K = "fuelc.short_k"
#: ``packed_strategy``'s tiles for a K of at most ``family.SHORT_K_MAX`` (entries
#: marked ``SHORT_K``), where they differ: AVX2 f32 kc = 1024, all of K in
#: one block, so each 6 x 16 output tile is loaded and stored once instead
#: of once per 256 of K. The same FMAs in the same order: the same bits
#: (docs/benchmarks.md, "Packed products of short K in one block").
_PACKED_SHORT_K = {("f32", "avx2"): dict(kc=1024)}


def short_k_differs(element_type: str, isa: str, k: int) -> bool:
    """Whether ``packed_strategy(short_k=True)`` walks a K of ``k`` in other
    blocks than the plain packed kernel: where ``_PACKED_SHORT_K`` has a kc
    and ``k`` is past one plain block and within one of its (AVX2 f32: 256 <
    k <= 1024). Elsewhere the short-K class would be the same code under
    another attribute (``family.SHORT_K_ATTR``)."""
    element_type = NARROW_TILES.get(element_type, element_type)
    short = _PACKED_SHORT_K.get((element_type, isa))
    return bool(short) and _MATMUL_TILES[element_type, isa]["kc"] < k <= short["kc"]


def packed_strategy(element_type: str, isa: str = "avx2", dozen: bool = False,
                    short_k: bool = False) -> Strategy:
    """A FusedLinear whose B was packed at compile time into panels of the
    matmul's ``nr`` columns (``transforms.matmul.packed_script``): the
    matmul's register tiles over contiguous panels, nothing packed per call.
    ``dozen``: for calls of a few dozen rows (``_PACKED_DOZEN``); ``short_k``:
    a K of at most ``family.SHORT_K_MAX`` (``_PACKED_SHORT_K``). Scheduled
    with ``_MATMUL_TUNE``'s LLVM model where it has one. bf16/f16 (panels of
    bf16/f16 into an f32 accumulator): everything of f32's (``NARROW_TILES``)."""
    from compiler.codegen.cpu.transforms.matmul import packed_script
    narrow, element_type = element_type, NARROW_TILES.get(element_type, element_type)
    tiles = dict(_MATMUL_TILES[element_type, isa])
    if dozen:
        tiles.update(_PACKED_DOZEN.get((element_type, isa), {}))
    short = short_k and (element_type, isa) in _PACKED_SHORT_K
    if short:
        tiles.update(_PACKED_SHORT_K[element_type, isa])
    prefetch = (element_type, isa) in _PACKED_PREFETCH
    return Strategy(
        name=f"matmul-packed-b-{narrow}-{tiles['mr']}x{tiles['nr']}" + ("-short-k" if short else ""),
        transform=(*packed_script(**tiles, prefetch=prefetch), *_tune_steps(element_type, isa)),
        lowering=VECTOR_LOWERING,
        doc="register-tiled matmul over B packed at compile time ([N/nr, K, nr] panels): "
            "mr x nr FMA micro-kernel, remainder rows 1 x nr, no packing per call")


def packed_rows_strategy(element_type: str, isa: str = "avx2") -> Strategy:
    """``packed_strategy`` for calls of at most ``family.FEW_ROWS`` rows
    (``transforms.matmul.packed_rows_script``)."""
    from compiler.codegen.cpu.transforms.matmul import packed_rows_script
    tiles = _MATMUL_TILES[NARROW_TILES.get(element_type, element_type), isa]
    return Strategy(
        name=f"matmul-packed-b-rows-{element_type}-4x{tiles['nr']}",
        transform=packed_rows_script(), lowering=VECTOR_LOWERING,
        doc="a matmul of few rows over B packed at compile time: blocks of 4, 3 and 2 "
            "rows as rows x nr FMA tiles (B read once per block), a single row as 4 "
            "panels x 1 row x nr tiles (the panels unrolled)")


def packed_panel(element_type: str, isa: str) -> int:
    """The panel width of a B packed for ``packed_strategy`` (its ``nr``)."""
    return _MATMUL_TILES[NARROW_TILES.get(element_type, element_type), isa]["nr"]


# bf16/f16 first: their modules also hold an f32 generic (the rounding to
# bf16/f16). f32 x bf16 (an f32 a over bf16 panels) is an f32 module.
_PACKED_TYPES = (*NARROW_TILES, "f32", "f64")
_register_per_element_type((PACKED_B, FEW_ROWS), packed_rows_strategy, _PACKED_TYPES)
_register_per_element_type((PACKED_B, UNPACKED),
                           lambda elt, isa: packed_strategy(elt, isa, dozen=True), _PACKED_TYPES)
_register_per_element_type((PACKED_B, SHORT_K), functools.partial(packed_strategy, short_k=True),
                           _PACKED_TYPES)
_register_per_element_type(PACKED_B, packed_strategy, _PACKED_TYPES)
_register_per_element_type(DIRECT_CONV, conv_strategy)
for _op in _MATMUL_OPS:
    for _elt in _MATMUL_TYPES:
        _v = {isa: rows_strategy(_op, _elt, isa) for isa in ("avx512", "avx2")}
        register_strategy(_rows_rule(_op, _elt), {**_v, "": _v["avx2"]})
#: The matmul variants, first match first: the features an entry must carry
#: (``linalg_op_names``) and the ``matmul_strategy`` options they select.
_MATMUL_VARIANTS = (((UNPACKED, ALIASED), dict(pack=False, aliased=True)),
                    ((UNPACKED,), dict(pack=False)),
                    ((ALIASED,), dict(aliased=True)),
                    ((PACK_A,), dict(pack_a=True)),
                    # below AVX2 (no FMA) the avx2 tiles still vectorize, with SSE
                    ((), {}))
for _features, _options in _MATMUL_VARIANTS:
    for _op in _MATMUL_OPS:
        # bf16/f16: the f32 rules of B read in place or packed (aliased rows and
        # copies of A measured on f32 rows only)
        for _elt in _MATMUL_TYPES if not {ALIASED, PACK_A} & set(_features) else ("f32", "f64"):
            _v = {isa: matmul_strategy(_op, _elt, isa, **_options) for isa in ("avx512", "avx2")}
            register_strategy((lambda rule, fs: lambda names: all(f in names for f in fs)
                               and rule(names))(_matmul_rule(_op, _elt), _features),
                              {**_v, "": _v["avx2"]})

# last: a kernel with linalg ops of its own takes their strategy
register_strategy(lambda names: VECTOR_OPS in names and ROLLED in names, VECTORIZED_ROLLED)
register_strategy(lambda names: VECTOR_OPS in names, VECTORIZED)
register_strategy(lambda names: ROLLED in names, LOOPS_ROLLED)


__all__ = ["Strategy", "LOOPS", "COPIES", "COPIES_ONLY", "LOOPS_LOWERING", "VECTOR_LOWERING", "ISA_LEVELS",
           "register_strategy", "select_strategy", "isa_level", "matmul_strategy"]


def rules_fingerprint() -> str:
    """A digest of the registered strategy rules (the key of "auto" choice)."""
    h = hashlib.sha256(LOOPS.fingerprint.encode())
    for _, variants in _RULES:
        for level in sorted(variants):
            h.update(f"{level}={variants[level].fingerprint}".encode())
    return h.hexdigest()[:16]
