"""``Storage``: bytes plus a dtype on a backend (CPU storage is a numpy
``uint8`` buffer), and the numpy bridges everyone uses:

* ``Storage.from_numpy(arr)`` -> ``(Storage, Layout)``, zero-copy for any
  numpy strides (negative and 0 included) that are multiples of the itemsize;
* ``storage.view(layout)`` -> a writable numpy view honouring the layout;
* ``Storage.bundle(slots)`` -> one multi-output buffer ("Option C"):
  one allocation, each slot at a byte offset aligned to its
  dtype, described by ``OutputView``; ``storage.slot(i)`` is a zero-copy view.

bf16 and the fp8/fp6/fp4 formats have no numpy arithmetic type: their storages
view as the raw bit patterns (``DType.storage_numpy``); ``from_numpy`` also
takes their ``ml_dtypes`` arrays (``DType.numpy``) and wraps the same bytes.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .dtype import DType
from .errors import StorageError
from .keys import BackendId
from .layout import Layout


@dataclasses.dataclass(frozen=True)
class OutputView:
    """One slot of a bundled (multi-output) storage."""

    dtype: DType
    shape: tuple[int, ...]
    layout: Layout
    byte_offset: int

    @property
    def nbytes(self) -> int:
        return self.layout.numel * self.dtype.itemsize


class Storage:
    """A flat byte buffer with an element dtype on a backend.

    Only CPU storage is materialized here (``data`` is a 1-D ``uint8`` numpy
    array, possibly a view into someone else's memory). ``bundle_views`` is
    set on multi-output storages; ``dtype`` is then the primary (slot 0) dtype.
    """

    __slots__ = ("data", "dtype", "backend", "bundle_views", "_addr")

    def __init__(self, data: np.ndarray, dtype: DType, backend: BackendId = BackendId.CPU,
                 bundle_views: Sequence[OutputView] | None = None):
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 1:
            raise StorageError(
                f"Storage data must be a 1-D uint8 numpy array, got "
                f"{type(data).__name__} {getattr(data, 'dtype', '')} ndim={getattr(data, 'ndim', '?')}")
        if backend is not BackendId.CPU:
            raise StorageError(f"numpy-backed Storage lives on the CPU; got backend {backend}")
        self.data = data
        self.dtype = DType.parse(dtype)
        self.backend = backend
        self.bundle_views = tuple(bundle_views) if bundle_views is not None else None
        self._addr = None

    @classmethod
    def _wrap(cls, data: np.ndarray, dtype: DType) -> "Storage":
        # Trusted constructor for the hot paths: ``data`` is already a 1-D
        # uint8 array and ``dtype`` a DType (what ``__init__`` checks).
        st = object.__new__(cls)
        st.data, st.dtype, st.backend, st.bundle_views, st._addr = data, dtype, BackendId.CPU, None, None
        return st

    # -- constructors -------------------------------------------------------------
    @classmethod
    def zeros(cls, dtype: DType | str, numel: int) -> "Storage":
        """A zero-filled CPU storage of ``numel`` elements."""
        dtype = DType.parse(dtype)
        if numel < 0:
            raise StorageError(f"Storage.zeros: numel must be >= 0, got {numel}")
        return cls._wrap(np.zeros(numel * dtype.itemsize, dtype=np.uint8), dtype)

    @classmethod
    def empty(cls, dtype: DType | str, numel: int) -> "Storage":
        """An UNINITIALIZED CPU storage of ``numel`` elements: only for a
        writer that stores every element before anything reads it."""
        dtype = DType.parse(dtype)
        if numel < 0:
            raise StorageError(f"Storage.empty: numel must be >= 0, got {numel}")
        return cls._wrap(np.empty(numel * dtype.itemsize, dtype=np.uint8), dtype)

    @classmethod
    def from_numpy(cls, arr: np.ndarray, dtype: DType | str | None = None) -> tuple["Storage", Layout]:
        """Wrap ``arr`` without copying where possible.

        ``dtype`` defaults to ``DType.from_numpy(arr.dtype)``; pass it to
        reinterpret raw bits (e.g. ``uint16`` as BF16; the itemsizes must
        match). Arrays whose strides are not multiples of the itemsize, or that
        are empty, are copied. Booleans become U8.
        """
        arr = np.asarray(arr)
        if arr.dtype == np.bool_:
            arr = arr.astype(np.uint8)
        dt = DType.from_numpy(arr.dtype) if dtype is None else DType.parse(dtype)
        if arr.dtype.itemsize != dt.itemsize:
            raise StorageError(
                f"from_numpy: array dtype {arr.dtype} ({arr.dtype.itemsize} B) cannot hold {dt} "
                f"({dt.itemsize} B per element)")
        isz = arr.dtype.itemsize
        if arr.flags.c_contiguous and arr.size and arr.dtype.isnative \
                and all(s >= 0 and not s % isz for s in arr.strides):
            # Fast path, same result as the general one below: offset 0, numpy's strides.
            return (cls._wrap(arr.reshape(-1).view(np.uint8), dt),
                    Layout._trusted(arr.shape, tuple(s // isz for s in arr.strides), 0))
        if arr.size == 0 or any(s % isz for s in arr.strides) or not arr.dtype.isnative:
            arr = np.require(arr, requirements="C")  # (ascontiguousarray makes rank 0 rank 1)
            if not arr.dtype.isnative:
                arr = arr.astype(arr.dtype.newbyteorder("="))
            return cls(arr.reshape(-1).view(np.uint8), dt), Layout.contiguous(arr.shape)
        # Walk to the lowest-addressed element: reverse every negative-stride axis.
        # (``...`` first: indexing a rank-0 array with ``()`` would return a scalar, not a view)
        low = arr[(Ellipsis,) + tuple(slice(None, None, -1) if s < 0 else slice(None) for s in arr.strides)]
        stride = tuple(s // isz for s in arr.strides)
        layout0 = Layout(arr.shape, tuple(abs(s) for s in stride), 0)
        span = layout0.required_elements()
        offset = (arr.__array_interface__["data"][0] - low.__array_interface__["data"][0]) // isz
        flat = as_strided(low, shape=(span,), strides=(isz,), writeable=arr.flags.writeable)
        data = flat.view(np.uint8) if flat.flags.c_contiguous else None
        if data is None:  # pragma: no cover - as_strided with itemsize strides is contiguous
            return cls.from_numpy(np.ascontiguousarray(arr), dt)
        return cls(data, dt), Layout(arr.shape, stride, offset)

    @classmethod
    def bundle(cls, slots: Sequence[tuple[DType | str, Sequence[int]]]) -> "Storage":
        """Allocate one zeroed multi-output buffer for ``slots`` =
        ``[(dtype, shape), ...]``; slot ``i`` starts at a byte offset aligned
        to its dtype's itemsize. The storage's ``dtype`` is slot 0's."""
        if not slots:
            raise StorageError("Storage.bundle needs at least one slot")
        views, offset = [], 0
        for i, (dt, shape) in enumerate(slots):
            dt = DType.parse(dt)
            shape = tuple(int(d) for d in shape)
            align = dt.itemsize
            offset = (offset + align - 1) // align * align
            layout = Layout.contiguous(shape)
            views.append(OutputView(dt, shape, layout, offset))
            offset += layout.numel * dt.itemsize
        return cls(np.zeros(offset, dtype=np.uint8), views[0].dtype, bundle_views=views)

    # -- facts ------------------------------------------------------------------------
    @property
    def len_bytes(self) -> int:
        return int(self.data.nbytes)

    @property
    def address(self) -> int:
        """Address of the first byte (cached per ``data`` array)."""
        cached = self._addr
        if cached is None or cached[0] is not self.data:
            cached = self._addr = (self.data, self.data.ctypes.data)
        return cached[1]

    @property
    def numel(self) -> int:
        """Whole elements of ``dtype`` held (bytes // itemsize)."""
        return self.len_bytes // self.dtype.itemsize

    @property
    def is_bundle(self) -> bool:
        return self.bundle_views is not None

    def __repr__(self) -> str:
        extra = f", slots={len(self.bundle_views)}" if self.is_bundle else ""
        return f"Storage({self.dtype}, {self.len_bytes} B, {self.backend}{extra})"

    # -- numpy bridges --------------------------------------------------------------
    def typed(self) -> np.ndarray:
        """The whole buffer as a 1-D array of ``dtype.storage_numpy``."""
        n = self.numel
        return self.data[: n * self.dtype.itemsize].view(self.dtype.storage_numpy)

    def check_layout(self, layout: Layout, what: str = "layout") -> None:
        """Raise StorageError unless every element of ``layout`` lies inside
        this storage."""
        if layout.numel == 0:
            return
        lo, hi = layout.element_span()
        if lo < 0 or hi >= self.numel:
            raise StorageError(
                f"{what} {layout} reaches elements [{lo}, {hi}] but the storage holds "
                f"{self.numel} {self.dtype} elements ({self.len_bytes} B)")

    def view(self, layout: Layout) -> np.ndarray:
        """A numpy view (sharing memory, writable if the buffer is) of the
        elements ``layout`` describes. Raises StorageError when out of bounds."""
        self.check_layout(layout)
        npd = self.dtype.storage_numpy
        if layout.numel == 0:
            return np.empty(layout.shape, dtype=npd)
        isz = npd.itemsize
        # the ndarray constructor over the byte buffer (bounds checked above;
        # negative and zero strides allowed): a quarter of as_strided's cost,
        # which this pays on every output of every run
        return np.ndarray(layout.shape, npd, buffer=self.data, offset=layout.start_offset * isz,
                          strides=tuple(s * isz for s in layout.stride))

    def to_numpy(self, layout: Layout) -> np.ndarray:
        """A contiguous copy of the elements ``layout`` describes."""
        return np.array(self.view(layout), order="C", copy=True)  # keeps rank 0

    def contiguize(self, layout: Layout) -> tuple["Storage", Layout]:
        """Materialize ``layout`` into fresh row-major storage with offset 0."""
        out = Storage.empty(self.dtype, layout.numel)  # every element is written next
        # one copy, strided source to row-major destination (np.require then
        # an assignment copied a non-contiguous view twice)
        np.copyto(out.typed().reshape(layout.shape), self.view(layout))
        return out, Layout.contiguous(layout.shape)

    def slot(self, i: int) -> tuple["Storage", Layout]:
        """Zero-copy view of bundle slot ``i`` as its own Storage and Layout."""
        if not self.is_bundle:
            raise StorageError(f"slot({i}): {self!r} is not a bundled (multi-output) storage")
        if not 0 <= i < len(self.bundle_views):
            raise StorageError(f"slot({i}): bundle has {len(self.bundle_views)} slots")
        v = self.bundle_views[i]
        return Storage(self.data[v.byte_offset: v.byte_offset + v.nbytes], v.dtype), v.layout

    def slot_view(self, i: int) -> np.ndarray:
        """Numpy view of bundle slot ``i`` (what a kernel writes into)."""
        st, lay = self.slot(i)
        return st.view(lay)

    def slot_owned(self, i: int) -> tuple["Storage", Layout]:
        """An independent copy of slot ``i`` (``ViewOwned``)."""
        st, lay = self.slot(i)
        return Storage(st.data.copy(), st.dtype), lay
