"""Ops with graph attributes, resolved at import: Scan, Loop and If unrolled
or chosen (vs onnxruntime), FlexAttention's score_mod/prob_mod (vs ONNX's
reference); and their refusals."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import compiler  # noqa: E402
from compiler.frontends.onnx import OnnxImportError, import_model  # noqa: E402
from test_onnx_import import check, make, node, vi  # noqa: E402

RNG = np.random.default_rng(11)


def _graph(nodes, inputs, outputs, inits=None):
    from onnx import numpy_helper
    return helper.make_graph(nodes, "body", inputs, outputs,
                             initializer=[numpy_helper.from_array(v, k)
                                          for k, v in (inits or {}).items()])


def test_scan_unrolled_matches_onnxruntime():
    """A running sum and product over a reversed scan input, an outer-scope
    weight read in the body, scan outputs stacked on axis 0 and (reversed) 1."""
    body = _graph([node("Add", ["s_in", "x_t"], ["s_out"]),
                   node("MatMul", ["x_t", "w"], ["xw"]),
                   node("Mul", ["p_in", "xw"], ["p_out"]),
                   node("Identity", ["s_out"], ["y1"]), node("Tanh", ["xw"], ["y2"])],
                  [vi("s_in", shape=[2, 3]), vi("p_in", shape=[2, 3]), vi("x_t", shape=[2, 3])],
                  [vi("s_out", shape=[2, 3]), vi("p_out", shape=[2, 3]), vi("y1", shape=[2, 3]),
                   vi("y2", shape=[2, 3])])
    n = node("Scan", ["s0", "p0", "xs"], ["s", "p", "ys1", "ys2"], body=body,
             num_scan_inputs=1, scan_input_axes=[1], scan_input_directions=[1],
             scan_output_axes=[0, 1], scan_output_directions=[0, 1])
    m = make([n], [vi("s0", shape=[2, 3]), vi("p0", shape=[2, 3]), vi("xs", shape=[2, 4, 3])],
             [vi("s"), vi("p"), vi("ys1"), vi("ys2")],
             {"w": RNG.uniform(-1, 1, (3, 3)).astype(np.float32)})
    feeds = {"s0": RNG.uniform(-1, 1, (2, 3)).astype(np.float32),
             "p0": RNG.uniform(-1, 1, (2, 3)).astype(np.float32),
             "xs": RNG.uniform(-1, 1, (2, 4, 3)).astype(np.float32)}
    check(m, feeds, compile_it=True)


def test_loop_and_if_with_constants_known_at_import_match_onnxruntime():
    """Loop: a constant trip count, a condition that folds in the body, the
    iteration number feeding a Slice, a scan output; If: a constant
    condition picks the branch, which reads an outer value."""
    body = _graph([node("Add", ["i", "one"], ["end"]),
                   node("Unsqueeze", ["i", "zero"], ["lo"]),
                   node("Unsqueeze", ["end", "zero"], ["hi"]),
                   node("Slice", ["table", "lo", "hi"], ["row"]),
                   node("Mul", ["y_in", "row"], ["y_out"]),
                   node("Less", ["end", "stop"], ["c_out"]),
                   node("Identity", ["y_out"], ["scan"])],
                  [vi("i", TensorProto.INT64, []), vi("c_in", TensorProto.BOOL, []),
                   vi("y_in", shape=[1])],
                  [vi("c_out", TensorProto.BOOL, []), vi("y_out", shape=[1]),
                   vi("scan", shape=[1])],
                  {"one": np.array(1, np.int64), "zero": np.array([0], np.int64),
                   "stop": np.array(4, np.int64)})
    then = _graph([node("Neg", ["y"], ["t"])], [], [vi("t", shape=[1])])
    other = _graph([node("Exp", ["y"], ["e"])], [], [vi("e", shape=[1])])
    m = make([node("Loop", ["trip", "cond", "y0"], ["y", "ys"], body=body),
              node("If", ["flag"], ["z"], then_branch=then, else_branch=other)],
             [vi("y0", shape=[1]), vi("table", shape=[6])],
             [vi("y", shape=[1]), vi("ys", shape=[4, 1]), vi("z", shape=[1])],
             {"trip": np.array(6, np.int64), "cond": np.array(True),
              "flag": np.array(False)}, opset=17)
    feeds = {"y0": np.array([1.5], np.float32),
             "table": RNG.uniform(0.5, 2, 6).astype(np.float32)}
    check(m, feeds, compile_it=True)  # the body's condition stops it after 4 iterations


def test_control_flow_refusals_name_what_must_be_constant():
    body = _graph([node("Identity", ["c_in"], ["c_out"]), node("Neg", ["y_in"], ["y_out"])],
                  [vi("i", TensorProto.INT64, []), vi("c_in", TensorProto.BOOL, []),
                   vi("y_in", shape=[1])],
                  [vi("c_out", TensorProto.BOOL, []), vi("y_out", shape=[1])])
    m = make([node("Loop", ["trip", "cond", "y0"], ["y"], name="lp", body=body)],
             [vi("trip", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []),
              vi("y0", shape=[1])], [vi("y", shape=[1])])
    with pytest.raises(OnnxImportError, match=r"Loop node 'lp': .*input\(s\) \['trip', 'cond'\] "
                                              r"are computed at run time"):
        import_model(m)
    m = make([node("Loop", ["trip", "", "y0"], ["y"], name="lp", body=body)],
             [vi("y0", shape=[1])], [vi("y", shape=[1])], {"trip": np.array(10 ** 6, np.int64)})
    with pytest.raises(OnnxImportError, match="a trip count of 1000000"):
        import_model(m)
    branch = _graph([node("Neg", ["y0"], ["t"])], [], [vi("t", shape=[1])])
    m = make([node("If", ["c"], ["z"], name="if", then_branch=branch, else_branch=branch)],
             [vi("c", TensorProto.BOOL, []), vi("y0", shape=[1])], [vi("z", shape=[1])])
    with pytest.raises(OnnxImportError, match="If node 'if': input 'c' is computed at run time"):
        import_model(m)
    seq = _graph([node("SequenceConstruct", ["y0"], ["s"])], [],
                 [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [1])])
    m = make([node("If", ["c"], ["z"], name="if", then_branch=branch, else_branch=seq)],
             [vi("y0", shape=[1])], [vi("z", shape=[1])], {"c": np.array(False)})
    with pytest.raises(OnnxImportError, match="its body holds a SequenceConstruct node"):
        import_model(m)


@pytest.mark.skipif(onnx.defs.onnx_opset_version() < 26, reason="FlexAttention needs opset 26")
@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.FLOAT16])
def test_flex_attention_mods_match_onnx_reference(elem):
    """ai.onnx.preview FlexAttention with a score_mod (a bias read from the
    mod graph's initializer) and a prob_mod, grouped-query heads."""
    from onnx.reference import ReferenceEvaluator
    np_dt = np.float16 if elem == TensorProto.FLOAT16 else np.float32
    score = _graph([node("Mul", ["scores", "k2"], ["scores_out"])],
                   [vi("scores", shape=None)], [vi("scores_out", shape=None)],
                   {"k2": np.array(0.5, np.float32)})
    prob = _graph([node("Sqrt", ["probs"], ["probs_out"])], [vi("probs", shape=None)],
                  [vi("probs_out", shape=None)])
    n = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview",
                         score_mod=score, prob_mod=prob, scale=0.4)
    shapes = {"q": [1, 4, 3, 8], "k": [1, 2, 5, 8], "v": [1, 2, 5, 6]}
    g = helper.make_graph([n], "t", [vi(k, elem, s) for k, s in shapes.items()],
                          [vi("y", elem, [1, 4, 3, 6])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 26),
                                            helper.make_opsetid("ai.onnx.preview", 1)])
    feeds = {k: RNG.uniform(-1, 1, s).astype(np_dt) for k, s in shapes.items()}
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    got = compiler.compile(import_model(m))(**feeds)
    assert got.dtype == want.dtype
    tol = 2e-3 if elem == TensorProto.FLOAT16 else 1e-6
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol,
                               atol=tol)
