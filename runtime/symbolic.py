"""Symbolic ``.fuel`` files: one file for every size (``docs/dynamic-shapes.md``,
"One file for every size").

The manifest of a symbolic file is the template of a static one: wherever an
integer of ``entry_points``, ``plan`` or ``kernels`` depends on the sizes (a
value's shape, a reshape target, a view's arguments, a kernel's call shapes
and descriptor layouts) it holds an expression ``{"sym": [[coefficient,
[names...]], ...]}`` of the symbols, and a kernel step whose object depends
on the matmul row class of its call is bound ``{"kind": "classes", ...,
"classes": {class: {"object", "instance", "revision"}}}`` (``runtime.rows``).
``"symbolic"`` holds the signature (``runtime.bundle.signature_json``), an
``"example"`` binding and, where one binding's plan differs from the
template's (the symbols at their lower bounds: a batch of 1), that binding's
static plan fields (``"fixed"``: ``binding``, ``entry_points``, ``plan``,
``kernels``).

``settle(manifest, binding)`` is the static manifest of one binding: every
expression evaluated, every class binding resolved to its object. A call
binds the symbols from its inputs' shapes (``ShapeSignatureError`` on a
contradiction), then runs the module of that binding, settled on its first
use and kept for the ``KEEP`` most recent bindings: a repeated shape costs a
dict lookup more than a static module's call.
"""
from __future__ import annotations

import collections
import math
import threading

import numpy as np

from .dtype import DType
from .errors import FuelError, PlanError
from .layout import Layout
from .manifest import (ArtifactCodeError, ManifestFieldError, Check, Map,
                       object_revision, validate, DTYPE)
from .rows import row_class
from .symbols import Sym, bind_symbols, shape_text

SYM = "sym"
#: The manifest fields whose integers may be expressions.
TEMPLATE_FIELDS = ("entry_points", "plan", "kernels")
ROW_CLASSES = ("few_rows", "unpacked", "aliased_packed", "packed")


def _bounds_ok(v) -> bool:
    return (isinstance(v, list) and len(v) == 2 and type(v[0]) is int and v[0] >= 0
            and (v[1] is None or type(v[1]) is int and v[1] >= v[0]))


SYMBOLIC_SCHEMA = {
    "inputs": Map({"shape": list, "dtype": DTYPE}),
    "symbols": Check(Map(list), lambda v: v and all(k.isidentifier() and _bounds_ok(b)
                                                    for k, b in v.items()),
                     "is not a non-empty map of symbol names to [lo, hi] (hi null: unbounded)"),
    "equalities": [list],
    "example": Map(int),
    "iotas": [str],
    "fixed?": [{"binding": Map(int), "entry_points": list, "plan": dict, "kernels": list}],
}
CLASS_ENTRY = {"object": str, "instance": str, "revision": str}
VARIANT = {"ones?": [bool], "layouts": list,
           "classes": Check(Map(CLASS_ENTRY), lambda v: v and set(v) <= set(ROW_CLASSES),
                            f"is not a non-empty map of {', '.join(ROW_CLASSES)} to objects")}


def expression_value(expr: dict, values) -> int:
    """The value of an expression ``{"sym": terms}`` at ``values``; a factor
    is a symbol's name or a floor quotient ``{"floor": terms, "by": s}``
    (``Sym.to_json``: an extent of a window strided over a symbolic image)."""
    return _terms_value(expr[SYM], values)


def _terms_value(terms, values) -> int:
    def factor(n):
        return values[n] if isinstance(n, str) else _terms_value(n["floor"], values) // n["by"]
    return sum(c * math.prod(factor(n) for n in names) for c, names in terms)


def _factor_names(terms) -> set:
    """The symbols the terms (and their floor factors) name."""
    return {x for _, m in terms for n in m
            for x in ((n,) if isinstance(n, str) else _factor_names(n["floor"]))}


