"""ONNX external data is mapped, never read into memory by the importer, and
kept a view through the compiler; its path and extent are checked
(onnx.checker's rules: relative, no '..', inside the model's directory, a
regular file; offset and length within the file)."""
from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from compiler import compile  # noqa: E402
from compiler.frontends.onnx import OnnxImportError, import_model  # noqa: E402

W = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32)


def _save(d, location="w.bin", offset=None, length=None, data=W):
    """m.onnx in ``d``: y = x @ W with W's data in ``location``
    (written there unless it already exists), at ``offset`` / ``length``."""
    init = numpy_helper.from_array(data, "W")
    init.ClearField("raw_data")
    init.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            init.external_data.add(key=k, value=str(v))
    target = os.path.join(d, location)
    if not os.path.lexists(target) and os.path.isdir(os.path.dirname(target)):
        with open(target, "wb") as f:
            f.write(bytes(offset or 0) + data.tobytes())
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])], [init])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = os.path.join(d, "m.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return path


def test_external_data_is_mapped_and_stays_a_view(tmp_path):
    path = _save(tmp_path, offset=4096)
    g = import_model(path)
    (w,) = g.constants.values()
    mm = np.memmap(tmp_path / "w.bin", dtype=np.float32, mode="r", offset=4096, shape=W.shape)
    assert not w.flags.writeable and isinstance(w.base, np.memmap)
    np.testing.assert_array_equal(w, W)
    m = compile(g)
    (c,) = m.plan.constants.values()
    assert np.shares_memory(c, w) and c.ctypes.data == w.ctypes.data  # never copied
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_allclose(m(x=x), x @ mm, rtol=1e-5, atol=1e-5)


# (import_model runs onnx.checker first, which refuses some cases itself; the
# importer's own checks are the same rules, applied to what it maps)
CASES = [
    ("absolute", "must be a path relative to the model's directory, without '..'"),
    ("dotdot", "must be a path relative to the model's directory, without '..'"),
    ("symlink", "outside the model's directory .* \\(a symlink out of it\\)"),
    ("directory", "is not a regular file"),
    ("beyond", r"must be the tensor's 2048 bytes .* inside the file's 2052 bytes"),
    ("length", r"external data \[0, 100\) .* must be the tensor's 2048 bytes"),
    ("missing", "No such file"),
]


@pytest.mark.parametrize("case, match", CASES)
def test_unsafe_or_inconsistent_external_data_is_refused(tmp_path, case, match):
    """Each case through import_model (onnx.checker or the importer refuses
    it) and through the importer's own mapping (``external_data``)."""
    import onnx
    from compiler.frontends.onnx import external_data
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    outside = tmp_path / "secret.bin"
    outside.write_bytes(W.tobytes())
    kw = {
        "absolute": dict(location=str(outside)),
        "dotdot": dict(location="../secret.bin"),
        "symlink": dict(location="link.bin"),
        "directory": dict(location="sub"),
        "beyond": dict(offset=8),  # written with 8 bytes of padding ...
        "length": dict(length=100),
        "missing": dict(location="nope.bin"),
    }[case]
    if case == "symlink":
        os.symlink(outside, model_dir / "link.bin")
    if case == "directory":
        (model_dir / "sub").mkdir()
    if case == "missing":
        kw["location"] = "gone/nope.bin"  # a directory that does not exist: nothing written
    path = _save(model_dir, **kw)
    if case == "beyond":
        with open(model_dir / "w.bin", "r+b") as f:  # ... then cut short by 4 bytes
            f.truncate(8 + W.nbytes - 4)
    with pytest.raises(OnnxImportError, match=f"onnx.checker|{match}"):
        import_model(path)
    (init,) = onnx.load(path, load_external_data=False).graph.initializer
    with pytest.raises(OnnxImportError, match=f"initializer 'W'.*{match}"):
        external_data(init, str(model_dir))


def test_a_model_proto_with_external_data_needs_its_path(tmp_path):
    import onnx
    path = _save(tmp_path)
    with pytest.raises(OnnxImportError, match="import the model by its path|external"):
        import_model(onnx.load(path, load_external_data=False))
