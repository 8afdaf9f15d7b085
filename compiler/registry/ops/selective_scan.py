"""SelectiveScan (fused id 19, Mamba-1): for each t,
d = softplus(Δ) if ``delta_softplus`` else Δ;
h[b,i,j] <- exp(d[b,t,i]·a[i,j])·h + d[b,t,i]·b[b,t,j]·u[b,t,i], h0 = 0;
y[b,t,i] = Σ_j h[b,i,j]·c[b,t,j].

Inputs u, Δ ``[B,L,D]``, a ``[D,N]``, b, c ``[B,L,N]``, one float dtype.
Outputs: a two-slot bundle (``num_outputs = 2``): slot 0 y ``[B,L,D]``,
slot 1 last_state ``[B,D,N]``, both u's dtype. Backward: ``decompose``.

Recipe: this project's primitive set has no ``Scan`` (it is a control op
outside the recipe vocabulary), so the recipe is the scan *unrolled* over L
(what the original's ``unroll_scan`` produces), built per call: O(L) nodes,
and both slots are real outputs of the DAG (the original's "slot 1 through
the decomposed form" gap does not arise). softplus is spelled
``Relu(x) + Log(1 + Exp(-|x|))``.
"""
from ..entry import DECOMPOSE, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from ._common import (OpKind, ParamSpec, TensorType, check_arity, check_float, dtype_of, fail,
                      np, out, wide)

NAME = "SelectiveScan"


def infer(types, params):
    check_arity(NAME, types, 5, names=("u", "delta", "a", "b", "c"))
    check_float(NAME, types, range(5))
    u, dl, a, b, c = types
    if len(u.shape) != 3 or u.shape[1] < 1:
        raise fail(NAME, types, "u must be [B,L,D] with L >= 1")
    bsz, ll, d = u.shape
    if tuple(dl.shape) != (bsz, ll, d) or len(a.shape) != 2 or a.shape[0] != d:
        raise fail(NAME, types, "delta must be u's shape and a [D,N]")
    n = a.shape[1]
    if tuple(b.shape) != (bsz, ll, n) or tuple(c.shape) != (bsz, ll, n):
        raise fail(NAME, types, f"b and c must be [B,L,N] = {[bsz, ll, n]}")
    if any(t.dtype != u.dtype for t in types):
        raise fail(NAME, types, "all inputs must share u's dtype")
    return [TensorType((bsz, ll, d), u.dtype), TensorType((bsz, d, n), u.dtype)]


def softplus(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def reference(inputs, params):
    u, dl, a, b, c = (wide(v) for v in inputs)
    if params["delta_softplus"]:
        dl = softplus(dl)
    bsz, ll, d = u.shape
    h = np.zeros((bsz, d, a.shape[1]))
    ys = []
    for t in range(ll):
        dt = dl[:, t, :, None]
        h = np.exp(dt * a[None]) * h + dt * b[:, t, None, :] * u[:, t, :, None]
        ys.append((h * c[:, t, None, :]).sum(axis=-1))
    dt_ = dtype_of(inputs[0])
    return [out(np.stack(ys, axis=1), dt_), out(h, dt_)]


def build(params, types):
    bsz, ll, d = types[0].shape
    n = types[2].shape[1]
    full = (bsz, d, n)
    dl = Bind(1)
    if params["delta_softplus"]:
        dl = op("Add", op("Relu", dl),
                op("Log", op("AddScalar", op("Exp", op("Neg", op("Abs", dl))), value=1.0)))

    def step(x, t, width):
        return op("Reshape", op("Slice", x, dim=1, start=t, len=1), shape=(bsz, width))

    a_b = op("BroadcastTo", Bind(2), shape=full)
    h = None
    ys = []
    for t in range(ll):
        d_t, u_t = step(dl, t, d), step(Bind(0), t, d)
        b_t, c_t = step(Bind(3), t, n), step(Bind(4), t, n)
        d_b = op("BroadcastTo", op("Reshape", d_t, shape=(bsz, d, 1)), shape=full)
        du = op("BroadcastTo", op("Reshape", op("Mul", d_t, u_t), shape=(bsz, d, 1)), shape=full)
        bb = op("BroadcastTo", op("Reshape", b_t, shape=(bsz, 1, n)), shape=full)
        inject = op("Mul", du, bb)
        h = inject if h is None else op("Add", op("Mul", op("Exp", op("Mul", d_b, a_b)), h),
                                        inject)
        cb = op("BroadcastTo", op("Reshape", c_t, shape=(bsz, 1, n)), shape=full)
        ys.append(op("Reshape", op("SumDim", op("Mul", h, cb), axis=2), shape=(bsz, 1, d)))
    y = ys[0] if ll == 1 else op("Concat", *ys, dim=1)
    return (y, h)


def _unused(params, types):
    """With L = 1 the decay ``a`` multiplies the zero initial state only."""
    return (2,) if types[0].shape[1] == 1 else ()


ENTRY = FusedOpEntry(
    id=19, name=NAME, mnemonic="selective_scan", family=Family.FORWARD,
    arity=5, params=(ParamSpec("delta_softplus", "bool", False),), infer=infer,
    reference=reference, recipe=Recipe(build=build, unused_inputs=_unused), backward=DECOMPOSE,
    op_kind=OpKind.SelectiveScan, destructive_input=None, cse_tag=19,
    input_names=("u", "delta", "a", "b", "c"), num_outputs=2, doc=__doc__,
)
