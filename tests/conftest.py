"""Suite-wide settings.

Hypothesis runs derandomized by default so that CI is reproducible; explore
new examples locally with ``pytest --hypothesis-profile=explore``.
"""
import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _reproducers_in_tmp(tmp_path, monkeypatch):
    """Every test's reproducers (pass pipeline and codegen, in this process
    and in driver subprocesses) go to its own temp dir."""
    monkeypatch.setenv("FUELC_REPRO_DIR", str(tmp_path / "repro"))
