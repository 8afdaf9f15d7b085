"""Planning: the post-pass ``fuel`` module becomes a runtime ``Plan``.

The plan IS the IR after the passes: every ``fuel.*`` op in the entry
function becomes one step, in program order.

* ops with an ``OpKind`` (primitives, static fused ops) -> ``KernelStep`` keyed
  ``(OpKind, operand dtypes then result dtypes, backend)`` with the ``OpParams``
  of ``compiler.graph.kernel_params`` (fused ops: their registry entry's
  ``op_params``);
* view ops (Transpose, Permute, BroadcastTo, Unsqueeze, Squeeze, Slice, Flip)
  -> ``ViewStep`` (metadata only: a new Layout over the same storage);
* Reshape / Contiguize -> ``ReshapeStep`` / ``ContiguizeStep``;
* Const / Iota -> ``ConstStep`` over ``plan.constants``;
* ``fuel.runtime_fused`` -> ``KernelStep`` keyed ``(BindingKey.runtime_fused(fid),
  input dtypes in bind order then the result dtype, backend)`` with
  ``JitScalars`` (``NoParams`` without slots); the id is resolved from the
  body in this process (``compiler.dialect.structural``).

``plan_from_module`` raises ``PlanningError`` naming the op (and its location,
which is the graph node's name) when an op has no way to run.
"""
from __future__ import annotations

import numpy as np

from runtime import BackendId, BindingKey
from runtime.keys import binding_dtypes
from runtime.dtype import DType
from runtime.executor import (ConstStep, ContiguizeStep, KernelStep, Plan, ReshapeStep,
                              ValueSpec, ViewStep)

from .dialect.attrs import op_params
from .dialect.definition import lookup
from .dialect.emit import NAME_ATTR, OUTPUT_NAMES_ATTR
from .dialect.structural import RUNTIME_FUSED, resolve_runtime_fused
from .dialect.types import tensor_types
from .errors import CompilerError
from .graph.kernel_params import KernelParamsError, to_op_params
from .graph.opdef import TensorType
from .mlir import ir, passmanager


class PlanningError(CompilerError):
    """A fuel op that cannot be turned into a plan step."""


_VIEWS = {
    "Transpose": lambda p, rank: ("transpose", {"dim0": rank - 2, "dim1": rank - 1}),
    "Permute": lambda p, rank: ("permute", {"perm": tuple(p["perm"])}),
    "BroadcastTo": lambda p, rank: ("broadcast_as", {"shape": tuple(p["shape"])}),
    "Unsqueeze": lambda p, rank: ("unsqueeze", {"dim": p["dim"]}),
    "Squeeze": lambda p, rank: ("squeeze", {"dim": p["dim"]}),
    "Slice": lambda p, rank: ("narrow", {"dim": p["dim"], "start": p["start"], "length": p["len"]}),
    "Flip": lambda p, rank: ("flip", {"dim": p["dim"]}),
}


def find_func(module, func_name: str = "main"):
    for op in module.body.operations:
        if op.operation.name == "func.func" and \
                ir.StringAttr(op.operation.attributes["sym_name"]).value == func_name:
            return op
    raise PlanningError(f"module has no func.func @{func_name}")


def _loc(op) -> str:
    return str(op.location)


