"""Rope (fused id 5): rotate-half (NeoX-style) rotary embedding,
out = x·cos + rotate_half(x)·sin, rotate_half(x) = concat(-x2, x1) with x1, x2
the two halves of the last axis.

Inputs x ``[.., seq, d]`` (d even), cos and sin broadcastable to x (typically
``[seq, d]``), all of x's float dtype; output same type as x. No params.
Backward: autograd's hand-written rule Rope(up, cos, -sin) (``custom``).
Recipe: static, rank-polymorphic (slices at ``Extent(x, last) // 2``).
"""
from ..entry import CUSTOM, FusedOpEntry, Family, Recipe
from ..grammar import LAST, Bind, Extent, SameAs, op
from ._common import OpKind, check_arity, check_float, dtype_of, fail, np, out, wide

NAME = "Rope"


def infer(types, params):
    check_arity(NAME, types, 3, names=("x", "cos", "sin"))
    check_float(NAME, types, (0, 1, 2))
    x = types[0]
    if len(x.shape) < 1 or x.shape[-1] % 2:
        raise fail(NAME, types, "x's last axis (head dim) must exist and be even")
    for t in types[1:]:
        if t.dtype != x.dtype:
            raise fail(NAME, types, f"cos/sin must have x's dtype {x.dtype}")
        if len(t.shape) > len(x.shape) or any(
                a not in (1, b) for a, b in zip(reversed(t.shape), reversed(x.shape))):
            raise fail(NAME, types, f"cos/sin {list(t.shape)} must broadcast to x "
                                    f"{list(x.shape)}")
    return x


def reference(inputs, params):
    x, cos, sin = (wide(v) for v in inputs)
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return out(x * cos + rot * sin, dtype_of(inputs[0]))


def _build():
    x = Bind(0)
    e = Extent(0, LAST)
    first = op("Slice", x, dim=LAST, start=0, len=e // 2)
    second = op("Slice", x, dim=LAST, start=e // 2, len=e - e // 2)
    rot = op("Concat", op("Neg", second), first, dim=LAST)
    cos_b = op("BroadcastTo", Bind(1), shape=SameAs(0))
    sin_b = op("BroadcastTo", Bind(2), shape=SameAs(0))
    return op("Add", op("Mul", x, cos_b), op("Mul", rot, sin_b))


RECIPE = _build()

ENTRY = FusedOpEntry(
    id=5, name=NAME, mnemonic="rope", family=Family.FORWARD,
    arity=3, params=(), infer=infer, reference=reference, recipe=Recipe(roots=RECIPE),
    backward=CUSTOM, op_kind=OpKind.Rope, destructive_input=None, cse_tag=5,
    input_names=("x", "cos", "sin"), doc=__doc__,
)
