"""Compilation targets: which binding table a target compiles against.

``cpu_table()`` is the table ``compile(..., target="cpu")`` plans, gates
fusion and runs with: the generated ``mlir-cpu`` kernels registered first
(so ``lookup_with_caps`` picks them) and the numpy reference kernels after
them as sibling alternatives, then the CPU fill passes. It is built once per
process and frozen; ``extra`` registrations (e.g. loaded artifacts) go
through ``extend_cpu_table``.
"""
from __future__ import annotations

import threading
from typing import Callable

from runtime.binding import KernelBindingTable
from runtime.cost import default_cost_for_op_kind
from runtime.dtype import DType
from runtime.numpy_kernels import register_numpy_kernels
from runtime.precision import PrecisionGuarantee

from .errors import CompilerError

TARGETS = ("cpu",)
CPU_DTYPES = (DType.F32, DType.F64, DType.F16, DType.BF16, DType.I32, DType.I64,
              DType.I8, DType.I16, DType.U8, DType.U32)

_lock = threading.Lock()
_cpu: KernelBindingTable | None = None


class TargetError(CompilerError, ValueError):
    """An unknown or unavailable compilation target."""


def check_target(target: str) -> str:
    t = str(target).lower()
    if t not in TARGETS:
        raise TargetError(f"unknown target {target!r}; available: {', '.join(TARGETS)}")
    return t


def _build_cpu_table() -> KernelBindingTable:
    from .codegen.fused import register_fused_cpu_kernels
    from .codegen.kernels import register_mlir_cpu_kernels
    t = KernelBindingTable()
    register_mlir_cpu_kernels(t, dtypes=CPU_DTYPES)
    register_fused_cpu_kernels(t)
    register_numpy_kernels(t)
    t.fill_unset_cpu_precision(PrecisionGuarantee.PRIMITIVE_DETERMINISTIC_CPU)
    t.fill_unset_cpu_cost(default_cost_for_op_kind)
    t.finalize()
    return t.freeze()


def cpu_table() -> KernelBindingTable:
    """The process-wide CPU compilation table (built on first use)."""
    global _cpu
    t = _cpu
    if t is not None:
        return t
    with _lock:
        if _cpu is None:
            _cpu = _build_cpu_table()
        return _cpu


def extend_cpu_table(fn: Callable[[KernelBindingTable], None]) -> KernelBindingTable:
    """Copy-on-write update of the CPU table: clone, ``fn(clone)``, finalize, swap."""
    global _cpu
    base = cpu_table()
    with _lock:
        clone = (_cpu or base).clone()
        fn(clone)
        clone.finalize()
        _cpu = clone.freeze()
        return _cpu


def table_for(target: str) -> KernelBindingTable:
    check_target(target)
    return cpu_table()
