"""benchmarks/models.py: every model builds and passes onnx.checker; fuelc's
compiled output matches onnxruntime on one cnn and one transformer model
(all of them with ``-m slow``); a model fuelc refuses is a failed row."""
import argparse
import pathlib
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import models as bm  # noqa: E402
from benchmarks.models import MODELS, build  # noqa: E402

# the smallest sizes: each builder's size keywords at their least
SMALL = {"resnet": {"image": 32}, "mobilenet": {"image": 32}, "efficientnet": {"image": 32},
         "audio": {"samples": 800}}
SEQ = 8
TOL = 1e-4  # max |fuelc - ort| / max |ort|


def small(name: str, **extra):
    return build(name, 1, SEQ if MODELS[name].uses_seq else None, **SMALL.get(name, {}), **extra)


def fuelc_vs_ort(model) -> float:
    from compiler import compile
    from compiler.frontends.onnx import import_model
    feeds = bm.make_inputs(model)
    ref = bm.ort_session(model.SerializeToString(), 1).run(None, feeds)[0]
    out = compile(import_model(model), target="cpu")(**feeds)
    assert out.shape == ref.shape
    assert np.isfinite(ref).all() and np.abs(ref).max() > 0
    return float(np.abs(out - ref).max() / np.abs(ref).max())


def test_registry():
    assert set(MODELS) == {"resnet", "mobilenet", "efficientnet", "audio",
                           "bert", "gpt2", "llama", "vit"}
    assert {s.kind for s in MODELS.values()} == {"cnn", "transformer"}
    assert bm.file_name("bert", 8, 128) == "bert_b8_s128.onnx"
    assert bm.file_name("resnet", 1, 128) == "resnet_b1.onnx"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_builds_and_checks(name):
    m = small(name)
    onnx.checker.check_model(m, full_check=True)
    assert m.opset_import[0].version == 17
    assert [o.name for o in m.graph.output] == ["y"]
    batch = m.graph.input[0].type.tensor_type.shape.dim[0].dim_value
    assert batch == 1
    # the same seed gives the same weights
    assert small(name).SerializeToString() == m.SerializeToString()


def test_bn_modes_agree():
    """'affine', 'fold' and 'node' are the same function (onnxruntime)."""
    outs = []
    for bn in bm.BN_MODES:
        m = small("resnet", bn=bn)
        assert any(n.op_type == "BatchNormalization" for n in m.graph.node) == (bn == "node")
        outs.append(bm.ort_session(m.SerializeToString(), 1).run(None, bm.make_inputs(m))[0])
    for o in outs[1:]:
        np.testing.assert_allclose(o, outs[0], rtol=1e-4, atol=1e-4 * np.abs(outs[0]).max())


@pytest.mark.parametrize("name", ["resnet", "bert"])
def test_fuelc_matches_onnxruntime(name):
    assert fuelc_vs_ort(small(name)) < TOL


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(MODELS) - {"resnet", "bert"}))
def test_fuelc_matches_onnxruntime_all(name):
    assert fuelc_vs_ort(small(name)) < TOL


def test_failed_model_is_a_row():
    """A model fuelc's importer refuses gives a record with the error on one
    line, not an exception."""
    from onnx import TensorProto, helper

    def refused_model(batch, **kw):   # Unique: an op fuelc's importer does not take
        g = helper.make_graph(
            [helper.make_node("Unique", ["x"], ["y"], sorted=1)], "unique",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, (batch, 3, 4, 4))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, (None,))])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    args = argparse.Namespace(bn="node", target="cpu", rounds=1, repeats=1, steps=False)
    orig = bm.MODELS["resnet"]
    bm.MODELS["resnet"] = bm.ModelSpec("cnn", refused_model, "refused")
    try:
        rec = bm.run_case("resnet", 1, None, args, 1)
    finally:
        bm.MODELS["resnet"] = orig
    assert "Unique" in rec["error"] and "\n" not in rec["error"]
    assert rec["error"].startswith("import: ")
    assert bm.format_row(rec).count("\n") == 0 and "FAILED" in bm.format_row(rec)


