"""Views and shape ops: named linalg/tensor ops where they exist
(linalg.transpose/broadcast/copy/fill, tensor.collapse/expand_shape,
extract_slice/insert_slice), ``linalg.generic`` otherwise. Static shapes, but
the batch of Pad and Concat (``kernels.PARTLY_DYNAMIC``)."""
from __future__ import annotations

from compiler.dialect.types import keep_extents
from compiler.mlir import arith, ir, linalg, tensor

from .core import (PARALLEL, Lowering, Scalar, affine_map, collapse, dims, empty, expand, fill,
                   generic, identity_map, loop_index, lowers, rank, reshape, rtt)


def _value(r):
    """Named-op builders return the op or its result depending on the op."""
    if isinstance(r, ir.Value):
        return r
    return r.results[0] if hasattr(r, "results") else r[0]


def _transpose(x, perm):
    xd = dims(x)
    init = empty([xd[p] for p in perm], rtt(x).element_type)
    return _value(linalg.transpose(x, outs=[init], permutation=list(perm)))


@lowers("Transpose")
def _transpose_last2(lw: Lowering):
    x = lw.operands[0]
    n = rank(x)
    return _transpose(x, list(range(n - 2)) + [n - 1, n - 2])


@lowers("Permute")
def _permute(lw: Lowering):
    return _transpose(lw.operands[0], [int(p) for p in lw.param("perm")])


@lowers("Reshape")
def _reshape(lw: Lowering):
    return reshape(lw.operands[0], lw.param("shape"))


@lowers("BroadcastTo")
def _broadcast_to(lw: Lowering):
    """New leading axes only: ``linalg.broadcast``; size-1 axes that stretch:
    a generic reading index 0 on them. A target extent of -1 keeps the
    input's extent on that axis (the passes write a ``?`` extent so:
    ``passes._fuel.dialect_params``), read by ``tensor.dim`` when dynamic
    (``dialect.types.keep_extents``)."""
    x = lw.operands[0]
    src = list(rtt(x).shape)
    shape = keep_extents([int(d) for d in lw.param("shape")], dims(x))
    off = len(shape) - len(src)
    elt = rtt(x).element_type
    init = empty(shape, elt)
    stretch = [i for i, d in enumerate(src) if d == 1 and shape[i + off] != 1]
    if not stretch:
        return _value(linalg.broadcast(x, outs=[init], dimensions=list(range(off))))
    n = len(shape)
    in_map = affine_map(n, [None if i in stretch else i + off for i in range(len(src))])
    return generic([x], [init], [in_map, identity_map(n)], [PARALLEL] * n, lambda a, _o: a)[0]


@lowers("Unsqueeze")
def _unsqueeze(lw: Lowering):
    x = lw.operands[0]
    shape = list(rtt(x).shape)
    d = lw.axis("dim", len(shape) + 1)
    return reshape(x, shape[:d] + [1] + shape[d:])


@lowers("Squeeze")
def _squeeze(lw: Lowering):
    x = lw.operands[0]
    shape = list(rtt(x).shape)
    d = lw.axis("dim", len(shape))
    return reshape(x, shape[:d] + shape[d + 1:])


def extract_slice(x, offsets, sizes):
    """x[offsets : offsets + sizes]. A zero-sized slice is a fresh empty
    tensor: MLIR's verifier wants every offset inside its dim even when
    nothing is read (offset 3 of a dim of 3 is out of bounds)."""
    t = rtt(x)
    if 0 in list(sizes):
        return empty(list(sizes), t.element_type)
    res = ir.RankedTensorType.get(list(sizes), t.element_type)
    return tensor.extract_slice(res, x, [], [], [], list(offsets), list(sizes), [1] * len(sizes))


def insert_slice(src, dest, offsets):
    """dest with src written at offsets; a zero-sized src writes nothing and
    leaves dest as it is (a Concat operand with a zero-extent axis sits at
    the end of its dim, which MLIR's verifier calls out of bounds)."""
    t = rtt(src)
    sizes = list(t.shape)  # a run-time extent: the dynamic-size marker, its tensor.dim an operand
    if 0 in sizes:
        return dest
    dyn = [d for d, i in zip(dims(src), range(t.rank)) if t.is_dynamic_dim(i)]
    return tensor.insert_slice(src, dest, [], dyn, [], list(offsets), sizes, [1] * len(sizes))


def _out_dims(lw: Lowering, like) -> list:
    """The result's extents: static ones as ints, a run-time one (a batch
    that ``like`` shares, ``kernels.PARTLY_DYNAMIC``) as ``like``'s
    ``tensor.dim``."""
    t = rtt(lw.out_type)
    return [dims(like)[i] if t.is_dynamic_dim(i) else t.shape[i] for i in range(t.rank)]


