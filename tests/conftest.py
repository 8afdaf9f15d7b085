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
``"cpu:x86-64-v3"``, and only plain ``"cpu"`` changes: a case whose ``target``
parameter names a CPU (``"cpu:x86-64-v3"``, ``"cpu:x86-64-v4"``, ...) compiles
and runs what it did in the first run, and is deselected there; so is the
``"cpu"`` case of a test parametrized over both ``"cpu"`` and
``"cpu:x86-64-v3"``, whose ``"cpu:x86-64-v3"`` case ran the same code in the
first run (unless that case is ``slow``: then the ``"cpu"`` case stays).
"""
import os

import pytest
from hypothesis import settings

os.environ.setdefault("FUELC_JOBS", "1")

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("ci")

_BASELINE = "cpu:x86-64-v3"


def _target(item):
    return getattr(getattr(item, "callspec", None), "params", {}).get("target")


def _names_a_cpu(item) -> bool:
    t = _target(item)
    return isinstance(t, str) and t.lower().startswith("cpu:") \
        and t.lower() not in ("cpu:host", "cpu:native")


def _case(item, target):
    """What tells ``item`` apart from its cases of other targets."""
    params = sorted((k, repr(v)) for k, v in item.callspec.params.items() if k != "target")
    return item.path, item.parent.nodeid, item.originalname, tuple(params), target


def pytest_collection_modifyitems(config, items):
    if os.environ.get("FUELC_CPU", "").strip().lower() != "x86-64-v3":
        return
    baseline = {_case(item, None): item for item in items if _target(item) == _BASELINE}

    def ran_in_the_first_run(item):
        if _names_a_cpu(item):
            return True
        twin = baseline.get(_case(item, None)) if _target(item) == "cpu" else None
        return twin is not None and twin.get_closest_marker("slow") is None

    dropped = [item for item in items if ran_in_the_first_run(item)]
    if dropped:
        ids = set(map(id, dropped))
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if id(item) not in ids]


@pytest.fixture(autouse=True)
def _reproducers_in_tmp(tmp_path, monkeypatch):
    """Every test's reproducers (pass pipeline and codegen, in this process
    and in driver subprocesses) go to its own temp dir."""
    monkeypatch.setenv("FUELC_REPRO_DIR", str(tmp_path / "repro"))
