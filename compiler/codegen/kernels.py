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
from typing import Iterable, Sequence

from runtime.params import exact_key
from compiler.codegen.instances import ENTRY, CallMemo, compiled_entry, single_op_linalg_text
from compiler.codegen.loader import KernelFunction
from compiler.errors import UnsupportedOpError
from compiler.graph.opdef import TensorType
from runtime.binding import KernelCaps, KernelRef
from runtime.cost import default_cost_for_op_kind
from runtime.dtype import DType
from runtime.keys import BackendId
from runtime.layout import Layout
from runtime.opkind import OpKind
from runtime import params as P
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
        return (self.op_name, exact_key(self.params), types, self.dynamic)


def _params(**kw) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(kw.items()))


# -- OpKind → op instance ------------------------------------------------------------
# The mapping OpParams -> (primitive, graph params) is compiler.graph.kernel_params
# (the same module the planner uses for the other direction); here only the
# layout adaptations a generated kernel needs are made.
def _op_table():
    from compiler.graph.ops import OP_TABLE
    return OP_TABLE


def _squeeze_kept(out: Layout, dims: Sequence[int]) -> Layout:
    for d in sorted(dims, reverse=True):
        out = out.squeeze(d)
    return out


def _adapt(kind: OpKind, in_l: list, out_l: list, p: OpParams):
    """(in layouts, out layouts, params) the compiled primitive sees."""
    if isinstance(p, P.Reduce) and p.keepdim:
        # the kept size-1 axes are dropped from the output view; same memory
        out_l = [_squeeze_kept(out_l[0], p.dims)]
        p = dataclasses.replace(p, keepdim=False)
    if isinstance(p, P.Matmul):
        mode = p.m_compute.mode
        if mode == "rows":  # data-determined M: compute only the first rows
            rows = p.m_compute.value
            a, out = in_l[0], out_l[0]
            in_l = [a.narrow(a.rank - 2, 0, rows), in_l[1]]
            out_l = [out.narrow(out.rank - 2, 0, rows)]
            p = dataclasses.replace(p, m=rows, m_compute=P.MatmulM.ALL)
        elif mode != "all":
            raise UnsupportedOpError("mlir-cpu MatMul: deferred row counts (MatmulM.deferred) "
                                     "must be resolved before the kernel is called")
    return in_l, out_l, p


_BINARY = (OpKind.AddElementwise, OpKind.SubElementwise, OpKind.MulElementwise,
           OpKind.DivElementwise, OpKind.MaximumElementwise, OpKind.MinimumElementwise,
           OpKind.PowElementwise, OpKind.RemElementwise)
_COMPARE = (OpKind.EqualElementwise, OpKind.NotEqualElementwise, OpKind.LessElementwise,
            OpKind.LessEqualElementwise, OpKind.GreaterElementwise,
            OpKind.GreaterEqualElementwise)
_ELEMENTWISE_CATEGORIES = frozenset({"binary", "unary", "scalar", "compare", "select", "cast"})


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


# Transcendentals expanded by compiler.codegen.fastmath on f32 (f16/bf16 compute in
# f32): the measured bound is claimed; f64 keeps LLVM / libm, with no claim.
_FASTMATH = {OpKind.ExpElementwise: "exp", OpKind.TanhElementwise: "tanh",
             OpKind.LogElementwise: "log", OpKind.ErfElementwise: "erf"}
_FASTMATH_NOTE = ("exp/tanh/log/erf on f32/f16/bf16 are branch-free polynomials "
                  "(compiler.codegen.fastmath, <= {exp} / {tanh} / {log} / {erf} ulp from the "
                  "correctly rounded f32 result, measured over all f32 inputs); f64 and "
                  "sin/cos/pow via LLVM intrinsics / libm")


