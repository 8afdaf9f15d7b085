"""Constant folding at import: a small numpy implementation of the ONNX ops
that shape computations use (Shape, Gather, Concat, Reshape targets, Range,
ConstantOfShape, arithmetic on shape tensors, ...). A node whose inputs are
all known constants is evaluated here instead of becoming graph nodes.

Also the index arithmetic shared by folding and graph building (Reshape
targets, Slice ranges, Squeeze/Unsqueeze/reduce axes, Split sizes), so both
paths follow one reading of the ONNX spec.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from runtime.symbols import Sym, SymbolicError


class Unsupported(Exception):
    """A node (or one of its attributes) fuelc cannot import; the message
    says what and, where there is one, the fix."""


# ---------------------------------------------------------------------------
# index arithmetic shared with the graph builders
# ---------------------------------------------------------------------------
def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    a = int(axis) + rank if axis < 0 else int(axis)
    if not 0 <= a < max(rank, 1):
        raise Unsupported(f"{what} {axis} is out of range for rank {rank}")
    return a


def extents(v):
    """Extents as a shape array: int64, or (any symbolic) object holding
    ``Sym``s (``docs/dynamic-shapes.md``). ``v``: a shape tuple or one extent."""
    if isinstance(v, tuple) and not any(isinstance(d, Sym) for d in v):
        return np.asarray(v, np.int64)
    if not isinstance(v, tuple) and not isinstance(v, Sym):
        return np.asarray(v, np.int64)
    out = np.empty(len(v) if isinstance(v, tuple) else (), object)
    out[...] = list(v) if isinstance(v, tuple) else v
    return out


def _settle(arr, dtype):
    """``arr`` as ``dtype``; an object array keeps its ``Sym``s (ints only: ``dtype``)."""
    arr = np.asarray(arr)
    if arr.dtype == object:
        if any(isinstance(v, Sym) for v in arr.reshape(-1)):
            if np.dtype(dtype).kind not in "iuO":
                raise Unsupported(f"symbolic extents {arr.tolist()} cannot become "
                                  f"{np.dtype(dtype)} values")
            return arr
        return arr.astype(dtype if np.dtype(dtype) != object else np.int64)
    return arr.astype(dtype)


def reshape_target(in_shape, shape, allowzero: int = 0) -> tuple[int, ...]:
    """ONNX Reshape: 0 copies the input extent (unless allowzero), -1 is inferred."""
    out = [d if isinstance(d, Sym) else int(d) for d in shape]
    if not allowzero:
        out = [in_shape[i] if d == 0 and i < len(in_shape) else d for i, d in enumerate(out)]
    if out.count(-1) > 1:
        raise Unsupported(f"Reshape target {list(shape)} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        total = math.prod(in_shape)
        try:
            fits = known != 0 and (isinstance(total, Sym) or isinstance(known, Sym)
                                   or total % known == 0)
            q = total // known if fits else None
        except SymbolicError:
            q = None
        if q is None:
            raise Unsupported(f"Reshape target {list(shape)} does not fit {list(in_shape)}")
        out[out.index(-1)] = q
    if math.prod(out) != math.prod(in_shape):
        raise Unsupported(f"Reshape target {list(shape)} has {math.prod(out)} elements, the "
                          f"input {list(in_shape)} has {math.prod(in_shape)}")
    return tuple(out)


def slice_plan(shape, starts, ends, axes=None, steps=None) -> list[tuple[int, range]]:
    """ONNX Slice as (axis, index range) pairs; start/end clamp as in numpy."""
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else [norm_axis(a, rank) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    if len(set(axes)) != len(axes):
        raise Unsupported(f"Slice axes {axes} repeat an axis")
    plan = []
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise Unsupported("Slice step 0 is invalid")
        n = shape[a]
        s, e = max(min(int(s), 2 * n + 1), -2 * n - 1), max(min(int(e), 2 * n + 1), -2 * n - 1)
        plan.append((a, range(*slice(s, e, st).indices(n))))
    return plan


def sym_slice(n, s, e) -> tuple:
    """(start, length) of a step-1 ONNX Slice ``[s, e)`` of extent ``n`` where
    any is symbolic: negative ints count from the end, |ends| >= 2**62 mean
    the ends of the axis, and the clamp to [0, n] is decided from the symbols'
    bounds (``SymbolicError`` when it cannot be)."""
    def clamp(v):
        if not isinstance(v, Sym):
            v = int(v)
            if abs(v) >= 1 << 62:
                return n if v > 0 else 0
            if v < 0:
                v = v + n
        if v >= 0:
            return v if v <= n else n if v >= n else None
        return 0
    start, end = clamp(s), clamp(e)
    return start, (end - start if end >= start else 0)


def flatten_axis(axis: int, rank: int) -> int:
    """ONNX Flatten's split point: axis in [-rank, rank], negative counts from the end."""
    a = int(axis) + rank if axis < 0 else int(axis)
    if not 0 <= a <= rank:
        raise Unsupported(f"Flatten axis {axis} is out of range for rank {rank}")
    return a


