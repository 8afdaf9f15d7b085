"""Pass plugins: ``fuelc opt --load-pass-plugin FILE.py|MODULE`` (alias
``--load-plugin``) registers a user's passes; a plugin that cannot be loaded,
or whose pass name is taken, is one error line and exit status 1."""
from __future__ import annotations

import os
import pathlib
import shlex
import subprocess
import sys
import textwrap

import pytest

import compiler.passes as passes
from compiler.opt import main as opt_main
from compiler.passes import (
    PASSES, ModulePass, PassRegistrationError, PluginError, load_pass_plugin, register_pass)
from compiler.testing import run_command

IDENTITY_PASS = '''
from compiler.passes import ModulePass, register_pass
from compiler.passes.diagnostics import emit_remark

@register_pass
class {cls}(ModulePass):
    name = "{name}"
    summary = "a test plugin pass"
    note: str = ""

    def apply(self, module):
        if self.note:
            emit_remark(module, self.note)
'''

ROOT = pathlib.Path(passes.__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's compiler, from any cwd

NEG = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
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
        if name.startswith(("fuelc_plugin_", "my_test_plugin")):
            del sys.modules[name]


def _plugin(tmp_path, source, name="my_passes.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def _opt(capsys, *argv):
    rc = opt_main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def neg_file(tmp_path):
    src = tmp_path / "in.mlir"
    src.write_text(NEG)
    return src


@pytest.mark.parametrize("flag", ["--load-pass-plugin", "--load-plugin"])
def test_file_plugin_pass_runs(tmp_path, neg_file, capsys, flag):
    plugin = _plugin(tmp_path, IDENTITY_PASS.format(cls="Hello", name="test-hello"))
    rc, out, err = _opt(capsys, str(neg_file), flag, str(plugin),
                        "--pass-pipeline=builtin.module(test-hello{note=hi})")
    assert rc == 0, err
    assert '"fuel.neg"' in out and "remark: hi" in err


def test_module_plugin_and_passes_without_the_decorator(tmp_path, neg_file, capsys,
                                                        monkeypatch):
    _plugin(tmp_path, """
        from compiler.passes import ModulePass
        from compiler.passes.diagnostics import emit_warning

        class Undecorated(ModulePass):
            name = "test-undecorated"
            def apply(self, module):
                emit_warning(module, "ran undecorated")
        """, "my_test_plugin_mod.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    rc, out, err = _opt(capsys, str(neg_file), "--load-pass-plugin=my_test_plugin_mod",
                        "--pass-pipeline=builtin.module(test-undecorated)")
    assert rc == 0, err
    assert "warning: ran undecorated" in err


def test_list_passes_shows_plugin_passes(tmp_path, capsys):
    plugin = _plugin(tmp_path, IDENTITY_PASS.format(cls="Listed", name="test-listed"))
    rc, out, _ = _opt(capsys, "--load-pass-plugin", str(plugin), "--list-passes")
    assert rc == 0
    line = next(l for l in out.splitlines() if l.startswith("test-listed"))
    assert "a test plugin pass" in line and "note" in line


BAD_PLUGINS = {
    "syntax": ("def broken(:\n", "SyntaxError at line 1"),
    "raises": ("x = 1\nraise RuntimeError('no GPU here')\n",
               "RuntimeError at line 2: no GPU here (fix the plugin)"),
    "exits": ("import sys\nsys.exit(3)\n", "SystemExit at line 2"),
    "fuel_clash": (IDENTITY_PASS.format(cls="MyCSE", name="fuel-cse"),
                   "pass name 'fuel-cse' of MyCSE"),
    "mlir_clash": (IDENTITY_PASS.format(cls="MyCanon", name="canonicalize"),
                   "pass name 'canonicalize' of MyCanon"),
}


@pytest.mark.parametrize("kind", sorted(BAD_PLUGINS))
def test_bad_plugin_is_one_line_rc1(tmp_path, neg_file, capsys, kind):
    source, expected = BAD_PLUGINS[kind]
    plugin = _plugin(tmp_path, source)
    rc, out, err = _opt(capsys, str(neg_file), "--load-pass-plugin", str(plugin),
                        "--pass-pipeline=builtin.module(fuel-cse)")
    assert rc == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("fuelc opt: error: ") and str(plugin) in err, err
    assert expected in err, err
    if kind.endswith("clash"):
        assert "give the pass another `name`" in err
        assert PASSES["fuel-cse"].__module__ == "compiler.passes.fuel_cse"


@pytest.mark.parametrize("spec, expected", [
    ("no_such_plugin_module", "ModuleNotFoundError: No module named 'no_such_plugin_module' "
                              "(give a .py file path or a module importable"),
    ("missing/plugin.py", "no such file (give a .py file that exists"),
    ("tests.passes.no_such_plugin", "No module named 'tests.passes.no_such_plugin' "
                                    "(give a .py file path"),
])
def test_missing_plugin(neg_file, capsys, spec, expected):
    rc, _, err = _opt(capsys, str(neg_file), f"--load-pass-plugin={spec}")
    assert rc == 1 and len(err.strip().splitlines()) == 1
    assert f"cannot load pass plugin '{spec}'" in err and expected in err, err


def test_a_plugin_missing_a_dependency_says_fix_the_plugin(tmp_path, monkeypatch):
    _plugin(tmp_path, "import no_such_dependency_xyz\n", "my_test_plugin_dep.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match="ModuleNotFoundError: No module named "
                                          "'no_such_dependency_xyz' \\(fix the plugin\\)"):
        load_pass_plugin("my_test_plugin_dep")


def test_two_plugins_clash(tmp_path, neg_file, capsys):
    a = _plugin(tmp_path, IDENTITY_PASS.format(cls="First", name="test-same"), "a.py")
    b = _plugin(tmp_path, IDENTITY_PASS.format(cls="Second", name="test-same"), "b.py")
    rc, _, err = _opt(capsys, str(neg_file), "--load-pass-plugin", str(a),
                      "--load-pass-plugin", str(b))
    assert rc == 1
    assert f"pass plugin '{b}': pass name 'test-same' of Second ({b}) is already " \
           f"registered by First ({a})" in err, err


def test_a_failing_plugin_leaves_no_pass_behind(tmp_path):
    plugin = _plugin(tmp_path, IDENTITY_PASS.format(cls="Early", name="test-early")
                     + "\nraise ValueError('late failure')\n")
    line = plugin.read_text().splitlines().index("raise ValueError('late failure')") + 1
    with pytest.raises(PluginError, match=f"ValueError at line {line}: late failure"):
        load_pass_plugin(plugin)
    assert "test-early" not in PASSES
    # Fixed, it loads (the failed module was not cached).
    plugin.write_text(IDENTITY_PASS.format(cls="Early", name="test-early"))
    load_pass_plugin(plugin)
    assert "test-early" in PASSES


def test_loading_twice_and_importing_the_same_file_are_no_ops(tmp_path, monkeypatch):
    plugin = _plugin(tmp_path, IDENTITY_PASS.format(cls="Twice", name="test-twice"),
                     "my_test_plugin_twice.py")
    first = load_pass_plugin(plugin)
    assert load_pass_plugin(str(plugin)) is first
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_test_plugin_twice  # the same class statement under another module name
    assert PASSES["test-twice"] is my_test_plugin_twice.Twice


def test_register_pass_errors():
    class NoName(ModulePass):
        pass
    with pytest.raises(PassRegistrationError, match="NoName has no pass name; set the class "
                                                    "attribute `name`"):
        register_pass(NoName)

    class Dce(ModulePass):
        name = "fuel-dce"
    with pytest.raises(PassRegistrationError, match="'fuel-dce' of .*Dce .* is already "
                                                    "registered by FuelDCE"):
        register_pass(Dce)


FAILING_PASS = '''
from compiler.passes import ModulePass, register_pass
from compiler.passes.diagnostics import emit_error

@register_pass
class Refuse(ModulePass):
    name = "test-refuse-neg"
    def apply(self, module):
        for op in module.regions[0].blocks[0].operations[0].regions[0].blocks[0].operations:
            if op.operation.name == "fuel.neg":
                emit_error(op, "test-refuse-neg: refusing fuel.neg")
'''


def test_reproducer_of_a_plugin_pass_reruns_from_anywhere(tmp_path, neg_file):
    """The rerun command names the plugin by its absolute path (the run gave a
    relative one), so it reproduces from another directory."""
    sub = tmp_path / "plugins"
    sub.mkdir()
    _plugin(sub, FAILING_PASS, "refuse.py")
    proc = run_command(
        ["python", "-m", "compiler.opt", str(neg_file), "--load-pass-plugin",
         "plugins/refuse.py", f"--reproducer-dir={tmp_path / 'repro'}",
         "--pass-pipeline=builtin.module(test-refuse-neg)"], cwd=tmp_path, env=ENV)
    assert proc.returncode == 1, proc.stderr
    command = next(line.split("rerun with: ", 1)[1] for line in proc.stderr.splitlines()
                   if "rerun with: " in line)
    assert f"--load-plugin={sub / 'refuse.py'}" in command, command
    argv = shlex.split(command)
    argv[0] = sys.executable   # a real process in another directory
    again = subprocess.run(argv + ["--no-reproducer"], cwd=sub, capture_output=True,
                           text=True, timeout=120, env=ENV)
    assert again.returncode == 1
    assert "error: test-refuse-neg: refusing fuel.neg" in again.stderr, again.stderr
