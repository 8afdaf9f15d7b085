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

import collections
import gc
import math
import threading
import time
from typing import Mapping

import numpy as np

from runtime.cpu_features import check_cpu_features
from runtime.executor import Executor, KernelStep, Plan, PlanModule
from runtime.errors import FuelError, PlanError

from .errors import CompilerError
from .targets import Target, parse_target


class CompileError(CompilerError):
    """A graph that could not be compiled; the message names the stage."""


class FallbackError(CompileError):
    """``compile(..., strict=True)`` (or ``$FUELC_STRICT=1``): a step of the
    plan would run a reference (numpy) kernel because the target has no
    generated kernel for it. The message names the ops."""


class FallbackWarning(UserWarning):
    """A compiled module runs some steps on reference (numpy) kernels: the
    target has no generated kernel for them. Raised as one warning per
    ``compile()``, naming the ops; ``kernel_summary()`` marks the steps."""


#: How ``kernel_summary()`` marks a step that runs a reference kernel.
FALLBACK_MARK = "  <- fallback: no generated kernel for this target"
#: Marks a kernel step whose matmul B was packed at compile time (``fuel-prepack-weights``).
PACKED_B_MARK = " [B packed]"
#: Marks a Conv2D kernel step computed as Winograd F(2x2, 3x3) from weights
#: transformed at compile time (``fuel-prepack-weights``, ``conv_winograd``).
WINOGRAD_MARK = " [Winograd F(2x2,3x3)]"


def _strict_default() -> bool:
    import os
    return os.environ.get("FUELC_STRICT", "").strip().lower() not in ("", "0", "false", "no")


def fallback_steps(executor, target: Target) -> list[tuple[int, str]]:
    """(step index, ``OpKind[dtypes] (source)``) of every kernel step whose
    bound kernel is not one the target generates (its codegen's ``SOURCE``):
    the reference numpy kernels a cpu table keeps for keys no lowering
    covers (for example an integer MatMul, NonZeroIndices)."""
    source = getattr(target.codegen, "SOURCE", None)
    if not source:
        return []
    out = []
    for i, step in enumerate(executor.plan.steps):
        if not isinstance(step, KernelStep):
            continue
        got = executor.entries[i].kernel_source or "no source"
        if not got.startswith(source):
            op = step.key.op.name if step.key.op is not None else f"fused#{step.key.fused}"
            out.append((i, f"{op}[{','.join(d.value for d in step.dtypes)}] ({got})"))
    return out


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

    def _run(self, inputs: dict) -> dict[str, np.ndarray]:
        """``run`` and calls: ``CpuFeatureError`` (before anything runs)
        when this CPU lacks features the target's code uses."""
        if not self._runnable:
            check_cpu_features(self.target.features, target=str(self.target),
                               what="this module")
            check = getattr(self.target.codegen, "check_runnable", None)
            if check is not None:  # e.g. a CUDA device for a cuda target
                check(self.target)
            self._runnable = True
        return self.executor.call(inputs)

    def save(self, path, sign_with=None, weights="zip"):
        """Write this module to one ``.fuel`` file (atomically) that
        ``runtime.load(path)`` runs without the compiler or MLIR; returns
        the path. The kernel objects come from the kernel cache, so saving
        after ``compile`` does not compile again. Raises ``ExportError``
        (``compiler.export``) for a step that cannot be exported or a
        ``path`` that is a directory, device or FIFO (never replaced), and
        ``FileNotFoundError`` when its directory does not exist.

        ``sign_with``: a shared secret (bytes or text: HMAC-SHA256) or an
        Ed25519 private key (``cryptography``); the file then carries a
        signature of its manifest (which holds every member's hash), and
        ``runtime.load(path, verify_with=key)`` (the secret, or the public
        key) refuses it unless it matches (``runtime.signing``).

        ``weights="side"`` keeps the weights in ``model.weights`` next to
        ``model.fuel`` (``docs/artifacts.md``): ship both files together."""
        from .export import export_module
        return export_module(self, path, sign_with, weights)

    def kernel_summary(self) -> list[str]:
        """One ``OpKind[dtypes] (kernel_source)`` line per kernel step; a
        step that runs a reference (numpy) kernel instead of one generated
        for the target ends with ``FALLBACK_MARK``."""
        lines = self.executor.kernel_summary()
        fallback = {i for i, _ in fallback_steps(self.executor, self.target)}
        kernel_steps = [i for i, s in enumerate(self.plan.steps) if isinstance(s, KernelStep)]
        return [line + (PACKED_B_MARK if getattr(self.plan.steps[i].params, "b_panel", 0) else "")
                + (WINOGRAD_MARK if getattr(self.plan.steps[i].params, "winograd", False) else "")
                + (FALLBACK_MARK if i in fallback else "")
                for i, line in zip(kernel_steps, lines)]

    def __repr__(self) -> str:
        sig = ", ".join(f"{n}: {s}" for n, s in self.plan.inputs.items())
        return f"<CompiledModule target={self.target} ({sig}) -> {self.output_names}>"


