"""Diagnostics emitted by fuelc passes, in MLIR's format and severities.

The pinned bindings expose only ``Location.emit_error``: there is no
``emit_warning``/``emit_remark``, and an error emitted during a pipeline that
then *succeeds* is discarded by the bindings' error capture. So passes report
through ``emit_error`` / ``emit_warning`` / ``emit_remark`` here, which record
a ``Diagnostic`` (severity, location, message) in the active
``DiagnosticEngine``; errors are additionally sent through
``Location.emit_error`` so a pipeline run on a bare ``PassManager`` still
fails with an ``MLIRError`` that carries the message.

The driver (``compiler.opt``) merges these with MLIR's own diagnostics (parse,
verifier and native-pass errors), prints them as ``file:line:col: error: ...``
and checks them under ``--verify-diagnostics``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
import threading
from typing import Iterator, Optional

ERROR, WARNING, REMARK, NOTE = "error", "warning", "remark", "note"
SEVERITIES = (ERROR, WARNING, REMARK, NOTE)

_LOC_RE = re.compile(r'loc\("(?P<file>(?:[^"\\]|\\.)*)":(?P<line>\d+):(?P<col>\d+)')


@dataclasses.dataclass(frozen=True)
class Diagnostic:
    """One diagnostic. ``line``/``col`` are 1-based; 0/None when the location
    is unknown or not a file location."""

    severity: str
    message: str
    file: Optional[str] = None
    line: Optional[int] = None
    col: Optional[int] = None
    notes: tuple["Diagnostic", ...] = ()

    def render(self, filename: Optional[str] = None) -> str:
        """``file:line:col: severity: message`` (mlir-opt's format)."""
        if self.line is not None:
            name = filename if (filename and self.file in (None, "-", "")) else (self.file or "-")
            head = f"{name}:{self.line}:{self.col or 0}: "
        else:
            head = "loc(unknown): "
        out = f"{head}{self.severity}: {self.message}"
        for n in self.notes:
            out += "\n" + n.render(filename)
        return out


def location_parts(loc) -> tuple[Optional[str], Optional[int], Optional[int]]:
    """(file, line, col) of an ``ir.Location`` (first file location found in
    a fused/callsite/name location), or (None, None, None)."""
    for attr in ("filename",):
        if hasattr(loc, attr):
            try:
                return loc.filename, loc.start_line, loc.start_col
            except Exception:  # pragma: no cover - binding quirks
                break
    m = _LOC_RE.search(str(loc))
    if m:
        return m.group("file"), int(m.group("line")), int(m.group("col"))
    return None, None, None


def from_mlir(diag) -> Diagnostic:
    """Convert an ``ir.Diagnostic``/``ir.DiagnosticInfo`` to a ``Diagnostic``."""
    sev = str(diag.severity).rsplit(".", 1)[-1].lower()
    f, line, col = location_parts(diag.location)
    notes = tuple(from_mlir(n) for n in getattr(diag, "notes", ()) or ())
    return Diagnostic(sev, str(diag.message), f, line, col, notes)


class DiagnosticEngine:
    """Collects the diagnostics of one pipeline run, in emission order."""

    def __init__(self, echo: bool = False, filename: Optional[str] = None):
        self.diagnostics: list[Diagnostic] = []
        self.echo = echo
        self.filename = filename

    def report(self, diag: Diagnostic) -> None:
        self.diagnostics.append(diag)
        if self.echo:
            print(diag.render(self.filename), file=sys.stderr)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == ERROR]

    def extend_from_mlir(self, mlir_diags) -> None:
        """Add MLIR's own diagnostics (e.g. ``MLIRError.error_diagnostics``),
        skipping the errors fuelc passes already recorded here."""
        seen = {(d.message, d.line, d.col) for d in self.errors}
        for md in mlir_diags or ():
            d = from_mlir(md)
            if d.severity == ERROR and (d.message, d.line, d.col) in seen:
                continue
            self.report(d)


_state = threading.local()


def _stack() -> list[DiagnosticEngine]:
    if not hasattr(_state, "stack"):
        _state.stack = []
    return _state.stack


@contextlib.contextmanager
def collecting(engine: Optional[DiagnosticEngine] = None) -> Iterator[DiagnosticEngine]:
    """Make ``engine`` (a new one by default) the target of ``emit_*`` calls."""
    engine = engine if engine is not None else DiagnosticEngine()
    _stack().append(engine)
    try:
        yield engine
    finally:
        _stack().pop()


def current_engine() -> Optional[DiagnosticEngine]:
    st = _stack()
    return st[-1] if st else None


