"""``OpParams``: the typed extras a kernel receives, one frozen dataclass per
op family, and ``PARAMS_FOR_KIND``,
the table saying which variant each ``OpKind``'s kernel receives.

Every variant is immutable (``frozen``; sequences are tuples), validated in
``__post_init__`` (``OpParamsError`` naming the variant and field), and
JSON-serializable: ``p.to_dict()`` -> ``{"kind": "Reduce", "dims": [1], ...}``
and ``OpParams.from_dict(d)`` rebuilds an equal value. Integer fields are
non-negative (they are sizes/axes) unless listed in the variant's
``_SIGNED``. Variants are reachable as ``runtime.params.Reduce`` and as
``OpParams.Reduce``; the parameter-less variant is ``NoParams`` (``None`` is
a Python keyword), singleton ``NO_PARAMS``.
"""
from __future__ import annotations

import dataclasses
import enum
import math
import struct
import typing
from typing import Any, ClassVar, Optional

from .dtype import DType
from .errors import OpParamsError
from .opkind import OpKind

#: A scalar operand field (Affine, Clamp, MaskedFill): an int stays an exact
#: int (an integer tensor's scalar: 2**53 + 1 is not a float), else a float.
Number = typing.Union[int, float]


class QuantType(enum.Enum):
    """GGUF block formats for QMatMul (ggml's type names): value = (block bytes,
    block elements)."""

    Q4_0 = (18, 32)
    Q4_1 = (20, 32)
    Q5_0 = (22, 32)
    Q5_1 = (24, 32)
    Q8_0 = (34, 32)
    Q8_1 = (36, 32)
    Q2_K = (84, 256)
    Q3_K = (110, 256)
    Q4_K = (144, 256)
    Q5_K = (176, 256)
    Q6_K = (210, 256)

    @property
    def block_bytes(self) -> int:
        return self.value[0]

    @property
    def block_elems(self) -> int:
        return self.value[1]


class Reduction(enum.Enum):
    """FusedSoftmaxCrossEntropy reduction (Mean=0, Sum=1, None=2)."""

    MEAN = 0
    SUM = 1
    NONE = 2


class PadMode(enum.Enum):
    """Pad mode tag (only CONSTANT is implemented by kernels)."""

    CONSTANT = 0
    REFLECT = 1
    REPLICATE = 2


@dataclasses.dataclass(frozen=True)
class MatmulM:
    """How many of a Matmul's ``m`` rows to compute: ``MatmulM.ALL``,
    ``MatmulM.rows(n)`` or ``MatmulM.deferred(sym_id)`` (data-determined,
    resolved at execute)."""

    mode: str = "all"  # "all" | "rows" | "deferred"
    value: int = 0     # row count for "rows", SymId for "deferred"

    ALL: ClassVar["MatmulM"]

    def __post_init__(self):
        if self.mode not in ("all", "rows", "deferred"):
            raise OpParamsError(f"MatmulM mode must be all/rows/deferred, got {self.mode!r}")
        if isinstance(self.value, bool) or not isinstance(self.value, int) or self.value < 0:
            raise OpParamsError(f"MatmulM value must be an int >= 0, got {self.value!r}")
        if self.mode == "all" and self.value != 0:
            raise OpParamsError("MatmulM.ALL carries no value")

    @classmethod
    def rows(cls, n: int) -> "MatmulM":
        return cls("rows", n)

    @classmethod
    def deferred(cls, sym: int) -> "MatmulM":
        return cls("deferred", sym)


MatmulM.ALL = MatmulM()


class OpParams:
    """Base of every params variant. Subclasses are frozen dataclasses."""

    _SIGNED: ClassVar[tuple[str, ...]] = ()
    _VARIANTS: ClassVar[dict[str, type]] = {}

    @property
    def kind(self) -> str:
        return type(self).__name__

    def validate(self) -> None:
        """Variant-specific semantic checks (after field type checks)."""

    def __post_init__(self):
        hints = _hints(type(self))
        for f in dataclasses.fields(self):
            value = _coerce(type(self).__name__, f.name, hints[f.name], getattr(self, f.name),
                            signed=f.name in self._SIGNED)
            object.__setattr__(self, f.name, value)
        self.validate()

    def _fail(self, msg: str):
        raise OpParamsError(f"{type(self).__name__}: {msg} (got {self})")

    def to_dict(self) -> dict:
        """JSON-able dict: ``{"kind": <variant>, <field>: <json value>, ...}``."""
        d = {"kind": type(self).__name__}
        for f in dataclasses.fields(self):
            d[f.name] = _to_json(getattr(self, f.name))
        return d

    @staticmethod
    def from_dict(d: dict) -> "OpParams":
        """Inverse of ``to_dict``. Raises OpParamsError on an unknown kind,
        missing/extra fields or invalid values."""
        if not isinstance(d, dict) or "kind" not in d:
            raise OpParamsError(f"malformed OpParams {d!r}: needs a 'kind'")
        cls = OpParams._VARIANTS.get(d["kind"])
        if cls is None:
            raise OpParamsError(f"unknown OpParams kind {d['kind']!r}; known: {', '.join(sorted(OpParams._VARIANTS))}")
        names = {f.name for f in dataclasses.fields(cls)}
        extra = set(d) - names - {"kind"}
        if extra:
            raise OpParamsError(f"{d['kind']}: unknown fields {sorted(extra)}; fields are {sorted(names)}")
        hints = _hints(cls)
        kwargs = {k: _from_json(d["kind"], k, hints[k], v) for k, v in d.items() if k != "kind"}
        try:
            return cls(**kwargs)
        except TypeError as e:
            raise OpParamsError(f"{d['kind']}: {e}") from None


