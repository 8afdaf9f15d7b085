"""RNN, GRU and LSTM imported (unrolled over the sequence), compiled for the
CPU and compared with onnxruntime: each direction, layout, sequence_lens
(constant and at run time), initial states, activation attributes, clip,
linear_before_reset, peepholes, input_forget; and the refused attributes."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import compiler  # noqa: E402
from compiler.frontends.onnx import OnnxImportError, import_model  # noqa: E402
from test_onnx_import import check, make, node, ort_run, vi  # noqa: E402

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
RNG = np.random.default_rng(7)
T, B, I, H = 4, 3, 5, 6


def rnn_model(op, direction="forward", layout=0, lens=None, states=False, peep=False,
              const_weights=False, **attrs):
    """One ``op`` node over X [T, B, I] (layout 1: [B, T, I]); every output used."""
    d = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x_shape = [B, T, I] if layout else [T, B, I]
    s_shape = [B, d, H] if layout else [d, B, H]
    vals = {"W": RNG.uniform(-1, 1, (d, g * H, I)), "R": RNG.uniform(-1, 1, (d, g * H, H)),
            "Bias": RNG.uniform(-1, 1, (d, 2 * g * H))}
    feeds = {"X": RNG.uniform(-2, 2, x_shape)}
    inputs = [vi("X", shape=x_shape)]
    names = ["X", "W", "R", "Bias", "", "", "", ""]
    if lens is not None:
        vals["lens"] = np.asarray(lens, np.int32)
        names[4] = "lens"
    if states:
        vals["h0"] = RNG.uniform(-1, 1, s_shape)
        names[5] = "h0"
        if op == "LSTM":
            vals["c0"] = RNG.uniform(-1, 1, s_shape)
            names[6] = "c0"
    if peep:
        vals["P"] = RNG.uniform(-1, 1, (d, 3 * H))
        names[7] = "P"
    vals = {k: v if v.dtype == np.int32 else v.astype(np.float32) for k, v in vals.items()}
    inits = {}
    for k, v in vals.items():
        if const_weights:
            inits[k] = v
        else:
            feeds[k] = v
            inputs.append(vi(k, TensorProto.INT32 if v.dtype == np.int32 else TensorProto.FLOAT,
                             list(v.shape)))
    names = names[:max(i for i, n in enumerate(names) if n) + 1]
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    n = node(op, names, outs, hidden_size=H, direction=direction, layout=layout, **attrs)
    m = make([n], inputs, [vi(o) for o in outs], inits, opset=22)
    return m, {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in feeds.items()}


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction,layout,lens,states", [
    ("forward", 0, None, False),
    ("reverse", 0, [4, 2, 0], True),
    ("bidirectional", 1, [1, 4, 3], True),
])
def test_recurrent_matches_onnxruntime(op, direction, layout, lens, states):
    """onnxruntime has no layout=1: there, the same node in layout 0 on
    transposed inputs, its outputs transposed back, is the reference."""
    seed = RNG.bit_generator.state
    m, feeds = rnn_model(op, direction, layout, lens, states, peep=op == "LSTM" and states)
    if layout == 0:
        check(m, feeds, compile_it=True, rtol=1e-4, atol=1e-5)
        return
    RNG.bit_generator.state = seed
    m0, _ = rnn_model(op, direction, 0, lens, states, peep=op == "LSTM" and states)
    swap = {"X": (1, 0, 2), "h0": (1, 0, 2), "c0": (1, 0, 2)}
    want = ort_run(m0, {k: v.transpose(swap[k]) if k in swap else v for k, v in feeds.items()})
    got = compiler.compile(import_model(m))(**feeds)
    for k, w in want.items():
        w = w.transpose((2, 0, 1, 3)) if k == "Y" else w.transpose((1, 0, 2))
        np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("op,attrs", [
    ("RNN", dict(activations=["Relu"], clip=1.5)),
    ("RNN", dict(activations=["LeakyRelu", "HardSigmoid"], activation_alpha=[0.3, 0.4],
                 activation_beta=[0.2], direction="bidirectional")),
    ("GRU", dict(linear_before_reset=1, clip=0.8)),
    ("GRU", dict(activations=["HardSigmoid", "Softsign"], activation_alpha=[0.25],
                 activation_beta=[0.4])),
    ("LSTM", dict(input_forget=1, clip=2.0)),
    ("LSTM", dict(activations=["Sigmoid", "Elu", "Softplus"], activation_alpha=[0.7])),
])
def test_recurrent_attributes_match_onnxruntime(op, attrs):
    """Constant weights (folded transposes) and constant sequence_lens too."""
    m, feeds = rnn_model(op, lens=[3, 4, 1], states=True, const_weights=True, **attrs)
    check(m, feeds, compile_it=True, rtol=1e-4, atol=1e-5)


def test_recurrent_refusals_name_the_attribute():
    m, _ = rnn_model("GRU", activations=["Sigmoid", "Gelu"])
    with pytest.raises(OnnxImportError, match="activation 'Gelu'"):
        import_model(m)
    m, _ = rnn_model("LSTM", activations=["Sigmoid", "Tanh"])
    with pytest.raises(OnnxImportError, match="LSTM takes 3 per direction"):
        import_model(m)
    m, _ = rnn_model("RNN", activations=["Affine"])
    with pytest.raises(OnnxImportError, match="'Affine' needs activation_alpha"):
        import_model(m)
    m, _ = rnn_model("RNN", lens=[5, 1, 1], const_weights=True)
    with pytest.raises(OnnxImportError, match=r"sequence_lens \[5, 1, 1\] for 3 rows of 4"):
        import_model(m)
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT16, [T, B, I])
    w = np.zeros((1, H, I), np.float16)
    r = np.zeros((1, H, H), np.float16)
    m = make([node("RNN", ["X", "W", "R"], ["Y"], hidden_size=H)], [x],
             [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, None)],
             {"W": w, "R": r}, opset=22)
    with pytest.raises(OnnxImportError, match="RNN of f16 X"):
        import_model(m)


def _linear_attention_model(rule, hq=4, hkv=2, past=False, decay_last=None, beta_last=1,
                            elem=TensorProto.FLOAT, **attrs):
    b, t, dk, dv = 2, 5, 4, 3
    np_dt = np.float16 if elem == TensorProto.FLOAT16 else np.float32
    shapes = {"query": [b, t, hq * dk], "key": [b, t, hkv * dk], "value": [b, t, hkv * dv]}
    names = ["query", "key", "value", "", "", ""]
    if past:
        shapes["past_state"] = [b, hkv, dk, dv]
        names[3] = "past_state"
    if rule in ("gated", "gated_delta"):
        shapes["decay"] = [b, t, decay_last or hkv * dk]
        names[4] = "decay"
    if rule in ("delta", "gated_delta"):
        shapes["beta"] = [b, t, beta_last]
        names[5] = "beta"
    feeds = {k: RNG.uniform(-1, 1, s).astype(np_dt) for k, s in shapes.items()}
    if "decay" in feeds:
        feeds["decay"] = -np.abs(feeds["decay"])  # log decay rates
    if "beta" in feeds:
        feeds["beta"] = np.abs(feeds["beta"])
    names = names[:max(i for i, n in enumerate(names) if n) + 1]
    n = node("LinearAttention", names, ["y", "state"], q_num_heads=hq, kv_num_heads=hkv,
             update_rule=rule, **attrs)
    m = make([n], [vi(k, elem, s) for k, s in shapes.items()], [vi("y", elem, [b, t, hq * dv]), vi("state", elem, [b, hkv, dk, dv])],
             opset=27)
    return m, feeds


@pytest.mark.skipif(onnx.defs.onnx_opset_version() < 27, reason="LinearAttention is opset 27")
@pytest.mark.parametrize("rule,kw", [
    ("linear", dict(past=True, scale=0.3)),
    ("gated", dict(decay_last=2)),
    ("delta", dict(hq=2, beta_last=2)),
    ("gated_delta", dict(past=True)),
    ("gated_delta", dict(elem=TensorProto.FLOAT16)),
])
def test_linear_attention_matches_onnx_reference(rule, kw):
    """Unrolled over the steps, compiled; onnxruntime has no LinearAttention,
    so ONNX's reference evaluator is the reference."""
    from onnx.reference import ReferenceEvaluator
    m, feeds = _linear_attention_model(rule, **kw)
    want = ReferenceEvaluator(m).run(None, feeds)
    got = compiler.compile(import_model(m))(**feeds)
    f16 = kw.get("elem") == TensorProto.FLOAT16
    for name, w in zip(("y", "state"), want):
        assert got[name].dtype == w.dtype
        np.testing.assert_allclose(got[name].astype(np.float32), w.astype(np.float32),
                                   rtol=1e-3 if f16 else 1e-5, atol=1e-3 if f16 else 1e-6,
                                   err_msg=name)


@pytest.mark.skipif(onnx.defs.onnx_opset_version() < 27, reason="LinearAttention is opset 27")
def test_linear_attention_refusals_name_the_inputs():
    m, _ = _linear_attention_model("gated", decay_last=3)
    with pytest.raises(OnnxImportError, match="decay of last extent 3"):
        import_model(m)
    m, _ = _linear_attention_model("delta", beta_last=3)
    with pytest.raises(OnnxImportError, match="beta of last extent 3"):
        import_model(m)
    m, _ = _linear_attention_model("linear", hq=3, hkv=2)
    with pytest.raises(OnnxImportError, match="q_num_heads must be a multiple"):
        import_model(m)
