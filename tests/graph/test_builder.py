"""The builder API exactly as users write it, checked through the interpreter
against plain numpy, plus its error paths."""
import math

import numpy as np
import pytest

from compiler.errors import GraphBuildError, UnsupportedOpError
from compiler.graph import (Graph, Node, TensorType, concat, interpret, matmul, maximum,
                            where)
from compiler.graph.symbolic import Sym
from runtime.dtype import DType, bf16_to_f32

RNG = np.random.default_rng(1)


def run(g, **inputs):
    return interpret(g, inputs)


def ops_of(g):
    return [n.op for n in g.nodes]


def test_readme_example():
    g = Graph()
    x = g.input("x", (8, 64), "f32")
    wv = RNG.random((64, 32)).astype(np.float32)
    w = g.constant(wv, name="w")
    y = (x @ w).gelu().softmax(-1)
    g.output(y, name="y")
    assert y.shape == (8, 32) and y.dtype == DType.F32 and isinstance(y.dtype, DType)
    assert x.name == "x" and w.name == "w"
    xv = RNG.random((8, 64)).astype(np.float32)
    h = xv.astype(np.float64) @ wv
    h = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))  # exact GELU, the default
    e = np.exp(h - h.max(-1, keepdims=True))
    np.testing.assert_allclose(run(g, x=xv)["y"], e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_softmax_is_the_recipe_spelling():
    g = Graph()
    x = g.input("x", (2, 5), "float32")
    x.softmax()
    assert ops_of(g)[1:] == ["MaxDim", "Unsqueeze", "BroadcastTo", "Sub", "Exp", "SumDim",
                             "Unsqueeze", "BroadcastTo", "Div"]


def test_dtype_spellings():
    g = Graph()
    assert g.input("a", (1,), "float32").dtype == DType.F32
    assert g.input("b", (1,), DType.BF16).dtype == DType.BF16
    assert g.input("c", (1,), np.float16).dtype == DType.F16
    with pytest.raises(GraphBuildError, match="unknown dtype"):
        g.input("d", (1,), "float13")
    with pytest.raises(GraphBuildError, match="declared twice"):
        g.input("a", (1,), "f32")


def test_arithmetic_broadcast_and_scalars():
    g = Graph()
    a = g.input("a", (2, 3), "f32")
    b = g.input("b", (3,), "f32")
    c = g.input("c", (2, 1), "f32")
    outs = {
        "add": a + b, "sub": b - c, "mul": a * c, "div": a / b, "neg": -a,
        "s_add": a + 2, "r_add": 2 + a, "s_sub": a - 1.5, "r_sub": 1.5 - a,
        "s_mul": a * 3, "r_mul": 0.5 * a, "s_div": a / 4, "r_div": 1 / b,
        "pow": a.abs().pow(0.5), "powi": a ** 3, "max": maximum(a, c), "rem": a % 0.75,
    }
    for k, v in outs.items():
        g.output(v, name=k)
    assert g.node(outs["s_add"]).op == "AddScalar"
    assert g.node(outs["s_mul"]).op == "MulScalar"
    assert g.node(outs["powi"]).op == "PowI"
    av, bv, cv = (RNG.uniform(0.5, 2, s).astype(np.float32) for s in [(2, 3), (3,), (2, 1)])
    want = {
        "add": av + bv, "sub": bv - cv, "mul": av * cv, "div": av / bv, "neg": -av,
        "s_add": av + 2, "r_add": 2 + av, "s_sub": av - 1.5, "r_sub": 1.5 - av,
        "s_mul": av * 3, "r_mul": 0.5 * av, "s_div": av / 4, "r_div": 1 / bv,
        "pow": np.abs(av) ** 0.5, "powi": av ** 3, "max": np.maximum(av, cv),
        "rem": np.mod(av, np.float32(0.75)),
    }
    got = run(g, a=av, b=bv, c=cv)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, err_msg=k)
        assert got[k].dtype == np.float32


