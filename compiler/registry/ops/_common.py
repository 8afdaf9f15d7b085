"""Helpers shared by the fused-op modules: error messages, dtype sets, the
numpy reference conventions (``compiler.graph.numerics``) and recipe idioms."""
from __future__ import annotations

import numpy as np

from compiler.errors import GraphBuildError
from compiler.graph.numerics import FLOATS, dtype_of, from_compute, to_compute
from compiler.graph.opdef import ParamSpec, TensorType
from runtime.dtype import DType
from runtime.opkind import OpKind

from ..grammar import LAST, SameAs, op

__all__ = ["FLOATS", "GraphBuildError", "ParamSpec", "TensorType", "DType", "OpKind", "np",
           "fail", "fmt_types", "check_arity", "check_float", "wide", "out",
           "mean_b", "bc_last", "dtype_of", "keepdim"]


def fmt_types(types) -> str:
    return "(" + ", ".join(f"{t.dtype}{list(t.shape)}" for t in types) + ")"


def fail(name: str, types, rule: str) -> GraphBuildError:
    """A GraphBuildError naming the fused op, its operand types and the rule."""
    return GraphBuildError(f"{name}{fmt_types(types)}: {rule}")


def check_arity(name: str, types, lo: int, hi: int | None = None, names=()):
    hi = lo if hi is None else hi
    if not lo <= len(types) <= hi:
        want = f"{lo}" if lo == hi else f"{lo} to {hi}"
        what = f" ({', '.join(names)})" if names else ""
        raise fail(name, types, f"takes {want} input(s){what}, got {len(types)}")


def check_float(name: str, types, which=(0,)):
    for i in which:
        if types[i].dtype not in FLOATS:
            raise fail(name, types, f"input {i} must be a float tensor (bf16, f16, f32, f64), "
                                    f"got {types[i].dtype}")


def wide(x) -> np.ndarray:
    """Decode a storage array to float64 numbers (integers are widened too)."""
    x = np.asarray(x)
    v = to_compute(x, wide=True)
    return v.astype(np.float64)


def out(values, dtype: DType) -> np.ndarray:
    """Round float64 results once to ``dtype``'s storage."""
    return from_compute(np.asarray(values, dtype=np.float64), dtype)


def keepdim(x):
    """Recipe idiom: Unsqueeze(append) of a last-axis reduction."""
    return op("Unsqueeze", x, dim=LAST)


def bc_last(reduced, like: int = 0):
    """Recipe idiom: restore a last-axis reduction to bind ``like``'s shape."""
    return op("BroadcastTo", keepdim(reduced), shape=SameAs(like))


def mean_b(x, like: int = 0):
    """fuel-spec ``mean_b``: MeanDim(last) -> Unsqueeze(append) -> BroadcastTo(SameAs)."""
    return bc_last(op("MeanDim", x, axis=LAST), like)
