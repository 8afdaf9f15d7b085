"""Compile-once memo shared by the CPU kernel families (``kernels``,
``fused``, ``runtime_fused``): an op instance's ``memo_key`` maps to its
compiled entry point. The object itself comes from the kernel cache
(``cache.py``), so each instance compiles once per machine; this memo makes
it load once per process, and once even when several threads ask at once.

``CallMemo`` is the per-kernel layer above it: a kernel callable's
``(params, layouts)`` -> (compiled function, descriptor templates), so a
repeated call skips re-deriving the op instance and rebuilding descriptors.
"""
from __future__ import annotations

import threading
from typing import Callable, Hashable, Sequence

from compiler.codegen.loader import KernelFunction
from compiler.codegen.memref import DescriptorTemplate

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


def single_op_linalg_text(op_name: str, params: dict, input_types: Sequence, dynamic: bool) -> str:
    """The linalg-on-tensors module of one fuel op (a primitive or a static
    fused op) as a ``@kernel`` entry: what the mlir-cpu and mlir-cpu-fused
    families compile for an instance."""
    from compiler.codegen.linalg import emit_single_op_module, lower_to_linalg
    module = emit_single_op_module(op_name, dict(params), list(input_types),
                                   dynamic=dynamic, func_name=ENTRY)
    lower_to_linalg(module)
    return str(module)


Prepare = Callable[[Sequence, object, int], "tuple[KernelFunction, Sequence]"]


class CallMemo:
    """Memoised calls of one kernel callable (fixed OpKind and dtypes).

    ``prepare(layouts, params, n_inputs) -> (fn, layouts')`` is the family's
    pure mapping from a call's layouts, OpParams and input count to its
    compiled function and
    the (possibly adapted) layouts to build descriptors from; it may raise
    (nothing is memoised then). ``call`` looks the pair up by
    ``(params, *layouts)`` (OpParams and Layout are frozen and hashable;
    unhashable params fall back to ``prepare`` every call) and calls ``fn``
    with one descriptor per storage. Safe to share between threads: entries
    are immutable and a racing miss only prepares the same entry twice.
    """

    MAX_ENTRIES = 1024  # a kernel called with ever-new layouts must not grow without bound

    __slots__ = ("_prepare", "_calls")

    def __init__(self, prepare: Prepare):
        self._prepare = prepare
        self._calls: dict = {}

    def __len__(self) -> int:
        return len(self._calls)

    def call(self, inputs: Sequence, outputs: Sequence, layouts: Sequence, params) -> None:
        n_inputs = len(inputs)
        key = (params, n_inputs, *layouts)
        try:
            hit = self._calls.get(key)
        except TypeError:  # an unhashable params object: no memo
            key = hit = None
        if hit is None:
            fn, lays = self._prepare(layouts, params, n_inputs)
            hit = (fn, tuple(DescriptorTemplate(l) for l in lays))
            if key is not None:
                if len(self._calls) >= self.MAX_ENTRIES:
                    self._calls.clear()
                self._calls[key] = hit
        fn, templates = hit
        fn(*[t.bind(s) for t, s in zip(templates, (*inputs, *outputs))])
