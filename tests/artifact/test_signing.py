"""Signed ``.fuel`` files (issue 22, "artifacts are code"): a file signed
with a shared secret (HMAC-SHA256) or an Ed25519 private key round-trips;
an unsigned file, one signed under another key or algorithm, and one whose
member was rewritten with its hash recomputed are refused under a signature
policy (``verify_with``, ``require_signature``, ``$FUELC_VERIFY_KEY_FILE``,
``$FUELC_REQUIRE_SIGNED``), before any code is linked."""
import hashlib
import json
import zipfile

import numpy as np
import pytest

import runtime
from runtime import ArtifactError, ArtifactSignatureError
from runtime.signing import read_key_file, sign_manifest, verify_manifest

ed25519 = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ed25519")


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """One module saved unsigned, signed with a secret and with an Ed25519 key."""
    from compiler import Graph, compile
    g = Graph()
    x = g.input("x", (2, 4), "f32")
    g.output(x @ g.constant(np.full((4, 3), 0.5, np.float32), name="w"), name="y")
    cm = compile(g)
    d = tmp_path_factory.mktemp("signed")
    private = ed25519.Ed25519PrivateKey.generate()
    files = {"unsigned": cm.save(d / "unsigned.fuel"),
             "hmac": cm.save(d / "hmac.fuel", sign_with=b"shared secret"),
             "ed25519": cm.save(d / "ed25519.fuel", sign_with=private)}
    return cm, files, private, np.ones((2, 4), np.float32)


