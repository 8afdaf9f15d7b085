"""Run a lit RUN line in this process instead of through ``bash``.

A RUN line is a small shell command: pipelines (``|``, every stage must
succeed, like ``bash -o pipefail``) joined by ``&&`` or ``;``, whose stages
are ``not``-prefixed commands with redirections (``2>&1``, ``>FILE``,
``>/dev/null``, ``2>FILE``, ``<FILE``). The commands fuelc's tests use run
as function calls with their stdin, stdout and stderr captured:

* ``python -m compiler.opt ARGS`` / ``fuelc opt ARGS`` /
  ``python -m compiler.cli ARGS`` / ``fuelc ARGS``: ``compiler.opt.main`` or
  ``compiler.cli.main``;
* ``python -m compiler.codegen.cuda ARGS``: that module's ``main``;
* ``filecheck ARGS``: the ``filecheck`` package's ``main`` (or, if that
  package cannot be imported, the ``filecheck`` script beside
  ``sys.executable``);
* ``echo``, ``true``, ``false``, ``not``.

``parse`` returns None for anything else (another command, quoting or shell
syntax it does not know: ``$``, globs, subshells); the caller then runs the
line through ``bash`` as before. Each command sees a copy of the pass and
table registries, so a plugin one command loads is gone for the next, as in
a fresh process, and runs in the line's working directory with that
directory first on ``sys.path`` (``python -m`` does the same). Output is
captured at the file-descriptor level, so what MLIR itself prints
(``--print-ir-after-all``) is captured too, in order with Python's output.
A command that crashes the interpreter takes this process with it: the
passes guard the crashes known (see ``docs/architecture.md``, "A pass").
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import pathlib
import subprocess
import sys
import tempfile
from typing import Callable, Mapping, Optional

#: unquoted characters that make a word something this runner does not interpret
_UNSUPPORTED = set("$`*?[]{}()!#~\n")
_OPERATORS = ("2>&1", "2>>", "2>", "1>", ">>", "&&", "||", ">", "<", "|", ";", "&")


class Unsupported(Exception):
    """Shell syntax or a command the in-process runner does not interpret."""


@dataclasses.dataclass
class Stage:
    argv: list[str]
    negations: int = 0
    # redirections in order: (fd, target) with target a path or "&1"
    redirects: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    stdin_file: Optional[str] = None


@dataclasses.dataclass
class Pipeline:
    stages: list[Stage]
    joiner: str = ";"      # how it follows the previous pipeline: ";" or "&&"


def tokenize(line: str) -> list[tuple[str, bool]]:
    """Words and operators of ``line``: ``(text, is_operator)``. Raises
    ``Unsupported`` for syntax beyond quoting and the operators above."""
    out: list[tuple[str, bool]] = []
    i, n = 0, len(line)
    word: Optional[list[str]] = None
    while i < n:
        c = line[i]
        if c in " \t":
            if word is not None:
                out.append(("".join(word), False))
                word = None
            i += 1
            continue
        op = next((o for o in _OPERATORS if line.startswith(o, i)), None)
        # "2>" is a redirection only at the start of a word
        if op is not None and not (op[0] in "12" and word is not None):
            if word is not None:
                out.append(("".join(word), False))
                word = None
            if op in ("||", "&", ">>", "2>>"):
                raise Unsupported(op)
            out.append((op, True))
            i += len(op)
            continue
        word = word if word is not None else []
        if c == "'":
            j = line.find("'", i + 1)
            if j < 0:
                raise Unsupported("unterminated quote")
            word.append(line[i + 1:j])
            i = j + 1
        elif c == '"':
            j, buf = i + 1, []
            while j < n and line[j] != '"':
                if line[j] in "$`":
                    raise Unsupported(line[j])
                if line[j] == "\\" and j + 1 < n and line[j + 1] in '"\\':
                    j += 1
                buf.append(line[j])
                j += 1
            if j >= n:
                raise Unsupported("unterminated quote")
            word.append("".join(buf))
            i = j + 1
        elif c == "\\":
            if i + 1 >= n:
                raise Unsupported("trailing backslash")
            word.append(line[i + 1])
            i += 2
        else:
            if c in _UNSUPPORTED:
                raise Unsupported(c)
            word.append(c)
            i += 1
    if word is not None:
        out.append(("".join(word), False))
    return out


def parse(line: str) -> Optional[list[Pipeline]]:
    """The pipelines of ``line``, or None when the runner cannot run it."""
    try:
        tokens = tokenize(line)
        pipelines = [Pipeline([])]
        stage: Optional[Stage] = None
        it = iter(tokens)
        for text, is_op in it:
            if is_op and text in ("&&", ";"):
                if stage is None:
                    raise Unsupported(text)
                pipelines[-1].stages.append(stage)
                pipelines.append(Pipeline([], text))
                stage = None
            elif is_op and text == "|":
                if stage is None:
                    raise Unsupported(text)
                pipelines[-1].stages.append(stage)
                stage = None
            elif is_op:
                stage = stage or Stage([])
                if text == "2>&1":
                    stage.redirects.append((2, "&1"))
                    continue
                target, target_is_op = next(it, (None, True))
                if target is None or target_is_op:
                    raise Unsupported(text)
                if text == "<":
                    stage.stdin_file = target
                else:
                    stage.redirects.append((2 if text == "2>" else 1, target))
            else:
                stage = stage or Stage([])
                if text == "not" and not stage.argv:
                    stage.negations += 1
                else:
                    stage.argv.append(text)
        if stage is None:
            raise Unsupported("empty command")
        pipelines[-1].stages.append(stage)
        for p in pipelines:
            for s in p.stages:
                if not s.argv or _command(s.argv) is None:
                    raise Unsupported(" ".join(s.argv) or "empty command")
        return pipelines
    except Unsupported:
        return None


# -- the commands ---------------------------------------------------------------

def _opt(args: list[str]) -> int:
    from compiler.opt import main
    return main(args)


def _cli(args: list[str]) -> int:
    from compiler.cli import main
    return main(args)


def _cuda(args: list[str]) -> int:
    from compiler.codegen.cuda.pipeline import main
    return main(args)


def _filecheck(args: list[str]) -> int:
    try:
        from filecheck.main import main
    except ImportError:
        exe = pathlib.Path(sys.executable).parent / "filecheck"
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "filecheck"]
        proc = subprocess.run(cmd + args, input=sys.stdin.read(), capture_output=True,
                              text=True, timeout=300)
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        return proc.returncode
    return main(["filecheck", *args]) or 0


def _echo(args: list[str]) -> int:
    sys.stdout.write(" ".join(args) + "\n")
    return 0


_MODULES: Mapping[str, Callable[[list[str]], int]] = {
    "compiler.opt": _opt, "compiler.cli": _cli, "compiler.codegen.cuda": _cuda,
    "filecheck": _filecheck,
}


def _command(argv: list[str]):
    """(function, its arguments) for ``argv``, or None."""
    head, rest = argv[0], argv[1:]
    if head == "python" and len(rest) >= 2 and rest[0] == "-m" and rest[1] in _MODULES:
        return _MODULES[rest[1]], rest[2:]
    if head == "fuelc":
        if rest[:1] == ["opt"]:
            return _opt, rest[1:]
        return _cli, rest
    if head == "filecheck":
        return _filecheck, rest
    if head == "echo":
        return _echo, rest
    if head in ("true", "false") and not rest:
        return (lambda _a, rc=int(head == "false"): rc), rest
    return None


# -- running --------------------------------------------------------------------

def _fuelc_module(name: Optional[str]) -> bool:
    return (name or "").split(".")[0] in ("compiler", "runtime")


@contextlib.contextmanager
def _isolated(cwd: str, env: Mapping[str, str]):
    """A fresh process's view for one command: only fuelc's own passes and
    binding tables registered (what plugins and tests registered is hidden,
    and their modules are out of ``sys.modules``, so ``--load-plugin`` loads
    them afresh), the working directory ``cwd`` first on ``sys.path``, the
    environment ``env``. Everything is put back afterwards."""
    import compiler.passes as passes
    from compiler.passes import _target
    passes._ensure_passes_loaded()
    registries = (passes.PASSES, passes._PLUGINS, _target._TABLES, _target._ORIGIN)
    saved = [dict(r) for r in registries]
    foreign = set(passes._PLUGINS)
    foreign |= {c.__module__ for c in passes.PASSES.values() if not _fuelc_module(c.__module__)}
    foreign |= {m for m in _target._ORIGIN.values() if not _fuelc_module(m)}
    foreign.discard("__main__")
    hidden = {name: sys.modules.pop(name) for name in foreign if name in sys.modules}
    modules = set(sys.modules)
    old_cwd, old_path, old_env = os.getcwd(), list(sys.path), dict(os.environ)
    try:
        passes.PASSES.clear()
        passes.PASSES.update({k: c for k, c in saved[0].items() if _fuelc_module(c.__module__)})
        passes._PLUGINS.clear()
        builtin_tables = {k for k, m in saved[3].items() if _fuelc_module(m)}
        for reg, before in ((_target._TABLES, saved[2]), (_target._ORIGIN, saved[3])):
            reg.clear()
            reg.update({k: v for k, v in before.items() if k in builtin_tables})
        os.chdir(cwd)
        sys.path.insert(0, cwd)
        os.environ.clear()
        os.environ.update(env)
        yield
    finally:
        os.environ.clear()
        os.environ.update(old_env)
        sys.path[:] = old_path
        os.chdir(old_cwd)
        loaded = set(passes._PLUGINS) | {m for m in _target._ORIGIN.values()
                                        if not _fuelc_module(m)}
        for name in set(sys.modules) - modules:
            if name in loaded or name in foreign or name.startswith("fuelc_plugin_"):
                del sys.modules[name]
        sys.modules.update(hidden)
        for name, module in hidden.items():   # a package's attribute too
            parent, _, child = name.rpartition(".")
            if parent in sys.modules:
                setattr(sys.modules[parent], child, module)
        for reg, before in zip(registries, saved):
            reg.clear()
            reg.update(before)


def _open_sink(target: str, cwd: str):
    path = target if os.path.isabs(target) else os.path.join(cwd, target)
    return open(path, "w+b")


def run_stage(stage: Stage, stdin: bytes, cwd: str, env: Mapping[str, str]
              ) -> tuple[int, bytes, bytes]:
    """Run one stage on ``stdin``; returns (exit status, stdout, stderr)
    after its redirections (what went to a file is not returned)."""
    func, args = _command(stage.argv)
    if stage.stdin_file is not None:
        path = stage.stdin_file
        with open(path if os.path.isabs(path) else os.path.join(cwd, path), "rb") as f:
            stdin = f.read()
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(tempfile.TemporaryFile())
        err = stack.enter_context(tempfile.TemporaryFile())
        sinks = {1: out, 2: err}
        for fd, target in stage.redirects:
            sinks[fd] = sinks[1] if target == "&1" else stack.enter_context(
                _open_sink(target, cwd))
        rc = _call(func, args, stdin, sinks[1], sinks[2], cwd, env)
        out.seek(0)
        err.seek(0)
        return rc, out.read(), err.read()


def _call(func, args, stdin: bytes, out, err, cwd, env) -> int:
    """``func(args)`` with fds 1 and 2 (and ``sys.stdout``/``sys.stderr``,
    unbuffered onto them) pointing at ``out``/``err`` and ``sys.stdin``
    reading ``stdin``. Returns its exit status."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved_fds = (os.dup(1), os.dup(2))
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    new_out = new_err = None
    try:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        new_out = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                   errors="backslashreplace", write_through=True)
        new_err = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                   errors="backslashreplace", write_through=True)
        sys.stdin = io.StringIO(stdin.decode("utf-8", errors="replace"))
        sys.stdout, sys.stderr = new_out, new_err
        with _isolated(cwd, env):
            try:
                rc = func(list(args))
            except SystemExit as e:
                code = e.code
                rc = code if isinstance(code, int) else (0 if code is None else 1)
                if code is not None and not isinstance(code, int):
                    print(code, file=sys.stderr)
            except KeyboardInterrupt:
                raise
            except BaseException:  # an uncaught exception: Python's exit status 1
                import traceback
                traceback.print_exc()
                rc = 1
        return 0 if rc is None else int(rc)
    finally:
        for stream in (new_out, new_err):
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.flush()
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        os.close(saved_fds[0])
        os.close(saved_fds[1])


