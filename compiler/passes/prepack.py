"""``fuel-prepack-weights``: lay out a matmul's constant B once, at compile
time, in the panels the target's kernel reads.

A ``FusedLinear`` (or a ``MatMul``, which becomes one with a zero bias: its
FMAs start from 0 as MatMul's do) whose ``b`` is a constant (a
``fuel.const`` or views of one: ``Reshape``, ``Transpose``, ``Permute``,
``Contiguize`` (the Conv2D recipe's ``w^T`` of few output pixels), ``Slice``,
``Unsqueeze``, ``Squeeze``, or a ``Concat`` of those (sibling products
``fuel-fuse`` merged; the Conv2D recipe's whole-image weight, ``conv2d.whole_image``; its skip, with ``residual``,
stays the op's last operand); not batched: every axis but the last two of size 1, or a ``BroadcastTo``
over them) gets ``b_panel = nr`` and, as ``b``,
``Contiguize(Permute(Reshape(b, [K, N/nr, nr]), [1, 0, 2]))``: B's column
panels of ``nr``, K-major within a panel (``[N/nr, K, nr]``). The plan's
constant folder evaluates that chain once (``plan.fold_constant_steps``), so
the packed weight is a constant of the module and of its ``.fuel`` file. A
weight that is a ``Slice`` of at least half the rows of a constant matrix
(the Conv2D recipe's row bands) packs that matrix and reads a ``Slice`` of its
panels, so that products over parts of one weight share one packed copy.
``nr`` is what the binding table's kernel for the op answers
(``GeneratedKernel.b_panel``: the register tile of the target's matmul); an
op whose kernel reads no packed B (another target, a table without
generated kernels) or whose N is below ``MIN_COLUMNS`` is left as it is.
bf16/f16 weights are packed in their own dtype (the cpu kernel extends the
panels to f32 in its tiles), and so is the bf16 weight of an f32 ``a``
(MatMul's mixed pair f32 x bf16: the bias and the output stay f32).

N not a multiple of ``nr`` (an ImageNet classifier's 1000 columns) is padded
with zero columns to the next multiple, ``Np``: the weight by ``Pad`` (folded
with the packing) and the bias by ``Pad`` (a constant one: folded too); the
kernel computes ``[.., Np]`` and a ``Slice`` view of its first N columns
replaces the op's result. The real columns are the same FMAs in the same
order, so the same bits. Only where the zero columns are few (at most N /
``MAX_PAD_FRACTION``) and the padded weight stays within what the plan folds
(``MAX_PAD_ELEMENTS`` more elements than the weight), and the bias is a
constant: otherwise the op is left unpacked (the remainder columns of the
unpacked kernel).
"""
from __future__ import annotations

import math

import numpy as np

from compiler.mlir import ir
from compiler.passes import ModulePass, register_pass
from compiler.passes import _fuel
from compiler.passes._target import target_of_pass

#: Views and copies of a constant the plan folds with it.
_VIEWS = ("reshape", "transpose", "permute", "contiguize", "slice", "unsqueeze", "squeeze")
#: Fewer columns than this keep the plain kernel (a head of a few columns:
#: the packed kernel is one more instance to compile for little gain). In
#: columns, not panels, so that targets of either panel width decide alike.
MIN_COLUMNS = 64
#: N is padded to a multiple of the panel only when the zero columns are at
#: most N / MAX_PAD_FRACTION (1000 -> 1024 columns on AVX-512: 2.4% more FMAs).
MAX_PAD_FRACTION = 8
#: A module whose products' constant weights hold more bytes than this keeps
#: every weight as it is (B packed per call): the packed copies are new
#: constants beside the weights they are made from, which for a model of
#: gigabytes of weights memory-mapped from its files (docs/compile-at-scale.md,
#: "Weights are never copied") would double what compile() and save() hold.
MAX_PACKED_BYTES = 1 << 30
#: ... and the padded weight has at most this many more elements than the
#: weight: ``plan.fold_constant_steps`` folds a step that makes at most 2^16
#: elements more than it reads (its ``FOLD_SLACK``), so the padding is done
#: once at compile time, never per call.
MAX_PAD_ELEMENTS = 1 << 16


