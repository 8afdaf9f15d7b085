"""InplaceAffine (fused id 16): x := mul·x + add, in place.

One input; params ``mul``, ``add``; output same type as x and aliasing it:
``destructive_input = 0`` (the only destructive static fused op). Recipe:
AddScalar[slot](MulScalar[slot](x)); slots fill in pre-order, so the
projection is ``[add, mul]``. The recipe gives the value semantics only."""
from ..entry import NOT_DIFFERENTIABLE, FusedOpEntry, Family, Recipe
from ..grammar import SLOT, Bind, op
from ._common import OpKind, ParamSpec, check_arity, fail, dtype_of, out, wide

NAME = "InplaceAffine"


def infer(types, params):
    check_arity(NAME, types, 1, names=("x",))
    if not types[0].dtype.is_float:
        raise fail(NAME, types, "x must be a float tensor")
    return types[0]


def reference(inputs, params):
    return out(params["mul"] * wide(inputs[0]) + params["add"], dtype_of(inputs[0]))


RECIPE = op("AddScalar", op("MulScalar", Bind(0), value=SLOT), value=SLOT)

ENTRY = FusedOpEntry(
    id=16, name=NAME, mnemonic="inplace_affine", family=Family.FORWARD,
    arity=1, params=(ParamSpec("mul", "f64"), ParamSpec("add", "f64")),
    infer=infer, reference=reference,
    recipe=Recipe(roots=RECIPE, scalars=lambda p: (p["add"], p["mul"])),
    backward=NOT_DIFFERENTIABLE, op_kind=OpKind.InplaceAffine, destructive_input=0,
    cse_tag=16, input_names=("x",), doc=__doc__,
)
