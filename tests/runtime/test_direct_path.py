"""The executor's direct path (``runtime.direct``): plans of small kernels run
as a fixed list of raw calls. Every case compares with the general path on
the same executor (forced by wrapping ``_runners``, as a step timer does),
bit for bit, and checks which path ran."""
import ctypes
import re
import threading

import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.codegen import parallel
from compiler.registry.builders import layer_norm, linear


def _general(m, **inputs):
    """The outputs of ``m`` through the general path (the step runners)."""
    ex = m.executor
    plain = ex._runners
    ex._runners = list(plain)           # not the runners the direct path was built for
    #                                     (tuple(plain) would be ``plain`` itself)
    try:
        return ex.run(**inputs)
    finally:
        ex._runners = plain


def _graphs():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 24)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    g1 = Graph()                                         # matmul + bias + gelu + layer norm
    x = g1.input("x", (6, 16), "f32")
    h = linear(x, g1.constant(w, name="w"), g1.constant(b, name="b")).gelu()
    g1.output(layer_norm(h, g1.constant(np.ones(24, np.float32), name="g"),
                         g1.constant(np.zeros(24, np.float32), name="z")), name="y")
    g2 = Graph()                                         # views and reshapes between kernels
    a, c = g2.input("a", (4, 6), "f32"), g2.input("c", (6, 4), "f32")
    t = (a.permute((1, 0)) + c).reshape(3, 8)
    g2.output(t.softmax(-1), name="s")
    g2.output((t * 2.0).sum(axis=1), name="r")
    g3 = Graph()                                         # a chain of twenty elementwise steps
    y = g3.input("x", (8, 64), "f32")
    for i in range(20):
        y = (y * 1.01 + 0.5).relu() if i % 3 else y - 0.25
    g3.output(y, name="y")
    return [(g1, "default", {"x": rng.standard_normal((6, 16)).astype(np.float32)}),
            (g2, "default", {"a": rng.standard_normal((4, 6)).astype(np.float32),
                             "c": rng.standard_normal((6, 4)).astype(np.float32)}),
            (g3, "no-fusion", {"x": rng.standard_normal((8, 64)).astype(np.float32)})]


@pytest.mark.parametrize("case", range(3))
def test_direct_path_matches_the_general_path_bit_for_bit(case):
    g, pipeline, inputs = _graphs()[case]
    m = compile(g, target="cpu", pipeline=pipeline)
    first = m.run(**inputs)
    assert m.executor.direct_path, m.kernel_summary()
    again = m.run(**inputs)
    general = _general(m, **inputs)
    want = interpret(g, inputs)
    for name in general:
        np.testing.assert_array_equal(first[name], general[name])
        np.testing.assert_array_equal(again[name], general[name])
        np.testing.assert_allclose(first[name], want[name], rtol=1e-5, atol=1e-5)
        # each call returns arrays of its own: the next call does not write into them
        assert not np.shares_memory(first[name], again[name])


def test_an_executor_made_with_direct_false_runs_the_general_path():
    """``Executor(plan, table, direct=False)`` (constant folding's one run)
    never builds the direct path, and gives the same bits."""
    from runtime.executor import Executor
    g, pipeline, inputs = _graphs()[0]
    m = compile(g, target="cpu", pipeline=pipeline)
    ex = Executor(m.plan, m.executor.table, direct=False)
    out = ex.run(**inputs)
    assert not ex.direct_path and ex._direct_state == "general"
    for name, value in m.run(**inputs).items():
        np.testing.assert_array_equal(out[name], value)


def test_direct_path_results_follow_their_inputs():
    g, pipeline, inputs = _graphs()[2]
    m = compile(g, target="cpu", pipeline=pipeline)
    xs = [np.full((8, 64), v, np.float32) for v in (-1.0, 0.5, 3.0)]
    outs = [m(x=x) for x in xs]
    for x, out in zip(xs, outs):
        np.testing.assert_array_equal(out, _general(m, x=x)["y"])
    assert len({float(o[0, 0]) for o in outs}) == 3


