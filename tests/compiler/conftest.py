"""Fixtures for tests/compiler; the helpers live in ``oracle.py``."""
from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(0)
