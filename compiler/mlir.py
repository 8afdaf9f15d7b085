"""The one place the compiler imports the MLIR Python bindings.

Everything else writes ``from compiler.mlir import ir, passmanager, linalg, ...``.
The bindings come from the pinned ``torch_mlir`` wheel; where it is missing the
upstream ``mlir`` package (same module layout) is used instead.

A context with the ``fuel`` dialect loaded comes from
``compiler.dialect.make_context()``.
"""
from __future__ import annotations

import importlib
import threading
import types

try:  # the pinned wheel
    import torch_mlir as _root
    from torch_mlir import ir, passmanager, rewrite
    BINDINGS = "torch_mlir"
except ImportError:  # pragma: no cover - only where a user has upstream mlir
    import mlir as _root  # type: ignore[no-redef]
    from mlir import ir, passmanager, rewrite  # type: ignore[no-redef]
    BINDINGS = "mlir"

_DIALECTS = (
    "func", "arith", "math", "linalg", "tensor", "irdl", "llvm", "bufferization",
    "scf", "memref", "cf", "affine", "vector", "gpu", "transform", "index", "ub",
)


_LOCK = threading.RLock()


def _dialect(name: str):
    return importlib.import_module(f"{_root.__name__}.dialects.{name}")


def _linalg():
    """The linalg bindings without the ``dialects.linalg`` package, whose
    import builds the opdsl named ops from YAML (some 40% of importing the
    bindings fuelc needs): the op classes, and the named ops fuelc builds
    made as the package makes them (the op, its index attributes as i64
    tensors, opdsl's function attributes, then its body by MLIR's region
    builder). Any other name imports
    the package (``tests/compiler/test_mlir_imports.py`` compares the two)."""
    import types
    import numpy as np
    ops = importlib.import_module(f"{_root.__name__}.dialects._linalg_ops_gen")
    enums = importlib.import_module(f"{_root.__name__}.dialects._linalg_enum_gen")
    fill_builtin_region = importlib.import_module(
        f"{_root.__name__}._mlir_libs._mlirDialectsLinalg").fill_builtin_region
    module = types.ModuleType(f"{__name__}.linalg", _linalg.__doc__)
    module.__dict__.update({k: v for m in (ops, enums) for k, v in vars(m).items()
                            if isinstance(v, type) and v.__module__ == m.__name__})

    def named(cls, returns_op=False, **defaults):
        def build(*ins, outs, **attrs):
            attrs = {**{k: ir.Attribute.parse(v) for k, v in defaults.items()}, **attrs}
            init = outs[0]
            results = [init.type] if isinstance(init.type, ir.RankedTensorType) else []
            attrs = {k: ir.DenseElementsAttr.get(np.array(v, dtype=np.int64))
                     if k in ("strides", "dilations") else v for k, v in attrs.items()}
            if returns_op:  # transpose, broadcast: one input, the op returned
                op = cls(results, ins[0], init, **attrs)
            else:
                op = cls(results, list(ins), [init], **attrs)
            fill_builtin_region(op.operation)
            return op.result if results and not returns_op else op
        return build

    module.fill = named(ops.FillOp)
    module.copy = named(ops.CopyOp, cast="#linalg.type_fn<cast_signed>")  # opdsl sets it
    module.matmul, module.batch_matmul = named(ops.MatmulOp), named(ops.BatchMatmulOp)
    module.conv_2d_nchw_fchw = named(ops.Conv2DNchwFchwOp)
    module.transpose = named(ops.TransposeOp, returns_op=True)
    module.broadcast = named(ops.BroadcastOp, returns_op=True)
    module.fill_builtin_region = fill_builtin_region
    module.__getattr__ = lambda name: getattr(_dialect("linalg"), name)
    # The classes are registered: let the bindings find this module.
    _found_as("linalg", module, __name__)
    return module


def _found_as(dialect: str, module, prefix: str) -> None:
    """Make ``module`` (named ``prefix.dialect``) what the bindings find, once,
    when they look for ``dialect``'s Python module: they import a dialect's
    package the first time they meet one of its ops or attributes, to find
    its classes."""
    import sys
    sys.modules[module.__name__] = module
    registry = importlib.import_module(f"{_root.__name__}._mlir_libs._mlir").globals
    prefixes = registry.dialect_search_modules
    registry.dialect_search_modules = [prefix]
    try:
        registry._check_dialect_module_loaded(dialect)
    finally:
        registry.dialect_search_modules = prefixes


