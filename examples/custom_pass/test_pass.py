"""Tests of the fold-double-neg plugin, with ``compiler.testing`` both ways:
the Python API (run a pipeline on text, FileCheck the result; compile a graph
with the pass and compare with the numpy interpreter) and the lit-style
``.mlir`` files of this folder, collected as test cases."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.passes import DEFAULT_PIPELINE, load_pass_plugin
from compiler.testing import collect_mlir_tests, filecheck, run_pipeline_on_text

HERE = pathlib.Path(__file__).parent
PLUGIN = HERE / "fold_double_neg.py"

QUAD = """
func.func @quad(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "fuel.neg"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = "fuel.neg"(%0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = "fuel.neg"(%1) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = "fuel.neg"(%2) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = "fuel.exp"(%3) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %4 : tensor<2x3xf32>
}
"""


def test_four_negations_fold_away():
    out = run_pipeline_on_text(QUAD, "builtin.module(fold-double-neg)", plugins=[PLUGIN])
    filecheck(out, """
    // CHECK-LABEL: func.func @quad
    // CHECK-NOT:   fuel.neg
    // CHECK:       %[[E:.*]] = "fuel.exp"(%arg0)
    // CHECK-NEXT:  return %[[E]]
    """)


def test_compiled_with_the_pass_matches_the_interpreter():
    g = Graph()
    x = g.input("x", (4, 8), "f32")
    g.output((-(-x)).exp(), name="y")
    pipeline = DEFAULT_PIPELINE.replace("(", "(fold-double-neg,", 1)
    load_pass_plugin(PLUGIN)            # what --load-pass-plugin does
    m = compile(g, target="cpu", pipeline=pipeline)
    assert '"fuel.neg"' not in m.ir["optimized"]
    a = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(m(x=a), interpret(g, {"x": a})["y"], rtol=1e-6)


@pytest.mark.parametrize("case", collect_mlir_tests(HERE), ids=str)
def test_mlir_file(case, tmp_path):
    case.run(tmp_path)
