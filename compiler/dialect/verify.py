"""Type verification IRDL cannot express: each ``fuel.*`` op's result types
must be what its shape and dtype rule (the OpDef's or the registry entry's
``infer``) gives for its operands and params.

IRDL checks operand counts and attribute kinds; without this, ``fuel.add`` of
``tensor<2xf32>`` and ``tensor<3xf32>`` would parse and fail much later (or
compute garbage). ``?`` operand extents are symbols to the rule
(``SymbolicDims``); a ``?`` on either side of a result extent is not compared.
"""
from __future__ import annotations

import re

from compiler.errors import CompilerError, FuelError
from compiler.graph.opdef import TensorType
from compiler.graph.symbolic import SymbolicError
from compiler.mlir import ir

from .attrs import op_params
from .definition import DIALECT, SEGMENTS_ATTR, lookup
from .types import SymbolicDims, keep_extents, mlir_to_dtype


def _tensor_type(t) -> TensorType:
    rt = ir.RankedTensorType(t)
    dyn = ir.ShapedType.get_dynamic_size()
    return TensorType(tuple(-1 if d == dyn else d for d in rt.shape), mlir_to_dtype(rt.element_type))


def _describe(types) -> str:
    def dim(d):
        return "?" if not isinstance(d, int) or d < 0 else str(d)  # a ? or a symbol
    return ", ".join(f"{t.dtype}[{','.join(dim(d) for d in t.shape)}]" for t in types)


def _symbolic_operands(op, params):
    """Operand types with each ``?`` extent a symbol (``SymbolicDims``), and
    the params the rule reads: a broadcast's -1 (keep the input's extent)
    replaced by that extent."""
    dims = SymbolicDims()
    ins = [TensorType(dims.shape(v), mlir_to_dtype(v.type)) for v in op.operands]
    if op.name == "fuel.broadcast_to" and ins:
        params = dict(params, shape=tuple(keep_extents(tuple(params["shape"]), ins[0].shape)))
    return dims, ins, params


def op_type_error(op) -> str | None:
    """Why ``op``'s result types contradict its rule, or None. With ``?``
    operands the rule runs on symbols (``SymbolicDims``): the ranks and the
    static extents it computes must be the results'; a comparison the
    symbols cannot decide (``SymbolicError``) is not reported, any other
    refusal of the rule (a dtype, a static extent) is."""
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
    try:
        params = op_params(op)
        if dynamic:
            dims, sym_ins, params = _symbolic_operands(op, params)
            with dims.recording(op.name):
                want = infer(sym_ins, params)
        else:
            want = infer(ins, params)
    except SymbolicError:
        return None  # a comparison the symbols cannot decide (a Slice bound on a ? axis)
    except FuelError as e:
        return f"operands ({_describe(ins)}) break the op's rule: {str(e).splitlines()[0]}"
    if spec.segmented:
        sizes = (list(ir.DenseI32ArrayAttr(op.attributes[SEGMENTS_ATTR]))
                 if SEGMENTS_ATTR in op.attributes else None)
        try:
            want_sizes = spec.segment_sizes(len(ins), params)
        except FuelError as e:
            return str(e)
        if sizes != want_sizes:
            return (f"{SEGMENTS_ATTR} {sizes} but its {len(ins)} operands under its params "
                    f"fill the slots {want_sizes} ({', '.join(spec.source.input_names)})")
    want = want if isinstance(want, (list, tuple)) else [want]
    for i, (w, got) in enumerate(zip(want, outs)):
        if w.dtype != got.dtype:
            return (f"result #{i} is {got.dtype} but ({_describe(ins)}) gives {w.dtype}")
        # a ? on either side is not compared (a ? result, or a static result of ? operands)
        if len(w.shape) == len(got.shape) and all(
                g < 0 or not isinstance(d, int) or g == d for g, d in zip(got.shape, w.shape)):
            continue
        return (f"result #{i} is {_describe([got])} but operands ({_describe(ins)}) "
                f"give {_describe([w])}")
    return None


#: Deepest bracket nesting ``check_nesting`` lets through to the MLIR parser,
#: whose recursive descent overflows the C stack (a crash, not an error) on
#: input nested some thousands deep. Real IR nests a few dozen levels.
MAX_NESTING = 256
_OPEN, _CLOSE = "{([<", "})]>"
# Strings and comments (skipped whole), ``->``, brackets and newlines.
_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"?|//[^\n]*|->|[{(\[<})\]>]|\n')
_INT64_MAX = 2 ** 63 - 1


def check_nesting(text: str, limit: int = MAX_NESTING):
    """``(line, col, message)`` locating where ``text`` nests brackets
    (``{ ( [ <`` outside strings and ``//`` comments) deeper than ``limit``,
    or None. A cheap linear scan, to run before handing text to the parser;
    unbalanced closers are the parser's business (depth stays >= 0, ``->``
    is not an angle bracket)."""
    depth = 0
    line, line_start = 1, 0
    for m in _TOKENS.finditer(text):
        tok = m.group()
        if tok == "\n":
            line, line_start = line + 1, m.end()
        elif tok in _OPEN:
            depth += 1
            if depth > limit:
                return (line, m.start() - line_start + 1,
                        f"input nests brackets more than {limit} levels deep; refusing to "
                        f"parse it (the MLIR parser would overflow its stack)")
        elif tok in _CLOSE:
            depth = max(depth - 1, 0)
    return None


def unsupported_type_error(op) -> str | None:
    """Why a ``fuel.*`` op's operand/result types are outside what fuel can
    represent, or None: a tensor element type with no fuel DType (e.g.
    ``complex<f32>``), or a static shape whose element count does not fit
    in int64."""
    for kind, values in (("operand", op.operands), ("result", op.results)):
        for i, v in enumerate(values):
            try:
                rt = ir.RankedTensorType(v.type)
            except (ValueError, TypeError):
                continue  # not a ranked tensor: IRDL reports what it must
            try:
                mlir_to_dtype(rt.element_type)
            except FuelError:
                return (f"{kind} #{i} has element type {rt.element_type}, which fuel has no "
                        f"dtype for; use one of bf16, f16, f32, f64, i8/i16/i32/i64, ui8/ui32/ui64 "
                        f"or the fp8/fp6/fp4 types")
            dyn = ir.ShapedType.get_dynamic_size()
            count = 1
            for d in rt.shape:
                if d != dyn:
                    count *= d
            if count > _INT64_MAX:
                return (f"{kind} #{i} of type {v.type} has {count} elements, more than int64 "
                        f"can index; split the tensor")
    return None


def type_errors(root) -> list[tuple[object, str]]:
    """(op, message) for every fuel op of ``root`` whose types are inconsistent."""
    found = []

    def cb(op):
        if op.name.startswith(DIALECT + "."):
            msg = unsupported_type_error(op) or op_type_error(op)
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


def unsupported_types(root) -> list[tuple[object, str]]:
    """(op, message) for every fuel op of ``root`` with a type fuel cannot
    represent (``unsupported_type_error``)."""
    found = []

    def cb(op):
        if op.name.startswith(DIALECT + "."):
            msg = unsupported_type_error(op)
            if msg is not None:
                found.append((op, f"'{op.name}' op {msg}"))
        return ir.WalkResult.ADVANCE

    getattr(root, "operation", root).walk(cb)
    return found


__all__ = ["verify_types", "type_errors", "op_type_error", "unsupported_type_error",
           "unsupported_types", "check_nesting", "MAX_NESTING", "CompilerError"]
