"""``fuel-fuse-runtime``: elementwise chains that no static fused op covers
become **runtime fused ops** (``fuel.runtime_fused``, see
``compiler.dialect.structural``). ``fuel-fuse`` runs this after its static
patterns unless ``runtime=false``; the pass exists on its own too.

* members: single-result elementwise ops (unary, binary, scalar, compare,
  select, cast) of the recipe vocabulary whose results all have the group's
  shape; in a group with a trailing last-axis ``SumDim``/``MaxDim``/``MeanDim``
  (over at least ``MIN_REDUCED_EXTENT`` elements) as the root, also the ``BroadcastTo``/``Unsqueeze`` views feeding it from
  outside (input side only). A purely elementwise group leaves them outside:
  its kernel then reads every input in the output's shape (a broadcast as
  stride 0), so its axes can be merged into long loops and it can be cut
  into tiles (``codegen.runtime_fused.coalesce``);
* groups grow backwards from a root, taking a producer only when every use of
  its result is already in the group (consumer guard: one value leaves the
  group) and the group still reads at most ``MAX_INPUTS`` values from outside,
  to a maximal group of at most ``MAX_MEMBERS`` ops; at least 2 compute ops
  (a longer chain, such as the 25 taps of a 5x5 depthwise conv, becomes
  several groups);
* capability gate: every compute member has a kernel for its exact dtypes on
  a candidate backend (``backend_supports``): the runtime-fused codegen
  generates what the target's primitives can;
* the region is registered with ``register_runtime_fused`` (structurally
  equal regions share one id) and must instantiate back to the root's type.

Runtime ops already in the input (parsed IR) get their ``fused_id`` and
``scalars`` re-resolved from their bodies for this process.

Linear in the block: every op is classified once, and a group grows by a
worklist (a producer is examined when one of its users joins the group).

Options: ``target`` / ``table`` / ``backend`` (see ``_target``), ``remarks``.
"""
from __future__ import annotations

from collections import deque
from typing import Optional

from compiler.graph.opdef import ELEMENTWISE_CATEGORIES
from compiler.mlir import ir
from compiler.passes import ModulePass, register_pass
from compiler.passes import _fuel
from compiler.passes._target import target_of_pass
from compiler.passes.diagnostics import emit_error, emit_remark

#: The most ops one runtime fused group takes (a longer chain becomes several
#: groups): bounds the region's size for the registry's structural hash and
#: for the generated loop body.
MAX_MEMBERS = 64

_INPUT_VIEWS = frozenset({"BroadcastTo", "Unsqueeze"})
_TRAILING_REDUCTIONS = frozenset({"SumDim", "MaxDim", "MeanDim"})
#: A trailing reduction joins a group only over at least this many elements: a
#: region reducing a short axis runs its whole chain one element at a time (the
#: reduction loop is the only vectorizable one), so a sigmoid before a mean over
#: 7 took 100 us for [1,320,7,7] on one core; unfused, the chain runs in vectors.
MIN_REDUCED_EXTENT = 16


def _op_of(owner):
    return getattr(owner, "operation", owner)


def _opdef(op):
    """The primitive OpDef of a fuel op, or None (fused/structural/unknown)."""
    d = _fuel.dialect_op(op)
    return d.source if d is not None and not d.fused else None


def op_has_kernel(op, table, backends) -> bool:
    """Whether some candidate backend has a kernel for ``op``'s OpKind at
    its exact dtypes (operands then result)."""
    kind = _fuel.op_kind(op)
    if kind is None:
        return False
    try:
        dts = [_fuel.tensor_type(v, _fuel.SymbolicDims()).dtype
               for v in list(op.operands) + list(op.results)]
    except Exception:
        return False
    return any(table.backend_supports(kind, dts, b) for b in backends)


