"""Cold compile time with ``jobs=1`` against ``jobs=N`` (docs/compile-at-scale.md).

    python benchmarks/compile_jobs.py                       # the table's models, 3 runs each
    python benchmarks/compile_jobs.py resnet:1 bert:8 --runs 5 --jobs 1 2
    python benchmarks/compile_jobs.py mobilenet:1 --breakdown   # where the time goes

Each run is a fresh process with a fresh kernel cache (``FUELC_CACHE_DIR``):
it builds a ``benchmarks/models.py`` model (or ``encoder``:
``benchmarks/encoder.py``'s ONNX encoder), imports it, and times
``compile(graph, jobs=N)``. Python's bytecode is cached for the runs (in a
temporary ``PYTHONPYCACHEPREFIX``, written by one untimed run per checkout),
as an installed fuelc has it; ``--cold-bytecode`` compiles the sources in
every run instead, as under ``PYTHONDONTWRITEBYTECODE=1`` (some 0.5 s of every
compile's front, and of a spawned worker's start). The runs of every (model, jobs) pair are
interleaved, so a change in the machine's load hits each alike, and each round
runs them the other way round from the round before (jobs=1 first, then jobs=N
first). A run during which other processes or the hypervisor (steal time) used
more than 0.03 s + 0.05 cores of CPU (/proc/stat, less this compile's own CPU
seconds), or whose vCPUs were not quiet in the probes just before and after it
(``benchmarks/vcpus.py``: a vCPU at half speed, or the two vCPUs sharing one
core), is run again, at most ``--redo`` times (default 2): the criterion is
the machine's state, never the compile's own time, so it drops the runs a
neighbour decided without favouring either side. Prints the
median of each and the ratio jobs=1 / jobs=N, the ratio of the fastest runs
(the noise of this machine only ever slows a run), the median and range of the
rounds' own ratios (each round's two runs ran next to each other), how many
runs were run again (each run's line also gives the calling process's system
seconds and page faults, which tell a slow run's copied or re-read pages from a
slower CPU), the CPU seconds of the calling
process and of its workers (which a busy machine changes less than the wall
time: with jobs=2 on two free cores the wall time is near the larger of the
two), the cores kept busy ((CPU seconds of all) / wall), the ratio of jobs=1's
CPU seconds to the calling process's with jobs=N (the speedup on free cores
when the calling process never waits for a worker), the front F (the calling
process's CPU seconds from ``compile()``'s start to its first task, the part no
worker can share) and the ratio predicted for N free cores from these parts,
jobs=1's CPU seconds over F + (the CPU seconds of all processes after F) / N,
which a loaded machine changes far less than the wall-time ratio; the load
average before and after; and checks that every run produced the same objects.

``--breakdown`` times, in one run per (model, jobs), the stages of
``compile()`` (module.timings), the calling process's work per cold
instance (linalg text, strategy, cache lookup, storing and loading what a
worker sent back, compiling one itself) and each task in the workers (when
it started and ended after ``compile()`` was called): the first task's start
is when the pool was ready, the gap between the last worker task's end and
the end of ``compile()`` is what the calling process did alone at the end, and
the end imbalance how far apart the last two processes' last compiles ended
(one process with nothing left to compile while another still compiled).
It also prints what came before ``compile()`` (building the model, importing
fuelc, ``import_model``), when the first task was submitted (and the calling
process's CPU seconds until then: the serial front, and its parts: when the
target check, the fork, emit, the passes, the plan and the making of the
instances began and ended, in CPU milliseconds), how long the calling
process waited for the workers' last objects, and what it did after the last
object (warming the steps, building the module; constant folding runs as soon
as its kernels are in). Then a timeline: each process's kernels, one line
each with its start, end and expected cost, and the calling process's own
parts (the front, the other instances' texts, folding, storing the workers'
objects, waiting for them) in time order.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: A run during which other processes (or the hypervisor) used more than this
#: many CPU seconds, plus this many cores on average, is run again (``--redo``).
DISTURBED_S, DISTURBED_CORES = 0.03, 0.05
#: Issue 21's models: the conv nets and the encoders (``encoder`` is
#: benchmarks/encoder.py's, see ``build``).
DEFAULT = ["resnet:1", "resnet:8", "mobilenet:1", "mobilenet:8", "efficientnet:1",
           "efficientnet:8", "audio:1", "audio:8", "bert:1", "bert:8", "vit:1", "vit:8",
           "encoder:1", "encoder:8"]


def build(name: str, batch: int):
    """(ONNX model, ``import_model``'s ``input_shapes``) of ``name`` at
    ``batch``: a ``benchmarks/models.py`` model (sequence 128), or
    ``encoder``: ``benchmarks/encoder.py``'s ONNX encoder (one block, hidden
    384, 12 heads, sequence 128; its batch axis fixed at ``batch``)."""
    if name == "encoder":
        from benchmarks import encoder
        proto = encoder.onnx_encoder([encoder.weights(0)])
        return proto, {"x": (batch, encoder.SEQ, encoder.HIDDEN)}
    from benchmarks import models
    return models.build(name, batch, 128), None


def kernel_id(text: str) -> str:
    """A kernel's short name in ``--breakdown``'s timeline: its text's
    digest, the same in every process."""
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def timed_emit(text, target, strategy):
    """``jobs.emit_object``, appending (pid, start, end, kernel id) to
    $FUELC_BENCH_LOG (its body: a forked worker has the caller's
    ``jobs.emit_object``, this)."""
    from compiler.codegen.family import ENTRY
    t0 = time.time()
    data = target.codegen.emit_object(text, [ENTRY], target=target, strategy=strategy)
    with open(os.environ["FUELC_BENCH_LOG"], "a") as f:
        f.write(json.dumps([os.getpid(), t0, time.time(), kernel_id(text)]) + "\n")
    return data


def _wrap(owner, name, sink, label):
    fn = getattr(owner, name)

    def timed(*a, **k):
        t0 = time.time()
        try:
            return fn(*a, **k)
        finally:
            sink.setdefault(label, []).append((t0, time.time()))
    setattr(owner, name, timed)


def _trace(owner, name, trace: list, what: str) -> None:
    """Append [what, kernel id, start, end] to ``trace`` for each call of
    ``owner.name(text, ...)`` (the timeline's kernels of the calling process)."""
    fn = getattr(owner, name)

    def traced(self, text, *a, **k):
        t0 = time.time()
        try:
            return fn(self, text, *a, **k)
        finally:
            trace.append([what, kernel_id(text), t0, time.time()])
    setattr(owner, name, traced)


def _stamp(owner, name, marks: list, label, clock) -> None:
    """Append (label, the calling process's CPU seconds since ``compile()``'s
    start) to ``marks`` as ``owner.name`` is entered and left (``front
    parts``)."""
    fn = getattr(owner, name)

    def stamped(*a, **k):
        marks.append((f"{label} >", time.process_time() - clock()[2]))
        try:
            return fn(*a, **k)
        finally:
            marks.append((f"{label} <", time.process_time() - clock()[2]))
    setattr(owner, name, stamped)


def after_import(hooks: dict) -> None:
    """Run ``hooks[name](module)`` right after the module ``name`` is first
    imported (before any caller sees it), so that ``--breakdown`` wraps the
    codegen where ``compile()`` imports it instead of importing it first: a
    user's script imports only ``compiler`` and a frontend, and the imports
    made inside ``compile()`` are part of its serial front."""
    import importlib.abc
    import importlib.machinery

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name not in hooks:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                hooks.pop(name)(module)
            spec.loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, Finder())


