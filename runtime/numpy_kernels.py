"""CPU reference kernels in plain numpy (``kernel_source="numpy"``).

``register_numpy_kernels(table)`` binds them on ``BackendId.CPU`` with caps
``strided_input=True`` (every kernel reads its inputs through
``Storage.view(layout)``, so any strides, 0 and negative included, are
honoured) and ``full_write=True`` (every kernel assigns its whole output), precision ``PRIMITIVE_DETERMINISTIC_CPU`` and the default cost
family of their OpKind. Outputs are written into the pre-allocated storages.

Numeric conventions (shared with ``compiler.graph``'s reference interpreter):
f16 math runs in f32 and rounds once; accumulations (sums, cumsum, matmul,
index/scatter adds, log-softmax) run in f64 for floats; integers wrap.
Integer Div truncates toward zero and Rem is ``a - floor(a/b)*b``; integer
division by zero yields 0. Cast float->int truncates and saturates (NaN -> 0);
int->int wraps; bf16 is converted through its raw ``uint16`` bits (f64->bf16
rounds via f32). Comparisons write U8; ArgMax/ArgMinDim write U32 (first
index of the extreme); index tensors are U32 and out-of-range indices raise.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from . import elementwise as EW
from .cost import default_cost_for_op_kind
from .dtype import DType, bf16_to_f32, f32_to_bf16
from .errors import KernelError
from .keys import BackendId
from .opkind import OpKind
from .params import MatmulM, PadMode
from .precision import PrecisionGuarantee

D = DType
FLOATS, INTS, NUMERIC = EW.FLOATS, EW.INTS, EW.NUMERIC
ALL_DATA = NUMERIC + (D.U8, D.U32)
MOVE_DATA = ALL_DATA + (D.BF16,)

# -- helpers ------------------------------------------------------------------------
def _arity(name, inputs, outputs, n_in, n_out=1):
    if (n_in is not None and len(inputs) != n_in) or len(outputs) != n_out:
        raise KernelError(f"numpy {name}: expected {n_in if n_in is not None else 'N'} inputs and "
                          f"{n_out} output(s), got {len(inputs)} and {len(outputs)}")


def _read(storage, layout) -> np.ndarray:
    """An input as computable numbers (f16 widened to f32; bf16 to f32)."""
    v = storage.view(layout)
    if storage.dtype is D.F16:
        return v.astype(np.float32)
    if storage.dtype is D.BF16:
        return bf16_to_f32(np.require(v, requirements="C"))
    return v


def _io(inputs, outputs, layouts, raw=False):
    n = len(inputs)
    ins = [(s.view(l) if raw else _read(s, l)) for s, l in zip(inputs, layouts[:n])]
    outs = [s.view(l) for s, l in zip(outputs, layouts[n:])]
    return ins, outs


def _store(name, out: np.ndarray, values, dtype: DType) -> None:
    values = np.asarray(values)
    if values.shape != out.shape:
        raise KernelError(f"numpy {name}: computed shape {list(values.shape)} does not match the "
                          f"output layout's shape {list(out.shape)}")
    if dtype is D.BF16 and values.dtype != np.uint16:
        values = f32_to_bf16(values.astype(np.float32))
    out[...] = values.astype(out.dtype, copy=False)


def _scalar(name, value: float, dtype: DType):
    """A float param in ``dtype``'s compute type (ints must be integral)."""
    if dtype.is_int:
        if not (math.isfinite(value) and float(value).is_integer()):
            raise KernelError(f"numpy {name}: scalar {value} must be integral for a {dtype} tensor")
        return dtype.numpy.type(int(value))
    return np.float64(value) if dtype is D.F64 else np.float32(value)


def _named(name: str, fn: Callable) -> Callable:
    fn.__name__ = fn.__qualname__ = f"numpy_{name}"
    return fn


# -- elementwise: the rows of runtime/elementwise.py --------------------------------
divide, remainder, erf, sigmoid = EW.divide, EW.remainder, EW.erf, EW.sigmoid
gelu_tanh, gelu_erf, ieee_pow = EW.gelu_tanh, EW.gelu_erf, EW.ieee_pow

