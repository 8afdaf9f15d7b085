"""The weights' digest tree (issue 21): ``save`` records the SHA-256 of each
fixed-size chunk of the weights and their root (``chunks``, next to the
whole file's SHA-256, in the member's record or ``weights_file``);
``runtime.load`` hashes the chunks in several threads and compares them.
A changed byte names its chunk; a tree that does not cover the weights, a
root that is not its digests', or a chunk size out of range is a
``ManifestFieldError``; a file without a tree (written before) is checked
against its whole SHA-256, as it was.

The chunks here are 64 KiB (the writer's ``WEIGHTS_CHUNK``, set small) over
some 400 KiB of weights: seven chunks, the last one shorter."""
import hashlib
import json
import os
import shutil
import zipfile

import numpy as np
import pytest

import runtime
from runtime.artifact import (WEIGHTS, ArtifactIntegrityError, ArtifactWeightsFileError,
                              ManifestFieldError)

CHUNK = 64 << 10


def _graph():
    from compiler import Graph
    rng = np.random.default_rng(0)
    g = Graph()
    x = g.input("x", (4, 256), "f32")
    w = g.constant(rng.standard_normal((256, 400)).astype(np.float32), name="w")
    g.output((x @ w).tanh(), name="y")
    return g


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    import compiler.export as export
    from compiler import compile
    d = tmp_path_factory.mktemp("chunks")
    m = compile(_graph())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(export, "WEIGHTS_CHUNK", CHUNK)
        m.save(d / "zip.fuel")
        m.save(d / "side.fuel", weights="side")
    x = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    return d, m(x=x), x


def _manifest(p) -> dict:
    with zipfile.ZipFile(p) as zf:
        return json.loads(zf.read("manifest.json"))


def _weights_span(p) -> tuple[int, int]:
    """Where the weights member's data lies in the ``.fuel`` file."""
    with zipfile.ZipFile(p) as zf, open(p, "rb") as f:
        info = zf.getinfo(WEIGHTS)
        f.seek(info.header_offset + 26)
        n, extra = np.frombuffer(f.read(4), "<u2")
    start = info.header_offset + 30 + int(n) + int(extra)
    return start, info.file_size


def _rewrite(src, dst, edit):
    """Copy ``src`` to ``dst`` with its manifest through ``edit(m)``, the
    weights member written aligned as ``save`` writes it (so it is mapped)."""
    from compiler.export import _Writer
    from runtime.artifact import MANIFEST, WEIGHTS_ALIGN
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", allowZip64=True) as zout:
        w = _Writer(zout)
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == MANIFEST:
                m = json.loads(data)
                edit(m)
                data = json.dumps(m).encode()
            w.add(info.filename, [data], compress=info.compress_type != zipfile.ZIP_STORED,
                  align=WEIGHTS_ALIGN if info.filename == WEIGHTS else 0)
    return dst


def _copy_side(d, tmp_path):
    for suffix in (".fuel", ".weights"):
        shutil.copy(d / f"side{suffix}", tmp_path / f"side{suffix}")
    return tmp_path / "side.fuel"


def _flip(p, at: int) -> None:
    with open(p, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 1]))


def test_the_tree_lists_each_chunks_sha256_and_loads_mapped(saved):
    d, want, x = saved
    for fuel, rec, data in [
            ("zip.fuel", _manifest(d / "zip.fuel")["members"][WEIGHTS], None),
            ("side.fuel", _manifest(d / "side.fuel")["weights_file"],
             (d / "side.weights").read_bytes())]:
        if data is None:
            with zipfile.ZipFile(d / fuel) as zf:
                data = zf.read(WEIGHTS)
        tree = rec["chunks"]
        assert tree["size"] == CHUNK and rec["size"] == len(data) > 6 * CHUNK
        assert tree["sha256"] == [hashlib.sha256(data[i:i + CHUNK]).hexdigest()
                                  for i in range(0, len(data), CHUNK)]
        assert tree["root"] == hashlib.sha256(b"".join(
            bytes.fromhex(h) for h in tree["sha256"])).hexdigest()
        assert rec["sha256"] == hashlib.sha256(data).hexdigest()  # for older runtimes
        m = runtime.load(d / fuel)
        np.testing.assert_array_equal(m(x=x), want)
        assert not any(c.flags.writeable for c in m.plan.constants.values())


@pytest.mark.parametrize("threads", [1, 3, 16])
def test_any_number_of_threads_checks_the_same_chunks(saved, tmp_path, monkeypatch, threads):
    import runtime.artifact as artifact
    d, want, x = saved
    monkeypatch.setattr(artifact, "hash_threads", lambda: threads)
    np.testing.assert_array_equal(runtime.load(d / "zip.fuel")(x=x), want)
    p = tmp_path / "zip.fuel"
    shutil.copy(d / "zip.fuel", p)
    start, size = _weights_span(p)
    _flip(p, start + size - 1)
    with pytest.raises(ArtifactIntegrityError, match=r"chunk 6 of 7 \(bytes \[393216, "):
        runtime.load(p)


