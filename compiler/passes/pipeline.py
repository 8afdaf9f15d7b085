"""The textual pass-pipeline syntax, parsed in Python.

``PassManager.parse`` knows only MLIR's C++ passes, so fuelc parses pipeline
text itself and hands native elements back to MLIR verbatim::

    pipeline := element (',' element)*
    element  := NAME ['{' options '}'] | NAME '(' pipeline ')'
    options  := (key ['=' value])*           # space-separated, MLIR style

``builtin.module(...)`` around the whole pipeline is optional.
"""
from __future__ import annotations

import dataclasses
import re
import shlex
from typing import Optional

from compiler.errors import PipelineSyntaxError

_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+")


@dataclasses.dataclass
class PipelineElement:
    """One pipeline element: a pass with options, or an anchor with children."""

    name: str
    options: dict[str, str] = dataclasses.field(default_factory=dict)
    options_text: str = ""                     # raw text between the braces
    children: Optional[list["PipelineElement"]] = None  # set for `anchor(...)`
    text: str = ""                             # the element as written

    @property
    def is_anchor(self) -> bool:
        return self.children is not None


def _scan_balanced(src: str, i: int, open_ch: str, close_ch: str) -> int:
    """Index just past the bracket matching ``src[i] == open_ch``."""
    depth = 0
    quote = None
    j = i
    while j < len(src):
        c = src[j]
        if quote:
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise PipelineSyntaxError(
        f"unbalanced '{open_ch}' at column {i + 1} in pass pipeline {src!r}")


def parse_options(text: str, where: str = "") -> dict[str, str]:
    """``"a=1 b={x y} c"`` -> ``{"a": "1", "b": "x y", "c": "true"}``."""
    out: dict[str, str] = {}
    i = 0
    n = len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        m = _NAME_RE.match(text, i)
        if not m:
            raise PipelineSyntaxError(
                f"malformed option text {text!r}{where}: expected 'key=value' at column {i + 1}")
        key = m.group(0)
        i = m.end()
        if i < n and text[i] == "=":
            i += 1
            if i < n and text[i] == "{":
                end = _scan_balanced(text, i, "{", "}")
                value = text[i + 1:end - 1]
            elif i < n and text[i] in "\"'":
                end = text.find(text[i], i + 1)
                if end < 0:
                    raise PipelineSyntaxError(f"unterminated quote in options {text!r}{where}")
                value = text[i + 1:end]
                end += 1
            else:
                end = i
                while end < n and not text[end].isspace():
                    end += 1
                value = text[i:end]
            i = end
        else:
            value = "true"
        out[key] = value
    return out


def parse_pipeline(src: str) -> list[PipelineElement]:
    """Parse pipeline text into elements; strips an outer ``builtin.module(...)``.
    Raises ``PipelineSyntaxError`` naming the column of the problem."""
    elems = _parse_list(src, 0, len(src), src)
    if len(elems) == 1 and elems[0].name == "builtin.module" and elems[0].is_anchor:
        return elems[0].children
    return elems


def _parse_list(src: str, i: int, end: int, full: str) -> list[PipelineElement]:
    out: list[PipelineElement] = []
    expect_elem = True
    while i < end:
        c = src[i]
        if c.isspace():
            i += 1
            continue
        if c == ",":
            if expect_elem:
                raise PipelineSyntaxError(
                    f"empty pipeline element at column {i + 1} in {full!r}")
            expect_elem = True
            i += 1
            continue
        if not expect_elem:
            raise PipelineSyntaxError(
                f"expected ',' at column {i + 1} in pass pipeline {full!r}")
        m = _NAME_RE.match(src, i)
        if not m:
            raise PipelineSyntaxError(
                f"expected a pass name at column {i + 1} in pass pipeline {full!r}, got {c!r}")
        start = i
        name = m.group(0)
        i = m.end()
        elem = PipelineElement(name)
        if i < end and src[i] == "{":
            close = _scan_balanced(src, i, "{", "}")
            elem.options_text = src[i + 1:close - 1].strip()
            elem.options = parse_options(elem.options_text, f" of pass '{name}'")
            i = close
        elif i < end and src[i] == "(":
            close = _scan_balanced(src, i, "(", ")")
            elem.children = _parse_list(src, i + 1, close - 1, full)
            i = close
        elem.text = src[start:i]
        out.append(elem)
        expect_elem = False
    if expect_elem and out:
        raise PipelineSyntaxError(f"pass pipeline {full!r} ends with ','")
    return out


def render_pipeline(elems: list[PipelineElement]) -> str:
    """Canonical text of ``elems`` wrapped in ``builtin.module(...)``."""
    return f"builtin.module({_render(elems)})"


def _render(elems: list[PipelineElement]) -> str:
    parts = []
    for e in elems:
        if e.is_anchor:
            parts.append(f"{e.name}({_render(e.children)})")
        elif e.options:
            opts = " ".join(f"{k}={_quote(v)}" for k, v in e.options.items())
            parts.append(f"{e.name}{{{opts}}}")
        else:
            parts.append(e.name)
    return ",".join(parts)


def _quote(v: str) -> str:
    return f"{{{v}}}" if (not v or any(ch.isspace() for ch in v)) else v


def rerun_command(path: str, pipeline_text: str, flags=()) -> str:
    """The exact shell command that reruns ``pipeline_text`` on ``path``
    with the driver ``flags`` (e.g. ``--load-plugin=tests.passes.kernel_tables``)."""
    extra = "".join(f" {shlex.quote(f)}" for f in flags)
    return (f"python -m compiler.opt {shlex.quote(path)} "
            f"--pass-pipeline={shlex.quote(pipeline_text)}{extra}")
