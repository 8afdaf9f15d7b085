"""Conv2D (fused id 6): 2-D cross-correlation with stride, padding, dilation
and groups.

Inputs x ``[N,Cin,H,W]``, w ``[Cout,Cin/g,Kh,Kw]``, optional bias ``[Cout]``
(arity 2 or 3), one float dtype. Params ``stride`` (sh, sw), ``padding``
(ph, pw), ``groups``, ``dilation`` (dh, dw; default (1, 1): kernel taps
dh/dw apart). Output ``[N,Cout,(H+2ph-dh(Kh-1)-1)/sh+1,(W+2pw-dw(Kw-1)-1)/sw+1]``.
Recipe: groups = 1 is im2col + one MatMul: the Kh*Kw taps of the padded
input are slices of a view (no index math), stacked by one Concat into
``[N, Cin*Kh*Kw, Ho*Wo]``; a 1x1 stride-1 unpadded kernel multiplies x
itself. Depthwise (groups = Cin = Cout) is the sum of each tap's view times
its per-channel weight (elementwise Mul and Add). Other groups > 1 run per group on channel slices (Pad, an Iota-built U32
index vector, IndexSelect, MatMul) and Concat, instead of a rank-5
batched form; index math in F32 is exact while the padded plane is below
2**24 elements, larger planes decline. Backward: autograd's hand-written rule (``custom``).

Epilogue: ``clamp_min`` / ``clamp_max`` (None: unbounded on that side) clamp
the result, bias included: ``fuel-fuse`` folds a ``Relu`` or ``Clamp`` that
is the conv's only user into it (``compiler.passes.fuse: fold_conv_epilogues``),
so the kernel writes the activated output once instead of a second pass
reading and writing it again. The recipe ends with the same ``Clamp``.
``silu`` (bool, None: off): the result times its sigmoid, bias included (SiLU / Swish:
``fuel-fuse`` folds ``Mul(y, Sigmoid(y))`` when those two are the conv's
only users); exclusive with the clamp. The recipe ends with the same
``Mul`` of ``Sigmoid``. ``gelu`` (bool, None: off): the exact (erf) GELU of the
result, bias included (``fuel-fuse`` folds a ``GeluErf`` that is the conv's only
user: the Whisper/wav2vec2 conv front ends); exclusive with the clamp and silu.
The recipe ends with the same ``GeluErf``.

Winograd: ``winograd`` (bool, None: off): w is not ``[Cout,Cin,3,3]`` but its
Winograd F(2x2, 3x3) transform ``[16,Cout,Cin]`` (``winograd_weights``), of a
3x3 stride-1 groups-1 conv; ``fuel-prepack-weights`` makes it of a constant w
where the cpu kernel computes the conv that way (``conv_winograd``). No recipe.

Residual: ``residual`` (bool, None: off) adds a last operand, the skip
``[N,Cout,Ho,Wo]`` of the output's type, to the result BEFORE the activation:
``act(conv + bias + skip)`` (operands (x, w, [bias], [residual]),
``operand_slots``). ``fuel-fuse`` folds an ``Add(conv, skip)`` into a conv
without an activation (``compiler.passes.fuse: fold_conv_residuals``): a
MobileNetV2 / EfficientNet projection (linear, then the skip), and a ResNet
block's ``Relu(conv + skip)``, whose Relu then folds as the clamp. The recipe
adds the skip after the bias. A conv whose recipe is one product that reads
the skip as its rows (``product_epilogue``: few pixels, or whole images)
makes that product a FusedLinear that adds the bias and the
skip and clamps in its epilogue; ``fuel-fuse`` folds the skip and the ReLU
into such a conv, which has no kernel of its own, where that FusedLinear
has one (``passes.fuse.conv_available``).
"""
import contextvars

from ..entry import CUSTOM, Decline, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from ._common import (OpKind, ParamSpec, TensorType, DType, check_arity, check_float,
                      dtype_of, fail, fmt_types, iota_index, np, out, wide)
from compiler.graph.ops import same_shape
from compiler.graph.symbolic import fits, is_symbolic, window_count

NAME = "Conv2D"

#: Set while ``save`` samples the plan of a symbolic image
#: (``SymbolicModule.export_sample``): a conv whose image size is symbolic
#: (``image_at_run_time``) then takes one form at every size, the kernel of
#: run-time extents, instead of the few-pixel or whole-image forms of a
#: small image, so one template of the plan serves every size
#: (docs/dynamic-shapes.md, "One file for every image size").
ONE_FORM = contextvars.ContextVar("conv2d_one_form", default=False)


def one_form(params) -> bool:
    """Whether this conv takes one form at every image size (``ONE_FORM``)."""
    return bool(params.get("image_at_run_time")) and ONE_FORM.get()


def kernels_shape(w: tuple, params) -> tuple:
    """w's shape as the kernels' ``[Cout, Cin/g, Kh, Kw]``: the transformed
    ``[16, Cout, Cin]`` of a ``winograd`` conv as its 3x3 kernels'."""
    return (w[1], w[2], 3, 3) if params.get("winograd") else tuple(w)