def test_export(tmp_path):
    assert bm.main(["--export", str(tmp_path), "--model", "llama", "--batch", "1,2",
                    "--seq", "8"]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["llama_b1_s8.onnx", "llama_b2_s8.onnx"]
    m = onnx.load(tmp_path / "llama_b2_s8.onnx")
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2


def test_symbolic_axes():
    m = bm.symbolic(small("bert"), seq=SEQ)
    for vi in list(m.graph.input) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        assert [dims[0].dim_param, dims[1].dim_param] == ["batch", "seq"], vi.name
    m = bm.symbolic(small("vit"), seq=SEQ)  # axis 1: channels and classes, not tokens
    for vi in list(m.graph.input) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        assert dims[0].dim_param == "batch" and dims[1].dim_value > 0, vi.name
    m = bm.symbolic(small("mobilenet"))
    assert [d.dim_param or d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] \
        == ["batch", 3, 32, 32]


class _Probe:
    """Stands in for ``vcpus.Probe``: the states it is given, in order."""

    def __init__(self, states):
        self.states = list(states)

    def now(self):
        return self.states.pop(0)

    def round_state(self, before):
        after = self.now()
        return before if before == after else "mixed"


def test_dynamic_row():
    """--dynamic: the model compiled once with a symbolic batch, timed in the
    same rounds as the static one; its output matches onnxruntime. The vCPUs'
    probes around each round file it (a round whose probes disagree is
    mixed), and the row's states line gives the quiet rounds' ratio."""
    args = argparse.Namespace(bn="node", target="cpu", rounds=3, repeats=1, steps=False,
                              dynamic=True, vcpus=_Probe(["quiet", "quiet", "shared core",
                                                          "shared core", "quiet", "one slow"]))
    orig = bm.MODELS["mobilenet"]
    bm.MODELS["mobilenet"] = bm.ModelSpec("cnn", lambda batch, **kw: orig.fn(batch, image=32, **kw),
                                          "small")
    try:
        rec = bm.run_case("mobilenet", 2, None, args, 1)
    finally:
        bm.MODELS["mobilenet"] = orig
    assert "error" not in rec and "dynamic_error" not in rec, rec
    assert rec["dynamic_rel_diff"] < TOL and rec["dyn_ratio"] > 0
    line = bm.format_dynamic(rec)
    assert "dynamic/static" in line and "\n" not in line
    assert rec["round_states"] == ["quiet", "shared core", "mixed"]
    assert rec["quiet_ratio"] == rec["quiet_fuelc_ms"] / rec["quiet_ort_ms"] > 0
    states = bm.format_states(rec)
    assert "quiet 1, shared core 1, mixed 1" in states and "quiet rounds only: fuelc" in states
    assert bm.format_states({**rec, "round_states": ["quiet"] * 3}) is None


def test_op_times_on_the_direct_path():
    # --steps times the direct path's calls one by one (encoder.step_medians):
    # every kernel step and every copy step of the plan has a time, the
    # im2col's Concat and Pad among them, and the model still computes the
    # same after it (its calls put back)
    from compiler import compile
    from compiler.frontends.onnx import import_model
    from runtime.executor import ContiguizeStep, KernelStep
    model = small("resnet")
    feeds = bm.make_inputs(model)
    m = compile(import_model(model), target="cpu")
    want = m(**feeds)
    assert m.executor._direct is not None
    medians = bm.step_medians(m, feeds, 3)
    timed = {i for i, s in enumerate(m.plan.steps) if isinstance(s, (KernelStep, ContiguizeStep))}
    assert timed == set(medians), sorted(timed ^ set(medians))
    kinds = {k for _, _, k in bm.fuelc_op_times(m, feeds, 3)}
    assert {"Conv2D", "FusedLinear", "Concat", "Pad", "Copy"} <= kinds, kinds
    np.testing.assert_array_equal(m(**feeds), want)


def test_width_note_names_a_target_narrower_than_the_host(monkeypatch):
    """The benchmarks' header says when the peers run AVX-512 kernels and the
    target's code is AVX2: only where the host has AVX-512 and the target not."""
    import dataclasses

    import compiler.targets as targets
    from benchmarks.encoder import width_note
    real = targets.parse_target

    def host_with(features):
        def parse(spec):
            t = real(spec)
            return dataclasses.replace(t, features=frozenset(features)) if spec == "cpu" else t
        return parse

    monkeypatch.setattr(targets, "parse_target", host_with(real("cpu:x86-64-v3").features | {"avx512f"}))
    assert "cpu:x86-64-v3" in width_note("cpu:x86-64-v3")
    assert width_note("cpu:skylake-avx512") is None
    monkeypatch.setattr(targets, "parse_target", host_with(real("cpu:x86-64-v3").features))
    assert width_note("cpu:x86-64-v3") is None
