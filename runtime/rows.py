"""Matmul row classes (``docs/dynamic-shapes.md``): how many rows of A a
matmul call has decides which kernel variant runs it (the row kernel, the
tiled kernel reading B in place, or the packed tiled kernel). The compiler's
kernel families (``compiler.codegen.family``) choose an instance with these
rules, and a symbolic ``.fuel`` file (``runtime.symbolic``) picks the exported
object of a call's class with the same rules at run time."""
from __future__ import annotations

from typing import Sequence

#: The most rows (M) a matmul call may have to get the row kernel. The tiled
#: kernel packs all of B on every call, which for a few rows costs more than
#: the product; the row kernel reads B in place, once per call. One znver3
#: core, constant B, rows vs tiled: [1,768]x[768,3072] 0.20-0.23 vs 1.9-2.1 ms,
#: [4,768]x[768,3072] 0.73-0.84 vs 1.7-1.9 ms, [4,2304]x[2304,256] 0.20 vs
#: 0.17-0.20; at 8 and 16 rows the tiled kernel was the faster or even (with a
#: 4x16 register tile, measured while it was tried: [8,768]x[768,3072] 1.3-1.5
#: vs 1.0-1.4 ms, [16,768]x[768,768] 0.71 vs 0.33-0.47 ms).
FEW_ROWS = 4


def few_rows(a_shape: Sequence[int], unit_stride: Sequence[int], out_arg: int) -> bool:
    """Whether a matmul call with A of shape ``a_shape`` takes the row kernel:
    at most ``FEW_ROWS`` rows, and B (argument 1) and the output (argument
    ``out_arg``) with unit-stride rows."""
    return (len(a_shape) >= 2 and a_shape[-2] <= FEW_ROWS and 1 in unit_stride
            and out_arg in unit_stride)


#: Up to this many rows, packing B costs more than its contiguous panels save.
#: One znver4 core, f32, packed vs unpacked (B constant, same run): [8,768]x
#: [768,768] 0.144 vs 0.088 ms, [32,256]x[256,1024] 0.203 vs 0.160,
#: [32,1024]x[1024,256] 0.176 vs 0.149; [64,768]x[768,3072] even (3.78 ms);
#: [128,256]x[256,1024] 0.67 vs 0.64 but with the AVX2 tile 0.77 vs 0.93, and
#: [512,768]x[768,3072] 28.6 vs 48.5 ms (AVX2): larger calls keep the packing.
UNPACKED_ROWS = 32


#: Above this many rows, a B whose rows are ``aliased_rows`` apart is packed
#: after all. Each ``mr``-row tile reads the ``nr`` columns of B it multiplies
#: once more, and at a row pitch of 8 or 12 KiB (N = 2048, 3072 f32) those
#: passes came from beyond the L2 (they fall in few cache sets), by the
#: process's luck with huge pages: one znver4 thread, thread time, B an input,
#: [32,768]x[768,3072] AVX2 1.09-1.34x numpy's time in place, 0.96-1.07
#: packed; [17,768]x[768,3072] 1.44-1.48 -> 0.95 (AVX-512 0.98-1.23 ->
#: 0.75-0.85); [32,768]x[768,2048] 1.18 -> 1.03 (1.24 -> 0.89). At 16 rows and
#: fewer the packing still cost more ([16,768]x[768,3072] AVX2 0.88 in place,
#: 0.99 packed), and at a pitch of 1024 (N = 1024) or 1536 in place stayed
#: the faster or even ([32,1024]x[1024,1024] AVX-512 0.60-0.78 vs 0.75-0.81).
ALIASED_ROWS = 16


def aliased_rows(b_row_stride: int) -> bool:
    """Whether rows of B this many elements apart fall in few cache sets:
    at least 2048 elements apart, a multiple of 1024 (``ALIASED_ROWS``)."""
    return b_row_stride >= 2048 and b_row_stride % 1024 == 0


def aliased_unpacked(a_shape: Sequence[int], unit_stride: Sequence[int], out_arg: int,
                     b_row_stride: int) -> bool:
    """Whether a matmul call reads B in place (``unpacked_rows``: 5 to
    ``ALIASED_ROWS`` rows here) with B's rows ``aliased_rows`` apart: its
    kernel (``ALIASED_ATTR``) walks K in blocks of a few rows and the rows
    in blocks of 8, so that the rows of B and C a block touches fit in the
    few L1 sets they fall in (``codegen.cpu.strategy``'s ``_ALIASED_TILES``).
    The same rows and strides as the class ``unpacked`` (``row_class``): one
    kernel per class, as a symbolic ``.fuel`` file needs."""
    return (unpacked_rows(a_shape, unit_stride, out_arg, b_row_stride)
            and aliased_rows(b_row_stride))


def aliased_packed(a_shape: Sequence[int], unit_stride: Sequence[int], out_arg: int,
                   b_row_stride: int) -> bool:
    """Whether a matmul call of the packed class has more than
    ``ALIASED_ROWS`` and at most ``UNPACKED_ROWS`` rows, B's rows
    ``aliased_rows`` apart, and B and the output with unit-stride rows: its
    kernel (``ALIASED_ATTR`` without ``UNPACKED_ATTR``) copies B a block of
    rows x some hundred columns at a time, whole row segments in order, not a
    panel of 16 columns (one cache line a row, every row in another page) at
    a time (``codegen.cpu.strategy``'s ``_ALIASED_PACKED_TILES``). It paid
    at 40 rows as well (one znver3 thread, [40,768]x[768,3072] + bias 1.23-1.25
    -> 1.09-1.13x numpy's time, 48 rows mixed), but a symbolic file samples
    the packed class at 33 and 40 rows (``compiler.export_symbolic``): the
    packed class keeps those."""
    rows = a_shape[-2] if len(a_shape) >= 2 else 0
    return (ALIASED_ROWS < rows <= UNPACKED_ROWS and aliased_rows(b_row_stride)
            and 1 in unit_stride and out_arg in unit_stride)


