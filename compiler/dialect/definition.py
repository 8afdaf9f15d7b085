"""The ``fuel`` dialect, defined with IRDL text generated from the op tables.

One source of truth: every supported primitive ``OpDef`` of
``compiler.graph.ops.OP_TABLE`` and every fused-op entry of
``compiler.registry`` (anything with ``mnemonic``, ``arity``, ``params`` and
``num_outputs``) becomes one ``irdl.operation``:

* operands: ``!builtin.tensor``, one constraint value per operand (a shared
  value would force the operand types to be *equal*, docs/toolchain.md);
  ``VARIADIC`` arity becomes one single operand ``x0`` followed by one
  ``variadic`` group ``xs``. IRDL binds a constraint per group, so all of
  ``xs`` must share one type; ``build_fuel_op`` splits an operand list with
  different types into a left fold of such ops (the only variadic op,
  Concat, is associative);
* results: ``!builtin.tensor``, one per output, again separate constraints;
* attributes, one per ``ParamSpec`` (all required; emission fills defaults):
  ``i64``/``bool`` -> ``#builtin.integer``, ``f64`` -> ``#builtin.float``,
  ``num`` -> either (``irdl.any_of``),
  ``i64s`` -> ``#builtin.array``, ``dtype``/``str`` -> ``#builtin.string``;
  ``bytes`` params are not attributes (Const payloads travel separately).
* ``fuel.const`` additionally requires a ``name`` string attribute; its
  ``value`` (DenseElementsAttr, small constants only) is optional.

The structural ops of ``structural.py`` (``fuel.runtime_fused``, whose region
holds primitive fuel ops) are appended to the same ``irdl.dialect``.

IRDL ops exist only in generic form (``"fuel.add"(%a, %b) : (...) -> ...``).
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Iterable, Optional

from compiler.errors import DialectError
from compiler.graph.opdef import VARIADIC, OpDef, ParamSpec
from compiler.mlir import MLIRError, ir, load_irdl_dialects

DIALECT = "fuel"

SEGMENTS_ATTR = "operandSegmentSizes"

ATTR_BASE = {
    "i64": "#builtin.integer",
    "bool": "#builtin.integer",
    "f64": "#builtin.float",
    "num": ("#builtin.integer", "#builtin.float"),  # either (irdl.any_of)
    "i64s": "#builtin.array",
    "dtype": "#builtin.string",
    "str": "#builtin.string",
}


@dataclasses.dataclass(frozen=True)
class DialectOp:
    """What the dialect knows about one ``fuel.<mnemonic>`` op."""

    mnemonic: str
    arity: int                      # number of tensor operands, or VARIADIC
    params: tuple[ParamSpec, ...]
    num_outputs: int = 1
    name: str = ""                  # the op-table / registry name ("SumDim")
    fused: bool = False
    source: object = None           # the OpDef or registry entry
    min_arity: Optional[int] = None  # VARIADIC fused ops: fixed operands before the optional ones
    max_arity: Optional[int] = None

    @property
    def op_name(self) -> str:
        return f"{DIALECT}.{self.mnemonic}"

    @property
    def attr_params(self) -> tuple[ParamSpec, ...]:
        return tuple(p for p in self.params if p.kind in ATTR_BASE)

    @property
    def one_optional(self) -> bool:
        """Fixed operands then one optional one (no segment attribute)."""
        return (self.arity == VARIADIC and self.min_arity is not None
                and self.max_arity == self.min_arity + 1 and not self.segmented)

    @property
    def segmented(self) -> bool:
        """Fixed operands then one ``optional`` group per slot, placed by
        the entry's ``operand_slots`` and an ``operandSegmentSizes`` attribute."""
        return (self.arity == VARIADIC and self.max_arity is not None
                and getattr(self.source, "operand_slots", None) is not None)

    def segment_sizes(self, n: int, params: dict) -> list[int]:
        """The ``operandSegmentSizes`` of ``n`` operands under ``params``:
        1 for each slot the entry's ``operand_slots(n, params)`` fills."""
        slots = tuple(self.source.operand_slots(n, params))
        fixed = tuple(range(self.min_arity))
        if (len(slots) != n or slots[:self.min_arity] != fixed
                or any(b <= a for a, b in zip(slots, slots[1:])) or slots[-1] >= self.max_arity):
            raise DialectError(
                f"{self.op_name}: {n} operands under params {params} fill slots {slots}; "
                f"need {self.min_arity} fixed operands then increasing slots below "
                f"{self.max_arity} ({self.name}'s operand_slots)")
        return [int(i in slots) for i in range(self.max_arity)]


def from_opdef(d: OpDef) -> DialectOp:
    return DialectOp(d.mnemonic, d.arity, tuple(d.params), 1, d.name, False, d)


def from_fused_entry(e) -> DialectOp:
    max_arity = getattr(e, "max_arity", None)
    return DialectOp(e.mnemonic, e.arity, tuple(e.params), int(getattr(e, "num_outputs", 1)),
                     getattr(e, "name", e.mnemonic), True, e, getattr(e, "min_arity", None),
                     max_arity if isinstance(max_arity, int) else None)


