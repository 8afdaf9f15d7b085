"""The "mlir-cpu-runtime-fused" kernel family: one compiled loop nest per
runtime fused op instance (fuel-spec §4.6, §6.5), registered under
``(BindingKey.runtime_fused(fid), dtypes, BackendId.CPU)``.

An instance is ``(fid, scalars, input types)``: the kernel receives the
slot values as ``JitScalars`` (``NoParams`` when the region has none) and
the input shapes from the call's layouts. Compiling one:

1. instantiate the registered region (``try_instantiate_recipe`` with
   ``runtime_params(scalars)``) into a typed primitive DAG;
2. emit it as one ``func.func @kernel`` of ``fuel.*`` ops;
3. ``lower_to_linalg``, then ``linalg-generalize-named-ops`` and
   ``linalg-fuse-elementwise-ops`` on tensors, so the chain (and a trailing
   reduction reading it) becomes one ``linalg.generic``: one loop nest, no
   intermediate buffers;
4. ``compile_module`` (the CPU pipeline; cached by text).

Public: ``RuntimeFusedInstance``, ``instance_for``, ``linalg_text``,
``warm_instance``/``warm``, ``RuntimeFusedCpuKernel``,
``register_runtime_fused_cpu_kernel(table, fid, dtypes)`` and
``register_module_kernels(module)`` (what ``compile()`` calls after the
passes: every ``fuel.runtime_fused`` of the module gets its key in the CPU
table). ``KERNEL_SOURCE``, ``FUSION_PASSES``.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from runtime.params import exact_key
from compiler.codegen.instances import ENTRY, CallMemo, compiled_entry
from compiler.codegen.loader import KernelFunction
from compiler.errors import UnsupportedOpError
from compiler.graph.opdef import TensorType
from runtime.binding import KernelCaps, KernelRef
from runtime.cost import unknown_cost
from runtime.dtype import DType
from runtime.keys import BackendId, BindingKey
from runtime.layout import Layout
from runtime.params import JitScalars, NoParams, OpParams
from runtime.precision import PrecisionGuarantee

KERNEL_SOURCE = "mlir-cpu-runtime-fused"
#: Tensor passes between fuel-to-linalg and the CPU pipeline.
FUSION_PASSES = ("linalg-generalize-named-ops", "linalg-fuse-elementwise-ops", "canonicalize",
                 "cse")

PRECISION = PrecisionGuarantee(
    True, None, None, None,
    "mlir-cpu-runtime-fused: the region's primitives fused into one loop nest, each computed "
    "as its mlir-cpu lowering does, deterministic sequential order (bit-stable per hardware)")


@dataclasses.dataclass(frozen=True)
class RuntimeFusedInstance:
    """One compilable runtime fused op: id, slot values, static input types."""

    fused_id: int
    scalars: tuple[float, ...]
    input_types: tuple[TensorType, ...]

    @property
    def memo_key(self) -> tuple:
        return (self.fused_id, exact_key(self.scalars), self.input_types)


def scalars_of(params: OpParams) -> tuple[float, ...]:
    """The slot values a runtime kernel receives; UnsupportedOpError for a
    params variant other than JitScalars / NoParams."""
    if isinstance(params, JitScalars):
        return tuple(float(s) for s in params.scalars)
    if isinstance(params, NoParams):
        return ()
    raise UnsupportedOpError(f"runtime fused kernels take JitScalars or NoParams, "
                             f"got {type(params).__name__}")


def params_for(scalars: Sequence[float]) -> OpParams:
    """The KernelStep params of a runtime fused op with these slot values."""
    return JitScalars(tuple(float(s) for s in scalars)) if scalars else NoParams()


def instance_for(fused_id: int, dtypes: Sequence[DType], layouts: Sequence[Layout],
                 params: OpParams, n_inputs: int) -> RuntimeFusedInstance:
    types = tuple(TensorType(tuple(l.shape), DType.parse(d))
                  for l, d in zip(layouts[:n_inputs], dtypes))
    return RuntimeFusedInstance(int(fused_id), scalars_of(params), types)


def _dag(inst: RuntimeFusedInstance):
    from compiler.registry import Decline, try_instantiate_recipe
    from compiler.registry.errors import RegistryError
    from compiler.registry.runtime_fused import runtime_entry, runtime_params
    try:
        entry = runtime_entry(inst.fused_id)
    except RegistryError as e:
        raise UnsupportedOpError(f"mlir-cpu-runtime-fused: {e}") from None
    dag = try_instantiate_recipe(entry, runtime_params(inst.scalars), list(inst.input_types))
    if isinstance(dag, Decline):
        raise UnsupportedOpError(
            f"mlir-cpu-runtime-fused {inst.fused_id:#x}: the region does not instantiate for "
            f"inputs {_types(inst.input_types)} and scalars {list(inst.scalars)}: {dag.reason}")
    if len(dag.outputs) != 1:
        raise UnsupportedOpError(f"mlir-cpu-runtime-fused {inst.fused_id:#x}: "
                                 f"{len(dag.outputs)} outputs; one is supported")
    return dag


def _types(types) -> str:
    return ", ".join(f"{t.dtype}{list(t.shape)}" for t in types)


def fuel_module(inst: RuntimeFusedInstance):
    """The instance as a one-function fuel module (``@kernel``, C interface)."""
    from compiler.dialect import lookup, params_to_attributes, tensor_type
    from compiler.dialect.definition import load_fuel_dialect
    from compiler.graph.ops import OP_TABLE
    from compiler.mlir import func, ir

    dag = _dag(inst)
    ctx = ir.Context()
    load_fuel_dialect(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        out_t = dag.output_types()[0]
        with ir.InsertionPoint(module.body):
            f = func.FuncOp(ENTRY, ([tensor_type(t) for t in inst.input_types],
                                    [tensor_type(out_t)]))
            f.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
            block = f.add_entry_block()
            with ir.InsertionPoint(block):
                values = []

                def get(ref):
                    return block.arguments[ref.index] if ref.kind == "input" else values[ref.index]

                for node in dag.nodes:
                    if node.fused:
                        raise UnsupportedOpError(f"mlir-cpu-runtime-fused {inst.fused_id:#x}: "
                                                 f"nested fused op {node.op} in the region")
                    spec = lookup(OP_TABLE[node.op].mnemonic)
                    op = ir.Operation.create(
                        spec.op_name, results=[tensor_type(node.type)],
                        operands=[get(r) for r in node.inputs],
                        attributes=params_to_attributes(spec, node.params))
                    values.append(op.results[0])
                func.ReturnOp([get(dag.outputs[0])])
        module.operation.verify()
    return module


def linalg_text(inst: RuntimeFusedInstance) -> str:
    """The fused linalg-on-tensors module of one instance (after
    ``FUSION_PASSES``). Raises UnsupportedOpError / LoweringError /
    PipelineError (with a reproducer)."""
    from compiler.codegen.cpu import Stage, run_stage
    from compiler.codegen.linalg import lower_to_linalg
    module = fuel_module(inst)
    lower_to_linalg(module)
    run_stage(module, Stage("runtime-fuse", FUSION_PASSES))
    return str(module)




def warm_instance(inst: RuntimeFusedInstance) -> KernelFunction:
    """Compile (or fetch from the caches) the kernel of ``inst``."""
    return compiled_entry((__name__, inst.memo_key), lambda: linalg_text(inst),
                          len(inst.input_types) + 1)


def warm(fused_id: int, dtypes: Sequence[DType], layouts: Sequence[Layout], params: OpParams,
         n_inputs: int) -> KernelFunction:
    """Compile ahead of time the kernel a call with these arguments would use."""
    return warm_instance(instance_for(fused_id, dtypes, layouts, params, n_inputs))


class RuntimeFusedCpuKernel:
    """The callable behind a runtime fused ``KernelRef`` for one (id, dtypes)."""

    def __init__(self, fused_id: int, dtypes: Sequence[DType]):
        self.fused_id = int(fused_id)
        self.dtypes = tuple(DType.parse(d) for d in dtypes)
        self.n_inputs = len(self.dtypes) - 1
        self.__qualname__ = (f"mlir_cpu_runtime_fused.{self.fused_id:#x}"
                             f"[{','.join(str(d) for d in self.dtypes)}]")
        self._calls = CallMemo(self._prepare)

    def _prepare(self, layouts, params, n_inputs: int):
        return warm(self.fused_id, self.dtypes, layouts, params, self.n_inputs), layouts

    def __call__(self, inputs, outputs, layouts, params) -> None:
        if len(inputs) != self.n_inputs or len(outputs) != 1:
            raise UnsupportedOpError(
                f"{self.__qualname__}: expects {self.n_inputs} inputs and 1 output, "
                f"got {len(inputs)} and {len(outputs)}")
        self._calls.call(inputs, outputs, layouts, params)


def register_runtime_fused_cpu_kernel(table, fused_id: int, dtypes: Sequence[DType]) -> bool:
    """Register the kernel of ``(fused_id, dtypes)`` on CPU in ``table`` (a
    mutable table) unless one is bound; True if it registered. Nothing is
    compiled until the kernel is called or warmed."""
    key = BindingKey.runtime_fused(fused_id)
    dtypes = tuple(DType.parse(d) for d in dtypes)
    if table.backend_supports(key, dtypes, BackendId.CPU):
        return False
    fn = RuntimeFusedCpuKernel(fused_id, dtypes)
    table.register_full_with_source(key, dtypes, BackendId.CPU,
                                    KernelRef(fn, fn.__qualname__, KERNEL_SOURCE),
                                    KernelCaps(strided_input=True, full_write=True), PRECISION, unknown_cost,
                                    KERNEL_SOURCE)
    return True


def module_keys(module) -> list[tuple[int, tuple[DType, ...]]]:
    """``(fused_id, dtypes)`` of every ``fuel.runtime_fused`` in ``module``
    (ids resolved in this process). Raises DialectError for a malformed op."""
    from compiler.dialect.structural import is_runtime_fused, resolve_runtime_fused
    from compiler.plan import tensor_types
    from compiler.passes._fuel import walk_ops
    keys = []
    for op in walk_ops(module.operation if hasattr(module, "operation") else module,
                       is_runtime_fused):
        res = resolve_runtime_fused(op)
        dts = tuple(t.dtype for t in tensor_types([*res.inputs, op.results[0]]))
        keys.append((res.fused_id, dts))
    return list(dict.fromkeys(keys))


def register_module_kernels(module):
    """Bind a kernel for every runtime fused op of ``module`` in the CPU
    target table (copy-on-write; nothing happens when all are bound) and
    return the current CPU table."""
    from compiler.target import cpu_table, extend_cpu_table
    table = cpu_table()
    missing = [(fid, d) for fid, d in module_keys(module)
               if not table.backend_supports(BindingKey.runtime_fused(fid), d, BackendId.CPU)]
    if not missing:
        return table

    def add(t):
        for fid, d in missing:
            register_runtime_fused_cpu_kernel(t, fid, d)

    return extend_cpu_table(add)


__all__ = ["KERNEL_SOURCE", "FUSION_PASSES", "PRECISION", "RuntimeFusedInstance", "scalars_of",
           "params_for", "instance_for", "fuel_module", "linalg_text", "warm_instance", "warm",
           "RuntimeFusedCpuKernel", "register_runtime_fused_cpu_kernel", "module_keys",
           "register_module_kernels"]
