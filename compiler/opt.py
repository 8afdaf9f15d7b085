"""``fuelc opt``: an ``mlir-opt``-style driver for fuel dialect text.

    python -m compiler.opt in.mlir --pass-pipeline='builtin.module(fuel-fuse,cse)'
    python -m compiler.opt - -p default < in.mlir          # stdin, named pipeline

Prints the resulting module(s) to stdout (or ``-o FILE``) and diagnostics to
stderr as ``file:line:col: severity: message``. Flags follow mlir-opt:
``--split-input-file`` (chunks separated by ``// -----`` run independently;
line numbers stay those of the whole file), ``--verify-diagnostics``
(``// expected-error {{...}}`` / ``expected-warning`` / ``expected-remark``
with ``@+N``/``@-N``/``@above``/``@below``/``@unknown``),
``--print-ir-after-all``, ``--print-ir-after-failure``, ``--load-pass-plugin
FILE.py|MODULE`` (alias ``--load-plugin``: load a Python file or module whose
passes and binding tables the pipeline may then name; pipeline text itself
never runs code).
Exit status: 0 on success, 1 on a failed chunk, a diagnostics mismatch or a
plugin that cannot be loaded, 2 on bad usage (unknown pass, unreadable file).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from compiler.dialect.verify import check_nesting, type_errors, unsupported_types
from compiler.errors import PassError, PipelineSyntaxError
from compiler.mlir import MLIRError, ir
from compiler.passes import (
    DEFAULT_PIPELINE, PIPELINES, PluginError, build_pipeline, known_passes_text,
    load_pass_plugin, plugin_spec, run_pipeline)
from compiler.passes.diagnostics import (
    Diagnostic, DiagnosticEngine, location_parts, malformed_expectations, parse_expectations,
    verify)

SPLIT_MARKER = "// -----"


def _make_context() -> "ir.Context":
    from compiler.dialect import make_context
    return make_context()


def split_input(text: str) -> list[tuple[int, str]]:
    """Split on lines that are exactly ``// -----``; returns (first line
    number, chunk text) pairs."""
    chunks: list[tuple[int, str]] = []
    start = 1
    cur: list[str] = []
    for i, line in enumerate(text.split("\n"), start=1):
        if line.strip() == SPLIT_MARKER:
            chunks.append((start, "\n".join(cur)))
            cur = []
            start = i + 1
        else:
            cur.append(line)
    chunks.append((start, "\n".join(cur)))
    return chunks


def parse_and_run(text: str, pipeline: str, engine: DiagnosticEngine, *, first_line: int = 1,
                  options=None, allow_unregistered_dialect: bool = False,
                  verify_types: bool = True, **run_kwargs) -> Optional[str]:
    """Parse ``text`` (one module; its first line is line ``first_line`` of
    the file), check its types and run ``pipeline`` on it. Returns the
    printed module, or None after reporting why to ``engine`` (malformed or
    ill-typed input). ``PassError`` from ``run_pipeline`` (which gets
    ``run_kwargs``) propagates, its diagnostics in ``engine``."""
    ctx = _make_context()
    if allow_unregistered_dialect:
        ctx.allow_unregistered_dialects = True
    # Leading newlines keep line numbers those of the whole file.
    padded = "\n" * (first_line - 1) + text
    too_deep = check_nesting(padded)
    if too_deep is not None:
        line, col, msg = too_deep
        engine.report(Diagnostic("error", msg, None, line, col))
        return None
    with ctx, ir.Location.unknown():
        try:
            module = ir.Module.parse(padded)
        except MLIRError as e:
            engine.extend_from_mlir(getattr(e, "error_diagnostics", ()))
            if not engine.diagnostics:
                engine.report(Diagnostic("error", f"malformed input: {str(e).strip()}"))
            return None
        # Types IRDL cannot check, before any pass: element types and sizes
        # fuel cannot represent (always), each op's shape/dtype rule.
        ill_typed = unsupported_types(module) or (type_errors(module) if verify_types else [])
        if ill_typed:
            for op, msg in ill_typed:
                f, line, col = location_parts(op.location)
                engine.report(Diagnostic("error", msg, f, line, col))
            return None
        run_pipeline(module, pipeline, options=options, engine=engine, input_text=text,
                     verify_types=verify_types, **run_kwargs)
        return str(module)


def process_chunk(text: str, first_line: int, pipeline: str, args,
                  filename: str) -> tuple[Optional[str], list[Diagnostic], bool]:
    """Parse and run one chunk. Returns (output IR or None, diagnostics, ok)."""
    engine = DiagnosticEngine()
    try:
        out = parse_and_run(
            text, pipeline, engine, first_line=first_line, options=args.option_defaults,
            allow_unregistered_dialect=args.allow_unregistered_dialect,
            verify_types=not args.no_verify_types,
            verify_each=True if args.verify_each_pass else None,
            print_ir_after_all=args.print_ir_after_all,
            print_ir_after_failure=args.print_ir_after_failure,
            reproducer=not args.verify_diagnostics and not args.no_reproducer,
            reproducer_dir=args.reproducer_dir, rerun_flags=rerun_flags(args))
    except PipelineSyntaxError:
        raise
    except PassError as e:
        if e.reproducer:
            print(f"fuelc: {filename}:{first_line}: pass pipeline failed; reproducer "
                  f"written to {e.reproducer}\nfuelc: rerun with: {e.command}",
                  file=sys.stderr)
        if not any(d.severity == "error" for d in engine.diagnostics):
            engine.report(Diagnostic("error", str(e).splitlines()[0]))
        return None, engine.diagnostics, False
    return out, engine.diagnostics, out is not None


def rerun_flags(args) -> list[str]:
    """The flags of this run that a reproducer's command must keep."""
    flags = [f"--load-plugin={m}" for m in args.load_plugin]
    if args.allow_unregistered_dialect:
        flags.append("--allow-unregistered-dialect")
    if args.no_verify_types:
        flags.append("--no-verify-types")
    return flags


