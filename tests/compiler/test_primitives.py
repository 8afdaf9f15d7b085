"""Every primitive op that has a CPU kernel, end to end: ``compile(g)`` against
``interpret(g)`` over dtypes, shapes (rank 0, size-1 axes, broadcasts) and
non-contiguous operands built in the graph with views (transpose, slice,
flip, broadcast, permute) before the op.

One graph per (op, dtype) holds every shape/view case as a separate output,
so one compile covers them all; the output names say which case failed. The
fast run covers every op in f32 and a representative subset in the other
dtypes; ``-m slow`` sweeps every dtype each op claims."""
from __future__ import annotations

import dataclasses
import math
import zlib
from typing import Callable, Optional

import numpy as np
import pytest

from compiler import Graph, concat, matmul
from compiler.errors import PassError
from compiler.graph.ops import OP_TABLE
from runtime.dtype import DType

from oracle import compile_and_compare, random_values

D = DType
DTYPES = (D.F32, D.F64, D.F16, D.BF16, D.I32, D.I64, D.I8, D.I16, D.U8, D.U32, D.U64)
SHAPES = [(), (1,), (6,), (1, 1), (3, 4), (2, 3, 4)]
VIEWS = ("dense", "T", "slice", "flip", "bcast", "perm")


# -- operands built through views ----------------------------------------------------------
def _applies(view: str, shape) -> bool:
    r = len(shape)
    return {"dense": True, "T": r >= 2, "slice": r >= 1, "flip": r >= 1,
            "bcast": r >= 1 and shape[0] > 1, "perm": r == 3}[view]


class Case:
    """Builds the operands of one output: graph inputs seen through views."""

    def __init__(self, g: Graph, feed: dict, rng, dtype: DType):
        self.g, self.feed, self.rng, self.dtype = g, feed, rng, dtype

    def operand(self, shape, view="dense", dtype: Optional[DType] = None, domain="any",
                values: Optional[np.ndarray] = None):
        """A tensor of ``shape`` made by ``view`` from a new graph input."""
        dt = dtype or self.dtype
        shape = tuple(shape)
        stored, f = shape, (lambda t: t)
        if view == "T":
            stored = shape[:-2] + (shape[-1], shape[-2])
            f = lambda t: t.swapaxes(-1, -2)
        elif view == "slice":
            stored = (shape[0] + 3,) + shape[1:]
            f = lambda t: t.slice(0, 1, shape[0])
        elif view == "flip":
            f = lambda t: t.flip(0)
        elif view == "bcast":
            stored = (1,) + shape[1:] if len(shape) < 2 else shape[1:]  # size-1 or missing axis
            f = lambda t: t.broadcast_to(shape)
        elif view == "perm":
            stored = (shape[1], shape[2], shape[0])
            f = lambda t: t.permute((2, 0, 1))
        name = f"in{len(self.feed)}"
        arr = values if values is not None else random_values(self.rng, stored, dt, domain)
        self.feed[name] = arr
        out = f(self.g.input(name, stored, dt))
        assert out.shape == shape, (view, out.shape, shape)
        return out


def elementwise_cases(shapes=SHAPES):
    """(label, shape, per-operand views): operand 0 takes each view in turn,
    the others a different one so two layouts meet in one op."""
    for s in shapes:
        views = [v for v in VIEWS if _applies(v, s)]
        for i, v in enumerate(views):
            yield f"{list(s)}-{v}", s, (v, views[(i + 1) % len(views)], views[(i + 2) % len(views)])


# -- op specs ------------------------------------------------------------------------------
@dataclasses.dataclass
class Spec:
    """How to exercise one op: ``build(case, dtype) -> [(label, tensor, terms)]``."""

    op: str
    build: Callable
    fast_dtypes: tuple = (D.F32,)
    dtypes: Optional[tuple] = None  # narrower than the op's claim (e.g. negative PowI: floats)


def _int_param(dt, f, i, u=None):
    """A scalar param: ``f`` for floats, ``i`` for signed, ``u`` for unsigned ints."""
    if dt.is_float:
        return f
    return i if dt.is_signed or u is None else u


