"""A failing stage raises PipelineError with a reproducer file and a command
that reproduces the failure."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import codegen_ir as IR
from compiler.codegen.cpu import lower
from compiler.codegen.cpu.strategy import LOOPS, Strategy
from compiler.errors import PipelineError

REPO = Path(__file__).resolve().parents[2]

# convert-func-to-llvm on tensors rewrites func.return to llvm.return, which
# one-shot bufferization then genuinely rejects: a real pass failure.
BREAKS_BUFFERIZE = Strategy("breaks-bufferize", tensor_passes=("convert-func-to-llvm",))
# Dropping finalize-memref-to-llvm leaves non-LLVM ops behind; translating such a
# module segfaults inside MLIR, so it must be refused before translation.
MISSING_PASS = Strategy("missing-pass", lowering=tuple(
    p for p in LOOPS.lowering if p != "finalize-memref-to-llvm"))


def _rerun(msg):
    cmd = re.search(r"rerun with: (.+)", msg).group(1)
    assert cmd.startswith("python -m compiler.codegen.cpu ")
    argv = shlex.split(cmd)
    argv[0] = sys.executable
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return cmd, subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def test_failing_pass_writes_reproducer_and_command():
    with pytest.raises(PipelineError) as info:
        lower(IR.ADD_DYN, ["add"], strategy=BREAKS_BUFFERIZE)
    msg = str(info.value)
    assert "stage 'bufferize' failed" in msg
    assert "cannot bufferize func.func without func.return" in msg  # MLIR's diagnostic
    path = Path(re.search(r"reproducer: (\S+)", msg).group(1))
    assert path.parent == Path(os.environ["FUELC_REPRO_DIR"]).resolve()
    assert "llvm.return" in path.read_text()  # the failing stage's input IR
    cmd, proc = _rerun(msg)
    assert "--pipeline=" in cmd and "one-shot-bufferize{" in cmd
    assert proc.returncode == 1
    assert "cannot bufferize func.func without func.return" in proc.stderr


def test_missing_lowering_pass_is_refused_before_translation():
    with pytest.raises(PipelineError) as info:
        lower(IR.ADD_DYN, ["add"], strategy=MISSING_PASS)
    msg = str(info.value)
    assert "stage 'translate' failed" in msg
    assert "builtin.unrealized_conversion_cast" in msg
    cmd, proc = _rerun(msg)
    assert cmd.endswith("--translate")
    assert proc.returncode == 1, proc.stderr  # an error, not a crash (rc -11)
    assert "ops not lowered to the LLVM dialect remain" in proc.stderr


def test_malformed_input_gets_a_reproducer_too():
    with pytest.raises(PipelineError, match=r"stage 'parse' failed[\s\S]*reproducer: "):
        lower("func.func @f( {", ["f"])


def test_cli_compiles_a_file_end_to_end(tmp_path):
    src = tmp_path / "add.mlir"
    src.write_text(IR.ADD_DYN)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "compiler.codegen.cpu", str(src), "--entry", "add"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "define void @_mlir_ciface_add(ptr" in proc.stdout


def test_run_passes_matches_the_bindings_run_and_reports_failure(capfd):
    """``compiler.mlir.run_passes`` (the pass manager through the C API, the
    GIL released) rewrites as ``PassManager.run`` does, and a failing
    pipeline returns False without raising or printing its diagnostics."""
    from compiler.codegen.common.stages import pipeline_text
    from compiler.codegen.cpu.pipeline import BUFFERIZE
    from compiler.mlir import ir, passmanager, run_passes
    text = ("func.func @f(%a: i32) -> i32 {\n  %c = arith.constant 0 : i32\n"
            "  %b = arith.addi %a, %c : i32\n  return %b : i32\n}")
    ctx = ir.Context()
    ours, theirs = ir.Module.parse(text, ctx), ir.Module.parse(text, ctx)
    pipeline = "builtin.module(func.func(canonicalize))"
    assert run_passes(passmanager.PassManager.parse(pipeline, ctx), ours.operation)
    passmanager.PassManager.parse(pipeline, ctx).run(theirs.operation)
    assert str(ours) == str(theirs) and "arith.addi" not in str(ours)
    with pytest.raises(PipelineError) as info:  # the bufferize stage's input fails it
        lower(IR.ADD_DYN, ["add"], strategy=BREAKS_BUFFERIZE)
    failing = Path(re.search(r"reproducer: (\S+)", str(info.value)).group(1)).read_text()
    bad = ir.Module.parse(failing, ctx)
    capfd.readouterr()
    assert run_passes(passmanager.PassManager.parse(pipeline_text(BUFFERIZE), ctx),
                      bad.operation) is False
    assert "error" not in capfd.readouterr().err