def _primitive_defs() -> list[OpDef]:
    try:
        ops = importlib.import_module("compiler.graph.ops")
    except ImportError:
        return []
    table = getattr(ops, "OP_TABLE", {})
    return [d for d in table.values() if d.supported]


def _fused_entries() -> list:
    """Entries of ``compiler.registry.default_registry()`` that carry a
    dialect signature (``mnemonic``, ``arity``, ``params``); [] when the
    registry is absent."""
    try:
        reg = importlib.import_module("compiler.registry").default_registry()
    except (ImportError, AttributeError):
        return []
    entries = [reg.get(n) for n in reg.names()]
    return [e for e in entries if all(hasattr(e, a) for a in ("mnemonic", "arity", "params"))]


def collect_ops(ops: Optional[Iterable] = None) -> dict[str, DialectOp]:
    """mnemonic -> DialectOp. ``ops`` (OpDefs, registry entries or DialectOps)
    overrides the default sources (the op table + the fused registry)."""
    if ops is None:
        items = [from_opdef(d) for d in _primitive_defs()]
        items += [from_fused_entry(e) for e in _fused_entries()]
    else:
        items = [o if isinstance(o, DialectOp) else
                 from_opdef(o) if isinstance(o, OpDef) else from_fused_entry(o) for o in ops]
    out: dict[str, DialectOp] = {}
    for op in items:
        prev = out.get(op.mnemonic)
        if prev is not None and (prev.arity, prev.params, prev.num_outputs) != (
                op.arity, op.params, op.num_outputs):
            raise DialectError(
                f"fuel.{op.mnemonic} is defined twice with different signatures "
                f"({prev.name}: arity {prev.arity}, {len(prev.params)} params; "
                f"{op.name}: arity {op.arity}, {len(op.params)} params); rename one mnemonic")
        out.setdefault(op.mnemonic, op)
    return out


@functools.lru_cache(maxsize=1)
def default_ops() -> dict[str, DialectOp]:
    """The dialect's ops from the op table and the fused registry (cached)."""
    return collect_ops(None)


def find(mnemonic_or_opname: str) -> Optional[DialectOp]:
    """The DialectOp of ``"sum_dim"`` or ``"fuel.sum_dim"``, None if unknown
    (the type check's question for every op it walks: without ``lookup``'s
    hint, whose ``difflib`` import and search were some 3 ms of a compile's
    serial front, docs/compile-at-scale.md)."""
    return default_ops().get(mnemonic_or_opname.removeprefix(DIALECT + "."))