def ew(op, domains=("any", "any", "any"), params=lambda dt: {}, roles=None):
    """An element-wise op over every shape/view case."""
    arity = OP_TABLE[op].arity

    def build(c: Case, dt):
        out = []
        for label, s, views in elementwise_cases():
            rs = roles or ("x",) * arity
            args = []
            for k, role in enumerate(rs):
                odt = D.U8 if role == "mask" else dt
                args.append(c.operand(s, views[k], odt, "mask" if role == "mask" else domains[k]))
            out.append((label, c.g.add_node(op, args, params(dt)), 1))
        return out
    return build


def reduce_dim(op, domain="any"):
    def build(c: Case, dt):
        out = []
        for label, s, views in elementwise_cases([s for s in SHAPES if s]):
            for axis in sorted({0, len(s) - 1}):
                x = c.operand(s, views[0], domain=domain)
                out.append((f"{label}-axis{axis}", c.g.add_node(op, [x], {"axis": axis}), s[axis]))
        return out
    return build


def reduce_all(op, domain="any"):
    def build(c: Case, dt):
        return [(label, c.g.add_node(op, [c.operand(s, views[0], domain=domain)]), math.prod(s))
                for label, s, views in elementwise_cases()]
    return build


def reduce_to(op):
    targets = {(6,): [(1,), ()], (3, 4): [(1, 4), (3, 1), (4,), (1, 1), ()],
               (2, 3, 4): [(1, 3, 4), (2, 1, 1), (3, 1), (4,), ()]}

    def build(c: Case, dt):
        out = []
        for label, s, views in elementwise_cases(list(targets)):
            for t in targets[s]:
                x = c.operand(s, views[0])
                terms = math.prod(s) // max(1, math.prod(t))
                out.append((f"{label}-to{list(t)}", c.g.add_node(op, [x], {"shape": t}), terms))
        return out
    return build


def cumsum(c: Case, dt):
    out = []
    for label, s, views in elementwise_cases([s for s in SHAPES if s]):
        for axis in sorted({0, len(s) - 1}):
            x = c.operand(s, views[0], domain="small")
            out.append((f"{label}-axis{axis}", c.g.add_node("CumSum", [x], {"axis": axis}), s[axis]))
    return out


def matmul_cases(c: Case, dt):
    pairs = [((3, 4), (4, 5)), ((1, 4), (4, 1)), ((1, 1), (1, 1)), ((2, 3, 4), (2, 4, 5)),
             ((2, 3, 4), (4, 5)), ((4, 3, 4), (2, 4, 5)),  # rank-2 rhs broadcast; GQA batch
             ((6,), (6, 2)), ((3, 6), (6,))]  # 1-D operands (numpy matmul)
    out = []
    for a, b in pairs:
        for va, vb in (("dense", "dense"), ("T", "dense"), ("dense", "T"), ("slice", "flip"),
                       ("flip", "bcast"), ("perm", "perm")):
            if not (_applies(va, a) and _applies(vb, b)):
                continue
            x, y = c.operand(a, va), c.operand(b, vb)
            out.append((f"{list(a)}@{list(b)}-{va}-{vb}", matmul(x, y), a[-1]))
    return out


def cast_cases(c: Case, dt):
    out = []
    for to in DTYPES:
        if to is dt:
            continue
        for label, s, views in elementwise_cases([(), (5,), (3, 4)]):
            x = c.operand(s, views[0])
            out.append((f"to-{to.value}-{label}", c.g.add_node("Cast", [x], {"dtype": to}), 1))
    return out


def concat_cases(c: Case, dt):
    out = []
    for s in [(4,), (3, 4), (2, 3, 4)]:
        for axis in sorted({0, len(s) - 1}):
            for k, (va, vb) in enumerate((("dense", "dense"), ("T", "flip"), ("slice", "bcast"))):
                if not (_applies(va, s) and _applies(vb, s)):
                    continue
                other = tuple(d + 1 if i == axis else d for i, d in enumerate(s))
                vb = vb if _applies(vb, other) else "dense"
                parts = [c.operand(s, va), c.operand(other, vb), c.operand(s, "dense")][:2 + k % 2]
                out.append((f"{list(s)}-axis{axis}-{va}-{vb}", concat(parts, axis), 1))
    return out


def roll_cases(c: Case, dt):
    out = []
    for label, s, views in elementwise_cases([(6,), (3, 4), (2, 3, 4)]):
        for axis, shift in ((0, 1), (len(s) - 1, -2), (len(s) - 1, 2 * s[-1] + 1)):
            x = c.operand(s, views[0])
            out.append((f"{label}-axis{axis}-shift{shift}",
                        c.g.add_node("Roll", [x], {"dim": axis, "shift": shift}), 1))
    return out