def watch_front(jobs_module, parent: dict, clock) -> None:
    """Record in ``out["front cpu"]`` the calling process's CPU seconds from
    ``compile()``'s start to its first task (the serial front F); ``clock()``
    is as for ``instrument``. Every run records it: the prediction for free
    cores (``measure``) needs it."""
    door = submit_door(jobs_module)
    submit = getattr(jobs_module.ProcessExecutor, door)

    def first_submit(self, *a, **k):
        if "first task" not in parent:
            start, out, c0 = clock()
            parent["first task"] = [(start, time.time())]
            out["front cpu"] = time.process_time() - c0
        return submit(self, *a, **k)
    setattr(jobs_module.ProcessExecutor, door, first_submit)


def submit_door(jobs_module) -> str:
    """The method every task of the pool goes through: ``submit_ranked``
    (``submit(fn, ...)`` is ``submit_ranked((), fn, ...)``; its first
    argument is the rank), or ``submit`` in a checkout without it."""
    return "submit_ranked" if hasattr(jobs_module.ProcessExecutor, "submit_ranked") else "submit"


def instrument(parent: dict, clock) -> dict:
    """The ``after_import`` hooks of ``--breakdown``: time the calling process's
    work per instance into ``parent``; ``clock()`` is (compile()'s start, the
    result dict, the process time at that start)."""
    from benchmarks.compile_jobs import timed_emit  # workers import it by name

    marks = parent.setdefault("front parts", [])
    kernels = parent.setdefault("kernels", {})  # kernel id -> [name, expected cost]
    trace = parent.setdefault("timeline", [])

    def jobs(m):
        m.emit_object = timed_emit
        _stamp(m.ProcessExecutor, "__init__", marks, "fork", clock)
        _stamp(m, "precompile", marks, "instances", clock)
        watch_front(m, parent, clock)
        job = m._Job.__init__

        def named(self, family, instance, text, strategy):
            job(self, family, instance, text, strategy)
            kernels[kernel_id(text)] = [getattr(instance, "name", None) or getattr(
                instance, "op_name", None) or type(instance).__name__, None]
        m._Job.__init__ = named
        door = submit_door(m)
        submit = getattr(m.ProcessExecutor, door)

        def costed(self, *a, **k):  # a cold task: ([rank], fn, text, target, strategy)
            text, _, strategy = a[1:4] if door == "submit" else a[2:5]
            kernels.setdefault(kernel_id(text), ["?", None])[1] = m.expected_cost(text, strategy)
            return submit(self, *a, **k)
        setattr(m.ProcessExecutor, door, costed)
        import concurrent.futures as cf
        completed = cf.as_completed

        def as_completed(fs, timeout=None):  # the calling process waiting for the workers
            it = completed(fs, timeout)
            while True:
                t0 = time.time()
                try:
                    f = next(it)
                except StopIteration:
                    return
                finally:
                    parent.setdefault("wait for workers", []).append((t0, time.time()))
                yield f
        m.concurrent.futures.as_completed = as_completed

    def families(m):
        from compiler.codegen.family import KernelFamily
        for c in list(vars(m).values()):
            if isinstance(c, type) and issubclass(c, KernelFamily) and "linalg_text" in vars(c):
                _wrap(c, "linalg_text", parent, "linalg text")

    def cache(m):
        _wrap(m.KernelCache, "has", parent, "cache lookup")
        _wrap(m.KernelCache, "put", parent, "store+load worker object")
        _wrap(m.KernelCache, "get_or_compile", parent, "compile here")
        _trace(m.KernelCache, "put", trace, "store+load")
        _trace(m.KernelCache, "get_or_compile", trace, "compile")

    def stamps(name, label):
        return lambda m: _stamp(m, name, marks, label, clock)

    def plan(m):
        _wrap(m, "fold_constant_steps", parent, "fold constants")
        _stamp(m, "plan_from_module", marks, "plan", clock)

    return {"compiler.codegen.jobs": jobs, "compiler.codegen.cache": cache,
            "compiler.codegen.family": stamps("runnable_here", "target check"),
            "compiler.dialect.emit": stamps("graph_to_module", "emit"),
            "compiler.passes": stamps("run_pipeline", "passes"), "compiler.plan": plan,
            "compiler.codegen.cpu": lambda m: _wrap(m, "choose_strategy", parent, "strategy"),
            **{f"compiler.codegen.{n}": families for n in ("kernels", "fused", "runtime_fused")}}


