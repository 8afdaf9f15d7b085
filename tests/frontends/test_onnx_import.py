"""ONNX import: models built with onnx.helper, imported, run on the numpy
reference interpreter (and compiled for the CPU where it matters), compared
with onnxruntime."""
import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import compiler  # noqa: E402
from compiler.frontends.onnx import OnnxImportError, import_model  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def vi(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def make(nodes, inputs, outputs, inits=None, opset=17):
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    g = helper.make_graph(nodes, "t", inputs, outputs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8 if opset <= 17 else 10
    return onnx.shape_inference.infer_shapes(m)  # the checker wants output shapes


def node(op, ins, outs, name=None, **attrs):
    return helper.make_node(op, ins, outs, name=name or f"{op}_{outs[0]}", **attrs)


def ort_run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def check(model, feeds, *, input_shapes=None, rtol=1e-5, atol=1e-5, compile_it=False):
    """Import, interpret (and optionally compile); compare with onnxruntime."""
    want = ort_run(model, feeds)
    g = import_model(model, input_shapes=input_shapes)
    runs = [compiler.interpret(g, feeds)]
    if compile_it:
        m = compiler.compile(g)
        got = m(**feeds)
        runs.append(got if isinstance(got, dict) else {next(iter(g.outputs)): got})
    for got in runs:
        assert set(got) == set(want)
        for k, w in want.items():
            v = got[k]
            if w.dtype == np.bool_:
                w = w.astype(np.uint8)
            assert v.shape == w.shape, k
            if w.dtype.kind == "f":
                np.testing.assert_allclose(v, w, rtol=rtol, atol=atol, err_msg=k)
            else:
                np.testing.assert_array_equal(v, w, err_msg=k)
    return g


def rand(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


# ---------------------------------------------------------------------------
# element-wise
# ---------------------------------------------------------------------------
def test_elementwise_math_with_broadcast_and_scalars():
    nodes = [
        node("Add", ["x", "b"], ["a"]), node("Mul", ["two", "a"], ["m"]),
        node("Sub", ["one", "m"], ["s"]), node("Div", ["s", "b"], ["d"]),
        node("Pow", ["d", "two"], ["p2"]), node("Abs", ["d"], ["ab"]),
        node("Pow", ["ab", "half"], ["ph"]), node("Sqrt", ["ab"], ["sq"]),
        node("Exp", ["x"], ["e"]), node("Add", ["sq", "one"], ["sq1"]),
        node("Log", ["sq1"], ["lg"]), node("Tanh", ["x"], ["th"]),
        node("Erf", ["x"], ["er"]), node("Relu", ["x"], ["rl"]),
        node("Sigmoid", ["x"], ["sg"]), node("Neg", ["x"], ["ng"]),
        node("Reciprocal", ["sq1"], ["rc"]), node("Max", ["x", "b", "th"], ["mx"]),
        node("Min", ["x", "b"], ["mn"]), node("Clip", ["x", "lo", "hi"], ["cl"]),
        node("Clip", ["x", "", "hi"], ["cl2"]), node("LeakyRelu", ["x"], ["lr"], alpha=0.1),
        node("Floor", ["x"], ["fl"]), node("Sum", ["x", "b", "x"], ["sm"]),
        node("Mean", ["x", "b"], ["me"]), node("HardSwish", ["x"], ["hs"]),
    ]
    outs = ["p2", "ph", "e", "lg", "er", "rl", "sg", "ng", "rc", "mx", "mn", "cl", "cl2",
            "lr", "fl", "sm", "me", "hs"]
    m = make(nodes, [vi("x", shape=[3, 4])], [vi(o) for o in outs],
             {"b": rand(4, lo=0.5, hi=1.5), "two": np.float32(2), "one": np.float32(1),
              "half": np.float32(0.5), "lo": np.float32(-0.5), "hi": np.float32(0.7)})
    g = check(m, {"x": rand(3, 4)})
    ops = {n.op for n in g.nodes}
    assert {"Sqr", "AddScalar", "MulScalar", "Clamp"} <= ops  # scalar constants stay scalar


def test_compare_logic_where_cast():
    nodes = [
        node("Less", ["x", "y"], ["lt"]), node("Greater", ["x", "zero"], ["gt"]),
        node("Equal", ["i", "j"], ["eq"]), node("Not", ["lt"], ["nt"]),
        node("And", ["gt", "nt"], ["an"]), node("Cast", ["eq"], ["eq2"], to=TensorProto.BOOL),
        node("Or", ["lt", "eq2"], ["orr"]),
        node("Where", ["an", "x", "y"], ["w"]), node("Cast", ["x"], ["xi"], to=TensorProto.INT32),
        node("Cast", ["i"], ["if"], to=F), node("Cast", ["x"], ["xb"], to=TensorProto.BOOL),
        node("LessOrEqual", ["x", "y"], ["le"]), node("Xor", ["lt", "gt"], ["xo"]),
    ]
    m = make(nodes, [vi("x", shape=[2, 5]), vi("y", shape=[5]),
                     vi("i", TensorProto.INT64, [2, 5]), vi("j", TensorProto.INT64, [5])],
             [vi(o, e) for o, e in (("lt", TensorProto.BOOL), ("an", TensorProto.BOOL),
                                    ("orr", TensorProto.BOOL), ("w", F),
                                    ("xi", TensorProto.INT32), ("if", F),
                                    ("xb", TensorProto.BOOL), ("le", TensorProto.BOOL),
                                    ("xo", TensorProto.BOOL))],
             {"zero": np.float32(0)})
    x = rand(2, 5) * 3
    x[0, 0] = 0.0
    check(m, {"x": x, "y": rand(5), "i": RNG.integers(0, 3, (2, 5)),
              "j": RNG.integers(0, 3, 5)})


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_logsoftmax_any_axis(axis):
    m = make([node("Softmax", ["x"], ["s"], axis=axis),
              node("LogSoftmax", ["x"], ["l"], axis=axis)],
             [vi("x", shape=[3, 4, 5])], [vi("s"), vi("l")], opset=13)
    check(m, {"x": rand(3, 4, 5) * 4})


def needs_opset(n):
    return pytest.mark.skipif(onnx.defs.onnx_opset_version() < n,
                              reason=f"the installed onnx predates opset {n}")


@needs_opset(20)
def test_gelu_op_opset20():
    m = make([node("Gelu", ["x"], ["a"]), node("Gelu", ["x"], ["b"], approximate="tanh")],
             [vi("x", shape=[4, 8])], [vi("a"), vi("b")], opset=20)
    g = check(m, {"x": rand(4, 8) * 3})
    assert {"GeluErf", "Gelu"} <= {n.op for n in g.nodes}


# ---------------------------------------------------------------------------
# reductions (axes as attribute before opset 18, as input after)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions_axes_attribute_opset13(keepdims):
    nodes = [node("ReduceMean", ["x"], ["me"], axes=[-1], keepdims=keepdims),
             node("ReduceMax", ["x"], ["mx"], axes=[0, 2], keepdims=keepdims),
             node("ReduceMin", ["x"], ["mn"], keepdims=keepdims),
             node("ReduceSum", ["x", "ax"], ["sm"], keepdims=keepdims),
             node("ReduceL2", ["x"], ["l2"], axes=[1], keepdims=keepdims),
             node("ArgMax", ["x"], ["am"], axis=1, keepdims=keepdims)]
    m = make(nodes, [vi("x", shape=[2, 3, 4])],
             [vi(o) for o in ("me", "mx", "mn", "sm", "l2")] + [vi("am", TensorProto.INT64)],
             {"ax": np.array([1], np.int64)}, opset=13)
    check(m, {"x": rand(2, 3, 4)})


def test_reductions_axes_input_opset18_and_empty_axes():
    nodes = [node("ReduceMean", ["x", "ax"], ["me"]),
             node("ReduceSum", ["x", "none"], ["all"], keepdims=0),
             node("ReduceMax", ["x", "none"], ["same"], noop_with_empty_axes=1),
             node("ReduceSumSquare", ["x", "ax"], ["ss"], keepdims=0)]
    m = make(nodes, [vi("x", shape=[2, 3, 4])], [vi(o) for o in ("me", "all", "same", "ss")],
             {"ax": np.array([-1, 0], np.int64), "none": np.zeros(0, np.int64)}, opset=18)
    check(m, {"x": rand(2, 3, 4)})


# ---------------------------------------------------------------------------
# shape subgraphs fold at import
# ---------------------------------------------------------------------------
def test_shape_subgraph_folds_to_constants():
    i64 = TensorProto.INT64
    nodes = [
        node("Shape", ["x"], ["sh"]),
        node("Gather", ["sh", "i0"], ["b"], axis=0),
        node("Gather", ["sh", "one"], ["s"], axis=0),
        node("Unsqueeze", ["b", "ax0"], ["bu"]), node("Unsqueeze", ["s", "ax0"], ["su"]),
        node("Div", ["hid", "heads"], ["hd"]),
        node("Concat", ["bu", "su", "heads", "hd"], ["tgt"], axis=0),
        node("Reshape", ["x", "tgt"], ["r"]),
        node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
        node("ConstantOfShape", ["sh"], ["ones"],
             value=numpy_helper.from_array(np.array([1.0], np.float32))),
        node("Add", ["x", "ones"], ["x1"]),
        node("Range", ["zero", "s", "one"], ["pos"]),
        node("Cast", ["pos"], ["posf"], to=F),
        node("Slice", ["sh", "ax0", "i1"], ["sh2a"]),
        node("Concat", ["sh2a", "i1", "i1"], ["sh2"], axis=0),  # [2, 1, 1] -> broadcast
        node("Expand", ["posf", "sh2"], ["pe"]),
        node("Constant", [], ["c"], value_floats=[0.5]),
        node("Mul", ["pe", "c"], ["pe2"]),
    ]
    m = make(nodes, [vi("x", shape=[2, 6, 8])],
             [vi("t"), vi("x1"), vi("pe2")],
             {"i0": np.array([0], np.int64)[0], "i1": np.array([1], np.int64),
              "ax0": np.array([0], np.int64), "hid": np.array([8], np.int64),
              "heads": np.array([2], np.int64), "zero": np.array(0, np.int64),
              "one": np.array([1], np.int64)[0]})
    g = check(m, {"x": rand(2, 6, 8)})
    # nothing integer survives into the graph: every shape computation folded
    assert all(n.dtype.is_float for n in g.nodes), g.dump()


# ---------------------------------------------------------------------------
# data movement
# ---------------------------------------------------------------------------
def test_reshape_transpose_flatten_squeeze_split_concat_tile():
    nodes = [
        node("Reshape", ["x", "shp"], ["r"]), node("Transpose", ["r"], ["t"]),
        node("Flatten", ["x"], ["f"], axis=2), node("Unsqueeze", ["x", "ax"], ["u"]),
        node("Squeeze", ["u", "ax"], ["sq"]), node("Split", ["x", "sp"], ["p0", "p1"], axis=2),
        node("Concat", ["p1", "p0", "x"], ["cc"], axis=-1), node("Tile", ["x", "reps"], ["tl"]),
        node("Identity", ["x"], ["id"]), node("Dropout", ["x"], ["dr"]),
    ]
    m = make(nodes, [vi("x", shape=[2, 3, 4])],
             [vi(o) for o in ("t", "f", "sq", "p0", "p1", "cc", "tl", "id", "dr")],
             {"shp": np.array([0, -1, 2], np.int64), "ax": np.array([1, -1], np.int64),
              "sp": np.array([1, 3], np.int64), "reps": np.array([1, 2, 1], np.int64)})
    check(m, {"x": rand(2, 3, 4)})


def test_split_num_outputs_opset18():
    m = make([node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)],
             [vi("x", shape=[2, 7])], [vi("a"), vi("b"), vi("c")], opset=18)
    check(m, {"x": rand(2, 7)})


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], [1], [1]), ([0, -3], [2, 100], [0, 2], [1, 1]), ([0], [5], [2], [2]),
    ([-1], [-100], [2], [-1]), ([3], [0], [2], [-2]), ([2], [2], [1], [1]),
])
def test_slice(starts, ends, axes, steps):
    ins = {"st": np.array(starts, np.int64), "en": np.array(ends, np.int64),
           "ax": np.array(axes, np.int64), "sp": np.array(steps, np.int64)}
    m = make([node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], [vi("x", shape=[3, 4, 5])],
             [vi("y")], ins)
    check(m, {"x": rand(3, 4, 5)})