def triangular(op):
    def build(c: Case, dt):
        out = []
        for label, s, views in elementwise_cases([(1, 1), (3, 4), (4, 3), (2, 3, 4)]):
            for k in (-1, 0, 2):
                x = c.operand(s, views[0])
                out.append((f"{label}-k{k}", c.g.add_node(op, [x], {"diagonal": k}), 1))
        return out
    return build


def pad_cases(c: Case, dt):
    out = []
    value = _int_param(dt, -1.5, -7, 9)
    for label, s, views in elementwise_cases([(), (5,), (3, 4), (2, 3, 4)]):
        pads = [(1, 2), (0, 1), (2, 0)][:len(s)]
        x = c.operand(s, views[0])
        flat = tuple(v for p in pads for v in p)
        out.append((f"{label}-pad{pads}", c.g.add_node("Pad", [x], {"padding": flat, "value": value,
                                                                    "mode": "constant"}), 1))
    return out


def _indices(c: Case, shape, bound):
    return c.operand(shape, "dense", D.U32,
                     values=c.rng.integers(0, bound, shape).astype(np.uint32))


def index_select_cases(c: Case, dt):
    out = []
    for label, s, views in elementwise_cases([(6,), (3, 4), (2, 3, 4)]):
        for axis in sorted({0, len(s) - 1}):
            x = c.operand(s, views[0])
            idx = _indices(c, (5,), s[axis])
            out.append((f"{label}-axis{axis}", c.g.add_node("IndexSelect", [x, idx], {"dim": axis}), 1))
    return out


def gather_cases(c: Case, dt):
    out = []
    for label, s, views in elementwise_cases([(6,), (3, 4), (2, 3, 4)]):
        for axis in sorted({0, len(s) - 1}):
            x = c.operand(s, views[0])
            ishape = tuple(max(1, d - 1) if i != axis else d + 2 for i, d in enumerate(s))
            idx = _indices(c, ishape, s[axis])
            out.append((f"{label}-axis{axis}", c.g.add_node("Gather", [x, idx], {"dim": axis}), 1))
    return out


def index_add_cases(c: Case, dt):
    out = []
    for label, s, views in elementwise_cases([(6,), (3, 4), (2, 3, 4)]):
        for axis in sorted({0, len(s) - 1}):
            base = c.operand(s, views[0], domain="small")
            idx = _indices(c, (5,), s[axis])  # repeated indices accumulate
            src = c.operand(tuple(5 if i == axis else d for i, d in enumerate(s)), views[1],
                            domain="small")
            out.append((f"{label}-axis{axis}",
                        c.g.add_node("IndexAdd", [base, idx, src], {"dim": axis}), 6))
    return out


def scatter_add_cases(c: Case, dt):
    out = []
    for label, s, views in elementwise_cases([(6,), (3, 4), (2, 3, 4)]):
        for axis in sorted({0, len(s) - 1}):
            base = c.operand(s, views[0], domain="small")
            ishape = tuple(d + 1 if i == axis else max(1, d - 1) for i, d in enumerate(s))
            idx = _indices(c, ishape, s[axis])
            src = c.operand(ishape, "dense", domain="small")
            out.append((f"{label}-axis{axis}",
                        c.g.add_node("ScatterAdd", [base, idx, src], {"dim": axis}), 8))
    return out


def log_softmax(c: Case, dt):
    return [(label, c.g.add_node("LogSoftmaxLastDim", [c.operand(s, views[0])]), s[-1])
            for label, s, views in elementwise_cases([s for s in SHAPES if s])]


def flip_op(c: Case, dt):
    out = []
    for label, s, views in elementwise_cases([s for s in SHAPES if s]):
        x = c.operand(s, views[0])
        out.append((f"{label}-flip-last", c.g.add_node("Flip", [x], {"dim": len(s) - 1}), 1))
    return out


FLOAT4 = (D.F32, D.F64, D.F16)
INT2 = (D.I32, D.I64)
MAIN = FLOAT4 + INT2  # the dtypes the fast run covers for the representative ops

