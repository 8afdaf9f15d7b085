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
cycles without work it sleeps on a futex word of its block (natively: the
worker never returns to Python), so an idle process does not keep a core
busy. The caller posts a task with plain stores and wakes a sleeping worker
from the post itself (one ``futex`` system call), so a worker that fell
asleep in the middle of a native run of many calls (its core or the
caller's taken for over ``SPIN_CYCLES``) is back for the next split call,
not after the run. It takes tiles itself, then polls (natively, GIL
released) until the workers are done. A worker the kernel woke onto the
posting thread's CPU moves off it at once (``fuelc_leave_cpu``), or the two
would share that CPU, the poster running every tile, for milliseconds; the
waking post yields its CPU once, so that a worker queued there runs at once. The
direct path wakes a sleeping worker at a run's start (``NativePool.wake``).
A thread that waits for the other (the caller for the worker's tile, the idle
worker for the caller holding the pool for a native run) reads the other's
CPU clock every ``WATCH_NS`` and pulls it onto its own CPU where another
process keeps it from running (``fuelc_watch``, ``fuelc_pull``); the worker
leaves the posting thread's CPU at each task (docs/benchmarks.md, "A CPU half
taken by another process").

A worker's control block is ``14 + ROW`` int64 slots: the task word ``gen << 32
| tiles << 16 | next`` (a post bumps ``gen``, sets the tile count and
``next`` = 0), ``finished`` (how many tiles the worker has completed, ever),
the address of the task's table (``tiles`` rows of ``ROW`` slots: a function
address, then up to ``MAX_ARGS`` argument addresses, unused ones 0; x86-64
SysV lets a caller pass more arguments than the callee reads), and one such
row of the block's own (``post``: a one-tile task); then the worker's futex
word (``SLEEP``), the CPU of the last post (``WAKER_CPU``), two counters:
wakes (``WAKES``) and sleeps (``SLEEPS``), the caller's waits (``WAITED``,
``LONG_WAITS``), the two threads' ids (``WORKER_TID``, ``CALLER_TID``), the
pulls (``PULLED_WORKER``, ``PULLED_CALLER``) and the ``POLICY`` bits.
A tile is taken by one compare-and-swap of the task word (``next`` to
``next + 1``), by the worker
or by the posting thread, which keeps taking tiles until none is left and
then waits until ``finished`` counts the ones the worker took. So a worker
the OS has not scheduled costs the call nothing but the post, and one that
runs late or slowly (its core shared) holds it up by the tiles it took, not
half the call (docs/architecture.md, "Threading is shared too").
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
_LOADS = "\n".join(f"  %p{i} = getelementptr i64, ptr %row, i64 {1 + i}\n"
                   f"  %a{i} = load ptr, ptr %p{i}, align 8" for i in range(MAX_ARGS))