def test_inputs_the_direct_path_cannot_take_run_the_general_path():
    g, pipeline, inputs = _graphs()[0]
    m = compile(g, target="cpu", pipeline=pipeline)
    want = m(**inputs)
    x = inputs["x"]
    strided = np.zeros((6, 32), np.float32)[:, ::2]
    strided[...] = x
    fortran = np.asfortranarray(x)
    for arg in (strided, fortran, x[None][0]):
        np.testing.assert_array_equal(m(x=arg), want)
    with pytest.raises(Exception, match="f32"):
        m(x=x.astype(np.float64))            # the general path's error, as before


def test_another_thread_count_builds_the_direct_path_again():
    # a module first run at one thread count and then at another keeps a
    # direct path (built again for the new count), with the same bits; a
    # count moving on every call stops the rebuilds after DIRECT_REBUILDS
    from runtime import executor as E
    rng = np.random.default_rng(3)
    g = Graph()
    x = g.input("x", (512, 1024), "f32")
    g.output(x @ g.constant(rng.standard_normal((1024, 256)).astype(np.float32), name="w"), name="y")
    before = parallel.num_threads()
    try:
        parallel.set_num_threads(1)
        m = compile(g, target="cpu")
        xs = rng.standard_normal((512, 1024)).astype(np.float32)
        want = m(x=xs)
        one = m.executor._direct
        assert one is not None and one.probes_hold()
        parallel.set_num_threads(2)
        assert not one.probes_hold()
        np.testing.assert_array_equal(m(x=xs), want)
        two = m.executor._direct
        assert two is not one and two.probes_hold() and m.executor._direct_rebuilds == 1
        np.testing.assert_array_equal(m(x=xs), want)
        assert m.executor._direct is two                 # no rebuild while the count holds
        np.testing.assert_array_equal(_general(m, x=xs)["y"], want)
        for i in range(2 * E.DIRECT_REBUILDS):           # a count moving on every call
            parallel.set_num_threads(1 + i % 2)
            np.testing.assert_array_equal(m(x=xs), want)
        assert m.executor._direct_rebuilds == E.DIRECT_REBUILDS
    finally:
        parallel.set_num_threads(before)


def test_a_replaced_constant_or_thread_count_takes_the_general_path():
    rng = np.random.default_rng(1)
    g = Graph()
    x = g.input("x", (4, 8), "f32")
    g.output(x @ g.constant(rng.standard_normal((8, 8)).astype(np.float32), name="w"), name="y")
    m = compile(g, target="cpu")
    xs = rng.standard_normal((4, 8)).astype(np.float32)
    m(x=xs)
    assert m.executor.direct_path
    name = next(iter(m.plan.constants))
    new = np.eye(8, dtype=np.float32)
    m.plan.constants[name] = new                       # the general path reads the new one
    np.testing.assert_allclose(m(x=xs), xs @ new, rtol=1e-6)
    try:
        parallel.set_num_threads(max(1, parallel.num_threads()) + 1)
        np.testing.assert_allclose(m(x=xs), xs @ new, rtol=1e-6)
    finally:
        parallel.set_num_threads(None)


