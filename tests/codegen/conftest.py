"""Shared fixtures: every test gets its own cache dir (and, suite-wide, its
own reproducer dir) and a fresh process-wide kernel cache."""
import numpy as np
import pytest

from compiler.codegen import cache as cache_mod


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("FUELC_CACHE_DIR", str(tmp_path / "cache"))
    cache_mod.set_default_cache(None)
    yield
    cache_mod.set_default_cache(None)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
