"""Symbolic extents in the graph (``docs/dynamic-shapes.md``).

Shape rules compare extents with ``unify``: equal extents are one extent;
two different extents where one is symbolic are assumed equal, and the
assumption is recorded into the sink of the innermost ``recording`` context
(``Graph.add_node`` opens one per node, labelled with the node) so that a
call checks it once (``runtime.symbols.bind_symbols``). With no context open
``unify`` records nothing and answers "different".
"""
from __future__ import annotations

import contextlib
import itertools
import contextvars
from typing import Mapping, Optional

from runtime.symbols import (Dim, ShapeSignatureError, Sym, SymbolicError, affine_parts,
                             bind_symbols, evaluate, floor_div, is_symbolic, shape_text)

from ..errors import GraphBuildError

__all__ = ["Sym", "SymbolicError", "ShapeSignatureError", "unify", "recording", "parse_dim",
           "bind_params", "bind_symbols", "is_symbolic", "shape_text", "evaluate",
           "floor_div", "window_count", "ceil_count", "fits", "symbolic_image"]

_SINK: contextvars.ContextVar = contextvars.ContextVar("fuelc_symbolic_sink", default=None)


@contextlib.contextmanager
def recording(sink: list, where: str):
    """Record the equalities ``unify`` assumes inside the block into ``sink``
    as ``(lhs, rhs, where)``."""
    token = _SINK.set((sink, where))
    try:
        yield sink
    finally:
        _SINK.reset(token)


def unify(a: Dim, b: Dim) -> Optional[Dim]:
    """One extent for ``a`` and ``b``: ``a`` when equal; when they differ and
    either is symbolic (and a context is recording), the int if there is one
    else ``a``, recording ``a == b``; otherwise None (they differ)."""
    if a == b:
        return a
    if not isinstance(a, Sym) and not isinstance(b, Sym):
        return None
    ctx = _SINK.get()
    if ctx is None:
        return None
    sink, where = ctx
    sink.append((a, b, where))
    return b if isinstance(a, Sym) and not isinstance(b, Sym) else a


def parse_dim(d, symbols: dict, what: str) -> Dim:
    """One declared extent of ``Graph.input``: an int, a name, ``(name, lo,
    hi)``, an atom ``Sym`` or ``a*Sym + b`` (a >= 1) derived from one. Records the symbol's bounds in ``symbols``
    (name -> (lo, hi)); a name seen before with other bounds is an error."""
    if isinstance(d, bool):
        raise GraphBuildError(f"{what}: extent {d!r} is a bool; give an int or a symbol name")
    if isinstance(d, int) or (hasattr(d, "__index__") and not isinstance(d, Sym)):
        return int(d)
    try:
        if isinstance(d, str):
            sym = Sym(d, *symbols.get(d, (1, None)))
        elif isinstance(d, tuple) and len(d) == 3 and isinstance(d[0], str):
            sym = Sym(*d)
        elif isinstance(d, Sym) and affine_parts(d) is not None:
            sym = d  # an atom, or a*s + b derived from one (torch.export's derived Dims)
        else:
            raise GraphBuildError(f"{what}: extent {d!r} is not an int, a symbol name, "
                                  f"(name, lo, hi), a Sym atom or a*Sym + b")
    except SymbolicError as e:
        raise GraphBuildError(f"{what}: {e}") from None
    name = affine_parts(sym)[0]
    bounds = sym.atoms[name]
    if symbols.setdefault(name, bounds) != bounds:
        lo, hi = symbols[name]
        raise GraphBuildError(f"{what}: symbol {name!r} declared with bounds "
                              f"{bounds[0]}..{bounds[1]} after {lo}..{hi}; give its bounds "
                              f"once (or the same at every use)")
    return sym


def bind_params(value, values: Mapping[str, int]):
    """``value`` (a param: int, Sym, tuple, list, dict, other) with every
    ``Sym`` replaced by its value under ``values``."""
    if isinstance(value, Sym):
        return value.evaluate(values)
    if isinstance(value, tuple):
        return tuple(bind_params(v, values) for v in value)
    if isinstance(value, list):
        return [bind_params(v, values) for v in value]
    if isinstance(value, dict):
        return {k: bind_params(v, values) for k, v in value.items()}
    return value


def window_count(padded: Dim, window: int, stride: int, what: str) -> Dim:
    """``(padded - window) // stride + 1``: how many windows of extent
    ``window`` fit in ``padded`` at ``stride`` (convolution, pooling). On a
    symbolic extent the quotient is a quotient factor (``runtime.symbols.floor_div``:
    ``(h - 1) // 2 + 1`` is ``(h + 1) // 2``), evaluated when a call binds ``h``."""
    return _floor(padded - window, stride, what) + 1


def fits(window: int, padded: Dim, what: str) -> bool:
    """Whether a window of extent ``window`` fits in the (padded) extent
    ``padded`` at every size the bounds allow. Where the bounds of its one
    symbol leave it undecided, a ``GraphBuildError`` naming the window, the
    smallest size that fits it and the bound to give at import."""
    try:
        return window <= padded
    except SymbolicError:
        if len(padded.atoms) != 1:
            raise
        (name, (lo, hi)), = padded.atoms.items()
        least = next(v for v in itertools.count(lo) if padded.evaluate({name: v}) >= window)
        raise GraphBuildError(
            f"{what}: its window of extent {window} does not fit the extent {padded} for "
            f"{name} < {least} ({name} in {lo}..{'' if hi is None else hi}): bound it at "
            f"import, input_shapes={{{name!r}: ({least}, {hi})}}") from None


def ceil_count(extent: Dim, stride: int, what: str) -> Dim:
    """``ceil(extent / stride)`` (``SAME`` padding, ``ceil_mode`` pooling):
    ``(extent + stride - 1) // stride``."""
    return _floor(extent + stride - 1, stride, what)


def _floor(num: Dim, stride: int, what: str) -> Dim:
    try:
        return floor_div(num, stride)
    except SymbolicError as e:
        raise GraphBuildError(f"{what}: {e}") from None


#: The fused ops over an image (axes 2, 3 of x): a symbolic image size makes
#: their plan per image size; the kernels of Conv2D and MaxPool2D take it at
#: run time where ``Graph.bind`` marks them (``image_at_run_time``).
IMAGE_OPS = ("Conv2D", "ConvTranspose2D", "MaxPool2D")


def symbolic_image(graph):
    """``(node, axis)`` of the first ``IMAGE_OPS`` node whose input image has
    a symbolic spatial extent, or None: each image size compiles its kernels."""
    for n in graph.nodes:
        if n.op == "Fused" and n.fused.name in IMAGE_OPS:
            shape = graph.nodes[n.inputs[0]].type.shape
            axis = next((a for a in (2, 3) if a < len(shape) and isinstance(shape[a], Sym)), None)
            if axis is not None:
                return n, axis
    return None
