"""Worker threads that call compiled kernels from native code, for the short
tiles of a split kernel call (``compiler.codegen.parallel``).

Handing a tile to a ``ThreadPoolExecutor`` worker costs two thread wake-ups
(the worker, then the waiting caller) and the worker's re-acquisition of the
GIL: 50-70 us a call on the 2-core development VM, a quarter of a 256^3
matmul's time. Here each worker thread sits in a small native loop (LLVM IR
below, JIT-compiled once per process for the host) entered through ctypes,
so it holds no GIL: it polls its control block, calls the posted kernel
function with its descriptor addresses, publishes completion, and goes back
to polling. After ``SPIN_PURE_CYCLES`` without work each poll yields the
core first (``sched_yield``), and after ``SPIN_CYCLES`` time-stamp-counter
cycles without work it returns to Python and blocks on a condition variable,
so an idle process does not keep a core busy. The caller posts a task with plain stores,
runs its own tile, then polls (natively, GIL released) until the workers are
done.

A worker's control block is ``4 + MAX_ARGS`` int64 slots: ``gen`` (bumped by the caller to
post a task), ``done`` (set to that ``gen`` by the worker when finished),
``claim`` (the last task taken, by the worker or, when the worker has not
started it by the time the caller's own tile is done, by the caller, which
then runs it itself: one compare-and-swap decides), the function address, and
up to ``MAX_ARGS`` argument addresses (unused ones are 0; x86-64 SysV lets a
caller pass more arguments than the callee reads).
"""
from __future__ import annotations

import atexit
import ctypes
import os
import threading
import warnings
from typing import Sequence

#: The most pointer arguments a posted call may take.
MAX_ARGS = 32
#: How long (TSC cycles, about 1 ms) an idle worker polls before it sleeps.
SPIN_CYCLES = 3_000_000
#: For how many of those cycles (about 7 us) it polls without yielding; after
#: that each poll first calls ``sched_yield``, so a thread waiting for this
#: core (the caller's, between its split calls, or another process's) runs
#: first. A caller waiting for a worker's tile yields after as long (the
#: worker may be the thread that waits for its core). On an idle core the call returns at once. Without it, on a shared
#: 2-core machine under load, the spinning worker took the time of the
#: caller's single-threaded steps (Llama b8 s32, 2 threads: 15.2 -> 9.0 ms
#: median with a worker that slept at once; docs/architecture.md).
SPIN_PURE_CYCLES = 20_000

_ARGS = ", ".join(f"ptr %a{i}" for i in range(MAX_ARGS))
_LOADS = "\n".join(f"  %p{i} = getelementptr i64, ptr %c, i64 {4 + i}\n"
                   f"  %a{i} = load ptr, ptr %p{i}, align 8" for i in range(MAX_ARGS))