_HINTS: dict[type, dict] = {}


def _hints(cls: type) -> dict:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _is_int(v) -> bool:
    import numpy as np
    return (isinstance(v, int) or isinstance(v, np.integer)) and not isinstance(v, bool)


def _coerce(variant: str, field: str, tp, value, *, signed: bool):
    """Check ``value`` against annotation ``tp``; return the canonical value
    (lists -> tuples, ints for ints, floats for floats)."""
    where = f"{variant}.{field}"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp == Number:  # an int stays an exact int, anything else is a float
        if _is_int(value):
            if not -(1 << 63) <= int(value) < 1 << 63:
                raise OpParamsError(f"{where} must fit in int64, got {value}")
            return int(value)
        return _coerce(variant, field, float, value, signed=signed)
    if origin is typing.Union:  # Optional[X]
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)][0]
        return _coerce(variant, field, inner, value, signed=signed)
    if tp is int:
        if not _is_int(value):
            raise OpParamsError(f"{where} must be an int, got {value!r}")
        if not signed and value < 0:
            raise OpParamsError(f"{where} must be >= 0, got {value}")
        return int(value)
    if tp is float:
        if isinstance(value, bool) or not (isinstance(value, (int, float)) or _is_int(value)
                                          or hasattr(value, "__float__")):
            raise OpParamsError(f"{where} must be a number, got {value!r}")
        return float(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise OpParamsError(f"{where} must be a bool, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise OpParamsError(f"{where} must be a str, got {value!r}")
        return value
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if not isinstance(value, tp):
            raise OpParamsError(f"{where} must be a {tp.__name__}, got {value!r}")
        return value
    if tp is MatmulM:
        if not isinstance(value, MatmulM):
            raise OpParamsError(f"{where} must be a MatmulM, got {value!r}")
        return value
    if origin is tuple:
        if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
            raise OpParamsError(f"{where} must be a sequence, got {value!r}")
        items = tuple(value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(variant, field, args[0], v, signed=signed) for v in items)
        if len(items) != len(args):
            raise OpParamsError(f"{where} must have {len(args)} entries, got {value!r}")
        return tuple(_coerce(variant, field, a, v, signed=signed) for a, v in zip(args, items))
    raise OpParamsError(f"{where}: unsupported field type {tp!r}")  # pragma: no cover


def _to_json(v):
    if isinstance(v, tuple):
        return [_to_json(x) for x in v]
    if isinstance(v, enum.Enum):
        return v.name
    if isinstance(v, MatmulM):
        return {"mode": v.mode, "value": v.value}
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)  # "inf", "-inf", "nan": strict-JSON safe
    return v


def _from_json(variant: str, field: str, tp, v):
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp == Number:
        # an int or float as is; "inf"/"nan" are spelled as strings
        return _from_json(variant, field, float, v) if isinstance(v, str) else v
    if origin is typing.Union:
        if v is None:
            return None
        return _from_json(variant, field, [a for a in args if a is not type(None)][0], v)
    if tp is float and isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            raise OpParamsError(f"{variant}.{field}: {v!r} is not a number") from None
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp[v]
        except KeyError:
            raise OpParamsError(f"{variant}.{field}: {v!r} is not a {tp.__name__} "
                                f"({', '.join(tp.__members__)})") from None
    if tp is MatmulM:
        if not isinstance(v, dict):
            raise OpParamsError(f"{variant}.{field}: malformed MatmulM {v!r}")
        return MatmulM(v.get("mode", "all"), v.get("value", 0))
    if origin is tuple and isinstance(v, list):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_json(variant, field, args[0], x) for x in v)
        return tuple(_from_json(variant, field, a, x) for a, x in zip(args, v)) if len(v) == len(args) else tuple(v)
    return v