def precision_for(kind: OpKind, dtypes: Sequence[DType] = ()) -> PrecisionGuarantee:
    """The static numeric claim of an mlir-cpu kernel of ``kind`` with the
    dtype key ``dtypes`` (inputs then output; the output decides the
    transcendental bound, empty: no dtype-specific bound)."""
    if kind in _EXACT:
        return PrecisionGuarantee(True, 0, 0.0, 0.0,
                                  "mlir-cpu: IEEE-exact op, deterministic loop order")
    from compiler.codegen import fastmath
    note = _FASTMATH_NOTE.format(**fastmath.MAX_ULP)
    if kind in _FASTMATH and dtypes and dtypes[-1] in (DType.F32, DType.F16, DType.BF16):
        return PrecisionGuarantee(
            True, fastmath.MAX_ULP[_FASTMATH[kind]], None, None,
            f"mlir-cpu: deterministic loop order (bit-stable per hardware); {note}")
    return PrecisionGuarantee(
        True, None, None, None,
        "mlir-cpu: fixed loop order per build and host CPU (bit-stable per hardware); "
        "float reductions are reassociated for vectorization (summation order differs "
        f"from a sequential loop); {note}; accumulates in the operand dtype (f32 for f16/bf16)")


def instance_for(kind: OpKind, dtypes: Sequence[DType], layouts: Sequence[Layout],
                 params: OpParams, n_inputs: int) -> tuple[OpInstance, list[Layout]]:
    """The op instance for a call, and the (possibly adapted) layouts to
    build descriptors from (inputs then outputs). Raises UnsupportedOpError."""
    from compiler.codegen.linalg import DYNAMIC_CATEGORIES, STATIC_ONLY
    from compiler.graph.kernel_params import KernelParamsError, from_op_params
    in_l, out_l = list(layouts[:n_inputs]), list(layouts[n_inputs:])
    in_l, out_l, params = _adapt(kind, in_l, out_l, params)
    in_dts = list(dtypes[:-1]) if len(dtypes) - 1 == len(in_l) else [dtypes[0]] * len(in_l)
    in_types = [TensorType(tuple(l.shape), DType.parse(dt)) for l, dt in zip(in_l, in_dts)]
    out_types = [TensorType(tuple(l.shape), DType.parse(dtypes[-1])) for l in out_l]
    try:
        name, gparams = from_op_params(kind, params, in_types, out_types)
    except KernelParamsError as e:
        raise UnsupportedOpError(f"mlir-cpu {kind.name}: {e}") from None
    opdef = _op_table()[name]
    if opdef.category in _ELEMENTWISE_CATEGORIES:  # stride-0 views of broadcast inputs
        shape = out_l[0].shape
        in_l = [l if l.shape == shape else l.broadcast_as(shape) for l in in_l]
        in_types = [TensorType(tuple(l.shape), t.dtype) for l, t in zip(in_l, in_types)]
    dynamic = opdef.category in DYNAMIC_CATEGORIES and name not in STATIC_ONLY
    if name == "MatMul":  # batch broadcasting needs the static shapes
        dynamic = in_types[0].shape[:-2] == in_types[1].shape[:-2]
    return OpInstance(name, tuple(sorted(gparams.items())), tuple(in_types), dynamic), in_l + out_l


# -- compilation ------------------------------------------------------------------


def linalg_text(inst: OpInstance) -> str:
    """The linalg-on-tensors module of one op instance."""
    return single_op_linalg_text(inst.op_name, dict(inst.params), inst.input_types, inst.dynamic)


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
        self._calls = CallMemo(self._prepare)

    def _prepare(self, layouts, params, n_inputs: int):
        inst, lays = instance_for(self.kind, self.dtypes, layouts, params, n_inputs)
        return warm_instance(inst), lays

    def __call__(self, inputs, outputs, layouts, params) -> None:
        variadic = self.kind is OpKind.Concat  # keyed [T_in, T_out] whatever the arity
        if (not variadic and len(inputs) != self.n_inputs) or not inputs or len(outputs) != 1:
            raise UnsupportedOpError(
                f"{self.__qualname__}: expects {self.n_inputs} inputs and 1 output, "
                f"got {len(inputs)} and {len(outputs)}")
        self._calls.call(inputs, outputs, layouts, params)


