"""FusedSoftmaxCrossEntropy (fused id 17): nll_r = -log_softmax(logits_r)[t_r].

Inputs logits ``[..., V]`` (float) and targets ``[...]`` (i64, i32 or u32).
Params ``reduction`` ("mean" | "sum" | "none", CSE codes 0/1/2) and
``ignore_index`` (default -100). Output F32: ``[]`` for mean/sum, the targets'
shape for none.

Gap fixed: rows whose target equals
``ignore_index`` contribute 0 and are excluded from the Mean's divisor, in
the reference AND the recipe, as PyTorch's ``cross_entropy`` does; a Mean
over only-ignored rows is NaN (0/0), as in PyTorch. Targets are compared in
F64 (exact below 2**53); ignored rows gather index 0 (masked afterwards).
Backward: ``decompose`` (differentiate the recipe).
"""
from ..entry import DECOMPOSE, FusedOpEntry, Family, Recipe
from ..grammar import LAST, Bind, SameAs, WithDim, op
from ._common import DType, OpKind, ParamSpec, TensorType, check_arity, fail, np, out, wide

NAME = "FusedSoftmaxCrossEntropy"
REDUCTIONS = ("mean", "sum", "none")
TARGET_DTYPES = (DType.I64, DType.I32, DType.U32)


def infer(types, params):
    check_arity(NAME, types, 2, names=("logits", "targets"))
    lg, t = types
    if not lg.dtype.is_float or len(lg.shape) < 1:
        raise fail(NAME, types, "logits must be a float tensor [..., V]")
    if t.dtype not in TARGET_DTYPES:
        raise fail(NAME, types, "targets must be i64, i32 or u32 class indices")
    if tuple(t.shape) != tuple(lg.shape[:-1]):
        raise fail(NAME, types, f"targets shape must be logits' without the class axis: "
                                f"{list(lg.shape[:-1])}")
    shape = tuple(t.shape) if params["reduction"] == "none" else ()
    return TensorType(shape, DType.F32)


def reference(inputs, params):
    x = wide(inputs[0])
    t = np.asarray(inputs[1]).astype(np.int64)
    m = x.max(axis=-1, keepdims=True)
    ls = x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    valid = t != params["ignore_index"]
    safe = np.where(valid, t, 0)
    nll = -np.take_along_axis(ls, safe[..., None], axis=-1)[..., 0]
    nll = np.where(valid, nll, 0.0)
    red = params["reduction"]
    if red == "sum":
        nll = nll.sum()
    elif red == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            nll = nll.sum() / valid.sum()
    return out(nll, DType.F32)


def build(params, types):
    lg, t = Bind(0), Bind(1)
    kd = WithDim(0, LAST, 1)
    shifted = op("Sub", lg, op("BroadcastTo", op("ReduceMaxTo", lg, shape=kd), shape=SameAs(0)))
    lse = op("Log", op("ReduceSumTo", op("Exp", shifted), shape=kd))
    ls = op("Sub", shifted, op("BroadcastTo", lse, shape=SameAs(0)))
    tf = op("Cast", t, dtype=DType.F64)
    ign = op("AddScalar", op("MulScalar", tf, value=0.0), value=float(params["ignore_index"]))
    ignored = op("Equal", tf, ign)
    idx = op("Cast", op("MaskedFill", tf, ignored, value=0.0), dtype=DType.U32)
    picked = op("Squeeze", op("Gather", ls, op("Unsqueeze", idx, dim=LAST), dim=LAST), dim=LAST)
    nll = op("MaskedFill", op("MulScalar", picked, value=-1.0), ignored, value=0.0)
    red = params["reduction"]
    if red == "sum":
        nll = op("SumAll", nll)
    elif red == "mean":
        valid = op("Cast", op("Ne", tf, ign), dtype=types[0].dtype)
        nll = op("Div", op("SumAll", nll), op("SumAll", valid))
    if types[0].dtype != DType.F32:
        nll = op("Cast", nll, dtype=DType.F32)
    return nll


ENTRY = FusedOpEntry(
    id=17, name=NAME, mnemonic="fused_softmax_cross_entropy", family=Family.FORWARD,
    arity=2, params=(ParamSpec("reduction", "str", "mean"), ParamSpec("ignore_index", "i64", -100)),
    infer=infer, reference=reference, recipe=Recipe(build=build), backward=DECOMPOSE,
    op_kind=OpKind.FusedSoftmaxCrossEntropy, destructive_input=None, cse_tag=17,
    input_names=("logits", "targets"), enums={"reduction": REDUCTIONS}, doc=__doc__,
)