def test_calls_from_several_threads_at_once_get_their_own_results():
    g, pipeline, _ = _graphs()[2]
    m = compile(g, target="cpu", pipeline=pipeline)
    xs = [np.full((8, 64), float(i), np.float32) for i in range(8)]
    want = [_general(m, x=x)["y"] for x in xs]
    errors = []

    def worker(k):
        try:
            for _ in range(200):
                i = (k * 3 + _) % len(xs)
                np.testing.assert_array_equal(m(x=xs[i]), want[i])
        except AssertionError as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_plans_with_large_split_calls_take_the_direct_path(threads):
    # 2^19 elements and a 2^27-MAC product: split over the threads, each call
    # one raw call that runs its tiles on the native workers
    rng = np.random.default_rng(2)
    g = Graph()
    x = g.input("x", (512, 1024), "f32")
    w = g.constant(rng.standard_normal((1024, 256)).astype(np.float32), name="w")
    g.output(x.relu() @ w, name="y")
    before = parallel.num_threads()
    parallel.set_num_threads(threads)
    try:
        m = compile(g, target="cpu")
        xs = rng.standard_normal((512, 1024)).astype(np.float32)
        got = m(x=xs)
        assert m.executor.direct_path
        np.testing.assert_array_equal(got, _general(m, x=xs)["y"])
        np.testing.assert_allclose(got, interpret(g, {"x": xs})["y"], rtol=1e-4, atol=1e-3)
        for _ in range(4):  # the same descriptors again: a split at two threads as one native task
            xs = rng.standard_normal((512, 1024)).astype(np.float32)
            np.testing.assert_array_equal(m(x=xs), _general(m, x=xs)["y"])
        # the kernel calls, after the pointing of the descriptors at the
        # call's arrays, are one native call (runtime.native_plan); a split
        # at two threads is a row of it (its tiles one task of the native
        # pool, held for the run); at three threads it stays Python calls
        d = m.executor._direct
        assert len(d.calls) == 3 and len(d.segments) == (3 if threads == 3 else 1), d.segments
        assert len(d.pools) == (1 if threads == 2 else 0)
        segments, d.segments = d.segments, None      # the calls one by one
        try:
            one_by_one = m(x=xs)
        finally:
            d.segments = segments
        np.testing.assert_array_equal(m(x=xs), one_by_one)
        if d.pools:   # another thread holds the pool: the calls one by one, same result
            pool = d.pools[0][0]
            assert pool.busy.acquire(blocking=False)
            try:
                assert not pool.hold()
                np.testing.assert_array_equal(m(x=xs), one_by_one)
            finally:
                pool.busy.release()
            gen = pool.workers[0].gen
            np.testing.assert_array_equal(m(x=xs), one_by_one)
            splits = sum(hasattr(getattr(fn, "__self__", None), "native_row") for fn, _ in d.calls)
            assert pool.workers[0].gen == gen + splits == pool.workers[0].block[0] >> 32
    finally:
        parallel.set_num_threads(before)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_attention_products_run_as_sub_calls_take_the_direct_path(threads):
    # q @ k^T over heads permuted out of [B, S, H, D]: the batch axes cannot
    # merge, so the product runs as one batched sub-call per image (5 of
    # them: more than the threads), in rounds of the thread count
    rng = np.random.default_rng(3)
    b, s, h, d = 5, 9, 3, 8
    g = Graph()
    q = g.input("q", (b, s, h, d), "f32")
    k = g.input("k", (b, s, h, d), "f32")
    g.output(q.permute((0, 2, 1, 3)) @ k.permute((0, 2, 3, 1)), name="y")
    before = parallel.num_threads()
    parallel.set_num_threads(threads)
    try:
        m = compile(g, target="cpu")
        ins = {n: rng.standard_normal((b, s, h, d)).astype(np.float32) for n in "qk"}
        got = m(**ins)
        assert m.executor.direct_path, m.kernel_summary()
        calls = [fn for fn, addrs in m.executor._direct.calls if addrs]
        assert any(len(getattr(fn, "__self__", None).fns) == b for fn in calls
                   if hasattr(getattr(fn, "__self__", None), "fns")), calls
        np.testing.assert_array_equal(got, _general(m, **ins)["y"])
        np.testing.assert_allclose(got, interpret(g, ins)["y"], rtol=1e-5, atol=1e-5)
    finally:
        parallel.set_num_threads(before)


def test_reshapes_of_strided_values_view_or_copy_on_the_direct_path():
    # (a @ b)^T reshaped: splitting the strided last axis is a view; merging
    # the two axes of a transpose needs a copy, made in step order
    rng = np.random.default_rng(5)
    g = Graph()
    a = g.input("a", (4, 16), "f32")
    t = (a @ g.constant(rng.standard_normal((16, 6)).astype(np.float32), name="b")).permute((1, 0))
    g.output(t.reshape(6, 2, 2).softmax(-1), name="split")
    g.output(t.reshape(24).softmax(-1), name="merged")
    m = compile(g, target="cpu")
    xs = rng.standard_normal((4, 16)).astype(np.float32)
    first = m.run(a=xs)
    assert m.executor.direct_path, m.kernel_summary()
    from runtime import native_plan
    d = m.executor._direct
    copies = [c for c, addrs in d.calls if c in native_plan._copiers.values()]
    assert len(copies) == 1                              # the merge; the split is a view
    assert len(d.segments) == 1                          # a native row between the kernels
    general, want = _general(m, a=xs), interpret(g, {"a": xs})
    for name in ("split", "merged"):
        np.testing.assert_array_equal(first[name], general[name])
        np.testing.assert_allclose(first[name], want[name], rtol=1e-5, atol=1e-6)
    xs2 = xs[::-1].copy()       # the copy follows this call's values
    np.testing.assert_array_equal(m.run(a=xs2)["merged"], _general(m, a=xs2)["merged"])