#: Dialects whose ops and attributes fuelc only reads (names, operands, an
#: attribute moved from one op to another): the bindings give them the generic
#: ``OpView`` and ``Attribute`` instead of importing the dialect's package,
#: whose Python classes cost a process's compile some 45 ms of CPU in all
#: (docs/compile-at-scale.md). ``from compiler.mlir import gpu`` (or
#: ``llvm``, ...) still imports the package, whose classes the bindings then use.
GENERIC_DIALECTS = (
    "gpu",        # fuel's structural ops end in gpu.yield, read by every pass
    "llvm",       # the direct conv's loop annotations (#llvm.loop_annotation)
    "transform",  # the transform scripts, applied by the native interpreter
    "affine",     # affine.apply in the payload the conv rewrites walk
)


def _ops_stay_generic() -> None:
    import types
    name = f"{__name__}._generic"
    for dialect in GENERIC_DIALECTS:
        _found_as(dialect, types.ModuleType(f"{name}.{dialect}", "fuelc: generic ops"), name)


_ops_stay_generic()


def _load(name: str):
    with _LOCK:  # one thread swaps the bindings' search path at a time
        module = _loaded.get(name) or (_linalg() if name == "linalg" else _dialect(name))
        _loaded[name] = module
    return module


_loaded: dict = {}
#: The dialects ``from compiler.mlir import ...`` imports at their first use
#: (``_OnFirstUse``): those the cpu lowerings build ops of and a first kernel
#: may not need. Code reads their ops generically (``op.name``, operands,
#: regions), never as typed views, which need the dialect imported.
_ON_FIRST_USE = frozenset({"vector", "scf", "memref"})


class _OnFirstUse(types.ModuleType):
    """What ``from compiler.mlir import vector`` gives: the dialect's bindings
    module, imported the first time one of its names is read (each name read
    is then kept here). The lowering modules name every dialect they build
    ops of at their top, and the cpu codegen imports them before the first
    kernel task: the dialects that task's text does not use (vector, scf,
    memref, ...) are imported after it, by the first kernel that does, out of
    the serial front of ``compile()`` (docs/compile-at-scale.md)."""

    def __getattr__(self, attr: str):
        value = getattr(_load(self.__name__.rpartition(".")[2]), attr)
        setattr(self, attr, value)
        return value


def load(*names: str) -> None:
    """Import the bindings of the dialects ``names`` now (a compile worker
    does, before its first task)."""
    for name in names:
        _load(name)


def __getattr__(name: str):
    """A dialect's bindings module, imported on first use (``compiler.mlir.linalg``,
    ``from compiler.mlir import vector``): a process imports only the dialects
    it builds or reads ops of."""
    if name in _DIALECTS:
        module = globals().get(name)
        if module is None:  # all but _ON_FIRST_USE at once: linalg, since the bindings
            # must find fuelc's module before they meet a linalg attribute; gpu and
            # the others, whose ops code reads as typed views (a gpu.launch_func's
            # grid sizes: a dialect not imported gives a generic OpView)
            module = globals()[name] = (
                _OnFirstUse(f"{__name__}.{name}") if name in _ON_FIRST_USE else _load(name))
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


MLIRError = ir.MLIRError


def translate_module_to_llvmir(operation) -> str:
    """An LLVM-dialect module (its operation) as LLVM IR text, through the
    bindings' native LLVM-dialect module alone: the ``dialects.llvm``
    package also builds the Python classes of every LLVM op
    (``_llvm_ops_gen``, ``_llvm_enum_gen``: some 25 ms of CPU a process,
    docs/compile-at-scale.md), which translating never uses."""
    native = importlib.import_module(f"{_root.__name__}._mlir_libs._mlirDialectsLLVM")
    return native.translate_module_to_llvmir(operation)


def load_irdl_dialects(module) -> None:
    """Load the dialects an IRDL module defines (``irdl.load_dialects``)
    through the bindings' native IRDL module alone: the ``dialects.irdl``
    package also builds the Python classes of every IRDL op
    (``_irdl_ops_gen``: some 6 ms of ``compile()``'s serial front,
    docs/compile-at-scale.md), which loading never uses."""
    native = importlib.import_module(f"{_root.__name__}._mlir_libs._mlirDialectsIRDL")
    native.load_dialects(module)


_CAPI: list = []


