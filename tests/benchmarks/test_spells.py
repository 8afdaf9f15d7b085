"""benchmarks/spells.py: how a block is filed from its probes (each vCPU alone,
then all at once), and the concurrent probe's threads leave this thread's
CPU mask as it was."""
import json
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import spells  # noqa: E402


def test_state_alone_then_together():
    fastest = 40.0
    assert spells.state([41.0, 42.0], fastest) == "quiet"
    assert spells.state([41.0, 42.0], fastest, [43.0, 44.0]) == "quiet"
    # full speed alone, both at about half speed together: one core's FMA units
    assert spells.state([41.0, 42.0], fastest, [80.0, 83.0]) == "shared core"
    # only one slower together is not a shared core
    assert spells.state([41.0, 42.0], fastest, [80.0, 44.0]) == "quiet"
    # slow alone wins over the concurrent probe
    assert spells.state([90.0, 42.0], fastest, [95.0, 90.0]) == "one slow"
    assert spells.state([90.0, 85.0], fastest, [95.0, 90.0]) == "both slow"
    assert spells.state([41.0, 42.0], fastest, []) == "quiet"


def test_classify_files_blocks_by_agreeing_probes():
    t = {"fuelc": [0.005], "ort": [0.006]}
    blocks = [
        ([40.0, 41.0], [40.5, 41.0], t, [42.0, 42.0], [41.0, 43.0]),   # quiet
        ([40.0, 41.0], [40.5, 41.0], t, [81.0, 80.0], [79.0, 82.0]),   # shared core
        ([40.0, 41.0], [40.5, 41.0], t, [81.0, 80.0], [41.0, 42.0]),   # mixed
        ([40.0, 41.0], [40.5, 41.0], t),                                # an old log: alone only
    ]
    by = spells.classify(blocks)
    assert [len(by[s]) for s in ("quiet", "one slow", "both slow", "shared core", "mixed")] \
        == [2, 0, 0, 1, 1]


def test_summary_reads_logs_with_and_without_pair_probes(tmp_path, capsys):
    log = tmp_path / "blocks.jsonl"
    rows = [{"model": "m", "batch": 8, "target": "cpu", "before": [40.0, 41.0],
             "after": [40.0, 41.0], "times": {"fuelc": [0.004], "ort": [0.005]}},
            {"model": "m", "batch": 8, "target": "cpu", "before": [40.0, 41.0],
             "after": [40.0, 41.0], "pair_before": [80.0, 82.0], "pair_after": [81.0, 80.0],
             "times": {"fuelc": [0.008], "ort": [0.007]}}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spells.summary(str(log))
    out = capsys.readouterr().out
    assert "quiet 1" in out and "shared core 1" in out
    assert "fuelc/ort 0.800" in out and "fuelc/ort 1.143" in out


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_pair_probe_times_every_cpu_and_keeps_the_mask():
    mask = os.sched_getaffinity(0)
    cpus = sorted(mask)[:2]
    times = spells.pair_probe(cpus)
    assert len(times) == 2 and all(t > 0 for t in times)
    assert os.sched_getaffinity(0) == mask
    assert spells.pair_probe(cpus[:1]) == []
