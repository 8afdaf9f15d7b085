"""SoftmaxLastDim (fused id 1): y = exp(x - max_last x) / sum_last exp(x - max).

Any rank >= 1, float dtypes; output same type as x. Recipe: a 9-node
DAG with ``e`` shared. Patterns: the recipe spelling (MaxDim/SumDim with
Unsqueeze, ``e`` consumed twice) and the legacy keepdim spelling
(ReduceMaxTo/ReduceSumTo to x's shape with the last axis set to 1).

Optional param ``scale`` (None: off): the softmax of ``x * scale``, the
product rounded to x's dtype first, as a separate ``MulScalar`` writes it
(the attention scores' ``1/sqrt(d)``). ``fuel-fuse`` folds a ``MulScalar`` (or a
``Mul`` by a scalar constant, a ``Div`` by a power of two) that is the softmax's
input and has no other user (``compiler.passes.fuse: fold_softmax_scales``) where
the cpu kernel serves it (f32, f64); the recipe starts with that
``MulScalar``, so a target without the kernel decomposes to the pair. The
backward entry is that of the unscaled softmax: a scaled softmax is an
inference-time fold (its gradient wrt x would need the factor).
"""
from ..entry import FusedOpEntry, FusedPattern, Family, Recipe, backward_fused
from ..grammar import LAST, Bind, SameAs, WithDim, op
from ._common import (OpKind, ParamSpec, bc_last, check_arity, check_float, dtype_of, fail, np,
                      out, wide)

NAME = "SoftmaxLastDim"


def infer(types, params):
    check_arity(NAME, types, 1, names=("x",))
    check_float(NAME, types)
    if len(types[0].shape) < 1:
        raise fail(NAME, types, "x needs rank >= 1 (softmax runs over the last axis)")
    return types[0]


def reference(inputs, params):
    x = inputs[0]
    if params.get("scale") is not None:  # x * scale rounded to x's dtype, as MulScalar
        dt = dtype_of(x)
        x = out(wide(x) * wide(out(np.float64(params["scale"]), dt)), dt)
    x = wide(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return out(e / e.sum(axis=-1, keepdims=True), dtype_of(inputs[0]))


def _build(x=None):
    x = Bind(0) if x is None else x
    e = op("Exp", op("Sub", x, bc_last(op("MaxDim", x, axis=LAST))))
    return op("Div", e, bc_last(op("SumDim", e, axis=LAST)))


def _legacy():
    x = Bind(0)
    kd = WithDim(0, LAST, 1)
    m = op("BroadcastTo", op("ReduceMaxTo", x, shape=kd), shape=SameAs(0))
    e = op("Exp", op("Sub", x, m))
    return op("Div", e, op("BroadcastTo", op("ReduceSumTo", e, shape=kd), shape=SameAs(0)))


RECIPE = _build()


def _recipe(params, types):
    """The softmax; with ``scale``, of ``MulScalar(x, scale)``."""
    if params.get("scale") is None:
        return RECIPE
    return _build(op("MulScalar", Bind(0), value=float(params["scale"])))


ENTRY = FusedOpEntry(
    id=1, name=NAME, mnemonic="softmax_last_dim", family=Family.FORWARD,
    arity=1, params=(ParamSpec("scale", "f64", None),), infer=infer, reference=reference,
    recipe=Recipe(build=_recipe),
    backward=backward_fused("SoftmaxLastDimBackward"),
    op_kind=OpKind.SoftmaxLastDim,
    destructive_input=None, cse_tag=1, input_names=("x",),
    patterns=(FusedPattern(RECIPE, name="recipe"), FusedPattern(_legacy(), name="legacy")),
    doc=__doc__,
)