def _geometry(types, params):
    x, w = types[0], types[1]
    if params.get("winograd"):   # w: the transformed 3x3 kernels [16, Cout, Cin]
        if len(x.shape) != 4 or len(w.shape) != 3 or w.shape[0] != 16 \
                or w.shape[2] != x.shape[1] or params["groups"] != 1:
            raise fail(NAME, types, "winograd: x must be [N,Cin,H,W] and w the transformed "
                                    "kernels [16,Cout,Cin], groups 1")
        w = TensorType(kernels_shape(w.shape, params), w.dtype)
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise fail(NAME, types, "x must be [N,Cin,H,W] and w [Cout,Cin/g,Kh,Kw]")
    (n, cin, h, wd), (cout, cpg, kh, kw) = x.shape, w.shape
    (sh, sw), (ph, pw), g = params["stride"], params["padding"], params["groups"]
    dh, dw = params["dilation"]
    if g < 1 or cin % g or cout % g or cpg * g != cin:
        raise fail(NAME, types, f"groups={g} must divide Cin={cin} and Cout={cout}, with "
                                f"w's second axis = Cin/groups")
    if sh < 1 or sw < 1 or ph < 0 or pw < 0 or dh < 1 or dw < 1:
        raise fail(NAME, types, "stride and dilation must be >= 1 and padding >= 0")
    hp, wp = h + 2 * ph, wd + 2 * pw
    ekh, ekw = dh * (kh - 1) + 1, dw * (kw - 1) + 1  # the dilated kernel's extent
    if not (fits(ekh, hp, f"{NAME}{fmt_types(types)} height")
            and fits(ekw, wp, f"{NAME}{fmt_types(types)} width")) or kh < 1 or kw < 1:
        raise fail(NAME, types, f"kernel {kh}x{kw} (dilation {dh}x{dw}: extent {ekh}x{ekw}) "
                                f"larger than the padded input {hp}x{wp}")
    return (n, cin, cout, kh, kw, sh, sw, ph, pw, g, hp, wp,
            window_count(hp, ekh, sh, f"{NAME}{fmt_types(types)} height"),
            window_count(wp, ekw, sw, f"{NAME}{fmt_types(types)} width"))


def operand_slots(n: int, params) -> tuple:
    """Which of (x, w, bias, residual) each of ``n`` operands is: with
    ``residual`` set the last one is the skip."""
    if params.get("residual") and n >= 3:
        return tuple(range(n - 1)) + (3,)
    return tuple(range(n))


def split_operands(items, params) -> tuple:
    """``(x, w, bias, residual)`` of Conv2D's operands (values, types, arrays
    or indices), None for an absent one."""
    by_slot = dict(zip(operand_slots(len(items), params), items))
    return tuple(by_slot.get(k) for k in range(4))


def infer(types, params):
    res = bool(params.get("residual"))
    check_arity(NAME, types, 2 + res, 3 + res,
                ("x", "w", "bias", "residual") if res else ("x", "w", "bias"))
    check_float(NAME, types, range(len(types)))
    if any(len(params[k]) != 2 for k in ("stride", "padding", "dilation")):
        raise fail(NAME, types, "stride, padding and dilation are (h, w) pairs")
    n, cin, cout, *_, ho, wo = _geometry(types, params)
    if any(t.dtype != types[0].dtype for t in types):
        raise fail(NAME, types, "x, w and bias must share one dtype")
    _, _, bias, skip = split_operands(types, params)
    if bias is not None and tuple(bias.shape) != (cout,):
        raise fail(NAME, types, f"bias must be [Cout] = [{cout}]")
    y = TensorType((n, cout, ho, wo), types[0].dtype)
    if skip is not None and same_shape(skip.shape, y.shape) is None:
        raise fail(NAME, types, f"the residual must have the output's shape "
                                f"[{', '.join(map(str, y.shape))}]; add a mismatched skip "
                                f"outside the conv")
    lo, hi = params.get("clamp_min"), params.get("clamp_max")
    if lo is not None and hi is not None and not lo <= hi:
        raise fail(NAME, types, f"clamp_min={lo} must be <= clamp_max={hi} (None leaves a side open)")
    if params.get("silu") and (lo is not None or hi is not None):
        raise fail(NAME, types, "the silu and clamp epilogues are exclusive: set one of them")
    if params.get("gelu") and (params.get("silu") or lo is not None or hi is not None):
        raise fail(NAME, types, "the gelu epilogue excludes the clamp and silu: set one of them")
    return y


#: The Winograd F(2x2, 3x3) kernel transform G (``U = G g G^T``), and its left
#: inverse (``g = G+ U G+^T``: rows 0, 1 - 2 and 3 of U's).
WINOGRAD_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
WINOGRAD_G_INV = np.array([[1, 0, 0, 0], [0, 1, -1, 0], [0, 0, 0, 1]], dtype=np.float64)


def winograd_weights(w):
    """``[16, Cout, Cin]``: U[a*4 + b, co, c] = (G w[co, c] G^T)[a, b]."""
    u = np.einsum("ap,ocpq,bq->aboc", WINOGRAD_G, w, WINOGRAD_G)
    return u.reshape(16, *w.shape[:2])


def from_winograd(u):
    """The 3x3 kernels ``[Cout, Cin, 3, 3]`` whose transform is ``u``."""
    u = u.reshape(4, 4, *u.shape[1:])
    return np.einsum("pa,aboc,qb->ocpq", WINOGRAD_G_INV, u, WINOGRAD_G_INV)


def reference(inputs, params):
    x, w = wide(inputs[0]), wide(inputs[1])
    if params.get("winograd"):   # w transformed (``winograd``): the kernels it holds
        w = from_winograd(w)
    (sh, sw), (ph, pw), g = params["stride"], params["padding"], params["groups"]
    dh, dw = params["dilation"]
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, cin, hp, wp = xp.shape
    cout, cpg, kh, kw = w.shape
    ho, wo = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, cout, ho, wo))
    opg = cout // g
    for gi in range(g):
        xs = xp[:, gi * cpg:(gi + 1) * cpg]
        ws = w[gi * opg:(gi + 1) * opg]
        for ky in range(kh):
            for kx in range(kw):
                y0, x0 = ky * dh, kx * dw
                patch = xs[:, :, y0:y0 + sh * (ho - 1) + 1:sh, x0:x0 + sw * (wo - 1) + 1:sw]
                y[:, gi * opg:(gi + 1) * opg] += np.einsum("nchw,oc->nohw", patch, ws[:, :, ky, kx])
    _, _, bias, skip = split_operands(inputs, params)
    if bias is not None:
        y += wide(bias).reshape(1, cout, 1, 1)
    if skip is not None:
        y += wide(skip)
    lo, hi = params.get("clamp_min"), params.get("clamp_max")
    if lo is not None:
        y = np.where(y < lo, lo, y)   # NaN stays NaN, as Relu and Clamp keep it
    if hi is not None:
        y = np.where(y > hi, hi, y)
    if params.get("silu"):
        y = y / (1.0 + np.exp(-y))
    if params.get("gelu"):
        from runtime.elementwise import gelu_erf
        y = gelu_erf(y)
    return out(y, dtype_of(inputs[0]))


