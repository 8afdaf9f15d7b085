"""The public pass-testing module: ``run_pipeline_on_text``, ``filecheck``,
the lit-style RUN-line runner and its pytest plugin."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from compiler.errors import PipelineSyntaxError
from compiler.testing import (
    FileCheckError, MlirTest, PipelineFailed, RunLineFailed, collect_mlir_tests, filecheck,
    run_pipeline_on_text)
from compiler.testing.lit import substitute

ROOT = pathlib.Path(__file__).resolve().parents[2]
PY = sys.executable

TWO_ADDS = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "fuel.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = "fuel.mul"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}
"""


# -- run_pipeline_on_text ------------------------------------------------------

def test_run_pipeline_on_text_returns_the_ir():
    out = run_pipeline_on_text(TWO_ADDS, "builtin.module(fuel-cse)")
    assert out.count('"fuel.add"') == 1 and '"fuel.mul"' in out


def test_target_reaches_the_passes():
    with pytest.raises(Exception, match="no-such-target"):
        run_pipeline_on_text(TWO_ADDS, "builtin.module(fuel-fuse)", target="no-such-target")
    out = run_pipeline_on_text(TWO_ADDS, "builtin.module(fuel-fuse)", target="cpu")
    assert "fuel.runtime_fused" in out


ILL_TYPED = """func.func @f(%a: tensor<4xf32>) -> tensor<5xf32> {
  %0 = "fuel.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}
"""


@pytest.mark.parametrize("text, expected", [
    ("func.func @f( {", "<input>:1:"),
    (TWO_ADDS.replace('"fuel.mul"(%0, %1) : (tensor<4xf32>, tensor<4xf32>)',
                      '"fuel.mul"(%0) : (tensor<4xf32>)'),
     "<input>:4:8: error: op expects exactly 2 operands, but got 1"),
    (ILL_TYPED, "<input>:2:8: error:"),
], ids=["malformed", "operand-count", "ill-typed"])
def test_bad_input_raises_with_the_diagnostics(text, expected):
    with pytest.raises(PipelineFailed) as ei:
        run_pipeline_on_text(text, "builtin.module(fuel-cse)")
    assert expected in str(ei.value), str(ei.value)
    assert any(d.severity == "error" for d in ei.value.diagnostics)


def test_failing_pass_raises_and_writes_no_reproducer(tmp_path, monkeypatch):
    monkeypatch.setenv("FUELC_REPRO_DIR", str(tmp_path / "repro"))
    with pytest.raises(PipelineFailed) as ei:
        run_pipeline_on_text(TWO_ADDS, "builtin.module(test-fail-on-fuel-ops)",
                             plugins=["tests.passes.kernel_tables"])
    msg = str(ei.value)
    assert msg.startswith("pipeline 'builtin.module(test-fail-on-fuel-ops)' failed:")
    assert "<input>:2:8: error: test-fail-on-fuel-ops: refusing fuel.add" in msg
    assert not (tmp_path / "repro").exists()


def test_bad_pipeline_is_a_syntax_error():
    with pytest.raises(PipelineSyntaxError, match="unknown pass 'fuel-csee'"):
        run_pipeline_on_text(TWO_ADDS, "builtin.module(fuel-csee)")


# -- filecheck -----------------------------------------------------------------

def test_filecheck_passes_and_fails_with_the_report(tmp_path):
    filecheck("a\nb\nc\n", "// CHECK: a\n// CHECK-NEXT: b\n")
    with pytest.raises(FileCheckError, match=r'(?s)FileCheck \(CHECK\) failed.*"z"'):
        filecheck("a\nb\n", "// CHECK: a\n// CHECK-NEXT: z\n")
    checks = tmp_path / "c.mlir"
    checks.write_text("// FOO: b\n")
    filecheck("a\nb\n", checks, prefix="FOO")             # a path
    filecheck("a\nb\n", str(checks), prefix="FOO")        # a one-line string naming a file
    with pytest.raises(FileCheckError, match=str(checks)):
        filecheck("a\n", checks, prefix="FOO")
    with pytest.raises(FileCheckError):                    # no CHECK line at all
        filecheck("a\n", checks)


# -- the RUN-line runner ---------------------------------------------------------

def test_substitutions():
    path = pathlib.Path("/d/x.mlir")
    cmd = substitute("not python -m m %s -o %t | filecheck %s && fuelc opt %S/p.py 100%% "
                     "; echo python not", path, pathlib.Path("/tmp/o"))
    assert cmd == (f"{PY} {ROOT}/compiler/testing/lit_not.py {PY} -m m /d/x.mlir -o /tmp/o "
                   f"| {PY} -m filecheck /d/x.mlir && {PY} -m compiler.cli opt /d/p.py 100% "
                   f"; echo python not")