#: Slots of a row of a task table: the function's address, then its arguments.
ROW = 1 + MAX_ARGS
#: The block's slot whose low 32 bits are the worker's futex word: 1 while it
#: sleeps (``fuelc_worker_sleep``), set to 0 by the post that wakes it.
SLEEP = 3 + ROW
#: The block's slot where each post (and ``NativePool.wake``) leaves the CPU
#: the posting thread runs on, for ``fuelc_leave_cpu``.
WAKER_CPU = 4 + ROW
#: The block's counters (never reset): posts that found the worker asleep and
#: woke it (``fuelc_wake``), and the worker's sleeps on its futex word
#: (``fuelc_worker_sleep``: each futex wait, after ``SPIN_CYCLES`` without a task).
WAKES = 5 + ROW
SLEEPS = 6 + ROW
#: The posting thread's wait for the worker's tiles (``fuelc_finish``, after
#: its own): TSC cycles in all, and the waits longer than ``LONG_WAIT``
#: cycles (never reset; docs/benchmarks.md, "A CPU half taken").
WAITED = 7 + ROW
LONG_WAITS = 8 + ROW
LONG_WAIT = 250_000
#: The worker's thread id (set by the worker before it enters its loop), and
#: the thread id of the thread holding the pool for a native run (``hold``;
#: 0 otherwise): each side's CPU clock tells the other whether it runs.
WORKER_TID = 9 + ROW
CALLER_TID = 10 + ROW
#: Pulls (``fuelc_pull``): the worker moved onto the waiting caller's CPU,
#: the caller onto the idle worker's.
PULLED_WORKER = 11 + ROW
PULLED_CALLER = 12 + ROW
#: A thread waiting for the other (the caller for the worker's tile, the idle
#: worker for the holding caller's next task) reads the other's CPU clock
#: every ``WATCH_NS``; where it ran under a quarter of that window while
#: this one polled, another process holds its CPU (a neighbour at a higher
#: priority; docs/benchmarks.md, "A CPU half taken") and it is pulled onto
#: the waiter's CPU, where the waiter's yields let it run.
WATCH_NS = 30_000
#: The block's policy bits (all by default): ``WATCH`` the caller's watch of
#: the worker (``fuelc_watch``), ``LEAVE`` the worker leaving the posting
#: thread's CPU at each task (``fuelc_leave_cpu``), ``WATCH_CALLER`` the idle
#: worker's watch of the caller; 0 is the pool as it was before them.
POLICY = 13 + ROW
WATCH, LEAVE, WATCH_CALLER = 1, 2, 4
SYS_FUTEX, FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 202, 128, 129
#: The bytes of the CPU mask the worker reads and sets (glibc's ``cpu_set_t``:
#: 1024 CPUs).
CPU_SET_BYTES = 128
_MASK_WORDS = CPU_SET_BYTES // 8
_MASK_ANY = "\n".join(
    f"  %q{i} = getelementptr i64, ptr %m, i64 {i}\n  %v{i} = load i64, ptr %q{i}, align 8\n"
    f"  %o{i + 1} = or i64 %o{i}, %v{i}" for i in range(_MASK_WORDS))
