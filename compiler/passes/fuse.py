"""``fuel-fuse``: rewrite registry patterns into fused ops, capability-gated
(fuel-spec §4.3 matching, §5.1 ``capability_gated_rules``).

Ops are visited in block (topological) order; at each op the patterns of
the registry's entries whose root op it is are all tried, and the full match
covering the most ops wins (ties: registration order) -- so a spelled-out
layer norm fuses to LayerNormLastDim, not to RmsNormLastDim of ``x - mean``. Matching follows the spec:

* ``Bind(i)`` binds input i (a repeated index must be the same value);
  ``Any_`` matches anything; ``SeeThrough`` matches its child at the same value;
* an ``Op`` node needs the same op, operand count, and params: a concrete
  pattern param must equal the op's, a ``SLOT`` extracts the op's value (pre-
  order), a relative param (``LAST``, ``SameAs``...) is resolved against the
  bound inputs' shapes and must equal the op's; unset params are wildcards;
* commutative ops (add, mul, maximum, minimum) try both operand orders;
* **consumer-count guard**: every matched op other than the root must have
  exactly as many uses in the whole function as it has uses inside the
  pattern (1, or 2 for softmax's shared ``exp``), so a shared intermediate
  blocks fusion;
* the bound indices must be exactly [0, n).

The fused op is created only when its ``infer`` reproduces the root's type
and some candidate backend has a kernel for (OpKind, input dtypes + output
dtype) in the binding table (``backend_supports``). ``remarks=true`` reports
each match that is gated out.

With ``runtime=true`` (the default), after the static patterns, chains
that no static fused op covers become **runtime fused ops** (fuel-spec §4.6,
``fuel.runtime_fused``, see ``compiler.dialect.structural``):

* members: single-result elementwise ops (unary, binary, scalar, compare,
  select, cast) of the recipe vocabulary whose results all have the group's
  shape; ``BroadcastTo``/``Unsqueeze`` views feeding them from outside (input
  side only); optionally one trailing last-axis ``SumDim``/``MaxDim``/``MeanDim``
  as the root;
* groups grow backwards from a root, taking a producer only when every use of
  its result is already in the group (consumer guard: one value leaves the
  group), to a maximal group; at least 2 compute ops and at most
  ``MAX_INPUTS`` inputs;
* capability gate: every compute member has a kernel for its exact dtypes on
  a candidate backend (``backend_supports``): the runtime-fused codegen
  generates what the target's primitives can;
* the region is registered with ``register_runtime_fused`` (structurally
  equal regions share one id) and must instantiate back to the root's type.

Runtime ops already in the input (parsed IR) get their ``fused_id`` and
``scalars`` re-resolved from their bodies for this process.

Options: ``backend`` (default cpu), ``table`` (see ``_target``), ``remarks``,
``runtime`` (default true).
"""
from __future__ import annotations

import math
from typing import Optional

from compiler.mlir import ir
from compiler.passes import ModulePass, register_pass
from compiler.passes import _fuel
from compiler.passes._target import TargetError, resolve_backends, resolve_table
from compiler.passes.diagnostics import emit_error, emit_remark

class _State:
    __slots__ = ("binds", "memo", "matched", "scalars")

    def __init__(self):
        self.binds: dict[int, object] = {}     # bind index -> ir.Value
        self.memo: dict[int, object] = {}      # id(pattern node) -> ir.Value
        self.matched: list = []                # (pattern Op, ir op), pre-order
        self.scalars: list = []

    def copy(self) -> "_State":
        s = _State()
        s.binds, s.memo = dict(self.binds), dict(self.memo)
        s.matched, s.scalars = list(self.matched), list(self.scalars)
        return s


def _grammar():
    from compiler.registry import grammar
    return grammar


def _is_rel(v) -> bool:
    g = _grammar()
    return v is g.LAST or isinstance(v, (g.SameAs, g.WithDim, g.Dims, g.Extent, g.DimBin, g.Recip))