def _mlir(tmp_path, text, name="t.mlir"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return MlirTest(path)


def test_run_lines_pass_and_fail(tmp_path):
    ok = _mlir(tmp_path, """\
        // RUN: echo hello \\
        // RUN:   world | filecheck %s
        // RUN: not false
        // CHECK: hello world
        """)
    assert ok.run_lines() == ["echo hello    world | filecheck %s", "not false"]
    ok.run(tmp_path)
    bad = _mlir(tmp_path, "// RUN: echo hello | filecheck %s\n// CHECK: bye\n", "bad.mlir")
    with pytest.raises(RunLineFailed, match=r"(?s)bad.mlir: RUN line 1 failed \(rc=1\).*"
                                            r"Couldn't match \"bye\""):
        bad.run(tmp_path)
    with pytest.raises(RunLineFailed, match="RUN line 1 failed"):
        _mlir(tmp_path, "// RUN: not true\n", "not.mlir").run(tmp_path)


def test_files_without_run_lines_or_with_unknown_features_fail(tmp_path):
    with pytest.raises(RunLineFailed, match="has no '// RUN:' line"):
        _mlir(tmp_path, "// CHECK: x\n").run(tmp_path)
    t = _mlir(tmp_path, "// REQUIRES: quantum\n// RUN: true\n", "req.mlir")
    with pytest.raises(RunLineFailed, match="unknown REQUIRES feature.*quantum.*fused-dialect"):
        t.run(tmp_path)
    with pytest.raises(pytest.skip.Exception, match="requires: quantum"):
        t.run(tmp_path, features={"quantum": lambda: False})
    t.run(tmp_path, features={"quantum": lambda: True})


def test_commands_see_this_checkout_and_a_temp_reproducer_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("FUELC_REPRO_DIR")
    t = _mlir(tmp_path, f"""\
        // RUN: python -c 'import compiler, os; print(compiler.__file__, os.environ["FUELC_REPRO_DIR"])' | filecheck %s
        // CHECK: {ROOT}/compiler/__init__.py {tmp_path}/work/repro
        """)
    t.run(tmp_path / "work", cwd="/")
    assert [str(c) for c in collect_mlir_tests(tmp_path)] == ["t.mlir"]


def test_pytest_plugin_collects_mlir_files(tmp_path):
    (tmp_path / "good.mlir").write_text("// RUN: echo ok | filecheck %s\n// CHECK: ok\n")
    (tmp_path / "bad.mlir").write_text("// RUN: echo ok | filecheck %s\n// CHECK: ko\n")
    (tmp_path / "input.mlir").write_text("// an input of another test: not collected\n")
    proc = subprocess.run(
        [PY, "-m", "pytest", "-p", "compiler.testing.pytest_plugin", "-p", "no:cacheprovider",
         "-q", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout
    assert "bad.mlir: RUN line 1 failed (rc=1)" in proc.stdout
    assert 'Couldn\'t match "ko"' in proc.stdout


# -- the in-process runner ---------------------------------------------------------

def test_every_run_line_of_the_repository_runs_in_process():
    """tests/passes, tests/cuda and the plugin example start no bash and no
    interpreter per command (FUELC_LIT_SUBPROCESS=1 brings bash back)."""
    from compiler.testing import inprocess
    from compiler.testing.lit import substitute_paths
    cases = [c for d in ("tests/passes", "tests/cuda", "examples/custom_pass")
             for c in collect_mlir_tests(ROOT / d)]
    lines = [(c.path.name, line) for c in cases for line in c.run_lines()]
    assert len(lines) > 40
    for name, line in lines:
        assert inprocess.parse(substitute_paths(line, ROOT / name, ROOT / "t")), (name, line)


@pytest.mark.parametrize("line, parsed", [
    ("echo a | not fuelc opt - 2>&1 >/dev/null | filecheck x",
     [[["echo", "a"], 0, []], [["fuelc", "opt", "-"], 1, [(2, "&1"), (1, "/dev/null")]],
      [["filecheck", "x"], 0, []]]),
    ("not not echo 'a b' \"c\\\"d\" e\\ f", [[["echo", "a b", 'c"d', "e f"], 2, []]]),
])
def test_run_line_parsing(line, parsed):
    from compiler.testing import inprocess
    (pipeline,) = inprocess.parse(line)
    assert [[s.argv, s.negations, s.redirects] for s in pipeline.stages] == parsed


@pytest.mark.parametrize("line", ["echo $HOME", "echo a || echo b", "cat x", "echo a &",
                                  "echo (a)", "python -c 'print(1)'", "echo *.mlir"])
def test_lines_it_cannot_interpret_are_left_to_bash(line):
    from compiler.testing import inprocess
    assert inprocess.parse(line) is None


def test_in_process_lines_keep_shell_semantics(tmp_path):
    t = _mlir(tmp_path, """\
        // RUN: fuelc opt %s --pass-pipeline='builtin.module(fuel-cse)' > %t && fuelc opt %t | filecheck %s
        // RUN: fuelc opt %s --print-ir-after-all -p 'builtin.module(fuel-dce)' 2>&1 >/dev/null | filecheck %s --check-prefix=DUMP
        // RUN: echo 'func.func @g( {' | not fuelc opt - 2>&1 | filecheck %s --check-prefix=BAD
        // RUN: not fuelc opt %s -p 'builtin.module(fuel-nope)' | filecheck %s --check-prefix=EMPTY --allow-empty
        // RUN: true; not false && true
        // CHECK: "fuel.add"
        // CHECK-NOT: "fuel.add"
        // DUMP: IR Dump After FuelDCE
        // BAD: <stdin>:1:
        // EMPTY-NOT: {{.}}
        """ + TWO_ADDS)
    t.run(tmp_path)
    assert (tmp_path / "out0").read_text().count('"fuel.add"') == 1
    fails = _mlir(tmp_path, "// RUN: fuelc opt %s -p 'builtin.module(fuel-nope)' | "
                            "filecheck %s\n// CHECK: module\n", "pipefail.mlir")
    with pytest.raises(RunLineFailed, match=r"(?s)rc=1\).*run in this process.*unknown pass .fuel-nope.*is empty"):
        fails.run(tmp_path)


def test_each_command_sees_only_the_plugins_it_loads(tmp_path, monkeypatch):
    """A plugin loaded in this process (or by an earlier command) is absent
    for a command that does not load it, as in a fresh process; the
    process's own registry is left as it was."""
    import compiler.passes as passes
    plugin = ROOT / "examples" / "custom_pass" / "fold_double_neg.py"
    before, plugins, modules = dict(passes.PASSES), dict(passes._PLUGINS), set(sys.modules)
    try:
        passes.load_pass_plugin(str(plugin))
        assert "fold-double-neg" in passes.PASSES
        t = _mlir(tmp_path, f"""\
            // RUN: not fuelc opt %s -p 'builtin.module(fold-double-neg)' 2>&1 | filecheck %s
            // RUN: fuelc opt %s --load-plugin {plugin} -p 'builtin.module(fold-double-neg)'
            // RUN: fuelc opt %s --load-plugin=tests.passes.kernel_tables -p 'builtin.module(fuel-fuse{{table=fused_f32}})'
            // RUN: not fuelc opt %s -p 'builtin.module(fuel-fuse{{table=fused_f32}})'
            // CHECK: unknown pass 'fold-double-neg'
            """ + TWO_ADDS)
        t.run(tmp_path, cwd=ROOT)
        assert "fold-double-neg" in passes.PASSES
    finally:   # what this test loaded is gone again (a later load registers afresh)
        passes.PASSES.clear()
        passes.PASSES.update(before)
        passes._PLUGINS.clear()
        passes._PLUGINS.update(plugins)
        for name in set(sys.modules) - modules:
            if name.startswith("fuelc_plugin_"):
                del sys.modules[name]


def test_filecheck_needs_no_path(tmp_path, monkeypatch):
    """``filecheck`` is this interpreter's package, never one found on PATH
    (a venv used without activating it)."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    _mlir(tmp_path, "// RUN: echo ok | filecheck %s\n// CHECK: ok\n").run(tmp_path)
    filecheck("ok\n", "// CHECK: ok\n")


def test_run_command_is_a_captured_call(tmp_path):
    from compiler.testing import run_command
    r = run_command(["python", "-m", "compiler.opt", "-", "-p", "builtin.module(fuel-cse)"],
                    stdin=TWO_ADDS)
    assert r.returncode == 0 and r.stdout.count('"fuel.add"') == 1, r.stderr
    r = run_command(["fuelc", "opt", str(tmp_path / "missing.mlir")])
    assert r.returncode == 2 and "cannot read" in r.stderr and r.stdout == ""
