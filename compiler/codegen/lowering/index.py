"""Indexing (IndexSelect, Gather, IndexAdd, ScatterAdd) and leaves (Iota,
Const). Indices are U32 (signless i32 after the driver's rewrite) and read
with ``arith.index_castui``; data is read with ``tensor.extract`` inside a
generic body. The accumulating ops are written gather-style (a reduction
over the index axis comparing indices), so repeated indices accumulate and
the kernels stay race-free parallel loops."""
from __future__ import annotations

import numpy as np

from compiler.errors import LoweringError
from compiler.mlir import arith, ir, tensor

from .core import (PARALLEL, REDUCTION, Lowering, Scalar, affine_map, dims, empty, from_compute,
                   generic, identity_map, loop_index, lowers, rank, rtt, to_compute)
from .layout import extract_slice, insert_slice


def _as_index(v):
    return arith.index_castui(ir.IndexType.get(), v)


@lowers("IndexSelect")
def _index_select(lw: Lowering):
    """out[.., i, ..] = data[.., idx[i], ..]"""
    data, idx = lw.operands
    n = rank(data)
    d = lw.axis("dim", n)
    out_dims = dims(data)
    out_dims[d] = dims(idx)[0]
    init = empty(out_dims, rtt(data).element_type)

    def body(k, _o):
        at = [_as_index(k) if j == d else loop_index(j) for j in range(n)]
        return tensor.extract(data, at)

    return generic([idx], [init], [affine_map(n, [d]), identity_map(n)], [PARALLEL] * n, body)[0]


@lowers("Gather")
def _gather(lw: Lowering):
    """out[p] = data[p with axis dim := idx[p]] over idx's shape."""
    data, idx = lw.operands
    n = rank(data)
    d = lw.axis("dim", n)
    init = empty(dims(idx), rtt(data).element_type)

    def body(k, _o):
        at = [_as_index(k) if j == d else loop_index(j) for j in range(n)]
        return tensor.extract(data, at)

    return generic([idx], [init], [identity_map(n), identity_map(n)], [PARALLEL] * n, body)[0]


def _accumulate(lw: Lowering, base, idx, src, d: int, idx_map, src_map):
    """out[q] = base[q] + sum_k [idx(q, k) == q_d] * src(q, k), with k the
    extra (reduction) loop n over src's axis d."""
    n = rank(base)
    s = Scalar.compute(lw.in_dtypes[0])
    elt = rtt(base).element_type
    base_map = affine_map(n + 1, list(range(n)))
    acc = empty(dims(base), s.ty)
    widened = generic([base], [acc], [identity_map(n), identity_map(n)], [PARALLEL] * n,
                      lambda b, _o: to_compute(b, s))[0]

    def body(k, v, c):
        hit = arith.cmpi(arith.CmpIPredicate.eq, _as_index(k), loop_index(d))
        return arith.select(hit, s.add(c, to_compute(v, s)), c)

    summed = generic([idx, src], [widened], [idx_map, src_map, base_map],
                     [PARALLEL] * n + [REDUCTION], body)[0]
    if s.ty == elt:
        return summed
    out = empty(dims(base), elt)
    return generic([summed], [out], [identity_map(n), identity_map(n)], [PARALLEL] * n,
                   lambda a, _o: from_compute(a, elt))[0]


@lowers("IndexAdd")
def _index_add(lw: Lowering):
    """base[.., idx[i], ..] += src[.., i, ..]"""
    base, idx, src = lw.operands
    n = rank(base)
    d = lw.axis("dim", n)
    src_map = affine_map(n + 1, [n if j == d else j for j in range(n)])
    return _accumulate(lw, base, idx, src, d, affine_map(n + 1, [n]), src_map)


@lowers("ScatterAdd")
def _scatter_add(lw: Lowering):
    """base[.., idx[p] at dim, ..] += src[p]. idx/src may be smaller than base
    on the other axes: the sum runs on that window and is inserted back."""
    base, idx, src = lw.operands
    n = rank(base)
    d = lw.axis("dim", n)
    bshape, ishape = list(rtt(base).shape), list(rtt(idx).shape)
    window = [bshape[j] if j == d else ishape[j] for j in range(n)]
    sub = base if window == bshape else extract_slice(base, [0] * n, window)
    m = affine_map(n + 1, [n if j == d else j for j in range(n)])
    out = _accumulate(lw, sub, idx, src, d, m, m)
    return out if window == bshape else insert_slice(out, base, [0] * n)


@lowers("Iota")
def _iota(lw: Lowering):
    s = Scalar.compute(lw.out_dtype)
    out = empty(list(lw.out_type.shape), lw.out_elt)
    return generic([], [out], [identity_map(1)], [PARALLEL],
                   lambda _o: from_compute(s.from_index(loop_index(0)), lw.out_elt))[0]


def dense_attr(value: np.ndarray, ty: "ir.RankedTensorType") -> "ir.DenseElementsAttr":
    """A DenseElementsAttr of ``ty`` holding the storage bytes of ``value``."""
    arr = np.ascontiguousarray(value).reshape(ty.shape)
    elt = ty.element_type
    if isinstance(elt, ir.IntegerType) or isinstance(elt, (ir.F16Type, ir.F32Type, ir.F64Type)):
        return ir.DenseElementsAttr.get(arr, type=ty)
    # bf16 / fp8: raw storage bits, reinterpreted
    return ir.DenseElementsAttr.get(arr, type=ty) if arr.dtype.itemsize * 8 == _width(elt) \
        else _raise_const(ty)


def _width(elt) -> int:
    return ir.FloatType(elt).width


def _raise_const(ty):
    raise LoweringError(f"Const of {ty}: no dense encoding for this element type")


@lowers("Const")
def _const(lw: Lowering):
    """arith.constant of the inline ``value``, else of ``constants[name]``."""
    op = lw.op
    ty = lw.out_type
    if "value" in op.attributes:
        attr = op.attributes["value"]
        if ir.DenseElementsAttr(attr).type != ty:  # ui8 payload on an i8 result
            attr = dense_attr(np.array(ir.DenseElementsAttr(attr)), ty)
        return arith.constant(ty, attr)
    name = lw.param("name")
    if name not in lw.constants:
        raise LoweringError(
            f"Const {name!r} ({ty}) has no inline value and is not in the constants "
            f"dict; pass graph_to_module's side dict: lower_to_linalg(m, constants=...)")
    return arith.constant(ty, dense_attr(lw.constants[name], ty))
