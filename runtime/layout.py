"""``Layout``: shape, signed strides in elements, and a start offset in
elements. Pure metadata; every transform returns a new
Layout sharing the same storage. Preconditions raise ``LayoutError``."""
from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Sequence

from .errors import LayoutError


def _ints(name: str, values: Iterable, *, nonneg: bool) -> tuple[int, ...]:
    try:
        out = tuple(values)
    except TypeError:
        raise LayoutError(f"Layout {name} must be a sequence of ints, got {values!r}") from None
    for v in out:
        if isinstance(v, bool) or not isinstance(v, int):
            try:
                import numpy as np
                if isinstance(v, np.integer):
                    continue
            except ImportError:  # pragma: no cover
                pass
            raise LayoutError(f"Layout {name} must hold ints, got {values!r}")
        if nonneg and v < 0:
            raise LayoutError(f"Layout {name} must be non-negative, got {values!r}")
    return tuple(int(v) for v in out)


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides (in elements) for ``shape``."""
    strides, acc = [], 1
    for d in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a tensor's elements sit in its storage.

    ``shape`` (non-negative), ``stride`` (signed, elements; one per axis) and
    ``start_offset`` (elements, >= 0): element ``idx`` lives at
    ``start_offset + sum(idx[i] * stride[i])``.
    """

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    start_offset: int = 0

    def __post_init__(self):
        shape = _ints("shape", self.shape, nonneg=True)
        stride = _ints("stride", self.stride, nonneg=False)
        if len(shape) != len(stride):
            raise LayoutError(f"Layout shape {shape} and stride {stride} differ in rank")
        if isinstance(self.start_offset, bool) or not isinstance(self.start_offset, int) \
                or self.start_offset < 0:
            raise LayoutError(f"Layout start_offset must be an int >= 0, got {self.start_offset!r}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "stride", stride)
        object.__setattr__(self, "start_offset", int(self.start_offset))

    @classmethod
    def _trusted(cls, shape: tuple[int, ...], stride: tuple[int, ...], start_offset: int) -> "Layout":
        # Hot-path constructor without the checks of ``__post_init__``: the
        # caller passes tuples of Python ints of one rank and an int >= 0.
        lay = object.__new__(cls)
        object.__setattr__(lay, "shape", shape)
        object.__setattr__(lay, "stride", stride)
        object.__setattr__(lay, "start_offset", start_offset)
        return lay

    # -- constructors ---------------------------------------------------------
    @classmethod
    def contiguous(cls, shape: Sequence[int], start_offset: int = 0) -> "Layout":
        """The row-major layout of ``shape``."""
        shape = _ints("shape", shape, nonneg=True)
        return cls(shape, contiguous_strides(shape), start_offset)

    # -- facts ----------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def is_contiguous(self) -> bool:
        """Row-major over the axes of size > 1 (size-1 axes are ignored; a
        non-zero ``start_offset`` is allowed)."""
        expected = 1
        for d, s in zip(reversed(self.shape), reversed(self.stride)):
            if d == 1:
                continue
            if s != expected:
                return False
            expected *= d
        return True

    def reshaped(self, shape: Sequence[int]) -> "Layout | None":
        """This layout's elements, in row-major order, as ``shape`` without
        moving them (numpy's rule for a reshape without a copy): each run of
        old axes that merges into or splits across new axes must be evenly
        strided. None when the elements would have to be copied."""
        shape = tuple(int(d) for d in shape)
        if math.prod(shape) != self.numel:
            raise LayoutError(f"cannot reshape {list(self.shape)} ({self.numel} elements) to "
                              f"{list(shape)} ({math.prod(shape)} elements)")
        if self.numel == 0 or self.is_contiguous():
            return Layout.contiguous(shape, self.start_offset) if self.numel else \
                Layout.contiguous(shape)
        old = [(d, s) for d, s in zip(self.shape, self.stride) if d != 1]
        new_stride = [0] * len(shape)
        i = j = 0        # next old axis, next new axis
        while j < len(shape):
            if shape[j] == 1:
                new_stride[j] = 0
                j += 1
                continue
            # the smallest group of old axes [i, i2) and new axes [j, j2) of equal size
            i2, j2, n_old, n_new = i + 1, j + 1, old[i][0], shape[j]
            while n_old != n_new:
                if n_old < n_new:
                    n_old *= old[i2][0]
                    i2 += 1
                else:
                    n_new *= shape[j2]
                    j2 += 1
            for k in range(i, i2 - 1):  # the old group must be one evenly strided run
                if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                    return None
            acc = old[i2 - 1][1]
            for k in range(j2 - 1, j - 1, -1):
                new_stride[k] = acc
                acc *= shape[k]
            i, j = i2, j2
        return Layout._trusted(shape, tuple(new_stride), self.start_offset)

    def element_span(self) -> tuple[int, int]:
        """``(lowest, highest)`` element index touched; ``(start, start-1)``
        for an empty tensor (nothing touched)."""
        if self.numel == 0:
            return self.start_offset, self.start_offset - 1
        lo = hi = self.start_offset
        for d, s in zip(self.shape, self.stride):
            if s > 0:
                hi += (d - 1) * s
            else:
                lo += (d - 1) * s
        return lo, hi

    def required_elements(self) -> int:
        """Minimum storage length (elements) needed to hold every element."""
        lo, hi = self.element_span()
        if self.numel == 0:
            return 0
        if lo < 0:
            raise LayoutError(f"{self} reaches element {lo}, before the start of storage")
        return hi + 1

    # -- transforms -----------------------------------------------------------
    def _axis(self, dim: int, op: str, rank: int | None = None) -> int:
        rank = self.rank if rank is None else rank
        if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < max(rank, 1) \
                or rank == 0:
            raise LayoutError(f"{op}: axis {dim!r} out of range for rank-{self.rank} layout {self.shape}")
        return dim % rank

    def narrow(self, dim: int, start: int, length: int) -> "Layout":
        """Keep ``[start, start+length)`` of axis ``dim`` (Slice)."""
        d = self._axis(dim, "narrow")
        if start < 0 or length < 0 or start + length > self.shape[d]:
            raise LayoutError(
                f"narrow: range [{start}, {start + length}) out of bounds for axis {d} of size {self.shape[d]}")
        shape = list(self.shape)
        shape[d] = length
        return Layout(tuple(shape), self.stride, self.start_offset + self.stride[d] * start)

    def transpose(self, dim0: int = -2, dim1: int = -1) -> "Layout":
        """Swap two axes (default: the last two)."""
        if self.rank < 2 and (dim0, dim1) == (-2, -1):
            raise LayoutError(f"transpose needs rank >= 2, got shape {self.shape}")
        a, b = self._axis(dim0, "transpose"), self._axis(dim1, "transpose")
        perm = list(range(self.rank))
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(perm)

    def permute(self, perm: Sequence[int]) -> "Layout":
        """Reorder axes: ``out[i] = in[perm[i]]``."""
        perm = _ints("permutation", perm, nonneg=True)
        if sorted(perm) != list(range(self.rank)):
            raise LayoutError(f"permute: {perm} is not a permutation of 0..{self.rank} for shape {self.shape}")
        return Layout(tuple(self.shape[p] for p in perm), tuple(self.stride[p] for p in perm),
                      self.start_offset)

    def unsqueeze(self, dim: int) -> "Layout":
        """Insert a size-1 axis at ``dim`` (0 <= dim <= rank) with stride 0."""
        if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim <= self.rank:
            raise LayoutError(f"unsqueeze: dim {dim!r} must be in 0..={self.rank} for shape {self.shape}")
        return Layout(self.shape[:dim] + (1,) + self.shape[dim:],
                      self.stride[:dim] + (0,) + self.stride[dim:], self.start_offset)

    def squeeze(self, dim: int) -> "Layout":
        """Remove axis ``dim``, which must have size 1."""
        d = self._axis(dim, "squeeze")
        if self.shape[d] != 1:
            raise LayoutError(f"squeeze: axis {d} of shape {self.shape} has size {self.shape[d]}, not 1")
        return Layout(self.shape[:d] + self.shape[d + 1:], self.stride[:d] + self.stride[d + 1:],
                      self.start_offset)

    def flip(self, dim: int) -> "Layout":
        """Reverse axis ``dim``: negate its stride and move the offset to the
        last element (``offset += (size-1) * old_stride``). Involutive."""
        d = self._axis(dim, "flip")
        size, s = self.shape[d], self.stride[d]
        stride = list(self.stride)
        stride[d] = -s
        offset = self.start_offset + (size - 1) * s if size > 0 else self.start_offset
        return Layout(self.shape, tuple(stride), offset)

    def broadcast_as(self, shape: Sequence[int]) -> "Layout":
        """Broadcast to ``shape`` (numpy right-aligned rules): new leading
        axes and size-1 axes stretched to a larger size get stride 0."""
        target = _ints("broadcast target", shape, nonneg=True)
        if len(target) < self.rank:
            raise LayoutError(f"broadcast_as: cannot broadcast shape {self.shape} to lower-rank {target}")
        lead = len(target) - self.rank
        stride = [0] * lead
        for i, (d, s) in enumerate(zip(self.shape, self.stride)):
            t = target[lead + i]
            if d == t:
                stride.append(s)
            elif d == 1:
                stride.append(0)
            else:
                raise LayoutError(
                    f"broadcast_as: axis {i} of shape {self.shape} has size {d}, "
                    f"cannot broadcast to {t} (target {target})")
        return Layout(target, tuple(stride), self.start_offset)

    # -- serialization ---------------------------------------------------------
    def to_json(self) -> dict:
        return {"shape": list(self.shape), "stride": list(self.stride), "start_offset": self.start_offset}

    @classmethod
    def from_json(cls, d: dict) -> "Layout":
        try:
            return cls(tuple(d["shape"]), tuple(d["stride"]), d.get("start_offset", 0))
        except (KeyError, TypeError):
            raise LayoutError(f"malformed Layout {d!r}; expected shape, stride, start_offset") from None

    def __str__(self) -> str:
        return f"Layout(shape={list(self.shape)}, stride={list(self.stride)}, offset={self.start_offset})"