def test_a_failing_python_step_between_native_runs_is_a_kernel_error_naming_it(monkeypatch):
    from runtime import native_plan
    from runtime.errors import KernelError
    monkeypatch.setattr(native_plan, "copy_function", lambda *a: None)  # the copy in numpy
    rng = np.random.default_rng(5)
    g = Graph()
    a = g.input("a", (4, 16), "f32")
    t = (a @ g.constant(rng.standard_normal((16, 6)).astype(np.float32), name="b")).permute((1, 0))
    g.output(t.reshape(24).softmax(-1), name="merged")   # a copy between two kernel calls
    m = compile(g, target="cpu")
    xs = rng.standard_normal((4, 16)).astype(np.float32)
    m.run(a=xs)
    d = m.executor._direct
    k = next(i for i, (fn, addrs) in enumerate(d.segments) if not addrs)   # the copy
    # (calls[0] points the descriptors at the call's arrays: a row of segment 0)
    assert len(d.segments) == 3 and d.segments[k] is d.calls[k + 1], d.segments

    def broken():
        raise MemoryError("no room")
    d.segments[k] = (broken, ())
    with pytest.raises(KernelError, match=f"^{re.escape(d.segment_where[k])}: MemoryError: no room"):
        m.run(a=xs)


@pytest.mark.parametrize("shape,perm,dtype", [
    ((1, 4, 32, 64), (0, 2, 1, 3), np.float32),   # runs of 64 contiguous elements
    ((1, 64, 8, 8), (0, 2, 3, 1), np.float32),    # one element at a time
    ((3, 5, 7), (2, 0, 1), np.float16),
    ((2, 3), (1, 0), np.int8),
    ((4, 6), (0, 1), np.float64),                 # one run: a memcpy
])
def test_native_strided_copies_match_numpy(shape, perm, dtype):
    from runtime import native_plan
    a = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
    v = a.transpose(perm)[:, ::2, ..., ::-1] if len(shape) == 4 else a.transpose(perm)  # < 0 strides
    fn, spec = native_plan.copy_function(v.shape, v.strides, v.itemsize)
    out = np.zeros(v.shape, dtype)
    fn(out.ctypes.data, v.ctypes.data, ctypes.addressof(spec))
    np.testing.assert_array_equal(out, v)
    assert native_plan.copy_function((2,) * 5, (4 ** k for k in range(5)), 1) is None  # > COPY_DIMS


def test_native_plan_rows_take_at_most_max_args_pointers():
    import ctypes
    from runtime import native_plan
    with pytest.raises(ValueError, match="at most 32 arguments"):
        native_plan.Rows([(1, (0,) * (native_plan.MAX_ARGS + 1))])
    assert native_plan.function_address(lambda: None) is None
    assert native_plan.function_address(ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 0)) is None
    assert native_plan.function_address(ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda p: None))


def test_a_saved_and_loaded_module_takes_the_direct_path_too(tmp_path):
    import runtime
    g, pipeline, inputs = _graphs()[0]
    m = compile(g, target="cpu", pipeline=pipeline)
    path = tmp_path / "m.fuel"
    m.save(str(path))
    r = runtime.load(str(path))
    got = r(**inputs)
    assert r.executor.direct_path
    np.testing.assert_array_equal(got, m(**inputs))
    np.testing.assert_array_equal(r(**inputs), _general(r, **inputs)["y"])
    assert r.executor._direct.segments, r.executor._direct.calls   # runs of native calls


