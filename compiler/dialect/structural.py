"""Structural ops of the fuel dialect: ops that come from neither the op
table nor the fused registry. One so far, the runtime fused node
::

    %r = "fuel.runtime_fused"(%x, %y) ({
    ^bb0(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>):
      %0 = "fuel.mul_scalar"(%a) {value = 2.0 : f64} : ...
      %1 = "fuel.add"(%0, %b) : ...
      gpu.yield %1 : tensor<4x8xf32>
    }) {fused_id = 32768 : i64, scalars = [2.0],
        operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (...) -> tensor<4x8xf32>

* **operands**: up to ``MAX_INPUTS`` tensors. IRDL binds one type per
  constraint value, so a single ``variadic`` group would force every input to
  the same type (measured: "expected 'tensor<4xf32>' but got
  'tensor<4x1xf16>'"); the op has ``MAX_INPUTS`` ``optional`` groups with a
  constraint each instead, hence ``operandSegmentSizes`` (all 1s, then 0s).
* **region** ``body``: one block whose arguments mirror the operands and
  whose ops are primitive ``fuel.*`` ops reading only block arguments and
  each other; it ends in ``gpu.yield`` of the one result. IRDL ops cannot
  carry the Terminator trait (a ``fuel.yield`` block fails with "block with
  no terminator"), and ``gpu.yield`` is the upstream ReturnLike terminator
  with no parent constraint (``scf``/``linalg``/``tensor``/``func`` yields
  all name their parents).
* ``fused_id`` (i64): the runtime fused id (>= 0x8000) the body registered
  as; ``scalars`` (array of f64): the open scalar slots of the body in
  pre-order (``AddScalar``/``MulScalar`` values) -- the ``JitScalars``.

The body is the source of truth: ``resolve_runtime_fused`` re-registers it
(``register_runtime_fused`` dedups by structural hash), so IR printed in one
process and parsed in another gets the id and scalars of *that* process;
``fused_id`` and ``scalars`` are the cached result.

``check_runtime_fused(op)`` verifies what IRDL cannot (DialectError).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from compiler.errors import DialectError
from compiler.mlir import ir

RUNTIME_FUSED = "fuel.runtime_fused"
TERMINATOR = "gpu.yield"
#: (a 3x3 depthwise conv's fused taps read 9 views and 9 weights, and a bias)
MAX_INPUTS = 24
SEGMENTS_ATTR = "operandSegmentSizes"


def structural_irdl_text() -> str:
    """The ``irdl.operation``s of the structural ops (spliced into the fuel
    dialect by ``definition.fuel_irdl_text``)."""
    lines = ["  irdl.operation @runtime_fused {"]
    lines += [f'    %x{i} = irdl.base "!builtin.tensor"' for i in range(MAX_INPUTS)]
    lines += ['    %r0 = irdl.base "!builtin.tensor"',
              '    %a_id = irdl.base "#builtin.integer"',
              '    %a_scalars = irdl.base "#builtin.array"',
              '    %body = irdl.region']
    lines.append("    irdl.operands(" + ", ".join(f"x{i}: optional %x{i}"
                                                 for i in range(MAX_INPUTS)) + ")")
    lines += ["    irdl.results(r0: %r0)",
              '    irdl.attributes {"fused_id" = %a_id, "scalars" = %a_scalars}',
              "    irdl.regions(body: %body)",
              "  }"]
    return "\n".join(lines)


def is_runtime_fused(op) -> bool:
    return getattr(op, "operation", op).name == RUNTIME_FUSED


def create_runtime_fused(inputs: Sequence, result_type, fused_id: int, scalars: Sequence[float],
                         loc=None):
    """Create an empty ``fuel.runtime_fused`` at the current insertion point;
    returns ``(op, block)``, the block's arguments mirroring ``inputs``. The
    caller fills the block and ends it with ``gpu.yield``. DialectError for
    more than MAX_INPUTS inputs."""
    n = len(inputs)
    if not 0 < n <= MAX_INPUTS:
        raise DialectError(f"{RUNTIME_FUSED} takes 1..{MAX_INPUTS} inputs, got {n}")
    i32, i64, f64 = (ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64),
                     ir.F64Type.get())
    attrs = {
        "fused_id": ir.IntegerAttr.get(i64, int(fused_id)),
        "scalars": ir.ArrayAttr.get([ir.FloatAttr.get(f64, float(s)) for s in scalars]),
        SEGMENTS_ATTR: ir.DenseI32ArrayAttr.get([1] * n + [0] * (MAX_INPUTS - n)),
    }
    op = ir.Operation.create(RUNTIME_FUSED, results=[result_type], operands=list(inputs),
                             attributes=attrs, regions=1, loc=loc)
    block = op.regions[0].blocks.append(*[v.type for v in inputs])
    return op, block


def yield_op(value, loc=None):
    """``gpu.yield value`` at the current insertion point."""
    return ir.Operation.create(TERMINATOR, results=[], operands=[value], loc=loc)


def set_resolution(op, fused_id: int, scalars: Sequence[float]) -> None:
    """Rewrite the cached ``fused_id`` / ``scalars`` attributes."""
    op = getattr(op, "operation", op)
    with op.context, op.location:
        op.attributes["fused_id"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                       int(fused_id))
        op.attributes["scalars"] = ir.ArrayAttr.get(
            [ir.FloatAttr.get(ir.F64Type.get(), float(s)) for s in scalars])


def attr_fused_id(op) -> Optional[int]:
    try:
        return int(ir.IntegerAttr(getattr(op, "operation", op).attributes["fused_id"]).value)
    except (KeyError, ValueError, TypeError):
        return None


def attr_scalars(op) -> Optional[tuple[float, ...]]:
    try:
        arr = ir.ArrayAttr(getattr(op, "operation", op).attributes["scalars"])
        return tuple(float(ir.FloatAttr(a).value) for a in arr)
    except (KeyError, ValueError, TypeError):
        return None


def check_runtime_fused(op):
    """Verify a ``fuel.runtime_fused`` beyond IRDL; returns ``(block,
    yielded value)``. Raises DialectError naming the first problem: not one
    block, block arguments that do not mirror the operands, a body op that is
    not a region-free single-result ``fuel.*`` op, a body op reading a value
    defined outside the body, a terminator other than ``gpu.yield`` of one
    value of the result type, or ``scalars`` that are not f64 floats."""
    op = getattr(op, "operation", op)
    where = f"{RUNTIME_FUSED} at {op.location}"
    if not is_runtime_fused(op):
        raise DialectError(f"expected {RUNTIME_FUSED}, got {op.name}")
    if len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
        raise DialectError(f"{where}: the body must be one region with one block")
    if len(op.results) != 1:
        raise DialectError(f"{where}: has {len(op.results)} results; exactly one is supported")
    if attr_fused_id(op) is None or attr_scalars(op) is None:
        raise DialectError(f"{where}: needs an integer 'fused_id' and 'scalars' as an array of "
                           f"f64 floats")
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    if [a.type for a in args] != [v.type for v in op.operands]:
        raise DialectError(
            f"{where}: block arguments ({', '.join(str(a.type) for a in args)}) must mirror "
            f"the operands ({', '.join(str(v.type) for v in op.operands)})")
    ops = [o.operation for o in block.operations]
    if not ops or ops[-1].name != TERMINATOR:
        raise DialectError(f"{where}: the body must end with {TERMINATOR}")
    defined = set(args)
    for o in ops[:-1]:
        if not o.name.startswith("fuel.") or o.name == RUNTIME_FUSED or len(o.regions) \
                or len(o.results) != 1:
            raise DialectError(f"{where}: body op {o.name} is not a primitive fuel op with "
                               f"one result")
        for v in o.operands:
            if v not in defined:
                raise DialectError(f"{where}: body op {o.name} reads a value defined outside "
                                   f"the body; only block arguments and body results may be "
                                   f"used")
        defined.add(o.results[0])
    term = ops[-1]
    if len(term.operands) != 1 or term.operands[0] not in defined \
            or term.operands[0].type != op.results[0].type:
        raise DialectError(f"{where}: {TERMINATOR} must yield one body value of the result "
                           f"type {op.results[0].type}")
    return block, term.operands[0]


# -- body <-> registry region ------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Region:
    """A sub-DAG of fuel ops as a registry region. ``inputs[i]`` is the IR
    value bound to ``Bind(i)``; ``scalars`` are the slot values in the
    pre-order of ``root``; ``slot_values`` maps ``id(node)`` of each slot
    node to its value (for ``align``)."""

    root: object
    inputs: tuple
    scalars: tuple[float, ...]
    slot_values: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
    nodes: tuple = dataclasses.field(default=(), compare=False, repr=False)  # keeps ids unique


def _op_spec_params(op):
    from .attrs import op_params
    from .definition import lookup
    spec = lookup(op.name)
    try:
        return spec, dict(op_params(op))
    except Exception as e:
        raise DialectError(f"{op.name}: cannot read params: {e}") from None


def region_of(root_value, members) -> Region:
    """The region computing ``root_value`` from the ops in ``members`` (a
    collection of operations; every other value is an input), spelled
    canonically so that spellings differing in commutative operand order
    give one region: the operands of Add/Mul/Maximum/Minimum are ordered by
    a hash that ignores which input a leaf is, and binds are numbered by
    first appearance in that order. AddScalar/MulScalar values become slots.
    Raises DialectError for an op the dialect tables do not know."""
    import hashlib

    from compiler.registry import grammar as g

    member_set = {getattr(m, "operation", m) for m in members}

    def producer(v):
        owner = v.owner
        op = owner.operation if isinstance(owner, (ir.Operation, ir.OpView)) else None
        return op if op is not None and op in member_set else None

    info: dict = {}   # value -> (name, params with SLOT, operand values in canonical order)
    lf_hash: dict = {}

    def visit(v) -> str:  # a bind-agnostic hash, and the canonical operand order
        if v in lf_hash:
            return lf_hash[v]
        op = producer(v)
        if op is None:
            lf_hash[v] = "B"
            return "B"
        spec, params = _op_spec_params(op)
        # slots are f64 (``scalars``): an integer scalar no f64 holds stays a constant
        v0 = params.get("value")
        if spec.name in g.SLOT_OPS and v0 is not None and not (isinstance(v0, int)
                                                                and float(v0) != v0):
            params["value"] = g.SLOT
        kids = list(op.operands)
        hs = [visit(u) for u in kids]
        if spec.name in g.COMMUTATIVE and len(kids) == 2 and hs[1] < hs[0]:
            kids, hs = kids[::-1], hs[::-1]
        info[v] = (spec.name, params, kids, op)
        body = repr((spec.name, sorted((k, g._canon_value(x)) for k, x in params.items()), hs))
        lf_hash[v] = hashlib.sha256(body.encode()).hexdigest()
        return lf_hash[v]

    visit(root_value)
    # Occurrences of each value in the region read as a tree. A slot node that
    # occurs more than once (under a shared subexpression) keeps its value as
    # a constant: slots fill per occurrence, so a slot there would repeat its
    # value once per path (exponentially many on a deep DAG).
    order, seen, stack = [], set(), [(root_value, False)]
    while stack:
        v, expanded = stack.pop()
        if expanded:
            order.append(v)
        elif v in info and v not in seen:
            seen.add(v)
            stack.append((v, True))
            stack.extend((u, False) for u in info[v][2])
    occurrences = {root_value: 1}
    for v in reversed(order):  # parents before children
        for u in info[v][2]:
            occurrences[u] = occurrences.get(u, 0) + occurrences[v]
    for v in order:
        name, params, kids, op = info[v]
        if params.get("value") is g.SLOT and occurrences[v] > 1:
            params["value"] = _op_spec_params(op)[1]["value"]
    binds: dict = {}
    memo: dict = {}
    slot_values: dict[int, float] = {}

    def build(v):
        hit = memo.get(v)
        if hit is not None:
            return hit
        if v not in info:
            if v not in binds:
                binds[v] = len(binds)
            node = g.Bind(binds[v])
        else:
            name, params, kids, op = info[v]
            node = g.op(name, *[build(u) for u in kids], **params)
            if g.is_slot_op(node):
                slot_values[id(node)] = float(_op_spec_params(op)[1]["value"])
        memo[v] = node
        return node

    root = build(root_value)
    scalars = tuple(slot_values[id(n)] for n in g.iter_slot_occurrences(root))
    inputs = tuple(sorted(binds, key=binds.__getitem__))
    return Region(root, inputs, scalars, slot_values, tuple(memo.values()))


def align(registered, region: Region):
    """Map ``region`` onto a structurally equal ``registered`` root (equal
    up to commutative operand order, bind numbering and slot values: what
    the registry's structural hash identifies). Returns ``(inputs,
    scalars)`` in the registered region's bind order and slot pre-order, or
    None when the two do not correspond."""
    from compiler.registry import grammar as g
    values = region.slot_values

    # ``state``: bind index map (int -> int) and matched registered nodes
    # (("n", id(r)) -> (id(t), its slot values)); a registered node already
    # matched (shared in the DAG) is not walked again, so this is linear in
    # the distinct nodes plus the slot occurrences.
    def go(r, t, state):
        if isinstance(r, g.Bind) or isinstance(t, g.Bind):
            if not (isinstance(r, g.Bind) and isinstance(t, g.Bind)):
                return None
            prev = state.get(r.index)
            if prev is None:
                if t.index in {v for k, v in state.items() if isinstance(k, int)}:
                    return None
                state[r.index] = t.index
            elif prev != t.index:
                return None
            return []
        key = ("n", id(r))
        if key in state and state[key][0] == id(t):
            return list(state[key][1])
        if not (isinstance(r, g.Op) and isinstance(t, g.Op)) or r.op != t.op \
                or r.params != t.params or len(r.operands) != len(t.operands):
            return None
        own = [values[id(t)]] if g.is_slot_op(t) else []
        orders = [t.operands]
        if r.op in g.COMMUTATIVE and len(t.operands) == 2:
            orders.append(t.operands[::-1])
        for kids in orders:
            b, out = dict(state), list(own)
            for rc, tc in zip(r.operands, kids):
                got = go(rc, tc, b)
                if got is None:
                    break
                out += got
            else:
                b.setdefault(key, (id(t), tuple(out)))
                state.clear()
                state.update(b)
                return out
        return None

    state: dict = {}
    scalars = go(registered, region.root, state)
    bmap = {k: v for k, v in state.items() if isinstance(k, int)}
    if scalars is None or sorted(bmap) != list(range(len(region.inputs))):
        return None
    return tuple(region.inputs[bmap[i]] for i in range(len(bmap))), tuple(scalars)


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A runtime fused op as the runtime sees it: its id in this process,
    its slot values in the registered region's pre-order, and its inputs in
    the registered region's bind order (``inputs[i]`` is ``Bind(i)``)."""

    fused_id: int
    scalars: tuple[float, ...]
    inputs: tuple


