"""Whole-graph device residency: run a plan whose every kernel is a CUDA
kernel program with its values in device memory, copying only the graph's
inputs in (constants once, then kept) and its outputs out.

``plan_residency(plan, specs, programs)`` decides from the plan alone
whether that is possible: every kernel step has a ``KernelProgram`` whose
parameters match the step's values, and every view or reshape step is an
alias of a dense buffer (same bytes, row-major, offset 0). Anything else (a
strided view, a contiguize step, a bundle, index operands the executor
checks on the host before a kernel reads them, a row count bound at run
time) leaves the plan on the per-kernel host round trip, with the reason.

``ResidentRunner`` runs a ``Residency`` on a device object: ``alloc(nbytes)
-> handle``, ``copy_in(handle, array)``, ``copy_out(handle, array)``,
``launch(program, handles)`` and ``free(handle)``. ``CudaDevice`` is the
real one (``runtime.cuda`` buffers and loaded programs); tests pass a
recording double.
"""
from __future__ import annotations

import dataclasses
import math
import threading

import numpy as np

from ..dtype import from_storage
from ..errors import KernelError
from ..executor import ConstStep, KernelStep, ReshapeStep, ViewStep
from ..indexing import INDEX_OPERANDS
from ..layout import Layout
from ..storage import Storage
from .program import KernelProgram


@dataclasses.dataclass(frozen=True)
class Residency:
    """What a resident run does (value ids are the plan's).

    ``ops``: in plan order, ``("launch", step index, input ids, output id)``,
    ``("alias", output id, input id)`` or ``("const", output id, constant
    name)``; ``frees[k]``: the buffers (by their root value) freed after
    op ``k``; ``inputs``/``outputs``: the graph values copied in / out."""

    ops: tuple
    frees: dict
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    roots: dict  # value id -> the value whose buffer it shares
    nbytes: dict  # root value id -> bytes


def plan_residency(plan, specs: dict, programs: dict) -> tuple[Residency | None, str]:
    """(Residency, "") when the whole ``plan`` can run on the device with
    ``programs`` (step index -> KernelProgram), else (None, why not)."""
    roots: dict[str, str] = {}
    nbytes: dict[str, int] = {}
    ops: list = []

    def dense(vid):
        roots[vid] = vid
        s = specs[vid]
        nbytes[vid] = math.prod(s.shape) * s.dtype.itemsize

    for name, spec in plan.inputs.items():
        dense(name)
    for i, step in enumerate(plan.steps):
        where = f"step {i} ({getattr(step, 'name', '') or type(step).__name__})"
        if isinstance(step, ConstStep):
            dense(step.output)
            ops.append(("const", step.output, step.const))
        elif isinstance(step, (ViewStep, ReshapeStep)):
            src = specs[step.input]
            out = step.apply(Layout.contiguous(src.shape)) if isinstance(step, ViewStep) \
                else Layout.contiguous(step.shape)
            if not (out.is_contiguous() and out.start_offset == 0 and out.numel == math.prod(src.shape)):
                return None, f"{where}: a strided view ({out}) is not a dense device buffer"
            roots[step.output] = roots[step.input]
            ops.append(("alias", step.output, step.input))
        elif isinstance(step, KernelStep):
            prog = programs.get(i)
            if not isinstance(prog, KernelProgram):
                return None, f"{where}: no CUDA kernel program (runs on the host)"
            if step.is_bundle or len(step.outputs) != 1:
                return None, f"{where}: a multi-output (bundle) step"
            if INDEX_OPERANDS.get(step.key.op):
                return None, f"{where}: index operands are checked on the host before the kernel"
            if getattr(getattr(step.params, "m_compute", None), "mode", "all") != "all":
                return None, f"{where}: a row count bound at run time"
            vids = list(step.inputs) + [step.outputs[0]]
            dense(step.outputs[0])
            if len(prog.params) != len(vids) or any(
                    b.nbytes != nbytes[roots[v]] for v, b in zip(vids, prog.params)):
                return None, (f"{where}: the CUDA program's buffers "
                              f"{[f'{b.element}{list(b.shape)}' for b in prog.params]} are not the "
                              f"step's values (a kernel split into tiles)")
            ops.append(("launch", i, tuple(step.inputs), step.outputs[0]))
        else:
            return None, f"{where}: a {type(step).__name__} has no device form"
    outputs = tuple(plan.outputs.values())
    keep = {roots[v] for v in outputs} | {op[1] for op in ops if op[0] == "const"}
    last: dict[str, int] = {}
    for k, op in enumerate(ops):
        if op[0] == "launch":
            for vid in op[2] + (op[3],):
                last[roots[vid]] = k
    frees: dict[int, tuple] = {}
    for root, k in last.items():
        if root not in keep:
            frees[k] = frees.get(k, ()) + (root,)
    return Residency(tuple(ops), frees, tuple(plan.inputs), outputs, roots, nbytes), ""


