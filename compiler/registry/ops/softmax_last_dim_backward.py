"""SoftmaxLastDimBackward (fused id 7): grad = s·(g - Σ_last(g·s)), s the
forward softmax output. Inputs (s, g) of one shape and float dtype; no params;
output same type as s."""
from ..entry import NOT_DIFFERENTIABLE, FusedOpEntry, Family, Recipe
from ..grammar import LAST, Bind, op
from ._common import OpKind, bc_last, dtype_of, np, out, wide
from ._norm_common import infer_pair

NAME = "SoftmaxLastDimBackward"
infer = infer_pair(NAME, ("s", "g"))


def reference(inputs, params):
    s, g = wide(inputs[0]), wide(inputs[1])
    return out(s * (g - (g * s).sum(axis=-1, keepdims=True)), dtype_of(inputs[0]))


RECIPE = op("Mul", Bind(0), op("Sub", Bind(1),
                               bc_last(op("SumDim", op("Mul", Bind(1), Bind(0)), axis=LAST))))

ENTRY = FusedOpEntry(
    id=7, name=NAME, mnemonic="softmax_last_dim_backward", family=Family.BACKWARD,
    arity=2, params=(), infer=infer, reference=reference, recipe=Recipe(roots=RECIPE),
    backward=NOT_DIFFERENTIABLE, op_kind=OpKind.SoftmaxLastDimBackward,
    destructive_input=None, cse_tag=7, input_names=("s", "g"), doc=__doc__,
)