def test_gather_constant_and_runtime_indices_gather_elements_expand():
    i64 = TensorProto.INT64
    nodes = [node("Gather", ["emb", "ids"], ["e"], axis=0),
             node("Gather", ["x", "ci"], ["g1"], axis=1),
             node("Gather", ["x", "sc"], ["g2"], axis=-1),
             node("GatherElements", ["x", "ge"], ["g3"], axis=1),
             node("Expand", ["v", "es"], ["ex"])]
    m = make(nodes, [vi("x", shape=[2, 4]), vi("ids", i64, [2, 3]), vi("v", shape=[3, 1])],
             [vi(o) for o in ("e", "g1", "g2", "g3", "ex")],
             {"emb": rand(10, 6), "ci": np.array([[3, -1], [0, 2]], np.int64),
              "sc": np.array(-2, np.int64), "ge": np.array([[1, -1], [0, 3]], np.int64),
              "es": np.array([2, 1, 4], np.int64)})
    check(m, {"x": rand(2, 4), "ids": np.array([[1, 9, -1], [0, 0, 5]], np.int64),
              "v": rand(3, 1)})


# ---------------------------------------------------------------------------
# matmul family, normalization, convolution
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("ta,tb,alpha,beta", [(0, 0, 1.0, 1.0), (1, 1, 0.5, 2.0),
                                              (0, 1, 1.0, 1.0)])
def test_gemm(ta, tb, alpha, beta):
    a = rand(*((5, 3) if ta else (3, 5)))
    b = rand(*((4, 5) if tb else (5, 4)))
    m = make([node("Gemm", ["a", "b", "c"], ["y"], transA=ta, transB=tb, alpha=alpha,
                   beta=beta)],
             [vi("a", shape=list(a.shape))], [vi("y")], {"b": b, "c": rand(4)})
    g = check(m, {"a": a})
    if (alpha, beta) == (1.0, 1.0):
        assert any(n.op == "Fused" and n.fused.name == "FusedLinear" for n in g.nodes)


def test_matmul_batched_and_bias_add_becomes_linear():
    nodes = [node("MatMul", ["x", "w"], ["mm"]), node("Add", ["bias", "mm"], ["y"]),
             node("MatMul", ["x", "xt"], ["bb"]), node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
             node("MatMul", ["x", "w"], ["nobias"])]
    nodes = [nodes[0], nodes[1], nodes[3], nodes[2], nodes[4]]
    m = make(nodes, [vi("x", shape=[2, 3, 8])], [vi("y"), vi("bb"), vi("nobias")],
             {"w": rand(8, 5), "bias": rand(5)})
    g = check(m, {"x": rand(2, 3, 8)})
    assert sum(1 for n in g.nodes if n.op == "Fused" and n.fused.name == "FusedLinear") == 1


def test_linear_and_gelu_match_through_identity_aliased_initializers():
    # torch.onnx.export of copied layers (nn.TransformerEncoder) shares one
    # initializer and names the copies with Identity nodes; the fused-op
    # spellings must still be found behind them.
    s2, one, half = (np.array(v, np.float32) for v in (math.sqrt(2), 1.0, 0.5))
    nodes = [node("Identity", ["w"], ["w1"]), node("Identity", ["bias"], ["b1"]),
             node("Identity", ["s2"], ["s2b"]),
             node("MatMul", ["x", "w1"], ["mm"]), node("Add", ["b1", "mm"], ["h"]),
             node("Div", ["h", "s2b"], ["d"]), node("Erf", ["d"], ["e"]),
             node("Add", ["e", "one"], ["e1"]), node("Mul", ["h", "e1"], ["m"]),
             node("Mul", ["m", "half"], ["y"])]
    m = make(nodes, [vi("x", shape=[2, 3, 8])], [vi("y")],
             {"w": rand(8, 5), "bias": rand(5), "s2": s2, "one": one, "half": half})
    g = check(m, {"x": rand(2, 3, 8)})
    assert _fused_names(g) == ["FusedLinear"]
    assert sum(1 for n in g.nodes if n.op == "GeluErf") == 1, [n.op for n in g.nodes]


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_normalization(axis):
    shape = [2, 3, 6]
    wshape = shape[axis:] if axis != -1 else shape[-1:]
    m = make([node("LayerNormalization", ["x", "w", "b"], ["y"], axis=axis, epsilon=1e-3)],
             [vi("x", shape=shape)], [vi("y")], {"w": rand(*wshape), "b": rand(*wshape)})
    g = check(m, {"x": rand(*shape)}, atol=2e-5)
    assert any(n.op == "Fused" and n.fused.name == "LayerNormLastDim" for n in g.nodes)


@pytest.mark.parametrize("attrs", [
    dict(pads=[1, 1, 1, 1]), dict(pads=[0, 1, 2, 0], strides=[2, 1]),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]), dict(group=2, pads=[1, 0, 1, 0]),
    dict(dilations=[2, 1], pads=[2, 1, 2, 1]), dict(dilations=[2, 2], strides=[1, 2]),
])
def test_conv(attrs):
    w = rand(4, 4 // attrs.get("group", 1), 3, 3)
    m = make([node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], **attrs)],
             [vi("x", shape=[1, 4, 7, 6])], [vi("y")], {"w": w, "b": rand(4)})
    check(m, {"x": rand(1, 4, 7, 6)}, atol=1e-4)