BINARY = {OpKind[EW.kind_name(n)]: (r.formula, r.dtypes) for n, r in EW.BINARY.items()}
UNARY = {OpKind[EW.kind_name(n)]: (r.formula, r.dtypes) for n, r in EW.UNARY.items()}

COMPARE = {
    OpKind.EqualElementwise: np.equal,
    OpKind.NotEqualElementwise: np.not_equal,
    OpKind.LessElementwise: np.less,
    OpKind.LessEqualElementwise: np.less_equal,
    OpKind.GreaterElementwise: np.greater,
    OpKind.GreaterEqualElementwise: np.greater_equal,
}


def _binary_kernel(op: OpKind, f):
    def kernel(inputs, outputs, layouts, params):
        _arity(op.name, inputs, outputs, 2)
        (a, b), (o,) = _io(inputs, outputs, layouts)
        with np.errstate(all="ignore"):
            _store(op.name, o, f(a, b), outputs[0].dtype)
    return _named(op.name, kernel)


def _unary_kernel(op: OpKind, f):
    def kernel(inputs, outputs, layouts, params):
        _arity(op.name, inputs, outputs, 1)
        (x,), (o,) = _io(inputs, outputs, layouts)
        with np.errstate(all="ignore"):
            _store(op.name, o, f(x), outputs[0].dtype)
    return _named(op.name, kernel)


def _compare_kernel(op: OpKind, f):
    def kernel(inputs, outputs, layouts, params):
        _arity(op.name, inputs, outputs, 2)
        (a, b), (o,) = _io(inputs, outputs, layouts)
        _store(op.name, o, f(a, b).astype(np.uint8), D.U8)
    return _named(op.name, kernel)


def where_kernel(inputs, outputs, layouts, params):
    _arity("Where", inputs, outputs, 3)
    (c, a, b), (o,) = _io(inputs, outputs, layouts, raw=True)
    _store("Where", o, np.where(c != 0, a, b), outputs[0].dtype)


def masked_fill_kernel(inputs, outputs, layouts, params):
    _arity("MaskedFill", inputs, outputs, 2)
    (x, m), (o,) = _io(inputs, outputs, layouts)
    dt = outputs[0].dtype
    _store("MaskedFill", o, np.where(m != 0, _scalar("MaskedFill", params.value, dt), x), dt)


def affine_kernel(inputs, outputs, layouts, params):
    _arity("Affine", inputs, outputs, 1)
    (x,), (o,) = _io(inputs, outputs, layouts)
    dt = outputs[0].dtype
    mul, add = _scalar("Affine", params.mul, dt), _scalar("Affine", params.add, dt)
    with np.errstate(all="ignore"):
        _store("Affine", o, x * mul + add, dt)


def clamp_kernel(inputs, outputs, layouts, params):
    _arity("ClampElementwise", inputs, outputs, 1)
    (x,), (o,) = _io(inputs, outputs, layouts)
    dt = outputs[0].dtype
    lo, hi = _scalar("Clamp", params.min, dt), _scalar("Clamp", params.max, dt)
    _store("ClampElementwise", o, np.minimum(np.maximum(x, lo), hi), dt)


def powi_kernel(inputs, outputs, layouts, params):
    _arity("PowIElementwise", inputs, outputs, 1)
    (x,), (o,) = _io(inputs, outputs, layouts)
    n = params.exp
    dt = outputs[0].dtype
    if n < 0 and dt.is_int:
        raise KernelError(f"numpy PowIElementwise: negative exponent {n} on an integer ({dt}) tensor")
    _store("PowIElementwise", o, powi(x, n), dt)


