"""benchmarks/busy.py: the busy process runs pinned to its CPU while inside
``busy_cpu`` and is gone after, an exception included; bad specs are errors."""
import os
import pathlib
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import busy  # noqa: E402


def test_a_spec_is_cpu_on_off_in_microseconds():
    assert busy.parse("1:1000/1000") == (1, 1000, 1000)
    assert busy.parse(" 0:300/3000 ") == (0, 300, 3000)
    for bad in ("1", "1:1000", "a:1/1", "1:0/1000", "1:10/-1"):
        with pytest.raises(ValueError, match="CPU:ON/OFF"):
            busy.parse(bad)


def _cpu_time(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12]), int(fields[36])   # utime + stime, its CPU


def test_the_busy_process_runs_on_its_cpu_inside_and_is_gone_after():
    cpu = max(os.sched_getaffinity(0))
    with pytest.raises(RuntimeError, match="inside"):
        with busy.busy_cpu(f"{cpu}:2000/2000") as proc:
            assert os.sched_getaffinity(proc.pid) == {cpu}
            deadline = time.monotonic() + 10
            while _cpu_time(proc.pid)[0] < 10 and time.monotonic() < deadline:  # 0.1 s of ticks
                time.sleep(0.05)
            used, where = _cpu_time(proc.pid)
            assert used >= 10 and where == cpu
            raise RuntimeError("inside")
    assert proc.returncode is not None               # killed and reaped on the way out
    assert not os.path.exists(f"/proc/{proc.pid}")


def test_no_spec_runs_nothing_and_a_cpu_not_allowed_is_an_error():
    with busy.busy_cpu(None) as proc:
        assert proc is None
    with pytest.raises(ValueError, match="not one this process may run on"):
        with busy.busy_cpu(f"{max(os.sched_getaffinity(0)) + 1}:1000/1000"):
            pass


def test_models_py_refuses_a_bad_busy_cpu(capsys):
    from benchmarks import models
    with pytest.raises(SystemExit):
        models.main(["--model", "mobilenet", "--busy-cpu", "1:1000"])
    # a CPU not allowed is refused before anything compiles, not after the header
    with pytest.raises(SystemExit):
        models.main(["--model", "mobilenet", "--busy-cpu", f"{max(os.sched_getaffinity(0)) + 1}:1000/1000"])
    assert "not one this process may run on" in capsys.readouterr().err
