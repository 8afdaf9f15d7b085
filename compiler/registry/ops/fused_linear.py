"""FusedLinear (fused id 2): out = a @ b + bias, bias broadcast over all but
the last axis.

Inputs a ``[..,M,K]``, b ``[..,K,N]`` (same rank; batch of a a multiple of
b's, as MatMul allows), bias ``[N]`` with a's dtype; output ``[..,M,N]`` in
a's dtype (f32 x bf16 -> f32 allowed, as MatMul). Optional param ``b_panel``
(unset by default): when set, b is a pre-packed constant ``[N/b_panel, K, b_panel]`` (column
panels of B, K-major within a panel: ``fuel-prepack-weights`` makes it for a
target whose kernel reads it) and a's batch axes fold into M. Backward is a
hand-written autograd rule (dA = up·bᵀ, dB = aᵀ·up, dbias = ReduceSumTo):
``BackwardKind("custom")`` (a NotDifferentiable label would be dead
metadata). Patterns: ``Add(MatMul(a, b), BroadcastTo(bias))`` with or
without the leading-1 pad Reshape.

Epilogue: ``gelu`` (bool, None: off): the exact (erf) GELU of the result,
bias included: ``fuel-fuse`` folds a ``GeluErf`` that is the op's only user
(``compiler.passes.fuse: fold_linear_epilogues``; a BERT/ViT FFN's first
product), so the kernel writes the activated output once. The recipe ends
with the same ``GeluErf``. ``gelu_tanh`` (bool, None: off; excludes
``gelu``): the tanh GELU, ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
x^3)))``, folded from a ``Gelu`` or from the chain exporters spell it with
(GPT-2's ``gelu_new``: ``GELU_TANH_SPELLINGS``); the recipe ends with the
``Gelu`` primitive.

Residual: ``residual`` (bool, None: off) adds a fourth operand, the skip, of
the output's type, after the bias; ``clamp_min`` / ``clamp_max`` (None: that
side open) then clamp the result (exclusive with the GELUs):
``clamp(a @ b + bias + skip)``. The Conv2D recipe's few-pixel and
whole-image products take a conv's skip and ReLU so (``registry/ops/
conv2d.py``, ``product_epilogue``); the recipe ends with the same ``Add``
and ``Clamp``.
"""
import math

from ..entry import CUSTOM, FusedOpEntry, FusedPattern, Family, Recipe
from ..grammar import LAST, SLOT, Bind, Extent, WithDim, op
from ._common import OpKind, ParamSpec, check_arity, check_float, dtype_of, fail, np, out, wide, TensorType

NAME = "FusedLinear"


def infer(types, params):
    if params.get("residual"):
        check_arity(NAME, types, 4, names=("a", "b", "bias", "residual"))
        y = _infer(types[:3], params)
        if tuple(types[3].shape) != tuple(y.shape) or types[3].dtype != y.dtype:
            raise fail(NAME, types, f"the residual must be the output's type {y.dtype}"
                                    f"[{', '.join(map(str, y.shape))}]; add another skip "
                                    f"outside the op")
        return y
    return _infer(types, params)


def _infer(types, params):
    check_arity(NAME, types, 3, names=("a", "b", "bias"))
    check_float(NAME, types, (0, 1, 2))
    a, b, bias = types
    panel = params.get("b_panel", 0)
    if panel:
        _check_epilogue(types, params)
        return _infer_packed(types, panel)
    if len(a.shape) < 2 or len(a.shape) != len(b.shape):
        raise fail(NAME, types, "a [..,M,K] and b [..,K,N] need the same rank >= 2")
    if a.shape[-1] != b.shape[-2]:
        raise fail(NAME, types, f"contraction mismatch: a K={a.shape[-1]} vs b K={b.shape[-2]}")
    for x, y in zip(a.shape[:-2], b.shape[:-2]):
        if x != y and (y == 0 or x % y):
            raise fail(NAME, types, "batch axes of a must equal (or be multiples of) b's")
    if tuple(bias.shape) != (b.shape[-1],):
        raise fail(NAME, types, f"bias must be [N] = [{b.shape[-1]}]")
    if not _dtypes_match(a, b):
        raise fail(NAME, types, "a and b dtypes must match (or f32 x bf16)")
    if bias.dtype != a.dtype:
        raise fail(NAME, types, f"bias dtype must be a's ({a.dtype})")
    _check_epilogue(types, params)
    return TensorType(tuple(a.shape[:-1]) + (b.shape[-1],), a.dtype)