def _equal(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def pattern_use_counts(root) -> dict[int, int]:
    """id(Op node) -> number of uses inside the pattern (its required
    consumer count in the graph)."""
    g = _grammar()
    counts: dict[int, int] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        children = n.operands if isinstance(n, g.Op) else (
            (n.then,) if isinstance(n, g.SeeThrough) else ())
        for c in children:
            counts[id(c)] = counts.get(id(c), 0) + 1
            stack.append(c)
    return counts


class Matcher:
    """Matches one registry pattern (a grammar tree) rooted at a value."""

    def __init__(self, root):
        self.root = root
        self.uses = pattern_use_counts(root)

    def match(self, value) -> Optional[_State]:
        st = self._match(self.root, value, _State(), is_root=True)
        if st is None:
            return None
        if sorted(st.binds) != list(range(len(st.binds))):
            return None
        return st

    def _match(self, node, value, st: _State, is_root=False) -> Optional[_State]:
        g = _grammar()
        if isinstance(node, g.Any_):
            return st
        if isinstance(node, g.Bind):
            prev = st.binds.get(node.index)
            if prev is not None and prev != value:
                return None
            st.binds[node.index] = value
            return st
        if isinstance(node, g.SeeThrough):
            return self._match(node.then, value, st)
        if not isinstance(node, g.Op):
            return None
        seen = st.memo.get(id(node))
        if seen is not None:
            return st if seen == value else None
        op = value.owner
        if not isinstance(op, (ir.Operation, ir.OpView)):
            return None  # a block argument
        op = op.operation
        if _fuel.mnemonic(op) != _mnemonic_of(node.op) or len(op.results) != 1:
            return None
        if len(op.operands) != len(node.operands):
            return None
        if not is_root and len(list(value.uses)) != self.uses.get(id(node), 1):
            return None  # consumer-count guard
        try:
            actual = _fuel.params(op)
        except Exception:
            return None
        for k, v in node.params:
            if v is g.SLOT:
                if k not in actual:
                    return None
                st.scalars.append(actual[k])
            elif not _is_rel(v) and not _equal(v, actual.get(k)):
                return None
        st.memo[id(node)] = value
        st.matched.append((node, op))
        operands = list(op.operands)
        if _fuel.mnemonic(op) in _fuel.COMMUTATIVE and len(operands) == 2:
            for order in (operands, operands[::-1]):
                trial = self._children(node, order, st.copy())
                if trial is not None:
                    return trial
            return None
        return self._children(node, operands, st)

    def _children(self, node, operands, st):
        for child, v in zip(node.operands, operands):
            st = self._match(child, v, st)
            if st is None:
                return None
        return st


def _mnemonic_of(name: str) -> Optional[str]:
    from compiler.graph.ops import OP_TABLE
    d = OP_TABLE.get(name)
    if d is not None:
        return d.mnemonic
    reg = _fuel.registry()
    e = reg.get(name) if reg is not None else None
    return e.mnemonic if e is not None else None


def rel_params_hold(st: _State) -> bool:
    """Relative pattern params, resolved against the bound inputs' types,
    equal the matched ops' params."""
    from compiler.registry.grammar import op_signature
    from compiler.registry.recipe import resolve_params
    try:
        binds = [_fuel.tensor_type(st.binds[i]) for i in range(len(st.binds))]
        for node, op in st.matched:
            rel = {k: v for k, v in node.params if _is_rel(v)}
            if not rel:
                continue
            _, specs, _ = op_signature(node.op)
            kids = [_fuel.tensor_type(v) for v in op.operands]
            want = resolve_params(node.op, specs, rel, binds, kids)
            actual = _fuel.params(op)
            if not all(_equal(want[k], actual.get(k)) for k in want):
                return False
    except Exception:  # unresolvable at these shapes, dynamic shapes: no match
        return False
    return True


@register_pass
class Fuse(ModulePass):
    name = "fuel-fuse"
    summary = "rewrite registry patterns to fused ops the target backend has kernels for"

    backend: str = "cpu"
    table: object = ""
    remarks: bool = False
    runtime: bool = True

    def apply(self, module) -> None:
        reg = _fuel.registry()
        if reg is None:
            emit_error(module, f"{self.name}: the fused-op registry is not available")
            return
        try:
            self._table = resolve_table(self.table)
            self._backends = resolve_backends(self.backend)
        except TargetError as e:
            emit_error(module, f"{self.name}: {e}")
            return
        by_root: dict[str, list] = {}
        for entry in reg:
            for pat in entry.patterns:
                m = _mnemonic_of(getattr(pat.root, "op", ""))
                if m is not None:
                    by_root.setdefault(m, []).append((entry, pat, Matcher(pat.root)))
        self._reported: set = set()
        # Each fusion removes at least the root op, so this terminates; the
        # bound is a guard against a pattern that rewrites an op to itself.
        for _ in range(len(_fuel.fuel_ops(module)) + 1):
            if not self._sweep(module, by_root):
                break
        if self.runtime:
            RuntimeFusion(self.name, self._table, self._backends, self.remarks).run(module)

    def _sweep(self, module, by_root) -> bool:
        """Fuse at the first op where a pattern fires; True if one did."""
        for op in _fuel.fuel_ops(module):
            cands = by_root.get(_fuel.mnemonic(op))
            if not cands or len(op.results) != 1:
                continue
            # The match covering the most ops wins (a spelled-out layer norm
            # also contains an RMS-norm-shaped tail); ties keep registry order.
            matches = []
            for entry, pat, matcher in cands:
                st = matcher.match(op.results[0])
                if st is not None and rel_params_hold(st):
                    matches.append((entry, pat, st))
            matches.sort(key=lambda m: -len({id(o) for _, o in m[2].matched}))
            for entry, pat, st in matches:
                if self._rewrite(op, entry, pat, st):
                    return True
        return False

    def _rewrite(self, root, entry, pat, st: _State) -> bool:
        from compiler.dialect import lookup, params_to_attributes
        from compiler.registry import normalize_params
        inputs = [st.binds[i] for i in range(len(st.binds))]
        try:
            params = normalize_params(entry, pat.params(tuple(st.scalars)))
            in_types = [_fuel.tensor_type(v) for v in inputs]
            out_type = _fuel.tensor_type(root.results[0])
            inferred = entry.infer(in_types, params)
        except Exception:
            return False  # the match does not type as this fused op
        if (tuple(inferred.shape), inferred.dtype) != (tuple(out_type.shape), out_type.dtype):
            return False
        dts = [t.dtype for t in in_types] + [out_type.dtype]
        if entry.op_kind is None or not any(
                self._table.backend_supports(entry.op_kind, dts, b) for b in self._backends):
            if self.remarks and id(root) not in self._reported:
                self._reported.add(id(root))
                emit_remark(root, f"{self.name}: matched {entry.name} ({pat.name or 'pattern'}) "
                                  f"but {'/'.join(str(b) for b in self._backends)} has no "
                                  f"kernel for {_fuel.dtype_list(dts)}; not fused")
            return False
        fused = None
        try:
            with ir.InsertionPoint(root), root.location:
                attrs = params_to_attributes(lookup(entry.mnemonic), params)
                fused = _fuel.create(f"fuel.{entry.mnemonic}", inputs, [root.results[0].type],
                                     attrs, loc=root.location)
            fused.verify()
        except Exception:
            if fused is not None:
                fused.erase()
            return False
        root.results[0].replace_all_uses_with(fused.results[0])
        # Erase the matched ops, now unused (the consumer guard ensured no
        # outside use); a DAG pattern may free a producer only after a later
        # consumer in the list is gone, hence the fixpoint.
        pending = list({id(op): op for _, op in st.matched}.values())
        progress = True
        while pending and progress:
            progress = False
            keep = []
            for op in pending:
                if all(not list(r.uses) for r in op.results):
                    op.erase()
                    progress = True
                else:
                    keep.append(op)
            pending = keep
        return True


# -- runtime fused ops (fuel-spec §4.6) ------------------------------------------------
_ELEMENTWISE_CATEGORIES = frozenset({"unary", "binary", "scalar", "compare", "select", "cast"})
_INPUT_VIEWS = frozenset({"BroadcastTo", "Unsqueeze"})
_TRAILING_REDUCTIONS = frozenset({"SumDim", "MaxDim", "MeanDim"})


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
        dts = [_fuel.tensor_type(v).dtype for v in list(op.operands) + list(op.results)]
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
        dts = [_fuel.tensor_type(v).dtype for v in (*res.inputs, op.results[0])]
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
            tts = [_fuel.tensor_type(v) for v in list(op.operands) + list(op.results)]
        except Exception:
            return None  # dynamic shape or unknown dtype
        if d.name in _INPUT_VIEWS:
            return "view"
        if d.category in _ELEMENTWISE_CATEGORIES:
            return "compute" if op_has_kernel(op, self.table, self.backends) else None
        if d.name in _TRAILING_REDUCTIONS:
            try:
                axis = int(_fuel.params(op)["axis"])
            except Exception:
                return None
            rank = len(tts[0].shape)
            if axis in (rank - 1, -1) and op_has_kernel(op, self.table, self.backends):
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
        """The maximal group rooted at ``root``, or None when it is too small."""
        shape_of = lambda v: tuple(_fuel.tensor_type(v).shape)  # noqa: E731
        shape = shape_of(root.operands[0] if roles[root] == "reduce" else root.results[0])
        group = {root}
        changed = True
        while changed:
            changed = False
            for m in list(group):
                for v in m.operands:
                    p = v.owner
                    if not isinstance(p, (ir.Operation, ir.OpView)):
                        continue
                    p = p.operation
                    if p in group or p in taken or p not in pos:
                        continue
                    role = roles[p]
                    # Views are input-side only: nothing computed feeds a view.
                    if role == "view" or (role == "compute" and roles[m] != "view"
                                          and shape_of(p.results[0]) == shape):
                        pass
                    else:
                        continue
                    if all(_op_of(u.owner) in group for u in p.results[0].uses):  # consumer guard
                        group.add(p)
                        changed = True
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
            in_types = [_fuel.tensor_type(v) for v in region.inputs]
            dag = try_instantiate_recipe(runtime_entry(region.fused_id),
                                         runtime_params(region.scalars), in_types)
        except Exception as e:  # DialectError, RecipeError, RuntimeFusedError
            self._remark(root, f"region not registrable: {e}")
            return False
        fid = region.fused_id
        out = _fuel.tensor_type(root.results[0])
        if isinstance(dag, Decline) or [(tuple(t.shape), t.dtype) for t in dag.output_types()] \
                != [(tuple(out.shape), out.dtype)]:
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
        root.results[0].replace_all_uses_with(fused.results[0])
        for m in reversed(members):  # consumers before producers
            m.erase()
        return True
