"""Export (``CompiledModule.save``) and load (``runtime.load``): outputs equal
to the compiled module, in this process and in one where ``compiler`` and
MLIR cannot be imported; every damaged, tampered or foreign file gets a
typed ``ArtifactError`` before any code is linked."""
import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import runtime
from runtime.artifact import (ArtifactCodeError, ArtifactCpuError, ArtifactError,
                              ArtifactFormatError, ArtifactIntegrityError, ArtifactVersionError,
                              object_revision, open_artifact, read_safetensors,
                              sha256_hex)

ROOT = Path(__file__).resolve().parents[2]

#: Run code in a process where compiler, torch_mlir and mlir cannot be imported.
BLOCK_COMPILER = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("compiler", "torch_mlir", "mlir"):
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, _Block())
"""


def _graph():
    from compiler import Graph
    rng = np.random.RandomState(0)
    g = Graph()
    x = g.input("x", (8, 64), "f32")
    w = rng.rand(64, 32).astype(np.float32)
    w1 = g.constant(w, name="w1")
    w2 = g.constant(w.copy(), name="w2")  # same bytes: stored once
    b = g.constant(rng.rand(32).astype(np.float32), name="b")
    h = (x @ w1 + b).gelu()
    g.output(h.softmax(-1), name="y")
    g.output((x @ w2).tanh() + x.transpose().sum(0).reshape((1, 8)).mean(-1, keepdims=True),
             name="z")
    return g


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from compiler import compile
    m = compile(_graph(), target="cpu")
    path = tmp_path_factory.mktemp("art") / "m.fuel"
    m.save(path)
    x = np.random.RandomState(1).rand(8, 64).astype(np.float32)
    return m, path, x


def test_load_runs_like_the_compiled_module(built):
    m, path, x = built
    lm = runtime.load(path)
    want, got = m.run(x=x), lm.run(x=x)
    assert list(got) == ["y", "z"] == lm.output_names
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    assert lm.input_names == ["x"]
    assert lm.signature == {"inputs": {"x": "f32[8,64]"},
                            "outputs": {"y": "f32[8,32]", "z": "f32[8,32]"}}
    assert lm.entry_points[0]["name"] == "main"
    assert lm.kernel_summary() == m.kernel_summary()
    assert lm.ir("optimized") == m.ir["optimized"] and lm.ir_stages == list(m.ir)
    with pytest.raises(runtime.PlanError, match="expected f32\\[8,64\\]"):
        lm(x=x[:4])
    with pytest.raises(runtime.PlanError, match="missing \\['x'\\]"):
        lm()


def test_manifest_records_versions_target_kernels_and_hashes(built):
    m, path, _ = built
    art = open_artifact(path)
    man = art.manifest
    assert man["producer"]["torch_mlir"] and man["producer"]["llvmlite"]
    assert man["target"]["name"] == str(m.target)
    assert set(man["target"]["features"]) == set(m.target.features)
    for rec in man["kernels"]:
        assert rec["binding"]["kind"] in ("object", "numpy") and len(rec["revision"]) == 16
        assert "max_ulp" in rec["precision"] and rec["source"].startswith(("mlir-cpu", "numpy"))
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist()) - {"manifest.json"}
        assert names == set(man["members"])
        for n in names:
            assert sha256_hex(zf.read(n)) == man["members"][n]["sha256"]


def test_shared_weights_are_stored_once_in_safetensors_layout(built):
    _, path, _ = built
    art = open_artifact(path)
    consts = art.manifest["constants"]
    assert consts["const:w1"] == consts["const:w2"] == "const:w1"
    assert consts["const:b"] == "const:b"
    raw = bytes(art.members["weights.safetensors"])
    n, = struct.unpack_from("<Q", raw)
    header = json.loads(raw[8:8 + n])
    assert len(header) == 2 and (8 + n) % 8 == 0
    ends = sorted(t["data_offsets"] for t in header.values())
    assert ends[0][0] == 0 and ends[0][1] == ends[1][0] and ends[1][1] == len(raw) - 8 - n
    loaded = art.constants()
    assert loaded["const:w1"] is loaded["const:w2"]
    np.testing.assert_array_equal(loaded["const:w1"], np.random.RandomState(0).rand(64, 32)
                                  .astype(np.float32))


def test_weights_share_a_tensor_only_when_dtype_shape_and_bytes_agree():
    from compiler.export import _weights
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = a + 1  # same dtype and shape, other bytes
    names, header, _ = _weights({"a": a, "b": b, "a2": a.copy(), "a3": a.reshape(3, 2),
                                 "a4": a.view(np.int32), "b2": b.copy()})
    assert names == {"a": "a", "b": "b", "a2": "a", "a3": "a3", "a4": "a4", "b2": "b"}
    assert sorted(header) == ["a", "a3", "a4", "b"]


def test_load_in_a_process_without_compiler_or_mlir(built, tmp_path):
    m, path, x = built
    np.save(tmp_path / "x.npy", x)
    code = BLOCK_COMPILER + f"""