def exact_key(value):
    """A hashable key equal only for bit-identical values: floats compare by
    their IEEE bits, so 0.0 and -0.0 (equal as floats) stay distinct, and a
    NaN equals itself. Tuples, enums and OpParams are keyed recursively."""
    if isinstance(value, float):
        return ("f", struct.pack("<d", value))
    if isinstance(value, tuple):
        return tuple(exact_key(v) for v in value)
    if isinstance(value, OpParams):
        return value._exact
    return value


def _variant_eq(self, other):
    return type(other) is type(self) and other._exact == self._exact


def _variant_hash(self):
    return hash(self._exact)


def variant(cls):
    """Class decorator: make ``cls`` a frozen OpParams dataclass variant.

    Equality and hashing are bit-exact (``exact_key``): kernels are compiled
    and memoised per params, and ``Affine(mul=-0.0)`` must not reuse the
    kernel of ``Affine(mul=0.0)``."""
    cls = dataclasses.dataclass(frozen=True, eq=False)(cls)
    post = cls.__post_init__

    def __post_init__(self):
        post(self)
        key = (type(self).__name__,) + tuple(exact_key(getattr(self, f.name))
                                             for f in dataclasses.fields(self))
        object.__setattr__(self, "_exact", key)

    cls.__post_init__ = __post_init__
    cls.__eq__ = _variant_eq
    cls.__hash__ = _variant_hash
    OpParams._VARIANTS[cls.__name__] = cls
    setattr(OpParams, cls.__name__, cls)
    return cls


Pair = tuple[int, int]

# -- the variants ---------------------------------------------------------------------


@variant
class NoParams(OpParams):
    """No auxiliary parameters (elementwise, comparisons, Where, Copy...)."""


NO_PARAMS = NoParams()


@variant
class Reduce(OpParams):
    """Reduce over ``dims`` (sorted, unique); ``keepdim`` keeps them as size 1.
    Also ArgMaxDim/ArgMinDim (exactly one dim)."""
    dims: tuple[int, ...]
    keepdim: bool = False

    def validate(self):
        if list(self.dims) != sorted(set(self.dims)):
            self._fail("dims must be sorted and unique")


@variant
class Matmul(OpParams):
    """``[..lhs_batch, m, k] @ [..rhs_batch, k, n] -> [..lhs_batch, m, n]``;
    batch axes match or are GQA-divisible (lhs multiple of rhs)."""
    lhs_batch_dims: tuple[int, ...]
    rhs_batch_dims: tuple[int, ...]
    m: int
    n: int
    k: int
    m_compute: MatmulM = MatmulM.ALL
    #: FusedLinear with a pre-packed constant rhs: b is ``[n / b_panel, k,
    #: b_panel]`` (column panels, K-major), the lhs batch axes fold into m
    b_panel: int = 0
    #: FusedLinear's activation epilogue: the exact (erf) GELU of the result
    gelu: bool = False
    #: or its tanh GELU (GPT-2's ``gelu_new``, the ``Gelu`` primitive)
    gelu_tanh: bool = False
    #: FusedLinear's residual epilogue: a last operand of the output's shape
    #: added after the bias (the Conv2D recipe's few-pixel and whole-image
    #: products take the conv's skip so), then the clamp (None: open side)
    residual: bool = False
    clamp_min: Optional[float] = None
    clamp_max: Optional[float] = None

    def validate(self):
        if self.gelu and self.gelu_tanh:
            self._fail("gelu (erf) and gelu_tanh exclude each other: set one of them")
        clamped = self.clamp_min is not None or self.clamp_max is not None
        if clamped and (self.gelu or self.gelu_tanh):
            self._fail("the clamp and gelu epilogues exclude each other: set one of them")
        if self.clamp_min is not None and self.clamp_max is not None and not self.clamp_min <= self.clamp_max:
            self._fail(f"clamp_min {self.clamp_min} must be <= clamp_max {self.clamp_max}")
        if len(self.lhs_batch_dims) != len(self.rhs_batch_dims):
            self._fail("lhs and rhs batch ranks differ")
        if self.b_panel and (self.lhs_batch_dims or self.n % self.b_panel):
            self._fail(f"a packed rhs (b_panel={self.b_panel}) needs no batch axes and n a "
                       f"multiple of b_panel")
        for a, b in zip(self.lhs_batch_dims, self.rhs_batch_dims):
            if not (a == b or (b > 0 and a > b and a % b == 0)):
                self._fail(f"batch dims {a} vs {b} neither equal nor GQA-divisible")
        if self.m_compute.mode == "rows" and self.m_compute.value > self.m:
            self._fail(f"m_compute rows {self.m_compute.value} > m {self.m}")


