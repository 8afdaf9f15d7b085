"""Recipe instantiation: from a fused op's recipe (data) to a small primitive
DAG with concrete params and types.

``try_instantiate_recipe(entry, params, input_types)`` is TOTAL: it returns a
``RecipeDag`` or a ``Decline(op, reason)``, never raises. The steps:

1. normalize ``params`` (a wrong payload declines) and check the input
   types against the op's own ``infer`` (a misfit declines);
2. obtain the recipe (static roots, or the per-call builder, which may decline);
3. ``validate_recipe`` (declines with the RecipeError reason);
4. the number of distinct binds must equal the number of inputs;
5. the scalar projection must fill exactly ``count_scalar_slots`` slots;
6. emit: post-order over the tree, sharing structurally equal slot-free
   subtrees, filling slots in pre-order, resolving rel params against the
   bind shapes and child 0, inserting the "D4" leading-1 ``Reshape`` before a
   rank-raising ``BroadcastTo``, and typing every node with its OpDef's
   ``infer`` (a shape error declines);
7. the output types must equal the entry's own ``infer`` (else decline: the
   recipe does not compute what the fused op promises).

``RecipeDag.nodes`` is in topological order; each ``DagNode`` names its op
(a primitive of OP_TABLE, or, when ``fused`` is true, a nested static fused
op such as ``SoftmaxLastDim``), its inputs as ``Ref``s (``Ref("input", i)``:
fused input i; ``Ref("node", j)``: ``nodes[j]``), its concrete params dict
(OpDef param names) and its result ``TensorType``. ``outputs`` holds one
``Ref`` per output slot.
"""
from __future__ import annotations

import dataclasses
import traceback
from typing import Any, NamedTuple, Optional

from compiler.graph.opdef import TensorType

from .entry import Decline, normalize_params
from .errors import FusedParamsError, RecipeError
from .grammar import (
    LAST, SLOT, Bind, DimBin, Dims, Extent, Op, Recip, SameAs, WithDim,
    bind_indices, count_scalar_slots, op_signature, validate_recipe,
)


class Ref(NamedTuple):
    kind: str  # "input" | "node"
    index: int


@dataclasses.dataclass(frozen=True)
class DagNode:
    op: str
    inputs: tuple
    params: dict
    type: Any
    fused: bool = False


@dataclasses.dataclass(frozen=True)
class RecipeDag:
    """A primitive DAG in topological order (see module docstring)."""
    op: str
    input_types: tuple
    nodes: tuple
    outputs: tuple

    def output_types(self) -> list:
        return [self.type_of(r) for r in self.outputs]

    def type_of(self, ref: Ref):
        return self.input_types[ref.index] if ref.kind == "input" else self.nodes[ref.index].type

    def __str__(self) -> str:
        def name(r):
            return f"%in{r.index}" if r.kind == "input" else f"%{r.index}"
        lines = []
        for i, n in enumerate(self.nodes):
            ps = ", ".join(f"{k}={v}" for k, v in n.params.items())
            t = n.type
            lines.append(f"%{i} = {n.op}({', '.join(name(r) for r in n.inputs)}"
                         f"{'; ' + ps if ps else ''}) : {t.dtype}{list(t.shape)}")
        lines.append("return " + ", ".join(name(r) for r in self.outputs))
        return "\n".join(lines)


class _Unresolvable(Exception):
    """A rel param that cannot be resolved at these shapes (a decline)."""


# -- rel resolution -----------------------------------------------------------
def _axis(axis, rank: int) -> int:
    if axis is LAST:
        return rank - 1
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank:
        raise _Unresolvable(f"axis {axis} out of range for rank {rank}")
    return a


def _eval_dim(d, binds: list) -> Any:
    if isinstance(d, bool):
        raise _Unresolvable("bool is not a dim")
    if isinstance(d, int):
        return d
    if isinstance(d, Extent):
        shape = binds[d.operand].shape
        if len(shape) == 0:
            raise _Unresolvable(f"Extent of rank-0 bind {d.operand}")
        return shape[_axis(d.axis, len(shape))]
    if isinstance(d, DimBin):
        a, b = _eval_dim(d.a, binds), _eval_dim(d.b, binds)
        if d.op == "+":
            return a + b
        if d.op == "-":
            return a - b
        if d.op == "*":
            return a * b
        if b == 0:
            raise _Unresolvable("division by a zero extent")
        return a // b
    if isinstance(d, Recip):
        v = _eval_dim(d.d, binds)
        if v == 0:
            raise _Unresolvable("reciprocal of a zero extent")
        return 1.0 / v
    raise _Unresolvable(f"{d!r} is not a dim expression")


def _eval_shape(s, binds: list) -> tuple:
    if isinstance(s, SameAs):
        return tuple(binds[s.operand].shape)
    if isinstance(s, WithDim):
        shape = list(binds[s.operand].shape)
        if not shape:
            raise _Unresolvable(f"WithDim on rank-0 bind {s.operand}")
        shape[_axis(s.axis, len(shape))] = _eval_dim(s.dim, binds)
        return tuple(shape)
    if isinstance(s, Dims):
        return tuple(_eval_dim(d, binds) for d in s.dims)
    raise _Unresolvable(f"{s!r} is not a shape expression")


