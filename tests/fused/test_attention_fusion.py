"""Attention as exporters spell it, fused to FlashAttn (compiler/passes/fuse_attention.py)
and run as its cpu kernel (compiler/codegen/lowering/fused_attention.py).

Each case is an ONNX attention core on q [B,Hq,Sq,D], k/v [B,Hkv,Sk,D] inputs:
MatMul(Q, Transpose(K)) -> scale -> mask -> Softmax -> MatMul(., V). Compiled
by fuelc, it must run the FlashAttn kernel (or, for the negative cases, not) and
match, within f32 precision, the numpy reference interpreter on the imported
(unfused) graph, the same graph compiled with ``fuel-fuse{attention=false}``,
and onnxruntime where installed.
"""
import dataclasses
import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, helper as H, numpy_helper  # noqa: E402

from compiler import compile, interpret  # noqa: E402
from compiler.frontends.onnx import import_model  # noqa: E402

DYN = -(1 << 63)   # the extent MLIR gives a ? dimension (ShapedType.get_dynamic_size())

NEG = float(np.finfo(np.float32).min)
UNFUSED = ("builtin.module(fuel-fuse{runtime=false attention=false},fuel-decompose,"
           "fuel-fuse-runtime,fuel-reconcile-dtypes,fuel-cse,fuel-dce,canonicalize)")


def attention(b, hq, hkv, sq, sk, d, *, mask=None, scale="div", split_scale=False,
              axis=-1, repeat="expand", input_mask=None):
    """The ONNX model; ``mask``: None, ("where", keep[Sq,Sk] bool), ("fill", drop
    bool: Where(drop, NEG, scores)) or ("add", additive [Sq,Sk] f32), or
    ("input", ...): an additive mask fed as an input; ``input_mask``: the
    shape of an additive mask input ``am`` added after ``mask``."""
    inits, nodes = [], []
    q, k, v = "q", "k", "v"
    if hq != hkv:  # HF repeat_kv: Unsqueeze, Expand, Reshape
        g = hq // hkv
        inits += [numpy_helper.from_array(np.array([2], np.int64), "ax2"),
                  numpy_helper.from_array(np.array([b, hkv, g, sk, d], np.int64), "rep5"),
                  numpy_helper.from_array(np.array([b, hq, sk, d], np.int64), "rep4")]
        for t in ("k", "v"):
            nodes += [H.make_node("Unsqueeze", [t, "ax2"], [t + "5"]),
                      H.make_node("Expand", [t + "5", "rep5"], [t + "e"]),
                      H.make_node("Reshape", [t + "e", "rep4"], [t + "r"])]
        k, v = "kr", "vr"
    if split_scale:  # the scale as sqrt on each side
        inits.append(H.make_tensor("root", T.FLOAT, [], [d ** -0.25]))
        nodes += [H.make_node("Mul", [q, "root"], ["qs"]), H.make_node("Mul", [k, "root"], ["ks"])]
        q, k = "qs", "ks"
    nodes += [H.make_node("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]),
              H.make_node("MatMul", [q, "kt"], ["s0"])]
    last, inputs = "s0", []
    if scale == "div":
        inits.append(H.make_tensor("sd", T.FLOAT, [], [math.sqrt(d)]))
        nodes.append(H.make_node("Div", [last, "sd"], ["s1"]))
        last = "s1"
    elif scale == "mul":
        inits.append(H.make_tensor("sc", T.FLOAT, [], [1 / math.sqrt(d)]))
        nodes.append(H.make_node("Mul", ["sc", last], ["s1"]))
        last = "s1"
    elif scale == "input":
        inputs.append(H.make_tensor_value_info("sd", T.FLOAT, []))
        nodes.append(H.make_node("Div", [last, "sd"], ["s1"]))
        last = "s1"
    if mask is not None:
        kind, arr = mask
        inits.append(H.make_tensor("neg", T.FLOAT, [], [NEG]))
        if kind in ("where", "fill"):
            inits.append(numpy_helper.from_array(arr.reshape(1, 1, sq, sk), "m"))
            ins = ["m", last, "neg"] if kind == "where" else ["m", "neg", last]
            nodes.append(H.make_node("Where", ins, ["s2"]))
        elif kind == "add":
            inits.append(numpy_helper.from_array(arr.astype(np.float32).reshape(1, 1, sq, sk), "m"))
            nodes.append(H.make_node("Add", [last, "m"], ["s2"]))
        else:  # an additive mask computed from an input (BERT)
            inputs.append(H.make_tensor_value_info("m", T.FLOAT, [b, 1, 1, sk]))
            nodes.append(H.make_node("Add", [last, "m"], ["s2"]))
        last = "s2"
    if input_mask is not None:
        inputs.append(H.make_tensor_value_info("am", T.FLOAT, list(input_mask)))
        nodes.append(H.make_node("Add", [last, "am"], ["s3"]))
        last = "s3"
    nodes += [H.make_node("Softmax", [last], ["p"], axis=axis), H.make_node("MatMul", ["p", v], ["y"])]
    vi = lambda n, s: H.make_tensor_value_info(n, T.FLOAT, s)
    graph = H.make_graph(nodes, "attn", [vi("q", [b, hq, sq, d]), vi("k", [b, hkv, sk, d]),
                                         vi("v", [b, hkv, sk, d])] + inputs,
                         [vi("y", [b, hq, sq, d])], inits)
    return H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])


