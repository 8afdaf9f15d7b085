"""SoftmaxLastDim (fused id 1): y = exp(x - max_last x) / sum_last exp(x - max).

Any rank >= 1, float dtypes; output same type as x. Recipe: a 9-node
DAG with ``e`` shared. Patterns: the recipe spelling (MaxDim/SumDim with
Unsqueeze, ``e`` consumed twice) and the legacy keepdim spelling
(ReduceMaxTo/ReduceSumTo to x's shape with the last axis set to 1).

Optional param ``scale`` (None: off): the softmax of ``x * scale``, the
product rounded to x's dtype first, as a separate ``MulScalar`` writes it
(the attention scores' ``1/sqrt(d)``). ``fuel-fuse`` folds a ``MulScalar`` (or a
``Mul`` by a scalar constant, a ``Div`` by a power of two) that is the softmax's
input and has no other user (``compiler.passes.fuse: fold_softmax_scales``) where
the cpu kernel serves it (f32, f64); the recipe starts with that
``MulScalar``, so a target without the kernel decomposes to the pair. The
backward entry is that of the unscaled softmax: a scaled softmax is an
inference-time fold (its gradient wrt x would need the factor).

Optional second input ``mask`` (additive): the softmax of ``x * scale + mask``
(the sum rounded to x's dtype, as a separate ``Add`` writes it), ``mask`` of x's
rank and dtype, each extent 1 (broadcast) or x's, the last one x's (every
element of a row its own value: BERT's ``[B,1,1,S]`` padding mask, a
``[1,H,S,S]`` bias). ``fuel-fuse`` folds the Add between the scores and the
softmax (``fold_softmax_scales``) where the cpu kernel serves it (f32, f64);
the recipe is the Add of the BroadcastTo mask, so a target without the
kernel decomposes to the Add and the softmax. Like the scale, an inference-time
fold: the backward entry gives no gradient for the mask.
"""
from ..entry import FusedOpEntry, FusedPattern, Family, Recipe, backward_fused
from ..grammar import LAST, Bind, SameAs, WithDim, op
from ._common import (OpKind, ParamSpec, bc_last, check_arity, check_float, dtype_of, fail, np,
                      out, wide)

NAME = "SoftmaxLastDim"
INPUTS = ("x", "mask")


def infer(types, params):
    check_arity(NAME, types, 1, 2, names=INPUTS)
    check_float(NAME, types)
    if len(types[0].shape) < 1:
        raise fail(NAME, types, "x needs rank >= 1 (softmax runs over the last axis)")
    if len(types) == 2:
        why = mask_mismatch(types[1].shape, types[0].shape)
        if why is not None or types[1].dtype != types[0].dtype:
            why = why or f"dtype {types[1].dtype.value}, not x's {types[0].dtype.value}"
            raise fail(NAME, types, f"the additive mask must have x's rank and dtype, each "
                                    f"extent 1 or x's and the last x's (it is added to every "
                                    f"row): {why}; add it before the softmax instead")
    return types[0]


def mask_mismatch(mshape, xshape) -> str | None:
    """Why a mask of shape ``mshape`` is not SoftmaxLastDim's additive mask for
    x of ``xshape`` (x's rank, each extent 1 or x's, the last x's), or None."""
    mshape, xshape = tuple(mshape), tuple(xshape)
    if len(mshape) != len(xshape):
        return f"rank {len(mshape)}, x has {len(xshape)}"
    if mshape[-1] != xshape[-1]:
        return f"last extent {mshape[-1]}, the rows have {xshape[-1]}"
    bad = [i for i, (m, d) in enumerate(zip(mshape, xshape)) if m not in (1, d)]
    return f"extent {mshape[bad[0]]} on axis {bad[0]}, x has {xshape[bad[0]]}" if bad else None


def reference(inputs, params):
    x = inputs[0]
    if params.get("scale") is not None:  # x * scale rounded to x's dtype, as MulScalar
        dt = dtype_of(x)
        x = out(wide(x) * wide(out(np.float64(params["scale"]), dt)), dt)
    if len(inputs) > 1:  # x + mask rounded to x's dtype, as Add
        x = out(wide(x) + wide(inputs[1]), dtype_of(inputs[0]))
    x = wide(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return out(e / e.sum(axis=-1, keepdims=True), dtype_of(inputs[0]))


def _build(x=None):
    x = Bind(0) if x is None else x
    e = op("Exp", op("Sub", x, bc_last(op("MaxDim", x, axis=LAST))))
    return op("Div", e, bc_last(op("SumDim", e, axis=LAST)))


def _legacy():
    x = Bind(0)
    kd = WithDim(0, LAST, 1)
    m = op("BroadcastTo", op("ReduceMaxTo", x, shape=kd), shape=SameAs(0))
    e = op("Exp", op("Sub", x, m))
    return op("Div", e, op("BroadcastTo", op("ReduceSumTo", e, shape=kd), shape=SameAs(0)))


RECIPE = _build()


def _recipe(params, types):
    """The softmax; with ``scale``, of ``MulScalar(x, scale)``; with a mask, of
    that plus ``BroadcastTo(mask)``."""
    if params.get("scale") is None and len(types) < 2:
        return RECIPE
    x = Bind(0)
    if params.get("scale") is not None:
        x = op("MulScalar", x, value=float(params["scale"]))
    if len(types) > 1:
        x = op("Add", x, op("BroadcastTo", Bind(1), shape=SameAs(0)))
    return _build(x)


ENTRY = FusedOpEntry(
    id=1, name=NAME, mnemonic="softmax_last_dim", family=Family.FORWARD,
    arity=-1, min_arity=1, params=(ParamSpec("scale", "f64", None),), infer=infer,
    reference=reference,
    recipe=Recipe(build=_recipe),
    backward=backward_fused("SoftmaxLastDimBackward"),
    op_kind=OpKind.SoftmaxLastDim,
    destructive_input=None, cse_tag=1, input_names=INPUTS,
    patterns=(FusedPattern(RECIPE, name="recipe"), FusedPattern(_legacy(), name="legacy")),
    doc=__doc__,
)