def cpu_stat() -> "tuple[float, float]":
    """The machine's busy and stolen CPU seconds so far (/proc/stat, all
    CPUs; (0, 0) where there is none): busy is user, nice, system, irq and
    softirq time, stolen the time the hypervisor ran something else on a
    vCPU that had work."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0
    hz = os.sysconf("SC_CLK_TCK")
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / hz, v[7] / hz


def one_run(spec: str, jobs: int, breakdown: bool) -> dict:
    """Cold-compile ``spec`` (model:batch) in this process; a dict of figures."""
    sys.path.insert(0, os.environ.get("FUELC_BENCH_ROOT", ROOT))
    name, batch = spec.split(":")
    t0 = time.perf_counter()
    proto, shapes = build(name, int(batch))
    t1 = time.perf_counter()
    from compiler import compile
    from compiler.frontends.onnx import import_model
    t2 = time.perf_counter()
    graph = import_model(proto, input_shapes=shapes)
    imported = time.perf_counter() - t0
    front = {"build model": t1 - t0, "import fuelc": t2 - t1, "import_model": imported - t2 + t0}
    parent = {}
    clock = lambda: (start, out, c0)  # noqa: E731
    # wrapped as each module is imported: compile() imports them as a plain run does
    after_import(instrument(parent, clock) if breakdown else
                 {"compiler.codegen.jobs": lambda m: watch_front(m, parent, clock)})
    start, out = time.time(), {}
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0, steal0 = cpu_stat()
    me = resource.getrusage(resource.RUSAGE_SELF)
    c0, t0 = time.process_time(), time.perf_counter()
    module = compile(graph, jobs=jobs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    from compiler.codegen import jobs as jobs_module
    if hasattr(jobs_module, "reap_workers"):  # compile() does not wait for its workers' exit
        jobs_module.reap_workers(wait=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers
    workers = after.ru_utime + after.ru_stime - kids.ru_utime - kids.ru_stime
    busy1, steal1 = cpu_stat()
    # what other processes (and the kernel's own threads) ran meanwhile: the
    # machine's busy seconds less this compile's (sampled at the clock tick:
    # +-0.02 s)
    others, stolen = busy1 - busy0 - (time.process_time() - c0) - workers, steal1 - steal0
    me1 = resource.getrusage(resource.RUSAGE_SELF)  # the calling process's system time
    sys_faults = (me1.ru_stime - me.ru_stime, me1.ru_minflt - me.ru_minflt,  # and faults
                  me1.ru_majflt - me.ru_majflt)
    objects = sorted(os.path.join(d, f) for d, _, fs in
                     os.walk(os.path.join(os.environ["FUELC_CACHE_DIR"], "objects")) for f in fs)
    from compiler.codegen.cache import decode_entry
    digest, payloads = hashlib.sha256(), []
    for p in objects:
        with open(p, "rb") as f:
            entry = f.read()
        digest.update(os.path.basename(p).encode() + entry)
        payloads.append(hashlib.sha256(decode_entry(os.path.basename(p)[:-2], entry)).digest())
    out.update({"model": spec, "jobs": jobs, "compile": wall, "cpu": cpu, "cpu_workers": workers,
           "others": others, "stolen": stolen, "sys_faults": sys_faults,
           "import": imported, "front": front, "objects": len(objects), "digest": digest.hexdigest()[:16],
           # the objects alone: their keys (file names) cover the codegen's sources too
           "payloads": hashlib.sha256(b"".join(sorted(payloads))).hexdigest()[:16]})
    if breakdown:
        out["stages"] = dict(module.timings)
        marks = parent.pop("front parts", [])
        out["kernels"] = parent.pop("kernels", {})
        out["timeline"] = [(what, k, s - start, e - start) for what, k, s, e in
                           parent.pop("timeline", [])]
        out["parent"] = {k: [(s - start, e - start) for s, e in v] for k, v in parent.items()}
        out["front parts"] = marks
        tasks = []
        if os.path.exists(os.environ["FUELC_BENCH_LOG"]):
            with open(os.environ["FUELC_BENCH_LOG"]) as f:
                tasks = [json.loads(line) for line in f]
        out["tasks"] = [(pid, t - start, e - start, *k) for pid, t, e, *k in tasks]
    return out


def run_child(spec: str, jobs: int, breakdown: bool, root: str = ROOT,
              pycache: "str | None" = None) -> dict:
    """One cold compile in a fresh process, with the fuelc checkout ``root``;
    Python's bytecode cached in ``pycache`` (None: as the environment says)."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, FUELC_CACHE_DIR=os.path.join(d, "cache"),
                   FUELC_BENCH_LOG=os.path.join(d, "tasks.log"), FUELC_BENCH_ROOT=root,
                   PYTHONPATH=os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]))
        env.pop("FUELC_JOBS", None)
        if pycache is not None:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = pycache
        cmd = [sys.executable, os.path.abspath(__file__), "--child", spec, str(jobs)]
        if breakdown:
            cmd.append("--breakdown")
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if res.returncode:
            raise SystemExit(f"{spec} jobs={jobs} failed:\n{res.stderr}")
        return json.loads(res.stdout.strip().splitlines()[-1])


