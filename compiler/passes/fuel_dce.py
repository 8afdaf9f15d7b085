"""``fuel-dce``: erase pure fuel ops whose results are unused (to a
fixpoint). MLIR's ``canonicalize``/``symbol-dce`` keep IRDL ops, which have
unknown effects; inputs and effectful ops are kept (see ``_fuel.is_erasable``).
"""
from __future__ import annotations

from compiler.passes import ModulePass, register_pass
from compiler.passes import _fuel


@register_pass
class FuelDCE(ModulePass):
    name = "fuel-dce"
    summary = "erase unused pure fuel ops"

    def apply(self, module) -> None:
        # Reverse pre-order visits every user before its producer (SSA
        # dominance: a use comes after its definition, nested uses after the
        # op holding them), so when an op is reached all its users that die
        # are gone already: one pass reaches the fixpoint.
        _fuel.drive(reversed(_fuel.fuel_ops(module)), _erase_if_dead, "dce.visits")


def _erase_if_dead(op) -> None:
    if _fuel.is_erasable(op) and all(not list(r.uses) for r in op.results):
        op.erase()
