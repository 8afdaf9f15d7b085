"""A pytest plugin: every ``.mlir`` file with a ``// RUN:`` line is a test.

Enable it with ``pytest -p compiler.testing.pytest_plugin`` (or
``addopts = "-p compiler.testing.pytest_plugin"`` in the project's pytest
settings). Each file is one item whose RUN lines run lit-style
(``compiler.testing.lit``) from pytest's rootdir; a failure shows the line,
the command, its exit status and output. ``.mlir`` files without a RUN line
(inputs of other tests) are not collected.
"""
from __future__ import annotations

import tempfile

import pytest

from compiler.testing.lit import MlirTest, RunLineFailed


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".mlir" and MlirTest(file_path).run_lines():
        return MlirFile.from_parent(parent, path=file_path)
    return None


class MlirFile(pytest.File):
    def collect(self):
        yield MlirItem.from_parent(self, name=self.path.name)


class MlirItem(pytest.Item):
    def runtest(self) -> None:
        with tempfile.TemporaryDirectory(prefix="fuelc-lit-") as tmp:
            MlirTest(self.path).run(tmp, cwd=self.config.rootpath)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, RunLineFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, 0, f"mlir: {self.name}"
