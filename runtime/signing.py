"""Signed ``.fuel`` files: who may hand this process machine code.

A ``.fuel`` file is native code (``docs/artifacts.md``), and the SHA-256 of
each member lives in its manifest, which anyone who can write the file can
rewrite. A signature closes that: ``save(path, sign_with=key)`` adds the
member ``manifest.sig``, a signature of the manifest's exact bytes, and the
manifest lists every other member's size and SHA-256, which ``load`` checks
before using any of them, so the signature covers every member.

Two kinds of key:

* a shared secret (``bytes`` or text; in a key file, its contents):
  HMAC-SHA256, always available. Whoever can verify can also sign.
* an Ed25519 key pair (``cryptography``'s ``Ed25519PrivateKey`` /
  ``Ed25519PublicKey``; in a key file, PEM: ``openssl genpkey -algorithm
  ed25519``): the build signs with the private key, machines that load
  hold only the public key. Needs the optional ``cryptography`` package
  (``pip install 'fuelc[sign]'``).

The verifier's key decides the algorithm (a file signed by HMAC never
verifies under an Ed25519 key, nor the reverse). ``manifest.sig`` holds the
HMAC as 64 hex digits, or ``ed25519:`` and 128 hex digits.

The policy (``load(path, verify_with=KEY, require_signature=...)``): a key
(``verify_with``, or the key file named by ``$FUELC_VERIFY_KEY_FILE``)
requires every file loaded with it to be signed under it.
``require_signature=True`` or ``$FUELC_REQUIRE_SIGNED=1`` further refuses a
load that has no key to verify with, so no code path of the process can load
an unsigned file by leaving the key out.
"""
from __future__ import annotations

import hashlib
import hmac
import os

from .manifest import ArtifactError, ArtifactSignatureError

SIGNATURE = "manifest.sig"
#: A file holding the key every ``load`` must verify a signature with.
KEY_FILE_ENV = "FUELC_VERIFY_KEY_FILE"
#: ``1``: every ``load`` must verify a signature (and so must have a key).
REQUIRE_ENV = "FUELC_REQUIRE_SIGNED"
MAX_SIGNATURE_BYTES = 256
_ED25519 = b"ed25519:"
#: What an Ed25519 signature signs before the manifest's bytes: a key used
#: for something else never signs a fuelc manifest by accident.
_ED25519_CONTEXT = b"fuelc-module manifest\n"


def _ed25519():
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise ArtifactError("Ed25519 keys need the 'cryptography' package (pip install "
                            "'fuelc[sign]'); a shared secret (HMAC-SHA256) needs nothing") \
            from None
    return ed25519


def _kind(key) -> str:
    """``"private"``/``"public"`` for an Ed25519 key object, ``"secret"``
    for a shared secret; ArtifactError for anything else."""
    cls = type(key)
    if cls.__module__.startswith("cryptography."):
        ed = _ed25519()
        if isinstance(key, ed.Ed25519PrivateKey):
            return "private"
        if isinstance(key, ed.Ed25519PublicKey):
            return "public"
        raise ArtifactError(f"a {cls.__name__} cannot sign fuelc modules; use an Ed25519 key "
                            "or a shared secret")
    if isinstance(key, (str, bytes, bytearray)) and key:
        return "secret"
    raise ArtifactError(f"a signing key must be a shared secret (non-empty bytes or text) or an "
                        f"Ed25519 key, got {cls.__name__}")


def _secret(key) -> bytes:
    return key.encode() if isinstance(key, str) else bytes(key)


def signing_key(key):
    """``key`` checked as a key that can sign (a shared secret or an
    Ed25519 private key); ArtifactError otherwise."""
    if _kind(key) == "public":
        raise ArtifactError("an Ed25519 public key can only verify; sign with the private key")
    return key


