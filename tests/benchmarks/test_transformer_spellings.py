"""The exporters' spellings in benchmarks/models.py's decoders fuse: GPT-2's
tanh GELU into its FFN product (FusedLinear ``gelu_tanh``), Llama's RoPE into
Rope, its RMSNorm (``x * (1 / sqrt(mean(x^2) + eps))``) into RmsNormLastDim,
its q/k/v and gate/up products into one product each, its residual Adds
into the bias-less o_proj and down_proj products; the outputs match
fuelc's reference interpreter and onnxruntime, on both ISA levels."""
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
from compiler import compile, interpret  # noqa: E402
from compiler.frontends.onnx import import_model  # noqa: E402

# (model, builder options): what the kernel steps must hold, and must not
CASES = {
    "gpt2": ({"layers": 1}, {"FusedLinear": 4, "FlashAttn": 1},
             ("RuntimeFused", "Tanh", "PowI")),
    "llama": ({}, {"FusedLinear": 4, "Rope": 2, "RmsNormLastDim": 2, "FlashAttn": 1},
              ("MatMul", "Neg", "Concat", "Recip", "AddElementwise")),
}


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_decoder_spellings_fuse(name, target):
    opts, want, gone = CASES[name]
    model = bm.build(name, 1, 8, **opts)
    feeds = bm.make_inputs(model)
    graph = import_model(model)
    m = compile(graph, target=target)
    kinds = [s.split("[")[0] for s in m.kernel_summary()]
    kinds = ["RuntimeFused" if k.startswith("fused#") else k for k in kinds]
    for kind, n in want.items():
        assert kinds.count(kind) == n, kinds
    assert not any(k.startswith(gone) for k in kinds), kinds
    got = m(**feeds)
    ref = interpret(graph, feeds)["y"]
    theirs = bm.ort_session(model.SerializeToString(), 1).run(None, feeds)[0]
    scale = np.abs(theirs).max()
    assert np.abs(got - ref).max() / scale < 1e-5
    assert np.abs(got - theirs).max() / scale < 1e-5


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
def test_llama_residuals_in_the_products_same_bits(target):
    """Llama's ``x + o_proj(..)`` and ``h + down_proj(..)`` (MatMuls without
    a bias) fold into their products as a zero bias and the skip: two kernel
    steps fewer, the same bits as the MatMuls and the Adds (each product's
    FMAs start from 0 either way, and the epilogue adds the skip once)."""
    from compiler.passes import DEFAULT_PIPELINE
    from runtime.executor import KernelStep
    model = bm.build("llama", 2, 16)
    feeds = bm.make_inputs(model)
    graph = import_model(model)
    m = compile(graph, target=target)
    ops = compile(graph, target=target, pipeline=DEFAULT_PIPELINE.replace(
        "fuel-fuse{runtime=false", "fuel-fuse{runtime=false linear_residuals=false"))
    assert [s for s in m.kernel_summary() if s.startswith("FusedLinear[f32,f32,f32,f32,f32]")] \
        == ["FusedLinear[f32,f32,f32,f32,f32] (mlir-cpu-fused) [B packed]"] * 2, m.kernel_summary()
    assert [s.split("[")[0] for s in ops.kernel_summary()].count("AddElementwise") == 2
    kernels = [sum(isinstance(s, KernelStep) for s in c.plan.steps) for c in (m, ops)]
    assert kernels[0] == kernels[1] - 2, kernels
    np.testing.assert_array_equal(m(**feeds), ops(**feeds))


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
def test_bert_input_mask_is_a_flash_attn_operand(target):
    """BERT's ``(1 - attention_mask) * finfo.min`` from its input: at batch 8 x
    128 its scores reach ``SCORES_FUSED`` elements, the attention fuses with
    the mask as FlashAttn's 4th operand; the odd rows' padded keys masked."""
    model = bm.build("bert", 8, 128, layers=1)
    feeds = bm.make_inputs(model)
    graph = import_model(model)
    m = compile(graph, target=target)
    assert [s for s in m.kernel_summary() if s.startswith("FlashAttn")] == [
        "FlashAttn[f32,f32,f32,f32,f32] (mlir-cpu-fused)"], m.kernel_summary()
    got = m(**feeds)
    theirs = bm.ort_session(model.SerializeToString(), 1).run(None, feeds)[0]
    ref = interpret(graph, feeds)["y"]
    scale = np.abs(theirs).max()
    assert np.abs(got - ref).max() / scale < 1e-5
    assert np.abs(got - theirs).max() / scale < 1e-5


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
def test_bert_input_mask_is_the_softmax_operand_below_flash_attn(target):
    """Attention left unfused (batch 1 x 32: below AVX-512's ``SCORES_FUSED``;
    on AVX2, which fuses it, ``attention_by_size=false`` as for a symbolic
    module), BERT's mask ``Add`` (with the ``Div`` by sqrt(64) before it) folds
    into the softmax: ``SoftmaxLastDim(scores, mask [1,1,1,S]) {scale}``, no
    step of its own; the same bits as the Add and the softmax, and onnxruntime's."""
    from compiler.passes import DEFAULT_PIPELINE
    model = bm.build("bert", 1, 32, layers=1)
    feeds = bm.make_inputs(model)
    graph = import_model(model)
    fuse = "fuel-fuse{runtime=false attention_by_size=false"
    m = compile(graph, target=target, pipeline=DEFAULT_PIPELINE.replace(
        "fuel-fuse{runtime=false", fuse))
    summary = m.kernel_summary()
    assert "SoftmaxLastDim[f32,f32,f32] (mlir-cpu-fused)" in summary, summary
    assert not any(s.startswith(("FlashAttn", "SoftmaxLastDim[f32,f32] ")) for s in summary)
    ops = compile(graph, target=target, pipeline=DEFAULT_PIPELINE.replace(
        "fuel-fuse{runtime=false", fuse + " softmax_masks=false"))
    assert "SoftmaxLastDim[f32,f32] (mlir-cpu-fused)" in ops.kernel_summary()
    assert len(m.plan.steps) < len(ops.plan.steps)
    got = m(**feeds)
    np.testing.assert_array_equal(got, ops(**feeds))
    theirs = bm.ort_session(model.SerializeToString(), 1).run(None, feeds)[0]
    assert np.abs(got - theirs).max() / np.abs(theirs).max() < 1e-5
