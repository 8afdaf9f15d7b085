"""RNN, GRU and LSTM, unrolled over their static sequence length at import.

Each time step is built from primitives (one MatMul of the previous hidden
state by R^T, slices per gate, the gate activations and the element-wise
state update), which fusion turns into a few kernels per step; the input
projection ``X W^T + Wb + Rb`` of every step is one MatMul over all of them
before the loop. ``sequence_lens`` (constant or computed at run time) masks
the state update: a batch row keeps its state, and its Y is 0, at the steps
past its length, and a row of length 0 ends with zero states, as in
onnxruntime. The reverse direction walks the steps from the last to the
first with the same mask, so a row of length L starts at step L-1.
"""
from __future__ import annotations

import numpy as np

from ...graph import Tensor, concat, where
from ._fold import Unsupported
from ._ops import _op

# activation -> (uses alpha, uses beta, default alpha, default beta)
_ACT = {"relu": (0, 0, None, None), "tanh": (0, 0, None, None), "sigmoid": (0, 0, None, None),
        "softsign": (0, 0, None, None), "softplus": (0, 0, None, None),
        "leakyrelu": (1, 0, 0.01, None), "thresholdedrelu": (1, 0, 1.0, None),
        "elu": (1, 0, 1.0, None), "hardsigmoid": (1, 1, 0.2, 0.5),
        "affine": (1, 1, None, None), "scaledtanh": (1, 1, None, None)}
_DEFAULT = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _apply(name, a, b, x: Tensor) -> Tensor:
    if name == "relu":
        return x.relu()
    if name == "tanh":
        return x.tanh()
    if name == "sigmoid":
        return x.sigmoid()
    if name == "softsign":
        return x / (x.abs() + 1.0)
    if name == "softplus":
        return x.softplus()
    if name == "leakyrelu":
        return where(x < 0, x * a, x)
    if name == "thresholdedrelu":
        return where(x > a, x, 0.0)
    if name == "elu":
        return where(x < 0, x.expm1() * a, x)
    if name == "hardsigmoid":
        return (x * a + b).clamp(0.0, 1.0)
    if name == "affine":
        return x * a + b
    return (x * b).tanh() * a  # scaledtanh


def _activations(op, at, dirs):
    """Per direction, the cell's activation functions as callables; alpha
    and beta are consumed in order by the functions that take them."""
    names = list(at.get("activations") or _DEFAULT[op] * dirs)
    k = len(_DEFAULT[op])
    if len(names) == k and dirs == 2:
        names = names * 2
    if len(names) != k * dirs:
        raise Unsupported(f"activations={names}: {op} takes {k} per direction ({k * dirs})")
    alphas, betas = list(at.get("activation_alpha", [])), list(at.get("activation_beta", []))
    fns = []
    for n in names:
        key = n.lower()
        if key not in _ACT:
            raise Unsupported(f"activation {n!r} (supported: Relu, Tanh, Sigmoid, LeakyRelu, "
                              f"ThresholdedRelu, HardSigmoid, Elu, Softsign, Softplus, Affine, "
                              f"ScaledTanh)")
        ua, ub, da, db = _ACT[key]
        a = alphas.pop(0) if ua and alphas else da
        b = betas.pop(0) if ub and betas else db
        if (ua and a is None) or (ub and b is None):
            raise Unsupported(f"activation {n!r} needs activation_alpha and activation_beta "
                              f"values (it has no default)")
        fns.append(lambda x, key=key, a=a, b=b: _apply(key, a, b, x))
    return [fns[d * k:(d + 1) * k] for d in range(dirs)]


def _rows(cx, v, d, lo, hi) -> Tensor:
    """``v[d, lo:hi]`` transposed ([cols, hi-lo]); folded when v is constant."""
    if isinstance(v, np.ndarray):
        return cx.t(np.ascontiguousarray(v[d, lo:hi].T))
    return cx.t(v)[d, lo:hi].transpose()


def _bias(cx, v, d, lo, hi):
    if v is None:
        return None
    return cx.t(v[d, lo:hi]) if isinstance(v, np.ndarray) else cx.t(v)[d, lo:hi]


def _plus(a, b):
    return a if b is None else a + b


