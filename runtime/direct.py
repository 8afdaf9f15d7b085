"""The executor's direct path: a plan of small kernels run as a fixed list of
raw calls.

A run of the general path costs, per kernel step, an output allocation, a
descriptor per argument, the contiguize checks and the environment updates:
some 20 us of Python on a slow core, far more than a tiny kernel. When every
step of a plan is fixed by the plan alone, ``DirectRun.build`` settles all of
that once:

* the intermediate values share one arena, kept from run to run: each gets
  an offset in it where no value live at the same time lies (``arena_plan``:
  lifetimes by step, offsets greedy by size), so the memory a layer writes
  was mostly just read by the layers before it and is still in cache (a
  buffer per value made a batch-8 CNN's working set its whole activations,
  streamed from DRAM every run); a kernel that needs zeroed output gets its
  slice zero-filled right before its call;
* every kernel call becomes ``(raw function, descriptor addresses)``, the
  descriptors built once over those buffers and the constants;
* view and reshape steps become the layouts of the descriptors that read them
  (a reshape of a strided value that no layout can express, and a
  contiguize step, become a copy into a buffer of its own, in step order).

A run then only points the descriptors of the inputs and of the plan outputs
(arrays of the caller's: fresh ones, or ones it returned before and the
caller has since dropped, ``KEEP``) at this call's memory, natively from
the arrays' ids (``_add_pointing``), and makes the raw calls in order: each
maximal run of native ones as one call of
``native_plan``'s row walker (``DirectRun.segments``; a two-tile split call is
a row while its native pool is held, docs/architecture.md). Eligible: plans
whose kernel steps each run as one raw call (``prepare_raw`` of the kernel; a
call split over threads is one call that runs its tiles on the compiler's
native workers), with no bundles, index checks, deferred row counts or
copies to contiguize. Outputs that are not a
kernel's output named once (a view of an intermediate, an output named
twice) are copied out after the calls, as the general path does. A call uses
it only for C-contiguous inputs of exactly the plan's dtype and shape, while
the thread count and the constants are the ones it was built with, and one
call at a time; anything else takes the general path, with the same results.
A call at another thread count than the build's builds the path again for
that count (at most ``executor.DIRECT_REBUILDS`` times per executor).
"""
from __future__ import annotations

import ctypes
import sys
import threading
import weakref

import numpy as np

from .dtype import from_storage
from .errors import KernelError
from .layout import Layout
from .storage import Storage

_addressof = ctypes.addressof
_char_from_buffer = ctypes.c_char.from_buffer


def _gone():
    """A weak reference whose array is gone."""
    return None


def _api_dtype(dtype) -> np.dtype:
    """The numpy dtype a caller gets for storage of ``dtype`` (what
    ``from_storage`` views it as), settled once: a run views each output
    buffer as it directly."""
    return from_storage(np.empty(0, dtype.storage_numpy), dtype).dtype


def _address(arr: np.ndarray) -> int:
    """The address of ``arr``'s data (C-contiguous). A ctypes view of its
    buffer costs about 0.2 us, ``arr.ctypes.data`` 0.9 us (it builds numpy's
    ctypes helper object): with three or four arrays a call, a few us of a
    small step. Read-only and empty arrays take ``arr.ctypes.data``."""
    try:
        return _addressof(_char_from_buffer(arr))
    except (TypeError, ValueError):
        return arr.ctypes.data