def feeds(model, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        shape = [x.dim_value for x in vi.type.tensor_type.shape.dim]
        out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    if "sd" in out:
        out["sd"] = np.array(8.0, np.float32)
    if "m" in out:
        m = np.zeros(out["m"].shape, np.float32)
        m[..., -2:] = NEG
        out["m"] = m
    if "am" in out:  # padding: the last quarter of the keys of odd rows; row 0 left-padded
        m = np.zeros(out["am"].shape, np.float32)
        m.reshape(-1, m.shape[-1])[1::2, m.shape[-1] - m.shape[-1] // 4:] = NEG
        m.reshape(-1, m.shape[-1])[0, :2] = NEG
        out["am"] = m
    return out


def tril(sq, sk, diag=0):
    return np.tril(np.ones((sq, sk), bool), diag)


def check(model, fused: bool):
    """Compile ``model``; it runs FlashAttn iff ``fused``; the output matches
    the reference interpreter, the unfused compile and onnxruntime."""
    x = feeds(model)
    g = import_model(model)
    m = compile(g, target="cpu")
    assert any("FlashAttn" in line for line in m.kernel_summary()) == fused, m.kernel_summary()
    got = np.asarray(m(**x))
    ref = np.asarray(interpret(g, x)["y"])
    unfused = np.asarray(compile(g, target="cpu", pipeline=UNFUSED)(**x))
    for want, what in ((ref, "reference"), (unfused, "unfused compile")):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6, err_msg=what)
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, x)[0], rtol=2e-5, atol=2e-6, err_msg="onnxruntime")


@pytest.mark.parametrize("b,h,s,d", [(1, 4, 32, 64), (2, 2, 13, 16), (1, 1, 33, 8)])
def test_causal_where_gpt2(b, h, s, d):
    check(attention(b, h, h, s, s, d, mask=("where", tril(s, s))), fused=True)


def test_causal_masked_fill_spelling():
    """Where(upper-triangular drop mask, finfo.min, scores): the branches swapped."""
    check(attention(1, 2, 2, 9, 9, 16, mask=("fill", ~tril(9, 9)), scale="mul"), fused=True)


@pytest.mark.parametrize("hq,hkv,s", [(8, 2, 32), (4, 1, 7), (6, 3, 20)])
def test_causal_additive_gqa_llama(hq, hkv, s):
    add = np.where(tril(s, s), 0.0, NEG)
    check(attention(1, hq, hkv, s, s, 32, mask=("add", add), scale="mul"), fused=True)


def test_causal_minus_inf_and_split_scale():
    add = np.where(tril(12, 12), 0.0, -np.inf)
    check(attention(2, 2, 2, 12, 12, 16, mask=("add", add), split_scale=True, scale=None),
          fused=True)


@pytest.mark.parametrize("sq,sk", [(5, 9), (2, 17), (16, 40)])
def test_causal_bottom_right_fewer_queries(sq, sk):
    """The last query sees every key (decoding against a cache): k_len = Sk."""
    check(attention(1, 2, 2, sq, sk, 16, mask=("where", tril(sq, sk, sk - sq))), fused=True)


@pytest.mark.parametrize("sq,sk", [(5, 9), (9, 5)])
def test_causal_top_left(sq, sk):
    """SDPA's is_causal alignment (key j <= query i), Sq != Sk."""
    check(attention(1, 2, 2, sq, sk, 16, mask=("where", tril(sq, sk))), fused=True)


@pytest.mark.parametrize("scale", ["div", "mul"])
def test_unmasked_is_not_fused(scale):
    """Matched, but without a causal mask the kernel does not pay for scores
    this small (``pays``: 2 x 33 x 33, below every target's size)."""
    check(attention(1, 2, 2, 33, 33, 16, scale=scale), fused=False)


@pytest.mark.parametrize("target, dtype, size", [
    ("cpu:x86-64-v3", "f32", 1 << 12), ("cpu:x86-64-v3", "f64", "SCORES_FUSED"),
    ("cpu:x86-64-v4", "f32", "SCORES_FUSED")])