SPECS = [
    # binary
    Spec("Add", ew("Add"), MAIN + (D.U8,)),
    Spec("Sub", ew("Sub"), (D.F32, D.I64, D.U32, D.U64)),
    Spec("Mul", ew("Mul"), (D.F32, D.F16, D.I32)),
    Spec("Div", ew("Div", ("any", "nonzero")), MAIN + (D.U32, D.U64)),
    Spec("Maximum", ew("Maximum", ("ties", "ties")), (D.F32, D.I32)),
    Spec("Minimum", ew("Minimum", ("ties", "ties")), (D.F32, D.I64)),
    Spec("Pow", ew("Pow", ("pos", "small")), FLOAT4),
    Spec("Rem", ew("Rem", ("any", "nonzero")), MAIN + (D.U8,)),
    # unary
    Spec("Neg", ew("Neg"), (D.F32, D.I32, D.U8)),
    Spec("Sqr", ew("Sqr"), (D.F32, D.I64)),
    Spec("Sqrt", ew("Sqrt", ("pos",)), FLOAT4),
    Spec("Rsqrt", ew("Rsqrt", ("pos",)), (D.F32, D.F16)),
    Spec("Recip", ew("Recip", ("nonzero",)), (D.F32, D.F64)),
    Spec("Abs", ew("Abs"), (D.F32, D.I32, D.I64)),
    Spec("Exp", ew("Exp"), FLOAT4),
    Spec("Log", ew("Log", ("pos",)), FLOAT4),
    Spec("Sin", ew("Sin"), (D.F32, D.F64)),
    Spec("Cos", ew("Cos"), (D.F32, D.F16)),
    Spec("Tanh", ew("Tanh"), FLOAT4),
    Spec("Sigmoid", ew("Sigmoid"), (D.F32, D.F16)),
    Spec("Silu", ew("Silu"), (D.F32, D.F64)),
    Spec("Gelu", ew("Gelu"), FLOAT4),
    Spec("GeluErf", ew("GeluErf"), (D.F32, D.F64)),
    Spec("Relu", ew("Relu"), (D.F32, D.I32)),
    Spec("Step", ew("Step"), (D.F32, D.I64)),
    Spec("Erf", ew("Erf"), (D.F32, D.F16)),
    Spec("Floor", ew("Floor"), (D.F32, D.F16, D.I32)),
    Spec("Ceil", ew("Ceil"), (D.F32, D.F64)),
    Spec("Round", ew("Round", ("ties",)), (D.F32, D.F64, D.F16)),
    Spec("Sign", ew("Sign", ("ties",)), (D.F32, D.I32)),
    # scalar-param
    Spec("AddScalar", ew("AddScalar", params=lambda dt: {"value": _int_param(dt, 1.5, -3, 3)}), MAIN),
    Spec("MulScalar", ew("MulScalar", params=lambda dt: {"value": _int_param(dt, -2.5, -2, 3)}), MAIN),
    Spec("PowI", ew("PowI", ("small",), params=lambda dt: {"n": 3}), MAIN),
    Spec("PowI-neg", ew("PowI", ("nonzero",), params=lambda dt: {"n": -2}), (D.F32, D.F64),
         dtypes=(D.F32, D.F64, D.F16, D.BF16)),
    Spec("PowI-zero", ew("PowI", params=lambda dt: {"n": 0}), (D.F32, D.I32)),
    Spec("Clamp", ew("Clamp", params=lambda dt: {"min": _int_param(dt, -1.0, -5, 3),
                                                 "max": _int_param(dt, 2.0, 7, 17)}), MAIN),
    # comparisons -> u8
    *[Spec(op, ew(op, ("ties", "ties")), (D.F32, D.I32) if op in ("Lt", "Equal") else (D.F32,))
      for op in ("Equal", "Ne", "Lt", "Le", "Gt", "Ge")],
    # select / mask
    Spec("Where", ew("Where", roles=("mask", "x", "x")), MAIN + (D.U8,)),
    Spec("MaskedFill", ew("MaskedFill", roles=("x", "mask"),
                          params=lambda dt: {"value": _int_param(dt, 2.5, -7, 7)}), (D.F32, D.I64)),
    # reductions
    *[Spec(f"{k}All", reduce_all(f"{k}All", "ties" if k in ("Max", "Min") else "any"),
           (D.F32, D.F16) if k == "Mean" else (D.F32, D.I32)) for k in ("Sum", "Max", "Min", "Mean")],
    *[Spec(f"{k}Dim", reduce_dim(f"{k}Dim"), MAIN if k == "Sum" else (D.F32, D.F64))
      for k in ("Sum", "Max", "Min", "Mean")],
    Spec("ArgMaxDim", reduce_dim("ArgMaxDim", "ties"), (D.F32, D.I32)),
    Spec("ArgMinDim", reduce_dim("ArgMinDim", "ties"), (D.F32, D.F64)),
    Spec("ReduceSumTo", reduce_to("ReduceSumTo"), (D.F32, D.I64)),
    Spec("ReduceMaxTo", reduce_to("ReduceMaxTo"), (D.F32, D.I32)),
    Spec("CumSum", cumsum, (D.F32, D.F64, D.I32)),
    # matmul, layout, cast
    Spec("MatMul", matmul_cases, FLOAT4),
    Spec("Cast", cast_cases, (D.F32, D.F64, D.F16, D.I32, D.U8)),
    Spec("Concat", concat_cases, (D.F32, D.I64)),
    Spec("Roll", roll_cases, (D.F32, D.I32)),
    Spec("Triu", triangular("Triu"), (D.F32, D.I64)),
    Spec("Tril", triangular("Tril"), (D.F32, D.U8)),
    Spec("Pad", pad_cases, (D.F32, D.I32)),
    Spec("Flip", flip_op, (D.F32, D.I64)),
    # indexing (u32 indices)
    Spec("IndexSelect", index_select_cases, (D.F32, D.I32)),
    Spec("Gather", gather_cases, (D.F32, D.I64)),
    Spec("IndexAdd", index_add_cases, (D.F32, D.I32)),
    Spec("ScatterAdd", scatter_add_cases, (D.F32, D.F64)),
    # softmax family
    Spec("LogSoftmaxLastDim", log_softmax, FLOAT4),
]
# Element-wise rows without a spec of their own are swept from their row, on
# "small" operands (|x| <= 1.5: inverse trig in and just outside its domain;
# shift counts -3..6, out-of-range ones included).
SPECS += [Spec(n, ew(n, ("small",) * 3), (D.F32 if D.F32 in d.dtypes else D.I32,))
          for n, d in OP_TABLE.items() if d.supported and d.category in ("unary", "binary")
          and n not in {s.op for s in SPECS}]
