"""Named symbolic extents in fuel IR (docs/dynamic-shapes.md, "Symbols in fuel IR").

A graph with symbolic dims is emitted with ``?`` extents; the names travel as
attributes, so a print/parse round trip keeps them:

* ``fuel.symbols`` on the ``func.func``: the symbols and their bounds,
  ``{batch = array<i64: 1, 64>, seq = array<i64: 1>}`` (no upper bound: one
  entry);
* ``fuel.dims`` on each argument and result (``arg_attrs``/``res_attrs``):
  one string per axis, the extent of a ``?`` axis (``"batch"``,
  ``"2*seq + 1"``, ``"batch*seq"``) or ``""`` on a static axis;
* ``fuel.equalities`` on the function: pairs of extents the graph's shape
  rules assumed equal (``graph.equalities``), ``[["k", "k2"]]``;
* ``fuel.extents`` on an op whose params hold symbolic extents (``Reshape``
  and ``BroadcastTo`` shapes, ``Slice`` start/len, ``Iota`` len, ``Pad``
  widths): param name -> the expression (an ``i64`` param) or one string per
  element (an ``i64s`` param, ``""`` where the int holds). The param itself
  holds ``-1`` there, as MLIR's static/dynamic split writes a dynamic size
  (``tensor.extract_slice``'s ``static_sizes``). A ``BroadcastTo`` extent that
  keeps the input's own ``?`` extent stays the bare ``-1`` the passes write.

Expressions are the text ``runtime.symbols.Sym`` prints: ints, symbol names,
``+ - *`` and ``//`` by an int (``floor_div``: ``(h + 1) // 2``).
"""
from __future__ import annotations

import ast
from typing import Optional

from compiler.errors import DialectError
from compiler.mlir import ir
from runtime.symbols import Sym, SymbolicError, floor_div

SYMBOLS_ATTR = "fuel.symbols"
DIMS_ATTR = "fuel.dims"
EQUALITIES_ATTR = "fuel.equalities"
EXTENTS_ATTR = "fuel.extents"

_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b}


def parse_extent(text: str, bounds: dict):
    """The extent ``text`` spells, over the symbols of ``bounds`` (name ->
    (lo, hi)); a ``DialectError`` for anything else (an unknown symbol, a
    call, ``/``)."""
    def ev(n):
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.Name):
            if n.id not in bounds:
                raise DialectError(f"extent {text!r} names the symbol {n.id!r}, which the "
                                   f"function's {SYMBOLS_ATTR} does not declare "
                                   f"({', '.join(sorted(bounds)) or 'none'})")
            return Sym(n.id, *bounds[n.id])
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
            return _BINOPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.FloorDiv):
            den = ev(n.right)
            if isinstance(den, int) and den >= 1:
                return floor_div(ev(n.left), den)
        raise DialectError(f"extent {text!r}: {ast.unparse(n)!r} is not an int, a symbol, "
                           f"+, -, * or // by a positive int")
    try:
        return ev(ast.parse(text, mode="eval").body)
    except DialectError:
        raise
    except (SyntaxError, ValueError, RecursionError):   # (a NUL byte; nesting too deep)
        raise DialectError(f"extent {text[:80]!r} is not an expression over symbols") from None
    except SymbolicError as e:
        raise DialectError(f"extent {text!r}: {e}") from None


def symbols_attr(symbols: dict) -> "ir.Attribute":
    """``fuel.symbols`` for ``{name: (lo, hi)}`` (needs an active context)."""
    return ir.DictAttr.get({n: ir.DenseI64ArrayAttr.get([lo] if hi is None else [lo, hi])
                            for n, (lo, hi) in symbols.items()})


def extent_text(d) -> str:
    return str(d) if isinstance(d, Sym) else ""


def dims_attr(shape) -> "ir.Attribute":
    """``fuel.dims`` of a shape: the expression of each symbolic axis, ``""`` else."""
    return ir.ArrayAttr.get([ir.StringAttr.get(extent_text(d)) for d in shape])


def enclosing_func(op):
    """The ``func.func`` holding ``op`` (an operation), or None."""
    op = getattr(op, "operation", op)
    while op is not None:
        if op.name == "func.func":
            return op
        parent = op.parent
        op = getattr(parent, "operation", parent)
    return None


def func_symbols(func) -> Optional[dict]:
    """``{name: (lo, hi)}`` from ``func``'s ``fuel.symbols``, or None where it has none."""
    if func is None or SYMBOLS_ATTR not in func.attributes:
        return None
    out = {}
    for na in ir.DictAttr(func.attributes[SYMBOLS_ATTR]):
        b = list(ir.DenseI64ArrayAttr(na.attr))
        out[na.name] = (b[0], b[1] if len(b) > 1 else None)
    return out


def func_equalities(func, bounds: dict) -> list:
    """The pairs of extents ``fuel.equalities`` declares."""
    if func is None or EQUALITIES_ATTR not in func.attributes:
        return []
    return [tuple(parse_extent(ir.StringAttr(s).value, bounds) for s in ir.ArrayAttr(pair))
            for pair in ir.ArrayAttr(func.attributes[EQUALITIES_ATTR])]