def resolve_params(opname: str, specs, params: dict, binds: list, child_types: list) -> dict:
    """Resolve every rel value of one node (no slots: fill those first).
    Raises ``_Unresolvable`` for a value-dependent failure."""
    out = {}
    for s in specs:
        if s.name not in params:
            continue
        v = params[s.name]
        if v is LAST:
            if not child_types:
                raise _Unresolvable(f"{opname}: LAST needs an operand")
            rank = len(child_types[0].shape)
            v = rank if opname == "Unsqueeze" else rank - 1
            if v < 0:
                raise _Unresolvable(f"{opname}: LAST axis of a rank-0 operand")
        elif isinstance(v, (SameAs, WithDim, Dims)):
            v = _eval_shape(v, binds)
        elif isinstance(v, (Extent, DimBin, Recip)):
            v = _eval_dim(v, binds)
            if s.kind in ("f64", "num"):  # a dim (exact in f64) scaling a float
                v = float(v)
            elif isinstance(v, float):
                raise _Unresolvable(f"{opname}.{s.name}: a reciprocal is not an integer")
        out[s.name] = v
    return out


# -- emission ------------------------------------------------------------------
class _Emitter:
    def __init__(self, input_types: list, scalars: list):
        self.input_types = list(input_types)
        self.scalars = list(scalars)
        self.cursor = 0
        self.nodes: list[DagNode] = []
        self.shared: dict = {}       # structural key -> Ref (slot-free subtrees)
        self.slotfree: dict = {}     # id(node) -> bool

    def type_of(self, ref: Ref):
        return self.input_types[ref.index] if ref.kind == "input" else self.nodes[ref.index].type

    def _is_slot_free(self, n) -> bool:
        k = id(n)
        if k not in self.slotfree:
            if isinstance(n, Op):
                self.slotfree[k] = (not any(v is SLOT for _, v in n.params)
                                    and all(self._is_slot_free(c) for c in n.operands))
            else:
                self.slotfree[k] = True
        return self.slotfree[k]

    def push(self, opname: str, inputs: tuple, params: dict, fused_entry=None) -> Ref:
        types = [self.type_of(r) for r in inputs]
        if fused_entry is not None:
            p = normalize_params(fused_entry, params)
            t = fused_entry.infer(types, p)
            if isinstance(t, (list, tuple)):
                raise _Unresolvable(f"nested multi-output fused op {opname} is not supported")
            self.nodes.append(DagNode(opname, tuple(inputs), p, t, fused=True))
        else:
            from compiler.graph.ops import OP_TABLE
            d = OP_TABLE[opname]
            t = d.infer(types, params)
            self.nodes.append(DagNode(opname, tuple(inputs), dict(params), t))
        return Ref("node", len(self.nodes) - 1)

    def emit(self, n) -> Ref:
        if isinstance(n, Bind):
            return Ref("input", n.index)
        slot_free = self._is_slot_free(n)
        if slot_free and n in self.shared:
            return self.shared[n]
        params = n.param_dict
        for k, v in n.params:  # slot fill, pre-order (before the children)
            if v is SLOT:
                params[k] = float(self.scalars[self.cursor])
                self.cursor += 1
        kids = tuple(self.emit(c) for c in n.operands)
        _, specs, fused_entry = op_signature(n.op)
        params = resolve_params(n.op, specs, params, self.input_types,
                                [self.type_of(k) for k in kids])
        if n.op == "BroadcastTo" and "shape" in params:
            src = self.type_of(kids[0])
            target = tuple(params["shape"])
            if len(target) > len(src.shape):  # D4: left-pad the operand's rank with 1s
                padded = (1,) * (len(target) - len(src.shape)) + tuple(src.shape)
                kids = (self.push("Reshape", kids, {"shape": padded}),)
        ref = self.push(n.op, kids, params, fused_entry)
        if slot_free:
            self.shared[n] = ref
        return ref


def _types_equal(a, b) -> bool:
    return tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype


def recipe_roots(entry, params: dict, input_types: list):
    """The recipe of ``entry`` for these (normalized) params and input types:
    a tuple of roots, or a ``Decline`` from a per-call builder."""
    r = entry.recipe
    if r.build is not None:
        out = r.build(params, list(input_types))
        if isinstance(out, Decline):
            return out
    else:
        out = r.roots
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def try_instantiate_recipe(entry, params: Optional[dict], input_types) -> "RecipeDag | Decline":
    """Instantiate ``entry``'s recipe at these params and input types.
    Total: returns a ``RecipeDag`` or a ``Decline``; never raises."""
    name = getattr(entry, "name", repr(entry))
    try:
        return _instantiate(entry, params, input_types)
    except _Unresolvable as e:
        return Decline(name, f"unresolvable at these shapes: {e}")
    except RecipeError as e:
        return Decline(name, f"recipe rejected: {e}")
    except FusedParamsError as e:
        return Decline(name, f"wrong params payload: {e}")
    except Exception as e:  # never-raise last resort (G2): report, keep the op fused
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return Decline(name, f"{type(e).__name__}: {e} (at {tb.filename}:{tb.lineno})")


