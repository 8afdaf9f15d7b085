"""Graph op params <-> runtime ``OpParams``: the one place that says how a
primitive node's params become the typed extras its kernel receives, and back.

* ``to_op_params(op_name, params, in_types, out_types)`` is used by the planner
  (graph/MLIR node -> ``KernelStep``).
* ``from_op_params(kind, op_params, in_types, out_types)`` is used by
  generated kernel families: given what the executor hands a ``KernelRef``
  (the OpKind of its key, the OpParams, the operand shapes/dtypes), it
  recovers the primitive op instance to compile. ``from_op_params(kind,
  to_op_params(name, p, ...), ...) == (name, p)`` for every primitive with a
  kernel; a test checks that round trip.

Both raise ``KernelParamsError`` naming the op and what is missing.
"""
from __future__ import annotations

import math
from typing import Sequence

from runtime import params as P
from runtime.opkind import OpKind

from ..errors import CompilerError
from .opdef import TensorType
from .ops import OP_TABLE


class KernelParamsError(CompilerError, ValueError):
    """Params that cannot be mapped between a graph op and its kernel."""


_REDUCE_ALL = {"SumAll": "SumDim", "MaxAll": "MaxDim", "MinAll": "MinDim", "MeanAll": "MeanDim"}
_BY_KIND_REDUCE = {
    OpKind.SumReduce: ("SumAll", "SumDim"), OpKind.MaxReduce: ("MaxAll", "MaxDim"),
    OpKind.MinReduce: ("MinAll", "MinDim"), OpKind.MeanReduce: ("MeanAll", "MeanDim"),
    OpKind.ArgMaxDim: (None, "ArgMaxDim"), OpKind.ArgMinDim: (None, "ArgMinDim"),
}


