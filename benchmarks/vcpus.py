"""Whether this machine's CPUs are separate cores at the moment.

On the shared 2-vCPU VM the host at times runs one vCPU at about half speed
(a busy hardware-thread sibling), and at times runs our two vCPUs as the two
hardware threads of one core: each alone then runs at full speed, both at
once at half the FMA throughput each, while a chain of dependent integer
multiplies keeps its speed (docs/benchmarks.md, "Slow spells are shared
cores"). A 2-thread timing taken in either state measures less than two
cores. ``Probe.now()`` tells which state the CPUs are in: an FMA-bound loop
(JIT-compiled here for the host with llvmlite; no BLAS, so no library threads
left spinning after it) timed on each CPU alone, then on all of them at once,
one thread pinned to each (a ctypes call releases the GIL). A few ms a probe.

States: ``quiet``; ``one slow`` / ``both slow`` (a CPU alone ``SLOW`` times
slower than the fastest CPU this probe has seen); ``shared core`` (every CPU
at full speed alone, and ``SLOW`` times its own time or more with the others
running). ``benchmarks/models.py``, ``ops.py`` and ``spells.py`` probe before
and after each round and report the rounds that were not quiet.
"""
from __future__ import annotations

import ctypes
import functools
import os
import statistics
import threading
import time

#: A CPU this many times slower than a reference is slow.
SLOW = 1.35
STATES = ("quiet", "one slow", "both slow", "shared core")
#: Timed calls of the loop per CPU and probe, and its iterations per call
#: (12 chains of 8-lane FMAs: about 35 us a call on one Zen 4 core).
CALLS = 25
ITERATIONS = 20_000
_CHAINS = 12


def _ir() -> str:
    vec = "<8 x float>"
    one = f"<8 x float> <{', '.join(['float 0x3FEFF7CEE0000000'] * 8)}>"     # 0.999
    tiny = f"<8 x float> <{', '.join(['float 0x3F50624DE0000000'] * 8)}>"    # 0.001
    phis = "\n".join(f"  %a{c} = phi {vec} [zeroinitializer, %entry], [%b{c}, %loop]"
                     for c in range(_CHAINS))
    fmas = "\n".join(f"  %b{c} = call {vec} @llvm.fma.v8f32({vec} %a{c}, {one}, {tiny})"
                     for c in range(_CHAINS))
    sums = "\n".join(f"  %s{c} = fadd {vec} %s{c - 1}, %b{c}" for c in range(1, _CHAINS))
    return f"""
declare {vec} @llvm.fma.v8f32({vec}, {vec}, {vec})
define float @probe_fma(i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
{phis}
{fmas}
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %n
  br i1 %more, label %loop, label %out
out:
  %s0 = fadd {vec} %b0, zeroinitializer
{sums}
  %r = extractelement {vec} %s{_CHAINS - 1}, i32 0
  ret float %r
}}"""


@functools.lru_cache(maxsize=None)
def _loop():
    """The JIT-compiled FMA loop: ``f(iterations) -> float``."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(_ir())
    module.verify()
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=2)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64)(engine.get_function_address("probe_fma"))
    fn._engine = engine   # keep the code alive with the function
    return fn


def _median_us(fn) -> float:
    fn(ITERATIONS)
    ts = []
    for _ in range(CALLS):
        t = time.perf_counter()
        fn(ITERATIONS)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6


def alone(cpus) -> list[float]:
    """The loop's median time (us) on each of ``cpus`` in turn, this thread
    pinned to it; this thread's CPU mask as it was afterwards."""
    fn, mask = _loop(), os.sched_getaffinity(0)
    out = []
    try:
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            out.append(_median_us(fn))
    finally:
        os.sched_setaffinity(0, mask)
    return out


