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
import threading

import numpy as np

from .dtype import DType
from .errors import PlanError
from .symbols import Sym, bind_symbols, shape_text

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


def _dim(v, bounds):
    return Sym.from_json(v, bounds) if isinstance(v, list) else int(v)


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


class LoadedBundle:
    """A bundle loaded by ``load_bundle``: call it with the inputs by name."""

    def __init__(self, path: str, doc: dict, verify_with=None, require_signature: bool = False):
        self.path = path
        self._verify = (verify_with, require_signature)
        bounds = {n: tuple(b) for n, b in doc["symbols"].items()}
        self.symbols = bounds
        self.inputs = {n: (tuple(_dim(d, bounds) for d in r["shape"]), DType.parse(r["dtype"]))
                       for n, r in doc["inputs"].items()}
        self.equalities = [(_dim(a, bounds), _dim(b, bounds), w) for a, b, w in doc["equalities"]]
        self._files = {tuple(int(b["sizes"][n]) for n in bounds): b["file"]
                       for b in doc["bindings"]}
        self._modules: dict = {}
        self._lock = threading.Lock()

    @property
    def bindings(self) -> list[dict]:
        return [dict(zip(self.symbols, k)) for k in self._files]

    @property
    def files(self) -> list[str]:
        """The ``.fuel`` file of each binding, in the order of ``bindings``."""
        return list(self._files.values())

    @property
    def signature(self) -> dict:
        return {"inputs": {n: f"{t.value}[{shape_text(s)}]" for n, (s, t) in self.inputs.items()},
                "symbols": {n: list(b) for n, b in self.symbols.items()}}

    def module(self, **sizes):
        """The loaded ``.fuel`` module of one saved binding."""
        key = tuple(sizes.get(n) for n in self.symbols)
        if key not in self._files:
            saved = "; ".join(", ".join(f"{k}={v}" for k, v in b.items()) for b in self.bindings)
            raise UnsavedBindingError(
                f"bundle {self.path}: the binding {sizes} was not saved (saved: {saved}); "
                f"save it with m.save_bundle(path, bindings=[...]) from the compiler",
                dict(sizes), self.bindings)
        with self._lock:
            if key not in self._modules:
                from .artifact import load
                self._modules[key] = load(os.path.join(self.path, self._files[key]),
                                          *self._verify)
            return self._modules[key]

    def run(self, **inputs) -> dict[str, np.ndarray]:
        if inputs.keys() != self.inputs.keys():
            raise PlanError(f"inputs are ({', '.join(self.signature['inputs'])}); missing "
                            f"{sorted(set(self.inputs) - set(inputs))}, unexpected "
                            f"{sorted(set(inputs) - set(self.inputs))}")
        sizes = bind_symbols({n: s for n, (s, _) in self.inputs.items()},
                             {n: np.shape(v) for n, v in inputs.items()}, self.equalities)
        return self.module(**sizes).run(**inputs)

    def __call__(self, **inputs):
        out = self.run(**inputs)
        return next(iter(out.values())) if len(out) == 1 else out


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