def _terms_ok(terms, symbols) -> bool:
    """Whether ``terms`` are ``[[coefficient, [factor, ...]], ...]`` with int
    coefficients and factors that are symbols or floor quotients of such
    terms by an int >= 1."""
    def factor_ok(n):
        if isinstance(n, str):
            return n in symbols
        return (isinstance(n, dict) and set(n) == {"floor", "by"} and type(n["by"]) is int
                and n["by"] >= 1 and _terms_ok(n["floor"], symbols))
    return isinstance(terms, list) and all(
        isinstance(t, list) and len(t) == 2 and type(t[0]) is int and isinstance(t[1], list)
        and all(factor_ok(n) for n in t[1]) for t in terms)


def dim_from_json(v, bounds):
    """One extent of a signature in JSON: an int or ``Sym.to_json`` terms."""
    return Sym.from_json(v, bounds) if isinstance(v, list) else int(v)


def shape_json_text(shape) -> str:
    """A manifest shape as text: ints and expressions (``batch*seq``)."""
    return shape_text([Sym.from_json(d[SYM], {n: (1, None) for n in _factor_names(d[SYM])})
                       if isinstance(d, dict) else d for d in shape])


def read_signature(doc: dict):
    """``(symbols, inputs, equalities)`` of a signature written by
    ``runtime.bundle.signature_json``: name -> (lo, hi); name -> (shape,
    DType); ``[(lhs, rhs, where)]``."""
    bounds = {n: (int(b[0]), None if b[1] is None else int(b[1]))
              for n, b in doc["symbols"].items()}
    inputs = {n: (tuple(dim_from_json(d, bounds) for d in r["shape"]), DType.parse(r["dtype"]))
              for n, r in doc["inputs"].items()}
    equalities = [(dim_from_json(a, bounds), dim_from_json(b, bounds), str(w))
                  for a, b, w in doc["equalities"]]
    return bounds, inputs, equalities


def iota_constants(m: dict, template: dict) -> dict:
    """The ``Iota`` constants (``symbolic.iotas``) of the settled manifest ``m``."""
    names = set(template["symbolic"]["iotas"])
    return {c["name"]: np.arange(c["shape"][0], dtype=np.float32)
            for c in m["plan"].get("constants", ()) if c["name"] in names}


def _layouts(b: dict) -> list[Layout]:
    return [Layout(tuple(lay["shape"]), tuple(lay["stride"]), lay["offset"])
            for lay in b["layouts"]]


def settle(m: dict, values: dict, path: str = "") -> dict:
    """The static manifest of the binding ``values`` (see the module
    docstring). A class no object was exported for raises
    ``ArtifactCodeError`` naming the step, the class and the binding."""
    def ev(v):
        if isinstance(v, dict):
            return expression_value(v, values) if SYM in v else {k: ev(x) for k, x in v.items()}
        return [ev(x) for x in v] if isinstance(v, list) else v
    own = next((f for f in m["symbolic"].get("fixed", ()) if f["binding"] == values), None)
    if own is not None:  # a binding with a static plan of its own (checked at load)
        return {**{k: v for k, v in m.items() if k != "symbolic"},
                **{k: own[k] for k in TEMPLATE_FIELDS}}
    out = {k: ev(v) if k in TEMPLATE_FIELDS else v for k, v in m.items() if k != "symbolic"}
    for k, rec in enumerate(out["kernels"]):
        b = rec["binding"]
        if b["kind"] != "classes":
            if b["kind"] == "object":  # the template's revision was checked at load
                rec["revision"] = _revision(rec, m, path, f"kernels[{k}].binding.object")
            continue
        ones = [d == 1 for shape in b["call_shapes"] for d in shape]
        v = next((v for v in b["variants"] if v.get("ones", ones) == ones), None)
        if v is None:
            raise ArtifactCodeError(
                f"step {rec['step']} ({rec.get('name')}): the file holds no kernel for the unit "
                f"extents of its call shapes {b['call_shapes']} at {values}; re-export the "
                "model with this fuelc", path)
        try:
            c = row_class(_layouts(v), b["arity"] - 1)
        except (FuelError, TypeError, ValueError, KeyError, IndexError) as e:
            raise ManifestFieldError(f"kernels[{k}].binding.variants", f"do not evaluate to "
                                     f"layouts at {values}: {e}", path) from None
        entry = v["classes"].get(c)
        if entry is None and c == "aliased_packed":  # the same bits as the packed kernel's
            entry = v["classes"].get("packed")
        if entry is None:
            raise ArtifactCodeError(
                f"step {rec['step']} ({rec.get('name')}): the file holds no kernel object for "
                f"matmul row class {c!r} (it has {', '.join(v['classes'])}), which the binding "
                f"{values} needs; re-export the model with this fuelc", path)
        rec["binding"] = _with_object(b, v["layouts"], entry)
        rec["revision"] = _revision(rec, m, path, f"kernels[{k}].binding.variants")
    return out


