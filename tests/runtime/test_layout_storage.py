"""Layout algebra and the Storage <-> numpy bridges."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from runtime import DType, Layout, LayoutError, Storage, StorageError


def test_contiguous_and_is_contiguous_rules():
    l = Layout.contiguous((2, 3, 4))
    assert l.stride == (12, 4, 1) and l.is_contiguous()
    assert Layout((2, 1, 4), (4, 99, 1)).is_contiguous()          # size-1 axes ignored
    assert Layout((2, 3), (3, 1), start_offset=5).is_contiguous()  # offset allowed
    assert not l.transpose().is_contiguous()
    assert Layout.contiguous(()).numel == 1 and Layout.contiguous(()).is_contiguous()


def test_transforms_match_the_spec():
    l = Layout.contiguous((2, 3, 4))
    assert l.narrow(1, 1, 2) == Layout((2, 2, 4), (12, 4, 1), 4)
    assert l.transpose() == Layout((2, 4, 3), (12, 1, 4), 0)
    assert l.permute((2, 0, 1)) == Layout((4, 2, 3), (1, 12, 4), 0)
    assert l.unsqueeze(1) == Layout((2, 1, 3, 4), (12, 0, 4, 1), 0)
    assert l.unsqueeze(1).squeeze(1) == l
    assert l.flip(1) == Layout((2, 3, 4), (12, -4, 1), 8)
    assert l.flip(1).flip(1) == l
    assert Layout.contiguous((3, 1)).broadcast_as((2, 3, 5)) == Layout((2, 3, 5), (0, 1, 0), 0)


@pytest.mark.parametrize("call, message", [
    (lambda l: l.narrow(0, 1, 2), r"\[1, 3\) out of bounds for axis 0 of size 2"),
    (lambda l: l.squeeze(1), "has size 3, not 1"),
    (lambda l: l.permute((0, 0, 1)), "not a permutation"),
    (lambda l: l.unsqueeze(4), "must be in 0..=3"),
    (lambda l: l.broadcast_as((2, 5, 4)), "axis 1 .* has size 3, cannot broadcast to 5"),
    (lambda l: l.broadcast_as((3, 4)), "lower-rank"),
    (lambda l: l.flip(3), "axis 3 out of range"),
    (lambda l: Layout((2,), (1, 1)), "differ in rank"),
    (lambda l: Layout((-1,), (1,)), "non-negative"),
])
def test_invalid_transforms_raise_layout_error(call, message):
    with pytest.raises(LayoutError, match=message):
        call(Layout.contiguous((2, 3, 4)))


shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4)


@st.composite
def strided_arrays(draw):
    shape = draw(shapes)
    base = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    ops = draw(st.lists(st.tuples(st.sampled_from(["T", "flip", "narrow", "unsq", "bcast"]),
                                  st.integers(0, 10), st.integers(0, 10)), max_size=4))
    arr, lay = base, Layout.contiguous(shape)
    for op, a, b in ops:
        if op == "T" and arr.ndim >= 2:
            arr, lay = np.swapaxes(arr, -1, -2), lay.transpose()
        elif op == "flip":
            d = a % arr.ndim
            arr, lay = np.flip(arr, d), lay.flip(d)
        elif op == "narrow":
            d = a % arr.ndim
            start = b % arr.shape[d]
            n = max(1, (arr.shape[d] - start) // 2)
            idx = (slice(None),) * d + (slice(start, start + n),)
            arr, lay = arr[idx], lay.narrow(d, start, n)
        elif op == "unsq":
            d = a % (arr.ndim + 1)
            arr, lay = np.expand_dims(arr, d), lay.unsqueeze(d)
        elif op == "bcast":
            target = (2,) + tuple(3 if s == 1 else s for s in arr.shape)
            arr, lay = np.broadcast_to(arr, target), lay.broadcast_as(target)
    return base, arr, lay


@settings(max_examples=150, deadline=None)
@given(strided_arrays())
def test_layout_transforms_agree_with_numpy_views(case):
    base, expected, lay = case
    storage, _ = Storage.from_numpy(base)
    np.testing.assert_array_equal(storage.view(lay), expected)
    # And numpy's own strides round-trip through from_numpy, zero-copy.
    s2, l2 = Storage.from_numpy(expected)
    np.testing.assert_array_equal(s2.view(l2), expected)
    assert l2.shape == expected.shape
    assert np.shares_memory(expected, base)
    assert s2.len_bytes <= base.nbytes                     # zero-copy: never more than the base
    assert np.shares_memory(s2.view(l2), base)


@settings(max_examples=60, deadline=None)
@given(shapes, st.data())
def test_contiguous_layout_is_contiguous_and_flip_is_involutive(shape, data):
    l = Layout.contiguous(shape)
    assert l.is_contiguous() and l.required_elements() == int(np.prod(shape))
    d = data.draw(st.integers(0, len(shape) - 1))
    assert l.flip(d).flip(d) == l
    perm = data.draw(st.permutations(range(len(shape))))
    inv = list(np.argsort(perm))
    assert l.permute(perm).permute(inv) == l


def test_from_numpy_is_zero_copy_for_negative_and_zero_strides():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    v = a[::-1, ::2]
    s, l = Storage.from_numpy(v)
    assert l.stride == (-4, 2) and l.start_offset == 8
    s.view(l)[0, 0] = -1.0
    assert a[2, 0] == -1.0                              # shares memory
    b = np.broadcast_to(np.float32(7), (2, 3))
    s, l = Storage.from_numpy(b)
    assert l.stride == (0, 0) and s.len_bytes == 4
    odd = np.zeros(10, np.uint8)[1:].view(np.int8)[::3]
    s, l = Storage.from_numpy(odd)
    assert s.dtype is DType.I8


def test_from_numpy_copies_when_strides_are_not_multiples_of_itemsize():
    raw = np.zeros(41, np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(2, 5)[:, ::2]
    rec = np.zeros(3, dtype=[("a", np.float32), ("b", np.uint8)])["a"]  # stride 5
    s, l = Storage.from_numpy(rec)
    assert l == Layout.contiguous((3,)) and s.len_bytes == 12
    s, l = Storage.from_numpy(unaligned)
    np.testing.assert_array_equal(s.view(l), unaligned)


def test_from_numpy_dtype_override_and_errors():
    bits = np.array([0x3F80, 0x4000], np.uint16)
    s, l = Storage.from_numpy(bits, dtype="bf16")
    assert s.dtype is DType.BF16 and s.view(l).dtype == np.uint16
    with pytest.raises(StorageError, match="float32 .4 B. cannot hold f16"):
        Storage.from_numpy(np.zeros(2, np.float32), dtype="f16")
    assert Storage.from_numpy(np.array([True, False]))[0].dtype is DType.U8


def test_view_out_of_bounds_names_layout_and_storage():
    s = Storage.zeros("f32", 6)
    with pytest.raises(StorageError, match=r"reaches elements \[0, 7\].*holds 6 f32 elements \(24 B\)"):
        s.view(Layout.contiguous((2, 4)))
    with pytest.raises(StorageError, match="1-D uint8"):
        Storage(np.zeros(3, np.float32), DType.F32)


def test_contiguize_materializes_row_major_offset_zero():
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    s, l = Storage.from_numpy(a)
    l2 = l.permute((2, 0, 1)).narrow(0, 1, 2)
    c, cl = s.contiguize(l2)
    assert cl == Layout.contiguous((2, 2, 3)) and c.len_bytes == 12 * 4
    np.testing.assert_array_equal(c.view(cl), a.transpose(2, 0, 1)[1:3])


def test_bundle_slots_are_aligned_views_and_owned_copies_are_independent():
    b = Storage.bundle([("u8", (3,)), ("f64", (2,)), ("u32", (1,))])
    views = b.bundle_views
    assert [v.byte_offset for v in views] == [0, 8, 24] and b.len_bytes == 28
    assert b.dtype is DType.U8 and b.is_bundle
    b.slot_view(1)[...] = [1.5, 2.5]
    st, lay = b.slot(1)
    assert st.dtype is DType.F64 and st.view(lay).tolist() == [1.5, 2.5]
    own, lay = b.slot_owned(1)
    own.view(lay)[0] = 9
    assert b.slot_view(1)[0] == 1.5
    with pytest.raises(StorageError, match="bundle has 3 slots"):
        b.slot(3)
    with pytest.raises(StorageError, match="not a bundled"):
        Storage.zeros("f32", 1).slot(0)


def test_storage_view_shares_memory_for_every_stride_kind_and_keeps_read_only_buffers_read_only():
    buf = Storage.zeros(DType.F32, 12)
    buf.typed()[:] = np.arange(12, dtype=np.float32)
    assert buf.view(Layout((3, 4), (4, 1), 0)).tolist() == np.arange(12).reshape(3, 4).tolist()
    assert buf.view(Layout((4,), (-1,), 3)).tolist() == [3, 2, 1, 0]          # flipped
    assert buf.view(Layout((2, 3), (0, 2), 1)).tolist() == [[1, 3, 5]] * 2    # broadcast + offset
    assert buf.view(Layout((), (), 7)).tolist() == 7                          # rank 0
    v = buf.view(Layout((2,), (5,), 2))
    v[:] = -1                                                                # a view, not a copy
    assert buf.typed()[[2, 7]].tolist() == [-1, -1]
    ro = np.arange(4, dtype=np.float32)
    ro.flags.writeable = False
    rst, lay = Storage.from_numpy(ro)
    assert not rst.view(lay).flags.writeable
    with pytest.raises(StorageError):
        buf.view(Layout((3,), (5,), 4))                                       # reaches element 14


def _factorings(n: int):
    """Some shapes with ``n`` elements (one, two or three axes, size-1 axes too)."""
    divs = [d for d in range(1, n + 1) if n % d == 0]
    out = [(n,), (1, n), (n, 1)]
    out += [(d, n // d) for d in divs]
    out += [(d, e, n // (d * e)) for d in divs for e in divs if n % (d * e) == 0]
    return out


@settings(max_examples=150, deadline=None)
@given(strided_arrays(), st.data())
def test_reshaped_views_exactly_when_numpy_reshapes_without_a_copy(case, data):
    base, arr, lay = case
    if arr.size == 0:
        return
    shape = data.draw(st.sampled_from(_factorings(arr.size)))
    storage, _ = Storage.from_numpy(base)
    got = lay.reshaped(shape)
    want = arr.reshape(shape)
    viewable = np.shares_memory(want, arr) or arr.size == 1
    if got is None:
        assert not viewable, (lay, shape)
    else:
        np.testing.assert_array_equal(storage.view(got), want)
        assert got.shape == tuple(shape)


def test_reshaped_cases():
    l = Layout((1, 256, 4), (1024, 1, 256))                # a transposed matmul result
    assert l.reshaped((1, 256, 2, 2)) == Layout((1, 256, 2, 2), (0, 1, 512, 256))
    assert l.reshaped((1, 1024)) is None                   # would interleave the rows
    sub = Layout((1, 128, 1, 2, 2), (2048, 16, 0, 8, 2))   # a stride-2 subsample
    assert sub.reshaped((1, 128, 4)) is None
    assert sub.reshaped((128, 2, 2)) == Layout((128, 2, 2), (16, 8, 2))
    assert Layout.contiguous((2, 3), 5).reshaped((3, 2)) == Layout.contiguous((3, 2), 5)
    with pytest.raises(LayoutError, match="6 elements"):
        Layout.contiguous((2, 3)).reshaped((4,))
