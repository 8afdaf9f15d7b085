"""Runs the ``// RUN:`` lines of every ``tests/passes/*.mlir`` file, lit-style.

``// REQUIRES: <feature>`` skips a file whose feature is absent (see
FEATURES). Substitutions: ``%s`` (the test file), ``%t`` (a per-test temp path),
``python`` (this interpreter), ``not`` (expect failure: lit_not.py). Each RUN
line runs through the shell from the repository root with ``pipefail``, so
both the driver and ``filecheck`` must succeed.
"""
from __future__ import annotations

import pathlib
import re
import shlex
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent.parent
NOT = f"{shlex.quote(sys.executable)} {shlex.quote(str(HERE / 'lit_not.py'))}"


def run_lines(path: pathlib.Path) -> list[str]:
    lines, cur = [], ""
    for line in path.read_text().splitlines():
        m = re.match(r"\s*//\s*RUN:\s?(.*)$", line)
        if not m:
            continue
        part = m.group(1).rstrip()
        if part.endswith("\\"):
            cur += part[:-1] + " "
            continue
        lines.append(cur + part)
        cur = ""
    return lines


def substitute(cmd: str, path: pathlib.Path, tmp: pathlib.Path) -> str:
    cmd = cmd.replace("%s", shlex.quote(str(path))).replace("%t", shlex.quote(str(tmp)))
    # `python` and `not` at the start of a pipeline stage.
    cmd = re.sub(r"(^|\|\s*|&&\s*)python(?=\s)", lambda m: m.group(1) + shlex.quote(sys.executable), cmd)
    cmd = re.sub(r"(^|\|\s*|&&\s*)not(?=\s)", lambda m: m.group(1) + NOT, cmd)
    return cmd


CASES = sorted(HERE.glob("*.mlir"))


def _fused_dialect() -> bool:
    """The fuel dialect defines the registry's fused ops (fuel.softmax_last_dim)."""
    try:
        from compiler.dialect import default_ops
        op = default_ops().get("softmax_last_dim")
        return op is not None and op.fused
    except Exception:
        return False


FEATURES = {"fused-dialect": _fused_dialect}


def requires(path: pathlib.Path) -> list[str]:
    return [f.strip() for line in path.read_text().splitlines()
            for m in [re.match(r"\s*//\s*REQUIRES:\s*(.*)$", line)] if m
            for f in m.group(1).split(",")]


@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_mlir_file(path, tmp_path):
    missing = [f for f in requires(path) if not FEATURES[f]()]
    if missing:
        pytest.skip(f"{path.name} requires: {', '.join(missing)}")
    lines = run_lines(path)
    assert lines, f"{path.name} has no RUN line"
    for i, line in enumerate(lines):
        cmd = substitute(line, path, tmp_path / f"out{i}")
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (
            f"RUN line failed (rc={proc.returncode}): {line}\n$ {cmd}\n"
            f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
