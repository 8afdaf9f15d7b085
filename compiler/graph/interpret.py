"""The numpy reference interpreter: evaluates any graph, the test oracle for
every layer below. Inside, values are storage arrays (``numerics`` module
docstring: bf16 as uint16 bits, f16 as float16); inputs and outputs cross
``interpret`` as ``DType.numpy`` arrays (bf16: ``ml_dtypes.bfloat16``); each primitive runs its ``OpDef.reference``
and each fused node its registry entry's ``reference``."""
from __future__ import annotations

from typing import Iterable, Mapping, Optional

import numpy as np

from runtime.dtype import DType, f32_to_bf16, from_storage, to_storage
from runtime.errors import UnknownDTypeError

from ..errors import CompilerError
from .analysis import topological_order
from .graph import FUSED, Graph
from .ops import OP_TABLE

__all__ = ["interpret", "InterpretError"]


class InterpretError(CompilerError, ValueError):
    """Bad inputs to ``interpret`` (missing/unknown names, wrong shape or dtype),
    a reference that failed (e.g. an index out of range), or a reference whose
    result disagrees with the node's declared type."""


def interpret(graph: Graph, inputs: Mapping[str, np.ndarray],
              outputs: Optional[Iterable] = None) -> dict[str, np.ndarray]:
    """Evaluate ``graph`` on ``inputs`` (input name -> array).

    ``outputs``: output names, node handles or node ids to return (default:
    every graph output). Returns ``{name: array}`` keyed by output name (a
    handle/id that is not an output is keyed by its node name). A multi-output
    fused node's value is a tuple of its slot arrays; its consumers read slot 0.

    Input arrays must have the declared shape and numpy dtype
    (``DType.numpy``: ``ml_dtypes.bfloat16`` for bf16, whose input may also be
    given as float32/float64 numbers, rounded; raw uint16 is refused). Outputs
    come back the same way (bf16 as ``ml_dtypes.bfloat16``). Raises
    InterpretError. A symbolic graph runs at the sizes the inputs bind
    (``ShapeSignatureError`` when they contradict its signature)."""
    targets = _targets(graph, outputs)
    unknown = set(inputs) - set(graph.inputs)
    if unknown:
        raise InterpretError(f"unknown input(s) {sorted(unknown)}; the graph's inputs are "
                             f"{list(graph.inputs)}")
    if graph.is_symbolic and all(n in inputs for n in graph.inputs):
        # bind the symbols from the inputs (ShapeSignatureError on a contradiction)
        # and run the graph specialised to those sizes (docs/dynamic-shapes.md)
        values = graph.bind_shapes({n: np.shape(inputs[n]) for n in graph.inputs})
        static = graph.bind(values)
        return interpret(static, inputs, None if outputs is None else
                         [o if isinstance(o, str) else graph._id(o) for o in outputs])
    values: dict[int, object] = {}
    for nid in topological_order(graph, [t for _, t in targets]):
        node = graph.nodes[nid]
        if node.op == "Input":
            values[nid] = _input_value(node, inputs)
            continue
        if node.op == "Const":
            values[nid] = graph.constants[node.params["name"]]
            continue
        args = [_slot0(values[i]) for i in node.inputs]
        if node.op == FUSED:
            ref, what = node.fused.reference, f"Fused[{node.fused.name}]"
        else:
            ref, what = OP_TABLE[node.op].reference, node.op
        try:
            out = ref(args, node.params)
        except (IndexError, ValueError, ArithmeticError) as e:
            raise InterpretError(f"node %{nid} ({node.name}) {what}: {e}") from e
        values[nid] = _check_result(node, what, out)
    result = {}
    for name, nid in targets:
        v, types = values[nid], graph.nodes[nid].output_types
        result[name] = (tuple(from_storage(x, t.dtype) for x, t in zip(v, types))
                        if isinstance(v, tuple) else from_storage(v, types[0].dtype))
    return result


def _targets(graph, outputs):
    if outputs is None:
        return list(graph.outputs.items())
    by_id = {v: k for k, v in graph.outputs.items()}
    out = []
    for o in outputs:
        if isinstance(o, str):
            if o not in graph.outputs:
                raise InterpretError(f"{o!r} is not a graph output; outputs are "
                                     f"{list(graph.outputs)}")
            out.append((o, graph.outputs[o]))
        else:
            nid = graph._id(o)
            out.append((by_id.get(nid, graph.nodes[nid].name), nid))
    return out


def _slot0(v):
    return v[0] if isinstance(v, tuple) else v


def _input_value(node, inputs):
    name = node.params["name"]
    if name not in inputs:
        raise InterpretError(f"missing input {name!r} ({node.dtype.value}"
                             f"{list(node.shape)})")
    arr = np.asarray(inputs[name])
    if node.dtype == DType.BF16 and arr.dtype in (np.float32, np.float64):
        arr = f32_to_bf16(arr.astype(np.float32)).reshape(arr.shape)
    else:
        try:
            arr = to_storage(arr, node.dtype, f"input {name!r}")
        except UnknownDTypeError as e:
            hint = str(e).partition("; ")[2]
            raise InterpretError(f"input {name!r}: dtype {arr.dtype} does not match declared "
                                 f"{node.dtype.value} (numpy {node.dtype.numpy})"
                                 + (f"; {hint}" if hint else "")) from None
    if arr.shape != node.shape:
        raise InterpretError(f"input {name!r}: shape {list(arr.shape)} does not match "
                             f"declared {list(node.shape)}")
    return arr


def _check_result(node, what, out):
    types = node.output_types
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    if len(outs) != len(types):
        raise InterpretError(f"node %{node.id} ({node.name}) {what}: reference returned "
                             f"{len(outs)} value(s) for {len(types)} output slot(s)")
    arrs = []
    for k, (v, t) in enumerate(zip(outs, types)):
        a = np.asarray(v)
        if a.shape != t.shape or a.dtype != t.dtype.storage_numpy:
            raise InterpretError(
                f"node %{node.id} ({node.name}) {what}: reference slot {k} gave "
                f"{a.dtype}{list(a.shape)}, declared {t.dtype.value}{list(t.shape)}")
        arrs.append(a)
    return arrs[0] if len(arrs) == 1 else tuple(arrs)