def build(params, types):
    """The recipe: the convolution (``_conv``), the residual, then its clamp,
    silu or gelu epilogue; where the product's FusedLinear takes the bias,
    the residual and the clamp (``product_epilogue``), that product."""
    if params.get("winograd"):
        return Decline(NAME, "winograd (transformed weights): only the cpu kernel computes it")
    if product_epilogue(types, params):
        return _epilogue_product(params, types)
    skip = split_operands(range(len(types)), params)[3]
    if skip is not None:
        params, types = dict(params, residual=None), types[:skip]
    y = _conv(params, types)
    if isinstance(y, Decline):
        return y
    if skip is not None:
        y = op("Add", y, Bind(skip))
    if params.get("silu"):
        return op("Mul", y, op("Sigmoid", y))
    if params.get("gelu"):
        return op("GeluErf", y)
    lo, hi = params.get("clamp_min"), params.get("clamp_max")
    if lo is None and hi is None:
        return y
    return op("Clamp", y, min=-np.inf if lo is None else lo, max=np.inf if hi is None else hi)


def _conv(params, types):
    n, cin, cout, kh, kw, sh, sw, ph, pw, g, hp, wp, ho, wo = _geometry(types, params)
    dh, dw = params["dilation"]
    if g == 1:
        return _build_gemm(params, types)
    if is_depthwise(types, params):
        return _build_depthwise(params, types)
    if hp * wp >= 1 << 24:
        return Decline(NAME, f"padded plane {hp}x{wp} too large for exact F32 index math")
    x = Bind(0)
    if ph or pw:
        x = op("Pad", x, padding=(0, 0, 0, 0, ph, ph, pw, pw), mode="constant", value=0.0)
    cpg, opg = cin // g, cout // g
    kk = cpg * kh * kw
    idx = op("Cast", op("Reshape", iota_index((kh, kw, ho, wo), (dh * wp, dw, sh * wp, sw)),
                        shape=(kh * kw * ho * wo,)), dtype=DType.U32)
    ys = []
    for gi in range(g):
        xg = op("Slice", x, dim=1, start=gi * cpg, len=cpg)
        wg = op("Slice", Bind(1), dim=0, start=gi * opg, len=opg)
        xf = op("Reshape", xg, shape=(n, cpg, hp * wp))
        cols = op("IndexSelect", xf, idx, dim=2)
        p = op("Reshape", cols, shape=(n, kk, ho * wo))
        wb = op("BroadcastTo", op("Reshape", wg, shape=(1, opg, kk)), shape=(n, opg, kk))
        ys.append(op("Reshape", op("MatMul", wb, p), shape=(n, opg, ho, wo)))
    return _bias(op("Concat", *ys, dim=1), types, n, cout, ho, wo)


def is_depthwise(types, params) -> bool:
    """One input and one output channel per group (groups = Cin = Cout)."""
    cin, cout = types[0].shape[1], types[1].shape[0]
    return params["groups"] == cin == cout