class SymbolicModule:
    """A compiled graph with symbolic extents (``docs/dynamic-shapes.md``).
    Each distinct binding of the symbols (``{"batch": 2, "seq": 7}``) is
    specialised (``Graph.bind``) and planned on its first call, then cached;
    the ``KEEP`` most recently used bindings are kept. The kernels with a
    dynamic instance (``kernel_summary``: ``[run-time extents]``) are compiled
    once for every size; the others per binding. A call binds the symbols from the inputs' shapes
    and raises ``ShapeSignatureError`` (a ``PlanError``) when they contradict
    the signature, before anything compiles or runs."""

    KEEP = 8

    def __init__(self, graph, target: Target, options: dict):
        self.graph = graph
        self.target = target
        self._options = options
        self._modules: "collections.OrderedDict[tuple, CompiledModule]" = collections.OrderedDict()
        self._keys: dict[tuple, tuple] = {}  # input shapes -> binding, for calls seen
        self._lock = threading.Lock()

    @property
    def signature(self) -> dict:
        """The graph's signature, symbols included (``Graph.signature``)."""
        return self.graph.signature()

    @property
    def input_names(self) -> list[str]:
        return list(self.graph.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.graph.outputs)

    @property
    def bindings(self) -> list[dict]:
        """The bindings compiled and kept, least recently used first."""
        return [dict(zip(self.graph.symbols, k)) for k in self._modules]

    def specialize(self, **sizes) -> CompiledModule:
        """The static ``CompiledModule`` for one binding (every symbol by name),
        compiled now unless kept. Raises ``ShapeSignatureError`` for sizes
        outside the symbols' bounds or breaking a recorded equality."""
        from runtime.symbols import bind_symbols, evaluate
        unknown = sorted(set(sizes) - set(self.graph.symbols))
        missing = [n for n in self.graph.symbols if n not in sizes]
        if unknown or missing:
            raise CompileError(f"specialize takes every symbol of the graph "
                               f"({list(self.graph.symbols)}) by name; missing {missing}, "
                               f"unknown {unknown}")
        declared = {k: self.graph.nodes[v].shape for k, v in self.graph.inputs.items()}
        bind_symbols(declared, {k: [evaluate(d, sizes) for d in s] for k, s in declared.items()},
                     self.graph.equalities)
        return self._module(tuple(int(sizes[n]) for n in self.graph.symbols))

    def _module(self, key: tuple) -> CompiledModule:
        with self._lock:  # one compile per binding, however many threads call
            module = self._modules.get(key)
            if module is None:
                static = self.graph.bind(dict(zip(self.graph.symbols, key)),
                                         image_at_run_time=True)
                module = compile(static, self.target, **self._options)
                self._modules[key] = module
                while len(self._modules) > self.KEEP:
                    self._modules.popitem(last=False)
            self._modules.move_to_end(key)
            return module

    def run(self, **inputs) -> dict[str, np.ndarray]:
        """Bind the symbols from the inputs' shapes, then run that binding's
        module; every output in a dict by name."""
        return self._run(inputs)

    def _run(self, inputs: dict) -> dict[str, np.ndarray]:
        names = self.graph.inputs
        if inputs.keys() != names.keys():
            sig = ", ".join(f"{n}: {s}" for n, s in self.signature["inputs"].items())
            raise PlanError(f"inputs are ({sig}); missing {sorted(set(names) - set(inputs))}, "
                            f"unexpected {sorted(set(inputs) - set(names))}")
        shapes = tuple(np.shape(inputs[n]) for n in names)
        key = self._keys.get(shapes)
        if key is None:  # the binding is a function of the shapes: checked once per shapes
            values = self.graph.bind_shapes(dict(zip(names, shapes)))
            key = tuple(values[n] for n in self.graph.symbols)
            if len(self._keys) >= 256:
                self._keys.clear()
            self._keys[shapes] = key
        return self._module(key)._run(inputs)

    def __call__(self, **inputs):
        out = self._run(inputs)
        return next(iter(out.values())) if len(out) == 1 else out

    def kernel_summary(self) -> list[str]:
        """A first line stating the stage and the bindings compiled, then the
        kernels of the most recently used binding, each marked ``[run-time
        extents]`` (one object serves every size), ``[per shape]`` or, with a
        symbolic image size, ``[run-time batch, per image size]``."""
        from .graph.symbolic import symbolic_image
        kept = "; ".join(", ".join(f"{k}={v}" for k, v in b.items()) for b in self.bindings)
        image = symbolic_image(self.graph) is not None
        head = (f"symbolic module: passes and plan per input-shape binding; kernels marked "
                f"[run-time extents] are compiled once for every size, [per shape] ones per "
                f"binding" + (", [run-time batch, per image size] ones per image size"
                              if image else "") + f" (kept: {kept or 'none yet'})")
        last = next(reversed(self._modules.values()), None)
        if last is None:
            return [head]
        return [head] + [f"{line} [{mark}]" for line, mark in
                         zip(last.kernel_summary(), extent_marks(last, image))]

    def save(self, path, sign_with=None, weights="zip"):
        """Write one ``.fuel`` file that ``runtime.load(path)`` runs at every
        size the signature allows, without the compiler
        (``compiler.export_symbolic``; ``docs/dynamic-shapes.md``). Raises
        ``ExportError`` naming the step when the plan or a kernel depends on
        the sizes in a way one file cannot hold (a kernel compiled per shape);
        ``sign_with`` and ``weights`` as for ``CompiledModule.save``."""
        from .export_symbolic import export_symbolic
        return export_symbolic(self, path, sign_with, weights)

    @staticmethod
    def refuse_per_shape_kernels(sample: CompiledModule, per_image: bool = False) -> None:
        """``ExportError`` naming the generated kernels of ``sample`` that are
        compiled per shape (``extent_marks``; ``per_image``, a graph with a
        symbolic image size: also those compiled per image size): one
        ``.fuel`` file for every size cannot hold them."""
        from .codegen.family import GeneratedKernel
        from .export import ExportError
        entries = sample.executor.entries
        steps = [(i, s) for i, s in enumerate(sample.plan.steps) if isinstance(s, KernelStep)]
        bad = [f"step {i} ({s.name}: {entries[i].kernel.fn.__qualname__})"
               for (i, s), mark in zip(steps, extent_marks(sample, per_image))
               if mark != "run-time extents" and isinstance(entries[i].kernel.fn, GeneratedKernel)]
        if bad:
            how = "per shape or per image size" if per_image else "per shape"
            raise ExportError(f"cannot write one .fuel file for every size: {', '.join(bad)} "
                              f"{'is' if len(bad) == 1 else 'are'} compiled {how} (no kernel "
                              "with run-time extents: docs/dynamic-shapes.md, the kernel table); "
                              "save one binding (m.specialize(...).save) or a bundle "
                              "(m.save_bundle)")

    def export_sample(self, sizes: dict, keep: frozenset = frozenset()) -> CompiledModule:
        """A fresh ``CompiledModule`` of one binding, not kept, whose plan
        leaves the values in ``keep`` unfolded (``fold_constant_steps``): what
        ``save`` samples. Its convs over a symbolic image take one form at
        every size (``conv2d.ONE_FORM``: no few-pixel or whole-image form),
        so the samples share one plan down to the smallest image."""
        from .registry.ops.conv2d import ONE_FORM
        o = self._options
        token = ONE_FORM.set(True)
        try:
            return _compile(self.graph.bind(dict(sizes), image_at_run_time=True), self.target,
                            o["pipeline"], True, None, 1, None, None, o["strict"], keep)
        finally:
            ONE_FORM.reset(token)

    def save_bundle(self, path, bindings=None, sign_with=None):
        """Write a directory that ``runtime.load_bundle(path)`` runs without the
        compiler: ``bundle.json`` (the symbolic signature and the saved
        bindings) and one ``.fuel`` file per binding (``bindings``: dicts of
        symbol sizes, compiled now if not kept; default: the kept ones).
        Returns the path."""
        import os
        from runtime.bundle import signature_json, write_index
        from .export import ExportError
        bindings = self.bindings if bindings is None else [dict(b) for b in bindings]
        if not bindings:
            raise ExportError("save_bundle: no binding to save; call the module or pass "
                              "bindings=[{...}]")
        os.makedirs(path, exist_ok=True)
        g = self.graph
        sig = signature_json({n: (g.nodes[i].shape, g.nodes[i].dtype) for n, i in g.inputs.items()},
                             g.symbols, g.equalities)
        saved = []
        for sizes in bindings:
            name = "_".join(f"{k}{sizes.get(k)}" for k in g.symbols) + ".fuel"
            self.specialize(**sizes).save(os.path.join(path, name), sign_with=sign_with)
            saved.append(({k: int(sizes[k]) for k in g.symbols}, name))
        write_index(path, sig, saved)
        return path

    def __repr__(self) -> str:
        sig = ", ".join(f"{n}: {s}" for n, s in self.signature["inputs"].items())
        return f"<SymbolicModule target={self.target} ({sig}) -> {self.output_names}>"