def plan_from_module(module, constants: dict | None = None, *, backend=BackendId.CPU,
                     func_name: str = "main") -> Plan:
    """Build the runtime Plan of ``func_name`` in a fuel module (after the
    passes). ``constants`` holds the payloads emission kept out of the IR."""
    constants = dict(constants or {})
    f = find_func(module, func_name)
    block = f.regions[0].blocks[0]
    ids: dict = {}
    names: dict[str, int] = {}

    def fresh(hint: str) -> str:
        n = names.get(hint, 0)
        names[hint] = n + 1
        return hint if n == 0 else f"{hint}.{n}"

    inputs: dict[str, ValueSpec] = {}
    arg_attrs = f.arg_attrs if "arg_attrs" in f.operation.attributes else None
    for k, arg in enumerate(block.arguments):
        name = f"arg{k}"
        if arg_attrs is not None:
            d = ir.DictAttr(arg_attrs[k])
            if NAME_ATTR in d:
                name = ir.StringAttr(d[NAME_ATTR]).value
        tt = tensor_types([arg])[0]
        inputs[name] = ValueSpec(tt.shape, tt.dtype)
        ids[arg] = fresh(name)

    steps: list = []
    plan_consts: dict[str, np.ndarray] = {}
    out_names: list[str] = []
    if OUTPUT_NAMES_ATTR in f.operation.attributes:
        out_names = [ir.StringAttr(a).value for a in ir.ArrayAttr(f.operation.attributes[OUTPUT_NAMES_ATTR])]
    outputs: dict[str, str] = {}

    for op in block.operations:
        o = op.operation
        if o.name == "func.return":
            rets = list(o.operands)
            if not out_names:
                out_names = [f"out{i}" for i in range(len(rets))]
            if len(out_names) != len(rets):
                raise PlanningError(f"@{func_name} returns {len(rets)} values but names {len(out_names)} outputs")
            outputs = {n: ids[v] for n, v in zip(out_names, rets)}
            break
        if not o.name.startswith("fuel."):
            raise PlanningError(f"{o.name} at {_loc(o)}: only fuel ops can be planned; "
                                "run the fuel pipeline before planning, not a lowering pass")
        if o.name == RUNTIME_FUSED:
            steps.append(_runtime_fused_step(o, ids, fresh, backend))
            continue
        spec = lookup(o.name)
        params = op_params(o)
        ins = tensor_types(o.operands)
        outs = tensor_types(o.results)
        in_ids = [ids[v] for v in o.operands]
        hint = _name_hint(o, spec.mnemonic)
        out_ids = [fresh(hint if len(outs) == 1 else f"{hint}#{i}") for i in range(len(outs))]
        for r, vid in zip(o.results, out_ids):
            ids[r] = vid
        name = spec.name
        if name == "Const":
            cname = params["name"]
            if cname in constants:
                arr = constants[cname]
            elif "value" in o.attributes:
                arr = _dense_to_numpy(o.attributes["value"], outs[0])
            else:
                raise PlanningError(f"fuel.const {cname!r} at {_loc(o)} has no inline value and no "
                                    f"payload was supplied (supplied: {sorted(constants)})")
            key = fresh(f"const:{cname}")
            plan_consts[key] = np.ascontiguousarray(arr).reshape(outs[0].shape)
            steps.append(ConstStep(key, out_ids[0], name=hint))
        elif name == "Iota":
            key = fresh("const:iota")
            plan_consts[key] = np.arange(params["len"], dtype=np.float32)
            steps.append(ConstStep(key, out_ids[0], name=hint))
        elif name in _VIEWS:
            vop, args = _VIEWS[name](params, len(ins[0].shape))
            steps.append(ViewStep(vop, args, in_ids[0], out_ids[0], name=hint))
        elif name == "Reshape":
            steps.append(ReshapeStep(in_ids[0], out_ids[0], tuple(params["shape"]), name=hint))
        elif name == "Contiguize":
            steps.append(ContiguizeStep(in_ids[0], out_ids[0], name=hint))
        else:
            steps.append(_kernel_step(o, spec, params, ins, outs, in_ids, out_ids, backend, hint))
    return Plan(inputs, outputs, steps, plan_consts)


def _kernel_step(o, spec, params, ins, outs, in_ids, out_ids, backend, hint) -> KernelStep:
    src = spec.source
    kind = getattr(src, "op_kind", None)
    if kind is None:
        raise PlanningError(f"{o.name} ({spec.name}) at {_loc(o)} has no kernel kind; "
                            + ("decompose it first (fuel-decompose)" if spec.fused else "it cannot run"))
    try:
        if spec.fused:
            from .registry.kernel_params import fused_op_params
            op_p = fused_op_params(src, params, ins)
        else:
            op_p = to_op_params(spec.name, params, ins, outs)
    except KernelParamsError as e:
        raise PlanningError(f"{o.name} at {_loc(o)}: {e}") from None
    dtypes = binding_dtypes(kind, [t.dtype for t in ins], [t.dtype for t in outs[:1]])
    return KernelStep(BindingKey.static(kind), tuple(dtypes), backend, op_p, tuple(in_ids),
                      tuple(out_ids), tuple(ValueSpec(t.shape, t.dtype) for t in outs), name=hint)