def show_breakdown(r: dict) -> None:
    print(f"\n{r['model']} jobs={r['jobs']}: compile {r['compile']:.2f} s, cpu {r['cpu']:.2f} s "
          f"+ workers {r['cpu_workers']:.2f} s, {r['objects']} objects")
    print("  before compile(): " + ", ".join(f"{k} {v:.2f}" for k, v in r["front"].items()))
    if "front cpu" in r:
        print(f"  first task submitted at {r['parent']['first task'][0][1]:.2f} s "
              f"({r['front cpu']:.2f} s of cpu)")
    if "front cpu" in r and r.get("front parts"):  # each part's first call, up to the first task
        spans = {}
        for label, t in r["front parts"]:
            name, edge = label[:-2], label[-1]
            if t <= r["front cpu"] and (edge == ">" and name not in spans
                                        or edge == "<" and len(spans.get(name, ())) == 1):
                spans.setdefault(name, []).append(t)
        print("  front, cpu ms from compile()'s start: " + ", ".join(
            f"{k} {v[0] * 1e3:.0f}-" + (f"{v[1] * 1e3:.0f}" if len(v) > 1 else "")
            for k, v in spans.items()) + f", first task {r['front cpu'] * 1e3:.0f}")
    print("  stages: " + ", ".join(f"{k} {v:.2f}" for k, v in r["stages"].items()))
    ends = [e for k, v in r["parent"].items() if k in ("compile here", "store+load worker object")
            for _, e in v]
    if ends:
        print(f"  after the last object: {r['compile'] - max(ends):.2f} s (warm, module)")
    for k, spans in r["parent"].items():
        if k == "first task":
            continue
        d = [e - s for s, e in spans]
        print(f"  parent {k}: {len(d)} x, {sum(d):.2f} s, longest {max(d):.2f} s, "
              f"from {min(s for s, _ in spans):.2f} s to {max(e for _, e in spans):.2f} s")
    tasks = r["tasks"]
    if tasks:
        by_pid = {}
        for pid, s, e, *_ in tasks:
            by_pid.setdefault(pid, []).append((s, e))
        for pid, ts in sorted(by_pid.items()):
            busy = sum(e - s for s, e in ts)
            print(f"  process {pid}: {len(ts)} tasks, busy {busy:.2f} s, first start "
                  f"{min(s for s, _ in ts):.2f} s, last end {max(e for _, e in ts):.2f} s, "
                  f"longest {max(e - s for s, e in ts):.2f} s")
        # the end of the list schedule: how long one process had nothing left to
        # compile while another still compiled (half of it lengthens the compile)
        last = [max(e for _, e in ts) for ts in by_pid.values()]
        here = [e for _, e in r["parent"].get("compile here", [])]
        if here:
            last.append(max(here))
        last.sort()
        if len(last) > 1:
            print(f"  end imbalance: {last[-1] - last[-2]:.3f} s (the last two processes' "
                  "last compiles ended that far apart)")


