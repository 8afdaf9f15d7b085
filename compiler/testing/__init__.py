"""Unit-testing passes, as with ``mlir-opt`` and lit, from pytest.

* ``run_pipeline_on_text(ir_text, pipeline, plugins=(), target=None) -> str``
  runs a pipeline on fuel dialect text in this process and returns the
  resulting IR; it raises ``PipelineFailed`` with the diagnostics.
* ``filecheck(output, check, prefix="CHECK")`` checks text with the Python
  FileCheck port; a mismatch raises ``FileCheckError`` (an
  ``AssertionError``) showing FileCheck's report.
* ``collect_mlir_tests(directory)`` -> ``[MlirTest]``: ``.mlir`` files whose
  ``// RUN:`` lines ``MlirTest.run(tmp_path)`` runs lit-style (``%s``, ``%S``,
  ``%t``, ``not``, pipes into ``filecheck``; see ``compiler.testing.lit``).
  Or let pytest collect every ``.mlir`` file with a RUN line as a test item:
  ``pytest -p compiler.testing.pytest_plugin``.
* ``run_command(argv, stdin="", cwd=None)`` runs ``fuelc opt ...``,
  ``python -m compiler.opt ...`` or ``filecheck ...`` in this process with
  its output captured (``compiler.testing.inprocess``), as a subprocess
  would, without starting an interpreter.
"""
from __future__ import annotations

import os
import tempfile
from typing import Iterable, Optional

from compiler.errors import PassError, PipelineSyntaxError
from compiler.testing.inprocess import run_command
from compiler.testing.lit import FEATURES, MlirTest, RunLineFailed, collect_mlir_tests


class PipelineFailed(PassError):
    """The input did not parse or type-check, or the pipeline failed. The
    message renders every diagnostic (``<input>:line:col: error: ...``);
    ``diagnostics`` holds them."""


class FileCheckError(AssertionError):
    """FileCheck rejected the output; the message is FileCheck's report."""


def run_pipeline_on_text(ir_text: str, pipeline: str, *, plugins: Iterable = (),
                         target: Optional[str] = None) -> str:
    """Run ``pipeline`` (text or a named pipeline) on the module ``ir_text``
    after loading the pass ``plugins`` (``.py`` paths or module names) and
    return the printed result. ``target`` (``"cpu"``, ``"cpu:x86-64-v3"``)
    is the ``target=`` option of every pass that has one. Writes no
    reproducer. Raises ``PipelineSyntaxError`` for a bad pipeline,
    ``compiler.passes.PluginError`` for a bad plugin and ``PipelineFailed``
    otherwise."""
    from compiler.opt import parse_and_run
    from compiler.passes import load_pass_plugin
    from compiler.passes.diagnostics import ERROR, DiagnosticEngine
    for plugin in plugins:
        load_pass_plugin(plugin)
    engine = DiagnosticEngine()
    options = {"target": str(target)} if target is not None else None
    try:
        out = parse_and_run(ir_text, pipeline, engine, options=options, reproducer=False)
    except PipelineSyntaxError:
        raise
    except PassError as e:
        out, first = None, str(e).splitlines()[0]
    else:
        first = "the input is malformed or ill-typed"
    if out is not None:
        return out
    shown = [d.render("<input>") for d in engine.diagnostics] or [first]
    what = "failed" if any(d.severity == ERROR for d in engine.diagnostics) else first
    raise PipelineFailed(f"pipeline {pipeline!r} {what}:\n" + "\n".join(shown),
                         engine.diagnostics)


def same_bits_at_threads(run, counts: Iterable[int] = (1, 2)):
    """Call ``run()`` (returning an array or a list of arrays) at each thread
    count in ``counts``; assert every call gives the first call's bits and
    return that result. Kernels split their work by the thread count, so this
    checks that the split changes no rounding."""
    import numpy as np
    from compiler.codegen import parallel
    counts = list(counts)
    results = []
    for n in counts:
        with parallel.threads(n):
            out = run()
        results.append(out)
    first = results[0] if isinstance(results[0], (list, tuple)) else [results[0]]
    for n, out in zip(counts[1:], results[1:]):
        out = out if isinstance(out, (list, tuple)) else [out]
        assert len(out) == len(first), f"{n} threads gave {len(out)} results, not {len(first)}"
        for i, (a, b) in enumerate(zip(out, first)):
            np.testing.assert_array_equal(
                np.asarray(a), np.asarray(b),
                err_msg=f"result {i} at {n} threads against {counts[0]} threads")
    return results[0]


def filecheck(output: str, check, prefix: str = "CHECK") -> None:
    """Check ``output`` against the ``{prefix}:`` lines of ``check``: a path
    (``os.PathLike``, or a one-line string naming a file) or the check text
    itself. Raises ``FileCheckError`` with FileCheck's report on a mismatch
    (also when ``check`` has no ``{prefix}:`` line)."""
    is_file = isinstance(check, os.PathLike) or (
        isinstance(check, str) and "\n" not in check and os.path.isfile(check))
    with tempfile.TemporaryDirectory(prefix="fuelc-filecheck-") as tmp:
        path = os.fspath(check) if is_file else os.path.join(tmp, "checks.txt")
        if not is_file:
            with open(path, "w") as f:
                f.write(check)
        proc = run_command(["filecheck", path, f"--check-prefix={prefix}"], stdin=output)
    if proc.returncode != 0:
        source = os.fspath(check) if is_file else "the check text"
        raise FileCheckError(
            f"FileCheck ({prefix}) failed on {source} (rc={proc.returncode}):\n"
            f"{proc.stdout}{proc.stderr}".rstrip())


__all__ = ["run_pipeline_on_text", "filecheck", "same_bits_at_threads", "PipelineFailed", "FileCheckError",
           "collect_mlir_tests", "MlirTest", "RunLineFailed", "FEATURES", "run_command"]
