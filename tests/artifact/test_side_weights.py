"""``save(path, weights="side")``: the weights live in ``model.weights`` next
to ``model.fuel``; the manifest names the file with its size and SHA-256 (so
a signature covers it), ``runtime.load`` maps it read-only, and a missing,
truncated, replaced or foreign weights file is an ``ArtifactWeightsFileError``
naming it."""
import json
import mmap
import os
import shutil
import zipfile

import numpy as np
import pytest

import runtime
from runtime.artifact import (ArtifactFormatError, ArtifactIntegrityError,
                              ArtifactSignatureError, ArtifactWeightsFileError,
                              ManifestFieldError)


def _graph(seed: int = 0):
    from compiler import Graph
    rng = np.random.default_rng(seed)
    g = Graph()
    x = g.input("x", (4, 64), "f32")
    w = g.constant(rng.standard_normal((64, 32)).astype(np.float32), name="w")
    b = g.constant(rng.standard_normal(32).astype(np.float32), name="b")
    g.output((x @ w + b).tanh(), name="y")
    return g


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from compiler import compile
    d = tmp_path_factory.mktemp("side")
    m = compile(_graph())
    m.save(d / "model.fuel", weights="side")
    m.save(d / "signed.fuel", weights="side", sign_with=b"secret")
    compile(_graph(seed=1)).save(d / "other.fuel", weights="side")
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    return d, m(x=x), x


def _copy(d, tmp_path, name="model"):
    for suffix in (".fuel", ".weights"):
        shutil.copy(d / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    return tmp_path / f"{name}.fuel"


def test_side_weights_are_mapped_and_named_by_the_manifest(saved):
    d, want, x = saved
    with zipfile.ZipFile(d / "model.fuel") as zf:
        names = zf.namelist()
        manifest = json.loads(zf.read("manifest.json"))
    assert "weights.safetensors" not in names
    rec = manifest["weights_file"]
    size = os.path.getsize(d / "model.weights")
    assert rec["name"] == "model.weights" and rec["size"] == size
    m = runtime.load(d / "model.fuel")
    np.testing.assert_array_equal(m(x=x), want)
    for c in m.plan.constants.values():
        base = c.base
        while isinstance(base, np.ndarray):
            base = base.base
        base = base.obj if isinstance(base, memoryview) else base
        assert isinstance(base, mmap.mmap) and not c.flags.writeable


def test_a_symlinked_module_finds_its_weights_next_to_the_real_file(saved, tmp_path):
    d, want, x = saved
    os.symlink(d / "model.fuel", tmp_path / "link.fuel")
    np.testing.assert_array_equal(runtime.load(tmp_path / "link.fuel")(x=x), want)


def test_missing_side_weights_file(saved, tmp_path):
    p = _copy(saved[0], tmp_path)
    os.unlink(tmp_path / "model.weights")
    with pytest.raises(ArtifactWeightsFileError, match="model.weights: missing") as e:
        runtime.load(p)
    assert e.value.weights_path == str(tmp_path / "model.weights")


def test_truncated_side_weights_file(saved, tmp_path):
    p = _copy(saved[0], tmp_path)
    with open(tmp_path / "model.weights", "r+b") as f:
        f.truncate(os.path.getsize(tmp_path / "model.weights") - 4)
    with pytest.raises(ArtifactWeightsFileError, match=r"model.weights: is \d+ bytes, the "
                                                       r"manifest says \d+"):
        runtime.load(p)


def test_edited_or_foreign_side_weights_file(saved, tmp_path):
    d = saved[0]
    p = _copy(d, tmp_path)
    with open(tmp_path / "model.weights", "r+b") as f:  # one weight byte changed
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(ArtifactWeightsFileError, match="does not match its SHA-256"):
        runtime.load(p)
    shutil.copy(d / "other.weights", tmp_path / "model.weights")  # another save's weights
    with pytest.raises(ArtifactIntegrityError, match="model.weights"):
        runtime.load(p)


def test_side_weights_file_that_is_not_a_file(saved, tmp_path):
    p = _copy(saved[0], tmp_path)
    os.unlink(tmp_path / "model.weights")
    os.mkdir(tmp_path / "model.weights")
    with pytest.raises(ArtifactWeightsFileError, match="model.weights"):
        runtime.load(p)


def test_signature_covers_the_side_weights(saved, tmp_path):
    d, want, x = saved
    p = _copy(d, tmp_path, "signed")
    np.testing.assert_array_equal(runtime.load(p, verify_with=b"secret")(x=x), want)
    with pytest.raises(ArtifactSignatureError):
        runtime.load(p, verify_with=b"another secret")
    shutil.copy(d / "other.weights", tmp_path / "signed.weights")  # another model's weights
    with pytest.raises(ArtifactWeightsFileError):
        runtime.load(p, verify_with=b"secret")
    # ... with the manifest's record of them edited to match: the signature fails
    with zipfile.ZipFile(d / "other.fuel") as zf:
        other = json.loads(zf.read("manifest.json"))["weights_file"]
    _edit_manifest(d / "signed.fuel", tmp_path / "edited.fuel",
                      lambda m: m["weights_file"].update(sha256=other["sha256"], size=other["size"],
                                                      name="edited.weights"))
    shutil.copy(d / "other.weights", tmp_path / "edited.weights")
    with pytest.raises(ArtifactSignatureError):
        runtime.load(tmp_path / "edited.fuel", verify_with=b"secret")


def _edit_manifest(src, dst, edit):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == "manifest.json":
                m = json.loads(data)
                edit(m)
                data = json.dumps(m).encode()
            zout.writestr(info, data)


@pytest.mark.parametrize("name", ["../model.weights", "/tmp/model.weights", "sub/x.weights",
                                  "sub\\x.weights", "model.bin", ".weights", "m\0.weights"])
def test_side_weights_name_must_be_a_file_next_to_the_module(saved, tmp_path, name):
    d = saved[0]
    shutil.copy(d / "model.weights", tmp_path / "model.weights")
    _edit_manifest(d / "model.fuel", tmp_path / "model.fuel",
                   lambda m: m["weights_file"].update(name=name))
    with pytest.raises(ManifestFieldError, match="weights_file.name") as e:
        runtime.load(tmp_path / "model.fuel")
    assert e.value.field == "weights_file.name"


def test_weights_in_both_places_are_refused(saved, tmp_path):
    d = saved[0]
    from compiler import compile
    compile(_graph()).save(tmp_path / "zip.fuel")
    with zipfile.ZipFile(d / "model.fuel") as zf:
        side = json.loads(zf.read("manifest.json"))["weights_file"]
    shutil.copy(d / "model.weights", tmp_path / "model.weights")
    _edit_manifest(tmp_path / "zip.fuel", tmp_path / "both.fuel",
                   lambda m: m.update(weights_file=side))
    with pytest.raises(ArtifactFormatError, match="both hold weights"):
        runtime.load(tmp_path / "both.fuel")


def test_save_refuses_an_unknown_weights_place_and_a_clashing_name(tmp_path):
    from compiler import compile
    from compiler.export import ExportError
    m = compile(_graph())
    with pytest.raises(ExportError, match="weights is 'zip'"):
        m.save(tmp_path / "m.fuel", weights="separate")
    with pytest.raises(ExportError, match="same name"):
        m.save(tmp_path / "m.weights", weights="side")
    assert not list(tmp_path.iterdir())  # nothing half-written left behind