_IR = f"""
declare void @llvm.x86.sse2.pause()
declare i64 @llvm.readcyclecounter()
declare i32 @sched_yield()

; Claim task %g of block %c: exactly one of the worker and the caller moves
; the claim slot from %g - 1 to %g (each post bumps gen by one, and each
; task is claimed by one of the two before the next is posted).
define i1 @fuelc_try_claim(ptr %c, i64 %g) {{
entry:
  %cp = getelementptr i64, ptr %c, i64 2
  %prev = sub i64 %g, 1
  %r = cmpxchg ptr %cp, i64 %prev, i64 %g acq_rel acquire
  %ok = extractvalue {{ i64, i1 }} %r, 1
  ret i1 %ok
}}

; Call the posted function of block %c with its arguments.
define void @fuelc_run_block(ptr %c) {{
entry:
  %fp = getelementptr i64, ptr %c, i64 3
  %fn = load ptr, ptr %fp, align 8
{_LOADS}
  call void %fn({_ARGS})
  ret void
}}

define i64 @fuelc_worker_loop(ptr %c, i64 %seen, i64 %spin, i64 %pure) {{
entry:
  %t0 = call i64 @llvm.readcyclecounter()
  br label %poll
poll:
  %s = phi i64 [ %seen, %entry ], [ %g, %ran ], [ %s, %back ]
  %since = phi i64 [ %t0, %entry ], [ %t1, %ran ], [ %since, %back ]
  %g = load atomic i64, ptr %c acquire, align 8
  %new = icmp ne i64 %g, %s
  br i1 %new, label %claim, label %idle
claim:
  %mine = call i1 @fuelc_try_claim(ptr %c, i64 %g)
  br i1 %mine, label %run, label %ran
run:
  call void @fuelc_run_block(ptr %c)
  %dp = getelementptr i64, ptr %c, i64 1
  store atomic i64 %g, ptr %dp release, align 8
  br label %ran
ran:
  %t1 = call i64 @llvm.readcyclecounter()
  br label %poll
idle:
  call void @llvm.x86.sse2.pause()
  %now = call i64 @llvm.readcyclecounter()
  %waited = sub i64 %now, %since
  %more = icmp ult i64 %waited, %spin
  br i1 %more, label %keep, label %out
keep:
  %polite = icmp uge i64 %waited, %pure
  br i1 %polite, label %yield, label %back
yield:
  %y = call i32 @sched_yield()
  br label %back
back:
  br label %poll
out:
  ret i64 %s
}}

declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

; A split call of two tiles in one native call: post task %g, whose function
; and arguments block %t holds in its slots 3.. (zero beyond its arguments), to
; worker block %c; run the caller's own tile (block %f, laid out the same
; way); then run task %g here if the worker has not claimed it, else wait for it.
define void @fuelc_run_pair(ptr %c, i64 %g, ptr %t, ptr %f, i64 %pure) {{
entry:
  %dst = getelementptr i64, ptr %c, i64 3
  %src = getelementptr i64, ptr %t, i64 3
  call void @llvm.memcpy.p0.p0.i64(ptr %dst, ptr %src, i64 {8 * (1 + MAX_ARGS)}, i1 false)
  store atomic i64 %g, ptr %c release, align 8
  call void @fuelc_run_block(ptr %f)
  %mine = call i1 @fuelc_try_claim(ptr %c, i64 %g)
  br i1 %mine, label %here, label %wait
here:
  call void @fuelc_run_block(ptr %c)
  ret void
wait:
  call void @fuelc_wait_done(ptr %c, i64 %g, i64 %pure)
  ret void
}}

; The next task of worker block %c (its gen plus one: only the caller, holding
; the pool, writes gen) as fuelc_run_pair runs it, for a caller that makes
; several split calls in one native call (runtime.native_plan).
define void @fuelc_run_pair_next(ptr %c, ptr %t, ptr %f) {{
entry:
  %g0 = load atomic i64, ptr %c monotonic, align 8
  %g = add i64 %g0, 1
  call void @fuelc_run_pair(ptr %c, i64 %g, ptr %t, ptr %f, i64 {SPIN_PURE_CYCLES})
  ret void
}}

define void @fuelc_wait_done(ptr %c, i64 %g, i64 %pure) {{
entry:
  %dp = getelementptr i64, ptr %c, i64 1
  %t0 = call i64 @llvm.readcyclecounter()
  br label %poll
poll:
  %d = load atomic i64, ptr %dp acquire, align 8
  %ok = icmp eq i64 %d, %g
  br i1 %ok, label %out, label %again
again:
  call void @llvm.x86.sse2.pause()
  %now = call i64 @llvm.readcyclecounter()
  %waited = sub i64 %now, %t0
  %polite = icmp uge i64 %waited, %pure
  br i1 %polite, label %yield, label %poll
yield:
  %y = call i32 @sched_yield()
  br label %poll
out:
  ret void
}}
"""

_Block = ctypes.c_int64 * (4 + MAX_ARGS)


class _Native:
    """The JIT-compiled loop and wait functions (one engine per process)."""

    def __init__(self):
        import llvmlite.binding as llvm
        from runtime.cpu_loader import host_target_machine
        tm = host_target_machine(jit=True)
        libc = ctypes.CDLL(None)
        llvm.add_symbol("sched_yield", ctypes.cast(libc.sched_yield, ctypes.c_void_p).value)
        mod = llvm.parse_assembly(_IR)
        mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
        mod.verify()
        self.engine = llvm.create_mcjit_compiler(mod, tm)
        self.engine.finalize_object()
        self.loop = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                                     ctypes.c_int64, ctypes.c_int64)(
            self.engine.get_function_address("fuelc_worker_loop"))
        self.wait = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
            self.engine.get_function_address("fuelc_wait_done"))
        self.try_claim = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_int64)(
            self.engine.get_function_address("fuelc_try_claim"))
        self.run_block = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
            self.engine.get_function_address("fuelc_run_block"))
        self.run_pair = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                         ctypes.c_void_p, ctypes.c_int64)(
            self.engine.get_function_address("fuelc_run_pair"))
        self.run_pair_next = self.engine.get_function_address("fuelc_run_pair_next")


