"""Control flow resolved at import. Scan and Loop are unrolled: the body is
imported once per iteration (Scan: the static extent of the scan axis; Loop:
a trip count and conditions known at import), with the previous iteration's
state values (and the iteration's slices of the scan inputs) bound to the
body's inputs; the scan outputs are the iterations' values stacked along
their axes. If imports the branch its constant condition selects."""
from __future__ import annotations

import numpy as np

from ...graph import concat
from ._fold import Unsupported
from ._ops import _op


def run_body(cx, body, bound: list, owner: str) -> list:
    """The values of ``body``'s outputs with ``bound`` given for its inputs
    (outer-scope names stay visible; the body's own names are dropped after)."""
    from onnx import numpy_helper
    from ._fold import FOLD
    from ._ops import BUILD
    for n in body.node:
        if n.op_type not in BUILD and n.op_type not in FOLD and n.op_type != "Constant" or \
                n.domain not in ("", "ai.onnx"):
            raise Unsupported(f"its body holds a {n.op_type} node ({n.name or 'unnamed'}), "
                              f"an op fuelc does not import")
    values, poisoned, issues = dict(cx.values), set(cx.poisoned), len(cx.issues)
    elem = dict(cx._elem_types)
    try:
        for vi in list(body.input) + list(body.output) + list(body.value_info):
            if vi.type.tensor_type.elem_type:
                cx._elem_types.setdefault(vi.name, vi.type.tensor_type.elem_type)
        for init in body.initializer:
            cx.values[init.name] = numpy_helper.to_array(init)
        for vi, v in zip(body.input, bound):
            cx.values[vi.name] = v
        for j, n in enumerate(body.node):
            cx._visit(f"{owner}/{j}", n, None)  # named '#<owner>/<j>' when unnamed
        if len(cx.issues) > issues:
            raise Unsupported("its body could not be imported (the body's issues are listed)")
        missing = [o.name for o in body.output if o.name not in cx.values]
        if missing:  # fed by a value an earlier issue left out
            raise Unsupported(f"its body's outputs {missing} depend on values that could "
                              f"not be imported")
        return [cx.values[o.name] for o in body.output]
    finally:
        cx.values, cx.poisoned, cx._elem_types = values, poisoned, elem


def _take(cx, x, i, axis):
    if isinstance(x, np.ndarray):
        return np.take(x, i, axis=axis)
    return cx.t(x)[(slice(None),) * axis + (i,)]


@_op("Scan")
def _scan(cx, node, at, ins):
    body, m = at["body"], int(at["num_scan_inputs"])
    n_state = len(ins) - m
    states, xs = list(ins[:n_state]), ins[n_state:]
    in_axes = [a % np.ndim(x) if isinstance(x, np.ndarray) else a % x.ndim
               for a, x in zip(at.get("scan_input_axes", [0] * m), xs)]
    in_dirs = at.get("scan_input_directions", [0] * m)
    steps = {int(x.shape[a]) for x, a in zip(xs, in_axes)}
    if len(steps) != 1:
        raise Unsupported(f"scan inputs of different lengths {sorted(steps)}")
    steps = steps.pop()
    if steps == 0:
        raise Unsupported("a scan of 0 iterations")
    per_step = []
    for t in range(steps):
        sl = [_take(cx, x, steps - 1 - t if d else t, a) for x, a, d in zip(xs, in_axes, in_dirs)]
        outs = run_body(cx, body, states + sl, node.name or "Scan")
        states, per_step = outs[:n_state], per_step + [outs[n_state:]]
    k = len(body.output) - n_state
    out_axes = at.get("scan_output_axes", [0] * k)
    out_dirs = at.get("scan_output_directions", [0] * k)
    scans = []
    for j in range(k):
        vals = [cx.t(s[j]) for s in per_step]
        if out_dirs[j]:
            vals = vals[::-1]
        axis = out_axes[j] % (vals[0].ndim + 1)
        vals = [v.unsqueeze(axis) for v in vals]
        scans.append(concat(vals, axis) if len(vals) > 1 else vals[0])
    return states + scans


