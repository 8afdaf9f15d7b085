"""``fuel-to-linalg``: lower every ``fuel.*`` op to linalg/tensor/arith/math
(the rules of ``compiler.codegen.lowering``), so lowerings can be inspected
and FileCheck-tested through the driver like any other pass::

    python -m compiler.opt f.mlir --pass-pipeline='builtin.module(fuel-to-linalg)'

Option ``platform`` (a target kind, ``cpu``): that platform's rules win over
the generic ones, as when a kernel is emitted for it (the cpu conv kernels).

An op with a type fuel cannot represent (an element type with no fuel
dtype, such as ``complex<f32>``) is an error located at the op, found before
anything is rewritten; an op without a rule (or whose rule fails) is an
error diagnostic naming it. The module is then left unchanged.
"""
from __future__ import annotations

from compiler.errors import FuelError
from compiler.passes import ModulePass, register_pass
from compiler.passes.diagnostics import emit_error


@register_pass
class FuelToLinalg(ModulePass):
    name = "fuel-to-linalg"
    summary = "lower fuel ops to linalg/tensor/arith/math"
    platform: str = ""

    def apply(self, module) -> None:
        from compiler.codegen.linalg import lower_to_linalg
        from compiler.dialect.verify import unsupported_types
        bad = unsupported_types(module)
        for op, msg in bad:
            emit_error(op, f"{self.name}: {msg}")
        if bad:
            return
        try:
            lower_to_linalg(module, platform=self.platform or None)
        except FuelError as e:
            emit_error(module, f"{self.name}: {e}")