# -- registration -------------------------------------------------------------------
_FLOATS = (DType.F32, DType.F64, DType.F16, DType.BF16)


def binding_keys(kind: OpKind, dtypes: Iterable[DType]) -> list[tuple[DType, ...]]:
    """The dtype keys (inputs then output) registered for ``kind`` over the
    data dtypes ``dtypes``, limited to what the op table accepts."""
    table = _op_table()
    dtypes = list(dtypes)
    u32, u8 = DType.U32, DType.U8
    shapes = {  # key template per kind; t is the data dtype
        OpKind.Where: lambda t: (u8, t, t, t), OpKind.MaskedFill: lambda t: (t, u8, t),
        OpKind.ArgMaxDim: lambda t: (t, u32), OpKind.ArgMinDim: lambda t: (t, u32),
        OpKind.MatMul: lambda t: (t, t, t), OpKind.LogSoftmaxLastDimBackward: lambda t: (t, t, t),
        OpKind.IndexSelect: lambda t: (t, u32, t), OpKind.Gather: lambda t: (t, u32, t),
        OpKind.IndexAdd: lambda t: (t, u32, t, t), OpKind.ScatterAdd: lambda t: (t, u32, t, t),
    }
    keys = []
    names = [n for n, d in table.items() if d.op_kind is kind and d.supported]
    allowed = [table[n].dtypes for n in names]
    for t in dtypes:
        if not all(a is None or t in a for a in allowed):
            continue
        if kind is OpKind.Cast:
            keys += [(t, d) for d in dtypes if d is not t]
        elif kind in _COMPARE:
            keys.append((t, t, u8))
        elif kind in _BINARY:
            keys.append((t, t, t))
        else:
            keys.append(shapes.get(kind, lambda t: (t, t))(t))
    return keys


def supported_kinds() -> tuple[OpKind, ...]:
    """Every OpKind the mlir-cpu family compiles: the kinds of the supported
    primitives that have a lowering rule."""
    from compiler.codegen.lowering import RULES
    kinds = []
    for name, d in _op_table().items():
        if d.supported and d.op_kind is not None and name in RULES:
            if d.op_kind not in kinds:
                kinds.append(d.op_kind)
    return tuple(kinds)


def register_mlir_cpu_kernels(table, dtypes: Sequence[DType] = (DType.F32, DType.F64),
                              kinds: Iterable[OpKind] | None = None) -> int:
    """Register mlir-cpu kernels for ``kinds`` (default: all supported) over
    ``dtypes`` on ``BackendId.CPU`` in ``table`` (caps strided_input, a
    precision claim per kind, the default cost model). Nothing is compiled
    until a kernel is first called or warmed. Returns the number of keys."""
    n = 0
    known = supported_kinds()
    for kind in (known if kinds is None else kinds):
        if kind not in known:
            raise UnsupportedOpError(f"mlir-cpu has no kernel for {kind.name}")
        for key in binding_keys(kind, dtypes):
            fn = MlirCpuKernel(kind, key)
            table.register_full_with_source(
                kind, key, BackendId.CPU, KernelRef(fn, fn.__qualname__, KERNEL_SOURCE),
                KernelCaps(strided_input=True, full_write=True), precision_for(kind, key),
                default_cost_for_op_kind(kind), KERNEL_SOURCE)
            n += 1
    return n


__all__ = ["ENTRY", "OpInstance", "MlirCpuKernel", "instance_for", "warm", "warm_instance",
           "linalg_text", "register_mlir_cpu_kernels", "binding_keys", "supported_kinds",
           "precision_for", "KERNEL_SOURCE"]
