"""Test helper: run a lowered (linalg-on-tensors) module with MLIR's own
ExecutionEngine, following docs/toolchain.md, and compare against numpy.

Independent of compiler/codegen/cpu.py on purpose: it checks the lowering,
not the CPU backend."""
from __future__ import annotations

import ctypes

import numpy as np

from compiler.codegen.linalg import emit_single_op_module, lower_to_linalg
from compiler.graph.ops import OP_TABLE
from compiler.graph.opdef import TensorType
from compiler.mlir import execution_engine, ir, passmanager, runtime
from runtime.dtype import DType

PIPELINE = (
    "builtin.module(one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map}, "
    "buffer-results-to-out-params{modify-public-functions}, buffer-deallocation-pipeline, "
    "convert-linalg-to-loops, convert-math-to-funcs, lower-affine, convert-scf-to-cf, "
    # bf16 math in f32 and f32<->bf16 conversions as integer ops: otherwise
    # LLVM calls __truncsfbf2, which GCC 12's libgcc (Debian 12) lacks
    "func.func(arith-emulate-unsupported-floats{source-types=bf16 target-type=f32}), "
    "arith-expand{include-bf16=true}, "
    "expand-strided-metadata, lower-affine, "
    "finalize-memref-to-llvm, convert-math-to-llvm, convert-math-to-libm, convert-arith-to-llvm, "
    "convert-func-to-llvm, convert-cf-to-llvm, convert-ub-to-llvm, reconcile-unrealized-casts)"
)

#: numpy storage type the memref descriptor is built from (ui8 -> uint8 bytes).
def storage(dt: DType) -> np.dtype:
    return dt.storage_numpy


def run_module(module, func_name: str, inputs: list, out_shape, out_dtype: DType):
    """Bufferize + lower ``module`` (already linalg) and call ``func_name``."""
    with module.context:
        pm = passmanager.PassManager.parse(PIPELINE)
        pm.run(module.operation)
    ee = execution_engine().ExecutionEngine(module, opt_level=0)
    ee.raw_register_runtime("memrefCopy", ctypes.cast(_memref_copy, ctypes.c_void_p))
    rt = runtime()
    out = np.zeros(out_shape, dtype=storage(out_dtype))
    args = [np.ascontiguousarray(a) for a in inputs] + [out]
    ptrs = [ctypes.pointer(ctypes.pointer(rt.get_ranked_memref_descriptor(a))) for a in args]
    ee.invoke(func_name, *ptrs)
    return out


def run_op(name: str, inputs: list, params: dict | None = None, dtypes=None,
           dynamic: bool = False):
    """Compile one fuel op through fuel-to-linalg and run it on numpy inputs.
    ``dtypes``: the fuel dtype of each input (default: from the numpy dtype)."""
    params = params or {}
    dtypes = dtypes or [DType.from_numpy(a.dtype) for a in inputs]
    types = [TensorType(tuple(a.shape), dt) for a, dt in zip(inputs, dtypes)]
    opdef = OP_TABLE[name]
    full = {p.name: p.default for p in opdef.params if not p.required}
    full.update(params)
    out_t = opdef.infer(types, full)
    m = emit_single_op_module(name, params, types, dynamic=dynamic, func_name="k")
    lower_to_linalg(m)
    m.operation.verify()
    return run_module(m, "k", inputs, out_t.shape, out_t.dtype)


def reference(name: str, inputs: list, params: dict | None = None):
    opdef = OP_TABLE[name]
    full = {p.name: p.default for p in opdef.params if not p.required}
    full.update(params or {})
    return np.asarray(opdef.reference([np.asarray(a) for a in inputs], full))


# -- memrefCopy for the ExecutionEngine (strided subview copies) -----------------
class _Unranked(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int64), ("desc", ctypes.c_void_p)]


def _strided_view(u: _Unranked, elem_size: int) -> np.ndarray:
    rank = u.rank
    words = (ctypes.c_int64 * (3 + 2 * rank)).from_address(u.desc)
    aligned, offset = words[1], words[2]
    sizes, strides = list(words[3:3 + rank]), list(words[3 + rank:3 + 2 * rank])
    if any(s == 0 for s in sizes):
        return np.zeros(sizes, dtype=np.uint8)
    span = (sum((n - 1) * st for n, st in zip(sizes, strides)) + 1) * elem_size
    buf = (ctypes.c_uint8 * span).from_address(aligned + offset * elem_size)
    base = np.frombuffer(buf, dtype=np.dtype((np.void, elem_size)))
    return np.lib.stride_tricks.as_strided(base, sizes, [st * elem_size for st in strides])


@ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(_Unranked), ctypes.POINTER(_Unranked))
def _memref_copy(elem_size, src, dst):
    s, d = _strided_view(src.contents, elem_size), _strided_view(dst.contents, elem_size)
    if s.size:
        d[...] = s
