"""RmsNormLastDim (fused id 3): y = x / sqrt(mean_last(x²) + eps) [* weight].

Inputs ``x`` and optionally ``weight`` ``[D]`` (x's dtype). The weight
multiply runs inside the op (f16/bf16: in f32, rounded once), so the kernel
makes one pass over memory instead of a norm and a separate Mul.

Param ``eps`` (f64). Output same type as x (float dtypes, rank >= 1).
Recipe: Sqr -> MeanDim(last) -> Unsqueeze -> AddScalar[slot eps] -> Sqrt ->
BroadcastTo(x) -> Div(x, ·); one slot, projection ``[eps]``; with a weight,
``* BroadcastTo(weight)`` (f16/bf16 cast to f32 and back around it).
Patterns: the recipe spelling, the legacy one with ``Reshape`` as the
keepdim step (eps is read from the AddScalar), HF's ``x * Recip(sqrt(..))``
(Llama's RMSNorm as exported), and a weight multiplied onto the fused op
(``RmsNorm(x) * w``).
"""
from ..entry import FusedOpEntry, FusedPattern, Family, Recipe, backward_fused
from ..grammar import LAST, SLOT, Bind, SameAs, WithDim, op
from ._common import OpKind, ParamSpec, check_float, dtype_of, np, out, wide
from ._norm_common import affine_patterns, affine_recipe, check_affine

NAME = "RmsNormLastDim"
INPUTS = ("x", "weight")


def infer(types, params):
    check_affine(NAME, types, INPUTS)
    check_float(NAME, types)
    return types[0]


def reference(inputs, params):
    x = wide(inputs[0])
    ms = np.mean(x * x, axis=-1, keepdims=True)
    y = x / np.sqrt(ms + params["eps"])
    if len(inputs) > 1:
        y = y * wide(inputs[1])
    return out(y, dtype_of(inputs[0]))


def _spelling(keep, x=None):
    x = Bind(0) if x is None else x
    ms = op("MeanDim", op("Sqr", x), axis=LAST)
    den = op("Sqrt", op("AddScalar", keep(ms), value=SLOT))
    return op("Div", x, op("BroadcastTo", den, shape=SameAs(0)))


RECIPE = _spelling(lambda m: op("Unsqueeze", m, dim=LAST))
_LEGACY = _spelling(lambda m: op("Reshape", m, shape=WithDim(0, LAST, 1)))
# HF's LlamaRMSNorm as exported: x * (1 / sqrt(mean(x^2) + eps)) (``torch.rsqrt``
# has no opset-17 op; the importer makes the ``Div(1, .)`` a Recip)
_RECIPROCAL = op("Mul", Bind(0), op("BroadcastTo", op("Recip", op("Sqrt", op(
    "AddScalar", op("Unsqueeze", op("MeanDim", op("Sqr", Bind(0)), axis=LAST), dim=LAST),
    value=SLOT))), shape=SameAs(0)))
_WEIGHTED = affine_recipe(lambda x: _spelling(lambda m: op("Unsqueeze", m, dim=LAST), x))


def _recipe(params, types):
    """The plain recipe without a weight (no f16/bf16 casts, as before the
    weight existed); with one, the norm times the weight, f16/bf16 in f32."""
    return RECIPE if len(types) == 1 else _WEIGHTED(params, types)


ENTRY = FusedOpEntry(
    id=3, name=NAME, mnemonic="rms_norm_last_dim", family=Family.NORM,
    arity=-1, min_arity=1, params=(ParamSpec("eps", "f64"),), infer=infer, reference=reference,
    recipe=Recipe(build=_recipe, scalars=lambda p: (p["eps"],)),
    backward=backward_fused("RmsNormLastDimBackward"), op_kind=OpKind.RmsNormLastDim,
    destructive_input=None, cse_tag=3, input_names=INPUTS,
    patterns=(FusedPattern(RECIPE, lambda s: {"eps": s[0]}, "recipe"),
              FusedPattern(_LEGACY, lambda s: {"eps": s[0]}, "legacy"),
              FusedPattern(_RECIPROCAL, lambda s: {"eps": s[0]}, "reciprocal"),
              *affine_patterns(NAME, lambda s: {"eps": s[0]}, n_affine=1)),
    doc=__doc__,
)
