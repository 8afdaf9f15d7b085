"""MaxPool2D (fused id 26): the maximum over each window of an NCHW image.

Input x ``[N,C,H,W]``, one float dtype. Params ``kernel`` (kh, kw),
``stride`` (sh, sw), ``dilation`` (dh, dw; window taps dh/dw apart) and
``padding`` (top, left, bottom, right): the image is padded with -inf, so a
padded position never wins. Output ``[N,C,(H+top+bottom-dh(kh-1)-1)/sh+1,
(W+left+right-dw(kw-1)-1)/sw+1]``; every window must hold at least one
input position (the ONNX importer turns ``ceil_mode``, ``auto_pad`` and
asymmetric pads into these four pads). NaN propagates, as ``Maximum``'s.

Recipe: the padded image (``Pad`` with -inf, rounded up to the strides),
viewed ``[N, C, H/sh, sh, W/sw, sw]`` and copied once into its stride phases
``[N, C, sh, sw, H/sh, W/sw]``, so every tap's window is a unit-stride
slice of a phase; a ``Maximum`` chain over the taps. (Windows read through
the strided view directly were read element by element.)
"""
from ..entry import DECOMPOSE, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from ._common import (FLOATS, OpKind, ParamSpec, TensorType, check_arity, dtype_of, fail,
                      fmt_types, np, out, wide)
from compiler.graph.symbolic import fits, window_count

NAME = "MaxPool2D"


def geometry(types, params):
    """(n, c, h, w, (kh, kw), (sh, sw), (dh, dw), (top, left, bottom, right), ho, wo);
    raises GraphBuildError."""
    check_arity(NAME, types, 1, names=("x",))
    x = types[0]
    if len(x.shape) != 4:
        raise fail(NAME, types, "x must be [N,C,H,W]")
    if x.dtype not in FLOATS:
        raise fail(NAME, types, f"x must be a float tensor (bf16, f16, f32, f64), got {x.dtype}")
    if any(len(params[k]) != n for k, n in (("kernel", 2), ("stride", 2), ("dilation", 2),
                                           ("padding", 4))):
        raise fail(NAME, types, "kernel, stride and dilation are (h, w) pairs and padding is "
                                "(top, left, bottom, right)")
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw) = params["kernel"], params["stride"], params["dilation"]
    top, left, bottom, right = params["padding"]
    if min(kh, kw, sh, sw, dh, dw) < 1 or min(top, left, bottom, right) < 0:
        raise fail(NAME, types, "kernel, stride and dilation must be >= 1 and padding >= 0")
    ekh, ekw = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    hp, wp = h + top + bottom, w + left + right
    if not (fits(ekh, hp, f"{NAME}{fmt_types(types)} height")
            and fits(ekw, wp, f"{NAME}{fmt_types(types)} width")):
        raise fail(NAME, types, f"window {ekh}x{ekw} larger than the padded input {hp}x{wp}")
    ho = window_count(hp, ekh, sh, f"{NAME}{fmt_types(types)} height")
    wo = window_count(wp, ekw, sw, f"{NAME}{fmt_types(types)} width")
    if (ho - 1) * sh >= h + top or (wo - 1) * sw >= w + left or top >= ekh or left >= ekw:
        raise fail(NAME, types, "a window lies wholly in the padding: lower the padding (a "
                                "window must hold at least one input position)")
    return n, c, h, w, (kh, kw), (sh, sw), (dh, dw), (top, left, bottom, right), ho, wo


def infer(types, params):
    n, c, *_, ho, wo = geometry(types, params)
    return TensorType((n, c, ho, wo), types[0].dtype)


def reference(inputs, params):
    x = wide(inputs[0])
    n, c, h, w, (kh, kw), (sh, sw), (dh, dw), (t, l, b, r), ho, wo = geometry(
        [TensorType(x.shape, dtype_of(inputs[0]))], params)
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=-np.inf)
    y = None
    for ky in range(kh):
        for kx in range(kw):
            v = xp[:, :, ky * dh:ky * dh + sh * (ho - 1) + 1:sh, kx * dw:kx * dw + sw * (wo - 1) + 1:sw]
            # np.maximum propagates NaN, as Maximum does
            y = v if y is None else np.maximum(y, v)
    return out(y, dtype_of(inputs[0]))


def build(params, types):
    n, c, h, w, (kh, kw), (sh, sw), (dh, dw), (t, l, b, r), ho, wo = geometry(types, params)
    # pad, and round the padded extents up to the strides (-inf never wins)
    hq, wq = -(-(h + t + b) // sh), -(-(w + l + r) // sw)
    x = Bind(0)
    pads = (0, 0, 0, 0, t, hq * sh - h - t, l, wq * sw - w - l)
    if any(pads):
        x = op("Pad", x, padding=pads, mode="constant", value=-np.inf)
    if sh == sw == 1:
        def window(oy, ox):
            return op("Slice", op("Slice", x, dim=2, start=oy, len=ho), dim=3, start=ox, len=wo)
    else:
        phases = op("Contiguize", op("Permute", op("Reshape", x, shape=(n, c, hq, sh, wq, sw)),
                                     perm=(0, 1, 3, 5, 2, 4)))     # [n, c, sh, sw, hq, wq]

        def window(oy, ox):
            (qy, ry), (qx, rx) = divmod(oy, sh), divmod(ox, sw)
            v = op("Slice", op("Slice", phases, dim=2, start=ry, len=1), dim=3, start=rx, len=1)
            v = op("Slice", op("Slice", v, dim=4, start=qy, len=ho), dim=5, start=qx, len=wo)
            return op("Reshape", v, shape=(n, c, ho, wo))
    y = None
    for ky in range(kh):
        for kx in range(kw):
            v = window(ky * dh, kx * dw)
            y = v if y is None else op("Maximum", y, v)
    return y


ENTRY = FusedOpEntry(
    id=26, name=NAME, mnemonic="max_pool2d", family=Family.FORWARD, arity=1,
    params=(ParamSpec("kernel", "i64s", (1, 1)), ParamSpec("stride", "i64s", (1, 1)),
            ParamSpec("dilation", "i64s", (1, 1)), ParamSpec("padding", "i64s", (0, 0, 0, 0)),
            ParamSpec("image_at_run_time", "bool", None)),
    infer=infer, reference=reference, recipe=Recipe(build=build),
    backward=DECOMPOSE, op_kind=OpKind.MaxPool2D, destructive_input=None, cse_tag=24,
    input_names=("x",), doc=__doc__,
)
