"""``fuel-split-gemv``: a product of a few rows over a large B that is not a
constant, as ``CHUNKS`` products over contiguous blocks of B's rows.

A ``FusedLinear`` without params (a bias, no epilogue, B not packed) or a
``MatMul`` whose ``a`` is a static ``[M, K]`` of at most ``FEW_ROWS`` (4)
rows (the calls of the row kernel, which reads B once for all of them), whose
``b`` is a static ``[K, N]`` of at least ``MIN_ELEMENTS`` elements that is
not a constant (on an AVX2 target, ``avx2_rows``: also 5 to ``ALIASED_ROWS``
(16) rows where B's rows are ``aliased_rows`` apart) (``fuel-prepack-weights``, which runs first, packs those:
their column panels are contiguous already), f32 or f64, K a multiple of
``CHUNKS``, becomes::

    p = MatMul(Permute(Reshape(a, [M, C, K/C]), [1, 0, 2]),    # [C, M, K/C]
               Reshape(b, [C, K/C, N]))                        # [C, M, N]
    y = Add(SumDim(p, axis=0), BroadcastTo(Reshape(bias, [1, N]), [M, N]))

(one row: ``Reshape(a, [C, 1, K/C])``, the bias not broadcast). The
reshapes and the permutation are views, so the product reads A and B in
place. Why: on two threads a product is cut into tiles of whole output
elements, and a product of a few rows was cut by columns, so each thread
read part of every row of B (6 KiB of each 12 KiB row of a [768, 3072] f32
B), which cost 20-30% more than reading B whole (a likely cause, not measured:
each row's piece is a new stream for the hardware prefetchers, which run past
its end into the other thread's lines). The batched product is cut by
its batch axis (``parallel.matmul_tiles``), so each thread streams one
contiguous block of B (docs/benchmarks.md, "One-row products at two
threads"). On one thread the batched product costs what the plain one did
(the chunks run in turn, each reading its rows in order) plus a sum and an
add of M x N elements.

Bits: each chunk's dot products are FMAs in the order of K from zero (the
row kernel), then the chunks are added in order and the bias last; the
plain kernel started from the bias and ran one chain of FMAs over all of K.
Both are f32 (f64) dot products within the usual bound of about K/C + C + 1
roundings (the plain one K + 1), so the results differ from the plain
kernel's, and from the same row inside a call of more rows, by that
rounding, the same at every thread count.

On AVX2 the split also takes 5-16 rows over a B whose rows fall in few cache
sets (``runtime.rows.aliased_rows``: N a multiple of 1024, 2048 or more; the
``aliased_unpacked`` class, B read in place in blocks of 8 rows of K): cut by
columns, each thread's tiles read part of every such row, and two threads ran
each tile 1.5x slower than one did alone; cut by K, each thread streams its own
half of B. Two Zen 4 threads, AVX-512 hidden, [M,768]x[768,3072] + bias, B an
input, the per-round ratio to the plain kernel in one process (10-20 quiet
rounds, every one below 1): M = 5 0.82, 8 0.81, 12 0.87, 16 0.86 (numpy, the
same rounds: 1.85, 0.96, 1.34, 0.84); one thread 1.04-1.05 (the sum, the add,
two launches). AVX-512's 8 x 32 tiles read B once for 8 rows: split, M = 8 and
16 ran 1.06-1.07x the plain kernel, so other ISA levels keep 1-4 rows; at 32
rows (B copied per call) the split cost 1.08x on AVX2 too (docs/benchmarks.md,
"Few-row products split over K on AVX2").
"""
from __future__ import annotations

from compiler.mlir import ir
from compiler.passes import ModulePass, register_pass
from compiler.passes import _fuel
from compiler.passes.prepack import _constant
from runtime.rows import ALIASED_ROWS, FEW_ROWS, aliased_rows

#: The chunks of K (the batch of the product): at two threads one per thread.
CHUNKS = 2
#: The fewest elements of B for the split: B a few MiB, read from beyond the
#: L2 on every call (a [768, 3072] f32 B is 2.4 M elements).
MIN_ELEMENTS = 1 << 20


@register_pass
class SplitGemv(ModulePass):
    name = "fuel-split-gemv"
    summary = ("split the K of a product of a few rows over a large B input into "
               "contiguous blocks of B's rows (a batched product, its chunks summed)")

    target: str = ""

    def apply(self, module) -> None:
        from compiler.targets import parse_target
        target = parse_target(self.target or "cpu")
        if target.kind != "cpu":
            return
        rows = ALIASED_ROWS if avx2_rows(target) else FEW_ROWS
        for op in _fuel.fuel_ops(module):
            if _fuel.mnemonic(op) in ("fused_linear", "mat_mul"):
                _split(op, rows)


def avx2_rows(target) -> bool:
    """Whether products of 5 to ``ALIASED_ROWS`` rows over a B whose rows
    are ``aliased_rows`` apart are split too: on a target whose best vector
    ISA level is AVX2 (module docstring)."""
    from compiler.codegen.cpu.strategy import isa_level
    return isa_level(target) == "avx2"


def _split(op, rows: int = FEW_ROWS) -> bool:
    """Rewrite the product ``op`` of at most ``FEW_ROWS`` rows, or of at most
    ``rows`` over a B whose rows are ``aliased_rows`` apart, as chunks of K
    (module docstring)."""
    if any(v is not None for v in _fuel.params(op).values()):
        return False
    if not all(ir.RankedTensorType(v.type).has_static_shape
               for v in (op.operands[0], op.operands[1], op.results[0])):
        return False   # (`?` extents: the rows are not known to be few)
    ta, tb, to = (_fuel.tensor_type(v) for v in (op.operands[0], op.operands[1], op.results[0]))
    if len(tb.shape) != 2 or len(ta.shape) != 2 or _constant(op.operands[1]):
        return False
    (m, k), n = ta.shape, tb.shape[1]
    if m > FEW_ROWS and not (m <= rows and aliased_rows(n)):
        return False
    if k % CHUNKS or k * n < MIN_ELEMENTS or not ta.dtype == tb.dtype == to.dtype \
            or tb.dtype.name not in ("F32", "F64"):
        return False
    elt = ir.RankedTensorType(op.results[0].type).element_type

    def make(name, operands, out_shape, **p):
        return _fuel.create_op(name, operands, [ir.RankedTensorType.get(list(out_shape), elt)],
                               p, loc=op.location).results[0]

    c = CHUNKS
    with ir.InsertionPoint(op), op.location:
        if m == 1:
            a = make("reshape", [op.operands[0]], (c, 1, k // c), shape=(c, 1, k // c))
        else:
            a = make("reshape", [op.operands[0]], (m, c, k // c), shape=(m, c, k // c))
            a = make("permute", [a], (c, m, k // c), perm=(1, 0, 2))
        b = make("reshape", [op.operands[1]], (c, k // c, n), shape=(c, k // c, n))
        y = make("sum_dim", [make("mat_mul", [a, b], (c, m, n))], (m, n), axis=0)
        if len(op.operands) > 2:   # FusedLinear: the bias
            bias = make("reshape", [op.operands[2]], (1, n), shape=(1, n))
            if m > 1:
                bias = make("broadcast_to", [bias], (m, n), shape=(m, n))
            y = make("add", [y, bias], (m, n))
    _fuel.replace_op(op, [y])
    _fuel.count("split_gemv.products")
    return True
