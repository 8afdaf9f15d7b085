"""``compile(graph, target="cpu")``: the end-to-end driver.

    graph --emit--> fuel module --passes--> fuel module --plan--> runtime Plan
          --warm kernels (the target's codegen: linalg -> machine code)--> Executor

The target (``compiler.targets.Target``, parsed from ``"cpu"``,
``"cpu:x86-64-v3"``, ...) is resolved here once and handed down: its binding
table gates the passes, its backend keys the plan, its codegen package
compiles the kernels.

The result, a ``CompiledModule``, is called with the graph's inputs by name
and returns one numpy array when the graph has one output, else a dict by
output name. Every stage's IR is kept on ``module.ir`` for debugging.
``module.save(path)`` exports it to a ``.fuel`` file for ``runtime.load``.
"""
from __future__ import annotations

import time
from typing import Mapping

import numpy as np

from runtime.cpu_features import check_cpu_features
from runtime.executor import Executor, KernelStep, Plan, PlanModule
from runtime.errors import FuelError

from .errors import CompilerError
from .targets import Target, parse_target


class CompileError(CompilerError):
    """A graph that could not be compiled; the message names the stage."""


class CompiledModule(PlanModule):
    """A compiled graph: call it with the inputs by name (numpy arrays).

    ``m(x=...)`` returns one array for a one-output graph, else a dict by
    output name. Wrong, missing or mistyped inputs raise ``PlanError`` saying
    what was expected. Attributes: ``plan`` (the runtime Plan), ``ir``
    (stage name -> IR text), ``timings`` (stage -> seconds), ``table``,
    ``target`` (the ``Target`` it was compiled for)."""

    def __init__(self, plan: Plan, table, ir: Mapping[str, str], timings: Mapping[str, float],
                 target: Target):
        self.plan = plan
        self.table = table
        self.ir = dict(ir)
        self.timings = dict(timings)
        self.target = target
        self.executor = Executor(plan, table)
        self._runnable = False

    def run(self, **inputs) -> dict[str, np.ndarray]:
        """Run and return every output in a dict by name. ``CpuFeatureError``
        (before anything runs) when this CPU lacks features the target's
        code uses."""
        if not self._runnable:
            check_cpu_features(self.target.features, target=str(self.target),
                               what="this module")
            check = getattr(self.target.codegen, "check_runnable", None)
            if check is not None:  # e.g. a CUDA device for a cuda target
                check(self.target)
            self._runnable = True
        return super().run(**inputs)

    def save(self, path, sign_with=None):
        """Write this module to one ``.fuel`` file (atomically) that
        ``runtime.load(path)`` runs without the compiler or MLIR; returns
        the path. The kernel objects come from the kernel cache, so saving
        after ``compile`` does not compile again. Raises ``ExportError``
        (``compiler.export``) for a step that cannot be exported or a
        ``path`` that is a directory, device or FIFO (never replaced), and
        ``FileNotFoundError`` when its directory does not exist.

        ``sign_with``: a shared secret (bytes or text); the file then carries
        an HMAC-SHA256 of its manifest (which holds every member's hash), and
        ``runtime.load(path, verify_with=key)`` refuses it unless it matches."""
        from .export import export_module
        return export_module(self, path, sign_with)

    def __repr__(self) -> str:
        sig = ", ".join(f"{n}: {s}" for n, s in self.plan.inputs.items())
        return f"<CompiledModule target={self.target} ({sig}) -> {self.output_names}>"