def test_scores_fused_is_the_target_kernels(target, dtype, size):
    """Without a causal band, AVX2's f32 FlashAttn pays from 2^12 scores
    (``codegen.cpu.attention_scores``), which its kernel tells the pass; f64
    and AVX-512 kernels keep the pass's ``SCORES_FUSED``."""
    from runtime.dtype import DType
    from compiler.passes import _fuel
    from compiler.passes.fuse_attention import SCORES_FUSED, scores_fused
    from compiler.targets import parse_target
    t = parse_target(target)
    entry = _fuel.registry()["FlashAttn"]
    got = scores_fused(entry, [DType.parse(dtype)] * 4, t.table(), [t.backend])
    assert got == (SCORES_FUSED if size == "SCORES_FUSED" else size)


def test_vit_sized_attention_fuses_on_avx2():
    """ViT's 33 tokens at batch 1 (scores 4 x 33 x 33): FlashAttn on an AVX2
    target, the unfused steps' results within f32 precision."""
    model = attention(1, 4, 4, 33, 33, 64)
    x = feeds(model)
    g = import_model(model)
    m = compile(g, target="cpu:x86-64-v3")
    assert any("FlashAttn" in line for line in m.kernel_summary()), m.kernel_summary()
    ref = interpret(g, x)
    ref = np.asarray(ref[next(iter(ref))])
    np.testing.assert_allclose(np.asarray(m(**x)), ref, rtol=1e-5, atol=1e-5)


def test_bottom_right_with_fully_masked_rows_is_not_fused():
    """Sq > Sk, bottom-right: the first rows see no key; the unfused softmax of
    such a row is uniform (finfo.min) where FlashAttn's is 0."""
    check(attention(1, 1, 1, 6, 4, 8, mask=("where", tril(6, 4, -2))), fused=False)


@pytest.mark.parametrize("keep", [tril(8, 8) & ~tril(8, 8, -3),     # a sliding window
                                  tril(8, 8, 1)])                    # off by one
def test_not_causal_constant_mask_is_not_fused(keep):
    check(attention(1, 2, 2, 8, 8, 16, mask=("where", keep)), fused=False)


def test_input_mask_is_not_fused():
    """BERT's additive mask from attention_mask, no causal band: matched (the
    mask an operand) but the kernel does not pay for scores this small (``pays``)."""
    check(attention(2, 2, 2, 8, 8, 16, mask=("input", None)), fused=False)


@pytest.mark.parametrize("am", [None, (2, 1, 1, 256)])
def test_large_scores_fuse_without_band(am):
    """Scores of ``SCORES_FUSED`` elements (2 x 4 x 256 x 256) fuse without a
    causal band (``pays``), unmasked or with BERT's input mask as the 4th operand."""
    from compiler.passes.fuse_attention import SCORES_FUSED
    assert 2 * 4 * 256 * 256 == SCORES_FUSED
    check(attention(2, 4, 4, 256, 256, 8, scale="mul", input_mask=am), fused=True)


@pytest.mark.parametrize("scores, fused", [
    ((2, 4, 256, 256), True), ((2, 4, 128, 256), False),
    ((DYN, 4, 512, 512), True),     # a symbolic batch: the static extents reach the size
    ((DYN, 4, 128, 128), False), ((DYN, 12, DYN, DYN), False)])
def test_pays_counts_a_symbolic_extent_as_one(scores, fused):
    """``pays`` without a causal band: the scores' element count against
    ``SCORES_FUSED``, a ``?`` extent (MLIR's dynamic sentinel, whose raw product
    overflows) counted as 1."""
    from compiler.passes.fuse_attention import _Match, pays
    match = _Match(None, None, None, 1.0, False, None, [], None, scores)
    assert pays(match) is fused
    assert pays(dataclasses.replace(match, causal=True))


@pytest.mark.parametrize("am", [(2, 1, 1, 12), (2, 1, 12, 12), (1, 1, 12, 12), (12, 12)])
def test_causal_with_input_mask(am):
    """A constant causal band of -inf and an additive padding mask fed as an
    input (BERT's [B,1,1,Sk], a per-row [B,1,Sq,Sk], shared [1,1,Sq,Sk] or
    [Sq,Sk]; row 0's first keys masked, so it has no key in its band): the
    mask becomes FlashAttn's 4th operand."""
    causal = np.where(tril(12, 12), 0.0, -np.inf)
    check(attention(2, 2, 2, 12, 12, 16, mask=("add", causal), input_mask=am), fused=True)


