"""The fuelc CLI in subprocesses: compile -> inspect -> run on a small ONNX
model (checked against onnxruntime), ``run`` with the compiler unimportable,
and every error path as one ``error:`` line with a non-zero status."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BLOCK_COMPILER = """
import sys, runpy
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("compiler", "torch_mlir", "mlir"):
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, _Block())
sys.argv = ["fuelc"] + sys.argv[1:]
runpy.run_module("runtime.cli", run_name="__main__")
"""


def fuelc(*args, block_compiler=False):
    cmd = [sys.executable, "-c", BLOCK_COMPILER] if block_compiler else \
        [sys.executable, "-m", "compiler.cli"]
    return subprocess.run(cmd + [str(a) for a in args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def _model(path: Path) -> None:
    rng = np.random.RandomState(0)
    w = rng.randn(16, 8).astype(np.float32)
    b = rng.randn(8).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("Add", ["h", "B"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    g = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    _model(d / "m.onnx")
    r = fuelc("compile", d / "m.onnx", "-o", d / "m.fuel", "--input-shape", "x=4,16",
              "--progress")
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "passes" in r.stderr and "codegen" in r.stderr
    x = np.random.RandomState(1).rand(4, 16).astype(np.float32)
    np.save(d / "x.npy", x)
    return d, x


def test_inspect_lists_manifest_signature_kernels_and_ir(compiled):
    d, _ = compiled
    r = fuelc("inspect", d / "m.fuel")
    assert r.returncode == 0, r.stderr
    for want in ("format fuelc-module v5", "torch-mlir", "llvmlite", "input  x: f32[4,16]",
                 "output y: f32[4,8]", "weights:  2 constants", "code/0.o:_mlir_ciface_kernel",
                 "ir:       fuel, optimized"):
        assert want in r.stdout, r.stdout
    r = fuelc("inspect", d / "m.fuel", "--ir", "optimized")
    assert r.returncode == 0 and "fuel.softmax_last_dim" in r.stdout, r.stderr
    r = fuelc("inspect", d / "m.fuel", "--ir", "nope")
    assert r.returncode == 1 and "no IR stage 'nope'; stages: fuel, optimized" in r.stderr


def test_run_matches_onnxruntime_with_and_without_the_compiler(compiled):
    d, x = compiled
    want = ort.InferenceSession(str(d / "m.onnx")).run(None, {"x": x})[0]
    r = fuelc("run", d / "m.fuel", "--input", f"x={d / 'x.npy'}", "--output-dir", d / "out")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("y: f32[4,8] min=") and "mean=" in r.stdout
    np.testing.assert_allclose(np.load(d / "out" / "y.npy"), want, rtol=1e-5, atol=1e-6)
    r = fuelc("run", d / "m.fuel", "--input", f"x={d / 'x.npy'}", "--output-dir", d / "out2",
              block_compiler=True)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(d / "out2" / "y.npy"), np.load(d / "out" / "y.npy"))


def _error(r, *fragments):
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def test_run_errors(compiled, tmp_path):
    d, x = compiled
    fuel, xin = d / "m.fuel", f"x={d / 'x.npy'}"
    _error(fuelc("run", tmp_path / "none.fuel", "--input", xin), "no such file")
    _error(fuelc("run", fuel, "--input", f"z={d / 'x.npy'}"), "unknown input 'z'", "x: f32[4,16]")
    _error(fuelc("run", fuel), "missing input 'x'")
    _error(fuelc("run", fuel, "--input", "x"), "expected NAME=FILE.npy")
    _error(fuelc("run", fuel, "--input", f"x={tmp_path / 'no.npy'}"), "no such file")
    np.save(tmp_path / "short.npy", x[:2])
    _error(fuelc("run", fuel, "--input", f"x={tmp_path / 'short.npy'}"),
           "input 'x': expected f32[4,16]", "float32[2, 16]")
    np.save(tmp_path / "f64.npy", x.astype(np.float64))
    _error(fuelc("run", fuel, "--input", f"x={tmp_path / 'f64.npy'}"), "float64")
    (tmp_path / "junk.npy").write_bytes(b"junk")
    _error(fuelc("run", fuel, "--input", f"x={tmp_path / 'junk.npy'}"), "not a .npy array file")
    data = fuel.read_bytes()
    (tmp_path / "cut.fuel").write_bytes(data[:len(data) // 2])
    _error(fuelc("run", tmp_path / "cut.fuel", "--input", xin), "damaged or truncated")
    _error(fuelc("inspect", tmp_path / "cut.fuel"), "damaged or truncated")


def test_compile_errors(compiled, tmp_path):
    d, _ = compiled
    _error(fuelc("compile", tmp_path / "none.onnx"), "no such file")
    _error(fuelc("compile", d / "m.onnx", "--target", "gpu:h100", "--input-shape", "x=4,16"),
           "gpu")
    _error(fuelc("compile", d / "m.onnx", "--input-shape", "x=4,a"), "expected NAME=D0,D1")
    (tmp_path / "bad.onnx").write_bytes(b"not protobuf")
    _error(fuelc("compile", tmp_path / "bad.onnx"))
    _error(fuelc("compile", d / "m.onnx", "--input-shape", "x=4,16", "--jobs", "0"),
           "--jobs='0': expected a positive number of parallel compile jobs")


def test_compile_quiet_with_jobs(compiled, tmp_path):
    d, _ = compiled
    r = fuelc("compile", d / "m.onnx", "-o", tmp_path / "q.fuel", "--input-shape", "x=4,16",
              "--quiet", "--progress", "--jobs", "2")
    assert r.returncode == 0 and r.stderr == "" and "wrote" in r.stdout, r.stderr


def test_side_weights_compile_inspect_run(compiled, tmp_path):
    """``compile --side-weights`` writes s.fuel and s.weights; inspect names the
    weights file, run (without the compiler) reads it, and a run without it
    names the missing file."""
    d, _ = compiled
    r = fuelc("compile", d / "m.onnx", "-o", tmp_path / "s.fuel", "--input-shape", "x=4,16",
              "--quiet", "--side-weights")
    assert r.returncode == 0 and (tmp_path / "s.weights").is_file(), r.stderr
    r = fuelc("inspect", tmp_path / "s.fuel")
    assert r.returncode == 0 and f"(in {tmp_path / 's.weights'})" in r.stdout, r.stdout
    xin = f"x={d / 'x.npy'}"
    r = fuelc("run", tmp_path / "s.fuel", "--input", xin, "--output-dir", tmp_path / "out",
              block_compiler=True)
    assert r.returncode == 0, r.stderr
    r = fuelc("run", d / "m.fuel", "--input", xin, "--output-dir", tmp_path / "ref")
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"),
                                  np.load(tmp_path / "ref" / "y.npy"))
    (tmp_path / "s.weights").unlink()
    _error(fuelc("run", tmp_path / "s.fuel", "--input", xin), "s.weights: missing")
    _error(fuelc("compile", d / "m.onnx", "-o", tmp_path / "b", "--binding", "N=4",
                 "--side-weights"), "--side-weights applies to one .fuel file")


def test_progress_line(monkeypatch):
    """On a terminal one line is rewritten (kernel counts included); elsewhere
    one line per stage, without the counts."""
    import io
    from compiler.cli import _Progress
    for live in (True, False):
        err = io.StringIO()
        monkeypatch.setattr(sys, "stderr", err)
        p = _Progress(True, live)
        for stage in ("passes", "codegen", "codegen 1/2", "codegen 2/2", "done"):
            p(stage)
        text = err.getvalue()
        if live:
            assert text.count("\r\x1b[K") == 5 and "codegen 2/2" in text
            assert text.endswith("done\n") and text.count("\n") == 1
        else:
            assert [line.split("] ")[1] for line in text.splitlines()] == \
                ["passes", "codegen", "done"]


def test_help_and_usage():
    r = fuelc("--help")
    assert r.returncode == 0
    for cmd in ("compile", "inspect", "run", "opt"):
        assert f"fuelc {cmd}" in r.stdout
    r = fuelc("compile", "--help")
    assert r.returncode == 0 and "--input-shape" in r.stdout and "--target" in r.stdout
    assert fuelc().returncode == 2
    assert fuelc("frobnicate").returncode == 2
    r = fuelc("opt", "--list-passes")
    assert r.returncode == 0 and "fuel-fuse" in r.stdout


@pytest.mark.slow  # ~6 s of subprocesses; the bundle itself is covered by tests/compiler
def test_bundle_of_sizes_compiles_and_runs_without_the_compiler(compiled, tmp_path):
    """--binding keeps the symbolic dim N and writes one .fuel per size; fuelc run
    (compiler blocked) runs a saved size and refuses another naming the saved ones."""
    d, _ = compiled
    out = tmp_path / "m.fuelbundle"
    r = fuelc("compile", d / "m.onnx", "-o", out, "--binding", "N=5")
    assert r.returncode == 0, r.stderr
    assert "1 binding(s)" in r.stdout and (out / "bundle.json").is_file()
    x = np.random.RandomState(1).rand(5, 16).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = fuelc("run", out, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path,
              block_compiler=True)
    assert r.returncode == 0, r.stderr
    sess = ort.InferenceSession(str(d / "m.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), sess.run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)
    np.save(tmp_path / "x3.npy", x[:3])
    _error(fuelc("run", out, "--input", f"x={tmp_path / 'x3.npy'}", block_compiler=True),
           "{'N': 3} was not saved (saved: N=5)")
    r = fuelc("inspect", out, block_compiler=True)
    assert r.returncode == 0, r.stderr
    assert "input:    x: f32[N,16]" in r.stdout and "binding:  N=5 -> N5.fuel" in r.stdout


def test_symbolic_model_compiles_to_one_file_for_every_size(compiled, tmp_path):
    """Without --input-shape a model with symbolic dims becomes one .fuel file
    that fuelc run (compiler blocked) runs at any N; inspect shows the symbol."""
    d, _ = compiled
    out = tmp_path / "any.fuel"
    r = fuelc("compile", d / "m.onnx", "-o", out)
    assert r.returncode == 0, r.stderr
    assert "inputs x: f32[N,16]" in r.stdout
    sess = ort.InferenceSession(str(d / "m.onnx"), providers=["CPUExecutionProvider"])
    for n in (1, 6):
        x = np.random.RandomState(n).rand(n, 16).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        r = fuelc("run", out, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path,
                  block_compiler=True)
        assert r.returncode == 0, r.stderr
        np.testing.assert_allclose(np.load(tmp_path / "y.npy"), sess.run(None, {"x": x})[0],
                                   rtol=1e-5, atol=1e-6)
    r = fuelc("inspect", out, block_compiler=True)
    assert r.returncode == 0, r.stderr
    assert "input  x: f32[N,16]" in r.stdout and "symbol:   N in 1.." in r.stdout


def test_signed_with_ed25519_pem_keys_and_the_require_policy(compiled, tmp_path, monkeypatch):
    """``compile --sign-key private.pem``; ``run --verify-key public.pem`` with
    the compiler unimportable; ``$FUELC_REQUIRE_SIGNED=1`` refuses a run with no key."""
    ser = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    d, _ = compiled
    key = Ed25519PrivateKey.generate()
    private, public = tmp_path / "private.pem", tmp_path / "public.pem"
    private.write_bytes(key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8,
                                          ser.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(ser.Encoding.PEM,
                                                     ser.PublicFormat.SubjectPublicKeyInfo))
    out, xin = tmp_path / "s.fuel", f"x={d / 'x.npy'}"
    r = fuelc("compile", d / "m.onnx", "-o", out, "--input-shape", "x=4,16", "--quiet",
              "--sign-key", private)
    assert r.returncode == 0, r.stderr
    r = fuelc("run", out, "--input", xin, "--verify-key", public, block_compiler=True)
    assert r.returncode == 0 and r.stdout.startswith("y: f32[4,8]"), r.stderr
    _error(fuelc("run", d / "m.fuel", "--input", xin, "--verify-key", public),
           "not signed, and a signature is required")
    _error(fuelc("compile", d / "m.onnx", "-o", tmp_path / "p.fuel", "--input-shape", "x=4,16",
                 "--sign-key", public), "public key, which can only verify")
    monkeypatch.setenv("FUELC_REQUIRE_SIGNED", "1")
    _error(fuelc("run", out, "--input", xin), "$FUELC_REQUIRE_SIGNED", "no key")
