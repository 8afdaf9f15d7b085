"""Runs the ``// RUN:`` lines of every ``tests/passes/*.mlir`` file, lit-style.

Substitutions: ``%s`` (the test file), ``%t`` (a per-test temp path),
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


@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_mlir_file(path, tmp_path):
    lines = run_lines(path)
    assert lines, f"{path.name} has no RUN line"
    for i, line in enumerate(lines):
        cmd = substitute(line, path, tmp_path / f"out{i}")
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (
            f"RUN line failed (rc={proc.returncode}): {line}\n$ {cmd}\n"
            f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