@lowers("Slice")
def _slice(lw: Lowering):
    x = lw.operands[0]
    shape = list(rtt(x).shape)
    d = lw.axis("dim", len(shape))
    offsets = [0] * len(shape)
    offsets[d] = int(lw.param("start"))
    sizes = shape[:]
    sizes[d] = int(lw.param("len"))
    return extract_slice(x, offsets, sizes)


@lowers("Flip")
def _flip(lw: Lowering):
    x = lw.operands[0]
    shape = list(rtt(x).shape)
    n = len(shape)
    d = lw.axis("dim", n)
    rev = ir.AffineConstantExpr.get(shape[d] - 1) - ir.AffineDimExpr.get(d)
    in_map = affine_map(n, [rev if i == d else i for i in range(n)])
    init = empty(shape, rtt(x).element_type)
    return generic([x], [init], [in_map, identity_map(n)], [PARALLEL] * n, lambda a, _o: a)[0]


@lowers("Contiguize")
def _contiguize(lw: Lowering):
    x = lw.operands[0]
    return linalg.copy(x, outs=[empty(dims(x), rtt(x).element_type)])


@lowers("Concat")
def _concat(lw: Lowering):
    """tensor.empty + one insert_slice per operand (bufferizes in place)."""
    xs = lw.operands
    d = lw.axis("dim", rank(xs[0]))
    out = empty(_out_dims(lw, xs[0]), lw.out_elt)
    pos = 0
    for x in xs:
        offsets = [0] * rank(x)
        offsets[d] = pos
        out = insert_slice(x, out, offsets)
        pos += rtt(x).shape[d]
    return out


@lowers("Roll")
def _roll(lw: Lowering):
    """out[(j + shift) mod n] = in[j]: two slices swapped."""
    x = lw.operands[0]
    shape = list(rtt(x).shape)
    d = lw.axis("dim", len(shape))
    n = shape[d]
    s = int(lw.param("shift")) % n if n else 0
    if s == 0:
        return _copy(x)
    out = empty(shape, rtt(x).element_type)
    head = [0] * len(shape)
    tail_sizes, head_sizes = shape[:], shape[:]
    tail_sizes[d], head_sizes[d] = s, n - s
    tail_off = head[:]
    tail_off[d] = n - s
    tail = extract_slice(x, tail_off, tail_sizes)      # in[n-s:] -> out[:s]
    front = extract_slice(x, head, head_sizes)         # in[:n-s] -> out[s:]
    out = insert_slice(tail, out, head)
    at = head[:]
    at[d] = s
    return insert_slice(front, out, at)


def _copy(x):
    return linalg.copy(x, outs=[empty(dims(x), rtt(x).element_type)])


@lowers("Triu", "Tril")
def _triangle(lw: Lowering):
    """Keep x[.., i, j] where j - i >= k (Triu) / j - i <= k (Tril), else 0."""
    x = lw.operands[0]
    n = rank(x)
    k = int(lw.param("diagonal"))
    s = Scalar(lw.in_dtypes[0], rtt(x).element_type)
    upper = lw.name == "Triu"

    def body(a, _o):
        i64 = ir.IntegerType.get_signless(64)
        i = arith.index_cast(i64, loop_index(n - 2))
        j = arith.index_cast(i64, loop_index(n - 1))
        diff = arith.subi(j, i)
        pred = arith.CmpIPredicate.sge if upper else arith.CmpIPredicate.sle
        keep = arith.cmpi(pred, diff, arith.constant(i64, k))
        return arith.select(keep, a, s.const(0))

    init = empty(dims(x), rtt(x).element_type)
    return generic([x], [init], [identity_map(n), identity_map(n)], [PARALLEL] * n, body)[0]


@lowers("Pad")
def _pad(lw: Lowering):
    """Constant mode: fill(value) then insert_slice the input at the befores."""
    x = lw.operands[0]
    if lw.param("mode") != "constant":
        from compiler.errors import LoweringError
        raise LoweringError(f"Pad: mode {lw.param('mode')!r} has no lowering (only 'constant')")
    pad = [int(v) for v in lw.param("padding")]
    s = Scalar(lw.in_dtypes[0], rtt(x).element_type)
    out = fill(s.const(lw.param("value")), empty(_out_dims(lw, x), lw.out_elt))
    return insert_slice(x, out, pad[0::2])


@lowers("PadBackward")
def _pad_backward(lw: Lowering):
    g = lw.operands[0]
    pad = [int(v) for v in lw.param("padding")]
    return extract_slice(g, pad[0::2], [int(d) for d in lw.param("in_shape")])


__all__ = ["extract_slice", "insert_slice", "collapse", "expand"]
