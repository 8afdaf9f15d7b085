"""The fused-op entry record and the facts derived from it.

A ``FusedOpEntry`` is the single source of truth for one fused op: the graph
builder checks shapes/dtypes with ``infer``, the reference interpreter runs
``reference``, the dialect generates ``fuel.<mnemonic>`` from ``mnemonic`` /
``arity`` / ``params`` / ``num_outputs``, fusion matches ``patterns``,
decompose instantiates ``recipe``, CSE uses ``cse_key``.

Params. A fused node stores its params as a plain dict ``{name: value}``,
one value per ``ParamSpec`` of the entry, of the declared kind (see
``compiler.graph.opdef.PARAM_KINDS``). A ParamSpec whose default is ``None``
is *optional*: ``None`` means "not set" (FlashAttn's ``softcap``, window
sizes); the dialect carries such a param as an optional attribute.
``str`` params that name an enumeration (``reduction``, ``quant_type``) list
their allowed values in ``entry.enums``; the position there is the stable
code used in the CSE key.

Arity. ``arity`` is the tensor-operand count, or ``VARIADIC`` for the ops
with optional trailing inputs (Conv2D bias, FlashAttn/PagedAttn alibi, the
FlashAttnBackward alibi); ``min_arity``/``max_arity`` give the bounds and
``infer`` enforces them. The optional operands are a prefix of the
remaining ``input_names`` unless ``operand_slots`` says otherwise.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, Callable, Optional

from compiler.graph.opdef import VARIADIC, ParamSpec, TensorType
from runtime.opkind import OpKind

from .errors import FusedParamsError
from .grammar import float_bits, value_fits_kind

RUNTIME_FUSED_BASE = 0x8000
RUNTIME_CSE_TAG = 0xF000


class Family(enum.Enum):
    """Telemetry bucket of a fused op (not load-bearing for dispatch)."""
    FORWARD = "forward"
    BACKWARD = "backward"
    QUANTIZED = "quantized"
    ATTENTION = "attention"
    NORM = "norm"


@dataclasses.dataclass(frozen=True)
class BackwardKind:
    """How autograd differentiates the op: ``kind`` is ``"fused"`` (then
    ``fused`` names the backward entry, e.g. ``"SoftmaxLastDimBackward"``),
    ``"decompose"`` (differentiate the recipe), ``"custom"`` (a hand-written
    rule in autograd built from other fused ops and primitives: FusedLinear,
    Rope, Conv2D, FlashAttn) or ``"not_differentiable"``."""
    kind: str
    fused: Optional[str] = None

    def __post_init__(self):
        if self.kind not in ("fused", "decompose", "custom", "not_differentiable"):
            raise ValueError(f"unknown BackwardKind {self.kind!r}")
        if (self.kind == "fused") != (self.fused is not None):
            raise ValueError("BackwardKind('fused') needs the backward entry's name (only)")


NOT_DIFFERENTIABLE = BackwardKind("not_differentiable")
DECOMPOSE = BackwardKind("decompose")
CUSTOM = BackwardKind("custom")


def backward_fused(name: str) -> BackwardKind:
    return BackwardKind("fused", name)


@dataclasses.dataclass(frozen=True)
class Decline:
    """Decompose declined: the fused op stays fused (the G2 fixpoint).
    ``op`` names the fused op, ``reason`` says why and what would fix it."""
    op: str
    reason: str

    def __str__(self) -> str:
        return f"{self.op}: decompose declined: {self.reason}"


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A fused op's decomposition as data.

    Exactly one of:

    * ``roots``: a static recipe (one ``PatternNode``, or a tuple of them for
      a multi-output op, one per output slot), rank-polymorphic through the
      grammar's relative params;
    * ``build(params, input_types) -> PatternNode | tuple | Decline``: a
      per-call recipe written with concrete shapes (convolutions, attention,
      quantized matmuls, scans). It may return ``Decline`` for inputs it
      does not cover.

    ``scalars(params) -> tuple[float, ...]`` projects the params onto the
    recipe's open scalar slots, in pre-order (``count_scalar_slots``).
    ``unused_inputs`` lists fused inputs the math does not read (dV of
    FlashAttnBackward does not read v; a length-1 scan never reads its decay
    ``a``): they count as bound for the contiguous-binds rule. It may be a
    function ``(params, input_types) -> tuple`` for per-call recipes.
    """
    roots: Any = None
    build: Optional[Callable] = None
    scalars: Callable[[dict], tuple] = lambda params: ()
    unused_inputs: tuple = ()

    def __post_init__(self):
        if (self.roots is None) == (self.build is None):
            raise ValueError("a Recipe has either static roots or a build function")

    @property
    def shape_dependent(self) -> bool:
        return self.build is not None