_IR = f"""
declare void @llvm.x86.sse2.pause()
declare i64 @llvm.readcyclecounter()
declare i32 @sched_yield()
declare i64 @syscall(i64, ...)
declare i32 @sched_getcpu()
declare i32 @sched_getaffinity(i32, i64, ptr)
declare i32 @sched_setaffinity(i32, i64, ptr)
declare i32 @clock_gettime(i32, ptr)

; Nanoseconds of clock %ck (clock_gettime), -1 on an error.
define i64 @fuelc_clock_ns(i32 %ck) {{
entry:
  %ts = alloca [2 x i64], align 8
  %r = call i32 @clock_gettime(i32 %ck, ptr %ts)
  %ok = icmp eq i32 %r, 0
  br i1 %ok, label %read, label %bad
read:
  %s = load i64, ptr %ts, align 8
  %np = getelementptr i64, ptr %ts, i64 1
  %n = load i64, ptr %np, align 8
  %s9 = mul i64 %s, 1000000000
  %t = add i64 %s9, %n
  ret i64 %t
bad:
  ret i64 -1
}}

; Move thread %tid onto this thread's CPU: its allowed CPUs this one only
; (which migrates it), then as they were (which leaves it here); counted in
; slot %slot of block %c.
define void @fuelc_pull(ptr %c, i64 %tid, i64 %slot) {{
entry:
  %t = trunc i64 %tid to i32
  %m = alloca [{_MASK_WORDS} x i64], align 8
  %one = alloca [{_MASK_WORDS} x i64], align 8
  %got = call i32 @sched_getaffinity(i32 %t, i64 {CPU_SET_BYTES}, ptr %m)
  %here32 = call i32 @sched_getcpu()
  %here = sext i32 %here32 to i64
  %gotok = icmp eq i32 %got, 0
  %inmask = icmp ult i64 %here, {CPU_SET_BYTES * 8}
  %ok = and i1 %gotok, %inmask
  br i1 %ok, label %move, label %done
move:
  store [{_MASK_WORDS} x i64] zeroinitializer, ptr %one, align 8
  %word = lshr i64 %here, 6
  %sh = and i64 %here, 63
  %bit = shl i64 1, %sh
  %wp = getelementptr i64, ptr %one, i64 %word
  store i64 %bit, ptr %wp, align 8
  %r1 = call i32 @sched_setaffinity(i32 %t, i64 {CPU_SET_BYTES}, ptr %one)
  %r2 = call i32 @sched_setaffinity(i32 %t, i64 {CPU_SET_BYTES}, ptr %m)
  %kp = getelementptr i64, ptr %c, i64 %slot
  %k = atomicrmw add ptr %kp, i64 1 monotonic
  br label %done
done:
  ret void
}}

; One look of a waiting thread at the thread whose id is in slot %tslot of
; block %c (0: none): %st holds the window's start (monotonic ns, 0: none
; yet) and that thread's CPU clock then. Once the window is WATCH_NS long,
; a thread that ran under a quarter of it is pulled here (fuelc_pull, counted
; in slot %pslot), and a new window starts.
define void @fuelc_watch(ptr %c, ptr %st, i64 %tslot, i64 %pslot, i64 %bit) {{
entry:
  %pp = getelementptr i64, ptr %c, i64 {POLICY}
  %pol = load atomic i64, ptr %pp monotonic, align 8
  %b = and i64 %pol, %bit
  %bn = icmp ne i64 %b, 0
  %on = zext i1 %bn to i64
  %tp = getelementptr i64, ptr %c, i64 %tslot
  %tid0 = load atomic i64, ptr %tp monotonic, align 8
  %tid = mul i64 %tid0, %on
  %has = icmp ne i64 %tid, 0
  br i1 %has, label %look, label %done
look:
  %now = call i64 @fuelc_clock_ns(i32 1)
  %w0 = load i64, ptr %st, align 8
  %cp = getelementptr i64, ptr %st, i64 1
  %c0 = load i64, ptr %cp, align 8
  %fresh = icmp eq i64 %w0, 0
  %span = sub i64 %now, %w0
  %short = icmp ult i64 %span, {WATCH_NS}
  %wait = select i1 %fresh, i1 false, i1 %short
  br i1 %wait, label %done, label %clock
clock:
  %t32 = trunc i64 %tid to i32
  %nt = xor i32 %t32, -1
  %ts = shl i32 %nt, 3
  %ck = or i32 %ts, 6
  %cpu = call i64 @fuelc_clock_ns(i32 %ck)
  store i64 %now, ptr %st, align 8
  store i64 %cpu, ptr %cp, align 8
  br i1 %fresh, label %done, label %judge
judge:
  %ran = sub i64 %cpu, %c0
  %ran4 = mul i64 %ran, 4
  %starved = icmp slt i64 %ran4, %span
  %valid = icmp sge i64 %cpu, 0
  %pull = and i1 %starved, %valid
  br i1 %pull, label %move, label %done
move:
  call void @fuelc_pull(ptr %c, i64 %tid, i64 %pslot)
  br label %done
done:
  ret void
}}

; Claim the next tile of the task word %w of block %c (gen << 32 | tiles << 16
; | next): one compare-and-swap moves next to next + 1; false when another
; thread moved the word first or no tile is left.
define i1 @fuelc_claim(ptr %c, i64 %w) {{
entry:
  %i = and i64 %w, 65535
  %n0 = lshr i64 %w, 16
  %n = and i64 %n0, 65535
  %left = icmp ult i64 %i, %n
  br i1 %left, label %cas, label %no
cas:
  %w1 = add i64 %w, 1
  %r = cmpxchg ptr %c, i64 %w, i64 %w1 acq_rel monotonic
  %ok = extractvalue {{ i64, i1 }} %r, 1
  ret i1 %ok
no:
  ret i1 false
}}

; Call row %i of the task table of block %c (its slot 2).
define void @fuelc_run_row(ptr %c, i64 %i) {{
entry:
  %tp = getelementptr i64, ptr %c, i64 2
  %t = load ptr, ptr %tp, align 8
  %at = mul i64 %i, {ROW}
  %row = getelementptr i64, ptr %t, i64 %at
  %fn = load ptr, ptr %row, align 8
{_LOADS}
  call void %fn({_ARGS})
  ret void
}}

define i64 @fuelc_worker_loop(ptr %c, i64 %seen, i64 %spin, i64 %pure) {{
entry:
  %st = alloca [2 x i64], align 8
  store [2 x i64] zeroinitializer, ptr %st, align 8
  %t0 = call i64 @llvm.readcyclecounter()
  br label %poll
poll:
  %s = phi i64 [ %seen, %entry ], [ %s, %ran ], [ %s, %back ], [ %g, %over ]
  %since = phi i64 [ %t0, %entry ], [ %t1, %ran ], [ %since, %back ], [ %t2, %over ]
  %w = load atomic i64, ptr %c acquire, align 8
  %g = lshr i64 %w, 32
  %new = icmp ne i64 %g, %s
  br i1 %new, label %claim, label %idle
claim:
  %pp = getelementptr i64, ptr %c, i64 {POLICY}
  %pol = load atomic i64, ptr %pp monotonic, align 8
  %lv = and i64 %pol, {LEAVE}
  %leave = icmp ne i64 %lv, 0
  br i1 %leave, label %off, label %take
off:
  call void @fuelc_leave_cpu(ptr %c)
  br label %take
take:
  %mine = call i1 @fuelc_claim(ptr %c, i64 %w)
  br i1 %mine, label %run, label %left
left:
  %i0 = and i64 %w, 65535
  %n0 = lshr i64 %w, 16
  %n = and i64 %n0, 65535
  %none = icmp uge i64 %i0, %n
  br i1 %none, label %over, label %ran
over:
  ; a task seen counts as activity, taken or not: a worker whose tiles the
  ; caller keeps taking stays awake while calls come
  %t2 = call i64 @llvm.readcyclecounter()
  store i64 0, ptr %st, align 8
  br label %poll
run:
  %i = and i64 %w, 65535
  call void @fuelc_run_row(ptr %c, i64 %i)
  %fp = getelementptr i64, ptr %c, i64 1
  %f = atomicrmw add ptr %fp, i64 1 release
  br label %ran
ran:
  %t1 = call i64 @llvm.readcyclecounter()
  store i64 0, ptr %st, align 8
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
  ; idle while a caller holds the pool for a native run: a caller that does
  ; not run is queued behind another process on its CPU; pull it here
  call void @fuelc_watch(ptr %c, ptr %st, i64 {CALLER_TID}, i64 {PULLED_CALLER}, i64 {WATCH_CALLER})
  %y = call i32 @sched_yield()
  br label %back
back:
  br label %poll
out:
  ret i64 %s
}}

; Post a task of %n tiles, the rows of table %t, to block %c (only the thread
; holding the pool posts): the tiles its worker has finished so far, for
; fuelc_finish.
define i64 @fuelc_post(ptr %c, ptr %t, i64 %n) {{
entry:
  %fp = getelementptr i64, ptr %c, i64 1
  %f0 = load atomic i64, ptr %fp acquire, align 8
  %tp = getelementptr i64, ptr %c, i64 2
  store ptr %t, ptr %tp, align 8
  %w0 = load atomic i64, ptr %c monotonic, align 8
  %g0 = lshr i64 %w0, 32
  %g1 = add i64 %g0, 1
  %g = and i64 %g1, 4294967295
  %hi = shl i64 %g, 32
  %nn = shl i64 %n, 16
  %w = or i64 %hi, %nn
  %cpu = call i32 @sched_getcpu()
  %cpu64 = sext i32 %cpu to i64
  %cp = getelementptr i64, ptr %c, i64 {WAKER_CPU}
  store atomic i64 %cpu64, ptr %cp monotonic, align 8
  store atomic i64 %w, ptr %c seq_cst, align 8
  call void @fuelc_wake(ptr %c)
  ret i64 %f0
}}

; Wake block %c's worker if it sleeps (its futex word, slot {SLEEP}, is 1). The
; post's task word is stored before (seq_cst) and the worker sets the word
; before it reads the task word (fuelc_worker_sleep), so either it sees the
; task or this sees it asleep. Then yield this thread's CPU once: on a KVM
; guest the kernel queued the woken worker on the waker's own CPU nearly every
; time (likely: the idle vCPU halts and reads as preempted), and there it
; waited 3.3-3.7 ms for this thread's time slice to end while this thread ran
; every tile; yielding lets it run at once, and its fuelc_leave_cpu moves it
; to the other CPU (post to first tile after a 0.1 s sleep: 48 us;
; docs/benchmarks.md, "The first run after idle"). Where the worker was
; queued elsewhere the yield returns at once.
define void @fuelc_wake(ptr %c) {{
entry:
  %z = getelementptr i64, ptr %c, i64 {SLEEP}
  %v = load atomic i32, ptr %z seq_cst, align 8
  %asleep = icmp ne i32 %v, 0
  br i1 %asleep, label %wake, label %done
wake:
  %cpu = call i32 @sched_getcpu()
  %cpu64 = sext i32 %cpu to i64
  %cp = getelementptr i64, ptr %c, i64 {WAKER_CPU}
  store atomic i64 %cpu64, ptr %cp monotonic, align 8
  %kp = getelementptr i64, ptr %c, i64 {WAKES}
  %k = atomicrmw add ptr %kp, i64 1 monotonic
  store atomic i32 0, ptr %z seq_cst, align 8
  %r = call i64 (i64, ...) @syscall(i64 {SYS_FUTEX}, ptr %z, i32 {FUTEX_WAKE_PRIVATE}, i32 1)
  %y = call i32 @sched_yield()
  br label %done
done:
  ret void
}}

; Sleep on block %c's futex word until a post wakes the worker, unless a task
; newer than %seen is there already.
define void @fuelc_worker_sleep(ptr %c, i64 %seen) {{
entry:
  %z = getelementptr i64, ptr %c, i64 {SLEEP}
  br label %check
check:
  store atomic i32 1, ptr %z seq_cst, align 8
  %w = load atomic i64, ptr %c seq_cst, align 8
  %g = lshr i64 %w, 32
  %new = icmp ne i64 %g, %seen
  br i1 %new, label %awake, label %wait
wait:
  %sp = getelementptr i64, ptr %c, i64 {SLEEPS}
  %sn = atomicrmw add ptr %sp, i64 1 monotonic
  %r = call i64 (i64, ...) @syscall(i64 {SYS_FUTEX}, ptr %z, i32 {FUTEX_WAIT_PRIVATE}, i32 1, ptr null)
  %v = load atomic i32, ptr %z seq_cst, align 8
  %still = icmp ne i32 %v, 0
  br i1 %still, label %check, label %awake
awake:
  store atomic i32 0, ptr %z seq_cst, align 8
  ret void
}}

; A worker thread's whole life: poll (fuelc_worker_loop), sleep when idle for
; %spin cycles, poll again when woken; never returns, holds no GIL.
define void @fuelc_worker_serve(ptr %c, i64 %spin, i64 %pure) {{
entry:
  br label %loop
loop:
  %s = phi i64 [ 0, %entry ], [ %s1, %loop ]
  %s1 = call i64 @fuelc_worker_loop(ptr %c, i64 %s, i64 %spin, i64 %pure)
  call void @fuelc_worker_sleep(ptr %c, i64 %s1)
  call void @fuelc_leave_cpu(ptr %c)
  br label %loop
}}

; After a wake-up, and at each task (policy LEAVE): where the worker runs on the
; CPU of the thread that posted last (slot {WAKER_CPU}), the two would take turns on one
; CPU while another may idle, and the poster would run every tile itself until
; the kernel's load balancing moved one of them, milliseconds later. So move
; off that CPU at once: allowed CPUs without it (one sched_setaffinity, which
; migrates the thread), then the mask as it was (which leaves it where it is).
; Nothing where the worker runs elsewhere, or no other CPU is allowed.
define void @fuelc_leave_cpu(ptr %c) {{
entry:
  %cp = getelementptr i64, ptr %c, i64 {WAKER_CPU}
  %waker = load atomic i64, ptr %cp monotonic, align 8
  %here32 = call i32 @sched_getcpu()
  %here = sext i32 %here32 to i64
  %same = icmp eq i64 %here, %waker
  %inmask = icmp ult i64 %here, {CPU_SET_BYTES * 8}
  %check = and i1 %same, %inmask
  br i1 %check, label %read, label %done
read:
  %m = alloca [{_MASK_WORDS} x i64], align 8
  %got = call i32 @sched_getaffinity(i32 0, i64 {CPU_SET_BYTES}, ptr %m)
  %gotok = icmp eq i32 %got, 0
  br i1 %gotok, label %clear, label %done
clear:
  %word = lshr i64 %here, 6
  %sh = and i64 %here, 63
  %bit = shl i64 1, %sh
  %wp = getelementptr i64, ptr %m, i64 %word
  %w = load i64, ptr %wp, align 8
  %nbit = xor i64 %bit, -1
  %wc = and i64 %w, %nbit
  store i64 %wc, ptr %wp, align 8
  %o0 = or i64 0, 0
{_MASK_ANY}
  %other = icmp ne i64 %o{_MASK_WORDS}, 0
  br i1 %other, label %move, label %done
move:
  %r1 = call i32 @sched_setaffinity(i32 0, i64 {CPU_SET_BYTES}, ptr %m)
  store i64 %w, ptr %wp, align 8
  %r2 = call i32 @sched_setaffinity(i32 0, i64 {CPU_SET_BYTES}, ptr %m)
  br label %done
done:
  ret void
}}

; The posting thread's part of a task: claim and run tiles until none is
; left, then wait until the worker has finished those it took (%f0: from
; fuelc_post; yielding after %pure cycles, as the worker polls).
define void @fuelc_finish(ptr %c, i64 %n, i64 %f0, i64 %pure) {{
entry:
  %st = alloca [2 x i64], align 8
  store [2 x i64] zeroinitializer, ptr %st, align 8
  br label %take
take:
  %mine = phi i64 [ 0, %entry ], [ %mine, %lost ], [ %mine1, %ran ]
  %w = load atomic i64, ptr %c monotonic, align 8
  %i = and i64 %w, 65535
  %left = icmp ult i64 %i, %n
  br i1 %left, label %try, label %wait
try:
  %ok = call i1 @fuelc_claim(ptr %c, i64 %w)
  br i1 %ok, label %run, label %lost
lost:
  br label %take
run:
  call void @fuelc_run_row(ptr %c, i64 %i)
  %mine1 = add i64 %mine, 1
  br label %ran
ran:
  br label %take
wait:
  %theirs = sub i64 %n, %mine
  %want = add i64 %f0, %theirs
  %fp = getelementptr i64, ptr %c, i64 1
  %t0 = call i64 @llvm.readcyclecounter()
  br label %poll
poll:
  %f = load atomic i64, ptr %fp acquire, align 8
  %done = icmp eq i64 %f, %want
  br i1 %done, label %out, label %again
again:
  call void @llvm.x86.sse2.pause()
  %now = call i64 @llvm.readcyclecounter()
  %waited = sub i64 %now, %t0
  %polite = icmp uge i64 %waited, %pure
  br i1 %polite, label %yield, label %poll
yield:
  ; a worker that does not run holds a tile behind another process on its
  ; CPU: pull it here, where this thread's yields let it run
  call void @fuelc_watch(ptr %c, ptr %st, i64 {WORKER_TID}, i64 {PULLED_WORKER}, i64 {WATCH})
  %y = call i32 @sched_yield()
  br label %poll
out:
  %t1 = call i64 @llvm.readcyclecounter()
  %dt = sub i64 %t1, %t0
  %wp = getelementptr i64, ptr %c, i64 {WAITED}
  %wsum = atomicrmw add ptr %wp, i64 %dt monotonic
  %long = icmp uge i64 %dt, {LONG_WAIT}
  %lw = zext i1 %long to i64
  %lp = getelementptr i64, ptr %c, i64 {LONG_WAITS}
  %lsum = atomicrmw add ptr %lp, i64 %lw monotonic
  ret void
}}

; A split call of %n tiles (the rows of table %t) in one native call: post it
; to block %c, then take tiles here until none is left and wait for the
; worker's.
define void @fuelc_run_tiles(ptr %c, ptr %t, i64 %n, i64 %pure) {{
entry:
  %f0 = call i64 @fuelc_post(ptr %c, ptr %t, i64 %n)
  call void @fuelc_finish(ptr %c, i64 %n, i64 %f0, i64 %pure)
  ret void
}}

; fuelc_run_tiles as a row of a native run of several calls (runtime.native_plan:
; a row's arguments are pointer slots, so the tile count comes as one).
define void @fuelc_run_tiles_row(ptr %c, ptr %t, ptr %np) {{
entry:
  %n = ptrtoint ptr %np to i64
  call void @fuelc_run_tiles(ptr %c, ptr %t, i64 %n, i64 {SPIN_PURE_CYCLES})
  ret void
}}
"""