def test_no_implicit_promotion():
    g = Graph()
    a = g.input("a", (2,), "f32")
    i = g.input("i", (2,), "i32")
    with pytest.raises(GraphBuildError, match=r"Add\(f32\[2\], i32\[2\]\).*insert a Cast"):
        a + i
    with pytest.raises(GraphBuildError, match="not representable in i32"):
        i + 0.5
    with pytest.raises(GraphBuildError, match="not representable"):
        i / 0.5
    assert (i + 2).dtype == DType.I32
    assert (a + i.cast("f32")).dtype == DType.F32


def test_broadcast_error_names_node_and_shapes():
    g = Graph()
    a = g.input("a", (2, 3), "f32")
    b = g.input("b", (4,), "f32")
    with pytest.raises(GraphBuildError, match=r"Add\(f32\[2,3\], f32\[4\]\): shapes are not "
                                              r"broadcast-compatible"):
        a + b
    with pytest.raises(GraphBuildError, match=r"node %\d+ \(exp_\d+\): Exp\(i32\[2\]\): "
                                              r"operand 0 dtype i32 not supported"):
        g.input("i", (2,), "i32").exp()


def test_unary_methods():
    g = Graph()
    x = g.input("x", (3, 4), "f64")
    names = ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "silu", "erf", "abs",
             "sin", "cos", "floor", "ceil", "round", "sign", "neg", "sqr", "recip"]
    for m in names:
        g.output(getattr(x.abs() + 0.1, m)(), name=m)
    g.output(x.gelu(approximate="none"), name="gelu_erf")
    g.output(x.gelu(approximate="tanh"), name="gelu_tanh")
    xv = RNG.uniform(-2, 2, (3, 4))
    got = run(g, x=xv)
    p = np.abs(xv) + 0.1
    erf = np.vectorize(math.erf)
    want = {"exp": np.exp(p), "log": np.log(p), "sqrt": np.sqrt(p), "rsqrt": p ** -0.5,
            "tanh": np.tanh(p), "sigmoid": 1 / (1 + np.exp(-p)), "relu": p,
            "silu": p / (1 + np.exp(-p)), "erf": erf(p), "abs": p, "sin": np.sin(p),
            "cos": np.cos(p), "floor": np.floor(p), "ceil": np.ceil(p), "round": np.round(p),
            "sign": np.sign(p), "neg": -p, "sqr": p * p, "recip": 1 / p,
            "gelu_erf": 0.5 * xv * (1 + erf(xv / math.sqrt(2))),
            "gelu_tanh": 0.5 * xv * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                                 (xv + 0.044715 * xv ** 3)))}
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-12, err_msg=k)
    assert g.node(g.outputs["gelu_erf"]).op == "GeluErf"
    assert x.gelu().op == "GeluErf"  # PyTorch's and ONNX's default: exact
    with pytest.raises(GraphBuildError, match="approximate"):
        x.gelu(approximate="fast")


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), (-1, 1), (1, 2), (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(axis, keepdims):
    g = Graph()
    x = g.input("x", (2, 3, 4), "f32")
    for m in ("sum", "max", "min", "mean"):
        g.output(getattr(x, m)(axis, keepdims=keepdims), name=m)
    xv = RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    got = run(g, x=xv)
    ax = tuple(axis) if isinstance(axis, tuple) else axis
    for m in ("sum", "max", "min", "mean"):
        want = getattr(np, m)(xv, axis=ax, keepdims=keepdims)
        assert got[m].shape == want.shape, m
        np.testing.assert_allclose(got[m], want, rtol=1e-5, atol=1e-6, err_msg=m)


def test_adjacent_static_axes_reduce_once():
    """A reduction over adjacent static axes (a global pool's H, W) is one
    reduction over them reshaped into one axis; a symbolic one stays per axis."""
    g = Graph()
    x = g.input("x", (2, 3, 4, 5), "f32")
    for m in ("sum", "max", "min", "mean"):
        g.output(getattr(x, m)((2, 3), keepdims=True), name=m)
    assert ops_of(g).count("MeanDim") == 1 and ops_of(g).count("SumDim") == 1
    xv = RNG.uniform(-1, 1, (2, 3, 4, 5)).astype(np.float32)
    got = run(g, x=xv)
    for m in ("sum", "max", "min", "mean"):
        want = getattr(np, m)(xv, axis=(2, 3), keepdims=True)
        assert got[m].shape == want.shape, m
        np.testing.assert_allclose(got[m], want, rtol=1e-5, atol=1e-6, err_msg=m)
    g = Graph()
    x = g.input("x", (2, 3, Sym("h"), 5), "f32")
    g.output(x.mean((2, 3)), name="y")
    assert ops_of(g).count("MeanDim") == 2


def test_arg_cumsum_clamp_where_compare():
    g = Graph()
    x = g.input("x", (3, 4), "f32")
    y = g.input("y", (4,), "f32")
    outs = {"argmax": x.argmax(1), "argmin": x.argmin(axis=0, keepdims=True),
            "argmax_all": x.argmax(), "cumsum": x.cumsum(0), "clamp": x.clamp(-0.5, 0.5),
            "clamp_lo": x.clamp(min=0), "lt": x < y, "le": x <= 0.1, "gt": x > y,
            "ge": x >= y, "eq": x == x, "ne": x != y,
            "where": where(x > 0, x, 0.0), "where2": where(x < y, 1.0, y),
            "masked": x.masked_fill(y > 0, -1.0)}
    for k, v in outs.items():
        g.output(v, name=k)
    assert outs["lt"].dtype == DType.U8
    assert outs["argmax"].dtype == DType.U32
    xv = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)
    yv = RNG.uniform(-1, 1, (4,)).astype(np.float32)
    got = run(g, x=xv, y=yv)
    want = {"argmax": xv.argmax(1), "argmin": xv.argmin(0)[None], "argmax_all": xv.argmax(),
            "cumsum": np.cumsum(xv, 0), "clamp": np.clip(xv, -0.5, 0.5),
            "clamp_lo": np.maximum(xv, 0), "lt": xv < yv, "le": xv <= np.float32(0.1),
            "gt": xv > yv, "ge": xv >= yv, "eq": xv == xv, "ne": xv != yv,
            "where": np.where(xv > 0, xv, 0), "where2": np.where(xv < yv, 1, yv),
            "masked": np.where(yv > 0, -1, xv)}
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-6, err_msg=k)
    with pytest.raises(GraphBuildError, match="condition dtype f32 must be u8"):
        where(x, x, x)
    with pytest.raises(GraphBuildError, match="truth value"):
        bool(x < y)


