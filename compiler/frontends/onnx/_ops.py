"""ONNX op -> fuelc builder calls, one handler per op (or family).

A handler is ``fn(cx, node, attrs, ins) -> list of output values``; an input
value is a graph ``Tensor``, a numpy array (a constant known at import) or
None (an omitted optional input). Handlers only spell primitives and fused
ops through the public builder API, in the spellings fuelc's fusion passes
match (``x.softmax``, ``layer_norm``, ``linear``, scalar ops for scalar
constants). ``Unsupported`` names what cannot be imported.
"""
from __future__ import annotations

import math

import numpy as np

from runtime.symbols import Sym

from ...graph.symbolic import ceil_count, floor_div, window_count
from ...graph import Tensor, concat, matmul, maximum, minimum, where
from ...registry import builders as B
from ._fold import (Unsupported, broadcast_shape, extents, sym_slice, flatten_axis, norm_axis, reduce_axes,
                    reshape_target, slice_plan, split_sizes, squeeze_axes, unsqueeze_axes)
BUILD = {}


def _op(*names):
    def reg(fn):
        for n in names:
            BUILD[n] = fn
        return fn
    return reg


def _scalar(v, like):
    """The python value of a size-1 constant ``v`` that broadcasting against
    ``like`` (a Tensor) leaves ``like``'s shape unchanged, else None."""
    if not isinstance(v, np.ndarray) or v.size != 1 or v.ndim > like.ndim:
        return None
    return v.reshape(()).item()  # an int stays exact (AddScalar/MulScalar take ints)


# ---------------------------------------------------------------------------
# element-wise
# ---------------------------------------------------------------------------
@_op("Add", "Sub", "Mul")
def _arith(cx, node, at, ins):
    a, b = ins
    kind = node.op_type
    if isinstance(a, np.ndarray) and kind != "Sub":  # commutative: constant second
        a, b = b, a
    if isinstance(b, np.ndarray) and (s := _scalar(b, a)) is not None:
        return [a + s if kind == "Add" else a - s if kind == "Sub" else a * s]
    if isinstance(a, np.ndarray) and kind == "Sub" and (s := _scalar(a, b)) is not None:
        return [s - b]
    a, b = cx.t(a), cx.t(b)
    return [a + b if kind == "Add" else a - b if kind == "Sub" else a * b]


@_op("Div")
def _div(cx, node, at, ins):
    b = cx.t(ins[1])
    if b.dtype.is_float and _scalar(ins[0], b) == 1:
        # 1 / x (HF's RMSNorm spells rsqrt so): Recip, the same division,
        # which the RmsNormLastDim pattern of that spelling reads
        return [b.reciprocal()]
    return [cx.t(ins[0]) / b]


@_op("Mod")
def _mod(cx, node, at, ins):
    a, b = cx.t(ins[0]), cx.t(ins[1])
    if not at.get("fmod", 0) or a.dtype.value.startswith("u"):  # unsigned: the same
        return [a % b]
    # C fmod (the dividend's sign): |a| mod |b| has no sign to fix, negated where a < 0
    # (exact for floats; the |INT_MIN| of a signed integer dividend wraps)
    r = a.abs() % b.abs()
    return [where(a < 0, r.neg(), r)]


@_op("Pow")
def _pow(cx, node, at, ins):
    x, p = cx.t(ins[0]), ins[1]
    e = _scalar(p, x)
    if e == 2:
        return [x.square()]
    if x.dtype.is_float and isinstance(e, (int, float)) and float(e).is_integer() \
            and 3 <= e <= 8:
        # x**3 of tanh-GELU: repeated multiplication (PowI), not a pow() call per
        # element (GPT-2's MLP activation: 14 -> ~1 ns per element)
        return [x.pow(int(e))]
    if not x.dtype.is_float:  # integer base: the result keeps x's type
        if not isinstance(p, np.ndarray):
            if p.dtype.is_float:  # as ONNX's reference: pow in f64, truncated to x's type
                return [(x.cast("f64") ** (p if p.dtype.value == "f64" else p.cast("f64")))
                        .cast(x.dtype)]
            raise Unsupported("the integer exponent of an integer base is computed at run "
                              "time; fuelc needs it constant at import (its Pow is float-only, "
                              "a constant exponent is spelled with PowI)")
        if p.dtype.kind == "f" and not np.array_equal(p, np.round(p)):
            return [(x.cast("f64") ** cx.t(p.astype(np.float64))).cast(x.dtype)]
        e = np.broadcast_to(p.astype(np.int64), broadcast_shape(x.shape, p.shape))
        if e.size and e.min() < 0:
            raise Unsupported("a negative integer exponent of an integer base")
        x = x.broadcast_to(e.shape) if x.shape != e.shape else x
        vals = np.unique(e)
        out = x.pow(int(vals[0]))
        for v in vals[1:]:  # one PowI per distinct exponent, chosen elementwise
            out = where(cx.t((e == v).astype(np.uint8)), x.pow(int(v)), out)
        return [out]
    if isinstance(p, np.ndarray):  # ONNX lets the exponent's type differ
        return [x ** cx.t(p, like=x)]
    return [x ** (p if p.dtype == x.dtype else p.cast(x.dtype))]


_UNARY = {"Sqrt": "sqrt", "Exp": "exp", "Log": "log", "Tanh": "tanh", "Erf": "erf",
          "Relu": "relu", "Sigmoid": "sigmoid", "Neg": "neg", "Abs": "abs",
          "Reciprocal": "recip", "Floor": "floor", "Ceil": "ceil", "Round": "round",
          "Sign": "sign", "Sin": "sin", "Cos": "cos", "Atan": "atan", "Asin": "asin",
          "Acos": "acos"}


@_op(*_UNARY)
def _unary(cx, node, at, ins):
    return [getattr(cx.t(ins[0]), _UNARY[node.op_type])()]


@_op("Identity")
def _identity(cx, node, at, ins):
    return [ins[0]]


@_op("Gelu")
def _gelu(cx, node, at, ins):
    approx = at.get("approximate", "none")
    if approx not in ("none", "tanh"):
        raise Unsupported(f"attribute approximate={approx!r} (expected 'none' or 'tanh')")
    return [cx.t(ins[0]).gelu(approx)]


@_op("LeakyRelu")
def _leaky_relu(cx, node, at, ins):
    x = cx.t(ins[0])
    return [where(x >= 0, x, x * at.get("alpha", 0.01))]


@_op("HardSigmoid", "HardSwish")
def _hard_sigmoid(cx, node, at, ins):
    x = cx.t(ins[0])
    h = (x * at.get("alpha", 1 / 6 if node.op_type == "HardSwish" else 0.2)
         + at.get("beta", 0.5)).clamp(0.0, 1.0)
    return [x * h if node.op_type == "HardSwish" else h]


_COMPARE = {"Equal": "__eq__", "Less": "__lt__", "Greater": "__gt__",
            "LessOrEqual": "__le__", "GreaterOrEqual": "__ge__"}


@_op(*_COMPARE)
def _compare(cx, node, at, ins):
    return [getattr(cx.t(ins[0]), _COMPARE[node.op_type])(cx.t(ins[1]))]


@_op("Not")
def _not(cx, node, at, ins):
    return [cx.t(ins[0]) == 0]


@_op("And", "Or", "Xor")
def _logic(cx, node, at, ins):  # booleans are u8 0/1
    a, b = cx.t(ins[0]), cx.t(ins[1])
    return [a * b if node.op_type == "And" else maximum(a, b) if node.op_type == "Or"
            else a != b]


@_op("Where")
def _where(cx, node, at, ins):
    return [where(cx.t(ins[0]), cx.t(ins[1]), cx.t(ins[2]))]


@_op("Min", "Max", "Sum", "Mean")
def _variadic(cx, node, at, ins):
    fn = {"Min": minimum, "Max": maximum}.get(node.op_type, lambda a, b: a + b)
    out = cx.t(ins[0])
    for v in ins[1:]:
        out = fn(out, cx.t(v))
    if node.op_type == "Mean" and len(ins) > 1:
        out = out / cx.t(np.asarray(len(ins), np.float64), like=out)
    return [out]


@_op("Clip")
def _clip(cx, node, at, ins):
    x = cx.t(ins[0])
    lo = ins[1] if len(ins) > 1 else None
    hi = ins[2] if len(ins) > 2 else None
    if (lo is None or isinstance(lo, np.ndarray)) and (hi is None or isinstance(hi, np.ndarray)):
        return [x.clamp(None if lo is None else lo.item(), None if hi is None else hi.item())]
    if lo is not None:
        x = maximum(x, cx.t(lo))
    if hi is not None:
        x = minimum(x, cx.t(hi))
    return [x]


@_op("Cast", "CastLike")
def _cast(cx, node, at, ins):
    from onnx import TensorProto
    from ._types import (ENCODABLE, NARROW, NARROW_INT_RANGES, Narrow,  # (here: the torch
                         dtype_of, encode, encode_int)           # importer reuses handlers)
    if node.op_type == "CastLike":
        to = cx.elem_type(node.input[1])
    else:
        to = at["to"]
    x = ins[0].decode(cx.g) if isinstance(ins[0], Narrow) else cx.t(ins[0])
    if to in ENCODABLE:
        if not x.dtype.is_float:
            raise Unsupported(f"a cast of {x.dtype.value} values to "
                              f"{TensorProto.DataType.Name(to)} (fuelc encodes float values "
                              f"only); cast them to FLOAT first")
        return [Narrow(encode(cx.g, x, to, bool(at.get("saturate", 1))), to)]
    if to in NARROW_INT_RANGES:
        if not x.dtype.is_float:
            raise Unsupported(f"a cast of {x.dtype.value} values to "
                              f"{TensorProto.DataType.Name(to)} (fuelc converts float values "
                              f"only); cast them to FLOAT first")
        return [Narrow(encode_int(x, to), to)]
    if to in NARROW:
        raise Unsupported(f"a cast to {TensorProto.DataType.Name(to)}: fuelc reads the narrow "
                          f"types but produces only the float8 formats, FLOAT4E2M1 and the "
                          f"2- and 4-bit integers; keep "
                          f"the model's output in a wider type")
    if to == TensorProto.BOOL:
        return [x != 0]
    dt = dtype_of(to)
    return [x if dt == x.dtype else x.cast(dt)]


@_op("Dropout")
def _dropout(cx, node, at, ins):
    if len(ins) > 2 and ins[2] is not None:
        late = [n for n, v in zip(node.input[1:3], ins[1:3]) if isinstance(v, Tensor)]
        if isinstance(ins[2], Tensor):
            raise Unsupported(f"its inputs must be constants known at import; input(s) {late} "
                              f"are computed at run time")
        ratio = 0.5 if ins[1] is None else ins[1]
        if bool(ins[2].reshape(-1)[0]) and (isinstance(ratio, Tensor) or float(
                np.asarray(ratio).reshape(-1)[0]) != 0.0):
            raise Unsupported("training_mode=True with a nonzero ratio: the dropped elements "
                              "are random (only inference Dropout, or ratio 0, is supported)")
    x = ins[0]
    return [x, np.ones(x.shape, np.bool_)]


# ---------------------------------------------------------------------------
# matmul, gemm, normalization, softmax
# ---------------------------------------------------------------------------
def _matmul(cx, a, b):
    a, b = cx.t(a), cx.t(b)
    if a.ndim > 2 and b.ndim == 2:  # flatten the batch: one [M,K] x [K,N] product
        return B.linear(a, b)
    return matmul(a, b)


@_op("MatMul")
def _matmul_op(cx, node, at, ins):
    return [_matmul(cx, *ins)]


def linear_or_add(cx, a, w, bias):
    """``a @ w + bias`` as ``linear`` (fused FusedLinear) when w is [K,N] and
    bias broadcasts as an [N] row; else MatMul then Add."""
    a, w = cx.t(a), cx.t(w)
    bshape = tuple(bias.shape)
    n = w.shape[-1] if w.ndim else None
    if (a.ndim >= 2 and w.ndim == 2 and len(bshape) <= a.ndim and bshape[-1:] == (n,)
            and math.prod(bshape) == n and a.dtype.is_float):
        vec = cx.t(bias) if bias.ndim == 1 else cx.t(bias).reshape((n,))
        return B.linear(a, w, vec)
    return _matmul(cx, a, w) + cx.t(bias)


@_op("Gemm")
def _gemm(cx, node, at, ins):
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    if at.get("transA", 0):
        a = a.T if isinstance(a, np.ndarray) else cx.t(a).transpose()
    if at.get("transB", 0):
        b = b.T if isinstance(b, np.ndarray) else cx.t(b).transpose()
    alpha, beta = at.get("alpha", 1.0), at.get("beta", 1.0)
    if c is not None and alpha == 1.0 and beta == 1.0:
        return [linear_or_add(cx, a, b, c)]
    y = _matmul(cx, a, b)
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        c = cx.t(c)
        y = y + (c * beta if beta != 1.0 else c)
    return [y]


@_op("Softmax", "LogSoftmax")
def _softmax(cx, node, at, ins):
    x = cx.t(ins[0])
    axis = norm_axis(at.get("axis", -1), x.ndim)
    return [x.softmax(axis) if node.op_type == "Softmax" else x.log_softmax(axis)]


@_op("LayerNormalization")
def _layer_norm(cx, node, at, ins):
    x, scale = cx.t(ins[0]), ins[1]
    bias = ins[2] if len(ins) > 2 else None
    axis = norm_axis(at.get("axis", -1), x.ndim)
    eps = at.get("epsilon", 1e-5)
    norm_shape = x.shape[axis:]
    d = math.prod(norm_shape)

    def vec(v):  # a [D] vector when v covers exactly the normalized axes
        if v is None:
            return None
        t = cx.t(v)
        if tuple(t.shape[-len(norm_shape):]) == norm_shape and math.prod(t.shape) == d:
            return t if t.shape == (d,) else t.reshape((d,))
        return False

    w, b = vec(scale), vec(bias)
    if axis == x.ndim - 1 and w is not False and b is not False:
        y = B.layer_norm(x, w, b, eps=eps)
    else:
        flat = x.reshape(x.shape[:axis] + (d,))
        y = B.layer_norm(flat, eps=eps).reshape(x.shape)
        y = y * cx.t(scale)
        y = y + cx.t(bias) if bias is not None else y
    outs = [y]
    if any(node.output[1:]):  # Mean and InvStdDev over the normalized axes
        axes = tuple(range(axis, x.ndim))
        xs = x if x.dtype.value in ("f32", "f64") else x.cast("f32")  # stash_type=1
        mean = xs.mean(axes, keepdims=True)
        var = (xs - mean).square().mean(axes, keepdims=True)
        outs += [mean, (var + eps).sqrt().recip()]
    return outs


@_op("BatchNormalization")
def _batch_norm(cx, node, at, ins):
    """Inference: (x - mean) / sqrt(var + eps) * scale + bias per channel
    (axis 1); with constant statistics one multiply and one add. Training
    mode normalizes by the batch's statistics and also returns the running
    statistics, ``stat * momentum + batch_stat * (1 - momentum)``."""
    if at.get("training_mode", 0):
        return _batch_norm_training(cx, at, ins)
    if any(node.output[1:]):
        raise Unsupported("outputs running_mean/running_var (training only) are used")
    x = cx.t(ins[0])
    if x.ndim < 2:
        raise Unsupported(f"a rank-{x.ndim} input {list(x.shape)} (N, C, ... expected)")
    return [_normalize(cx, x, at.get("epsilon", 1e-5), *ins[1:5])]


def _normalize(cx, x, eps, scale, bias, mean, var):
    """(x - mean) / sqrt(var + eps) * scale + bias, the statistics per channel."""
    if x.dtype.value in ("f16", "bf16"):  # computed in f32, rounded once (as onnxruntime)
        return _normalize(cx, x.cast("f32"), eps, scale, bias, mean, var).cast(x.dtype)
    per_channel = (x.shape[1],) + (1,) * (x.ndim - 2)
    if all(isinstance(v, np.ndarray) for v in (scale, bias, mean, var)):
        a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
        c = bias.astype(np.float64) - mean.astype(np.float64) * a
        return x * cx.t(a.reshape(per_channel), like=x) + cx.t(c.reshape(per_channel), like=x)

    def pc(v):
        t = cx.t(v, like=x) if isinstance(v, np.ndarray) else cx.t(v)
        t = t if t.dtype == x.dtype else t.cast(x.dtype)
        return t.reshape(per_channel)

    return (x - pc(mean)) / (pc(var) + eps).sqrt() * pc(scale) + pc(bias)


def _batch_norm_training(cx, at, ins):
    x = cx.t(ins[0])
    if x.ndim < 2 or not x.dtype.is_float:
        raise Unsupported(f"training BatchNormalization of a rank-{x.ndim} {x.dtype.value} "
                          f"input (float N, C, ... expected)")
    axes = [0] + list(range(2, x.ndim))
    per_channel = (x.shape[1],) + (1,) * (x.ndim - 2)
    mean = x.mean(axes, keepdims=True)
    var = (x - mean).square().mean(axes, keepdims=True)
    y = _normalize(cx, x, at.get("epsilon", 1e-5), ins[1], ins[2],
                   mean.reshape(per_channel[:1]), var.reshape(per_channel[:1]))
    m = at.get("momentum", 0.9)

    def running(stat, batch):
        stat = cx.t(stat, like=x) if isinstance(stat, np.ndarray) else cx.t(stat)
        return stat * m + batch.reshape(per_channel[:1]) * (1.0 - m)

    return [y, running(ins[3], mean), running(ins[4], var)]


