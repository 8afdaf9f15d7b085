"""FusedLinear and Rope, each lowered to one kernel.

* FusedLinear ``a [..,M,K] @ b [..,K,N] + bias [N]``: the accumulator is
  initialised with the broadcast bias and the matmul accumulates into it
  (``linalg.matmul`` / ``batch_matmul`` for rank 2 or equal-batch rank 3,
  f16/bf16 into the f32 bias, f32 x bf16 into the f32 bias; otherwise one
  ``linalg.generic`` over (batch.., m, n, k) with MatMul's batch rules: GQA
  lhs batch j reads rhs batch j // (b/b'), size-1 rhs batch axes read 0;
  f32 x bf16 accumulates in f32). Over a packed b (``b_panel``): one generic
  over the panels, bf16/f16 panels extended to f32 in its body, a bf16/f16 a
  once before it.
* Rope (rotate-half, NeoX): with h = d/2, x1 = x[.., :h], x2 = x[.., h:],
  out[.., :h] = x1·cos[.., :h] − x2·sin[.., :h] and
  out[.., h:] = x2·cos[.., h:] + x1·sin[.., h:]: one two-output generic over
  the half shape on static slices, inserted into the result. cos/sin
  broadcast numpy-style (a size-1 last axis is read whole).
* Rope with ``interleaved`` (GPT-J): the pairs are (x[2i], x[2i+1]); x, cos
  and sin are viewed as ``[.., d/2, 2]`` and the same two-output generic
  runs on the even and odd columns.
"""
from __future__ import annotations

import functools
import math

from compiler.mlir import ir

from .core import (PARALLEL, REDUCTION, Lowering, Scalar, affine_map, broadcast_map, collapse,
                   dims, empty, expand, from_compute, generic, identity_map, lowers, rank,
                   reshape, rtt, to_compute)
from .layout import extract_slice, insert_slice
from .matmul import matmul_into, round_to


@lowers("FusedLinear")
def _fused_linear(lw: Lowering):
    from compiler.registry.ops.fused_linear import has_epilogue as linear_epilogue
    a, b, bias = lw.operands[:3]
    if linear_epilogue(lw.params):
        skip = lw.operands[3] if lw.params.get("residual") else None
        return _linear_epilogue(lw, a, b, bias, lw.params.get("b_panel"), skip)
    if lw.params.get("b_panel"):
        return _packed_linear(lw, a, b, bias, lw.params["b_panel"])
    n = rank(a)
    s = Scalar.compute(lw.out_dtype)
    out_dims = dims(a)[:-1] + [dims(b)[-1]]
    # accumulator = bias broadcast over every axis but the last
    acc = generic([bias], [empty(out_dims, s.ty)], [affine_map(n, [n - 1]), identity_map(n)],
                  [PARALLEL] * n, lambda v, _o: to_compute(v, s))[0]
    return matmul_into(a, b, acc, lw.out_dtype, lw.out_elt)


def _packed_linear(lw: Lowering, a, b, bias, panel: int):
    """``a [M, K] @ B + bias`` with B packed ``b [N/panel, K, panel]`` (the
    kernel instance folds a's batch axes into M): the accumulator [M, N]
    starts as the bias, and one generic over (p, m, j | k) marked
    ``PACKED_B_ATTR`` accumulates ``a[m, k] * b[p, k, j]`` into ``acc[m,
    p*panel + j]`` in the order of k. bf16/f16 panels (under a bf16/f16 or an
    f32 a) are extended to f32 in the product's body, so in the register
    tiles; a bf16/f16 a is extended once, into an f32 copy of a the product
    reads: extended in the tiles, each broadcast element of a took a scalar
    load, shift and move to a vector register (AVX2 [64,2048] x [2048,2048]
    at 1.6x the f32 product's time; f16 2.5x; docs/benchmarks.md, "bf16
    weights packed at compile time"). A bf16/f16 product rounds the f32
    accumulator once at the end (as ``matmul_into``)."""
    from compiler.codegen.family import PACKED_B_ATTR
    if rank(a) != 2 or rank(b) != 3:
        raise ValueError(f"FusedLinear b_panel={panel}: the kernel takes a [M, K] and b "
                         f"[N/{panel}, K, {panel}], got ranks {rank(a)} and {rank(b)}")
    s = Scalar.compute(lw.out_dtype)
    if rtt(a).element_type != s.ty:  # bf16/f16 a: extended once, not at every broadcast
        a = generic([a], [empty(dims(a), s.ty)], [identity_map(2)] * 2, [PARALLEL] * 2,
                    lambda v, _o: to_compute(v, s))[0]
    acc = generic([bias], [empty(dims(a)[:1] + dims(bias), s.ty)],
                  [affine_map(2, [1]), identity_map(2)], [PARALLEL] * 2,
                  lambda v, _o: to_compute(v, s))[0]
    d = ir.AffineDimExpr.get
    col = d(0) * ir.AffineConstantExpr.get(panel) + d(2)
    mm = generic([a, b], [acc], [affine_map(4, [1, 3]), affine_map(4, [0, 3, 2]),
                                 affine_map(4, [1, col])],
                 # p iterates as a reduction: a schedule that tiles it by 1 folds it
                 # out of the output map (``transforms.matmul.packed_script``)
                 [REDUCTION] + [PARALLEL] * 2 + [REDUCTION],
                 lambda x, y, c: s.add(c, s.mul(to_compute(x, s), to_compute(y, s))))[0]
    mm.owner.attributes[PACKED_B_ATTR] = ir.UnitAttr.get()
    return mm if s.ty == lw.out_elt else round_to(mm, dims(mm), lw.out_elt)


