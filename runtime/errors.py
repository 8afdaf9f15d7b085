"""The runtime's exception hierarchy. Every error users can see derives from
``FuelError``; messages name the key or op, the operands, and what exists.

    FuelError
    ├── UnknownDTypeError          a dtype name / numpy dtype with no fuel DType
    ├── UnknownOpKindError         (runtime.opkind) a name that is not an OpKind
    ├── LayoutError                an invalid Layout or Layout transform
    ├── StorageError               storage/layout size mismatch, bad bundle slot
    ├── OpParamsError              an OpParams variant built with invalid fields,
    │                              or the wrong variant for an OpKind
    ├── BindingTableError          a malformed registration / duplicate kernel
    ├── NoBackendForOp             lookup miss; carries the coverage diagnostic
    ├── KernelError                a kernel failed (or raised) inside a call
    ├── IndexOutOfRangeError       an index operand value outside its range
    ├── SymbolicError              a symbolic extent operation that cannot be decided
    ├── PlanError                  a malformed Plan, or bad inputs to Executor.run
    │   └── ShapeSignatureError    a call's shapes contradict a symbolic signature
    └── ArtifactError              (runtime.manifest) a .fuel file that cannot be used
        ├── ArtifactFormatError    not a fuelc module, or malformed
        │   └── ManifestFieldError a manifest field, named by its path (.field)
        ├── ArtifactVersionError   another format version
        ├── ArtifactIntegrityError a member that does not match its hash
        │   └── ArtifactSignatureError  unsigned, or not signed under the key
        ├── ArtifactCpuError       this CPU lacks features the code needs
        └── ArtifactCodeError      an object that does not link, or a missing kernel
"""
from __future__ import annotations


class FuelError(Exception):
    """Base of every error raised by fuelc (runtime and compiler)."""


class UnknownDTypeError(FuelError, ValueError):
    """A dtype name or numpy dtype that has no fuel DType."""


class UnknownOpKindError(FuelError, ValueError):
    """A name that is not an OpKind."""


class LayoutError(FuelError, ValueError):
    """An invalid Layout, or a Layout transform whose preconditions fail."""


class StorageError(FuelError, ValueError):
    """Storage bytes that do not cover a layout, a dtype mismatch, or a bad
    bundle slot."""


class OpParamsError(FuelError, ValueError):
    """An OpParams variant with invalid fields, or the wrong variant for the
    OpKind whose kernel receives it."""


class BindingTableError(FuelError, ValueError):
    """A malformed registration or a table that fails ``finalize()``."""


class NoBackendForOp(FuelError, LookupError):
    """No usable kernel is bound for ``(key, dtypes, backend)``.

    Attributes:
        key: the BindingKey looked up.
        dtypes: the operand dtypes (inputs then outputs).
        backend: the BackendId asked for.
        available_backends: distinct backends with any binding.
        supported_combinations: every static ``(backend, op, dtypes)`` bound.
        context: optional caller context (e.g. the plan step / node name).
    """

    def __init__(self, key, dtypes, backend, available_backends=(),
                 supported_combinations=(), context: str = ""):
        self.key = key
        self.dtypes = tuple(dtypes)
        self.backend = backend
        self.available_backends = tuple(available_backends)
        self.supported_combinations = tuple(supported_combinations)
        self.context = context
        super().__init__(self._message())

    def _message(self) -> str:
        dts = "[" + ", ".join(str(d) for d in self.dtypes) + "]"
        where = f"{self.context}: " if self.context else ""
        head = (f"{where}no kernel bound for {self.key} with dtypes {dts} "
                f"on backend {self.backend}")
        backends = ", ".join(str(b) for b in self.available_backends) or "none"
        same_op = [c for c in self.supported_combinations
                   if getattr(self.key, "op", None) is not None and c[1] == self.key.op]
        if same_op:
            combos = "; ".join(
                f"{b}:[{', '.join(str(d) for d in dt)}]" for b, _, dt in sorted(
                    same_op, key=lambda c: (str(c[0]), [str(d) for d in c[2]])))
            what = f"bound for this op: {combos}"
        else:
            what = "this op has no binding on any backend"
        return (f"{head}. Available backends: {backends}; {what} "
                f"({len(self.supported_combinations)} static bindings in the table).")


class KernelError(FuelError, RuntimeError):
    """A kernel failed: wrong operand count/dtype/layout, or an exception
    raised inside the wrapped callable (chained as ``__cause__``)."""


class PlanError(FuelError, ValueError):
    """A malformed Plan (unknown value ids, bad step kinds) or inputs to
    ``Executor.run`` that do not match the plan's signature."""


class IndexOutOfRangeError(FuelError, IndexError):
    """An index operand (IndexSelect/Gather/IndexAdd/ScatterAdd indices,
    paged-attention block ids) holds a value outside
    its valid range. Raised before the kernel runs. Attributes: ``value``,
    ``position`` (a tuple into the index tensor) and ``size`` (valid values
    are ``[0, size)``)."""

    def __init__(self, message: str, value: int, position: tuple, size: int):
        super().__init__(message)
        self.value, self.position, self.size = value, position, size


class SymbolicError(FuelError, ValueError):
    """An operation on symbolic extents (``runtime.symbols.Sym``) that cannot
    be decided or expressed: a comparison the symbols' bounds do not settle,
    an inexact division, an int asked of a symbol."""


class ShapeSignatureError(PlanError):
    """A call whose input shapes contradict a symbolic signature
    (``docs/dynamic-shapes.md``). Attributes: ``input``, ``axis``, ``symbol``
    (or None), ``seen`` and ``expected`` (an int, the other size seen, or the
    ``(lo, hi)`` bounds)."""

    def __init__(self, message, input=None, axis=None, symbol=None, seen=None, expected=None):
        super().__init__(message)
        self.input, self.axis, self.symbol = input, axis, symbol
        self.seen, self.expected = seen, expected
