"""``fuel-decompose``: replace every fused op the target cannot run with its
recipe (``decompose_via_recipe``).

A ``fuel.runtime_fused`` op is inlined (its body ops replace it) under the
same rule: when the target neither binds its kernel nor has kernels for all
its body ops (``fuse_runtime.runtime_fused_servable``), or with ``all=true``.

A ``fuel.<fused>`` op is decomposed when no candidate backend has a kernel
for its (OpKind, input dtypes + output dtypes) in the binding table (fused
ops with no OpKind never have one), or always with ``all=true``. The
registry instantiates the recipe as a typed primitive DAG
(``try_instantiate_recipe``); this pass translates it into ``fuel.*`` ops
with ``ir.Operation.create``, verifies each, and replaces the fused op.
Nested fused ops a recipe emits are considered in turn.

Total: a wrong params payload, a rejected recipe, an arity mismatch, a
dynamic or unresolvable shape, or an emitted op the verifier refuses leaves
the fused op in place (anything half-built is erased) and reports why with a
warning; the pass itself never fails.

Options: ``target`` / ``table`` / ``backends`` (see ``_target``), ``all``.
"""
from __future__ import annotations

from compiler.mlir import MLIRError, ir
from compiler.passes import ModulePass, register_pass
from compiler.passes import _fuel
from compiler.passes._target import TargetError, resolve_backends, resolve_target
from compiler.passes.diagnostics import emit_error, emit_warning
from runtime.errors import SymbolicError
from runtime.keys import binding_dtypes
from runtime.symbols import Sym

_MAX_NESTING = 8  # recipes that emit fused ops that emit fused ops ...


class Declined(Exception):
    """decompose_via_recipe declined; the message says why."""


def has_kernel(op, table, backends) -> bool:
    """Whether some candidate backend serves ``op``'s exact dtype key and, for a
    fused op, its kernel is meant for these params (``kernel_serves``)."""
    kind = _fuel.op_kind(op)
    if kind is None:
        return False
    dims = _fuel.SymbolicDims()  # ``?`` extents: a kernel with run-time extents decides
    try:
        dts = binding_dtypes(kind, [_fuel.tensor_type(v, dims).dtype for v in op.operands],
                             [_fuel.tensor_type(v, dims).dtype for v in op.results])
    except Exception:
        return False
    if not any(table.backend_supports(kind, dts, b) for b in backends):
        return False
    entry = _fuel.fused_entry(op)
    if entry is None:
        return True
    from compiler.registry.kernel_params import kernel_serves
    try:
        params = _fuel.params(op)
        in_types = [_fuel.tensor_type(v, dims) for v in op.operands]
    except Exception:
        return True  # unreadable params: the table decides, as before
    try:
        return kernel_serves(entry.name, params, in_types)
    except SymbolicError:
        return True  # undecidable on ``?`` extents: the table decides