def test_a_flipped_byte_names_its_chunk(saved, tmp_path):
    d = saved[0]
    p = tmp_path / "zip.fuel"
    start, size = _weights_span(d / "zip.fuel")
    last = (size - 1) // CHUNK
    for at, chunk in [(size - 1, last), (0, 0), (3 * CHUNK, 3), (3 * CHUNK - 1, 2)]:
        shutil.copy(d / "zip.fuel", p)
        _flip(p, start + at)
        lo, hi = chunk * CHUNK, min(size, (chunk + 1) * CHUNK)
        with pytest.raises(ArtifactIntegrityError) as e:
            runtime.load(p)
        assert f"member {WEIGHTS} does not match its SHA-256 in the manifest: chunk {chunk} " \
               f"of {last + 1} (bytes [{lo}, {hi})) differs" in str(e.value)
    p = _copy_side(d, tmp_path)
    _flip(tmp_path / "side.weights", size_side := os.path.getsize(tmp_path / "side.weights") - 1)
    with pytest.raises(ArtifactWeightsFileError, match=rf"chunk {size_side // CHUNK} of "
                       rf"{size_side // CHUNK + 1} \(bytes \[{size_side // CHUNK * CHUNK}, "
                       rf"{size_side + 1}\)\) differs: it was modified") as e:
        runtime.load(p)
    assert e.value.weights_path == str(tmp_path / "side.weights")


def test_truncated_files_are_refused(saved, tmp_path):
    d = saved[0]
    start, size = _weights_span(d / "zip.fuel")
    data = (d / "zip.fuel").read_bytes()
    for cut in (start + size - 1, start + CHUNK, len(data) - 1):
        (tmp_path / "cut.fuel").write_bytes(data[:cut])
        with pytest.raises(ArtifactIntegrityError, match="damaged or truncated"):
            runtime.load(tmp_path / "cut.fuel")
    p = _copy_side(d, tmp_path)
    os.truncate(tmp_path / "side.weights", os.path.getsize(tmp_path / "side.weights") - CHUNK)
    with pytest.raises(ArtifactWeightsFileError, match=r"is \d+ bytes, the manifest says"):
        runtime.load(p)
    # the manifest's size edited to the truncated file's: its chunks no longer cover it
    side_size = os.path.getsize(tmp_path / "side.weights")
    _rewrite(d / "side.fuel", tmp_path / "side.fuel",
             lambda m: m["weights_file"].update(size=side_size))
    with pytest.raises(ManifestFieldError, match="weights_file.chunks.sha256 lists 7 chunk"):
        runtime.load(p)


def _root(digests):
    return hashlib.sha256(b"".join(bytes.fromhex(h) for h in digests)).hexdigest()


def _drop_last(tree):
    tree["sha256"].pop()
    tree["root"] = _root(tree["sha256"])


def _add_one(tree):
    tree["sha256"].append("0" * 64)
    tree["root"] = _root(tree["sha256"])


def _double(tree):  # chunks of twice the size, the list as it was
    tree["size"] *= 2


@pytest.mark.parametrize("edit, field, says", [
    (_drop_last, "chunks.sha256", r"lists 6 chunk\(s\) of 65536 bytes \(bytes \[0, 393216\)\), "
                                  r"but the weights are \d+ bytes: 7 chunk\(s\)"),
    (_add_one, "chunks.sha256", "lists 8 chunk"),
    (_double, "chunks.sha256", r"lists 7 chunk\(s\) of 131072 bytes"),
    (lambda t: t.update(root="0" * 64), "chunks.root", "is not the SHA-256 of the chunk digests"),
    (lambda t: t.update(root="xyz"), "chunks.root", "is not a SHA-256 hex digest"),
    (lambda t: t["sha256"].__setitem__(2, 7), "chunks.sha256[2]", "must be a string"),
    (lambda t: t.update(size=0), "chunks.size", "0 is not a power of two in [64 KiB, 1 GiB]"),
    (lambda t: t.update(size=-CHUNK), "chunks.size", "is not a power of two"),
    (lambda t: t.update(size=1 << 70), "chunks.size", f"{1 << 70} is not a power of two"),
    (lambda t: t.update(size=2 << 30), "chunks.size", "is not a power of two"),
    (lambda t: t.update(size=3 * CHUNK), "chunks.size", "is not a power of two"),
    (lambda t: t.update(size=65536.0), "chunks.size", "must be an int, got float"),
    (lambda t: t.update(size="65536"), "chunks.size", "must be an int, got str"),
    (lambda t: t.update(size=True), "chunks.size", "must be an int, got bool"),
    (lambda t: t.pop("root"), "chunks", "has no 'root'"),
    (lambda t: t.pop("sha256"), "chunks", "has no 'sha256'"),
])
@pytest.mark.parametrize("where", ["member", "side"])
def test_a_malformed_tree_is_refused_naming_its_field(saved, tmp_path, edit, field, says, where):
    import re
    d = saved[0]
    if where == "member":
        src, dst, at = d / "zip.fuel", tmp_path / "zip.fuel", f"members[{WEIGHTS!r}]"
        _rewrite(src, dst, lambda m: edit(m["members"][WEIGHTS]["chunks"]))
    else:
        dst, at = _copy_side(d, tmp_path), "weights_file"
        _rewrite(d / "side.fuel", dst, lambda m: edit(m["weights_file"]["chunks"]))
    with pytest.raises(ManifestFieldError, match=re.escape(f"{at}.{field}") + ".*" +
                       (says if "(" in says else re.escape(says))) as e:
        runtime.load(dst)
    assert e.value.field == f"{at}.{field}"