def _runtime_fused_step(o, ids, fresh, backend) -> KernelStep:
    from .registry.runtime_fused import kernel_params
    try:
        res = resolve_runtime_fused(o)
    except Exception as e:  # DialectError, RecipeError, RuntimeFusedError
        raise PlanningError(f"{o.name} at {_loc(o)}: {e}") from None
    ins = tensor_types(res.inputs)
    outs = tensor_types(o.results)
    out_id = fresh(_name_hint(o, "runtime_fused"))
    ids[o.results[0]] = out_id
    return KernelStep(BindingKey.runtime_fused(res.fused_id),
                      tuple(t.dtype for t in ins + outs), backend, kernel_params(res.scalars),
                      tuple(ids[v] for v in res.inputs), (out_id,),
                      (ValueSpec(outs[0].shape, outs[0].dtype),), name=out_id)


def _name_hint(o, mnemonic: str) -> str:
    loc = str(o.location)
    if loc.startswith('loc("') and loc.endswith('")'):
        return loc[5:-2]
    return mnemonic


def _dense_to_numpy(attr, tt: TensorType) -> np.ndarray:
    dense = ir.DenseElementsAttr(attr)
    store = tt.dtype.storage_numpy
    if tt.dtype is DType.BF16:
        return _bf16_bits(dense, tt.shape)
    if dense.is_splat:
        return np.full(tt.shape, np.array(dense.get_splat_value().value), dtype=store)
    return np.array(dense, copy=True).astype(store, copy=False).reshape(tt.shape)


def _bf16_bits(dense, shape) -> np.ndarray:
    """The uint16 bit patterns of a bf16 DenseElementsAttr. The bindings expose
    no buffer for bf16, so MLIR folds an ``arith.bitcast`` to i16 (exact, NaN
    payloads included) and the i16 attribute is read instead."""
    t = "tensor<" + "".join(f"{d}x" for d in shape)
    src, dst = f"{t}bf16>", f"{t}i16>"
    with dense.context, ir.Location.unknown():
        m = ir.Module.parse(f"func.func @bits() -> {dst} {{\n"
                            f"  %c = arith.constant {dense}\n"
                            f"  %b = arith.bitcast %c : {src} to {dst}\n"
                            f"  return %b : {dst}\n}}")
        passmanager.PassManager.parse("builtin.module(func.func(canonicalize))").run(
            m.operation)
        folded = m.body.operations[0].regions[0].blocks[0].operations[0]
        if folded.name != "arith.constant":
            raise PlanningError(f"bf16 constant {dense} did not fold to its bit patterns")
        bits = ir.DenseElementsAttr(folded.attributes["value"])
        if bits.is_splat:
            return np.full(shape, ir.IntegerAttr(bits.get_splat_value()).value & 0xFFFF,
                           dtype=np.uint16)
        return np.array(bits, copy=True).view(np.uint16).reshape(shape)


# -- constant folding ------------------------------------------------------------------
#: A folded value may be at most this much larger than the constants it is
#: computed from (plus FOLD_SLACK elements): folding must not blow up the
#: module (a broadcast materialised into every batch).
FOLD_GROWTH, FOLD_SLACK = 1, 1 << 16