@variant
class Conv1D(OpParams):
    """1-D convolution geometry: x ``[b, c_in, l_in]``, w ``[c_out, c_in, k]``."""
    b_size: int
    l_in: int
    c_out: int
    c_in: int
    k_size: int
    padding: int = 0
    stride: int = 1
    dilation: int = 1

    def validate(self):
        if self.stride < 1 or self.dilation < 1:
            self._fail("stride and dilation must be >= 1")

    @property
    def l_out(self) -> int:
        return (self.l_in + 2 * self.padding - self.dilation * (self.k_size - 1) - 1) // self.stride + 1


@variant
class Conv2D(OpParams):
    """2-D convolution: x ``[N,Cin,H,W]``, w ``[Cout,Cin/groups,Kh,Kw]``."""
    x_shape: tuple[int, int, int, int]
    w_shape: tuple[int, int, int, int]
    out_shape: tuple[int, int, int, int]
    stride: Pair = (1, 1)
    padding: Pair = (0, 0)
    dilation: Pair = (1, 1)
    groups: int = 1
    clamp_min: Optional[float] = None   # the epilogue: the output clamped (None: open)
    clamp_max: Optional[float] = None
    silu: bool = False                  # or the output times its sigmoid
    gelu: bool = False                  # or its exact (erf) GELU
    residual: bool = False              # a last operand, the skip, added before the epilogue
    image_at_run_time: bool = False     # the kernel takes H, W at run time (a symbolic image)
    winograd: bool = False              # w is the Winograd transform [16, Cout, Cin] of 3x3 kernels

    def validate(self):
        if self.groups < 1 or min(self.stride) < 1 or min(self.dilation) < 1:
            self._fail("groups, stride and dilation must be >= 1")
        if self.clamp_min is not None and self.clamp_max is not None and not self.clamp_min <= self.clamp_max:
            self._fail(f"clamp_min {self.clamp_min} must be <= clamp_max {self.clamp_max}")
        if self.silu and (self.clamp_min is not None or self.clamp_max is not None):
            self._fail("the silu and clamp epilogues are exclusive")
        if self.gelu and (self.silu or self.clamp_min is not None or self.clamp_max is not None):
            self._fail("the gelu epilogue excludes the clamp and silu")
        if self.x_shape[1] % self.groups or self.w_shape[0] % self.groups:
            self._fail("channels must be divisible by groups")


@variant
class ExpandDepthwise(OpParams):
    """A 1x1 expansion feeding a depthwise conv: x ``[N,Cin,H,W]``, the
    expansion's weight ``[Ce,Cin,1,1]``, the depthwise weight ``[Ce,1,Kh,Kw]``;
    each conv's epilogue (Conv2D's clamp or silu)."""
    x_shape: tuple[int, int, int, int]
    w_shape: tuple[int, int, int, int]  # the depthwise weight [Ce, 1, Kh, Kw]
    out_shape: tuple[int, int, int, int]
    stride: Pair = (1, 1)
    padding: Pair = (0, 0)
    expand_clamp_min: Optional[float] = None
    expand_clamp_max: Optional[float] = None
    expand_silu: bool = False
    clamp_min: Optional[float] = None
    clamp_max: Optional[float] = None
    silu: bool = False

    def validate(self):
        if min(self.stride) < 1 or min(self.padding) < 0:
            self._fail("stride must be >= 1 and padding >= 0")
        for silu, lo, hi in ((self.expand_silu, self.expand_clamp_min, self.expand_clamp_max),
                             (self.silu, self.clamp_min, self.clamp_max)):
            if lo is not None and hi is not None and not lo <= hi:
                self._fail(f"clamp_min {lo} must be <= clamp_max {hi}")
            if silu and (lo is not None or hi is not None):
                self._fail("the silu and clamp epilogues are exclusive")


@variant
class MaxPool2D(OpParams):
    """2-D max pooling: x ``[N,C,H,W]`` padded with -inf by ``padding`` (top,
    left, bottom, right), windows ``kernel`` taps ``dilation`` apart every
    ``stride``."""
    x_shape: tuple[int, int, int, int]
    out_shape: tuple[int, int, int, int]
    kernel: Pair = (1, 1)
    stride: Pair = (1, 1)
    dilation: Pair = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    image_at_run_time: bool = False     # the kernel takes H, W at run time (a symbolic image)

    def validate(self):
        if min(self.kernel + self.stride + self.dilation) < 1 or min(self.padding) < 0:
            self._fail("kernel, stride and dilation must be >= 1 and padding >= 0")


@variant
class ConvTranspose1D(OpParams):
    """1-D transposed convolution geometry: w ``[c_in, c_out, k]``."""
    b_size: int
    l_in: int
    c_out: int
    c_in: int
    k_size: int
    padding: int = 0
    output_padding: int = 0
    stride: int = 1
    dilation: int = 1

    def validate(self):
        if self.stride < 1 or self.dilation < 1:
            self._fail("stride and dilation must be >= 1")


