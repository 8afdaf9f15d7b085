"""benchmarks/spells.py: how a block is filed from its probes (each vCPU alone,
then all at once; benchmarks/vcpus.py), from a run or from a log."""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import spells  # noqa: E402


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