def fold_constant_steps(plan: Plan, table, keep: frozenset = frozenset(), specs=None) -> Plan:
    """``plan`` with every kernel, reshape and contiguize step whose inputs
    are all constants (or views of them) computed now, by the same kernels
    the plan would call (``table``), and its result made a constant: a
    recipe's work on weights (a transposed weight made contiguous, the
    index vector of a grouped im2col) is done once at compile time, not per
    call. View steps stay views. A step whose result would have more elements
    than the constants it is computed from (``FOLD_GROWTH``, ``FOLD_SLACK``)
    stays in the plan, and so do the steps making a value of ``keep`` (a
    symbolic ``.fuel`` file keeps those whose result depends on the sizes:
    ``compiler.export``). The caller makes sure this machine can run the
    kernels (``driver._compile`` compiles them beforehand, with the rest of
    the plan's, so that they spread over its workers)."""
    from runtime.executor import Executor
    specs = specs if specs is not None else Executor(plan, table).specs
    folded, sub_steps = foldable_steps(plan, specs, keep)
    if not folded:
        return plan
    folded_set = set(folded)
    kept = [s for i, s in enumerate(plan.steps) if i not in folded_set]
    made_here = {o for i in folded for o in _step_outputs(plan.steps[i])}
    needed = [v for v in dict.fromkeys(
        [v for s in kept for v in _step_inputs(s)] + list(plan.outputs.values())) if v in made_here]
    sub = Plan(inputs={}, outputs={v: v for v in needed},
               steps=[s for s in plan.steps if isinstance(s, ConstStep)] + sub_steps,
               constants=plan.constants)
    # run once: the general path, not the direct one's compiled copy rows
    values = Executor(sub, table, direct=False).run() if needed else {}
    constants = dict(plan.constants)
    new_steps = []
    for v in needed:
        name = f"folded:{v}"
        # held as the plan holds constants: a bf16 value as its uint16 bits
        # (``_dense_to_numpy``), which ``save`` stores as U16
        constants[name] = np.ascontiguousarray(values[v]).view(specs[v].dtype.storage_numpy)
        new_steps.append(ConstStep(name, v, name=name))
    kept = _drop_dead_views(new_steps + kept, set(plan.outputs.values()))
    live = {s.const for s in kept if isinstance(s, ConstStep)}
    return Plan(plan.inputs, plan.outputs, kept, {k: a for k, a in constants.items() if k in live})


def foldable_steps(plan: Plan, specs, keep: frozenset = frozenset()) -> tuple[list, list]:
    """What ``fold_constant_steps`` computes now: the indices of the steps it
    folds (``specs``: the plan's value specs, ``Executor(plan, table).specs``),
    and those steps with the view steps they read through, in plan order."""
    numel = {v: int(np.prod(sp.shape)) for v, sp in specs.items()}
    known: dict[str, int] = {}    # value computable from constants -> elements it rests on
    for s in plan.steps:
        if isinstance(s, ConstStep):
            known[s.output] = numel[s.output]
    folded: list[int] = []
    sub_steps: list = []
    for i, s in enumerate(plan.steps):
        ins = _step_inputs(s)
        if isinstance(s, ConstStep) or not ins or not all(v in known for v in ins) \
                or not keep.isdisjoint(_step_outputs(s)):
            continue
        read = sum(known[v] for v in ins)
        outs = _step_outputs(s)
        if isinstance(s, ViewStep):
            known.update({o: read for o in outs})
            sub_steps.append(s)
            continue
        made = sum(numel[o] for o in outs)
        if made > FOLD_GROWTH * read + FOLD_SLACK:
            continue
        known.update({o: made for o in outs})
        folded.append(i)
        sub_steps.append(s)
    return folded, sub_steps


def _drop_dead_views(steps: list, outputs: set) -> list:
    """``steps`` without the constant, view, reshape and contiguize steps whose
    results nothing uses (kernel steps are the passes' business)."""
    steps = list(steps)
    while True:
        used = {v for s in steps for v in _step_inputs(s)} | outputs
        keep = [s for s in steps if isinstance(s, KernelStep)
                or any(o in used for o in _step_outputs(s))]
        if len(keep) == len(steps):
            return keep
        steps = keep


def _step_inputs(s) -> tuple:
    if isinstance(s, KernelStep):
        return tuple(s.inputs)
    if isinstance(s, ConstStep):
        return ()
    return (s.input,)


def _step_outputs(s) -> tuple:
    return tuple(s.outputs) if isinstance(s, KernelStep) else (s.output,)
