"""torch.compile(model, backend="fuelc"): each FX graph dynamo hands over is
compiled by fuelc, a graph with an op fuelc lacks runs eagerly (warned once),
and the backend is declared as a torch_dynamo_backends entry point."""
import os
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import compiler.frontends.torch.backend as backend  # noqa: E402  (registers "fuelc")

from test_torch_import import MODELS, _randomize, assert_matches  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compiled_graphs(monkeypatch):
    """Record each graph dynamo hands over: True when fuelc compiled it,
    False when it ran eagerly."""
    import compiler.frontends.torch as frontend
    seen = []
    compile_program, fallback = frontend.compile_program, backend._fallback

    def compiled(*a, **kw):
        out = compile_program(*a, **kw)
        seen.append(True)
        return out

    def eager(*a, **kw):
        seen.append(False)
        return fallback(*a, **kw)
    monkeypatch.setattr(frontend, "compile_program", compiled)
    monkeypatch.setattr(backend, "_fallback", eager)
    return seen


@pytest.mark.parametrize("name", ["mlp", pytest.param("resnet", marks=pytest.mark.slow),
                                  pytest.param("llama", marks=pytest.mark.slow)])
def test_torch_compile_matches_eager(name, monkeypatch):
    cls, args = MODELS[name]
    model = _randomize(cls())
    seen = _compiled_graphs(monkeypatch)
    fast = torch.compile(model, backend="fuelc", dynamic=False)
    with torch.no_grad():
        want = model(*args)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no eager fallback
            got = fast(*args)
            got2 = fast(*args)
    assert seen and all(seen)
    assert isinstance(got, torch.Tensor)
    assert_matches(got, want)
    assert torch.equal(got, got2)


def test_a_graph_fuelc_cannot_take_runs_eagerly_warned_once(monkeypatch):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l = torch.nn.Linear(8, 4)

        def forward(self, x):
            return torch.sort(self.l(x), -1).values + 1

    model = M().eval()
    monkeypatch.setattr(backend, "_warned", set())
    seen = _compiled_graphs(monkeypatch)
    fast = torch.compile(model, backend="fuelc", dynamic=False)
    x = torch.randn(3, 8)
    with torch.no_grad(), pytest.warns(RuntimeWarning, match=r"aten\.sort\.default") as w:
        got = fast(x)
        fast(torch.randn(5, 8))  # a recompile for the new shape: the same reason, not again
    assert seen == [False, False]
    assert len([m for m in w if "fuelc" in str(m.message)]) == 1
    assert "\n" not in str(w[0].message)
    assert torch.equal(got, model(x))


def test_entry_point_names_the_backend():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    target = project["project"]["entry-points"]["torch_dynamo_backends"]["fuelc"]
    module, _, attr = target.partition(":")
    assert getattr(sys.modules[module], attr) is backend.fuelc_backend
    from torch._dynamo.backends.registry import lookup_backend
    assert lookup_backend("fuelc") is backend.fuelc_backend


def test_a_graph_that_needs_gradients_runs_eagerly(monkeypatch):
    cls, args = MODELS["mlp"]
    model = _randomize(cls())
    monkeypatch.setattr(backend, "_warned", set())
    seen = _compiled_graphs(monkeypatch)
    with pytest.warns(RuntimeWarning, match=r"needs gradients.*torch\.no_grad\(\)"):
        y = torch.compile(model, backend="fuelc", dynamic=False)(*args)
    assert seen == [False]
    y.sum().backward()  # eager: autograd works
    assert model.fc1.weight.grad is not None


@pytest.mark.slow
def test_entry_point_resolves_in_a_fresh_process(tmp_path):
    """torch.compile(..., backend="fuelc") with nothing of fuelc imported:
    dynamo finds the backend through the entry point of pyproject.toml (as
    an installed fuelc's metadata declares it)."""
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    info = tmp_path / "fuelc_probe-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fuelc-probe\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in d.items()) for g, d in groups.items()))
    script = """
import sys, warnings, torch
warnings.simplefilter("error", RuntimeWarning)  # an eager fallback would warn
f = torch.compile(lambda x: (x * 2 + 1).relu(), backend="fuelc", dynamic=False)
with torch.no_grad():
    x = torch.randn(4, 5)
    assert torch.equal(f(x), (x * 2 + 1).relu())
assert "compiler.frontends.torch.backend" in sys.modules
print("ok")
"""
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}:{ROOT}")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