@variant
class ConvTranspose2D(OpParams):
    """2-D transposed convolution: w ``[Cin, Cout/groups, Kh, Kw]``."""
    x_shape: tuple[int, int, int, int]
    w_shape: tuple[int, int, int, int]
    out_shape: tuple[int, int, int, int]
    stride: Pair = (1, 1)
    padding: Pair = (0, 0)
    output_padding: Pair = (0, 0)
    dilation: Pair = (1, 1)
    groups: int = 1
    clamp_min: Optional[float] = None   # the epilogue: the output clamped (None: open)
    clamp_max: Optional[float] = None

    def validate(self):
        if self.groups < 1 or min(self.stride) < 1 or min(self.dilation) < 1:
            self._fail("groups, stride and dilation must be >= 1")
        if self.clamp_min is not None and self.clamp_max is not None and not self.clamp_min <= self.clamp_max:
            self._fail(f"clamp_min {self.clamp_min} must be <= clamp_max {self.clamp_max}")


def _check_reduce_to(p, inp, out):
    if len(out) > len(inp):
        p._fail("output_shape has higher rank than input_shape")
    padded = (1,) * (len(inp) - len(out)) + tuple(out)
    for i, o in zip(inp, padded):
        if o != i and o != 1:
            p._fail(f"output_shape {out} is not broadcast-compatible into input_shape {inp}")


@variant
class ReduceSumTo(OpParams):
    """Sum-reduce ``input_shape`` to the broadcast-compatible ``output_shape``."""
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]

    def validate(self):
        _check_reduce_to(self, self.input_shape, self.output_shape)


@variant
class ReduceMaxTo(OpParams):
    """Max-reduce ``input_shape`` to ``output_shape`` (as ReduceSumTo)."""
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]

    def validate(self):
        _check_reduce_to(self, self.input_shape, self.output_shape)


@variant
class ReduceMaxToBackward(OpParams):
    """Inputs ``(x [input_shape], upstream [output_shape])`` -> grad_x."""
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]

    def validate(self):
        _check_reduce_to(self, self.input_shape, self.output_shape)


@variant
class FlashAttn(OpParams):
    """SDPA: q ``[b,hq,sq,d]``, k/v ``[b,hkv,sk,d]``; ``k_len <= sk`` attended."""
    b: int
    hq: int
    hkv: int
    sq: int
    sk: int
    d: int
    k_len: int
    softmax_scale: float
    causal: bool = False
    window_size_left: Optional[int] = None
    window_size_right: Optional[int] = None
    softcap: Optional[float] = None

    def validate(self):
        if self.hkv == 0 or self.hq % self.hkv:
            self._fail("hq must be a multiple of hkv")
        if self.k_len > self.sk:
            self._fail("k_len must be <= sk")


@variant
class PagedAttn(OpParams):
    """Paged-cache decode attention geometry."""
    b: int
    hq: int
    hkv: int
    sq: int
    d: int
    block_size: int
    max_blocks_per_seq: int
    num_blocks: int
    softmax_scale: float
    softcap: Optional[float] = None

    def validate(self):
        if self.hkv == 0 or self.hq % self.hkv:
            self._fail("hq must be a multiple of hkv")


@variant
class Slice(OpParams):
    """``[start, end)`` with ``step`` along ``dim``."""
    dim: int
    start: int
    end: int
    step: int = 1

    def validate(self):
        if self.step < 1 or self.end < self.start:
            self._fail("need step >= 1 and start <= end")


@variant
class Cast(OpParams):
    """Cast; source and target dtypes are the key's ``[src, dst]``."""


@variant
class Affine(OpParams):
    """``y = mul * x + add`` (AddScalar/MulScalar, InplaceAffine)."""
    mul: Number
    add: Number


@variant
class Clamp(OpParams):
    """``y = clamp(x, min, max)``."""
    min: Number
    max: Number

    def validate(self):
        if self.min > self.max:
            self._fail("min must be <= max")


@variant
class PowI(OpParams):
    """``y = x ** exp`` by repeated multiplication."""
    _SIGNED: ClassVar = ("exp",)
    exp: int


@variant
class Concat(OpParams):
    """Concatenate along ``axis``: outer x (sum of input_dim_sizes) x inner."""
    outer_count: int
    input_dim_sizes: tuple[int, ...]
    inner_count: int
    axis: int

    def validate(self):
        if not self.input_dim_sizes:
            self._fail("needs at least one input")


@variant
class SoftmaxLastDim(OpParams):
    """Softmax over rows of ``last_dim`` (and its backward)."""
    outer_count: int
    last_dim: int
    #: the forward's input read as x * scale (None: off; the attention
    #: scores' 1/sqrt(d) folded from a MulScalar)
    scale: Optional[float] = None


