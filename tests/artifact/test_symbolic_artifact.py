"""One .fuel file for every size: ``SymbolicModule.save`` writes it once,
``runtime.load`` runs any binding the signature allows, without the compiler
(docs/dynamic-shapes.md, "One file for every size")."""
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import runtime
from compiler import Graph, ShapeSignatureError, compile, interpret
from compiler.export import ExportError
from runtime.manifest import ArtifactVersionError, ManifestFieldError
from runtime.symbolic import SymbolicLoadedModule
from test_artifact import BLOCK_COMPILER
from test_artifact_validation import _rewrite

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "compiler"))
from test_symbolic_compile import BAD_SHAPES, _inputs, small_graph  # noqa: E402

RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The small symbolic graph of tests/compiler/test_symbolic_compile.py (a
    batched linear, GELU, softmax, a reduction and a second input), its
    compiled module and its one .fuel file."""
    g = small_graph()
    module = compile(g)
    path = module.save(tmp_path_factory.mktemp("sym") / "m.fuel")
    return g, module, path


def test_one_file_runs_every_size(saved):
    g, module, path = saved
    lm = runtime.load(path)
    assert isinstance(lm, SymbolicLoadedModule)
    assert lm.signature == {"inputs": {"x": "f32[batch,seq,8]", "m": "f32[batch,seq]"},
                            "symbols": {"batch": [1, None], "seq": [1, 16]}}
    for batch, seq in ((1, 1), (1, 16), (2, 5), (3, 1), (9, 7), (40, 3)):
        feeds = _inputs(batch, seq)
        y = lm(**feeds)
        np.testing.assert_allclose(y, interpret(g, feeds)["y"], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(y, module(**feeds))  # the same kernels, the same plan


def test_a_repeated_shape_settles_its_plan_once(saved):
    lm = runtime.load(saved[2])
    feeds = _inputs(2, 5)
    lm(**feeds)
    assert lm.settled == 1
    for _ in range(3):
        lm(**feeds)
    assert lm.settled == 1 and lm.bindings == [{"batch": 2, "seq": 5}]
    lm(**_inputs(2, 6))
    lm(**feeds)
    assert lm.settled == 2
    lm.KEEP = 2  # the least recently used binding goes
    lm(**_inputs(3, 3))
    assert lm.settled == 3 and lm.bindings == [{"batch": 2, "seq": 5}, {"batch": 3, "seq": 3}]


@pytest.mark.parametrize("shapes,match", BAD_SHAPES)
def test_contradicting_calls_raise_before_settling(saved, shapes, match):
    lm = runtime.load(saved[2])
    with pytest.raises(ShapeSignatureError, match=match):
        lm(**{k: np.zeros(v, np.float32) for k, v in shapes.items()})
    assert lm.settled == 0


@pytest.mark.parametrize("batch,seq", [(("batch", 1, 2), "seq"), ("batch", ("seq", 4, 64)),
                                       (("batch", 3, 3), ("seq", 1, 3))])
def test_narrow_and_raised_bounds(batch, seq, tmp_path):
    """Symbols whose bounds leave fewer than three sizes above the lower
    bound, or a lower bound above 1, sample and run at their edges."""
    g = Graph()
    x = g.input("x", (batch, seq, 8), "f32")
    g.output((x @ g.constant(RNG.standard_normal((8, 8)).astype(np.float32), name="w"))
             .softmax(-1) * 2.0, name="y")
    lm = runtime.load(compile(g).save(tmp_path / "m.fuel"))
    (blo, bhi), (slo, shi) = g.symbols["batch"], g.symbols["seq"]
    for b in {blo, bhi or 5}:
        for s in {slo, slo + 1, shi or 50}:
            feeds = {"x": RNG.standard_normal((b, s, 8)).astype(np.float32)}
            np.testing.assert_allclose(lm(**feeds), interpret(g, feeds)["y"], rtol=1e-5,
                                       atol=1e-5)


def _outputs_without_compiler(path, feeds: dict, tmp_path, bundle: bool = False) -> dict:
    """Each of ``feeds``' input dicts run by ``runtime.load(path)`` (``bundle``:
    ``load_bundle(path)``, a bundle's directory) in a process that cannot
    import the compiler; the outputs by the same keys. A loaded file runs them
    twice: repeated shapes settle nothing."""
    feeds_file, out_file = tmp_path / "in.npy", tmp_path / "out.npy"
    np.save(feeds_file, feeds, allow_pickle=True)
    load = (f"from runtime.bundle import load_bundle\nm = load_bundle({str(path)!r})" if bundle
            else f"m = runtime.load({str(path)!r})")
    settle = "" if bundle else """
