"""Transform-dialect scripts used by the CPU strategies (one module per
kernel family). Each exports a function that returns the script text: a
module holding ``transform.named_sequence @__transform_main`` (or, for a
schedule that needs a rewrite between scripts, a sequence of scripts and
``py:<name>`` steps naming a rewrite of ``REWRITES``)."""
from .conv import REWRITES as _CONV
from .matmul import REWRITES as _MATMUL
from .stem import REWRITES as _STEM

REWRITES = {**_CONV, **_MATMUL, **_STEM}

__all__ = ["REWRITES"]
