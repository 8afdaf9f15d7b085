"""benchmarks/encoder.py: at 2 threads the vCPUs are probed around each round
(benchmarks/vcpus.py, a stand-in here); a case whose rounds were not all quiet
gets the states line with the quiet rounds' fuelc/ort."""
import itertools
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import encoder, vcpus  # noqa: E402

pytest.importorskip("onnxruntime")


def test_states_line_under_a_case(monkeypatch, capsys):
    states = itertools.cycle(["quiet", "quiet", "shared core", "shared core"])

    class Probe:
        def now(self):
            return next(states)

        def round_state(self, before):
            return vcpus.round_state(before, self.now())

    monkeypatch.setattr(encoder.vcpus, "Probe", Probe)
    monkeypatch.setattr(encoder.os, "sched_getaffinity", lambda pid: {0, 1})
    assert encoder.main(["--model", "onnx", "--threads", "2", "--rounds", "2", "--repeats", "1",
                         "--batch", "1", "--layers", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    row = next(i for i, line in enumerate(out) if line.startswith("onnx    x1 batch 1"))
    line = out[row + 1]
    assert line.startswith("    vCPUs: rounds quiet 1, shared core 1; quiet rounds only: fuelc ")
    assert "fuelc/ort" in line