def powi(x: np.ndarray, n: int) -> np.ndarray:
    """``x**n`` for an integer ``n`` by repeated squaring (O(log |n|)
    multiplies, the same order as the generated kernels); ``n < 0`` is
    ``1 / x**|n|``. Integer overflow wraps; float overflow gives inf."""
    result, base, k = None, x, abs(int(n))
    with np.errstate(all="ignore"):
        while k:
            if k & 1:
                result = base if result is None else result * base
            k >>= 1
            if k:
                base = base * base
        if result is None:
            result = np.ones_like(x)
        if n < 0:
            result = x.dtype.type(1) / result
    return np.asarray(result, dtype=x.dtype)


# -- reductions ----------------------------------------------------------------------
def _wide(x):
    return x.astype(np.float64) if np.issubdtype(x.dtype, np.floating) else x


def _reduce_kernel(op: OpKind, f):
    def kernel(inputs, outputs, layouts, params):
        _arity(op.name, inputs, outputs, 1)
        (x,), (o,) = _io(inputs, outputs, layouts)
        dims = tuple(params.dims)
        if any(d >= x.ndim for d in dims):
            raise KernelError(f"numpy {op.name}: reduce dims {list(dims)} out of range for rank {x.ndim}")
        with np.errstate(all="ignore"):
            r = f(x, dims)
        r = np.asarray(r)
        if params.keepdim:
            r = np.expand_dims(r, dims) if dims else r
        _store(op.name, o, r.reshape(o.shape) if r.size == o.size and r.ndim != o.ndim else r,
               outputs[0].dtype)
    return _named(op.name, kernel)


REDUCE = {
    OpKind.SumReduce: (lambda x, d: _wide(x).sum(axis=d), NUMERIC),
    OpKind.MaxReduce: (lambda x, d: x.max(axis=d), NUMERIC),
    OpKind.MinReduce: (lambda x, d: x.min(axis=d), NUMERIC),
    OpKind.MeanReduce: (lambda x, d: _wide(x).mean(axis=d), FLOATS),
}


def _arg_kernel(op: OpKind, f):
    def kernel(inputs, outputs, layouts, params):
        _arity(op.name, inputs, outputs, 1)
        (x,), (o,) = _io(inputs, outputs, layouts)
        if len(params.dims) != 1 or params.dims[0] >= x.ndim:
            raise KernelError(f"numpy {op.name}: needs exactly one in-range dim, got {list(params.dims)} "
                              f"for rank {x.ndim}")
        d = params.dims[0]
        if x.shape[d] == 0:
            raise KernelError(f"numpy {op.name}: axis {d} is empty")
        r = f(x, axis=d)
        if params.keepdim:
            r = np.expand_dims(r, d)
        _store(op.name, o, np.asarray(r).astype(np.uint32), D.U32)
    return _named(op.name, kernel)


def _reduce_to_kernel(op: OpKind, f):
    def kernel(inputs, outputs, layouts, params):
        _arity(op.name, inputs, outputs, 1)
        (x,), (o,) = _io(inputs, outputs, layouts)
        target = tuple(params.output_shape)
        if tuple(x.shape) != tuple(params.input_shape):
            raise KernelError(f"numpy {op.name}: input shape {list(x.shape)} != params.input_shape "
                              f"{list(params.input_shape)}")
        padded = (1,) * (x.ndim - len(target)) + target
        axes = tuple(i for i, (t, s) in enumerate(zip(padded, x.shape)) if t == 1 and s != 1)
        with np.errstate(all="ignore"):
            r = f(x, axes) if axes else x
        _store(op.name, o, np.asarray(r).reshape(target), outputs[0].dtype)
    return _named(op.name, kernel)


def cumsum_kernel(inputs, outputs, layouts, params):
    _arity("CumSum", inputs, outputs, 1)
    (x,), (o,) = _io(inputs, outputs, layouts)
    with np.errstate(all="ignore"):
        _store("CumSum", o, np.cumsum(_wide(x), axis=params.axis), outputs[0].dtype)


def log_softmax_kernel(inputs, outputs, layouts, params):
    _arity("LogSoftmaxLastDim", inputs, outputs, 1)
    (x,), (o,) = _io(inputs, outputs, layouts)
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        m = x.max(axis=-1, keepdims=True)
        s = x - m
        r = s - np.log(np.exp(s).sum(axis=-1, keepdims=True))
    _store("LogSoftmaxLastDim", o, r, outputs[0].dtype)


