"""A conv net with a symbolic batch in one .fuel file (docs/dynamic-shapes.md,
"One file for every size"): the reduced MobileNet of benchmarks/models.py,
saved once, runs batch 1, 3, 8 in a process without the compiler, matching
onnxruntime, all from one plan (the few-pixel conv recipe is the same for
one image and for a batch). A binding whose plan differs from the other
sizes' (made here by a recipe that plans one more step for a single image)
is held apart as ``symbolic.fixed``; a damaged one is refused. With a
symbolic image size too, one file serves every image size down to 1x1 (its
extents fitted over floor quotients; its convs take the kernels of
run-time extents at every size, no few-pixel form)."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import runtime  # noqa: E402
from compiler import compile  # noqa: E402
from compiler.frontends.onnx import import_model  # noqa: E402
from runtime.manifest import ManifestFieldError  # noqa: E402
from test_artifact_validation import _rewrite  # noqa: E402
from test_symbolic_artifact import _outputs_without_compiler  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks import models as bm  # noqa: E402

RNG = np.random.default_rng(5)
TOL = 1e-4  # max |fuelc - ort| / max |ort|


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model = bm.symbolic(bm.build("mobilenet", 1, image=32))
    module = compile(import_model(model))
    return model, module, module.save(tmp_path_factory.mktemp("conv") / "mobilenet.fuel")


@pytest.fixture(scope="module")
def saved_fixed(tmp_path_factory):
    """The same model through a few-pixel conv recipe that, for one image
    only, negates the product twice (the same values, two more elementwise
    ops): batch 1's plan then differs from the other sizes' and the file
    holds it apart."""
    from compiler.registry.grammar import op
    from compiler.registry.ops import conv2d
    real = conv2d._few_pixels

    def one_image_apart(params, types):
        y = real(params, types)
        return op("Neg", op("Neg", y)) if types[0].shape[0] == 1 else y

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conv2d, "_few_pixels", one_image_apart)
        model = bm.symbolic(bm.build("mobilenet", 1, image=32))
        module = compile(import_model(model))
        return model, module, module.save(tmp_path_factory.mktemp("fixed") / "mobilenet.fuel")


def test_conv_net_file_runs_every_batch_without_the_compiler(saved, tmp_path):
    model, module, path = saved
    lm = runtime.load(path)
    assert lm.signature["inputs"] == {"x": "f32[batch,3,32,32]"}
    assert "fixed" not in lm.manifest["symbolic"]  # one plan for every batch
    feeds = {f"b{n}": {"x": RNG.standard_normal((n, 3, 32, 32)).astype(np.float32)}
             for n in (1, 3, 8)}
    out = _outputs_without_compiler(path, feeds, tmp_path)
    sess = bm.ort_session(model.SerializeToString(), 1)
    for k, f in feeds.items():
        ref = sess.run(None, f)[0]
        assert np.abs(out[k] - ref).max() / np.abs(ref).max() < TOL, k
        _same_plan(out[k], module(**f))


def test_a_binding_of_its_own_plan_is_held_apart(saved_fixed, tmp_path):
    model, module, path = saved_fixed
    lm = runtime.load(path)
    assert [f["binding"] for f in lm.manifest["symbolic"]["fixed"]] == [{"batch": 1}]
    feeds = {f"b{n}": {"x": RNG.standard_normal((n, 3, 32, 32)).astype(np.float32)}
             for n in (1, 3)}
    out = _outputs_without_compiler(path, feeds, tmp_path)
    for k, f in feeds.items():
        _same_plan(out[k], module(**f))


def _same_plan(got, want):
    """The file's plan is the in-process module's; its kernel objects take
    the batch at run time where the module's are compiled for the size, and
    a reduction over a strided view (the global pool reading the channels-
    last output of a few-pixel conv's product) may sum its few terms in
    another order there: within a few ulp of the output scale, not bit for
    bit (seen on AVX2 hosts)."""
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())


def test_inspect_shows_the_fixed_binding(saved_fixed, capsys):
    from runtime.cli import main
    assert main(["inspect", str(saved_fixed[2])]) == 0
    out = capsys.readouterr().out
    assert "symbol:   batch in 1.. (one file for every size)" in out
    assert "binding:  batch=1 has a plan of its own (" in out


def test_a_damaged_fixed_binding_is_refused(saved_fixed, tmp_path):
    path = saved_fixed[2]

    def revision(m):
        m["symbolic"]["fixed"][0]["kernels"][0]["revision"] = "0" * 64

    def binding(m):
        m["symbolic"]["fixed"][0]["binding"] = {"batch": 0}

    def shape(m):
        m["symbolic"]["fixed"][0]["entry_points"][0]["inputs"][0]["shape"][0] = 2

    for edit, field in ((revision, r"symbolic\.fixed\[0\]\.kernels\[0\]\.revision"),
                        (binding, r"symbolic\.fixed\[0\]\.binding")):
        with pytest.raises(ManifestFieldError, match=field):
            runtime.load(_rewrite(path, tmp_path / "bad.fuel", edit))
    with pytest.raises(ManifestFieldError):  # the static checks of its plan
        runtime.load(_rewrite(path, tmp_path / "bad.fuel", shape))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet", "efficientnet", "audio"])
def test_full_conv_nets_save_one_file_for_every_batch(name, tmp_path):
    """The full models of benchmarks/models.py with a symbolic batch (ResNet:
    the im2col Pad and Concat with a run-time batch; audio: conv1d, its
    classifier's matmul rows 25 * batch) in one file, batch 1, 3, 8."""
    model = bm.symbolic(bm.build(name, 1))
    lm = runtime.load(compile(import_model(model)).save(tmp_path / f"{name}.fuel"))
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    sess = bm.ort_session(model.SerializeToString(), 1)
    for n in (1, 3, 8):
        x = RNG.standard_normal((n, *shape)).astype(np.float32)
        ref = sess.run(None, {"x": x})[0]
        assert np.abs(lm(x=x) - ref).max() / np.abs(ref).max() < TOL, n


@pytest.fixture(scope="module")
def image_net():
    """The reduced ResNet-style net with a symbolic batch and image size."""
    model = bm.symbolic(bm.resnet(1, widths=(8, 16), blocks=1, classes=10, image=32), image=True)
    return model, compile(import_model(model))


def _image_file_runs_every_size(model, module, path, sizes, tmp_path, past=33):
    """The file at ``path`` runs ``sizes`` in a process without the compiler,
    giving the outputs of the plan it holds in process bit for bit
    (``export_sample``: the same plan and kernels), and from ``past`` rows
    and columns on (no conv in a few-pixel form) the in-process module's,
    matching onnxruntime."""
    feeds = {"x".join(map(str, s)): {"x": RNG.standard_normal(s).astype(np.float32)}
             for s in sizes}
    out = _outputs_without_compiler(path, feeds, tmp_path)
    sess = bm.ort_session(model.SerializeToString(), 1)
    for s, (k, f) in zip(sizes, feeds.items()):
        np.testing.assert_array_equal(
            out[k], module.export_sample({"batch": s[0], "h": s[2], "w": s[3]})(**f))
        if min(s[2:]) >= past:
            np.testing.assert_array_equal(out[k], module(**f))
        ref = sess.run(None, f)[0]
        assert np.abs(out[k] - ref).max() / np.abs(ref).max() < TOL, k


def _strided_net():
    """A stride-2 3x3 conv with ReLU, a 3x3 stride-2 max pool, a 1x1 conv
    with a bias, a global average pool; batch, h, w symbolic."""
    from onnx import TensorProto, helper, numpy_helper

    def w(name, shape):
        return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "w2", "b2"], ["c2"]),
             helper.make_node("GlobalAveragePool", ["c2"], ["y"])]
    graph = helper.make_graph(
        nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                     ["batch", 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16, 1, 1])],
        [w("w1", (8, 3, 3, 3)), w("w2", (16, 8, 1, 1)), w("b2", (16,))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_one_file_for_every_image_size(tmp_path):
    """One .fuel file for every batch and image size (docs/dynamic-shapes.md,
    "Dynamic spatial size"): its extents are fitted over the floor quotients
    of h and w (``(h + 1) // 2``, ``(h + 3) // 4``), and it runs every size
    the model allows, down to 1x1 (16x16 and 20x24, where the 1x1 conv's 4x4
    and 5x6 outputs take the few-pixel recipe in process, run the file's
    kernel of run-time extents, bit for bit as its plan in process)."""
    model = _strided_net()
    module = compile(import_model(model))
    path = module.save(tmp_path / "net.fuel")
    lm = runtime.load(path)
    assert lm.signature["symbols"] == {"batch": [1, None], "h": [1, None], "w": [1, None]}
    assert '"floor"' in json.dumps(lm.manifest["plan"])
    _image_file_runs_every_size(model, module, path, [(1, 3, 33, 47), (3, 3, 40, 40),
                                                      (1, 3, 16, 16), (2, 3, 20, 24),
                                                      (1, 3, 1, 1), (2, 3, 17, 90)], tmp_path,
                                past=17)

    def bad_floor(m):  # the first floor factor of the plan divides by 0
        def walk(v):
            if isinstance(v, dict) and "floor" in v:
                v["by"] = 0
                return True
            items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
            return any(walk(x) for x in items)
        assert walk(m["plan"])
    with pytest.raises(ManifestFieldError, match=r"plan\..*is not an expression.*'floor'"):
        runtime.load(_rewrite(path, tmp_path / "bad.fuel", bad_floor))


@pytest.mark.slow  # ~10-20 s: 64 samples of the plan
def test_one_file_for_every_image_size_of_a_resnet(image_net, tmp_path):
    """The reduced ResNet-style net: one file from 1x1 up (its last stage's
    (h + 7) // 8 rows: 1 at 1..8)."""
    model, module = image_net
    path = module.save(tmp_path / "resnet.fuel")
    lm = runtime.load(path)
    assert lm.signature["symbols"] == {"batch": [1, None], "h": [1, None], "w": [1, None]}
    assert "fixed" not in lm.manifest["symbolic"]
    assert '"floor"' in json.dumps(lm.manifest["plan"])
    _image_file_runs_every_size(model, module, path, [(1, 3, 33, 47), (3, 3, 40, 40),
                                                      (1, 3, 16, 16), (2, 3, 20, 24),
                                                      (1, 3, 1, 2), (2, 3, 97, 35)], tmp_path)


@pytest.mark.slow  # ~40-70 s: 87 samples
def test_one_file_for_every_image_size_of_mobilenet(tmp_path):
    model = bm.symbolic(bm.build("mobilenet", 1, image=32), image=True)
    module = compile(import_model(model))
    path = module.save(tmp_path / "mobilenet.fuel")
    assert runtime.load(path).signature["symbols"]["h"] == [1, None]
    _image_file_runs_every_size(model, module, path, [(1, 3, 16, 16), (3, 3, 20, 24),
                                                      (1, 3, 113, 128)], tmp_path, past=113)


def test_image_size_bundle_runs_without_the_compiler(image_net, tmp_path):
    """The reduced ResNet-style net with a symbolic batch and image size:
    one compile, a bundle of two sizes (one of them odd, 33x47), each file
    holding the kernels that take the image size at run time; loaded in a
    process without the compiler it gives the in-process outputs, matching
    onnxruntime."""
    import onnxruntime as ort
    from runtime.bundle import load_bundle
    model, module = image_net
    module.save_bundle(str(tmp_path / "b"), bindings=[{"batch": 1, "h": 33, "w": 47},
                                                      {"batch": 2, "h": 40, "w": 40}])
    feeds = {"33x47": {"x": RNG.standard_normal((1, 3, 33, 47)).astype(np.float32)},
             "40x40": {"x": RNG.standard_normal((2, 3, 40, 40)).astype(np.float32)}}
    out = _outputs_without_compiler(tmp_path / "b", feeds, tmp_path, bundle=True)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for k, f in feeds.items():
        np.testing.assert_array_equal(out[k], module(**f))
        ref = sess.run(None, f)[0]
        assert np.abs(out[k] - ref).max() / np.abs(ref).max() < TOL
    assert len(load_bundle(str(tmp_path / "b")).bindings) == 2
