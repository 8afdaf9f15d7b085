"""Type verification IRDL cannot express: each ``fuel.*`` op's result types
must be what its shape and dtype rule (the OpDef's or the registry entry's
``infer``) gives for its operands and params.

IRDL checks operand counts and attribute kinds; without this, ``fuel.add`` of
``tensor<2xf32>`` and ``tensor<3xf32>`` would parse and fail much later (or
compute garbage). Dimensions that are dynamic (``?``) on either side are not
compared; an op whose operands are dynamic is only checked for dtypes.
"""
from __future__ import annotations

from compiler.errors import CompilerError, FuelError
from compiler.graph.opdef import TensorType
from compiler.mlir import ir

from .attrs import op_params
from .definition import DIALECT, lookup
from .types import mlir_to_dtype


def _tensor_type(t) -> TensorType:
    rt = ir.RankedTensorType(t)
    dyn = ir.ShapedType.get_dynamic_size()
    return TensorType(tuple(-1 if d == dyn else d for d in rt.shape), mlir_to_dtype(rt.element_type))


def _describe(types) -> str:
    return ", ".join(f"{t.dtype}[{','.join('?' if d < 0 else str(d) for d in t.shape)}]" for t in types)


def op_type_error(op) -> str | None:
    """Why ``op``'s result types contradict its rule, or None."""
    try:
        spec = lookup(op.name)
    except FuelError:
        return None  # structural ops (runtime_fused) and unknown ops: IRDL's business
    infer = getattr(spec.source, "infer", None)
    if infer is None or spec.name in ("Input",):
        return None
    try:
        ins = [_tensor_type(v.type) for v in op.operands]
        outs = [_tensor_type(r.type) for r in op.results]
    except (ValueError, FuelError):
        return None  # unranked or non-tensor types: IRDL reports those
    dynamic = any(d < 0 for t in ins for d in t.shape)
    probe = [TensorType(tuple(max(d, 1) for d in t.shape), t.dtype) for t in ins]
    try:
        want = infer(probe, op_params(op))
    except FuelError as e:
        if dynamic:
            return None  # the probe's dims are not the real ones
        return f"operands ({_describe(ins)}) break the op's rule: {str(e).splitlines()[0]}"
    want = want if isinstance(want, (list, tuple)) else [want]
    for i, (w, got) in enumerate(zip(want, outs)):
        if w.dtype != got.dtype:
            return (f"result #{i} is {got.dtype} but ({_describe(ins)}) gives {w.dtype}")
        if not dynamic and len(w.shape) == len(got.shape) and all(
                g < 0 or g == d for g, d in zip(got.shape, w.shape)):
            continue
        if not dynamic:
            return (f"result #{i} is {_describe([got])} but operands ({_describe(ins)}) "
                    f"give {_describe([w])}")
    return None


def type_errors(root) -> list[tuple[object, str]]:
    """(op, message) for every fuel op of ``root`` whose types are inconsistent."""
    found = []

    def cb(op):
        if op.name.startswith(DIALECT + "."):
            msg = op_type_error(op)
            if msg is not None:
                found.append((op, f"'{op.name}' op {msg}"))
        return ir.WalkResult.ADVANCE

    getattr(root, "operation", root).walk(cb)
    return found


def verify_types(root) -> None:
    """Raise ``DialectError`` naming the first ill-typed fuel op."""
    from compiler.errors import DialectError
    errs = type_errors(root)
    if errs:
        op, msg = errs[0]
        raise DialectError(f"{op.location}: {msg}" + (f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""))


__all__ = ["verify_types", "type_errors", "op_type_error", "CompilerError"]