n = m.settled
for k, f in feeds.items():
    m(**f)
assert m.settled == n, (m.settled, n)  # repeated shapes settle nothing"""
    code = BLOCK_COMPILER + f"""
import numpy as np, runtime
{load}
feeds = np.load({str(feeds_file)!r}, allow_pickle=True).item()
out = {{k: m(**f) for k, f in feeds.items()}}{settle}
np.save({str(out_file)!r}, out, allow_pickle=True)
print(sorted(n for n in __import__('sys').modules if n.split('.')[0] in ('compiler', 'mlir', 'torch_mlir')))
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert "[]" in r.stdout
    return np.load(out_file, allow_pickle=True).item()


def test_runs_in_a_process_without_the_compiler(saved, tmp_path):
    _, module, path = saved
    feeds = {f"{b}x{s}": _inputs(b, s) for b, s in ((1, 1), (3, 7))}
    out = _outputs_without_compiler(path, feeds, tmp_path)
    for k, f in feeds.items():
        np.testing.assert_array_equal(out[k], module(**f))


def test_signed_with_side_weights(saved, tmp_path):
    g, module, _ = saved
    path = module.save(tmp_path / "s.fuel", sign_with="secret", weights="side")
    assert (tmp_path / "s.weights").is_file()
    lm = runtime.load(path, verify_with="secret")
    feeds = _inputs(4, 2)
    np.testing.assert_array_equal(lm(**feeds), module(**feeds))
    with pytest.raises(runtime.artifact.ArtifactSignatureError):
        runtime.load(path, verify_with="other")


def _first(m, kind):
    return next(k for k, r in enumerate(m["kernels"]) if r["binding"]["kind"] == kind)


def _set_class_revision(m):
    b = m["kernels"][_first(m, "classes")]["binding"]
    next(iter(b["variants"][0]["classes"].values()))["revision"] = "0" * 16


def _first_kernel_shape(m, value):
    step = next(s for s in m["plan"]["steps"] if s["kind"] == "kernel")
    step["outputs"][0]["shape"][0] = value


@pytest.mark.parametrize("edit,field", [
    (lambda m: _first_kernel_shape(m, {"sym": [["1", ["batch"]]]}), r"plan\.steps\[\d+\]\.outputs\[0\]\.shape\[0\] .*is not an expression"),
    (lambda m: _first_kernel_shape(m, {"sym": [[1, ["beam"]]]}), r"plan\.steps\[\d+\]\.outputs\[0\]\.shape\[0\] .*of the symbols batch, seq"),
    (lambda m: m["symbolic"]["example"].update(seq=99), r"symbolic\.example .*within its bounds"),
    (lambda m: m["symbolic"]["symbols"].update(seq=[5, 2]), r"symbolic\.symbols is not"),
    (lambda m: m["symbolic"].update(iotas=["const:w"]), r"symbolic\.iotas\[0\] 'const:w' is not"),
    (lambda m: m["symbolic"].pop("inputs"), r"symbolic has no 'inputs'"),
    (_set_class_revision, r"kernels\[\d+\]\.binding\.variants\[0\]\.classes\['\w+'\]\.revision does not match"),
    (lambda m: m["kernels"][_first(m, "classes")]["binding"]["variants"][0].update(classes={}),
     r"kernels\[\d+\]\.binding\.variants\[0\]\.classes is not a non-empty map"),
    (lambda m: m["kernels"][_first(m, "object")].update(revision="0" * 16), r"kernels\[\d+\]\.revision does not match"),
])
def test_damaged_symbolic_fields_name_the_field(saved, tmp_path, edit, field):
    bad = _rewrite(saved[2], tmp_path / "bad.fuel", edit)
    with pytest.raises(ManifestFieldError, match=field):
        runtime.load(bad)


def test_a_class_the_file_lacks_is_a_typed_error_at_its_first_call(saved, tmp_path):
    def drop_few_rows(m):
        for rec in m["kernels"]:
            if rec["binding"]["kind"] == "classes":
                for v in rec["binding"]["variants"]:
                    if len(v["classes"]) > 1:
                        v["classes"].pop("few_rows", None)
    lm = runtime.load(_rewrite(saved[2], tmp_path / "lacks.fuel", drop_few_rows))
    lm(**_inputs(5, 9))  # rows of another class run
    with pytest.raises(runtime.artifact.ArtifactCodeError, match="no kernel object for matmul "
                                                                 "row class 'few_rows'"):
        lm(**_inputs(1, 2))


def test_a_symbolic_manifest_needs_version_5_and_static_version_4_still_loads(saved, tmp_path):
    bad = _rewrite(saved[2], tmp_path / "v4.fuel", lambda m: m.update(format_version=4))
    with pytest.raises(ArtifactVersionError, match="version 4 with a symbolic signature"):
        runtime.load(bad)
    g, module, _ = saved
    static = module.specialize(batch=2, seq=3).save(tmp_path / "static.fuel")
    old = _rewrite(static, tmp_path / "static4.fuel", lambda m: m.update(format_version=4))
    feeds = _inputs(2, 3)
    np.testing.assert_array_equal(runtime.load(old)(**feeds), module(**feeds))
    with zipfile.ZipFile(static) as z:
        assert json.loads(z.read("manifest.json"))["format_version"] == 5


def test_kernels_compiled_per_shape_are_refused_by_name(tmp_path):
    g = Graph()
    x = g.input("x", ("batch", "seq", 8), "f32")
    g.output(x.roll(1, 1) * 2.0, name="y")
    with pytest.raises(ExportError, match=r"roll_1: mlir-cpu\.Roll\[f32,f32\]\) is compiled per "
                                          r"shape.*m\.save_bundle"):
        compile(g).save(tmp_path / "roll.fuel")
    assert not (tmp_path / "roll.fuel").exists()


def test_recorded_equalities_are_refused(tmp_path):
    g = Graph()
    a, b = g.input("a", ("m", "k"), "f32"), g.input("b", ("k2", 3), "f32")
    g.output(a @ b, name="y")
    with pytest.raises(ExportError, match="assumed extents equal.*MatMul"):
        compile(g).save(tmp_path / "eq.fuel")


# -- the BERT-style test encoder (tests/frontends/test_onnx_dynamic.py) --------------------


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    sys.path.insert(0, str(ROOT / "tests" / "frontends"))
    from compiler.frontends.onnx import import_model
    from test_onnx_import import encoder_block
    model, _ = encoder_block(64, 4, 256, 512, batch=2)  # positions up to 512
    path = compile(import_model(model)).save(tmp_path_factory.mktemp("enc") / "encoder.fuel")
    return model, path


def _encoder_matches_onnxruntime(encoder, tmp_path, sizes):
    from test_onnx_import import encoder_block, ort_run
    model, path = encoder
    feeds = {f"{b}x{s}": encoder_block(64, 4, 256, s, batch=b)[1] for b, s in sizes}
    out = _outputs_without_compiler(path, feeds, tmp_path)
    for k, f in feeds.items():
        np.testing.assert_allclose(out[k], ort_run(model, f)["y"], rtol=1e-4, atol=2e-4)


def test_encoder_one_file_every_size_without_the_compiler(encoder, tmp_path):
    _encoder_matches_onnxruntime(encoder, tmp_path, [(b, s) for b in (1, 3, 8) for s in (1, 7)])


@pytest.mark.slow
def test_encoder_one_file_long_sequences(encoder, tmp_path):
    _encoder_matches_onnxruntime(encoder, tmp_path,
                                 [(b, s) for b in (1, 3, 8) for s in (128, 512)])