def _dtypes_match(a, b) -> bool:
    """a's and b's dtypes are one, or MatMul's mixed pair f32 x bf16."""
    return a.dtype == b.dtype or (a.dtype.value, b.dtype.value) == ("f32", "bf16")


def has_epilogue(params) -> bool:
    """Whether FusedLinear ``params`` (a dict, or an object with the same
    attributes: the codegen's ``P.Matmul``) have an epilogue: a GELU, a
    residual or a clamp."""
    get = params.get if isinstance(params, dict) else lambda k: getattr(params, k)
    return bool(get("gelu") or get("gelu_tanh") or get("residual")
                or get("clamp_min") is not None or get("clamp_max") is not None)


def _check_epilogue(types, params):
    if params.get("gelu") and params.get("gelu_tanh"):
        raise fail(NAME, types, "gelu (erf) and gelu_tanh exclude each other: set one of them")
    lo, hi = params.get("clamp_min"), params.get("clamp_max")
    if (lo is not None or hi is not None) and (params.get("gelu") or params.get("gelu_tanh")):
        raise fail(NAME, types, "the clamp and gelu epilogues exclude each other: set one of them")
    if lo is not None and hi is not None and not lo <= hi:
        raise fail(NAME, types, f"clamp_min={lo} must be <= clamp_max={hi} (None leaves a side open)")


def _infer_packed(types, panel: int):
    a, b, bias = types
    if len(a.shape) < 2 or len(b.shape) != 3 or b.shape[2] != panel:
        raise fail(NAME, types, f"b_panel={panel}: b must be packed [N/{panel}, K, {panel}] "
                                f"and a [..,M,K]")
    if a.shape[-1] != b.shape[1]:
        raise fail(NAME, types, f"contraction mismatch: a K={a.shape[-1]} vs packed b K={b.shape[1]}")
    n = b.shape[0] * panel
    if tuple(bias.shape) != (n,):
        raise fail(NAME, types, f"bias must be [N] = [{n}]")
    if not _dtypes_match(a, b) or bias.dtype != a.dtype:
        raise fail(NAME, types, "a packed b and the bias need a's dtype (or b bf16 and a f32)")
    return TensorType(tuple(a.shape[:-1]) + (n,), a.dtype)


def unpack(b, panel: int):
    """The ``[K, N]`` matrix of a packed ``b`` ``[N/panel, K, panel]``."""
    return np.ascontiguousarray(b.transpose(1, 0, 2)).reshape(b.shape[1], -1)