def sign_manifest(key, manifest_bytes) -> bytes:
    """The contents of ``manifest.sig`` for a manifest under ``key``."""
    if _kind(signing_key(key)) == "secret":
        return hmac.new(_secret(key), bytes(manifest_bytes), hashlib.sha256).hexdigest().encode()
    return _ED25519 + key.sign(_ED25519_CONTEXT + bytes(manifest_bytes)).hex().encode()


def verify_manifest(key, manifest_bytes, signature, path: str = "") -> None:
    """Check ``signature`` (the contents of ``manifest.sig``) of a manifest
    under ``key`` (a shared secret, or an Ed25519 public or private key);
    ArtifactSignatureError when it does not match."""
    sig = bytes(signature).strip()
    kind = _kind(key)
    if kind == "secret":
        if sig.startswith(_ED25519):
            raise ArtifactSignatureError("the file is signed with an Ed25519 key, and the key "
                                         "to verify it with is a shared secret", path)
        want = hmac.new(_secret(key), bytes(manifest_bytes), hashlib.sha256).hexdigest().encode()
        ok = hmac.compare_digest(sig, want)
    else:
        if not sig.startswith(_ED25519):
            raise ArtifactSignatureError("the file is signed with a shared secret "
                                         "(HMAC-SHA256), and the key to verify it with is an "
                                         "Ed25519 key", path)
        from cryptography.exceptions import InvalidSignature
        public = key.public_key() if kind == "private" else key
        try:
            public.verify(bytes.fromhex(sig[len(_ED25519):].decode("ascii")),
                          _ED25519_CONTEXT + bytes(manifest_bytes))
            ok = True
        except (InvalidSignature, ValueError):  # ValueError: not hex, not ASCII
            ok = False
    if not ok:
        raise ArtifactSignatureError("the signature does not match: the file was changed after "
                                     "it was signed, or signed with another key", path)


def read_key_file(path, private: bool = False):
    """The key in the file at ``path``: an Ed25519 key in PEM (its public
    half unless ``private``, which a signer asks for), else a shared secret
    (the file's bytes, surrounding whitespace stripped)."""
    p = os.fspath(path)
    try:
        with open(p, "rb") as f:
            data = f.read(1 << 16).strip()
    except OSError as e:
        raise ArtifactError(f"cannot read the key file: {e.strerror}", p) from None
    if not data:
        raise ArtifactError("the key file is empty", p)
    if not data.startswith(b"-----BEGIN "):
        return data
    _ed25519()
    from cryptography.hazmat.primitives import serialization
    try:
        if b"PRIVATE KEY-----" in data:
            key = serialization.load_pem_private_key(data, password=None)
        else:
            key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as e:
        raise ArtifactError(f"not a PEM key this runtime reads: {e}", p) from None
    kind = _kind(key)
    if private and kind != "private":
        raise ArtifactError("holds an Ed25519 public key, which can only verify; sign with the "
                            "private key", p)
    return key if private or kind == "public" else key.public_key()


def required_key(verify_with, require_signature: bool, path: str = ""):
    """The key a load must verify a signature with (None: no signature
    needed): ``verify_with``, else the key file ``$FUELC_VERIFY_KEY_FILE``
    names. ArtifactSignatureError when a signature is required
    (``require_signature`` or ``$FUELC_REQUIRE_SIGNED=1``) and there is no key."""
    if verify_with is not None:
        _kind(verify_with)
        return verify_with
    env = os.environ.get(KEY_FILE_ENV)
    if env:
        return read_key_file(env)
    if require_signature or os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
        source = "require_signature=True" if require_signature else f"${REQUIRE_ENV}"
        raise ArtifactSignatureError(f"a signed file is required ({source}), and there is no "
                                     f"key to verify it with: pass verify_with=KEY (fuelc "
                                     f"--verify-key KEYFILE) or set ${KEY_FILE_ENV}", path)
    return None


def key_source(verify_with) -> str:
    """Where the key of a load came from, for messages."""
    return "verify_with" if verify_with is not None else f"${KEY_FILE_ENV}"
