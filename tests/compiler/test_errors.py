"""Every failure is typed and says what was expected: build-time shape/dtype
errors, call-time input errors, ops with no kernel (coverage diagnostic
before anything runs), malformed dialect text, unsupported ops, and codegen
failures (reproducer file + rerun command)."""
from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler import Graph, GraphBuildError, UnsupportedOpError, compile, matmul, where
from compiler.codegen import family as instances
from compiler.codegen.cpu import strategy as strategy_mod
from compiler.driver import CompileError
from compiler.dialect.definition import parse_fuel_module
from compiler.errors import DialectError, PassError
from runtime.errors import NoBackendForOp, PlanError


# -- build time ------------------------------------------------------------------------------
@pytest.mark.parametrize("build,match", [
    (lambda g: g.input("a", (3, 4)) + g.input("b", (5,)), r"Add\(f32\[3,4\], f32\[5\]\).*broadcast"),
    (lambda g: g.input("a", (3,)) + g.input("b", (3,), "i32"), r"Add.*f32\[3\].*i32\[3\]"),
    (lambda g: matmul(g.input("a", (3, 4)), g.input("b", (5, 2))), r"MatMul.*f32\[3,4\].*f32\[5,2\]"),
    (lambda g: g.input("a", (3,), "i32").exp(), r"Exp.*i32.*not supported"),
    (lambda g: where(g.input("c", (3,), "f32"), g.input("a", (3,)), 0.0), r"Where.*u8"),
    (lambda g: g.input("a", (3, 4)).sum(axis=2), r"axis 2 out of range for rank 2"),
    (lambda g: g.input("a", (3, 4)).reshape(5, 2), r"Reshape"),
    (lambda g: g.add_node("Gather", [g.input("a", (3, 4)), g.input("i", (3, 4), "i32")], {"dim": 0}),
     r"Gather.*u32"),
])
def test_build_time_shape_and_dtype_errors_name_the_op_and_operands(build, match):
    with pytest.raises(GraphBuildError, match=match):
        build(Graph())


# -- call time -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def add_module():
    g = Graph()
    g.output(g.input("x", (2, 3), "f32") + g.input("y", (3,), "f32"), name="z")
    return compile(g)


def test_call_with_correct_inputs_works(add_module):
    x, y = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(add_module(x=x, y=y), x + y)


@pytest.mark.parametrize("inputs,match", [
    (dict(x=np.ones((3, 2), np.float32), y=np.ones(3, np.float32)),
     r"input 'x': expected f32\[2, ?3\].*got numpy float32\[3, 2\]"),
    (dict(x=np.ones((2, 3), np.float64), y=np.ones(3, np.float32)),
     r"input 'x': expected f32\[2, ?3\] \(numpy float32\), got numpy float64\[2, 3\]"),
    (dict(x=np.ones((2, 3), np.float32)), r"missing \['y'\]"),
    (dict(x=np.ones((2, 3), np.float32), y=np.ones(3, np.float32), w=np.ones(1)),
     r"unexpected \['w'\]"),
])
def test_wrong_inputs_raise_plan_error_saying_what_was_expected(add_module, inputs, match):
    with pytest.raises(PlanError, match=match):
        add_module(**inputs)


def test_plan_error_lists_the_signature(add_module):
    with pytest.raises(PlanError) as info:
        add_module(y=np.ones(3, np.float32))
    assert re.search(r"plan inputs are \(x: f32\[2, ?3\], y: f32\[3\]\)", str(info.value))


# -- no kernel: coverage diagnostic at compile time, before anything runs ---------------------
@pytest.fixture
def without_log_softmax_backward(monkeypatch):
    """The CPU target table minus every LogSoftmaxLastDimBackward kernel."""
    from compiler import targets
    from runtime.binding import KernelBindingTable
    from runtime.opkind import OpKind
    cpu = targets.parse_target("cpu")
    full = cpu.table()
    t = KernelBindingTable()
    for kind, dts, backend, e in full.iter_entries():
        if kind is not OpKind.LogSoftmaxLastDimBackward:
            t.register_full_with_source_generic(kind, dts, backend, e.kernel, e.caps, e.precision,
                                                e.cost, e.kernel_source, e.is_generic,
                                                e.kernel_revision_hash, e.cost_expr)
    t.finalize()
    monkeypatch.setitem(targets._tables._tables, cpu, t.freeze())


def _no_kernel_graph():
    g = Graph()
    y, dy = g.input("y", (2, 5)), g.input("dy", (2, 5))
    g.output(g.add_node("LogSoftmaxLastDimBackward", [y, dy]), name="dx")
    return g


def test_op_without_kernel_fails_at_compile_time_with_coverage_diagnostic(without_log_softmax_backward):
    with pytest.raises(PassError) as info:
        compile(_no_kernel_graph())
    msg = str(info.value)
    assert "fuel-reconcile-dtypes" in msg
    assert "no kernel bound for Static(LogSoftmaxLastDimBackward) with dtypes [f32, f32, f32] " \
           "on backend cpu" in msg
    assert "Available backends: cpu" in msg
    assert "rerun with: python -m compiler.opt" in msg