def test_shape_methods():
    g = Graph()
    x = g.input("x", (2, 3, 4), "f32")
    outs = {"reshape": x.reshape(4, -1), "reshape2": x.reshape((6, 4)), "T": x.T,
            "transpose": x.transpose((0, 2, 1)), "bcast": x.broadcast_to((5, 2, 3, 4)),
            "unsq": x.unsqueeze(-1), "squeeze": x[:, :1].squeeze(1), "flip": x.flip(1),
            "roll": x.roll(2, -1), "triu": x.triu(1), "tril": x.tril(), "pad": x.pad(1, 2.0),
            "pad2": x.pad([(0, 0), (1, 0), (0, 2)]), "cast": x.cast("bf16"),
            "concat": concat([x, x[:, :2]], 1), "ls": x.log_softmax(),
            "ls1": x.log_softmax(1), "swap": x.swapaxes(0, 2), "contig": x.T.contiguous()}
    for k, v in outs.items():
        g.output(v, name=k)
    assert g.node(outs["transpose"]).op == "Transpose"
    assert g.node(outs["T"]).op == "Permute"
    assert x.reshape(2, 3, 4) is x
    xv = RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    got = run(g, x=xv)

    def log_softmax(v, a):
        s = v - v.max(a, keepdims=True)
        return s - np.log(np.exp(s).sum(a, keepdims=True))
    want = {"reshape": xv.reshape(4, 6), "reshape2": xv.reshape(6, 4), "T": xv.T,
            "transpose": xv.transpose(0, 2, 1), "bcast": np.broadcast_to(xv, (5, 2, 3, 4)),
            "unsq": xv[..., None], "squeeze": xv[:, 0], "flip": xv[:, ::-1],
            "roll": np.roll(xv, 2, -1), "triu": np.triu(xv, 1), "tril": np.tril(xv),
            "pad": np.pad(xv, 1, constant_values=2.0),
            "pad2": np.pad(xv, [(0, 0), (1, 0), (0, 2)]),
            "concat": np.concatenate([xv, xv[:, :2]], 1), "ls": log_softmax(xv, -1),
            "ls1": log_softmax(xv, 1), "swap": xv.swapaxes(0, 2), "contig": xv.T}
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-6, err_msg=k)
    np.testing.assert_allclose(bf16_to_f32(got["cast"]), xv, rtol=1e-2)
    with pytest.raises(GraphBuildError, match="cannot infer -1"):
        x.reshape(5, -1)
    with pytest.raises(GraphBuildError, match="axis 3 out of range for rank 3"):
        x.sum(3)
    with pytest.raises(GraphBuildError, match="repeated axis"):
        x.sum((0, -3))