def aliased_b(a_shape: Sequence[int], unit_stride: Sequence[int], out_arg: int,
              b_row_stride: int) -> bool:
    """Whether a matmul call's kernel is the one for B rows in few cache sets
    (``ALIASED_ATTR``): ``aliased_unpacked`` or ``aliased_packed``."""
    return (aliased_unpacked(a_shape, unit_stride, out_arg, b_row_stride)
            or aliased_packed(a_shape, unit_stride, out_arg, b_row_stride))


#: The fewest columns (N) of a packed-class call whose blocks of A are copied
#: (``pack_a``): each copied block serves N / 16 panels of B. 1024^3 at two
#: threads, in row tiles (A copied once), fuelc/numpy 1.28-1.63 -> 1.08-1.24 in
#: 4 pairs of turns on znver3, where the column tiles each streamed all of A
#: from L3 (docs/benchmarks.md, "matmul 512 and 1024 at two threads on
#: znver3"); one thread 1.10 -> 1.06. 512 columns (rows 2 KiB apart) are left
#: as they were: 3 of 4 pairs, within noise; at 256 columns the copy cost more
#: than it saved (one znver3 thread: [1024,1024] x [1024,256] 1.05 -> 1.10x
#: numpy's time).
PACK_A_COLUMNS = 1024


def pack_a(a_shape: Sequence[int], unit_stride: Sequence[int], out_arg: int,
           a_row_stride: int, n: int) -> bool:
    """Whether a matmul call of the packed class (more than ``UNPACKED_ROWS``
    rows; A, B and the output with unit-stride rows) with A's rows
    ``a_row_stride`` elements apart and ``n`` columns copies each block of A
    it reads (``PACK_A_ATTR``; MatMul calls, and FusedLinear calls over a B
    that is not packed at compile time): A's rows a multiple of 1024
    elements apart (4 KiB of f32: their blocks fall in few L2 sets) and at
    least ``PACK_A_COLUMNS`` columns."""
    rows = a_shape[-2] if len(a_shape) >= 2 else 0
    apart = a_row_stride >= 1024 and a_row_stride % 1024 == 0
    return (rows > UNPACKED_ROWS and apart and n >= PACK_A_COLUMNS
            and {0, 1, out_arg} <= set(unit_stride))


def unpacked_rows(a_shape: Sequence[int], unit_stride: Sequence[int], out_arg: int,
                  b_row_stride: int) -> bool:
    """Whether a matmul call with A of shape ``a_shape`` reads B in place
    (``UNPACKED_ATTR``): more than ``FEW_ROWS`` and at most ``UNPACKED_ROWS``
    rows (at most ``ALIASED_ROWS`` where B's rows, ``b_row_stride`` elements
    apart, are ``aliased_rows``: required, so that no caller skips that
    rule), B (argument 1) and the output with unit-stride rows."""
    rows = a_shape[-2] if len(a_shape) >= 2 else 0
    top = ALIASED_ROWS if aliased_rows(b_row_stride) else UNPACKED_ROWS
    return FEW_ROWS < rows <= top and 1 in unit_stride and out_arg in unit_stride


def unit_stride_args(layouts: Sequence) -> tuple[int, ...]:
    """The indices of ``layouts`` whose innermost axis has stride 1 (or at
    most one element, where the stride is never used): the operands a
    kernel specialised on them reads and writes as contiguous rows."""
    return tuple(i for i, l in enumerate(layouts)
                 if l.rank and (l.stride[-1] == 1 or l.shape[-1] <= 1))


def row_class(layouts: Sequence, out_arg: int) -> str:
    """The row class of a matmul call whose descriptors have ``layouts``
    (A first, the output at ``out_arg``): ``"few_rows"``, ``"unpacked"``,
    ``"aliased_packed"`` (``aliased_packed``: a part of the packed class with
    a kernel of its own; a symbolic file without it runs such calls on its
    ``"packed"`` object, ``runtime.symbolic``) or ``"packed"``."""
    unit = unit_stride_args(layouts)
    shape = layouts[0].shape
    if few_rows(shape, unit, out_arg):
        return "few_rows"
    if aliased_packed(shape, unit, out_arg, b_row_stride(layouts)):
        return "aliased_packed"
    return "unpacked" if unpacked_rows(shape, unit, out_arg, b_row_stride(layouts)) else "packed"


def a_row_stride(layouts: Sequence) -> int:
    """The row stride (elements) of A, a matmul call's argument 0 (0 for a vector)."""
    a = layouts[0]
    return a.stride[-2] if a.rank >= 2 else 0


def b_row_stride(layouts: Sequence) -> int:
    """The row stride (elements) of B, a matmul call's argument 1 (0 for a vector)."""
    b = layouts[1]
    return b.stride[-2] if b.rank >= 2 else 0