def _build_depthwise(params, types):
    """groups = Cin = Cout: the sum over the Kh*Kw taps of the tap's window
    of the padded input times the tap's weight, one per channel. A chain of
    elementwise Mul and Add that the runtime fusion makes one kernel.

    Each channel's padded plane (split into its stride phases first, one
    copy, when there is a stride) is read flat: the tap at (qy, qx) of a
    phase of width wq is the run ``[qy*wq + qx, + Ho*wq)`` of it, so the
    chain computes Ho rows of the full width wq, in long unit-stride runs
    that vectorize, and the first Wo columns are kept (one copy). One extra
    row of padding at the bottom keeps the last tap's run inside the plane.
    f16/bf16 are summed in f32 and rounded once (as the reference and the
    other conv paths accumulate)."""
    n, cin, cout, kh, kw, sh, sw, ph, pw, g, hp, wp, ho, wo = _geometry(types, params)
    dh, dw = params["dilation"]
    hq, wq = -(-hp // sh), -(-wp // sw)
    eh, ew = hq * sh - hp, wq * sw - wp
    dt = types[0].dtype
    narrow = dt in (DType.F16, DType.BF16)

    def wide(node):
        return op("Cast", node, dtype=DType.F32) if narrow else node
    x = op("Pad", wide(Bind(0)), padding=(0, 0, 0, 0, ph, ph + eh + sh, pw, pw + ew), mode="constant",
           value=0.0)                                            # [n, cin, (hq+1)*sh, wq*sw]
    plane = (hq + 1) * wq
    if sh == sw == 1:
        phases = op("Reshape", x, shape=(n, cin, 1, 1, plane))
    else:
        phases = op("Contiguize", op("Permute", op("Reshape", x, shape=(n, cin, hq + 1, sh, wq, sw)),
                                     perm=(0, 1, 3, 5, 2, 4)))   # [n, cin, sh, sw, hq+1, wq]
        phases = op("Reshape", phases, shape=(n, cin, sh, sw, plane))
    y = None
    for ky in range(kh):
        for kx in range(kw):
            (qy, ry), (qx, rx) = divmod(ky * dh, sh), divmod(kx * dw, sw)
            tap = op("Slice", op("Slice", phases, dim=2, start=ry, len=1), dim=3, start=rx, len=1)
            tap = op("Slice", op("Squeeze", op("Squeeze", tap, dim=3), dim=2),
                     dim=2, start=qy * wq + qx, len=ho * wq)     # [n, cin, ho*wq]
            wt = op("Slice", op("Slice", wide(Bind(1)), dim=2, start=ky, len=1), dim=3,
                    start=kx, len=1)
            wt = op("BroadcastTo", op("Reshape", wt, shape=(1, cin, 1)), shape=(n, cin, ho * wq))
            term = op("Mul", tap, wt)
            y = term if y is None else op("Add", y, term)
    if len(types) == 3:
        y = op("Add", y, op("BroadcastTo", op("Reshape", wide(Bind(2)), shape=(1, cin, 1)),
                            shape=(n, cin, ho * wq)))
    y = op("Reshape", op("Cast", y, dtype=dt) if narrow else y, shape=(n, cin, ho, wq))
    # the first Wo columns, made contiguous: what follows (bias, activation,
    # the next conv's im2col) then reads whole rows and merges them into one
    # long loop; read through the strided crop, a 14-column row stayed a loop
    # too short to vectorize
    return y if wq == wo else op("Contiguize", op("Slice", y, dim=3, start=0, len=wo))


def _bias(y, types, n, cout, ho, wo):
    if len(types) == 3:
        b = op("BroadcastTo", op("Reshape", Bind(2), shape=(1, cout, 1, 1)),
               shape=(n, cout, ho, wo))
        y = op("Add", y, b)
    return y


#: A batch of images of at most this many output pixels each (fewer than a
#: register tile of columns: ``_few_pixels``) multiplies the pixels of every
#: image as the rows of one matmul over the Cout channels; more pixels per
#: image (MobileNet's and EfficientNet's 7x7 at batch 8) multiply w @ cols per
#: image, which needs no transposing copy in or out.
_ROWS_OF_PIXELS = 16

#: Up to this many taps, im2col is one Concat of every tap's view; beyond, the
#: column and the row shifts are two Concats (fewer, larger copy loops).
_ONE_CONCAT_TAPS = 16


def _tap(x, x6, oy, sh, ho, ox, sw, wo):
    """The ``[n, cin, 1, ho, wo]`` view of the padded input ``x`` (``x6``:
    viewed ``[n, cin, H/sh, sh, W/sw, sw]``) that a tap at offset (oy, ox)
    reads: three view ops at stride 1, seven with a stride (each is a plan step)."""
    if sh == sw == 1:
        return op("Unsqueeze", op("Slice", op("Slice", x, dim=2, start=oy, len=ho),
                                  dim=3, start=ox, len=wo), dim=2)
    qy, ry = divmod(oy, sh)
    qx, rx = divmod(ox, sw)
    t = op("Slice", x6, dim=2, start=qy, len=ho)
    t = op("Slice", t, dim=3, start=ry, len=1)
    t = op("Slice", t, dim=4, start=qx, len=wo)
    t = op("Slice", t, dim=5, start=rx, len=1)
    return op("Unsqueeze", op("Squeeze", op("Squeeze", t, dim=5), dim=3), dim=2)


def _shifts(v, dim, length, offsets, s):
    """One Concat on a new axis 2 of ``v``'s shifted windows: for each offset
    o, axis ``dim`` (viewed with its stride phase on ``dim + 1``) narrowed to
    ``[o // s, o // s + length)`` at phase ``o % s``."""
    parts = []
    for o in offsets:
        q, r = divmod(o, s)
        t = op("Slice", op("Slice", v, dim=dim, start=q, len=length), dim=dim + 1, start=r, len=1)
        parts.append(op("Unsqueeze", op("Squeeze", t, dim=dim + 1), dim=2))
    return op("Concat", *parts, dim=2)


def _padded(x, lead, hp, wp, sh, sw, ph, pw, channels_last):
    """x zero-padded (its padded extents rounded up to the strides) and the
    ``[*lead, H/sh, sh, W/sw, sw]`` view of it (``[n, H/sh, sh, W/sw, sw, cin]``
    for ``channels_last``: x is then ``[n, H, W, cin]``)."""
    hq, wq = -(-hp // sh), -(-wp // sw)
    eh, ew = hq * sh - hp, wq * sw - wp
    if ph or pw or eh or ew:
        pads = (0, 0, ph, ph + eh, pw, pw + ew, 0, 0) if channels_last else \
            (0, 0, 0, 0, ph, ph + eh, pw, pw + ew)
        x = op("Pad", x, padding=pads, mode="constant", value=0.0)
    if channels_last:
        return x, op("Reshape", x, shape=(lead[0], hq, sh, wq, sw, lead[1]))
    return x, op("Reshape", x, shape=(*lead, hq, sh, wq, sw))


def _few_pixels(params, types, epilogue=None):
    """Few output pixels (a CNN's late layers): one matmul whose rows are the
    pixels of every image and whose columns are the Cout channels (a handful
    of pixels as columns is less than one register tile): ``cols [N*Ho*Wo,
    Kh*Kw*Cin] @ w [Kh*Kw*Cin, Cout]``. ``cols`` is an im2col of x with its
    channels last (x made ``[N, H, W, Cin]`` once: a small copy), so each
    tap copies runs of Cin and the rows come out contiguous for the kernel;
    w is reordered to match (a constant's copy: folded at compile time and
    packed by ``fuel-prepack-weights``). ``epilogue`` (``_epilogue_product``):
    the product is a FusedLinear with the conv's bias, skip and clamp, and
    its ``[n, Ho*Wo, Cout]`` result is the output's memory (the NCHW output
    a view of it)."""
    n, cin, cout, kh, kw, sh, sw, ph, pw, g, hp, wp, ho, wo = _geometry(types, params)
    dh, dw = params["dilation"]
    kk = cin * kh * kw
    if hp == wp == 1:
        # a 1x1 image, unpadded (squeeze-excite's 1x1 convs): x [n, cin, 1, 1]
        # is channels-last already, and its one pixel is the one tap
        return _few_pixels_product(op("Reshape", Bind(0), shape=(n, 1, kk)),
                                   types, n, kk, cout, ho, wo, params, epilogue)
    if _strided_1x1(kh, kw, ph, pw, sh, sw, hp, wp):
        # a strided 1x1 (a ResNet shortcut) reads one pixel of each s x s
        # block: the subsample is a view of x, so its channels-last copy is the
        # only copy (was: all of x made channels-last, then its strided view
        # copied again as the cols)
        x6 = op("Reshape", Bind(0), shape=(n, cin, ho, sh, wo, sw))
        t = op("Slice", op("Slice", x6, dim=3, start=0, len=1), dim=5, start=0, len=1)
        t = op("Permute", op("Squeeze", op("Squeeze", t, dim=5), dim=3), perm=(0, 2, 3, 1))
        cols = op("Reshape", op("Contiguize", t), shape=(n, ho * wo, cin))
        return _few_pixels_product(cols, types, n, cin, cout, ho, wo, params, epilogue)
    xl = op("Permute", Bind(0), perm=(0, 2, 3, 1))                         # [n, h, w, cin]
    if not (ph or pw or -(-hp // sh) * sh != hp or -(-wp // sw) * sw != wp):
        # unpadded, x is made channels-last by a copy of its own; padded, the
        # Pad kernel reads the transposed view and writes the padded copy (one
        # pass instead of a runtime copy step and a Pad)
        xl = op("Contiguize", xl)
    x, x6 = _padded(xl, (n, cin), hp, wp, sh, sw, ph, pw, channels_last=True)
    bands = _row_bands(ho, sh, ph, dh, kh, hp - 2 * ph, n)
    if len(bands) == 1:
        yt = _band_product(x6, n, cin, cout, kh, kw, (0, ho, 0, kh), wo, dh, dw, sh, sw, epilogue)
    else:
        # with ``epilogue`` each band's product adds the bias (and its rows of
        # the skip) and clamps
        ys = [_band_product(x6, n, cin, cout, kh, kw, b, wo, dh, dw, sh, sw, epilogue) for b in bands]
        # their rows are whole output rows of each image: one Concat of
        # the bands (of one type: split into single output rows) in order
        rows = [op("Slice", y, dim=1, start=i * wo, len=wo)
                for y, (o0, o1, _, _) in zip(ys, bands) for i in range(o1 - o0)]
        yt = op("Concat", *rows, dim=1)                                  # [n, HoWo, Cout]
    return _few_pixels_out(yt, types, n, cout, ho, wo, params, epilogue)


#: ``_few_pixels`` splits the output rows into bands that read the same
#: kernel rows (``_row_bands``) when that skips at least this fraction of the
#: products (3x3 pad 1 at 4x4: the top and bottom rows' 3 padding taps, 17%;
#: 3x3 s2 into 2x2 17%, into 4x4 8%), for a static batch of at least
#: ``_BAND_MIN_BATCH`` images. The rule does not look at the batch beyond
#: that, so every batch from 2 gets the same plan (a .fuel file with a
#: symbolic batch holds one plan for them, and one of its own for a batch
#: of 1: docs/dynamic-shapes.md). One znver4 thread, x86-64-v3, the layer
#: alone, fastest calls, one product -> bands: 3x3 128->128 at 4x4 batch 8
#: 0.375 -> 0.332 ms, batch 4 0.200 -> 0.174, batch 2 0.109 -> 0.095; s2
#: 64->128 8x8 -> 4x4 batch 8 0.213 -> 0.203, batch 2 0.063 -> 0.062; s2
#: 128->256 4x4 -> 2x2 batch 8 0.204 -> 0.179, batch 2 0.062 -> 0.057, batch
#: 3 0.085 -> 0.093 (docs/architecture.md, row bands).
_BAND_SKIP = 0.05
_BAND_MIN_BATCH = 2


def _row_bands(ho, s, p, d, k, h, n) -> list:
    """The output rows grouped into runs that read the same kernel rows:
    ``(o0, o1, k0, k1)``, rows ``[o0, o1)`` whose kernel rows ``[k0, k1)``
    read the unpadded input (``h`` rows), the others padding; one band of
    all rows and kernel rows where splitting does not pay (``_BAND_SKIP``,
    a batch ``n`` below ``_BAND_MIN_BATCH`` or run-time, a row of padding
    alone)."""
    runs = []
    for o in range(ho):
        valid = [j for j in range(k) if 0 <= o * s - p + j * d < h]
        k0, k1 = (valid[0], valid[-1] + 1) if valid else (0, 0)
        if runs and runs[-1][2:] == (k0, k1):
            runs[-1] = (runs[-1][0], o + 1, k0, k1)
        else:
            runs.append((o, o + 1, k0, k1))
    used = sum((o1 - o0) * (k1 - k0) for o0, o1, k0, k1 in runs)
    if is_symbolic((n,)) or n < _BAND_MIN_BATCH or any(k0 == k1 for _, _, k0, k1 in runs) \
            or used > (1 - _BAND_SKIP) * ho * k:
        return [(0, ho, 0, k)]
    return runs


def _band_product(x6, n, cin, cout, kh, kw, band, wo, dh, dw, sh, sw, epilogue=None):
    """``[n, (o1-o0)*Wo, Cout]``: the output rows ``[o0, o1)`` over the
    kernel rows ``[k0, k1)`` (``band``) of the channels-last padded input
    ``x6``: their taps' windows stacked (an im2col of these rows and taps)
    times the rows ``[k0*kw*cin, k1*kw*cin)`` of w reordered to ``[kh*kw*cin,
    Cout]``: a Slice of the one reordered weight, which
    ``fuel-prepack-weights`` packs once and slices (every band reads one
    packed weight). Each output sums its taps in (ky, kx, ci) order, as one
    product of every tap does (which adds the padding taps' zero products
    besides)."""
    o0, o1, k0, k1 = band
    taps = []
    for ky in range(k0, k1):
        for kx in range(kw):
            (qy, ry), (qx, rx) = divmod(ky * dh, sh), divmod(kx * dw, sw)
            t = op("Slice", op("Slice", x6, dim=1, start=o0 + qy, len=o1 - o0), dim=2, start=ry, len=1)
            t = op("Slice", op("Slice", t, dim=3, start=qx, len=wo), dim=4, start=rx, len=1)
            taps.append(op("Unsqueeze", op("Squeeze", op("Squeeze", t, dim=4), dim=2), dim=3))
    stacked = taps[0] if len(taps) == 1 else op("Concat", *taps, dim=3)   # [n, rows, wo, taps, cin]
    kk = len(taps) * cin
    cols = op("Reshape", stacked, shape=(n, (o1 - o0) * wo, kk))
    return _few_pixels_matmul(cols, n, kk, cout, kh * kw * cin, k0 * kw * cin, epilogue,
                              (o0 * wo, (o1 - o0) * wo))


def _few_pixels_matmul(cols, n, kk, cout, total, k0=0, epilogue=None, rows=None):
    """``cols [n, P, kk] @`` the rows ``[k0, k0 + kk)`` of w reordered to
    ``[kh*kw*cin, Cout]`` (``total`` rows): ``[n, P, Cout]``; with
    ``epilogue`` (``_epilogue_product``) a FusedLinear adding the bias and
    the skip and clamping (``rows``: the output pixels ``(start, count)`` of
    each image these are, None: all)."""
    wt = op("Reshape", op("Contiguize", op("Permute", Bind(1), perm=(2, 3, 1, 0))),
            shape=(1, total, cout))                                      # [1, kh*kw*cin, Cout]
    if kk != total:
        wt = op("Slice", wt, dim=1, start=k0, len=kk)
    # every image multiplies the same weight (a packed one: the batch folds
    # into the rows); the same ops for one image, so one plan serves every batch
    if epilogue is not None:   # FusedLinear's b of one batch serves every image
        return epilogue(cols, wt, rows)
    return op("MatMul", cols, op("BroadcastTo", wt, shape=(n, kk, cout)))  # [n, P, Cout]


def _few_pixels_product(cols, types, n, kk, cout, ho, wo, params, epilogue=None):
    """``cols [n, Ho*Wo, kk] @ w`` (w reordered to ``[kh*kw*cin, Cout]``),
    back to ``[n, Cout, Ho, Wo]``."""
    return _few_pixels_out(_few_pixels_matmul(cols, n, kk, cout, kk, 0, epilogue), types, n,
                           cout, ho, wo, params, epilogue)


def _few_pixels_out(yt, types, n, cout, ho, wo, params, epilogue=None):
    """The product ``yt [n, Ho*Wo, Cout]`` as the NCHW output (with
    ``epilogue``, the finished output: a view of it)."""
    # back to NCHW in one transposing copy: what follows (bias, activation,
    # the next layer) then reads contiguous rows (read through the transposed
    # view, an elementwise SiLU over [8, 320, 7, 7] took 0.6 ms instead of 0.1).
    # With a bias and no silu/gelu epilogue the bias Add (its residual and clamp
    # fused with it) reads the transposed view and writes the NCHW result: one
    # pass instead of a runtime copy step and the Add
    if ho * wo == 1:   # one pixel per image: [n, 1, Cout] is NCHW already
        return op("Reshape", yt, shape=(n, cout, ho, wo))
    y = op("Permute", yt, perm=(0, 2, 1))
    if epilogue is None and (len(types) != 3 or params.get("silu") or params.get("gelu")):
        y = op("Contiguize", y)
    return op("Reshape", y, shape=(n, cout, ho, wo))


#: The fewest images for ``whole_image``: its weight is Ho*Wo*H*W / (Kh*Kw)
#: times w (3x3 at 2x2: 1.8x), and one image's product is one row, bound by
#: reading that weight. ResNet-style (docs/benchmarks.md), one znver4 thread,
#: whole model, fastest calls: batch 1 0.85-0.87 -> 1.06-1.10 ms (AVX-512),
#: batch 2 2.67-2.75 -> 2.35-2.45 (x86-64-v3), batch 8 7.20-7.45 -> 6.76-7.14.
WHOLE_IMAGE_MIN_BATCH = 2


def whole_image(types, params) -> bool:
    """Whether a groups-1 conv is cheaper as one linear map of each whole image
    (``_whole_image_product``): stride 1, no dilation, a static batch of at
    least ``WHOLE_IMAGE_MIN_BATCH``, an input of fewer pixels than the kernel
    has taps (ResNet's last stage: 3x3 at 2x2, where 5 of the 9 taps of every
    output pixel read padding) and no more output pixels than input pixels;
    not while ``save`` samples a symbolic image (``one_form``)."""
    n, cin, cout, kh, kw, sh, sw, ph, pw, g, hp, wp, ho, wo = _geometry(types, params)
    h, w = types[0].shape[2:]
    return (g == 1 and (sh, sw) == (1, 1) and tuple(params["dilation"]) == (1, 1)
            and not one_form(params) and not is_symbolic(types[0].shape)
            and n >= WHOLE_IMAGE_MIN_BATCH
            and h * w < kh * kw and ho * wo <= h * w)


def _whole_image_product(params, types):
    """The conv of a tiny image as one matmul: ``x [N, Cin*H*W] @ Wd [Cin*H*W,
    Cout*Ho*Wo]`` (x and the product are NCHW as they are: views, no copy in
    or out, no padding, no im2col). ``Wd[(ci, iy, ix), (co, oy, ox)]`` is the
    weight of the one tap that takes input pixel (iy, ix) to output pixel
    (oy, ox) (stride 1: tap ``(iy - oy + ph, ix - ox + pw)``), 0 where no tap
    does: per output pixel, the H x W window of the weight that the padding
    puts over the image, cut from w zero-padded where the window leaves the
    kernel, and stacked on a last axis. Work on w only: the plan folds it into
    a constant (each slice rests on all of w, so the stack passes
    ``plan.fold_constant_steps``' growth rule) and ``fuel-prepack-weights``
    packs it. Only the products of taps that read the image are computed (3x3
    at 2x2: 4 of 9 taps), each output element sums them in (ci, iy, ix)
    order."""
    n, cin, cout, kh, kw, sh, sw, ph, pw, g, hp, wp, ho, wo = _geometry(types, params)
    h, w = types[0].shape[2:]
    y = op("MatMul", op("Reshape", Bind(0), shape=(n, cin * h * w)), _whole_image_weight(params, types))
    return op("Reshape", y, shape=(n, cout, ho, wo))


def _whole_image_weight(params, types):
    """``Wd [Cin*H*W, Cout*Ho*Wo]`` of ``_whole_image_product``."""
    n, cin, cout, kh, kw, sh, sw, ph, pw, g, hp, wp, ho, wo = _geometry(types, params)
    h, w = types[0].shape[2:]
    # window of output row oy over the kernel rows: [ph - oy, ph - oy + h)
    top, bottom = max(0, ho - 1 - ph), max(0, ph + h - kh)
    left, right = max(0, wo - 1 - pw), max(0, pw + w - kw)
    wt = op("Permute", Bind(1), perm=(1, 2, 3, 0))                       # [cin, kh, kw, cout]
    if top or bottom or left or right:
        wt = op("Pad", wt, padding=(0, 0, top, bottom, left, right, 0, 0), mode="constant", value=0.0)
    slabs = []
    for oy in range(ho):
        for ox in range(wo):
            t = op("Slice", wt, dim=1, start=top + ph - oy, len=h)
            t = op("Slice", t, dim=2, start=left + pw - ox, len=w)          # [cin, h, w, cout]
            slabs.append(op("Unsqueeze", t, dim=4))
    dense = slabs[0] if len(slabs) == 1 else op("Concat", *slabs, dim=4)  # [cin, h, w, cout, P]
    return op("Reshape", dense, shape=(cin * h * w, cout * ho * wo))


def product_epilogue(types, params) -> bool:
    """Whether the recipe's product computes the conv's bias, its skip
    (``residual``) and its clamp in the FusedLinear epilogue
    (``_epilogue_product``) instead of a runtime fused Add/Add/Clamp after
    it: a groups-1 conv with a bias and a residual or a clamp (no silu or
    gelu), static extents, whose recipe is products that can read the skip
    as their rows: the whole-image map (``whole_image``: the skip is the
    NCHW output's ``[N, Cout*Ho*Wo]``), or the few-pixel im2col products
    (``_few_pixels``; the skip copied channels-last, ``[N, Ho*Wo, Cout]``,
    the product's rows: the pixels of every image; for each row band
    (``_row_bands``) the copy of its own rows, ``[N, rows*Wo, Cout]``, as
    the band's product has them)."""
    x, w, bias, skip = split_operands(types, params)
    if bias is None or params.get("silu") or params.get("gelu") or params["groups"] != 1 \
            or (skip is None and params.get("clamp_min") is None
                and params.get("clamp_max") is None) \
            or any(is_symbolic(t.shape) for t in types):
        return False
    n, cin, cout, kh, kw, sh, sw, ph, pw, g, hp, wp, ho, wo = _geometry(types, params)
    if whole_image(types, params):
        return True
    return _few_pixels_class(params, n, cout, kh, kw, ho, wo)


def _strided_1x1(kh, kw, ph, pw, sh, sw, hp, wp) -> bool:
    """A strided unpadded 1x1 (a ResNet shortcut) whose stride divides the size."""
    return (kh, kw) == (1, 1) and not (ph or pw) and (sh, sw) != (1, 1) \
        and hp % sh == 0 and wp % sw == 0


def _few_pixels_class(params, n, cout, kh, kw, ho, wo) -> bool:
    """Whether a groups-1 conv not ``whole_image`` takes ``_few_pixels``
    (never while ``save`` samples a symbolic image: ``one_form``)."""
    return (not one_form(params) and ho * wo < min(cout, 64) and kh * kw <= _ONE_CONCAT_TAPS
            and (n == 1 or ho * wo <= _ROWS_OF_PIXELS))


def product_linear_types(types, params) -> list:
    """The operand types ``(a, b, bias[, skip])`` of the FusedLinear that
    ``_epilogue_product`` makes (b as before packing), for a capability
    check before the conv takes the epilogue (``passes.fuse``)."""
    n, cin, cout, kh, kw, sh, sw, ph, pw, g, hp, wp, ho, wo = _geometry(types, params)
    skip = split_operands(types, params)[3]
    dt = types[0].dtype
    if whole_image(types, params):
        h, w = types[0].shape[2:]
        k, cols = cin * h * w, cout * ho * wo
        out = [TensorType((n, k), dt), TensorType((k, cols), dt), TensorType((cols,), dt),
               TensorType((n, cols), dt)]
    else:
        k = cin * kh * kw
        out = [TensorType((n, ho * wo, k), dt), TensorType((1, k, cout), dt),
               TensorType((cout,), dt), TensorType((n, ho * wo, cout), dt)]
    return out if skip is not None else out[:3]


def _epilogue_product(params, types):
    """The conv as one FusedLinear whose epilogue adds the bias, then the
    skip, then clamps (``product_epilogue``): the recipe's order, so the same
    bits as the product, the bias ``Add``, the skip's ``Add`` and the
    ``Clamp``. Whole image: ``x [N, Cin*H*W] @ Wd`` with the bias repeated
    over each channel's output pixels (a constant the plan folds) and the
    skip read as ``[N, Cout*Ho*Wo]``; few pixels: ``cols [N, Ho*Wo, kk] @ w``
    reordered, its result the channels-last memory of the output, the skip
    ``[N, Ho*Wo, Cout]`` a channels-last copy (one copy step; the same ops for
    one image and for a batch, so one plan serves every batch: a batch's
    product reads it as its rows, which a transposed view of an NCHW skip is
    not). Row bands: each band's product takes the epilogue, with a
    channels-last copy of its own rows of the skip (the kernel folds the
    images into the rows, which a band's slice of one copy, its images
    Ho*Wo rows apart, does not allow); the Concat of the bands' rows is then
    the finished output."""
    n, cin, cout, kh, kw, sh, sw, ph, pw, g, hp, wp, ho, wo = _geometry(types, params)
    skip = split_operands(range(len(types)), params)[3]
    p = ho * wo
    lin = {k: params.get(k) for k in ("clamp_min", "clamp_max") if params.get(k) is not None}
    if skip is not None:
        lin["residual"] = True
    if whole_image(types, params):
        h, w = types[0].shape[2:]
        bias = op("Reshape", op("BroadcastTo", op("Reshape", Bind(2), shape=(cout, 1)),
                                shape=(cout, p)), shape=(cout * p,))
        skips = [] if skip is None else [op("Reshape", Bind(skip), shape=(n, cout * p))]
        y = op("FusedLinear", op("Reshape", Bind(0), shape=(n, cin * h * w)),
               _whole_image_weight(params, types), bias, *skips, **lin)
        return op("Reshape", y, shape=(n, cout, ho, wo))
    conv_types = types[:skip] if skip is not None else types

    def product(cols, wb, rows=None):
        skips = []
        if skip is not None:
            t = op("Reshape", Bind(skip), shape=(n, cout, p))
            if rows is not None and rows != (0, p):
                t = op("Slice", t, dim=2, start=rows[0], len=rows[1])
            skips = [op("Contiguize", op("Permute", t, perm=(0, 2, 1)))]
        return op("FusedLinear", cols, wb, Bind(2), *skips, **lin)
    return _few_pixels(dict(params, residual=None), conv_types, product)


def _build_gemm(params, types):
    """groups = 1: ``w [Cout, Cin*Kh*Kw] @ cols [Cin*Kh*Kw, Ho*Wo]`` per image.
    A 1x1 kernel with stride 1 and no padding reads x itself as ``cols``;
    otherwise ``cols`` stacks the Kh*Kw shifted views of the padded input
    (taps ``kh*dh`` rows apart; a stride s views each axis as ``[H/s, s]``,
    so every tap is a plain slice), no index arithmetic: one Concat of the
    taps, or for more than ``_ONE_CONCAT_TAPS`` taps a Concat of the column
    shifts and one of their row shifts; patches (kernel = stride) are one
    transposed view. Few output pixels: ``_few_pixels`` (not in ``one_form``)."""
    n, cin, cout, kh, kw, sh, sw, ph, pw, g, hp, wp, ho, wo = _geometry(types, params)
    dh, dw = params["dilation"]
    kk = cin * kh * kw
    if whole_image(types, params):
        return _bias(_whole_image_product(params, types), types, n, cout, ho, wo)
    if _few_pixels_class(params, n, cout, kh, kw, ho, wo):
        return _bias(_few_pixels(params, types), types, n, cout, ho, wo)
    if kh == kw == 1 and sh == sw == 1 and ph == pw == 0:
        cols = op("Reshape", Bind(0), shape=(n, cin, ho * wo))
    else:
        x, x6 = _padded(Bind(0), (n, cin), hp, wp, sh, sw, ph, pw, channels_last=False)
        if (kh, kw) == (sh, sw) and dh == dw == 1:
            # patches (a ViT stem): the taps tile the input, one transposing copy
            hq, wq = -(-hp // sh), -(-wp // sw)
            if hq != ho:
                x6 = op("Slice", x6, dim=2, start=0, len=ho)
            if wq != wo:
                x6 = op("Slice", x6, dim=4, start=0, len=wo)
            stacked = op("Permute", x6, perm=(0, 1, 3, 5, 2, 4))   # [n, cin, kh, kw, ho, wo]
        elif kh * kw <= _ONE_CONCAT_TAPS:
            taps = [_tap(x, x6, ky * dh, sh, ho, kx * dw, sw, wo)
                    for ky in range(kh) for kx in range(kw)]
            stacked = taps[0] if len(taps) == 1 else op("Concat", *taps, dim=2)
        else:
            # many taps (a 7x7 stem): the kw column shifts first, then the kh row
            # shifts of that: kh + kw copy loops instead of kh * kw
            t1 = _shifts(x6, 4, wo, [kx * dw for kx in range(kw)], sw)  # [n, cin, kw, hq, sh, wo]
            stacked = _shifts(t1, 3, ho, [ky * dh for ky in range(kh)], sh)  # [n, cin, kh, kw, ho, wo]
        cols = op("Reshape", stacked, shape=(n, kk, ho * wo))
    w2 = op("Reshape", Bind(1), shape=(1, cout, kk))
    wb = op("BroadcastTo", w2, shape=(n, cout, kk))
    y = op("Reshape", op("MatMul", wb, cols), shape=(n, cout, ho, wo))
    return _bias(y, types, n, cout, ho, wo)


ENTRY = FusedOpEntry(
    id=6, name=NAME, mnemonic="conv2d", family=Family.FORWARD,
    arity=-1, min_arity=2,
    params=(ParamSpec("stride", "i64s", (1, 1)), ParamSpec("padding", "i64s", (0, 0)),
            ParamSpec("groups", "i64", 1), ParamSpec("dilation", "i64s", (1, 1)),
            ParamSpec("clamp_min", "f64", None), ParamSpec("clamp_max", "f64", None),
            ParamSpec("silu", "bool", None), ParamSpec("gelu", "bool", None),
            ParamSpec("residual", "bool", None), ParamSpec("image_at_run_time", "bool", None),
            ParamSpec("winograd", "bool", None)),
    infer=infer, reference=reference, recipe=Recipe(build=build),
    backward=CUSTOM, op_kind=OpKind.Conv2D, destructive_input=None, cse_tag=6,
    input_names=("x", "w", "bias", "residual"), operand_slots=operand_slots, doc=__doc__,
)
