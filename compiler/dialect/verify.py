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
from compiler.graph.symbolic import SymbolicError, recording
from compiler.mlir import ir

from .attrs import op_params
from .definition import DIALECT, SEGMENTS_ATTR, find
from .symbols import (DIMS_ATTR, dims_list, enclosing_func, func_dims_error, func_equalities,
                      func_symbols, parse_extent)
from .types import SymbolicDims, keep_extents, mlir_to_dtype


def _tensor_type(t) -> TensorType:
    rt = ir.RankedTensorType(t)
    dyn = ir.ShapedType.get_dynamic_size()
    return TensorType(tuple(-1 if d == dyn else d for d in rt.shape), mlir_to_dtype(rt.element_type))


def _describe(types) -> str:
    def dim(d):
        return "?" if not isinstance(d, int) or d < 0 else str(d)  # a ? or a symbol
    return ", ".join(f"{t.dtype}[{','.join(dim(d) for d in t.shape)}]" for t in types)


def rule_types(op, dims: SymbolicDims, params: dict | None = None, ins=None):
    """The result types ``op``'s shape and dtype rule gives for its operands
    (each ``?`` extent the symbol ``dims`` reads it as; ``ins``: their types
    where known) and params (a broadcast's -1, keep the input's extent,
    replaced by that extent), or None for an op without a rule. Raises what
    the rule raises."""
    spec = find(op.name)
    if spec is None:
        return None  # structural ops (runtime_fused) and unknown ops: IRDL's business
    infer = getattr(spec.source, "infer", None)
    if infer is None or spec.name in ("Input",):
        return None
    if ins is None:
        ins = [TensorType(dims.shape(v), mlir_to_dtype(v.type)) for v in op.operands]
    params = op_params(op) if params is None else params
    if op.name == "fuel.broadcast_to" and ins:
        params = dict(params, shape=tuple(keep_extents(tuple(params["shape"]), ins[0].shape)))
    want = infer(ins, params)
    return list(want) if isinstance(want, (list, tuple)) else [want]


def op_type_error(op, dims: SymbolicDims | None = None) -> str | None:
    """Why ``op``'s result types contradict its rule, or None. With ``?``
    operands the rule runs on symbols (``SymbolicDims``; ``dims`` shared
    across one walk): the ranks and the static extents it computes must be
    the results'; a comparison the symbols cannot decide
    (``SymbolicError``) is not reported, any other refusal of the rule (a
    dtype, a static extent) is. In a function naming its symbols
    (``fuel.symbols``) the named extents are checked too (``_named_error``)."""
    spec = find(op.name)
    try:
        ins = [_tensor_type(v.type) for v in op.operands]
        outs = [_tensor_type(r.type) for r in op.results]
    except (ValueError, FuelError):
        spec = None
    if spec is None:
        return None  # unranked or non-tensor types, unknown ops: IRDL reports those
    dynamic = any(d < 0 for t in (*ins, *outs) for d in t.shape)
    dims = dims or SymbolicDims()
    sink: list = []
    try:
        params = op_params(op)
        if dynamic:
            with recording(sink, op.name):
                want = rule_types(op, dims, params)
        else:
            want = rule_types(op, dims, params, ins)
        if want is None:
            return None
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
    for i, (w, got) in enumerate(zip(want, outs)):
        if w.dtype != got.dtype:
            return (f"result #{i} is {got.dtype} but ({_describe(ins)}) gives {w.dtype}")
        # a ? on either side is not compared (a ? result, or a static result of ? operands)
        if len(w.shape) == len(got.shape) and all(
                g < 0 or not isinstance(d, int) or g == d for g, d in zip(got.shape, w.shape)):
            continue
        return (f"result #{i} is {_describe([got])} but operands ({_describe(ins)}) "
                f"give {_describe([w])}")
    if dynamic and func_symbols(enclosing_func(op)) is not None:
        return _named_error(op, dims, want, sink)
    return None


def _named_error(op, dims: SymbolicDims, want, sink) -> str | None:
    """In a function naming its symbols: an equality the rule needs between
    two extents over named symbols that differ (``batch`` and ``seq``) and
    that ``fuel.equalities`` does not declare, or a result extent the type
    writes static where the rule gives a named symbol (or ``?`` where it
    gives an int)."""
    func = enclosing_func(op)
    declared = func_equalities(func, func_symbols(func) or {})
    def known(d):
        return isinstance(d, int) or dims.encodable(d)
    for a, b, _ in sink:
        if known(a) and known(b) and not any(
                {a, b} == {x, y} for x, y in declared):
            names = ", ".join(_operand_text(v, dims) for v in op.operands)
            return (f"needs {a} == {b}, which the symbols do not give (operands {names}); "
                    f"the extents differ, or declare the equality in the function's "
                    f"fuel.equalities")
    for i, (w, r) in enumerate(zip(want, op.results)):
        dyn = ir.ShapedType.get_dynamic_size()
        for axis, (d, t) in enumerate(zip(w.shape, ir.RankedTensorType(r.type).shape)):
            if (t != dyn and dims.encodable(d)) or (t == dyn and isinstance(d, int)):
                names = ", ".join(_operand_text(v, dims) for v in op.operands)
                return (f"result #{i} axis {axis} is {'?' if t == dyn else t} but the rule "
                        f"gives {d} (operands {names})")
    return None


def _func_error(func, dims: SymbolicDims) -> str | None:
    """A function naming its symbols: its ``fuel.dims`` well formed
    (``symbols.func_dims_error``), and each result's named extents those the
    rules give the returned value."""
    msg = func_dims_error(func)
    if msg is not None or func_symbols(func) is None:
        return msg
    bounds = func_symbols(func)
    ret = list(func.regions[0].blocks[0].operations)[-1] if len(func.regions[0].blocks) else None
    if ret is None:
        return None
    for i, (texts, v) in enumerate(zip(dims_list(func, "res_attrs"), ret.operands)):
        got = dims.named(v) if texts is not None else None
        for axis, (t, d) in enumerate(zip(texts or (), got or ())):
            if t and dims.encodable(d) and d != parse_extent(t, bounds):
                return (f"result #{i} axis {axis}: {DIMS_ATTR} says {t} but the returned "
                        f"value {v.get_name()} has the extent {d}")
    return None


def _operand_text(v, dims) -> str:
    shape = dims.shape(v)
    return f"{v.get_name()}: [{','.join(str(d) for d in shape)}]"


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
    dims = SymbolicDims()  # one walk: each value's named extents computed once

    def cb(op):
        if op.name == "func.func":
            msg = _func_error(op, dims)
            if msg is not None:
                found.append((op, f"'func.func' op {msg}"))
        if op.name.startswith(DIALECT + "."):
            msg = unsupported_type_error(op) or op_type_error(op, dims)
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
