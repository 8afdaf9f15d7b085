"""``fuel-cse``: common-subexpression elimination and the trivial
simplifications for fuel ops.

MLIR's own ``cse`` leaves IRDL ops alone (they carry no ``Pure`` trait), so
fuelc merges them itself. Two fuel ops are the same computation when they
have the same name, operands (sorted for commutative ops), attributes and
result types. ``fuel.const``, inputs, and effectful ops (in-place, memory,
control, destructive fused ops) are never merged. With ``simplify`` (on by
default) an identity ``fuel.cast``, ``add_scalar 0``, ``mul_scalar 1`` and
``pow_i 1`` are replaced by their operand.
"""
from __future__ import annotations

from compiler.mlir import ir
from compiler.passes import ModulePass, register_pass
from compiler.passes import _fuel


def _identity_operand(op):
    """The operand ``op`` forwards unchanged, or None."""
    m = _fuel.mnemonic(op)
    if m not in ("cast", "add_scalar", "mul_scalar", "pow_i") or len(op.operands) != 1:
        return None
    x = op.operands[0]
    if x.type != op.results[0].type:
        return None
    attrs = op.attributes
    try:
        if m == "cast":
            return x
        if m == "add_scalar" and ir.FloatAttr(attrs["value"]).value == 0.0:
            return x
        if m == "mul_scalar" and ir.FloatAttr(attrs["value"]).value == 1.0:
            return x
        if m == "pow_i" and ir.IntegerAttr(attrs["n"]).value == 1:
            return x
    except (KeyError, ValueError, TypeError):
        return None
    return None


def _key(op):
    operands = list(op.operands)
    if _fuel.mnemonic(op) in _fuel.COMMUTATIVE:
        operands.sort(key=hash)
    attrs = tuple(sorted((na.name, str(na.attr)) for na in
                         (op.attributes[i] for i in range(len(op.attributes)))))
    return (op.name, tuple(operands), attrs, tuple(str(r.type) for r in op.results))


@register_pass
class FuelCSE(ModulePass):
    name = "fuel-cse"
    summary = "merge identical pure fuel ops and drop identity casts/scalars"

    simplify: bool = True

    def apply(self, module) -> None:
        self._region_list(module.operation if hasattr(module, "operation") else module, {})

    def _region_list(self, op, scope: dict) -> None:
        for region in op.regions:
            for block in region.blocks:
                table = dict(scope)  # values of enclosing blocks dominate this one
                for inner in list(block.operations):
                    inner = inner.operation
                    if self.simplify:
                        fwd = _identity_operand(inner)
                        if fwd is not None:
                            _fuel.replace_op(inner, [fwd])
                            continue
                    if _fuel.is_mergeable(inner):
                        k = _key(inner)
                        prev = table.get(k)
                        if prev is not None:
                            _fuel.replace_op(inner, list(prev.results))
                            continue
                        table[k] = inner
                    if len(inner.regions):
                        self._region_list(inner, table)