def _linear_epilogue(lw: Lowering, a, b, bias, panel, skip=None):
    """``gelu(a @ b + bias)`` or ``clamp(a @ b + bias + skip)`` (one float
    dtype; a's rows may be run-time extents, everything else static) as a zero
    fill, a contraction (``CONTRACT_ATTR``) and an element-wise epilogue
    (``EPILOGUE_ATTR``: the bias, then the erf GELU of ``_gelu_erf`` as the
    GeluErf kernel computes it, or with ``gelu_tanh`` the tanh GELU of
    ``_gelu_tanh`` as the Gelu kernel does; or the skip ``skip``, of the
    output's shape, then the clamp as the Clamp kernel computes it: the Add
    and Clamp of the recipe, in its order), which the cpu strategy ``matmul-epilogue``
    tiles and fuses: each register tile starts at zero, runs all of K and
    leaves through the epilogue, stored once. All three iterate (p, m, j)
    over the output viewed as ``[M, P, nr]`` (a packed b ``[P, K, nr]``; an
    unpacked ``[.., K, N]`` of unit batch axes is one panel ``[1, K, N]``), so
    a tile reads its panel of b contiguously (packed) or in place; a's batch
    axes fold into M."""
    from compiler.codegen.family import CONTRACT_ATTR, EPILOGUE_ATTR, PACKED_B_ATTR
    from .elementwise import _gelu_erf, _gelu_tanh
    s, elt = Scalar.compute(lw.out_dtype), lw.out_elt
    if lw.params.get("gelu") or lw.params.get("gelu_tanh"):
        act = functools.partial(_gelu_tanh if lw.params.get("gelu_tanh") else _gelu_erf, s)
    else:
        act = functools.partial(_clamp, s, lw.params.get("clamp_min"), lw.params.get("clamp_max"))
    ra, rb = rank(a), rank(b)
    out_shape = dims(a)[:-1] + [rtt(bias).shape[0]]  # a's rows may be run-time extents
    if ra > 2:
        a = collapse(a, [list(range(ra - 1)), [ra - 1]])
    if not panel:
        if rb > 2:
            b = collapse(b, [list(range(rb - 1)), [rb - 1]])
        b = expand(b, [1] + list(rtt(b).shape), [[0, 1], [2]])
    p, nr = rtt(b).shape[0], rtt(b).shape[2]
    m = dims(a)[0]
    bias = expand(bias, [p, nr], [[0, 1]])
    # (p, m, j) -> the output as [M, P, nr]; one panel: as [1, M, N] (the
    # same memory), so a partial column tile is not a permuted masked write
    out3 = affine_map(3, [1, 0, 2]) if panel else identity_map(3)
    shape = [m, p, nr] if panel else [1, m, nr]
    zero = generic([], [empty(shape, elt)], [out3], [PARALLEL] * 3, lambda _o: s.const(0))[0]
    acc = generic([a, b], [zero], [affine_map(4, [1, 3]), affine_map(4, [0, 3, 2]),
                                   affine_map(4, [1, 0, 2] if panel else [0, 1, 2])],
                  [PARALLEL] * 3 + [REDUCTION], lambda x, y, c: s.add(c, s.mul(x, y)))[0]
    acc.owner.attributes[CONTRACT_ATTR] = ir.UnitAttr.get()
    if panel:  # the packed strategy's register tile (``cpu.strategy.packed_epilogue_strategy``)
        acc.owner.attributes[PACKED_B_ATTR] = ir.UnitAttr.get()
    ins, maps = [acc, bias], [out3, affine_map(3, [0, 2])]
    if skip is not None:  # the skip, read as the output is ([M, P, nr] or [1, M, N])
        rs = rank(skip)
        if rs > 2:
            skip = collapse(skip, [list(range(rs - 1)), [rs - 1]])
        skip = expand(skip, [m, p, nr] if panel else [1, m, nr], [[0], [1, 2]] if panel else [[0, 1], [2]])
        ins.append(skip)
        maps.append(out3)
    y = generic(ins, [empty(shape, elt)], maps + [out3], [PARALLEL] * 3,
                lambda v, c, *rest: act(s.add(s.add(v, c), rest[0]) if skip is not None
                                        else s.add(v, c)))[0]
    y.owner.attributes[EPILOGUE_ATTR] = ir.UnitAttr.get()
    y = collapse(y, [[0], [1, 2]] if panel else [[0, 1], [2]])
    if len(out_shape) == 2:  # written into the out-param's [M, P, nr] view: no copy
        from compiler.codegen.common.stages import WRITE_THROUGH_ATTR
        y.owner.attributes[WRITE_THROUGH_ATTR] = ir.UnitAttr.get()
    return expand(y, out_shape, [list(range(len(out_shape) - 1)), [len(out_shape) - 1]]) \
        if len(out_shape) > 2 else y


