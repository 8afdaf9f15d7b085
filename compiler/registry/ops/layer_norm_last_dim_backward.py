"""LayerNormLastDimBackward (fused id 8): grad = istd·(g - mean(g) -
x̂·mean(g·x̂)), istd = rsqrt(var + eps), x̂ = (x - mean)·istd; mean and
(population) variance recomputed from x.

Inputs (x, g); param ``eps``; output same type as x. The AddScalar[eps]
subtree occurs three times in the recipe tree, so there are three slots and
the projection is ``[eps, eps, eps]`` (recomputation; CSE re-shares it)."""
from ..entry import NOT_DIFFERENTIABLE, FusedOpEntry, Family, Recipe
from ..grammar import SLOT, Bind, op
from ._common import OpKind, ParamSpec, dtype_of, mean_b, np, out, wide
from ._norm_common import infer_pair

NAME = "LayerNormLastDimBackward"
infer = infer_pair(NAME)


def reference(inputs, params):
    x, g = wide(inputs[0]), wide(inputs[1])
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    istd = 1.0 / np.sqrt(var + params["eps"])
    xhat = (x - mu) * istd
    grad = istd * (g - g.mean(axis=-1, keepdims=True)
                   - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return out(grad, dtype_of(inputs[0]))


def _build():
    x, g = Bind(0), Bind(1)
    xc = op("Sub", x, mean_b(x))
    istd = op("Rsqrt", op("AddScalar", mean_b(op("Sqr", xc)), value=SLOT))
    xhat = op("Mul", xc, istd)
    t1 = op("Sub", g, mean_b(g))
    t2 = op("Mul", xhat, mean_b(op("Mul", g, xhat)))
    return op("Mul", istd, op("Sub", t1, t2))


RECIPE = _build()

ENTRY = FusedOpEntry(
    id=8, name=NAME, mnemonic="layer_norm_last_dim_backward", family=Family.BACKWARD,
    arity=2, params=(ParamSpec("eps", "f64"),), infer=infer, reference=reference,
    recipe=Recipe(roots=RECIPE, scalars=lambda p: (p["eps"],) * 3),
    backward=NOT_DIFFERENTIABLE, op_kind=OpKind.LayerNormLastDimBackward,
    destructive_input=None, cse_tag=8, input_names=("x", "g"), doc=__doc__,
)
