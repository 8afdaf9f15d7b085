"""The "mlir-cpu" kernel family: binding-table kernels compiled from the fuel
dialect through linalg to host machine code, one object per op instance.

A ``MlirCpuKernel`` is registered under ``(OpKind, dtypes, BackendId.CPU)``.
When called with ``(inputs, outputs, layouts, params)`` it

1. maps the runtime ``OpParams`` and the layouts to an *op instance*
   (``OpInstance``: op-table name, graph params, input ``TensorType``s,
   dynamic or static shapes) with the per-kind rule of ``_INSTANCE_RULES``;
   the rule may also adapt the layouts (stride-0 broadcast of elementwise
   inputs, dropping kept reduced axes, narrowing matmul rows);
2. gets the compiled function of that instance (memoised per process; the
   object comes from the kernel cache, so it is compiled once per machine:
   ``emit_single_op_module`` → ``lower_to_linalg`` → ``compile_module``);
3. builds one memref descriptor per storage/layout and calls it. Outputs
   are pre-allocated by the caller; every descriptor may be strided.

Public: ``register_mlir_cpu_kernels(table, dtypes=...)``, ``warm(...)`` /
``warm_instance(...)`` to compile ahead of time, ``instance_for(...)``.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Sequence

from compiler.codegen.instances import ENTRY, compiled_entry
from compiler.codegen.loader import KernelFunction
from compiler.codegen.memref import descriptor_from_storage
from compiler.errors import UnsupportedOpError
from compiler.graph.opdef import TensorType
from runtime.binding import KernelCaps, KernelRef
from runtime.cost import default_cost_for_op_kind
from runtime.dtype import DType
from runtime.keys import BackendId
from runtime.layout import Layout
from runtime.opkind import OpKind
from runtime.params import OpParams
from runtime.precision import PrecisionGuarantee

KERNEL_SOURCE = "mlir-cpu"


@dataclasses.dataclass(frozen=True)
class OpInstance:
    """One compilable op: op-table name, graph params (sorted items), input
    types and whether dims are dynamic (``?``) in the generated code."""

    op_name: str
    params: tuple[tuple[str, object], ...]
    input_types: tuple[TensorType, ...]
    dynamic: bool

    @property
    def memo_key(self) -> tuple:
        """Instances that compile to the same code share a key: with dynamic
        dims only the ranks and dtypes of the inputs matter."""
        if self.dynamic:
            types = tuple((len(t.shape), t.dtype) for t in self.input_types)
        else:
            types = self.input_types
        return (self.op_name, self.params, types, self.dynamic)


def _params(**kw) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(kw.items()))


# -- OpKind → op instance rules ----------------------------------------------------
# A rule: (kind, dtypes, in_layouts, out_layouts, params) ->
#         (op_name, graph params, in_layouts, out_layouts)
Rule = Callable[[OpKind, tuple, list, list, OpParams], tuple]
_INSTANCE_RULES: dict[OpKind, Rule] = {}
_OP_NAMES: dict[OpKind, str] = {}


def _op_table():
    from compiler.graph.ops import OP_TABLE
    return OP_TABLE


def _elementwise_name(kind: OpKind) -> str:
    if not _OP_NAMES:
        for name, d in _op_table().items():
            if d.op_kind is not None and d.supported:
                _OP_NAMES.setdefault(d.op_kind, name)
    return _OP_NAMES[kind]


def _broadcast_inputs(in_l, out_l):
    shape = out_l[0].shape
    return [l if l.shape == shape else l.broadcast_as(shape) for l in in_l]


def _elementwise(kind, dtypes, in_l, out_l, p):
    return _elementwise_name(kind), _params(), _broadcast_inputs(in_l, out_l), out_l


def _affine(kind, dtypes, in_l, out_l, p):
    if p.mul == 1.0:
        return "AddScalar", _params(value=float(p.add)), _broadcast_inputs(in_l, out_l), out_l
    if p.add == 0.0:
        return "MulScalar", _params(value=float(p.mul)), _broadcast_inputs(in_l, out_l), out_l
    raise UnsupportedOpError(
        f"mlir-cpu Affine: only mul == 1 (AddScalar) or add == 0 (MulScalar) is compiled, "
        f"got mul={p.mul}, add={p.add}; decompose into MulScalar then AddScalar")


def _clamp(kind, dtypes, in_l, out_l, p):
    return "Clamp", _params(min=float(p.min), max=float(p.max)), _broadcast_inputs(in_l, out_l), out_l


def _powi(kind, dtypes, in_l, out_l, p):
    return "PowI", _params(n=int(p.exp)), _broadcast_inputs(in_l, out_l), out_l


def _masked_fill(kind, dtypes, in_l, out_l, p):
    return "MaskedFill", _params(value=float(p.value)), _broadcast_inputs(in_l, out_l), out_l


def _cast(kind, dtypes, in_l, out_l, p):
    return "Cast", _params(dtype=dtypes[-1]), _broadcast_inputs(in_l, out_l), out_l


def _squeeze_kept(out: Layout, dims: Sequence[int]) -> Layout:
    for d in sorted(dims, reverse=True):
        out = out.squeeze(d)
    return out


_REDUCE_PREFIX = {OpKind.SumReduce: "Sum", OpKind.MaxReduce: "Max",
                  OpKind.MinReduce: "Min", OpKind.MeanReduce: "Mean"}


def _reduce(kind, dtypes, in_l, out_l, p):
    rank = in_l[0].rank
    dims = tuple(p.dims)
    prefix = _REDUCE_PREFIX.get(kind)
    if rank == 0 and not dims and prefix:  # SumAll/MaxAll/... of a scalar
        return f"{prefix}All", _params(), in_l, out_l
    if not dims or any(d >= rank for d in dims):
        raise UnsupportedOpError(f"mlir-cpu {kind.name}: dims {list(dims)} for a rank-{rank} input")
    out = _squeeze_kept(out_l[0], dims) if p.keepdim else out_l[0]
    if prefix and len(dims) == rank and rank != 1:
        return f"{prefix}All", _params(), in_l, [out]
    if len(dims) != 1:
        raise UnsupportedOpError(
            f"mlir-cpu {kind.name}: reducing {len(dims)} of {rank} axes at once is not compiled; "
            "reduce one axis at a time or all of them")
    name = f"{prefix}Dim" if prefix else kind.name  # ArgMaxDim / ArgMinDim
    return name, _params(axis=dims[0]), in_l, [out]


def _matmul(kind, dtypes, in_l, out_l, p):
    a, b = in_l
    out = out_l[0]
    mode = p.m_compute.mode
    if mode == "rows":
        rows = p.m_compute.value
        a, out = a.narrow(a.rank - 2, 0, rows), out.narrow(out.rank - 2, 0, rows)
    elif mode != "all":
        raise UnsupportedOpError("mlir-cpu MatMul: deferred row counts (MatmulM.deferred) "
                                 "must be resolved before the kernel is called")
    return "MatMul", _params(), [a, b], [out]


def _no_params(name):
    def rule(kind, dtypes, in_l, out_l, p):
        return name, _params(), in_l, out_l
    return rule


def _cumsum(kind, dtypes, in_l, out_l, p):
    return "CumSum", _params(axis=int(p.axis)), in_l, out_l


def _flip(kind, dtypes, in_l, out_l, p):
    return "Flip", _params(dim=int(p.axis)), in_l, out_l


def _triangular(name):
    def rule(kind, dtypes, in_l, out_l, p):
        return name, _params(diagonal=int(p.diagonal)), in_l, out_l
    return rule


_BINARY = (OpKind.AddElementwise, OpKind.SubElementwise, OpKind.MulElementwise,
           OpKind.DivElementwise, OpKind.MaximumElementwise, OpKind.MinimumElementwise,
           OpKind.PowElementwise, OpKind.RemElementwise)
_UNARY = (OpKind.NegElementwise, OpKind.SqrElementwise, OpKind.SqrtElementwise,
          OpKind.RsqrtElementwise, OpKind.RecipElementwise, OpKind.AbsElementwise,
          OpKind.ExpElementwise, OpKind.LogElementwise, OpKind.SinElementwise,
          OpKind.CosElementwise, OpKind.TanhElementwise, OpKind.SigmoidElementwise,
          OpKind.SiluElementwise, OpKind.GeluElementwise, OpKind.GeluErfElementwise,
          OpKind.ReluElementwise, OpKind.StepElementwise, OpKind.ErfElementwise,
          OpKind.FloorElementwise, OpKind.CeilElementwise, OpKind.RoundElementwise,
          OpKind.SignElementwise)
_COMPARE = (OpKind.EqualElementwise, OpKind.NotEqualElementwise, OpKind.LessElementwise,
            OpKind.LessEqualElementwise, OpKind.GreaterElementwise,
            OpKind.GreaterEqualElementwise)

for _k in _BINARY + _UNARY + _COMPARE + (OpKind.Where,):
    _INSTANCE_RULES[_k] = _elementwise
_INSTANCE_RULES.update({
    OpKind.Affine: _affine, OpKind.ClampElementwise: _clamp, OpKind.PowIElementwise: _powi,
    OpKind.MaskedFill: _masked_fill, OpKind.Cast: _cast,
    OpKind.SumReduce: _reduce, OpKind.MaxReduce: _reduce, OpKind.MinReduce: _reduce,
    OpKind.MeanReduce: _reduce, OpKind.ArgMaxDim: _reduce, OpKind.ArgMinDim: _reduce,
    OpKind.MatMul: _matmul,
    OpKind.LogSoftmaxLastDim: _no_params("LogSoftmaxLastDim"),
    OpKind.CumSum: _cumsum, OpKind.Flip: _flip,
    OpKind.Triu: _triangular("Triu"), OpKind.Tril: _triangular("Tril"),
})

# Ops whose result is correctly rounded (or exact): 0 ulp from the IEEE result.
_EXACT = frozenset(_BINARY[:6] + (OpKind.NegElementwise, OpKind.SqrElementwise,
                                  OpKind.SqrtElementwise, OpKind.AbsElementwise,
                                  OpKind.ReluElementwise, OpKind.StepElementwise,
                                  OpKind.FloorElementwise, OpKind.CeilElementwise,
                                  OpKind.RoundElementwise, OpKind.SignElementwise,
                                  OpKind.ClampElementwise, OpKind.MaskedFill, OpKind.Where,
                                  OpKind.Flip, OpKind.Triu, OpKind.Tril, OpKind.Cast,
                                  OpKind.MaxReduce, OpKind.MinReduce, OpKind.ArgMaxDim,
                                  OpKind.ArgMinDim) + _COMPARE)


def precision_for(kind: OpKind) -> PrecisionGuarantee:
    """The static numeric claim of an mlir-cpu kernel of ``kind``."""
    if kind in _EXACT:
        return PrecisionGuarantee(True, 0, 0.0, 0.0,
                                  "mlir-cpu: IEEE-exact op, deterministic loop order")
    return PrecisionGuarantee(
        True, None, None, None,
        "mlir-cpu: fixed loop order per build and host CPU (bit-stable per hardware); "
        "float reductions are reassociated for vectorization (summation order differs "
        "from a sequential loop); transcendentals via LLVM intrinsics / libm; "
        "accumulates in the operand dtype (f32 for f16/bf16)")


def instance_for(kind: OpKind, dtypes: Sequence[DType], layouts: Sequence[Layout],
                 params: OpParams, n_inputs: int) -> tuple[OpInstance, list[Layout]]:
    """The op instance for a call, and the (possibly adapted) layouts to
    build descriptors from (inputs then outputs). Raises UnsupportedOpError."""
    from compiler.codegen.linalg import DYNAMIC_CATEGORIES, STATIC_ONLY
    rule = _INSTANCE_RULES.get(kind)
    if rule is None:
        raise UnsupportedOpError(f"mlir-cpu has no kernel for {kind.name}")
    in_l, out_l = list(layouts[:n_inputs]), list(layouts[n_inputs:])
    name, gparams, in_l, out_l = rule(kind, tuple(dtypes), in_l, out_l, params)
    types = tuple(TensorType(tuple(l.shape), DType.parse(dt)) for l, dt in zip(in_l, dtypes))
    opdef = _op_table()[name]
    dynamic = opdef.category in DYNAMIC_CATEGORIES and name not in STATIC_ONLY
    if name == "MatMul":  # batch broadcasting needs the static shapes
        dynamic = types[0].shape[:-2] == types[1].shape[:-2]
    return OpInstance(name, gparams, types, dynamic), in_l + out_l


# -- compilation ------------------------------------------------------------------


def linalg_text(inst: OpInstance) -> str:
    """The linalg-on-tensors module of one op instance."""
    from compiler.codegen.linalg import emit_single_op_module, lower_to_linalg
    module = emit_single_op_module(inst.op_name, dict(inst.params), list(inst.input_types),
                                   dynamic=inst.dynamic, func_name=ENTRY)
    lower_to_linalg(module)
    return str(module)


def warm_instance(inst: OpInstance) -> KernelFunction:
    """Compile (or fetch from the caches) the kernel of ``inst``."""
    return compiled_entry((__name__, inst.memo_key), lambda: linalg_text(inst),
                          len(inst.input_types) + 1)


def warm(kind: OpKind, dtypes: Sequence[DType], layouts: Sequence[Layout], params: OpParams,
         n_inputs: int) -> KernelFunction:
    """Compile ahead of time the kernel a call with these arguments would use."""
    inst, _ = instance_for(kind, dtypes, layouts, params, n_inputs)
    return warm_instance(inst)


class MlirCpuKernel:
    """The callable behind an mlir-cpu ``KernelRef`` for one binding key."""

    def __init__(self, kind: OpKind, dtypes: Sequence[DType]):
        self.kind = kind
        self.dtypes = tuple(dtypes)
        self.n_inputs = len(self.dtypes) - 1
        self.__qualname__ = f"mlir_cpu.{kind.name}[{','.join(str(d) for d in self.dtypes)}]"

    def __call__(self, inputs, outputs, layouts, params) -> None:
        if len(inputs) != self.n_inputs or len(outputs) != 1:
            raise UnsupportedOpError(
                f"{self.__qualname__}: expects {self.n_inputs} inputs and 1 output, "
                f"got {len(inputs)} and {len(outputs)}")
        inst, lays = instance_for(self.kind, self.dtypes, layouts, params, self.n_inputs)
        fn = warm_instance(inst)
        fn(*[descriptor_from_storage(s, l) for s, l in zip([*inputs, *outputs], lays)])


# -- registration -------------------------------------------------------------------
_FLOATS = (DType.F32, DType.F64, DType.F16, DType.BF16)


def binding_keys(kind: OpKind, dtypes: Iterable[DType]) -> list[tuple[DType, ...]]:
    """The dtype keys (inputs then output) registered for ``kind`` over the
    data dtypes ``dtypes``, limited to what the op table accepts."""
    table = _op_table()
    keys = []
    for t in dtypes:
        if kind in _COMPARE:
            key = (t, t, DType.U8)
        elif kind is OpKind.Where:
            key = (DType.U8, t, t, t)
        elif kind is OpKind.MaskedFill:
            key = (t, DType.U8, t)
        elif kind in (OpKind.ArgMaxDim, OpKind.ArgMinDim):
            key = (t, DType.U32)
        elif kind in _BINARY or kind is OpKind.MatMul:
            key = (t, t, t)
        elif kind is OpKind.Cast:
            keys += [(t, d) for d in dtypes if d is not t]
            continue
        else:
            key = (t, t)
        names = [n for n, d in table.items() if d.op_kind is kind and d.supported]
        allowed = [table[n].dtypes for n in names]
        if all(a is None or t in a for a in allowed):
            keys.append(key)
    return keys


def supported_kinds() -> tuple[OpKind, ...]:
    """Every OpKind the mlir-cpu family compiles."""
    return tuple(_INSTANCE_RULES)


def register_mlir_cpu_kernels(table, dtypes: Sequence[DType] = (DType.F32, DType.F64),
                              kinds: Iterable[OpKind] | None = None) -> int:
    """Register mlir-cpu kernels for ``kinds`` (default: all supported) over
    ``dtypes`` on ``BackendId.CPU`` in ``table`` (caps strided_input, a
    precision claim per kind, the default cost model). Nothing is compiled
    until a kernel is first called or warmed. Returns the number of keys."""
    n = 0
    for kind in (supported_kinds() if kinds is None else kinds):
        if kind not in _INSTANCE_RULES:
            raise UnsupportedOpError(f"mlir-cpu has no kernel for {kind.name}")
        for key in binding_keys(kind, dtypes):
            fn = MlirCpuKernel(kind, key)
            table.register_full_with_source(
                kind, key, BackendId.CPU, KernelRef(fn, fn.__qualname__, KERNEL_SOURCE),
                KernelCaps(strided_input=True), precision_for(kind),
                default_cost_for_op_kind(kind), KERNEL_SOURCE)
            n += 1
    return n


__all__ = ["OpInstance", "MlirCpuKernel", "instance_for", "warm", "warm_instance",
           "linalg_text", "register_mlir_cpu_kernels", "binding_keys", "supported_kinds",
           "precision_for", "KERNEL_SOURCE"]
