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

#: The most dimensions a strided copy (``copy_function``) walks, after
#: size-1 dimensions are dropped and mergeable ones merged.
COPY_DIMS = 4


def _copy_ir(name: str, run: int | None) -> str:
    """``name(dst, src, spec)``: copy a strided array into a row-major one.
    ``spec``: int64 ``[n0..n3, src byte strides 0..3, dst byte strides 0..3,
    run bytes]``, every ``n`` at least 1; each innermost element is a run of
    bytes, copied by one load and store of an ``i{8 * run}`` (``run`` 1, 2,
    4 or 8) or by ``llvm.memcpy`` (``run`` None: the spec's run bytes)."""
    d = COPY_DIMS
    lines = [f"define void @{name}(ptr %dst, ptr %src, ptr %spec) {{", "entry:"]
    for j in range(3 * d + 1):
        lines += [f"  %q{j} = getelementptr i64, ptr %spec, i64 {j}", f"  %v{j} = load i64, ptr %q{j}, align 8"]
    lines.append("  br label %L0")
    for k in range(d):
        pred, so, do = ("entry", "0", "0") if k == 0 else (f"L{k - 1}", f"%so{k - 1}", f"%do{k - 1}")
        back = f"L{k}" if k == d - 1 else f"E{k}"
        lines += [f"L{k}:", f"  %i{k} = phi i64 [ 0, %{pred} ], [ %i{k}n, %{back} ]",
                  f"  %so{k} = phi i64 [ {so}, %{pred} ], [ %so{k}n, %{back} ]",
                  f"  %do{k} = phi i64 [ {do}, %{pred} ], [ %do{k}n, %{back} ]"]
        if k < d - 1:
            lines.append(f"  br label %L{k + 1}")
    k = d - 1
    lines += [f"  %ps = getelementptr i8, ptr %src, i64 %so{k}", f"  %pd = getelementptr i8, ptr %dst, i64 %do{k}"]
    if run is None:
        lines.append(f"  call void @llvm.memcpy.p0.p0.i64(ptr %pd, ptr %ps, i64 %v{3 * d}, i1 false)")
    else:
        lines += [f"  %x = load i{8 * run}, ptr %ps, align 1", f"  store i{8 * run} %x, ptr %pd, align 1"]
    for k in range(d - 1, -1, -1):
        if k < d - 1:
            lines.append(f"E{k}:")
        nxt = f"E{k - 1}" if k else "out"
        lines += [f"  %i{k}n = add i64 %i{k}, 1", f"  %so{k}n = add i64 %so{k}, %v{d + k}",
                  f"  %do{k}n = add i64 %do{k}, %v{2 * d + k}", f"  %c{k} = icmp ult i64 %i{k}n, %v{k}",
                  f"  br i1 %c{k}, label %L{k}, label %{nxt}"]
    lines += ["out:", "  ret void", "}"]
    return "\n".join(lines) + "\n"


_COPIES = {run: f"fuelc_copy_{run or 'n'}" for run in (1, 2, 4, 8, None)}
_IR += "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\n" + "".join(
    _copy_ir(name, run) for run, name in _COPIES.items())
# fuelc_zero(dst, nbytes): a row's arguments are pointer slots, so the byte
# count comes as one
_IR += """
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
define void @fuelc_zero(ptr %dst, ptr %nbytes) {
  %n = ptrtoint ptr %nbytes to i64
  call void @llvm.memset.p0.i64(ptr %dst, i8 0, i64 %n, i1 false)
  ret void
}
"""
#: Where an ndarray object keeps its data pointer: the first field after the
#: object header (numpy's ``PyArrayObject_fields.data``, which its C API
#: macro ``PyArray_DATA`` reads inline in every compiled extension).
DATA_OFFSET = object.__basicsize__
# fuelc_point(table, n): the direct path's descriptors pointed at the arrays
# of a call (``point_function``)
_IR += f"""
define void @fuelc_point(ptr %t, ptr %np) {{
entry:
  %n = ptrtoint ptr %np to i64
  %any = icmp ugt i64 %n, 0
  br i1 %any, label %body, label %out
body:
  %i = phi i64 [ 0, %entry ], [ %next, %body ]
  %at = mul i64 %i, 2
  %pd = getelementptr i64, ptr %t, i64 %at
  %d = load ptr, ptr %pd, align 8
  %ps = getelementptr i64, ptr %pd, i64 1
  %s = load ptr, ptr %ps, align 8
  %obj = load ptr, ptr %s, align 8
  %pdata = getelementptr i8, ptr %obj, i64 {DATA_OFFSET}
  %v = load i64, ptr %pdata, align 8
  store i64 %v, ptr %d, align 8
  %d1 = getelementptr i64, ptr %d, i64 1
  store i64 %v, ptr %d1, align 8
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, %n
  br i1 %more, label %body, label %out
out:
  ret void
}}
"""

