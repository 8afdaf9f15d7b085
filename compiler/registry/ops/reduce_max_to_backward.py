"""ReduceMaxToBackward (fused id 10): the backward of ``ReduceMaxTo``: routes
the upstream gradient to the positions of the maximum; ties share equally.

Inputs (x, up): ``up`` has the reduce-target shape (broadcast-compatible into
x, left-padded with 1s), x's dtype; output same type as x. The mask is made
float without a Cast: ``MaskedFill(1.0)(MulScalar(0)(x), Equal(x, y))``."""
from ..entry import NOT_DIFFERENTIABLE, FusedOpEntry, Family, Recipe
from ..grammar import Bind, SameAs, op
from ._common import OpKind, check_arity, check_float, dtype_of, fail, np, out, wide

NAME = "ReduceMaxToBackward"


def infer(types, params):
    check_arity(NAME, types, 2, names=("x", "up"))
    check_float(NAME, types, (0, 1))
    x, up = types
    if up.dtype != x.dtype:
        raise fail(NAME, types, "up must have x's dtype")
    if len(up.shape) > len(x.shape) or any(
            a not in (1, b) for a, b in zip(reversed(up.shape), reversed(x.shape))):
        raise fail(NAME, types, "up must have a reduce-target shape of x (each axis 1 or x's)")
    return x


def reference(inputs, params):
    x, up = wide(inputs[0]), wide(inputs[1])
    upp = up.reshape((1,) * (x.ndim - up.ndim) + up.shape)
    axes = tuple(i for i in range(x.ndim) if upp.shape[i] == 1)
    y = x.max(axis=axes, keepdims=True) if axes else x
    mask = (x == y).astype(np.float64)
    ties = mask.sum(axis=axes, keepdims=True) if axes else mask
    return out(mask * upp / ties, dtype_of(inputs[0]))


def _build():
    x, up = Bind(0), Bind(1)
    y = op("ReduceMaxTo", x, shape=SameAs(1))
    m = op("Equal", x, op("BroadcastTo", y, shape=SameAs(0)))
    mf = op("MaskedFill", op("MulScalar", x, value=0.0), m, value=1.0)
    ties = op("ReduceSumTo", mf, shape=SameAs(1))
    return op("Mul", mf, op("BroadcastTo", op("Div", up, ties), shape=SameAs(0)))


RECIPE = _build()

ENTRY = FusedOpEntry(
    id=10, name=NAME, mnemonic="reduce_max_to_backward", family=Family.BACKWARD,
    arity=2, params=(), infer=infer, reference=reference, recipe=Recipe(roots=RECIPE),
    backward=NOT_DIFFERENTIABLE, op_kind=OpKind.ReduceMaxToBackward, destructive_input=None,
    cse_tag=10, input_names=("x", "up"), doc=__doc__,
)
