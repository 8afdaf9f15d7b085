"""Suite-wide settings.

Hypothesis runs derandomized by default so that CI is reproducible; explore
new examples locally with ``pytest --hypothesis-profile=explore``.

Kernels compile in the test process (``FUELC_JOBS=1`` unless set): a
``compile()`` of 64 nodes or more would otherwise start a worker interpreter
(``compiler/codegen/jobs.py``) for every such graph, one start-up each (an
ONNX pooling node test is one), which on a small CI machine costs more than
the worker saves. ``tests/compiler/test_jobs.py`` passes ``jobs=`` itself;
``FUELC_JOBS=2 pytest ...`` brings the workers back.
"""
import os

import pytest
from hypothesis import settings

os.environ.setdefault("FUELC_JOBS", "1")

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _reproducers_in_tmp(tmp_path, monkeypatch):
    """Every test's reproducers (pass pipeline and codegen, in this process
    and in driver subprocesses) go to its own temp dir."""
    monkeypatch.setenv("FUELC_REPRO_DIR", str(tmp_path / "repro"))
