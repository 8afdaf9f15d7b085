"""ConvTranspose2D (fused id 11): fractionally-strided 2-D convolution.

Inputs x ``[N,Cin,H,W]``, w ``[Cin,Cout/g,Kh,Kw]``, optional bias ``[Cout]``.
Params ``stride``, ``padding``, ``output_padding``, ``dilation`` (pairs) and
``groups``. Output ``[N,Cout,Ho,Wo]`` with
``Ho = (H-1)·sh - 2ph + dh·(Kh-1) + oph + 1`` (likewise Wo).
Recipe: per-call col2im (MatMul to columns, an Iota-built scatter index,
IndexAdd overlap-add into a zero buffer, crop with Slice); groups > 1 run per
group and Concat. Unlike the original (whose decompose declined the 3-input
form), the optional bias is honoured by both the math and the recipe.
"""
from ..entry import NOT_DIFFERENTIABLE, Decline, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from ._common import (OpKind, ParamSpec, TensorType, DType, check_arity, check_float,
                      dtype_of, fail, iota_index, np, out, wide)

NAME = "ConvTranspose2D"


def _geometry(types, params):
    x, w = types[0], types[1]
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise fail(NAME, types, "x must be [N,Cin,H,W] and w [Cin,Cout/g,Kh,Kw]")
    for k in ("stride", "padding", "output_padding", "dilation"):
        if len(params[k]) != 2:
            raise fail(NAME, types, f"{k} must be an (h, w) pair")
    (n, cin, h, wd), (wcin, opg, kh, kw) = x.shape, w.shape
    (sh, sw), (ph, pw) = params["stride"], params["padding"]
    (oh, ow), (dh, dw), g = params["output_padding"], params["dilation"], params["groups"]
    if g < 1 or cin % g or wcin != cin:
        raise fail(NAME, types, f"w's first axis must be Cin={cin} and groups={g} divide it")
    if min(sh, sw, dh, dw) < 1 or min(ph, pw, oh, ow) < 0:
        raise fail(NAME, types, "stride and dilation must be >= 1; padding, output_padding >= 0")
    hb = (h - 1) * sh + dh * (kh - 1) + 1 + oh
    wb = (wd - 1) * sw + dw * (kw - 1) + 1 + ow
    ho, wo = hb - 2 * ph, wb - 2 * pw
    if ho < 1 or wo < 1 or min(h, wd, kh, kw) < 1:
        raise fail(NAME, types, f"empty output {ho}x{wo}")
    return n, cin, opg * g, h, wd, kh, kw, sh, sw, ph, pw, dh, dw, g, hb, wb, ho, wo


def infer(types, params):
    check_arity(NAME, types, 2, 3, ("x", "w", "bias"))
    check_float(NAME, types, range(len(types)))
    geo = _geometry(types, params)
    n, cout, ho, wo = geo[0], geo[2], geo[-2], geo[-1]
    if any(t.dtype != types[0].dtype for t in types):
        raise fail(NAME, types, "x, w and bias must share one dtype")
    if len(types) == 3 and tuple(types[2].shape) != (cout,):
        raise fail(NAME, types, f"bias must be [Cout] = [{cout}]")
    return TensorType((n, cout, ho, wo), types[0].dtype)


def reference(inputs, params):
    x, w = wide(inputs[0]), wide(inputs[1])
    types = [TensorType(np.shape(v), DType.F64) for v in inputs]
    n, cin, cout, h, wd, kh, kw, sh, sw, ph, pw, dh, dw, g, hb, wb, ho, wo = \
        _geometry(types, params)
    cpg, opg = cin // g, cout // g
    buf = np.zeros((n, cout, hb, wb))
    for gi in range(g):
        xs = x[:, gi * cpg:(gi + 1) * cpg]
        ws = w[gi * cpg:(gi + 1) * cpg]  # [cpg, opg, kh, kw]
        for ky in range(kh):
            for kx in range(kw):
                contrib = np.einsum("nchw,co->nohw", xs, ws[:, :, ky, kx])
                buf[:, gi * opg:(gi + 1) * opg,
                    ky * dh:ky * dh + sh * (h - 1) + 1:sh,
                    kx * dw:kx * dw + sw * (wd - 1) + 1:sw] += contrib
    y = buf[:, :, ph:ph + ho, pw:pw + wo]
    if len(inputs) == 3:
        y = y + wide(inputs[2]).reshape(1, cout, 1, 1)
    return out(y, dtype_of(inputs[0]))


def build(params, types):
    n, cin, cout, h, wd, kh, kw, sh, sw, ph, pw, dh, dw, g, hb, wb, ho, wo = \
        _geometry(types, params)
    if hb * wb >= 1 << 24:
        return Decline(NAME, f"output buffer {hb}x{wb} too large for exact F32 index math")
    cpg, opg = cin // g, cout // g
    m = opg * kh * kw
    ll = kh * kw * h * wd
    idx = op("Cast", op("Reshape", iota_index((kh, kw, h, wd), (dh * wb, dw, sh * wb, sw)),
                        shape=(ll,)), dtype=DType.U32)
    ys = []
    for gi in range(g):
        xg = Bind(0) if g == 1 else op("Slice", Bind(0), dim=1, start=gi * cpg, len=cpg)
        wg = Bind(1) if g == 1 else op("Slice", Bind(1), dim=0, start=gi * cpg, len=cpg)
        xf = op("Reshape", xg, shape=(n, cpg, h * wd))
        wp = op("Reshape", op("Permute", wg, perm=(1, 2, 3, 0)), shape=(1, m, cpg))
        cols = op("MatMul", op("BroadcastTo", wp, shape=(n, m, cpg)), xf)
        csrc = op("Reshape", cols, shape=(n, opg, ll))
        base = op("MulScalar", op("BroadcastTo", op("Slice", csrc, dim=2, start=0, len=1),
                                  shape=(n, opg, hb * wb)), value=0.0)
        acc = op("Reshape", op("IndexAdd", base, idx, csrc, dim=2), shape=(n, opg, hb, wb))
        ys.append(op("Slice", op("Slice", acc, dim=2, start=ph, len=ho), dim=3, start=pw, len=wo))
    y = ys[0] if g == 1 else op("Concat", *ys, dim=1)
    if len(types) == 3:
        y = op("Add", y, op("BroadcastTo", op("Reshape", Bind(2), shape=(1, cout, 1, 1)),
                            shape=(n, cout, ho, wo)))
    return y


ENTRY = FusedOpEntry(
    id=11, name=NAME, mnemonic="conv_transpose2d", family=Family.FORWARD,
    arity=-1, min_arity=2,
    params=(ParamSpec("stride", "i64s", (1, 1)), ParamSpec("padding", "i64s", (0, 0)),
            ParamSpec("output_padding", "i64s", (0, 0)), ParamSpec("dilation", "i64s", (1, 1)),
            ParamSpec("groups", "i64", 1)),
    infer=infer, reference=reference, recipe=Recipe(build=build),
    backward=NOT_DIFFERENTIABLE, op_kind=OpKind.ConvTranspose2D, destructive_input=None,
    cse_tag=11, input_names=("x", "w", "bias"), doc=__doc__,
)