def lookup(mnemonic_or_opname: str, ops: Optional[dict[str, DialectOp]] = None) -> DialectOp:
    """The DialectOp of ``"sum_dim"`` or ``"fuel.sum_dim"``; DialectError if unknown."""
    table = default_ops() if ops is None else ops
    m = mnemonic_or_opname.removeprefix(DIALECT + ".")
    try:
        return table[m]
    except KeyError:
        import difflib
        close = difflib.get_close_matches(m, table, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise DialectError(f"unknown fuel op {mnemonic_or_opname!r}{hint}") from None


def _operation_text(op: DialectOp) -> str:
    lines = [f"  irdl.operation @{op.mnemonic} {{"]
    if op.segmented:
        # one optional group per slot, each with its own constraint
        names = [f"x{i}" for i in range(op.max_arity)]
        lines += [f'    %{n} = irdl.base "!builtin.tensor"' for n in names]
        operands = ", ".join(f"{n}: %{n}" if i < op.min_arity else f"{n}: optional %{n}"
                             for i, n in enumerate(names))
    elif op.one_optional:
        # Fixed operands then ONE optional one (e.g. conv bias, attention ALiBi
        # slopes): each operand keeps its own type constraint, so q/k/v of
        # different shapes verify (a variadic group would force equal types).
        names = [f"x{i}" for i in range(op.max_arity)]
        lines += [f'    %{n} = irdl.base "!builtin.tensor"' for n in names]
        operands = ", ".join(f"{n}: %{n}" for n in names[:-1]) + f", {names[-1]}: optional %{names[-1]}"
    elif op.arity == VARIADIC:
        lines.append('    %x0 = irdl.base "!builtin.tensor"')
        lines.append('    %xs = irdl.base "!builtin.tensor"')
        operands = "x0: %x0, xs: variadic %xs"
    else:
        names = [f"x{i}" for i in range(op.arity)]
        lines += [f'    %{n} = irdl.base "!builtin.tensor"' for n in names]
        operands = ", ".join(f"{n}: %{n}" for n in names)
    results = [f"r{i}" for i in range(op.num_outputs)]
    lines += [f'    %{n} = irdl.base "!builtin.tensor"' for n in results]
    attrs = [(p.name, ATTR_BASE[p.kind]) for p in op.attr_params if p.default is not None]
    if op.mnemonic == "const" and "name" not in dict(attrs):
        attrs.append(("name", "#builtin.string"))
    for name, base in attrs:
        if isinstance(base, tuple):  # one of several bases
            lines += [f'    %a_{name}_{i} = irdl.base "{b}"' for i, b in enumerate(base)]
            lines.append(f"    %a_{name} = irdl.any_of("
                         + ", ".join(f"%a_{name}_{i}" for i in range(len(base))) + ")")
        else:
            lines.append(f'    %a_{name} = irdl.base "{base}"')
    lines.append(f"    irdl.operands({operands})")
    lines.append(f"    irdl.results({', '.join(f'{n}: %{n}' for n in results)})")
    if attrs:
        body = ", ".join(f'"{name}" = %a_{name}' for name, _ in attrs)
        lines.append(f"    irdl.attributes {{{body}}}")
    lines.append("  }")
    return "\n".join(lines)


def build_fuel_op(spec: DialectOp, operands: list, result_types: list, attributes: dict,
                  infer=None) -> "ir.Operation":
    """Create ``fuel.<spec>`` at the current insertion point. For a variadic
    op whose operands after the first differ in type, emit a left fold of
    ops with uniform tails; ``infer(operand_values) -> ir.Type`` gives the
    intermediate result types (the last op gets ``result_types``). A
    segmented op gets its ``operandSegmentSizes`` from its params."""
    if spec.segmented:
        attributes = with_segments(spec, len(operands), attributes)
    elif (spec.arity == VARIADIC and not spec.one_optional
          and len({str(v.type) for v in operands[1:]}) > 1):
        if infer is None:
            raise DialectError(f"{spec.op_name}: operands of different types need a shape "
                               f"rule to fold them ({', '.join(str(v.type) for v in operands)})")
        acc = operands[0]
        for i, v in enumerate(operands[1:], 1):
            last = i == len(operands) - 1
            ty = result_types if last else [infer([acc, v])]
            op = ir.Operation.create(spec.op_name, results=ty, operands=[acc, v],
                                     attributes=attributes)
            acc = op.results[0]
        return op
    return ir.Operation.create(spec.op_name, results=result_types, operands=operands,
                               attributes=attributes)


def with_segments(spec: DialectOp, n: int, attributes: dict) -> dict:
    """``attributes`` (name -> ir.Attribute) with the ``operandSegmentSizes``
    of ``n`` operands of the segmented op ``spec``, read from the params
    those attributes spell (needs an active context)."""
    from .attrs import params_of_attributes
    sizes = spec.segment_sizes(n, params_of_attributes(spec, attributes))
    return dict(attributes, **{SEGMENTS_ATTR: ir.DenseI32ArrayAttr.get(sizes)})


def fuel_irdl_text(ops: Optional[Iterable] = None) -> str:
    """The IRDL source of the fuel dialect (generated; see module doc)."""
    table = default_ops() if ops is None else collect_ops(ops)
    if not table:
        raise DialectError(
            "the fuel dialect has no ops: compiler.graph.ops.OP_TABLE is missing or empty "
            "and no ops were passed; pass ops=[OpDef, ...] or install the op table")
    from .structural import structural_irdl_text
    body = "\n".join(_operation_text(op) for op in table.values())
    return f"irdl.dialect @{DIALECT} {{\n{body}\n{structural_irdl_text()}\n}}\n"


def is_fuel_loaded(ctx: "ir.Context") -> bool:
    try:
        ctx.dialects[DIALECT]
    except (IndexError, KeyError, ValueError):
        return False
    return True


def load_fuel_dialect(ctx: "ir.Context", ops: Optional[Iterable] = None) -> None:
    """Register the fuel dialect in ``ctx``. Idempotent: a context that already
    has it is left alone (a second ``irdl.load_dialects`` would segfault).
    Raises DialectError (with MLIR's diagnostic) if the IRDL does not parse."""
    if is_fuel_loaded(ctx):
        return
    text = fuel_irdl_text(ops)
    with ctx, ir.Location.unknown():
        try:
            mod = ir.Module.parse(text)
        except MLIRError as e:
            raise DialectError(f"generated fuel IRDL does not parse:\n{e}") from None
        load_irdl_dialects(mod)


def parse_fuel_module(text: str, ctx: Optional["ir.Context"] = None) -> "ir.Module":
    """Parse (and verify) fuel dialect text. ``ctx`` defaults to a fresh
    context with the dialect loaded. Raises DialectError carrying MLIR's
    diagnostics (line/column, the offending op) on malformed text, naming
    the op whose result types contradict its shape/dtype rule (``verify``),
    or locating brackets nested too deep for the MLIR parser (which would
    overflow its stack and abort the process)."""
    from .verify import check_nesting
    too_deep = check_nesting(text)
    if too_deep is not None:
        line, col, msg = too_deep
        raise DialectError(f"malformed fuel dialect text at {line}:{col}: {msg}")
    if ctx is None:
        ctx = ir.Context()
    load_fuel_dialect(ctx)
    with ctx, ir.Location.unknown():
        try:
            module = ir.Module.parse(text)
        except MLIRError as e:
            raise DialectError(f"malformed fuel dialect text: {e}") from None
        from .verify import verify_types
        verify_types(module)
        return module