def _with_object(b: dict, layouts: list, entry: dict) -> dict:
    """The object binding of one variant and class of a ``classes`` binding."""
    return {**{x: y for x, y in b.items() if x != "variants"}, "kind": "object",
            "layouts": layouts, "object": entry["object"], "instance": entry["instance"]}


def _revision(rec: dict, m: dict, path: str, field: str) -> str:
    member = m["members"].get(rec["binding"]["object"])
    if not isinstance(member, dict):
        raise ManifestFieldError(field, f"{rec['binding']['object']!r} is not an object member",
                                 path)
    return object_revision(rec, member["sha256"], m["target"])


def _check_expressions(v, field: str, symbols: dict, path: str) -> None:
    if isinstance(v, dict):
        if SYM in v:
            terms = v[SYM]
            if not (set(v) == {SYM} and _terms_ok(terms, symbols)):
                raise ManifestFieldError(field, f"{v!r} is not an expression "
                                         f"{{'sym': [[coefficient, [factor, ...]], ...]}} of the "
                                         f"symbols {', '.join(symbols)} (a factor: a symbol or "
                                         "{'floor': terms, 'by': int >= 1})", path)
            return
        for k, x in v.items():
            _check_expressions(x, f"{field}.{k}", symbols, path)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _check_expressions(x, f"{field}[{i}]", symbols, path)