@register_pass
class PrepackWeights(ModulePass):
    name = "fuel-prepack-weights"
    summary = ("pack the constant B of each FusedLinear and MatMul into the panels the "
               "target's kernel reads; transform the constant 3x3 kernels of the Conv2Ds "
               "the target's kernel computes as Winograd F(2x2, 3x3)")

    target: str = ""
    table: object = ""
    backend: str = ""

    def apply(self, module) -> None:
        resolved = target_of_pass(module, self.name, self.table, self.target, self.backend)
        if resolved is None:
            return
        table, backends = resolved
        entry = _fuel.registry()["FusedLinear"]
        ops = [op for op in _fuel.fuel_ops(module) if _fuel.mnemonic(op) in (entry.mnemonic, "mat_mul")]
        if sum(_weight_bytes(op) for op in ops) > MAX_PACKED_BYTES:
            return  # the packed copies would double a big model's weights: leave them in place
        for op in ops:
            _prepack(op, entry, table, backends)
        conv = _fuel.registry()["Conv2D"]
        convs = [op for op in _fuel.fuel_ops(module) if _fuel.mnemonic(op) == conv.mnemonic]
        if sum(_weight_bytes(op) for op in convs) * 16 // 9 <= MAX_PACKED_BYTES:
            for op in convs:
                _winograd(op, conv, table, backends)


def zero_bias(n: int, elt, dtype) -> "ir.Value":
    """A ``fuel.const`` of ``n`` zeros of element type ``elt`` (fuel dtype
    ``dtype``), made at the insertion point: the bias of a ``MatMul`` made a
    ``FusedLinear`` (its FMAs start from 0, as the MatMul's do)."""
    t = ir.RankedTensorType.get([n], elt)
    return _const(f"fuelc.zero_bias.{n}", t, dtype,
                  ir.DenseElementsAttr.get_splat(t, ir.FloatAttr.get(elt, 0.0)))


def _const(name: str, t: "ir.RankedTensorType", dtype, value) -> "ir.Value":
    """A ``fuel.const`` ``name`` of type ``t`` (fuel dtype ``dtype``) holding
    the elements attribute ``value``, made at the insertion point."""
    from compiler.dialect import lookup, params_to_attributes
    return _fuel.create("fuel.const", [], [t], {
        **params_to_attributes(lookup("const"), {
            "name": name, "shape": tuple(t.shape), "dtype": dtype}),
        "value": value}).results[0]


def _producer(value) -> str | None:
    """The fuel mnemonic of the op defining ``value`` (None for a block argument)."""
    return None if isinstance(value.owner, ir.Block) else _fuel.mnemonic(value.owner)


def _constant(value) -> bool:
    """Whether ``value`` is a ``fuel.const``, a view of one, or a ``Concat``
    of such (the weights ``fuel-fuse`` merges: ``merge_sibling_linears``)."""
    while _producer(value) in _VIEWS:
        value = value.owner.operands[0]
    if _producer(value) == "concat":
        return all(_constant(v) for v in value.owner.operands)
    return _producer(value) == "const"


def _weight(b):
    """The constant ``[.., K, N]`` matrix (every other axis of size 1) that
    FusedLinear operand ``b`` reads, or None: ``b`` itself, or the source of
    a ``BroadcastTo`` over b's leading axes (``x @ w`` of a batched x: every
    batch multiplies the same matrix)."""
    if _producer(b) == "broadcast_to":
        b = b.owner.operands[0]
    shape = tuple(ir.RankedTensorType(b.type).shape)
    if len(shape) < 2 or any(d != 1 for d in shape[:-2]) or not _constant(b):
        return None
    return b


def _row_slice(b):
    """``(w, (start, len))`` where the weight ``b`` is a ``Slice`` of at
    least half the rows (K) of a constant matrix ``w`` (the Conv2D recipe's
    row bands: ``conv2d._band_product``), else None. Packed whole and then
    sliced (a view of its panels: ``[N/nr, len, nr]`` at a panel stride of
    K*nr), every slice of ``w`` reads one packed constant (``fuel-cse``
    merges the packings)."""
    if _producer(b) != "slice":
        return None
    p, src = _fuel.params(b.owner), b.owner.operands[0]
    shape = tuple(ir.RankedTensorType(src.type).shape)
    if p["dim"] != len(shape) - 2 or any(d != 1 for d in shape[:-2]) or not _constant(src) \
            or 2 * p["len"] < shape[-2]:  # a small part of a large weight: packed alone
        return None
    return src, (p["start"], p["len"])