class DirectRun:
    """A plan's kernel calls, their descriptors and buffers, settled once."""

    __slots__ = ("plan", "lock", "calls", "inputs", "outputs", "copied", "current", "probes", "consts",
                 "where", "arena", "offsets", "anchor", "segments", "segment_where", "pools", "_keep",
                 "reads_inputs", "values", "ref", "const_seen", "placed")

    def __init__(self, plan):
        self.plan = plan
        self.lock = threading.Lock()
        self.calls: list[tuple] = []      # (raw function, descriptor addresses)
        self.where: list[str] = []        # the step each call is, for errors
        self.inputs: list[tuple] = []     # (name, api dtype, shape, slot in values, is the anchor)
        self.outputs: list[tuple] = []    # (name, alloc, nbytes, api numpy dtype, shape, slot in values,
        #                                    the arrays returned, kept: [array, page offset, _FREE])
        self.values = None                # this call's arrays, one slot each (_add_pointing)
        self.ref = _address               # what of an array a slot holds: id or _address
        self.copied: list[tuple] = []     # (name, api-dtype view of a plan buffer, the arrays kept)
        self.current: dict = {}           # this call's input arrays (copies from inputs read them)
        self.reads_inputs = False         # whether such copies exist
        self.arena: np.ndarray | None = None  # the intermediates' memory
        self.offsets: dict[str, int] = {}     # intermediate value id -> byte offset in the arena
        self.probes: list[tuple] = []     # (probe, value): the call list holds while equal
        self.consts: list[tuple] = []     # (name, array the storage was built from)
        self.const_seen: tuple = (None, 0)  # (plan.constants, its version) the consts matched
        self.anchor: str | None = None    # the largest input: outputs are placed from it (PAGE)
        self.placed = (_gone, 0)          # (weak reference to it, page offset), ``_place``
        self.segments: list | None = None  # the calls with runs of them as one native call each
        self.segment_where: list[str] = []  # the step(s) each segment is, for errors
        self.pools: list[tuple] = []      # (native pool, argument slots): held while segments run
        self._keep: list = []             # kernel functions, storages, descriptors

    @classmethod
    def build(cls, executor, runners) -> "DirectRun | None":
        """The direct form of ``executor``'s plan (``runners``: its step
        runner objects), or None when some step needs the general path."""
        from .executor import (_ConstRunner, _ContiguizeRunner, _KernelRunner, _ReshapeRunner,
                               _ViewRunner)
        plan = executor.plan
        if executor.resident is not None:
            return None
        self = cls(plan)
        owned = executor._owned_outputs
        self.offsets, size = arena_plan(plan, runners, owned)
        # 64-byte aligned slices of one buffer (numpy aligns less), starting
        # at ARENA_PAGE_OFFSET in its page
        raw = np.empty(size + PAGE, dtype=np.uint8)
        skip = (ARENA_PAGE_OFFSET - raw.ctypes.data) % PAGE
        self.arena = raw[skip:skip + size]
        # value id -> (source, storage, layout, elements of the buffer);
        # source: ("input", name) | ("output", vid) | None (a storage fixed
        # for good, then given)
        env: dict[str, tuple] = {}
        patch: dict[tuple, list] = {}     # source -> descriptors a call points at it
        producers: dict[str, object] = {}  # plan output vid -> its kernel runner
        for name, spec in plan.inputs.items():
            if spec.dtype.numpy is None or 0 in spec.shape:
                return None
            lay = Layout.contiguous(spec.shape)
            env[name] = (("input", name), None, lay, lay.numel)
        for runner in runners:
            if isinstance(runner, _ConstRunner):
                scratch: dict = {}
                runner.run(scratch, {})
                src = plan.constants[runner.step.const]
                if runner._cached is None or runner._cached[0] is not src:
                    return None  # a constant copied on every run
                self.consts.append((runner.step.const, src))
                st, lay = scratch[runner.step.output]
                env[runner.step.output] = (None, st, lay, st.numel)
            elif isinstance(runner, _ViewRunner):
                source, st, lay, n = env[runner.step.input]
                env[runner.step.output] = (source, st, runner.step.apply(lay), n)
            elif isinstance(runner, _ReshapeRunner):
                source, st, lay, n = env[runner.step.input]
                if lay.is_contiguous() and lay.start_offset == 0:
                    env[runner.step.output] = (source, st, runner.layout, n)
                    continue
                view = lay.reshaped(runner.step.shape)
                if view is not None:
                    env[runner.step.output] = (source, st, view, n)
                elif st is not None or source[0] == "input":  # copied into a buffer of its own
                    env[runner.step.output] = self._add_copy(st, lay, runner, source=source)
                else:
                    return None
            elif isinstance(runner, _ContiguizeRunner):
                source, st, lay, n = env[runner.step.input]
                if st is None and source[0] != "input":
                    return None
                env[runner.step.output] = self._add_copy(st, lay, runner, lay, source)
            elif isinstance(runner, _KernelRunner):
                if not self._add_kernel(runner, env, patch, producers, owned):
                    return None
            else:
                return None
        if plan.inputs:
            self.anchor = max(plan.inputs, key=lambda n: plan.inputs[n].dtype.numpy.itemsize
                              * int(np.prod(plan.inputs[n].shape)))
        slots = []   # the descriptors each slot of ``values`` points at this call's array
        for name, spec in plan.inputs.items():
            self.inputs.append((name, spec.dtype.numpy, tuple(spec.shape), len(slots), name == self.anchor))
            slots.append(patch.get(("input", name), ()))
        for name, vid in plan.outputs.items():
            if vid in producers:
                runner = producers[vid]
                spec = runner.step.output_specs[0]
                self.outputs.append((name, runner.alloc, runner.out_allocs[0][1], _api_dtype(spec.dtype),
                                     tuple(spec.shape), len(slots), []))
                slots.append(patch.get(("output", vid), ()))
                continue
            # a view of a buffer of the plan's, or an output named twice: copied
            # out after the calls, as the general path does
            source, st, lay, _n = env[vid]
            if st is None:
                return None
            # (the API dtype has the storage's item size: a view of any strides)
            self.copied.append((name, st.view(lay).view(_api_dtype(executor.specs[vid].dtype)), []))
        self.probes = list({id(p): (p, v) for p, v in self.probes}.values())
        self._add_pointing(slots)
        self._add_segments()
        return self

    def _add_pointing(self, slots: list) -> None:
        """``values``: one int64 slot per input and plan output, where a
        call writes its array's ``id`` (``ref``); and, as the first call,
        the pointing of every descriptor of slot ``i`` at the data of the
        array in ``values[i]``: one native call
        (``native_plan.point_function``: a row of the first native run)
        instead of each array's address read in Python and two ctypes
        attribute stores per descriptor (a two-tile split call reads each
        argument through two). Without it a call writes the addresses
        themselves (``ref`` is ``_address``) and a Python call stores them."""
        from . import native_plan
        self.values = values = (ctypes.c_int64 * max(1, len(slots)))()
        pairs = [(d, i) for i, descs in enumerate(slots) for d in descs]
        point = native_plan.point_function()
        self.ref = id if point is not None else _address
        if not pairs:
            return
        if point is not None:
            base = _addressof(values)
            table = (ctypes.c_int64 * (2 * len(pairs)))(
                *[a for d, i in pairs for a in (_addressof(d), base + 8 * i)])
            self._keep.append(table)
            call = (point, (_addressof(table), len(pairs)))
        else:
            def call():
                for d, i in pairs:
                    d.allocated = d.aligned = values[i]
            call = (call, ())
        self.calls.insert(0, call)
        self.where.insert(0, "pointing the descriptors at the call's arrays")

    def _add_segments(self) -> None:
        """``segments``: ``calls`` with each maximal run of native calls (a
        kernel's raw function; a two-tile split call's ``native_row``, its
        pool then in ``pools``) as one call of ``native_plan.runner()``,
        which makes them in order with the GIL released once. Split calls
        stay Python calls when one that is not a row remains (it would find
        its pool held by the run); no segments without the JIT."""
        from . import native_plan
        if native_plan.runner() is None:
            return
        for splits in (True, False):
            rows, pools, blocked = [], {}, False
            for raw, addrs in self.calls:
                row, owner = None, getattr(raw, "__self__", None)
                fn = native_plan.function_address(raw)
                if fn is not None and len(addrs) <= native_plan.MAX_ARGS:
                    row = (fn, addrs)
                elif hasattr(owner, "native_row"):
                    native = owner.native_row(*addrs) if splits else None
                    if native is None:
                        blocked = True
                    else:
                        fn, args, pool, n = native
                        row = (fn, args)
                        pools[id(pool)] = (pool, max(n, pools.get(id(pool), (pool, 0))[1]))
                rows.append(row)
            if not (blocked and pools):
                break
        self.segments, self.segment_where, start = [], [], 0
        for i in range(len(rows) + 1):
            if i < len(rows) and rows[i] is not None:
                continue
            if start < i:
                table = native_plan.Rows(rows[start:i])
                self._keep.append(table)
                self.segments.append((table.fn, (table.address, table.n)))
                self.segment_where.append(self.where[start] if i - start == 1 else
                                          f"{self.where[start]} .. {self.where[i - 1]}")
            if i < len(rows):
                self.segments.append(self.calls[i])
                self.segment_where.append(self.where[i])
            start = i + 1
        self.pools = list(pools.values())

    def _add_copy(self, st, lay: Layout, runner, out_layout=None, source=None) -> tuple:
        """A contiguize step, or a reshape whose strided input cannot be
        viewed in the new shape: a copy into a row-major buffer of its own,
        made in step order. From a plan buffer ``st``: a native strided copy
        (``native_plan.copy_function``, a row of a native run) where there is
        one, else a numpy assignment (what the general path does on every
        run); from this call's input ``source`` (``st`` None): a numpy
        assignment from an array built over it on each call."""
        dtype = st.dtype if st is not None else self.plan.inputs[source[1]].dtype
        out = Storage.empty(dtype, lay.numel)
        out_layout = out_layout if out_layout is not None else runner.layout
        dst = out.view(Layout.contiguous(lay.shape))
        native = None
        if st is not None:
            from . import native_plan
            src = st.view(lay)
            self._keep.append(st)
            native = native_plan.copy_function(src.shape, src.strides, src.itemsize)
        if native is not None:  # a native call: a row of a segment (native_plan)
            fn, spec = native
            self._keep.extend((dst, src, spec))
            self.calls.append((fn, (_address(dst), src.ctypes.data, _addressof(spec))))
        elif st is not None:
            self.calls.append((lambda: np.copyto(dst, src), ()))
        else:
            name, item = source[1], dst.itemsize
            shape, strides = lay.shape, tuple(x * item for x in lay.stride)
            offset, current = lay.start_offset * item, self.current
            self.reads_inputs = True

            def copy():
                arr = current[name]
                np.copyto(dst, np.ndarray(shape, dst.dtype, buffer=arr, offset=offset,
                                          strides=strides))
            self.calls.append((copy, ()))
        self._keep.append(out)
        self.where.append(runner.step.name or runner.step.output)
        return None, out, Layout.contiguous(out_layout.shape), lay.numel

    def _add_kernel(self, runner, env, patch, producers, owned) -> bool:
        from .executor import needs_contiguize
        step = runner.step
        prepare_raw = getattr(runner.entry.kernel.fn, "prepare_raw", None)
        if (prepare_raw is None or runner.bundle_slots is not None or runner.index_checks
                or runner.deferred or len(step.outputs) != 1):
            return False
        sources, storages, layouts = [], [], []
        for vid, _fresh in runner.inputs:
            source, st, lay, n = env[vid]
            if st is not None:
                if needs_contiguize(st, lay, runner.strided, runner.view):
                    return False
            elif not runner.view and (lay.start_offset != 0 or lay.numel != n or not (
                    lay.is_contiguous() or runner.strided)):
                return False  # (needs_contiguize over the call's n-element buffer)
            sources.append(source)
            storages.append(st)
            layouts.append(lay)
        vid = step.outputs[0]
        out_layout = runner.out_layouts[0]
        if vid in owned:
            out_source, out_storage = ("output", vid), None
            producers[vid] = runner
        else:
            dt, nbytes = runner.out_allocs[0]
            off = self.offsets[vid]
            buf = self.arena[off:off + nbytes]
            if runner.alloc is np.zeros:  # other values use this memory between runs
                from . import native_plan
                zero = native_plan.zero_function()   # a row of a native run (or numpy's fill)
                self.calls.append((zero, (_address(buf), nbytes)) if zero is not None else (buf.fill, (0,)))
                self.where.append(runner.where)
            out_source, out_storage = None, Storage._wrap(buf, dt)
        try:
            prepared = prepare_raw(layouts + [out_layout], step.params, len(layouts))
        except Exception:  # the general path reports it, naming the step
            return False
        if prepared is None:
            return False
        fn, templates, probe = prepared
        descs = []
        # a call split into tiles has each tile's templates, tile after tile
        n_args = len(sources) + 1
        if not templates or len(templates) % n_args:
            return False
        for j, template in enumerate(templates):
            source, st = (sources + [out_source])[j % n_args], (storages + [out_storage])[j % n_args]
            d = template.unbound() if st is None else template.bind(st)
            if st is None:
                patch.setdefault(source, []).append(d)
            descs.append(d)
        self._keep.extend((fn, descs, storages, out_storage))
        self.calls.append((fn.raw, tuple(_addressof(d) for d in descs)))
        self.where.append(runner.where)
        self.probes.append(probe)
        env[vid] = (out_source, out_storage, out_layout, out_layout.numel)
        return True

    def _place(self, largest) -> int:
        """The page offset for this call's outputs of a page or more (PAGE),
        from the largest input (None: 0); remembered for that array while it
        lives (reading its address takes 0.3-0.6 us, a weak reference 0.05)."""
        if largest is None:
            return 0
        seen, place = self.placed
        if seen() is not largest:
            place = ((_address(largest) + PAGE // 2) & -ALIGN) % PAGE
            self.placed = (weakref.ref(largest), place)
        return place

    def probes_hold(self) -> bool:
        """Whether what the calls were prepared for (the thread count) still
        holds; when it does not, the executor builds the path again
        (``Executor._rebuild_direct``)."""
        return all(probe() == value for probe, value in self.probes)

    def run(self, inputs: dict) -> dict | None:
        """The plan's outputs for ``inputs``, or None when this call must take
        the general path (see the module docstring)."""
        if not self.lock.acquire(False):
            return None
        try:
            for pool, _ in self.pools:   # a sleeping worker wakes while this call's Python runs
                pool.wake()
            for probe, value in self.probes:
                if probe() != value:
                    return None
            constants, seen = self.plan.constants, self.const_seen
            if constants is not seen[0] or constants.version != seen[1]:
                for name, src in self.consts:
                    if constants[name] is not src:
                        return None
                version = getattr(constants, "version", None)
                if version is not None:  # (executor.Constants) unchanged until it moves
                    self.const_seen = (constants, version)
            if len(inputs) != len(self.inputs):
                return None
            values, ref, largest = self.values, self.ref, None
            for name, dtype, shape, slot, anchor in self.inputs:
                arr = inputs.get(name)
                if type(arr) is not np.ndarray or arr.dtype is not dtype and arr.dtype != dtype \
                        or arr.shape != shape or not arr.flags.c_contiguous:
                    return None
                values[slot] = ref(arr)
                if anchor:
                    largest = arr
            if self.reads_inputs:
                self.current.update(inputs)
            out, place = {}, None
            for name, alloc, nbytes, view, shape, slot, kept in self.outputs:
                if nbytes < PAGE:
                    at = 0
                else:  # half a page from the largest input's page offset (PAGE)
                    if place is None:
                        place = self._place(largest)
                    at = place
                arr = _kept(kept, at)   # an array the caller holds no more (KEEP)
                if arr is None:
                    if nbytes >= PAGE:
                        buf = alloc(nbytes + PAGE, np.uint8)
                        arr = np.ndarray(shape, view, buf, (at - _address(buf)) % PAGE)
                    else:
                        arr = alloc(shape, view)
                    if alloc is np.empty:   # (a zeroed output is made anew)
                        kept[:] = kept[1 - KEEP:] + [[arr, at, _FREE[nbytes >= PAGE]]]
                out[name] = arr
                values[slot] = ref(arr)
            calls, where, held = self.segments, self.segment_where, []
            if calls is not None:
                for pool, n_args in self.pools:
                    if not pool.hold():  # in use, asleep or gone: the calls one by one
                        for p, n in held:
                            p.release(n)
                        calls, held = None, []
                        break
                    held.append((pool, n_args))
            if calls is None:
                calls, where = self.calls, self.where
            i = 0
            try:
                for raw, addrs in calls:
                    raw(*addrs)
                    i += 1
            except Exception as e:  # a kernel must never crash its caller
                raise KernelError(f"{where[i]}: {type(e).__name__}: {e}") from e
            finally:
                for pool, n_args in held:
                    pool.release(n_args)
            for name, src, kept in self.copied:   # into a kept array, as above
                arr = _kept(kept, 0)
                if arr is None:
                    arr = np.empty(src.shape, src.dtype)
                    kept[:] = kept[1 - KEEP:] + [[arr, 0, _FREE[False]]]
                arr[...] = src
                out[name] = arr
            return out
        finally:
            if self.reads_inputs:
                self.current.clear()
            self.lock.release()


#: The arrays of each plan output kept for later calls of the direct path:
#: a call returns a kept array again once no one else refers to it or to
#: its memory (the caller dropped it and every view of it; ``_refs``), else
#: a new one, keeping the newest KEEP. Two, so that a loop ``y = m(x=...)``,
#: which still holds the last output while the next one is computed,
#: alternates between two arrays instead of allocating one per call. (The
#: M=1 linear of docs/benchmarks.md: an allocation, its address and the
#: array over it, some 1.2 us of each call; and a reused output is still in
#: cache.) A zeroed output (a kernel without ``full_write``) is made anew.
KEEP = 2


def _kept(kept: list, at: int):
    """The first kept array at page offset ``at`` that no one else refers to
    (``_refs``), or None."""
    for entry in kept:
        if entry[1] == at and _refs(entry) == entry[2]:
            return entry[0]
    return None


def _refs(entry: list) -> int:
    """The references to a kept output array and to the buffer it lies in
    (its ``base``: a view of it refers to that buffer instead): ``_FREE``
    when only the kept entry has them."""
    arr = entry[0]
    base = arr.base
    return sys.getrefcount(arr) + (sys.getrefcount(base) if base is not None else 0)


def _free_refs(placed: bool) -> int:
    """``_refs`` of an entry no one else refers to: an array placed in a
    larger buffer (``placed``), or one owning its memory."""
    arr = np.ndarray((1,), np.uint8, np.empty(2, np.uint8), 1) if placed else np.empty(1, np.uint8)
    entry = [arr]
    del arr
    return _refs(entry)


#: ``_refs`` of a free entry, by whether its array lies in a larger buffer
_FREE = {placed: _free_refs(placed) for placed in (False, True)}


#: An output of at least a page is placed half a page (in address bits 0-11)
#: from the call's largest input, 64-byte aligned (ALIGN): where a kernel
#: stores to its output at the page offset of the input it is about to load
#: (within a few hundred bytes), each such load waits on the store ("4K
#: aliasing"). The few-rows product stores each output tile between its
#: loads of B: one znver4 thread, [1,768] @ [768,3072] + b with B an input,
#: min thread time of a call over 1500 outputs at every page offset, 183 us
#: with the output within 256 bytes past B's page offset against 145-150
#: elsewhere (numpy hands back outputs at whatever offset malloc gives).
PAGE = 4096
ALIGN = 64

#: Byte alignment of each value in the arena (a cache line: a vector load
#: never straddles two lines at a value's start).
ARENA_ALIGN = 64
#: Where in its page the arena starts (its largest value lies there): half a
#: page from where numpy's arrays of 128 KiB or more start (16 bytes past a
#: page, glibc's mmap header), for the 4K aliasing of PAGE, which the arena,
#: built once, cannot follow per call as an output does. The product of a
#: few rows split over K (``fuel-split-gemv``) writes its chunks into the
#: arena: one znver3 thread, [1,768] @ [768,3072] + b, B an input, the arena
#: where malloc put it, 80 or 336 bytes before B's page offset in 4
#: processes: 196-219 us a call against 157-164 placed (min thread time).
ARENA_PAGE_OFFSET = PAGE // 2 + ARENA_ALIGN


def arena_plan(plan, runners, owned) -> tuple[dict[str, int], int]:
    """Offsets in one arena for the intermediate values of ``plan`` (the
    kernel outputs not handed to the caller, ``owned``), and its size.

    A value lives from the step that computes it to the last step that reads
    it or a view or reshape of it (a plan output that is such a view: to the
    end). Values are placed largest first, each at the lowest aligned offset
    that no placed value live at an overlapping time occupies (the greedy
    by-size placement of TFLite's and onnxruntime's memory planners): the
    arena is about the largest set of values live at once."""
    from .executor import _ContiguizeRunner, _KernelRunner, _ReshapeRunner, _ViewRunner
    root: dict[str, str] = {}   # value id -> the intermediate whose memory it is
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    size: dict[str, int] = {}
    for t, runner in enumerate(runners):
        step = getattr(runner, "step", None)
        if isinstance(runner, (_ViewRunner, _ReshapeRunner)):
            if step.input in root:
                root[step.output] = root[step.input]
        elif isinstance(runner, _ContiguizeRunner):
            if step.input in root:
                last[root[step.input]] = t
        elif isinstance(runner, _KernelRunner):
            for vid, _fresh in runner.inputs:
                if vid in root:
                    last[root[vid]] = t
            if runner.out_allocs is not None and len(step.outputs) == 1 and step.outputs[0] not in owned:
                vid = step.outputs[0]
                root[vid], first[vid], last[vid] = vid, t, t
                size[vid] = -(-runner.out_allocs[0][1] // ARENA_ALIGN) * ARENA_ALIGN
    end = len(runners)
    for vid in plan.outputs.values():
        if vid in root:
            last[root[vid]] = end
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, first, last)
    offsets, total = {}, 0
    for vid in sorted(size, key=lambda v: (-size[v], first[v])):
        lo, hi, n = first[vid], last[vid], size[vid]
        off = 0
        for o, m, f, l in sorted(p for p in placed if p[2] <= hi and lo <= p[3]):
            if off + n <= o:
                break
            off = max(off, o + m)
        placed.append((off, n, lo, hi))
        offsets[vid] = off
        total = max(total, off + n)
    return offsets, total


__all__ = ["DirectRun", "arena_plan", "PAGE", "ALIGN", "KEEP"]
