"""Fused-op graph params <-> runtime ``OpParams``: what the kernel of a static
fused op receives, as the planner and every target's kernels must agree.

The primitives' mapping is ``compiler.graph.kernel_params``; this is the
same for fused ops, one ``FusedParams`` per entry that has kernels:

* ``to_params(graph params, input TensorTypes) -> OpParams`` — what the
  planner puts on the ``KernelStep``;
* ``from_params(OpParams, input TensorTypes) -> graph params`` — its reverse,
  with which a generated kernel rebuilds the op instance it compiles;
* ``keys(t)`` — the binding dtype tuples (inputs then output) for data dtype
  ``t``; ``dtypes`` — the data dtypes; ``strided`` — any input strides.

Mappings are registered by the kernel families that implement the ops
(``compiler.codegen.fused.fused_kernel``); the planner only reads them
(``fused_op_params``), so planning never imports code generation.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from runtime import params as P
from runtime.dtype import DType
from runtime.errors import SymbolicError
from runtime.params import OpParams

from ..graph.kernel_params import KernelParamsError
from ..graph.opdef import TensorType
from .errors import KernelPredicateError

ToParams = Callable[[dict, Sequence[TensorType]], OpParams]
FromParams = Callable[[OpParams, Sequence[TensorType]], dict]
Keys = Callable[[DType], list]


@dataclasses.dataclass(frozen=True)
class FusedParams:
    """How one fused entry's kernel is planned, keyed and rebuilt."""

    name: str
    to_params: ToParams
    from_params: FromParams
    keys: Keys
    dtypes: tuple[DType, ...]
    strided: bool = True
    #: ``serves(graph params, input TensorTypes) -> bool``: the instances the
    #: kernel is meant for (None: all). The passes decompose the others via the
    #: recipe even where the binding table has the dtype key: a fused kernel
    #: may be slower than its recipe for some params (Conv2D with groups = 1
    #: on CPU: im2col + the tiled MatMul, docs/architecture.md).
    serves: Callable[[dict, Sequence[TensorType]], bool] | None = None

    @property
    def entry(self):
        from . import default_registry
        return default_registry()[self.name]


_MAPPINGS: dict[str, FusedParams] = {}


def register_fused_params(mapping: FusedParams) -> None:
    """Register the params mapping of one fused entry (once)."""
    if mapping.name in _MAPPINGS:
        raise ValueError(f"fused kernel params mapping for {mapping.name!r} registered twice")
    _MAPPINGS[mapping.name] = mapping


def fused_params(name: str) -> FusedParams | None:
    """The registered mapping of fused entry ``name``, or None."""
    return _MAPPINGS.get(name)


def kernel_serves(name: str, params: dict, in_types: Sequence[TensorType]) -> bool:
    """Whether the kernel of fused entry ``name`` is meant for an instance with
    these graph params and input types (``FusedParams.serves``; True when the
    entry has no mapping or no such predicate: the binding table decides).
    ``SymbolicError`` (undecidable on symbolic extents) reaches the caller,
    which decides; any other failure of the predicate is a
    ``KernelPredicateError`` naming the op, its params and inputs."""
    spec = _MAPPINGS.get(name)
    if spec is None or spec.serves is None:
        return True
    try:
        return bool(spec.serves(params, in_types))
    except SymbolicError:
        raise
    except Exception as e:
        raise KernelPredicateError(
            f"{name}: the kernel's serves predicate failed on params {params} and inputs "
            f"[{_types(in_types)}]: {type(e).__name__}: {e} (a bug in its kernel family; "
            "report it with this message)") from e


def _types(types) -> str:
    return ", ".join(f"{t.dtype}{list(t.shape)}" for t in types)


def fused_op_params(entry, params: dict, in_types: Sequence[TensorType]) -> OpParams:
    """The OpParams the kernel of fused ``entry`` (FusedOpEntry or name)
    receives for a node with these graph params and input types. Raises
    ``KernelParamsError`` when the op has no mapping or the inputs don't fit."""
    from .entry import normalize_params
    name = entry if isinstance(entry, str) else entry.name
    spec = _MAPPINGS.get(name)
    if spec is None:
        raise KernelParamsError(
            f"fused op {name} has no kernel params mapping (no target registered a kernel "
            "for it); decompose it (fuel-decompose{all=true})")
    try:
        return spec.to_params(normalize_params(spec.entry, params), list(in_types))
    except (P.OpParamsError, ValueError, IndexError, KeyError) as e:
        if isinstance(e, KernelParamsError):
            raise
        raise KernelParamsError(f"{name}: cannot map params {params} for inputs "
                                f"{_types(in_types)} to OpParams: {e}") from None


__all__ = ["FusedParams", "register_fused_params", "fused_params", "fused_op_params"]
