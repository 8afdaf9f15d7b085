"""Op params <-> MLIR attributes, by ``ParamSpec`` kind (see opdef.PARAM_KINDS).

=======  ==================  ===============================
kind     python value        attribute
=======  ==================  ===============================
i64      int                 ``IntegerAttr`` i64
bool     bool                ``IntegerAttr`` i1 (BoolAttr)
f64      float               ``FloatAttr`` f64
num      int | float         ``IntegerAttr`` i64 for an int, else ``FloatAttr`` f64
i64s     tuple[int, ...]     ``ArrayAttr`` of i64 IntegerAttr
dtype    DType               ``StringAttr`` ("f32")
str      str                 ``StringAttr``
bytes    (not an attribute)
=======  ==================  ===============================

A symbolic extent (a ``Sym``) in an ``i64``/``i64s`` param is written -1
and spelled in the op's ``fuel.extents`` (``symbols.py``); ``op_params``
reads it back.

A param whose default is ``None`` (optional: e.g. FlashAttn's window sizes,
softcap) is an attribute only when set; ``None`` is spelled by its absence.
The IRDL declares such params as undeclared extra attributes, because IRDL
attributes are always required; ``op_params`` still checks their kind.
"""
from __future__ import annotations

from typing import Optional

from compiler.errors import DialectError
from compiler.graph.opdef import ParamSpec
from compiler.mlir import ir
from runtime.dtype import DType

from .definition import DialectOp, lookup
from .symbols import (EXTENTS_ATTR, decode_extents, enclosing_func, encode_extents,
                      extents_attr, func_symbols)


def param_to_attr(spec: ParamSpec, value, op_name: str = "?") -> "ir.Attribute":
    """One param value as an attribute (needs an active context)."""
    k = spec.kind
    try:
        if k == "i64":
            return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))
        if k == "bool":
            return ir.BoolAttr.get(bool(value))
        if k == "f64":
            return ir.FloatAttr.get(ir.F64Type.get(), float(value))
        if k == "num":
            if isinstance(value, int) and not isinstance(value, bool):
                return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
            return ir.FloatAttr.get(ir.F64Type.get(), float(value))
        if k == "i64s":
            i64 = ir.IntegerType.get_signless(64)
            return ir.ArrayAttr.get([ir.IntegerAttr.get(i64, int(v)) for v in value])
        if k == "dtype":
            return ir.StringAttr.get(DType.parse(value).value)
        if k == "str":
            return ir.StringAttr.get(str(value))
    except (TypeError, ValueError) as e:
        raise DialectError(f"{op_name}: param {spec.name!r} of kind {k} cannot hold "
                           f"{value!r}: {e}") from None
    raise DialectError(f"{op_name}: param {spec.name!r} of kind {k} is not an attribute")


def attr_to_param(spec: ParamSpec, attr: "ir.Attribute"):
    """The python value of an attribute, by the param's kind."""
    k = spec.kind
    if k == "i64":
        return int(ir.IntegerAttr(attr).value)
    if k == "bool":
        return bool(ir.IntegerAttr(attr).value)
    if k == "f64":
        return float(ir.FloatAttr(attr).value)
    if k == "num":
        try:
            return int(ir.IntegerAttr(attr).value)
        except ValueError:  # not an IntegerAttr: the f64 FloatAttr
            return float(ir.FloatAttr(attr).value)
    if k == "i64s":
        return tuple(int(ir.IntegerAttr(a).value) for a in ir.ArrayAttr(attr))
    if k == "dtype":
        return DType.parse(ir.StringAttr(attr).value)
    if k == "str":
        return ir.StringAttr(attr).value
    raise DialectError(f"param {spec.name!r} of kind {k} is not an attribute")


def params_to_attributes(op: DialectOp, params: dict) -> dict:
    """Attributes for ``fuel.<op>`` from a node's params (defaults filled in).
    Raises DialectError naming the op and the missing/unknown param."""
    known = {p.name for p in op.params}
    extra = set(params) - known
    if extra:
        raise DialectError(f"{op.op_name}: unknown params {sorted(extra)}; "
                           f"declared: {sorted(known)}")
    kinds = {p.name: p.kind for p in op.attr_params}
    params, exprs = encode_extents(params, kinds)
    attrs = {EXTENTS_ATTR: extents_attr(exprs)} if exprs else {}
    for p in op.attr_params:
        if p.name in params:
            value = params[p.name]
        elif not p.required:
            value = p.default
        else:
            raise DialectError(f"{op.op_name}: required param {p.name!r} ({p.kind}) missing")
        if value is None and p.default is None:
            continue  # optional and unset: no attribute
        attrs[p.name] = param_to_attr(p, value, op.op_name)
    return attrs


def op_params(op: "ir.Operation", ops: Optional[dict] = None) -> dict:
    """A ``fuel.*`` operation's params as python values, keyed as in its
    OpDef / registry entry (attributes absent on the op take their default)."""
    op = getattr(op, "operation", op)
    spec = lookup(op.name, ops)
    params = params_of_attributes(spec, op.attributes)
    if EXTENTS_ATTR in op.attributes:
        bounds = func_symbols(enclosing_func(op)) or {}
        params = decode_extents(params, op.attributes[EXTENTS_ATTR], bounds, spec.op_name)
    return params


def params_of_attributes(spec: DialectOp, attributes) -> dict:
    """The params of ``spec`` that ``attributes`` (an op's attributes, or a
    name -> attribute dict) spell; absent ones take their default."""
    out = {}
    for p in spec.attr_params:
        if p.name in attributes:
            try:
                out[p.name] = attr_to_param(p, attributes[p.name])
            except (TypeError, ValueError) as e:
                raise DialectError(f"{spec.op_name}: attribute {p.name!r} is not a {p.kind}: {e}") from None
        elif not p.required:
            out[p.name] = p.default
    return out
