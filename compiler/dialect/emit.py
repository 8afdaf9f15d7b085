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
* A graph with symbols (``graph.symbols``) is emitted with ``?`` extents, its
  symbols named by ``fuel.symbols``/``fuel.dims``/``fuel.equalities`` and
  its symbolic params by ``fuel.extents`` (``symbols.py``)::

    func.func @main(%arg0: tensor<?x?x768xf32> {fuel.dims = ["batch", "seq", ""],
                    fuel.name = "x"}) -> (tensor<?x768xf32> {fuel.dims = ["batch*seq", ""]})
        attributes {fuel.output_names = ["y"],
                    fuel.symbols = {batch = array<i64: 1, 64>, seq = array<i64: 1>}}
      %0 = "fuel.reshape"(%arg0) {fuel.extents = {shape = ["batch*seq", ""]},
                                  shape = [-1, 768]} : ...
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from compiler.errors import DialectError
from compiler.mlir import MLIRError, func, ir
from runtime.dtype import DType
from runtime.symbols import Sym

from .attrs import params_to_attributes
from .definition import build_fuel_op, from_fused_entry, load_fuel_dialect, lookup
from .symbols import (DIMS_ATTR, EQUALITIES_ATTR, SYMBOLS_ATTR, dims_attr, symbols_attr)
from .types import SymbolicDims, broadcast_keeps, mlir_to_dtype, tensor_type

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
    symbolic = bool(getattr(graph, "symbols", None))
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        ins = [graph.nodes[i].type for i in graph.inputs.values()]
        outs = [graph.nodes[i].type for i in graph.outputs.values()]
        with ir.InsertionPoint(module.body):
            f = func.FuncOp(func_name, ([_type(t) for t in ins], [_type(t) for t in outs]))

            def arg_attrs(t, extra):
                dims = {DIMS_ATTR: dims_attr(t.shape)} if symbolic else {}
                return ir.DictAttr.get(dict(extra, **dims))
            f.arg_attrs = ir.ArrayAttr.get([arg_attrs(t, {NAME_ATTR: ir.StringAttr.get(n)})
                                            for t, n in zip(ins, input_names)])
            f.attributes[OUTPUT_NAMES_ATTR] = ir.ArrayAttr.get(
                [ir.StringAttr.get(n) for n in output_names])
            if symbolic:
                f.result_attrs = ir.ArrayAttr.get([arg_attrs(t, {}) for t in outs])
                f.attributes[SYMBOLS_ATTR] = symbols_attr(graph.symbols)
                if graph.equalities:
                    f.attributes[EQUALITIES_ATTR] = ir.ArrayAttr.get([ir.ArrayAttr.get(
                        [ir.StringAttr.get(str(a)), ir.StringAttr.get(str(b))])
                        for a, b, _ in graph.equalities])
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


def _type(t) -> "ir.RankedTensorType":
    """``t`` with ``?`` where its extent is a symbol."""
    return tensor_type(t, [isinstance(d, Sym) for d in t.shape])


def _emit_node(graph, node, values, constants, inline_limit) -> "ir.Value":
    label = f"node %{node.id} ({node.name})"
    try:
        if node.op == "Fused":
            spec = from_fused_entry(node.fused)
        else:
            spec = lookup(node.opdef.mnemonic)
        out_types = [_type(t) for t in (node.output_types or (node.type,))]
        params = node.params
        if node.op == "BroadcastTo":  # an extent kept from the input is -1, as the passes write it
            params = dict(params, shape=broadcast_keeps(params["shape"],
                                                        graph.nodes[node.inputs[0]].type.shape))
        attrs = params_to_attributes(spec, params)
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
                dims = SymbolicDims()
                tts = [TensorType(dims.shape(v), mlir_to_dtype(v.type)) for v in vs]
                return _type(_d.infer(tts, _p))
        op = build_fuel_op(spec, operands, out_types, attrs, infer)
    except DialectError as e:
        raise DialectError(f"{label}: {e}") from None
    except MLIRError as e:
        raise DialectError(f"{label}: cannot create {spec.op_name}: {e}") from None
    return op.results[0]