@dataclasses.dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def run_line(pipelines: list[Pipeline], cwd, env: Mapping[str, str]) -> Result:
    """Run parsed ``pipelines`` (``parse``) like ``bash -o pipefail -c``."""
    cwd = os.fspath(cwd)
    rc, stdout, stderr = 0, b"", b""
    for pipeline in pipelines:
        if pipeline.joiner == "&&" and rc != 0:
            break
        data, rc = b"", 0
        for stage in pipeline.stages:
            stage_rc, data, err = run_stage(stage, data, cwd, env)
            stderr += err
            for _ in range(stage.negations):
                stage_rc = 0 if stage_rc > 0 else 1
            if stage_rc != 0:
                rc = stage_rc        # pipefail: the last failing stage's status
        stdout += data
    return Result(rc, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"))


def run_command(argv, *, stdin: str = "", cwd=None, env: Optional[Mapping[str, str]] = None
                ) -> Result:
    """Run one command (``["python", "-m", "compiler.opt", ...]``,
    ``["fuelc", "opt", ...]``, ``["filecheck", ...]``) in this process, as
    ``subprocess.run(argv, input=stdin, capture_output=True, text=True)``
    would; ``cwd`` defaults to the current directory, ``env`` to
    ``os.environ``. Raises ``Unsupported`` for a command it does not know."""
    argv = [str(a) for a in argv]
    if not argv or _command(argv) is None:
        raise Unsupported(f"not a command this runner knows: {argv[:3]}")
    rc, out, err = run_stage(Stage(argv), stdin.encode(), os.fspath(cwd or os.getcwd()),
                             dict(os.environ if env is None else env))
    return Result(rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