def _einsum_terms(eq, ranks):
    """The operand and result subscripts of an einsum equation, '...'
    replaced by Greek letters (right-aligned: broadcast axes share them) and
    an implicit output spelled out."""
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise Unsupported(f"equation {eq!r} has {len(terms)} operand(s) for {len(ranks)} "
                          f"input(s)")
    ell = 0
    for t, r in zip(terms, ranks):
        if "..." in t:
            ell = max(ell, r - (len(t) - 3))
    greek = "".join(chr(0x3B1 + i) for i in range(ell))  # not ONNX subscripts (a-z, A-Z)
    out = []
    for given, r in zip(terms, ranks):
        t = given
        if "..." in t:
            n = r - (len(t) - 3)
            t = t.replace("...", greek[ell - n:])
        if len(t) != r or not all((c.isascii() and c.isalpha()) or c in greek for c in t):
            raise Unsupported(f"equation {eq!r}: subscripts {given!r} do not fit a rank-{r} "
                              f"operand")
        out.append(t)
    if arrow:
        rhs = rhs.replace("...", greek)
    else:  # implicit: the ellipsis, then the letters seen once, alphabetically
        seen = "".join(out)
        rhs = greek + "".join(sorted(c for c in set(seen) if c not in greek and
                                     seen.count(c) == 1))
    if len(set(rhs)) != len(rhs) or any(c not in "".join(out) for c in rhs):
        raise Unsupported(f"equation {eq!r}: output subscripts {rhs!r} are repeated or unknown")
    return out, rhs


@_op("Einsum")
def _einsum(cx, node, at, ins):
    """A subscript repeated within an operand takes its diagonal; axes no
    other operand and not the output need are summed; operands are then
    contracted left to right, each pair as one batched [B, M, K] x [B, K, N]
    MatMul between permutes and reshapes."""
    xs = [cx.t(v) for v in ins]
    if not all(x.dtype.is_float for x in xs):
        raise Unsupported(f"{xs[0].dtype.value} operands (fuelc's MatMul is float-only)")
    terms, rhs = _einsum_terms(at["equation"], [x.ndim for x in xs])
    for j, (t, x) in enumerate(zip(terms, xs)):
        xs[j], terms[j] = _diagonals(x, t, at["equation"])
    size = {}
    for t, x in zip(terms, xs):
        for c, d in zip(t, x.shape):
            if size.setdefault(c, d) != d:
                raise Unsupported(f"equation {at['equation']!r}: subscript {c!r} has extents "
                                  f"{size[c]} and {d} (broadcasting is not supported)")

    def needed(j):  # the subscripts the output or another operand still uses
        return set(rhs).union(*(terms[i] for i in range(len(terms)) if i != j))

    for j, (t, x) in enumerate(zip(terms, xs)):
        keep = needed(j)
        gone = tuple(a for a, c in enumerate(t) if c not in keep)
        if gone:
            xs[j] = x.sum(gone)
            terms[j] = "".join(c for c in t if c in keep)
    y, t = xs[0], terms[0]
    for j in range(1, len(xs)):
        y, t = _contract(y, t, xs[j], terms[j], size, set(rhs).union(*terms[j + 1:]))
    perm = [t.index(c) for c in rhs]
    return [y.permute(perm) if perm != list(range(len(perm))) else y]


def _diagonals(x, t, eq):
    """x (subscripts t) with each repeated subscript reduced to one axis, the
    diagonal: the two axes moved last and flattened, then every (n+1)-th
    element (IndexSelect); the kept axis is last in the returned subscripts."""
    while len(set(t)) != len(t):
        c = next(c for c in t if t.count(c) > 1)
        p = t.index(c)
        q = t.index(c, p + 1)
        n = x.shape[p]
        if x.shape[q] != n:
            raise Unsupported(f"equation {eq!r}: subscript {c!r} has extents {n} and "
                              f"{x.shape[q]} in one operand")
        rest = [a for a in range(x.ndim) if a not in (p, q)]
        x = x.permute(rest + [p, q]) if rest + [p, q] != list(range(x.ndim)) else x
        x = x.reshape(x.shape[:-2] + (n * n,))
        x = x.index_select((np.arange(n) * (n + 1)).astype(np.uint32), x.ndim - 1)
        t = "".join(t[a] for a in rest) + c
    return x, t


def _contract(a, ta, b, tb, size, keep):
    """a (subscripts ta) times b (tb), summing the shared subscripts not in
    ``keep``: one MatMul of [batch, a-only, summed] x [batch, summed, b-only];
    returns the product and its subscripts (batch, a-only, b-only)."""
    batch = [c for c in ta if c in tb and c in keep]
    contr = [c for c in ta if c in tb and c not in keep]
    fa = [c for c in ta if c not in tb]
    fb = [c for c in tb if c not in ta]

    def ext(cs):
        return math.prod(size[c] for c in cs)

    def arrange(x, t, order, shape):
        perm = [t.index(c) for c in order]
        if perm != list(range(len(perm))):
            x = x.permute(perm)
        return x.reshape(shape)

    nb = (ext(batch),) if batch else ()
    a = arrange(a, ta, batch + fa + contr, nb + (ext(fa), ext(contr)))
    b = arrange(b, tb, batch + contr + fb, nb + (ext(contr), ext(fb)))
    if b.dtype != a.dtype:
        b = b.cast(a.dtype)
    t = "".join(batch + fa + fb)
    return matmul(a, b).reshape(tuple(size[c] for c in t)), t


# ---------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------
@_op("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL1",
     "ReduceL2")
def _reduce(cx, node, at, ins):
    x = cx.t(ins[0])
    axes_in = cx.arr(ins[1], "axes", node) if len(ins) > 1 and ins[1] is not None else None
    axes = reduce_axes(at, axes_in, x.ndim)
    if axes is None:
        return [x]
    keep = bool(at.get("keepdims", 1))
    op = node.op_type
    if any(x.shape[a] == 0 for a in axes):  # over no elements: the op's identity
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
        if op == "ReduceMean":
            raise Unsupported("the mean of zero elements is undefined (an axis has extent 0)")
        info = np.finfo if x.dtype.is_float else np.iinfo
        fill = {"ReduceMax": -np.inf if x.dtype.is_float else info(x.dtype.numpy).min,
                "ReduceMin": np.inf if x.dtype.is_float else info(x.dtype.numpy).max}.get(op, 0)
        return [cx.t(np.full(shape, fill, np.float64), like=x)]
    if op in ("ReduceSumSquare", "ReduceL2"):
        x = x.square()
    elif op == "ReduceL1":
        x = x.abs()
    kind = {"ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min"}.get(op, "sum")
    y = getattr(x, kind)(tuple(axes), keepdims=keep)
    return [y.sqrt() if op == "ReduceL2" else y]


@_op("ArgMax", "ArgMin")
def _arg(cx, node, at, ins):
    x = cx.t(ins[0])
    axis = norm_axis(at.get("axis", 0), x.ndim)
    keep = bool(at.get("keepdims", 1))
    last = bool(at.get("select_last_index", 0))
    src = x.flip(axis) if last else x  # the last index is the first of the reversed axis
    i = (src.argmax if node.op_type == "ArgMax" else src.argmin)(axis, keepdims=keep).cast("i64")
    return [(x.shape[axis] - 1) - i if last else i]


@_op("CumSum")
def _cumsum(cx, node, at, ins):
    """The CumSum primitive (inclusive); reverse flips around it, exclusive
    shifts the result one step along the axis with a leading 0."""
    x = cx.t(ins[0])
    axis = cx.arr(ins[1], "axis", node)
    if axis.size != 1:
        raise Unsupported(f"input 'axis' has {axis.size} values (a scalar is expected)")
    axis = norm_axis(int(axis.reshape(-1)[0]), x.ndim)
    rev = bool(at.get("reverse", 0))
    y = (x.flip(axis) if rev else x).cumsum(axis)
    n = x.shape[axis]
    if at.get("exclusive", 0) and n:
        y = y.slice(axis, 0, n - 1).pad([(1, 0) if i == axis else (0, 0)
                                         for i in range(x.ndim)], value=0)
    return [y.flip(axis) if rev else y]


# ---------------------------------------------------------------------------
# shape and data movement
# ---------------------------------------------------------------------------
@_op("Shape")
def _shape(cx, node, at, ins):
    return [extents(ins[0].shape[at.get("start", 0):at.get("end", None)])]


@_op("Size")
def _size(cx, node, at, ins):
    return [extents(math.prod(ins[0].shape))]


@_op("Transpose")
def _transpose(cx, node, at, ins):
    x = cx.t(ins[0])
    perm = at.get("perm") or list(reversed(range(x.ndim)))
    return [x.permute(perm)]


@_op("Reshape")
def _reshape(cx, node, at, ins):
    x = cx.t(ins[0])
    shape = cx.arr(ins[1], "shape", node)
    return [x.reshape(reshape_target(x.shape, shape.reshape(-1), at.get("allowzero", 0)))]


@_op("Flatten")
def _flatten(cx, node, at, ins):
    x = cx.t(ins[0])
    axis = flatten_axis(at.get("axis", 1), x.ndim)
    return [x.reshape((math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))]


@_op("Squeeze")
def _squeeze(cx, node, at, ins):
    x = cx.t(ins[0])
    axes = at.get("axes")
    if len(ins) > 1 and ins[1] is not None:
        axes = cx.arr(ins[1], "axes", node).reshape(-1).tolist()
    axes = squeeze_axes(x.shape, axes)
    return [x.squeeze(tuple(axes)) if axes else x]


@_op("Unsqueeze")
def _unsqueeze(cx, node, at, ins):
    x = cx.t(ins[0])
    axes = at.get("axes") if len(ins) < 2 else cx.arr(ins[1], "axes", node).reshape(-1).tolist()
    for a in unsqueeze_axes(x.ndim, axes):
        x = x.unsqueeze(a)
    return [x]


@_op("Concat")
def _concat(cx, node, at, ins):
    ts = [cx.t(v) for v in ins]
    return [concat(ts, norm_axis(at["axis"], ts[0].ndim))]


@_op("Split")
def _split(cx, node, at, ins):
    x = ins[0] if isinstance(ins[0], np.ndarray) else cx.t(ins[0])  # an array folds
    axis = norm_axis(at.get("axis", 0), x.ndim)
    split = at.get("split")
    if len(ins) > 1 and ins[1] is not None:
        split = cx.arr(ins[1], "split", node)
    elif split is not None:
        split = np.asarray(split)
    sizes = split_sizes(x.shape[axis], split, len(node.output), at.get("num_outputs"))
    if isinstance(x, np.ndarray):
        return np.split(x, np.cumsum(sizes)[:-1], axis)
    outs, start = [], 0
    for n in sizes:
        outs.append(x if n == x.shape[axis] else x.slice(axis, start, n))
        start += n
    return outs


@_op("Slice")
def _slice(cx, node, at, ins):
    x = cx.t(ins[0])
    args = [cx.arr(v, what, node) if v is not None else None
            for v, what in zip(ins[1:], ("starts", "ends", "axes", "steps"))]
    args += [None] * (4 - len(args))
    if any(isinstance(d, Sym) for d in x.shape) or any(
            v is not None and v.dtype == object for v in args[:2]):
        return [_sym_slice(x, *args)]
    for axis, r in slice_plan(x.shape, *args):
        if r.step == 1 or len(r) <= 1:
            if len(r) != x.shape[axis]:
                x = x.slice(axis, r.start if len(r) else 0, len(r))
        elif r.step == -1 and len(r) == x.shape[axis]:
            x = x.flip(axis)
        else:  # any other stride: an IndexSelect of the chosen positions
            x = x.index_select(np.asarray(list(r), np.uint32), axis)
    return [x]


def _sym_slice(x, starts, ends, axes, steps):
    """Slice with symbolic extents or bounds: step 1 only (docs/dynamic-shapes.md)."""
    axes = range(len(starts)) if axes is None else [norm_axis(int(a), x.ndim) for a in axes]
    if steps is not None and any(int(v) != 1 for v in steps.reshape(-1)):
        raise Unsupported(f"Slice steps {steps.tolist()} with symbolic extents or bounds "
                          f"(only step 1 is supported there)")
    for a, s, e in zip(axes, starts.reshape(-1), ends.reshape(-1)):
        start, length = sym_slice(x.shape[a], s, e)
        if (start, length) != (0, x.shape[a]):
            x = x.slice(a, start, length)
    return x


def _index_u32(cx, idx, extent):
    """Indices (constant or graph) as u32 with negative indices wrapped."""
    if isinstance(idx, np.ndarray) and isinstance(extent, Sym):
        if idx.size and idx.min() < 0:  # wrapping needs the size: only a scalar (_gather)
            raise Unsupported(f"negative constant indices {idx.min()} into the symbolic "
                              f"extent {extent} (only a single index may be negative)")
        return idx.astype(np.uint32)  # checked against the size the call binds
    if isinstance(idx, np.ndarray):
        if idx.size and (idx.min() < -extent or idx.max() >= extent):
            raise Unsupported(f"constant indices {idx.min()}..{idx.max()} out of range for "
                              f"extent {extent}")
        return np.where(idx < 0, idx + extent, idx).astype(np.uint32)
    t = cx.t(idx)
    if t.dtype.is_signed:
        t = where(t < 0, t + extent, t)
    return t.cast("u32")


@_op("Gather")
def _gather(cx, node, at, ins):
    x, idx = cx.t(ins[0]), ins[1]
    axis = norm_axis(at.get("axis", 0), x.ndim)
    ishape = tuple(idx.shape)
    if isinstance(idx, np.ndarray) and idx.ndim == 0 and isinstance(x.shape[axis], Sym):
        i = int(idx)  # x[..., i, ...] on a symbolic axis: i < 0 counts from its end
        return [x.slice(axis, x.shape[axis] + i if i < 0 else i, 1).squeeze(axis)]
    i32 = _index_u32(cx, idx, x.shape[axis])
    if isinstance(i32, np.ndarray) and i32.ndim == 0:  # x[..., i, ...]
        return [x.slice(axis, int(i32), 1).squeeze(axis)]
    flat = i32.reshape(-1) if isinstance(i32, np.ndarray) else i32.reshape((math.prod(ishape),))
    y = x.index_select(flat, axis)
    return [y.reshape(x.shape[:axis] + ishape + x.shape[axis + 1:])]


@_op("GatherElements")
def _gather_elements(cx, node, at, ins):
    x = cx.t(ins[0])
    axis = norm_axis(at.get("axis", 0), x.ndim)
    return [x.gather(cx.t(_index_u32(cx, ins[1], x.shape[axis])), axis)]


@_op("GatherND")
def _gather_nd(cx, node, at, ins):
    """One IndexSelect of the rows of data flattened to [batch * indexed
    extents, rest...]: each index tuple becomes a flat row number (the index
    arithmetic in numpy for constant indices, in i32/i64 graph ops else)."""
    x, idx = cx.t(ins[0]), ins[1]
    b = int(at.get("batch_dims", 0))
    ishape = tuple(idx.shape)
    k = ishape[-1] if ishape else 0
    if not ishape or b >= min(x.ndim, len(ishape)) or not 1 <= k <= x.ndim - b:
        raise Unsupported(f"indices of shape {list(ishape)} with batch_dims={b} do not index "
                          f"data of shape {list(x.shape)}")
    if ishape[:b] != x.shape[:b]:
        raise Unsupported(f"batch_dims={b}: the leading extents of data {list(x.shape)} and "
                          f"indices {list(ishape)} differ")
    bshape, dims, rest, mid = x.shape[:b], x.shape[b:b + k], x.shape[b + k:], ishape[b:-1]
    nb, nd = math.prod(bshape), math.prod(dims)
    strides = np.asarray([math.prod(dims[j + 1:]) for j in range(k)], np.int64)
    base = (np.arange(nb, dtype=np.int64) * nd).reshape(bshape + (1,) * len(mid))
    ext = np.asarray(dims, np.int64)
    if isinstance(idx, np.ndarray):
        i = idx.astype(np.int64)
        if i.size and ((i < -ext).any() or (i >= ext).any()):
            raise Unsupported(f"constant indices out of range for the indexed extents "
                              f"{list(dims)}")
        rows = ((np.where(i < 0, i + ext, i) * strides).sum(-1) + base).reshape(-1)
        rows = rows.astype(np.uint32)
    else:
        t = cx.t(idx)
        if t.dtype.is_signed:
            t = where(t < 0, t + cx.t(ext, like=t), t)
        rows = (t * cx.t(strides, like=t)).sum(-1) + cx.t(base, like=t)
        rows = rows.cast("u32").reshape((math.prod(bshape + mid),))
    y = x.reshape((nb * nd,) + rest).index_select(rows, 0)
    return [y.reshape(bshape + mid + rest)]