_Block = ctypes.c_int64 * (POLICY + 1)
#: The largest tile count of one task (the task word's 16-bit fields).
MAX_TILES = 65535


class _Native:
    """The JIT-compiled loop and wait functions (one engine per process)."""

    def __init__(self):
        import platform
        import sys
        if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
            # the idle worker sleeps on a futex: x86-64 Linux's system call 202
            raise RuntimeError(f"the native pool needs x86-64 Linux (this is {sys.platform}, "
                               f"{platform.machine()})")
        import llvmlite.binding as llvm
        from runtime.cpu_loader import host_target_machine
        tm = host_target_machine(jit=True)
        libc = ctypes.CDLL(None)
        llvm.add_symbol("sched_yield", ctypes.cast(libc.sched_yield, ctypes.c_void_p).value)
        llvm.add_symbol("syscall", ctypes.cast(libc.syscall, ctypes.c_void_p).value)
        for name in ("sched_getcpu", "sched_getaffinity", "sched_setaffinity", "clock_gettime"):
            llvm.add_symbol(name, ctypes.cast(getattr(libc, name), ctypes.c_void_p).value)
        mod = llvm.parse_assembly(_IR)
        mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
        mod.verify()
        self.engine = llvm.create_mcjit_compiler(mod, tm)
        self.engine.finalize_object()
        fn = self.engine.get_function_address
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        self.loop = ctypes.CFUNCTYPE(i64, ptr, i64, i64, i64)(fn("fuelc_worker_loop"))
        self.serve = ctypes.CFUNCTYPE(None, ptr, i64, i64)(fn("fuelc_worker_serve"))
        self.wake = ctypes.CFUNCTYPE(None, ptr)(fn("fuelc_wake"))
        self.post = ctypes.CFUNCTYPE(i64, ptr, ptr, i64)(fn("fuelc_post"))
        self.finish = ctypes.CFUNCTYPE(None, ptr, i64, i64, i64)(fn("fuelc_finish"))
        self.run_tiles = ctypes.CFUNCTYPE(None, ptr, ptr, i64, i64)(fn("fuelc_run_tiles"))
        self.run_tiles_row = fn("fuelc_run_tiles_row")
        self.leave_cpu = ctypes.CFUNCTYPE(None, ptr)(fn("fuelc_leave_cpu"))
        self.pull = ctypes.CFUNCTYPE(None, ptr, i64, i64)(fn("fuelc_pull"))


