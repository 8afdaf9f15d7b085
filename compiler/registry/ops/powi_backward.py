"""PowIBackward (fused id 15): grad = exp·x^(exp-1)·up, for the forward
``PowI(exp)``. Inputs (x, up) of one shape and float dtype; param ``exp``
(i64); output same type as x. Recipe (everything baked in):
Mul(MulScalar(exp)(PowI(exp-1)(x)), up); for exp = 0 the gradient is 0·up
(as in PyTorch), MulScalar(0)(up), not 0·x^-1·up (NaN at x = 0)."""
from ..entry import NOT_DIFFERENTIABLE, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from ._common import OpKind, ParamSpec, dtype_of, np, out, wide
from ._norm_common import infer_pair

NAME = "PowIBackward"
infer = infer_pair(NAME, ("x", "up"))


def reference(inputs, params):
    x, up = wide(inputs[0]), wide(inputs[1])
    e = params["exp"]
    if e == 0:
        return out(0.0 * up, dtype_of(inputs[0]))
    with np.errstate(divide="ignore", invalid="ignore"):
        return out(e * np.power(x, float(e - 1)) * up, dtype_of(inputs[0]))


def build(params, types):
    e = params["exp"]
    if e == 0:
        return op("MulScalar", Bind(1), value=0.0)
    return op("Mul", op("MulScalar", op("PowI", Bind(0), n=e - 1), value=float(e)), Bind(1))


def _unused(params, types):
    return (0,) if params["exp"] == 0 else ()


ENTRY = FusedOpEntry(
    id=15, name=NAME, mnemonic="powi_backward", family=Family.BACKWARD,
    arity=2, params=(ParamSpec("exp", "i64"),), infer=infer, reference=reference,
    recipe=Recipe(build=build, unused_inputs=_unused), backward=NOT_DIFFERENTIABLE,
    op_kind=OpKind.PowIElementwiseBackward, destructive_input=None, cse_tag=15,
    input_names=("x", "up"), doc=__doc__,
)
