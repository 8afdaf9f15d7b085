"""Buggy pass plugins (issue 22) are reported, never a crash, an escaped
exception or a silent success: a pass that erases an op still in use (SIGSEGV
before), one that breaks the fuel type rules (exit 0 before), one that calls
``sys.exit(0)`` (exit 0, printing nothing, before), a plugin raising a
``BaseException`` subclass at import (a traceback before), and a plugin path
that is a directory or not a ``.py`` file. In-process through
``compiler.opt.main`` and ``compiler.passes.run_pipeline``."""
from __future__ import annotations

import sys
import textwrap

import pytest

import compiler.passes as passes
from compiler.errors import PassError
from compiler.opt import main as opt_main
from compiler.passes import PASSES

PLUGIN = '''
import sys
from compiler.mlir import ir
from compiler.passes import ModulePass, register_pass, _fuel

def _exp(module):
    return next(o for o in _fuel.fuel_ops(module) if o.name == "fuel.exp")

@register_pass
class EraseUsed(ModulePass):
    name = "safety-erase-used-op"
    def apply(self, module):
        _exp(module).erase()

@register_pass
class EraseUnused(ModulePass):
    name = "safety-erase-dead-op"
    def apply(self, module):
        op = next(o for o in _fuel.fuel_ops(module) if o.name == "fuel.neg")
        op.erase()

@register_pass
class Retype(ModulePass):
    name = "safety-corrupt-type"
    def apply(self, module):
        with module.context:
            _exp(module).results[0].set_type(ir.RankedTensorType.get([2, 4], ir.F32Type.get()))

_runs = []

@register_pass
class RetypeOnce(ModulePass):
    name = "safety-corrupt-type-once"
    def apply(self, module):
        _runs.append(1)
        if len(_runs) == 1:
            with module.context:
                _exp(module).results[0].set_type(ir.RankedTensorType.get([2, 4], ir.F32Type.get()))

@register_pass
class Exit(ModulePass):
    name = "safety-exit"
    def apply(self, module):
        sys.exit(0)

class Stop(BaseException):
    pass

@register_pass
class Raise(ModulePass):
    name = "safety-base-exception"
    def apply(self, module):
        raise Stop("stopped")
'''

IR = """func.func @main(%x: tensor<8x4xf32>) -> tensor<8xf32> {
  %0 = "fuel.exp"(%x) : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %n = "fuel.neg"(%x) : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %1 = "fuel.sum_dim"(%0) {axis = 1 : i64} : (tensor<8x4xf32>) -> tensor<8xf32>
  return %1 : tensor<8xf32>
}
"""


@pytest.fixture(autouse=True)
def _restore_registry():
    """Plugins register globally: undo what a test loaded."""
    passes._ensure_passes_loaded()
    before, plugins, modules = dict(PASSES), dict(passes._PLUGINS), set(sys.modules)
    yield
    PASSES.clear()
    PASSES.update(before)
    passes._PLUGINS.clear()
    passes._PLUGINS.update(plugins)
    for name in set(sys.modules) - modules:
        if name.startswith("fuelc_plugin_"):
            del sys.modules[name]


@pytest.fixture
def files(tmp_path):
    plugin, src = tmp_path / "safety.py", tmp_path / "in.mlir"
    plugin.write_text(PLUGIN)
    src.write_text(IR)
    return plugin, src


def _opt(capsys, plugin, src, pass_name, *extra):
    rc = opt_main([str(src), "--load-pass-plugin", str(plugin), "--no-reproducer",
                   f"--pass-pipeline=builtin.module({pass_name})", *extra])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("pass_name, expected", [
    ("safety-erase-used-op", "internal error in pass 'safety-erase-used-op': _LiveOpErased: "
     "erase() of 'fuel.exp' whose result #0 is still used by 'fuel.sum_dim'"),
    ("safety-corrupt-type", "after pass 'safety-corrupt-type': 'fuel.exp' op result #0 is "
     "f32[2,4] but operands (f32[8,4]) give f32[8,4]"),
    ("safety-exit", "internal error in pass 'safety-exit': SystemExit: 0 at safety.py:"),
    ("safety-base-exception", "internal error in pass 'safety-base-exception': Stop: stopped"),
])
def test_buggy_plugin_pass_is_an_error(files, capsys, pass_name, expected):
    rc, out, err = _opt(capsys, *files, pass_name)
    assert rc == 1 and out == "", (rc, out, err)
    assert "error: " in err and expected in err, err
    assert "Traceback" not in err


def test_erasing_an_unused_op_still_works_and_erase_is_restored(files, capsys):
    from compiler.mlir import ir
    erase = ir._OperationBase.__dict__["erase"]
    rc, out, err = _opt(capsys, *files, "safety-erase-dead-op")
    assert rc == 0 and "fuel.neg" not in out and "fuel.exp" in out, err
    assert ir._OperationBase.__dict__["erase"] is erase  # the guard is only on during a pass


def test_no_verify_types_skips_the_check_after_passes(files, capsys):
    rc, out, err = _opt(capsys, *files, "safety-corrupt-type", "--no-verify-types")
    assert rc == 0 and "tensor<2x4xf32>" in out, err


def test_run_pipeline_reports_the_erase_as_a_pass_error(files):
    """compile(pipeline=...) and every other caller go through run_pipeline."""
    from compiler.mlir import ir
    from compiler.opt import _make_context
    plugin, _ = files
    passes.load_pass_plugin(str(plugin))
    with _make_context(), ir.Location.unknown():
        module = ir.Module.parse(IR)
        with pytest.raises(PassError, match="erase\\(\\) of 'fuel.exp' whose result #0 is "
                           "still used"):
            passes.run_pipeline(module, "builtin.module(safety-erase-used-op)", reproducer=False)


