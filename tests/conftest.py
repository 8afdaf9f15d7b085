"""Suite-wide settings.

Hypothesis runs derandomized by default so that CI is reproducible; explore
new examples locally with ``pytest --hypothesis-profile=explore``.

Kernels compile in the test process (``FUELC_JOBS=1`` unless set): a
``compile()`` of 64 nodes or more would otherwise start a worker interpreter
(``compiler/codegen/jobs.py``) for every such graph, one start-up each (an
ONNX pooling node test is one), which on a small CI machine costs more than
the worker saves. ``tests/compiler/test_jobs.py`` passes ``jobs=`` itself;
``FUELC_JOBS=2 pytest ...`` brings the workers back.

With ``FUELC_CPU=x86-64-v3`` (CI's second run) the plain ``"cpu"`` target *is*
``"cpu:x86-64-v3"``: of a test parametrized over both, the ``"cpu:x86-64-v3"``
case is deselected there (it would compile and run the same code twice).
"""
import os

import pytest
from hypothesis import settings

os.environ.setdefault("FUELC_JOBS", "1")

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("ci")

_BASELINE = "cpu:x86-64-v3"


def pytest_collection_modifyitems(config, items):
    if os.environ.get("FUELC_CPU", "").strip().lower() != "x86-64-v3":
        return
    ids = {item.nodeid for item in items}
    twins = [item for item in items
             if _BASELINE in item.nodeid and item.nodeid.replace(_BASELINE, "cpu") in ids]
    if twins:
        dropped = set(map(id, twins))
        config.hook.pytest_deselected(items=twins)
        items[:] = [item for item in items if id(item) not in dropped]


@pytest.fixture(autouse=True)
def _reproducers_in_tmp(tmp_path, monkeypatch):
    """Every test's reproducers (pass pipeline and codegen, in this process
    and in driver subprocesses) go to its own temp dir."""
    monkeypatch.setenv("FUELC_REPRO_DIR", str(tmp_path / "repro"))
