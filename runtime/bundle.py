"""A symbolic module saved ahead of time, one binding per ``.fuel`` file
(``docs/dynamic-shapes.md``, the first stage).

A bundle is a directory: ``bundle.json`` holds the symbolic signature (input
shapes with symbol expressions, the symbols' bounds, the recorded
equalities) and, per saved binding, its sizes and its ``.fuel`` file.
``load_bundle(path)`` runs it without the compiler: a call binds the symbols
from the inputs' shapes (``ShapeSignatureError`` on a contradiction), loads
that binding's file on first use and runs it; a binding that was not saved
raises ``UnsavedBindingError`` naming the ones that were.
"""
from __future__ import annotations

import json
import os


from .dtype import DType
from .errors import PlanError
from .symbolic import BindingCalls, read_signature
from .symbols import Sym

BUNDLE_FORMAT = "fuelc-symbolic-bundle"
BUNDLE_VERSION = 1
INDEX = "bundle.json"


class UnsavedBindingError(PlanError):
    """A call whose sizes fit the signature but whose binding was not saved
    in the bundle. Attributes: ``binding`` (symbol -> size), ``saved``."""

    def __init__(self, message, binding, saved):
        super().__init__(message)
        self.binding, self.saved = binding, saved


def _dim_json(d):
    return d.to_json() if isinstance(d, Sym) else int(d)


def signature_json(inputs: dict, symbols: dict, equalities) -> dict:
    """The JSON form of a symbolic signature: ``inputs`` name -> (shape, DType)."""
    return {"inputs": {n: {"shape": [_dim_json(d) for d in s], "dtype": DType.parse(t).value}
                       for n, (s, t) in inputs.items()},
            "symbols": {n: list(b) for n, b in symbols.items()},
            "equalities": [[_dim_json(a), _dim_json(b), w] for a, b, w in equalities]}


def write_index(path, signature: dict, bindings: list[tuple[dict, str]]) -> None:
    """Write ``bundle.json`` into the directory ``path``: ``signature`` from
    ``signature_json``; ``bindings`` (sizes, file name) pairs."""
    doc = {"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, **signature,
           "bindings": [{"sizes": s, "file": f} for s, f in bindings]}
    tmp = os.path.join(path, INDEX + ".tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, os.path.join(path, INDEX))


class LoadedBundle(BindingCalls):
    """A bundle loaded by ``load_bundle``: call it with the inputs by name."""

    def __init__(self, path: str, doc: dict, verify_with=None, require_signature: bool = False):
        self.path = path
        self._verify = (verify_with, require_signature)
        self._init_calls(*read_signature(doc))
        self._files = {tuple(int(b["sizes"][n]) for n in self.symbols): b["file"]
                       for b in doc["bindings"]}
        self._modules: dict = {}

    @property
    def bindings(self) -> list[dict]:
        return [dict(zip(self.symbols, k)) for k in self._files]

    @property
    def files(self) -> list[str]:
        """The ``.fuel`` file of each binding, in the order of ``bindings``."""
        return list(self._files.values())

    def module(self, **sizes):
        """The loaded ``.fuel`` module of one saved binding."""
        return self.module_of(tuple(sizes.get(n) for n in self.symbols))

    def module_of(self, key: tuple):
        if key not in self._files:
            sizes = dict(zip(self.symbols, key))
            saved = "; ".join(", ".join(f"{k}={v}" for k, v in b.items()) for b in self.bindings)
            raise UnsavedBindingError(
                f"bundle {self.path}: the binding {sizes} was not saved (saved: {saved}); "
                f"save it with m.save_bundle(path, bindings=[...]) from the compiler",
                sizes, self.bindings)
        with self._lock:
            if key not in self._modules:
                from .artifact import load
                self._modules[key] = load(os.path.join(self.path, self._files[key]),
                                          *self._verify)
            return self._modules[key]


def load_bundle(path, verify_with=None, require_signature: bool = False) -> LoadedBundle:
    """Open a bundle directory written by ``SymbolicModule.save_bundle``. Each
    binding's ``.fuel`` file is verified and loaded (``runtime.load``, with
    ``verify_with`` and ``require_signature``) on its first call. Raises ``PlanError`` for a missing or
    malformed ``bundle.json``."""
    path = os.fspath(path)
    try:
        with open(os.path.join(path, INDEX)) as f:
            doc = json.load(f)
        if doc.get("format") != BUNDLE_FORMAT or doc.get("version") != BUNDLE_VERSION:
            raise PlanError(f"{path}: not a {BUNDLE_FORMAT} version {BUNDLE_VERSION} "
                            f"(format {doc.get('format')!r}, version {doc.get('version')!r})")
        return LoadedBundle(path, doc, verify_with, require_signature)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        if isinstance(e, PlanError):
            raise
        raise PlanError(f"{path}: cannot read {INDEX}: {type(e).__name__}: {e}") from None