#: the most iterations a Loop is unrolled for
MAX_UNROLL = 4096


@_op("Loop")
def _loop(cx, node, at, ins):
    trip, cond, carried = ins[0], ins[1], list(ins[2:])
    if trip is None:
        raise Unsupported("a Loop without a trip count (fuelc unrolls loops at import)")
    late = [n for n, v in zip(node.input[:2], ins[:2]) if v is not None and
            not isinstance(v, np.ndarray)]
    if late:
        raise Unsupported(f"its inputs must be constants known at import; input(s) {late} are "
                          f"computed at run time (fuelc unrolls loops at import)")
    trip = int(trip.reshape(()))
    go = True if cond is None else bool(cond.reshape(()))
    if trip > MAX_UNROLL:
        raise Unsupported(f"a trip count of {trip} (fuelc unrolls at most {MAX_UNROLL} "
                          f"iterations at import)")
    body, n = at["body"], len(carried)
    per_step = []
    for it in range(trip):
        if not go:
            break
        outs = run_body(cx, body, [np.array(it, np.int64), np.array(go), *carried],
                        node.name or "Loop")
        if not isinstance(outs[0], np.ndarray):
            raise Unsupported("the body's condition is computed at run time (fuelc unrolls "
                              "loops whose every condition is known at import)")
        go, carried = bool(outs[0].reshape(())), outs[1:1 + n]
        per_step.append(outs[1 + n:])
    k = len(body.output) - 1 - n
    if k and not per_step:
        raise Unsupported("scan outputs of a Loop that runs 0 iterations (their shape is "
                          "unknown)")
    scans = [concat([cx.t(s[j]).unsqueeze(0) for s in per_step], 0) for j in range(k)]
    return carried + scans


@_op("If")
def _if(cx, node, at, ins):
    cond = bool(cx.arr(ins[0], node.input[0], node).reshape(()))
    return run_body(cx, at["then_branch" if cond else "else_branch"], [], node.name or "If")


@_op("FlexAttention")
def _flex_attention(cx, node, at, ins):
    """ai.onnx.preview FlexAttention: softmax(mod(q k^T * scale)) v, its
    score_mod and prob_mod graphs imported on the scores and probabilities;
    f16/bf16 inputs are scaled in their type and the softmax is computed in f32
    (or in softmax_precision), as ONNX's reference."""
    from ...graph import matmul
    from ._types import dtype_of
    q, k, v = (cx.t(x) for x in ins[:3])
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise Unsupported(f"FlexAttention of rank-{q.ndim} q: only [B, H, S, D] inputs")
    hq, hkv = q.shape[1], k.shape[1]
    if hq % hkv:
        raise Unsupported(f"{hq} query heads over {hkv} key/value heads (not a multiple)")
    if hq != hkv:
        heads = np.arange(hq, dtype=np.uint32) // (hq // hkv)
        k, v = k.index_select(heads, 1), v.index_select(heads, 1)
    scale = at.get("scale") or 1.0 / float(np.sqrt(q.shape[-1]))
    root = float(np.asarray(np.sqrt(np.float32(scale)), q.dtype.numpy))
    s = matmul(q * root, k.transpose((0, 1, 3, 2)) * root)
    prec = at.get("softmax_precision")
    compute = dtype_of(prec) if prec is not None else \
        s.dtype if s.dtype.value in ("f32", "f64") else dtype_of(1)
    s = s if s.dtype == compute else s.cast(compute)

    def mod(name, x):
        if name not in at:
            return x
        out = run_body(cx, at[name], [x], node.name or "FlexAttention")
        y = cx.t(out[0])
        return y if y.dtype == compute else y.cast(compute)

    p = mod("prob_mod", mod("score_mod", s).softmax(-1))
    y = matmul(p, v if v.dtype == compute else v.cast(compute))
    return [y if y.dtype == v.dtype else y.cast(v.dtype)]
