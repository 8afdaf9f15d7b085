"""benchmarks/conv_layers.py: every layer model passes onnx.checker with the
FLOP count and output shape of its Conv; one run of the script on the two
smallest layers matches onnxruntime (the script prints the relative
difference; it is checked here)."""
import pathlib
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import conv_layers  # noqa: E402


@pytest.mark.parametrize("name", list(conv_layers.LAYERS))
def test_layer_models_are_valid_convs(name):
    cin, cout, size, k, stride, groups = conv_layers.LAYERS[name]
    model, shape, flops = conv_layers.layer_model(cin, cout, size, k, stride, groups)
    onnx.checker.check_model(model, full_check=True)
    spatial = size if isinstance(size, tuple) else (size, size)
    out = [(s + 2 * (k // 2) - k) // stride + 1 for s in spatial]
    assert shape == [1, cin, *spatial]
    dims = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [1, cout, *out]
    assert flops == 2 * cout * (cin // groups) * k ** len(spatial) * int(np.prod(out))


def test_the_script_runs_and_matches_onnxruntime(capsys):
    assert conv_layers.main(["--threads", "1", "--rounds", "1", "--repeats", "1",
                             "--only", "dw 5x5,conv1d"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith(("dw 5x5", "conv1d"))]
    assert len(rows) == 2
    for row in rows:  # name (28 columns), fuelc ms, ort ms, ratio, GFLOP/s, rel diff, kernels
        fuelc_ms, ort_ms, ratio, gflops, rel_diff = map(float, row[28:].split()[:5])
        assert rel_diff < 1e-4, row
        assert fuelc_ms > 0 and ort_ms > 0 and gflops > 0, row


def test_rounds_not_all_quiet_get_a_states_line(monkeypatch, capsys):
    """At 2 threads the vCPUs are probed around each round (benchmarks/vcpus.py,
    a stand-in here): the line under the layer gives the states and the quiet
    rounds' ratio."""
    states = iter(["quiet", "quiet", "one slow", "one slow"])

    class Probe:
        def now(self):
            return next(states)

        def round_state(self, before):
            return before if before == self.now() else "mixed"

    monkeypatch.setattr(conv_layers.vcpus, "Probe", Probe)
    monkeypatch.setattr(conv_layers.os, "sched_getaffinity", lambda pid: {0, 1})
    assert conv_layers.main(["--threads", "2", "--rounds", "2", "--repeats", "1",
                             "--only", "dw 5x5"]) == 0
    out = capsys.readouterr().out.splitlines()
    row = next(i for i, line in enumerate(out) if line.startswith("dw 5x5"))
    assert out[row + 1].startswith("    vCPUs: rounds quiet 1, one slow 1; quiet rounds only: fuelc ")


def test_dynamic_kernels_against_static(capsys):
    """--dynamic: the run-time-batch kernel and the static one (the script
    checks their outputs are identical) per batch, a ratio per row."""
    assert conv_layers.main(["--dynamic", "--rounds", "1", "--repeats", "1", "--batch", "1,2",
                             "--only", "dw 5x5"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.startswith("dw 5x5")]
    assert len(rows) == 2
    for row in rows:  # name, batch, static ms, dynamic ms, ratio, ratio of the minima
        batch, st, dy, ratio, of_mins = map(float, row[28:].split())
        assert st > 0 and dy > 0 and ratio > 0 and of_mins > 0, row
