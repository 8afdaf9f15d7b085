"""Runs the ``// RUN:`` lines of every ``tests/passes/*.mlir`` file, lit-style,
through the public ``compiler.testing`` runner (``%s``, ``%t``, ``python``,
``not``, pipes into ``filecheck``, ``// REQUIRES:``), from the repository root
so ``--load-plugin=tests.passes.kernel_tables`` imports."""
from __future__ import annotations

import pathlib

import pytest

from compiler.testing import collect_mlir_tests

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent.parent
CASES = collect_mlir_tests(HERE)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_mlir_file(case, tmp_path):
    case.run(tmp_path, cwd=ROOT)
