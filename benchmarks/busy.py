"""Another process taking part of one CPU, for timing under load.

    python benchmarks/models.py --model mobilenet --batch 8 --busy-cpu 1:1000/1000

``busy_cpu("1:1000/1000")`` starts a process pinned to CPU 1 that is busy
for 1000 us, then asleep for 1000 us, over and over, at nice -10 (above the
benchmark's nice 0, so it takes the CPU whenever it wakes: half of that CPU
for whichever of the benchmark's threads is on it), and kills it on leaving,
an exception included. Without the privilege to lower its nice value it runs
at nice 0 (a warning says so). docs/benchmarks.md, "A CPU half taken by
another process".
"""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import warnings

#: The busy process's nice value.
NICE = -10

_LOOP = """import os, sys, time
on, off = int(sys.argv[1]) / 1e6, int(sys.argv[2]) / 1e6
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < on:
        pass
    time.sleep(off)
"""


def parse(spec: str) -> tuple[int, int, int]:
    """``CPU:ON/OFF`` (microseconds) as ``(cpu, on, off)``; ValueError
    on anything else, and on a CPU this process may not run on."""
    m = re.fullmatch(r"\s*(\d+):(\d+)/(\d+)\s*", spec)
    if not m or int(m[2]) < 1:
        raise ValueError(f"a busy CPU is CPU:ON/OFF in microseconds, e.g. 1:1000/1000, got {spec!r}")
    cpu = int(m[1])
    if cpu not in os.sched_getaffinity(0):
        raise ValueError(f"busy CPU {cpu} is not one this process may run on "
                         f"({sorted(os.sched_getaffinity(0))})")
    return cpu, int(m[2]), int(m[3])


def _start(cpu: int, on: int, off: int) -> subprocess.Popen:
    def setup():
        os.sched_setaffinity(0, {cpu})
        try:
            os.nice(NICE)
        except OSError:
            pass
    return subprocess.Popen([sys.executable, "-c", _LOOP, str(on), str(off)],
                            preexec_fn=setup, stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def busy_cpu(spec: str | None):
    """Within: the busy process of ``spec`` (``CPU:ON/OFF``) runs; None: nothing."""
    if not spec:
        yield None
        return
    proc = _start(*parse(spec))
    try:
        nice = os.getpriority(os.PRIO_PROCESS, proc.pid)
        if nice != NICE:
            warnings.warn(f"the busy process runs at nice {nice}, not {NICE} (no privilege "
                          "to lower it)", stacklevel=3)
        yield proc
    finally:
        proc.kill()
        proc.wait()