class _Worker:
    def __init__(self, native: _Native):
        self.block = _Block()
        self.block[WAKER_CPU] = -1     # no post has woken it yet
        self.block[POLICY] = WATCH | LEAVE | WATCH_CALLER
        self.address = ctypes.addressof(self.block)
        self.row = self.address + 3 * 8       # the block's own one-row table (``post``)
        self.n_args = 0        # the argument slots the last ``post`` used
        self._native = native
        self.thread = threading.Thread(target=self._serve, name="fuelc-native-worker", daemon=True)
        self.thread.start()

    @property
    def gen(self) -> int:
        """The number of tasks posted to this worker (mod 2^32)."""
        return self.block[0] >> 32

    @property
    def sleeping(self) -> bool:
        """Whether the worker sleeps on its futex word (idle past ``SPIN_CYCLES``)."""
        return self.block[SLEEP] != 0

    def _serve(self) -> None:
        # native for good (GIL released): a post wakes it from native code too
        self.block[WORKER_TID] = threading.get_native_id()
        self._native.serve(self.address, SPIN_CYCLES, SPIN_PURE_CYCLES)

    def post(self, fn: int, args: Sequence[int]) -> int:
        """Post one call as a one-tile task (its row in the block itself):
        the worker's finished count before it, for ``_Native.finish``."""
        block = self.block
        block[3] = fn
        # one slice store (a store per slot, all MAX_ARGS of them, took 2-5 us
        # of each split call); only slots a longer previous task used are zeroed
        n = len(args)
        block[4:4 + n] = args
        if self.n_args > n:
            block[4 + n:4 + self.n_args] = (0,) * (self.n_args - n)
        self.n_args = n
        return self._native.post(self.address, self.row, 1)