def _split(shape: Sequence[int], axis: int) -> tuple[int, int, int]:
    """(outer, dim, inner) element counts around ``axis``."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def _norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def to_op_params(op_name: str, params: dict, in_types: Sequence[TensorType],
                 out_types: Sequence[TensorType]) -> P.OpParams:
    """The OpParams variant the kernel of primitive ``op_name`` receives."""
    d = OP_TABLE.get(op_name)
    if d is None or d.op_kind is None:
        raise KernelParamsError(f"op {op_name!r} has no binding-table kernel, so it takes no OpParams")
    x = in_types[0].shape if in_types else ()
    out = out_types[0].shape
    cat = d.category
    if cat in ("binary", "unary", "compare") or op_name == "Where":
        return P.NO_PARAMS
    # scalar operands keep their kind: an int (an integer tensor's scalar) stays exact
    if op_name == "AddScalar":
        return P.Affine(mul=1.0, add=params["value"])
    if op_name == "MulScalar":
        return P.Affine(mul=params["value"], add=0.0)
    if op_name == "Clamp":
        return P.Clamp(min=params["min"], max=params["max"])
    if op_name == "PowI":
        return P.PowI(exp=int(params["n"]))
    if op_name in _REDUCE_ALL:
        return P.Reduce(dims=tuple(range(len(x))), keepdim=False)
    if op_name in ("SumDim", "MaxDim", "MinDim", "MeanDim", "ArgMaxDim", "ArgMinDim"):
        return P.Reduce(dims=(_norm_axis(params["axis"], len(x)),), keepdim=False)
    if op_name == "ReduceSumTo":
        return P.ReduceSumTo(input_shape=tuple(x), output_shape=tuple(out))
    if op_name == "ReduceMaxTo":
        return P.ReduceMaxTo(input_shape=tuple(x), output_shape=tuple(out))
    if op_name == "CumSum":
        a = _norm_axis(params["axis"], len(x))
        o, n, i = _split(x, a)
        return P.CumSum(outer_count=o, dim_size=n, inner_count=i, axis=a)
    if op_name == "MatMul":
        a, b = in_types[0].shape, in_types[1].shape
        return P.Matmul(lhs_batch_dims=tuple(a[:-2]), rhs_batch_dims=tuple(b[:-2]),
                        m=a[-2], n=b[-1], k=a[-1])
    if op_name == "Cast":
        return P.Cast()
    if op_name == "Concat":
        a = _norm_axis(params["dim"], len(x))
        return P.Concat(outer_count=math.prod(x[:a]), input_dim_sizes=tuple(t.shape[a] for t in in_types),
                        inner_count=math.prod(x[a + 1:]), axis=a)
    if op_name == "Flip":
        a = _norm_axis(params["dim"], len(x))
        o, n, i = _split(x, a)
        return P.Flip(outer_count=o, dim_size=n, inner_count=i, axis=a)
    if op_name == "Roll":
        a = _norm_axis(params["dim"], len(x))
        o, n, i = _split(x, a)
        return P.Roll(outer_count=o, dim_size=n, inner_count=i, shift=int(params["shift"]), axis=a)
    if op_name in ("Triu", "Tril"):
        return P.Triangular(batch_count=math.prod(x[:-2]), rows=x[-2], cols=x[-1],
                            diagonal=int(params["diagonal"]))
    if op_name == "Pad":
        pad = tuple(params["padding"])
        pairs = tuple((pad[2 * k], pad[2 * k + 1]) for k in range(len(pad) // 2))
        return P.Pad(in_shape=tuple(x), out_shape=tuple(out), padding=pairs,
                     mode=P.PadMode[str(params.get("mode", "constant")).upper()],
                     value=float(params.get("value", 0.0)))
    if op_name == "PadBackward":
        pad = tuple(params["padding"])
        pairs = tuple((pad[2 * k], pad[2 * k + 1]) for k in range(len(pad) // 2))
        return P.PadBackward(in_shape=tuple(out), out_shape=tuple(x), padding=pairs,
                             mode=P.PadMode[str(params.get("mode", "constant")).upper()])
    if op_name == "IndexSelect":
        a = _norm_axis(params["dim"], len(x))
        o, n, i = _split(x, a)
        return P.IndexSelect(outer_count=o, source_dim_size=n, n_indices=in_types[1].shape[0], inner_count=i)
    if op_name == "Gather":
        return P.Gather(source_shape=tuple(x), output_shape=tuple(out), dim=_norm_axis(params["dim"], len(x)))
    if op_name == "IndexAdd":
        a = _norm_axis(params["dim"], len(x))
        o, n, i = _split(x, a)
        return P.IndexAdd(outer_count=o, base_dim_size=n, n_indices=in_types[1].shape[0], inner_count=i)
    if op_name == "ScatterAdd":
        return P.ScatterAdd(base_shape=tuple(x), src_shape=tuple(in_types[2].shape),
                            dim=_norm_axis(params["dim"], len(x)))
    if op_name == "MaskedFill":
        return P.MaskedFill(value=params["value"])
    if op_name in ("LogSoftmaxLastDim", "LogSoftmaxLastDimBackward"):
        return P.LogSoftmaxLastDim(outer_count=math.prod(x[:-1]), last_dim=x[-1] if x else 1)
    raise KernelParamsError(f"no OpParams mapping for primitive {op_name!r} (OpKind {d.op_kind.name})")


# OpKind -> primitive name for the kinds with exactly one primitive.
_SIMPLE: dict[OpKind, str] = {}
for _name, _d in OP_TABLE.items():
    if _d.supported and _d.op_kind is not None and _d.op_kind not in _BY_KIND_REDUCE \
            and _d.op_kind is not OpKind.Affine:
        _SIMPLE.setdefault(_d.op_kind, _name)


def from_op_params(kind: OpKind, op_params: P.OpParams, in_types: Sequence[TensorType],
                   out_types: Sequence[TensorType]) -> tuple[str, dict]:
    """Recover ``(primitive op name, graph params)`` from what a kernel
    receives. Raises KernelParamsError where no single primitive matches
    (e.g. an Affine with both a scale and a shift, a multi-axis Reduce)."""
    x = in_types[0].shape if in_types else ()
    p = op_params
    if kind is OpKind.Affine:
        if p.add == 0.0:
            return "MulScalar", {"value": p.mul}
        if p.mul == 1.0:
            return "AddScalar", {"value": p.add}
        raise KernelParamsError(f"Affine(mul={p.mul}, add={p.add}) is not a single primitive; "
                                "split it into MulScalar then AddScalar")
    if kind in _BY_KIND_REDUCE:
        all_name, dim_name = _BY_KIND_REDUCE[kind]
        if p.keepdim:
            raise KernelParamsError(f"{kind.name} with keepdim=True has no primitive; reduce then unsqueeze")
        if all_name and len(x) != 1 and tuple(p.dims) == tuple(range(len(x))):
            return all_name, {}
        if len(p.dims) == 1:
            return dim_name, {"axis": p.dims[0]}
        raise KernelParamsError(f"{kind.name} over dims {p.dims} of a rank-{len(x)} input has no "
                                "single primitive; reduce one axis at a time")
    name = _SIMPLE.get(kind)
    if name is None:
        raise KernelParamsError(f"OpKind {kind.name} has no primitive op")
    if name == "Cast":
        return name, {"dtype": out_types[0].dtype}
    if name in ("ReduceSumTo", "ReduceMaxTo"):
        return name, {"shape": tuple(out_types[0].shape)}
    if isinstance(p, P.NoParams) or name == "MatMul":
        return name, {}
    if isinstance(p, P.Clamp):
        return name, {"min": p.min, "max": p.max}
    if isinstance(p, P.PowI):
        return name, {"n": p.exp}
    if isinstance(p, (P.CumSum,)):
        return name, {"axis": p.axis}
    if isinstance(p, (P.Flip,)):
        return name, {"dim": p.axis}
    if isinstance(p, P.Roll):
        return name, {"dim": p.axis, "shift": p.shift}
    if isinstance(p, P.Concat):
        return name, {"dim": p.axis}
    if isinstance(p, P.Triangular):
        return ("Triu" if kind is OpKind.Triu else "Tril"), {"diagonal": p.diagonal}
    if isinstance(p, (P.Pad, P.PadBackward)):
        flat = tuple(v for pair in p.padding for v in pair)
        if isinstance(p, P.Pad):
            return name, {"padding": flat, "mode": p.mode.name.lower(), "value": p.value}
        return name, {"in_shape": tuple(p.in_shape), "padding": flat, "mode": p.mode.name.lower()}
    if isinstance(p, (P.IndexSelect, P.IndexAdd)):
        return name, {"dim": _axis_from_counts(x, p.outer_count, p.inner_count, kind)}
    if isinstance(p, (P.Gather, P.ScatterAdd)):
        return name, {"dim": p.dim}
    if isinstance(p, P.MaskedFill):
        return name, {"value": p.value}
    if isinstance(p, P.LogSoftmaxLastDim):
        return name, {}
    raise KernelParamsError(f"cannot map {type(p).__name__} params back to a primitive for {kind.name}")


def _axis_from_counts(shape: Sequence[int], outer: int, inner: int, kind: OpKind) -> int:
    for a in range(len(shape)):
        if math.prod(shape[:a]) == outer and math.prod(shape[a + 1:]) == inner:
            return a
    raise KernelParamsError(f"{kind.name}: outer_count={outer}, inner_count={inner} match no axis of {list(shape)}")