def decompose_via_recipe(op, entry) -> list:
    """Replace fused ``op`` (registry ``entry``) by its recipe; return the
    new ops. Raises ``Declined`` (and leaves the IR unchanged) on any failure."""
    from compiler.dialect import tensor_type
    from compiler.graph.ops import OP_TABLE
    from compiler.registry import Decline, default_registry, try_instantiate_recipe

    try:
        params = _fuel.params(op)
    except Exception as e:
        raise Declined(f"wrong params payload: {e}") from None
    dims = _fuel.SymbolicDims()  # ``?`` extents: the recipe is instantiated on symbols
    try:
        in_types = [_fuel.tensor_type(v, dims) for v in op.operands]
        out_types = [_fuel.tensor_type(v, dims) for v in op.results]
    except Exception as e:
        raise Declined(f"unresolvable operand/result type: {e}") from None
    # The op's name for what the recipe assumes on ``?`` extents: made once
    # (its SSA name numbers the whole function: some 0.4 ms on a ResNet, for
    # each op of the recipe before; docs/compile-at-scale.md, "Twelfth round").
    where = _fuel.describe(op)
    with dims.recording(where):
        dag = try_instantiate_recipe(entry, params, in_types)
    if isinstance(dag, Decline):
        raise Declined(dag.reason)
    got = dag.output_types()
    if len(got) != len(out_types) or not all(map(_fuel.same_type, got, out_types)):
        raise Declined(f"recipe computes {_types(got)} but the op's results are "
                       f"{_types(out_types)}")
    node_params = []
    for node in dag.nodes:
        try:
            with dims.recording(where):
                node_params.append(_fuel.dialect_params(
                    node.op, node.params, [dag.type_of(r) for r in node.inputs], dims))
        except ValueError as e:
            raise Declined(f"the recipe on symbolic extents needs {e}") from None

    created: list = []
    values: list = []

    def get(ref):
        return op.operands[ref.index] if ref.kind == "input" else values[ref.index]

    try:
        with ir.InsertionPoint(op), op.location:
            for node, node_params in zip(dag.nodes, node_params):
                if node.fused:
                    mnemonic = default_registry()[node.op].mnemonic
                else:
                    mnemonic = OP_TABLE[node.op].mnemonic
                t = node.type
                new = _fuel.create_op(mnemonic, [get(r) for r in node.inputs],
                                      [tensor_type(t, [isinstance(d, Sym) for d in t.shape])],
                                      node_params, loc=op.location)
                created.append(new)
                new.verify()
                values.append(new.results[0])
    except (MLIRError, ValueError, KeyError) as e:  # verify; DialectError (a ValueError) and
        # KeyError from building a param's attribute
        _erase(created)
        msg = str(e).strip().splitlines()
        raise Declined(f"emitted recipe op is invalid: {type(e).__name__}: "
                       f"{' '.join(msg[:2]) if msg else ''}") from None
    outs = [get(r) for r in dag.outputs]
    # (shape, dtype) agree; the full types must too: the recipe's tensors
    # carry no encoding, and a user (func.return) would no longer verify.
    for old, new in zip(op.results, outs):
        if old.type != new.type:
            why = (f"the recipe computes {new.type} but the op's result is {old.type} "
                   f"(tensor encodings are not carried through recipes)")
            _erase(created)  # after formatting: ``new`` may belong to an erased op
            raise Declined(why)
    _fuel.replace_op(op, outs)
    return created


def _erase(created) -> None:
    for c in reversed(created):
        c.erase()


def _types(ts) -> str:
    def dim(d):
        return "?" if isinstance(d, Sym) else str(d)
    return ", ".join(f"{t.dtype}[{', '.join(map(dim, t.shape))}]" for t in ts)


@register_pass
class Decompose(ModulePass):
    name = "fuel-decompose"
    summary = "replace fused ops the target has no kernel for with their recipes"

    target: str = ""
    table: object = ""
    backends: tuple = ()
    all: bool = False

    def apply(self, module) -> None:
        try:
            if self.all:  # no table needed
                table, backends = None, resolve_backends(self.backends or "cpu")
            else:
                table, backends = resolve_target(self.table, self.target, self.backends)
        except TargetError as e:
            emit_error(module, f"{self.name}: {e}")
            return
        self._table, self._backends = table, backends
        _fuel.drive(((op, 0) for op in _fuel.fuel_ops(module) if _fuel.fused_entry(op) is not None),
                    self._decompose, "decompose.visits")
        self._runtime_fused(module, table, backends)

    def _decompose(self, item):
        """Decompose one fused op (nested ``depth`` recipes deep); the fused ops
        its recipe emits are visited in turn."""
        op, depth = item
        if not self.all and has_kernel(op, self._table, self._backends):
            return None
        if depth >= _MAX_NESTING:
            emit_warning(op, f"{self.name}: {_fuel.describe(op)} kept fused: recipes nest "
                             f"deeper than {_MAX_NESTING} levels")
            return None
        try:
            new_ops = decompose_via_recipe(op, _fuel.fused_entry(op))
        except Declined as d:
            why = "" if self.all else " (and the target has no kernel for it)"
            emit_warning(op, f"{self.name}: {_fuel.describe(op)} kept fused{why}: "
                             f"decompose declined: {d}")
            return None
        return [(n, depth + 1) for n in new_ops if _fuel.fused_entry(n) is not None]

    def _runtime_fused(self, module, table, backends) -> None:
        """Inline each ``fuel.runtime_fused`` the target cannot run (or all)."""
        from compiler.dialect.structural import inline_runtime_fused, is_runtime_fused
        from compiler.passes.fuse_runtime import runtime_fused_servable
        for op in _fuel.walk_ops(module, is_runtime_fused):
            if not self.all and runtime_fused_servable(op, table, backends):
                continue
            try:
                inline_runtime_fused(op)
            except Exception as e:  # DialectError: a malformed op stays as it is
                emit_warning(op, f"{self.name}: {_fuel.describe(op)} kept fused: cannot inline "
                                 f"its body: {e}")