def log_softmax_backward_kernel(inputs, outputs, layouts, params):
    """inputs (y = log_softmax(x), g): g - exp(y) * sum(g, last axis)."""
    _arity("LogSoftmaxLastDimBackward", inputs, outputs, 2)
    (y, g), (o,) = _io(inputs, outputs, layouts)
    y, g = y.astype(np.float64), g.astype(np.float64)
    with np.errstate(all="ignore"):
        r = g - np.exp(y) * g.sum(axis=-1, keepdims=True)
    _store("LogSoftmaxLastDimBackward", o, r, outputs[0].dtype)


# -- matmul --------------------------------------------------------------------------
def matmul_kernel(inputs, outputs, layouts, params):
    _arity("MatMul", inputs, outputs, 2)
    (a, b), (o,) = _io(inputs, outputs, layouts)
    p = params
    if a.shape != tuple(p.lhs_batch_dims) + (p.m, p.k) or b.shape != tuple(p.rhs_batch_dims) + (p.k, p.n):
        raise KernelError(f"numpy MatMul: operand shapes {list(a.shape)} @ {list(b.shape)} do not match "
                          f"params lhs {list(p.lhs_batch_dims) + [p.m, p.k]} / rhs "
                          f"{list(p.rhs_batch_dims) + [p.k, p.n]}")
    for axis, (lb, rb) in enumerate(zip(p.lhs_batch_dims, p.rhs_batch_dims)):
        if lb != rb:  # GQA: lhs slot i reads rhs slot i // (lb // rb)
            b = np.repeat(b, lb // rb, axis=axis)
    rows = p.m
    if p.m_compute.mode == "rows":
        rows = p.m_compute.value
    elif p.m_compute.mode == "deferred":
        raise KernelError("numpy MatMul: m_compute is Deferred; the executor must resolve it to "
                          "MatmulM.rows(n) before the call")
    out = np.zeros(o.shape, dtype=np.float64 if np.issubdtype(o.dtype, np.floating) else o.dtype)
    with np.errstate(all="ignore"):
        out[..., :rows, :] = np.matmul(_wide(a[..., :rows, :]), _wide(b))
    _store("MatMul", o, out, outputs[0].dtype)


# -- cast ----------------------------------------------------------------------------
def _encode(values: np.ndarray, dst: DType) -> np.ndarray:
    if dst is D.BF16:
        return f32_to_bf16(values.astype(np.float32))
    if dst.is_float:
        return values.astype(dst.numpy)
    if np.issubdtype(values.dtype, np.floating):
        info = np.iinfo(dst.numpy)
        t = np.trunc(np.nan_to_num(values.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
        hi, lo = t >= float(info.max), t <= float(info.min)
        safe = np.where(hi | lo, 0, t).astype(dst.numpy)
        return np.where(hi, info.max, np.where(lo, info.min, safe)).astype(dst.numpy)
    return values.astype(dst.numpy)  # int -> int wraps


def cast_kernel(inputs, outputs, layouts, params):
    _arity("Cast", inputs, outputs, 1)
    (x,), (o,) = _io(inputs, outputs, layouts)
    o[...] = _encode(np.asarray(x), outputs[0].dtype)


# -- layout-family ops ---------------------------------------------------------------
def concat_kernel(inputs, outputs, layouts, params):
    _arity("Concat", inputs, outputs, None)
    ins, (o,) = _io(inputs, outputs, layouts, raw=True)
    if len(ins) != len(params.input_dim_sizes):
        raise KernelError(f"numpy Concat: {len(ins)} inputs but params list "
                          f"{len(params.input_dim_sizes)} input sizes")
    _store("Concat", o, np.concatenate(ins, axis=params.axis), outputs[0].dtype)


def flip_kernel(inputs, outputs, layouts, params):
    _arity("Flip", inputs, outputs, 1)
    (x,), (o,) = _io(inputs, outputs, layouts, raw=True)
    _store("Flip", o, np.flip(x, axis=params.axis), outputs[0].dtype)


def roll_kernel(inputs, outputs, layouts, params):
    _arity("Roll", inputs, outputs, 1)
    (x,), (o,) = _io(inputs, outputs, layouts, raw=True)
    _store("Roll", o, np.roll(x, params.shift, axis=params.axis), outputs[0].dtype)


def _tri_kernel(op: OpKind, f):
    def kernel(inputs, outputs, layouts, params):
        _arity(op.name, inputs, outputs, 1)
        (x,), (o,) = _io(inputs, outputs, layouts, raw=True)
        if x.ndim < 2:
            raise KernelError(f"numpy {op.name}: needs rank >= 2, got shape {list(x.shape)}")
        _store(op.name, o, f(x, k=params.diagonal), outputs[0].dtype)
    return _named(op.name, kernel)


def pad_kernel(inputs, outputs, layouts, params):
    _arity("Pad", inputs, outputs, 1)
    if params.mode is not PadMode.CONSTANT:
        raise KernelError(f"numpy Pad: mode {params.mode.name} is not implemented; only CONSTANT is")
    (x,), (o,) = _io(inputs, outputs, layouts)
    dt = outputs[0].dtype
    fill = _scalar("Pad", params.value, dt) if dt is not D.BF16 else np.float32(params.value)
    if x.ndim == 0:  # nothing to pad (np.pad rejects an empty pad_width)
        _store("Pad", o, x, dt)
        return
    _store("Pad", o, np.pad(x, params.padding, mode="constant", constant_values=fill), dt)


def pad_backward_kernel(inputs, outputs, layouts, params):
    """The gradient of a constant Pad: the un-padded window of the gradient."""
    _arity("PadBackward", inputs, outputs, 1)
    if params.mode is not PadMode.CONSTANT:
        raise KernelError(f"numpy PadBackward: mode {params.mode.name} is not implemented; only CONSTANT is")
    (g,), (o,) = _io(inputs, outputs, layouts)
    window = tuple(slice(b, b + n) for (b, _), n in zip(params.padding, params.in_shape))
    _store("PadBackward", o, g[window], outputs[0].dtype)


# -- indexing ------------------------------------------------------------------------
def _check_idx(name, idx: np.ndarray, size: int):
    if idx.size and int(idx.max()) >= size:
        bad = int(idx.max())
        raise KernelError(f"numpy {name}: index {bad} out of range for an axis of size {size}")


def index_select_kernel(inputs, outputs, layouts, params):
    _arity("IndexSelect", inputs, outputs, 2)
    (x, idx), (o,) = _io(inputs, outputs, layouts, raw=True)
    p = params
    _check_idx("IndexSelect", idx, p.source_dim_size)
    x3 = np.reshape(x, (p.outer_count, p.source_dim_size, p.inner_count))
    r = x3[:, idx.reshape(-1).astype(np.intp), :]
    _store("IndexSelect", o, r.reshape(o.shape), outputs[0].dtype)


def gather_kernel(inputs, outputs, layouts, params):
    _arity("Gather", inputs, outputs, 2)
    (x, idx), (o,) = _io(inputs, outputs, layouts, raw=True)
    _check_idx("Gather", idx, x.shape[params.dim])
    # indices may be shorter than the data on the other axes (torch.gather): read that window
    window = tuple(slice(None) if k == params.dim else slice(0, n) for k, n in enumerate(idx.shape))
    _store("Gather", o, np.take_along_axis(x[window], idx.astype(np.intp), axis=params.dim),
           outputs[0].dtype)


def index_add_kernel(inputs, outputs, layouts, params):
    _arity("IndexAdd", inputs, outputs, 3)
    (base, idx, src), (o,) = _io(inputs, outputs, layouts)
    p = params
    _check_idx("IndexAdd", idx, p.base_dim_size)
    acc = np.array(_wide(base), copy=True).reshape(p.outer_count, p.base_dim_size, p.inner_count)
    s3 = _wide(src).reshape(p.outer_count, p.n_indices, p.inner_count)
    with np.errstate(all="ignore"):
        np.add.at(acc, (slice(None), idx.reshape(-1).astype(np.intp), slice(None)), s3)
    _store("IndexAdd", o, acc.reshape(o.shape), outputs[0].dtype)


def scatter_add_kernel(inputs, outputs, layouts, params):
    _arity("ScatterAdd", inputs, outputs, 3)
    (base, idx, src), (o,) = _io(inputs, outputs, layouts)
    d = params.dim
    _check_idx("ScatterAdd", idx, base.shape[d])
    if idx.shape != src.shape:
        raise KernelError(f"numpy ScatterAdd: indices shape {list(idx.shape)} != src shape {list(src.shape)}")
    acc = np.array(_wide(base), copy=True)
    grid = list(np.indices(src.shape, sparse=True))
    grid[d] = idx.astype(np.intp)
    with np.errstate(all="ignore"):
        np.add.at(acc, tuple(grid), _wide(src))
    _store("ScatterAdd", o, acc, outputs[0].dtype)


def nonzero_indices_kernel(inputs, outputs, layouts, params):
    """Bundle output: slot 0 = ascending flat indices of non-zeros (then zero
    padding) [capacity] U32, slot 1 = the count [1] U32."""
    _arity("NonZeroIndices", inputs, outputs, 1)
    (x,), _ = _io(inputs, [], layouts[:1], raw=True)
    bundle = outputs[0]
    if not bundle.is_bundle or len(bundle.bundle_views) != 2:
        raise KernelError("numpy NonZeroIndices: the output must be a 2-slot bundle (indices, count)")
    flat = np.flatnonzero(np.ascontiguousarray(x).reshape(-1))
    idx, count = bundle.slot_view(0), bundle.slot_view(1)
    if idx.shape != (params.capacity,) or x.size != params.capacity:
        raise KernelError(f"numpy NonZeroIndices: capacity {params.capacity} != input numel {x.size} "
                          f"or slot 0 shape {list(idx.shape)}")
    idx[...] = 0
    idx[: flat.size] = flat.astype(np.uint32)
    count[...] = np.uint32(flat.size)


# -- registration --------------------------------------------------------------------
def numpy_kernel_bindings() -> list[tuple[OpKind, tuple[DType, ...], Callable]]:
    """Every ``(op, dtypes, kernel)`` the numpy set provides."""
    out: list[tuple[OpKind, tuple[DType, ...], Callable]] = []
    for op, (f, dts) in BINARY.items():
        k = _binary_kernel(op, f)
        out += [(op, (t, t, t), k) for t in dts]
    for op, (f, dts) in UNARY.items():
        k = _unary_kernel(op, f)
        out += [(op, (t, t), k) for t in dts]
    for op, f in COMPARE.items():
        k = _compare_kernel(op, f)
        out += [(op, (t, t, D.U8), k) for t in ALL_DATA]
    out += [(OpKind.Where, (D.U8, t, t, t), _named("Where", where_kernel)) for t in ALL_DATA]
    out += [(OpKind.MaskedFill, (t, D.U8, t), _named("MaskedFill", masked_fill_kernel)) for t in ALL_DATA]
    out += [(OpKind.Affine, (t, t), _named("Affine", affine_kernel)) for t in NUMERIC]
    out += [(OpKind.ClampElementwise, (t, t), _named("Clamp", clamp_kernel)) for t in NUMERIC]
    out += [(OpKind.PowIElementwise, (t, t), _named("PowI", powi_kernel)) for t in NUMERIC]
    for op, (f, dts) in REDUCE.items():
        k = _reduce_kernel(op, f)
        out += [(op, (t, t), k) for t in dts]
    for op, f in ((OpKind.ArgMaxDim, np.argmax), (OpKind.ArgMinDim, np.argmin)):
        k = _arg_kernel(op, f)
        out += [(op, (t, D.U32), k) for t in NUMERIC]
    sum_to = _reduce_to_kernel(OpKind.ReduceSumTo, lambda x, a: _wide(x).sum(axis=a, keepdims=True))
    max_to = _reduce_to_kernel(OpKind.ReduceMaxTo, lambda x, a: x.max(axis=a, keepdims=True))
    out += [(OpKind.ReduceSumTo, (t, t), sum_to) for t in NUMERIC]
    out += [(OpKind.ReduceMaxTo, (t, t), max_to) for t in NUMERIC]
    out += [(OpKind.CumSum, (t, t), _named("CumSum", cumsum_kernel)) for t in NUMERIC]
    out += [(OpKind.LogSoftmaxLastDim, (t, t), _named("LogSoftmaxLastDim", log_softmax_kernel)) for t in FLOATS]
    out += [(OpKind.LogSoftmaxLastDimBackward, (t, t, t),
             _named("LogSoftmaxLastDimBackward", log_softmax_backward_kernel)) for t in FLOATS]
    mm = _named("MatMul", matmul_kernel)
    out += [(OpKind.MatMul, (t, t, t), mm) for t in NUMERIC]
    out.append((OpKind.MatMul, (D.F32, D.BF16, D.F32), mm))
    cast = _named("Cast", cast_kernel)
    cast_set = ALL_DATA + (D.BF16,)
    out += [(OpKind.Cast, (s, d), cast) for s in cast_set for d in cast_set if s is not d]
    out += [(OpKind.Concat, (t, t), _named("Concat", concat_kernel)) for t in MOVE_DATA]
    out += [(OpKind.Flip, (t, t), _named("Flip", flip_kernel)) for t in MOVE_DATA]
    out += [(OpKind.Roll, (t, t), _named("Roll", roll_kernel)) for t in MOVE_DATA]
    triu, tril = _tri_kernel(OpKind.Triu, np.triu), _tri_kernel(OpKind.Tril, np.tril)
    out += [(OpKind.Triu, (t, t), triu) for t in MOVE_DATA]
    out += [(OpKind.Tril, (t, t), tril) for t in MOVE_DATA]
    out += [(OpKind.Pad, (t, t), _named("Pad", pad_kernel)) for t in ALL_DATA]
    out += [(OpKind.PadBackward, (t, t), _named("PadBackward", pad_backward_kernel)) for t in ALL_DATA]
    out += [(OpKind.IndexSelect, (t, D.U32, t), _named("IndexSelect", index_select_kernel)) for t in MOVE_DATA]
    out += [(OpKind.Gather, (t, D.U32, t), _named("Gather", gather_kernel)) for t in MOVE_DATA]
    out += [(OpKind.IndexAdd, (t, D.U32, t, t), _named("IndexAdd", index_add_kernel)) for t in NUMERIC]
    out += [(OpKind.ScatterAdd, (t, D.U32, t, t), _named("ScatterAdd", scatter_add_kernel)) for t in NUMERIC]
    out += [(OpKind.NonZeroIndices, (t, D.U32), _named("NonZeroIndices", nonzero_indices_kernel))
            for t in ALL_DATA]
    return out


def register_numpy_kernels(table) -> None:
    """Register the numpy reference set on ``BackendId.CPU`` in ``table``
    (caps strided_input and full_write, PRIMITIVE_DETERMINISTIC_CPU, default costs,
    kernel_source "numpy"). Calling it twice on one table makes every key
    fail ``finalize()`` (duplicate kernels), as it should."""
    from .binding import KernelCaps, KernelRef
    refs: dict[int, KernelRef] = {}
    for op, dtypes, fn in numpy_kernel_bindings():
        ref = refs.setdefault(id(fn), KernelRef(fn, fn.__qualname__, "numpy"))
        table.register_full_with_source(
            op, dtypes, BackendId.CPU, ref, KernelCaps(strided_input=True, full_write=True),
            PrecisionGuarantee.PRIMITIVE_DETERMINISTIC_CPU, default_cost_for_op_kind(op), "numpy")