def test_only_the_weights_have_a_tree(saved, tmp_path):
    d = saved[0]
    def edit(m):
        m["members"]["code/0.o"]["chunks"] = m["members"][WEIGHTS]["chunks"]
    _rewrite(d / "zip.fuel", tmp_path / "zip.fuel", edit)
    with pytest.raises(ManifestFieldError, match="only the weights"):
        runtime.load(tmp_path / "zip.fuel")


@pytest.mark.parametrize("where", ["member", "side"])
def test_a_file_without_a_tree_is_checked_against_its_whole_sha256(saved, tmp_path, where):
    """The form written before trees: the member's (or side file's) record
    has only its size and SHA-256. It loads, mapped; a flipped byte is
    named as before, without a chunk."""
    d, want, x = saved
    if where == "member":
        p = _rewrite(d / "zip.fuel", tmp_path / "zip.fuel",
                     lambda m: m["members"][WEIGHTS].pop("chunks"))
        start, size = _weights_span(p)
        weights, cls = p, ArtifactIntegrityError
    else:
        p = _copy_side(d, tmp_path)
        _rewrite(d / "side.fuel", p, lambda m: m["weights_file"].pop("chunks"))
        start, size = 0, os.path.getsize(tmp_path / "side.weights")
        weights, cls = tmp_path / "side.weights", ArtifactWeightsFileError
    assert "chunks" not in json.dumps(_manifest(p))
    m = runtime.load(p)
    np.testing.assert_array_equal(m(x=x), want)
    assert not any(c.flags.writeable for c in m.plan.constants.values())  # mapped
    _flip(weights, start + size - 1)
    with pytest.raises(cls, match="does not match its SHA-256 in the manifest") as e:
        runtime.load(p)
    assert "chunk" not in str(e.value)


def test_a_tree_read_without_a_map_is_checked_too(saved, tmp_path):
    """A weights member not stored aligned (a zip rewritten by another tool)
    is read instead of mapped, and its tree checked over the bytes read."""
    d, want, x = saved
    p = tmp_path / "plain.fuel"
    with zipfile.ZipFile(d / "zip.fuel") as zin, zipfile.ZipFile(p, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == WEIGHTS:
                data = data[:-1] + bytes([data[-1] ^ 1])
            zout.writestr(info.filename, data)
    with pytest.raises(ArtifactIntegrityError, match=r"chunk 6 of 7"):
        runtime.load(p)
    with zipfile.ZipFile(d / "zip.fuel") as zin, zipfile.ZipFile(p, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))
    np.testing.assert_array_equal(runtime.load(p)(x=x), want)


def test_a_signature_covers_the_tree(saved, tmp_path, monkeypatch):
    """The tree is in the signed manifest: a chunk digest edited to match a
    changed chunk fails the signature."""
    import compiler.export as export
    from compiler import compile
    from runtime.artifact import ArtifactSignatureError
    monkeypatch.setattr(export, "WEIGHTS_CHUNK", CHUNK)
    compile(_graph()).save(tmp_path / "signed.fuel", sign_with=b"secret")
    runtime.load(tmp_path / "signed.fuel", verify_with=b"secret")

    def edit(m):
        tree = m["members"][WEIGHTS]["chunks"]
        tree["sha256"][0] = "0" * 64
        tree["root"] = _root(tree["sha256"])
    # the rewrite keeps the old signature member, which no longer matches
    _rewrite(tmp_path / "signed.fuel", tmp_path / "edited.fuel", edit)
    with pytest.raises(ArtifactSignatureError):
        runtime.load(tmp_path / "edited.fuel", verify_with=b"secret")