class _Worker:
    def __init__(self, native: _Native):
        self.block = _Block()
        self.address = ctypes.addressof(self.block)
        self.cond = threading.Condition()
        self.sleeping = False
        self.gen = 0
        self.n_args = 0        # the argument slots the last task posted used
        self._native = native
        threading.Thread(target=self._serve, name="fuelc-native-worker", daemon=True).start()

    def _serve(self) -> None:
        seen = 0
        while True:
            seen = self._native.loop(self.address, seen, SPIN_CYCLES, SPIN_PURE_CYCLES)
            with self.cond:
                self.sleeping = True
                while self.block[0] == seen:
                    self.cond.wait()
                self.sleeping = False

    def post(self, fn: int, args: Sequence[int]) -> int:
        block = self.block
        block[3] = fn
        # one slice store (a store per slot, all MAX_ARGS of them, took 2-5 us
        # of each split call); only slots a longer previous task used are zeroed
        n = len(args)
        block[4:4 + n] = args
        if self.n_args > n:
            block[4 + n:4 + self.n_args] = (0,) * (self.n_args - n)
        self.n_args = n
        self.gen += 1
        block[0] = self.gen
        # (under the GIL: a worker that sets ``sleeping`` after this read
        # then sees the new gen under its lock and does not wait)
        if self.sleeping:
            with self.cond:
                self.cond.notify()
        return self.gen


class NativePool:
    """``workers`` native worker threads (see the module docstring)."""

    def __init__(self, workers: int):
        self._native = _Native()
        self.workers = [_Worker(self._native) for _ in range(workers)]
        self.pid = os.getpid()
        self.busy = threading.Lock()

    def run(self, first, rest: Sequence[tuple[int, Sequence[int]]]) -> bool:
        """Call ``first()`` on this thread and each ``(function address,
        argument addresses)`` of ``rest`` on a worker, concurrently; return
        when all are done. A task no worker has started by the time
        ``first()`` returns runs on this thread instead (a worker the OS has
        not scheduled, on a shared machine, costs this call one tile's time,
        not the wait for its time slice). False (nothing run) when another
        thread is using the pool or ``rest`` does not fit it."""
        if len(rest) > len(self.workers) or any(len(a) > MAX_ARGS for _, a in rest):
            return False
        if not self.busy.acquire(blocking=False):
            return False
        try:
            posted = [(w, w.post(fn, args)) for w, (fn, args) in zip(self.workers, rest)]
            native = self._native
            try:
                first()
            finally:
                for w, gen in posted:
                    if native.try_claim(w.address, gen):  # not started: run it here
                        native.run_block(w.address)
                    else:
                        native.wait(w.address, gen, SPIN_PURE_CYCLES)
        finally:
            self.busy.release()
        return True

    def run_pair(self, pair: "Pair") -> bool:
        """``run(first, [task])`` for the two calls of ``pair`` in one native
        call (posting, the caller's tile and the claim or wait: some 4 us
        of Python and ctypes calls fewer a call). False (nothing run) when
        another thread is using the pool or the worker sleeps (``run``
        wakes it)."""
        w = self.workers[0]
        if w.sleeping or not self.busy.acquire(blocking=False):
            return False
        try:
            w.gen += 1
            w.n_args = pair.n_args   # the slots past them are zero in the image
            # (a worker that goes to sleep while this runs without the GIL has
            # not claimed the task: the caller runs it, the next call wakes it)
            self._native.run_pair(w.address, w.gen, pair.task_address, pair.own_address,
                                  SPIN_PURE_CYCLES)
        finally:
            self.busy.release()
        return True

    def pair_row(self, pair: "Pair") -> tuple[int, tuple[int, int, int]]:
        """``pair``'s split call as a ``(function address, argument
        addresses)`` row of a native run of several calls
        (``runtime.native_plan``): ``run_pair`` with the worker's next gen.
        Valid only between ``hold()`` and ``release()``."""
        return self._native.run_pair_next, (self.workers[0].address, pair.task_address,
                                            pair.own_address)

    def hold(self) -> bool:
        """Take the pool for a native run of ``pair_row`` rows: True when it
        is this process's pool, not in use by another thread and its first
        worker is awake (a sleeping one would leave every tile to the caller;
        ``run`` wakes it). Then ``release()`` must follow."""
        if _pool is not self or self.pid != _pid or self.workers[0].sleeping:
            return False
        return self.busy.acquire(False)

    def release(self, n_args: int) -> None:
        """After a ``hold()``: take up the gens the native run posted (at
        most ``n_args`` argument slots each) and free the pool."""
        w = self.workers[0]
        w.gen = w.block[0]
        if n_args > w.n_args:   # (slots past the last task's are zero)
            w.n_args = n_args
        self.busy.release()


