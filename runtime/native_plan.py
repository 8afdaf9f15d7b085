"""A run of consecutive kernel calls of the direct path (``runtime.direct``)
as one native call.

The direct path's run makes each kernel step one ctypes call: the
conversion of its pointer arguments and a release and re-acquisition of
the GIL, some 0.4 us a step, and a split step (over threads) some 1.3 us of
Python more (docs/benchmarks.md, "Python between the kernels"). Here a
small function (LLVM IR below, JIT-compiled once per process for the host,
like the compiler's native worker loop) walks a table of ``(function
address, argument addresses)`` rows and calls each in order, so a run of
steps is one ctypes call. A row is ``1 + MAX_ARGS`` int64 slots: the
function's address, then its argument addresses, zero past the last one
(x86-64 SysV lets a caller pass more arguments than the callee reads).
"""
from __future__ import annotations

import ctypes
import threading

#: The most pointer arguments a row's call may take.
MAX_ARGS = 32

_ARGS = ", ".join(f"ptr %a{i}" for i in range(MAX_ARGS))
_LOADS = "\n".join(f"  %p{i} = getelementptr i64, ptr %row, i64 {1 + i}\n"
                   f"  %a{i} = load ptr, ptr %p{i}, align 8" for i in range(MAX_ARGS))
_IR = f"""
define void @fuelc_run_rows(ptr %t, i64 %n) {{
entry:
  %any = icmp ugt i64 %n, 0
  br i1 %any, label %body, label %out
body:
  %i = phi i64 [ 0, %entry ], [ %next, %body ]
  %at = mul i64 %i, {1 + MAX_ARGS}
  %row = getelementptr i64, ptr %t, i64 %at
  %fn = load ptr, ptr %row, align 8
{_LOADS}
  call void %fn({_ARGS})
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, %n
  br i1 %more, label %body, label %out
out:
  ret void
}}
"""

_runner = None
_lock = threading.Lock()
_keep: list = []   # the engine, kept while the process runs its code


def runner():
    """The JIT-compiled ``run_rows(table address, rows)`` (a ctypes
    function), built once per process; None where this host has no JIT."""
    global _runner
    if _runner is None:
        with _lock:
            if _runner is None:
                try:
                    import llvmlite.binding as llvm
                    from .cpu_loader import host_target_machine
                    tm = host_target_machine(jit=True)
                    mod = llvm.parse_assembly(_IR)
                    mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
                    mod.verify()
                    engine = llvm.create_mcjit_compiler(mod, tm)
                    engine.finalize_object()
                except RuntimeError:
                    _runner = False
                else:
                    _keep.append(engine)
                    _runner = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
                        engine.get_function_address("fuelc_run_rows"))
    return _runner or None


class Rows:
    """A table of calls for ``runner()``: ``call()`` makes them in order."""

    __slots__ = ("table", "address", "n", "fn")

    def __init__(self, rows):
        """``rows``: ``(function address, argument addresses)``, each with
        at most ``MAX_ARGS`` arguments."""
        self.n = len(rows)
        self.table = (ctypes.c_int64 * ((1 + MAX_ARGS) * max(1, self.n)))()
        for i, (fn, args) in enumerate(rows):
            if len(args) > MAX_ARGS:
                raise ValueError(f"a row takes at most {MAX_ARGS} arguments, got {len(args)}")
            at = i * (1 + MAX_ARGS)
            self.table[at] = fn
            self.table[at + 1:at + 1 + len(args)] = args
        self.address = ctypes.addressof(self.table)
        self.fn = runner()


def function_address(raw) -> int | None:
    """The address of ``raw`` when it is a ctypes function taking only
    pointers and returning nothing (a kernel's ``raw``), else None."""
    if not isinstance(raw, ctypes._CFuncPtr) or raw.restype is not None:
        return None
    if any(t is not ctypes.c_void_p for t in (raw.argtypes or ())):
        return None
    return ctypes.cast(raw, ctypes.c_void_p).value


__all__ = ["MAX_ARGS", "Rows", "runner", "function_address"]