# ---------------------------------------------------------------------------
# an encoder block as PyTorch exports it, interpreted and compiled
# ---------------------------------------------------------------------------
def encoder_block(hidden, heads, ffn, seq, batch=1, opset=17, decomposed_ln=False):
    """A BERT-style encoder layer from token ids, as PyTorch exports it: word +
    position (Range over the Shape-computed length) + token-type Gather
    embeddings and a LayerNorm; MatMul+Add projections, heads by
    Reshape/Transpose, Div-scaled scores plus the additive mask built from the
    attention-mask input (Unsqueeze -> Cast -> Sub from 1 -> Mul by the f32
    minimum), Softmax, erf GELU, residual LayerNorms."""
    d = hidden // heads
    inits, nodes = {}, []

    def w(name, *shape, scale=None):
        inits[name] = rand(*shape) * (scale if scale is not None else 1 / math.sqrt(shape[0]))
        return name

    def n(op, ins, out, **kw):
        nodes.append(node(op, ins, [out], **kw))
        return out

    def layer_norm(x, p):
        wn, bn = w(p + ".w", hidden, scale=1.0), w(p + ".b", hidden, scale=0.1)
        if not decomposed_ln:
            return n("LayerNormalization", [x, wn, bn], p + ".y", axis=-1, epsilon=1e-12)
        mu = n("ReduceMean", [x], p + ".mu", axes=[-1])
        c = n("Sub", [x, mu], p + ".c")
        v = n("ReduceMean", [n("Pow", [c, "two"], p + ".sq")], p + ".var", axes=[-1])
        s = n("Sqrt", [n("Add", [v, "eps"], p + ".ve")], p + ".sd")
        return n("Add", [n("Mul", [n("Div", [c, s], p + ".n"), wn], p + ".nw"), bn], p + ".y")

    def linear(x, p, k, m):
        return n("Add", [w(p + ".bias", m, scale=0.1), n("MatMul", [x, w(p + ".w", k, m)],
                                                             p + ".mm")], p + ".y")

    def heads_of(x, p):  # [B,S,H] -> [B,heads,S,d] through a Shape-computed target
        r = n("Reshape", [x, "heads_shape"], p + ".r")
        return n("Transpose", [r], p + ".t", perm=[0, 2, 1, 3])

    vocab, types = 50, 2
    ids = ["input_ids", "token_type_ids"]
    n("Gather", [w("word_emb", vocab, hidden, scale=1.0), "input_ids"], "we")
    n("Gather", [n("Shape", ["input_ids"], "ids_shape"), "one_i"], "seq_len")
    n("Range", ["zero_i", "seq_len", "one_i"], "pos_range")
    n("Unsqueeze", ["pos_range", "zero1"], "position_ids")
    n("Gather", [w("pos_emb", seq, hidden, scale=1.0), "position_ids"], "pe")
    n("Gather", [w("type_emb", types, hidden, scale=1.0), "token_type_ids"], "te")
    emb = n("Add", [n("Add", ["we", "pe"], "wpe"), "te"], "emb")
    layer_norm(emb, "emb_ln")
    nodes[-1].output[0] = "x"
    inits.update({"zero_i": np.array(0, np.int64), "one_i": np.array(1, np.int64),
                  "zero1": np.array([0], np.int64),
                  "fmin": np.float32(np.finfo(np.float32).min)})
    n("Shape", ["x"], "xs")
    n("Slice", ["xs", "z1", "two1"], "bs")
    n("Concat", ["bs", "hd_tail"], "heads_shape", axis=0)
    inits.update({"z1": np.array([0], np.int64), "two1": np.array([2], np.int64),
                  "hd_tail": np.array([heads, d], np.int64), "two": np.float32(2),
                  "eps": np.float32(1e-12), "sqrt_d": np.float32(math.sqrt(d)),
                  "sqrt2": np.float32(math.sqrt(2)), "one": np.float32(1),
                  "half": np.float32(0.5), "out_shape": np.array([0, 0, hidden], np.int64),
                  "mask_axes": np.array([1, 2], np.int64), "neg": np.float32(-10000.0)})
    q = heads_of(linear("x", "q", hidden, hidden), "q")
    k = heads_of(linear("x", "k", hidden, hidden), "k")
    v = heads_of(linear("x", "v", hidden, hidden), "v")
    kt = n("Transpose", [k], "kt", perm=[0, 1, 3, 2])
    sc = n("Div", [n("MatMul", [q, kt], "qk"), "sqrt_d"], "scores")
    # attention_mask [B,S] (1 keep, 0 pad) -> (1 - m[:, None, None, :]) * f32 min
    mu = n("Unsqueeze", ["attention_mask", "mask_axes"], "mu")
    mf = n("Cast", [mu], "mf", to=F)
    madd = n("Mul", [n("Sub", ["one", mf], "inv"), "fmin"], "madd")
    p = n("Softmax", [n("Add", [sc, madd], "masked")], "probs", axis=-1)
    ctx = n("Transpose", [n("MatMul", [p, v], "ctx")], "ctx_t", perm=[0, 2, 1, 3])
    ctx = n("Reshape", [ctx, "out_shape"], "ctx_r")
    h1 = layer_norm(n("Add", [linear(ctx, "o", hidden, hidden), "x"], "res1"), "ln1")
    f = linear(h1, "f1", hidden, ffn)
    e = n("Erf", [n("Div", [f, "sqrt2"], "gd")], "ge")
    gelu = n("Mul", [n("Mul", [f, n("Add", [e, "one"], "g1")], "gm"), "half"], "gelu")
    h2 = layer_norm(n("Add", [linear(gelu, "f2", ffn, hidden), h1], "res2"), "ln2")
    nodes[-1].output[0] = "y"
    ins = [vi(name, TensorProto.INT64, ["batch", "seq"])
           for name in ids + ["attention_mask"]]
    model = make(nodes, ins, [vi("y", shape=["batch", "seq", hidden])], inits, opset=opset)
    feeds = {"input_ids": RNG.integers(0, vocab, (batch, seq)).astype(np.int64),
             "token_type_ids": (np.arange(seq) >= seq // 2).astype(np.int64)[None]
             .repeat(batch, 0),
             "attention_mask": np.ones((batch, seq), np.int64)}
    feeds["attention_mask"][:, seq - 3:] = 0
    return model, feeds


def id_shapes(batch, seq):
    return {k: (batch, seq) for k in ("input_ids", "token_type_ids", "attention_mask")}


def _fused_names(g):
    return sorted({n.fused.name for n in g.nodes if n.op == "Fused"})


def test_encoder_block_small_interprets_and_compiles():
    model, feeds = encoder_block(64, 4, 256, 16, batch=2)
    g = check(model, feeds, input_shapes=id_shapes(2, 16),
              compile_it=True, rtol=1e-4, atol=2e-4)
    assert _fused_names(g) == ["FusedLinear", "LayerNormLastDim"]
    assert "GeluErf" in {n.op for n in g.nodes}
    # i64 only where the ids are wrapped for Gather and the mask is unsqueezed; the
    # Shape/Range position ids and the heads' Reshape targets fold at import
    assert {n.op for n in g.nodes if n.dtype.value == "i64" and n.op != "Input"} <= \
        {"Const", "BroadcastTo", "AddScalar", "Where", "Unsqueeze"}
    assert sum(n.op == "IndexSelect" for n in g.nodes) == 2  # word, token type (positions fold)


def test_encoder_block_with_decomposed_layer_norm_fuses():
    model, feeds = encoder_block(32, 2, 64, 8, opset=13, decomposed_ln=True)
    g = check(model, feeds, input_shapes=id_shapes(1, 8),
              compile_it=True, rtol=1e-4, atol=2e-4)
    assert "LayerNormLastDim" not in _fused_names(g)  # the import spells primitives ...
    m = compiler.compile(g)
    assert m.ir["optimized"].count("layer_norm_last_dim") >= 2  # ... and fuel-fuse finds them
    assert "softmax_last_dim" in m.ir["optimized"]


@pytest.mark.slow
def test_encoder_block_bert_small_size():
    model, feeds = encoder_block(384, 12, 1536, 128)
    check(model, feeds, input_shapes=id_shapes(1, 128),
          compile_it=True, rtol=1e-4, atol=5e-4)


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------
def test_symbolic_dims_are_kept_as_symbols():
    """dim_params become symbols (docs/dynamic-shapes.md); the Shape -> Slice ->
    Concat heads target and the Range over the Shape-computed length fold over
    them; one import interprets at several sizes as onnxruntime does."""
    model, _ = encoder_block(32, 2, 64, 8)
    g = import_model(model)
    assert g.signature()["inputs"] == {n: "i64[batch,seq]" for n in
                                       ("input_ids", "token_type_ids", "attention_mask")}
    assert g.signature()["outputs"] == {"y": "f32[batch,seq,32]"}
    for batch, seq in ((1, 8), (3, 5)):
        _, feeds = encoder_block(32, 2, 64, seq, batch=batch)
        want = ort_run(model, feeds)["y"]
        np.testing.assert_allclose(compiler.interpret(g, feeds)["y"], want, rtol=1e-4, atol=2e-4)


def test_input_shapes_fix_some_symbols():
    model, feeds = encoder_block(32, 2, 64, 8, batch=2)
    g = import_model(model, input_shapes={"batch": 2})
    assert g.signature()["inputs"]["input_ids"] == "i64[2,seq]"
    g = import_model(model, input_shapes={"input_ids": (None, 8)})
    assert g.signature()["inputs"]["input_ids"] == "i64[batch,8]"
    # the other inputs keep seq: the call binds it from them and checks input_ids' 8
    with pytest.raises(compiler.ShapeSignatureError, match="symbol 'seq'|fixes 8"):
        compiler.interpret(g, {k: v[:, :5] for k, v in feeds.items()})


def test_unnamed_dims_become_fresh_symbols():
    model = make([node("Relu", ["x"], ["y"])], [vi("x", shape=[None, 4])],
                 [vi("y", shape=[None, 4])])
    g = import_model(model)
    assert g.signature()["inputs"] == {"x": "f32[x_0,4]"}
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(compiler.interpret(g, {"x": x})["y"], np.maximum(x, 0))
    with pytest.raises(OnnxImportError, match=r"\['seq'\], which are not inputs"):
        import_model(model, input_shapes={"seq": 3})


def test_input_shapes_errors():
    model, _ = encoder_block(32, 2, 64, 8)
    with pytest.raises(OnnxImportError, match=r"input 'input_ids': input_shapes gives \[1, 8, 16\]"):
        import_model(model, input_shapes={**id_shapes(1, 8), "input_ids": (1, 8, 16)})
    with pytest.raises(OnnxImportError, match=r"\['nope'\], which are not inputs"):
        import_model(model, input_shapes={"nope": (1,)})


def test_unsupported_constructs_are_listed_together():
    nodes = [node("NonZero", ["x"], ["nz"], name="nz_node"),
             node("Conv", ["img", "w"], ["c"], name="conv3d", kernel_shape=[1, 3, 3]),
             node("BatchNormalization", ["x", "s1", "s1", "s1", "s1"], ["md"],
                  name="bn_node"),
             node("Relu", ["c"], ["after_conv"]),  # downstream of a refused node: not listed
             helper.make_node("FusedGemm", ["x", "x"], ["fg"], name="ms_node",
                              domain="com.microsoft"),
             node("Reshape", ["x", "rt"], ["rs"], name="runtime_shape"),
             node("Cast", ["x"], ["rt"], to=TensorProto.INT64)]
    nodes = nodes[:5] + [nodes[6], nodes[5]]
    i64 = TensorProto.INT64
    m = helper.make_model(
        helper.make_graph(nodes, "bad", [vi("x", shape=[4]), vi("img", shape=[1, 1, 8, 8])],
                          [vi("nz", i64, [1, "n"]), vi("after_conv", shape=[1, 1, 4, 4]),
                           vi("md", shape=[4]), vi("fg", shape=[4]),
                           vi("rs", shape=["r"])],
                          initializer=[numpy_helper.from_array(rand(1, 1, 3, 3), "w"),
                                       numpy_helper.from_array(np.ones(1, np.float32), "s1")]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(OnnxImportError) as e:
        import_model(m)
    found = {(i.op_type, i.node) for i in e.value.issues}
    assert found == {("NonZero", "nz_node"), ("Conv", "conv3d"), ("BatchNormalization", "bn_node"),
                     ("com.microsoft.FusedGemm", "ms_node"), ("Reshape", "runtime_shape")}
    msg = str(e.value)
    assert "5 unsupported" in msg and "kernel_shape=[1, 3, 3]" in msg and "rank-1 input" in msg
    assert "input 'shape' is computed at run time" in msg


def test_malformed_model_fails_the_checker():
    m = make([node("Relu", ["x"], ["y"]), node("Relu", ["ghost"], ["z"])],
             [vi("x", shape=[2])], [vi("y"), vi("z")])
    with pytest.raises(OnnxImportError, match="onnx.checker"):
        import_model(m)
    with pytest.raises(OnnxImportError, match="cannot read ONNX model"):
        import_model(b"\x00not a model\xff" * 3)
    with pytest.raises(OnnxImportError, match="path, bytes or onnx.ModelProto"):
        import_model(42)


def test_opset_11_model_is_converted_to_13_at_import():
    # opset-11 spellings whose inputs became inputs at 13: Squeeze/Unsqueeze/ReduceSum axes,
    # Split sizes as attributes
    nodes = [node("Squeeze", ["x"], ["s"], axes=[0]),
             node("ReduceSum", ["s"], ["r"], axes=[1], keepdims=0),
             node("Split", ["s"], ["a", "b"], axis=1, split=[1, 3]),
             node("Unsqueeze", ["r"], ["u"], axes=[0]),
             node("Mul", ["b", "u"], ["y"]),
             # Hardmax-11 flattens to 2-D at axis (the converter leaves it as Hardmax-13)
             node("Hardmax", ["x"], ["h"], axis=1)]
    m = make(nodes, [vi("x", shape=[1, 3, 4])], [vi("y"), vi("a"), vi("h")], opset=11)
    g = check(m, {"x": rand(1, 3, 4)})
    assert set(g.outputs) == {"y", "a", "h"}


def test_opset_conversion_failure_is_a_typed_error():
    # BatchNormalization-7 with spatial=0 has no opset-13 spelling
    names = ["x", "s", "b", "mu", "var"]
    m = helper.make_model(
        helper.make_graph([node("Relu", ["x"], ["r"]),
                           node("BatchNormalization", ["r"] + names[1:], ["y"], name="bn7",
                                spatial=0)], "t",
                          [vi(n, shape=[2, 3] if n == "x" else [3]) for n in names],
                          [vi("y", shape=[2, 3])]),
        opset_imports=[helper.make_opsetid("", 7)])
    m.ir_version = 6
    with pytest.raises(OnnxImportError, match=r"opset is 7; .*convert_version\(model, 13\), "
                       r"which failed: BatchNormalization node 'bn7': .*spatial") as e:
        import_model(m)
    assert [(i.op_type, i.node) for i in e.value.issues] == [("BatchNormalization", "bn7")]


def test_import_from_path(tmp_path):
    m = make([node("Relu", ["x"], ["y"])], [vi("x", shape=[2, 3])], [vi("y")])
    p = tmp_path / "m.onnx"
    onnx.save(m, str(p))
    g = import_model(p)
    x = rand(2, 3)
    np.testing.assert_array_equal(compiler.interpret(g, {"x": x})["y"], np.maximum(x, 0))


@needs_opset(23)
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_op_opset23_becomes_flash_attn(causal):
    shape = [1, 2, 6, 8]
    m = make([node("Attention", ["q", "k", "v"], ["y"], is_causal=causal)],
             [vi(n, shape=shape) for n in "qkv"], [vi("y")], opset=23)
    g = check(m, {n: rand(*shape) for n in "qkv"}, atol=1e-5)
    assert _fused_names(g) == ["FlashAttn"]


@needs_opset(23)
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_with_additive_mask_matches_onnxruntime(causal):
    shape = [1, 2, 6, 8]
    m = make([node("Attention", ["q", "k", "v", "mask"], ["y"], name="attn", is_causal=causal)],
             [vi(n, shape=shape) for n in "qkv"] + [vi("mask", shape=[6, 6])], [vi("y")],
             opset=23)
    mask = np.where(RNG.uniform(size=(6, 6)) < 0.3, -np.inf, 0).astype(np.float32)
    mask[:, 0] = 0  # no fully masked row
    check(m, {**{n: rand(*shape) for n in "qkv"}, "mask": mask}, atol=1e-5, compile_it=True)


@needs_opset(23)
@pytest.mark.parametrize("elem", [TensorProto.FLOAT16, TensorProto.BFLOAT16])
@pytest.mark.parametrize("masked", [False, True])
def test_low_precision_attention_rounds_as_onnx_reference(elem, masked):
    """f16/bf16 Attention, compiled, equals ONNX's reference bit for bit: q and
    k^T each scaled by sqrt(scale), every op rounded, bf16 row sums rounded
    after every addition (ml_dtypes), f16 ones accumulated in f32 (numpy)."""
    from onnx.reference import ReferenceEvaluator
    from runtime.dtype import DType
    np_dt = (DType.F16 if elem == TensorProto.FLOAT16 else DType.BF16).numpy
    q_shape, kv_shape = [2, 3, 4, 8], [2, 3, 9, 8]
    ins = ["q", "k", "v"] + (["mask"] if masked else [])
    m = make([node("Attention", ins, ["y"], is_causal=1)],
             [vi("q", elem, q_shape), vi("k", elem, kv_shape), vi("v", elem, kv_shape)]
             + ([vi("mask", TensorProto.BOOL, [4, 9])] if masked else []), [vi("y", elem)],
             opset=23)
    feeds = {"q": rand(*q_shape).astype(np_dt), "k": rand(*kv_shape).astype(np_dt),
             "v": rand(*kv_shape).astype(np_dt)}
    if masked:
        feeds["mask"] = RNG.uniform(size=(4, 9)) < 0.7
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    got = compiler.compile(import_model(m))(**{k: v.astype(np.uint8) if v.dtype == np.bool_
                                              else v for k, v in feeds.items()})
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@needs_opset(24)
@pytest.mark.parametrize("lens_at_run_time", [False, True])
@pytest.mark.parametrize("mode,attrs", [
    (0, dict(is_causal=1)),
    (1, dict(softcap=2.0)),
    (2, dict(is_causal=1, q_num_heads=4, kv_num_heads=2)),
    (3, dict(softmax_precision=TensorProto.DOUBLE)),
])
def test_attention_qk_output_and_external_kv_cache_match_onnx_reference(mode, attrs,
                                                                          lens_at_run_time):
    """nonpad_kv_seqlen (constant or an input) masks each batch's padded keys
    and shifts its causal diagonal; qk_matmul_output in every mode;
    softmax_precision; 3-D grouped-query inputs."""
    from onnx.reference import ReferenceEvaluator
    three_d = "q_num_heads" in attrs
    q_shape = [2, 3, 16] if three_d else [2, 2, 3, 4]
    kv_shape = [2, 7, 8] if three_d else [2, 2, 7, 4]
    lens = np.array([7, 4], np.int64)
    inputs = [vi("q", shape=q_shape), vi("k", shape=kv_shape), vi("v", shape=kv_shape)]
    inits = {}
    if lens_at_run_time:
        inputs.append(vi("lens", TensorProto.INT64, [2]))
    else:
        inits["lens"] = lens
    n = node("Attention", ["q", "k", "v", "", "", "", "lens"], ["y", "", "", "qk"],
             qk_matmul_output_mode=mode, **attrs)
    m = make([n], inputs, [vi("y"), vi("qk")], inits, opset=24)
    feeds = {"q": rand(*q_shape), "k": rand(*kv_shape), "v": rand(*kv_shape)}
    if lens_at_run_time:
        feeds["lens"] = lens
    want = ReferenceEvaluator(m).run(None, feeds)
    got = compiler.compile(import_model(m))(**feeds)
    for name, w in zip(("y", "qk"), want):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=name)


@needs_opset(24)
def test_attention_refusals_name_the_conflict():
    shape = [1, 2, 6, 8]
    m = make([node("Attention", ["q", "k", "v"], ["y", "", "", "qk"], name="attn", softcap=3.0)],
             [vi(n, shape=shape) for n in "qkv"], [vi("y"), vi("qk")], opset=24)
    with pytest.raises(OnnxImportError, match="Attention node 'attn': qk_matmul_output_mode=0 "
                                              "with softcap"):
        import_model(m)
    m = make([node("Attention", ["q", "k", "v", "", "pk", "pv", "lens"], ["y"], name="attn")],
             [vi(n, shape=shape) for n in ("q", "k", "v", "pk", "pv")]
             + [vi("lens", TensorProto.INT64, [1])], [vi("y")], opset=24)
    with pytest.raises(OnnxImportError, match="nonpad_kv_seqlen together with past_key"):
        import_model(m)


def test_import_only_op_with_runtime_input_is_refused():
    m = make([node("ReduceSum", ["x"], ["n"], keepdims=0), node("Cast", ["n"], ["ni"],
                                                                to=TensorProto.INT64),
              node("Range", ["zero", "ni", "one"], ["r"], name="rng")],
             [vi("x", shape=[3])], [vi("r", TensorProto.INT64, ["k"])],
             {"zero": np.array(0, np.int64), "one": np.array(1, np.int64)})
    with pytest.raises(OnnxImportError, match=r"Range node 'rng': its inputs must be constants "
                                              r"known at import; input\(s\) \['ni'\]"):
        import_model(m)


def test_declared_output_type_contradicting_the_nodes_is_an_error():
    g = helper.make_graph([node("Relu", ["x"], ["y"])], "t", [vi("x", shape=[2])],
                          [vi("y", shape=[3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OnnxImportError, match=r"output 'y': the model declares f32\[3\] but "
                                              r"the import computed f32\[2\]"):
        import_model(m)


# ---------------------------------------------------------------------------
# float8 and the element types fuelc has no dtype for
# ---------------------------------------------------------------------------
F8_PROBES = np.array([0.1, 300, 449, 464, 470, 1e6, np.inf, -np.inf, np.nan, -1e6,
                      0.0013671875, -0.0029296875], np.float32)


@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_through_float8e4m3fn_folds_like_onnxruntime(saturate):
    """A constant cast to FLOAT8E4M3FN and back folds at import: saturate=1
    clamps overflow and infinities to +-448, saturate=0 makes them NaN."""
    nodes = [node("Cast", ["probes"], ["f8"], to=TensorProto.FLOAT8E4M3FN, saturate=saturate),
             node("Cast", ["f8"], ["back"], to=F),
             node("Add", ["x", "back"], ["y"])]
    model = make(nodes, [vi("x", shape=[12])], [vi("y", shape=[12])], {"probes": F8_PROBES},
                 opset=21)
    g = check(model, {"x": np.zeros(12, np.float32)}, rtol=0, atol=0)
    assert not any(n.dtype.value.startswith("f8") for n in g.nodes)


def test_float8_and_uint16_graph_values_are_refused_naming_the_dtype():
    # a float8 graph input is a narrow-type carrier that only Cast, CastLike and
    # DequantizeLinear read (tests/frontends/test_onnx_narrow.py)
    for elem, words in ((TensorProto.FLOAT8E4M3FN, ["'x' (FLOAT8E4M3FN)", "Cast",
                                                    "cast them to FLOAT"]),
                        (TensorProto.UINT16, ["input 'x'", "UINT16", "no U16", "INT32"])):
        model = make([node("Identity", ["x"], ["y"])], [vi("x", elem, [3])],
                     [vi("y", elem, [3])], opset=21)
        with pytest.raises(OnnxImportError) as e:
            import_model(model)
        assert all(w in str(e.value) for w in words), e.value
    cast = make([node("Cast", ["x"], ["y"], name="to_f8", to=TensorProto.FLOAT8E8M0)],
                [vi("x", shape=[3])], [vi("y", TensorProto.FLOAT8E8M0, [3])], opset=24)
    with pytest.raises(OnnxImportError, match=r"Cast node 'to_f8': a cast to FLOAT8E8M0"):
        import_model(cast)
    inits = {"u": np.array([1, 2, 65535], np.uint16)}  # a u16 constant fed to a graph op
    add = make([node("Add", ["x", "u"], ["y"], name="add_u16")], [vi("x", TensorProto.UINT16,
                                                                     [3])],
               [vi("y", TensorProto.UINT16, [3])], inits, opset=21)
    with pytest.raises(OnnxImportError, match="UINT16"):
        import_model(add)


def test_uint16_initializer_cast_to_int_folds_losslessly():
    inits = {"u": np.array([0, 7, 65535], np.uint16), "big": np.array([2 ** 63 - 1], np.uint64)}
    nodes = [node("Cast", ["u"], ["ui"], to=TensorProto.INT32),
             node("Cast", ["big"], ["bi"], to=TensorProto.INT64),
             node("Add", ["x", "ui"], ["y"]), node("Add", ["z", "bi"], ["w"])]
    model = make(nodes, [vi("x", TensorProto.INT32, [3]), vi("z", TensorProto.INT64, [1])],
                 [vi("y", TensorProto.INT32, [3]), vi("w", TensorProto.INT64, [1])], inits)
    check(model, {"x": np.array([1, 2, 3], np.int32), "z": np.array([0], np.int64)})


# ---------------------------------------------------------------------------
# ops PyTorch exports (issue 19): compiled for the cpu target, against onnxruntime
# ---------------------------------------------------------------------------
I64, I32 = TensorProto.INT64, TensorProto.INT32


def test_exported_ops_compile_and_match_onnxruntime():
    """GatherND (runtime indices, batch_dims), CumSum (exclusive, reverse,
    int32), inference BatchNormalization, Mod fmod=1 (float, int), ArgMax/
    ArgMin select_last_index with ties, Range, OneHot (negative indices,
    axis), TopK (largest and smallest, ties) and Einsum (batched matmul,
    attention scores, inner product, sum, transpose, three operands, a
    diagonal), one compiled module."""
    c = 3
    nodes = [
        node("GatherND", ["x", "gi"], ["gnd"]),
        node("GatherND", ["x", "gb"], ["gndb"], batch_dims=1),
        node("CumSum", ["x", "ax1"], ["cs"], exclusive=1, reverse=1),
        node("CumSum", ["n", "ax0"], ["csi"], exclusive=1),
        node("BatchNormalization", ["img", "bs", "bb", "bm", "bv"], ["bn"], epsilon=1e-3),
        node("Mod", ["ma", "mb"], ["fm"], fmod=1),
        node("Mod", ["n", "nd"], ["fmi"], fmod=1),
        node("ArgMax", ["ties"], ["amax"], axis=1, select_last_index=1),
        node("ArgMin", ["ties"], ["amin"], axis=0, keepdims=0, select_last_index=1),
        node("Range", ["r0", "r1", "r2"], ["rg"]),
        node("Add", ["rg", "v5"], ["rga"]),
        node("OneHot", ["oi", "depth", "onoff"], ["oh"], axis=1),
        node("TopK", ["ties", "k3"], ["tv", "ti"]),
        node("TopK", ["ties", "k2"], ["sv", "si"], axis=0, largest=0),
        node("Einsum", ["x", "w"], ["bmm"], equation="bij,bjk->bik"),
        node("Einsum", ["q", "kk"], ["att"], equation="bhqd,bhkd->bhqk"),
        node("Einsum", ["v5", "v5"], ["dot"], equation="i,i"),
        node("Einsum", ["x"], ["es"], equation="bij->jb"),
        node("Einsum", ["gb2", "bw", "gb3"], ["bil"], equation="bn,anm,bm->ba"),  # Bilinear
        node("Einsum", ["sq", "x"], ["dg"], equation="bii,bij->bj"),  # a diagonal
    ]
    ties = np.array([[1, 3, 3, 0], [2, 2, 1, 2], [1, 3, 0, 0]], np.float32)
    inits = {"ax1": np.array(1, np.int64), "ax0": np.array(0, np.int32),
             "bs": rand(c), "bb": rand(c), "bm": rand(c), "bv": rand(c, lo=0.1, hi=2.0),
             "r0": np.array(0.5, np.float32), "r1": np.array(5.0, np.float32),
             "r2": np.array(1.0, np.float32), "depth": np.array(5, np.int64),
             "onoff": np.array([-1.0, 2.0], np.float32), "k3": np.array([3], np.int64),
             "k2": np.array([2], np.int64), "w": rand(2, 4, 5), "bw": rand(3, 4, 5),
             "gb2": rand(1, 4), "gb3": rand(1, 5)}
    m = make(nodes, [vi("x", shape=[2, 3, 4]), vi("gi", I64, [2, 2]), vi("gb", I64, [2, 2, 1]),
                     vi("n", I32, [3, 4]), vi("nd", I32, [3, 4]), vi("img", shape=[2, c, 2, 2]),
                     vi("ma", shape=[6]), vi("mb", shape=[6]), vi("ties", shape=[3, 4]),
                     vi("v5", shape=[5]), vi("oi", I64, [2, 3]), vi("q", shape=[1, 2, 3, 4]),
                     vi("kk", shape=[1, 2, 5, 4]), vi("sq", shape=[2, 3, 3])],
             [vi(o, {"csi": I32, "fmi": I32}.get(o, I64 if o in ("amax", "amin", "ti", "si")
                                                 else F))
              for o in ("gnd", "gndb", "cs", "csi", "bn", "fm", "fmi", "amax", "amin", "rga",
                        "oh", "tv", "ti", "sv", "si", "bmm", "att", "dot", "es", "bil", "dg")],
             inits)
    feeds = {"x": rand(2, 3, 4), "gi": np.array([[1, -1], [0, 2]], np.int64),
             "gb": np.array([[[2], [-3]], [[1], [1]]], np.int64),
             "n": RNG.integers(-9, 9, (3, 4)).astype(np.int32),
             "nd": np.array([[3, -3, 4, -4]] * 3, np.int32), "img": rand(2, c, 2, 2),
             "ma": np.array([-4.3, 7.2, 5.0, 4.3, -7.2, 8.0], np.float32),
             "mb": np.array([2.1, -3.4, 8.0, -2.1, 3.4, 5.0], np.float32), "ties": ties,
             "v5": rand(5), "oi": np.array([[0, 4, -1], [-5, 7, 2]], np.int64),
             "q": rand(1, 2, 3, 4), "kk": rand(1, 2, 5, 4), "sq": rand(2, 3, 3)}
    check(m, feeds, compile_it=True)


def test_conv_transpose_output_shape_beyond_the_full_result_matches_onnx_reference():
    """An output_shape larger than the full transposed convolution: zeros (and
    the bias) past its end, as ONNX's reference (onnxruntime refuses it)."""
    from onnx.reference import ReferenceEvaluator
    m = make([node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[3, 2],
                   output_shape=[11, 8])],
             [vi("x", shape=[1, 2, 3, 3])], [vi("y", shape=[1, 4, 11, 8])],
             {"w": rand(2, 4, 3, 3), "b": rand(4)})
    feeds = {"x": rand(1, 2, 3, 3)}
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    np.testing.assert_allclose(compiler.compile(import_model(m))(**feeds), want, rtol=1e-5,
                               atol=1e-6)


def test_training_batch_norm_and_zero_ratio_dropout_match_onnx_reference():
    """BatchNormalization training_mode=1 (the batch's statistics, the running
    statistics updated by momentum) and a training Dropout of ratio 0."""
    from onnx.reference import ReferenceEvaluator
    nodes = [node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                  training_mode=1, momentum=0.8, epsilon=1e-3),
             node("Dropout", ["x", "zero", "train"], ["d", "mask"])]
    m = make(nodes, [vi("x", shape=[2, 3, 4, 5])],
             [vi("y"), vi("rm"), vi("rv"), vi("d"), vi("mask", TensorProto.BOOL)],
             {"s": rand(3), "b": rand(3), "m": rand(3), "v": rand(3, lo=0.5, hi=2.0),
              "zero": np.array(0.0, np.float32), "train": np.array(True)}, opset=15)
    feeds = {"x": rand(2, 3, 4, 5)}
    want = ReferenceEvaluator(m).run(None, feeds)
    got = compiler.compile(import_model(m))(**feeds)
    for name, w in zip(("y", "rm", "rv", "d", "mask"), want):
        np.testing.assert_allclose(got[name], w.astype(np.float32), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    m = make([node("Dropout", ["x", "half", "train"], ["d"], name="drop")],
             [vi("x", shape=[2, 3])], [vi("d")],
             {"half": np.array(0.5, np.float32), "train": np.array(True)}, opset=15)
    with pytest.raises(OnnxImportError, match="Dropout node 'drop': training_mode=True with a "
                                              "nonzero ratio"):
        import_model(m)


def test_exported_ops_refusals_name_node_attribute_and_fix():
    nodes = [node("BatchNormalization", ["big", "s", "s", "s", "s"], ["bn", "rm", "rv"],
                  name="bn_train", training_mode=1),
             node("Einsum", ["sq", "col"], ["dg"], name="bcast", equation="ij,ij->ij"),
             node("TopK", ["big"], ["tv", "ti"], name="topk_big", axis=0) ,
             node("CumSum", ["sq", "axis"], ["cs"], name="cumsum_rt"),
             node("OneHot", ["oi", "axis", "onoff"], ["oh"], name="onehot_rt")]
    nodes[2].input.append("k100")
    m = make(nodes, [vi("img", shape=[1, 2, 2, 2]), vi("sq", shape=[3, 3]), vi("col", shape=[3, 1]),
                     vi("big", shape=[128]), vi("axis", I64, []), vi("oi", I64, [2])],
             [vi("bn", shape=[128])] +
             [vi(o, I64 if o == "ti" else F) for o in ("dg", "tv", "ti", "cs", "oh")],
             {"s": np.ones(2, np.float32), "k100": np.array([100], np.int64),
              "onoff": np.array([0.0, 1.0], np.float32)})
    with pytest.raises(OnnxImportError) as e:
        import_model(m)
    got = {i.node: i.what for i in e.value.issues}
    assert set(got) == {"bn_train", "bcast", "topk_big", "cumsum_rt", "onehot_rt"}
    assert "training BatchNormalization of a rank-1 f32 input" in got["bn_train"]
    assert "'j' has extents 3 and 1 (broadcasting is not supported)" in got["bcast"]
    assert "K=100" in got["topk_big"] and "K <= 64" in got["topk_big"]
    assert "input 'axis' is computed at run time" in got["cumsum_rt"]
    assert "input 'depth' is computed at run time" in got["onehot_rt"]
    msg = str(e.value)
    assert "BatchNormalization node 'bn_train'" in msg and "Einsum node 'bcast'" in msg


# ---------------------------------------------------------------------------
# Resize / Upsample (issue 19): against onnxruntime, interpreted and compiled
# ---------------------------------------------------------------------------
def test_resize_modes_compile_and_match_onnxruntime():
    """nearest (each nearest_mode), linear and cubic (antialias, exclude_outside),
    each coordinate transformation, scales or sizes (keep_aspect_ratio_policy,
    axes), tf_crop_and_resize with extrapolation, and Upsample-9 nearest."""
    F16 = TensorProto.FLOAT16
    cases = [  # (attrs, scales, sizes, roi)
        (dict(mode="nearest"), [1, 1, 2.0, 1.5], None, None),
        (dict(mode="nearest", nearest_mode="ceil", coordinate_transformation_mode="align_corners"),
         None, [1, 2, 7, 3], None),
        (dict(mode="nearest", nearest_mode="floor", coordinate_transformation_mode="asymmetric"),
         [1, 1, 0.5, 0.8], None, None),
        (dict(mode="nearest", nearest_mode="round_prefer_ceil",
              coordinate_transformation_mode="pytorch_half_pixel"), [1, 1, 1.7, 2.0], None, None),
        (dict(mode="linear"), [1, 1, 1.6, 0.6], None, None),
        (dict(mode="linear", antialias=1), [1, 1, 0.6, 0.4], None, None),
        (dict(mode="linear", coordinate_transformation_mode="align_corners"), None, [1, 2, 3, 8],
         None),
        (dict(mode="linear", axes=[3, 2], keep_aspect_ratio_policy="not_larger"), None, [4, 9],
         None),
        (dict(mode="cubic"), [1, 1, 1.75, 0.75], None, None),
        (dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1,
              coordinate_transformation_mode="asymmetric"), [1, 1, 0.8, 1.4], None, None),
        (dict(mode="cubic", antialias=1, keep_aspect_ratio_policy="not_smaller", axes=[2, 3]),
         None, [3, 2], None),
        (dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
              extrapolation_value=7.0), None, [1, 2, 4, 5], [0, 0, -0.2, 0.3, 1, 1, 0.8, 1.2]),
    ]
    nodes, inits, outs = [], {}, []
    for i, (attrs, scales, sizes, roi) in enumerate(cases):
        ins = ["x", "", "", ""]
        for k, v, dt in (("roi", roi, np.float32), ("scales", scales, np.float32),
                         ("sizes", sizes, np.int64)):
            if v is not None:
                inits[f"{k}{i}"] = np.asarray(v, dt)
                ins[("roi", "scales", "sizes").index(k) + 1] = f"{k}{i}"
        nodes.append(node("Resize", [n for n in ins[:max(j for j, n in enumerate(ins) if n) + 1]],
                          [f"y{i}"], **attrs))
        outs.append(vi(f"y{i}"))
    nodes.append(node("Resize", ["h", "", "sh"], ["yh"], mode="linear"))  # f16 in f32
    inits["sh"] = np.array([1, 1, 1.5, 0.75], np.float32)
    m = make(nodes, [vi("x", shape=[1, 2, 5, 6]), vi("h", F16, [1, 2, 5, 6])],
             outs + [vi("yh", F16)], inits, opset=18)
    x = rand(1, 2, 5, 6)
    check(m, {"x": x, "h": x.astype(np.float16)}, compile_it=True, rtol=1e-3, atol=1e-3)
    up = make([node("Upsample", ["x", "s"], ["y"], mode="nearest")], [vi("x", shape=[1, 2, 3])],
              [vi("y")], {"s": np.array([1, 2, 3], np.float32)}, opset=9)
    check(up, {"x": rand(1, 2, 3)}, compile_it=True)


def test_resize_refusals_name_node_attribute_and_fix():
    I8 = TensorProto.INT8
    nodes = [node("Resize", ["x", "", "s"], ["a"], name="rz_mode", mode="area"),
             node("Resize", ["x", "", "s"], ["b"], name="rz_ctm",
                  coordinate_transformation_mode="bogus"),
             node("Resize", ["x", "", "s"], ["c"], name="rz_nm", nearest_mode="round"),
             node("Resize", ["q", "", "s"], ["d"], name="rz_int", mode="linear"),
             node("Resize", ["x", "", "rt"], ["e"], name="rz_rt")]
    m = make(nodes, [vi("x", shape=[1, 1, 2, 2]), vi("q", I8, [1, 1, 2, 2]), vi("rt", shape=[4])],
             [vi(o) for o in "abce"] + [vi("d", I8)], {"s": np.full(4, 2.0, np.float32)},
             opset=18)
    with pytest.raises(OnnxImportError) as e:
        import_model(m)
    got = {i.node: i.what for i in e.value.issues}
    assert "mode='area'" in got["rz_mode"] and "nearest, linear or cubic" in got["rz_mode"]
    assert "coordinate_transformation_mode='bogus'" in got["rz_ctm"]
    assert "nearest_mode='round'" in got["rz_nm"]
    assert "mode='linear' on i8 data" in got["rz_int"]
    assert "['rt'] are computed at run time" in got["rz_rt"]


# ---------------------------------------------------------------------------
# ScatterND / ScatterElements, BitShift, BitwiseNot (issue 19)
# ---------------------------------------------------------------------------
def test_scatter_and_bit_ops_compile_and_match_onnxruntime():
    """ScatterND (rows and elements, every reduction, duplicates) and
    ScatterElements (axis, negative indices, duplicates) with constant
    indices; BitShift both ways (i8/u8/i32, the sign bit, a negative value
    shifted right) and BitwiseNot (signed and unsigned)."""
    I8, U8 = TensorProto.INT8, TensorProto.UINT8
    nodes = [node("ScatterND", ["x", "nd_rows", "u_rows"], ["nd"]),
             node("ScatterND", ["x", "nd_el", "u_el"], ["nd_add"], reduction="add"),
             node("ScatterND", ["x", "nd_el", "u_el"], ["nd_mul"], reduction="mul"),
             node("ScatterND", ["x", "nd_el", "u_el"], ["nd_max"], reduction="max"),
             node("ScatterND", ["x", "nd_el", "u_el"], ["nd_min"], reduction="min"),
             node("ScatterElements", ["x", "se", "u_se"], ["se1"], axis=1),
             node("ScatterElements", ["x", "se0", "u_se"], ["se0a"], axis=0, reduction="add"),
             node("BitShift", ["u8", "s8u"], ["lu8"], direction="LEFT"),
             node("BitShift", ["u8", "s8u"], ["ru8"], direction="RIGHT"),
             node("BitwiseNot", ["b8"], ["n8"]), node("BitwiseNot", ["u8"], ["nu8"])]
    inits = {"nd_rows": np.array([[2], [0]], np.int64),
             "nd_el": np.array([[0, 1], [2, 3], [0, 1], [-1, 0]], np.int64),
             "se": np.array([[1, -1], [0, 0], [3, 2]], np.int64),
             "se0": np.array([[1, 2], [1, 0], [1, 2]], np.int64),
             "s8u": np.array([0, 1, 3, 7, 1, 2], np.uint8)}
    m = make(nodes, [vi("x", shape=[3, 4]), vi("u_rows", shape=[2, 4]), vi("u_el", shape=[4]),
                     vi("u_se", shape=[3, 2]), vi("b8", I8, [6]), vi("u8", U8, [6])],
             [vi(o) for o in ("nd", "nd_add", "nd_mul", "nd_max", "nd_min", "se1", "se0a")]
             + [vi("n8", I8)] + [vi(o, U8) for o in ("lu8", "ru8", "nu8")], inits, opset=18)
    feeds = {"x": rand(3, 4), "u_rows": rand(2, 4), "u_el": rand(4), "u_se": rand(3, 2),
             "b8": np.array([5, -7, -128, 1, 127, -1], np.int8),
             "u8": np.array([255, 3, 128, 200, 1, 0], np.uint8)}
    check(m, feeds, compile_it=True)


@needs_opset(28)
def test_signed_bit_shift_matches_the_onnx_reference():
    """Signed BitShift (opset 28; onnxruntime shifts unsigned types only):
    the sign bit, negative values shifted right, shifts out of range."""
    from onnx.reference import ReferenceEvaluator
    I8 = TensorProto.INT8
    nodes = [node("BitShift", ["b8", "s8"], ["l8"], direction="LEFT"),
             node("BitShift", ["b8", "s8"], ["r8"], direction="RIGHT"),
             node("BitShift", ["i32", "s32"], ["l32"], direction="LEFT"),
             node("BitShift", ["i32", "s32"], ["r32"], direction="RIGHT")]
    m = make(nodes, [vi("b8", I8, [7]), vi("i32", I32, [4])],
             [vi("l8", I8), vi("r8", I8), vi("l32", I32), vi("r32", I32)],
             {"s8": np.array([0, 1, 3, 7, 8, -1, 6], np.int8),
              "s32": np.array([0, 31, 4, 40], np.int32)}, opset=28)
    feeds = {"b8": np.array([5, -7, -128, 1, 127, -1, -100], np.int8),
             "i32": np.array([-5, 1, -123456789, 3], np.int32)}
    want = dict(zip(["l8", "r8", "l32", "r32"], ReferenceEvaluator(m).run(None, feeds)))
    g = import_model(m)
    got_c = compiler.compile(g)(**feeds)
    for got in (compiler.interpret(g, feeds), got_c):
        for k, w in want.items():
            np.testing.assert_array_equal(got[k], w, err_msg=k)


def test_scatter_and_bit_op_refusals_name_node_attribute_and_fix():
    nodes = [node("ScatterND", ["x", "rt", "u"], ["a"], name="snd_rt"),
             node("ScatterElements", ["x", "ci", "u"], ["b"], name="se_red", reduction="avg"),
             node("BitShift", ["i", "i"], ["c"], name="bs_dir", direction="UP"),
             node("BitShift", ["i", "i"], ["d"], name="bs_rt", direction="LEFT"),
             node("BitwiseNot", ["x"], ["e"], name="bn_float")]
    m = make(nodes, [vi("x", shape=[2, 2]), vi("rt", I64, [1, 2]), vi("u", shape=[1]),
                     vi("i", I32, [2])],
             [vi("a"), vi("b"), vi("c", I32), vi("d", I32), vi("e")],
             {"ci": np.array([[0]], np.int64)}, opset=18)
    m.graph.node[1].input[2] = "u2"
    m.graph.initializer.append(numpy_helper.from_array(np.ones((1, 1), np.float32), "u2"))
    with pytest.raises(OnnxImportError) as e:
        import_model(m)
    got = {i.node: i.what for i in e.value.issues}
    assert "input 'rt' is computed at run time" in got["snd_rt"]
    assert "reduction='avg'" in got["se_red"] and "none, add, mul, max or min" in got["se_red"]
    assert "direction='UP'" in got["bs_dir"]
    assert "bs_rt" not in got  # a run-time shift count is a BitShiftLeft primitive
    assert "BitwiseNot(f32[2,2]): operand 0 dtype f32 not supported" in got["bn_float"] \
        and "Cast it to an integer dtype first" in got["bn_float"]


# ---------------------------------------------------------------------------
# small ops through primitives (issue 19)
# ---------------------------------------------------------------------------
def test_small_ops_compile_and_match_onnxruntime():
    """EyeLike, the three windows (folded), CenterCropPad (crop and pad, axes),
    Compress (axis and flattened), ReverseSequence (both layouts),
    DequantizeLinear and QuantizeLinear (per tensor, per axis, blocked;
    halves round to even, saturation)."""
    U8, I8, I16 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT16
    nodes = [node("EyeLike", ["x"], ["eye"], k=1, dtype=TensorProto.INT32),
             node("HannWindow", ["n7"], ["hann"]),
             node("HammingWindow", ["n7"], ["hamm"], periodic=0),
             node("BlackmanWindow", ["n7"], ["black"]),
             node("CenterCropPad", ["img", "crop"], ["ccp"]),
             node("CenterCropPad", ["img", "crop2"], ["ccp2"], axes=[-2, -1]),
             node("Compress", ["x", "cond"], ["cmp"], axis=1),
             node("Compress", ["x", "cond"], ["cmpf"]),
             node("ReverseSequence", ["seq", "lens"], ["rs"], batch_axis=1, time_axis=0),
             node("ReverseSequence", ["seqb", "lens"], ["rsb"], batch_axis=0, time_axis=1),
             node("DequantizeLinear", ["q8", "s", "zp8"], ["dq"]),
             node("DequantizeLinear", ["qi8", "sa", "zpa"], ["dqa"], axis=1),
             node("DequantizeLinear", ["q8", "sb", "zpb"], ["dqb"], axis=1, block_size=2),
             node("QuantizeLinear", ["fx", "s", "zp8"], ["qu"]),
             node("QuantizeLinear", ["fx", "sa", "zpa"], ["qa"], axis=1),
             node("QuantizeLinear", ["fx", "s"], ["q16"], output_dtype=I16)]
    inits = {"n7": np.array(7, np.int64), "crop": np.array([1, 3, 2, 6], np.int64),
             "crop2": np.array([5, 1], np.int64), "cond": np.array([1, 0, 1], bool),
             "lens": np.array([4, 1, 3], np.int64), "s": np.array(0.5, np.float32),
             "zp8": np.array(128, np.uint8), "sa": np.array([0.5, 2.0, 0.25, 1.0], np.float32),
             "zpa": np.array([0, -3, 5, 100], np.int8),
             "sb": np.array([[0.5, 2.0], [1.0, 0.25], [3.0, 0.125]], np.float32),
             "zpb": np.array([[1, 2], [3, 4], [250, 0]], np.uint8)}
    m = make(nodes, [vi("x", shape=[3, 4]), vi("img", shape=[1, 3, 4, 4]),
                     vi("seq", shape=[4, 3, 2]), vi("seqb", shape=[3, 4]),
                     vi("q8", U8, [3, 4]), vi("qi8", I8, [3, 4]), vi("fx", shape=[3, 4])],
             [vi("eye", I32), vi("hann"), vi("hamm"), vi("black"), vi("ccp"), vi("ccp2"),
              vi("cmp"), vi("cmpf"), vi("rs"), vi("rsb"), vi("dq"), vi("dqa"), vi("dqb"),
              vi("qu", U8), vi("qa", I8), vi("q16", I16)], inits, opset=21)
    feeds = {"x": rand(3, 4), "img": rand(1, 3, 4, 4), "seq": rand(4, 3, 2), "seqb": rand(3, 4),
             "q8": RNG.integers(0, 256, (3, 4)).astype(np.uint8),
             "qi8": RNG.integers(-128, 128, (3, 4)).astype(np.int8),
             "fx": np.array([[0.25, 0.75, -0.25, 63.9], [-64.5, 1.25, 1.75, 100.0],
                             [-1000, 0.0, 2.5, -2.5]], np.float32)}
    check(m, feeds, compile_it=True)


@needs_opset(28)
def test_cumprod_and_swiglu_match_the_onnx_reference():
    """CumProd (opset 26: exclusive, reverse, int32 wrapping) and SwiGLU
    (opset 28), which onnxruntime does not run yet."""
    from onnx.reference import ReferenceEvaluator
    F16 = TensorProto.FLOAT16
    nodes = [node("CumProd", ["x", "ax1"], ["cp"]),
             node("CumProd", ["x", "ax0"], ["cpx"], exclusive=1, reverse=1),
             node("CumProd", ["n", "ax1"], ["cpi"], exclusive=1),
             node("SwiGLU", ["x", "y"], ["sw"], alpha=0.5),
             node("SwiGLU", ["h", "h"], ["swh"])]
    m = make(nodes, [vi("x", shape=[3, 5]), vi("y", shape=[3, 5]), vi("n", I32, [2, 9]),
                     vi("h", F16, [4])],
             [vi("cp"), vi("cpx"), vi("cpi", I32), vi("sw"), vi("swh", F16)],
             {"ax1": np.array(1, np.int64), "ax0": np.array(-2, np.int32)}, opset=28)
    feeds = {"x": rand(3, 5), "y": rand(3, 5),
             "n": RNG.integers(-40, 40, (2, 9)).astype(np.int32),
             "h": np.array([-2, -0.5, 0.5, 3], np.float16)}
    want = dict(zip(["cp", "cpx", "cpi", "sw", "swh"], ReferenceEvaluator(m).run(None, feeds)))
    g = import_model(m)
    got_c = compiler.compile(g)(**feeds)
    for got in (compiler.interpret(g, feeds), got_c):
        for k, w in want.items():
            if w.dtype.kind == "f":
                np.testing.assert_allclose(got[k], w, rtol=1e-3 if k == "swh" else 1e-5,
                                           err_msg=k)
            else:
                np.testing.assert_array_equal(got[k], w, err_msg=k)


def test_small_op_refusals_name_node_attribute_and_fix():
    nodes = [node("Compress", ["x", "c"], ["a"], name="cmp_rt", axis=0),
             node("ReverseSequence", ["x", "lens"], ["b"], name="rs_big", batch_axis=1,
                  time_axis=0),
             node("DequantizeLinear", ["x", "s"], ["d"], name="dq_float")]
    # (QuantizeLinear to float8 is supported: tests/frontends/test_onnx_narrow.py)
    m = make(nodes, [vi("x", shape=[2, 2]), vi("c", TensorProto.BOOL, [2])],
             [vi("a"), vi("b"), vi("d")],
             {"lens": np.array([3, 1], np.int64), "s": np.array(1.0, np.float32)}, opset=21)
    with pytest.raises(OnnxImportError) as e:
        import_model(m)
    got = {i.node: i.what for i in e.value.issues}
    assert "input 'c' is computed at run time" in got["cmp_rt"]
    assert "sequence_lens [3, 1]" in got["rs_big"]
    assert "DequantizeLinear of f32 data" in got["dq_float"]


def test_pooling_norm_and_integer_ops_compile_and_match_onnxruntime():
    """LpPool (p 1, 2, 3; pads, strides), Asinh/Acosh/Atanh, MeanVariance-
    Normalization, LRN, DynamicQuantizeLinear, MatMulInteger, QLinearMatMul
    (per-column b scale) and ConvInteger/QLinearConv (per-channel w)."""
    U8 = TensorProto.UINT8
    nodes = [node("LpPool", ["img"], ["lp1"], kernel_shape=[2, 2], p=1),
             node("LpPool", ["img"], ["lp2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                  strides=[2, 2]),
             node("LpPool", ["img"], ["lp3"], kernel_shape=[2, 3], p=3),
             node("Asinh", ["x"], ["ash"]), node("Atanh", ["t"], ["ath"]),
             node("Acosh", ["big"], ["ach"]),
             node("MeanVarianceNormalization", ["img"], ["mvn"]),
             node("LRN", ["img"], ["lrn"], size=3, alpha=1e-3, beta=0.75, bias=2.0),
             node("DynamicQuantizeLinear", ["x"], ["dq", "dqs", "dqz"]),
             node("MatMulInteger", ["qa", "qb", "za", "zb"], ["mmi"]),
             node("QLinearMatMul", ["qa", "sa", "za", "qb", "sbc", "zb", "sy", "zy"], ["qmm"]),
             node("ConvInteger", ["qimg", "qw", "zx"], ["ci"], pads=[1, 1, 1, 1]),
             node("QLinearConv", ["qimg", "sa", "zx", "qw", "swc", "zwc", "sy", "zy", "qbias"],
                  ["qc"])]
    inits = {"za": np.array(3, np.uint8), "zb": np.array(120, np.uint8),
             "sa": np.array(0.02, np.float32), "sbc": np.array([0.01, 0.03, 0.05], np.float32),
             "sy": np.array(0.1, np.float32), "zy": np.array(100, np.uint8),
             "zx": np.array(7, np.uint8), "swc": np.array([0.01, 0.02], np.float32),
             "zwc": np.array([0, 0], np.uint8), "qbias": np.array([-50, 40], np.int32)}
    m = make(nodes, [vi("img", shape=[1, 3, 5, 6]), vi("x", shape=[3, 4]), vi("t", shape=[5]),
                     vi("big", shape=[4]), vi("qa", U8, [2, 4, 5]), vi("qb", U8, [5, 3]),
                     vi("qimg", U8, [1, 2, 4, 4]), vi("qw", U8, [2, 2, 3, 3])],
             [vi(o) for o in ("lp1", "lp2", "lp3", "ash", "ath", "ach", "lrn")]
             + [vi("mvn", shape=[1, 3, 5, 6])]
             + [vi("dq", U8), vi("dqs"), vi("dqz", U8), vi("mmi", I32), vi("qmm", U8),
                vi("ci", I32), vi("qc", U8)], inits, opset=13)
    feeds = {"img": rand(1, 3, 5, 6), "x": rand(3, 4) * 3,
             "t": np.array([-0.9, -0.3, 0.0, 0.5, 0.99], np.float32),
             "big": np.array([1.0, 1.5, 10.0, 1000.0], np.float32),
             "qa": RNG.integers(0, 256, (2, 4, 5)).astype(np.uint8),
             "qb": RNG.integers(0, 256, (5, 3)).astype(np.uint8),
             "qimg": RNG.integers(0, 256, (1, 2, 4, 4)).astype(np.uint8),
             "qw": RNG.integers(0, 256, (2, 2, 3, 3)).astype(np.uint8)}
    check(m, feeds, compile_it=True, rtol=1e-4, atol=1e-4)


def test_lp_pool_refuses_p_below_one():
    m = make([node("LpPool", ["img"], ["a"], name="lp_p0", kernel_shape=[2, 2], p=0)],
             [vi("img", shape=[1, 1, 2, 2])], [vi("a")], opset=13)
    with pytest.raises(OnnxImportError) as e:
        import_model(m)
    assert "LpPool node 'lp_p0'" in str(e.value) and "p=0" in e.value.issues[0].what


@needs_opset(27)
def test_causal_conv_with_state_matches_the_onnx_reference():
    """CausalConvWithState (opset 27): with and without past state and bias,
    SiLU, f16; both outputs."""
    from onnx.reference import ReferenceEvaluator
    F16 = TensorProto.FLOAT16
    nodes = [node("CausalConvWithState", ["x", "w", "b", "past"], ["y", "st"],
                  activation="silu"),
             node("CausalConvWithState", ["x", "w"], ["y0", "st0"]),
             node("CausalConvWithState", ["h", "wh"], ["yh", "sth"], activation="swish")]
    m = make(nodes, [vi("x", shape=[2, 3, 5]), vi("past", shape=[2, 3, 2]),
                     vi("h", F16, [1, 3, 4])],
             [vi("y"), vi("st"), vi("y0"), vi("st0"), vi("yh", F16), vi("sth", F16)],
             {"w": rand(3, 1, 3), "b": rand(3), "wh": rand(3, 1, 3).astype(np.float16)},
             opset=27)
    feeds = {"x": rand(2, 3, 5), "past": rand(2, 3, 2), "h": rand(1, 3, 4).astype(np.float16)}
    want = dict(zip(["y", "st", "y0", "st0", "yh", "sth"],
                    ReferenceEvaluator(m).run(None, feeds)))
    g = import_model(m)
    got_c = compiler.compile(g)(**feeds)
    for got in (compiler.interpret(g, feeds), got_c):
        for k, w in want.items():
            np.testing.assert_allclose(got[k].astype(np.float64), w.astype(np.float64),
                                       rtol=2e-3 if k == "yh" else 1e-5, atol=1e-5, err_msg=k)


def test_causal_conv_with_state_refuses_an_unknown_activation():
    m = make([node("CausalConvWithState", ["x", "w"], ["y", "st"], name="ccs", activation="gelu")],
             [vi("x", shape=[1, 2, 4])], [vi("y", shape=[1, 2, 4]), vi("st", shape=[1, 2, 1])],
             {"w": rand(2, 1, 2)}, opset=27)
    with pytest.raises(OnnxImportError) as e:
        import_model(m)
    assert "CausalConvWithState node 'ccs'" in str(e.value)
    assert "activation='gelu'" in e.value.issues[0].what


def test_dft_and_stft_compile_and_match_onnxruntime():
    """DFT (opset 20: real and complex input, an inner axis, dft_length
    padding and truncating, onesided, inverse, irfft) and STFT (window,
    frame_length), interpreted and compiled."""
    nodes = [node("DFT", ["x", "", "ax1"], ["f"]),
             node("DFT", ["c", "", "ax2"], ["fi"], inverse=1),
             node("DFT", ["x", "len12", "ax2"], ["fp"], onesided=1),
             node("DFT", ["c", "len4", "ax1"], ["ft"]),
             node("DFT", ["half", "", "ax1"], ["irf"], inverse=1, onesided=1),
             node("STFT", ["sig", "step", "win"], ["st"]),
             node("STFT", ["sig", "step", "", "flen"], ["st2"])]
    inits = {"ax1": np.array(1, np.int64), "ax2": np.array(-2, np.int64),
             "len12": np.array(12, np.int64), "len4": np.array(4, np.int64),
             "step": np.array(3, np.int64), "flen": np.array(8, np.int64),
             "win": np.hanning(8).astype(np.float32)}
    m = make(nodes, [vi("x", shape=[2, 6, 5, 1]), vi("c", shape=[2, 6, 5, 2]),
                     vi("half", shape=[1, 4, 3, 2]), vi("sig", shape=[2, 20, 1])],
             [vi(o) for o in ("f", "fi", "fp", "ft", "irf")]
             + [vi(o, shape=[2, 5, 5, 2]) for o in ("st", "st2")], inits, opset=20)
    feeds = {"x": rand(2, 6, 5, 1), "c": rand(2, 6, 5, 2), "half": rand(1, 4, 3, 2),
             "sig": rand(2, 20, 1)}
    check(m, feeds, compile_it=True, rtol=1e-4, atol=1e-5)


def test_dft_refuses_the_complex_axis():
    m = make([node("DFT", ["x", "", "ax"], ["y"], name="dft_last")],
             [vi("x", shape=[2, 4, 2])], [vi("y", shape=[2, 4, 2])],
             {"ax": np.array(-1, np.int64)}, opset=20)
    with pytest.raises(OnnxImportError) as e:
        import_model(m)
    assert "DFT node 'dft_last'" in str(e.value) and "real/imaginary axis" in str(e.value)


@pytest.mark.slow  # 18 variants compiled, 10-28 s (by default the ONNX node tests compile two)
def test_grid_sample_compiles_and_matches_onnxruntime():
    """GridSample (opset 20): nearest, linear and cubic with zeros, border and
    reflection padding, align_corners both ways, grid points well outside.
    Cubic with border padding against ONNX's reference: onnxruntime clamps
    every coordinate, the reference only those outside the border (the
    node tests follow the reference)."""
    from onnx.reference import ReferenceEvaluator
    combos = [(m, p, a) for m in ("nearest", "linear", "cubic")
              for p in ("zeros", "border", "reflection") for a in (0, 1)]
    feeds = {"x": rand(2, 3, 4, 5), "g": rand(2, 3, 6, 2, lo=-2.7, hi=2.7)}
    for ref in (False, True):
        picked = [c for c in combos if ref == (c[:2] == ("cubic", "border"))]
        nodes = [node("GridSample", ["x", "g"], [f"y{i}"], mode=m, padding_mode=p,
                      align_corners=a) for i, (m, p, a) in enumerate(picked)]
        m = make(nodes, [vi("x", shape=[2, 3, 4, 5]), vi("g", shape=[2, 3, 6, 2])],
                 [vi(f"y{i}") for i in range(len(picked))], opset=20)
        if not ref:
            check(m, feeds, compile_it=True, rtol=1e-4, atol=1e-4)
            continue
        want = ReferenceEvaluator(m).run(None, feeds)
        got = compiler.compile(import_model(m))(**feeds)
        for i, w in enumerate(want):
            np.testing.assert_allclose(got[f"y{i}"], w, rtol=1e-4, atol=1e-4)


def test_grid_sample_refuses_an_unknown_mode():
    m = make([node("GridSample", ["x", "g"], ["y"], name="gs", mode="area")],
             [vi("x", shape=[1, 1, 2, 2]), vi("g", shape=[1, 2, 2, 2])],
             [vi("y", shape=[1, 1, 2, 2])], opset=20)
    with pytest.raises(OnnxImportError) as e:
        import_model(m)
    assert "GridSample node 'gs'" in str(e.value) and "mode='area'" in str(e.value)


def test_affine_grid_compiles_and_matches_onnxruntime():
    nodes = [node("AffineGrid", ["t2", "s2"], ["g2"]),
             node("AffineGrid", ["t2", "s2"], ["g2a"], align_corners=1),
             node("AffineGrid", ["t3", "s3"], ["g3"])]
    m = make(nodes, [vi("t2", shape=[2, 2, 3]), vi("t3", shape=[1, 3, 4])],
             [vi("g2"), vi("g2a"), vi("g3")],
             {"s2": np.array([2, 3, 4, 5], np.int64), "s3": np.array([1, 1, 2, 3, 4], np.int64)},
             opset=20)
    check(m, {"t2": rand(2, 2, 3), "t3": rand(1, 3, 4)}, compile_it=True)



def test_col2im_compiles_and_matches_onnxruntime():
    """Col2Im with overlapping blocks, pads, strides and dilations."""
    nodes = [node("Col2Im", ["x", "img", "blk"], ["y"]),
             node("Col2Im", ["x2", "img", "blk"], ["y2"], pads=[1, 0, 1, 2], strides=[2, 1],
                  dilations=[1, 2])]
    # y: 5x6 image, 2x3 blocks -> 4 x 4 locations; y2: (5+2-2)//2+1 = 3, (6+2-5)+1 = 4
    m = make(nodes, [vi("x", shape=[2, 12, 16]), vi("x2", shape=[1, 12, 12])],
             [vi("y"), vi("y2")], {"img": np.array([5, 6], np.int64),
                                   "blk": np.array([2, 3], np.int64)}, opset=18)
    check(m, {"x": rand(2, 12, 16), "x2": rand(1, 12, 12)}, compile_it=True)


def test_max_unpool_of_constant_indices_matches_onnxruntime():
    """MaxUnpool of MaxPool's Indices (bound as a constant, as fuelc needs)."""
    x = rand(1, 2, 4, 6)
    pool = make([node("MaxPool", ["x"], ["v", "i"], kernel_shape=[2, 2], strides=[2, 2])],
                [vi("x", shape=[1, 2, 4, 6])], [vi("v"), vi("i", I64)], opset=13)
    idx = ort_run(pool, {"x": x})["i"]
    m = make([node("MaxUnpool", ["v", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
             [vi("v", shape=[1, 2, 2, 3])], [vi("y")], {"i": idx}, opset=13)
    check(m, {"v": rand(1, 2, 2, 3)}, compile_it=True)


@pytest.mark.parametrize("shape", [[2, 3, 3], [4, 4], [1, 1]])
def test_det_matches_onnxruntime(shape):
    m = make([node("Det", ["x"], ["y"])], [vi("x", shape=shape)], [vi("y")])
    check(m, {"x": rand(*shape)}, compile_it=True, rtol=1e-5, atol=1e-5)


def test_det_of_a_large_matrix_is_refused():
    m = make([node("Det", ["x"], ["y"], name="det")], [vi("x", shape=[5, 5])], [vi("y")])
    with pytest.raises(OnnxImportError, match=r"Det node 'det': Det of a f32\[5, 5\] input"):
        import_model(m)


def test_mel_weight_matrix_folds_as_onnx_reference():
    from onnx.reference import ReferenceEvaluator
    m = make([node("MelWeightMatrix", ["bins", "dft", "rate", "lo", "hi"], ["w"]),
              node("MatMul", ["x", "w"], ["y"])], [vi("x", shape=[2, 33])], [vi("y")],
             {"bins": np.array(10, np.int64), "dft": np.array(64, np.int64),
              "rate": np.array(16000, np.int64), "lo": np.array(30.0, np.float32),
              "hi": np.array(7000.0, np.float32)}, opset=17)
    feeds = {"x": rand(2, 33)}
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    np.testing.assert_allclose(compiler.compile(import_model(m))(**feeds), want, rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("mode,lo,skips", [("TF", 1, 2), ("IDF", 2, 0), ("TFIDF", 1, 3)])
def test_tfidf_vectorizer_matches_onnxruntime(mode, lo, skips):
    """Run-time integer input [B, C]: unigram and bigram counts over skip
    distances, weighted per mode."""
    n = node("TfIdfVectorizer", ["x"], ["y"], mode=mode, min_gram_length=lo, max_gram_length=2,
             max_skip_count=skips, ngram_counts=[0, 3], ngram_indexes=[4, 0, 2, 1, 3, 5],
             pool_int64s=[2, 3, 5, 2, 3, 5, 4, 3, 3], weights=[0.5, 2.0, 1.5, 3.0, 0.25, 4.0])
    m = make([n], [vi("x", TensorProto.INT64, [3, 9])], [vi("y", shape=[3, 6])], opset=17)
    x = RNG.integers(2, 6, (3, 9)).astype(np.int64)
    check(m, {"x": x}, compile_it=True)


def test_tfidf_vectorizer_of_strings_is_refused():
    n = node("TfIdfVectorizer", ["x"], ["y"], name="tfidf", mode="TF", min_gram_length=1,
             max_gram_length=1, max_skip_count=0, ngram_counts=[0], ngram_indexes=[0],
             pool_strings=["a"])
    m = make([n], [vi("x", TensorProto.INT64, [4])], [vi("y", shape=[1])], opset=17)
    with pytest.raises(OnnxImportError, match="TfIdfVectorizer node 'tfidf': .*pool_int64s"):
        import_model(m)


@needs_opset(24)
@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("indices_at_run_time", [False, True])
def test_tensor_scatter_matches_onnx_reference(mode, indices_at_run_time):
    """A KV-cache write at per-batch indices (constant or run-time), linear or
    wrapping around the cache."""
    from onnx.reference import ReferenceEvaluator
    w = np.array([1, 5, 0], np.int64) if mode == "circular" else np.array([1, 3, 0], np.int64)
    inputs = [vi("cache", shape=[3, 2, 6, 4]), vi("upd", shape=[3, 2, 3, 4])]
    inits = {}
    if indices_at_run_time:
        inputs.append(vi("w", TensorProto.INT64, [3]))
    else:
        inits["w"] = w
    m = make([node("TensorScatter", ["cache", "upd", "w"], ["y"], mode=mode)], inputs,
             [vi("y", shape=[3, 2, 6, 4])], inits, opset=24)
    feeds = {"cache": rand(3, 2, 6, 4), "upd": rand(3, 2, 3, 4)}
    if indices_at_run_time:
        feeds["w"] = w
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    np.testing.assert_array_equal(compiler.compile(import_model(m))(**feeds), want)


@needs_opset(24)
def test_tensor_scatter_along_the_batch_axis_is_refused():
    m = make([node("TensorScatter", ["cache", "upd"], ["y"], name="ts", axis=0)],
             [vi("cache", shape=[6, 4]), vi("upd", shape=[2, 4])], [vi("y", shape=[6, 4])],
             opset=24)
    with pytest.raises(OnnxImportError, match="TensorScatter node 'ts': mode='linear', axis=0"):
        import_model(m)


def test_optional_of_tensors_known_at_import_matches_onnxruntime():
    nodes = [node("OptionalHasElement", [""], ["empty"]),
             node("OptionalHasElement", ["x"], ["full"]),
             node("OptionalGetElement", ["x"], ["got"])]
    m = make(nodes, [vi("x", shape=[2, 3])],
             [vi("empty", TensorProto.BOOL, []), vi("full", TensorProto.BOOL, []),
              vi("got", shape=[2, 3])], opset=18)
    check(m, {"x": rand(2, 3)}, compile_it=True)


@pytest.mark.parametrize("mode,ratio,ctm", [("avg", 0, "half_pixel"), ("avg", 2, "output_half_pixel"),
                                            ("max", 2, "half_pixel")])
def test_roi_align_with_constant_rois_matches_onnx_reference(mode, ratio, ctm):
    """Rois (one partly outside the image) and batch indices known at import."""
    from onnx.reference import ReferenceEvaluator
    rois = np.array([[0.5, 1.0, 6.0, 5.5], [2.0, 0.0, 9.5, 7.0], [-1.0, -2.0, 3.0, 12.0]],
                    np.float32)
    m = make([node("RoiAlign", ["x", "rois", "bi"], ["y"], mode=mode, output_height=3,
                   output_width=2, sampling_ratio=ratio, spatial_scale=0.8,
                   coordinate_transformation_mode=ctm)],
             [vi("x", shape=[2, 3, 8, 9])], [vi("y", shape=[3, 3, 3, 2])],
             {"rois": rois, "bi": np.array([1, 0, 1], np.int64)}, opset=16)
    feeds = {"x": rand(2, 3, 8, 9)}
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    np.testing.assert_allclose(compiler.compile(import_model(m))(**feeds), want, rtol=1e-5,
                               atol=1e-6)
    if mode == "avg":  # onnxruntime agrees (its max mode differs from the reference's)
        check(m, feeds, compile_it=True)


def test_roi_align_with_run_time_rois_is_refused():
    m = make([node("RoiAlign", ["x", "rois", "bi"], ["y"], name="roi")],
             [vi("x", shape=[1, 1, 4, 4]), vi("rois", shape=[1, 4])], [vi("y", shape=[1, 1, 1, 1])],
             {"bi": np.array([0], np.int64)}, opset=16)
    with pytest.raises(OnnxImportError, match=r"RoiAlign node 'roi': .*input\(s\) \['rois'\] are "
                                              r"computed at run time"):
        import_model(m)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [[2, 3, 5, 4], [2, 3, 7], [1, 2, 2, 3, 2]])
def test_global_pool_is_one_reduction_over_the_spatial_axes(op, shape):
    """GlobalAveragePool / GlobalMaxPool reduce the spatial axes, viewed as
    one, in one kernel (was one per axis: a CNN's head ran two MeanReduce)."""
    out = shape[:2] + [1] * (len(shape) - 2)
    m = make([node(op, ["x"], ["y"])], [vi("x", shape=shape)], [vi("y", shape=out)])
    feeds = {"x": rand(*shape)}
    check(m, feeds, compile_it=True)
    summary = compiler.compile(import_model(m)).kernel_summary()
    assert len(summary) == 1 and "Reduce[" in summary[0], summary


def test_global_pool_refuses_an_input_without_spatial_axes():
    m = make([node("GlobalAveragePool", ["x"], ["y"], name="gap")], [vi("x", shape=[2, 3])],
             [vi("y")])
    with pytest.raises(OnnxImportError) as e:
        import_model(m)
    assert "GlobalAveragePool node 'gap'" in str(e.value) and "rank 2" in e.value.issues[0].what
