"""ATen op -> fuelc builder calls, one handler per overload (or family).

A handler is ``fn(cx, a) -> value or tuple of values``: ``a`` holds the op's
arguments by their schema names (``a.self``, ``a.other``, ``a.dim``, ...;
defaults filled in), each a graph ``Tensor``, a numpy array (a constant
known at import), a python value or a list of these; ``a.node`` is the FX
node, whose ``meta["val"]`` gives the result's dtype and shape. Operands
are cast to the dtype torch computes in (fuelc has no implicit promotion).
Where an ONNX handler has the same semantics it is called through ``_onnx``.
``Unsupported`` names what cannot be imported.
"""
from __future__ import annotations

import math
import types

import numpy as np

from runtime.dtype import DType

from ...graph import Tensor, concat, matmul, maximum, minimum, where
from ...registry import builders as B
from ..onnx import _ops as onnx_ops
from ..onnx import fold_batch_norm
from ..onnx._fold import Unsupported, norm_axis
from ._dtypes import dtype_of, from_numpy, to_numpy

OPS = {}

#: fold at import only while the result has at most this many elements more
#: than the constants it is computed from (an expanded mask stays a broadcast)
FOLD_GROWTH = 1 << 16


def _op(*names):
    def reg(fn):
        for n in names:
            OPS["aten." + n] = fn
        return fn
    return reg


# ---------------------------------------------------------------------------
# arguments, folding, results
# ---------------------------------------------------------------------------
def bind(cx, node):
    """The node's arguments by schema name, FX nodes replaced by their values."""
    def value(v):
        if isinstance(v, (list, tuple)):
            return [value(x) for x in v]
        if hasattr(v, "op") and hasattr(v, "meta"):  # an FX node
            return cx.values[v]
        return v
    a = types.SimpleNamespace(node=node, raw={})
    for i, arg in enumerate(node.target._schema.arguments):
        if i < len(node.args) and not arg.kwarg_only:
            v = node.args[i]
        elif arg.name in node.kwargs:
            v = node.kwargs[arg.name]
        else:
            v = arg.default_value if arg.has_default_value() else None
        a.raw[arg.name] = v
        setattr(a, arg.name, value(v))
    return a


def _meta(v):
    return v.meta.get("val") if hasattr(v, "meta") else v


def fold(cx, node):
    """The node's value computed by torch at import when every input is a
    constant (None otherwise, or when the result would grow by more than
    FOLD_GROWTH elements and a handler can build it instead)."""
    import torch
    from . import _Unavailable
    ins = node.all_input_nodes
    if any(not isinstance(cx.values[n], np.ndarray) for n in ins):
        return None
    if not isinstance(node.target, torch._ops.OpOverload):
        return None
    if torch.Tag.nondeterministic_seeded in node.target.tags:
        raise Unsupported("a random op (its values differ per call); fuelc compiles "
                          "deterministic programs")
    vals = [_meta(node)] if not isinstance(_meta(node), (tuple, list)) else list(_meta(node))
    out_n = sum(v.numel() for v in vals if isinstance(v, torch.Tensor))
    in_n = sum(cx.values[n].size for n in ins)
    from . import _op_name
    if out_n > in_n + FOLD_GROWTH and _op_name(node.target) in OPS:
        return None

    def arg(v):
        if isinstance(v, (list, tuple)):
            return type(v)(arg(x) for x in v)
        if hasattr(v, "op") and hasattr(v, "meta"):
            return from_numpy(np.array(cx.values[v]), _meta(v).dtype)
        return v
    try:
        out = node.target(*arg(node.args), **{k: arg(v) for k, v in node.kwargs.items()})
    except Exception as e:  # torch's own errors on these constants
        raise Unsupported(f"folding it on its constant inputs with torch failed: "
                          f"{type(e).__name__}: {e}") from None

    def back(r):
        if isinstance(r, torch.Tensor):
            return to_numpy(r).copy()
        if isinstance(r, (tuple, list)):
            return tuple(back(x) for x in r)
        return r if r is not None else _Unavailable("a None output")
    return back(out)


def check_result(cx, node, out):
    """``out`` with each tensor cast to the dtype torch's result has; a
    shape that differs from torch's is refused (an importer bug)."""
    import torch
    meta = _meta(node)
    if isinstance(out, (tuple, list)):
        metas = list(meta) if isinstance(meta, (tuple, list)) else [meta]
        return tuple(_check_one(o, m) for o, m in zip(out, metas))
    return _check_one(out, meta if isinstance(meta, torch.Tensor) else None)


