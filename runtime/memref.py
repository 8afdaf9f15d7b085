"""Ranked memref descriptors as ctypes structs (the MLIR C interface).

A rank-N descriptor is ``{void* allocated; void* aligned; int64 offset;
int64 sizes[N]; int64 strides[N]}`` with offset and strides in *elements*,
strides signed (0 broadcasts, negative flips). Kernels compiled by
``compiler.codegen.cpu`` take every memref with a fully dynamic strided
layout, so any descriptor built here is a valid argument. The runtime calls
kernels loaded from exported artifacts with them (``runtime.artifact``);
``compiler.codegen.memref`` re-exports this module.

Builders: ``descriptor_from_storage(storage, layout)`` (the runtime's
``Storage`` + ``Layout``), ``descriptor_from_array(arr)`` (numpy, for tests),
and ``make_descriptor`` (raw pointer). This module needs only ctypes/numpy.
"""
from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from .errors import FuelError


class DescriptorError(FuelError, ValueError):
    """A memref descriptor cannot describe the given buffer (strides not a
    multiple of the element size, rank mismatch, out-of-bounds layout)."""


_TYPES: dict[int, type] = {}


def descriptor_type(rank: int) -> type:
    """The ctypes struct type of a rank-``rank`` descriptor (cached)."""
    if rank < 0:
        raise DescriptorError(f"memref rank must be >= 0, got {rank}")
    t = _TYPES.get(rank)
    if t is None:
        fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
                  ("offset", ctypes.c_int64)]
        if rank:
            fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
        t = type(f"MemRefDescriptor{rank}D", (ctypes.Structure,), {"_fields_": fields, "rank": rank})
        _TYPES[rank] = t
    return t


def make_descriptor(base: int, offset: int, sizes: Sequence[int], strides: Sequence[int],
                    *, owner=None):
    """A descriptor over the buffer at address ``base`` (element 0 of the
    storage). ``owner`` is kept alive by the descriptor (``_owner``)."""
    sizes, strides = tuple(int(s) for s in sizes), tuple(int(s) for s in strides)
    if len(sizes) != len(strides):
        raise DescriptorError(f"sizes {sizes} and strides {strides} differ in rank")
    if any(s < 0 for s in sizes):
        raise DescriptorError(f"sizes must be non-negative, got {sizes}")
    d = descriptor_type(len(sizes))()
    d.allocated = d.aligned = base
    d.offset = int(offset)
    for i, (n, s) in enumerate(zip(sizes, strides)):
        d.sizes[i] = n
        d.strides[i] = s
    d._owner = owner
    return d


def descriptor_from_storage(storage, layout):
    """A descriptor for ``layout`` over a runtime ``Storage`` (CPU): the base
    is the storage's first byte, offset/strides come from the layout as is.
    Raises DescriptorError when the layout reaches outside the storage."""
    d = DescriptorTemplate(layout).bind(storage)
    d._owner = storage
    return d


class DescriptorTemplate:
    """The part of a storage descriptor that depends only on the layout
    (struct type, offset, sizes, strides, element span), built once; ``bind``
    adds a storage's base address. Kernel families keep one per memoised
    call signature, so a call costs one struct copy per argument."""

    __slots__ = ("layout", "_type", "_proto", "_lo", "_hi", "_empty", "_need")

    def __init__(self, layout):
        self.layout = layout
        self._proto = make_descriptor(0, layout.start_offset, layout.shape, layout.stride)
        self._type = type(self._proto)
        self._lo, self._hi = layout.element_span()
        self._empty = layout.numel == 0
        self._need = (None, 0)  # (dtype, bytes the layout reaches) of the last bind

    def unbound(self):
        """A descriptor of the layout whose base is still 0: the caller sets
        ``allocated`` and ``aligned`` to a buffer that holds the layout."""
        return self._type.from_buffer_copy(self._proto)

    def bind(self, storage):
        """The descriptor of the layout over ``storage``. Raises
        DescriptorError when the layout reaches outside the storage. The
        caller keeps ``storage`` alive while the descriptor is used."""
        if not self._empty:
            dt, need = self._need
            if dt is not storage.dtype:
                dt, need = storage.dtype, (self._hi + 1) * storage.dtype.itemsize
                self._need = (dt, need)
            if self._lo < 0 or need > storage.data.nbytes:
                raise DescriptorError(
                    f"{self.layout} reaches elements [{self._lo}, {self._hi}] outside the storage of "
                    f"{storage.numel} {storage.dtype} elements")
        d = self._type.from_buffer_copy(self._proto)
        d.allocated = d.aligned = storage.address
        return d


def descriptor_from_array(arr: np.ndarray):
    """A zero-copy descriptor of a numpy array (any strides that are
    multiples of the itemsize: negative, 0 for broadcast). The array is kept
    alive by the descriptor; writes through it land in ``arr``."""
    if not isinstance(arr, np.ndarray):
        raise DescriptorError(f"expected a numpy array, got {type(arr).__name__}")
    isz = arr.itemsize
    bad = [s for s in arr.strides if s % isz]
    if bad:
        raise DescriptorError(
            f"array strides {arr.strides} are not multiples of the itemsize {isz}; "
            "pass np.ascontiguousarray(arr)")
    # ``aligned + offset`` must be element 0; a flipped array's data pointer
    # already points at element 0, so offset 0 with negative strides is exact.
    return make_descriptor(arr.ctypes.data, 0, arr.shape, [s // isz for s in arr.strides],
                           owner=arr)


def address(desc) -> int:
    """The address to pass for a descriptor argument of a ciface function."""
    return ctypes.addressof(desc)


__all__ = ["DescriptorError", "DescriptorTemplate", "descriptor_type", "make_descriptor",
           "descriptor_from_storage", "descriptor_from_array", "address"]