class Pair:
    """Two calls ``(function address, argument addresses)`` laid out once as
    worker blocks, for ``NativePool.run_pair``: ``own`` runs on the calling
    thread, ``task`` on a worker (the direct path makes a two-tile split
    call with the same addresses every time)."""

    __slots__ = ("own", "task", "own_address", "task_address", "n_args")

    def __init__(self, own: tuple[int, Sequence[int]], task: tuple[int, Sequence[int]]):
        if max(len(own[1]), len(task[1])) > MAX_ARGS:
            raise ValueError(f"a native pool call takes at most {MAX_ARGS} arguments")
        self.own, self.task = _Block(), _Block()
        for block, (fn, args) in ((self.own, own), (self.task, task)):
            block[3] = fn
            block[4:4 + len(args)] = args
        self.own_address, self.task_address = ctypes.addressof(self.own), ctypes.addressof(self.task)
        self.n_args = len(task[1])


_pool: NativePool | None = None
#: This process's id, set again in a forked child: ``hold`` compares it
#: with the pool's on every direct-path call (``os.getpid()`` is a system
#: call, some 0.2 us).
_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)
_lock = threading.Lock()
#: Every native loop ever compiled: kept until the process ends, since a
#: worker may still be polling in its code while the interpreter shuts down.
_keep: list = []


def _quiesce() -> None:
    """At exit, wait (at most ~50 ms) until every worker has left the native
    loop for its condition variable, so none runs JIT code while the
    interpreter tears modules down."""
    import time
    p = _pool
    if p is None or p.pid != os.getpid():
        return
    end = time.monotonic() + 0.05
    while time.monotonic() < end and not all(w.sleeping for w in p.workers):
        time.sleep(0.001)


atexit.register(_quiesce)


class NativePoolWarning(UserWarning):
    """The native pool could not be built: split calls run their tiles
    through the Python pool (``compiler.codegen.parallel``), whose thread
    wake-ups cost far more per call. Issued once per process."""


_warned = False


def _warn_unavailable(error: Exception) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"fuelc: the native thread pool cannot be built here ({error}); "
                      "multi-threaded kernels run through the Python thread pool, which is "
                      "much slower per call (set FUELC_NUM_THREADS=1 to avoid it)",
                      NativePoolWarning, stacklevel=3)


def pool(workers: int) -> NativePool | None:
    """The process's native pool with at least ``workers`` workers (None
    where it cannot be built: not x86-64; ``NativePoolWarning`` once)."""
    global _pool
    p = _pool
    if p is not None and len(p.workers) >= workers and p.pid == os.getpid():
        return p
    with _lock:
        p = _pool
        if p is None or len(p.workers) < workers or p.pid != os.getpid():
            try:
                p = _pool = NativePool(workers)
                _keep.append(p._native)
            except RuntimeError as e:  # no x86 JIT here: the Python pool is used instead
                _warn_unavailable(e)
                return None
    return p


__all__ = ["NativePool", "Pair", "NativePoolWarning", "pool", "MAX_ARGS", "SPIN_CYCLES", "SPIN_PURE_CYCLES"]