import numpy as np, runtime
m = runtime.load({str(path)!r})
out = m.run(x=np.load({str(tmp_path / 'x.npy')!r}))
for k, v in out.items():
    np.save({str(tmp_path)!r} + "/" + k + ".npy", v)
try:
    import compiler
except ImportError:
    print("compiler blocked")
print(sorted(n for n in __import__('sys').modules if n.split('.')[0] in ('compiler', 'mlir', 'torch_mlir')))
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "compiler blocked" in r.stdout and "[]" in r.stdout
    for k, v in m.run(x=x).items():
        np.testing.assert_array_equal(np.load(tmp_path / f"{k}.npy"), v)


# -- damaged, tampered and foreign files ----------------------------------------------------


def _rewrite(src: Path, dst: Path, edit) -> None:
    """Copy the zip, passing each member's bytes through ``edit(name, data)``
    (the zip CRCs are recomputed: only the manifest can tell)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = edit(info.filename, zin.read(info))
            if data is not None:
                zout.writestr(info, data)


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1:]


@pytest.mark.parametrize("member", ["weights.safetensors", "code/0.o", "ir/fuel.mlir"])
def test_a_flipped_byte_in_any_member_is_an_integrity_error(built, tmp_path, member,
                                                             monkeypatch):
    _, path, _ = built
    bad = tmp_path / "bad.fuel"
    _rewrite(path, bad, lambda n, d: _flip(d, len(d) // 2) if n == member else d)
    import runtime.cpu_loader as cl
    monkeypatch.setattr(cl, "load_object", lambda *a, **k: pytest.fail("code linked"))
    with pytest.raises(ArtifactIntegrityError, match=f"member {member} does not match its SHA-256"):
        runtime.load(bad)


def test_raw_byte_damage_and_truncation_are_typed_errors(built, tmp_path):
    _, path, _ = built
    data = path.read_bytes()
    for i, cut in enumerate([len(data) // 2, len(data) - 30, 10, 0]):
        p = tmp_path / f"cut{i}.fuel"
        p.write_bytes(data[:cut])
        with pytest.raises(ArtifactError):
            runtime.load(p)
    p = tmp_path / "flip.fuel"
    from runtime.artifact import WEIGHTS_ALIGN
    p.write_bytes(_flip(data, WEIGHTS_ALIGN + 200))  # inside the (mapped) weights' data
    with pytest.raises(ArtifactIntegrityError, match="weights.safetensors does not match"):
        runtime.load(p)
    with zipfile.ZipFile(path) as zf:  # inside a member that is read: the zip CRC fails
        obj = zf.getinfo("code/0.o")
    at = obj.header_offset + 30 + len(obj.filename) + len(obj.extra) + 20 + 100
    p.write_bytes(_flip(data, at))
    with pytest.raises(ArtifactIntegrityError, match="damaged or truncated"):
        runtime.load(p)
    p.write_bytes(b"not a zip at all")
    with pytest.raises(ArtifactError):
        runtime.load(p)
    with pytest.raises(ArtifactFormatError, match="no such file"):
        runtime.load(tmp_path / "missing.fuel")


def _edit_manifest(src, dst, fn):
    def edit(name, data):
        if name != "manifest.json":
            return data
        m = json.loads(data)
        fn(m)
        return json.dumps(m).encode()
    _rewrite(src, dst, edit)


def test_manifest_tampering(built, tmp_path):
    _, path, _ = built
    bad = tmp_path / "bad.fuel"
    _edit_manifest(path, bad, lambda m: m.__setitem__("format_version", 99))
    with pytest.raises(ArtifactVersionError,
                       match="format version 99; this runtime reads versions 4, 5"):
        runtime.load(bad)
    _edit_manifest(path, bad, lambda m: m.__setitem__("format", "onnx"))
    with pytest.raises(ArtifactFormatError, match="not a fuelc module"):
        runtime.load(bad)
    _edit_manifest(path, bad, lambda m: m["members"]["code/0.o"].__setitem__("sha256", "0" * 64))
    with pytest.raises(ArtifactIntegrityError, match="code/0.o"):
        runtime.load(bad)
    _edit_manifest(path, bad, lambda m: m["kernels"][0].pop("binding"))
    with pytest.raises(ArtifactFormatError, match="kernels\\[0\\] has no 'binding'"):
        runtime.load(bad)
    _edit_manifest(path, bad, lambda m: m["target"].__setitem__("features", "avx2"))
    with pytest.raises(ArtifactFormatError, match="target.features must be a list"):
        runtime.load(bad)
    _rewrite(path, bad, lambda n, d: None if n == "code/0.o" else d)
    with pytest.raises(ArtifactFormatError, match="missing \\['code/0.o'\\]"):
        runtime.load(bad)

    def extra(n, d):
        return d
    _rewrite(path, bad, extra)
    with zipfile.ZipFile(bad, "a") as zf:
        zf.writestr("evil.py", b"print('pwned')")
    with pytest.raises(ArtifactFormatError, match="unexpected \\['evil.py'\\]"):
        runtime.load(bad)


def test_tampered_code_with_matching_hash_is_refused_without_crashing(built, tmp_path):
    """Garbage code whose hash was updated too: the ELF checks refuse it
    (in a subprocess, in case anything would abort)."""
    _, path, _ = built
    bad = tmp_path / "bad.fuel"
    garbage = b"\x7fELF\x02\x01\x01" + b"\xff" * 500

    def edit(name, data):
        if name == "code/0.o":
            return garbage
        if name == "manifest.json":
            m = json.loads(data)
            m["members"]["code/0.o"] = {"sha256": sha256_hex(garbage), "size": len(garbage)}
            for k in m["kernels"]:  # a consistent forgery: the revisions recomputed too
                if k["binding"].get("object") == "code/0.o":
                    k["revision"] = object_revision(k, sha256_hex(garbage), m["target"])
            return json.dumps(m).encode()
        return data
    _rewrite(path, bad, edit)
    code = BLOCK_COMPILER + f"""
