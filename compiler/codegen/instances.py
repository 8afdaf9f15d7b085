"""Compile-once memo shared by the CPU kernel families (``kernels``,
``fused``, ``runtime_fused``): an op instance's ``memo_key`` maps to its
compiled entry point. The object itself comes from the kernel cache
(``cache.py``), so each instance compiles once per machine; this memo makes
it load once per process, and once even when several threads ask at once.
"""
from __future__ import annotations

import threading
from typing import Callable, Hashable

from compiler.codegen.loader import KernelFunction

ENTRY = "kernel"

_compiled: dict[Hashable, KernelFunction] = {}
_lock = threading.Lock()
_key_locks: dict[Hashable, threading.Lock] = {}


def compiled_entry(key: Hashable, linalg_text: Callable[[], str], n_args: int) -> KernelFunction:
    """The kernel for ``key``: on first use, ``linalg_text()`` (the instance's
    linalg-on-tensors module with one ``@kernel`` entry) is compiled through
    ``compile_module`` and its C-interface entry taking ``n_args`` memref
    descriptors is memoised."""
    fn = _compiled.get(key)
    if fn is not None:
        return fn
    with _lock:
        lock = _key_locks.setdefault(key, threading.Lock())
    with lock:
        fn = _compiled.get(key)
        if fn is None:
            from compiler.codegen.cpu import compile_module
            fn = compile_module(linalg_text(), [ENTRY]).ciface(ENTRY, n_args)
            _compiled[key] = fn
    return fn