def _check_one(out, meta):
    if not isinstance(out, Tensor) or meta is None:
        return out
    if tuple(out.shape) != tuple(meta.shape):
        raise Unsupported(f"the importer computed shape {list(out.shape)} where torch has "
                          f"{list(meta.shape)} (an importer bug: please report it)")
    dt = dtype_of(meta.dtype)
    return out if out.dtype == dt else out.cast(dt)


def out_dtype(a):
    m = _meta(a.node)
    return dtype_of((m[0] if isinstance(m, (tuple, list)) else m).dtype)


def _as(cx, v, dt):
    """Operand ``v`` in dtype ``dt``: tensors cast, constants converted (a
    size-1 constant becomes a python scalar), python numbers kept."""
    if isinstance(v, Tensor):
        return v if v.dtype == dt else v.cast(dt)
    if isinstance(v, np.ndarray):
        if v.size == 1 and v.ndim == 0:
            return v.item()
        return cx.t(v) if DType.from_numpy(v.dtype) == dt else cx.g.constant(v, dtype=dt)
    return v


def _tensor(cx, v, dt):
    v = _as(cx, v, dt)
    return v if isinstance(v, Tensor) else cx.g.constant(np.asarray(v), dtype=dt)


def _compute_dtype(a, x="self", y="other"):
    """The dtype torch computes a binary op in (its result type)."""
    import torch
    return dtype_of(torch.result_type(_meta(a.raw[x]), _meta(a.raw[y])))


def _scalar(v):
    return v.item() if isinstance(v, np.ndarray) and v.size == 1 else v


def _shim(op_type, n_out=1):
    """An ONNX-node stand-in for calling an ONNX handler."""
    return types.SimpleNamespace(op_type=op_type, output=["y"] * n_out, name=op_type)


def _ints(v):
    return [int(x) for x in (v if isinstance(v, (list, tuple)) else [v])]


# ---------------------------------------------------------------------------
# element-wise
# ---------------------------------------------------------------------------
def _arith(kind):
    def h(cx, a):
        dt = out_dtype(a)
        x, y = _as(cx, a.self, dt), _as(cx, a.other, dt)
        alpha = getattr(a, "alpha", 1)
        if alpha != 1:
            y = y * alpha
        if not isinstance(x, Tensor):  # scalar op tensor
            x, y = (y, x) if kind in ("add", "mul") else (_tensor(cx, x, dt), y)
        return {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y,
                "div": lambda: x / y}[kind]()
    return h


for _k in ("add", "sub", "mul", "div"):
    _op(f"{_k}.Tensor", f"{_k}.Scalar")(_arith(_k))


@_op("rsub.Scalar", "rsub.Tensor")
def _rsub(cx, a):
    dt = out_dtype(a)
    x = _tensor(cx, a.self, dt)
    return _as(cx, a.other, dt) - (x * a.alpha if a.alpha != 1 else x)


@_op("div.Tensor_mode", "div.Scalar_mode")
def _div_mode(cx, a):
    dt = out_dtype(a)
    x, y = _tensor(cx, a.self, dt), _as(cx, a.other, dt)
    if not dt.is_float:  # fuelc's integer Div truncates; x - x % y is a multiple of y
        return (x - x % y) / y if a.rounding_mode == "floor" else x / y
    q = x / y
    if a.rounding_mode == "floor":
        return q.floor()
    if a.rounding_mode == "trunc":
        return where(q < 0, q.ceil(), q.floor())
    return q


@_op("remainder.Tensor", "remainder.Scalar")
def _remainder(cx, a):
    """The remainder with the divisor's sign (fuelc's Rem, as PyTorch's)."""
    dt = out_dtype(a)
    return _tensor(cx, a.self, dt) % _as(cx, a.other, dt)


@_op("pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar")
def _pow(cx, a):
    dt = out_dtype(a)
    x, p = _tensor(cx, a.self, dt), _as(cx, a.exponent, dt)
    if isinstance(p, float) and p.is_integer() and 0 <= p <= 8:
        p = int(p)  # x ** 2.0 is x * x, exactly
    return x ** p


@_op("maximum.default", "minimum.default")
def _max_min(cx, a):
    dt = out_dtype(a)
    fn = maximum if a.node.target.__name__.startswith("maximum") else minimum
    return fn(_tensor(cx, a.self, dt), _as(cx, a.other, dt))


_COMPARE = {"eq": "__eq__", "ne": "__ne__", "lt": "__lt__", "le": "__le__", "gt": "__gt__",
            "ge": "__ge__"}


def _compare(method):
    def h(cx, a):
        dt = _compute_dtype(a)
        return getattr(_tensor(cx, a.self, dt), method)(_as(cx, a.other, dt))
    return h


for _k, _m in _COMPARE.items():
    _op(f"{_k}.Tensor", f"{_k}.Scalar")(_compare(_m))