@variant
class NormLastDim(OpParams):
    """RmsNorm / LayerNorm over the last dim (and backward kinds)."""
    outer_count: int
    last_dim: int
    eps: float

    def validate(self):
        if not self.eps >= 0:
            self._fail("eps must be >= 0")


@variant
class IndexSelect(OpParams):
    """Select ``n_indices`` slices (U32 indices) of a ``source_dim_size`` axis."""
    outer_count: int
    source_dim_size: int
    n_indices: int
    inner_count: int


@variant
class Gather(OpParams):
    """N-d gather along ``dim``; indices have ``output_shape``."""
    source_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    dim: int

    def validate(self):
        if len(self.source_shape) != len(self.output_shape) or self.dim >= len(self.source_shape):
            self._fail("source/output ranks must match and dim must be in range")


@variant
class Rope(OpParams):
    """Rotary embedding: outer x seq x head_dim; cos/sin ``[seq, head_dim]``.
    ``interleaved``: pairs (x[2i], x[2i+1]) instead of the two halves."""
    outer_count: int
    seq: int
    head_dim: int
    interleaved: bool = False

    def validate(self):
        if self.head_dim % 2:
            self._fail("head_dim must be even")


@variant
class QMatMul(OpParams):
    """``A [batch, m, k] @ dequant(W [n, k]) -> [batch, m, n]``."""
    quant_type: QuantType
    batch_count: int
    m: int
    n: int
    k: int

    def validate(self):
        if self.k % self.quant_type.block_elems:
            self._fail(f"k must be a multiple of the {self.quant_type.name} block ({self.quant_type.block_elems})")


@variant
class IndexAdd(OpParams):
    """``base[.., idx[i], ..] += src[.., i, ..]`` with rank-1 U32 indices."""
    outer_count: int
    base_dim_size: int
    n_indices: int
    inner_count: int


@variant
class ScatterAdd(OpParams):
    """N-d scatter-add along ``dim`` (adjoint of Gather)."""
    base_shape: tuple[int, ...]
    src_shape: tuple[int, ...]
    dim: int

    def validate(self):
        if len(self.base_shape) != len(self.src_shape) or self.dim >= len(self.base_shape):
            self._fail("base/src ranks must match and dim must be in range")


@variant
class Flip(OpParams):
    """Reverse ``axis``: outer x dim_size x inner."""
    outer_count: int
    dim_size: int
    inner_count: int
    axis: int


@variant
class Roll(OpParams):
    """Cyclic shift by ``shift`` (signed) along ``axis``."""
    _SIGNED: ClassVar = ("shift",)
    outer_count: int
    dim_size: int
    inner_count: int
    shift: int
    axis: int


@variant
class CumSum(OpParams):
    """Running sum along ``axis``."""
    outer_count: int
    dim_size: int
    inner_count: int
    axis: int


@variant
class Triangular(OpParams):
    """Triu/Tril mask over the last two dims; ``diagonal`` is signed."""
    _SIGNED: ClassVar = ("diagonal",)
    batch_count: int
    rows: int
    cols: int
    diagonal: int = 0


@variant
class LogSoftmaxLastDim(OpParams):
    """LogSoftmax over rows of ``last_dim`` (and its backward)."""
    outer_count: int
    last_dim: int


@variant
class MaskedFill(OpParams):
    """``out = mask ? value : x``; ``value`` is converted to the output dtype."""
    value: Number


def _check_pad(p):
    if not len(p.in_shape) == len(p.out_shape) == len(p.padding):
        p._fail("in_shape, out_shape and padding must have one entry per axis")
    for i, o, (a, b) in zip(p.in_shape, p.out_shape, p.padding):
        if o != i + a + b:
            p._fail(f"out_shape {p.out_shape} != in_shape {p.in_shape} + padding")


@variant
class Pad(OpParams):
    """Per-axis (before, after) padding with ``mode`` and constant ``value``."""
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    padding: tuple[Pair, ...]
    mode: PadMode = PadMode.CONSTANT
    value: float = 0.0

    def validate(self):
        _check_pad(self)


@variant
class PadBackward(OpParams):
    """Backward of Pad: gradient ``[out_shape]`` -> ``[in_shape]``."""
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    padding: tuple[Pair, ...]
    mode: PadMode = PadMode.CONSTANT

    def validate(self):
        _check_pad(self)


def _check_ranges(p):
    if len(p.ranges) != len(p.dest_shape):
        p._fail("ranges need one (start, end) per dest axis")
    for (a, b), d in zip(p.ranges, p.dest_shape):
        if a > b or b > d:
            p._fail(f"range ({a}, {b}) not within 0..{d}")


