"""LayerNormLastDim (fused id 4): y = (x - mean)/sqrt(var + eps) [* weight]
[+ bias], population variance (divide by n), over the last axis.

Inputs ``x`` and optionally ``weight`` ``[D]``, then ``bias`` ``[D]`` (x's
dtype; a bias needs a weight). The affine runs inside the op: f16/bf16
compute in f32 and round once (as PyTorch), instead of separate f16 Mul/Add.

Param ``eps``. Output same type as x. Recipe: an 11-node DAG with
``centered`` shared (2 consumers); one slot ``[eps]``; f16/bf16 cast to f32
and back around it. Patterns: the recipe spelling, and a weight/bias
multiplied/added onto the fused op (``LayerNorm(x) * w``, then ``+ b``), so
models built from primitives or imported get the affine fused too.
"""
from ..entry import FusedOpEntry, FusedPattern, Family, Recipe, backward_fused
from ..grammar import LAST, SLOT, Bind, SameAs, op
from ._common import (OpKind, ParamSpec, check_float, dtype_of, keepdim, mean_b, np, out,
                      wide)
from ._norm_common import affine_patterns, affine_recipe, check_affine

NAME = "LayerNormLastDim"
INPUTS = ("x", "weight", "bias")


def infer(types, params):
    check_affine(NAME, types, INPUTS)
    check_float(NAME, types)
    return types[0]


def reference(inputs, params):
    x = wide(inputs[0])
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + params["eps"])
    if len(inputs) > 1:
        y = y * wide(inputs[1])
    if len(inputs) > 2:
        y = y + wide(inputs[2])
    return out(y, dtype_of(inputs[0]))


def _build(x=Bind(0)):
    centered = op("Sub", x, mean_b(x))
    var_eps = op("AddScalar", keepdim(op("MeanDim", op("Sqr", centered), axis=LAST)),
                 value=SLOT)
    return op("Div", centered, op("BroadcastTo", op("Sqrt", var_eps), shape=SameAs(0)))


RECIPE = _build()

ENTRY = FusedOpEntry(
    id=4, name=NAME, mnemonic="layer_norm_last_dim", family=Family.NORM,
    arity=-1, min_arity=1, params=(ParamSpec("eps", "f64"),), infer=infer,
    reference=reference,
    recipe=Recipe(build=affine_recipe(_build), scalars=lambda p: (p["eps"],)),
    backward=backward_fused("LayerNormLastDimBackward"), op_kind=OpKind.LayerNormLastDim,
    destructive_input=None, cse_tag=4, input_names=INPUTS,
    patterns=(FusedPattern(RECIPE, lambda s: {"eps": s[0]}, "recipe"),
              *affine_patterns(NAME, lambda s: {"eps": s[0]})),
    doc=__doc__,
)