def check_symbolic(m: dict, path: str, check_static) -> None:
    """The checks of a symbolic manifest: the signature, every expression,
    every class binding and every object revision of the template; then the
    static checks (``check_static``) of the manifest settled at the example
    binding. Raises ``ManifestFieldError`` naming the field."""
    validate(m["symbolic"], SYMBOLIC_SCHEMA, "symbolic", path)
    sig = m["symbolic"]
    symbols = sig["symbols"]
    try:
        bounds, inputs, _ = read_signature(sig)
    except (FuelError, TypeError, ValueError, KeyError, IndexError) as e:
        raise ManifestFieldError("symbolic.inputs", f"is not a signature: {e}", path) from None
    example = sig["example"]
    if example.keys() != symbols.keys() or any(
            v < bounds[n][0] or (bounds[n][1] is not None and v > bounds[n][1])
            for n, v in example.items()):
        raise ManifestFieldError("symbolic.example", f"{example} does not bind every symbol "
                                 f"within its bounds ({symbols})", path)
    for key in TEMPLATE_FIELDS:
        validate(m.get(key), dict if key == "plan" else list, key, path)
        _check_expressions(m[key], key, symbols, path)
    for k, rec in enumerate(m["kernels"]):
        b = rec.get("binding") if isinstance(rec, dict) else None
        if isinstance(b, dict) and b.get("kind") == "object" and isinstance(b.get("object"), str):
            if rec.get("revision") != _revision(rec, m, path, f"kernels[{k}].binding.object"):
                raise ManifestFieldError(f"kernels[{k}].revision", "does not match its binding "
                                         "and object; the file was edited or damaged: "
                                         "re-export the model", path)
        if not isinstance(b, dict) or b.get("kind") != "classes":
            continue
        validate(b.get("variants"), Check([VARIANT], bool, "is empty"),
                 f"kernels[{k}].binding.variants", path)
        for i, v in enumerate(b["variants"]):
            where = f"kernels[{k}].binding.variants[{i}].classes"
            for c, e in v["classes"].items():
                member = m["members"].get(e["object"]) if e["object"].startswith("code/") else None
                if member is None:
                    raise ManifestFieldError(f"{where}[{c!r}].object", f"{e['object']!r} is not "
                                             "an object member", path)
                one = {**rec, "binding": _with_object(b, v["layouts"], e)}
                if e["revision"] != object_revision(one, member["sha256"], m["target"]):
                    raise ManifestFieldError(f"{where}[{c!r}].revision", "does not match its "
                                             "binding and object; the file was edited or "
                                             "damaged: re-export the model", path)
    consts = {c.get("name"): c for c in m["plan"].get("constants", ()) if isinstance(c, dict)}
    for i, n in enumerate(sig["iotas"]):
        c = consts.get(n)
        if c is None or n in m["constants"] or len(c.get("shape", ())) != 1 or \
                c.get("numpy_dtype") != "<f4":
            raise ManifestFieldError(f"symbolic.iotas[{i}]", f"{n!r} is not a plan constant of "
                                     "rank 1 and dtype <f4 outside the weights", path)
    for i, f in enumerate(sig.get("fixed", ())):
        where = f"symbolic.fixed[{i}]"
        if f["binding"].keys() != symbols.keys() or any(
                v < bounds[n][0] or (bounds[n][1] is not None and v > bounds[n][1])
                for n, v in f["binding"].items()) or f["binding"] == example:
            raise ManifestFieldError(f"{where}.binding", f"{f['binding']} does not bind every "
                                     f"symbol within its bounds ({symbols}) apart from the "
                                     "example", path)
        for k, rec in enumerate(f["kernels"]):
            b = rec.get("binding") if isinstance(rec, dict) else None
            if isinstance(b, dict) and b.get("kind") == "object" and \
                    rec.get("revision") != _revision(rec, m, path, f"{where}.kernels[{k}]"):
                raise ManifestFieldError(f"{where}.kernels[{k}].revision", "does not match its "
                                         "binding and object; the file was edited or damaged: "
                                         "re-export the model", path)
        check_static(settle(m, f["binding"], path), path)
    settled = settle(m, example, path)
    check_static(settled, path)
    ep = {v["name"]: v for v in settled["entry_points"][0]["inputs"]}
    for n, (shape, dtype) in inputs.items():
        v = ep.get(n)
        want = [d.evaluate(example) if isinstance(d, Sym) else d for d in shape]
        if v is None or v["shape"] != want or v["dtype"] != dtype.value:
            raise ManifestFieldError(f"symbolic.inputs[{n!r}]", f"{dtype.value}[{shape_text(shape)}]"
                                     f" is not the entry point's input at {example} "
                                     f"({v and (v['dtype'], v['shape'])})", path)