@dataclasses.dataclass(frozen=True)
class FusedPattern:
    """One accepted spelling of a fused op for fusion.

    ``root`` is a pattern tree (grammar nodes; rel params are checked
    against the matched node's params after binding; ``SLOT`` values are
    extracted in pre-order). Every interior op node must have exactly as
    many consumers in the whole graph as it has uses inside the pattern
    (DAG sharing in the pattern = consumer count). ``params(scalars)``
    turns the extracted scalars into the fused node's params.
    """
    root: Any
    params: Callable[[tuple], dict] = lambda scalars: {}
    name: str = ""


@dataclasses.dataclass(frozen=True)
class FusedOpEntry:
    """One static fused op. See the module docstring for the contract.

    ``infer(input_types, params)`` returns a ``TensorType`` (or, when
    ``num_outputs > 1``, a list of them: the output views / bundle slots,
    slot 0 first) and raises ``GraphBuildError`` naming the op and the
    rule broken. ``reference(inputs, params)`` is the numpy oracle written
    from the op's math (not from the recipe), following
    ``compiler.graph.numerics`` conventions; multi-output ops return a list.
    ``destructive_input`` is mandatory (no default): the input index the op
    writes through, or None.
    """
    id: int
    name: str
    mnemonic: str
    family: Family
    arity: int
    params: tuple[ParamSpec, ...]
    infer: Callable[[list, dict], Any]
    reference: Callable[[list, dict], Any]
    recipe: Recipe
    backward: BackwardKind
    op_kind: Optional[OpKind]
    destructive_input: Optional[int]
    cse_tag: int
    input_names: tuple[str, ...]
    min_arity: Optional[int] = None
    num_outputs: int = 1
    patterns: tuple[FusedPattern, ...] = ()
    enums: dict = dataclasses.field(default_factory=dict, hash=False, compare=False)
    doc: str = ""
    is_runtime: bool = False
    #: ``(n, params) -> slots``: which of ``input_names`` each of n operands
    #: is, for ops whose optional operands are not a prefix (Conv2D's
    #: (x, w, [bias], [residual])); the dialect then gives each optional
    #: operand its own group and an ``operandSegmentSizes``. None: a prefix.
    operand_slots: Optional[Callable[[int, dict], tuple]] = None

    def __post_init__(self):
        # infer/reference always see complete, checked params (defaults filled),
        # whoever calls them (Graph.add_fused, the interpreter, the passes).
        for attr in ("infer", "reference"):
            fn = getattr(self, attr)
            if not getattr(fn, "_normalizing", False):
                object.__setattr__(self, attr, _normalizing(self, fn))
        if self.arity != VARIADIC and self.min_arity is None:
            object.__setattr__(self, "min_arity", self.arity)
        if self.arity == VARIADIC and self.min_arity is None:
            raise ValueError(f"{self.name}: a VARIADIC fused op needs min_arity")

    @property
    def max_arity(self) -> int:
        return len(self.input_names)

    @property
    def category(self) -> str:
        return "fused"

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def output_views(self, input_types, params) -> list:
        """The per-slot output types (``[infer(...)]`` for one output)."""
        out = self.infer(list(input_types), normalize_params(self, params))
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def __repr__(self) -> str:
        return f"<FusedOpEntry {self.id} {self.name}>"


def _normalizing(entry, fn):
    def wrapped(inputs, params=None):
        return fn(inputs, normalize_params(entry, params))
    wrapped._normalizing = True
    wrapped.__doc__ = fn.__doc__
    wrapped.raw = fn
    return wrapped