def unsqueeze_axes(rank: int, axes) -> list[int]:
    out_rank = rank + len(axes)
    norm = sorted(norm_axis(a, out_rank, "Unsqueeze axis") for a in axes)
    if len(set(norm)) != len(norm):
        raise Unsupported(f"Unsqueeze axes {list(axes)} repeat an axis")
    return norm


def squeeze_axes(shape, axes) -> list[int]:
    if axes is None:
        return [i for i, d in enumerate(shape) if d == 1]
    norm = sorted({norm_axis(a, len(shape), "Squeeze axis") for a in axes})
    bad = [a for a in norm if shape[a] != 1]
    if bad:
        raise Unsupported(f"Squeeze axes {bad} of shape {list(shape)} are not 1")
    return norm


def reduce_axes(attrs, axes_input, rank: int):
    """The axes a Reduce* node reduces (sorted), or None for the identity
    (empty axes with noop_with_empty_axes=1)."""
    axes = attrs.get("axes") if axes_input is None else [int(a) for a in axes_input.reshape(-1)]
    if not axes:
        return None if attrs.get("noop_with_empty_axes", 0) else list(range(rank))
    return sorted({norm_axis(a, rank, "reduce axis") for a in axes})


def split_sizes(extent: int, split, n_outputs: int, num_outputs=None) -> list[int]:
    if split is not None:
        sizes = [int(s) for s in split.reshape(-1)]
        if sum(sizes) != extent or len(sizes) != n_outputs:
            raise Unsupported(f"Split sizes {sizes} do not cover extent {extent} in "
                              f"{n_outputs} outputs")
        return sizes
    n = num_outputs or n_outputs
    chunk = -(-extent // n)
    sizes = [chunk] * (n - 1) + [extent - chunk * (n - 1)]
    if sizes[-1] < 0:
        raise Unsupported(f"Split of extent {extent} into {n} outputs leaves a negative tail")
    return sizes


def broadcast_shape(a, b) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        raise Unsupported(f"shapes {list(a)} and {list(b)} do not broadcast") from None


# ---------------------------------------------------------------------------
# the numpy implementations
# ---------------------------------------------------------------------------
def _sym_div(p, q):
    if isinstance(p, Sym) or isinstance(q, Sym):
        return p // q  # exact, else SymbolicError
    return abs(p) // abs(q) * (1 if (p >= 0) == (q >= 0) else -1)


def _int_div(a, b):
    if a.dtype == object or b.dtype == object:  # symbolic extents: exact division
        return _settle(np.frompyfunc(_sym_div, 2, 1)(a, b), np.int64)
    if a.dtype.kind in "iu":  # C semantics: truncate toward zero
        q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
        return (q * np.sign(a) * np.sign(b)).astype(a.dtype)
    return (a / b).astype(a.dtype)


def _keep(fn):
    """An element-wise numpy function whose result keeps input 0's dtype."""
    return lambda at, x: [_settle(fn(*x), x[0].dtype)]


def _cmp(fn):
    return lambda at, x: [np.asarray(fn(x[0], x[1]))]


def _variadic(fn):
    def run(at, x):
        out = x[0]
        for v in x[1:]:
            out = fn(out, v)
        return [_settle(out, x[0].dtype)]
    return run


def _cast(at, x):
    from onnx import TensorProto
    from . import _types
    v = x[0]
    if v.dtype == object:  # symbolic extents stay as they are for integer targets
        return [_settle(v, _types.numpy_of(at["to"]))]
    if at["to"] == TensorProto.FLOAT8E4M3FN and at.get("saturate", 1):
        # saturate=1: out-of-range values and infinities clamp to +-448, NaN stays NaN
        v = np.clip(v.astype(np.float32), -_types.F8E4M3_MAX, _types.F8E4M3_MAX)
    if at["to"] == TensorProto.BFLOAT16:  # rounded once to bf16 (round to nearest even)
        return [v.astype(ml_dtypes.bfloat16)]
    return [v.astype(_types.numpy_of(at["to"]))]


def _gather(at, x):
    data, idx = x
    axis = norm_axis(at.get("axis", 0), data.ndim)
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return [np.take(data, idx, axis=axis)]


def _slice(at, x):
    data = x[0]
    axes, steps = (x[3] if len(x) > 3 else None), (x[4] if len(x) > 4 else None)
    key = [slice(None)] * data.ndim
    for a, r in slice_plan(data.shape, x[1], x[2], axes, steps):
        key[a] = list(r)
        data = data[tuple(key)]
        key[a] = slice(None)
    return [data]


def _unsqueeze(at, x):
    axes = at.get("axes") if len(x) < 2 else x[1].reshape(-1)
    out = x[0]
    for a in unsqueeze_axes(x[0].ndim, axes):
        out = np.expand_dims(out, a)
    return [out]


def _squeeze(at, x):
    axes = at.get("axes") if len(x) < 2 or x[1] is None else x[1].reshape(-1)
    return [np.squeeze(x[0], axis=tuple(squeeze_axes(x[0].shape, axes)))]


def _range(at, x):
    start, limit, delta = (v.reshape(()) for v in x)
    n = max(int(math.ceil((limit - start) / delta)), 0)
    return [(start + np.arange(n) * delta).astype(x[0].dtype)]


def _constant_of_shape(at, x):
    from onnx import numpy_helper
    value = numpy_helper.to_array(at["value"]).reshape(-1) if "value" in at \
        else np.zeros(1, np.float32)
    return [np.full(tuple(int(d) for d in x[0]), value[0], dtype=value.dtype)]


def _expand(at, x):
    return [np.broadcast_to(x[0], broadcast_shape(x[0].shape, [int(d) for d in x[1]])).copy()]


def _reduce(fn):
    def run(at, x):
        axes = reduce_axes(at, x[1] if len(x) > 1 and x[1] is not None else None, x[0].ndim)
        if axes is None:
            return [x[0]]
        return [np.asarray(fn(x[0], axis=tuple(axes), keepdims=bool(at.get("keepdims", 1))))
                .astype(x[0].dtype)]
    return run


def _concat(at, x):
    return [np.concatenate(x, axis=norm_axis(at["axis"], x[0].ndim))]


def _clip(at, x):
    lo = x[1] if len(x) > 1 and x[1] is not None else None
    hi = x[2] if len(x) > 2 and x[2] is not None else None
    out = x[0]
    if lo is not None:
        out = np.maximum(out, lo)
    if hi is not None:
        out = np.minimum(out, hi)
    return [out.astype(x[0].dtype)]


def _window(kind):
    """Hann, Hamming and Blackman windows (ONNX's formulas, in float64)."""
    def run(at, x):
        from ._types import numpy_of
        n = int(x[0].reshape(()))
        den = n if at.get("periodic", 1) else n - 1
        t = 2 * np.pi * np.arange(n) / den
        w = {"HannWindow": lambda: np.sin(t / 2) ** 2,
             "HammingWindow": lambda: 25 / 46 - np.cos(t) * (21 / 46),
             "BlackmanWindow": lambda: 0.42 - 0.5 * np.cos(t) + 0.08 * np.cos(2 * t)}[kind]()
        return [w.astype(numpy_of(at.get("output_datatype", 1)))]
    return run


def _mel_weight_matrix(at, x):
    """[dft_length // 2 + 1, num_mel_bins] triangular filters on the mel scale
    (HTK: 2595 log10(1 + f / 700)), as ONNX's reference."""
    from ._types import numpy_of
    bins, dft, rate = (int(v.reshape(())) for v in x[:3])
    lo, hi = (float(v.reshape(())) for v in x[3:5])
    mel_lo, mel_hi = (2595 * np.log1p(f / 700) / np.log(10) for f in (lo, hi))
    f = np.arange(bins + 2) * ((mel_hi - mel_lo) / (bins + 2)) + mel_lo
    f = (((dft + 1) * (700 * np.expm1(f / 2595 * np.log(10)))) // rate).astype(int)
    out = np.zeros((dft // 2 + 1, bins))
    for i in range(bins):
        left, mid, right = f[i], f[i + 1], f[i + 2]
        if mid == left:
            out[mid, i] = 1
        else:
            out[left:mid + 1, i] = (np.arange(left, mid + 1) - left) / (mid - left)
        if right > mid:
            out[mid:right, i] = (right - np.arange(mid, right)) / (right - mid)
    return [out.astype(numpy_of(at.get("output_datatype", 1)))]


FOLD = {
    "Identity": lambda at, x: [x[0]],
    "Shape": lambda at, x: [extents(x[0].shape[at.get("start", 0):at.get("end", None)])],
    "Size": lambda at, x: [np.asarray(x[0].size, np.int64)],
    "Cast": _cast,
    "Add": _keep(np.add), "Sub": _keep(np.subtract), "Mul": _keep(np.multiply),
    "Div": lambda at, x: [_int_div(x[0], x[1])],
    "Mod": lambda at, x: [(np.fmod if at.get("fmod", 0) else np.mod)(x[0], x[1])],
    "Pow": _keep(np.power),
    "Neg": _keep(np.negative), "Abs": _keep(np.abs), "Sign": _keep(np.sign),
    "Sqrt": _keep(np.sqrt), "Exp": _keep(np.exp), "Log": _keep(np.log),
    "Reciprocal": _keep(lambda v: 1 / v),
    "Floor": _keep(np.floor), "Ceil": _keep(np.ceil), "Round": _keep(np.round),
    "Relu": _keep(lambda v: np.maximum(v, v.dtype.type(0))),
    "Equal": _cmp(np.equal), "Less": _cmp(np.less), "Greater": _cmp(np.greater),
    "LessOrEqual": _cmp(np.less_equal), "GreaterOrEqual": _cmp(np.greater_equal),
    "Not": lambda at, x: [np.logical_not(x[0])],
    "And": _cmp(np.logical_and), "Or": _cmp(np.logical_or), "Xor": _cmp(np.logical_xor),
    "Where": lambda at, x: [np.where(x[0], x[1], x[2])],
    "Min": _variadic(np.minimum), "Max": _variadic(np.maximum), "Sum": _variadic(np.add),
    "Clip": _clip,
    "Gather": _gather,
    "Slice": _slice,
    "Concat": _concat,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Reshape": lambda at, x: [x[0].reshape(reshape_target(x[0].shape, x[1],
                                                          at.get("allowzero", 0)))],
    "Flatten": lambda at, x: [x[0].reshape(
        math.prod(x[0].shape[:flatten_axis(at.get("axis", 1), x[0].ndim)]),
        math.prod(x[0].shape[flatten_axis(at.get("axis", 1), x[0].ndim):]))],
    "Transpose": lambda at, x: [np.transpose(x[0], at.get("perm"))],
    "Expand": _expand,
    "Range": _range,
    "ConstantOfShape": _constant_of_shape,
    "ReduceProd": _reduce(np.prod), "ReduceSum": _reduce(np.sum),
    "ReduceMin": _reduce(np.min), "ReduceMax": _reduce(np.max),
    "HannWindow": _window("HannWindow"), "HammingWindow": _window("HammingWindow"),
    "BlackmanWindow": _window("BlackmanWindow"),
    "MelWeightMatrix": _mel_weight_matrix,
}

#: ops that only exist at import: their inputs must be constants.
FOLD_ONLY = {"Range", "ConstantOfShape", "HannWindow", "HammingWindow", "BlackmanWindow",
             "MelWeightMatrix"}
