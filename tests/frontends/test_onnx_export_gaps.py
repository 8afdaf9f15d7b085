"""Importer gaps that PyTorch exports exposed (tests/frontends/
test_onnx_torch_export.py), each checked on its own without torch:
ScatterElements with run-time indices (pack_padded_sequence's inverse
permutation), and constant folding through log(0) and a cast of -inf (T5's
relative position buckets)."""
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import compiler  # noqa: E402
from compiler.frontends.onnx import OnnxImportError, import_model  # noqa: E402
from runtime.errors import IndexOutOfRangeError  # noqa: E402
from test_onnx_import import make, node, ort_run, vi  # noqa: E402


def scatter_elements(shape, ishape, axis, reduction="none"):
    n = node("ScatterElements", ["x", "i", "u"], ["y"], axis=axis, reduction=reduction)
    return make([n], [vi("x", shape=list(shape)), vi("i", onnx.TensorProto.INT64, list(ishape)),
                      vi("u", shape=list(ishape))], [vi("y", shape=list(shape))], opset=18)


@pytest.mark.parametrize("shape,axis,reduction,idx", [
    ((5,), 0, "none", [3, 0, 4, 1, 2]),  # a permutation (pack_padded_sequence)
    ((5,), 0, "none", [-1, 0, -1]),  # negative; a duplicate: the last update wins
    ((3, 4), 1, "none", [[0, 3], [2, 2], [-4, 1]]),
    ((4, 3), 0, "add", [[0, 3, 1], [0, 1, 1]]),
    ((4, 3), 0, "add", [[0, 3], [0, 1]]),  # indices covering part of data
])
def test_scatter_elements_with_run_time_indices(shape, axis, reduction, idx):
    idx = np.asarray(idx, np.int64)
    model = scatter_elements(shape, idx.shape, axis, reduction)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32), "i": idx,
             "u": rng.standard_normal(idx.shape).astype(np.float32)}
    want = ort_run(model, feeds)["y"]
    g = import_model(model)
    # none: exact; add: duplicates may sum in another order (1 ulp)
    for got in (compiler.interpret(g, feeds)["y"], compiler.compile(g)(**feeds)):
        np.testing.assert_allclose(got, want, rtol=0 if reduction == "none" else 1e-6, atol=0)


@pytest.mark.parametrize("shape,ishape,reduction", [
    ((4, 3), (2, 3), "mul"), ((4, 3), (2, 3), "max"), ((4, 3), (2, 3), "min"),
    ((4, 3), (2, 2), "none"),  # none with indices covering part of data
])
def test_scatter_elements_with_run_time_indices_refusals(shape, ishape, reduction):
    with pytest.raises(OnnxImportError, match=r"ScatterElements .*input 'i' is computed at run "
                                              r"time; fuelc needs it constant at import"):
        import_model(scatter_elements(shape, ishape, 0, reduction))


def test_scatter_elements_run_time_index_out_of_range_raises():
    m = compiler.compile(import_model(scatter_elements((5,), (5,), 0)))
    with pytest.raises(IndexOutOfRangeError, match="value 5 at position \\[2\\] is out of range"):
        m(x=np.zeros(5, np.float32), i=np.array([0, 1, 5, 2, 3]), u=np.ones(5, np.float32))


def test_folded_log_of_zero_and_its_integer_cast_warn_nothing():
    """T5's bucket math folds at import through log(0) = -inf and a cast of -inf
    to int64, a value the following Where drops: no numpy RuntimeWarning."""
    rel = np.array([0, 1, 3, 9], np.int64)
    nodes = [node("Cast", ["rel"], ["f"], to=onnx.TensorProto.FLOAT),
             node("Log", ["f"], ["lg"]),
             node("Cast", ["lg"], ["li"], to=onnx.TensorProto.INT64),
             node("Less", ["rel", "two"], ["small"]),
             node("Where", ["small", "rel", "li"], ["b"]),
             node("Cast", ["b"], ["bf"], to=onnx.TensorProto.FLOAT),
             node("Add", ["x", "bf"], ["y"])]
    model = make(nodes, [vi("x", shape=[4])], [vi("y", shape=[4])],
                 {"rel": rel, "two": np.array(2, np.int64)})
    x = np.arange(4, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        g = import_model(model)
    np.testing.assert_array_equal(compiler.interpret(g, {"x": x})["y"],
                                  ort_run(model, {"x": x})["y"])