@_op("OneHot")
def _one_hot(cx, node, at, ins):
    """where(indices == iota, on, off) with the depth axis inserted at
    ``axis``; negative indices count from depth, out-of-range ones match
    nothing (all off), as ONNX says."""
    depth = cx.arr(ins[1], "depth", node)
    if depth.size != 1:
        raise Unsupported(f"input 'depth' has {depth.size} values (a scalar is expected)")
    depth = int(depth.reshape(-1)[0])
    idx, values = cx.t(ins[0]), ins[2]
    axis = norm_axis(at.get("axis", -1), idx.ndim + 1)
    if idx.dtype.is_float:  # truncated to integers, as onnxruntime does
        idx = idx.cast("i64")
    if idx.dtype.is_signed:
        idx = where(idx < 0, idx + depth, idx)
    iota = np.arange(depth).reshape([-1 if d == axis else 1 for d in range(idx.ndim + 1)])
    hot = idx.unsqueeze(axis) == cx.t(iota, like=idx)
    if isinstance(values, np.ndarray):
        flat = values.reshape(-1)
        v = cx.t(values)  # the dtype, once
        off, on = (cx.t(np.asarray(flat[j]), like=v) for j in (0, 1))
    else:
        v = cx.t(values)
        off, on = (v.slice(0, j, 1).reshape(()) for j in (0, 1))
    return [where(hot, on, off)]


#: TopK is composed as K max (or min) passes; larger K is refused.
TOPK_MAX_K = 64


@_op("TopK")
def _top_k(cx, node, at, ins):
    """K passes of: the extreme m of what is left, the first position not yet
    taken that holds m (ONNX: equal values, lower index first), then that
    position masked. Sorted output (valid for sorted=0 too)."""
    x = cx.t(ins[0])
    k = cx.arr(ins[1], "K", node)
    k = int(k.reshape(-1)[0])
    axis = norm_axis(at.get("axis", -1), x.ndim)
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise Unsupported(f"K={k} for an axis of extent {n}")
    if k > TOPK_MAX_K:
        raise Unsupported(f"K={k}: fuelc composes TopK as K max passes over the axis and "
                          f"takes K <= {TOPK_MAX_K} (sort outside the model, or split it)")
    if k == 0:
        shape = tuple(0 if i == axis else d for i, d in enumerate(x.shape))
        return [cx.t(np.zeros(shape, x.dtype.numpy), like=x), cx.t(np.zeros(shape, np.int64))]
    largest = bool(at.get("largest", 1))
    if x.dtype.is_float:
        fill = -math.inf if largest else math.inf
    else:
        info = np.iinfo(x.dtype.numpy)
        fill = int(info.min if largest else info.max)
    iota = cx.t(np.arange(n, dtype=np.int64).reshape([-1 if i == axis else 1
                                                      for i in range(x.ndim)]))
    vals, idxs, taken, cur = [], [], None, x
    for _ in range(k):
        m = cur.max(axis, keepdims=True) if largest else cur.min(axis, keepdims=True)
        cand = x == m
        if taken is not None:
            cand = cand * (taken == 0)
        i = cand.argmax(axis, keepdims=True).cast("i64")
        hit = iota == i
        taken = hit if taken is None else maximum(taken, hit)
        cur = where(hit, fill, cur)
        vals.append(m)
        idxs.append(i)
    if k == 1:
        return [vals[0], idxs[0]]
    return [concat(vals, axis), concat(idxs, axis)]


@_op("Expand")
def _expand(cx, node, at, ins):
    x = cx.t(ins[0])
    shape = [d if isinstance(d, Sym) else int(d) for d in cx.arr(ins[1], "shape", node).reshape(-1)]
    if any(isinstance(d, Sym) for d in list(x.shape) + shape):  # docs/dynamic-shapes.md
        from ...graph.ops import broadcast_shapes
        from ...graph.symbolic import recording
        with recording([], "Expand"):  # the BroadcastTo node records the equalities
            target = broadcast_shapes(x.shape, shape)
        if target is None:
            raise Unsupported(f"Expand of {list(x.shape)} to {shape}: the shapes do not broadcast")
    else:
        target = broadcast_shape(x.shape, shape)
    return [x.broadcast_to(target)]


@_op("Tile")
def _tile(cx, node, at, ins):
    x = cx.t(ins[0])
    reps = [int(r) for r in cx.arr(ins[1], "repeats", node).reshape(-1)]
    for axis, r in enumerate(reps):
        if r != 1:
            x = concat([x] * r, axis)
    return [x]


def _same_pads(auto, n, o, s, eff, i):
    """ONNX ``SAME`` pads (before, after) of an axis of extent ``n`` with the
    output extent ``o`` = ceil(n / s) and the window ``eff``. On a symbolic
    ``n`` the total ``s*o - n + eff - s`` lies in ``eff - s .. eff - 1``
    (``Sym`` bounds): clamped at 0 where those decide it, else refused."""
    total = (o - 1) * s + eff - n
    if isinstance(total, Sym):
        lo, hi = total.decided_bounds()
        if hi is not None and hi <= 0:
            total = 0
        elif lo is None or lo < 0:
            raise Unsupported(
                f"auto_pad={auto} with stride {s} and window {eff} over the symbolic extent "
                f"{n} (axis {2 + i}): its padding {total} is negative for some sizes (a window "
                f"narrower than the stride); export the model with explicit pads, or fix the "
                f"size at import (input_shapes={{{min(n.atoms)!r}: 224}})")
    else:
        total = max(total, 0)
    small = floor_div(total, 2)
    return (total - small, small) if auto == "SAME_LOWER" else (small, total - small)


def _conv_pads(at, spatial, kernel, strides, dilations=None):
    """(before, after) per spatial axis from pads / auto_pad."""
    auto = at.get("auto_pad", "NOTSET")
    nd = len(spatial)
    dilations = dilations or [1] * nd
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i, (n, k, s, d) in enumerate(zip(spatial, kernel, strides, dilations)):
            o = ceil_count(n, s, f"{auto} padding, stride {s} on axis {2 + i}")
            out.append(_same_pads(auto, n, o, s, (k - 1) * d + 1, i))
        return out
    if auto == "VALID":
        return [(0, 0)] * nd
    pads = list(at.get("pads") or [0] * 2 * nd)
    return [(pads[i], pads[i + nd]) for i in range(nd)]


def _as_2d(x, w):
    """A 1-D convolution's input and weight with a unit height axis."""
    return x.unsqueeze(2), w.unsqueeze(2)