@_op("RNN", "GRU", "LSTM")
def _recurrent(cx, node, at, ins):
    op = node.op_type
    ins = list(ins) + [None] * (8 - len(ins))
    x, w, r, bias, lens, h0 = ins[:6]
    c0 = ins[6] if op == "LSTM" else None
    peep = ins[7] if op == "LSTM" else None
    x = cx.t(x)
    if x.dtype.value not in ("f32", "f64"):
        raise Unsupported(f"{op} of {x.dtype.value} X (only f32 and f64)")
    direction = at.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise Unsupported(f"direction={direction!r}")
    dirs = 2 if direction == "bidirectional" else 1
    layout = int(at.get("layout", 0))
    if layout not in (0, 1):
        raise Unsupported(f"layout={layout}")
    if layout == 1:  # [batch, seq, ...] -> [seq, batch, ...]
        x = x.permute((1, 0, 2))
        h0 = None if h0 is None else cx.t(h0).permute((1, 0, 2))
        c0 = None if c0 is None else cx.t(c0).permute((1, 0, 2))
    steps, batch, _ = x.shape
    n_gates, hidden = _GATES[op], int(at["hidden_size"])
    if tuple(w.shape[:2]) != (dirs, n_gates * hidden):
        raise Unsupported(f"W of shape {list(w.shape)} for hidden_size={hidden} and direction="
                          f"{direction!r} (expected [{dirs}, {n_gates * hidden}, input_size])")
    clip = at.get("clip")
    lbr = int(at.get("linear_before_reset", 0))
    input_forget = int(at.get("input_forget", 0))
    acts = _activations(op, at, dirs)
    mask = _step_masks(cx, lens, steps, batch)

    def clipped(v):
        return v if clip is None else v.clamp(-clip, clip)

    ys, hs, cs = [], [], []
    for d in range(dirs):
        f = [lambda v, fn=fn: fn(clipped(v)) for fn in acts[d]]
        gh = n_gates * hidden
        # the input projection of every step at once, with the biases that add to it
        xw = x.reshape((steps * batch, x.shape[2])) @ _rows(cx, w, d, 0, gh)
        wb = _bias(cx, bias, d, 0, gh)
        rb = _bias(cx, bias, d, gh, 2 * gh)
        rbh = None
        zero = np.zeros((), np.float32 if x.dtype.value == "f32" else np.float64)
        if op == "GRU" and rb is not None and lbr:  # Rbh stays inside r * (.)
            rb, rbh = rb[:2 * hidden], rb[2 * hidden:]
            rb = concat([rb, cx.t(np.broadcast_to(zero, (hidden,)).copy())], 0)
        xw = _plus(_plus(xw, wb), rb).reshape((steps, batch, gh))
        if op == "GRU" and not lbr:
            r_zr, r_h = _rows(cx, r, d, 0, 2 * hidden), _rows(cx, r, d, 2 * hidden, gh)
        else:
            r_all = _rows(cx, r, d, 0, gh)
        zeros = np.broadcast_to(zero, (batch, hidden)).copy()
        h = cx.t(zeros) if h0 is None else cx.t(h0)[d]
        c = (cx.t(zeros) if c0 is None else cx.t(c0)[d]) if op == "LSTM" else None
        if peep is not None:
            p = cx.t(peep)[d]
            p_i, p_o, p_f = p[:hidden], p[hidden:2 * hidden], p[2 * hidden:]
        order = range(steps - 1, -1, -1) if (direction == "reverse" or d == 1) else range(steps)
        y = [None] * steps
        for t in order:
            g_x = xw[t]
            gate = (lambda k, pre: pre[:, k * hidden:(k + 1) * hidden])
            if op == "RNN":
                h_new, c_new = f[0](g_x + h @ r_all), None
            elif op == "GRU":
                if lbr:
                    hr = h @ r_all
                    pre_zr = g_x[:, :2 * hidden] + hr[:, :2 * hidden]
                else:
                    pre_zr = g_x[:, :2 * hidden] + h @ r_zr
                z, rr = f[0](gate(0, pre_zr)), f[0](gate(1, pre_zr))
                if lbr:
                    hh = f[1](gate(2, g_x) + rr * _plus(gate(2, hr), rbh))
                else:
                    hh = f[1](gate(2, g_x) + (rr * h) @ r_h)
                h_new, c_new = hh + z * (h - hh), None  # (1 - z) hh + z h
            else:
                pre = g_x + h @ r_all
                pi, po, pf, pc = (gate(k, pre) for k in range(4))
                if peep is not None:
                    pi, pf = pi + p_i * c, pf + p_f * c
                i_g = f[0](pi)
                f_g = 1.0 - i_g if input_forget else f[0](pf)
                c_new = f_g * c + i_g * f[1](pc)
                if peep is not None:
                    po = po + p_o * c_new
                h_new = f[0](po) * f[2](c_new)
            if mask is not None:
                m = mask[t]
                h_new = where(m, h_new, h)
                c_new = None if c_new is None else where(m, c_new, c)
                y[t] = where(m, h_new, 0.0)
            else:
                y[t] = h_new
            h, c = h_new, c_new
        ys.append(concat([v.unsqueeze(0) for v in y], 0) if steps > 1 else y[0].unsqueeze(0))
        if mask is not None:  # a row of length 0 has zero states (as onnxruntime)
            h = where(mask[0], h, 0.0)
            c = None if c is None else where(mask[0], c, 0.0)
        hs.append(h)
        cs.append(c)
    y = concat([v.unsqueeze(1) for v in ys], 1) if dirs > 1 else ys[0].unsqueeze(1)
    y_h = concat([v.unsqueeze(0) for v in hs], 0) if dirs > 1 else hs[0].unsqueeze(0)
    outs = [y, y_h]
    if op == "LSTM":
        outs.append(concat([v.unsqueeze(0) for v in cs], 0) if dirs > 1 else cs[0].unsqueeze(0))
    if layout == 1:  # Y [seq, dir, batch, h] -> [batch, seq, dir, h]; states [batch, dir, h]
        outs = [outs[0].permute((2, 0, 1, 3))] + [v.permute((1, 0, 2)) for v in outs[1:]]
    return outs


