"""The pass layer at scale and under hostile input: near-linear work
(instrumentation counters, never timings), pipeline text that cannot run
code, named tables and plugins, reproducers that rerun as printed, and the
driver's guards against input that would crash the MLIR parser."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys

import numpy as np
import pytest

from compiler import Graph, compile
from compiler.errors import PassError, PipelineSyntaxError
from compiler.dialect import make_context
from compiler.mlir import ir
from compiler.passes import _fuel, build_pipeline, register_table, run_pipeline
from compiler.passes._target import TargetError, resolve_table, resolve_target
from compiler.passes.diagnostics import malformed_expectations
from compiler.dialect.verify import check_nesting
from compiler.testing import run_command
from tests.passes import kernel_tables  # noqa: F401  (registers the test tables)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T = "tensor<4x8xf32>"
R = "tensor<4xf32>"
U = "tensor<4x1xf32>"


def _opt(*args, stdin=None, isolated=False):
    """``python -m compiler.opt ARGS`` from the repository root: in this
    process (``compiler.testing.run_command``), or in a subprocess where a
    regression would crash or abort the interpreter (``isolated``)."""
    if not isolated:
        return run_command(["python", "-m", "compiler.opt", *args], stdin=stdin or "", cwd=ROOT)
    return subprocess.run([sys.executable, "-m", "compiler.opt", *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=120)


def chain(n: int) -> str:
    lines = [f"func.func @f(%x: {T}, %y: {T}) -> {T} {{"]
    cur = "%x"
    for i in range(n):
        op = ('"fuel.tanh"({c}) : ({T})', '"fuel.add"({c}, %y) : ({T}, {T})',
              '"fuel.mul_scalar"({c}) {{value = 1.5 : f64}} : ({T})')[i % 3]
        lines.append(f"  %v{i} = " + op.format(c=cur, T=T) + f" -> {T}")
        cur = f"%v{i}"
    return "\n".join(lines + [f"  return {cur} : {T}", "}"])


def softmaxes(n: int) -> str:
    """``n`` spelled-out softmaxes, each feeding the next."""
    lines = [f"func.func @f(%x: {T}) -> {T} {{"]
    cur = "%x"
    for i in range(n):
        p = f"%s{i}_"
        lines += [
            f'  {p}m = "fuel.max_dim"({cur}) {{axis = 1 : i64}} : ({T}) -> {R}',
            f'  {p}u = "fuel.unsqueeze"({p}m) {{dim = 1 : i64}} : ({R}) -> {U}',
            f'  {p}b = "fuel.broadcast_to"({p}u) {{shape = [4, 8]}} : ({U}) -> {T}',
            f'  {p}d = "fuel.sub"({cur}, {p}b) : ({T}, {T}) -> {T}',
            f'  {p}e = "fuel.exp"({p}d) : ({T}) -> {T}',
            f'  {p}s = "fuel.sum_dim"({p}e) {{axis = 1 : i64}} : ({T}) -> {R}',
            f'  {p}v = "fuel.unsqueeze"({p}s) {{dim = 1 : i64}} : ({R}) -> {U}',
            f'  {p}w = "fuel.broadcast_to"({p}v) {{shape = [4, 8]}} : ({U}) -> {T}',
            f'  {p}o = "fuel.div"({p}e, {p}w) : ({T}, {T}) -> {T}',
            f'  {p}dead = "fuel.neg"({p}o) : ({T}) -> {T}',
        ]
        cur = f"{p}o"
    return "\n".join(lines + [f"  return {cur} : {T}", "}"])


def _counters(text: str, pipeline: str) -> dict:
    with make_context(), ir.Location.unknown():
        m = ir.Module.parse(text)
        _fuel.COUNTERS.clear()
        run_pipeline(m, pipeline, reproducer=False)
        return dict(_fuel.COUNTERS), str(m)


# -- near-linear work ---------------------------------------------------------------
@pytest.mark.parametrize("module,pipeline,keys", [
    (chain, "builtin.module(fuel-fuse{table=fused_f32},fuel-dce)",
     ("fuse.visits", "fuse.match_attempts", "fuse-runtime.examined", "dce.visits")),
    (softmaxes, "builtin.module(fuel-fuse{table=fused_f32 runtime=false},fuel-decompose{all=true},"
                "fuel-reconcile-dtypes{table=fused_f32},fuel-dce)",
     ("fuse.visits", "fuse.match_attempts", "decompose.visits", "reconcile.visits",
      "dce.visits")),
])
def test_pass_work_grows_linearly(module, pipeline, keys):
    small, _ = _counters(module(60), pipeline)
    big, text = _counters(module(240), pipeline)
    for k in keys:
        assert small.get(k, 0) > 0, (k, small)
        # 4x the ops: at most 4x the work (+ a constant), not 16x.
        assert big[k] <= 4 * small[k] + 16, (k, small[k], big[k])
    if module is softmaxes:  # every softmax fused, then decomposed back; the dead negs are gone
        assert "fuel.neg" not in text and text.count('"fuel.exp"') == 240


def test_decompose_names_each_op_once(monkeypatch):
    # An op's name (its SSA name) numbers the whole function: made once per
    # decomposed op, not again for each op of its recipe (a ResNet's
    # fuel-decompose spent 0.3 s of the serial front there).
    calls = []
    describe = _fuel.describe
    monkeypatch.setattr(_fuel, "describe", lambda op: calls.append(op) or describe(op))
    _, text = _counters(softmaxes(20), "builtin.module(fuel-fuse{table=fused_f32 runtime=false},"
                                       "fuel-decompose{all=true})")
    assert text.count('"fuel.exp"') == 20  # every softmax decomposed (9 ops each)
    assert len(calls) == 20


def test_fuse_rewrites_every_softmax_of_a_long_chain():
    counts, text = _counters(softmaxes(200), "builtin.module(fuel-fuse{table=fused_f32 "
                                             "runtime=false},fuel-dce)")
    assert text.count('"fuel.softmax_last_dim"') == 200 and '"fuel.exp"' not in text
    assert counts["fuse.visits"] < 2 * 200 * 10  # each op visited about once, not per rewrite


def test_long_chains_split_into_bounded_runtime_groups():
    from compiler.passes.fuse_runtime import MAX_MEMBERS
    _, text = _counters(chain(3 * MAX_MEMBERS), "builtin.module(fuel-fuse{table=fused_f32})")
    assert text.count('"fuel.runtime_fused"') == 3
    assert '"fuel.tanh"' in text  # inside the bodies


@pytest.mark.slow
def test_a_20000_op_chain_runs_through_the_default_pipeline():
    counts, text = _counters(chain(20000), "default")
    assert counts["fuse.visits"] == 20000
    assert text.count('"fuel.runtime_fused"') >= 20000 // 64


def test_a_5000_op_chain_runs_through_the_default_pipeline():
    counts, text = _counters(chain(5000), "default")
    assert counts["fuse.visits"] == 5000 and '"fuel.runtime_fused"' in text


def test_compiled_chain_matches_the_interpreter_after_group_splitting():
    from compiler.graph.interpret import interpret
    g = Graph()
    x = g.input("x", (4, 8), "f32")
    y = x
    for i in range(150):
        y = (y * 0.99 + 0.01) if i % 2 else y.tanh()
    g.output(y, name="o")
    xv = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    got = compile(g)(x=xv)
    want = interpret(g, {"x": xv})["o"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# -- pipeline text runs no code -----------------------------------------------------
@pytest.mark.parametrize("spec", ["os:abort", "sys:exit", "tests.passes.kernel_tables:fused_f32"])
def test_table_option_never_imports_or_calls(spec):
    proc = _opt("-", f"--pass-pipeline=builtin.module(fuel-fuse{{table={spec}}})", stdin=chain(3),
                isolated=spec == "os:abort")
    assert proc.returncode == 1, proc.stderr  # an error, not an abort (-6) or exit 0
    assert f"unknown binding table '{spec}'; known tables: cpu, global" in proc.stderr


def test_unknown_table_lists_the_known_names():
    with pytest.raises(TargetError, match=r"known tables: .*broadcast_only_add.*cpu.*fused_f32"):
        resolve_table("nope")


def test_load_plugin_registers_tables_and_bad_plugins_are_errors():
    ok = _opt("-", "--load-plugin=tests.passes.kernel_tables",
              "--pass-pipeline=builtin.module(fuel-fuse{table=fused_f32})", stdin=chain(3))
    assert ok.returncode == 0 and "fuel.runtime_fused" in ok.stdout, ok.stderr
    bad = _opt("-", "--load-plugin=no.such.module", "-p", "default", stdin=chain(3))
    assert bad.returncode == 1 and "cannot load pass plugin 'no.such.module'" in bad.stderr
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_register_table_rejects_bad_names_and_rebinding():
    with pytest.raises(TargetError, match="must be a letter"):
        register_table("a:b", kernel_tables.fused_f32)
    with pytest.raises(TargetError, match="already registered"):
        register_table("fused_f32", kernel_tables.primitives_f32)
    with pytest.raises(TargetError, match="zero-argument callable"):
        register_table("not_callable", 3)
    register_table("fused_f32", kernel_tables.fused_f32)  # the same factory again: a no-op
    register_table("test_not_a_table", lambda: 42)
    with pytest.raises(TargetError, match="not a KernelBindingTable: its factory returned int"):
        resolve_table("test_not_a_table")


# -- target= ------------------------------------------------------------------------
def test_target_option_resolves_through_table_for():
    from compiler.targets import table_for
    table, backends = resolve_target("", "cpu", ())
    assert table is table_for("cpu") and [str(b) for b in backends] == ["cpu"]
    with pytest.raises(TargetError, match="not both"):
        resolve_target("fused_f32", "cpu", ())
    with pytest.raises(TargetError, match="target 'tpu'"):
        resolve_target("", "tpu", ())
    built = build_pipeline("fuel-fuse{target=cpu},fuel-decompose{target=cpu},"
                           "fuel-reconcile-dtypes{target=cpu}", make_context())
    assert "fuel-fuse{target=cpu" in built.text


def test_unknown_target_fails_the_pass_with_a_located_error():
    proc = _opt("-", "--pass-pipeline=builtin.module(fuel-reconcile-dtypes{target=tpu})",
                "--no-reproducer", stdin=chain(2))
    assert proc.returncode == 1 and "fuel-reconcile-dtypes: target 'tpu'" in proc.stderr


# -- reproducers rerun as printed ---------------------------------------------------
I64_NEG = """func.func @f(%a: tensor<4xi64>) -> tensor<4xi64> {
  %0 = "fuel.neg"(%a) : (tensor<4xi64>) -> tensor<4xi64>
  return %0 : tensor<4xi64>
}"""


def _rerun(command: str):
    """The printed command, as printed (in this process, from the root)."""
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "compiler.opt"], command
    return run_command(argv + ["--no-reproducer"], cwd=ROOT)


def test_a_table_object_is_printed_by_its_name_and_reruns(tmp_path):
    from compiler.targets import table_for
    with make_context(), ir.Location.unknown():
        m = ir.Module.parse(I64_NEG.replace("tensor<4xi64>", "tensor<4xcomplex<f32>>"))
        with pytest.raises(PassError) as ei:
            run_pipeline(m, "fuel-fuse,fuel-reconcile-dtypes", options={"table": table_for("cpu")},
                         reproducer_dir=str(tmp_path))
    cmd = ei.value.command
    assert "KernelBindingTable" not in cmd and "table=cpu" in cmd
    # The reproducer holds an input the driver refuses up front, as located.
    proc = _rerun(cmd)
    assert proc.returncode == 1 and "complex<f32>" in proc.stderr, proc.stderr


def test_an_unnamed_table_object_is_noted_and_the_command_parses(tmp_path):
    from runtime.binding import KernelBindingTable
    with make_context(), ir.Location.unknown():
        m = ir.Module.parse(I64_NEG)
        with pytest.raises(PassError) as ei:
            run_pipeline(m, "fuel-reconcile-dtypes", options={"table": KernelBindingTable()},
                         reproducer_dir=str(tmp_path))
    err = ei.value
    assert "KernelBindingTable(" not in err.command and "target=cpu" in err.command
    assert "in-memory binding table" in str(err)
    assert "in-memory binding table" in open(err.reproducer).read()
    proc = _rerun(err.command)
    assert "unknown" not in proc.stderr and "expects" not in proc.stderr, proc.stderr


def test_driver_reproducer_keeps_its_flags_and_reproduces(tmp_path):
    src = tmp_path / "in.mlir"
    src.write_text(I64_NEG.replace("return %0", '"other.op"() : () -> ()\n  return %0'))
    proc = _opt(str(src), "--allow-unregistered-dialect", "--no-verify-types",
                "--load-plugin=tests.passes.kernel_tables", f"--reproducer-dir={tmp_path}",
                "--pass-pipeline=builtin.module(fuel-reconcile-dtypes{table=primitives_f32})")
    assert proc.returncode == 1
    command = next(line.split("rerun with: ", 1)[1] for line in proc.stderr.splitlines()
                   if "rerun with: " in line)
    for flag in ("--allow-unregistered-dialect", "--no-verify-types",
                 "--load-plugin=tests.passes.kernel_tables"):
        assert flag in command
    again = _rerun(command)
    assert again.returncode == 1
    assert "no kernel for 'fuel.neg'" in again.stderr, again.stderr


def test_compile_reproducer_names_the_target(tmp_path, monkeypatch):
    monkeypatch.setenv("FUELC_REPRO_DIR", str(tmp_path))
    g = Graph()
    x = g.input("x", (4,), "f32")
    g.output(x.exp(), name="o")
    with pytest.raises(PassError) as ei:
        compile(g, pipeline="builtin.module(fuel-fuse,test-fail-on-fuel-ops)")
    cmd = ei.value.command
    assert "target=cpu" in cmd and "KernelBindingTable" not in cmd
    assert "--load-plugin=tests.passes.kernel_tables" in cmd  # where the failing pass lives
    proc = _rerun(cmd)
    assert proc.returncode == 1 and "test-fail-on-fuel-ops: refusing fuel.exp" in proc.stderr, \
        proc.stderr


# -- parser guards (crash cases in a subprocess) and type limits -------------------
@pytest.mark.parametrize("text", [
    "module {" * 5000 + "}" * 5000,
    "func.func private @f(" + "tensor<" * 3000 + "f32" + ">" * 3000 + ")",
    "func.func private @f() attributes {a = " + "[" * 4000 + "]" * 4000 + "}",
])
def test_deeply_nested_input_is_refused_not_crashed(text):
    proc = _opt("-", "-p", "default", stdin=text, isolated=True)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-500:])
    assert "<stdin>:1:" in proc.stderr and "more than 256 levels deep" in proc.stderr


def test_nesting_scan_ignores_strings_comments_and_arrows():
    deep = "(" * 300
    assert check_nesting(f'"{deep}"\n// {deep}\n' + "() -> " * 400) is None
    assert check_nesting("\n" + "{" * 10, limit=5) == (2, 6, check_nesting("{" * 6, 5)[2])


@pytest.mark.parametrize("ty,needle", [
    ("tensor<4294967296x4294967296xf32>", "more than int64 can index"),
    ("tensor<4xcomplex<f32>>", "element type complex<f32>, which fuel has no dtype for"),
])
def test_unrepresentable_types_are_located_errors(ty, needle):
    text = (f"func.func @f(%a: {ty}) -> {ty} {{\n"
            f'  %0 = "fuel.neg"(%a) : ({ty}) -> {ty}\n  return %0 : {ty}\n}}')
    for flags in ([], ["--no-verify-types"]):
        proc = _opt("-", *flags, stdin=text)
        assert proc.returncode == 1 and f"<stdin>:2:8: error: 'fuel.neg' op operand #0" \
            in proc.stderr and needle in proc.stderr, proc.stderr


def test_to_linalg_locates_unsupported_element_types():
    ty = "tensor<4xcomplex<f32>>"
    with make_context(), ir.Location.unknown():
        m = ir.Module.parse(f"func.func @f(%a: {ty}) -> {ty} {{\n"
                            f'  %0 = "fuel.neg"(%a) : ({ty}) -> {ty}\n  return %0 : {ty}\n}}')
        with pytest.raises(PassError) as ei:
            run_pipeline(m, "fuel-to-linalg", reproducer=False)
    d = ei.value.diagnostics[0]
    assert d.line == 2 and d.col == 8 and "complex<f32>" in d.message


def test_malformed_expected_directives_fail_naming_the_line():
    text = ("// expected-error {{unterminated\n"
            "// expected-eror {{typo}}\n"
            "// expected-warning@bogus {{x}}\n"
            "// expected-remark@+1 {{fine}}\n")
    fails = malformed_expectations(text, 10, "f.mlir")
    assert [f.split(":")[1] for f in fails] == ["10", "11", "12"]
    assert "unknown severity 'eror'" in fails[1]
    proc = _opt("-", "--verify-diagnostics", stdin="// expected-error {{oops\nmodule {}\n")
    assert proc.returncode == 1 and "<stdin>:1: malformed diagnostic directive" in proc.stderr


def test_help_names_the_real_reproducer_directory():
    proc = _opt("--help")
    assert "$FUELC_REPRO_DIR, else ./fuelc-reproducers" in " ".join(proc.stdout.split())
    assert "temp dir" not in proc.stdout