def test_outputs_that_are_not_kernel_outputs_are_copied_out():
    # a transposed view of an intermediate, and one value named twice
    g = Graph()
    x = g.input("x", (4, 6), "f32")
    h = (x * 2.0).relu()
    g.output(h.permute((1, 0)), name="t")
    g.output(h + 1.0, name="a")
    g.output(h + 1.0, name="b")
    m = compile(g, target="cpu")
    xs = np.random.default_rng(4).standard_normal((4, 6)).astype(np.float32)
    first = m.run(x=xs)
    assert m.executor.direct_path
    general = _general(m, x=xs)
    for name in ("t", "a", "b"):
        np.testing.assert_array_equal(first[name], general[name])
    np.testing.assert_array_equal(first["t"], np.maximum(xs * 2, 0).T)
    again = m.run(x=-xs)                       # fresh arrays while the caller holds them
    assert not np.shares_memory(first["t"], again["t"])
    np.testing.assert_array_equal(again["t"], np.maximum(-xs * 2, 0).T)
    held = {first["t"].ctypes.data, again["t"].ctypes.data}
    del first, again                           # dropped: a copy goes into one of them (KEEP)
    third = m.run(x=xs)
    assert third["t"].ctypes.data in held and third["t"].flags.c_contiguous
    np.testing.assert_array_equal(third["t"], np.maximum(xs * 2, 0).T)


def test_a_reshape_of_a_strided_input_view_is_copied_from_each_calls_input():
    # patches of an image input (a ViT stem's view): the merge needs a copy,
    # made from the array of this call
    g = Graph()
    x = g.input("x", (2, 4, 6), "f32")
    p = x.reshape(2, 2, 2, 3, 2).permute((0, 1, 3, 2, 4)).reshape(2, 2, 12)
    g.output(p.softmax(-1), name="y")
    m = compile(g, target="cpu")
    rng = np.random.default_rng(6)
    for _ in range(2):
        xs = rng.standard_normal((2, 4, 6)).astype(np.float32)
        got = m.run(x=xs)
        assert m.executor.direct_path
        assert [c for c, addrs in m.executor._direct.calls if not addrs]   # the copy
        np.testing.assert_array_equal(got["y"], _general(m, x=xs)["y"])
        np.testing.assert_allclose(got["y"], interpret(g, {"x": xs})["y"], rtol=1e-6, atol=1e-6)


