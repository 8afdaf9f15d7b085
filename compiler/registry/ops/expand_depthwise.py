"""ExpandDepthwise (fused id 27): a 1x1 expansion conv feeding the depthwise
conv that reads it (the head of a MobileNetV2 / EfficientNet inverted
residual block), as one op.

Inputs x ``[N,Cin,H,W]``, the expansion's weight ``[Ce,Cin,1,1]`` and bias
``[Ce]``, the depthwise weight ``[Ce,1,Kh,Kw]`` and bias ``[Ce]``, one
float dtype. Params: the depthwise conv's ``stride`` and ``padding``; the
expansion's epilogue ``expand_clamp_min`` / ``expand_clamp_max`` or
``expand_silu``, the depthwise conv's ``clamp_min`` / ``clamp_max`` or
``silu`` (Conv2D's epilogues). Output: the depthwise conv's
``[N,Ce,Ho,Wo]``.

Recipe: the two Conv2Ds, ``act(dw(act_e(x @ we + be)) + bd)``. The cpu
kernel (``codegen/lowering/fused_conv.py: _expand_depthwise``) computes the
expansion a block of channels at a time into cache-resident planes and
runs the depthwise conv on them: the expanded tensor, the largest of the
block, is never written to memory. ``fuel-fuse`` makes it from the two
Conv2Ds (``passes/fuse.py: fuse_expand_depthwise``) where the target has the
kernel and it serves the params.
"""
from ..entry import DECOMPOSE, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from ._common import OpKind, ParamSpec, TensorType, check_arity, check_float, fail

NAME = "ExpandDepthwise"

#: The Conv2D epilogue params of each of the two convs: (this op's name, Conv2D's).
EXPAND_EPILOGUE = (("expand_clamp_min", "clamp_min"), ("expand_clamp_max", "clamp_max"),
                   ("expand_silu", "silu"))
DEPTHWISE_EPILOGUE = (("clamp_min", "clamp_min"), ("clamp_max", "clamp_max"), ("silu", "silu"))


def conv_params(params) -> tuple[dict, dict]:
    """The Conv2D params of the expansion and of the depthwise conv."""
    e = {"stride": (1, 1), "padding": (0, 0), "groups": 1, "dilation": (1, 1)}
    e.update({c: params.get(k) for k, c in EXPAND_EPILOGUE if params.get(k) is not None})
    d = {"stride": tuple(params["stride"]), "padding": tuple(params["padding"]),
         "dilation": (1, 1)}
    d.update({c: params.get(k) for k, c in DEPTHWISE_EPILOGUE if params.get(k) is not None})
    return e, d


def conv_types(types, params) -> tuple[list, list]:
    """The operand types of the two Conv2Ds (the expansion's output is the
    depthwise conv's x)."""
    from compiler.registry.ops import conv2d
    e, _ = conv_params(params)
    mid = conv2d.infer(list(types[:3]), e)
    return list(types[:3]), [mid, types[3], types[4]]


def infer(types, params):
    from compiler.registry.ops import conv2d
    check_arity(NAME, types, 5, 5, ("x", "we", "be", "wd", "bd"))
    check_float(NAME, types, range(5))
    if any(len(t.shape) != 4 for t in (types[0], types[1], types[3])):
        raise fail(NAME, types, "x, we and wd must be 4-D")
    ce = types[1].shape[0]
    if tuple(types[1].shape[2:]) != (1, 1) or tuple(types[3].shape[:2]) != (ce, 1):
        raise fail(NAME, types, "we must be [Ce,Cin,1,1] and wd [Ce,1,Kh,Kw]")
    e, d = conv_params(params)
    mid = conv2d.infer(list(types[:3]), e)
    return conv2d.infer([mid, types[3], types[4]], dict(d, groups=ce))


def reference(inputs, params):
    from compiler.registry.ops import conv2d
    e, d = conv_params(params)
    mid = conv2d.reference(list(inputs[:3]), e)
    return conv2d.reference([mid, inputs[3], inputs[4]], dict(d, groups=inputs[1].shape[0]))


def build(params, types):
    e, d = conv_params(params)
    mid = op("Conv2D", Bind(0), Bind(1), Bind(2), **e)
    return op("Conv2D", mid, Bind(3), Bind(4), groups=types[1].shape[0], **d)


ENTRY = FusedOpEntry(
    id=27, name=NAME, mnemonic="expand_depthwise", family=Family.FORWARD, arity=5,
    params=(ParamSpec("stride", "i64s", (1, 1)), ParamSpec("padding", "i64s", (0, 0)),
            ParamSpec("expand_clamp_min", "f64", None), ParamSpec("expand_clamp_max", "f64", None),
            ParamSpec("expand_silu", "bool", None),
            ParamSpec("clamp_min", "f64", None), ParamSpec("clamp_max", "f64", None),
            ParamSpec("silu", "bool", None)),
    infer=infer, reference=reference, recipe=Recipe(build=build),
    backward=DECOMPOSE, op_kind=OpKind.ExpandDepthwise, destructive_input=None, cse_tag=25,
    input_names=("x", "we", "be", "wd", "bd"), doc=__doc__,
)