BY_NAME = {s.op: s for s in SPECS}


def claimed(spec: Spec) -> tuple:
    """Every dtype the op claims (``OpDef.dtypes``; None: any data dtype)."""
    base = spec.op.split("-")[0]
    ds = spec.dtypes or OP_TABLE[base].dtypes
    return tuple(d for d in DTYPES if ds is None or d in ds)


# Cases known to fail, each with why; strict, so a fix is noticed. (Empty: the
# numpy-only gaps for integer ReduceSumTo/MaxTo, Concat, Roll, Pad and the index
# ops closed when mlir-cpu gained kernels for every primitive.)
XFAIL: dict[tuple[str, DType], str] = {}


def _params(fast: bool):
    out = []
    for spec in SPECS:
        for dt in claimed(spec):
            if (dt in spec.fast_dtypes) != fast:
                continue
            marks = [pytest.mark.xfail(strict=True, raises=PassError, reason=XFAIL[spec.op, dt])] \
                if (spec.op, dt) in XFAIL else []
            out.append(pytest.param(spec.op, dt, id=f"{spec.op}-{dt.value}", marks=marks))
    return out


def _run(op: str, dt: DType):
    spec = BY_NAME[op]
    g, feed = Graph(), {}
    rng = np.random.default_rng(zlib.crc32(f"{op}-{dt.value}".encode()))
    case = Case(g, feed, rng, dt)
    terms = {}
    for label, t, n in spec.build(case, dt):
        g.output(t, name=label)
        terms[label] = n
    compile_and_compare(g, feed, terms)


def test_every_kernel_op_is_covered():
    """Each supported primitive with a kernel OpKind has a spec here."""
    covered = {s.op.split("-")[0] for s in SPECS}
    with_kernel = {n for n, d in OP_TABLE.items() if d.supported and d.op_kind is not None}
    no_kernel = {"LogSoftmaxLastDimBackward", "PadBackward"}  # tests/compiler/test_errors.py
    assert with_kernel - covered == no_kernel


@pytest.mark.parametrize("op,dt", _params(fast=True))
def test_primitive(op, dt):
    _run(op, dt)


@pytest.mark.slow
@pytest.mark.parametrize("op,dt", _params(fast=False))
def test_primitive_all_dtypes(op, dt):
    _run(op, dt)
