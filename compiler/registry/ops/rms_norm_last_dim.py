"""RmsNormLastDim (fused id 3): y = x / sqrt(mean_last(x²) + eps). No affine
weight (the builder ``rms_norm(x, weight)`` multiplies it in afterwards).

Param ``eps`` (f64). Output same type as x (float dtypes, rank >= 1).
Recipe: Sqr -> MeanDim(last) -> Unsqueeze -> AddScalar[slot eps] -> Sqrt ->
BroadcastTo(x) -> Div(x, ·); one slot, projection ``[eps]``. Patterns: the
recipe spelling and the legacy one with ``Reshape`` as the keepdim step; eps
is read from the AddScalar.
"""
from ..entry import FusedOpEntry, FusedPattern, Family, Recipe, backward_fused
from ..grammar import LAST, SLOT, Bind, SameAs, WithDim, op
from ._common import OpKind, ParamSpec, check_arity, check_float, dtype_of, fail, np, out, wide

NAME = "RmsNormLastDim"


def infer(types, params):
    check_arity(NAME, types, 1, names=("x",))
    check_float(NAME, types)
    if len(types[0].shape) < 1:
        raise fail(NAME, types, "x needs rank >= 1")
    return types[0]


def reference(inputs, params):
    x = wide(inputs[0])
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return out(x / np.sqrt(ms + params["eps"]), dtype_of(inputs[0]))


def _spelling(keep):
    x = Bind(0)
    ms = op("MeanDim", op("Sqr", x), axis=LAST)
    den = op("Sqrt", op("AddScalar", keep(ms), value=SLOT))
    return op("Div", x, op("BroadcastTo", den, shape=SameAs(0)))


RECIPE = _spelling(lambda m: op("Unsqueeze", m, dim=LAST))
_LEGACY = _spelling(lambda m: op("Reshape", m, shape=WithDim(0, LAST, 1)))

ENTRY = FusedOpEntry(
    id=3, name=NAME, mnemonic="rms_norm_last_dim", family=Family.NORM,
    arity=1, params=(ParamSpec("eps", "f64"),), infer=infer, reference=reference,
    recipe=Recipe(roots=RECIPE, scalars=lambda p: (p["eps"],)),
    backward=backward_fused("RmsNormLastDimBackward"), op_kind=OpKind.RmsNormLastDim,
    destructive_input=None, cse_tag=3, input_names=("x",),
    patterns=(FusedPattern(RECIPE, lambda s: {"eps": s[0]}, "recipe"),
              FusedPattern(_LEGACY, lambda s: {"eps": s[0]}, "legacy")),
    doc=__doc__,
)