def show_timeline(r: dict) -> None:
    """``--breakdown``'s timeline: what each process did when, in seconds
    from ``compile()``'s start: the calling process (c) up to its first task,
    its own compiles, folding, the objects it stored for the workers and its
    waits for them; each worker's (w1, ...) tasks. A kernel is named by its
    text's digest (the same in every process), its op and its
    ``expected_cost`` (the order's key; the first cold instance is offered
    before the others are ranked). The end shows which process idled while
    the other finished its last kernel."""
    kernels, parent = r.get("kernels", {}), r["parent"]

    def kernel(k):
        name, cost = kernels.get(k, ["?", None])
        return f"{k} {name}" + (f" (cost {cost})" if cost is not None else "")
    rows = [("c", 0.0, parent["first task"][0][1], "front, to the first task submitted")
            ] if "first task" in parent else []
    rows += [("c", s, e, f"{what} {kernel(k)}") for what, k, s, e in r.get("timeline", [])]
    rows += [("c", s, e, "fold constants") for s, e in parent.get("fold constants", [])]
    if rows and rows[0][2] < min((row[1] for row in rows[1:]), default=0.0):
        rows.append(("c", rows[0][2], min(row[1] for row in rows[1:]),
                     "the other instances' texts, strategies and cache lookups"))
    rows += [("c", s, e, "waits for the workers") for s, e in parent.get("wait for workers", [])
             if e - s >= 0.001]
    pids = sorted({t[0] for t in r["tasks"]})
    rows += [(f"w{pids.index(pid) + 1}", s, e, "task " + kernel(k[0] if k else "?"))
             for pid, s, e, *k in r["tasks"]]
    print("  timeline, s from compile()'s start (c: the calling process, w1...: workers):")
    for who, s, e, what in sorted(rows, key=lambda row: row[1]):
        print(f"    {who:3s} {s:6.3f}-{e:6.3f} ({e - s:.3f})  {what}")
    print(f"    c   compile() returned at {r['compile']:.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=DEFAULT,
                    help="model:batch (benchmarks/models.py, or encoder: benchmarks/encoder.py's)")
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--breakdown", action="store_true")
    ap.add_argument("--redo", type=int, default=2,
                    help="run a compile again, at most this many times, when other processes "
                         "or the hypervisor took CPU during it (default 2)")
    ap.add_argument("--roots", nargs="+", default=[ROOT],
                    help="fuelc checkouts to compare, interleaved (default: this one)")
    ap.add_argument("--cold-bytecode", action="store_true",
                    help="compile fuelc's Python sources in every run (no bytecode cache: "
                         "what PYTHONDONTWRITEBYTECODE=1 does) instead of caching them once")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(one_run(args.models[0], args.jobs[0] if len(args.models) < 2
                                 else int(args.models[1]), args.breakdown)))
        return 0
    for root in args.roots:  # --roots takes every word after it: a cell there is no checkout
        if not os.path.isdir(root):
            ap.error(f"--roots: {root!r} is not a checkout directory (name the model:batch "
                     "cells before --roots: compile_jobs.py audio:1 --roots BEFORE AFTER)")
    with tempfile.TemporaryDirectory() as pycache:
        if args.cold_bytecode:
            pycache = None
        else:  # an installed fuelc has its bytecode: one untimed run per checkout writes it
            for root in args.roots:
                run_child(args.models[0], max(args.jobs), False, root, pycache)
        return measure(args, pycache)


