"""The ``fuelc`` console script.

    fuelc compile model.onnx -o model.fuel [--target cpu:x86-64-v3] [--input-shape x=1,128]
    fuelc compile program.pt2 -o model.fuel       # torch.export.save(ep, "program.pt2")
    fuelc inspect model.fuel [--ir optimized]
    fuelc run model.fuel --input x=x.npy [--output-dir out/]
    fuelc opt in.mlir --pass-pipeline='builtin.module(fuel-fuse)'      # compiler.opt

``run`` and ``inspect`` are ``runtime.cli`` (the runtime alone: no MLIR is
imported); ``opt`` is ``compiler.opt``. Errors print one ``error: ...`` line
on stderr and exit with status 1 (usage errors: 2).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Optional, Sequence

from runtime.cli import CliError, add_inspect_parser, add_run_parser, file_problem, run_command

DESCRIPTION = """\
fuelc compiles ML models ahead of time into one .fuel file (weights, x86 code,
execution plan) that the fuelc runtime loads and runs without the compiler.

  fuelc compile model.onnx -o model.fuel --target cpu     compile an ONNX model
  fuelc compile program.pt2 -o model.fuel                  ... or a saved torch.export program
  fuelc inspect model.fuel                                 what the file holds
  fuelc run model.fuel --input x=x.npy                     run it on .npy inputs
  fuelc opt file.mlir -p default                           run fuel dialect passes