def test_op_without_kernel_fails_at_plan_time_without_dtype_reconciliation(without_log_softmax_backward):
    """Skipping fuel-reconcile-dtypes, the executor's construction-time lookup
    raises NoBackendForOp naming the step."""
    with pytest.raises(NoBackendForOp) as info:
        compile(_no_kernel_graph(), pipeline="builtin.module(fuel-cse,fuel-dce)")
    e = info.value
    assert e.dtypes == tuple(e.dtypes) and [d.value for d in e.dtypes] == ["f32", "f32", "f32"]
    assert "log_softmax_last_dim_backward" in str(e)


def test_graph_without_outputs_is_a_compile_error():
    g = Graph()
    g.input("x", (2,))
    with pytest.raises(CompileError, match="no outputs"):
        compile(g)


# -- malformed dialect text -----------------------------------------------------------------
@pytest.mark.parametrize("text,match", [
    ("func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %0 = fuel.exp(%x\n}", r"malformed"),
    ("func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
     "  %0 = \"fuel.no_such_op\"(%x) : (tensor<2xf32>) -> tensor<2xf32>\n"
     "  return %0 : tensor<2xf32>\n}", r"no_such_op"),
    ("func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
     "  %0 = \"fuel.add\"(%x) : (tensor<2xf32>) -> tensor<2xf32>\n"
     "  return %0 : tensor<2xf32>\n}", r"expects exactly 2 operands, but got 1"),
    ("func.func @main(%x: tensor<2x3xf32>) -> tensor<2xf32> {\n"
     "  %0 = \"fuel.sum_dim\"(%x) : (tensor<2x3xf32>) -> tensor<2xf32>\n"
     "  return %0 : tensor<2xf32>\n}", r"'fuel.sum_dim' op attribute \"axis\" is expected"),
    ("func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
     "  %0 = \"fuel.sum_dim\"(%x) {axis = \"a\"} : (tensor<2xf32>) -> tensor<2xf32>\n"
     "  return %0 : tensor<2xf32>\n}", r"expected base attribute 'builtin.integer'"),
])
def test_malformed_dialect_text_raises_dialect_error(text, match):
    with pytest.raises(DialectError, match=match):
        parse_fuel_module(text)


def test_well_formed_dialect_text_parses():
    text = ("func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
            "  %0 = \"fuel.exp\"(%x) : (tensor<2xf32>) -> tensor<2xf32>\n"
            "  return %0 : tensor<2xf32>\n}")
    assert "fuel.exp" in str(parse_fuel_module(text))


def test_deeply_nested_dialect_text_is_refused_not_a_crash():
    """In a subprocess: text nested thousands deep overflows the MLIR parser's
    stack (the process dies); parse_fuel_module refuses it with DialectError."""
    script = (
        "from compiler.dialect.definition import parse_fuel_module\n"
        "from compiler.errors import DialectError\n"
        "text = 'func.func @main() -> tensor<' + '(' * 50000 + 'f32' + ')' * 50000 + '>'\n"
        "try:\n"
        "    parse_fuel_module(text)\n"
        "except DialectError as e:\n"
        "    print('REFUSED', e)\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "REFUSED" in r.stdout and "1:" in r.stdout and "256 levels" in r.stdout, r.stdout


# -- unsupported ops ----------------------------------------------------------------------------
@pytest.mark.parametrize("op,arity", [("ReluInplace", 1), ("ClampInplace", 1), ("ZeroFill", 1),
                                      ("WriteSlice", 2), ("Scan", 2), ("Branch", 2),
                                      ("NonZeroIndices", 1)])
def test_unsupported_ops_raise_unsupported_op_error(op, arity):
    g = Graph()
    xs = [g.input(f"x{i}", (4,)) for i in range(arity)]
    with pytest.raises(UnsupportedOpError, match=rf"{op} is not supported yet"):
        g.add_node(op, xs, {})


# -- codegen failure: reproducer and rerun command -------------------------------------------
def test_codegen_failure_reports_reproducer_and_rerun_command(monkeypatch, tmp_path):
    from compiler.codegen.cpu.strategy import LOOPS_LOWERING, Strategy
    # Dropping finalize-memref-to-llvm leaves non-LLVM ops: translation refuses them.
    broken = Strategy("test-broken", lowering=tuple(p for p in LOOPS_LOWERING
                                                     if p != "finalize-memref-to-llvm"))
    monkeypatch.setattr(strategy_mod, "_RULES", [(lambda names: True, {"": broken})])
    monkeypatch.setattr(instances, "_compiled", collections.OrderedDict())  # really compile
    g = Graph()
    g.output(g.input("x", (3,)).sin(), name="y")
    with pytest.raises(CompileError) as info:
        compile(g)
    msg = str(info.value)
    assert "code generation failed for step" in msg and "SinElementwise" in msg
    assert "stage 'translate' failed" in msg
    repro = Path(re.search(r"reproducer: (\S+)", msg).group(1))
    assert repro.exists() and repro.parent == (tmp_path / "repro").resolve()
    assert re.search(r"rerun with: python -m compiler\.codegen\.cpu \S+", msg)
