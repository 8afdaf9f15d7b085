"""LayerNormLastDim (fused id 4): y = (x - mean)/sqrt(var + eps), population
variance (divide by n), over the last axis. No affine weight/bias (the
builder ``layer_norm(x, weight, bias)`` applies them afterwards).

Param ``eps``. Output same type as x. Recipe: the spec's 11-node DAG with
``centered`` shared (2 consumers); one slot ``[eps]``. Pattern: the recipe
spelling only.
"""
from ..entry import FusedOpEntry, FusedPattern, Family, Recipe, backward_fused
from ..grammar import LAST, SLOT, Bind, SameAs, op
from ._common import (OpKind, ParamSpec, check_arity, check_float, dtype_of, fail, keepdim,
                      mean_b, np, out, wide)

NAME = "LayerNormLastDim"


def infer(types, params):
    check_arity(NAME, types, 1, names=("x",))
    check_float(NAME, types)
    if len(types[0].shape) < 1:
        raise fail(NAME, types, "x needs rank >= 1")
    return types[0]


def reference(inputs, params):
    x = wide(inputs[0])
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return out((x - mu) / np.sqrt(var + params["eps"]), dtype_of(inputs[0]))


def _build():
    x = Bind(0)
    centered = op("Sub", x, mean_b(x))
    var_eps = op("AddScalar", keepdim(op("MeanDim", op("Sqr", centered), axis=LAST)),
                 value=SLOT)
    return op("Div", centered, op("BroadcastTo", op("Sqrt", var_eps), shape=SameAs(0)))


RECIPE = _build()

ENTRY = FusedOpEntry(
    id=4, name=NAME, mnemonic="layer_norm_last_dim", family=Family.NORM,
    arity=1, params=(ParamSpec("eps", "f64"),), infer=infer, reference=reference,
    recipe=Recipe(roots=RECIPE, scalars=lambda p: (p["eps"],)),
    backward=backward_fused("LayerNormLastDimBackward"), op_kind=OpKind.LayerNormLastDim,
    destructive_input=None, cse_tag=4, input_names=("x",),
    patterns=(FusedPattern(RECIPE, lambda s: {"eps": s[0]}, "recipe"),),
    doc=__doc__,
)
