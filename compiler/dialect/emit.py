"""Emit a ``compiler.graph.Graph`` as a ``func.func`` of ``fuel.*`` ops.

Shape of the result::

    func.func @main(%arg0: tensor<4x8xf32> {fuel.name = "x"}, ...)
        -> (tensor<4xf32>, ...) attributes {fuel.output_names = ["y", ...]} {
      %0 = "fuel.const"() {name = "w", shape = [8], dtype = "f32",
                           value = dense<...> : tensor<8xf32>} : () -> tensor<8xf32>
      %1 = "fuel.sum_dim"(%arg0) {axis = 1 : i64} : (tensor<4x8xf32>) -> tensor<4xf32>
      return %1, ... : ...
    }

* Only nodes reachable from the outputs are emitted, in arena order.
* Each op's location is ``NameLoc(node.name)``, so diagnostics name the node.
* ``Const`` carries its value inline (``value``, a DenseElementsAttr) when it
  has at most ``inline_limit`` elements; larger payloads stay out of the IR
  in ``EmittedModule.constants`` (name -> storage array), as do bf16 ones
  (which are also inline, for reading the IR).
* Fused nodes become ``fuel.<entry.mnemonic>`` with one result per slot.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from compiler.errors import DialectError
from compiler.mlir import MLIRError, func, ir
from runtime.dtype import DType

from .attrs import params_to_attributes
from .definition import build_fuel_op, from_fused_entry, load_fuel_dialect, lookup
from .types import mlir_to_dtype, tensor_type

INLINE_LIMIT = 64
NAME_ATTR = "fuel.name"
OUTPUT_NAMES_ATTR = "fuel.output_names"


@dataclasses.dataclass
class EmittedModule:
    """The emitted module plus what stays outside the IR."""

    module: "ir.Module"
    constants: dict            # Const name -> storage array, for non-inlined constants
    input_names: list
    output_names: list

    def __str__(self) -> str:
        return str(self.module)


def dense_value(arr: np.ndarray, ty: "ir.RankedTensorType") -> "ir.DenseElementsAttr":
    """A DenseElementsAttr of ``ty`` from a storage array (bf16 as uint16 bits)."""
    arr = np.ascontiguousarray(arr).reshape(ty.shape)
    try:
        return ir.DenseElementsAttr.get(arr, type=ty)
    except (ValueError, TypeError, MLIRError) as e:
        raise DialectError(f"cannot encode a {arr.dtype} array as {ty}: {e}") from None


def _live(graph) -> list:
    seen, stack = set(), list(graph.outputs.values())
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        stack.extend(graph.nodes[i].inputs)
    return sorted(seen)


def graph_to_module(graph, ctx: Optional["ir.Context"] = None, func_name: str = "main",
                    inline_limit: int = INLINE_LIMIT) -> EmittedModule:
    """Emit ``graph`` as one ``func.func @func_name`` of fuel ops.

    ``ctx`` defaults to a new context; the fuel dialect is loaded into it if
    needed. Raises DialectError naming the node when a node cannot be
    emitted (unknown op, bad params, a dtype MLIR lacks) or the module does
    not verify (MLIR's diagnostic included)."""
    ctx = ctx or ir.Context()
    load_fuel_dialect(ctx)
    constants: dict = {}
    input_names = list(graph.inputs)
    output_names = list(graph.outputs)
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        arg_types = [tensor_type(graph.nodes[i].type) for i in graph.inputs.values()]
        res_types = [tensor_type(graph.nodes[i].type) for i in graph.outputs.values()]
        with ir.InsertionPoint(module.body):
            f = func.FuncOp(func_name, (arg_types, res_types))
            f.arg_attrs = ir.ArrayAttr.get([
                ir.DictAttr.get({NAME_ATTR: ir.StringAttr.get(n)}) for n in input_names])
            f.attributes[OUTPUT_NAMES_ATTR] = ir.ArrayAttr.get(
                [ir.StringAttr.get(n) for n in output_names])
            block = f.add_entry_block()
        values = {nid: block.arguments[k] for k, nid in enumerate(graph.inputs.values())}
        with ir.InsertionPoint(block):
            for nid in _live(graph):
                node = graph.nodes[nid]
                if node.op == "Input":
                    continue
                with ir.Location.name(node.name):
                    values[nid] = _emit_node(graph, node, values, constants, inline_limit)
            func.ReturnOp([values[i] for i in graph.outputs.values()])
        try:
            module.operation.verify()
        except MLIRError as e:
            raise DialectError(f"emitted fuel module does not verify: {e}") from None
    return EmittedModule(module, constants, input_names, output_names)


def _emit_node(graph, node, values, constants, inline_limit) -> "ir.Value":
    label = f"node %{node.id} ({node.name})"
    try:
        if node.op == "Fused":
            spec = from_fused_entry(node.fused)
        else:
            spec = lookup(node.opdef.mnemonic)
        out_types = [tensor_type(t) for t in (node.output_types or (node.type,))]
        attrs = params_to_attributes(spec, node.params)
        if node.op == "Const":
            arr = graph.constants[node.params["name"]]
            if arr.size <= inline_limit:
                attrs["value"] = dense_value(arr, out_types[0])
            # the bindings cannot read a bf16 DenseElementsAttr back: the plan takes the payload
            if arr.size > inline_limit or node.dtype is DType.BF16:
                constants[node.params["name"]] = arr
        operands = [values[i] for i in node.inputs]
        infer = None
        if node.opdef is not None:
            def infer(vs, _d=node.opdef, _p=node.params):
                from compiler.graph.opdef import TensorType
                tts = [TensorType(tuple(v.type.shape), mlir_to_dtype(v.type)) for v in vs]
                return tensor_type(_d.infer(tts, _p))
        op = build_fuel_op(spec, operands, out_types, attrs, infer)
    except DialectError as e:
        raise DialectError(f"{label}: {e}") from None
    except MLIRError as e:
        raise DialectError(f"{label}: cannot create {spec.op_name}: {e}") from None
    return op.results[0]