def reference(inputs, params):
    a, b, bias = (wide(x) for x in inputs[:3])
    if params.get("b_panel", 0):
        b = unpack(b, params["b_panel"])
    for i, (x, y) in enumerate(zip(a.shape[:-2], b.shape[:-2])):
        if x != y:
            b = np.repeat(b, x // y, axis=i)
    y = np.matmul(a, b) + bias
    if params.get("residual"):
        y = y + wide(inputs[3])
    lo, hi = params.get("clamp_min"), params.get("clamp_max")
    if lo is not None:
        y = np.where(y < lo, lo, y)   # NaN stays NaN, as Relu and Clamp keep it
    if hi is not None:
        y = np.where(y > hi, hi, y)
    if params.get("gelu"):
        from runtime.elementwise import gelu_erf
        y = gelu_erf(y)
    if params.get("gelu_tanh"):
        from runtime.elementwise import gelu_tanh
        y = gelu_tanh(y)
    return out(y, dtype_of(inputs[0]))


RECIPE = op("Add", op("MatMul", Bind(0), Bind(1)),
            op("BroadcastTo", Bind(2), shape=WithDim(0, LAST, Extent(1, LAST))))

_PADDED = op("Add", op("MatMul", Bind(0), Bind(1)),
             op("BroadcastTo", op("Reshape", Bind(2)), shape=WithDim(0, LAST, Extent(1, LAST))))

def _recipe(params, types):
    """MatMul + bias (the packed constant unpacked first), then the
    residual's ``Add`` and the clamp's ``Clamp``, or the ``gelu``
    epilogue's ``GeluErf`` or ``gelu_tanh``'s ``Gelu``."""
    y = _linear(params, types[:3])
    if params.get("residual"):
        y = op("Add", y, Bind(3))
    lo, hi = params.get("clamp_min"), params.get("clamp_max")
    if lo is not None or hi is not None:
        return op("Clamp", y, min=-np.inf if lo is None else lo, max=np.inf if hi is None else hi)
    if params.get("gelu_tanh"):
        return op("Gelu", y)
    return op("GeluErf", y) if params.get("gelu") else y


def _linear(params, types):
    panel = params.get("b_panel", 0)
    if not panel:
        return RECIPE
    a, b = types[0].shape, types[1].shape
    k, n = b[1], b[0] * panel
    # the packed constant back to [.., K, N] (a's rank), then MatMul + bias
    b2 = op("Reshape", op("Permute", Bind(1), perm=(1, 0, 2)), shape=(1,) * (len(a) - 2) + (k, n))
    return op("Add", op("MatMul", Bind(0), b2),
              op("BroadcastTo", Bind(2), shape=tuple(a[:-1]) + (n,)))


def _gelu_tanh_spellings():
    """The tanh GELU of ``Bind(0)`` as exporters and importers spell it
    (GPT-2's ``gelu_new``: ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 *
    pow(x, 3))))``, ONNX constants made ``MulScalar`` / ``AddScalar`` by the
    importer): the cube as ``PowI(x, 3)`` or ``x * x * x``, the half applied
    to x or to the product. Each ``SLOT`` takes a constant the fold checks
    against ``GELU_TANH_CONSTANTS``. Every ``Bind(0)`` leaf is
    one use of x; no node is shared, so the fold can ask that x have no
    other user."""
    x = lambda: Bind(0)  # noqa: E731  (a fresh leaf per use)
    cubes = (lambda: op("PowI", x(), n=3),
             lambda: op("Mul", op("Mul", x(), x()), x()),
             lambda: op("Mul", x(), op("Mul", x(), x())))
    out = []
    for cube in cubes:
        def tanh1():
            inner = op("Add", x(), op("MulScalar", cube(), value=SLOT))
            return op("AddScalar", op("Tanh", op("MulScalar", inner, value=SLOT)), value=SLOT)
        out += [op("Mul", op("MulScalar", x(), value=SLOT), tanh1()),    # (0.5 x) (1 + t)
                op("MulScalar", op("Mul", x(), tanh1()), value=SLOT),    # (x (1 + t)) 0.5
                op("Mul", x(), op("MulScalar", tanh1(), value=SLOT))]    # x (0.5 (1 + t))
    return tuple(out)


#: The constants every spelling's ``SLOT``s take, in pre-order (the matcher
#: visits an op before its operands): the half, the one, sqrt(2/pi), 0.044715.
GELU_TANH_CONSTANTS = (0.5, 1.0, math.sqrt(2 / math.pi), 0.044715)
GELU_TANH_SPELLINGS = _gelu_tanh_spellings()


ENTRY = FusedOpEntry(
    id=2, name=NAME, mnemonic="fused_linear", family=Family.FORWARD,
    arity=-1, min_arity=3,
    params=(ParamSpec("b_panel", "i64", None), ParamSpec("gelu", "bool", None),
            ParamSpec("gelu_tanh", "bool", None), ParamSpec("residual", "bool", None),
            ParamSpec("clamp_min", "f64", None), ParamSpec("clamp_max", "f64", None)),
    infer=infer, reference=reference,
    recipe=Recipe(build=_recipe), backward=CUSTOM, op_kind=OpKind.FusedLinear,
    destructive_input=None, cse_tag=2, input_names=("a", "b", "bias", "residual"),
    patterns=(FusedPattern(_PADDED, name="padded"), FusedPattern(RECIPE, name="direct")),
    doc=__doc__,
)
