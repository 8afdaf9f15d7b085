"""SoftmaxLastDim (fused id 1): y = exp(x - max_last x) / sum_last exp(x - max).

Any rank >= 1, float dtypes; output same type as x. Recipe: a 9-node
DAG with ``e`` shared. Patterns: the recipe spelling (MaxDim/SumDim with
Unsqueeze, ``e`` consumed twice) and the legacy keepdim spelling
(ReduceMaxTo/ReduceSumTo to x's shape with the last axis set to 1).
"""
from ..entry import FusedOpEntry, FusedPattern, Family, Recipe, backward_fused
from ..grammar import LAST, Bind, SameAs, WithDim, op
from ._common import OpKind, bc_last, check_arity, check_float, fail, np, out, wide, dtype_of

NAME = "SoftmaxLastDim"


def infer(types, params):
    check_arity(NAME, types, 1, names=("x",))
    check_float(NAME, types)
    if len(types[0].shape) < 1:
        raise fail(NAME, types, "x needs rank >= 1 (softmax runs over the last axis)")
    return types[0]


def reference(inputs, params):
    x = wide(inputs[0])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return out(e / e.sum(axis=-1, keepdims=True), dtype_of(inputs[0]))


def _build():
    x = Bind(0)
    e = op("Exp", op("Sub", x, bc_last(op("MaxDim", x, axis=LAST))))
    return op("Div", e, bc_last(op("SumDim", e, axis=LAST)))


def _legacy():
    x = Bind(0)
    kd = WithDim(0, LAST, 1)
    m = op("BroadcastTo", op("ReduceMaxTo", x, shape=kd), shape=SameAs(0))
    e = op("Exp", op("Sub", x, m))
    return op("Div", e, op("BroadcastTo", op("ReduceSumTo", e, shape=kd), shape=SameAs(0)))


RECIPE = _build()

ENTRY = FusedOpEntry(
    id=1, name=NAME, mnemonic="softmax_last_dim", family=Family.FORWARD,
    arity=1, params=(), infer=infer, reference=reference,
    recipe=Recipe(roots=RECIPE),
    backward=backward_fused("SoftmaxLastDimBackward"),
    op_kind=OpKind.SoftmaxLastDim,
    destructive_input=None, cse_tag=1, input_names=("x",),
    patterns=(FusedPattern(RECIPE, name="recipe"), FusedPattern(_legacy(), name="legacy")),
    doc=__doc__,
)
