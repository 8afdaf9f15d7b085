"""``CostEstimate`` and the default static cost model.

A cost function has the signature ``cost(shapes, dtypes, params) ->
CostEstimate`` where ``shapes`` and ``dtypes`` list the operands in key order
(inputs, then outputs; for variadic Concat every input shape is passed while
the dtype key is the ``[T_in, T_out]`` shorthand). ``unknown_cost`` is the
"no claim" sentinel that the fill passes recognize by identity.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

from . import elementwise
from .dtype import DType
from .keys import BackendId
from .opkind import OpKind

Shape = Sequence[int]


@dataclasses.dataclass(frozen=True)
class CostEstimate:
    """Static cost: ``flops`` (an FMA counts 2), ``bytes_moved`` and
    ``kernel_overhead_ns``. All-zero (the default) means "unknown"."""

    flops: int = 0
    bytes_moved: int = 0
    kernel_overhead_ns: int = 0

    def __post_init__(self):
        for f in ("flops", "bytes_moved", "kernel_overhead_ns"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                from .errors import BindingTableError
                raise BindingTableError(f"CostEstimate.{f} must be an int >= 0, got {v!r}")

    @property
    def is_unknown(self) -> bool:
        return self == CostEstimate()

    def composite_ns(self, flops_per_ns: float | None = None, bytes_per_ns: float | None = None,
                     backend: BackendId = BackendId.CPU) -> float:
        """Roofline time: ``max(flops/compute, bytes/bandwidth) + overhead``.
        Missing, non-positive or non-finite rates fall back to ``backend``'s
        rates, and those of the CPU if still unusable."""
        return composite_ns(self, flops_per_ns, bytes_per_ns, backend)


CostFn = Callable[[Sequence[Shape], Sequence[DType], object], CostEstimate]

CPU_RATES = (1.0, 4.0)   # FLOP/ns, B/ns
GPU_RATES = (30.0, 40.0)


def backend_rates(backend: BackendId) -> tuple[float, float]:
    """Default ``(flops_per_ns, bytes_per_ns)`` of a backend class."""
    return GPU_RATES if backend.is_gpu_class else CPU_RATES


def composite_ns(cost: CostEstimate, flops_per_ns: float | None = None,
                 bytes_per_ns: float | None = None, backend: BackendId = BackendId.CPU) -> float:
    """See ``CostEstimate.composite_ns``."""
    def ok(r):
        return r is not None and math.isfinite(r) and r > 0
    dflt = backend_rates(backend)
    if not (ok(flops_per_ns) and ok(bytes_per_ns)):
        flops_per_ns, bytes_per_ns = dflt if ok(dflt[0]) else CPU_RATES
    return max(cost.flops / flops_per_ns, cost.bytes_moved / bytes_per_ns) + cost.kernel_overhead_ns


def unknown_cost(shapes, dtypes, params) -> CostEstimate:
    """The "no cost claim" sentinel (all zeros)."""
    return CostEstimate()


def dtype_bytes(dt: DType) -> int:
    """Bytes per element for costing (sub-byte formats count as 1)."""
    return max(1, dt.size_in_bytes)


def _n(shape: Shape) -> int:
    return math.prod(shape)


def _io(shapes, dtypes):
    """(input shapes, output shape, ds of operand 0)."""
    ds = dtype_bytes(dtypes[0]) if dtypes else 4
    return list(shapes[:-1]), tuple(shapes[-1]) if shapes else (), ds


def _est(flops, bytes_, ns) -> CostEstimate:
    return CostEstimate(int(flops), int(bytes_), int(ns))


def _unary(k):
    def cost(shapes, dtypes, params):
        _, out, ds = _io(shapes, dtypes)
        n = _n(out)
        return _est(k * n, 2 * n * ds, 50)
    return cost


def _binary(shapes, dtypes, params):
    _, out, ds = _io(shapes, dtypes)
    n = _n(out)
    return _est(n, 3 * n * ds, 50)


def _compare(shapes, dtypes, params):
    _, out, ds = _io(shapes, dtypes)
    n = _n(out)
    return _est(n, 2 * n * ds + n, 50)


def _where(shapes, dtypes, params):
    _, out, _ = _io(shapes, dtypes)
    ds = dtype_bytes(dtypes[1]) if len(dtypes) > 1 else 4
    n = _n(out)
    return _est(n, n + 3 * n * ds, 50)


def _reduce(shapes, dtypes, params):
    ins, out, ds = _io(shapes, dtypes)
    n_in = _n(ins[0]) if ins else 0
    return _est(n_in, (n_in + _n(out)) * ds, 50)


def _matmul_parts(shapes):
    lhs, rhs, out = shapes[0], shapes[1], shapes[-1]
    m, k = lhs[-2], lhs[-1]
    n = rhs[-1]
    batch = _n(out[:-2])
    return batch, m, n, k


def _matmul(shapes, dtypes, params):
    _, _, ds = _io(shapes, dtypes)
    b, m, n, k = _matmul_parts(shapes)
    return _est(2 * b * m * n * k, b * (m * k + k * n + m * n) * ds, 100)


def _fused_linear(shapes, dtypes, params):
    _, _, ds = _io(shapes, dtypes)
    x, w, out = shapes[0], shapes[1], shapes[-1]
    k, n = x[-1], out[-1]
    m = x[-2] if len(x) >= 2 else 1
    b = _n(out[:-2])
    return _est(2 * b * m * n * k + b * m * n, b * (m * k + k * n + m * n) * ds + n * ds, 100)


def _cast(shapes, dtypes, params):
    _, out, _ = _io(shapes, dtypes)
    n = _n(out)
    return _est(0, n * (dtype_bytes(dtypes[0]) + dtype_bytes(dtypes[-1])), 50)


def _scalar_op(shapes, dtypes, params):
    _, out, ds = _io(shapes, dtypes)
    n = _n(out)
    return _est(2 * n, 2 * n * ds, 50)


def _masked_fill(shapes, dtypes, params):
    _, out, ds = _io(shapes, dtypes)
    n = _n(out)
    return _est(0, 2 * n * ds + n, 50)


def _movement(shapes, dtypes, params):
    ins, out, ds = _io(shapes, dtypes)
    n_in = sum(_n(s) for s in ins[:1]) if ins else 0
    return _est(0, (n_in + _n(out)) * ds, 50)


def _concat(shapes, dtypes, params):
    ins, out, ds = _io(shapes, dtypes)
    return _est(0, (sum(_n(s) for s in ins) + _n(out)) * ds, 50)


def _indexing(shapes, dtypes, params):
    _, out, ds = _io(shapes, dtypes)
    n = _n(out)
    return _est(n, 2 * n * ds + n * 4, 50)


def _arg(shapes, dtypes, params):
    ins, out, ds = _io(shapes, dtypes)
    n_in = _n(ins[0]) if ins else 0
    return _est(n_in, n_in * ds + 4 * _n(out), 50)


def _conv(shapes, dtypes, params):
    ins, out, ds = _io(shapes, dtypes)
    x, w = ins[0], ins[1]
    if params is not None and type(params).__name__ == "ConvTranspose2D":
        flops = 2 * _n(x) * w[1] * w[2] * w[3]
    else:
        flops = 2 * _n(out) * w[1] * w[2] * w[3]
    return _est(flops, (_n(x) + _n(w) + _n(out)) * ds, 100)


def _flash(shapes, dtypes, params):
    ins, out, ds = _io(shapes, dtypes)
    q, k = ins[0], ins[1]
    b, hq, sq, d = q
    sk = k[2]
    return _est(4 * b * hq * sq * sk * d + 5 * b * hq * sq * sk,
                (sum(_n(s) for s in ins[:3]) + _n(out)) * ds, 200)


def _paged(shapes, dtypes, params):
    ins, out, ds = _io(shapes, dtypes)
    b, hq, sq, d = ins[0]
    blocks, bs = ins[1][0], ins[1][1]
    return _est(4 * b * hq * sq * blocks * bs * d, (_n(ins[0]) + 2 * blocks * bs * d + _n(out)) * ds, 200)


def _softmax(shapes, dtypes, params):
    _, out, ds = _io(shapes, dtypes)
    n = _n(out)
    return _est(5 * n, 3 * n * ds, 50)


def _norm(shapes, dtypes, params):
    _, out, ds = _io(shapes, dtypes)
    n = _n(out)
    return _est(7 * n, 3 * n * ds, 50)


def _rope(shapes, dtypes, params):
    ins, out, ds = _io(shapes, dtypes)
    n = _n(out)
    seq, d = (out[-2], out[-1]) if len(out) >= 2 else (1, n)
    return _est(4 * n, 2 * n * ds + 2 * seq * d * ds, 50)


def _qmatmul(shapes, dtypes, params):
    ins, out, ds = _io(shapes, dtypes)
    a = ins[0]
    m, k = (a[-2], a[-1]) if len(a) >= 2 else (1, a[-1])
    n = out[-1]
    b = _n(out[:-2])
    return _est(2 * b * m * n * k, b * (m * k + m * n) * ds + n * k // 2, 100)


def _nf4(shapes, dtypes, params):
    ins, out, ds = _io(shapes, dtypes)
    a = ins[0]
    m, k = (a[-2], a[-1]) if len(a) >= 2 else (1, a[-1])
    n = out[-1]
    b = _n(out[:-2])
    absmax = _n(ins[2]) if len(ins) > 2 else 0
    return _est(3 * b * m * n * k, _n(a) * ds + n * k // 2 + absmax * 4 + _n(out) * ds, 50)


def _all_operands(flops_fn):
    def cost(shapes, dtypes, params):
        _, _, ds = _io(shapes, dtypes)
        return _est(flops_fn(shapes), sum(_n(s) for s in shapes) * ds, 50)
    return cost


def _selective_scan_flops(shapes):
    b, l, d = shapes[0]
    return 16 * b * l * d * shapes[2][-1]


def _ssd_flops(shapes):
    b, l, h, p = shapes[0]
    return 8 * b * l * h * p * shapes[3][-1]


def _causal_conv(shapes, dtypes, params):
    ins, out, _ = _io(shapes, dtypes)
    b, c, lo = out
    k = ins[1][-1]
    return _est(b * c * lo * (2 * k + 10), (sum(_n(s) for s in ins) + _n(out)) * 4, 50)


def _fsce(shapes, dtypes, params):
    logits = shapes[0]
    v = logits[-1]
    rows = _n(logits[:-1])
    return _est(rows * (3 * v + 10), rows * v * 4 + rows * 8 + 4, 50)


def _max_pool(shapes, dtypes, params):
    ins, out, ds = _io(shapes, dtypes)
    kh, kw = getattr(params, "kernel", (3, 3))
    taps = kh * kw
    return _est(_n(out) * taps, (_n(ins[0]) + _n(out)) * ds, 80)


def _expand_depthwise(shapes, dtypes, params):
    ins, out, ds = _io(shapes, dtypes)
    x, we, wd = ins[0], ins[1], ins[3]
    flops = 2 * x[0] * x[2] * x[3] * we[0] * we[1] + 2 * _n(out) * wd[2] * wd[3]
    return _est(flops, (_n(x) + _n(we) + _n(wd) + _n(out)) * ds, 100)


def _reduce_max_to_backward(shapes, dtypes, params):
    ins, out, ds = _io(shapes, dtypes)
    n_in, n_out = _n(ins[0]), _n(ins[1]) if len(ins) > 1 else _n(out)
    return _est(5 * n_in + 2 * n_out, (5 * n_in + 3 * n_out) * ds, 80)


K = OpKind
_FAMILIES: dict[OpKind, CostFn] = {}
_EW_COST = {"cheap": _unary(1), "transcendental": _unary(10), "binary": _binary}
for _name, _row in elementwise.ROWS.items():  # the element-wise rows name their family
    _FAMILIES[K[elementwise.kind_name(_name)]] = _EW_COST[_row.cost]
for _k in (K.EqualElementwise, K.NotEqualElementwise, K.LessElementwise,
           K.LessEqualElementwise, K.GreaterElementwise, K.GreaterEqualElementwise):
    _FAMILIES[_k] = _compare
_FAMILIES[K.Where] = _where
for _k in (K.SumReduce, K.MaxReduce, K.MinReduce, K.MeanReduce, K.ReduceSumTo, K.ReduceMaxTo):
    _FAMILIES[_k] = _reduce
_FAMILIES[K.MatMul] = _matmul
_FAMILIES[K.FusedLinear] = _fused_linear
_FAMILIES[K.Cast] = _cast
for _k in (K.Affine, K.ClampElementwise, K.PowIElementwise):
    _FAMILIES[_k] = _scalar_op
_FAMILIES[K.MaskedFill] = _masked_fill
for _k in (K.Flip, K.Roll, K.Triu, K.Tril, K.CumSum, K.Pad, K.PadBackward, K.Copy,
           K.WriteSlice, K.WriteSliceRotating, K.WriteSliceDoff):
    _FAMILIES[_k] = _movement
_FAMILIES[K.Concat] = _concat
for _k in (K.IndexSelect, K.Gather, K.IndexAdd, K.ScatterAdd):
    _FAMILIES[_k] = _indexing
_FAMILIES[K.ArgMaxDim] = _FAMILIES[K.ArgMinDim] = _arg
_FAMILIES[K.Conv2D] = _FAMILIES[K.ConvTranspose2D] = _conv
for _k in (K.FlashAttn, K.FlashAttnBackwardQ, K.FlashAttnBackwardK, K.FlashAttnBackwardV):
    _FAMILIES[_k] = _flash
_FAMILIES[K.PagedAttn] = _paged
for _k in (K.SoftmaxLastDim, K.SoftmaxLastDimBackward, K.LogSoftmaxLastDim,
           K.LogSoftmaxLastDimBackward):
    _FAMILIES[_k] = _softmax
for _k in (K.RmsNormLastDim, K.RmsNormLastDimBackward, K.LayerNormLastDim,
           K.LayerNormLastDimBackward):
    _FAMILIES[_k] = _norm
_FAMILIES[K.Rope] = _rope
_FAMILIES[K.QMatMul] = _qmatmul
_FAMILIES[K.Nf4Matmul] = _nf4
_FAMILIES[K.SelectiveScan] = _all_operands(_selective_scan_flops)
_FAMILIES[K.SsdChunkScan] = _all_operands(_ssd_flops)
_FAMILIES[K.CausalConv1d] = _causal_conv
_FAMILIES[K.FusedSoftmaxCrossEntropy] = _fsce
_FAMILIES[K.ReduceMaxToBackward] = _reduce_max_to_backward
_FAMILIES[K.MaxPool2D] = _max_pool
_FAMILIES[K.ExpandDepthwise] = _expand_depthwise
del _k, _name, _row, K


def default_cost_for_op_kind(op: OpKind) -> CostFn:
    """The family cost function of the cost model; ``unknown_cost`` for kinds
    outside every family (the in-place kinds, NonZeroIndices, ...)."""
    return _FAMILIES.get(op, unknown_cost)