class BindingCalls:
    """Calls of a module with symbolic extents: bind the symbols from the
    inputs' shapes (once per distinct shapes), then run the module of that
    binding (``module_of(key)``, ``key`` the sizes in symbol order)."""

    KEEP = 8

    def _init_calls(self, symbols: dict, inputs: dict, equalities) -> None:
        self.symbols = symbols          # name -> (lo, hi)
        self.inputs = inputs            # name -> (shape, DType)
        self.equalities = equalities
        self._keys: dict[tuple, tuple] = {}
        self._lock = threading.Lock()

    @property
    def input_names(self) -> list[str]:
        return list(self.inputs)

    @property
    def signature(self) -> dict:
        return {"inputs": {n: f"{t.value}[{shape_text(s)}]" for n, (s, t) in self.inputs.items()},
                "symbols": {n: list(b) for n, b in self.symbols.items()}}

    def module_of(self, key: tuple):
        raise NotImplementedError

    def binding(self, **inputs) -> tuple:
        """The sizes a call with these inputs binds, in symbol order
        (``ShapeSignatureError`` on a contradiction)."""
        if inputs.keys() != self.inputs.keys():
            raise PlanError(f"inputs are ({', '.join(self.signature['inputs'])}); missing "
                            f"{sorted(set(self.inputs) - set(inputs))}, unexpected "
                            f"{sorted(set(inputs) - set(self.inputs))}")
        shapes = tuple(np.shape(inputs[n]) for n in self.inputs)
        key = self._keys.get(shapes)
        if key is None:  # a function of the shapes: checked once per distinct shapes
            sizes = bind_symbols({n: s for n, (s, _) in self.inputs.items()},
                                 dict(zip(self.inputs, shapes)), self.equalities)
            key = tuple(sizes[n] for n in self.symbols)
            if len(self._keys) >= 256:
                self._keys.clear()
            self._keys[shapes] = key
        return key

    def run(self, **inputs) -> dict[str, np.ndarray]:
        return self.module_of(self.binding(**inputs))._run(inputs)

    def __call__(self, **inputs):
        out = self.module_of(self.binding(**inputs))._run(inputs)
        return next(iter(out.values())) if len(out) == 1 else out


class SymbolicLoadedModule(BindingCalls):
    """A symbolic ``.fuel`` file loaded by ``runtime.load``: call it at any
    size the signature allows. Each binding's module (a ``LoadedModule``) is
    settled on its first call and kept for the ``KEEP`` most recent
    bindings; the kernel objects are linked once for all of them.
    ``settled`` counts the bindings settled so far."""

    def __init__(self, artifact, load_binding):
        self.path = artifact.path
        self.manifest = artifact.manifest
        self._artifact = artifact
        self._load_binding = load_binding  # static manifest -> LoadedModule
        self.target = artifact.manifest["target"]["name"]
        self._init_calls(*read_signature(artifact.manifest["symbolic"]))
        self._modules: "collections.OrderedDict[tuple, object]" = collections.OrderedDict()
        self.settled = 0

    @property
    def output_names(self) -> list[str]:
        return [v["name"] for v in self.manifest["entry_points"][0]["outputs"]]

    @property
    def bindings(self) -> list[dict]:
        """The bindings settled and kept, least recently used first."""
        return [dict(zip(self.symbols, k)) for k in self._modules]

    def module_of(self, key: tuple):
        module = self._modules.get(key)
        if module is None:
            with self._lock:
                module = self._modules.get(key)
                if module is None:
                    values = dict(zip(self.symbols, key))
                    module = self._load_binding(settle(self.manifest, values, self.path))
                    self.settled += 1
                    self._modules[key] = module
                    while len(self._modules) > self.KEEP:
                        self._modules.popitem(last=False)
        try:
            self._modules.move_to_end(key)
        except KeyError:  # another thread's binding pushed it out meanwhile
            pass
        return module

    def specialize(self, **sizes):
        """The ``LoadedModule`` of one binding (every symbol by name)."""
        key = tuple(sizes.get(n) for n in self.symbols)
        inputs = {n: [d.evaluate(sizes) if isinstance(d, Sym) else d for d in s]
                  for n, (s, _) in self.inputs.items()}
        bind_symbols({n: s for n, (s, _) in self.inputs.items()}, inputs, self.equalities)
        return self.module_of(key)

    def __repr__(self) -> str:
        import os
        sig = ", ".join(f"{n}: {s}" for n, s in self.signature["inputs"].items())
        return f"<SymbolicLoadedModule {os.path.basename(self.path)} target={self.target} " \
               f"({sig}) -> {self.output_names}>"
