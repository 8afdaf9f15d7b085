"""Rope (fused id 5): rotary embedding, out = x·cos + rot(x)·sin.

Param ``interleaved`` (bool, default False) picks the pairing of the last
axis, as ONNX RotaryEmbedding's ``interleaved`` attribute does:

* False, rotate-half (NeoX, Llama): rot(x) = concat(-x2, x1) with x1, x2 the
  two halves of the last axis;
* True, interleaved (GPT-J ``rotary_interleaved``): the pairs are (x[2i],
  x[2i+1]), rot(x)[2i] = -x[2i+1], rot(x)[2i+1] = x[2i].

Inputs x ``[.., seq, d]`` (d even), cos and sin broadcastable to x (typically
``[seq, d]``, laid out in the same pairing), all of x's float dtype; output
same type as x. Backward: autograd's hand-written rule Rope(up, cos, -sin)
with the same pairing (``custom``). Recipe: rotate-half slices at
``Extent(x, last) // 2``; interleaved reshapes the last axis to ``[d/2, 2]``.
"""
from ..entry import CUSTOM, FusedOpEntry, FusedPattern, Family, Recipe
from ..grammar import LAST, Bind, Extent, SameAs, op
from ._common import OpKind, ParamSpec, check_arity, check_float, dtype_of, fail, np, out, wide

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
    if params.get("interleaved"):
        rot = np.empty_like(x)
        rot[..., 0::2], rot[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    else:
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


def build(params, types):
    if not params.get("interleaved"):
        return RECIPE
    shape = tuple(types[0].shape)
    pairs = op("Reshape", Bind(0), shape=shape[:-1] + (shape[-1] // 2, 2))
    last = len(shape)
    even = op("Slice", pairs, dim=last, start=0, len=1)
    odd = op("Slice", pairs, dim=last, start=1, len=1)
    rot = op("Reshape", op("Concat", op("Neg", odd), even, dim=last), shape=shape)
    cos_b = op("BroadcastTo", Bind(1), shape=shape)
    sin_b = op("BroadcastTo", Bind(2), shape=shape)
    return op("Add", op("Mul", Bind(0), cos_b), op("Mul", rot, sin_b))

ENTRY = FusedOpEntry(
    id=5, name=NAME, mnemonic="rope", family=Family.FORWARD,
    arity=3, params=(ParamSpec("interleaved", "bool", False),), infer=infer,
    reference=reference, recipe=Recipe(build=build),
    backward=CUSTOM, op_kind=OpKind.Rope, destructive_input=None, cse_tag=5,
    input_names=("x", "cos", "sin"),
    # rotate-half as exporters spell HF's apply_rotary_pos_emb (Slice, Neg,
    # Concat, two Muls by the broadcast tables and an Add)
    patterns=(FusedPattern(RECIPE, name="rotate-half"),), doc=__doc__,
)
