"""What the per-target codegen packages (``codegen/cpu``, ``codegen/cuda``, ...)
share: the MLIR stage helpers (``stages``: parse, run a pass pipeline with a
reproducer on failure, entries with out-params) and the LLVM IR text
fix-ups (``llvm_text``). Target-neutral: nothing here names a target, and no
per-target package imports another (``tests/targets/test_layering.py``).
Its sources are part of every generated kernel's cache key
(``codegen/cache.py``)."""
