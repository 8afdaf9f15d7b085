"""RmsNormLastDimBackward (fused id 9): grad = r·(g - x·s / (n·(ms + eps)))
with ms = mean_last(x²), r = rsqrt(ms + eps), s = Σ_last(g·x), n the last
extent.

Inputs (x, g); param ``eps``; output same type as x. Two eps slots (the
``denom_kd`` subtree occurs twice); ``n`` is a shape-relative scalar
(``MulScalar(value=Extent(x, LAST))``), not a slot."""
from ..entry import NOT_DIFFERENTIABLE, FusedOpEntry, Family, Recipe
from ..grammar import LAST, SLOT, Bind, Extent, SameAs, op
from ._common import OpKind, ParamSpec, bc_last, dtype_of, keepdim, np, out, wide
from ._norm_common import infer_pair

NAME = "RmsNormLastDimBackward"
infer = infer_pair(NAME)


def reference(inputs, params):
    x, g = wide(inputs[0]), wide(inputs[1])
    n = x.shape[-1]
    ms = (x * x).mean(axis=-1, keepdims=True)
    s = (g * x).sum(axis=-1, keepdims=True)
    r = 1.0 / np.sqrt(ms + params["eps"])
    return out(r * (g - x * s / (n * (ms + params["eps"]))), dtype_of(inputs[0]))


def _build():
    x, g = Bind(0), Bind(1)
    denom_kd = op("AddScalar", keepdim(op("MeanDim", op("Sqr", x), axis=LAST)), value=SLOT)
    rr = op("BroadcastTo", op("Rsqrt", denom_kd), shape=SameAs(0))
    s_b = bc_last(op("SumDim", op("Mul", g, x), axis=LAST))
    nd = op("BroadcastTo", op("MulScalar", denom_kd, value=Extent(0, LAST)), shape=SameAs(0))
    return op("Mul", rr, op("Sub", g, op("Div", op("Mul", x, s_b), nd)))


RECIPE = _build()

ENTRY = FusedOpEntry(
    id=9, name=NAME, mnemonic="rms_norm_last_dim_backward", family=Family.BACKWARD,
    arity=2, params=(ParamSpec("eps", "f64"),), infer=infer, reference=reference,
    recipe=Recipe(roots=RECIPE, scalars=lambda p: (p["eps"],) * 2),
    backward=NOT_DIFFERENTIABLE, op_kind=OpKind.RmsNormLastDimBackward,
    destructive_input=None, cse_tag=9, input_names=("x", "g"), doc=__doc__,
)