@pytest.mark.parametrize("key", [
    1, -1, (slice(None), 2), (Ellipsis, 0), (1, Ellipsis, slice(1, 3)), (None, 0),
    (slice(1, None), None, slice(None, -1)), (Ellipsis,), (0, 1, 2), slice(5, 9),
])
def test_getitem(key):
    g = Graph()
    x = g.input("x", (2, 3, 4), "f32")
    g.output(x[key], name="y")
    xv = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    got = run(g, x=xv)["y"]
    np.testing.assert_array_equal(got, xv[key])
    assert got.shape == xv[key].shape


def test_getitem_errors():
    g = Graph()
    x = g.input("x", (2, 3), "f32")
    with pytest.raises(GraphBuildError, match="out of range"):
        x[2]
    with pytest.raises(GraphBuildError, match="step 1"):
        x[::2]
    with pytest.raises(GraphBuildError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(GraphBuildError, match="index_select"):
        x[[0, 1]]


@pytest.mark.parametrize("sa,sb", [
    ((4, 3), (3, 5)), ((2, 4, 3), (3, 5)), ((3,), (3, 5)), ((4, 3), (3,)), ((3,), (3,)),
    ((1, 4, 3), (2, 3, 5)), ((2, 1, 4, 3), (3, 3, 5)),
])
def test_matmul_numpy_semantics(sa, sb):
    g = Graph()
    a = g.input("a", sa, "f32")
    b = g.input("b", sb, "f32")
    g.output(matmul(a, b), name="y")
    av = RNG.uniform(-1, 1, sa).astype(np.float32)
    bv = RNG.uniform(-1, 1, sb).astype(np.float32)
    got = run(g, a=av, b=bv)["y"]
    np.testing.assert_allclose(got, av @ bv, rtol=1e-5, atol=1e-6)
    assert got.shape == (av @ bv).shape


def test_matmul_gqa_and_errors():
    g = Graph()
    q = g.input("q", (1, 8, 4, 16), "f32")
    k = g.input("k", (1, 2, 16, 4), "f32")
    s = q @ k
    assert s.shape == (1, 8, 4, 4)
    assert g.node(s).op == "MatMul"
    assert g.node(g.node(s).inputs[1]).op == "Input"  # no broadcast for the GQA axis
    with pytest.raises(GraphBuildError, match="contraction mismatch"):
        q @ q
    with pytest.raises(GraphBuildError, match="rank >= 1"):
        matmul(g.input("s", (), "f32"), q)
    m = g.input("m", (3, 16, 4), "f32")
    with pytest.raises(GraphBuildError, match="neither broadcast nor form a GQA"):
        q.reshape(8, 4, 16) @ m


def test_indexing_methods():
    g = Graph()
    x = g.input("x", (4, 3), "f32")
    i = g.input("i", (2,), "u32")
    outs = {"sel": x.index_select(i, 0), "sel_np": x.index_select(np.array([1, 1], np.uint32),
                                                                  axis=1),
            "gather": x.gather(np.array([[0], [2], [1], [0]], np.uint32), 1),
            "iadd": x.index_add(0, i, x[:2]),
            "sadd": x.scatter_add(0, np.array([[3, 0, 1]], np.uint32), x[:1])}
    for k, v in outs.items():
        g.output(v, name=k)
    xv = RNG.uniform(-1, 1, (4, 3)).astype(np.float32)
    iv = np.array([3, 3], np.uint32)
    got = run(g, x=xv, i=iv)
    iadd = xv.copy()
    np.add.at(iadd, [3, 3], xv[:2])
    sadd = xv.copy()
    for j, r in enumerate([3, 0, 1]):
        sadd[r, j] += xv[0, j]
    want = {"sel": xv[[3, 3]], "sel_np": xv[:, [1, 1]],
            "gather": np.take_along_axis(xv, np.array([[0], [2], [1], [0]]), 1),
            "iadd": iadd, "sadd": sadd}
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-6, err_msg=k)


