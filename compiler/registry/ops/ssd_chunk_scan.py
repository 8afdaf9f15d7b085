"""SsdChunkScan (fused id 20, Mamba-2 SSD):
h[b,h,p,n] <- exp(dt[b,t,h]·a[h])·h + dt[b,t,h]·b[b,t,h,n]·x[b,t,h,p], h0 = 0;
y[b,t,h,p] = Σ_n h[b,h,p,n]·c[b,t,h,n]. No softplus.

Inputs x ``[B,L,H,P]``, dt ``[B,L,H]``, a ``[H]``, b, c ``[B,L,H,N]``; param
``chunk_size`` (positive, divides L; it does not change the math). Outputs:
slot 0 y ``[B,L,H,P]``, slot 1 last_state ``[B,H,P,N]``. ``a`` is used as
``exp(dt·a)`` directly (the original's docs call it "log A"; the math is
what its recipe computes). Recipe: the scan unrolled over L, as
SelectiveScan (no Scan primitive here). Backward: ``decompose``.
"""
from ..entry import DECOMPOSE, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from ._common import (OpKind, ParamSpec, TensorType, check_arity, check_float, dtype_of, fail,
                      np, out, wide)

NAME = "SsdChunkScan"


def infer(types, params):
    check_arity(NAME, types, 5, names=("x", "dt", "a", "b", "c"))
    check_float(NAME, types, range(5))
    x, dt, a, b, c = types
    if len(x.shape) != 4 or x.shape[1] < 1:
        raise fail(NAME, types, "x must be [B,L,H,P] with L >= 1")
    bsz, ll, h, p = x.shape
    if tuple(dt.shape) != (bsz, ll, h) or tuple(a.shape) != (h,):
        raise fail(NAME, types, "dt must be [B,L,H] and a [H]")
    if len(b.shape) != 4 or tuple(b.shape[:3]) != (bsz, ll, h) or c.shape != b.shape:
        raise fail(NAME, types, "b and c must be [B,L,H,N]")
    cs = params["chunk_size"]
    if cs < 1 or ll % cs:
        raise fail(NAME, types, f"chunk_size={cs} must be positive and divide L={ll}")
    if any(t.dtype != x.dtype for t in types):
        raise fail(NAME, types, "all inputs must share x's dtype")
    return [TensorType((bsz, ll, h, p), x.dtype), TensorType((bsz, h, p, b.shape[3]), x.dtype)]


def reference(inputs, params):
    x, dt, a, b, c = (wide(v) for v in inputs)
    bsz, ll, hh, p = x.shape
    h = np.zeros((bsz, hh, p, b.shape[3]))
    ys = []
    for t in range(ll):
        d = dt[:, t, :, None, None]
        h = np.exp(d * a[None, :, None, None]) * h + d * b[:, t, :, None, :] * x[:, t, :, :, None]
        ys.append((h * c[:, t, :, None, :]).sum(axis=-1))
    dt_ = dtype_of(inputs[0])
    return [out(np.stack(ys, axis=1), dt_), out(h, dt_)]


def build(params, types):
    bsz, ll, hh, p = types[0].shape
    n = types[3].shape[3]
    full = (bsz, hh, p, n)

    def step(v, t, rest):
        return op("Reshape", op("Slice", v, dim=1, start=t, len=1), shape=(bsz,) + rest)

    h = None
    ys = []
    a_b = op("BroadcastTo", Bind(2), shape=(bsz, hh))
    for t in range(ll):
        dt_t = step(Bind(1), t, (hh,))
        x_t, b_t, c_t = step(Bind(0), t, (hh, p)), step(Bind(3), t, (hh, n)), step(Bind(4), t, (hh, n))
        dx = op("Mul", x_t, op("BroadcastTo", op("Reshape", dt_t, shape=(bsz, hh, 1)),
                               shape=(bsz, hh, p)))
        inject = op("Mul", op("BroadcastTo", op("Reshape", dx, shape=(bsz, hh, p, 1)), shape=full),
                    op("BroadcastTo", op("Reshape", b_t, shape=(bsz, hh, 1, n)), shape=full))
        if h is None:
            h = inject
        else:
            gate = op("BroadcastTo", op("Reshape", op("Exp", op("Mul", dt_t, a_b)),
                                        shape=(bsz, hh, 1, 1)), shape=full)
            h = op("Add", op("Mul", gate, h), inject)
        cb = op("BroadcastTo", op("Reshape", c_t, shape=(bsz, hh, 1, n)), shape=full)
        ys.append(op("Reshape", op("SumDim", op("Mul", h, cb), axis=3), shape=(bsz, 1, hh, p)))
    y = ys[0] if ll == 1 else op("Concat", *ys, dim=1)
    return (y, h)


def _unused(params, types):
    """With L = 1 the decay ``a`` multiplies the zero initial state only."""
    return (2,) if types[0].shape[1] == 1 else ()


ENTRY = FusedOpEntry(
    id=20, name=NAME, mnemonic="ssd_chunk_scan", family=Family.FORWARD,
    arity=5, params=(ParamSpec("chunk_size", "i64", 1),), infer=infer, reference=reference,
    recipe=Recipe(build=build, unused_inputs=_unused), backward=DECOMPOSE, op_kind=OpKind.SsdChunkScan,
    destructive_input=None, cse_tag=20, input_names=("x", "dt", "a", "b", "c"),
    num_outputs=2, doc=__doc__,
)
