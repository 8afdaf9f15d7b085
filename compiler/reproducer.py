"""Where reproducers go: one place for every stage that writes one (the pass
pipeline and the CPU codegen stages)."""
from __future__ import annotations

import os
from pathlib import Path


def reproducer_dir() -> Path:
    """``$FUELC_REPRO_DIR``, else ``./fuelc-reproducers``."""
    return Path(os.environ.get("FUELC_REPRO_DIR") or "fuelc-reproducers")
