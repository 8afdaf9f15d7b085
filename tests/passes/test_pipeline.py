"""The pass registry, pipeline parsing and ``run_pipeline`` as a library."""
from __future__ import annotations

import dataclasses
import os
import shlex

import pytest

from compiler.errors import PassError, PipelineSyntaxError
from tests.passes import kernel_tables  # noqa: F401  (registers the test tables)
from compiler.dialect import make_context
from compiler.mlir import ir
from compiler.passes import (
    DEFAULT_PIPELINE, PASSES, PIPELINES, ModulePass, build_pipeline, register_pass,
    run_pipeline)
from compiler.passes.diagnostics import emit_warning
from compiler.passes.pipeline import parse_options, parse_pipeline, render_pipeline
from compiler.testing import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ADD = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "fuel.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = "fuel.mul"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}"""
I64_NEG = """func.func @f(%a: tensor<4xi64>) -> tensor<4xi64> {
  %0 = "fuel.neg"(%a) : (tensor<4xi64>) -> tensor<4xi64>
  return %0 : tensor<4xi64>
}"""
TABLE = "primitives_f32"  # registered by tests.passes.kernel_tables


def _module(text):
    ctx = make_context()
    with ctx, ir.Location.unknown():
        return ctx, ir.Module.parse(text)


def test_parse_pipeline_nesting_and_options():
    elems = parse_pipeline("builtin.module(fuel-fuse{backend=cpu remarks}, func.func(cse),"
                           " canonicalize{max-iterations=3})")
    assert [e.name for e in elems] == ["fuel-fuse", "func.func", "canonicalize"]
    assert elems[0].options == {"backend": "cpu", "remarks": "true"}
    assert elems[1].children[0].name == "cse"
    assert render_pipeline(elems[1:]) == "builtin.module(func.func(cse),canonicalize{max-iterations=3})"
    assert parse_options("a={x y} b='q r' c=1") == {"a": "x y", "b": "q r", "c": "1"}
    for bad in ("fuel-cse,,cse", "fuel-cse,", "a b", "x{", "(cse)"):
        with pytest.raises(PipelineSyntaxError):
            parse_pipeline(bad)


def test_every_registered_pass_is_named_like_its_spelling():
    build_pipeline("builtin.module()", make_context())  # loads the pass modules
    assert {"fuel-fuse", "fuel-decompose", "fuel-reconcile-dtypes", "fuel-cse",
            "fuel-dce"} <= set(PASSES)
    for name, cls in PASSES.items():
        assert cls.name == name and cls.summary


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_named_pipelines_build(name):
    built = build_pipeline(name, make_context())
    assert built.text.startswith("builtin.module(")
    assert build_pipeline(DEFAULT_PIPELINE, make_context()).text == \
        build_pipeline("default", make_context()).text


def test_global_options_are_defaults_and_explicit_options_win():
    built = build_pipeline("fuel-reconcile-dtypes{backends=cuda},fuel-fuse",
                           make_context(), {"backend": "cuda", "backends": "cpu", "table": TABLE})
    rec, fuse = built.instances
    assert rec.backends == ("cuda",) and rec.table == TABLE
    assert fuse.backend == "cuda"
    assert "fuel-fuse{table=" + TABLE + " backend=cuda" in built.text


def test_run_pipeline_rewrites_in_place():
    ctx, m = _module(ADD)
    with ctx:
        assert run_pipeline(m, "fuel-cse,fuel-dce") == []
        assert str(m).count('"fuel.add"') == 1


def test_failure_writes_a_reproducer_that_reproduces(tmp_path):
    ctx, m = _module(I64_NEG)
    with ctx, pytest.raises(PassError) as ei:
        run_pipeline(m, f"fuel-reconcile-dtypes{{table={TABLE}}}", reproducer_dir=str(tmp_path))
    err = ei.value
    assert "in pass 'fuel-reconcile-dtypes'" in str(err)
    assert err.reproducer and os.path.dirname(err.reproducer) == str(tmp_path)
    assert err.command in str(err)
    assert any("no kernel for 'fuel.neg'" in d.message for d in err.diagnostics)
    # The printed command, run as printed, fails the same way.
    proc = run_command(shlex.split(err.command) + ["--no-reproducer"], cwd=ROOT)
    assert proc.returncode == 1
    assert "no kernel for 'fuel.neg'" in proc.stderr
    assert "fuel.neg" in open(err.reproducer).read()


def test_a_crashing_pass_is_reported_not_raised():
    @register_pass
    @dataclasses.dataclass
    class Boom(ModulePass):
        name = "test-boom"
        summary = "raises"

        def apply(self, module):
            emit_warning(module, "about to fail")
            raise ZeroDivisionError("bad pass")

    try:
        ctx, m = _module(ADD)
        with ctx, pytest.raises(PassError) as ei:
            run_pipeline(m, "test-boom", reproducer=False)
        msgs = [(d.severity, d.message) for d in ei.value.diagnostics]
        assert ("warning", "about to fail") in msgs
        assert any(s == "error" and "internal error in pass 'test-boom': ZeroDivisionError: "
                   "bad pass" in t for s, t in msgs)
    finally:
        PASSES.pop("test-boom", None)


def test_fuelc_cli_delegates_to_opt(tmp_path):
    src = tmp_path / "in.mlir"
    src.write_text(ADD)
    out = tmp_path / "out.mlir"
    from compiler.cli import main
    assert main(["opt", str(src), "--pass-pipeline=builtin.module(fuel-cse)", "-o", str(out)]) == 0
    assert out.read_text().count('"fuel.add"') == 1
    assert main(["nope"]) == 2