def _step_masks(cx, lens, steps, batch):
    """Per step, a [batch, 1] mask of the rows still within their length
    (None when sequence_lens is absent or constant and full)."""
    if lens is None:
        return None
    if isinstance(lens, np.ndarray):
        lens = lens.reshape(-1).astype(np.int64)
        if lens.shape != (batch,) or (lens < 0).any() or (lens > steps).any():
            raise Unsupported(f"sequence_lens {lens.tolist()} for {batch} rows of {steps} steps")
        if (lens == steps).all():
            return None
        return [cx.t((t < lens).astype(np.uint8).reshape(batch, 1)) for t in range(steps)]
    lens = cx.t(lens).reshape((batch, 1))
    return [lens > t for t in range(steps)]


@_op("LinearAttention")
def _linear_attention(cx, node, at, ins):
    """The recurrent state S [B, Hkv, Dk, Dv] per step (f32, as ONNX's
    reference): decayed by exp(decay) (gated rules), the value corrected by
    beta * (v - k S) (delta rules), S += k v^T, and y = scale * q S."""
    ins = list(ins) + [None] * (6 - len(ins))
    query, key, value, past, decay, beta = ins
    rule = at.get("update_rule", "gated_delta")
    hq, hkv = at.get("q_num_heads"), at.get("kv_num_heads")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise Unsupported(f"update_rule={rule!r} (linear, gated, delta or gated_delta)")
    if not hq or not hkv or hq % hkv:
        raise Unsupported(f"q_num_heads={hq}, kv_num_heads={hkv}: both are required and "
                          f"q_num_heads must be a multiple of kv_num_heads")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None) or delta != (beta is not None):
        raise Unsupported(f"update_rule={rule!r} with decay {'given' if decay is not None else 'absent'}"
                          f" and beta {'given' if beta is not None else 'absent'} (gated rules "
                          f"take decay, delta rules take beta, the others neither)")
    query, key, value = (cx.t(v) for v in (query, key, value))
    if query.ndim != 3 or key.ndim != 3 or value.ndim != 3:
        raise Unsupported("query, key and value must be rank 3 [B, T, H*D]")
    b, t, _ = query.shape
    if t == 0:
        raise Unsupported("a sequence of 0 steps")
    dk, dv = query.shape[2] // hq, value.shape[2] // hkv

    def heads(x, h):  # [B, T, h*d] -> [B, h, T, d], in f32
        x = cx.t(x)
        x = x.reshape((b, t, h, x.shape[2] // h)).permute((0, 2, 1, 3))
        return x if x.dtype.value == "f32" else x.cast("f32")

    q, k, v = heads(query, hq), heads(key, hkv), heads(value, hkv)
    if decay is not None:
        n = cx.t(decay).shape[-1]
        if n not in (hkv, hkv * dk):
            raise Unsupported(f"decay of last extent {n} (kv_num_heads or kv_num_heads * d_k)")
        decay = heads(decay, hkv).exp()  # [B, Hkv, T, 1 | Dk]
    if beta is not None:
        n = cx.t(beta).shape[-1]
        if n not in (hkv, 1):
            raise Unsupported(f"beta of last extent {n} (kv_num_heads or 1)")
        beta = heads(beta, n)  # [B, 1 | Hkv, T, 1]
    state_dtype = query.dtype if past is None else cx.t(past).dtype
    state = cx.t(np.zeros((b, hkv, dk, dv), np.float32)) if past is None else cx.t(past)
    if state.dtype.value != "f32":
        state = state.cast("f32")
    scale = at.get("scale") or 1.0 / float(np.sqrt(dk))
    group = np.repeat(np.arange(hkv), hq // hkv).astype(np.uint32)
    ys = []
    for i in range(t):
        k_t, v_t = k[:, :, i, :], v[:, :, i, :]
        if decay is not None:
            state = state * decay[:, :, i, :].unsqueeze(-1)
        if beta is not None:
            retrieved = (k_t.unsqueeze(2) @ state)[:, :, 0, :]
            v_t = beta[:, :, i, :] * (v_t - retrieved)
        state = state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
        read = state if hq == hkv else state.index_select(group, 1)
        ys.append((q[:, :, i:i + 1, :] @ read) * scale)  # [B, Hq, 1, Dv]
    y = concat(ys, 2) if t > 1 else ys[0]
    y = y.permute((0, 2, 1, 3)).reshape((b, t, hq * dv))
    return [y if query.dtype.value == "f32" else y.cast(query.dtype),
            state if state_dtype.value == "f32" else state.cast(state_dtype)]