def test_add_node_generic_and_unsupported():
    g = Graph()
    x = g.input("x", (2, 3), "f32")
    y = g.add_node("SumDim", [x], {"axis": 1}, name="rowsum")
    assert y.shape == (2,) and y.name == "rowsum"
    assert isinstance(g.node(y), Node) and g[y.id].params == {"axis": 1}
    it = g.add_node("Iota", [], {"len": 3})
    assert it.dtype == DType.F32
    with pytest.raises(UnsupportedOpError,
                       match=r"node %\d+ \(relu_inplace_\d+\): op ReluInplace is not "
                             r"supported yet.*f32\[2,3\]"):
        g.add_node("ReluInplace", [x])
    with pytest.raises(UnsupportedOpError, match="not supported yet"):
        g.add_node("Scan", [x, x], {"n_xs": 1, "bound": 2, "emit": True, "early_exit": False})
    with pytest.raises(GraphBuildError, match="unknown op 'Softmax'"):
        g.add_node("Softmax", [x])
    with pytest.raises(GraphBuildError, match="did you mean SumDim"):
        g.add_node("SumDm", [x], {"axis": 0})
    with pytest.raises(GraphBuildError, match="takes 2 operand"):
        g.add_node("Add", [x])
    with pytest.raises(GraphBuildError, match=r"node %\d+ \(bad\): SumDim\(f32\[2,3\]\): axis 5"):
        g.add_node("SumDim", [x], {"axis": 5}, name="bad")
    with pytest.raises(GraphBuildError, match="not a node of this graph"):
        g.add_node("Neg", [99])
    with pytest.raises(GraphBuildError, match="another graph"):
        g.add_node("Neg", [Graph().input("z", (1,), "f32")])
    n = len(g)
    with pytest.raises(GraphBuildError):
        g.add_node("Add", [x, it])
    assert len(g) == n  # a rejected node is not appended


