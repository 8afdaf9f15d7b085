"""The ``fuel-to-linalg`` lowering: every primitive ``fuel.*`` op becomes
linalg / tensor / arith / math on tensors (the input of CPU and GPU codegen).

Rules live in ``compiler.codegen.lowering`` (one module per op family,
registered with ``@lowers("Name", ...)``); this module is the driver:

* ``lower_to_linalg(module)`` rewrites in place; it first checks that every
  fuel op has a rule and raises ``LoweringError`` naming the ops that do not.
* Unsigned tensors: fuel IR keeps ``ui8``/``ui32`` visible; arith accepts only
  signless integers, so the driver rewrites every ``uiN`` tensor type in the
  function (block arguments, results, signature) to ``iN`` *before* the rules
  run, and hands each rule the fuel dtypes it had before (``Lowering.in_dtypes``).
  The buffer ABI is unchanged: ``ui8`` and ``i8`` memrefs have the same bytes.
* The driver pass ``fuel-to-linalg`` (``compiler.passes.to_linalg``) runs
  ``lower_to_linalg`` so lowerings can be FileCheck-tested.
* Rules may be specialised per platform (``@lowers(..., platform="cpu")``);
  ``lower_to_linalg(..., platform=target.kind)`` picks them over the generic ones.
* ``emit_single_op_module(...)``: a one-op fuel module whose function carries
  ``llvm.emit_c_interface`` (CPU codegen compiles one kernel per op instance).
"""
from __future__ import annotations

from typing import Optional, Sequence

from compiler.dialect import attrs as _attrs
from compiler.dialect.definition import (DIALECT, build_fuel_op, default_ops, load_fuel_dialect,
                                         lookup)
from compiler.dialect.types import mlir_to_dtype, signless, tensor_type
from compiler.errors import DialectError, LoweringError
from compiler.graph.opdef import TensorType
from compiler.mlir import MLIRError, func, ir, tensor

from .lowering import Lowering, rule_for


#: op categories whose rules are shape-generic (work on ``?`` dims).
DYNAMIC_CATEGORIES = frozenset({"binary", "unary", "scalar", "compare", "select", "reduce",
                                "cast", "softmax", "matmul"})
#: ops of those categories whose result shape comes from a param (stay static).
STATIC_ONLY = frozenset({"ReduceSumTo", "ReduceMaxTo"})


def _fuel_ops(root: "ir.Operation") -> list:
    found = []

    def cb(op):
        if op.name.startswith(DIALECT + "."):
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(cb)
    return found


def _types_str(op) -> str:
    ins = ", ".join(str(v.type) for v in op.operands)
    outs = ", ".join(str(r.type) for r in op.results)
    return f"({ins}) -> ({outs})"


def _rule_name(op, ops) -> str:
    try:
        spec = lookup(op.name, ops)
    except DialectError as e:
        raise LoweringError(f"{op.name}{_types_str(op)}: {e}") from None
    return spec.name


def _to_signless(root: "ir.Operation") -> None:
    """Rewrite every unsigned-integer tensor type in ``root`` to signless."""
    def fix(v):
        t = signless(v.type)
        if t != v.type:
            v.set_type(t)

    def cb(op):
        for r in op.results:
            fix(r)
        for region in op.regions:
            for block in region.blocks:
                for a in block.arguments:
                    fix(a)
        if op.name == "func.func":
            fty = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
            new = ir.FunctionType.get([signless(t) for t in fty.inputs],
                                      [signless(t) for t in fty.results])
            if new != fty:
                op.attributes["function_type"] = ir.TypeAttr.get(new)
        return ir.WalkResult.ADVANCE

    root.walk(cb)


def _mark_inputs_read_only(root: "ir.Operation") -> None:
    """Give every func argument ``bufferization.writable = false``: graph
    inputs belong to the caller, and without it one-shot-bufferize may write
    into them in place (e.g. ScatterAdd's insert_slice into its base)."""
    def cb(op):
        if op.name == "func.func" and len(op.regions[0].blocks):
            n = len(op.regions[0].blocks[0].arguments)
            old = op.attributes["arg_attrs"] if "arg_attrs" in op.attributes else None
            new = []
            for i in range(n):
                d = ir.DictAttr(old[i]) if old is not None else ir.DictAttr.get({})
                entries = {d[k].name: d[k].attr for k in range(len(d))}
                entries["bufferization.writable"] = ir.BoolAttr.get(False)
                new.append(ir.DictAttr.get(entries))
            op.attributes["arg_attrs"] = ir.ArrayAttr.get(new)
        return ir.WalkResult.ADVANCE

    root.walk(cb)


def lower_to_linalg(module, ops: Optional[dict] = None, constants: Optional[dict] = None,
                    platform: Optional[str] = None) -> None:
    """Lower every ``fuel.*`` op of ``module`` (an ``ir.Module`` or op) in place,
    with the rules of ``platform`` (a target kind; None: the generic rules).

    ``ops``: mnemonic -> DialectOp (default: the op table + registry).
    ``constants``: name -> numpy array for ``fuel.const`` ops emitted without
    an inline ``value`` (the side dict of ``graph_to_module``).
    Raises LoweringError naming every op without a rule (nothing is changed
    then), or the op whose rule failed, with its operand/result types."""
    root = getattr(module, "operation", module)
    with root.context, ir.Location.unknown():
        _lower_root(root, ops, constants, platform)