def load_plugins(specs: Sequence[str]) -> list[str]:
    """Load each pass plugin (a ``.py`` path or a module name; it registers
    its passes and tables). Returns them as a rerun command must spell them
    (a path made absolute). Raises ``PluginError`` naming the plugin."""
    return [plugin_spec(load_pass_plugin(spec).__name__) for spec in specs]


def _parse_args(argv: Optional[Sequence[str]]):
    p = argparse.ArgumentParser(
        prog="fuelc opt", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Named pipelines: " + ", ".join(f"{k}" for k in PIPELINES)
               + f".\nDefault pipeline: {DEFAULT_PIPELINE}")
    p.add_argument("input", nargs="?", default="-", help="input .mlir file, or '-' for stdin")
    p.add_argument("--pass-pipeline", "-p", dest="pipeline", default="builtin.module()",
                   help="pipeline text, e.g. 'builtin.module(fuel-fuse{backend=cpu},cse)', "
                        "or a named pipeline")
    p.add_argument("-o", dest="output", default="-", help="output file (default stdout)")
    p.add_argument("--split-input-file", action="store_true")
    p.add_argument("--verify-diagnostics", action="store_true")
    p.add_argument("--print-ir-after-all", action="store_true")
    p.add_argument("--print-ir-after-failure", action="store_true")
    p.add_argument("--allow-unregistered-dialect", action="store_true")
    p.add_argument("--reproducer-dir", default=None,
                   help="where failing pipelines write their input IR (default: "
                        "$FUELC_REPRO_DIR, else ./fuelc-reproducers)")
    p.add_argument("--no-reproducer", action="store_true")
    p.add_argument("--verify-each-pass", action="store_true",
                   help="check the fuel type rules after every pass, not once after the "
                        "pipeline (debugging; also FUELC_VERIFY_EACH=1)")
    p.add_argument("--no-verify-types", action="store_true",
                   help="skip checking each fuel op's result types against its shape/dtype "
                        "rule before the pipeline (to test passes on ill-typed IR)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="default option for every fuelc pass that has it (e.g. backend=cuda)")
    p.add_argument("--load-pass-plugin", "--load-plugin", dest="load_plugin", action="append",
                   default=[], metavar="FILE.py|MODULE",
                   help="load a pass plugin first: a Python file or an importable module "
                        "whose ModulePass classes and register_table calls become passes "
                        "and tables the pipeline can name (--load-plugin is an alias)")
    p.add_argument("--list-passes", action="store_true", help="list fuelc's passes and exit")
    return p.parse_args(argv)


def _input_problem(path: str):
    """Why ``path`` is not an input file (None when it is): a directory, or
    a device or socket (``/dev/zero`` would be read forever). A FIFO is
    input, as from a shell's process substitution."""
    import stat
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        return e.strerror.lower() if e.strerror else str(e)
    if stat.S_ISDIR(mode):
        return "it is a directory, not a file"
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        return "it is a device or socket, not a file"
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parse_args(argv)
    try:
        args.load_plugin = load_plugins(args.load_plugin)
    except PluginError as e:
        print(f"fuelc opt: error: {e}", file=sys.stderr)
        return 1
    if args.list_passes:
        from compiler.passes import PASSES
        known_passes_text()
        for name in sorted(PASSES):
            cls = PASSES[name]
            opts = " ".join(o.replace("_", "-") for o in cls.option_names())
            print(f"{name:24s} {cls.summary}" + (f"  [options: {opts}]" if opts else ""))
        return 0
    args.option_defaults = {}
    for kv in args.option:
        k, sep, v = kv.partition("=")
        if not sep:
            print(f"fuelc opt: error: --option expects KEY=VALUE, got {kv!r}", file=sys.stderr)
            return 2
        args.option_defaults[k] = v
    filename = "<stdin>" if args.input == "-" else args.input
    problem = None if args.input == "-" else _input_problem(args.input)
    if problem:
        print(f"fuelc opt: error: cannot read {filename}: {problem}", file=sys.stderr)
        return 2
    try:
        text = sys.stdin.read() if args.input == "-" else open(args.input).read()
    except (OSError, UnicodeDecodeError) as e:
        print(f"fuelc opt: error: cannot read {filename}: {e}", file=sys.stderr)
        return 2
    # Validate the pipeline once, up front, so a typo is one clear error.
    try:
        build_pipeline(args.pipeline, _make_context(), args.option_defaults)
    except PipelineSyntaxError as e:
        print(f"fuelc opt: error: {e}", file=sys.stderr)
        return 2

    chunks = split_input(text) if args.split_input_file else [(1, text)]
    outputs: list[str] = []
    ok_all = True
    verify_failures: list[str] = []
    for first_line, chunk in chunks:
        out, diags, ok = process_chunk(chunk, first_line, args.pipeline, args, filename)
        if args.verify_diagnostics:
            exp = parse_expectations(chunk, first_line)
            verify_failures += malformed_expectations(chunk, first_line, filename)
            verify_failures += verify(diags, exp, filename)
        else:
            for d in diags:
                print(d.render(filename), file=sys.stderr)
            ok_all = ok_all and ok
        if out is not None:
            outputs.append(out)
    result = ("\n" + SPLIT_MARKER + "\n").join(o.rstrip("\n") + "\n" for o in outputs)
    if args.output == "-":
        sys.stdout.write(result)
    else:
        try:
            with open(args.output, "w") as f:
                f.write(result)
        except OSError as e:
            print(f"fuelc opt: error: cannot write {args.output}: {e}", file=sys.stderr)
            return 2
    if args.verify_diagnostics:
        for f in verify_failures:
            print(f, file=sys.stderr)
        return 1 if verify_failures else 0
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