def _capi():
    """``(library, pointer)``: the bindings' C API library through ctypes
    (whose calls release the GIL) and a function giving an object's C
    handle (``_CAPIPtr``); None where the library is not found."""
    if not _CAPI:
        import ctypes
        import glob
        import os
        here = os.path.dirname(importlib.import_module(f"{_root.__name__}._mlir_libs").__file__)
        found = sorted(glob.glob(os.path.join(here, "lib*CAPI*.so*")))
        capi = None
        if found:
            lib, ptr = ctypes.CDLL(found[0]), ctypes.c_void_p
            lib.mlirPassManagerRunOnOp.argtypes = [ptr, ptr]
            lib.mlirTransformApplyNamedSequence.argtypes = [ptr, ptr, ptr, ptr]
            lib.mlirTransformOptionsCreate.argtypes, lib.mlirTransformOptionsCreate.restype = [], ptr
            lib.mlirTransformOptionsDestroy.argtypes = [ptr]
            for f in (lib.mlirPassManagerRunOnOp, lib.mlirTransformApplyNamedSequence):
                f.restype = ctypes.c_int8  # MlirLogicalResult: 1 on success
            pointer = ctypes.pythonapi.PyCapsule_GetPointer
            pointer.argtypes, pointer.restype = [ctypes.py_object, ctypes.c_char_p], ptr
            name = ctypes.pythonapi.PyCapsule_GetName
            name.argtypes, name.restype = [ctypes.py_object], ctypes.c_char_p
            capi = (lib, lambda obj: pointer(obj._CAPIPtr, name(obj._CAPIPtr)))
        _CAPI.append(capi)
    return _CAPI[0]


def _quietly(context, call) -> bool:
    """``call()`` (a C API call: true on success) with the context's error
    diagnostics swallowed (the caller reruns a failure through the bindings
    for them)."""
    quiet = context.attach_diagnostic_handler(lambda d: d.severity == ir.DiagnosticSeverity.ERROR)
    try:
        return bool(call() & 1)
    finally:
        quiet.detach()


def run_passes(pm, operation) -> bool:
    """Run the pass manager ``pm`` on ``operation`` with the GIL released
    (the bindings' ``PassManager.run`` holds it for the whole pipeline, so a
    compile worker's feeder thread in this process could not hand the
    worker its next kernel meanwhile: docs/compile-at-scale.md). False when
    the pipeline fails; its error diagnostics are not printed (rerun it
    through ``pm.run`` for them). Through ``pm.run`` where the bindings'
    C API library is not found."""
    capi = _capi()
    if capi is None:
        pm.run(operation)
        return True
    lib, handle = capi
    return _quietly(operation.context,
                    lambda: lib.mlirPassManagerRunOnOp(handle(pm), handle(operation)))


def apply_named_sequence(payload, sequence, script, before: "str | None" = None) -> None:
    """Apply the transform ``sequence`` (a ``transform.named_sequence`` op of
    the module ``script``) to the module ``payload`` through the C API with
    the GIL released (as ``run_passes``), else through the bindings' native
    interpreter alone (the ``dialects.transform`` package also builds the
    Python classes of every transform op, which applying never uses). A
    failure raises the native interpreter's ``ValueError`` with MLIR's
    diagnostics, from a rerun on ``before`` (the payload's text before the
    call; default: the payload as the failure left it)."""
    native = importlib.import_module(f"{_root.__name__}._mlir_libs._mlirTransformInterpreter")
    capi = _capi()
    if capi is not None:
        lib, handle = capi
        options = lib.mlirTransformOptionsCreate()
        try:
            if _quietly(payload.operation.context, lambda: lib.mlirTransformApplyNamedSequence(
                    handle(payload.operation), handle(sequence.operation),
                    handle(script.operation), options)):
                return
        finally:
            lib.mlirTransformOptionsDestroy(options)
        payload = ir.Module.parse(str(payload) if before is None else before,
                                  payload.operation.context)
    native.apply_named_sequence(payload.operation, sequence.operation, script.operation)
    if capi is not None:
        raise ValueError("the transform sequence failed (the bindings' rerun did not)")


def execution_engine():
    """The bindings' ``execution_engine`` module (imported lazily: it loads
    the JIT runtime)."""
    return importlib.import_module(f"{_root.__name__}.execution_engine")


def runtime():
    """The bindings' ``runtime`` helpers (memref descriptors from numpy)."""
    return importlib.import_module(f"{_root.__name__}.runtime")


def walk_ops(root, pred=None) -> list:
    """Every op nested under ``root`` (an op or a module; pre-order), filtered
    by ``pred``; collected first, so callers may rewrite while iterating."""
    out = []

    def cb(o):
        if pred is None or pred(o):
            out.append(o)
        return ir.WalkResult.ADVANCE

    getattr(root, "operation", root).walk(cb, ir.WalkOrder.PRE_ORDER)
    return out


__all__ = ["ir", "passmanager", "rewrite", "MLIRError", "walk_ops",
           "execution_engine", "runtime", "BINDINGS", *_DIALECTS]
