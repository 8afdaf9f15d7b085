"""The one place the compiler imports the MLIR Python bindings.

Everything else writes ``from compiler.mlir import ir, passmanager, linalg, ...``.
The bindings come from the pinned ``torch_mlir`` wheel; where it is missing the
upstream ``mlir`` package (same module layout) is used instead.

A context with the ``fuel`` dialect loaded comes from
``compiler.dialect.make_context()``.
"""
from __future__ import annotations

import importlib

try:  # the pinned wheel
    import torch_mlir as _root
    from torch_mlir import ir, passmanager, rewrite
    BINDINGS = "torch_mlir"
except ImportError:  # pragma: no cover - only where a user has upstream mlir
    import mlir as _root  # type: ignore[no-redef]
    from mlir import ir, passmanager, rewrite  # type: ignore[no-redef]
    BINDINGS = "mlir"

_DIALECTS = (
    "func", "arith", "math", "linalg", "tensor", "irdl", "llvm", "bufferization",
    "scf", "memref", "cf", "affine", "vector", "gpu", "transform", "index", "ub",
)


def _dialect(name: str):
    return importlib.import_module(f"{_root.__name__}.dialects.{name}")


func = _dialect("func")
arith = _dialect("arith")
math = _dialect("math")
linalg = _dialect("linalg")
tensor = _dialect("tensor")
irdl = _dialect("irdl")
llvm = _dialect("llvm")
bufferization = _dialect("bufferization")
scf = _dialect("scf")
memref = _dialect("memref")
cf = _dialect("cf")
affine = _dialect("affine")
vector = _dialect("vector")
gpu = _dialect("gpu")
transform = _dialect("transform")
index = _dialect("index")
ub = _dialect("ub")

MLIRError = ir.MLIRError


def execution_engine():
    """The bindings' ``execution_engine`` module (imported lazily: it loads
    the JIT runtime)."""
    return importlib.import_module(f"{_root.__name__}.execution_engine")


def runtime():
    """The bindings' ``runtime`` helpers (memref descriptors from numpy)."""
    return importlib.import_module(f"{_root.__name__}.runtime")


def walk_ops(root, pred=None) -> list:
    """Every op nested under ``root`` (an op or a module; pre-order), filtered
    by ``pred``; collected first, so callers may rewrite while iterating."""
    out = []

    def cb(o):
        if pred is None or pred(o):
            out.append(o)
        return ir.WalkResult.ADVANCE

    getattr(root, "operation", root).walk(cb, ir.WalkOrder.PRE_ORDER)
    return out


__all__ = ["ir", "passmanager", "rewrite", "MLIRError", "walk_ops",
           "execution_engine", "runtime", "BINDINGS", *_DIALECTS]
