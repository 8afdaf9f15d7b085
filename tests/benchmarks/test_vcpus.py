"""benchmarks/vcpus.py: the FMA probe runs on each CPU alone and on all at
once and leaves this thread's CPU mask as it was; how a probe is filed; the
line a benchmark prints for rounds that were not all quiet (models.py and
ops.py)."""
import math
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import vcpus  # noqa: E402


def test_the_loop_is_compiled_and_runs():
    r = vcpus._loop()(100)
    # each chain is x -> 0.999 x + 0.001 from 0: 0.1 * (1 - 0.999^100) per lane, 12 chains
    assert math.isclose(r, 12 * (1 - 0.999 ** 100), rel_tol=1e-4)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_probes_time_every_cpu_and_keep_the_mask():
    mask = os.sched_getaffinity(0)
    cpus = sorted(mask)[:2]
    for times in (vcpus.alone(cpus), vcpus.together(cpus)):
        assert len(times) == 2 and all(t > 0 for t in times)
        assert os.sched_getaffinity(0) == mask
    assert vcpus.together(cpus[:1]) == []
    p = vcpus.Probe(cpus)
    assert p.now() in vcpus.STATES and p.fastest < float("inf")
    assert p.round_state(p.now()) in (*vcpus.STATES, "mixed")
    assert len(p.alone) == len(p.together) == 2   # what decided the last state


def test_state_alone_then_together():
    fastest = 40.0
    assert vcpus.state([41.0, 42.0], fastest) == "quiet"
    assert vcpus.state([41.0, 42.0], fastest, [43.0, 44.0]) == "quiet"
    # full speed alone, both at about half speed together: one core's FMA units
    assert vcpus.state([41.0, 42.0], fastest, [80.0, 83.0]) == "shared core"
    # only one slower together is not a shared core
    assert vcpus.state([41.0, 42.0], fastest, [80.0, 44.0]) == "quiet"
    # slow alone is filed as such whatever the concurrent probe says
    assert vcpus.state([90.0, 42.0], fastest, [95.0, 90.0]) == "one slow"
    assert vcpus.state([90.0, 85.0], fastest, [95.0, 90.0]) == "both slow"
    assert vcpus.state([41.0, 42.0], fastest, []) == "quiet"


def test_round_state_and_note():
    assert vcpus.round_state("quiet", "quiet") == "quiet"
    assert vcpus.round_state("quiet", "shared core") == "mixed"
    assert vcpus.note(["quiet", "quiet"], "x") is None
    line = vcpus.note(["quiet", "shared core", "mixed", "shared core"], "fuelc/ort 0.90")
    assert line == "    vCPUs: rounds quiet 1, shared core 2, mixed 1; quiet rounds only: fuelc/ort 0.90"
    assert vcpus.note(["one slow"], None).endswith("no quiet round")


def test_quiet_medians_only_where_some_rounds_were_not_quiet():
    per_round = {"fuelc": [[1.0, 3.0], [9.0], [2.0]], "ort": [4.0, 8.0, 6.0]}
    assert vcpus.quiet_medians(["quiet", "shared core", "quiet"], per_round) \
        == {"fuelc": 2.0, "ort": 5.0}
    assert vcpus.quiet_medians(["quiet"] * 3, per_round) is None
    assert vcpus.quiet_medians(["mixed", "one slow", "mixed"], per_round) is None


def test_probe_for_one_thread_or_one_cpu_is_none(monkeypatch, capsys):
    assert vcpus.probe_for(1, "row") is None
    monkeypatch.setattr(vcpus.os, "sched_getaffinity", lambda pid: {0})
    assert vcpus.probe_for(2, "row") is None
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(vcpus.os, "sched_getaffinity", lambda pid: {0, 1})
    assert isinstance(vcpus.probe_for(2, "row"), vcpus.Probe)
    assert "a row whose rounds were not all quiet" in capsys.readouterr().out
    assert isinstance(vcpus.probe_for(2), vcpus.Probe) and capsys.readouterr().out == ""


def test_ops_row_gives_the_quiet_rounds(capsys):
    from benchmarks import ops
    n = len(ops.RECORDS)
    try:
        ops._row("case", 0.002, {"fuelc": 0.003},
                 rounds={"numpy": [0.002, 0.002, 0.004], "fuelc": [0.001, 0.003, 0.006]},
                 states=["quiet", "shared core", "quiet"])
        ops._row("all quiet", 0.002, {"fuelc": 0.003},
                 rounds={"numpy": [0.002], "fuelc": [0.003]}, states=["quiet"])
        rec, quiet = ops.RECORDS[n], ops.RECORDS[n + 1]
    finally:
        del ops.RECORDS[n:]
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "    vCPUs: rounds quiet 2, shared core 1; quiet rounds only: fuelc 1.17x numpy"
    assert rec["round_states"] == ["quiet", "shared core", "quiet"]
    assert rec["quiet_s"] == {"numpy": 0.003, "fuelc": 0.0035}
    assert len(out) == 3 and "quiet_s" not in quiet


def test_main_counts_the_states(capsys):
    assert vcpus.main(["--seconds", "0.05"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    if len(os.sched_getaffinity(0)) < 2:
        assert "nothing to compare" in last
    else:
        assert "fastest alone" in last and all(s in last for s in vcpus.STATES)
