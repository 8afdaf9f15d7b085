"""The passes on ``?`` extents compute at every size what they compute on
static IR (docs/dynamic-shapes.md, "Passes on ? extents"): for each case,
the pass output on the ``?`` function, with every ``?`` and every broadcast
``-1`` (keep the input's extent) replaced by a size, is the pass output on
the function written at that size. The FileCheck files (``*_dynamic.mlir``)
show the IR; this checks it is the static IR to the letter."""
import re

import pytest

from compiler.testing import run_pipeline_on_text

PLUGINS = ("tests.passes.kernel_tables",)

_SOFTMAX = '''
func.func @f(%x: tensor<{D}x8xf32>) -> tensor<{D}x8xf32> {{
  %0 = "fuel.softmax_last_dim"(%x) : (tensor<{D}x8xf32>) -> tensor<{D}x8xf32>
  return %0 : tensor<{D}x8xf32>
}}'''
_LAYER_NORM = '''
func.func @f(%x: tensor<{D}x{D}x16xf32>) -> tensor<{D}x{D}x16xf32> {{
  %0 = "fuel.layer_norm_last_dim"(%x) {{eps = 1.0e-05 : f64}} : (tensor<{D}x{D}x16xf32>) -> tensor<{D}x{D}x16xf32>
  return %0 : tensor<{D}x{D}x16xf32>
}}'''
_RMS_NORM = '''
func.func @f(%x: tensor<2x{D}x16xf32>) -> tensor<2x{D}x16xf32> {{
  %0 = "fuel.rms_norm_last_dim"(%x) {{eps = 1.0e-06 : f64}} : (tensor<2x{D}x16xf32>) -> tensor<2x{D}x16xf32>
  return %0 : tensor<2x{D}x16xf32>
}}'''
_CHAIN = '''
func.func @f(%x: tensor<{D}x64xf32>, %y: tensor<64x{D}xbf16>, %w: tensor<64x64xf32>) -> tensor<{D}x64xf32> {{
  %t = "fuel.mat_mul"(%w, %y) : (tensor<64x64xf32>, tensor<64x{D}xbf16>) -> tensor<64x{D}xf32>
  %m = "fuel.transpose"(%t) : (tensor<64x{D}xf32>) -> tensor<{D}x64xf32>
  %0 = "fuel.mul_scalar"(%x) {{value = 0.5 : f64}} : (tensor<{D}x64xf32>) -> tensor<{D}x64xf32>
  %1 = "fuel.tanh"(%0) : (tensor<{D}x64xf32>) -> tensor<{D}x64xf32>
  %2 = "fuel.add"(%1, %m) : (tensor<{D}x64xf32>, tensor<{D}x64xf32>) -> tensor<{D}x64xf32>
  %3 = "fuel.mul"(%x, %2) : (tensor<{D}x64xf32>, tensor<{D}x64xf32>) -> tensor<{D}x64xf32>
  %4 = "fuel.mul"(%2, %x) : (tensor<{D}x64xf32>, tensor<{D}x64xf32>) -> tensor<{D}x64xf32>
  %5 = "fuel.sub"(%3, %4) : (tensor<{D}x64xf32>, tensor<{D}x64xf32>) -> tensor<{D}x64xf32>
  return %5 : tensor<{D}x64xf32>
}}'''
_CONV_RELU = '''
func.func @f(%x: tensor<{D}x4x6x6xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) -> tensor<{D}x8x6x6xf32> {{
  %0 = "fuel.conv2d"(%x, %w, %b) {{dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]}} : (tensor<{D}x4x6x6xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<{D}x8x6x6xf32>
  %1 = "fuel.relu"(%0) : (tensor<{D}x8x6x6xf32>) -> tensor<{D}x8x6x6xf32>
  return %1 : tensor<{D}x8x6x6xf32>
}}'''

CASES = [
    ("softmax decomposed", _SOFTMAX, "builtin.module(fuel-decompose{all=true})"),
    ("softmax round trip", _SOFTMAX, "builtin.module(fuel-decompose{all=true},fuel-fuse{table=fused_f32})"),
    ("layer norm decomposed", _LAYER_NORM, "builtin.module(fuel-decompose{table=primitives_f32})"),
    ("layer norm round trip", _LAYER_NORM, "builtin.module(fuel-decompose{all=true},fuel-fuse{table=fused_f32})"),
    ("rms norm decomposed", _RMS_NORM, "builtin.module(fuel-decompose{all=true})"),
    ("rms norm round trip", _RMS_NORM, "builtin.module(fuel-decompose{all=true},fuel-fuse{table=fused_f32})"),
    ("chain, default pipeline", _CHAIN, "default"),
    ("conv epilogue", _CONV_RELU, "builtin.module(fuel-fuse{table=conv_f32 runtime=false})"),
]


def _at_size(text: str, n: int) -> str:
    """``text`` with every ``?`` extent and every broadcast ``-1`` set to ``n``."""
    text = text.replace("?x", f"{n}x")
    return re.sub(r"shape = \[[^\]]*\]",
                  lambda m: m.group(0).replace("-1", str(n)), text)


@pytest.mark.parametrize("name,template,pipeline", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("n", [3, 16])
def test_pass_on_symbolic_ir_is_the_static_pass_at_every_size(name, template, pipeline, n):
    dynamic = run_pipeline_on_text(template.format(D="?"), pipeline, plugins=PLUGINS)
    static = run_pipeline_on_text(template.format(D=n), pipeline, plugins=PLUGINS)
    assert "?x" in dynamic and "fuel." in dynamic
    assert _at_size(dynamic, n) == static


def test_a_symbolic_decline_is_a_static_success():
    """What declines on ? (a bias broadcast to ? rows) decomposes at a size:
    the declined op is left as it was, with the ? types."""
    linear = '''
func.func @f(%a: tensor<{D}x3xf32>, %b: tensor<3x4xf32>, %c: tensor<4xf32>) -> tensor<{D}x4xf32> {{
  %0 = "fuel.fused_linear"(%a, %b, %c) : (tensor<{D}x3xf32>, tensor<3x4xf32>, tensor<4xf32>) -> tensor<{D}x4xf32>
  return %0 : tensor<{D}x4xf32>
}}'''
    pipeline = "builtin.module(fuel-decompose{all=true})"
    dynamic = run_pipeline_on_text(linear.format(D="?"), pipeline, plugins=PLUGINS)
    static = run_pipeline_on_text(linear.format(D=2), pipeline, plugins=PLUGINS)
    assert "fuel.fused_linear" in dynamic and "tensor<?x3xf32>" in dynamic
    assert "fuel.fused_linear" not in static and "fuel.mat_mul" in static