def vcpu_probe(jobs) -> "object | None":
    """The vCPUs' probe (``benchmarks/vcpus.py``) where a compile runs on more
    than one CPU, else None."""
    # the calling process runs no fuelc (each compile is a child, whose
    # checkout comes first on its path), so this checkout's probe is safe here
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from benchmarks import vcpus
    return vcpus.probe_for(max(jobs))


def measure(args, pycache: "str | None") -> int:
    print(f"load average before: {os.getloadavg()}")
    if args.breakdown:
        for spec in args.models:
            for j in args.jobs:
                r = run_child(spec, j, True, args.roots[0], pycache)
                show_breakdown(r)
                show_timeline(r)
        return 0
    times, cpus, digests, payloads, fronts = {}, {}, {}, {}, {}
    probe = vcpu_probe(args.jobs)
    redone, kept_disturbed = collections.Counter(), collections.Counter()
    for n in range(args.runs):
        for spec in args.models:
            # each round in turn the other way round (jobs=1 first, then last), so
            # neither goes first in every pair
            cells = [(root, j) for root in args.roots for j in args.jobs]
            for root, j in cells if n % 2 == 0 else cells[::-1]:
                for attempt in range(args.redo + 1):
                    before = probe.now() if probe else None
                    r = run_child(spec, j, False, root, pycache)
                    state = probe.round_state(before) if probe else "quiet"
                    # other processes or the hypervisor took CPU during the compile, or
                    # the vCPUs were not two whole cores around it (benchmarks/vcpus.py):
                    # run it again (the criterion is the machine's, never our own time)
                    noise = r.get("others", 0.0) + r.get("stolen", 0.0)
                    disturbed = (noise > DISTURBED_S + DISTURBED_CORES * r["compile"]
                                 or state != "quiet")
                    print(f"  {spec} {root} jobs={j}: {r['compile']:.2f} s (cpu: this process "
                          f"{r['cpu']:.2f} s, workers {r['cpu_workers']:.2f} s; others "
                          f"{r.get('others', 0.0):.2f} s, stolen {r.get('stolen', 0.0):.2f} s)"
                          f"  load {os.getloadavg()[0]:.2f}"
                          + (f"  vCPUs {state}" if state != "quiet" else "")
                          + ("  disturbed" if disturbed else "")
                          + ("  (this process: system {:.2f} s, {} + {} major faults)".format(
                              *r["sys_faults"]) if "sys_faults" in r else ""), flush=True)
                    if not disturbed:
                        break
                    (redone if attempt < args.redo else kept_disturbed)[(spec, root, j)] += 1
                times.setdefault((spec, root, j), []).append(r["compile"])
                cpus.setdefault((spec, root, j), []).append((r["cpu"], r["cpu_workers"]))
                if "front cpu" in r:
                    fronts.setdefault((spec, root, j), []).append(r["front cpu"])
                digests.setdefault((spec, root), set()).add(r["digest"])
                payloads.setdefault(spec, set()).add(r["payloads"])
    print(f"load average after: {os.getloadavg()}")
    print("| model:batch | checkout | " + " | ".join(f"jobs={j}" for j in args.jobs)
          + " | ratio | fastest | pair ratios | cpu: this process + workers | cpu / wall | cpu ratio"
          + " | front | predicted on free cores | runs again |")
    for spec in args.models:
        for root in args.roots:
            meds = [statistics.median(times[(spec, root, j)]) for j in args.jobs]
            spread = [f"{min(times[(spec, root, j)]):.2f}-{max(times[(spec, root, j)]):.2f}"
                      for j in args.jobs]
            same = "" if len(digests[(spec, root)]) == 1 else " (objects DIFFER)"
            work = ", ".join("{:.2f} + {:.2f} s".format(
                statistics.median(c for c, _ in cpus[(spec, root, j)]),
                statistics.median(w for _, w in cpus[(spec, root, j)])) for j in args.jobs)
            # how many cores each kept busy; and jobs=1's cpu seconds over the calling
            # process's with the most jobs: its wall time on free cores, when it
            # never waits (a busy machine changes cpu seconds less than wall)
            busy = ", ".join("{:.2f}".format(statistics.median(
                (c + w) / t for (c, w), t in zip(cpus[(spec, root, j)], times[(spec, root, j)])))
                for j in args.jobs)
            first = statistics.median(c for c, _ in cpus[(spec, root, args.jobs[0])])
            last = statistics.median(c for c, _ in cpus[(spec, root, args.jobs[-1])])
            # the parts on N free cores: the front F alone, then every process's
            # remaining CPU seconds split evenly (list scheduling loses a little
            # more: docs/compile-at-scale.md, "Eighth round")
            n, f = args.jobs[-1], fronts.get((spec, root, args.jobs[-1]))
            f = statistics.median(f) if f else None
            workers = statistics.median(w for _, w in cpus[(spec, root, n)])
            predicted = ("-" if f is None or n == args.jobs[0] else
                         f"{first / (f + (last - f + workers) / n):.2f}x")
            # each round's jobs=1 over its jobs=N, run next to each other: the median
            # and the range (a slow spell longer than a pair slows both alike)
            pairs = sorted(a / b for a, b in zip(times[(spec, root, args.jobs[0])],
                                                 times[(spec, root, n)]))
            again = ", ".join(f"{redone[(spec, root, j)]}"
                              + (f" ({kept_disturbed[(spec, root, j)]} kept disturbed)"
                                 if (spec, root, j) in kept_disturbed else "")
                              for j in args.jobs)
            print(f"| {spec} | {root} | " + " | ".join(
                f"{m:.2f} s ({r})" for m, r in zip(meds, spread))
                + f" | {meds[0] / meds[-1]:.2f}x{same}"
                + f" | {min(times[(spec, root, args.jobs[0])]) / min(times[(spec, root, n)]):.2f}x"
                + f" | {statistics.median(pairs):.2f}x ({pairs[0]:.2f}-{pairs[-1]:.2f})"
                + f" | {work} | {busy} | {first / last:.2f}x"
                + f" | {'-' if f is None else f'{f:.2f} s'} | {predicted} | {again} |")
    for spec in args.models:
        if len(args.roots) > 1:  # cache keys differ where the codegen's sources do
            same = len(payloads[spec]) == 1
            print(f"{spec}: the checkouts' objects are {'the same' if same else 'DIFFERENT'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