def together(cpus) -> list[float]:
    """The loop's median time (us) on each of ``cpus`` with all of them
    running it at once, a thread pinned to each; [] for fewer than 2 CPUs."""
    if len(cpus) < 2:
        return []
    fn, out = _loop(), [0.0] * len(cpus)
    start = threading.Barrier(len(cpus))

    def run(i: int, cpu: int) -> None:
        os.sched_setaffinity(0, {cpu})   # this thread only
        start.wait()
        out[i] = _median_us(fn)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(cpus)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def state(speeds: list[float], fastest: float, both: list[float] | None = None) -> str:
    """The state of one probe: ``speeds`` each CPU alone, ``fastest`` the
    reference (the fastest CPU alone seen so far), ``both`` every CPU with
    the others running (``together``; None or []: not probed)."""
    slow = sum(s > SLOW * fastest for s in speeds)
    if slow:
        return STATES[min(slow, 2)]
    if both and all(t > SLOW * s for t, s in zip(both, speeds)):
        return "shared core"
    return "quiet"


class Probe:
    """Probes ``cpus`` (default: the CPUs this process may run on) and keeps
    the fastest time seen alone as the reference for ``one slow``."""

    def __init__(self, cpus=None):
        self.cpus = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
        self.fastest = float("inf")
        #: The last probe's times (us): each CPU alone, all together.
        self.alone: list[float] = []
        self.together: list[float] = []

    def now(self) -> str:
        self.alone, self.together = alone(self.cpus), together(self.cpus)
        self.fastest = min(self.fastest, *self.alone)
        return state(self.alone, self.fastest, self.together)

    def round_state(self, before: str) -> str:
        """The state of a round that began with ``before`` (a ``now()``): a
        probe now, and ``round_state`` of the two."""
        return round_state(before, self.now())


def probe_for(threads: int, what: str | None = None) -> Probe | None:
    """A ``Probe`` for a benchmark whose calls run on ``threads`` threads,
    when that is more than one and this process may use more than one CPU,
    else None. With ``what`` (a row, a case, ...) it first prints the line
    that says each ``what`` whose rounds were not all quiet gets a states line."""
    if threads < 2 or len(os.sched_getaffinity(0)) < 2:
        return None
    if what:
        print(f"vCPUs probed before and after each round (benchmarks/vcpus.py); a {what} whose "
              "rounds were not all quiet gets a line of its states and its quiet rounds' figures")
    return Probe()


def quiet_medians(states: list[str], per_round: dict) -> dict | None:
    """``{label: median}`` over the quiet rounds only, where some but not all
    of the rounds (``states``) were quiet, else None. ``per_round`` maps a
    label to its values per round, each a number (the round's median) or a
    list of times (every run of the round)."""
    quiet = [i for i, st in enumerate(states) if st == "quiet"]
    if not quiet or len(quiet) == len(states):
        return None

    def values(v):
        return v if isinstance(v, (list, tuple)) else [v]

    return {k: statistics.median(t for i in quiet for t in values(rounds[i]))
            for k, rounds in per_round.items()}


def round_state(before: str, after: str) -> str:
    """A round's state from the probes around it: theirs where they agree,
    else ``mixed``."""
    return before if before == after else "mixed"


def note(states: list[str], quiet_line: str | None) -> str | None:
    """The line a benchmark prints under a result whose rounds were not all
    quiet (None when they were): how many rounds in each state, then
    ``quiet_line`` (the result over the quiet rounds only) or that there was
    none."""
    if all(s == "quiet" for s in states):
        return None
    counts = ", ".join(f"{s} {states.count(s)}" for s in (*STATES, "mixed") if s in states)
    return (f"    vCPUs: rounds {counts}; "
            + (f"quiet rounds only: {quiet_line}" if quiet_line else "no quiet round"))


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description="Probe this machine's CPUs for a while: how often "
                                             "each state (quiet, one slow, both slow, shared core) "
                                             "was seen, and the probes that were not quiet.")
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args(argv)
    probe, counts = Probe(), {}
    if len(probe.cpus) < 2:
        print(f"one CPU ({probe.cpus}): nothing to compare")
        return 0
    t_end = time.perf_counter() + args.seconds
    while time.perf_counter() < t_end:
        st = probe.now()
        counts[st] = counts.get(st, 0) + 1
        if st != "quiet":
            print(f"{st:12s} alone {[round(t, 1) for t in probe.alone]} us, "
                  f"together {[round(t, 1) for t in probe.together]} us", flush=True)
    print(f"CPUs {probe.cpus}, fastest alone {probe.fastest:.1f} us: "
          + ", ".join(f"{s} {counts.get(s, 0)}" for s in STATES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
