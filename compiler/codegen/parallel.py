"""Multi-threaded kernel calls: one compiled kernel run on disjoint tiles of
its operands, on a process-wide thread pool.

A kernel family may say how a call splits (``KernelFamily.split``): which
axis of each operand is cut into row / batch tiles (``None``: the operand is
read whole by every tile). Each tile is the same op on sub-views of the same
memory, so the family compiles it like any call (dynamic-shape kernels are
shared by every tile; static ones compile at most two tile shapes), and the
tiles run concurrently: the compiled functions are called through ctypes,
which releases the GIL. Tiles write disjoint parts of the output and every
element is computed by the same code as in one call, so results do not depend
on the thread count.

The thread count is ``$FUELC_NUM_THREADS`` (default: the CPUs this process
may run on), or ``set_num_threads(n)``; 1 turns splitting off.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import math
import os
import re
import threading
from typing import Callable, Sequence

from compiler.errors import CompilerError
from runtime.cpu_features import usable_cpus
from runtime.layout import Layout

ENV = "FUELC_NUM_THREADS"

#: Below this many output elements (elementwise / row ops) or multiply-adds
#: (matmul) a call runs on one thread: a pool round trip costs ~20-60 us.
#: (Measured on the encoder block's steps, 2 threads: [1,128,384] Add and
#: LayerNorm took 0.09 ms split in two and 0.03 ms on one thread; the
#: [1,12,128,128] Affine 0.10 ms split, 0.05 ms whole.)
MIN_ELEMENTS = 1 << 18
MIN_MACS = 1 << 20

#: An elementwise / row call whose kernel evaluates a transcendental per
#: element (exp, erf, tanh, log, pow, sin, cos: ~2-3 ns per element on one
#: thread, 5-10x an add) is worth splitting at a quarter of the elements.
#: (Measured on the encoder block, 2 threads: the [1,128,1536] erf-GELU took
#: 0.65 ms whole, and the [1,12,128,128] softmax 0.39 ms.)
MIN_ELEMENTS_TRANSCENDENTAL = MIN_ELEMENTS // 4

#: A copy kernel (a conv's im2col Concat, its Pad) split by images
#: (``image_tiles``): from this many output elements. Tiles of at most one
#: per thread run on the native workers (a few us a call, not the pool's
#: 20-60); see docs/architecture.md ("Threading is shared too").
MIN_COPY_ELEMENTS = 1 << 16
#: At two threads a split call is cut into this many tiles per thread, which
#: the calling thread and the native worker take one by one
#: (``native_pool.NativePool.run_tiles``): a worker the OS runs late or on a
#: shared core holds the call up by one small tile, not half the call (see
#: docs/architecture.md, "Threading is shared too"). More threads cut one tile
#: per thread (their calls run in rounds of the thread count). 1 restores one
#: tile per thread. ``$FUELC_TILES_PER_THREAD`` (default 2), read at the first
#: split.
TILES_ENV = "FUELC_TILES_PER_THREAD"
TILES_PER_THREAD: int | None = None


def tiles_per_thread() -> int:
    """``TILES_PER_THREAD``, from ``$FUELC_TILES_PER_THREAD`` the first time.
    Raises ThreadCountError on a value that is not a positive integer."""
    global TILES_PER_THREAD
    if TILES_PER_THREAD is None:
        value = os.environ.get(TILES_ENV, "").strip() or "2"
        if not value.isdigit() or int(value) < 1:
            raise ThreadCountError(f"${TILES_ENV} must be a positive integer number of tiles "
                                   f"per thread, got {value!r}; e.g. {TILES_ENV}=2 (1: one "
                                   "tile per thread)")
        TILES_PER_THREAD = int(value)
    return TILES_PER_THREAD


#: How the tiles of a call cut into ``TILES_PER_THREAD`` = 2 tiles per thread
#: at two threads are sized: ``halved`` (default), two tiles of a third of
#: the call, then two of a sixth (each thread's second tile half its first:
#: at equal speeds the threads end together, and with one at half speed the
#: fast one takes both small tiles and they end together too, 0.67 of the
#: call's one-thread time where four quarters give 0.75); ``even``, four
#: equal tiles. ``$FUELC_TILE_SCHEDULE``, read at the first split
#: (``reload_settings``). docs/benchmarks.md, "Slow spells: one vCPU at half
#: speed".
SCHEDULE_ENV = "FUELC_TILE_SCHEDULE"
SCHEDULES = ("halved", "even")
TILE_SCHEDULE: str | None = None


def tile_schedule() -> str:
    """``TILE_SCHEDULE``, from ``$FUELC_TILE_SCHEDULE`` the first time.
    Raises ThreadCountError on a value not in ``SCHEDULES``."""
    global TILE_SCHEDULE
    if TILE_SCHEDULE is None:
        value = os.environ.get(SCHEDULE_ENV, "").strip() or SCHEDULES[0]
        if value not in SCHEDULES:
            raise ThreadCountError(f"${SCHEDULE_ENV} must be one of {', '.join(SCHEDULES)}, "
                                   f"got {value!r}")
        TILE_SCHEDULE = value
    return TILE_SCHEDULE


def reload_settings() -> None:
    """Read ``$FUELC_TILES_PER_THREAD`` and ``$FUELC_TILE_SCHEDULE`` again at
    the next split (calls already prepared keep their tiles)."""
    global TILES_PER_THREAD, TILE_SCHEDULE
    TILES_PER_THREAD = TILE_SCHEDULE = None


def split_setting() -> tuple[int, int, str]:
    """What a call's tiles depend on besides its layouts: the thread count,
    the tiles per thread and the schedule (the kernels' memo key)."""
    n = num_threads()
    return (n, tiles_per_thread(), tile_schedule()) if n == 2 else (n, 1, "")


def split_parts(threads: int) -> int:
    """How many tiles a family's ``split`` is asked for at ``threads``
    threads (it may make fewer; ``split_parts(threads) > threads`` tiles run
    as one dynamic task of the native pool)."""
    return threads * tiles_per_thread() if threads == 2 else threads


_TRANSCENDENTAL = re.compile(r"\bmath\.(exp|exp2|expm1|erf|tanh|log|log2|log1p|powf|sin|cos|atan2?|asin|acos)\b")


def min_elements(linalg_text: str) -> int:
    """The fewest output elements for which a call of the kernel whose
    linalg module is ``linalg_text`` is split over threads."""
    return MIN_ELEMENTS_TRANSCENDENTAL if _TRANSCENDENTAL.search(linalg_text) else MIN_ELEMENTS


class ThreadCountError(CompilerError, ValueError):
    """A thread count that is not a positive integer."""


def _parse(value, what: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        n = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        n = 0
    if n < 1:
        raise ThreadCountError(f"{what} must be a positive integer number of threads, "
                               f"got {value!r}; e.g. {ENV}=2 (1 runs every kernel on one thread)")
    return n


def _default() -> int:
    env = os.environ.get(ENV)
    if env is not None and env != "":
        return _parse(env, f"${ENV}")
    return usable_cpus()


_threads: int | None = None
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def num_threads() -> int:
    """The number of threads a kernel call may use."""
    global _threads
    if _threads is None:
        _threads = _default()
    return _threads


def set_num_threads(n: int | None) -> None:
    """Use ``n`` threads per kernel call from now on (``None``: back to
    ``$FUELC_NUM_THREADS`` / the CPU count). Raises ThreadCountError."""
    global _threads
    _threads = None if n is None else _parse(n, "set_num_threads(n)")


@contextlib.contextmanager
def threads(n: int | None):
    """``with threads(2): ...``: calls inside use ``n`` threads; the setting
    before (a count or the default) comes back on leaving."""
    global _threads
    before = _threads
    set_num_threads(n)
    try:
        yield
    finally:
        _threads = before


def _executor(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool._max_workers < workers:
            old, _pool = _pool, concurrent.futures.ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix="fuelc-kernel")
            if old is not None:
                old.shutdown(wait=False)
        return _pool


def run_all(calls: Sequence[Callable[[], None]]) -> None:
    """Run the zero-argument ``calls``: the first on this thread, the others
    on the pool; returns when all are done (re-raising the first error)."""
    if len(calls) == 1:
        calls[0]()
        return
    pool = _executor(len(calls) - 1)
    futures = [pool.submit(c) for c in calls[1:]]
    try:
        calls[0]()
    finally:
        for f in futures:
            f.result()


def chunks(size: int, parts: int, align: int = 1) -> list[tuple[int, int]]:
    """``(start, length)`` of at most ``parts`` tiles covering ``[0, size)``;
    every start is a multiple of ``align``. All tiles but the last have one
    length, except for the finer split at two threads (``parts ==
    split_parts(2) == 4``) under the ``halved`` schedule (``TILE_SCHEDULE``):
    two tiles of a third of ``size`` (in whole ``align`` units, rounded),
    then two of half the rest (the last may be shorter)."""
    units = math.ceil(size / align)
    if _halved(parts) and units >= 4:
        big = round(units / 3)
        small = math.ceil((units - 2 * big) / 2)
        ends = [big * align, 2 * big * align, min((2 * big + small) * align, size), size]
        return [(s, e - s) for s, e in zip([0] + ends, ends) if e > s]
    return chunks_even(size, parts, align)


def chunks_even(size: int, parts: int, align: int = 1) -> list[tuple[int, int]]:
    """``chunks`` with tiles of one length but the last, whatever the schedule."""
    step = math.ceil(math.ceil(size / parts) / align) * align
    return [(s, min(step, size - s)) for s in range(0, size, step)] if size else []


def _halved(parts: int) -> bool:
    return parts == 4 and num_threads() == 2 and split_parts(2) == 4 \
        and tile_schedule() == "halved"


def split_layouts(layouts: Sequence[Layout], axes: Sequence[int | None], size: int,
                  parts: int, align: int = 1) -> list[list[Layout]] | None:
    """The operand layouts of each tile: axis ``axes[i]`` of operand ``i``
    (all of extent ``size``) narrowed to the tile; ``None`` keeps the operand
    whole. None when there would be one tile only."""
    tiles = chunks(size, parts, align)
    if len(tiles) < 2:
        return None
    return [[l if a is None else l.narrow(a, start, length) for l, a in zip(layouts, axes)]
            for start, length in tiles]


def row_tiles(layouts: Sequence[Layout], n_inputs: int, threads: int, *,
              keep_last: bool, min_elements: int = MIN_ELEMENTS) -> list[list[Layout]] | None:
    """Tiles of a call whose output elements are independent along every
    axis (elementwise: ``keep_last=False``) or along every axis but the last
    (row ops: softmax, norms; ``keep_last=True``, output rank >= 2). The cut
    axis is the outermost with at least ``threads`` elements; inputs
    broadcast numpy-style (right-aligned), so an input of lower rank or of
    extent 1 on that axis is read whole by every tile. Calls of fewer than
    ``min_elements`` output elements run whole."""
    out = layouts[n_inputs]
    if len(layouts) != n_inputs + 1 or out.numel < min_elements or (keep_last and out.rank < 2):
        return None
    last = out.rank - 1 if keep_last else out.rank
    axis = next((a for a in range(last) if out.shape[a] >= threads), None)
    if axis is None:
        return None
    axes = []
    for lay in layouts[:n_inputs]:
        a = axis - (out.rank - lay.rank)
        if a >= 0 and lay.shape[a] == out.shape[axis]:
            axes.append(a)
        elif a < 0 or lay.shape[a] == 1:
            axes.append(None)
        else:
            return None
    return split_layouts(list(layouts), axes + [axis], out.shape[axis], threads)


def reduce_tiles(layouts: Sequence[Layout], n_inputs: int, threads: int, axis: int,
                 min_elements: int = MIN_ELEMENTS) -> list[list[Layout]] | None:
    """Tiles of a reduction of x's axis ``axis`` (gone from the output: a
    global pool's mean over the pixels) by blocks of the outermost output
    axis with at least ``threads`` elements (the images), x cut along the
    same axis: each output element is reduced by the same code over the
    same input elements whatever the thread count. Calls of fewer than
    ``min_elements`` input elements (the work, not the output) run whole."""
    x, out = layouts[0], layouts[-1]
    if n_inputs != 1 or len(layouts) != 2 or x.numel < min_elements or out.rank != x.rank - 1:
        return None
    axis %= x.rank
    cut = next((a for a in range(out.rank) if out.shape[a] >= threads), None)
    if cut is None:
        return None
    return split_layouts([x, out], [cut + (cut >= axis), cut], out.shape[cut], threads)


def image_tiles(layouts: Sequence[Layout], n_inputs: int, threads: int,
                min_elements: int | None = None) -> list[list[Layout]] | None:
    """Tiles of a copy (Concat off axis 0, Pad with no padding on axis 0: a
    conv's im2col and padded input) by blocks of axis 0, every operand cut
    alike: each output element is copied by the same code from the same
    input element whatever the thread count. Calls of fewer than
    ``min_elements`` output elements, or of fewer images than threads, run
    whole (default ``MIN_COPY_ELEMENTS``)."""
    out = layouts[n_inputs]
    if min_elements is None:
        min_elements = MIN_COPY_ELEMENTS
    if len(layouts) != n_inputs + 1 or out.rank < 2 or out.numel < min_elements \
            or any(l.rank != out.rank or l.shape[0] != out.shape[0] for l in layouts):
        return None
    return split_layouts(list(layouts), [0] * len(layouts), out.shape[0], threads)


def matmul_tiles(layouts: Sequence[Layout], n_inputs: int, threads: int,
                 align: int, col_align: int | None = None,
                 like_out: Sequence[int] = ()) -> list[list[Layout]] | None:
    """Tiles of a (batched) matmul ``a [.., M, K] @ b [.., K, N]`` (further
    inputs are a bias over N, or, listed in ``like_out``, of the output's
    shape and cut as it is: a skip): by batch when there are at least ``threads``
    batches of equal lhs and rhs extent; else by columns of N in multiples
    of ``col_align`` when N has at least ``MIN_COL_PANELS`` such panels per
    thread (each tile packs and reads only its part of b, where cutting M
    makes every tile pack all of b); else by rows of M in multiples of
    ``align``. Both alignments are multiples of every register tile, so
    each output element is computed by the same code whatever the thread
    count."""
    a, b, out = layouts[0], layouts[1], layouts[n_inputs]
    if out.rank not in (2, 3) or math.prod(out.shape) * a.shape[-1] < MIN_MACS:
        return None
    axes: list[int | None] = [None] * n_inputs + [0]
    if out.rank == 3 and out.shape[0] >= threads and b.shape[0] == out.shape[0]:
        axes[0] = axes[1] = 0
        for i in like_out:
            axes[i] = 0
        return split_layouts(list(layouts), axes, out.shape[0], threads)
    n_axis = out.rank - 1
    if col_align and out.shape[n_axis] >= threads * MIN_COL_PANELS * col_align:
        axes[1:] = [lay.rank - 1 for lay in layouts[1:]]  # b, the bias, the output
        return split_layouts(list(layouts), axes, out.shape[n_axis], threads, col_align)
    m_axis = out.rank - 2
    axes[0] = axes[-1] = m_axis
    for i in like_out:
        axes[i] = m_axis
    return split_layouts(list(layouts), axes, out.shape[m_axis], threads, align)


#: A matmul is cut by columns when every tile gets at least this many
#: ``col_align``-wide panels of N.
MIN_COL_PANELS = 2


__all__ = ["ENV", "MIN_ELEMENTS", "MIN_ELEMENTS_TRANSCENDENTAL", "MIN_MACS", "MIN_COL_PANELS",
           "MIN_COPY_ELEMENTS", "TILES_ENV", "TILES_PER_THREAD", "tiles_per_thread", "SCHEDULE_ENV",
           "SCHEDULES", "TILE_SCHEDULE", "tile_schedule", "reload_settings", "split_setting", "split_parts", "ThreadCountError", "min_elements", "num_threads", "set_num_threads", "run_all",
           "chunks", "chunks_even", "split_layouts", "row_tiles", "reduce_tiles", "image_tiles",
           "matmul_tiles"]
