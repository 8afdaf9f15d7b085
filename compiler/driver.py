"""``compile(graph, target="cpu")``: the end-to-end driver.

    graph --emit--> fuel module --passes--> fuel module --plan--> runtime Plan
          --warm kernels (x86 via linalg + llvmlite)--> Executor

The result, a ``CompiledModule``, is called with the graph's inputs by name
and returns one numpy array when the graph has one output, else a dict by
output name. Every stage's IR is kept on ``module.ir`` for debugging.
"""
from __future__ import annotations

import time
from typing import Mapping

import numpy as np

from runtime import BackendId
from runtime.dtype import DType
from runtime.executor import Executor, KernelStep, Plan
from runtime.errors import FuelError

from .errors import CompilerError
from .target import check_target, table_for


class CompileError(CompilerError):
    """A graph that could not be compiled; the message names the stage."""


class CompiledModule:
    """A compiled graph: call it with the inputs by name (numpy arrays).

    ``m(x=...)`` returns one array for a one-output graph, else a dict by
    output name. Wrong, missing or mistyped inputs raise ``PlanError`` saying
    what was expected. Attributes: ``plan`` (the runtime Plan), ``ir``
    (stage name -> IR text), ``timings`` (stage -> seconds), ``table``."""

    def __init__(self, plan: Plan, table, ir: Mapping[str, str], timings: Mapping[str, float],
                 target: str):
        self.plan = plan
        self.table = table
        self.ir = dict(ir)
        self.timings = dict(timings)
        self.target = target
        self.executor = Executor(plan, table)

    @property
    def input_names(self) -> list[str]:
        return list(self.plan.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.plan.outputs)

    def run(self, **inputs) -> dict[str, np.ndarray]:
        """Run and return every output in a dict by name."""
        return self.executor.run(**inputs)

    def __call__(self, **inputs):
        out = self.run(**inputs)
        if len(out) == 1:
            return next(iter(out.values()))
        return out

    def kernel_summary(self) -> list[str]:
        """One ``name: OpKind[dtypes] (kernel_source)`` line per kernel step."""
        lines = []
        for i, s in enumerate(self.plan.steps):
            if isinstance(s, KernelStep):
                e = self.executor.entries[i]
                op = s.key.op.name if s.key.op is not None else f"fused#{s.key.fused}"
                lines.append(f"{op}[{','.join(d.value for d in s.dtypes)}] ({e.kernel_source})")
        return lines

    def __repr__(self) -> str:
        sig = ", ".join(f"{n}: {s}" for n, s in self.plan.inputs.items())
        return f"<CompiledModule target={self.target} ({sig}) -> {self.output_names}>"


def compile(graph, target: str = "cpu", *, pipeline: str | None = None,
            warm: bool = True) -> CompiledModule:
    """Compile ``graph`` for ``target`` ("cpu").

    ``pipeline`` overrides the default pass pipeline (text or a name of
    ``compiler.passes.PIPELINES``). With ``warm`` (the default) every kernel
    is compiled now, so calling the module never compiles. Raises
    ``CompileError`` (or the stage's own typed error: ``DialectError``,
    ``PassError`` with a reproducer, ``PlanningError``, ``NoBackendForOp``)."""
    from .dialect.emit import graph_to_module
    from .passes import DEFAULT_PIPELINE, resolve_pipeline, run_pipeline
    from .plan import plan_from_module

    target = check_target(target)
    if not getattr(graph, "outputs", None):
        raise CompileError("the graph has no outputs; mark at least one with g.output(node, name=...)")
    table = table_for(target)
    timings, irs = {}, {}
    t0 = time.perf_counter()
    emitted = graph_to_module(graph)
    irs["fuel"] = str(emitted.module)
    timings["emit"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    text = resolve_pipeline(pipeline) if pipeline is not None else DEFAULT_PIPELINE
    run_pipeline(emitted.module, text, options={"table": table, "backend": "cpu", "backends": "cpu"})
    irs["optimized"] = str(emitted.module)
    timings["passes"] = time.perf_counter() - t0
    from .codegen.runtime_fused import register_module_kernels
    table = register_module_kernels(emitted.module)  # fuel.runtime_fused keys

    t0 = time.perf_counter()
    plan = plan_from_module(emitted.module, emitted.constants, backend=BackendId.CPU)
    module = CompiledModule(plan, table, irs, timings, target)
    timings["plan"] = time.perf_counter() - t0

    if warm:
        t0 = time.perf_counter()
        _warm(module)
        module.timings["codegen"] = time.perf_counter() - t0
    return module


def _warm(module: CompiledModule) -> None:
    """Compile every generated kernel the plan will call (the mlir-cpu
    primitives and the mlir-cpu-fused fused ops)."""
    from runtime.layout import Layout

    from .codegen import fused, kernels, runtime_fused

    warmers = {kernels.KERNEL_SOURCE: kernels.warm, fused.KERNEL_SOURCE: fused.warm,
               runtime_fused.KERNEL_SOURCE: runtime_fused.warm}
    specs = module.executor.specs
    for i, step in enumerate(module.plan.steps):
        if not isinstance(step, KernelStep):
            continue
        entry = module.executor.entries[i]
        warm = warmers.get(entry.kernel_source)
        kind = step.key.op if step.key.op is not None else step.key.fused.value
        if warm is None:
            continue
        layouts = [Layout.contiguous(specs[v].shape) for v in step.inputs]
        layouts += [Layout.contiguous(s.shape) for s in step.output_specs[:1]]
        try:
            warm(kind, step.dtypes, layouts, step.params, len(step.inputs))
        except FuelError as e:
            raise CompileError(f"code generation failed for step {step.name!r} "
                               f"({step.key}[{','.join(d.value for d in step.dtypes)}]): {e}") from e
