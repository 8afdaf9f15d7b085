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
    """``mean_b``: MeanDim(last) -> Unsqueeze(append) -> BroadcastTo(SameAs)."""
    return bc_last(op("MeanDim", x, axis=LAST), like)


def iota_index(dims, factors):
    """Recipe idiom: an F32 tensor of shape ``dims`` holding
    ``sum_i factors[i] * index_i`` (exact below 2**24), built from Iota."""
    total = None
    n = len(dims)
    for i, (d, f) in enumerate(zip(dims, factors)):
        t = op("Reshape", op("Iota", len=d), shape=tuple(d if j == i else 1 for j in range(n)))
        if f != 1:
            t = op("MulScalar", t, value=float(f))
        t = op("BroadcastTo", t, shape=tuple(dims))
        total = t if total is None else op("Add", total, t)
    return total


def matmul_flat(act, act_shape, w_kn, n: int):
    """Recipe idiom: ``act [..,M,K] @ w [K,N]`` by flattening the activations
    to ``[M',K]``, one MatMul, and reshaping back to ``[..,M,N]``."""
    k = act_shape[-1]
    lead = tuple(act_shape[:-1])
    m = 1
    for d in lead:
        m *= d
    a2 = act if len(act_shape) == 2 else op("Reshape", act, shape=(m, k))
    y = op("MatMul", a2, w_kn)
    return y if len(act_shape) == 2 else op("Reshape", y, shape=lead + (n,))


def split_bytes(words_f64, n_words: int):
    """Recipe idiom: a ``[n_words]`` F64 tensor of u32 words -> ``[n_words*4]``
    F64 bytes in little-endian stream order (floor/subtract, exact)."""
    parts = []
    q = words_f64
    for i in range(4):
        if i < 3:
            nq = op("Floor", op("MulScalar", q, value=1.0 / 256))
            parts.append(op("Sub", q, op("MulScalar", nq, value=256.0)))
            q = nq
        else:
            parts.append(q)
    cols = [op("Unsqueeze", p, dim=1) for p in parts]
    return op("Reshape", op("Concat", *cols, dim=1), shape=(n_words * 4,))


def f16_from_bytes(lo, hi):
    """Recipe idiom: decode IEEE half values from their two bytes (F32
    tensors holding 0..255) arithmetically; bit-exact for finite values."""
    h = op("Add", lo, op("MulScalar", hi, value=256.0))
    s = op("Floor", op("MulScalar", h, value=1.0 / 32768))
    r = op("Sub", h, op("MulScalar", s, value=32768.0))
    e = op("Floor", op("MulScalar", r, value=1.0 / 1024))
    m = op("Sub", r, op("MulScalar", e, value=1024.0))
    # 2**e as a product of per-bit factors (exact): bit i contributes 2**(2**i)
    rem, pw = e, None
    for i in (4, 3, 2, 1, 0):
        bit = op("Floor", op("MulScalar", rem, value=1.0 / (1 << i)))
        rem = op("Sub", rem, op("MulScalar", bit, value=float(1 << i)))
        f = op("AddScalar", op("MulScalar", bit, value=float(2 ** (1 << i) - 1)), value=1.0)
        pw = f if pw is None else op("Mul", pw, f)
    sub = op("Relu", op("AddScalar", op("Neg", e), value=1.0))       # 1 iff e == 0
    normal = op("MulScalar", op("Mul", op("AddScalar", m, value=1024.0), pw), value=2.0 ** -25)
    subn = op("MulScalar", m, value=2.0 ** -24)
    mag = op("Add", op("Mul", sub, subn),
             op("Mul", op("AddScalar", op("Neg", sub), value=1.0), normal))
    sign = op("AddScalar", op("MulScalar", s, value=-2.0), value=1.0)
    return op("Mul", sign, mag)