def dims_list(func, key: str) -> list:
    """Each argument's (``arg_attrs``) or result's (``res_attrs``) ``fuel.dims``
    strings, None where it has none."""
    if key not in func.attributes:
        return []
    out = []
    for a in ir.ArrayAttr(func.attributes[key]):
        d = ir.DictAttr(a)
        out.append([ir.StringAttr(s).value for s in ir.ArrayAttr(d[DIMS_ATTR])]
                   if DIMS_ATTR in d else None)
    return out


def func_dims_error(func) -> Optional[str]:
    """Why ``func``'s ``fuel.symbols``/``fuel.dims``/``fuel.equalities`` are
    inconsistent (an axis named where the type is static or not named where
    it is ``?``, an undeclared symbol, a malformed expression), or None."""
    try:
        bounds = func_symbols(func)
        if bounds is None:
            return None
        func_equalities(func, bounds)
        ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        for what, key, types in (("argument", "arg_attrs", ftype.inputs),
                                 ("result", "res_attrs", ftype.results)):
            for i, (texts, t) in enumerate(zip(dims_list(func, key), types)):
                if texts is None:
                    continue
                shape = ir.RankedTensorType(t).shape
                dyn = ir.ShapedType.get_dynamic_size()
                if len(texts) != len(shape) or any(bool(x) != (d == dyn)
                                                   for x, d in zip(texts, shape)):
                    return (f"{what} #{i} of type {t} has {DIMS_ATTR} {texts}: one entry per "
                            f"axis, an extent on each ? axis and \"\" on each static one")
                for x in texts:
                    if x:
                        parse_extent(x, bounds)
    except DialectError as e:
        return str(e)
    except (TypeError, ValueError) as e:
        return f"malformed {SYMBOLS_ATTR}/{DIMS_ATTR}/{EQUALITIES_ATTR}: {e}"
    return None


def value_dims(value) -> Optional[tuple]:
    """The extents a function argument's ``fuel.dims`` names (a Sym per
    named axis, None on the others), or None for any other value (or dims
    ``func_dims_error`` refuses)."""
    value = value.maybe_downcast()
    if not isinstance(value, ir.BlockArgument):
        return None
    func = value.owner.owner
    func = getattr(func, "operation", func)
    bounds = func_symbols(func) if func.name == "func.func" else None
    if bounds is None or "arg_attrs" not in func.attributes:
        return None
    attrs = ir.ArrayAttr(func.attributes["arg_attrs"])
    if value.arg_number >= len(attrs):
        return None
    d = ir.DictAttr(attrs[value.arg_number])
    if DIMS_ATTR not in d:
        return None
    try:
        return tuple(parse_extent(t, bounds) if t else None
                     for t in (ir.StringAttr(a).value for a in ir.ArrayAttr(d[DIMS_ATTR])))
    except (DialectError, TypeError, ValueError):
        return None


def encode_extents(params: dict, kinds: dict) -> tuple[dict, dict]:
    """``params`` with each symbolic extent of an ``i64``/``i64s`` param
    (``kinds``: name -> kind) replaced by -1, and the ``fuel.extents``
    entries (name -> str or list of str) that spell them."""
    out, exprs = dict(params), {}
    for k, v in params.items():
        if kinds.get(k) == "i64" and isinstance(v, Sym):
            out[k], exprs[k] = -1, str(v)
        elif kinds.get(k) == "i64s" and any(isinstance(d, Sym) for d in v):
            out[k] = tuple(-1 if isinstance(d, Sym) else d for d in v)
            exprs[k] = [extent_text(d) for d in v]
    return out, exprs


def extents_attr(exprs: dict) -> "ir.Attribute":
    return ir.DictAttr.get({k: ir.StringAttr.get(v) if isinstance(v, str) else
                            ir.ArrayAttr.get([ir.StringAttr.get(s) for s in v])
                            for k, v in exprs.items()})


def decode_extents(params: dict, attr, bounds: dict, op_name: str) -> dict:
    """``params`` with the expressions of ``fuel.extents`` (``attr``) in place."""
    out = dict(params)
    for na in ir.DictAttr(attr):
        k = na.name
        if k not in out:
            raise DialectError(f"{op_name}: {EXTENTS_ATTR} names {k!r}, which is not a param")
        try:
            if isinstance(na.attr, ir.StringAttr):
                out[k] = parse_extent(ir.StringAttr(na.attr).value, bounds)
                continue
            texts = [ir.StringAttr(a).value for a in ir.ArrayAttr(na.attr)]
        except (TypeError, ValueError) as e:
            if isinstance(e, DialectError):
                raise DialectError(f"{op_name}: {e}") from None
            raise DialectError(f"{op_name}: {EXTENTS_ATTR}[{k!r}] is not a string or an "
                               f"array of strings") from None
        if not isinstance(out[k], tuple) or len(texts) != len(out[k]):
            raise DialectError(f"{op_name}: {EXTENTS_ATTR}[{k!r}] has {len(texts)} entries "
                               f"for the param {k} = {out[k]}")
        try:
            out[k] = tuple(parse_extent(t, bounds) if t else d for t, d in zip(texts, out[k]))
        except DialectError as e:
            raise DialectError(f"{op_name}: {e}") from None
    return out
