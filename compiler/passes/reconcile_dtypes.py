"""``fuel-reconcile-dtypes``: make every fuel op servable by inserting
lossless casts (``insert_dtype_fixups``).

For each fuel op with an OpKind (views, Const, reshapes and multi-output ops
are skipped), the native key is (OpKind, input dtypes + output dtype). If no
candidate backend serves it (``KernelBindingTable.backend_supports``), the
pass tries promoted keys, narrowest first: the output dtype (the
rule), then f32, then f64. A promotion casts every float operand up to the
target (only lossless widenings: bf16/f16 -> f32 -> f64; integer operands
such as indices and masks keep their dtype) and, where the float result is
widened, casts the result back to its original dtype, so the function's
types never change. One ``fuel.cast`` is created per (value, dtype) and
shared by every consumer. ``OpKind.Cast`` itself is never promoted.

When nothing serves the op, the pass emits an error naming the op, its
dtypes, the backends tried and the table's coverage diagnostic, and fails.

Options: ``target`` / ``table`` / ``backends`` (comma-separated candidate
backends; see ``compiler.passes._target``).
"""
from __future__ import annotations

from compiler.mlir import ir
from compiler.passes import ModulePass, register_pass
from compiler.passes import _fuel
from compiler.passes._target import target_of_pass
from compiler.passes.diagnostics import emit_error
from runtime.dtype import DType
from runtime.errors import NoBackendForOp
from runtime.keys import binding_dtypes
from runtime.opkind import OpKind

_LOSSLESS = {
    (DType.BF16, DType.F32), (DType.BF16, DType.F64),
    (DType.F16, DType.F32), (DType.F16, DType.F64),
    (DType.F32, DType.F64),
}


def lossless_upcast(src: DType, dst: DType) -> bool:
    """True for identity and bf16/f16 -> f32/f64, f32 -> f64."""
    return src == dst or (src, dst) in _LOSSLESS


def promotion_candidates(ins: list[DType], out: DType) -> list[tuple[list[DType], DType]]:
    """Promoted (input dtypes, output dtype) keys to try, narrowest first."""
    floats = [d for d in ins + [out] if d.is_float]
    out_list = []
    for target in dict.fromkeys([out, DType.F32, DType.F64]):
        if not target.is_float or not all(lossless_upcast(d, target) for d in floats):
            continue
        new_in = [target if d.is_float else d for d in ins]
        new_out = target if out.is_float else out
        if (new_in, new_out) != (ins, out):
            out_list.append((new_in, new_out))
    return out_list


@register_pass
class ReconcileDtypes(ModulePass):
    name = "fuel-reconcile-dtypes"
    summary = "insert lossless casts where no candidate backend serves an op's dtypes"

    target: str = ""
    table: object = ""
    backends: tuple = ()

    def apply(self, module) -> None:
        resolved = target_of_pass(module, self.name, self.table, self.target, self.backends)
        if resolved is None:
            return
        table, backends = resolved
        self._casts: dict = {}
        self._table, self._backends = table, backends
        _fuel.drive(_fuel.fuel_ops(module), self._reconcile, "reconcile.visits")

    def _reconcile(self, op) -> None:
        """Leave ``op`` if a candidate backend serves its dtypes, else promote
        it losslessly, else report the coverage gap."""
        table, backends = self._table, self._backends
        kind = _fuel.op_kind(op)
        if kind is None or len(op.results) != 1:
            return
        try:  # dtypes only: an op with ``?`` extents is reconciled like a static one
            ins = [_fuel.tensor_type(v, _fuel.SymbolicDims()).dtype for v in op.operands]
            out = _fuel.tensor_type(op.results[0], _fuel.SymbolicDims()).dtype
        except Exception as e:
            emit_error(op, f"{self.name}: cannot read the dtypes of {_fuel.describe(op)}: {e}")
            return

        def servable(i, o):
            return any(table.backend_supports(kind, binding_dtypes(kind, i, [o]), b)
                       for b in backends)

        if servable(ins, out) or (kind is OpKind.Cast and ins == [out]):
            return  # (an identity cast has no kernel; fuel-cse{simplify} removes it)
        promoted = None if kind is OpKind.Cast else next(
            ((i, o) for i, o in promotion_candidates(ins, out) if servable(i, o)), None)
        if promoted is None:
            emit_error(op, self._coverage_message(op, kind, ins, out, table, backends))
            return
        self._promote(op, *promoted)

    def _coverage_message(self, op, kind, ins, out, table, backends) -> str:
        head = (f"no kernel for {_fuel.describe(op)} ({kind.name}) with dtypes "
                f"{_fuel.dtype_list([*ins, out])} on {'/'.join(str(b) for b in backends)}, "
                f"and no lossless promotion (bf16/f16 -> f32 -> f64) is served either")
        try:
            table.lookup_with_caps(kind, binding_dtypes(kind, ins, [out]), backends[0],
                                   context=op.name)
        except NoBackendForOp as e:
            return f"{head}: {e}"
        except Exception:  # pragma: no cover - a table bug must not crash the pass
            pass
        return head

    def _cast(self, value, dtype: DType, before):
        """The shared ``fuel.cast`` of ``value`` to ``dtype`` (created before
        ``before``, the first consumer in block order, so it dominates the
        later ones)."""
        key = (value, dtype)
        hit = self._casts.get(key)
        if hit is not None:
            return hit
        with ir.InsertionPoint(before), before.location:
            c = _fuel.create("fuel.cast", [value], [_fuel.with_element_type(value.type, dtype)],
                             _fuel.cast_attributes(dtype), loc=before.location)
        self._casts[key] = c.results[0]
        return c.results[0]

    def _promote(self, op, new_in: list[DType], new_out: DType) -> None:
        operands = [self._cast(v, d, op) if _fuel.dtype_of(v) != d else v
                    for v, d in zip(op.operands, new_in)]
        old = op.results[0]
        old_dtype = _fuel.dtype_of(old)
        with ir.InsertionPoint(op), op.location:
            new = _fuel.create(op.name, operands, [_fuel.with_element_type(old.type, new_out)],
                               _fuel.attributes_of(op), loc=op.location)
            result = new.results[0]
            if new_out != old_dtype:
                back = _fuel.create("fuel.cast", [result], [old.type],
                                    _fuel.cast_attributes(old_dtype), loc=op.location)
                result = back.results[0]
        _fuel.replace_op(op, [result])
