"""Run the ``// RUN:`` lines of ``.mlir`` test files, the way lit does.

Each RUN line (``\\`` at the end continues it on the next RUN line) runs
like ``bash -o pipefail -c LINE``: every stage of a pipe must succeed. A line
made only of the commands fuelc's tests use (``python -m compiler.opt``,
``fuelc``, ``python -m compiler.codegen.cuda``, ``filecheck``, ``echo``,
``not``; pipes, ``&&``, ``2>&1``, ``>FILE``) runs in this process
(``compiler.testing.inprocess``: no interpreter start-up per command); any
other line, or every line when ``$FUELC_LIT_SUBPROCESS=1``, runs through
``bash``.
Substitutions: ``%s`` (the test file), ``%S`` (its directory), ``%t`` (a
temporary path of the RUN line), ``%%`` (a ``%``); at the start of a pipeline
stage ``python``, ``fuelc`` and ``filecheck`` run under this interpreter
(``fuelc`` is ``python -m compiler.cli``) and ``not CMD`` succeeds only if CMD
fails (exit status > 0). ``// REQUIRES: feature, ...`` skips the file when a
feature of ``FEATURES`` is absent. The commands see the ``compiler`` package
this process imported (first on ``PYTHONPATH``) and write reproducers under
the temporary directory unless ``$FUELC_REPRO_DIR`` says otherwise.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shlex
import subprocess
import sys
from typing import Callable, Mapping, Optional

from compiler.testing import inprocess

_RUN_RE = re.compile(r"\s*//\s*RUN:\s?(.*)$")
_REQUIRES_RE = re.compile(r"\s*//\s*REQUIRES:\s*(.*)$")
_STAGE = r"(^|\|\s*|&&\s*|;\s*)"           # where a command word may start
_NOT = f"{shlex.quote(sys.executable)} {shlex.quote(str(pathlib.Path(__file__).with_name('lit_not.py')))}"
_PY = shlex.quote(sys.executable)
_COMMANDS = {"python": _PY, "fuelc": f"{_PY} -m compiler.cli", "filecheck": f"{_PY} -m filecheck"}


class RunLineFailed(AssertionError):
    """A RUN line exited with a non-zero status; the message holds the line,
    the command as run, its exit status, stdout and stderr."""


def _fused_dialect() -> bool:
    """The fuel dialect defines the registry's fused ops (fuel.softmax_last_dim)."""
    try:
        from compiler.dialect import default_ops
        op = default_ops().get("softmax_last_dim")
        return op is not None and op.fused
    except Exception:
        return False


#: Features ``// REQUIRES:`` may name; add your own: ``FEATURES["x"] = fn``.
FEATURES: dict[str, Callable[[], bool]] = {"fused-dialect": _fused_dialect}


def substitute_paths(cmd: str, path: pathlib.Path, tmp: pathlib.Path) -> str:
    """``cmd`` with ``%s``, ``%S``, ``%t`` and ``%%`` substituted."""
    subs = {"%": "%", "s": shlex.quote(str(path)), "S": shlex.quote(str(path.parent)),
            "t": shlex.quote(str(tmp))}
    return re.sub(r"%([%sSt])", lambda m: subs[m.group(1)], cmd)


def substitute(cmd: str, path: pathlib.Path, tmp: pathlib.Path) -> str:
    """``cmd`` with lit's substitutions applied and the commands spelled for
    ``bash`` (see the module docstring)."""
    cmd = substitute_paths(cmd, path, tmp)
    cmd = re.sub(_STAGE + r"((?:not\s+)*)(python|fuelc|filecheck)(?=\s|$)",
                 lambda m: m.group(1) + m.group(2) + _COMMANDS[m.group(3)], cmd)
    return re.sub(_STAGE + r"not(?=\s)", lambda m: m.group(1) + _NOT, cmd)


@dataclasses.dataclass(frozen=True)
class MlirTest:
    """One ``.mlir`` file with RUN lines."""

    path: pathlib.Path

    def __str__(self) -> str:
        return self.path.name

    def run_lines(self) -> list[str]:
        lines, cur = [], ""
        for line in self.path.read_text().splitlines():
            m = _RUN_RE.match(line)
            if not m:
                continue
            part = m.group(1).rstrip()
            if part.endswith("\\"):
                cur += part[:-1] + " "
                continue
            lines.append(cur + part)
            cur = ""
        if cur:
            lines.append(cur)
        return lines

    def requires(self) -> list[str]:
        return [f.strip() for line in self.path.read_text().splitlines()
                for m in [_REQUIRES_RE.match(line)] if m
                for f in m.group(1).split(",") if f.strip()]

    def missing_features(self, features: Optional[Mapping[str, Callable[[], bool]]] = None
                         ) -> list[str]:
        """The REQUIRES features absent here. An unknown feature is an error."""
        features = FEATURES if features is None else features
        unknown = [f for f in self.requires() if f not in features]
        if unknown:
            raise RunLineFailed(
                f"{self.path.name}: unknown REQUIRES feature(s) {', '.join(unknown)}; known: "
                f"{', '.join(sorted(features)) or 'none'} (add one to "
                f"compiler.testing.FEATURES)")
        return [f for f in self.requires() if not features[f]()]

    def run(self, tmp_dir, *, cwd=None, features=None, timeout: float = 120) -> None:
        """Run every RUN line in ``cwd`` (default the file's directory); temp
        paths go under ``tmp_dir``. Skips (``pytest.skip``) when a REQUIRES
        feature is absent; raises ``RunLineFailed`` at the first failing line
        or when the file has no RUN line."""
        missing = self.missing_features(features)
        if missing:
            import pytest
            pytest.skip(f"{self.path.name} requires: {', '.join(missing)}")
        lines = self.run_lines()
        if not lines:
            raise RunLineFailed(f"{self.path} has no '// RUN:' line")
        tmp_dir = pathlib.Path(tmp_dir)
        env = dict(os.environ)
        env.setdefault("FUELC_REPRO_DIR", str(tmp_dir / "repro"))
        env["PYTHONPATH"] = os.pathsep.join(
            [str(_compiler_root())] + [p for p in [env.get("PYTHONPATH")] if p])
        subprocess_only = os.environ.get("FUELC_LIT_SUBPROCESS", "") not in ("", "0")
        for i, line in enumerate(lines):
            tmp = tmp_dir / f"out{i}"
            parsed = None if subprocess_only else inprocess.parse(
                substitute_paths(line, self.path.resolve(), tmp))
            if parsed is not None:
                cmd = substitute_paths(line, self.path.resolve(), tmp)
                note = "    (run in this process; FUELC_LIT_SUBPROCESS=1 runs it in bash)"
                proc = inprocess.run_line(parsed, cwd or self.path.parent, env)
            else:
                cmd, note = substitute(line, self.path.resolve(), tmp), ""
                proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd],
                                      cwd=cwd or self.path.parent, env=env,
                                      capture_output=True, text=True, timeout=timeout)
            if proc.returncode != 0:
                raise RunLineFailed(
                    f"{self.path.name}: RUN line {i + 1} failed (rc={proc.returncode}): {line}\n"
                    f"$ {cmd}{note}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")


def _compiler_root() -> pathlib.Path:
    import compiler
    return pathlib.Path(compiler.__file__).resolve().parent.parent


def collect_mlir_tests(directory, pattern: str = "*.mlir") -> list[MlirTest]:
    """The ``.mlir`` files of ``directory`` (sorted), as ``MlirTest``s; a
    file without a RUN line fails when run."""
    return [MlirTest(p) for p in sorted(pathlib.Path(directory).glob(pattern))]