def _lower_root(root, ops, constants, platform) -> None:
    fuel = _fuel_ops(root)
    names = [_rule_name(op, ops) for op in fuel]
    missing = sorted({f"{op.name} ({n})" for op, n in zip(fuel, names)
                      if rule_for(n, platform) is None})
    if missing:
        raise LoweringError(
            f"fuel-to-linalg: no lowering for {', '.join(missing)}; register one with "
            f"@lowers(\"<Name>\") in compiler/codegen/lowering/, or decompose the op first")
    # Read dtypes and params before the signless rewrite erases the signedness.
    plans = []
    for op, name in zip(fuel, names):
        try:
            plans.append((op, name, [mlir_to_dtype(v.type) for v in op.operands],
                          [mlir_to_dtype(r.type) for r in op.results],
                          _attrs.op_params(op, ops)))
        except DialectError as e:
            raise LoweringError(f"{op.name}{_types_str(op)}: {e}") from None
    _to_signless(root)
    _mark_inputs_read_only(root)
    for op, name, in_dt, out_dt, params in plans:
        _lower_one(op, rule_for(name, platform), name, in_dt, out_dt, params, constants)


def _lower_one(op, rule, name, in_dt, out_dt, params, constants) -> None:
    lw = Lowering(op=op, name=name, operands=list(op.operands), in_dtypes=in_dt,
                  out_dtypes=out_dt, out_types=[r.type for r in op.results], params=params)
    lw.constants = constants or {}
    with ir.InsertionPoint(op), op.location:
        try:
            out = rule(lw)
        except LoweringError:
            raise
        except (MLIRError, ValueError, TypeError, IndexError, KeyError) as e:
            raise LoweringError(
                f"lowering {op.name}{_types_str(op)} params={params} failed: "
                f"{type(e).__name__}: {e}") from e
        values = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(values) != len(op.results):
            raise LoweringError(f"lowering of {op.name} produced {len(values)} values for "
                                f"{len(op.results)} results")
        for i, (r, v) in enumerate(zip(op.results, values)):
            if v.type != r.type:
                try:
                    v = tensor.cast(r.type, v)
                except MLIRError as e:
                    raise LoweringError(
                        f"lowering {op.name}{_types_str(op)}: result {i} has type {v.type}, "
                        f"incompatible with the declared {r.type}: {e}") from None
            r.replace_all_uses_with(v)
    op.erase()


# -- one-op modules for per-op kernels ------------------------------------------

def emit_single_op_module(op_name: str, params: dict, input_types: Sequence[TensorType],
                          dynamic=False, func_name: str = "kernel",
                          ctx: Optional["ir.Context"] = None,
                          ops: Optional[dict] = None) -> "ir.Module":
    """A module with one ``func.func @func_name`` (``llvm.emit_c_interface``)
    holding one ``fuel.<op>`` on its arguments, returning its result(s).

    ``op_name``: the op-table name (``"SumDim"``) or mnemonic (``"sum_dim"``).
    The result type comes from the OpDef's ``infer``. ``dynamic=True`` makes
    every dim ``?`` for shape-generic categories (elementwise, reduce, cast,
    softmax, matmul); other ops stay static. ``dynamic`` may instead be one
    per-dim mask per input and one for the result (``((True, False), (False,
    False), (True, False))``: only the marked extents are ``?``; the kernel
    families choose them). Raises DialectError for an
    unknown op or bad params (the OpDef's own GraphBuildError passes through).
    """
    table = default_ops() if ops is None else ops
    spec = next((d for d in table.values() if d.name == op_name), None) or lookup(op_name, table)
    opdef = spec.source
    if not hasattr(opdef, "infer"):
        raise DialectError(f"{op_name}: no OpDef with a shape rule (fused ops are emitted "
                           f"through their registry entry, not here)")
    full = {p.name: p.default for p in spec.params if not p.required}
    full.update(params)
    out_tt = opdef.infer(list(input_types), full)
    # Fused ops are dynamic only when their kernel family asks (it knows which
    # lowerings are written shape-generically).
    if isinstance(dynamic, (tuple, list)):
        masks = [tuple(m) for m in dynamic]
        if len(masks) != len(input_types) + 1:
            raise DialectError(f"{op_name}: {len(masks)} dynamic-dim masks for "
                               f"{len(input_types)} inputs and one result")
        dyn = any(any(m) for m in masks)
    else:
        dyn = dynamic and (opdef.category in DYNAMIC_CATEGORIES or spec.fused) \
            and spec.name not in STATIC_ONLY
        masks = [dyn] * (len(input_types) + 1)
    ctx = ctx or ir.Context()
    load_fuel_dialect(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        arg_types = [tensor_type(t, m) for t, m in zip(input_types, masks)]
        res_type = tensor_type(out_tt, masks[-1])
        with ir.InsertionPoint(module.body):
            f = func.FuncOp(func_name, (arg_types, [res_type]))
            f.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
            block = f.add_entry_block()
            with ir.InsertionPoint(block):
                attrs = _attrs.params_to_attributes(spec, full)

                def infer(values):
                    tts = [TensorType(tuple(ir.RankedTensorType(v.type).shape),
                                      mlir_to_dtype(v.type)) for v in values]
                    return tensor_type(opdef.infer(tts, full), dyn)

                op = build_fuel_op(spec, list(block.arguments), [res_type], attrs, infer)
                func.ReturnOp(list(op.results))
        try:
            module.operation.verify()
        except MLIRError as e:
            raise DialectError(f"{spec.op_name}: single-op module does not verify: {e}") from None
    return module