def compile(graph, target: "str | Target" = "cpu", *, pipeline: str | None = None,
            warm: bool = True, progress=None, jobs: int | None = None,
            executor=None, strict: bool | None = None) -> "CompiledModule | SymbolicModule":
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
    (``compiler.codegen.jobs``).

    No silent fallback: when the target has no generated kernel for a step
    and its table's reference (numpy) kernel would run instead, ``compile``
    issues one ``FallbackWarning`` naming those ops (``kernel_summary()``
    marks them); with ``strict=True`` (default ``$FUELC_STRICT=1``) it
    raises ``FallbackError`` instead, before any kernel is compiled.

    A graph with symbolic extents gives a ``SymbolicModule``, which compiles
    each binding of its symbols on first use (``docs/dynamic-shapes.md``)."""
    from .codegen import jobs as parallel_jobs
    from .codegen.family import runnable_here

    target = parse_target(target)
    strict = _strict_default() if strict is None else bool(strict)
    if not getattr(graph, "outputs", None):
        raise CompileError("the graph has no outputs; mark at least one with g.output(node, name=...)")
    if getattr(graph, "is_symbolic", False):  # docs/dynamic-shapes.md: plans per binding
        return SymbolicModule(graph, target, {"pipeline": _symbolic_pipeline(pipeline), "warm": warm,
                                              "progress": progress, "jobs": jobs,
                                              "executor": executor, "strict": strict})
    jobs = parallel_jobs.default_jobs() if jobs is None else parallel_jobs.check_jobs(jobs)
    pool, frozen = None, False
    try:
        if (warm and executor is None and jobs > 1 and target.kind == "cpu"
                and len(getattr(graph, "nodes", ())) >= parallel_jobs.MIN_NODES):
            # Forked workers share this process's pages until one side writes
            # them: a full collection here would write every old object's
            # header, copying its pages (docs/compile-at-scale.md), so the
            # objects made before the fork are left out of collections until
            # compile() returns. The serial front (the target check, the
            # passes, the plan) collects none until its first task.
            frozen = parallel_jobs.fork_safe() and gc.get_freeze_count() == 0
            if frozen:
                parallel_jobs.pause_collection()
            if runnable_here(target):
                if frozen:
                    gc.freeze()
                pool = parallel_jobs.ProcessExecutor(jobs - 1)  # imports the compiler during the passes
            elif frozen:
                parallel_jobs.resume_collection(freeze=False)
                frozen = False
        return _compile(graph, target, pipeline, warm, progress, jobs, executor, pool, strict)
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        if frozen:
            parallel_jobs.resume_collection()  # no task was submitted
            gc.unfreeze()


def _symbolic_pipeline(pipeline):
    """The pipeline of a symbolic module's bindings: by default, without the
    fusion of bottom-right aligned attention (``fuel-fuse{attention_k_len=
    false}``), whose FlashAttn kernel is compiled per shape: one ``.fuel``
    file must run every size; and without the attention that fuses for its
    size alone (``attention_by_size=false``): every size runs the same
    kernels. The other fused kernels take their batch and sequence at run
    time (``docs/dynamic-shapes.md``). Nor the expansion fused into its
    depthwise conv (``expand_depthwise=false``), taken from a batch of 2 on:
    a batch of 1 would get another plan."""
    from .passes import DEFAULT_PIPELINE
    if pipeline is not None:
        return pipeline
    text = DEFAULT_PIPELINE.replace(
        "fuel-fuse{", "fuel-fuse{attention_k_len=false attention_by_size=false "
        "expand_depthwise=false ", 1)
    if text == DEFAULT_PIPELINE:  # the default pipeline lost its fuel-fuse options
        raise CompileError(f"the default pipeline has no 'fuel-fuse{{...}}' to turn the "
                           f"per-shape fusions off in for a symbolic module: {DEFAULT_PIPELINE}")
    return text


def _compile(graph, target: Target, pipeline, warm: bool, progress, jobs: int, executor,
             pool, strict: bool = False, keep: frozenset = frozenset()) -> CompiledModule:
    from .dialect.emit import graph_to_module
    from .passes import DEFAULT_PIPELINE, resolve_pipeline, run_pipeline
    from .codegen.family import emission_context, runnable_here
    from .plan import fold_constant_steps, foldable_steps, plan_from_module

    timings, irs = {}, {}
    progress = progress or (lambda stage: None)
    progress("emit")
    t0 = time.perf_counter()
    # In the context the kernels' one-op modules are emitted in: one MLIR
    # context and one load of the fuel dialect for the whole compile (each
    # some 5 ms of the serial front, docs/compile-at-scale.md).
    emitted = graph_to_module(graph, ctx=emission_context())
    irs["fuel"] = str(emitted.module)
    timings["emit"] = time.perf_counter() - t0

    progress("passes")
    t0 = time.perf_counter()
    text = resolve_pipeline(pipeline) if pipeline is not None else DEFAULT_PIPELINE
    # The target travels as its string: a reproducer command reruns as printed.
    run_pipeline(emitted.module, text, input_text=irs["fuel"],  # printed once
                 options={"target": target.spec, "constants": emitted.constants})
    # printed at the end: nothing below changes the module, and the first
    # kernel task need not wait for it (docs/compile-at-scale.md)
    irs["optimized"] = None
    timings["passes"] = time.perf_counter() - t0

    progress("plan")
    t0 = time.perf_counter()
    from .codegen.runtime_fused import register_module_kernels
    table = register_module_kernels(emitted.module, target)  # fuel.runtime_fused keys
    plan = plan_from_module(emitted.module, emitted.constants, backend=target.backend)
    module = CompiledModule(plan, table, irs, timings, target)
    # Work on weights is done once, now (fold_constant_steps), by kernels this
    # machine runs: the steps it computes are left out of the fallback check.
    folded = (foldable_steps(plan, module.executor.specs, keep)[0]
              if warm and target.kind == "cpu" and runnable_here(target) else [])
    module.timings["plan"] = time.perf_counter() - t0
    _check_fallbacks(module, strict, skip=frozenset(folded))

    if warm:
        progress("codegen")
        t0 = time.perf_counter()
        if folded:
            # The folded steps' kernels compile with the plan's others, spread
            # over the workers, first: this process folds as soon as they
            # are in, while the workers compile the rest.
            # The folded module is built there too: after the last object this
            # process only warms the steps, whose kernels are all memoised (the
            # folded plan calls the unfolded one's instances), so _warm looks
            # for no cold instance again.
            specs, done = module.executor.specs, []

            def fold():
                done.append(CompiledModule(fold_constant_steps(plan, table, keep, specs),
                                           table, irs, module.timings, target))
            _precompile(module, executor, pool, progress, frozenset(folded), fold)
            if not done:
                fold()
            module = done[0]
        _warm(module, executor, pool, progress, precompiled=bool(folded))
        module.timings["codegen"] = time.perf_counter() - t0
    module.ir["optimized"] = str(emitted.module)
    return module


def _check_fallbacks(module: CompiledModule, strict: bool, skip: frozenset = frozenset()) -> None:
    """One ``FallbackWarning`` naming the ops that run reference kernels
    (``FallbackError`` when ``strict``); the steps of ``skip`` (the ones
    constant folding computes at compile time) are not counted."""
    steps = [(i, label) for i, label in fallback_steps(module.executor, module.target)
             if i not in skip]
    if not steps:
        return
    ops = sorted({label for _, label in steps})
    what = (f"{len(steps)} step(s) of this module run reference numpy kernels: target "
            f"{module.target} has no generated kernel for {', '.join(ops)}")
    if strict:
        raise FallbackError(f"{what} (strict: refused; compile with strict=False or unset "
                            f"FUELC_STRICT to run them on numpy)")
    import os
    import sys
    import warnings
    # Attribute the warning to the first caller outside the compiler package.
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(0), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(FallbackWarning(f"{what}; kernel_summary() marks them (strict=True or "
                                  f"FUELC_STRICT=1 refuses)"), stacklevel=level)


def _step_instances(module: CompiledModule, i: int, step) -> list:
    """``[(family, instance)]`` a generated kernel step compiles (contiguous
    operands); [] for other steps."""
    from runtime.layout import Layout
    fn = module.executor.entries[i].kernel.fn if isinstance(step, KernelStep) else None
    if not hasattr(fn, "instances"):
        return []
    specs = module.executor.specs
    layouts = [Layout.contiguous(specs[v].shape) for v in step.inputs]
    layouts += [Layout.contiguous(s.shape) for s in step.output_specs[:1]]
    insts = fn.instances(layouts, step.params, len(step.inputs))
    seen = _call_layouts(module).get(i)
    if seen is not None and seen != layouts[:len(step.inputs)]:
        try:  # the views the executor passes (a transposed operand): their instance too
            insts += fn.instances(seen + layouts[len(step.inputs):], step.params,
                                  len(step.inputs))
        except FuelError:
            pass  # the call reports it
    return [(fn.family, inst) for inst in dict.fromkeys(insts)]


def _call_layouts(module: CompiledModule) -> dict:
    """Step index -> the input layouts the executor's general path passes to
    that kernel step when every graph input is contiguous (views of values as
    view steps leave them, contiguized where the kernel's caps ask), memoised
    on the module. Steps whose operands the executor makes contiguous anyway
    are left out."""
    memo = getattr(module, "_call_layouts_memo", None)
    if memo is not None:
        return memo
    from runtime.executor import ContiguizeStep, ReshapeStep, ViewStep
    from runtime.layout import Layout
    specs, memo = module.executor.specs, {}
    env = {v: (s.shape, Layout.contiguous(s.shape)) for v, s in module.plan.inputs.items()}

    def base(v):  # a value's (storage shape, layout); a fresh value is contiguous
        return env.get(v) or (specs[v].shape, Layout.contiguous(specs[v].shape))

    for i, step in enumerate(module.plan.steps):
        if isinstance(step, ViewStep):
            shape, lay = base(step.input)
            env[step.output] = (shape, step.apply(lay))
        elif isinstance(step, ReshapeStep):
            shape, lay = base(step.input)
            view = lay.reshaped(step.shape) if not lay.is_contiguous() else None
            env[step.output] = (shape, view) if view is not None else \
                (step.shape, Layout.contiguous(step.shape))
        elif isinstance(step, ContiguizeStep):
            env[step.output] = (specs[step.output].shape, Layout.contiguous(specs[step.output].shape))
        elif isinstance(step, KernelStep):
            caps = module.executor.entries[i].caps
            lays = []
            for v in step.inputs:
                shape, lay = base(v)
                exact = math.prod(shape) == lay.numel
                if not (caps.view_input or (exact and lay.start_offset == 0 and
                                            (lay.is_contiguous() or caps.strided_input))):
                    lay = Layout.contiguous(lay.shape)
                lays.append(lay)
            memo[i] = lays
    module._call_layouts_memo = memo
    return memo


def extent_marks(module: CompiledModule, per_image: bool = False) -> list[str]:
    """Per kernel step of ``module``: ``"run-time extents"`` when every kernel
    instance it calls takes its (batch/sequence) extents at run time (one
    object for every size), else ``"per shape"`` (compiled again for a new
    size; ``docs/dynamic-shapes.md``). ``per_image`` (a graph with a symbolic
    image size): a kernel whose image result has a static height or width (a
    direct conv: only its batch is run-time; ``_per_image``) is
    ``"run-time batch, per image size"``."""
    marks = []
    for i, step in enumerate(module.plan.steps):
        if isinstance(step, KernelStep):
            insts = _step_instances(module, i, step)
            dyn = insts and all(getattr(inst, "dynamic", False) for _, inst in insts)
            part = per_image and dyn and any(_per_image(getattr(inst, "dynamic_dims", None))
                                             for _, inst in insts)
            marks.append("run-time batch, per image size" if part
                         else "run-time extents" if dyn else "per shape")
    return marks


def _per_image(masks) -> bool:
    """Whether a kernel with per-dim ``masks`` (None: all run-time) is
    compiled per image size: its result is an image ``[N, C, H, W]`` whose
    H or W is static (a MaxPool2D takes them at run time)."""
    out = masks[-1] if masks else None
    return out is not None and len(out) == 4 and not (out[2] and out[3])


def _precompile(module: CompiledModule, executor=None, pool=None,
                progress=lambda stage: None, first: frozenset = frozenset(),
                then=None) -> None:
    """Compile every kernel instance ``module``'s plan calls, cold ones in
    parallel on ``executor`` or ``pool`` (the workers ``compile`` started for
    ``jobs``), which take tasks from the first cold instance. ``then()``
    runs in this process once the instances of the steps ``first`` are
    compiled (``codegen.jobs.precompile``)."""
    from .codegen.family import runnable_here
    from .codegen.jobs import precompile
    if module.target.kind != "cpu" or not runnable_here(module.target):
        return

    def items():  # made while the first cold instance compiles (codegen.jobs.precompile)
        for i, step in enumerate(module.plan.steps):
            try:
                for family, inst in _step_instances(module, i, step):
                    yield family, inst, i in first
            except FuelError:
                pass  # reported with the step's name by _warm
    precompile(items(), module.target, executor=executor if executor is not None else pool,
               progress=progress, then=then)


def _warm(module: CompiledModule, executor=None, pool=None,
          progress=lambda stage: None, precompiled: bool = False) -> None:
    """Compile every generated kernel the plan will call (any kernel whose
    callable has ``warm(layouts, params, n_inputs)``: the generated families),
    cold instances in parallel (``_precompile``) unless ``precompiled`` (the
    caller compiled them: a kernel still missing is compiled here)."""
    from runtime.layout import Layout

    specs = module.executor.specs
    if not precompiled:
        _precompile(module, executor, pool, progress)
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