def instantiate_recipe(entry, params: Optional[dict], input_types) -> RecipeDag:
    """As ``try_instantiate_recipe`` but raises ``RecipeError`` carrying the
    decline reason instead of returning a ``Decline``."""
    out = try_instantiate_recipe(entry, params, input_types)
    if isinstance(out, Decline):
        raise RecipeError("Declined", str(out))
    return out


def _instantiate(entry, params, input_types) -> "RecipeDag | Decline":
    input_types = [t if isinstance(t, TensorType) else TensorType(tuple(t[0]), t[1])
                   for t in input_types]
    p = normalize_params(entry, params)
    if not getattr(entry, "is_runtime", False):
        from compiler.errors import GraphBuildError, UnsupportedOpError
        try:  # the op's own shape/dtype rule first: a per-call recipe assumes valid inputs
            entry.infer(list(input_types), p)
        except (GraphBuildError, UnsupportedOpError) as e:
            return Decline(entry.name, f"inputs do not fit the op: {e}")
    roots = recipe_roots(entry, p, input_types)
    if isinstance(roots, Decline):
        return roots
    unused = entry.recipe.unused_inputs
    unused = tuple(unused(p, list(input_types)) if callable(unused) else unused)
    validate_recipe(roots, unused)
    n_binds = len(set(bind_indices(roots)) | set(unused))
    if n_binds != len(input_types):
        return Decline(entry.name, f"recipe binds {n_binds} input(s) but the node has "
                                   f"{len(input_types)}")
    scalars = tuple(entry.recipe.scalars(p))
    slots = count_scalar_slots(roots)
    if len(scalars) != slots:
        return Decline(entry.name, f"{len(scalars)} projected scalar(s) for {slots} open "
                                   f"slot(s)")
    em = _Emitter(input_types, scalars)
    outs = tuple(em.emit(r) for r in roots)
    dag = RecipeDag(entry.name, tuple(input_types), tuple(em.nodes), outs)
    if getattr(entry, "is_runtime", False):  # a runtime op's type IS its region's
        return dag
    want = entry.infer(list(input_types), p)
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    got = dag.output_types()
    if len(want) != len(got) or not all(_types_equal(a, b) for a, b in zip(want, got)):
        return Decline(entry.name, f"recipe output types {got} differ from the op's "
                                   f"{want}")
    return dag


# -- consumers -------------------------------------------------------------------
def evaluate_dag(dag: RecipeDag, inputs: list) -> list:
    """Run a RecipeDag with the numpy references of OP_TABLE (and of nested
    fused entries). Returns one array per output."""
    from compiler.graph.ops import OP_TABLE
    from .registry import default_registry
    vals: list = []

    def get(r):
        return inputs[r.index] if r.kind == "input" else vals[r.index]

    for n in dag.nodes:
        args = [get(r) for r in n.inputs]
        if n.fused:
            vals.append(default_registry()[n.op].reference(args, n.params))
        else:
            vals.append(OP_TABLE[n.op].reference(args, n.params))
    return [get(r) for r in dag.outputs]


def emit_dag(graph, dag: RecipeDag, inputs: list):
    """Append ``dag``'s nodes to ``graph`` (``graph.add_node`` for primitives,
    ``graph.add_fused`` for nested fused ops); returns the output handle(s),
    one per output slot (a single handle when there is one)."""
    from .registry import default_registry
    handles: list = []

    def get(r):
        return inputs[r.index] if r.kind == "input" else handles[r.index]

    for n in dag.nodes:
        args = [get(r) for r in n.inputs]
        if n.fused:
            handles.append(graph.add_fused(default_registry()[n.op], args, n.params))
        else:
            handles.append(graph.add_node(n.op, args, n.params))
    outs = [get(r) for r in dag.outputs]
    return outs[0] if len(outs) == 1 else tuple(outs)


def emit_recipe(graph, entry, inputs: list, params: Optional[dict]):
    """Append ``entry``'s recipe at ``inputs`` (graph handles) to ``graph``.
    Returns the output handle (or a tuple of handles for a multi-output op).
    Raises ``RecipeError`` (reason ``Declined``) when the recipe declines."""
    types = [graph_type(graph, h) for h in inputs]
    dag = instantiate_recipe(entry, params, types)
    return emit_dag(graph, dag, inputs)


def graph_type(graph, handle) -> TensorType:
    """The TensorType of a graph handle (duck-typed over the Graph API)."""
    for attr in ("type", "ttype", "tensor_type"):
        t = getattr(handle, attr, None)
        if isinstance(t, TensorType):
            return t
    if hasattr(graph, "type_of"):
        return graph.type_of(handle)
    return TensorType(tuple(handle.shape), handle.dtype)