class NativePool:
    """``workers`` native worker threads (see the module docstring)."""

    def __init__(self, workers: int):
        self._native = _Native()
        self.workers = [_Worker(self._native) for _ in range(workers)]
        self._block, self._address = self.workers[0].block, self.workers[0].address
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
            finish = self._native.finish
            try:
                first()
            finally:
                for w, f0 in posted:   # not started: run it here; else wait for it
                    finish(w.address, 1, f0, SPIN_PURE_CYCLES)
        finally:
            self.busy.release()
        return True

    def run_tiles(self, tiles: "Tiles") -> bool:
        """Run the calls of ``tiles`` (disjoint parts of one split call), taken
        one by one by this thread and the first worker, in one native call:
        this thread keeps taking tiles until none is left, then waits for
        the one(s) the worker took, so a worker the OS runs late or slowly
        costs the call at most the tiles it took. False (nothing run) when
        another thread is using the pool. The post wakes a sleeping worker
        (this thread takes tiles meanwhile)."""
        w = self.workers[0]
        if not self.busy.acquire(blocking=False):
            return False
        try:
            self._native.run_tiles(w.address, tiles.address, tiles.n, SPIN_PURE_CYCLES)
        finally:
            self.busy.release()
        return True

    def tiles_row(self, tiles: "Tiles") -> tuple[int, tuple[int, int, int]]:
        """``tiles``' split call as a ``(function address, argument
        addresses)`` row of a native run of several calls
        (``runtime.native_plan``): ``run_tiles`` on the first worker. Valid
        only between ``hold()`` and ``release()``."""
        return self._native.run_tiles_row, (self.workers[0].address, tiles.address, tiles.n)

    def wake(self) -> None:
        """Wake the first worker if it sleeps (``fuelc_wake``), at the start
        of a run that will post to it (``runtime.direct``): the woken vCPU's
        wake-up then overlaps the run's own work before its first split
        call, instead of falling inside that call."""
        if self._block[SLEEP] and self.pid == _pid:
            self._native.wake(self._address)

    def hold(self) -> bool:
        """Take the pool for a native run of ``tiles_row`` rows: True when it
        is this process's pool and not in use by another thread (a worker
        still asleep is woken by the run's first post; the direct path wakes
        it before, ``wake``). Then ``release()`` must follow."""
        if _pool is not self or self.pid != _pid or not self.busy.acquire(False):
            return False
        self._block[CALLER_TID] = threading.get_native_id()
        return True

    def release(self, n_args: int = 0) -> None:
        """Free the pool after a ``hold()`` (``n_args``: kept for callers;
        task tables live outside the worker's block)."""
        self._block[CALLER_TID] = 0
        self.busy.release()


class Tiles:
    """The calls ``(function address, argument addresses)`` of one split call
    laid out once as a task table, for ``NativePool.run_tiles`` (the direct
    path makes a split call with the same addresses every time). Tiles are
    disjoint parts of the call's output, each computed by the same code
    whichever thread takes it."""

    __slots__ = ("table", "address", "n")

    def __init__(self, calls: Sequence[tuple[int, Sequence[int]]]):
        if not 1 <= len(calls) <= MAX_TILES:
            raise ValueError(f"a native pool task takes 1 to {MAX_TILES} tiles, got {len(calls)}")
        self.n = len(calls)
        self.table = (ctypes.c_int64 * (ROW * self.n))()
        for i, (fn, args) in enumerate(calls):
            if len(args) > MAX_ARGS:
                raise ValueError(f"a native pool call takes at most {MAX_ARGS} arguments, "
                                 f"got {len(args)}")
            self.table[i * ROW] = fn
            self.table[i * ROW + 1:i * ROW + 1 + len(args)] = args
        self.address = ctypes.addressof(self.table)


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


__all__ = ["NativePool", "Tiles", "MAX_TILES", "NativePoolWarning", "pool", "MAX_ARGS", "SPIN_CYCLES", "SPIN_PURE_CYCLES"]