class ResidentRunner:
    """Runs a ``Residency`` for an ``Executor`` on ``device`` (a callable
    returning the device object, called on the first run). Constants are
    copied in on the first run and kept on the device while the plan's
    constant array is the same object."""

    def __init__(self, residency: Residency, programs: dict, device):
        self.residency, self.programs = residency, programs
        self._device_factory, self._device = device, None
        self._consts: dict = {}  # value id -> (array, handle)
        self._lock = threading.Lock()

    @property
    def device(self):
        if self._device is None:
            self._device = self._device_factory()
        return self._device

    def _const(self, dev, plan, spec, vid, name):
        src = plan.constants[name]
        hit = self._consts.get(vid)
        if hit is not None and hit[0] is src:
            return hit[1]
        if hit is not None:
            dev.free(hit[1])
        st, lay = Storage.from_numpy(np.require(src, requirements="C"), dtype=spec.dtype)
        h = dev.alloc(self.residency.nbytes[vid])
        dev.copy_in(h, st.to_numpy(lay))
        self._consts[vid] = (src, h)
        return h

    def run(self, executor, inputs: dict) -> dict[str, np.ndarray]:
        r, plan = self.residency, executor.plan
        with self._lock:
            dev = self.device
            handles: dict[str, object] = {}
            owned: list = []
            try:
                for name in r.inputs:
                    st, lay = executor._bind_input(name, inputs[name])
                    h = dev.alloc(r.nbytes[name])
                    owned.append(h)
                    dev.copy_in(h, st.to_numpy(lay))
                    handles[name] = h
                for k, op in enumerate(r.ops):
                    if op[0] == "const":
                        handles[op[1]] = self._const(dev, plan, executor.specs[op[1]], op[1], op[2])
                    elif op[0] == "alias":
                        handles[op[1]] = handles[op[2]]
                    else:
                        _, i, ins, out = op
                        h = dev.alloc(r.nbytes[out])
                        owned.append(h)
                        handles[out] = h
                        try:
                            dev.launch(self.programs[i], [handles[v] for v in ins] + [h])
                        except KernelError as e:
                            raise KernelError(f"step {i} ({plan.steps[i].name or plan.steps[i].key}): "
                                              f"{e}") from e
                    for root in r.frees.get(k, ()):
                        dev.free(handles[root])
                        owned.remove(handles[root])
                result = {}
                for name, vid in plan.outputs.items():
                    spec = executor.specs[vid]
                    host = np.empty(spec.shape, spec.dtype.storage_numpy)
                    dev.copy_out(handles[vid], host)
                    result[name] = from_storage(host, spec.dtype)
                return result
            finally:
                for h in owned:
                    dev.free(h)


class CudaDevice:
    """The real device: ``runtime.cuda`` buffers; each program is loaded
    once and its launches run in order (``LoadedProgram.run_device``)."""

    def __init__(self):
        from . import context
        context()
        self._loaded: dict[int, object] = {}

    def alloc(self, nbytes: int):
        from . import DeviceBuffer
        return DeviceBuffer(nbytes)

    def copy_in(self, handle, array: np.ndarray) -> None:
        handle.copy_from_host(array)

    def copy_out(self, handle, array: np.ndarray) -> None:
        handle.copy_to_host(array)

    def launch(self, program: KernelProgram, handles: list) -> None:
        from . import LoadedProgram
        loaded = self._loaded.get(id(program))
        if loaded is None or loaded.program is not program:
            loaded = self._loaded[id(program)] = LoadedProgram(program)
        loaded.run_device(handles)

    def free(self, handle) -> None:
        handle.free()


__all__ = ["Residency", "plan_residency", "ResidentRunner", "CudaDevice"]
