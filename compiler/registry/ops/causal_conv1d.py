"""CausalConv1d (fused id 18): depthwise causal 1-D convolution with optional
SiLU: y[b,c,t] = Σ_k w[c,0,k]·x[b,c,t+k] + bias[c].

Inputs x ``[B,C,L+K-1]`` (already left-padded), w ``[C,1,K]``, bias ``[C]``,
one float dtype; param ``use_silu``; output ``[B,C,L]``. Recipe: per call,
unrolled over the K taps (Slice, Mul by the broadcast tap, Add), plus bias,
plus optional Silu."""
from ..entry import NOT_DIFFERENTIABLE, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from ._common import (OpKind, ParamSpec, TensorType, check_arity, check_float, dtype_of, fail,
                      np, out, wide)

NAME = "CausalConv1d"


def infer(types, params):
    check_arity(NAME, types, 3, names=("x", "w", "bias"))
    check_float(NAME, types, (0, 1, 2))
    x, w, b = types
    if len(x.shape) != 3 or len(w.shape) != 3 or w.shape[1] != 1 or w.shape[0] != x.shape[1]:
        raise fail(NAME, types, "x must be [B,C,L+K-1] and w [C,1,K]")
    if tuple(b.shape) != (x.shape[1],):
        raise fail(NAME, types, f"bias must be [C] = [{x.shape[1]}]")
    if w.shape[2] < 1 or x.shape[2] < w.shape[2]:
        raise fail(NAME, types, "x's length must be at least the kernel size K >= 1")
    if any(t.dtype != x.dtype for t in types):
        raise fail(NAME, types, "x, w and bias must share one dtype")
    return TensorType((x.shape[0], x.shape[1], x.shape[2] - w.shape[2] + 1), x.dtype)


def reference(inputs, params):
    x, w, b = (wide(v) for v in inputs)
    k = w.shape[2]
    ll = x.shape[2] - k + 1
    y = sum(w[None, :, 0, j, None] * x[:, :, j:j + ll] for j in range(k)) + b[None, :, None]
    if params["use_silu"]:
        y = y / (1.0 + np.exp(-y))
    return out(y, dtype_of(inputs[0]))


def build(params, types):
    (bsz, c, lp), k = types[0].shape, types[1].shape[2]
    ll = lp - k + 1
    acc = None
    for j in range(k):
        tap = op("BroadcastTo", op("Reshape", op("Slice", Bind(1), dim=2, start=j, len=1),
                                   shape=(1, c, 1)), shape=(bsz, c, ll))
        term = op("Mul", op("Slice", Bind(0), dim=2, start=j, len=ll), tap)
        acc = term if acc is None else op("Add", acc, term)
    y = op("Add", acc, op("BroadcastTo", op("Reshape", Bind(2), shape=(1, c, 1)),
                          shape=(bsz, c, ll)))
    return op("Silu", y) if params["use_silu"] else y


ENTRY = FusedOpEntry(
    id=18, name=NAME, mnemonic="causal_conv1d", family=Family.FORWARD,
    arity=3, params=(ParamSpec("use_silu", "bool", False),), infer=infer, reference=reference,
    recipe=Recipe(build=build), backward=NOT_DIFFERENTIABLE, op_kind=OpKind.CausalConv1d,
    destructive_input=None, cse_tag=18, input_names=("x", "w", "bias"), doc=__doc__,
)