def normalize_params(entry, params: Optional[dict]) -> dict:
    """Return ``params`` completed with defaults and checked against the
    entry's ParamSpecs (names, kinds, enumerations). Ints are accepted for
    f64 params (and converted to float); lists for i64s params (converted
    to tuples). Raises ``FusedParamsError`` naming the op, the param and
    what it expects."""
    params = dict(params or {})
    out = {}
    for spec in entry.params:
        if spec.name in params:
            v = params.pop(spec.name)
        elif not spec.required:
            v = spec.default
        else:
            raise FusedParamsError(f"{entry.name}: missing param {spec.name!r} ({spec.kind}); "
                                   f"it takes {', '.join(entry.param_names)}")
        if isinstance(v, list):
            v = tuple(v)
        if spec.kind == "f64" and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if spec.kind == "i64s" and isinstance(v, tuple):
            v = tuple(int(x) if hasattr(x, "__index__") and not isinstance(x, bool) else x
                      for x in v)
        if spec.kind == "i64" and hasattr(v, "__index__") and not isinstance(v, bool):
            v = int(v)
        if not value_fits_kind(v, spec.kind, allow_none=spec.default is None):
            raise FusedParamsError(f"{entry.name}: param {spec.name!r} must be of kind "
                                   f"{spec.kind}"
                                   f"{' or None' if spec.default is None else ''}, got {v!r}")
        allowed = entry.enums.get(spec.name)
        if allowed is not None and v not in allowed:
            raise FusedParamsError(f"{entry.name}: param {spec.name!r} must be one of "
                                   f"{', '.join(map(str, allowed))}; got {v!r}")
        out[spec.name] = v
    if params:
        raise FusedParamsError(f"{entry.name}: unknown param(s) {sorted(params)}; it takes "
                               f"{', '.join(entry.param_names) or 'no params'}")
    return out


@dataclasses.dataclass(frozen=True)
class FusedOpParamsKey:
    """The CSE key of a fused node: the fused id (two nodes
    of different ops never merge, even under a shared tag such as the three
    FlashAttnBackward ids), the params tag, the float params as
    binary64 bit patterns (``2**64-1`` for None) and the integer-like params
    (bools as 0/1, enumerations as their code, ``-2**63`` for None,
    tuples flattened with their length first)."""
    fused_id: int
    tag: int
    bits: tuple[int, ...]
    ints: tuple[int, ...]


NONE_BITS = (1 << 64) - 1
NONE_INT = -(1 << 63)


def cse_key(entry, params: Optional[dict]) -> FusedOpParamsKey:
    """The CSE key of a fused node with these params (normalized first, so
    omitted defaults and explicit defaults agree). Deterministic and
    bit-exact: ``0.0`` and ``-0.0`` differ, NaN payloads are kept."""
    p = normalize_params(entry, params)
    bits: list[int] = []
    ints: list[int] = []
    if entry.is_runtime:  # Runtime{scalars}: the slot values' bits
        return FusedOpParamsKey(entry.id, entry.cse_tag,
                                tuple(b & NONE_BITS for b in p["scalars"]), ())
    for spec in entry.params:
        v = p[spec.name]
        if spec.kind == "f64":
            bits.append(NONE_BITS if v is None else float_bits(v))
        elif spec.kind == "i64s":
            if v is None:
                ints.append(NONE_INT)
            else:
                ints.append(len(v))
                ints.extend(v)
        elif spec.kind == "bytes":
            import hashlib
            ints.extend(int.from_bytes(hashlib.sha256(bytes(v)).digest()[:8], "little", signed=True)
                        for _ in [0])
        elif v is None:
            ints.append(NONE_INT)
        elif spec.kind == "str":
            allowed = entry.enums.get(spec.name)
            if allowed is None:
                raise FusedParamsError(f"{entry.name}: str param {spec.name!r} needs an "
                                       f"enumeration in entry.enums to have a CSE code")
            ints.append(allowed.index(v))
        elif spec.kind == "dtype":
            from runtime.dtype import DType
            ints.append(list(DType).index(v))
        else:  # i64, bool
            ints.append(int(v))
    return FusedOpParamsKey(entry.id, entry.cse_tag, tuple(bits), tuple(ints))