import runtime
try:
    runtime.load({str(bad)!r})
except runtime.ArtifactCodeError as e:
    print("refused:", e)
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "refused:" in r.stdout and "code/0.o: ELF file has type" in r.stdout, \
        (r.returncode, r.stdout, r.stderr)


def test_cpu_without_the_target_features_is_refused(tmp_path, monkeypatch):
    from compiler import Graph, compile
    g = Graph()
    x = g.input("x", (4, 8), "f32")
    g.output((x * 2.0).exp(), name="y")
    # compiled and saved on a "machine" that cannot run it: objects come from the cache
    monkeypatch.setenv("FUELC_HOST_FEATURES_MASK", "avx2")
    path = compile(g, target="cpu:x86-64-v3").save(tmp_path / "v3.fuel")
    import runtime.cpu_loader as cl
    real = cl.load_object
    monkeypatch.setattr(cl, "load_object", lambda *a, **k: pytest.fail("code linked"))
    with pytest.raises(ArtifactCpuError, match="avx2") as e:
        runtime.load(path)
    assert e.value.missing == ["avx2"] and e.value.target == "cpu:x86-64-v3"
    assert isinstance(e.value, runtime.cpu_features.CpuFeatureError)
    assert open_artifact(path).manifest["target"]["cpu"] == "x86-64-v3"  # inspect: no CPU check
    monkeypatch.delenv("FUELC_HOST_FEATURES_MASK")
    monkeypatch.setattr(cl, "load_object", real)
    x = np.linspace(-3, 3, 32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_allclose(runtime.load(path)(x=x), np.exp(2 * x), rtol=1e-6)


def test_read_safetensors_rejects_bad_offsets():
    head = json.dumps({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    buf = struct.pack("<Q", len(head)) + head + bytes(16)
    with pytest.raises(ArtifactFormatError, match="tensor 't'"):
        read_safetensors(buf)
    with pytest.raises(ArtifactFormatError, match="does not fit"):
        read_safetensors(struct.pack("<Q", 1 << 40) + b"{}")


def test_save_is_atomic_and_leaves_no_temp_file(built, tmp_path):
    m, _, _ = built
    with pytest.raises(OSError):
        m.save(tmp_path / "no" / "such" / "dir" / "m.fuel")
    p = m.save(tmp_path / "m.fuel")
    assert sorted(os.listdir(tmp_path)) == ["m.fuel"] and p == tmp_path / "m.fuel"