def register_region(root_value, members) -> Resolved:
    """Register the region of ``root_value`` over ``members`` (dedup may
    return an existing id, whose region is aligned to this one). Raises
    DialectError, or ``RecipeError``/``RuntimeFusedError`` from the registry."""
    from compiler.registry.runtime_fused import register_runtime_fused, runtime_entry
    region = region_of(root_value, members)
    fid = register_runtime_fused(region.root)
    registered = runtime_entry(fid).recipe.roots
    if registered == region.root:
        return Resolved(fid, region.scalars, region.inputs)
    aligned = align(registered, region)
    if aligned is None:
        raise DialectError(f"runtime fused region {fid:#x} has the structural hash of this "
                           f"body but does not align with it")
    return Resolved(fid, aligned[1], aligned[0])


def resolve_runtime_fused(op) -> Resolved:
    """Register ``op``'s body and map the registered region's binds back to
    the op's operands (unused operands are dropped). Raises DialectError for
    a malformed op or body and ``RecipeError``/``RuntimeFusedError`` (from the
    registry) for a body that is not a valid region."""
    op = getattr(op, "operation", op)
    block, result = check_runtime_fused(op)
    res = register_region(result, [o.operation for o in block.operations][:-1])
    args = list(block.arguments)
    operands = list(op.operands)
    return Resolved(res.fused_id, res.scalars,
                    tuple(operands[args.index(a)] for a in res.inputs))


def inline_runtime_fused(op) -> list:
    """Replace ``op`` by its body ops (moved before it, block arguments
    replaced by the operands); returns the moved ops. Raises DialectError
    (and changes nothing) for a malformed op."""
    op = getattr(op, "operation", op)
    block, result = check_runtime_fused(op)
    for arg, v in zip(block.arguments, op.operands):
        arg.replace_all_uses_with(v)
    moved = [o.operation for o in block.operations][:-1]
    for o in moved:
        o.move_before(op)
    op.results[0].replace_all_uses_with(result)
    op.erase()
    return moved


__all__ = ["RUNTIME_FUSED", "TERMINATOR", "MAX_INPUTS", "structural_irdl_text",
           "is_runtime_fused", "create_runtime_fused", "yield_op", "set_resolution",
           "check_runtime_fused", "Region", "region_of", "align", "Resolved", "register_region",
           "resolve_runtime_fused",
           "inline_runtime_fused", "attr_fused_id", "attr_scalars"]
