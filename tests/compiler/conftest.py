"""Fixtures for tests/compiler; the helpers live in ``oracle.py``."""
from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _reproducers_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("FUELC_REPRO_DIR", str(tmp_path / "repro"))
    monkeypatch.setenv("FUELC_REPRODUCER_DIR", str(tmp_path / "repro"))


@pytest.fixture
def rng():
    return np.random.default_rng(0)