@_op("where.self")
def _where(cx, a):
    dt = out_dtype(a)
    return where(_tensor(cx, a.condition, dtype_of(_meta(a.raw["condition"]).dtype)),
                 _as(cx, a.self, dt), _as(cx, a.other, dt))


@_op("logical_not.default", "bitwise_not.default")
def _not(cx, a):
    import torch
    if a.node.target.__name__.startswith("bitwise") and _meta(a.raw["self"]).dtype != torch.bool:
        raise Unsupported("bitwise_not of an integer tensor (only of booleans)")
    return cx.t(a.self) == 0


@_op("logical_and.default", "logical_or.default", "logical_xor.default",
     "bitwise_and.Tensor", "bitwise_or.Tensor", "bitwise_xor.Tensor")
def _logic(cx, a):
    import torch
    name = a.node.target.__name__
    if name.startswith("bitwise") and (_meta(a.raw["self"]).dtype != torch.bool or
                                       _meta(a.raw["other"]).dtype != torch.bool):
        raise Unsupported(f"{name.split('.')[0]} of integer tensors (only of booleans)")
    x, y = cx.t(a.self) != 0, cx.t(a.other) != 0
    kind = name.split(".")[0].split("_")[-1]
    return x * y if kind == "and" else maximum(x, y) if kind == "or" else x != y


_UNARY = {"neg": "neg", "abs": "abs", "exp": "exp", "log": "log", "sqrt": "sqrt",
          "rsqrt": "rsqrt", "reciprocal": "recip", "sin": "sin", "cos": "cos", "tanh": "tanh",
          "sigmoid": "sigmoid", "relu": "relu", "erf": "erf", "floor": "floor", "ceil": "ceil",
          "round": "round", "sign": "sign", "silu": "silu"}


def _unary(method):
    def h(cx, a):
        return getattr(_tensor(cx, a.self, out_dtype(a)), method)()
    return h


for _k, _m in _UNARY.items():
    _op(f"{_k}.default")(_unary(_m))


@_op("log1p.default", "expm1.default", "log2.default", "exp2.default")
def _log_exp_variants(cx, a):
    x = _tensor(cx, a.self, out_dtype(a))
    name = a.node.target.__name__.split(".")[0]
    return {"log1p": x.log1p, "expm1": x.expm1,
            "log2": lambda: x.log() * (1 / math.log(2)),
            "exp2": lambda: 2.0 ** x}[name]()  # pow: exp(x * ln 2) is off by |x| ulps


@_op("gelu.default")
def _gelu(cx, a):
    return cx.t(a.self).gelu(a.approximate)


@_op("hardtanh.default")
def _hardtanh(cx, a):
    return cx.t(a.self).clamp(a.min_val, a.max_val)


@_op("clamp.default")
def _clamp(cx, a):
    return _tensor(cx, a.self, out_dtype(a)).clamp(_scalar(a.min), _scalar(a.max))


@_op("clamp.Tensor")
def _clamp_tensor(cx, a):
    dt = out_dtype(a)
    x = _tensor(cx, a.self, dt)
    if a.min is not None:
        x = maximum(x, _as(cx, a.min, dt))
    if a.max is not None:
        x = minimum(x, _as(cx, a.max, dt))
    return x


@_op("leaky_relu.default")
def _leaky_relu(cx, a):
    x = cx.t(a.self)
    return where(x >= 0, x, x * a.negative_slope)


@_op("elu.default")
def _elu(cx, a):
    x = cx.t(a.self)
    neg = (x * a.input_scale).expm1()
    return where(x > 0, x * a.scale, neg * (a.alpha * a.scale))