'fuelc <command> --help' explains each command."""


#: ``fuelc compile`` starts its compile workers before importing anything for
#: a model file at least this large (smaller ones: ``compile()`` decides).
EARLY_POOL_BYTES = 1 << 20


class _Progress:
    """Stage names with elapsed time on stderr (only when enabled). On a
    terminal (``live``) one line is rewritten in place, kernel counts
    included ("codegen 12/40"); elsewhere each stage gets a line of its own
    and the counts are left out."""

    def __init__(self, enabled: bool, live: bool = False):
        self.enabled, self.live = enabled, live
        self.t0 = time.perf_counter()
        self.stage = None

    def __call__(self, stage: str) -> None:
        if not self.enabled:
            return
        line = f"[{time.perf_counter() - self.t0:7.2f}s] {stage}"
        if self.live:
            end = "\n" if stage == "done" else ""
            print(f"\r\x1b[K{line}", end=end, file=sys.stderr, flush=True)
        elif stage.split(" ")[0] != self.stage:
            print(line, file=sys.stderr, flush=True)
        self.stage = stage.split(" ")[0]

    def close(self) -> None:
        """End a live line left open (an error is reported on a line of its own)."""
        if self.live and self.enabled and self.stage not in (None, "done"):
            print(file=sys.stderr, flush=True)


def _parse_shapes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    out = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(d < 0 for d in shape):
            raise CliError(f"--input-shape {spec!r}: expected NAME=D0,D1,... with non-negative "
                           "integers (e.g. --input-shape x=1,128)")
        out[name] = shape
    return out


def _parse_binding(spec: str) -> dict[str, int]:
    out = {}
    for part in spec.split(","):
        name, sep, v = part.partition("=")
        try:
            out[name.strip()] = int(v)
        except ValueError:
            sep = ""
        if not sep or not name.strip() or out.get(name.strip(), -1) < 0:
            raise CliError(f"--binding {spec!r}: expected SYMBOL=SIZE,SYMBOL=SIZE,... with "
                           f"non-negative integers (e.g. --binding batch=1,seq=128)")
    return out


def cmd_compile(args) -> int:
    problem = file_problem(args.model)
    if problem:
        raise CliError(f"{args.model}: {problem}")
    torch_program = args.model.endswith(".pt2")
    if not args.model.endswith(".onnx") and not torch_program:
        raise CliError(f"{args.model}: fuelc compile reads ONNX models (.onnx) and saved "
                       f"torch.export programs (.pt2)")
    shapes = _parse_shapes(args.input_shape)
    if torch_program and shapes:
        raise CliError(f"{args.model}: --input-shape does not apply to a .pt2 program (its "
                       f"shapes were fixed by torch.export; export it again for other shapes)")
    bindings = [_parse_binding(b) for b in args.binding]
    out = args.output or os.path.splitext(args.model)[0] + (".fuelbundle" if bindings else ".fuel")
    from .export import check_output_path
    if bindings and args.side_weights:
        raise CliError("--side-weights applies to one .fuel file; a bundle (--binding) keeps "
                       "the weights in each of its files: drop one of the two")
    if bindings:  # a bundle directory (docs/dynamic-shapes.md)
        if os.path.exists(out) and not os.path.isdir(out):
            raise CliError(f"-o {out}: exists and is not a directory (--binding writes a bundle "
                           f"directory)")
    else:
        check_output_path(out)  # before compiling: a bad -o is reported at once
    from runtime.artifact import read_key_file
    key = read_key_file(args.sign_key, private=True) if args.sign_key else None
    from .codegen import jobs as parallel_jobs
    jobs = parallel_jobs.check_jobs(args.jobs, "--jobs") if args.jobs is not None \
        else parallel_jobs.default_jobs()
    live = sys.stderr.isatty()
    progress = _Progress(not args.quiet and (args.progress or live), live)
    pool = None
    try:
        if jobs > 1 and os.path.getsize(args.model) >= EARLY_POOL_BYTES:
            # the workers import the compiler while this process does
            pool = parallel_jobs.ProcessExecutor(jobs - 1)
        from .targets import parse_target
        target = parse_target(args.target)
        from .driver import compile as compile_graph
        progress(f"import {args.model}")
        if torch_program:
            from .frontends.torch import load_program
            graph = load_program(args.model)
        else:
            from .frontends.onnx import import_model
            graph = import_model(args.model, shapes)
        if bindings and not graph.is_symbolic:
            raise CliError(f"--binding: the imported model has no symbolic dims (inputs "
                           f"{graph.signature()['inputs']}); drop --binding to write one .fuel "
                           f"file")
        # (a symbolic graph compiles its bindings later, in save_bundle, after the
        # early pool is shut down: it starts workers of its own then)
        module = compile_graph(graph, target, progress=progress, jobs=jobs,
                               executor=None if graph.is_symbolic else pool)
        if pool is not None:
            pool.shutdown(wait=False)
            pool = None
        progress(f"export {out}")
        if bindings:
            module.save_bundle(out, bindings, sign_with=key)
        else:
            module.save(out, sign_with=key, weights="side" if args.side_weights else "zip")
        progress("done")
    finally:
        progress.close()
        if pool is not None:
            pool.shutdown(wait=False)
    if bindings:
        sig = ", ".join(f"{n}: {s}" for n, s in module.signature["inputs"].items())
        print(f"wrote {out} (target {target}; inputs {sig}; {len(bindings)} binding(s); "
              f"outputs {', '.join(module.output_names)})")
        return 0
    inputs = module.plan.inputs if hasattr(module, "plan") else module.signature["inputs"]
    sig = ", ".join(f"{n}: {s}" for n, s in inputs.items())
    print(f"wrote {out} (target {target}; inputs {sig}; outputs {', '.join(module.output_names)})")
    return 0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fuelc", description=DESCRIPTION,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True,
                            metavar="{compile,inspect,run,opt}")
    p = sub.add_parser("compile", help="compile an ONNX model or a torch.export program (.pt2) "
                                       "into a .fuel file",
                       description="Import an ONNX model or a saved torch.export program "
                                   "(.pt2, needs torch), compile it for a target and write "
                                   "one .fuel file that 'fuelc run' (or runtime.load) runs.",
                       epilog="examples:\n"
                              "  fuelc compile model.onnx -o model.fuel\n"
                              "  fuelc compile model.onnx -o model.fuel --target cpu:x86-64-v3 "
                              "--input-shape input_ids=1,128",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="the ONNX model (.onnx) or torch.export program (.pt2)")
    p.add_argument("-o", "--output", metavar="FILE.fuel",
                   help="where to write the module (default: the model's name with .fuel)")
    p.add_argument("--target", default="cpu",
                   help="'cpu' (this machine), 'cpu:x86-64-v3', 'cpu:x86-64-v4', 'cpu:znver3', "
                        "... (default: cpu)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="fix the shape of an input with symbolic dims (repeat per input)")
    p.add_argument("--binding", action="append", default=[], metavar="SYM=N,SYM=N",
                   help="keep the model's symbolic dims and write a bundle directory with one "
                        ".fuel per binding of the symbols (repeat per size; docs/dynamic-shapes.md)")
    p.add_argument("--sign-key", metavar="KEYFILE",
                   help="sign the module with the key in KEYFILE: a shared secret "
                        "(HMAC-SHA256), or an Ed25519 private key in PEM (needs cryptography); "
                        "fuelc run --verify-key checks it with the secret or the public key")
    p.add_argument("--side-weights", action="store_true",
                   help="keep the weights in FILE.weights next to FILE.fuel (for weights of "
                        "several GiB; ship both files; docs/artifacts.md)")
    p.add_argument("--progress", action="store_true",
                   help="print the stages as they run on stderr (default: when stderr is a "
                        "terminal, as one line with the kernels done/total)")
    p.add_argument("--quiet", action="store_true", help="print no progress")
    p.add_argument("--jobs", "-j", metavar="N",
                   help="compile kernels in N processes at once, this one included (default: "
                        "$FUELC_JOBS, else the CPUs this process may use)")
    p.set_defaults(func=cmd_compile)
    add_inspect_parser(sub)
    add_run_parser(sub)
    sub.add_parser("opt", help="run a pass pipeline over fuel dialect text (like mlir-opt); "
                               "'fuelc opt --help' for its options", add_help=False)
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "opt":
        from .opt import main as opt_main
        return opt_main(argv[1:])
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # usage errors (argparse printed them): the status, not an exit
        return e.code if isinstance(e.code, int) else 2
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
