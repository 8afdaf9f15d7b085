"""Memref descriptors from numpy arrays and from the runtime's Storage + Layout."""
import ctypes

import numpy as np
import pytest

from compiler.codegen.memref import (DescriptorError, descriptor_from_array,
                                     descriptor_from_storage, descriptor_type, make_descriptor)
from runtime.layout import Layout
from runtime.storage import Storage


def _fields(d):
    return d.offset, tuple(d.sizes), tuple(d.strides)


def test_struct_layout_matches_the_c_interface():
    t = descriptor_type(2)
    assert t is descriptor_type(2)
    assert ctypes.sizeof(t) == 8 * (3 + 2 * 2)
    assert [f[0] for f in t._fields_] == ["allocated", "aligned", "offset", "sizes", "strides"]
    assert ctypes.sizeof(descriptor_type(0)) == 24  # rank 0: no size/stride arrays


def test_contiguous_and_strided_arrays():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    d = descriptor_from_array(a)
    assert d.aligned == a.ctypes.data and _fields(d) == (0, (4, 6), (6, 1))
    assert _fields(descriptor_from_array(a[:, ::2])) == (0, (4, 3), (6, 2))
    assert _fields(descriptor_from_array(a.T)) == (0, (6, 4), (1, 6))


def test_broadcast_and_negative_strides():
    b = np.broadcast_to(np.arange(3.0), (5, 3))
    assert _fields(descriptor_from_array(b)) == (0, (5, 3), (0, 1))
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    f = a[::-1, ::-1]
    d = descriptor_from_array(f)
    assert _fields(d) == (0, (3, 4), (-4, -1))
    assert d.aligned == f.ctypes.data  # element 0 of the flipped view


def test_rank0():
    s = np.array(2.5)
    d = descriptor_from_array(s)
    assert type(d).rank == 0 and d.offset == 0 and d.aligned == s.ctypes.data


def test_byte_strides_that_are_not_whole_elements_are_refused():
    raw = np.zeros(17, np.uint8)[1:].view(np.float32)  # fine: unaligned but whole elements
    descriptor_from_array(raw)
    rec = np.zeros(4, dtype=[("a", np.float32), ("b", np.uint8)])["a"]
    with pytest.raises(DescriptorError, match="not multiples of the itemsize"):
        descriptor_from_array(rec)


def test_descriptor_keeps_its_buffer_alive():
    d = descriptor_from_array(np.arange(4.0))
    import gc
    gc.collect()
    assert ctypes.cast(d.aligned, ctypes.POINTER(ctypes.c_double))[3] == 3.0


def test_from_storage_and_layout_uses_offset_and_signed_strides():
    arr = np.arange(20, dtype=np.float32)
    storage, _ = Storage.from_numpy(arr)
    layout = Layout.contiguous((4, 5)).flip(0).narrow(1, 1, 3)
    d = descriptor_from_storage(storage, layout)
    assert d.aligned == storage.data.ctypes.data
    assert _fields(d) == (layout.start_offset, (4, 3), (-5, 1))
    ptr = ctypes.cast(d.aligned, ctypes.POINTER(ctypes.c_float))
    # element [i, j] at aligned + offset + i*s0 + j*s1 equals the layout's view
    view = storage.view(layout)
    for i in range(4):
        for j in range(3):
            assert ptr[d.offset + i * d.strides[0] + j * d.strides[1]] == view[i, j]


def test_from_storage_broadcast_and_rank0():
    storage, lay = Storage.from_numpy(np.arange(3, dtype=np.int32))
    d = descriptor_from_storage(storage, lay.broadcast_as((2, 3)))
    assert _fields(d) == (0, (2, 3), (0, 1))
    s0 = Storage.zeros("i32", 3)
    d0 = descriptor_from_storage(s0, Layout((), (), 2))
    assert type(d0).rank == 0 and d0.offset == 2


def test_from_storage_refuses_out_of_bounds_layouts():
    storage, _ = Storage.from_numpy(np.zeros(6, np.float32))
    with pytest.raises(DescriptorError, match="outside the storage"):
        descriptor_from_storage(storage, Layout.contiguous((2, 4)))


def test_make_descriptor_checks_rank_and_sizes():
    with pytest.raises(DescriptorError, match="differ in rank"):
        make_descriptor(0, 0, (2, 2), (1,))
    with pytest.raises(DescriptorError, match="non-negative"):
        make_descriptor(0, 0, (-1,), (1,))