@variant
class WriteSlice(OpParams):
    """Write src into ``dest[ranges]``; ``deferred_dyn_offset = (axis, sym)``
    when the start on ``axis`` is data-determined."""
    dest_shape: tuple[int, ...]
    ranges: tuple[Pair, ...]
    deferred_dyn_offset: Optional[Pair] = None

    def validate(self):
        _check_ranges(self)


@variant
class WriteSliceRotating(OpParams):
    """As WriteSlice; start on ``axis`` is ``pos mod modulus`` (may wrap)."""
    dest_shape: tuple[int, ...]
    axis: int
    modulus: int
    ranges: tuple[Pair, ...]

    def validate(self):
        if len(self.ranges) != len(self.dest_shape) or self.axis >= len(self.dest_shape):
            self._fail("ranges need one entry per dest axis and axis must be in range")
        a, b = self.ranges[self.axis]
        if self.modulus == 0 or b - a > self.modulus:
            self._fail("slab width on the rotating axis must be <= modulus (> 0)")


@variant
class WriteSliceDoff(OpParams):
    """As WriteSlice; start on ``axis`` read from a device-resident I64."""
    dest_shape: tuple[int, ...]
    axis: int
    ranges: tuple[Pair, ...]

    def validate(self):
        if len(self.ranges) != len(self.dest_shape) or self.axis >= len(self.dest_shape):
            self._fail("ranges need one entry per dest axis and axis must be in range")


@variant
class FusedSoftmaxCrossEntropy(OpParams):
    """logits ``[n_rows, vocab]``, targets ``[n_rows]`` -> loss."""
    _SIGNED: ClassVar = ("ignore_index",)
    n_rows: int
    vocab: int
    reduction: Reduction = Reduction.MEAN
    ignore_index: int = -100


@variant
class CausalConv1d(OpParams):
    """x ``[batch, channels, seq_in]`` (pre-padded), w ``[channels, 1, kernel]``."""
    batch: int
    channels: int
    seq_in: int
    seq_out: int
    kernel: int
    use_silu: bool = False

    def validate(self):
        if self.kernel < 1 or self.seq_out != self.seq_in - (self.kernel - 1):
            self._fail("seq_out must equal seq_in - (kernel - 1), kernel >= 1")


@variant
class SelectiveScan(OpParams):
    """Mamba-1 selective scan geometry."""
    batch: int
    seqlen: int
    dim: int
    dstate: int
    delta_softplus: bool = False


@variant
class SsdChunkScan(OpParams):
    """Mamba-2 SSD chunked scan geometry."""
    batch: int
    seqlen: int
    heads: int
    head_dim: int
    state_dim: int
    chunk_size: int

    def validate(self):
        if self.chunk_size == 0 or self.seqlen % self.chunk_size:
            self._fail("chunk_size must be > 0 and divide seqlen")


@variant
class Nf4Matmul(OpParams):
    """NF4 matmul: act ``[batch, m, k]``, packed ``[n, k/2]`` U8, absmax F32."""
    batch: int
    m: int
    n: int
    k: int
    block_size: int

    def validate(self):
        if self.k % 2 or self.block_size == 0 or self.k % self.block_size:
            self._fail("k must be even and a multiple of block_size (> 0)")


@variant
class AwqMatmul(OpParams):
    """AWQ int4 matmul (AutoAWQ GEMM layout): act ``[batch, m, k]``, qweight
    ``[k, n/8]`` I32/U32, qzeros ``[k/group_size, n/8]``, scales
    ``[k/group_size, n]`` F16/F32 (a fuelc addition: AwqMatmul
    had no kernel before)."""
    batch: int
    m: int
    n: int
    k: int
    group_size: int

    def validate(self):
        if self.group_size == 0 or self.k % self.group_size or self.n % 8:
            self._fail("group_size must be > 0 and divide k; n must be a multiple of 8")


@variant
class JitScalars(OpParams):
    """A runtime fused op's scalar slot values, pattern pre-order."""
    scalars: tuple[float, ...]


@variant
class NonZeroIndices(OpParams):
    """Bundle ``[indices [capacity] U32 ; count [1] U32]``; ``count_sym``
    is bound to the count after the op runs."""
    capacity: int
    count_sym: int


# -- which variant each OpKind's kernel receives -------------------------------------

_ELEMENTWISE_NO_PARAMS = [k for k in OpKind if k.name.endswith("Elementwise") and k not in (
    OpKind.ClampElementwise, OpKind.PowIElementwise)]
_INPLACE_NO_PARAMS = [k for k in OpKind if k.name.endswith("Inplace") and k not in (
    OpKind.ClampInplace, OpKind.PowIInplace)]