@_op("Conv")
def _conv(cx, node, at, ins):
    x, w = cx.t(ins[0]), cx.t(ins[1])
    bias = cx.t(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    if x.ndim not in (3, 4):
        raise Unsupported(f"a rank-{x.ndim} input {list(x.shape)}: only 1-D and 2-D "
                          f"convolution (NCW / NCHW input) is supported")
    one_d = x.ndim == 3
    nd = x.ndim - 2
    strides = list(at.get("strides") or [1] * nd)
    dilations = list(at.get("dilations") or [1] * nd)
    pads = _conv_pads(at, x.shape[2:], w.shape[2:], strides, dilations)
    if one_d:
        x, w = _as_2d(x, w)
        strides, dilations, pads = [1] + strides, [1] + dilations, [(0, 0)] + pads
    (t, b), (l, r) = pads
    if (t, l) != (b, r):  # asymmetric: pad explicitly, then convolve unpadded
        x = x.pad([(0, 0), (0, 0), (t, b), (l, r)])
        t = l = 0
    y = B.conv2d(x, w, bias, stride=tuple(strides), padding=(t, l), groups=at.get("group", 1),
                 dilation=tuple(dilations))
    return [y.squeeze(2) if one_d else y]


@_op("ConvTranspose")
def _conv_transpose(cx, node, at, ins):
    x, w = cx.t(ins[0]), cx.t(ins[1])
    bias = cx.t(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    if x.ndim not in (3, 4):
        raise Unsupported(f"a rank-{x.ndim} input {list(x.shape)}: only 1-D and 2-D "
                          f"transposed convolution is supported")
    one_d = x.ndim == 3
    nd = x.ndim - 2
    k = list(w.shape[2:])
    s = list(at.get("strides") or [1] * nd)
    d = list(at.get("dilations") or [1] * nd)
    op_ = list(at.get("output_padding") or [0] * nd)
    auto = at.get("auto_pad", "NOTSET")
    full = [(x.shape[2 + i] - 1) * s[i] + op_[i] + (k[i] - 1) * d[i] + 1 for i in range(nd)]
    if at.get("output_shape"):
        want = list(at["output_shape"])[-nd:]
        totals = [f - o for f, o in zip(full, want)]
        auto = auto if auto != "NOTSET" else "SAME_UPPER"
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        totals = [f - x.shape[2 + i] * s[i] for i, f in enumerate(full)]
    else:
        totals = None
    if totals is not None:  # ONNX: SAME_UPPER puts the odd pad at the end
        pads = [(t // 2, t - t // 2) if auto == "SAME_UPPER" else (t - t // 2, t // 2)
                for t in totals]
        if at.get("auto_pad", "NOTSET") == "NOTSET":  # a larger output_shape: zeros at the
            pads = [(0, t) if t < 0 else pr for t, pr in zip(totals, pads)]  # end (reference)
    else:
        pads = _conv_pads({"pads": at.get("pads")}, x.shape[2:], k, s)
    grow = [(max(-lo, 0), max(-hi, 0)) for lo, hi in pads]  # output_shape beyond full
    if any(g != (0, 0) for g in grow):  # zeros there, then the bias everywhere
        pads = [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
        y = _conv_transpose(cx, node, {**at, "pads": [p for p, _ in pads] + [p for _, p in pads],
                                       "output_shape": None, "auto_pad": "NOTSET"}, ins[:2])[0]
        y = y.pad([(0, 0), (0, 0)] + grow)
        return [y if bias is None else y + bias.reshape((-1,) + (1,) * nd)]
    if one_d:
        x, w = _as_2d(x, w)
        s, d, op_, pads = [1] + s, [1] + d, [0] + op_, [(0, 0)] + pads
    # the builder pads symmetrically: crop the asymmetric remainder afterwards
    sym = [min(lo, hi) for lo, hi in pads]
    y = B.conv_transpose2d(x, w, bias, stride=tuple(s), padding=tuple(sym),
                           output_padding=tuple(op_), dilation=tuple(d),
                           groups=at.get("group", 1))
    for i, (lo, hi) in enumerate(pads):
        extra_lo, extra_hi = lo - sym[i], hi - sym[i]
        if extra_lo or extra_hi:
            a = 2 + i
            y = y.slice(a, extra_lo, y.shape[a] - extra_lo - extra_hi)
    return [y.squeeze(2) if one_d else y]


@_op("Det")
def _det(cx, node, at, ins):
    """The Leibniz sum over the permutations of the last two (n x n, n <= 4)
    axes: n! products of n elements, each a slice of the input."""
    import itertools
    x = cx.t(ins[0])
    n = x.shape[-1] if x.ndim >= 2 else None
    if n is None or x.shape[-2] != n or not 1 <= n <= 4 or not x.dtype.is_float:
        raise Unsupported(f"Det of a {x.dtype.value}{list(x.shape)} input (float [..., n, n] "
                          f"with n <= 4: fuelc spells the n! products of the Leibniz formula)")
    total = None
    for perm in itertools.permutations(range(n)):
        term = None
        for i, j in enumerate(perm):
            e = x[..., i, j]
            term = e if term is None else term * e
        odd = sum(perm[a] > perm[b] for a in range(n) for b in range(a + 1, n)) % 2
        total = (-term if odd else term) if total is None else \
            (total - term if odd else total + term)
    return [total]


@_op("TfIdfVectorizer")
def _tfidf(cx, node, at, ins):
    """Per pool n-gram, its count in each row: for every skip distance d (one
    for unigrams) the product of n shifted equality masks, summed; weighted
    as ``mode`` says. The pool is constant, so each n-gram is a few slices."""
    x = cx.t(ins[0])
    if "pool_int64s" not in at or x.dtype.is_float or x.ndim not in (1, 2):
        raise Unsupported(f"TfIdfVectorizer of a {x.dtype.value}{list(x.shape)} input (integer "
                          f"[C] or [B, C] input and pool_int64s; strings are not supported)")
    rows = x if x.ndim == 2 else x.reshape((1, x.shape[0]))
    c = rows.shape[1]
    pool, starts = list(at["pool_int64s"]), list(at["ngram_counts"]) + [len(at["pool_int64s"])]
    index, mode = list(at["ngram_indexes"]), at.get("mode", "TF")
    weights = list(at.get("weights") or [1.0] * len(index))
    lo, hi, skips = at.get("min_gram_length", 1), at["max_gram_length"], at["max_skip_count"]
    counts, k = {}, 0
    for n in range(1, len(starts)):
        for g in range(starts[n - 1], starts[n], n):
            gram, total = pool[g:g + n], None
            for d in (range(1, skips + 2) if n > 1 else [1]) if lo <= n <= hi else []:
                span = c - d * (n - 1)
                if span <= 0:
                    continue
                hit = None
                for m, v in enumerate(gram):
                    eq = (rows[:, m * d:m * d + span] == int(v)).cast("f32")
                    hit = eq if hit is None else hit * eq
                part = hit.sum(1, keepdims=True)
                total = part if total is None else total + part
            if total is not None:
                if mode == "IDF":
                    total = (total > 0.0).cast("f32") * float(weights[k])
                elif mode == "TFIDF":
                    total = total * float(weights[k])
                counts[index[k]] = total
            k += 1
    zero = cx.t(np.zeros((rows.shape[0], 1), np.float32))
    y = concat([counts.get(i, zero) for i in range(max(index) + 1)], 1)
    return [y if x.ndim == 2 else y.reshape((y.shape[1],))]


@_op("TensorScatter")
def _tensor_scatter(cx, node, at, ins):
    """The cache with ``update`` written at each batch row's write index along
    ``axis`` (circular: modulo the cache length): position j of row b takes
    update[j - w[b]] where that is in [0, L), one GatherElements and a Where."""
    x, u = cx.t(ins[0]), cx.t(ins[1])
    w = ins[2] if len(ins) > 2 else None
    axis = norm_axis(at.get("axis", -2), x.ndim)
    mode = at.get("mode", "linear")
    if mode not in ("linear", "circular") or axis == 0 or u.ndim != x.ndim:
        raise Unsupported(f"mode={mode!r}, axis={at.get('axis', -2)} for a cache "
                          f"{list(x.shape)} and update {list(u.shape)} (linear or circular "
                          f"along an axis after the batch)")
    s, n = x.shape[axis], u.shape[axis]
    pos = np.arange(s, dtype=np.int64).reshape([s if d == axis else 1 for d in range(x.ndim)])
    if w is None or isinstance(w, np.ndarray):
        w = np.zeros(x.shape[0], np.int64) if w is None else w.astype(np.int64)
        t = pos - w.reshape((-1,) + (1,) * (x.ndim - 1))
        t = t % s if mode == "circular" else t
        ok, idx = (t >= 0) & (t < n), np.clip(t, 0, n - 1)
        ok, idx = cx.t(ok.astype(np.uint8)), cx.t(np.broadcast_to(idx, x.shape).astype(np.uint32))
    else:
        w = cx.t(w)
        w = (w if w.dtype.value == "i64" else w.cast("i64")).reshape((-1,) + (1,) * (x.ndim - 1))
        t = cx.t(pos) - w
        if mode == "circular":
            t = where(t < 0, t + s, t)
        ok = (t >= 0) * (t < n)
        idx = minimum(maximum(t, 0), n - 1).cast("u32").broadcast_to(x.shape)
    return [where(ok, u.gather(idx, axis), x)]


@_op("OptionalHasElement", "OptionalGetElement")
def _optional(cx, node, at, ins):
    """Optionals of tensors, known at import: an omitted input is empty, a
    tensor is present (the checker requires GetElement's input; optional and
    sequence values are not imported)."""
    x = ins[0] if ins else None
    return [np.array(x is not None)] if node.op_type == "OptionalHasElement" else [x]


def _roi_taps(rois, h, w, oh, ow, scale, ratio, half_pixel):
    """Per roi, bin and sample: the 4 bilinear taps (flat h*w positions) and
    weights of ONNX's reference, in the rois' own precision as there (the
    sample counts depend on it), samples padded to the most any roi takes
    (``valid`` 0 there), and each roi's sample count."""
    rows = []
    ft = rois.dtype.type
    for r in rois:
        x0, y0, x1, y1 = (v * ft(scale) - ft(0.5 if half_pixel else 0.0) for v in r[:4])
        rh, rw = y1 - y0, x1 - x0
        if not half_pixel:
            rh, rw = max(rh, ft(1.0)), max(rw, ft(1.0))
        bh, bw = rh / oh, rw / ow
        gh = ratio if ratio > 0 else int(np.ceil(rh / oh))
        gw = ratio if ratio > 0 else int(np.ceil(rw / ow))
        taps = np.zeros((oh, ow, gh * gw, 4), np.int64)
        wts = np.zeros((oh, ow, gh * gw, 4))
        for i in range(oh):
            for j in range(ow):
                for iy in range(gh):
                    for ix in range(gw):
                        y = y0 + i * bh + (iy + 0.5) * bh / gh
                        x = x0 + j * bw + (ix + 0.5) * bw / gw
                        if y < -1.0 or y > h or x < -1.0 or x > w:
                            continue
                        y, x = max(y, ft(0.0)), max(x, ft(0.0))
                        yl, xl = int(y), int(x)
                        yh, xh = (yl + 1, xl + 1)
                        if yl >= h - 1:
                            yh = yl = h - 1
                            y = yl
                        if xl >= w - 1:
                            xh = xl = w - 1
                            x = xl
                        ly, lx = y - yl, x - xl
                        k = iy * gw + ix
                        taps[i, j, k] = [yl * w + xl, yl * w + xh, yh * w + xl, yh * w + xh]
                        wts[i, j, k] = [(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx]
        rows.append((taps, wts, max(gh * gw, 1)))
    n = max(t.shape[2] for t, _, _ in rows)
    pad = [(0, 0), (0, 0), (0, 0), (0, 0)]
    taps = np.stack([np.pad(t, pad[:2] + [(0, n - t.shape[2])] + pad[3:]) for t, _, _ in rows])
    wts = np.stack([np.pad(v, pad[:2] + [(0, n - v.shape[2])] + pad[3:]) for _, v, _ in rows])
    valid = np.stack([np.arange(n) < t.shape[2] for t, _, _ in rows])
    return taps, wts, valid, np.array([c for _, _, c in rows], np.float64)


@_op("RoiAlign")
def _roi_align(cx, node, at, ins):
    """Constant rois and batch indices: every bilinear tap and weight is known
    at import, so the output is one IndexSelect of the input's pixels, the
    weights, and a sum (avg) or max over the samples."""
    x = cx.t(ins[0])
    late = [n for n, v in zip(node.input[1:3], ins[1:3]) if not isinstance(v, np.ndarray)]
    if late:
        raise Unsupported(f"its inputs must be constants known at import; input(s) {late} are "
                          f"computed at run time (fuelc computes the sampling taps at import)")
    if x.ndim != 4 or not x.dtype.is_float:
        raise Unsupported(f"RoiAlign of a {x.dtype.value}{list(x.shape)} input (float N, C, H, W)")
    rois, batch = ins[1], ins[2].reshape(-1).astype(np.int64)
    n, c, h, w = x.shape
    oh, ow = at.get("output_height", 1), at.get("output_width", 1)
    mode = at.get("mode", "avg")
    half = at.get("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    taps, wts, valid, count = _roi_taps(rois, h, w, oh, ow, at.get("spatial_scale", 1.0),
                                        int(at.get("sampling_ratio", 0)), half)
    r, s = taps.shape[0], taps.shape[3]
    rows = (taps + (batch * h * w).reshape(-1, 1, 1, 1, 1)).reshape(-1).astype(np.uint32)
    pix = x.permute((0, 2, 3, 1)).reshape((n * h * w, c)).index_select(rows, 0)
    v = pix.reshape((r, oh, ow, s, 4, c)) * cx.t(wts.reshape(r, oh, ow, s, 4, 1), like=x)
    if mode == "avg":
        y = v.sum([3, 4]) * cx.t((1.0 / count).reshape(r, 1, 1, 1), like=x)
    else:
        off = np.where(valid, 0.0, -np.inf).reshape(r, 1, 1, s, 1)
        y = (v.max(4) + cx.t(off, like=x)).max(3)
    return [y.permute((0, 3, 1, 2))]


@_op("Attention")
def _attention(cx, node, at, ins):
    """Attention (opset 23+): 3-D inputs are split into heads; q, k, v alone
    go to the fused FlashAttn; a mask, a past key/value cache,
    ``nonpad_kv_seqlen``, the qk_matmul_output output, softmax_precision or
    f16/bf16 inputs take the spelled-out softmax(q k^T * scale + bias) v,
    whose fully masked rows give 0 as ONNX specifies."""
    ins = list(ins) + [None] * (7 - len(ins))
    q, k, v = (cx.t(i) for i in ins[:3])
    mask, past_k, past_v, nonpad = ins[3:7]
    if (past_k is None) != (past_v is None):
        raise Unsupported("past_key and past_value must be given together")
    if nonpad is not None and past_k is not None:
        raise Unsupported("nonpad_kv_seqlen together with past_key/past_value (ONNX forbids it)")
    mode = at.get("qk_matmul_output_mode", 0)
    want_qk = len(node.output) > 3 and bool(node.output[3]) and cx._used(node.output[3])
    softcap = at.get("softcap") or None
    if want_qk and mode == 0 and softcap:
        raise Unsupported("qk_matmul_output_mode=0 with softcap: the spec (the raw product) and "
                          "ONNX's reference (the softcapped product) disagree; use mode 1")
    if mode not in (0, 1, 2, 3):
        raise Unsupported(f"qk_matmul_output_mode={mode} (0, 1, 2 or 3)")
    rank = q.ndim
    if rank == 3:
        hq, hkv = at.get("q_num_heads"), at.get("kv_num_heads")
        if not hq or not hkv:
            raise Unsupported("3-D q/k/v need the q_num_heads and kv_num_heads attributes")
        q, k, v = (t.reshape((t.shape[0], t.shape[1], h, t.shape[2] // h)).permute((0, 2, 1, 3))
                   for t, h in ((q, hq), (k, hkv), (v, hkv)))
    elif rank != 4:
        raise Unsupported(f"rank-{rank} q {list(q.shape)}: only [B, H, S, D] or [B, S, H*D] "
                          f"inputs are supported")
    past = 0
    if past_k is not None:
        past = cx.t(past_k).shape[2]
        k, v = concat([cx.t(past_k), k], 2), concat([cx.t(past_v), v], 2)
    causal = bool(at.get("is_causal", 0))
    scale = at.get("scale") or 1.0 / math.sqrt(q.shape[-1])
    left, right = at.get("left_window_size", -1), at.get("right_window_size", -1)
    precision = at.get("softmax_precision")
    if precision is not None:
        from ._types import dtype_of
        precision = dtype_of(precision)
        precision = None if precision == q.dtype else precision
    qk = None
    if mask is None and past == 0 and nonpad is None and v.shape[-1] == q.shape[-1] and \
            q.dtype.value not in ("f16", "bf16") and not want_qk and precision is None:
        y = B.flash_attn(q, k, v, causal=causal, scale=scale, softcap=softcap,
                         sliding_window=left + 1 if left >= 0 else None,
                         window_size_right=right if right >= 0 else None)
    else:
        y, qk = _attention_parts(cx, q, k, v, mask, causal, past, scale, softcap, left, right,
                                 nonpad, mode, precision, as_reference=True)
    if rank == 3:
        y = y.permute((0, 2, 1, 3))
        y = y.reshape((y.shape[0], y.shape[1], y.shape[2] * y.shape[3]))
    return [y, k, v, qk]


def _attention_spelled(cx, q, k, v, mask, causal, past, scale, softcap, left, right):
    """softmax(q k^T * scale + bias) v (the torch importer's SDPA too)."""
    return _attention_parts(cx, q, k, v, mask, causal, past, scale, softcap, left, right)[0]


def _attention_parts(cx, q, k, v, mask, causal, past, scale, softcap, left, right,
                     nonpad=None, mode=0, precision=None, as_reference=False):
    """Y and the qk_matmul_output of ``mode`` (the scaled product, softcapped
    for 1, plus the bias for 2, the probabilities for 3); ``as_reference``:
    f16/bf16 rounded as ONNX's reference (q and k^T each scaled by
    sqrt(scale), bf16 row sums rounded per addition)."""
    hq, hkv = q.shape[1], k.shape[1]
    if hq != hkv:  # grouped-query: each k/v head serves hq / hkv query heads
        heads = np.arange(hq, dtype=np.uint32) // (hq // hkv)
        k, v = k.index_select(heads, 1), v.index_select(heads, 1)
    if as_reference and q.dtype.value in ("f16", "bf16"):  # q and k^T each times sqrt(scale)
        root = float(np.asarray(math.sqrt(scale), q.dtype.numpy))
        s = matmul(q * root, k.transpose((0, 1, 3, 2)) * root)
    else:
        s = matmul(q, k.transpose((0, 1, 3, 2))) * scale
    if softcap:
        s = (s * (1.0 / softcap)).tanh() * softcap
    qk = s
    sq, sk = s.shape[2], s.shape[3]
    if mask is not None:
        if isinstance(mask, np.ndarray) and mask.dtype == np.bool_:
            mask = mask.astype(np.uint8)
        m = cx.t(mask)
        boolean = m.dtype.value == "u8"  # ONNX masks are bool (u8 here) or float
        if m.shape[-1] < sk:  # a short mask leaves the rest of the keys masked
            m = m.pad([(0, 0)] * (m.ndim - 1) + [(0, sk - m.shape[-1])],
                      value=0 if boolean else -math.inf)
        if boolean:
            m = where(m, cx.t(np.zeros((), np.float32), like=s),
                      cx.t(np.full((), -np.inf, np.float32), like=s))
        s = s + (m if m.dtype == s.dtype else m.cast(s.dtype))
    allowed = _keys_allowed(cx, sq, sk, past, causal, left, right, nonpad, s.shape[0])
    if allowed is not None:
        s = s + where(allowed, cx.t(np.zeros((), np.float32), like=s),
                      cx.t(np.full((), -np.inf, np.float32), like=s))
    if mode == 2:
        qk = s
    low = s.dtype
    if precision is not None:
        s = s.cast(precision)
    top = s.max(-1, keepdims=True)
    top = where(top == -math.inf, 0.0, top)
    e = (s - top).exp()
    total = _row_sum(e) if as_reference else e.sum(-1, keepdims=True)
    p = e / where(total == 0.0, 1.0, total)
    if precision is not None:
        p = p.cast(low)
    return matmul(p, v), p if mode == 3 else qk


def _keys_allowed(cx, sq, sk, past, causal, left, right, nonpad, batch):
    """Where query i may see key j: the causal and window limits around
    i + offset (offset = past length, or nonpad_kv_seqlen - sq per batch) and
    j < nonpad_kv_seqlen; a constant [sq, sk] or [B, 1, sq, sk] mask (u8)
    when the lengths are known at import, else built at run time; None when
    every key is allowed."""
    if nonpad is None or isinstance(nonpad, np.ndarray):
        n = None if nonpad is None else nonpad.reshape(batch, 1, 1, 1).astype(np.int64)
        i = np.arange(sq).reshape(sq, 1) + (past if n is None else n - sq)
        j = np.arange(sk).reshape(1, sk)
        ok = np.ones(np.broadcast_shapes(i.shape, j.shape), np.bool_)
        if causal:
            ok &= j <= i
        if left >= 0:
            ok &= i - j <= left
        if right >= 0:
            ok &= j - i <= right
        if n is not None:
            ok &= j < n
        return None if ok.all() else cx.t(ok.astype(np.uint8))
    n = cx.t(nonpad).reshape((batch, 1, 1, 1))
    n = n if n.dtype.value == "i64" else n.cast("i64")
    i = n + cx.t(np.arange(sq, dtype=np.int64).reshape(sq, 1) - sq)
    j = cx.t(np.arange(sk, dtype=np.int64).reshape(1, sk))
    ok = j < n
    if causal:
        ok = ok * (j <= i)
    if left >= 0:
        ok = ok * (i - j <= left)
    if right >= 0:
        ok = ok * (j - i <= right)
    return ok


def _row_sum(e: Tensor, sequential_upto: int = 64) -> Tensor:
    """The sum over the last axis as ONNX's numpy reference computes it: f16
    (numpy) accumulates in f32 and rounds once; bf16 (ml_dtypes) rounds after
    every addition, left to right, spelled so for up to ``sequential_upto``
    terms (longer bf16 rows accumulate in f32, which is closer to the exact
    sum)."""
    n = e.shape[-1]
    if e.dtype.value != "bf16" or n > sequential_upto or n < 2:
        return e.sum(-1, keepdims=True)
    total = e[..., 0:1]
    for j in range(1, n):
        total = total + e[..., j:j + 1]
    return total


def static_issues(op: str, at: dict) -> list[str]:
    """Attribute values fuelc refuses, known without building (so that they
    are reported even downstream of another failure)."""
    out = []
    if op == "Conv":
        if len(at.get("kernel_shape", [0])) > 2:
            out.append(f"attribute kernel_shape={list(at['kernel_shape'])} (only 1-D and 2-D "
                       f"convolution are supported)")
    if op == "Gelu" and at.get("approximate", "none") not in ("none", "tanh"):
        out.append(f"attribute approximate={at['approximate']!r}")
    return out


# ---------------------------------------------------------------------------
# coverage by composition: Pad modes, ReduceProd, pooling, LayerNormalization's
# statistics, RotaryEmbedding (each an exact spelling in primitives)
# ---------------------------------------------------------------------------
@_op("Pad")
def _pad(cx, node, at, ins):
    x = cx.t(ins[0])
    pads = [int(p) for p in cx.arr(ins[1], "pads", node).reshape(-1)]
    value = ins[2] if len(ins) > 2 and ins[2] is not None else None
    axes = list(range(x.ndim))
    if len(ins) > 3 and ins[3] is not None:
        axes = [norm_axis(int(a), x.ndim) for a in cx.arr(ins[3], "axes", node).reshape(-1)]
    if len(pads) != 2 * len(axes):
        raise Unsupported(f"pads has {len(pads)} values; expected 2 x {len(axes)} (axes)")
    mode = at.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise Unsupported(f"attribute mode={mode!r} (constant, reflect, edge or wrap)")
    pairs = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        pairs[a] = (pads[i], pads[i + len(axes)])
    for a, (lo, hi) in enumerate(pairs):  # negative pads crop
        if lo < 0 or hi < 0:
            start, stop = max(-lo, 0), x.shape[a] - max(-hi, 0)
            x = x.slice(a, start, stop - start)
    pairs = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
    if not any(lo or hi for lo, hi in pairs):
        return [x]
    if mode == "constant":
        if isinstance(value, np.ndarray) or value is None:
            v = 0 if value is None else value.reshape(-1)[0].item()
            return [x.pad(pairs, value=v)]
        inside = np.pad(np.ones(x.shape, np.uint8), pairs)  # a run-time pad value
        return [where(cx.t(inside), x.pad(pairs), cx.t(value).reshape(()))]
    for a, (lo, hi) in enumerate(pairs):
        if lo or hi:
            n = x.shape[a]
            pos = np.arange(-lo, n + hi)
            if mode == "edge":
                idx = np.clip(pos, 0, n - 1)
            elif mode == "wrap":
                idx = pos % n
            else:  # reflect about the edge elements (numpy "reflect")
                if n == 1:
                    idx = np.zeros_like(pos)
                else:
                    period = 2 * (n - 1)
                    m = pos % period
                    idx = np.where(m < n, m, period - m)
            x = x.index_select(idx.astype(np.uint32), a)
    return [x]


@_op("ReduceProd")
def _reduce_prod(cx, node, at, ins):
    x = cx.t(ins[0])
    axes_in = cx.arr(ins[1], "axes", node) if len(ins) > 1 and ins[1] is not None else None
    axes = reduce_axes(at, axes_in, x.ndim)
    if axes is None:
        return [x]
    for a in axes:  # pairwise products: log2(n) multiplies of two halves
        n = x.shape[a]
        if n == 0:
            shape = tuple(1 if i == a else d for i, d in enumerate(x.shape))
            x = cx.t(np.ones(shape, x.dtype.numpy), like=x)
            continue
        while n > 1:
            if n % 2:
                x = x.pad([(0, 1) if i == a else (0, 0) for i in range(x.ndim)], value=1)
                n += 1
            x = x.slice(a, 0, n // 2) * x.slice(a, n // 2, n // 2)
            n //= 2
    if not at.get("keepdims", 1):
        x = x.squeeze(tuple(axes))
    return [x]


def _pool_geometry(at, spatial):
    """Per spatial axis: (kernel, stride, dilation, pad before, pad after,
    output extent) as ONNX MaxPool/AveragePool define them."""
    k = list(at["kernel_shape"])
    nd = len(k)
    s = list(at.get("strides") or [1] * nd)
    d = list(at.get("dilations") or [1] * nd)
    pads = list(at.get("pads") or [0] * 2 * nd)
    auto = at.get("auto_pad", "NOTSET")
    ceil = bool(at.get("ceil_mode", 0))
    out = []
    for i, n in enumerate(spatial):
        eff = (k[i] - 1) * d[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = ceil_count(n, s[i], f"{auto} pooling, stride {s[i]} on axis {2 + i}")
            lo, hi = _same_pads(auto, n, o, s[i], eff, i)
        elif auto == "VALID":
            lo = hi = 0
            o = window_count(n, eff, s[i], f"pooling window {k[i]} stride {s[i]} on axis {2 + i}")
        else:
            lo, hi = pads[i], pads[i + nd]
            span = n + lo + hi - eff
            what = f"pooling window {k[i]} stride {s[i]} on axis {2 + i}"
            o = ceil_count(span, s[i], what) + 1 if ceil else window_count(n + lo + hi, eff, s[i],
                                                                          what)
            if ceil and (o - 1) * s[i] >= n + lo:
                o -= 1
        out.append((k[i], s[i], d[i], lo, hi, o))
    return out


def _windows(x, geom):
    """(offset, view) for every kernel offset: the input values each output
    position sees there (x already padded by each axis's ``lo``, and each
    strided axis to a multiple of its stride). A strided axis of extent L is
    viewed as ``[L/s, s]`` and its s phases copied out once, so every window
    is a plain unit-stride slice of a phase: no gather."""
    import itertools
    nd = len(geom)
    if any(s > 1 for (_, s, *_r) in geom):
        # the stride phases first, in one copy ([N, C, s.., L/s..]): a window
        # read through the [L/s, s] view has an inner stride of s, which the
        # kernel reading nine of them read element by element (a 3x3 stride-2
        # MaxPool on [8,32,34,34]: 0.77 ms on one core)
        shape = list(x.shape[:2])
        for i, (k, s, d, lo, hi, n_out) in enumerate(geom):
            shape += [x.shape[2 + i] // s, s]
        perm = [0, 1] + [3 + 2 * i for i in range(nd)] + [2 + 2 * i for i in range(nd)]
        x = x.reshape(*shape).permute(perm).contiguous()
    else:
        x = x.reshape(*(list(x.shape[:2]) + [1] * nd + list(x.shape[2:])))
    for offs in itertools.product(*(range(g[0]) for g in geom)):
        v = x
        for i, (o, (k, s, d, lo, hi, n_out)) in enumerate(zip(offs, geom)):
            q, r = divmod(o * d, s)
            v = v.slice(2 + i, r, 1).slice(2 + nd + i, q, n_out)
        for i in reversed(range(nd)):
            v = v.squeeze(2 + i)
        yield offs, v


@_op("MaxPool", "AveragePool", "LpPool")
def _pool(cx, node, at, ins):
    x = cx.t(ins[0])
    if node.op_type == "LpPool":  # (sum over the window of |x|**p) ** (1/p), zeros padded
        p = int(at.get("p", 2))
        if p < 1 or not x.dtype.is_float:
            raise Unsupported(f"LpPool with p={p} on {x.dtype.value} data (p >= 1, float data)")
        a = x.abs()
        s = _pool_windows(cx, node, at, a if p == 1 else a.pow(p))[0]
        return [s if p == 1 else s ** (1.0 / p)]
    return _pool_windows(cx, node, at, x)


def _pool_windows(cx, node, at, x):
    spatial = x.shape[2:]
    geom = _pool_geometry(at, spatial)
    is_max = node.op_type == "MaxPool"
    if (is_max and len(spatial) == 2 and x.dtype.is_float
            and not (len(node.output) > 1 and node.output[1])):
        # the fused MaxPool2D (its kernel, or this same decomposition as its
        # recipe): pads such that its floor rule gives ONNX's output extent.
        # A symbolic extent: ONNX's own pads, ``hi + s - 1`` in ceil mode (whose
        # floor is ONNX's ceiling; a window that ONNX drops is refused by the
        # rule); symbolic SAME pads are padded with -inf first (fused params are ints)
        ceil = bool(at.get("ceil_mode", 0))
        pads = [(lo, hi + (s - 1) * ceil if isinstance(n, Sym) else
                 (o - 1) * s + (k - 1) * d + 1 - n - lo)
                for n, (k, s, d, lo, hi, o) in zip(spatial, geom)]
        if any(isinstance(p, Sym) for pair in pads for p in pair):
            x, pads = x.pad([(0, 0), (0, 0)] + pads, value=-math.inf), [(0, 0), (0, 0)]
        return [B.max_pool2d(x, tuple(g[0] for g in geom), tuple(g[1] for g in geom),
                             (pads[0][0], pads[1][0], max(pads[0][1], 0), max(pads[1][1], 0)),
                             tuple(g[2] for g in geom))]
    strided = [(i, n, g[1]) for i, (n, g) in enumerate(zip(spatial, geom))
               if isinstance(n, Sym) and g[1] > 1]
    if strided:
        return [_pool_by_conv(cx, node, at, x, strided[0], geom)]
    widths = [(0, 0), (0, 0)]
    for n, (k, s, d, lo, hi, o) in zip(spatial, geom):
        top = max(hi, (o - 1) * s + (k - 1) * d + 1 - n - lo, 0)
        top += -(n + lo + top) % s     # a multiple of the stride: [L/s, s] views
        widths.append((lo, top))
    if is_max:
        low = -math.inf if x.dtype.is_float else int(np.iinfo(x.dtype.numpy).min)
        xp = x.pad(widths, value=low)
    else:
        xp = x.pad(widths, value=0)
    want_idx = is_max and len(node.output) > 1 and bool(node.output[1])
    order = at.get("storage_order", 0)
    best = idx = None
    for offs, v in _windows(xp, geom):
        if best is None:
            best = v
        elif is_max:
            if want_idx:
                idx = where(v > best, cx.t(_flat_index(x.shape, geom, offs, order)), idx)
            best = maximum(best, v) if not want_idx else where(v > best, v, best)
        else:
            best = best + v
        if want_idx and idx is None:
            idx = cx.t(_flat_index(x.shape, geom, offs, order))
    if is_max:
        return [best, idx] if want_idx else [best]
    if node.op_type == "LpPool":
        return [best]
    include = bool(at.get("count_include_pad", 0))
    count = np.ones((), np.float64)
    for i, (n, (k, s, d, lo, hi, o)) in enumerate(zip(spatial, geom)):
        first, last = (-lo, n + hi) if include else (0, n)
        pos = (np.arange(o) * s - lo)[:, None] + d * np.arange(k)[None, :]
        c = ((pos >= first) & (pos < last)).sum(1).astype(np.float64)
        count = count[..., None] * c
    return [best / cx.t(count[None, None], like=best)]


def _pool_by_conv(cx, node, at, x, first, geom) -> Tensor:
    """A strided AveragePool/LpPool over a symbolic image size (whose
    decomposition reshapes to multiples of the stride): the window sums are a
    depthwise Conv2D with unit weights, whose rule takes the floor quotients;
    an average divides them by the window size (``count_include_pad``) or by
    the same conv of a ones image (the positions inside the image)."""
    i, n, s = first
    if (node.op_type == "MaxPool" or len(geom) != 2 or not x.dtype.is_float
            or at.get("ceil_mode", 0) or not isinstance(x.shape[1], int)):
        raise Unsupported(
            f"{node.op_type} with stride {s} over the symbolic extent {n} (axis {2 + i}): a "
            f"strided pool over a symbolic image size is a 2-D float MaxPool (no Indices "
            f"output) or AveragePool/LpPool (no ceil_mode, static channels); fix the size at "
            f"import (input_shapes={{{min(n.atoms)!r}: 224}})")
    (kh, sh, dh, th, bh, _), (kw, sw, dw, tw, bw, _) = geom
    pads = [(0, 0), (0, 0), (th, bh), (tw, bw)]

    def window_sums(v, channels):
        v = v.pad(pads) if any(p != 0 for pair in pads for p in pair) else v
        w = cx.t(np.ones((channels, 1, kh, kw), x.dtype.numpy))
        return B.conv2d(v, w, stride=(sh, sw), dilation=(dh, dw), groups=channels)
    total = window_sums(x, x.shape[1])
    if node.op_type == "LpPool":
        return total
    if at.get("count_include_pad", 0):
        return total / float(kh * kw)
    image = cx.t(np.ones((1, 1, 1, 1), x.dtype.numpy)).broadcast_to((1, 1) + tuple(x.shape[2:]))
    return total / window_sums(image, 1)


def _flat_index(shape, geom, offs, order=0) -> np.ndarray:
    """ONNX MaxPool Indices for one kernel offset: the flat index into the
    unpadded input of the element each output position sees (spatial axes
    row-major, or column-major for storage_order=1)."""
    n, c = shape[:2]
    flat = np.zeros((), np.int64)
    stride = 1
    for (k, s, d, lo, hi, o), off, ext in zip(geom, offs, shape[2:]):
        pos = np.arange(o) * s + off * d - lo
        if order:
            flat = flat[..., None] + pos * stride
            stride *= ext
        else:
            flat = flat[..., None] * ext + pos
    plane = math.prod(shape[2:])
    base = (np.arange(n * c, dtype=np.int64) * plane).reshape((n, c) + (1,) * len(geom))
    return (base + flat).astype(np.int64)


@_op("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(cx, node, at, ins):
    x = cx.t(ins[0])
    if x.ndim < 3:
        raise Unsupported(f"an input of rank {x.ndim}: it pools the spatial axes of "
                          f"[N, C, spatial...] (rank >= 3)")
    # the spatial axes as one (a view of a row-major x): one reduction kernel
    # over H*W instead of one per axis
    n, c = x.shape[:2]
    flat = x.reshape((n, c, math.prod(x.shape[2:])))
    pooled = flat.mean(2) if node.op_type == "GlobalAveragePool" else flat.max(2)
    return [pooled.reshape((n, c) + (1,) * (x.ndim - 2))]


@_op("RotaryEmbedding")
def _rotary(cx, node, at, ins):
    x, cos, sin = cx.t(ins[0]), ins[1], ins[2]
    pos = ins[3] if len(ins) > 3 else None
    inter = bool(at.get("interleaved", 0))
    rank = x.ndim
    if rank == 3:
        heads = at.get("num_heads") or 0
        if not heads:
            raise Unsupported("a 3-D input needs the num_heads attribute")
        b, s_, hd = x.shape
        x4 = x.reshape((b, s_, heads, hd // heads))  # [B, S, H, D]
    elif rank == 4:
        x4 = x.permute((0, 2, 1, 3))  # [B, H, S, D] -> [B, S, H, D]
    else:
        raise Unsupported(f"rank-{rank} input: only [B, H, S, D] or [B, S, H*D]")
    d = x4.shape[-1]
    r = at.get("rotary_embedding_dim") or d

    def table(c):  # [B, S, r/2] -> [B, S, 1, r] in the rotation's pairing
        c = cx.t(c)
        if pos is not None:
            flat = _index_u32(cx, pos, c.shape[0])
            shp = tuple(pos.shape)
            flat = flat.reshape(-1) if isinstance(flat, np.ndarray) else \
                flat.reshape((math.prod(shp),))
            c = c.index_select(flat, 0).reshape(shp + (c.shape[-1],))
        c = c.unsqueeze(2)
        if inter:
            c = concat([c.unsqueeze(-1), c.unsqueeze(-1)], -1)
            return c.reshape(c.shape[:3] + (r,))
        return concat([c, c], -1)

    rot = x4 if r == d else x4.slice(-1, 0, r)
    y = B.rope(rot, table(cos), table(sin), interleaved=inter)
    if r != d:
        y = concat([y, x4.slice(-1, r, d - r)], -1)
    return [y.reshape(x.shape) if rank == 3 else y.permute((0, 2, 1, 3))]


def _nll(cx, logp, target, weight, at):
    """NegativeLogLikelihoodLoss of log-probabilities ``logp`` [N, C, d...]
    at class indices ``target`` [N, d...]: the picked entries times their
    class weight, 0 at ignore_index; reduced as ONNX's ``reduction`` says
    (mean divides by the summed weights of the kept entries)."""
    reduction = at.get("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise Unsupported(f"attribute reduction={reduction!r} (none, sum or mean)")
    t = cx.t(target)
    ii = at.get("ignore_index")
    keep = None
    if ii is not None:
        keep = t != cx.t(np.asarray(ii), like=t)
        t = where(keep, t, 0)
    idx = t.cast("u32")
    picked = logp.gather(idx.unsqueeze(1), 1).squeeze(1)
    if weight is not None:
        w = cx.t(weight).index_select(idx.reshape((math.prod(t.shape),)), 0).reshape(t.shape)
    elif keep is not None:
        w = keep.cast(logp.dtype)
    else:
        w = None
    if w is not None and keep is not None and weight is not None:
        w = where(keep, w, 0.0)
    loss = -(picked if w is None else picked * w)
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    return total / (w.sum() if w is not None else float(math.prod(t.shape)))


@_op("NegativeLogLikelihoodLoss")
def _nll_loss(cx, node, at, ins):
    weight = ins[2] if len(ins) > 2 else None
    return [_nll(cx, cx.t(ins[0]), ins[1], weight, at)]


@_op("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(cx, node, at, ins):
    """NLL of log_softmax over the class axis (1); outputs loss and log_prob."""
    x = cx.t(ins[0])
    logp = x.log_softmax(1)
    weight = ins[2] if len(ins) > 2 else None
    return [_nll(cx, logp, ins[1], weight, at), logp]


@_op("RMSNormalization")
def _rms_norm(cx, node, at, ins):
    """RmsNormLastDim over the axes from ``axis`` on (flattened into one),
    then ``* scale`` with ONNX broadcasting."""
    x, scale = cx.t(ins[0]), cx.t(ins[1])
    axis = norm_axis(at.get("axis", -1), x.ndim)
    eps = at.get("epsilon", 1e-5)
    d = math.prod(x.shape[axis:])
    if axis == x.ndim - 1 and scale.shape == (d,):
        return [B.rms_norm(x, scale, eps=eps)]
    y = B.rms_norm(x.reshape(x.shape[:axis] + (d,)), eps=eps).reshape(x.shape)
    return [y * scale]


# ---------------------------------------------------------------------------
# activations and tests spelled in primitives (each as the ONNX reference
# formula reads)
# ---------------------------------------------------------------------------
def _softplus_of(x):
    return x.softplus()  # max(x, 0) + log1p(exp(-|x|)): log(exp(x) + 1) rounds to 0 below -17 in f32


@_op("Elu", "Celu", "Selu", "ThresholdedRelu", "Softplus", "Softsign", "Mish", "Swish",
     "Shrink", "Sinh", "Cosh", "Tan")
def _activation(cx, node, at, ins):
    x = cx.t(ins[0])
    if x.dtype.value in ("f16", "bf16"):  # computed in f32, rounded once (as ONNX's reference)
        return [y.cast(x.dtype) for y in _activation(cx, node, at, [x.cast("f32")])]
    op = node.op_type
    if op == "Elu":
        return [where(x < 0, (x.expm1() * at.get("alpha", 1.0)), x)]
    if op == "Celu":
        a = at.get("alpha", 1.0)
        return [maximum(x, 0.0) + minimum((x * (1.0 / a)).expm1() * a, 0.0)]
    if op == "Selu":
        a, g = at.get("alpha", 1.67326319217681884765625), at.get("gamma",
                                                                   1.05070102214813232421875)
        return [where(x <= 0, x.expm1() * a, x) * g]
    if op == "ThresholdedRelu":
        return [where(x > at.get("alpha", 1.0), x, 0.0)]
    if op == "Softplus":
        return [_softplus_of(x)]
    if op == "Softsign":
        return [x / (x.abs() + 1.0)]
    if op == "Mish":
        return [x * _softplus_of(x).tanh()]
    if op == "Swish":
        return [x * (x * at.get("alpha", 1.0)).sigmoid()]
    if op == "Shrink":
        lambd, bias = at.get("lambd", 0.5), at.get("bias", 0.0)
        return [where(x < -lambd, x + bias, where(x > lambd, x - bias, 0.0))]
    if op == "Tan":
        return [x.sin() / x.cos()]
    e, ne = x.exp(), x.neg().exp()  # Sinh, Cosh
    if op == "Cosh":
        return [(e + ne) * 0.5]
    # e - ne cancels for small |x| (sinh(1e-9) would be 0): there, with
    # E = expm1(x), sinh(x) = (E + E / (E + 1)) / 2
    em1 = x.expm1()
    return [where(x.abs() < 1.0, (em1 + em1 / (em1 + 1.0)) * 0.5, (e - ne) * 0.5)]


@_op("PRelu")
def _prelu(cx, node, at, ins):
    x = cx.t(ins[0])
    return [where(x < 0, x * cx.t(ins[1], like=x), x)]


@_op("IsNaN", "IsInf")
def _is_special(cx, node, at, ins):
    x = cx.t(ins[0])
    if node.op_type == "IsNaN":
        return [x != x]
    pos, neg = at.get("detect_positive", 1), at.get("detect_negative", 1)
    tests = ([x == math.inf] if pos else []) + ([x == -math.inf] if neg else [])
    if not tests:
        return [cx.t(np.zeros(x.shape, np.uint8))]
    return [tests[0] if len(tests) == 1 else maximum(tests[0], tests[1])]


@_op("Hardmax")
def _hardmax(cx, node, at, ins):
    """1 at the first maximum along ``axis``, 0 elsewhere."""
    x = cx.t(ins[0])
    axis = norm_axis(at.get("axis", -1), x.ndim)
    top = x.argmax(axis, keepdims=True)
    iota = np.arange(x.shape[axis]).reshape([-1 if i == axis else 1 for i in range(x.ndim)])
    return [(top == cx.t(iota, like=top)).cast(x.dtype)]


@_op("LpNormalization")
def _lp_normalization(cx, node, at, ins):
    x = cx.t(ins[0])
    axis = norm_axis(at.get("axis", -1), x.ndim)
    p = at.get("p", 2)
    if p not in (1, 2):
        raise Unsupported(f"attribute p={p} (ONNX allows 1 or 2)")
    norm = x.abs().sum(axis, keepdims=True) if p == 1 else \
        x.square().sum(axis, keepdims=True).sqrt()
    return [where(norm == 0.0, 0.0, x / norm)]  # a zero norm gives 0, not NaN


@_op("ReduceLogSum", "ReduceLogSumExp")
def _reduce_log_sum(cx, node, at, ins):
    x = cx.t(ins[0])
    axes_in = cx.arr(ins[1], "axes", node) if len(ins) > 1 and ins[1] is not None else None
    axes = reduce_axes(at, axes_in, x.ndim)
    if axes is None:
        return [x.exp().log() if node.op_type == "ReduceLogSumExp" else x.log()]
    keep = bool(at.get("keepdims", 1))
    if any(x.shape[a] == 0 for a in axes):  # the log of an empty sum
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
        return [cx.t(np.full(shape, -np.inf), like=x)]
    if node.op_type == "ReduceLogSum":
        return [x.sum(tuple(axes), keepdims=keep).log()]
    top = x.max(tuple(axes), keepdims=True)  # log(sum(exp(x - max))) + max
    top = where(top.abs() == math.inf, 0.0, top)
    y = (x - top).exp().sum(tuple(axes), keepdims=True).log() + top
    return [y if keep else y.squeeze(tuple(axes))]


@_op("Trilu")
def _trilu(cx, node, at, ins):
    x = cx.t(ins[0])
    k = 0
    if len(ins) > 1 and ins[1] is not None:
        k = int(cx.arr(ins[1], "k", node).reshape(-1)[0])
    n, m = x.shape[-2:]
    diag = np.arange(m)[None, :] - np.arange(n)[:, None]
    keep = diag >= k if at.get("upper", 1) else diag <= k
    if keep.all():
        return [x]
    return [where(cx.t(keep.astype(np.uint8)), x, cx.t(np.zeros((), x.dtype.numpy),
                                                          like=x))]


@_op("DepthToSpace", "SpaceToDepth")
def _depth_space(cx, node, at, ins):
    """The ONNX reshape -> transpose -> reshape of each (DCR or CRD mode)."""
    x = cx.t(ins[0])
    if x.ndim != 4:
        raise Unsupported(f"a rank-{x.ndim} input {list(x.shape)} (NCHW expected)")
    b = at["blocksize"]
    n, c, h, w = x.shape
    dcr = at.get("mode", "DCR") == "DCR"
    if node.op_type == "SpaceToDepth":
        y = x.reshape((n, c, h // b, b, w // b, b))
        y = y.permute((0, 3, 5, 1, 2, 4) if dcr else (0, 1, 3, 5, 2, 4))
        return [y.reshape((n, c * b * b, h // b, w // b))]
    if dcr:
        y = x.reshape((n, b, b, c // (b * b), h, w)).permute((0, 3, 4, 1, 5, 2))
    else:
        y = x.reshape((n, c // (b * b), b, b, h, w)).permute((0, 1, 4, 2, 5, 3))
    return [y.reshape((n, c // (b * b), h * b, w * b))]


@_op("InstanceNormalization", "GroupNormalization")
def _group_norm(cx, node, at, ins):
    """LayerNormLastDim over each (sample, group) with its channels and
    spatial positions flattened (InstanceNormalization: one channel per
    group), then the per-channel scale and bias."""
    x, scale, bias = cx.t(ins[0]), cx.t(ins[1]), cx.t(ins[2])
    if x.ndim < 3:
        raise Unsupported(f"a rank-{x.ndim} input {list(x.shape)} (N, C, spatial... expected)")
    n, c = x.shape[:2]
    groups = c if node.op_type == "InstanceNormalization" else at["num_groups"]
    if c % groups:
        raise Unsupported(f"{c} channels do not split into num_groups={groups}")
    flat = x.reshape((n, groups, math.prod(x.shape[1:]) // groups))
    y = B.layer_norm(flat, eps=at.get("epsilon", 1e-5)).reshape(x.shape)
    per_channel = (c,) + (1,) * (x.ndim - 2)
    return [y * scale.reshape(per_channel) + bias.reshape(per_channel)]


# ---------------------------------------------------------------------------
# Resize: separable, one axis at a time, as ONNX's reference does
# ---------------------------------------------------------------------------
_RESIZE_COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                  "asymmetric", "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_coeffs(at, mode, ratio, scale):
    """The interpolation weights of the taps around one source coordinate
    (``ratio`` in (0, 1]: its distance past the tap left of it)."""
    if mode == "nearest":
        if ratio == 1:
            return np.array([0.0, 1.0])
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
              "floor": False, "ceil": True}[at.get("nearest_mode", "round_prefer_floor")]
        return np.array([0.0, 1.0]) if up else np.array([1.0, 0.0])
    antialias = bool(at.get("antialias", 0)) and scale < 1
    if mode == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        start = int(np.floor(-1 / scale) + 1)
        c = np.clip(1 - np.abs((np.arange(start, 2 - start) - ratio) * scale), 0, 1)
        return c / c.sum()
    a = float(at.get("cubic_coeff_a", -0.75))
    if not antialias:
        r, s = ratio, 1 - ratio
        return np.array([((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                         ((a + 2) * r - (a + 3)) * r * r + 1,
                         ((a + 2) * s - (a + 3)) * s * s + 1,
                         ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a])
    start = int(np.floor(-2 / scale) + 1)
    x = np.abs(scale * (np.arange(start, 2 - start) - ratio))
    c = np.where(x <= 1, (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1,
                 np.where(x < 2, a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a, 0.0))
    return c / c.sum()


def _resize_taps(at, mode, n_in, n_out, scale, roi):
    """Per output position along one axis: source indices [n_out, taps]
    (edge-clamped), their weights, and where tf_crop_and_resize
    extrapolates (or None)."""
    ctm = at.get("coordinate_transformation_mode", "half_pixel")
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in
    outside = None
    if ctm == "align_corners":
        x = np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        lo, hi = roi
        x = np.full(n_out, (hi - lo) * (n_in - 1) / 2) if width == 1 else \
            y * (hi - lo) * (n_in - 1) / (width - 1)
        x = x + lo * (n_in - 1)
        outside = (x < 0) | (x > n_in - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    else:  # half_pixel_symmetric
        x = n_in / 2 * (1 - n_out / width) + (y + 0.5) / scale - 0.5
    left = np.floor(x)
    ratio = np.where(x == left, 1.0, x - left)
    coeffs = np.stack([_resize_coeffs(at, mode, float(r), scale) for r in ratio])
    n = coeffs.shape[1]
    pad = (n + 1) // 2  # the n nearest taps, ties to the lower index
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    if n % 2 == 0:
        first = p + np.where(xp == p, -(n // 2), 1 - n // 2)
    else:
        first = p + np.where(xp - p <= 0.5, -((n - 1) // 2), 1 - (n - 1) // 2)
    idx = first[:, None] + np.arange(n) - pad
    if at.get("exclude_outside", 0):
        coeffs = np.where((idx < 0) | (idx >= n_in), 0.0, coeffs)
        total = coeffs.sum(-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, n_in - 1), coeffs, outside


@_op("Resize")
def _resize(cx, node, at, ins):
    """Per resized axis, in order: nearest is one IndexSelect; linear and
    cubic the weighted sum of one IndexSelect per tap (weights and indices
    computed at import from the static shapes); tf_crop_and_resize's
    outside positions the extrapolation value."""
    ins = list(ins) + [None] * (4 - len(ins))
    late = [n for n, v in zip(node.input[1:], ins[1:]) if isinstance(v, Tensor)]
    if late:
        raise Unsupported(f"its inputs must be constants known at import; input(s) {late} "
                          f"are computed at run time (roi, scales and sizes fix the output "
                          f"shape and the interpolation weights)")
    roi, scales, sizes = (None if v is None or v.size == 0 else v.reshape(-1) for v in ins[1:])
    return [_resized(cx, cx.t(ins[0]), at, roi, scales, sizes)]


@_op("Upsample")
def _upsample(cx, node, at, ins):
    """Upsample-9 (deprecated since opset 10): Resize with asymmetric
    coordinates, nearest rounding down."""
    if len(ins) < 2:
        raise Unsupported("Upsample without a scales input (opset 7's scales attribute: "
                          "convert the model to opset 9 or newer)")
    scales = cx.arr(ins[1], node.input[1], node).reshape(-1)
    mode = at.get("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise Unsupported(f"attribute mode={mode!r} (nearest or linear)")
    return [_resized(cx, cx.t(ins[0]), {"mode": mode, "nearest_mode": "floor",
                                    "coordinate_transformation_mode": "asymmetric"},
                     None, scales, None)]


def _resized(cx, x, at, roi, scales, sizes):
    mode = at.get("mode", "nearest")
    ctm = at.get("coordinate_transformation_mode", "half_pixel")
    policy = at.get("keep_aspect_ratio_policy", "stretch")
    if mode not in ("nearest", "linear", "cubic"):
        raise Unsupported(f"attribute mode={mode!r} (nearest, linear or cubic)")
    if ctm not in _RESIZE_COORDS:
        raise Unsupported(f"attribute coordinate_transformation_mode={ctm!r} "
                          f"(one of {', '.join(_RESIZE_COORDS)})")
    if at.get("nearest_mode", "round_prefer_floor") not in _NEAREST_MODES:
        raise Unsupported(f"attribute nearest_mode={at['nearest_mode']!r} "
                          f"(one of {', '.join(_NEAREST_MODES)})")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise Unsupported(f"attribute keep_aspect_ratio_policy={policy!r} "
                          f"(stretch, not_larger or not_smaller)")
    if mode != "nearest" and not x.dtype.is_float:
        raise Unsupported(f"mode={mode!r} on {x.dtype.value} data (only float data is "
                          f"interpolated; nearest takes any type)")
    if any(isinstance(d, Sym) for d in x.shape):
        raise Unsupported("Resize of a tensor with symbolic extents (static shapes only)")
    axes = [norm_axis(int(a), x.ndim) for a in at.get("axes", range(x.ndim))]
    if (scales is None) == (sizes is None):
        raise Unsupported("exactly one of scales and sizes must be given")
    given = scales if sizes is None else sizes
    if len(given) != len(axes) or (roi is not None and len(roi) != 2 * len(axes)):
        raise Unsupported(f"{'scales' if sizes is None else 'sizes'} has {len(given)} values "
                          f"and roi {0 if roi is None else len(roi)} for {len(axes)} axes")
    if sizes is None:
        scale = [float(s) for s in scales]
        if min(scale) <= 0:
            raise Unsupported(f"scales {scales.tolist()} must be positive")
        out = [int(s * x.shape[a]) for s, a in zip(scale, axes)]
    else:
        scale = [int(s) / x.shape[a] for s, a in zip(sizes, axes)]
        out = [int(s) for s in sizes]
        if policy != "stretch":
            s = min(scale) if policy == "not_larger" else max(scale)
            scale = [s] * len(axes)
            out = [int(s * x.shape[a] + 0.5) for a in axes]
    if ctm == "tf_crop_and_resize" and roi is None:
        raise Unsupported("coordinate_transformation_mode='tf_crop_and_resize' needs roi")
    low = x.dtype.value in ("f16", "bf16")  # computed in f32, rounded once
    y = x.cast("f32") if low and mode != "nearest" else x
    for i, a in enumerate(axes):
        r = None if roi is None else (float(roi[i]), float(roi[i + len(axes)]))
        if math.isclose(scale[i], 1.0) and out[i] == y.shape[a] and \
                (r is None or (math.isclose(r[0], 0.0) and math.isclose(r[1], 1.0))):
            continue
        if out[i] == 0:
            y = y.slice(a, 0, 0)  # ONNX's reference: an empty axis, nothing to interpolate
            continue
        idx, coeffs, outside = _resize_taps(at, mode, y.shape[a], out[i], scale[i], r)
        along = [-1 if d == a else 1 for d in range(y.ndim)]
        if mode == "nearest":
            z = y.index_select(idx[np.arange(out[i]), coeffs.argmax(-1)].astype(np.uint32), a)
        else:
            z = None
            for t in range(idx.shape[1]):
                if not coeffs[:, t].any():
                    continue
                term = y.index_select(idx[:, t].astype(np.uint32), a) * \
                    cx.t(coeffs[:, t].reshape(along), like=y)
                z = term if z is None else z + term
        if outside is not None and outside.any():
            z = where(cx.t(outside.reshape(along).astype(np.uint8)),
                      float(at.get("extrapolation_value", 0.0)), z)
        y = z
    return y.cast(x.dtype) if y.dtype != x.dtype else y


# ---------------------------------------------------------------------------
# ScatterND / ScatterElements (constant indices; ScatterElements also run-time ones)
# ---------------------------------------------------------------------------
_SCATTER = {"none": lambda old, new: new, "add": lambda old, new: old + new,
            "mul": lambda old, new: old * new, "max": maximum, "min": minimum}


def _scatter_rows(cx, data, rows, upd, reduction):
    """``data`` [R, ...] with row ``rows[m]`` combined with ``upd[m]``, in
    update order: the k-th write to a row is one masked step (an IndexSelect
    of the updates and a Where), so duplicates reduce as ONNX applies them."""
    if reduction not in _SCATTER:
        raise Unsupported(f"attribute reduction={reduction!r} (none, add, mul, max or min)")
    nth = np.zeros(rows.shape, np.int64)  # how many earlier updates hit the same row
    seen = {}
    for m, r in enumerate(rows.tolist()):
        nth[m] = seen.get(r, 0)
        seen[r] = nth[m] + 1
    lead = (data.shape[0],) + (1,) * (data.ndim - 1)
    for k in range(int(nth.max()) + 1 if rows.size else 0):
        src = np.zeros(data.shape[0], np.uint32)
        hit = np.zeros(data.shape[0], np.uint8)
        src[rows[nth == k]] = np.flatnonzero(nth == k)
        hit[rows[nth == k]] = 1
        new = upd.index_select(src, 0)
        data = where(cx.t(hit.reshape(lead)), _SCATTER[reduction](data, new), data)
    return data


def _constant_indices(cx, node, idx, extent):
    i = cx.arr(idx, node.input[1], node).astype(np.int64)
    if i.size and ((i < -extent).any() or (i >= extent).any()):
        raise Unsupported(f"constant indices {i.min()}..{i.max()} out of range for extent "
                          f"{extent}")
    return np.where(i < 0, i + extent, i)


@_op("ScatterND")
def _scatter_nd(cx, node, at, ins):
    x, upd = cx.t(ins[0]), cx.t(ins[2])
    idx = cx.arr(ins[1], node.input[1], node)
    k = idx.shape[-1] if idx.ndim else 0
    if idx.ndim == 0 or not 1 <= k <= x.ndim or \
            tuple(upd.shape) != tuple(idx.shape[:-1]) + tuple(x.shape[k:]):
        raise Unsupported(f"indices of shape {list(idx.shape)} and updates of shape "
                          f"{list(upd.shape)} do not scatter into data of shape {list(x.shape)}")
    dims = np.asarray(x.shape[:k], np.int64)
    i = _constant_indices(cx, node, idx, dims)
    rows = (i * [math.prod(x.shape[j + 1:k]) for j in range(k)]).sum(-1).reshape(-1)
    rest = tuple(x.shape[k:])
    y = _scatter_rows(cx, x.reshape((math.prod(x.shape[:k]),) + rest), rows,
                      upd.reshape((rows.size,) + rest), at.get("reduction", "none"))
    return [y.reshape(x.shape)]


#: the most elements of the [.., J, P, ..] index-position comparison a run-time
#: ScatterElements with reduction none may build (256 MiB of u8)
_SCATTER_COMPARE_MAX = 1 << 28


def _scatter_elements_runtime(cx, x, idx, upd, axis, reduction):
    """Run-time indices. ``add`` is one ScatterAdd. ``none`` writes at each
    position the last update aimed at it (onnxruntime's order for duplicates):
    every index along the axis is compared with every position, the greatest
    update ordinal matching a position picks the update by a Gather, and a
    ScatterAdd of ones counts the hits (its run-time index check raises on an
    index out of range, as onnxruntime does). The comparison is J x P per
    column: meant for the small index arrays exporters write (pack_padded_sequence's
    inverse permutation), refused above ``_SCATTER_COMPARE_MAX`` elements.
    None where run-time indices are not supported (mul, max, min; none with
    indices covering part of data): the caller asks for constant ones."""
    if reduction not in ("none", "add") or reduction == "none" and any(
            a != b for k, (a, b) in enumerate(zip(idx.shape, x.shape)) if k != axis):
        return None
    i = cx.t(_index_u32(cx, idx, x.shape[axis]))
    if reduction == "add":
        return x.scatter_add(axis, i, upd)
    n, p = i.shape[axis], x.shape[axis]
    if math.prod(i.shape) * p > _SCATTER_COMPARE_MAX:
        raise Unsupported(f"run-time indices of shape {list(i.shape)} into an axis of {p}: "
                          f"the {n} x {p} index comparison per column exceeds "
                          f"{_SCATTER_COMPARE_MAX} elements (make the indices constant)")
    along = [1] * (x.ndim + 1)
    along[axis + 1] = p
    pos = cx.t(np.arange(p, dtype=np.uint32).reshape(along))
    along[axis + 1], along[axis] = 1, n
    ordinal = cx.t(np.arange(n, dtype=np.int32).reshape(along))
    last = where(i.unsqueeze(axis + 1) == pos, ordinal, -1).max(axis)
    ones = cx.t(np.ones((), np.int32)).broadcast_to(i.shape)
    hits = cx.t(np.zeros((), np.int32)).broadcast_to(x.shape).scatter_add(axis, i, ones)
    return where(hits > 0, upd.gather(maximum(last, 0).cast("u32"), axis), x)


@_op("ScatterElements", "Scatter")
def _scatter_elements(cx, node, at, ins):
    x, upd = cx.t(ins[0]), cx.t(ins[2])
    axis = norm_axis(at.get("axis", 0), x.ndim)
    if not isinstance(ins[1], np.ndarray):
        y = _scatter_elements_runtime(cx, x, cx.t(ins[1]), upd, axis, at.get("reduction", "none"))
        if y is not None:
            return [y]
    idx = cx.arr(ins[1], node.input[1], node)
    if idx.shape != tuple(upd.shape) or idx.ndim != x.ndim or \
            any(a > b for j, (a, b) in enumerate(zip(idx.shape, x.shape)) if j != axis):
        raise Unsupported(f"indices of shape {list(idx.shape)} and updates of shape "
                          f"{list(upd.shape)} do not scatter into data of shape {list(x.shape)}")
    i = _constant_indices(cx, node, idx, x.shape[axis])
    pos = list(np.indices(idx.shape, dtype=np.int64))
    pos[axis] = i
    rows = np.ravel_multi_index(pos, x.shape).reshape(-1) if idx.size else np.zeros(0, np.int64)
    y = _scatter_rows(cx, x.reshape((math.prod(x.shape),)), rows,
                      upd.reshape((idx.size,)), at.get("reduction", "none"))
    return [y.reshape(x.shape)]


# ---------------------------------------------------------------------------
# bit operations spelled in integer arithmetic (exact, wrapping)
# ---------------------------------------------------------------------------
@_op("BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor")
def _bitwise(cx, node, at, ins):
    method = {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or",
              "BitwiseXor": "bitwise_xor"}.get(node.op_type)
    if method is None:  # BitShift
        direction = at.get("direction", "")
        if direction not in ("LEFT", "RIGHT"):
            raise Unsupported(f"attribute direction={direction!r} (LEFT or RIGHT)")
        method = "shift_left" if direction == "LEFT" else "shift_right"
    return [getattr(cx.t(ins[0]), method)(cx.t(ins[1]))]


@_op("BitwiseNot")
def _bitwise_not(cx, node, at, ins):
    return [cx.t(ins[0]).bitwise_not()]


# ---------------------------------------------------------------------------
# small ops spelled through primitives
# ---------------------------------------------------------------------------
@_op("SwiGLU")
def _swiglu(cx, node, at, ins):
    """Swish(a, alpha) * b, as ONNX's function body."""
    a, b = cx.t(ins[0]), cx.t(ins[1])
    if a.dtype.value in ("f16", "bf16"):  # computed in f32, rounded once (as Swish)
        return [y.cast(a.dtype) for y in _swiglu(cx, node, at, [a.cast("f32"), b.cast("f32")])]
    return [a * (a * at.get("alpha", 1.0)).sigmoid() * b]


@_op("EyeLike")
def _eye_like(cx, node, at, ins):
    """A constant: it depends on the input's static shape only."""
    from onnx import helper
    x = ins[0]
    shape = tuple(x.shape)
    if len(shape) != 2 or any(isinstance(d, Sym) for d in shape):
        raise Unsupported(f"EyeLike of shape {list(shape)} (static 2-D only)")
    dt = helper.tensor_dtype_to_np_dtype(at["dtype"]) if "dtype" in at else \
        (x.dtype if isinstance(x, np.ndarray) else x.dtype.numpy)
    return [np.eye(*shape, k=int(at.get("k", 0)), dtype=dt)]


@_op("CumProd")
def _cumprod(cx, node, at, ins):
    """A log-step scan (Hillis-Steele): ceil(log2 n) products of the running
    result with itself shifted by 1, 2, 4, ... (ones shifted in); exclusive
    shifts the input by one first, reverse flips around it."""
    x = cx.t(ins[0])
    axis = norm_axis(int(cx.arr(ins[1], node.input[1], node).reshape(-1)[0]), x.ndim)
    n = x.shape[axis]
    if isinstance(n, Sym):
        raise Unsupported("CumProd over a symbolic axis (static extents only)")

    def shifted(y, k):  # y moved k along the axis, ones in front
        ones = [(k, 0) if d == axis else (0, 0) for d in range(y.ndim)]
        return y.slice(axis, 0, n - k).pad(ones, value=1)
    rev = bool(at.get("reverse", 0))
    y = x.flip(axis) if rev else x
    if at.get("exclusive", 0) and n:
        y = shifted(y, 1)
    k = 1
    while k < n:
        y = y * shifted(y, k)
        k *= 2
    return [y.flip(axis) if rev else y]


@_op("CenterCropPad")
def _center_crop_pad(cx, node, at, ins):
    x = cx.t(ins[0])
    shape = [int(s) for s in cx.arr(ins[1], node.input[1], node).reshape(-1)]
    axes = [norm_axis(int(a), x.ndim) for a in at.get("axes", range(x.ndim))]
    if len(shape) != len(axes):
        raise Unsupported(f"shape has {len(shape)} values for {len(axes)} axes")
    widths = [(0, 0)] * x.ndim
    for a, s in zip(axes, shape):
        n = x.shape[a]
        if s < n:  # crop: the extra element (odd difference) comes off the end
            x = x.slice(a, (n - s) // 2, s)
        elif s > n:
            widths[a] = ((s - n) // 2, s - n - (s - n) // 2)
    return [x.pad(widths) if any(w != (0, 0) for w in widths) else x]


@_op("Compress")
def _compress(cx, node, at, ins):
    """A constant condition: one IndexSelect of the selected positions."""
    x = cx.t(ins[0])
    cond = cx.arr(ins[1], node.input[1], node).reshape(-1).astype(bool)
    if "axis" not in at:
        x, axis = x.reshape((math.prod(x.shape),)), 0
    else:
        axis = norm_axis(int(at["axis"]), x.ndim)
    if cond.size > x.shape[axis]:
        raise Unsupported(f"condition has {cond.size} values for an axis of extent "
                          f"{x.shape[axis]}")
    return [x.index_select(np.flatnonzero(cond).astype(np.uint32), axis)]


@_op("ReverseSequence")
def _reverse_sequence(cx, node, at, ins):
    """Constant sequence_lens: one GatherElements along the time axis."""
    x = cx.t(ins[0])
    lens = cx.arr(ins[1], node.input[1], node).reshape(-1).astype(np.int64)
    b, t = int(at.get("batch_axis", 1)), int(at.get("time_axis", 0))
    if {b, t} != {0, 1} or len(lens) != x.shape[b] or (lens > x.shape[t]).any() or \
            (lens < 0).any():
        raise Unsupported(f"batch_axis={b}, time_axis={t} and sequence_lens {lens.tolist()} "
                          f"for data of shape {list(x.shape)}")
    time = np.arange(x.shape[t])[:, None]
    idx = np.where(time < lens[None, :], lens[None, :] - 1 - time, time)  # [time, batch]
    idx = idx if t == 0 else idx.T
    idx = np.broadcast_to(idx.reshape(idx.shape + (1,) * (x.ndim - 2)), x.shape)
    return [x.gather(cx.t(idx.astype(np.uint32)), t)]


def _along(v, x, axis, block):
    """A per-tensor, per-axis or blocked scale/zero point broadcastable to x."""
    if v.ndim == 0 or (v.ndim == 1 and v.shape[0] == 1 and not block):
        return v.reshape(())
    if block:
        v = v.index_select(np.repeat(np.arange(v.shape[axis]), block)[:x.shape[axis]]
                           .astype(np.uint32), axis)
        return v
    return v.reshape(tuple(-1 if d == axis else 1 for d in range(x.ndim)))


def _quant_params(cx, node, at, x, ins):
    block = int(at.get("block_size", 0))
    scale = cx.t(ins[1])
    per_tensor = scale.ndim == 0 or (scale.ndim == 1 and scale.shape[0] == 1 and not block)
    axis = None if per_tensor else norm_axis(int(at.get("axis", 1)), x.ndim)
    zp = None if len(ins) < 3 or ins[2] is None else ins[2]
    if block and scale.ndim != x.ndim:
        raise Unsupported(f"block_size={block} with a scale of rank {scale.ndim} for data of "
                          f"rank {x.ndim}")
    return axis, block, scale, zp


@_op("DequantizeLinear")
def _dequantize(cx, node, at, ins):
    """(x - zero_point) * scale in the scale's type (f16/bf16 computed in f32);
    narrow-type data (float8, float4, int4, int2) is decoded first (exact)."""
    from ._types import Narrow, narrow_constant
    narrow = isinstance(ins[0], Narrow)
    x = ins[0].decode(cx.g) if narrow else cx.t(ins[0])
    if x.dtype.is_float and not narrow:
        raise Unsupported(f"DequantizeLinear of {x.dtype.value} data (integer and narrow "
                          f"float types only)")
    axis, block, scale, zp = _quant_params(cx, node, at, x, ins)
    if isinstance(zp, Narrow):
        zp = zp.decode(cx.g)
    elif isinstance(zp, np.ndarray) and narrow_constant(zp) is not None:
        zp = narrow_constant(zp)
    out = scale.dtype
    s = scale if scale.dtype.value in ("f32", "f64") else scale.cast("f32")
    y = x.cast(s.dtype)
    if zp is not None:
        y = y - _along(cx.t(zp).cast(s.dtype), x, axis, block)
    y = y * _along(s, x, axis, block)
    return [y if y.dtype == out else y.cast(out)]


@_op("QuantizeLinear")
def _quantize(cx, node, at, ins):
    """saturate(round_half_even(x / scale) + zero_point), computed in f32
    (f64 for f64 data). Narrow outputs as ONNX's reference: int4/uint4/
    int2/uint2 clamp to their range (an i8/u8 carrier); the float8 formats
    are x / scale encoded (the zero point unused), float4 x / scale + zero
    point encoded."""
    from onnx import helper
    from ._types import (ENCODABLE, NARROW, NARROW_INT_RANGES, Narrow, dtype_of, encode,
                         narrow_constant)
    x = cx.t(ins[0])
    axis, block, scale, zp = _quant_params(cx, node, at, x, ins)
    narrow = None
    if isinstance(zp, Narrow):
        narrow, zp = zp.elem_type, zp.decode(cx.g)
    elif isinstance(zp, np.ndarray) and narrow_constant(zp) is not None:
        narrow, zp = helper.np_dtype_to_tensor_dtype(zp.dtype), narrow_constant(zp)
    elif zp is None and int(at.get("output_dtype", 0)) in NARROW:
        narrow = int(at["output_dtype"])
    if narrow is not None and narrow not in ENCODABLE and narrow not in NARROW_INT_RANGES:
        from onnx import TensorProto
        raise Unsupported(f"QuantizeLinear to {TensorProto.DataType.Name(narrow)} (fuelc "
                          f"produces the float8 formats, FLOAT4E2M1 and the 2- and 4-bit "
                          f"integers)")
    if narrow is not None:
        out = None
    elif zp is not None:
        out = cx.t(zp).dtype
    else:
        out = dtype_of(int(at.get("output_dtype", 0)) or 2)  # UINT8 by default
    if out is not None and out.is_float:
        raise Unsupported(f"QuantizeLinear to {out.value} (integer and narrow float output "
                          f"types only)")
    work = "f64" if x.dtype.value == "f64" else "f32"
    y = (x.cast(work) if x.dtype.value != work else x) / _along(
        scale.cast(work) if scale.dtype.value != work else scale, x, axis, block)
    if narrow is not None and narrow not in NARROW_INT_RANGES:
        from onnx import TensorProto
        if narrow == TensorProto.FLOAT4E2M1 and zp is not None:
            y = y + _along(cx.t(zp).cast(work), x, axis, block)
        return [Narrow(encode(cx.g, y, narrow, bool(at.get("saturate", 1))), narrow)]
    y = y.round()
    if zp is not None:
        y = y + _along(cx.t(zp).cast(work), x, axis, block)
    lo, hi = NARROW_INT_RANGES[narrow] if narrow is not None else (
        np.iinfo(out.numpy).min, np.iinfo(out.numpy).max)
    y = y.clamp(float(lo), float(hi))
    if narrow is not None:
        from ._types import carrier_dtype
        return [Narrow(y.cast(carrier_dtype(narrow)), narrow)]
    return [y.cast(out)]


@_op("Asinh", "Acosh", "Atanh")
def _inverse_hyperbolic(cx, node, at, ins):
    """The log formulas (asinh odd-symmetric, so negative x loses nothing to
    cancellation); f16/bf16 computed in f32 and rounded once."""
    x = cx.t(ins[0])
    if x.dtype.value in ("f16", "bf16"):
        return [y.cast(x.dtype) for y in _inverse_hyperbolic(cx, node, at, [x.cast("f32")])]
    if not x.dtype.is_float:
        raise Unsupported(f"{node.op_type} of {x.dtype.value} values (float types only)")
    if node.op_type == "Asinh":
        a = x.abs()
        return [(a + (a * a + 1.0).sqrt()).log() * x.sign()]
    if node.op_type == "Acosh":
        return [(x + (x * x - 1.0).sqrt()).log()]
    return [((1.0 + x) / (1.0 - x)).log() * 0.5]


@_op("MeanVarianceNormalization")
def _mvn(cx, node, at, ins):
    """ONNX's function body: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)."""
    x = cx.t(ins[0])
    axes = tuple(norm_axis(int(a), x.ndim) for a in at.get("axes", [0, 2, 3]))
    mean = x.mean(axes, keepdims=True)
    std = ((x * x).mean(axes, keepdims=True) - mean * mean).sqrt()
    return [(x - mean) / (std + 1e-9)]


@_op("LRN")
def _lrn(cx, node, at, ins):
    """x / (bias + alpha / size * sum of x^2 over the channel window) ** beta,
    the window sum as ``size`` slices of the channel-padded squares."""
    x = cx.t(ins[0])
    size = int(at["size"])
    alpha, beta, bias = at.get("alpha", 1e-4), at.get("beta", 0.75), at.get("bias", 1.0)
    c = x.shape[1]
    lo = (size - 1) // 2
    sq = (x * x).pad([(0, 0), (lo, size - 1 - lo)] + [(0, 0)] * (x.ndim - 2))
    total = sq.slice(1, 0, c)
    for k in range(1, size):
        total = total + sq.slice(1, k, c)
    return [x / (total * (alpha / size) + bias) ** float(beta)]


@_op("DynamicQuantizeLinear")
def _dynamic_quantize(cx, node, at, ins):
    """ONNX's uint8 formula: scale (max(0, max x) - min(0, min x)) / 255 (1/255
    when that is 0), zero point rint(clamp(-min / scale)), y saturated."""
    x = cx.t(ins[0])
    if x.dtype.value != "f32":
        raise Unsupported(f"DynamicQuantizeLinear of {x.dtype.value} data (f32 only)")
    axes = tuple(range(x.ndim))
    hi, lo = maximum(x.max(axes), 0.0), minimum(x.min(axes), 0.0)
    span = hi - lo
    scale = where(span == 0, 1.0, span) / 255.0
    zp = (0.0 - lo / scale).clamp(0.0, 255.0).round()
    y = ((x / scale).round() + zp).clamp(0.0, 255.0).cast("u8")
    return [y, scale, zp.cast("u8")]


def _shifted_f64(cx, v, zp, rows):
    """v - zero_point as f64 (exact integer products in a matmul); a 1-D zero
    point of a per-row (``rows``) or per-column quantization broadcast so."""
    y = cx.t(v).cast("f64")
    if zp is None:
        return y
    z = cx.t(zp).cast("f64")
    if z.ndim == 1 and z.shape[0] > 1:
        z = z.reshape((-1, 1) if rows else (1, -1))
    return y - z


@_op("MatMulInteger")
def _matmul_integer(cx, node, at, ins):
    """(a - a_zp) @ (b - b_zp) in f64 (exact below 2**53), as i32."""
    ins = list(ins) + [None] * (4 - len(ins))
    a = _shifted_f64(cx, ins[0], ins[2], rows=True)
    b = _shifted_f64(cx, ins[1], ins[3], rows=False)
    return [_matmul(cx, a, b).cast("i32")]


def _requantize(cx, y, zy, out):
    """The f64 real value ``y`` quantized: plus the zero point ``zy`` (whose
    dtype is then the output's, else ``out``), rounded half to even and
    saturated to the output integer type."""
    if zy is not None:
        zy = cx.t(zy)
        out = zy.dtype
        y = y + zy.cast("f64")
    info = np.iinfo(out.numpy)
    return y.round().clamp(float(info.min), float(info.max)).cast(out)


@_op("QLinearMatMul")
def _qlinear_matmul(cx, node, at, ins):
    """saturate(rint((a - a_zp) @ (b - b_zp) * a_scale * b_scale / y_scale + y_zp)),
    the integer product exact in f64, as ONNX's reference."""
    a, sa, za, b, sb, zb, sy, zy = ins
    acc = _matmul(cx, _shifted_f64(cx, a, za, rows=True), _shifted_f64(cx, b, zb, rows=False))

    def scale(s, rows):
        s = cx.t(s).cast("f64")
        return s.reshape((-1, 1) if rows else (1, -1)) if s.ndim == 1 and s.shape[0] > 1 else s
    y = acc * (scale(sa, True) * scale(sb, False) / scale(sy, False))
    return [_requantize(cx, y, zy, cx.t(a).dtype)]


def _integer_conv(cx, node, at, x, xz, w, wz, bias=None):
    """conv(x - x_zp, w - w_zp) in f64 (exact integer sums below 2**53); a
    1-D w_zp is per output channel."""
    xs = _shifted_f64(cx, x, xz, rows=False)
    ws = cx.t(w).cast("f64")
    if wz is not None:
        z = cx.t(wz).cast("f64")
        ws = ws - (z.reshape((-1,) + (1,) * (ws.ndim - 1)) if z.ndim == 1 and z.shape[0] > 1
                   else z)
    return BUILD["Conv"](cx, node, at, [xs, ws, None if bias is None else
                                        cx.t(bias).cast("f64")])[0]


@_op("ConvInteger")
def _conv_integer(cx, node, at, ins):
    ins = list(ins) + [None] * (4 - len(ins))
    return [_integer_conv(cx, node, at, ins[0], ins[2], ins[1], ins[3]).cast("i32")]


@_op("QLinearConv")
def _qlinear_conv(cx, node, at, ins):
    """saturate(rint(conv(x - x_zp, w - w_zp) + B) * x_scale * w_scale / y_scale
    + y_zp), as ONNX's reference (w_scale per output channel or scalar)."""
    ins = list(ins) + [None] * (9 - len(ins))
    x, sx, zx, w, sw, zw, sy, zy, bias = ins
    acc = _integer_conv(cx, node, at, x, zx, w, zw, bias)
    sw = cx.t(sw).cast("f64")
    if sw.ndim == 1 and sw.shape[0] > 1:
        sw = sw.reshape((1, -1) + (1,) * (acc.ndim - 2))
    y = acc * (cx.t(sx).cast("f64") * sw / cx.t(sy).cast("f64"))
    return [_requantize(cx, y, zy, cx.t(x).dtype)]


@_op("CausalConvWithState")
def _causal_conv_with_state(cx, node, at, ins):
    """The depthwise causal conv1d over [past_state, input] as k shifted
    slices times the weight's taps (+ bias), then SiLU if asked; the present
    state is the last k - 1 steps. f16/bf16: the conv in f32 rounded to the
    input type, the activation in f32 (as ONNX's reference)."""
    ins = list(ins) + [None] * (4 - len(ins))
    x, w = cx.t(ins[0]), cx.t(ins[1])
    act = at.get("activation", "none")
    if act not in ("none", "silu", "swish"):
        raise Unsupported(f"attribute activation={act!r} (none, silu or swish)")
    if x.ndim != 3 or w.ndim != 3 or w.shape[:2] != (x.shape[1], 1):
        raise Unsupported(f"input {list(x.shape)} and weight {list(w.shape)} (expected "
                          f"[batch, channels, length] and [channels, 1, k])")
    k, n = w.shape[2], x.shape[2]
    past = x.pad([(0, 0), (0, 0), (k - 1, 0)]) if ins[3] is None else \
        concat([cx.t(ins[3]), x], 2)
    low = x.dtype.value in ("f16", "bf16")
    p, wf = (past.cast("f32"), w.cast("f32")) if low else (past, w)
    y = None
    for j in range(k):
        term = p.slice(2, j, n) * wf.slice(2, j, 1).reshape((-1, 1))
        y = term if y is None else y + term
    if ins[2] is not None:
        b = cx.t(ins[2])
        y = y + (b.cast("f32") if low else b).reshape((-1, 1))
    if low:
        y = y.cast(x.dtype).cast("f32") if act != "none" else y.cast(x.dtype)
    if act != "none":
        y = y * y.sigmoid()
        y = y.cast(x.dtype) if low else y
    return [y, past.slice(2, n, k - 1)]


# ---------------------------------------------------------------------------
# DFT / STFT: products with constant cosine and sine matrices
# ---------------------------------------------------------------------------
def _dft_last(cx, xr, xi, length, inverse, onesided):
    """The DFT of (xr + i xi) along the last axis as matmuls with [n, k]
    cosine/sine matrices built at import (the callers compute in f64, as
    ONNX's reference does):
    ``length`` pads or truncates the signal; onesided keeps the first
    length // 2 + 1 bins (forward) or takes them as a Hermitian spectrum and
    returns the real signal (inverse; yi is None)."""
    n_in = xr.shape[-1]
    if inverse and onesided:  # irfft: bins 0..length//2, the others mirrored
        used = min(n_in, length // 2 + 1)
        k, t = np.arange(used)[:, None], np.arange(length)[None, :]
        w = np.where((k == 0) | (2 * k == length), 1.0, 2.0) / length
    else:
        used = min(n_in, length)
        k = np.arange(used)[:, None]
        t = np.arange(length // 2 + 1 if onesided else length)[None, :]
        w = 1.0 / length if inverse else 1.0
    theta = 2 * np.pi * ((k * t) % length) / length
    c, s = cx.t(w * np.cos(theta), like=xr), cx.t(w * np.sin(theta) * (1 if inverse else -1),
                                                   like=xr)
    if used < n_in:
        xr = xr.slice(xr.ndim - 1, 0, used)
        xi = None if xi is None else xi.slice(xi.ndim - 1, 0, used)
    yr, yi = _matmul(cx, xr, c), _matmul(cx, xr, s)
    if xi is not None:
        yr, yi = yr - _matmul(cx, xi, s), yi + _matmul(cx, xi, c)
    return yr, (None if inverse and onesided else yi)


def _complex_parts(x):
    """[..., 1 or 2] -> (real, imaginary or None)."""
    if x.shape[-1] not in (1, 2):
        raise Unsupported(f"the last axis of {list(x.shape)} must be 1 (real) or 2 (complex)")
    last = x.ndim - 1
    re = x.slice(last, 0, 1).squeeze(last)
    return re, (x.slice(last, 1, 1).squeeze(last) if x.shape[-1] == 2 else None)


@_op("DFT")
def _dft(cx, node, at, ins):
    x = cx.t(ins[0])
    if not x.dtype.is_float:
        raise Unsupported(f"DFT of {x.dtype.value} data (float types only)")
    ins = list(ins) + [None] * (3 - len(ins))
    axis = at.get("axis", 1)  # opset 17: an attribute; 20: an input, -2 by default
    if cx.opset >= 20:
        axis = -2 if ins[2] is None else int(cx.arr(ins[2], node.input[2], node).reshape(-1)[0])
    axis = norm_axis(axis, x.ndim)
    if axis == x.ndim - 1:
        raise Unsupported(f"axis {axis} is the real/imaginary axis")
    inverse, onesided = bool(at.get("inverse", 0)), bool(at.get("onesided", 0))
    if ins[1] is not None:
        length = int(cx.arr(ins[1], node.input[1], node).reshape(-1)[0])
    else:
        length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    re, im = _complex_parts(x.cast("f64") if x.dtype.value != "f64" else x)  # as the reference
    perm = [d for d in range(re.ndim) if d != axis] + [axis]
    back = list(np.argsort(perm))
    yr, yi = _dft_last(cx, re.permute(perm), None if im is None else im.permute(perm),
                       length, inverse, onesided)
    parts = [yr] if yi is None else [yr, yi]
    y = concat([p.permute(back).unsqueeze(p.ndim) for p in parts], x.ndim - 1) \
        if len(parts) == 2 else parts[0].permute(back).unsqueeze(x.ndim - 1)
    return [y if y.dtype == x.dtype else y.cast(x.dtype)]


@_op("STFT")
def _stft(cx, node, at, ins):
    """Frames as one IndexSelect of the signal (constant frame_step and
    frame_length), times the window, then the DFT of each frame."""
    ins = list(ins) + [None] * (4 - len(ins))
    x = cx.t(ins[0])
    step = int(cx.arr(ins[1], node.input[1], node).reshape(-1)[0])
    window = None if ins[2] is None else cx.t(ins[2])
    if ins[3] is not None:
        flen = int(cx.arr(ins[3], node.input[3], node).reshape(-1)[0])
    elif window is not None:
        flen = window.shape[0]
    else:
        raise Unsupported("neither a window nor frame_length gives the frame length")
    n = x.shape[1]
    if step < 1 or not 0 < flen <= n:
        raise Unsupported(f"frame_step={step} and frame_length={flen} for a signal of {n}")
    frames = (n - flen) // step + 1
    idx = (np.arange(frames)[:, None] * step + np.arange(flen)[None, :]).reshape(-1)
    if not x.dtype.is_float:
        raise Unsupported(f"STFT of {x.dtype.value} data (float types only)")
    re, im = _complex_parts(x.cast("f64") if x.dtype.value != "f64" else x)
    onesided = bool(at.get("onesided", 1)) and im is None
    parts = []
    for p in (re, im):
        if p is None:
            continue
        f = p.index_select(idx.astype(np.uint32), 1).reshape((x.shape[0], frames, flen))
        parts.append(f * window.cast(f.dtype) if window is not None else f)
    yr, yi = _dft_last(cx, parts[0], parts[1] if len(parts) > 1 else None, flen, False,
                       onesided)
    y = concat([yr.unsqueeze(3), yi.unsqueeze(3)], 3)
    return [y if y.dtype == x.dtype else y.cast(x.dtype)]


# ---------------------------------------------------------------------------
# GridSample: run-time coordinates, one GatherElements per tap combination
# ---------------------------------------------------------------------------
def _gs_reflect(x, lo, hi):
    """ONNX's reference reflection of x into [lo, hi] (by the near border,
    repeatedly), elementwise."""
    rng = hi - lo
    below, above = lo - x, x - hi
    out = x
    for d, near, far, side in ((below, lo, hi, x < lo), (above, hi, lo, x > hi)):
        n = (d * (1.0 / rng)).floor()
        r = d - n * rng
        odd = (n % 2.0) > 0.5
        inside = near + r if near == lo else near - r  # an even count: from the near border
        other = far - r if near == lo else far + r
        out = where(side, where(odd, other, inside), out)
    return out


def _gs_cubic(t):
    a = -0.75
    return [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
            ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a]


@_op("GridSample")
def _grid_sample(cx, node, at, ins):
    """ONNX's reference, vectorized: the grid denormalized per spatial axis,
    out-of-border coordinates clamped or reflected, then per tap (1 nearest,
    2 linear, 4 cubic per axis) the index fixed by the padding mode and the
    pixel fetched with one GatherElements on the flattened spatial axes,
    weighted by the product of the per-axis coefficients."""
    import itertools
    x, grid = cx.t(ins[0]), cx.t(ins[1])
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(at.get("mode", "linear"),
                                                         at.get("mode", "linear"))
    pad = at.get("padding_mode", "zeros")
    align = bool(at.get("align_corners", 0))
    if mode not in ("nearest", "linear", "cubic"):
        raise Unsupported(f"attribute mode={at['mode']!r} (nearest, linear or cubic)")
    if pad not in ("zeros", "border", "reflection"):
        raise Unsupported(f"attribute padding_mode={pad!r} (zeros, border or reflection)")
    if not x.dtype.is_float:
        raise Unsupported(f"GridSample of {x.dtype.value} data (float types only)")
    nb, ch, dims = x.shape[0], x.shape[1], tuple(x.shape[2:])
    nd = len(dims)
    if grid.ndim != nd + 2 or grid.shape[-1] != nd or grid.shape[0] != nb:
        raise Unsupported(f"grid of shape {list(grid.shape)} for data of shape {list(x.shape)}")
    out = tuple(grid.shape[1:-1])
    npos = math.prod(out)
    work = "f64" if x.dtype.value == "f64" else "f32"
    g = grid.cast(work) if grid.dtype.value != work else grid
    xs = (x.cast(work) if x.dtype.value != work else x).reshape((nb, ch, math.prod(dims)))
    taps = []  # per axis: [(index tensor, weight or None, valid mask or None)]
    for i, n in enumerate(dims):
        c = g.slice(g.ndim - 1, nd - 1 - i, 1).reshape((nb, npos))
        lo, hi = (0.0, n - 1.0) if align else (-0.5, n - 0.5)
        v = (c + 1.0) * ((n - 1) / 2.0) if align else ((c + 1.0) * n - 1.0) * 0.5
        if mode == "nearest":
            v = v.round()
        if pad == "border":
            v = where((v < lo) + (v > hi) > 0, v.clamp(0.0, n - 1.0), v)
        elif pad == "reflection":
            v = _gs_reflect(v, lo, hi)
        if mode == "nearest":
            base, ks = v, [(0, None)]
        else:
            base = v.floor()
            t = v - base
            ks = list(zip((0, 1), (1.0 - t, t))) if mode == "linear" else \
                list(zip((-1, 0, 1, 2), _gs_cubic(t)))
        axis = []
        for k, w in ks:
            j = base + float(k) if k else base
            valid = None
            if pad == "zeros":
                valid = (j >= 0.0) * (j <= n - 1.0)
                j = j.clamp(0.0, n - 1.0)
            elif pad == "border":
                j = j.clamp(0.0, n - 1.0)
            else:
                j = _gs_reflect(j, lo, hi).clamp(0.0, n - 1.0)
            axis.append((j.cast("i64"), w, valid))
        taps.append(axis)
    y = None
    for combo in itertools.product(*taps):
        flat, weight, valid = None, None, None
        for i, (j, w, ok) in enumerate(combo):
            stride = math.prod(dims[i + 1:])
            term = j * stride if stride != 1 else j
            flat = term if flat is None else flat + term
            weight = w if weight is None else (weight if w is None else weight * w)
            valid = ok if valid is None else (valid if ok is None else valid * ok)
        idx = flat.cast("u32").unsqueeze(1).broadcast_to((nb, ch, npos))
        v = xs.gather(idx, 2)
        if valid is not None:
            v = where(valid.unsqueeze(1), v, 0.0)
        if weight is not None:
            v = v * weight.unsqueeze(1)
        y = v if y is None else y + v
    y = y.reshape((nb, ch) + out)
    return [y if y.dtype == x.dtype else y.cast(x.dtype)]


@_op("AffineGrid")
def _affine_grid(cx, node, at, ins):
    """The constant base grid [positions, (x, y[, z], 1)] (normalized
    coordinates at import) times theta transposed: one batched MatMul."""
    theta = cx.t(ins[0])
    size = [int(s) for s in cx.arr(ins[1], node.input[1], node).reshape(-1)]
    nd = len(size) - 2
    if nd not in (2, 3) or tuple(theta.shape) != (size[0], nd, nd + 1) or \
            not theta.dtype.is_float:
        raise Unsupported(f"theta {list(theta.shape)} ({theta.dtype.value}) and size {size} "
                          f"(float theta [N, 2, 3] or [N, 3, 4] for a 2-D or 3-D size)")
    spatial = size[2:]
    if at.get("align_corners", 0):
        axes = [np.linspace(-1, 1, n) if n > 1 else np.zeros(1) for n in spatial]
    else:
        axes = [(2 * np.arange(n) + 1) / n - 1 for n in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")  # [D,] H, W
    base = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size)], -1)
    b = cx.t(np.broadcast_to(base, (size[0],) + base.shape).copy(), like=theta)
    grid = matmul(b, theta.permute((0, 2, 1)))
    return [grid.reshape(tuple([size[0]] + spatial + [nd]))]


@_op("Col2Im")
def _col2im(cx, node, at, ins):
    """Constant image and block shapes: each column element's image position
    computed at import; one IndexAdd sums them (padding lands in a spare
    slot that is dropped)."""
    import itertools
    x = cx.t(ins[0])
    image = [int(v) for v in cx.arr(ins[1], node.input[1], node).reshape(-1)]
    block = [int(v) for v in cx.arr(ins[2], node.input[2], node).reshape(-1)]
    nd = len(image)
    dil = list(at.get("dilations") or [1] * nd)
    pads = list(at.get("pads") or [0] * 2 * nd)
    strides = list(at.get("strides") or [1] * nd)
    counts = [(image[d] + pads[d] + pads[d + nd] - (dil[d] * (block[d] - 1) + 1)) // strides[d]
              + 1 for d in range(nd)]
    kb, nl = math.prod(block), math.prod(counts)
    if x.ndim != 3 or x.shape[1] % kb or x.shape[2] != nl or len(block) != nd:
        raise Unsupported(f"input {list(x.shape)} with image_shape {image} and block_shape "
                          f"{block} (expected [N, C * {kb}, {nl}])")
    c, npix = x.shape[1] // kb, math.prod(image)
    target = np.empty((c, kb, nl), np.int64)
    for ki, k in enumerate(itertools.product(*map(range, block))):
        for li, loc in enumerate(itertools.product(*map(range, counts))):
            pos = [loc[d] * strides[d] + k[d] * dil[d] - pads[d] for d in range(nd)]
            inside = all(0 <= p < n for p, n in zip(pos, image))
            target[:, ki, li] = np.arange(c) * npix + np.ravel_multi_index(pos, image) \
                if inside else c * npix
    acc = cx.t(np.zeros((x.shape[0], c * npix + 1), x.dtype.numpy), like=x)
    y = acc.index_add(1, target.reshape(-1).astype(np.uint32),
                      x.reshape((x.shape[0], c * kb * nl)))
    return [y.slice(1, 0, c * npix).reshape(tuple([x.shape[0], c] + image))]


@_op("MaxUnpool")
def _max_unpool(cx, node, at, ins):
    """Zeros with x's values at the constant flat indices (MaxPool's Indices)
    into the inferred shape, zero-padded at the end to output_shape (as
    ONNX's reference)."""
    x = cx.t(ins[0])
    idx = cx.arr(ins[1], node.input[1], node).astype(np.int64).reshape(-1)
    k = list(at["kernel_shape"])
    nd = len(k)
    s = list(at.get("strides") or [1] * nd)
    p = list(at.get("pads") or [0] * 2 * nd)
    shape = list(x.shape[:2]) + [(n - 1) * s[i] + k[i] - p[i] - p[i + nd]
                                 for i, n in enumerate(x.shape[2:])]
    want = shape
    if len(ins) > 2 and ins[2] is not None:
        want = [int(v) for v in cx.arr(ins[2], node.input[2], node).reshape(-1)]
        if len(want) != len(shape) or any(w < n for w, n in zip(want, shape)):
            raise Unsupported(f"output_shape {want} is smaller than the unpooled {shape}")
    total = math.prod(shape)
    if idx.size != math.prod(x.shape) or (idx.size and (idx.min() < 0 or idx.max() >= total)):
        raise Unsupported(f"indices ({idx.size} values) do not address an output of shape "
                          f"{shape}")
    zeros = cx.t(np.zeros(total, x.dtype.numpy), like=x)
    y = _scatter_rows(cx, zeros, idx, x.reshape((idx.size,)), "none").reshape(tuple(shape))
    if want != shape:
        y = y.pad([(0, w - n) for w, n in zip(want, shape)])
    return [y]


from . import _control, _rnn  # noqa: E402,F401  (register Scan, Loop, If; RNN, GRU, LSTM, LinearAttention)