def runtime_fused_servable(op, table, backends) -> bool:
    """Whether the target can run ``fuel.runtime_fused`` ``op``: its kernel
    is bound for its id and dtypes, or every compute op of its body has a
    kernel (what the runtime-fused codegen generates from). False for a
    malformed op."""
    from compiler.dialect.structural import check_runtime_fused, resolve_runtime_fused
    from runtime import BindingKey
    try:
        block, _ = check_runtime_fused(op)
        res = resolve_runtime_fused(op)
        dts = [_fuel.tensor_type(v, _fuel.SymbolicDims()).dtype
               for v in (*res.inputs, op.results[0])]
        key = BindingKey.runtime_fused(res.fused_id)
        if any(table.backend_supports(key, dts, b) for b in backends):
            return True
        body = [o.operation for o in block.operations][:-1]
    except Exception:
        return False
    return all(_fuel.op_kind(o) is None or op_has_kernel(o, table, backends) for o in body)


class RuntimeFusion:
    """Grows and rewrites the runtime fused groups of one module (see the
    module docstring)."""

    def __init__(self, pass_name: str, table, backends, remarks: bool):
        self.pass_name = pass_name
        self.table = table
        self.backends = backends
        self.remarks = remarks

    def run(self, module) -> None:
        from compiler.dialect.structural import (is_runtime_fused, resolve_runtime_fused,
                                                 set_resolution)
        for op in _fuel.walk_ops(module, is_runtime_fused):
            try:
                res = resolve_runtime_fused(op)
            except Exception as e:
                emit_error(op, f"{self.pass_name}: malformed runtime fused op: {e}")
                continue
            set_resolution(op, res.fused_id, res.scalars)
        for f in _fuel.walk_ops(module, lambda o: o.name == "func.func"):
            for region in f.regions:
                for block in region.blocks:
                    self._block(block)

    # -- classification --------------------------------------------------------------
    def _role(self, op) -> Optional[str]:
        """'compute', 'reduce', 'view' or None (not a member candidate)."""
        from compiler.registry.grammar import RECIPE_VOCABULARY
        d = _opdef(op)
        if d is None or d.name not in RECIPE_VOCABULARY or len(op.results) != 1:
            return None
        try:
            tts = [_fuel.tensor_type(v, _fuel.SymbolicDims())
                   for v in list(op.operands) + list(op.results)]
        except Exception:
            return None  # unknown dtype
        if d.name in _INPUT_VIEWS:
            return "view"
        if d.category in ELEMENTWISE_CATEGORIES:
            return "compute" if op_has_kernel(op, self.table, self.backends) else None
        if d.name in _TRAILING_REDUCTIONS:
            try:
                axis = int(_fuel.params(op)["axis"])
            except Exception:
                return None
            rank = len(tts[0].shape)
            # (a ``?`` reduced extent is not known to reach MIN_REDUCED_EXTENT)
            if axis in (rank - 1, -1) and isinstance(tts[0].shape[-1], int) \
                    and tts[0].shape[-1] >= MIN_REDUCED_EXTENT \
                    and op_has_kernel(op, self.table, self.backends):
                return "reduce"
        return None

    # -- grouping ----------------------------------------------------------------------
    def _block(self, block) -> None:
        ops = [o.operation for o in block.operations]
        pos = {o: i for i, o in enumerate(ops)}
        roles = {o: self._role(o) for o in ops}
        taken: set = set()
        groups = []
        # Find every group before rewriting any (erasing ops invalidates the
        # Operation objects these tables are keyed by).
        for root in reversed(ops):
            if root in taken or roles[root] not in ("compute", "reduce"):
                continue
            group = self._grow(root, roles, pos, taken)
            if group is not None:
                taken.update(group)
                groups.append((pos[root], sorted(pos[m] for m in group)))
        for root, members in groups:
            self._rewrite(ops[root], [ops[i] for i in members])

    def _grow(self, root, roles, pos, taken) -> Optional[set]:
        """The maximal group rooted at ``root`` (at most ``MAX_MEMBERS`` ops),
        or None when it is too small. A producer is examined each time one of
        its users joins; it joins once all its users are members."""
        # MLIR shapes, ``?`` as -1: the elementwise members' operands all have
        # one shape, so their ``?`` extents are one extent.
        shape_of = lambda v: tuple(ir.RankedTensorType(v.type).shape)  # noqa: E731
        shape = shape_of(root.operands[0] if roles[root] == "reduce" else root.results[0])
        from compiler.dialect.structural import MAX_INPUTS
        group = {root}
        inputs = set(root.operands)  # the values the group reads from outside
        pending = deque([root])
        while pending and len(group) < MAX_MEMBERS:
            m = pending.popleft()
            for v in m.operands:
                _fuel.count("fuse-runtime.examined")
                p = v.owner
                if not isinstance(p, (ir.Operation, ir.OpView)):
                    continue
                p = p.operation
                if p in group or p in taken or p not in pos:
                    continue
                role = roles[p]
                if role not in ("view", "compute") or (role == "view" and roles[root] != "reduce"):
                    continue
                users = [_op_of(u.owner) for u in p.results[0].uses]
                if not all(u in group for u in users):  # consumer guard
                    continue
                # Views are input-side only: nothing computed feeds a view.
                if role == "compute" and (shape_of(p.results[0]) != shape
                                          or all(roles[u] == "view" for u in users)):
                    continue
                grown = (inputs - {p.results[0]}) | set(p.operands)
                if len(grown) > MAX_INPUTS:  # the group stops growing on this side
                    continue
                inputs = grown
                group.add(p)
                pending.append(p)
                if len(group) >= MAX_MEMBERS:
                    break
        # Views count for nothing; compute ops (and the reduction) do.
        if sum(1 for m in group if roles[m] != "view") < 2:
            return None
        return group

    # -- rewrite ------------------------------------------------------------------------
    def _remark(self, root, why: str) -> None:
        if self.remarks:
            emit_remark(root, f"{self.pass_name}: runtime fusion at {_fuel.describe(root)} "
                              f"not formed: {why}")

    def _rewrite(self, root, members: list) -> bool:
        from compiler.dialect.structural import (MAX_INPUTS, create_runtime_fused,
                                                 register_region, yield_op)
        from compiler.registry import Decline, try_instantiate_recipe
        from compiler.registry.runtime_fused import runtime_entry, runtime_params
        try:
            region = register_region(root.results[0], members)
            if len(region.inputs) > MAX_INPUTS:
                self._remark(root, f"{len(region.inputs)} inputs (at most {MAX_INPUTS})")
                return False
            dims = _fuel.SymbolicDims()  # ``?`` extents
            in_types = [_fuel.tensor_type(v, dims) for v in region.inputs]
            with dims.recording():
                dag = try_instantiate_recipe(runtime_entry(region.fused_id),
                                             runtime_params(region.scalars), in_types)
            out = _fuel.tensor_type(root.results[0], dims)
        except Exception as e:  # DialectError, RecipeError, RuntimeFusedError
            self._remark(root, f"region not registrable: {e}")
            return False
        fid = region.fused_id
        if isinstance(dag, Decline) or len(dag.output_types()) != 1 \
                or not _fuel.same_type(dag.output_types()[0], out):
            self._remark(root, f"region does not re-instantiate to {out}: "
                               f"{dag.reason if isinstance(dag, Decline) else dag.output_types()}")
            return False
        fused = None
        try:
            with ir.InsertionPoint(root), root.location:
                fused, body = create_runtime_fused(region.inputs, root.results[0].type, fid,
                                                   region.scalars, loc=root.location)
                mapping = {v: a for v, a in zip(region.inputs, body.arguments)}
            with ir.InsertionPoint(body), root.location:
                for m in members:
                    new = _fuel.create(m.name, [mapping[v] for v in m.operands],
                                       [r.type for r in m.results], _fuel.attributes_of(m),
                                       loc=m.location)
                    mapping[m.results[0]] = new.results[0]
                yield_op(mapping[root.results[0]], loc=root.location)
            fused.verify()
        except Exception as e:
            if fused is not None:
                fused.erase()
            self._remark(root, f"the fused op does not verify: {e}")
            return False
        _fuel.replace_op(root, [fused.results[0]], dead=reversed(members))  # consumers first
        return True


@register_pass
class FuseRuntime(ModulePass):
    name = "fuel-fuse-runtime"
    summary = "turn elementwise chains no fused op covers into runtime fused ops"

    target: str = ""
    table: object = ""
    backend: str = ""
    remarks: bool = False

    def apply(self, module) -> None:
        resolved = target_of_pass(module, self.name, self.table, self.target, self.backend)
        if resolved is None:
            return
        table, backends = resolved
        RuntimeFusion(self.name, table, backends, self.remarks).run(module)