#: OpKind -> the OpParams variant its kernel receives. The planner builds
#: exactly these; ``check_params_for`` enforces it. Absent kinds have no kernel
#: params contract (``RuntimeFused`` is a tag: runtime keys receive
#: ``JitScalars`` or ``NoParams``, see ``params_type_for``).
PARAMS_FOR_KIND: dict[OpKind, type] = {
    **{k: NoParams for k in _ELEMENTWISE_NO_PARAMS},
    **{k: NoParams for k in _INPLACE_NO_PARAMS},
    OpKind.Where: NoParams,
    OpKind.Copy: NoParams,
    OpKind.MatMul: Matmul,
    OpKind.FusedLinear: Matmul,
    OpKind.SumReduce: Reduce, OpKind.MaxReduce: Reduce,
    OpKind.MinReduce: Reduce, OpKind.MeanReduce: Reduce,
    OpKind.ArgMaxDim: Reduce, OpKind.ArgMinDim: Reduce,
    OpKind.Cast: Cast,
    OpKind.Conv2D: Conv2D,
    OpKind.MaxPool2D: MaxPool2D,
    OpKind.ExpandDepthwise: ExpandDepthwise,
    OpKind.ConvTranspose2D: ConvTranspose2D,
    OpKind.ReduceSumTo: ReduceSumTo,
    OpKind.ReduceMaxTo: ReduceMaxTo,
    OpKind.ReduceMaxToBackward: ReduceMaxToBackward,
    OpKind.FlashAttn: FlashAttn, OpKind.FlashAttnBackwardQ: FlashAttn,
    OpKind.FlashAttnBackwardK: FlashAttn, OpKind.FlashAttnBackwardV: FlashAttn,
    OpKind.PagedAttn: PagedAttn,
    OpKind.Affine: Affine, OpKind.InplaceAffine: Affine,
    OpKind.ClampElementwise: Clamp, OpKind.ClampInplace: Clamp,
    OpKind.PowIElementwise: PowI, OpKind.PowIInplace: PowI,
    OpKind.PowIElementwiseBackward: PowI,
    OpKind.Flip: Flip,
    OpKind.Roll: Roll,
    OpKind.CumSum: CumSum,
    OpKind.Pad: Pad,
    OpKind.PadBackward: PadBackward,
    OpKind.Triu: Triangular, OpKind.Tril: Triangular,
    OpKind.LogSoftmaxLastDim: LogSoftmaxLastDim,
    OpKind.LogSoftmaxLastDimBackward: LogSoftmaxLastDim,
    OpKind.MaskedFill: MaskedFill,
    OpKind.Concat: Concat,
    OpKind.SoftmaxLastDim: SoftmaxLastDim,
    OpKind.SoftmaxLastDimBackward: SoftmaxLastDim,
    OpKind.RmsNormLastDim: NormLastDim, OpKind.RmsNormLastDimBackward: NormLastDim,
    OpKind.LayerNormLastDim: NormLastDim, OpKind.LayerNormLastDimBackward: NormLastDim,
    OpKind.IndexSelect: IndexSelect,
    OpKind.Gather: Gather,
    OpKind.Rope: Rope,
    OpKind.IndexAdd: IndexAdd,
    OpKind.ScatterAdd: ScatterAdd,
    OpKind.QMatMul: QMatMul,
    OpKind.WriteSlice: WriteSlice,
    OpKind.WriteSliceRotating: WriteSliceRotating,
    OpKind.WriteSliceDoff: WriteSliceDoff,
    OpKind.FusedSoftmaxCrossEntropy: FusedSoftmaxCrossEntropy,
    OpKind.CausalConv1d: CausalConv1d,
    OpKind.SelectiveScan: SelectiveScan,
    OpKind.SsdChunkScan: SsdChunkScan,
    OpKind.Nf4Matmul: Nf4Matmul,
    OpKind.AwqMatmul: AwqMatmul,
    OpKind.NonZeroIndices: NonZeroIndices,
}


def params_type_for(key) -> tuple[type, ...]:
    """The accepted OpParams variant(s) for a BindingKey / OpKind."""
    from .keys import BindingKey
    key = BindingKey.of(key)
    if key.is_runtime_fused:
        return (JitScalars, NoParams)
    t = PARAMS_FOR_KIND.get(key.op)
    if t is None:
        raise OpParamsError(f"OpKind {key.op.name} has no kernel params contract (not in PARAMS_FOR_KIND)")
    return (t,)


def check_params_for(key, params: OpParams) -> None:
    """Raise OpParamsError unless ``params`` is the variant ``key``'s
    kernel receives."""
    accepted = params_type_for(key)
    if not isinstance(params, accepted):
        raise OpParamsError(
            f"{key} kernels receive {' or '.join(t.__name__ for t in accepted)}, "
            f"got {type(params).__name__}: {params!r}")