_runner = None
_copiers: dict = {}
_point: list = []
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
                    copy_type = ctypes.CFUNCTYPE(None, *(ctypes.c_void_p,) * 3)
                    for run, name in _COPIES.items():
                        _copiers[run] = copy_type(engine.get_function_address(name))
                    _copiers["zero"] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(
                        engine.get_function_address("fuelc_zero"))
                    _point.append(ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(
                        engine.get_function_address("fuelc_point")))
    return _runner or None


def zero_function():
    """``fn(dst, nbytes)``, zeroing ``nbytes`` bytes at ``dst`` (a ctypes
    function of pointers, so a row of a ``Rows`` table); None without the
    JIT."""
    return _copiers["zero"] if runner() is not None else None


def point_function():
    """``fn(table, n)``: for each of the ``n`` int64 pairs ``(descriptor
    address, slot address)`` of ``table``, where the slot holds the ``id``
    of a numpy array (the object's address), store the array's data
    pointer (``DATA_OFFSET``) as the descriptor's ``allocated`` and
    ``aligned`` pointers (its first two fields). The direct path points the
    descriptors of a call's inputs and outputs at their arrays so, in one
    native call (a row of a ``Rows`` table), where reading each array's
    address in Python (a ctypes view of its buffer, 0.2-0.3 us) and two
    ctypes attribute stores per descriptor had cost some 3 us of a call of
    three inputs and an output. None without the JIT, or where an array's
    data pointer is not at ``DATA_OFFSET`` (checked on a probe array)."""
    if runner() is None:
        return None
    import numpy as np
    probe = np.arange(3.0)
    if ctypes.c_void_p.from_address(id(probe) + DATA_OFFSET).value != probe.ctypes.data:
        return None
    return _point[0]


def copy_function(shape, strides, itemsize: int):
    """A strided copy as a native call: ``(fn, spec)`` where ``fn(dst, src,
    spec address)`` (a ctypes function of pointers, so a row of a ``Rows``
    table) copies the array of ``shape`` and byte ``strides`` at ``src``
    into a row-major one at ``dst``; ``spec`` (a ctypes array) must be kept.
    None without the JIT, for an empty shape, or when more than
    ``COPY_DIMS`` dimensions remain after dropping size-1 ones and merging
    those that step through memory as one."""
    if runner() is None or 0 in shape:
        return None
    dims = []   # (n, src byte stride, dst byte stride), outermost first
    dst_stride = itemsize
    for n, s in reversed([(n, s) for n, s in zip(shape, strides) if n != 1]):
        if dims and dims[0][1] * dims[0][0] == s and dims[0][2] * dims[0][0] == dst_stride:
            dims[0] = (dims[0][0] * n, dims[0][1], dims[0][2])
        else:
            dims.insert(0, (n, s, dst_stride))
        dst_stride *= n
    run = itemsize
    if dims and dims[-1][1] == itemsize:   # a contiguous innermost run
        run = dims.pop()[0] * itemsize
    if len(dims) > COPY_DIMS:
        return None
    dims = [(1, 0, 0)] * (COPY_DIMS - len(dims)) + dims
    spec = (ctypes.c_int64 * (3 * COPY_DIMS + 1))(
        *[n for n, _s, _d in dims], *[s for _n, s, _d in dims], *[d for _n, _s, d in dims], run)
    return _copiers[run if run in _copiers else None], spec


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


__all__ = ["MAX_ARGS", "COPY_DIMS", "Rows", "runner", "function_address", "copy_function",
           "zero_function", "point_function", "DATA_OFFSET"]