def test_intermediates_live_at_once_never_share_arena_memory():
    # a chain with a long-lived value (x1 is read again at the end): the
    # values computed between share memory, but none of them with x1
    rng = np.random.default_rng(3)
    g = Graph()
    x = g.input("x", (64, 512), "f32")
    x1 = (x * 1.5).exp()
    y = x1
    for i in range(6):
        y = (y.softmax(-1) * 2.0).sum(axis=1, keepdims=True) + y if i % 2 else y.softmax(-1)
    g.output(y + x1, name="y")
    inputs = {"x": rng.standard_normal((64, 512)).astype(np.float32)}
    m = compile(g, target="cpu", pipeline="no-fusion")
    out = m.run(**inputs)
    assert m.executor.direct_path
    np.testing.assert_array_equal(out["y"], _general(m, **inputs)["y"])
    np.testing.assert_allclose(out["y"], interpret(g, inputs)["y"], rtol=1e-5)
    direct = m.executor._direct
    offsets = direct.offsets
    sizes = {vid: -(-s.output_specs[0].dtype.itemsize * int(np.prod(s.output_specs[0].shape)) // 64) * 64
             for s in m.plan.steps if getattr(s, "outputs", None) and s.outputs[0] in offsets
             for vid in [s.outputs[0]]}
    # recompute lifetimes independently: first writer and every later reader
    first, last, root = {}, {}, {}
    for t, s in enumerate(m.plan.steps):
        kind = s.to_dict()["kind"]
        if kind in ("view", "reshape") and s.input in root:
            root[s.output] = root[s.input]
        for vid in getattr(s, "inputs", None) or [getattr(s, "input", None)]:
            if vid in root:
                last[root[vid]] = t
        for vid in getattr(s, "outputs", ()) if kind == "kernel" else ():
            if vid in offsets:
                root[vid], first[vid], last[vid] = vid, t, t
    for vid in m.plan.outputs.values():
        if vid in root:
            last[root[vid]] = len(m.plan.steps)
    vids = sorted(offsets)
    for i, a in enumerate(vids):
        for b in vids[i + 1:]:
            if first[a] <= last[b] and first[b] <= last[a]:   # live at once
                assert (offsets[a] + sizes[a] <= offsets[b]
                        or offsets[b] + sizes[b] <= offsets[a]), (a, b)
    # and the arena is smaller than a buffer per value (memory is reused)
    assert direct.arena.nbytes < sum(sizes.values())
    assert all(off % 64 == 0 for off in offsets.values())
    assert direct.arena.ctypes.data % 64 == 0


def test_an_arena_value_that_needs_zeroed_output_is_zeroed_right_before_its_kernel():
    # a kernel that does not store every output element (KernelCaps.full_write
    # False: the executor allocates its output with np.zeros) gets its arena
    # slice zero-filled by a call just before its own, not once per run: other
    # values use that memory earlier in the run
    rng = np.random.default_rng(4)
    g = Graph()
    a = g.input("a", (32, 48), "f32")
    h = (a.exp() * 3.0) @ g.constant(rng.standard_normal((48, 40)).astype(np.float32), name="w")
    g.output((h.relu() + 1.0).sum(axis=0), name="y")
    m = compile(g, target="cpu", pipeline="no-fusion")
    runners = [r.__self__ for r in m.executor._plain_runners if hasattr(r, "__self__")]
    relu = next(r for r in runners if getattr(r.step, "name", "").startswith("relu"))
    relu.alloc = np.zeros          # as a kernel without full_write would have it
    for seed in (5, 6):
        inputs = {"a": np.random.default_rng(seed).standard_normal((32, 48)).astype(np.float32)}
        out = m.run(**inputs)
        assert m.executor.direct_path
        np.testing.assert_array_equal(out["y"], _general(m, **inputs)["y"])
        np.testing.assert_allclose(out["y"], interpret(g, inputs)["y"], rtol=1e-4, atol=1e-3)
    from runtime import native_plan
    direct = m.executor._direct
    zero = native_plan.zero_function()     # a row of the native run, not a numpy fill
    fills = [(i, addrs) for i, (fn, addrs) in enumerate(direct.calls) if fn is zero]
    assert len(fills) == 1 and len(direct.segments) == 1
    i, (address, nbytes) = fills[0]
    off = direct.offsets[relu.step.outputs[0]]
    assert address == direct.arena.ctypes.data + off and nbytes == 32 * 40 * 4
    assert direct.where[i] == direct.where[i + 1] == relu.where   # right before the relu's call
    buf = np.ones(64, np.uint8)
    zero(buf.ctypes.data + 8, 40)
    assert not buf[8:48].any() and buf[:8].all() and buf[48:].all()


def test_outputs_of_a_page_or_more_lie_half_a_page_from_the_largest_input():
    """``runtime.direct.PAGE``: an output of at least a page starts 64-byte
    aligned, half a page (address bits 0-11) from the largest input, whatever
    offset the allocator gives (a kernel storing at the page offset of what it
    loads next waits on each store); smaller outputs are allocated as they are."""
    from runtime.direct import ALIGN, PAGE
    rng = np.random.default_rng(4)
    g = Graph()
    x, w = g.input("x", (2, 64), "f32"), g.input("w", (64, 1024), "f32")
    g.output(x @ w, name="y")
    g.output((x * 2.0).sum(axis=1), name="s")
    m = compile(g, target="cpu")
    xs = rng.standard_normal((2, 64)).astype(np.float32)
    pads = []
    for i in range(6):
        ws = rng.standard_normal((64, 1024)).astype(np.float32)
        pads.append(np.empty(16 * (i + 1), np.uint8))       # moves the allocator's offsets
        out = m(x=xs, w=ws)
        assert m.executor.direct_path
        y = out["y"]
        want = ((ws.ctypes.data + PAGE // 2) & -ALIGN) % PAGE
        assert y.ctypes.data % PAGE == want and y.ctypes.data % ALIGN == 0
        assert y.nbytes >= PAGE and out["s"].nbytes < PAGE
        small = out["s"]
        assert (small if small.base is None else small.base).nbytes == small.nbytes  # not padded
        np.testing.assert_array_equal(y, _general(m, x=xs, w=ws)["y"])
        np.testing.assert_allclose(y, xs @ ws, rtol=1e-4, atol=1e-4)


def test_the_arena_starts_half_a_page_from_numpys_large_arrays():
    """``runtime.direct.ARENA_PAGE_OFFSET``: the intermediates' arena starts at
    that page offset, whatever offset the allocator gives (the chunks of a
    product split over K are written there, between loads of B)."""
    from runtime.direct import ARENA_PAGE_OFFSET, PAGE
    g = Graph()
    x, w = g.input("x", (4, 64), "f32"), g.input("w", (64, 64), "f32")
    g.output((x @ w).sum(axis=1), name="s")              # x @ w: an intermediate
    pads = []
    for i in range(3):
        pads.append(np.empty(16 * (i + 1), np.uint8))       # moves the allocator's offsets
        m = compile(g, target="cpu")
        m(x=np.ones((4, 64), np.float32), w=np.ones((64, 64), np.float32))
        arena = m.executor._direct.arena
        assert arena.nbytes and arena.ctypes.data % PAGE == ARENA_PAGE_OFFSET


def test_outputs_come_back_only_once_nothing_refers_to_them_or_their_memory():
    """``runtime.direct.KEEP``: a call hands out a plan output's array again
    once the caller has dropped it and every view of it (a view of an output
    placed in a larger buffer refers to that buffer), never while held."""
    rng = np.random.default_rng(6)
    g = Graph()
    x, w = g.input("x", (2, 64), "f32"), g.input("w", (64, 1024), "f32")
    g.output(x @ w, name="y")                      # a page or more: placed (PAGE)
    g.output((x * 2.0).sum(axis=1), name="s")      # smaller
    m = compile(g, target="cpu")
    xs, ws = rng.standard_normal((2, 64)).astype(np.float32), rng.standard_normal((64, 1024)).astype(np.float32)
    out = m(x=xs, w=ws)
    assert m.executor.direct_path
    y, s = out["y"], out["s"]
    del out
    first = (y.ctypes.data, s.ctypes.data)
    row, y_want, s_want = y[1], y.copy(), s.copy()
    del y
    again = m(x=xs * 2, w=ws)          # y's buffer (through ``row``) and s still held
    assert not np.shares_memory(again["y"], row) and not np.shares_memory(again["s"], s)
    np.testing.assert_array_equal(row, y_want[1])
    np.testing.assert_array_equal(s, s_want)
    np.testing.assert_array_equal(again["y"], _general(m, x=xs * 2, w=ws)["y"])
    del row, s, again

    out = m(x=xs, w=ws)                # nothing refers to the first call's arrays: back
    assert (out["y"].ctypes.data, out["s"].ctypes.data) == first
    np.testing.assert_array_equal(out["y"], y_want)
    np.testing.assert_array_equal(out["s"], s_want)
    seen = set()
    for i in range(6):                 # ``y = m(...)`` holds the last while the next runs
        y = m(x=xs + i, w=ws)["y"]
        np.testing.assert_allclose(y, (xs + i) @ ws, rtol=1e-4, atol=1e-3)
        seen.add(y.ctypes.data)
    assert len(seen) <= 2


def test_the_python_pointing_of_descriptors_matches_the_native_one(monkeypatch):
    # without native_plan.point_function, a call writes each array's address
    # and a Python call stores it in the descriptors
    from runtime import native_plan
    g, pipeline, inputs = _graphs()[1]
    native = compile(g, target="cpu", pipeline=pipeline).run(**inputs)
    monkeypatch.setattr(native_plan, "point_function", lambda: None)
    m = compile(g, target="cpu", pipeline=pipeline)
    for _ in range(2):
        got = m.run(**inputs)
        assert m.executor.direct_path and not isinstance(m.executor._direct.calls[0][0], ctypes._CFuncPtr)
        for name in native:
            np.testing.assert_array_equal(got[name], native[name])
            np.testing.assert_array_equal(got[name], _general(m, **inputs)[name])


def test_plan_constants_count_their_changes():
    """``executor.Constants``: the direct path checks its constants by the
    version of ``plan.constants``, so every change moves it."""
    from runtime.executor import Constants, Plan
    plan = Plan({}, {}, [], {"a": np.zeros(1)})
    assert isinstance(plan.constants, Constants)
    changes = [lambda c: c.__setitem__("b", 2), lambda c: c.update(c=3), lambda c: c.pop("c"),
               lambda c: c.setdefault("d", 4), lambda c: c.__delitem__("d"),
               lambda c: c.__ior__({"e": 5}), lambda c: c.popitem(), lambda c: c.clear()]
    for change in changes:
        before = plan.constants.version
        change(plan.constants)
        assert plan.constants.version == before + 1
    plan.constants = {"z": np.ones(1)}
    assert isinstance(plan.constants, Constants) and list(plan.constants) == ["z"]