def test_causal_where_finfo_min_with_input_mask_is_not_fused():
    """GPT-2's Where(causal, scores, finfo.min) + a padding mask: a row whose
    band the mask fills (left padding) spreads unfused over every key (all
    about finfo.min), fused over its band only: left unfused."""
    check(attention(2, 2, 2, 12, 12, 16, mask=("where", tril(12, 12)), input_mask=(2, 1, 1, 12)),
          fused=False)


@pytest.mark.parametrize("am", [(2, 1, 12, 1), (12,)])
def test_input_mask_flash_attn_cannot_read_is_not_fused(am):
    """A mask of one value per query row ([B,1,Sq,1]) or of rank 1 ([Sk]):
    the Add broadcasts it, FlashAttn's mask operand does not: left unfused."""
    causal = np.where(tril(12, 12), 0.0, -np.inf)
    check(attention(2, 2, 2, 12, 12, 16, mask=("add", causal), input_mask=am), fused=False)


def test_scale_not_a_constant_is_not_fused():
    check(attention(1, 2, 2, 8, 8, 16, mask=("where", tril(8, 8)), scale="input"), fused=False)


def test_softmax_over_another_axis_is_not_fused():
    check(attention(1, 2, 2, 8, 8, 16, mask=("where", tril(8, 8)), axis=2), fused=False)


@pytest.mark.parametrize("b,hq,hkv,alibi", [(2, 4, 4, False), (1, 8, 2, False), (1, 4, 4, True),
                                           (2, 4, 4, (2, 1, 1, 64)), (1, 8, 2, (1, 8, 64, 64)),
                                           (1, 4, 2, (64, 64))])
def test_flash_attn_split_over_threads(b, hq, hkv, alibi):
    """A FlashAttn call cut by batch, or by kv heads with their query heads and
    alibi slopes or additive mask (a shape: cut where it has the axis, else
    whole; codegen/fused.py ``_attn_tiles``), gives the one-thread result bit
    for bit."""
    from compiler.testing import same_bits_at_threads
    from compiler.graph import Graph
    from compiler.registry.builders import fused
    g = Graph()
    a_shape = (hq,) if alibi is True else alibi
    ins = [g.input("q", (b, hq, 64, 32), "f32"), g.input("k", (b, hkv, 64, 32), "f32"),
           g.input("v", (b, hkv, 64, 32), "f32")] + ([g.input("a", a_shape, "f32")] if alibi else [])
    g.output(fused("FlashAttn", *ins, softmax_scale=0.2, causal=True), "y")
    rng = np.random.default_rng(3)
    x = {n: rng.standard_normal(s).astype(np.float32) for n, s in
         (("q", (b, hq, 64, 32)), ("k", (b, hkv, 64, 32)), ("v", (b, hkv, 64, 32)))}
    if alibi is True:
        x["a"] = rng.standard_normal(hq).astype(np.float32)
    elif alibi:
        x["a"] = np.where(rng.uniform(size=a_shape) < 0.3, NEG, 0).astype(np.float32)
    y = same_bits_at_threads(lambda: compile(g, target="cpu")(**x))
    # f32 against the f64 reference: alibi scores reach ~60 (N(0,1) slopes x 63 keys)
    np.testing.assert_allclose(y, interpret(g, x)["y"], rtol=2e-5, atol=1e-5)


def test_symbolic_batch_module_saves_one_file(tmp_path):
    """A symbolic module's bindings fuse the attention: the FlashAttn kernel
    takes the batch (and sequence) at run time, one .fuel file runs every
    batch, and a new batch compiles no kernel."""
    import runtime
    from compiler.codegen import family
    model = attention(2, 2, 2, 16, 16, 16, mask=("where", tril(16, 16)))
    for vi in list(model.graph.input) + list(model.graph.output):
        dim = vi.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_value")
        dim.dim_param = "batch"
    g = import_model(model)
    m = compile(g, target="cpu")
    x = feeds(attention(3, 2, 2, 16, 16, 16, mask=("where", tril(16, 16))))
    want = np.asarray(m(**x))
    np.testing.assert_allclose(want, interpret(g, x)["y"], rtol=2e-5, atol=2e-6)
    assert [line for line in m.kernel_summary() if "FlashAttn" in line] == [
        "FlashAttn[f32,f32,f32,f32] (mlir-cpu-fused) [run-time extents]"], m.kernel_summary()
    compiled = set(family._compiled)
    x5 = feeds(attention(5, 2, 2, 16, 16, 16, mask=("where", tril(16, 16))), seed=1)
    want5 = np.asarray(m(**x5))
    assert set(family._compiled) == compiled, "a new batch compiled a kernel"
    lm = runtime.load(m.save(tmp_path / "m.fuel"))
    np.testing.assert_array_equal(np.asarray(lm(**x)), want)
    np.testing.assert_array_equal(np.asarray(lm(**x5)), want5)