class _SplitHalves:
    """A two-output fused entry: the halves of the last axis."""
    name = "SplitHalves"

    def infer(self, types, params):
        (t,) = types
        if t.shape[-1] % 2:
            raise GraphBuildError(f"SplitHalves: last axis {t.shape[-1]} is odd")
        half = TensorType(t.shape[:-1] + (t.shape[-1] // 2,), t.dtype)
        return [half, half]

    def reference(self, inputs, params):
        x = inputs[0]
        h = x.shape[-1] // 2
        return [x[..., :h] * params["scale"], x[..., h:]]


class _Double:
    name = "Double"

    def infer(self, types, params):
        return types[0]

    def reference(self, inputs, params):
        return inputs[0] * 2


def test_add_fused_and_interpret():
    g = Graph()
    x = g.input("x", (3, 4), "f32")
    s = g.add_fused(_SplitHalves(), [x], {"scale": 3.0})
    node = g.node(s)
    assert node.op == "Fused" and isinstance(node.fused, _SplitHalves)
    assert node.shape == (3, 2) and len(node.output_types) == 2
    d = g.add_fused(_Double(), [s])  # consumers read slot 0
    g.output(s, name="split")
    g.output(d, name="double")
    xv = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)
    got = run(g, x=xv)
    a, b = got["split"]
    np.testing.assert_allclose(a, xv[:, :2] * 3)
    np.testing.assert_array_equal(b, xv[:, 2:])
    np.testing.assert_allclose(got["double"], xv[:, :2] * 6)
    with pytest.raises(GraphBuildError,
                       match=r"node %\d+ \(split_halves_\d+\): Fused\[SplitHalves\]: .*odd"):
        g.add_fused(_SplitHalves(), [g.input("o", (3,), "f32")])
    with pytest.raises(GraphBuildError, match="has no 'name'"):
        g.add_fused(object(), [x])


def test_constants():
    g = Graph()
    c = g.constant([1.0, 2.0])
    assert c.dtype == DType.F32 and g.node(c).op == "Const"
    b = g.constant(np.array([1.5, 2.0], np.float32), name="b", dtype="bf16")
    assert b.dtype == DType.BF16 and g.constants["b"].dtype == np.uint16
    i = g.constant(np.arange(3))
    assert i.dtype == DType.I64
    with pytest.raises(GraphBuildError, match="declared twice"):
        g.constant([1.0], name="b")
    g.output(b * 2, name="y")
    np.testing.assert_array_equal(bf16_to_f32(run(g)["y"]), [3.0, 4.0])
    with pytest.raises(ValueError):
        g.constants["b"][0] = 1  # payloads are frozen


def test_rewrite_input():
    g = Graph()
    x = g.input("x", (2,), "f32")
    y = g.input("y", (2,), "f32")
    z = x + y
    g.rewrite_input(z, 1, x)
    assert g.node(z).inputs == (x.id, x.id)
    with pytest.raises(GraphBuildError, match="changes the operand type"):
        g.rewrite_input(z, 0, g.input("w", (3,), "f32"))


def test_constant_copies_and_never_touches_the_callers_array():
    g = Graph()
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    c = g.constant(w, name="w")
    assert w.flags.writeable  # the caller's array keeps its flags
    w[0, 0] = 100.0           # ... and later writes do not reach the graph
    assert g.constants["w"][0, 0] == 0.0 and not g.constants["w"].flags.writeable
    g.output(c, name="y")
    assert run(g)["y"][0, 0] == 0.0


def test_constant_converts_byte_swapped_arrays_to_native_order():
    g = Graph()
    be = np.array([1.5, -2.0, 3.25], dtype=">f4")
    c = g.constant(be)
    assert c.dtype == DType.F32 and g.constants[c.name].dtype.isnative
    assert g.constants[c.name].tolist() == [1.5, -2.0, 3.25]
    i = g.constant(np.array([1, 2], dtype=">i8"), dtype="i32")
    assert i.dtype == DType.I32 and g.constants[i.name].tolist() == [1, 2]


@pytest.mark.parametrize("value,want", [
    (np.zeros(2), DType.F64),          # a numpy array keeps its dtype (numpy)
    (np.float64(1.5), DType.F64),      # so does a numpy scalar
    (np.zeros(2, np.float16), DType.F16),
    (np.array([True, False]), DType.U8),
    (1.5, DType.F32),                  # python floats: f32 (PyTorch's default dtype)
    ([1.0, 2.0], DType.F32),
    (3, DType.I64),                    # python ints: i64 (torch.tensor(3))
    ([1, 2], DType.I64),
    (True, DType.U8),
])
def test_constant_default_dtype(value, want):
    assert Graph().constant(value).dtype == want
