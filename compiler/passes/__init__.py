"""fuelc's passes and the machinery that runs them on MLIR's PassManager.

A pass is a small dataclass subclassing ``ModulePass`` whose ``name`` is its
command-line spelling and whose fields are its options; ``@register_pass``
puts it in ``PASSES``. Pipelines are text, as in ``mlir-opt``::

    builtin.module(fuel-fuse{target=cpu},fuel-decompose,cse)

Python passes are looked up in ``PASSES``; every other name goes to MLIR
(``pm.add("cse")``), so native and Python passes mix freely. Public API:

* ``register_pass`` / ``PASSES`` / ``ModulePass`` / ``PassFailure``
* ``build_pass_manager(pipeline, ctx=None, options=None) -> PassManager``
* ``run_pipeline(module, pipeline=DEFAULT_PIPELINE, ...) -> [Diagnostic]``;
  raises ``PassError`` (with a reproducer file and the rerun command).
* ``DEFAULT_PIPELINE``, ``PIPELINES`` (named pipelines; ``resolve_pipeline``).
* ``load_pass_plugin(path_or_module)`` (``fuelc opt --load-pass-plugin``):
  import a user's passes and tables; ``PluginError`` / ``PassRegistrationError``.
* ``register_table(name, factory)`` / ``table_names()``: the binding tables
  pipeline text may name (``table=<name>``); text never imports or calls
  anything else.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import re
import sys
import threading
import time
import types
import typing
from typing import Any, ClassVar, Mapping, Optional, Sequence

from compiler.dialect.types import shared_extents
from compiler.errors import PassError, PipelineSyntaxError
from compiler.mlir import MLIRError, ir, passmanager
from compiler.passes.diagnostics import (
    ERROR, Diagnostic, DiagnosticEngine, collecting, current_engine, emit_error)
from compiler.passes._target import register_table, table_names
from compiler.passes.pipeline import (
    PipelineElement, parse_pipeline, render_pipeline, rerun_command)

PASSES: dict[str, type["ModulePass"]] = {}


class PassFailure(Exception):
    """Raised inside ``ModulePass.apply`` to fail the pass after the
    diagnostics have been emitted (the message is not reported again)."""


@dataclasses.dataclass
class ModulePass:
    """Base of fuelc passes. Subclasses are dataclasses: each field is an
    option, settable as ``name{field=value}`` (``_`` may be spelled ``-``).

    ``apply(module)`` receives the ``builtin.module`` operation and rewrites
    it in place. It reports through ``compiler.passes.diagnostics``; any error
    diagnostic (or ``PassFailure``) fails the pass. An unexpected exception is
    turned into an "internal error" diagnostic, never a crash.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def apply(self, module: "ir.Operation") -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- options ------------------------------------------------------------
    @classmethod
    def option_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_options(cls, explicit: Mapping[str, str],
                     defaults: Optional[Mapping[str, Any]] = None) -> "ModulePass":
        """Build the pass from ``{key: text}`` options (``explicit``, an
        unknown key is an error) over ``defaults`` (global options; keys the
        pass lacks are ignored)."""
        hints = typing.get_type_hints(cls)
        names = cls.option_names()
        kwargs: dict[str, Any] = {}
        for key, value in (defaults or {}).items():
            k = key.replace("-", "_")
            if k in names:
                kwargs[k] = _coerce(cls.name, k, hints[k], value)
        for key, value in explicit.items():
            k = key.replace("-", "_")
            if k not in names:
                known = ", ".join(n.replace("_", "-") for n in names) or "none"
                raise PipelineSyntaxError(
                    f"pass '{cls.name}' has no option '{key}'; its options: {known}")
            kwargs[k] = _coerce(cls.name, k, hints[k], value)
        return cls(**kwargs)

    def option_dict(self) -> dict[str, str]:
        """The options as pipeline text values (for reproducers). Empty
        values (``""``: derived from another option) are left out; option
        values that are objects (a binding table given through the Python
        API) must be rendered by the caller (``render_table_options``)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, (str, tuple, list)) and not v:
                continue
            if not isinstance(v, (str, bool, int, float, tuple, list)):
                continue
            if isinstance(v, bool):
                v = "true" if v else "false"
            elif isinstance(v, (tuple, list)):
                v = ",".join(str(x) for x in v)
            out[f.name.replace("_", "-")] = str(v)
        return out


def _coerce(pass_name: str, key: str, hint, value):
    is_tuple = hint is tuple or typing.get_origin(hint) is tuple
    if not isinstance(value, str):
        return tuple(value) if is_tuple and isinstance(value, (list, tuple)) else value
    v = value.strip()
    try:
        if hint is bool:
            if v.lower() in ("1", "true", "yes", "on"):
                return True
            if v.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(v)
        if hint is int:
            return int(v, 0)
        if hint is float:
            return float(v)
        if is_tuple:
            return tuple(x.strip() for x in v.split(",") if x.strip())
        return v
    except ValueError:
        raise PipelineSyntaxError(
            f"option '{key}' of pass '{pass_name}' expects {getattr(hint, '__name__', hint)}, "
            f"got {value!r}") from None


class PassRegistrationError(PassError, ValueError):
    """A pass that cannot be registered: no name, or a name another pass (a
    fuelc pass, an MLIR pass or another plugin's) already has."""


class PluginError(PassError):
    """A pass plugin that cannot be loaded: a missing file or module, an
    exception while importing it, or a pass name it clashes on. The message is
    one line naming the plugin and the fix."""


def register_pass(cls: type[ModulePass]) -> type[ModulePass]:
    """Class decorator: make ``cls`` available in pipelines as ``cls.name``.

    Raises ``PassRegistrationError`` if the name is taken by another pass
    (registering the same class again, or the same definition imported twice,
    is a no-op) or is one of MLIR's own passes."""
    if not cls.name:
        raise PassRegistrationError(
            f"{cls.__name__} has no pass name; set the class attribute `name` "
            f"(its pipeline spelling, e.g. name = \"my-pass\")")
    builtin = (cls.__module__ or "").split(".")[0] == "compiler"
    if not builtin:
        _ensure_passes_loaded()  # so a clash with a fuelc pass is caught whatever the order
    prev = PASSES.get(cls.name)
    if prev is not None and prev is not cls and not _same_definition(prev, cls):
        raise PassRegistrationError(
            f"pass name '{cls.name}' of {_where(cls)} is already registered by "
            f"{_where(prev)}; give the pass another `name`")
    if prev is None and not builtin and _is_native_pass(cls.name):
        raise PassRegistrationError(
            f"pass name '{cls.name}' of {_where(cls)} is an MLIR pass; give the pass "
            f"another `name`")
    if not dataclasses.is_dataclass(cls) or "__dataclass_fields__" not in cls.__dict__:
        cls = dataclasses.dataclass(cls)
    PASSES[cls.name] = cls
    return cls


def _where(cls: type) -> str:
    mod = cls.__module__ or "?"
    return f"{cls.__qualname__} ({_PLUGINS.get(mod, mod)})"


def _source_file(cls: type) -> Optional[str]:
    f = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return os.path.realpath(f) if f else None


def _same_definition(a: type, b: type) -> bool:
    """The same class statement imported twice (a plugin file that a test
    also imports by module name): same qualified name, same source file."""
    fa = _source_file(a)
    return a.__qualname__ == b.__qualname__ and fa is not None and fa == _source_file(b)


def _is_native_pass(name: str) -> bool:
    """Whether MLIR itself has a pass spelled ``name`` (``cse``)."""
    with ir.Context():
        try:
            passmanager.PassManager.parse(f"builtin.module({name})")
            return True
        except (ValueError, MLIRError):
            return False


# -- plugins ------------------------------------------------------------------

#: module name -> what it was loaded as (an absolute .py path or a module
#: name): the argument a reproducer's ``--load-plugin`` needs.
_PLUGINS: dict[str, str] = {}


def _is_path(spec) -> bool:
    return isinstance(spec, os.PathLike) or str(spec).endswith(".py") or os.sep in str(spec)


def load_pass_plugin(spec) -> "types.ModuleType":
    """Import a pass plugin: a ``.py`` file (a path) or an importable module
    name. Its passes register themselves (``@register_pass``); any other
    ``ModulePass`` subclass it defines with a ``name`` is registered too, and
    so are the tables it gives ``register_table``. Loading the same plugin
    twice is a no-op. Raises ``PluginError`` (one line: the plugin, what
    went wrong, the fix) and leaves no half-registered pass behind."""
    import importlib
    import importlib.util
    _ensure_passes_loaded()
    label = os.fspath(spec)
    before = dict(PASSES)
    if _is_path(spec):
        path = os.path.realpath(label)
        if os.path.isdir(path):
            raise PluginError(f"cannot load pass plugin {label!r}: it is a directory (give a "
                              ".py file, or an importable module name)")
        if not os.path.isfile(path):
            raise PluginError(f"cannot load pass plugin {label!r}: no such file (give a .py "
                              f"file that exists, or an importable module name)")
        if not path.endswith(".py"):
            raise PluginError(f"cannot load pass plugin {label!r}: not a Python file (a pass "
                              "plugin is a .py file, or an importable module name)")
        digest = hashlib.sha1(path.encode()).hexdigest()[:10]
        stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
        modname = f"fuelc_plugin_{stem}_{digest}"
        if modname in sys.modules:
            return sys.modules[modname]
        try:
            mspec = importlib.util.spec_from_file_location(modname, path)
            module = importlib.util.module_from_spec(mspec)
            sys.modules[modname] = module
            _PLUGINS[modname] = path
            mspec.loader.exec_module(module)
            _register_defined_passes(module)
        except BaseException as e:  # anything a plugin raises, but Ctrl-C
            if isinstance(e, KeyboardInterrupt):
                raise
            sys.modules.pop(modname, None)
            _PLUGINS.pop(modname, None)
            _restore(before)
            raise _plugin_error(label, e, path) from None
        return module
    try:
        module = importlib.import_module(label)
        _PLUGINS.setdefault(module.__name__, label)
        _register_defined_passes(module)
    except BaseException as e:  # anything a plugin raises, but Ctrl-C
        if isinstance(e, KeyboardInterrupt):
            raise
        _restore(before)
        raise _plugin_error(label, e, None) from None
    return module


def _register_defined_passes(module) -> None:
    for obj in list(vars(module).values()):
        if (isinstance(obj, type) and issubclass(obj, ModulePass) and obj is not ModulePass
                and obj.__module__ == module.__name__ and obj.name
                and PASSES.get(obj.name) is not obj):
            register_pass(obj)


def _restore(before: Mapping[str, type]) -> None:
    PASSES.clear()
    PASSES.update(before)


def _plugin_error(label: str, e: BaseException, path: Optional[str]) -> PluginError:
    if isinstance(e, PassRegistrationError):
        return PluginError(f"pass plugin {label!r}: {e}")
    where = ""
    tb = e.__traceback__
    while tb is not None:  # the innermost frame in the plugin file
        if path and os.path.realpath(tb.tb_frame.f_code.co_filename) == path:
            where = f" at line {tb.tb_lineno}"
        tb = tb.tb_next
    if isinstance(e, SyntaxError) and e.lineno:
        where = f" at line {e.lineno}"
    detail = (str(e).strip().splitlines() or [""])[0]
    missing = getattr(e, "name", None) if isinstance(e, ModuleNotFoundError) else None
    fix = ("give a .py file path or a module importable from the current directory"
           if not path and missing and (label + ".").startswith(missing + ".")
           else "fix the plugin")
    return PluginError(f"cannot load pass plugin {label!r}: {type(e).__name__}{where}: "
                       f"{detail} ({fix})")


def plugin_spec(module_name: str) -> str:
    """What ``--load-plugin`` needs to load module ``module_name`` again."""
    return _PLUGINS.get(module_name, module_name)


# -- pipelines ----------------------------------------------------------------

DEFAULT_PIPELINE = ("builtin.module(fuel-fuse{runtime=false},fuel-decompose,fuel-fuse-runtime,"
                    "fuel-reconcile-dtypes,fuel-prepack-weights,fuel-split-gemv,"
                    "fuel-cse,fuel-dce,canonicalize)")

PIPELINES: dict[str, str] = {
    "default": DEFAULT_PIPELINE,
    # The default without packing constant matmul weights at compile time
    # (fuel-prepack-weights holds a packed copy of each in memory until save).
    "no-prepack": DEFAULT_PIPELINE.replace("fuel-prepack-weights,", ""),
    # Fuse nothing: every fused op the target cannot run becomes primitives.
    "no-fusion": "builtin.module(fuel-decompose,fuel-reconcile-dtypes,fuel-cse,fuel-dce)",
    # Lower every fused op to its recipe (the "base map"), e.g. for checking.
    "base-map": "builtin.module(fuel-decompose{all=true},fuel-cse,fuel-dce)",
}


def resolve_pipeline(pipeline: str) -> str:
    """A named pipeline (key of ``PIPELINES``) or pipeline text, as text."""
    return PIPELINES.get(pipeline.strip(), pipeline)


#: One module per pass under compiler/passes/ (each registers itself).
_PASS_MODULES = ("fuse", "fuse_runtime", "decompose", "reconcile_dtypes", "fuel_cse", "fuel_dce", "to_linalg",
                 "prepack", "split_gemv")


def _ensure_passes_loaded() -> None:
    # The pass modules register themselves on import; imported lazily so the
    # registry (this module) stays importable on its own.
    import importlib
    for mod in _PASS_MODULES:
        importlib.import_module(f"compiler.passes.{mod}")


def known_passes_text() -> str:
    _ensure_passes_loaded()
    return ", ".join(sorted(PASSES))


def _unknown_pass(name: str, pipeline: str, mlir_msg: str = "") -> PipelineSyntaxError:
    _ensure_passes_loaded()
    import difflib  # only for the message: 1 ms of every compile's front otherwise
    close = difflib.get_close_matches(name, list(PASSES) + ["cse", "canonicalize", "symbol-dce"], n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    detail = f"\nMLIR says: {mlir_msg.strip().splitlines()[0]}" if mlir_msg else ""
    return PipelineSyntaxError(
        f"unknown pass '{name}' in pipeline {pipeline!r}{hint}. fuelc passes: "
        f"{known_passes_text()}; any MLIR pass (cse, canonicalize, symbol-dce, ...) "
        f"is accepted too.{detail}")


@dataclasses.dataclass
class _RunState:
    failed_pass: Optional[str] = None
    verify_types: bool = False  # check the fuel type rules after each fuelc/plugin pass


class BuiltPipeline:
    """A ``PassManager`` plus what fuelc knows about it: the pass instances
    (kept alive here), the canonical pipeline text with every option made
    explicit (for reproducers) and which Python pass failed last."""

    def __init__(self, pm, text: str, instances: list[ModulePass], state: _RunState,
                 notes: list[str], plugins: list[str]):
        self.pm = pm
        self.text = text
        self.instances = instances
        self.state = state
        self.notes = notes        # what the text cannot say (an in-memory table)
        self.plugins = plugins    # modules to --load-plugin for the named tables


def build_pipeline(pipeline: str, ctx: Optional["ir.Context"] = None,
                   options: Optional[Mapping[str, Any]] = None) -> BuiltPipeline:
    """Parse ``pipeline`` (text or a ``PIPELINES`` name) and build the
    ``PassManager``. ``options`` are defaults for every Python pass that has
    an option of that name (``{"backend": "cuda"}``). Raises
    ``PipelineSyntaxError`` for bad syntax, an unknown pass or option."""
    _ensure_passes_loaded()
    text = resolve_pipeline(pipeline)
    elems = parse_pipeline(text)
    ctx = ctx or ir.Context.current
    state = _RunState()
    instances: list[ModulePass] = []
    notes: list[str] = []
    plugins: list[str] = []
    with ctx:
        pm = passmanager.PassManager("builtin.module")
        for elem in elems:
            _add_element(pm, elem, text, options, instances, state, notes, plugins)
    return BuiltPipeline(pm, render_pipeline(elems), instances, state, notes, plugins)


def build_pass_manager(pipeline: str, ctx: Optional["ir.Context"] = None,
                       options: Optional[Mapping[str, Any]] = None):
    """The ``PassManager`` for ``pipeline`` (see ``build_pipeline``)."""
    return build_pipeline(pipeline, ctx, options).pm


def _contains_fuel_pass(elem: PipelineElement) -> Optional[str]:
    if elem.is_anchor:
        for c in elem.children:
            hit = _contains_fuel_pass(c)
            if hit:
                return hit
        return None
    return elem.name if elem.name in PASSES else None


def _add_element(pm, elem: PipelineElement, text: str, options, instances, state,
                 notes: list[str], plugins: list[str]) -> None:
    if elem.is_anchor:
        inner = _contains_fuel_pass(elem)
        if inner:
            raise PipelineSyntaxError(
                f"pass '{inner}' runs on the whole module; write it at the top level, "
                f"not nested under '{elem.name}(...)' in {text!r}")
        _add_native(pm, elem, text)
        return
    cls = PASSES.get(elem.name)
    if cls is None:
        if elem.name.startswith("fuel-"):
            raise _unknown_pass(elem.name, text)
        _add_native(pm, elem, text)
        return
    inst = cls.from_options(elem.options, options)
    # Fold the effective options back into the element so the canonical
    # pipeline text (and the reproducer command) is exact.
    elem.options = inst.option_dict()
    _render_table_option(inst, elem, notes, plugins)
    instances.append(inst)
    pm.add(_make_runner(inst, state), name=type(inst).__name__, argument=cls.name,
           description=cls.summary)


def _render_table_option(inst: ModulePass, elem: PipelineElement, notes: list[str],
                         plugins: list[str]) -> None:
    """Spell a ``table`` option as text: a table object by the registered
    name it is (``cpu`` for ``compiler.targets.table_for("cpu")``), an unnamed one
    as the ``target=cpu`` option with a note that the run used an in-memory
    table; and record the plugin module that registers a named table."""
    from runtime.binding import KernelBindingTable

    from compiler.passes._target import plugin_of, table_name
    table = getattr(inst, "table", None)
    if isinstance(table, KernelBindingTable):
        name = table_name(table)
        if name is not None:
            elem.options["table"] = name
        else:
            if "target" in inst.option_names() and not elem.options.get("target"):
                elem.options["target"] = "cpu"
            notes.append(f"pass '{inst.name}' ran with an in-memory binding table "
                         f"({type(table).__name__}, registered under no name); the command "
                         f"uses the CPU target's table (target=cpu) instead")
            return
    name = elem.options.get("table")
    for plugin in (plugin_of(name) if name else None, _plugin_module(type(inst))):
        if plugin and plugin not in plugins:
            plugins.append(plugin)


def _plugin_module(cls: type) -> Optional[str]:
    """The plugin a pass class outside fuelc comes from (the module name or
    the .py path it was loaded as), or None."""
    mod = cls.__module__ or ""
    if mod.split(".")[0] in ("compiler", "runtime") or mod == "__main__":
        return None
    return plugin_spec(mod)


def _add_native(pm, elem: PipelineElement, text: str) -> None:
    try:
        pm.add(elem.text)
    except (ValueError, MLIRError) as e:
        msg = str(e)
        if "does not refer to a registered pass" in msg:
            raise _unknown_pass(elem.name, text, msg) from None
        raise PipelineSyntaxError(
            f"MLIR rejected pipeline element '{elem.text}' of {text!r}: {msg.strip()}") from None


class _LiveOpErased(Exception):
    """A pass erased an op whose results are still used (refused, so the
    IR never holds a dangling use the bindings would read)."""


def _checked_erase(erase):
    def guarded(self):
        operation = getattr(self, "operation", self)
        for i, r in enumerate(operation.results):
            use = next(iter(r.uses), None)
            if use is not None:
                raise _LiveOpErased(
                    f"erase() of '{operation.name}' whose result #{i} is still used by "
                    f"'{use.owner.name}'; replace its uses first "
                    "(result.replace_all_uses_with(...)) or erase the users before it")
        return erase(self)
    guarded.__wrapped__ = erase
    return guarded


class _EraseGuard:
    """While a fuel pass runs, ``erase()`` refuses an op whose results still
    have uses: MLIR would free it and leave its users pointing at freed
    memory, which the verifier after the pass (or anything else) would read.
    Installed while at least one pass runs (passes in several threads share
    one installation)."""

    _lock = threading.Lock()
    _depth = 0
    _saved: list = []

    def __enter__(self):
        cls_ = type(self)
        with cls_._lock:
            if cls_._depth == 0:
                cls_._saved = [(c, c.__dict__["erase"])
                               for c in (ir._OperationBase, ir.Operation, ir.OpView)
                               if "erase" in c.__dict__]
                for c, erase in cls_._saved:
                    c.erase = _checked_erase(erase)
            cls_._depth += 1
        return self

    def __exit__(self, *exc):
        cls_ = type(self)
        with cls_._lock:
            cls_._depth -= 1
            if cls_._depth == 0:
                for c, erase in cls_._saved:
                    c.erase = erase
        return False


def _after_pass_errors(op) -> list[tuple[object, str]]:
    """The fuel ops a pass left ill-typed (each op's shape/dtype rule, and
    types fuel cannot represent): MLIR's verifier checks only base types."""
    from compiler.dialect.verify import type_errors
    return type_errors(op)


def _broke_types(op, original, pipeline, options, built: BuiltPipeline,
                 eng: DiagnosticEngine) -> bool:
    """After a pipeline ran on ``op``: if it left fuel ops ill-typed that its
    input ``original`` (a copy) had well-typed, rerun it on ``original`` with
    the check after every pass, and report the pass that broke them."""
    bad = _after_pass_errors(op)
    if not bad or _after_pass_errors(original):
        return False
    rerun = build_pipeline(pipeline, op.context, options)
    rerun.state.verify_types = True
    with collecting(DiagnosticEngine()) as local:
        try:
            rerun.pm.run(original)
        except MLIRError as e:
            local.extend_from_mlir(getattr(e, "error_diagnostics", ()))
    for d in local.errors:
        eng.report(d)
    built.state.failed_pass = rerun.state.failed_pass
    if not local.errors:  # the rerun did not break them: name no pass
        for bad_op, msg in bad[:3]:
            emit_error(bad_op, f"after the pipeline: {msg} (a pass broke the fuel type rules; "
                               "rerun with FUELC_VERIFY_EACH=1 to check after every pass)")
    return True


def _make_runner(inst: ModulePass, state: _RunState):
    def run(op, pass_):
        outer = current_engine()
        with collecting(DiagnosticEngine()) as local:
            failed = False
            try:
                with _EraseGuard(), shared_extents():
                    inst.apply(op)
            except PassFailure:
                failed = True
            except BaseException as e:  # a bug in the pass: report, never crash or exit
                if isinstance(e, KeyboardInterrupt):
                    raise
                where, tb = "", e.__traceback__
                while tb is not None:  # the innermost frame outside this guard
                    if tb.tb_frame.f_code.co_name != "guarded":
                        where = (f" at {os.path.basename(tb.tb_frame.f_code.co_filename)}:"
                                 f"{tb.tb_lineno}")
                    tb = tb.tb_next
                emit_error(op, f"internal error in pass '{inst.name}': "
                               f"{type(e).__name__}: {e}{where}")
            failed = failed or bool(local.errors)
            if not failed and state.verify_types:
                bad = _after_pass_errors(op)
                for bad_op, msg in bad[:3]:
                    emit_error(bad_op, f"after pass '{inst.name}': {msg} (the pass broke the "
                                       "fuel type rules)")
                failed = bool(bad)
        for d in local.diagnostics:
            if outer is not None:
                outer.report(d)
            elif d.severity != ERROR:
                print(d.render(), file=sys.stderr)
        if failed:
            state.failed_pass = inst.name
            pass_.signal_pass_failure()
    run.__name__ = inst.name
    return run


_repro_counter = itertools.count()


def write_reproducer(ir_text: str, pipeline_text: str,
                     directory: Optional[str] = None, flags: Sequence[str] = (),
                     notes: Sequence[str] = ()) -> tuple[str, str]:
    """Write ``ir_text`` to a new file in ``directory`` (default
    ``compiler.reproducer.reproducer_dir()``: ``$FUELC_REPRO_DIR`` or
    ``./fuelc-reproducers``); return (path, rerun command). ``flags`` are
    driver flags the command must keep (``--allow-unregistered-dialect``,
    ``--load-plugin=M``); ``notes`` go into the file's header."""
    from compiler.reproducer import reproducer_dir
    directory = directory or str(reproducer_dir())
    os.makedirs(directory, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = os.path.join(directory,
                        f"fuelc-reproducer-{stamp}-{os.getpid()}-{next(_repro_counter)}.mlir")
    command = rerun_command(path, pipeline_text, flags)
    with open(path, "w") as f:
        f.write(f"// fuelc reproducer: {command}\n")
        for note in notes:
            f.write(f"// note: {note}\n")
        f.write(ir_text)
        if not ir_text.endswith("\n"):
            f.write("\n")
    return path, command


def run_pipeline(module, pipeline: str = DEFAULT_PIPELINE, *,
                 options: Optional[Mapping[str, Any]] = None,
                 engine: Optional[DiagnosticEngine] = None,
                 print_ir_after_all: bool = False,
                 print_ir_after_failure: bool = False,
                 reproducer: bool = True,
                 reproducer_dir: Optional[str] = None,
                 input_text: Optional[str] = None,
                 rerun_flags: Sequence[str] = (),
                 verify_types: bool = True,
                 verify_each: Optional[bool] = None) -> list[Diagnostic]:
    """Run ``pipeline`` on ``module`` (an ``ir.Module`` or its operation) in
    place and return the diagnostics emitted (warnings, remarks).

    On failure raises ``PassError`` carrying every diagnostic, having written
    the input IR (``input_text``, default the module as printed before the
    run) to a reproducer file; the message ends with the exact command that
    reruns the failing pipeline (with ``rerun_flags``, the driver flags the
    run used, and ``--load-plugin`` for the plugin tables it names).
    ``PipelineSyntaxError`` (a ``PassError``) for a bad pipeline, before
    anything runs. With ``verify_types`` (the default) and well-typed input,
    the fuel ops' type rules are checked once, after the pipeline; when they
    fail, the pipeline reruns on a copy of its input with the check after
    every fuelc or plugin pass, and the pass that broke them is reported.
    ``verify_each`` (default: ``$FUELC_VERIFY_EACH=1``) checks after every
    pass in the first run (debugging). A pass that erases an op whose results
    are still used fails too (an internal error in that pass, never a crash).
    """
    op = module.operation if hasattr(module, "operation") else module
    built = build_pipeline(pipeline, op.context, options)
    if verify_each is None:
        verify_each = os.environ.get("FUELC_VERIFY_EACH", "") == "1"
    # Only a pass that takes well-typed IR to ill-typed IR is at fault: input
    # that is ill-typed already (tests of passes on such IR) is not re-checked.
    built.state.verify_types = verify_types and verify_each and not _after_pass_errors(op)
    original = op.clone() if verify_types and not verify_each else None  # for the rerun
    if print_ir_after_all or print_ir_after_failure:
        built.pm.enable_ir_printing(print_after_all=print_ir_after_all,
                                    print_after_failure=print_ir_after_failure)
    snapshot = (input_text if input_text is not None else str(op)) if reproducer else None
    eng = engine if engine is not None else DiagnosticEngine()
    with collecting(eng):
        try:
            built.pm.run(op)
            if original is None or not _broke_types(op, original, pipeline, options, built, eng):
                return list(eng.diagnostics)
            failure = ""
        except MLIRError as e:
            eng.extend_from_mlir(getattr(e, "error_diagnostics", ()))
            failure = e
    which = f" in pass '{built.state.failed_pass}'" if built.state.failed_pass else ""
    first = next((d for d in eng.diagnostics if d.severity == ERROR), None)
    msg = f"pass pipeline failed{which}"
    if first is not None:
        msg += f": {first.message}"
    elif str(failure):
        msg += f": {str(failure).strip().splitlines()[0]}"
    path = command = None
    if snapshot is not None:
        try:
            flags = list(rerun_flags)
            flags += [f"--load-plugin={p}" for p in built.plugins
                      if f"--load-plugin={p}" not in flags]
            path, command = write_reproducer(snapshot, built.text, reproducer_dir, flags,
                                             built.notes)
            msg += f"\nreproducer written to {path}\nrerun with: {command}"
            msg += "".join(f"\nnote: {n}" for n in built.notes)
        except OSError as oe:
            msg += f"\n(could not write a reproducer: {oe})"
    raise PassError(msg, eng.diagnostics, path, command)


__all__ = [
    "PASSES", "ModulePass", "PassFailure", "register_pass", "build_pass_manager",
    "build_pipeline", "run_pipeline", "DEFAULT_PIPELINE", "PIPELINES",
    "resolve_pipeline", "write_reproducer", "known_passes_text", "register_table",
    "table_names", "load_pass_plugin", "plugin_spec", "PluginError", "PassRegistrationError",
]