def compile(graph, target: "str | Target" = "cpu", *, pipeline: str | None = None,
            warm: bool = True, progress=None, jobs: int | None = None,
            executor=None) -> CompiledModule:
    """Compile ``graph`` for ``target``: ``"cpu"`` (this machine, or
    ``$FUELC_CPU``), ``"cpu:x86-64-v3"``, ``"cpu:znver3"``, ... or a ``Target``.

    ``pipeline`` overrides the default pass pipeline (text or a name of
    ``compiler.passes.PIPELINES``). With ``warm`` (the default) every kernel
    is compiled now, so calling the module never compiles (for a target
    this machine cannot run, the objects are compiled and cached, and
    calling raises ``CpuFeatureError``). Raises ``TargetError`` for an
    unknown target, ``CompileError`` (or the stage's own typed error:
    ``DialectError``, ``PassError`` with a reproducer, ``PlanningError``,
    ``NoBackendForOp``). ``progress(stage)``, when given, is called as
    each stage (emit, passes, plan, codegen) starts, and with
    ``"codegen D/T"`` as kernel instances finish.

    ``jobs``: how many processes compile kernels at once, this one included
    (default ``$FUELC_JOBS``, else the CPUs this process may use; workers
    only start for graphs of ``jobs.MIN_NODES`` nodes or more).
    ``executor``: a ``concurrent.futures.Executor`` that compiles the cold
    kernel instances instead of fuelc's worker processes (e.g. a Ray
    pool). The objects are bit-identical either way
    (``compiler.codegen.jobs``)."""
    from .codegen import jobs as parallel_jobs
    from .codegen.family import runnable_here

    target = parse_target(target)
    if not getattr(graph, "outputs", None):
        raise CompileError("the graph has no outputs; mark at least one with g.output(node, name=...)")
    jobs = parallel_jobs.default_jobs() if jobs is None else parallel_jobs.check_jobs(jobs)
    pool = None
    if (warm and executor is None and jobs > 1 and target.kind == "cpu"
            and len(getattr(graph, "nodes", ())) >= parallel_jobs.MIN_NODES
            and runnable_here(target)):
        pool = parallel_jobs.ProcessExecutor(jobs - 1)  # imports the compiler during the passes
    try:
        return _compile(graph, target, pipeline, warm, progress, jobs, executor, pool)
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def _compile(graph, target: Target, pipeline, warm: bool, progress, jobs: int, executor,
             pool) -> CompiledModule:
    from .dialect.emit import graph_to_module
    from .passes import DEFAULT_PIPELINE, resolve_pipeline, run_pipeline
    from .codegen.family import runnable_here
    from .plan import fold_constant_steps, plan_from_module

    timings, irs = {}, {}
    progress = progress or (lambda stage: None)
    progress("emit")
    t0 = time.perf_counter()
    emitted = graph_to_module(graph)
    irs["fuel"] = str(emitted.module)
    timings["emit"] = time.perf_counter() - t0

    progress("passes")
    t0 = time.perf_counter()
    text = resolve_pipeline(pipeline) if pipeline is not None else DEFAULT_PIPELINE
    # The target travels as its string: a reproducer command reruns as printed.
    run_pipeline(emitted.module, text, options={"target": target.spec})
    irs["optimized"] = str(emitted.module)
    timings["passes"] = time.perf_counter() - t0

    progress("plan")
    t0 = time.perf_counter()
    from .codegen.runtime_fused import register_module_kernels
    table = register_module_kernels(emitted.module, target)  # fuel.runtime_fused keys
    plan = plan_from_module(emitted.module, emitted.constants, backend=target.backend)
    if warm and target.kind == "cpu" and runnable_here(target):
        plan = fold_constant_steps(plan, table)   # work on weights done once, now
    timings["plan"] = time.perf_counter() - t0
    module = CompiledModule(plan, table, irs, timings, target)

    if warm:
        progress("codegen")
        t0 = time.perf_counter()
        _warm(module, jobs, executor, pool, progress)
        module.timings["codegen"] = time.perf_counter() - t0
    return module


def _warm(module: CompiledModule, jobs: int = 1, executor=None, pool=None,
          progress=lambda stage: None) -> None:
    """Compile every generated kernel the plan will call (any kernel whose
    callable has ``warm(layouts, params, n_inputs)``: the generated families),
    cold instances in parallel where ``jobs``/``executor`` allow."""
    from runtime.layout import Layout
    from .codegen.family import runnable_here
    from .codegen.jobs import precompile

    specs = module.executor.specs
    if module.target.kind == "cpu" and runnable_here(module.target):
        items = []
        for i, step in enumerate(module.plan.steps):
            fn = module.executor.entries[i].kernel.fn if isinstance(step, KernelStep) else None
            if not hasattr(fn, "instances"):
                continue
            layouts = [Layout.contiguous(specs[v].shape) for v in step.inputs]
            layouts += [Layout.contiguous(s.shape) for s in step.output_specs[:1]]
            try:
                items += [(fn.family, inst)
                          for inst in fn.instances(layouts, step.params, len(step.inputs))]
            except FuelError:
                pass  # reported with the step's name below
        precompile(items, module.target, jobs=jobs, executor=executor,
                   start_pool=lambda: pool, progress=progress)
    results = []
    programs = {}  # step index -> what warm returned
    for i, step in enumerate(module.plan.steps):
        if not isinstance(step, KernelStep):
            continue
        warm = getattr(module.executor.entries[i].kernel.fn, "warm", None)
        if warm is None:
            continue
        layouts = [Layout.contiguous(specs[v].shape) for v in step.inputs]
        layouts += [Layout.contiguous(s.shape) for s in step.output_specs[:1]]
        try:
            results.append(warm(layouts, step.params, len(step.inputs)))
            programs[i] = results[-1]
        except FuelError as e:
            raise CompileError(f"code generation failed for step {step.name!r} "
                               f"({step.key}[{','.join(d.value for d in step.dtypes)}]) "
                               f"for target {module.target}: {e}") from e
    describe = getattr(module.target.codegen, "module_ir", None)
    if describe is not None:  # e.g. the PTX of every kernel on a cuda target
        module.ir.update(describe(results))
    attach = getattr(module.target.codegen, "attach_residency", None)
    if attach is not None:  # e.g. a cuda target runs whole plans on the device
        attach(module.executor, programs)