@pytest.mark.parametrize("kind, expected", [
    ("base-exception", "Stop at line 3: stop at import (fix the plugin)"),
    ("directory", "it is a directory"),
    ("not-python", "not a Python file"),
])
def test_unloadable_plugin_is_one_error_line(tmp_path, capsys, kind, expected):
    src = tmp_path / "in.mlir"
    src.write_text(IR)
    if kind == "base-exception":
        plugin = tmp_path / "stop.py"
        plugin.write_text(textwrap.dedent("""\
            class Stop(BaseException):
                pass
            raise Stop('stop at import')
            """))
    elif kind == "directory":
        plugin = tmp_path / "plugins"
        plugin.mkdir()
    else:
        plugin = src  # an existing .mlir file
    rc = opt_main([str(src), "--load-pass-plugin", str(plugin), "-p", "builtin.module()"])
    err = capsys.readouterr().err
    assert rc == 1 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("fuelc opt: error: cannot load pass plugin") and expected in err, err
    assert "NoneType" not in err


def test_every_fuelc_opt_error_line_says_error(tmp_path, capsys):
    rc = opt_main([str(tmp_path / "missing.mlir")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("fuelc opt: error: cannot read"), err
    rc = opt_main([str(tmp_path / "missing.mlir"), "--option", "novalue"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("fuelc opt: error: --option expects KEY=VALUE"), err


CHAIN = "builtin.module(fuel-cse, safety-corrupt-type, fuel-dce)"


@pytest.mark.parametrize("each", [False, True])
def test_type_check_runs_once_after_the_pipeline_and_a_breaking_pass_is_still_named(
        files, monkeypatch, each):
    """The fuel type rules are checked once after the pipeline (after every
    pass with verify_each); a pass in the middle of a pipeline that breaks
    them is named either way (by a rerun on a copy of the input)."""
    from compiler.mlir import ir
    from compiler.opt import _make_context
    plugin, _ = files
    passes.load_pass_plugin(str(plugin))
    calls = []
    check = passes._after_pass_errors
    monkeypatch.setattr(passes, "_after_pass_errors", lambda op: calls.append(1) or check(op))
    with _make_context(), ir.Location.unknown():
        module = ir.Module.parse(IR)
        passes.run_pipeline(module, "builtin.module(fuel-cse, fuel-dce)", reproducer=False,
                            verify_each=each)
        assert len(calls) == (3 if each else 1)  # (the input, then) each pass, or once
        with pytest.raises(PassError) as info:
            passes.run_pipeline(ir.Module.parse(IR), CHAIN, reproducer=False, verify_each=each)
    assert "pass pipeline failed in pass 'safety-corrupt-type': after pass " \
           "'safety-corrupt-type': 'fuel.exp' op result #0 is f32[2,4]" in str(info.value)
    errors = [d.message for d in info.value.diagnostics if d.severity == "error"]
    assert errors == [  # the same in both modes, each once
        "after pass 'safety-corrupt-type': 'fuel.exp' op result #0 is f32[2,4] but operands "
        "(f32[8,4]) give f32[8,4] (the pass broke the fuel type rules)",
        "after pass 'safety-corrupt-type': 'fuel.sum_dim' op result #0 is f32[8] but operands "
        "(f32[2,4]) give f32[2] (the pass broke the fuel type rules)"]


def test_verify_each_pass_flag_and_env(files, capsys, monkeypatch):
    seen = []
    run = passes.run_pipeline
    monkeypatch.setattr(passes, "run_pipeline", lambda *a, **k: seen.append(k["verify_each"])
                        or run(*a, **k))
    monkeypatch.setattr("compiler.opt.run_pipeline", passes.run_pipeline)
    rc, out, err = _opt(capsys, *files, "safety-corrupt-type", "--verify-each-pass")
    assert rc == 1 and "after pass 'safety-corrupt-type'" in err and seen == [True]
    monkeypatch.setenv("FUELC_VERIFY_EACH", "1")
    calls = []
    check = passes._after_pass_errors
    monkeypatch.setattr(passes, "_after_pass_errors", lambda op: calls.append(1) or check(op))
    rc, out, err = _opt(capsys, *files, "fuel-cse")
    assert rc == 0 and seen == [True, None] and len(calls) == 2  # the input, then fuel-cse


def test_ill_typed_input_is_not_blamed_on_a_pass(files):
    """As before: a pass is at fault only for IR it made ill-typed."""
    from compiler.mlir import ir
    from compiler.opt import _make_context
    bad = IR.replace('"fuel.neg"(%x) : (tensor<8x4xf32>) -> tensor<8x4xf32>',
                     '"fuel.neg"(%x) : (tensor<8x4xf32>) -> tensor<4x8xf32>')
    with _make_context(), ir.Location.unknown():
        module = ir.Module.parse(bad)
        passes.run_pipeline(module, "builtin.module(fuel-cse)", reproducer=False)
    assert "tensor<4x8xf32>" in str(module)


def test_types_broken_in_a_run_the_rerun_does_not_repeat_are_still_an_error(files):
    """A pass that breaks the rules only the first time: the rerun names no
    pass, and the error says how to check after every pass."""
    from compiler.mlir import ir
    from compiler.opt import _make_context
    plugin, _ = files
    passes.load_pass_plugin(str(plugin))
    with _make_context(), ir.Location.unknown():
        with pytest.raises(PassError, match="pass pipeline failed: after the pipeline: 'fuel.exp' "
                           "op result #0 is f32.2,4. .* rerun with FUELC_VERIFY_EACH=1"):
            passes.run_pipeline(ir.Module.parse(IR), "builtin.module(safety-corrupt-type-once)",
                                reproducer=False)