def _clamp(s: Scalar, lo, hi, v):
    """``v`` clamped to ``[lo, hi]`` (None: that side open) as the Clamp
    kernel computes it; identity without bounds."""
    if lo is None and hi is None:
        return v
    lo, hi = -math.inf if lo is None else lo, math.inf if hi is None else hi
    return s.min(s.max(v, s.saturated_const(lo)), s.saturated_const(hi))


def _halves(v, n: int, h: int):
    """(first half, second half) of ``v``'s last axis, or (v, v) when that
    axis has size 1 (a broadcast cos/sin)."""
    shape = list(rtt(v).shape)
    if shape[-1] == 1:
        return v, v
    lo = [0] * len(shape)
    hi = [0] * (len(shape) - 1) + [h]
    size = shape[:-1] + [h]
    return extract_slice(v, lo, size), extract_slice(v, hi, size)


def _pairs(v):
    """``v [.., d]`` viewed as ``[.., d/2, 2]`` (``[.., 1, 1]`` for a size-1
    last axis, which broadcasts)."""
    shape = list(rtt(v).shape)
    return reshape(v, shape[:-1] + ([1, 1] if shape[-1] == 1 else [shape[-1] // 2, 2]))


@lowers("Rope")
def _rope(lw: Lowering):
    x, cos, sin = lw.operands
    if lw.params.get("interleaved"):
        d = list(rtt(x).shape)
        out = _rotate(lw, _pairs(x), _pairs(cos), _pairs(sin))
        return reshape(out, d)
    return _rotate(lw, x, cos, sin)


def _rotate(lw: Lowering, x, cos, sin):
    """Rotate-half on the last axis of ``x`` (its size-2 pair axis when
    interleaved)."""
    s = Scalar.compute(lw.in_dtypes[0])
    shape = list(rtt(x).shape)
    n = len(shape)
    h = shape[-1] // 2
    half = shape[:-1] + [h]
    x1, x2 = _halves(x, n, h)
    c1, c2 = _halves(cos, n, h)
    s1, s2 = _halves(sin, n, h)
    ins = [x1, x2, c1, c2, s1, s2]
    maps = [broadcast_map(rtt(v).shape, n, half) for v in ins] + [identity_map(n)] * 2
    elt = lw.out_elt

    def body(a1, a2, k1, k2, n1, n2, _o1, _o2):
        a1, a2, k1, k2, n1, n2 = (to_compute(v, s) for v in (a1, a2, k1, k2, n1, n2))
        lo = s.sub(s.mul(a1, k1), s.mul(a2, n1))
        hi = s.add(s.mul(a2, k2), s.mul(a1, n2))
        return [from_compute(lo, elt), from_compute(hi, elt)]

    o1, o2 = generic(ins, [empty(half, elt), empty(half, elt)], maps, [PARALLEL] * n, body)
    out = empty(shape, elt)
    out = insert_slice(o1, out, [0] * n)
    return insert_slice(o2, out, [0] * (n - 1) + [h])
