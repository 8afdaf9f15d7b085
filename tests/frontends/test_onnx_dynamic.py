"""ONNX models with symbolic batch/sequence dims: imported once, compiled once,
run at several sizes, compared with onnxruntime (docs/dynamic-shapes.md)."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import compiler  # noqa: E402
from compiler.frontends.onnx import import_model  # noqa: E402
from test_onnx_import import encoder_block, make, node, ort_run, vi  # noqa: E402

RNG = np.random.default_rng(3)


def test_symbolic_mlp_compiles_once_for_every_batch():
    w = RNG.standard_normal((6, 4)).astype(np.float32)
    model = make([node("MatMul", ["x", "w"], ["h"]), node("Relu", ["h"], ["y"])],
                 [vi("x", shape=["batch", 6])], [vi("y", shape=["batch", 4])], {"w": w})
    m = compiler.compile(import_model(model))
    for batch in (1, 5):
        x = RNG.standard_normal((batch, 6)).astype(np.float32)
        np.testing.assert_allclose(m(x=x), ort_run(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)
    with pytest.raises(compiler.ShapeSignatureError, match="axis 1: size 7.*fixes 6"):
        m(x=np.zeros((2, 7), np.float32))


@pytest.mark.slow
def test_bert_style_encoder_symbolic_batch_and_seq_matches_onnxruntime():
    """Shape -> Slice -> Concat heads targets and Range position ids over the
    symbolic sequence length, one compile, four sizes."""
    model, _ = encoder_block(64, 4, 256, 16, batch=2)
    g = import_model(model)
    assert g.signature()["outputs"] == {"y": "f32[batch,seq,64]"}
    m = compiler.compile(g)
    for batch, seq in ((2, 16), (1, 5), (3, 9), (1, 1)):
        _, feeds = encoder_block(64, 4, 256, seq, batch=batch)
        np.testing.assert_allclose(m(**feeds), ort_run(model, feeds)["y"], rtol=1e-4, atol=2e-4)
    assert len(m.bindings) == 4