def _rehash_weights(src, dst):
    """``src`` with every f32 of the weights changed and its SHA-256
    recomputed in the manifest (the signature member kept): what anyone who
    can write the file can do; without a key it loads and computes other numbers."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as z:
        m = json.loads(zin.read("manifest.json"))
        w = bytearray(zin.read("weights.safetensors"))
        n = int.from_bytes(w[:8], "little")
        for i in range(8 + n + 3, len(w), 4):
            w[i] ^= 0x40
        m["members"]["weights.safetensors"] = {"sha256": hashlib.sha256(w).hexdigest(),
                                               "size": len(w)}
        for info in zin.infolist():
            data = {"manifest.json": json.dumps(m).encode(),
                    "weights.safetensors": bytes(w)}.get(info.filename)
            z.writestr(info, data if data is not None else zin.read(info.filename))
    return dst


def test_signed_files_round_trip(signed):
    cm, files, private, a = signed
    want = cm(x=a)
    np.testing.assert_array_equal(runtime.load(files["hmac"], verify_with="shared secret")(x=a),
                                  want)
    for key in (private.public_key(), private):  # the private key verifies too
        np.testing.assert_array_equal(runtime.load(files["ed25519"], verify_with=key)(x=a), want)
    with zipfile.ZipFile(files["ed25519"]) as z:
        assert z.read("manifest.sig").startswith(b"ed25519:")


@pytest.mark.parametrize("file, key, match", [
    ("unsigned", "secret", "not signed, and a signature is required"),
    ("unsigned", "public", "not signed, and a signature is required"),
    ("hmac", b"another secret", "signature does not match"),
    ("ed25519", "other-public", "signature does not match"),
    ("hmac", "public", "signed with a shared secret .* is an Ed25519 key"),
    ("ed25519", "secret", "signed with an Ed25519 key, and the key to verify it with is a "
                          "shared secret"),
])
def test_unsigned_or_other_key_is_refused(signed, file, key, match):
    _, files, private, _ = signed
    key = {"secret": b"shared secret", "public": private.public_key(),
           "other-public": ed25519.Ed25519PrivateKey.generate().public_key()}.get(key, key)
    with pytest.raises(ArtifactSignatureError, match=match):
        runtime.load(files[file], verify_with=key)


@pytest.mark.parametrize("file", ["hmac", "ed25519"])
def test_rehashed_weights_load_unsigned_and_are_refused_signed(signed, tmp_path, file):
    """The reproducer of issue 22: weights rewritten, hash recomputed."""
    cm, files, private, a = signed
    forged = _rehash_weights(files[file], tmp_path / "forged.fuel")
    assert not np.array_equal(runtime.load(forged)(x=a), cm(x=a))  # the trust model
    key = b"shared secret" if file == "hmac" else private.public_key()
    with pytest.raises(ArtifactSignatureError, match="signature does not match"):
        runtime.load(forged, verify_with=key)


def test_a_required_signature_needs_a_key(signed, tmp_path, monkeypatch):
    _, files, private, a = signed
    with pytest.raises(ArtifactSignatureError, match=r"require_signature=True.*no key"):
        runtime.load(files["hmac"], require_signature=True)
    runtime.load(files["hmac"], verify_with=b"shared secret", require_signature=True)
    monkeypatch.setenv("FUELC_REQUIRE_SIGNED", "1")
    for f in ("unsigned", "hmac"):
        with pytest.raises(ArtifactSignatureError, match=r"\$FUELC_REQUIRE_SIGNED"):
            runtime.load(files[f])
    pem = tmp_path / "public.pem"
    from cryptography.hazmat.primitives import serialization
    pem.write_bytes(private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    monkeypatch.setenv("FUELC_VERIFY_KEY_FILE", str(pem))
    runtime.load(files["ed25519"])(x=a)
    with pytest.raises(ArtifactSignatureError, match=r"not signed.*\$FUELC_VERIFY_KEY_FILE"):
        runtime.load(files["unsigned"])


def test_key_files(tmp_path):
    from cryptography.hazmat.primitives import serialization
    private = ed25519.Ed25519PrivateKey.generate()
    priv_pem = tmp_path / "private.pem"
    priv_pem.write_bytes(private.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    pub_pem = tmp_path / "public.pem"
    pub_pem.write_bytes(private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    secret = tmp_path / "secret"
    secret.write_bytes(b"  shared secret\n")
    assert read_key_file(secret) == b"shared secret"
    signer = read_key_file(priv_pem, private=True)
    sig = sign_manifest(signer, b"{}")
    verify_manifest(read_key_file(pub_pem), b"{}", sig)
    verify_manifest(read_key_file(priv_pem), b"{}", sig)  # verifying reads the public half
    with pytest.raises(ArtifactSignatureError):
        verify_manifest(read_key_file(pub_pem), b"{ }", sig)
    with pytest.raises(ArtifactError, match="public key, which can only verify"):
        read_key_file(pub_pem, private=True)
    with pytest.raises(ArtifactError, match="can only verify"):
        sign_manifest(private.public_key(), b"{}")
    bad = tmp_path / "bad.pem"
    bad.write_bytes(b"-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n")
    with pytest.raises(ArtifactError, match="not a PEM key"):
        read_key_file(bad)
    (tmp_path / "empty").write_bytes(b"\n")
    with pytest.raises(ArtifactError, match="empty"):
        read_key_file(tmp_path / "empty")
    with pytest.raises(ArtifactError, match="cannot read the key file"):
        read_key_file(tmp_path / "missing")
    for key in (b"", 7, None):
        with pytest.raises(ArtifactError, match="signing key must be"):
            sign_manifest(key, b"{}")


def test_oversized_signature_member_is_refused(signed, tmp_path):
    _, files, _, _ = signed
    bad = tmp_path / "big-sig.fuel"
    with zipfile.ZipFile(files["hmac"]) as zin, zipfile.ZipFile(bad, "w") as z:
        for info in zin.infolist():
            z.writestr(info, b"0" * 4096 if info.filename == "manifest.sig"
                       else zin.read(info.filename))
    with pytest.raises(ArtifactSignatureError, match="manifest.sig is 4096 bytes"):
        runtime.load(bad, verify_with=b"shared secret")


def test_cli_signs_and_verifies_with_pem_keys(signed, tmp_path, capsys):
    from cryptography.hazmat.primitives import serialization
    from runtime.cli import main
    _, files, private, a = signed
    pub_pem = tmp_path / "public.pem"
    pub_pem.write_bytes(private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    np.save(tmp_path / "x.npy", a)
    assert main(["run", str(files["ed25519"]), "--input", f"x={tmp_path / 'x.npy'}",
                 "--verify-key", str(pub_pem)]) == 0
    assert main(["inspect", str(files["ed25519"]), "--verify-key", str(pub_pem)]) == 0
    assert "signed:   yes, verified" in capsys.readouterr().out
    forged = _rehash_weights(files["ed25519"], tmp_path / "forged.fuel")
    assert main(["run", str(forged), "--input", f"x={tmp_path / 'x.npy'}",
                 "--verify-key", str(pub_pem)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "signature does not match" in err


def test_without_cryptography_shared_secrets_still_work(signed, tmp_path, monkeypatch):
    """``cryptography`` is optional: without it a PEM key is a clear error,
    and shared-secret signatures sign and verify as before."""
    import sys
    import cryptography.hazmat.primitives.asymmetric as asym
    from cryptography.hazmat.primitives import serialization
    cm, files, private, a = signed
    pem = tmp_path / "public.pem"
    pem.write_bytes(private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    monkeypatch.delattr(asym, "ed25519")
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.asymmetric.ed25519", None)
    with pytest.raises(ArtifactError, match="need the 'cryptography' package"):
        read_key_file(pem)
    np.testing.assert_array_equal(runtime.load(files["hmac"], verify_with=b"shared secret")(x=a),
                                  cm(x=a))
    resigned = cm.save(tmp_path / "resigned.fuel", sign_with="another secret")
    runtime.load(resigned, verify_with="another secret")
    with pytest.raises(ArtifactSignatureError, match="signed with an Ed25519 key"):
        runtime.load(files["ed25519"], verify_with=b"shared secret")
