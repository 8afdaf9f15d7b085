"""The ``torch.compile`` backend: ``torch.compile(model, backend="fuelc")``.

Registered under the ``torch_dynamo_backends`` entry point (pyproject.toml)
and, when this module is imported, with ``torch._dynamo.register_backend``.
Each FX graph dynamo hands over is exported (``torch.export``, non-strict),
imported and compiled for ``target`` (default ``cpu``). A graph fuelc cannot
take (an unsupported op, symbolic shapes, a compile error) runs eagerly
instead; the reason is warned once, in one line. Parameters reach the graph
as inputs (dynamo passes them so), so a model whose weights change keeps
computing with the new ones. Compiled graphs have no autograd: a graph that
needs gradients (grad mode on and an input that requires them, such as a
parameter) runs eagerly; run inference under ``torch.no_grad()`` or
``torch.inference_mode()``. Tensors cross without copies where their dtype
and layout allow (contiguous CPU tensors).
"""
from __future__ import annotations

import warnings

from runtime.errors import FuelError

_warned: set = set()


def _fallback(gm, why: str):
    line = " ".join(why.split())
    if len(line) > 300:
        line = line[:297] + "..."
    if line not in _warned:
        _warned.add(line)
        warnings.warn(f"fuelc: running a graph eagerly: {line}", RuntimeWarning, stacklevel=3)
    return gm.forward


def fuelc_backend(gm, example_inputs, target: str = "cpu"):
    """A dynamo backend: fuelc's compiled graph, or ``gm.forward`` (eager)."""
    import torch
    from . import TorchImportError, compile_program
    if torch.is_grad_enabled() and any(getattr(x, "requires_grad", False)
                                       for x in example_inputs):
        return _fallback(gm, "the graph needs gradients, which fuelc's compiled graphs do "
                             "not give (run inference under torch.no_grad() or "
                             "torch.inference_mode())")
    if any(not isinstance(x, torch.Tensor) for x in example_inputs):
        return _fallback(gm, "the graph takes non-tensor inputs (symbolic sizes: compile "
                             "with torch.compile(..., dynamic=False))")
    try:
        ep = torch.export.export(gm, tuple(example_inputs), strict=False)
    except Exception as e:  # torch's own tracing failures are many types
        return _fallback(gm, f"torch.export failed: {type(e).__name__}: {e}")
    try:
        program = compile_program(ep, target)
    except TorchImportError as e:
        ops = sorted({x.op_type for x in e.issues}) or [str(e).splitlines()[0]]
        return _fallback(gm, f"fuelc cannot import it ({', '.join(ops)})")
    except FuelError as e:
        return _fallback(gm, f"fuelc cannot compile it: {type(e).__name__}: {e}")

    return program


def register():
    """Register ``fuelc`` with dynamo (what the entry point does lazily)."""
    from torch._dynamo.backends.registry import _BACKENDS, register_backend
    if "fuelc" not in _BACKENDS or _BACKENDS["fuelc"] is None:
        register_backend(fuelc_backend, name="fuelc")


register()