def _location_of(target):
    """An ``ir.Location`` from an op, an OpView, a Value or a Location."""
    if hasattr(target, "location") and not hasattr(target, "emit_error"):
        return target.location
    if hasattr(target, "owner") and hasattr(target, "type"):  # a Value
        owner = target.owner
        return getattr(owner, "location", None)
    return target


def emit(target, severity: str, message: str) -> Diagnostic:
    """Report ``message`` at ``target`` (op, value or location)."""
    if severity not in SEVERITIES:
        raise ValueError(f"unknown severity {severity!r}; expected one of {SEVERITIES}")
    loc = _location_of(target)
    f, line, col = location_parts(loc) if loc is not None else (None, None, None)
    diag = Diagnostic(severity, message, f, line, col)
    engine = current_engine()
    if engine is not None:
        engine.report(diag)
    elif severity != ERROR:
        print(diag.render(), file=sys.stderr)
    if severity == ERROR and loc is not None and hasattr(loc, "emit_error"):
        loc.emit_error(message)
    return diag


def emit_error(target, message: str) -> Diagnostic:
    return emit(target, ERROR, message)


def emit_warning(target, message: str) -> Diagnostic:
    return emit(target, WARNING, message)


def emit_remark(target, message: str) -> Diagnostic:
    return emit(target, REMARK, message)


# -- --verify-diagnostics -----------------------------------------------------

_EXPECT_RE = re.compile(
    r"expected-(?P<sev>error|warning|remark|note)"
    r"(?:@(?P<where>[+-]\d+|above|below|unknown))?"
    r"(?:\s*\{\{(?P<msg>.*?)\}\})")


# Anything that starts like a directive; ``_EXPECT_RE`` must then match there.
_DIRECTIVE_RE = re.compile(r"expected-(?P<word>[A-Za-z]+)\b")


def malformed_expectations(text: str, first_line: int = 1, filename: str = "-") -> list[str]:
    """One failure message per ``expected-...`` directive of ``text`` that
    ``parse_expectations`` would not understand (an unknown severity, a bad
    ``@`` target, a missing or unterminated ``{{...}}``), naming its line."""
    out = []
    for i, line in enumerate(text.split("\n")):
        if "//" not in line:
            continue
        comment = line[line.index("//"):]
        for m in _DIRECTIVE_RE.finditer(comment):
            good = _EXPECT_RE.match(comment, m.start())
            if good is not None:
                continue
            word = m.group("word")
            why = (f"unknown severity '{word}' (expected error, warning, remark or note)"
                   if word not in SEVERITIES else
                   "expected 'expected-<severity>[@+N|@-N|@above|@below|@unknown] {{message}}'")
            out.append(f"{filename}:{first_line + i}: malformed diagnostic directive "
                       f"'{comment[m.start():].strip()}': {why}")
    return out


@dataclasses.dataclass
class Expectation:
    severity: str
    message: str
    line: Optional[int]          # None: expected at an unknown location
    comment_line: int
    matched: bool = False


def parse_expectations(text: str, first_line: int = 1) -> list[Expectation]:
    """The ``// expected-<severity>[@+N|@-N|@unknown] {{text}}`` comments of
    ``text``; line numbers count from ``first_line``."""
    out = []
    for i, line in enumerate(text.split("\n")):
        if "//" not in line:
            continue
        comment = line[line.index("//"):]
        for m in _EXPECT_RE.finditer(comment):
            lineno = first_line + i
            where = m.group("where")
            if where == "unknown":
                target = None
            elif where in ("above",):
                target = lineno - 1
            elif where in ("below",):
                target = lineno + 1
            elif where:
                target = lineno + int(where)
            else:
                target = lineno
            out.append(Expectation(m.group("sev"), m.group("msg"), target, lineno))
    return out


def verify(diags: list[Diagnostic], expectations: list[Expectation],
           filename: str = "-") -> list[str]:
    """Match diagnostics against expectations (substring match on the
    message, exact severity and line). Returns the failure messages: every
    unexpected diagnostic and every expectation not produced."""
    failures = []
    flat: list[Diagnostic] = []
    for d in diags:
        flat.append(d)
        flat.extend(d.notes)
    for d in flat:
        hit = next((e for e in expectations if not e.matched and e.severity == d.severity
                    and e.line == d.line and e.message in d.message), None)
        if hit is None and d.severity == NOTE:
            continue  # notes are only checked when expected (as in mlir-opt)
        if hit is None:
            failures.append(f"{Diagnostic(d.severity, d.message, d.file, d.line, d.col).render(filename)}"
                            f"\n  (unexpected {d.severity})")
        else:
            hit.matched = True
    for e in expectations:
        if not e.matched:
            where = f"line {e.line}" if e.line is not None else "an unknown location"
            failures.append(f"{filename}:{e.comment_line}: expected {e.severity} "
                            f"\"{e.message}\" at {where} was not produced")
    return failures