# ---------------------------------------------------------------------------
# reductions, softmax
# ---------------------------------------------------------------------------
def _axes(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return None
    return tuple(norm_axis(d, x.ndim) for d in _ints(dim))


def _reducer(kind):
    def h(cx, a):
        x = _tensor(cx, a.self, out_dtype(a))
        keep = bool(getattr(a, "keepdim", False))
        return getattr(x, kind)(_axes(x, getattr(a, "dim", None)), keepdims=keep)
    return h


_op("sum.dim_IntList", "sum.default")(_reducer("sum"))
_op("mean.dim", "mean.default")(_reducer("mean"))
_op("amax.default", "max.default")(_reducer("max"))
_op("amin.default", "min.default")(_reducer("min"))


@_op("max.dim", "min.dim")
def _max_dim(cx, a):
    x = cx.t(a.self)
    kind = "max" if a.node.target.__name__.startswith("max") else "min"
    d = norm_axis(a.dim, x.ndim)
    return (getattr(x, kind)(d, keepdims=a.keepdim),
            getattr(x, f"arg{kind}")(d, keepdims=a.keepdim).cast("i64"))


@_op("argmax.default", "argmin.default")
def _argmax(cx, a):
    x = cx.t(a.self)
    fn = x.argmax if a.node.target.__name__.startswith("argmax") else x.argmin
    d = None if a.dim is None else norm_axis(a.dim, x.ndim)
    return fn(d, keepdims=a.keepdim).cast("i64")


@_op("var.correction")
def _var(cx, a):
    x = cx.t(a.self)
    axes = _axes(x, a.dim) or tuple(range(x.ndim))
    n = math.prod(x.shape[i] for i in axes)
    dev = (x - x.mean(axes, keepdims=True)).square().sum(axes, keepdims=bool(a.keepdim))
    c = 1 if a.correction is None else _scalar(a.correction)
    return dev * (1.0 / max(n - c, 0)) if n - c > 0 else dev / 0.0


@_op("cumsum.default")
def _cumsum(cx, a):
    x = _tensor(cx, a.self, out_dtype(a))
    return x.cumsum(norm_axis(a.dim, x.ndim))


@_op("_softmax.default", "_log_softmax.default")
def _softmax(cx, a):
    x = cx.t(a.self)
    d = norm_axis(a.dim, x.ndim)
    return x.log_softmax(d) if "log" in a.node.target.__name__ else x.softmax(d)


# ---------------------------------------------------------------------------
# matmul, linear, convolution, normalization, attention
# ---------------------------------------------------------------------------
@_op("mm.default", "bmm.default")
def _mm(cx, a):
    return matmul(cx.t(a.self), cx.t(a.mat2))


@_op("addmm.default")
def _addmm(cx, a):
    if a.alpha == 1 and a.beta == 1 and isinstance(a.mat2, np.ndarray):
        return onnx_ops.linear_or_add(cx, a.mat1, a.mat2, a.self)
    y = matmul(cx.t(a.mat1), cx.t(a.mat2))
    y = y * a.alpha if a.alpha != 1 else y
    return y + (cx.t(a.self) * a.beta if a.beta != 1 else cx.t(a.self))


@_op("linear.default")
def _linear(cx, a):
    """``x @ w.T + b``: a constant weight is transposed once at import (its
    constant is ``<parameter>.T``), so the product reads it row-major; a
    weight used elsewhere too is one constant read through a transpose."""
    x = cx.t(a.input)
    wt = cx.transposed(a.weight) if isinstance(a.weight, np.ndarray) else None
    w = cx.t(a.weight).transpose() if wt is None else cx.t(wt)
    lone = x.ndim == 1
    x = x.unsqueeze(0) if lone else x
    bias = None if a.bias is None else cx.t(a.bias)
    if bias is not None and bias.ndim != 1:
        y = B.linear(x, w) + bias
    else:
        y = B.linear(x, w, bias)
    return y.squeeze(0) if lone else y


@_op("conv1d.default", "conv2d.default", "convolution.default")
def _conv(cx, a):
    x, w = cx.t(a.input), cx.t(a.weight)
    bias = None if a.bias is None else cx.t(a.bias)
    if x.ndim not in (3, 4) or w.ndim != x.ndim:
        raise Unsupported(f"a rank-{x.ndim} input {list(x.shape)}: only 1-D and 2-D "
                          f"convolution (NCL / NCHW input, unbatched input unsupported)")
    nd = x.ndim - 2
    if isinstance(a.padding, str):
        raise Unsupported(f"padding={a.padding!r} (give explicit padding)")

    def per_axis(v):
        v = _ints(v)
        return v * nd if len(v) == 1 else v
    s, p, d = per_axis(a.stride), per_axis(a.padding), per_axis(a.dilation)
    one_d = nd == 1
    if one_d:
        x, w = x.unsqueeze(2), w.unsqueeze(2)
        s, p, d = [1] + s, [0] + p, [1] + d
    if getattr(a, "transposed", False):
        op_ = per_axis(a.output_padding)
        y = B.conv_transpose2d(x, w, bias, stride=tuple(s), padding=tuple(p),
                               output_padding=tuple([0] + op_ if one_d else op_),
                               dilation=tuple(d), groups=a.groups)
    else:
        y = B.conv2d(x, w, bias, stride=tuple(s), padding=tuple(p), groups=a.groups,
                     dilation=tuple(d))
    return y.squeeze(2) if one_d else y


_BN = "_native_batch_norm_legit_no_training.default"
_CONVS = ("aten.conv1d.default", "aten.conv2d.default", "aten.convolution.default")


def conv_bn_pairs(cx) -> dict:
    """Inference batch norms with constant parameters whose input is a
    convolution with a constant weight used only by them: bn node -> conv
    node (the normalization is folded into the convolution's weights, as
    the ONNX importer does)."""
    from . import _op_name
    out = {}
    for n in cx.ep.graph.nodes:
        if n.op != "call_function" or _op_name(n.target) != "aten." + _BN:
            continue
        conv = n.args[0]
        if getattr(conv, "op", None) != "call_function" or _op_name(conv.target) not in _CONVS \
                or len(conv.users) != 1:
            continue
        ca = bind(cx, conv) if all(x in cx.values for x in conv.all_input_nodes) else None
        if ca is None or getattr(ca, "transposed", False) or \
                not isinstance(ca.weight, np.ndarray) or ca.weight.dtype.kind != "f" or \
                not (ca.bias is None or isinstance(ca.bias, np.ndarray)):
            continue
        params = [cx.values.get(x) for x in n.args[1:5]]
        if all(p is None or isinstance(p, np.ndarray) for p in params) and \
                all(isinstance(p, np.ndarray) for p in params[2:]):
            out[n] = conv
    return out


@_op(_BN)
def _batch_norm(cx, a):
    from . import _Unavailable
    stats = _Unavailable("the saved mean/rstd outputs of batch norm (training only)")
    x = a.input
    c = _meta(a.raw["input"]).shape[1]
    weight = np.ones(c, np.float32) if a.weight is None else a.weight
    bias = np.zeros(c, np.float32) if a.bias is None else a.bias
    conv = cx.bn_conv.get(a.node)
    if conv is not None:
        ca = bind(cx, conv)
        w2, b2 = fold_batch_norm(ca.weight, ca.bias, weight, bias, a.running_mean,
                                 a.running_var, a.eps)
        name = cx._const_names.get(id(ca.weight), "conv")
        cx._const_names[id(w2)], cx._const_names[id(b2)] = name + "::bn_folded", \
            name + "::bn_folded_bias"
        ca.weight, ca.bias = w2, b2
        return _conv(cx, ca), stats, stats
    y, = onnx_ops._batch_norm(cx, _shim("BatchNormalization"), {"epsilon": a.eps},
                              [x, weight, bias, a.running_mean, a.running_var])
    return y, stats, stats


@_op("layer_norm.default")
def _layer_norm(cx, a):
    x = cx.t(a.input)
    axis = x.ndim - len(_ints(a.normalized_shape))
    w = a.weight
    if w is None and axis != x.ndim - 1:
        w = np.ones(x.shape[axis:], np.float32)
    y, = onnx_ops._layer_norm(cx, _shim("LayerNormalization"), {"axis": axis,
                                                                 "epsilon": a.eps},
                              [x, w, a.bias])
    return y


@_op("rms_norm.default")
def _rms_norm(cx, a):
    import torch
    x = cx.t(a.input)
    eps = a.eps if a.eps is not None else torch.finfo(_meta(a.raw["input"]).dtype).eps
    axis = x.ndim - len(_ints(a.normalized_shape))
    if a.weight is None:
        d = math.prod(x.shape[axis:])
        return B.rms_norm(x.reshape(x.shape[:axis] + (d,)), eps=eps).reshape(x.shape)
    y, = onnx_ops._rms_norm(cx, _shim("RMSNormalization"), {"axis": axis, "epsilon": eps},
                            [x, a.weight])
    return y


@_op("scaled_dot_product_attention.default")
def _sdpa(cx, a):
    """No mask: the fused FlashAttn (causal only for as many queries as
    keys: torch aligns the causal mask top-left); with a mask, the ONNX
    importer's spelled-out softmax(q k^T * scale + mask) v."""
    if a.dropout_p:
        raise Unsupported(f"dropout_p={a.dropout_p} (inference attention has no dropout)")
    q, k, v = cx.t(a.query), cx.t(a.key), cx.t(a.value)
    if q.ndim != 4:
        raise Unsupported(f"rank-{q.ndim} query {list(q.shape)}: [B, H, S, D] expected")
    if q.shape[1] != k.shape[1] and not a.enable_gqa:
        raise Unsupported("query and key head counts differ without enable_gqa=True")
    scale = a.scale if a.scale is not None else 1.0 / math.sqrt(q.shape[-1])
    causal = bool(a.is_causal)
    if a.attn_mask is None and v.shape[-1] == q.shape[-1] and \
            (not causal or q.shape[2] == k.shape[2]):
        return B.flash_attn(q, k, v, causal=causal, scale=scale)
    return onnx_ops._attention_spelled(cx, q, k, v, a.attn_mask, causal, 0, scale, None, -1,
                                       -1)


# ---------------------------------------------------------------------------
# shape and data movement
# ---------------------------------------------------------------------------
@_op("view.default", "_unsafe_view.default", "reshape.default")
def _view(cx, a):
    return cx.t(a.self).reshape(tuple(_ints(a.size if hasattr(a, "size") else a.shape)))


@_op("permute.default")
def _permute(cx, a):
    return cx.t(a.self).permute(_ints(a.dims))


@_op("unsqueeze.default")
def _unsqueeze(cx, a):
    return cx.t(a.self).unsqueeze(a.dim)


@_op("squeeze.dims", "squeeze.dim", "squeeze.default")
def _squeeze(cx, a):
    x = cx.t(a.self)
    dims = range(x.ndim) if getattr(a, "dim", None) is None else \
        [norm_axis(d, max(x.ndim, 1)) for d in _ints(a.dim)]
    axes = tuple(d for d in dims if d < x.ndim and x.shape[d] == 1)  # others are kept
    return x.squeeze(axes) if axes else x


@_op("expand.default")
def _expand(cx, a):
    x = cx.t(a.self)
    size = _ints(a.size)
    x = x.reshape((1,) * (len(size) - x.ndim) + x.shape) if len(size) > x.ndim else x
    return x.broadcast_to(tuple(n if s == -1 else s for s, n in zip(size, x.shape)))


@_op("slice.Tensor")
def _slice(cx, a):
    x = cx.t(a.self)
    d = norm_axis(a.dim, x.ndim)
    r = range(*slice(a.start, a.end, a.step).indices(x.shape[d]))
    if len(r) == x.shape[d]:
        return x
    if r.step == 1 or len(r) <= 1:
        return x.slice(d, r.start if len(r) else 0, len(r))
    return x.index_select(np.asarray(list(r), np.uint32), d)


@_op("select.int")
def _select(cx, a):
    x = cx.t(a.self)
    d = norm_axis(a.dim, x.ndim)
    i = a.index + x.shape[d] if a.index < 0 else a.index
    return x.slice(d, i, 1).squeeze(d)


@_op("cat.default")
def _cat(cx, a):
    dt = out_dtype(a)
    ts = [_tensor(cx, t, dt) for t in a.tensors]
    ts = [t for t in ts if t.shape != (0,)] or ts  # torch's legacy empty operands
    return concat(ts, norm_axis(a.dim, ts[0].ndim)) if len(ts) > 1 else ts[0]


def _split_at(x, d, sizes):
    out, start = [], 0
    for n in sizes:
        out.append(x if n == x.shape[d] else x.slice(d, start, n))
        start += n
    return tuple(out)


@_op("split_with_sizes.default")
def _split_with_sizes(cx, a):
    x = cx.t(a.self)
    return _split_at(x, norm_axis(a.dim, x.ndim), _ints(a.split_sizes))


@_op("split.Tensor")
def _split(cx, a):
    x = cx.t(a.self)
    d = norm_axis(a.dim, x.ndim)
    n, s = x.shape[d], a.split_size
    return _split_at(x, d, [min(s, n - i) for i in range(0, n, s)] or [0])


@_op("unbind.int")
def _unbind(cx, a):
    x = cx.t(a.self)
    d = norm_axis(a.dim, x.ndim)
    return tuple(x.slice(d, i, 1).squeeze(d) for i in range(x.shape[d]))


@_op("clone.default", "alias.default", "lift_fresh_copy.default", "detach.default")
def _identity(cx, a):
    return a.self


@_op("_to_copy.default")
def _to_copy(cx, a):
    import torch
    x = cx.t(a.self)
    if _meta(a.node).dtype == torch.bool:  # any nonzero is True, not a rounded 0/1
        return x != 0
    dt = out_dtype(a)
    return x if x.dtype == dt else x.cast(dt)


@_op("full_like.default", "zeros_like.default", "ones_like.default")
def _full_like(cx, a):
    m = _meta(a.node)
    fill = {"zeros_like": 0, "ones_like": 1}.get(a.node.target.__name__.split(".")[0])
    fill = _scalar(a.fill_value) if fill is None else fill
    return cx.g.constant(np.full(tuple(m.shape), fill, np.float64), dtype=dtype_of(m.dtype))


@_op("index_select.default")
def _index_select(cx, a):
    x = cx.t(a.self)
    d = norm_axis(a.dim, x.ndim)
    return x.index_select(onnx_ops._index_u32(cx, a.index, x.shape[d]), d)


@_op("embedding.default")
def _embedding(cx, a):
    y, = onnx_ops._gather(cx, _shim("Gather"), {"axis": 0}, [a.weight, a.indices])
    return y


@_op("index.Tensor")
def _index(cx, a):
    """``x[..., idx, ...]`` with one index tensor (an ONNX Gather)."""
    import torch
    idx = [(d, i) for d, i in enumerate(a.indices) if i is not None]
    if len(idx) != 1:
        raise Unsupported(f"advanced indexing with {len(idx)} index tensors (only one)")
    d, i = idx[0]
    if _meta(a.raw["indices"][d]).dtype == torch.bool:
        raise Unsupported("indexing with a boolean mask (its result's shape depends on the "
                          "values)")
    y, = onnx_ops._gather(cx, _shim("Gather"), {"axis": d}, [a.self, i])
    return y


@_op("gather.default")
def _gather(cx, a):
    x = cx.t(a.self)
    d = norm_axis(a.dim, x.ndim)
    return x.gather(cx.t(onnx_ops._index_u32(cx, a.index, x.shape[d])), d)


@_op("constant_pad_nd.default")
def _pad(cx, a):
    x = cx.t(a.self)
    pad = _ints(a.pad)
    widths = [[0, 0] for _ in range(x.ndim)]
    for i in range(len(pad) // 2):  # pairs from the last axis backwards
        widths[x.ndim - 1 - i] = [pad[2 * i], pad[2 * i + 1]]
    for d, (lo, hi) in enumerate(widths):  # negative pads crop
        if lo < 0 or hi < 0:
            x = x.slice(d, max(-lo, 0), x.shape[d] - max(-lo, 0) - max(-hi, 0))
            widths[d] = [max(lo, 0), max(hi, 0)]
    return x.pad(widths, value=_scalar(a.value)) if any(map(any, widths)) else x


@_op("flip.default")
def _flip(cx, a):
    return cx.t(a.self).flip(tuple(_ints(a.dims)))


@_op("tril.default", "triu.default")
def _tri(cx, a):
    x = cx.t(a.self)
    return x.tril(a.diagonal) if a.node.target.__name__.startswith("tril") else x.triu(a.diagonal)


# ---------------------------------------------------------------------------
# pooling (the ONNX importer's MaxPool / AveragePool)
# ---------------------------------------------------------------------------
def _pool_attrs(a, nd):
    k = _ints(a.kernel_size)
    k = k * nd if len(k) == 1 else k
    s = _ints(a.stride) if a.stride else k
    s = s * nd if len(s) == 1 else s
    p = _ints(a.padding)
    p = p * nd if len(p) == 1 else p
    return {"kernel_shape": k, "strides": s, "pads": p + p, "ceil_mode": int(a.ceil_mode)}


@_op("max_pool2d_with_indices.default")
def _max_pool(cx, a):
    from . import _Unavailable
    at = _pool_attrs(a, 2)
    d = _ints(a.dilation)
    at["dilations"] = d * 2 if len(d) == 1 else d
    y, = onnx_ops._pool(cx, _shim("MaxPool"), at, [cx.t(a.self)])
    return y, _Unavailable("max_pool2d's indices output is used (fuelc gives the pooled "
                           "values only)")


@_op("avg_pool2d.default")
def _avg_pool(cx, a):
    if a.divisor_override is not None:
        raise Unsupported(f"divisor_override={a.divisor_override}")
    at = _pool_attrs(a, 2)
    at["count_include_pad"] = int(a.count_include_pad)
    y, = onnx_ops._pool(cx, _shim("AveragePool"), at, [cx.t(a.self)])
    return y


@_op("_adaptive_avg_pool2d.default")
def _adaptive_avg_pool(cx, a):
    x = cx.t(a.self)
    out = _ints(a.output_size)
    if any(n % o for n, o in zip(x.shape[-2:], out)):
        raise Unsupported(f"output_size {out} does not divide the input's {list(x.shape[-2:])} "
                          f"(only evenly divided windows)")
    k = [n // o for n, o in zip(x.shape[-2:], out)]
    y, = onnx_ops._pool(cx, _shim("AveragePool"), {"kernel_shape": k, "strides": k}, [x])
    return y


@_op("_assert_tensor_metadata.default", "_assert_scalar.default")
def _assertion(cx, a):
    """Export's checks of what torch.export already fixed (static shapes and dtypes)."""
    return None


# ---------------------------------------------------------------------------
# more normalizations, norms, logical reductions, resizing
# ---------------------------------------------------------------------------
@_op("native_group_norm.default")
def _group_norm_op(cx, a):
    from . import _Unavailable
    c = _meta(a.raw["input"]).shape[1]
    w = np.ones(c, np.float32) if a.weight is None else a.weight
    b = np.zeros(c, np.float32) if a.bias is None else a.bias
    y, = onnx_ops._group_norm(cx, _shim("GroupNormalization"),
                              {"num_groups": a.group, "epsilon": a.eps}, [a.input, w, b])
    stats = _Unavailable("group norm's mean/rstd outputs (training only)")
    return y, stats, stats


@_op("_native_batch_norm_legit.no_stats")
def _batch_norm_batch_stats(cx, a):
    """Normalization by the batch's own statistics over every axis but 1
    (what InstanceNorm exports to); the running statistics are not kept."""
    from . import _Unavailable
    x = cx.t(a.input)
    axes = (0,) + tuple(range(2, x.ndim))
    mean = x.mean(axes, keepdims=True)
    y = (x - mean) / ((x - mean).square().mean(axes, keepdims=True) + a.eps).sqrt()
    per_channel = (x.shape[1],) + (1,) * (x.ndim - 2)
    if a.weight is not None:
        y = y * cx.t(a.weight).reshape(per_channel)
    if a.bias is not None:
        y = y + cx.t(a.bias).reshape(per_channel)
    stats = _Unavailable("batch norm's saved mean/rstd outputs (training only)")
    return y, stats, stats


@_op("linalg_vector_norm.default")
def _vector_norm(cx, a):
    x = _tensor(cx, a.self, out_dtype(a))
    axes, keep, p = _axes(x, a.dim), bool(a.keepdim), float(a.ord)
    if p == 2:
        return x.square().sum(axes, keepdims=keep).sqrt()
    if p == 1:
        return x.abs().sum(axes, keepdims=keep)
    if p == math.inf:
        return x.abs().max(axes, keepdims=keep)
    raise Unsupported(f"ord={a.ord} (only 1, 2 and inf)")


@_op("any.dim", "any.dims", "any.default", "all.dim", "all.dims", "all.default")
def _any_all(cx, a):
    x = cx.t(a.self) != 0
    kind = "max" if a.node.target.__name__.startswith("any") else "min"
    return getattr(x, kind)(_axes(x, getattr(a, "dim", None)),
                            keepdims=bool(getattr(a, "keepdim", False)))


@_op("topk.default")
def _topk(cx, a):
    """The ONNX importer's TopK (K max passes; equal values: lower index first)."""
    return tuple(onnx_ops._top_k(cx, _shim("TopK", 2), {"axis": a.dim,
                                                        "largest": int(a.largest)},
                                 [a.self, np.asarray([a.k])]))


@_op("repeat.default")
def _repeat(cx, a):
    x, reps = cx.t(a.self), _ints(a.repeats)
    x = x.reshape((1,) * (len(reps) - x.ndim) + x.shape)
    for axis, r in enumerate(reps):
        if r != 1:
            x = concat([x] * r, axis)
    return x


def _resize_axes(a, x):
    """Each spatial axis's output extent and source-coordinate scale."""
    n = x.ndim - 2
    if a.output_size is not None:
        out = _ints(a.output_size)
        return [(o, i / o) for o, i in zip(out, x.shape[2:])]
    sf = [float(s) for s in a.scale_factors]
    sf = sf * n if len(sf) == 1 else sf
    return [(int(math.floor(i * s)), 1 / s) for i, s in zip(x.shape[2:], sf)]


@_op("upsample_nearest2d.vec", "upsample_nearest1d.vec")
def _upsample_nearest(cx, a):
    """Output position o reads input floor(o * scale) on each spatial axis."""
    x = cx.t(a.input)
    for i, (o, scale) in enumerate(_resize_axes(a, x)):
        n = x.shape[2 + i]
        idx = np.minimum(np.floor(np.arange(o) * scale).astype(np.int64), n - 1)
        x = x.index_select(idx.astype(np.uint32), 2 + i)
    return x


@_op("upsample_bilinear2d.vec", "upsample_linear1d.vec")
def _upsample_linear(cx, a):
    """Separable linear interpolation, one spatial axis after the other, at
    torch's source coordinates (half-pixel, clamped at 0; or corner-aligned)."""
    x = cx.t(a.input)
    if not x.dtype.is_float:
        raise Unsupported(f"{x.dtype.value} input (floats only)")
    for i, (o, scale) in enumerate(_resize_axes(a, x)):
        n, axis = x.shape[2 + i], 2 + i
        dst = np.arange(o, dtype=np.float64)
        if a.align_corners:
            src = dst * ((n - 1) / (o - 1) if o > 1 else 0.0)
        else:
            src = np.maximum((dst + 0.5) * scale - 0.5, 0.0)
        i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
        i1 = np.minimum(i0 + 1, n - 1)
        lam = (src - i0).reshape([-1 if d == axis else 1 for d in range(x.ndim)])
        x0, x1 = x.index_select(i0.astype(np.uint32), axis), x.index_select(i1.astype(np.uint32),
                                                                            axis)
        x = x0 * cx.t(1 - lam, like=x) + x1 * cx.t(lam, like=x)
    return x
