"""Bounds of index operands, checked before a kernel runs.

Generated kernels read and write through their index operands unchecked (an
index past the end reads garbage or crashes the process), so the executor
checks every index operand of a step against ``INDEX_OPERANDS`` first, for
numpy and generated kernels alike: one vectorized min/max per operand per
call, and a search for the first offender only when that fails.

Indices are U32 (fuel has no negative indices: PyTorch's ``index_select``
refuses them, and a U32 index cannot be negative), so the valid range is
``[0, size)``; ``check_indices`` also takes signed operands and one extra
allowed value. Not checked, because their ops define the out-of-range case:
``FusedSoftmaxCrossEntropy`` targets (a target outside ``[0, vocab)`` that is
not ``ignore_index`` gives a NaN loss) and PagedAttn ``context_lens`` (a
length past the block table's capacity attends every position).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

from .errors import IndexOutOfRangeError
from .opkind import OpKind


@dataclasses.dataclass(frozen=True)
class IndexOperand:
    """Input ``operand`` of an op holds indices into ``[0, size(params))``
    (also ``allowed(params)`` when set); ``what`` names the operand and the
    indexed axis in messages."""

    operand: int
    what: str
    size: Callable[[object], int]
    allowed: Optional[Callable[[object], int]] = None


INDEX_OPERANDS: dict[OpKind, tuple[IndexOperand, ...]] = {
    OpKind.IndexSelect: (IndexOperand(1, "index into the selected axis", lambda p: p.source_dim_size),),
    OpKind.Gather: (IndexOperand(1, "index into the gathered axis", lambda p: p.source_shape[p.dim]),),
    OpKind.IndexAdd: (IndexOperand(1, "index into the base axis", lambda p: p.base_dim_size),),
    OpKind.ScatterAdd: (IndexOperand(1, "index into the base axis", lambda p: p.base_shape[p.dim]),),
    OpKind.PagedAttn: (IndexOperand(3, "block_table entry (cache block id)", lambda p: p.num_blocks),),
}


def check_indices(idx: np.ndarray, size: int, where: str, what: str,
                  allowed: Optional[int] = None) -> None:
    """Raise IndexOutOfRangeError unless every element of ``idx`` lies in
    ``[0, size)`` or equals ``allowed``. The message names ``where`` (the step
    or node and op), ``what`` (the operand), the first offending value, its
    position and the valid range."""
    if idx.size == 0:
        return
    lo, hi = int(idx.min()), int(idx.max())
    if lo >= 0 and hi < size:
        return
    wide = idx.astype(np.int64) if idx.dtype != np.uint64 else idx
    bad = (wide < 0) | (wide >= size)
    if allowed is not None:
        bad &= wide != allowed
    if not bad.any():
        return
    pos = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), idx.shape))
    value = int(idx[pos])
    also = f" or {allowed}" if allowed is not None else ""
    raise IndexOutOfRangeError(
        f"{where}: {what} value {value} at position {list(pos)} is out of range; valid values are "
        f"[0, {size - 1}]{also} (the axis has size {size}); {int(bad.sum())} of {idx.size} "
        f"indices are out of range", value, pos, size)
