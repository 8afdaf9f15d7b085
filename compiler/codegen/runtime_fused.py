"""The runtime-fused kernel family: one compiled loop nest per runtime fused
op instance, registered under ``(BindingKey.runtime_fused(fid), dtypes,
target.backend)`` (kernel source ``mlir-cpu-runtime-fused`` on cpu targets).

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
4. the target's ``compile_module`` (cached by text and target).

Public: ``RuntimeFusedInstance``, ``instance_for``, ``linalg_text``,
``FAMILY``, ``register_runtime_fused_kernel(table, target, fid, dtypes)`` and
``register_module_kernels(module, target)`` (what ``compile()`` calls after
the passes: every ``fuel.runtime_fused`` of the module gets its key in a
module-owned copy of the target's table). ``FUSION_PASSES``.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

from runtime.params import exact_key
from compiler.codegen import parallel
from compiler.codegen.family import ENTRY, KernelFamily, emission_context
from compiler.errors import UnsupportedOpError
from compiler.graph.opdef import ELEMENTWISE_CATEGORIES, TensorType
from runtime.cost import unknown_cost
from runtime.dtype import DType
from runtime.keys import BindingKey
from runtime.layout import Layout
from compiler.codegen.family import coalesce, inner_strides
from runtime.params import JitScalars, NoParams, OpParams
from runtime.precision import PrecisionGuarantee

#: Tensor passes between fuel-to-linalg and the CPU pipeline.
FUSION_PASSES = ("linalg-generalize-named-ops", "linalg-fuse-elementwise-ops", "canonicalize",
                 "cse")
#: With ``?`` extents each lowered op reads its own ``tensor.dim``s (and casts),
#: which keep the generics apart until canonicalize and cse have merged them.
DYNAMIC_FUSION_PASSES = ("linalg-generalize-named-ops", "canonicalize", "cse") + FUSION_PASSES[1:]

PRECISION = PrecisionGuarantee(
    True, None, None, None,
    "runtime fused kernel: the region's primitives fused into one loop nest, each computed "
    "as its primitive kernel's lowering does, deterministic sequential order (bit-stable per "
    "hardware)")


@dataclasses.dataclass(frozen=True)
class RuntimeFusedInstance:
    """One compilable runtime fused op: id, slot values, input types, and
    whether every extent is ``?`` (an element-wise region whose operands all
    have the output's shape: one kernel for every size of that rank)."""

    fused_id: int
    scalars: tuple[float, ...]
    input_types: tuple[TensorType, ...]
    #: per argument (inputs, then the output): its innermost stride where every
    #: call has it 1 or 0 (a broadcast), else -1 (``inner_strides``); () unknown
    inner: tuple[int, ...] = ()
    dynamic: bool = False

    @property
    def memo_key(self) -> tuple:
        types = tuple((len(t.shape), t.dtype) for t in self.input_types) if self.dynamic \
            else self.input_types
        return (self.fused_id, exact_key(self.scalars), types, self.inner, self.dynamic)


def scalars_of(params: OpParams) -> tuple[float, ...]:
    """The slot values a runtime kernel receives; UnsupportedOpError for a
    params variant other than JitScalars / NoParams."""
    if isinstance(params, JitScalars):
        return tuple(float(s) for s in params.scalars)
    if isinstance(params, NoParams):
        return ()
    raise UnsupportedOpError(f"runtime fused kernels take JitScalars or NoParams, "
                             f"got {type(params).__name__}")


def instance_for(fused_id: int, dtypes: Sequence[DType], layouts: Sequence[Layout],
                 params: OpParams, n_inputs: int, dynamic: bool = False) -> RuntimeFusedInstance:
    types = tuple(TensorType(tuple(l.shape), DType.parse(d))
                  for l, d in zip(layouts[:n_inputs], dtypes))
    return RuntimeFusedInstance(int(fused_id), scalars_of(params), types,
                                inner_strides(layouts), dynamic)


def _dag(inst: RuntimeFusedInstance):
    from compiler.registry import Decline, try_instantiate_recipe
    from compiler.registry.errors import RegistryError
    from compiler.registry.runtime_fused import runtime_entry, runtime_params
    try:
        entry = runtime_entry(inst.fused_id)
    except RegistryError as e:
        raise UnsupportedOpError(f"runtime fused kernel: {e}") from None
    dag = try_instantiate_recipe(entry, runtime_params(inst.scalars), list(inst.input_types))
    if isinstance(dag, Decline):
        raise UnsupportedOpError(
            f"runtime fused kernel {inst.fused_id:#x}: the region does not instantiate for "
            f"inputs {_types(inst.input_types)} and scalars {list(inst.scalars)}: {dag.reason}")
    if len(dag.outputs) != 1:
        raise UnsupportedOpError(f"runtime fused kernel {inst.fused_id:#x}: "
                                 f"{len(dag.outputs)} outputs; one is supported")
    return dag


def _types(types) -> str:
    return ", ".join(f"{t.dtype}{list(t.shape)}" for t in types)


def fuel_module(inst: RuntimeFusedInstance):
    """The instance as a one-function fuel module (``@kernel``, C interface)."""
    from compiler.dialect import lookup, params_to_attributes, tensor_type
    from compiler.graph.ops import OP_TABLE
    from compiler.mlir import func, ir

    dag = _dag(inst)
    with emission_context(), ir.Location.unknown():
        module = ir.Module.create()
        out_t = dag.output_types()[0]
        with ir.InsertionPoint(module.body):
            dyn = inst.dynamic
            f = func.FuncOp(ENTRY, ([tensor_type(t, dyn) for t in inst.input_types],
                                    [tensor_type(out_t, dyn)]))
            f.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
            block = f.add_entry_block()
            with ir.InsertionPoint(block):
                values = []

                def get(ref):
                    return block.arguments[ref.index] if ref.kind == "input" else values[ref.index]

                for node in dag.nodes:
                    if node.fused:
                        raise UnsupportedOpError(f"runtime fused kernel {inst.fused_id:#x}: "
                                                 f"nested fused op {node.op} in the region")
                    spec = lookup(OP_TABLE[node.op].mnemonic)
                    op = ir.Operation.create(
                        spec.op_name, results=[tensor_type(node.type, dyn)],
                        operands=[get(r) for r in node.inputs],
                        attributes=params_to_attributes(spec, node.params))
                    values.append(op.results[0])
                func.ReturnOp([get(dag.outputs[0])])
        module.operation.verify()
    return module


def linalg_text(inst: RuntimeFusedInstance, platform: str | None = None) -> str:
    """The fused linalg-on-tensors module of one instance (after
    ``FUSION_PASSES``), lowered with ``platform``'s rules. Raises
    UnsupportedOpError / LoweringError / PipelineError (with a reproducer)."""
    from compiler.codegen.common.stages import Stage, run_stage
    from compiler.codegen.linalg import lower_to_linalg
    module = fuel_module(inst)
    lower_to_linalg(module, platform=platform)
    run_stage(module, Stage("runtime-fuse",
                            DYNAMIC_FUSION_PASSES if inst.dynamic else FUSION_PASSES))
    if platform == "cpu" and inst.inner:
        from compiler.codegen.family import UNIT_STRIDE_ATTR, ZERO_STRIDE_ATTR
        from compiler.mlir import ir
        with module.context:
            i64 = ir.IntegerType.get_signless(64)
            for op in module.body.operations:
                if op.operation.name == "func.func":
                    for attr, stride in ((UNIT_STRIDE_ATTR, 1), (ZERO_STRIDE_ATTR, 0)):
                        args = [i for i, v in enumerate(inst.inner) if v == stride]
                        if args:
                            op.attributes[attr] = ir.ArrayAttr.get(
                                [ir.IntegerAttr.get(i64, i) for i in args])
    return str(module)




class RuntimeFusedFamily(KernelFamily):
    """One ``fuel.runtime_fused`` region per kernel; the binding key is
    ``BindingKey.runtime_fused(fid)``."""

    suffix = "-runtime-fused"

    def instance(self, key, dtypes, layouts, params, n_inputs, *, target=None):
        layouts = list(layouts)
        dynamic = _elementwise_region(key.fused.value) and len({l.shape for l in layouts}) == 1
        if dynamic:
            layouts = coalesce(layouts)
        return instance_for(key.fused.value, dtypes, layouts, params, n_inputs, dynamic), layouts

    def linalg_text(self, inst: RuntimeFusedInstance, target) -> str:
        return linalg_text(inst, platform=target.kind)

    def key_name(self, key) -> str:
        return f"{key.fused.value:#x}"

    def split(self, inst: RuntimeFusedInstance, layouts, n_inputs: int, threads: int,
              min_elements: int = parallel.MIN_ELEMENTS, *, target=None):
        if not _elementwise_region(inst.fused_id):
            return None
        return parallel.row_tiles(layouts, n_inputs, threads, keep_last=False,
                                  min_elements=min_elements)




@functools.lru_cache(maxsize=None)
def _elementwise_region(fused_id: int) -> bool:
    """True when every op of the region is elementwise (its output elements
    are independent, so it may run in tiles). A BroadcastTo holds the whole
    output shape, so a region with one runs whole."""
    from compiler.graph.ops import OP_TABLE
    from compiler.registry.grammar import Op, iter_unique
    from compiler.registry.runtime_fused import runtime_entry
    roots = runtime_entry(fused_id).recipe.roots
    for root in (roots if isinstance(roots, (tuple, list)) else (roots,)):
        for node in iter_unique(root):
            if isinstance(node, Op) and getattr(OP_TABLE.get(node.op), "category", None) \
                    not in ELEMENTWISE_CATEGORIES:
                return False
    return True


FAMILY = RuntimeFusedFamily()


def register_runtime_fused_kernel(table, target, fused_id: int, dtypes: Sequence[DType]) -> bool:
    """Register the kernel of ``(fused_id, dtypes)`` on ``target`` in
    ``table`` (a mutable table) unless one is bound; True if it registered.
    Nothing is compiled until the kernel is called or warmed."""
    key = BindingKey.runtime_fused(fused_id)
    dtypes = tuple(DType.parse(d) for d in dtypes)
    if table.backend_supports(key, dtypes, target.backend):
        return False
    FAMILY.register(table, target, key, dtypes, PRECISION, unknown_cost)
    return True


def module_keys(module) -> list[tuple[int, tuple[DType, ...]]]:
    """``(fused_id, dtypes)`` of every ``fuel.runtime_fused`` in ``module``
    (ids resolved in this process). Raises DialectError for a malformed op."""
    from compiler.dialect.structural import is_runtime_fused, resolve_runtime_fused
    from compiler.dialect.types import tensor_types
    from compiler.mlir import walk_ops
    keys = []
    for op in walk_ops(module, is_runtime_fused):
        res = resolve_runtime_fused(op)
        dts = tuple(t.dtype for t in tensor_types([*res.inputs, op.results[0]]))
        keys.append((res.fused_id, dts))
    return list(dict.fromkeys(keys))


def register_module_kernels(module, target):
    """The binding table a compiled ``module`` runs with: ``target``'s table
    plus a kernel for every runtime fused op of ``module`` that it lacks.
    The additions go into a private copy owned by the module (not the
    process-wide table), so a module's kernels are released with it."""
    table = target.table()
    missing = [(fid, d) for fid, d in module_keys(module)
               if not table.backend_supports(BindingKey.runtime_fused(fid), d, target.backend)]
    if not missing:
        return table
    local = table.clone()
    for fid, d in missing:
        register_runtime_fused_kernel(local, target, fid, d)
    local.finalize()
    return local.freeze()


__all__ = ["FUSION_PASSES", "PRECISION", "RuntimeFusedInstance", "RuntimeFusedFamily", "FAMILY",
           "scalars_of", "instance_for", "fuel_module", "linalg_text",
           "register_runtime_fused_kernel", "module_keys", "register_module_kernels"]