def _panel(entry, dtypes, table, backends) -> int:
    """The panel width the table's FusedLinear kernel for ``dtypes`` reads
    a packed B in, or 0."""
    panel = getattr(_kernel(entry, dtypes, table, backends), "b_panel", None)
    return int(panel()) if callable(panel) else 0


def _weight_bytes(op) -> int:
    """The bytes of ``op``'s B where it is a constant weight (0 otherwise)."""
    b = op.operands[1]
    try:
        tb = _fuel.tensor_type(b)
    except Exception:  # symbolic extents
        return 0
    if _weight(b) is None:
        return 0
    return math.prod(tb.shape) * tb.dtype.itemsize


def _prepack(op, entry, table, backends) -> bool:
    """Rewrite FusedLinear ``op`` (or a MatMul: a FusedLinear with a zero
    bias, the same bits) over a constant weight into the packed form."""
    linear = _fuel.mnemonic(op) == entry.mnemonic
    params = _fuel.params(op) if linear else {}
    if params.get("b_panel"):
        return False
    a, b = op.operands[0], op.operands[1]
    try:
        tb = _fuel.tensor_type(b)
    except Exception:  # symbolic extents in B: not a constant weight
        return False
    b = _weight(b)
    if b is None or tuple(ir.RankedTensorType(b.type).shape)[-2:] != tuple(tb.shape)[-2:]:
        return False
    k, n = tuple(tb.shape)[-2:]
    rows = _row_slice(b)
    if rows is not None:  # pack the whole weight (one constant for every slice), slice the panels
        b, rows = rows
        k = tuple(ir.RankedTensorType(b.type).shape)[-2]
    # (a, b, bias, out): the bias and the output in a's dtype (b bf16 under an
    # f32 a: MatMul's mixed pair, the panels packed in bf16)
    out = _fuel.dtype_of(op.results[0])
    nr = _panel(entry, [_fuel.dtype_of(a), tb.dtype, out, out], table, backends)
    if not nr or n < MIN_COLUMNS:
        return False
    pad = -n % nr
    if pad and (pad * MAX_PAD_FRACTION > n or pad * k > MAX_PAD_ELEMENTS
                or (linear and not _constant(op.operands[2])) or params.get("residual")):
        return False
    elt = ir.RankedTensorType(b.type).element_type
    out_elt = ir.RankedTensorType(op.results[0].type).element_type

    def make(name, operands, out_shape, elt=elt, **p):
        return _fuel.create_op(name, operands, [ir.RankedTensorType.get(list(out_shape), elt)], p,
                               loc=op.location).results[0]

    np_ = n + pad
    with ir.InsertionPoint(op), op.location:
        if pad:  # zero columns up to a whole panel (folded with the packing)
            wshape = tuple(ir.RankedTensorType(b.type).shape)
            b = make("pad", [b], wshape[:-1] + (np_,),
                     padding=(0,) * (2 * len(wshape) - 1) + (pad,), mode="constant", value=0.0)
        panels = make("reshape", [b], (k, np_ // nr, nr), shape=(k, np_ // nr, nr))
        panels = make("permute", [panels], (np_ // nr, k, nr), perm=(1, 0, 2))
        packed = make("contiguize", [panels], (np_ // nr, k, nr))
        if rows is not None:
            packed = make("slice", [packed], (np_ // nr, rows[1], nr), dim=1, start=rows[0],
                          len=rows[1])
        if linear:
            bias = op.operands[2]
            if pad:
                bias = make("pad", [bias], (np_,), padding=(0, pad), mode="constant", value=0.0,
                            elt=out_elt)
        else:  # a zero bias: the FMAs start from 0 as MatMul's do
            bias = zero_bias(np_, out_elt, out)
        params["b_panel"] = nr
        out_type = ir.RankedTensorType(op.results[0].type)
        shape = list(out_type.shape)
        result_type = ir.RankedTensorType.get(shape[:-1] + [np_], out_type.element_type) \
            if pad else out_type
        new = _fuel.create_op(entry.mnemonic, [a, packed, bias] + list(op.operands[3:]),
                              [result_type], params, loc=op.location)
        result = new.results[0]
        if pad:  # the first n columns: a view
            result = _fuel.create_op("slice", [result], [out_type],
                                     {"dim": len(shape) - 1, "start": 0, "len": n},
                                     loc=op.location).results[0]
    _fuel.replace_op(op, [result])
    _fuel.count("prepack.weights")
    return True


def _kernel(entry, dtypes, table, backends):
    """The table's kernel callable for ``entry``'s op and ``dtypes``, or None."""
    for b in backends:
        if table.backend_supports(entry.op_kind, dtypes, b):
            return table.lookup(entry.op_kind, dtypes, b).fn
    return None


def _winograd(op, entry, table, backends) -> bool:
    """Give Conv2D ``op`` over a constant w ``[Cout, Cin, 3, 3]`` the param
    ``winograd`` and, as w, its transform ``[16, Cout, Cin]``
    (``conv2d.winograd_weights``) where the table's kernel computes it so
    (``GeneratedKernel.winograd``): ``Contiguize(Permute(Reshape(Concat(
    MatMul(Slice(Reshape(w, [Cout*Cin, 9])), Gk)), [Cout, Cin, 16]), [2, 0,
    1]))`` with the constant ``Gk`` ``[9, 16]`` = kron(G, G)^T, which the
    plan folds once. (Two MatMuls over halves of the rows: one over all of
    them would make 16/9 of w's elements, more than the plan folds.)"""
    from compiler.registry.ops.conv2d import winograd_weights
    from runtime.dtype import DType
    params = _fuel.params(op)
    x, w = op.operands[0], op.operands[1]
    try:
        tx, tw = _fuel.tensor_type(x), _fuel.tensor_type(w)
    except Exception:  # symbolic extents
        return False
    if params.get("winograd") or tw.dtype != DType.F32 or len(tw.shape) != 4 \
            or not _constant(w):
        return False
    fn = _kernel(entry, [_fuel.dtype_of(v) for v in list(op.operands) + [op.results[0]]],
                 table, backends)
    ask = getattr(fn, "winograd", None)
    if not callable(ask) or not ask(params, [tuple(tx.shape), tuple(tw.shape)]):
        return False
    cout, cin = tw.shape[:2]
    pairs = cout * cin
    elt = ir.RankedTensorType(w.type).element_type

    def make(name, operands, out_shape, **p):
        return _fuel.create_op(name, operands, [ir.RankedTensorType.get(list(out_shape), elt)],
                               p, loc=op.location).results[0]

    # Gk: row p*3 + q the transform of the kernel whose only 1 is at (p, q)
    gk = np.ascontiguousarray(winograd_weights(np.eye(9).reshape(9, 1, 3, 3))[:, :, 0].T,
                              dtype=np.float32)
    with ir.InsertionPoint(op), op.location:
        t = ir.RankedTensorType.get([9, 16], elt)
        g = _const("fuelc.winograd_g", t, DType.F32, ir.DenseElementsAttr.get(gk, type=t))
        flat = make("reshape", [w], (pairs, 9), shape=(pairs, 9))
        half = -(-pairs // 2)
        parts = [make("mat_mul", [make("slice", [flat], (n, 9), dim=0, start=s, len=n), g],
                      (n, 16)) for s, n in ((0, half), (half, pairs - half)) if n]
        u = parts[0] if len(parts) == 1 else make("concat", parts, (pairs, 16), dim=0)
        u = make("reshape", [u], (cout, cin, 16), shape=(cout, cin, 16))
        u = make("contiguize", [make("permute", [u], (16, cout, cin), perm=(2, 0, 1))],
                 (16, cout, cin))
        new = _fuel.create_op(entry.mnemonic, [x, u] + list(op.operands[2:]),
                              [op.results[0].type], dict(params, winograd=True),
                              loc=op.location)
    _fuel.replace_op(op, [new.results[0]])
    _fuel.count("prepack.winograd")
    return True
