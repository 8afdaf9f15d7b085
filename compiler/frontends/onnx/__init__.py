"""ONNX import: ``import_model(path_or_model, input_shapes=None) -> Graph``.

The model is checked (``onnx.checker``), its default-domain opset must lie in
13..(the newest the installed ``onnx`` knows; an older model is converted to
opset 13 with ``onnx.version_converter`` first). Input dims keep their
``dim_param`` as a symbol of that name and an unnamed dim becomes the symbol
``<input>_<axis>``; ``input_shapes`` fixes some or all of them, by symbol
(``{"batch": 1}``) or by input (``{"x": (1, 128)}``, ``None`` keeping an
axis symbolic) (``docs/dynamic-shapes.md``).

Nodes are visited in order. Every value is either a graph ``Tensor`` or a
numpy array known at import: initializers and ``Constant`` nodes start as
arrays, ``Shape``/``Size`` of any tensor are arrays (of ints, or objects
holding ``Sym`` extents for symbolic dims), and
a node whose inputs are all arrays is evaluated with numpy (``_fold``), so
shape subgraphs (Shape -> Gather -> Concat -> Reshape, ConstantOfShape,
Range, ...) vanish. An array becomes a graph constant only where a graph op
consumes it, once per array (a shared initializer is one constant).

Two ONNX spellings are rewritten as the fused ops fuelc knows: ``MatMul``
followed by an ``Add`` of a bias row (``linear``, i.e. FusedLinear) and the
exported erf GELU ``x * 0.5 * (1 + erf(x / sqrt 2))`` (``GeluErf``). Every
other op maps to builder calls in the spellings fuelc's fusion passes match.

Whatever cannot be imported is collected over the whole model and reported
in one ``OnnxImportError`` (``.issues`` lists each: op type, node name, the
attribute or input and why).
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Mapping, Optional, Sequence

import numpy as np

from ...errors import CompilerError, GraphBuildError, UnsupportedOpError
from ...graph import Graph, Sym, Tensor
from runtime.errors import SymbolicError

__all__ = ["import_model", "external_data", "OnnxImportError", "Issue", "MIN_OPSET", "supported_ops"]

#: the oldest default-domain opset imported (the axes-as-input era).
MIN_OPSET = 13


class OnnxImportError(CompilerError, ValueError):
    """The model cannot be imported. ``issues`` lists every unsupported
    node/attribute found (``Issue``; for a failed opset conversion, the nodes
    the converter fails on), or is empty for other model-level errors
    (unreadable, failed the ONNX checker, opset, symbolic dims)."""

    def __init__(self, message: str, issues: Sequence["Issue"] = ()):
        super().__init__(message)
        self.issues = list(issues)


@dataclasses.dataclass(frozen=True)
class Issue:
    """One thing in the model fuelc cannot import."""
    op_type: str
    node: str
    what: str

    def __str__(self) -> str:
        return f"{self.op_type} node {self.node!r}: {self.what}"


def supported_ops() -> list[str]:
    """The ONNX op types the importer knows (some only with constant inputs)."""
    from ._fold import FOLD
    from ._ops import BUILD
    return sorted(set(BUILD) | set(FOLD) | {"Constant"})


def import_model(path_or_model, input_shapes: Optional[Mapping[str, object]] = None
                 ) -> Graph:
    """Import an ONNX model (a path, serialized bytes or an ``onnx.ModelProto``)
    into a fuelc ``Graph``: graph inputs and outputs keep their ONNX names;
    ONNX booleans are u8 (0/1). Symbolic dims stay symbols (a ``dim_param``
    keeps its name, an unnamed dim is ``<input>_<axis>``). ``input_shapes``
    (optional) fixes some of them: ``{"batch": 1}`` (a symbol's size) or
    ``{"x": (1, 128)}`` (an input's shape; ``None`` keeps an axis symbolic;
    static dims given must agree with the model's). Raises OnnxImportError."""
    model = _upgrade(_load(path_or_model))
    base = os.path.dirname(os.path.abspath(os.fspath(path_or_model))) \
        if isinstance(path_or_model, (str, os.PathLike)) else None
    return _Importer(model, dict(input_shapes or {}), base).run()


def _load(src):
    import onnx
    try:
        if isinstance(src, onnx.ModelProto):
            model = src
        elif isinstance(src, (bytes, bytearray)):
            model = onnx.load_from_string(bytes(src))
        elif isinstance(src, (str, os.PathLike)):
            model = onnx.load(os.fspath(src), load_external_data=False)  # mapped later
        else:
            raise OnnxImportError(f"import_model takes a path, bytes or onnx.ModelProto, got "
                                  f"{type(src).__name__}")
    except OnnxImportError:
        raise
    except Exception as e:  # protobuf DecodeError, OSError, ...
        what = "<bytes>" if isinstance(src, (bytes, bytearray)) else src
        raise OnnxImportError(f"cannot read ONNX model {what}: {type(e).__name__}: {e}") \
            from None
    external = [t.name for t in model.graph.initializer
                if t.data_location == onnx.TensorProto.EXTERNAL]
    if external and not isinstance(src, (str, os.PathLike)):
        raise OnnxImportError(f"initializer {external[0]!r} keeps its data in an external file; "
                              "import the model by its path, so the file is found next to it")
    try:
        # with external data, by path: the checker then resolves its files
        # against the model's directory (and applies its path rules)
        onnx.checker.check_model(os.fspath(src) if external and isinstance(src, (str, os.PathLike))
                                 else model)
    except Exception as e:
        raise OnnxImportError(f"the model fails onnx.checker: {e}".rstrip()) from None
    return model


def _default_opset(model):
    return {o.domain or "ai.onnx": o.version for o in model.opset_import}.get("ai.onnx")


def _upgrade(model):
    """A model whose default-domain opset is below ``MIN_OPSET`` converted to
    ``MIN_OPSET`` with ``onnx.version_converter`` (as exporters' old opsets
    7..12 are); other models unchanged. A conversion the converter cannot do
    (an attribute value the newer op cannot express, an op it has no adapter
    for) is an OnnxImportError quoting the converter."""
    import onnx
    v = _default_opset(model)
    if v is None or v >= MIN_OPSET:
        return model
    scan8 = [n.name or f"#{i}" for i, n in enumerate(model.graph.node)
             if n.op_type == "Scan" and n.domain in ("", "ai.onnx")] if v < 9 else []
    if scan8:  # the converter drops Scan-8's batch axis from the graph's inputs
        raise OnnxImportError(
            f"the model's default-domain opset is {v}: Scan-8 (a batch axis, sequence_lens) "
            f"has no conversion that keeps the model's input shapes; re-export the model at "
            f"opset 9 or newer", [Issue("Scan", n, "Scan-8 (opset below 9) is not supported: "
                                        "re-export at opset 9 or newer") for n in scan8])
    try:
        out = onnx.version_converter.convert_version(_hardmax_as_2d(model), MIN_OPSET)
        onnx.checker.check_model(out)
    except Exception as e:
        culprits = _unconvertible_nodes(model, v)
        why = "; ".join(f"{op} node {name!r}: {msg}" for op, name, msg in culprits) or \
            f"{type(e).__name__}: {_one_line(e)}"
        raise OnnxImportError(
            f"the model's default-domain opset is {v}; fuelc imports opsets {MIN_OPSET} and "
            f"newer and converts older models with onnx.version_converter.convert_version("
            f"model, {MIN_OPSET}), which failed: {why} (re-export the model at opset "
            f"{MIN_OPSET} or newer, or change what the converter names)",
            [Issue(op, name, f"onnx.version_converter cannot convert it from opset {v} to "
                             f"{MIN_OPSET}: {msg}") for op, name, msg in culprits]) from None
    return out


def _one_line(e) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _unconvertible_nodes(model, opset, limit=5):
    """(op type, node name, converter message) of the nodes the converter
    fails on when each is converted alone (its inputs untyped), at most
    ``limit``: run only once the whole model failed, to name the culprits."""
    import onnx
    from onnx import helper
    out = []
    for i, n in enumerate(model.graph.node):
        if n.domain not in ("", "ai.onnx"):
            continue
        und = onnx.TensorProto.UNDEFINED
        g = helper.make_graph([n], "one", [helper.make_tensor_value_info(x, und, None)
                                           for x in dict.fromkeys(n.input) if x],
                              [helper.make_tensor_value_info(y, und, None) for y in n.output if y])
        one = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        try:
            onnx.version_converter.convert_version(one, MIN_OPSET)
        except Exception as e:
            out.append((n.op_type, n.name or f"#{i}", _one_line(e)))
            if len(out) == limit:
                break
    return out


def _hardmax_as_2d(model):
    """Before opset 13 Hardmax works on the input flattened to 2-D at axis;
    onnx.version_converter keeps the node as it is (it adapts Softmax and
    LogSoftmax, not Hardmax), which would change the result. The old meaning
    is spelled out as Shape, Flatten, Hardmax(axis=1), Reshape, the way the
    converter spells Softmax."""
    from onnx import helper
    if not any(n.op_type == "Hardmax" and n.domain in ("", "ai.onnx") for n in model.graph.node):
        return model
    import onnx
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = []
    for i, n in enumerate(model.graph.node):
        if n.op_type != "Hardmax" or n.domain not in ("", "ai.onnx"):
            nodes.append(n)
            continue
        axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
        x, y, p = n.input[0], n.output[0], f"{n.name or 'hardmax' + str(i)}_2d"
        nodes += [helper.make_node("Shape", [x], [p + "_shape"], name=p + "_shape"),
                  helper.make_node("Flatten", [x], [p + "_in"], name=p + "_flatten", axis=axis),
                  helper.make_node("Hardmax", [p + "_in"], [p + "_out"], name=n.name or p,
                                   axis=1),
                  helper.make_node("Reshape", [p + "_out", p + "_shape"], [y],
                                   name=p + "_reshape")]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def _attrs(node) -> dict:
    from onnx import helper
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, list):
            v = [x.decode() if isinstance(x, bytes) else x for x in v]
        out[a.name] = v
    return out


def _concrete(v: np.ndarray) -> np.ndarray:
    """A folded object array holding no ``Sym`` (``Shape(x)[2]`` of a static
    axis) as the plain numpy array of its values; anything else unchanged."""
    if v.dtype != object or any(isinstance(x, Sym) for x in v.reshape(-1)):
        return v
    return np.array(v.tolist())


def _symbol_name(text: str) -> str:
    """An ONNX dim_param as a symbol name (an identifier)."""
    import re
    name = re.sub(r"\W", "_", text)
    return name if name.isidentifier() else f"d_{name}"


def _near(v, want, rtol=1e-6) -> bool:
    return isinstance(v, np.ndarray) and v.size == 1 and v.dtype.kind == "f" and \
        abs(float(v.reshape(-1)[0]) - want) <= rtol * abs(want)


def external_data(init, base_dir: Optional[str]) -> np.ndarray:
    """The initializer ``init``'s external data as a read-only ``np.memmap``
    (nothing is read until used). onnx.checker's rules for the path: a
    relative ``location`` without ``..``, naming a regular file inside
    ``base_dir`` (the model's directory; a symlink resolving out of it is
    refused); ``offset`` and ``length`` within the file and agreeing with
    the tensor's size. Each refusal is an ``OnnxImportError`` naming the
    initializer and the rule."""
    import stat
    from onnx import TensorProto
    from ._types import _name, numpy_of

    where = f"initializer {init.name!r}"
    info = {e.key: e.value for e in init.external_data}
    loc = info.get("location", "")
    if base_dir is None:
        raise OnnxImportError(f"{where} keeps its data in the external file {loc!r}; import "
                              "the model by its path, so the file is found next to it")
    if not loc:
        raise OnnxImportError(f"{where}: external data without a 'location'")
    parts = loc.replace("\\", "/").split("/")
    if os.path.isabs(loc) or loc.startswith(("/", "\\")) or ":" in parts[0] or ".." in parts:
        raise OnnxImportError(f"{where}: external data location {loc!r} must be a path "
                              "relative to the model's directory, without '..' (onnx.checker's "
                              "rule)")
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(base_dir, loc))
    if os.path.commonpath([root, path]) != root:
        raise OnnxImportError(f"{where}: external data {loc!r} resolves to {path}, outside the "
                              f"model's directory {root} (a symlink out of it)")
    try:
        st = os.stat(path)
    except OSError as e:
        raise OnnxImportError(f"{where}: external data file {loc!r}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise OnnxImportError(f"{where}: external data {loc!r} is not a regular file")
    if init.data_type == TensorProto.BFLOAT16:
        import ml_dtypes
        dtype = np.dtype(ml_dtypes.bfloat16)
    else:
        try:
            dtype = np.dtype(numpy_of(init.data_type)).newbyteorder("<")
        except Exception:
            raise OnnxImportError(f"{where}: external data of element type "
                                  f"{_name(init.data_type)} cannot be mapped") from None
    shape = tuple(int(d) for d in init.dims)
    nbytes = math.prod(shape) * dtype.itemsize
    try:
        offset, length = int(info.get("offset", 0)), int(info.get("length", nbytes))
    except ValueError:
        raise OnnxImportError(f"{where}: external data offset/length are not integers: "
                              f"{info}") from None
    if offset < 0 or length != nbytes or offset + nbytes > st.st_size:
        raise OnnxImportError(f"{where}: external data [{offset}, {offset + length}) of {loc!r} "
                              f"must be the tensor's {nbytes} bytes ({_name(init.data_type)}"
                              f"{list(shape)}) inside the file's {st.st_size} bytes")
    if not nbytes:
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)


class _Importer:
    def __init__(self, model, input_shapes, base_dir: Optional[str] = None):
        self.model = model
        self.base_dir = base_dir  # the model file's directory (external data lives there)
        self.graph = model.graph
        self.input_shapes = input_shapes
        self.g = Graph()
        self.values: dict[str, object] = {}
        self.poisoned: set[str] = set()
        self.issues: list[Issue] = []
        self._refused: set[int] = set()
        self._consts: dict[int, tuple[np.ndarray, Tensor]] = {}
        self._const_names: dict[int, str] = {}
        self._elem_types = {vi.name: vi.type.tensor_type.elem_type
                            for vi in list(self.graph.input) + list(self.graph.output)
                            + list(self.graph.value_info)}
        self._inferred = False

    # -- values --------------------------------------------------------------
    def t(self, v, like: Optional[Tensor] = None) -> Tensor:
        """A graph tensor for value ``v`` (arrays become constants, once;
        with ``like``, a new constant takes like's dtype)."""
        if isinstance(v, Tensor):
            return v
        from ._types import Narrow
        if isinstance(v, Narrow):
            raise _unsupported(f"a value of element type {v.name} is used where fuelc needs "
                               f"a graph tensor; narrow-type values feed only "
                               f"{'/'.join(NARROW_READERS)}")
        if np.asarray(v).dtype == object:
            raise _unsupported(f"shape values computed from symbolic dims ({np.asarray(v).tolist()}) "
                               f"feed a graph op as data; they can only be shape arguments "
                               f"(Reshape targets, Range limits)")
        from ._types import fold_only_reason
        why = fold_only_reason(np.asarray(v).dtype)
        if why is not None:
            raise _unsupported(why)
        if like is not None:
            return self.g.constant(np.asarray(v), dtype=like.dtype)
        hit = self._consts.get(id(v))
        if hit is None:
            name = self._const_names.get(id(v))
            if name is not None:
                while name in self.g.constants:
                    name += "_"
            hit = (v, self.g.constant(v, name=name))
            self._consts[id(v)] = hit
        return hit[1]

    def arr(self, v, what: str, node) -> np.ndarray:
        """The constant value of an input that must be known at import."""
        if isinstance(v, np.ndarray):
            return v
        raise _unsupported(f"input {what!r} is computed at run time; fuelc needs it "
                           f"constant at import (a shape computation that depends only on "
                           f"static shapes and constants folds)")

    def elem_type(self, name: str) -> int:
        v = self.values.get(name)
        if isinstance(v, np.ndarray):
            from onnx import helper
            return helper.np_dtype_to_tensor_dtype(v.dtype)
        if isinstance(v, Tensor) and name not in self._elem_types and v.dtype.value != "u8":
            from ._types import elem_type_of  # u8 is ambiguous: UINT8 or BOOL
            return elem_type_of(v.dtype)
        if name not in self._elem_types and not self._inferred:
            self._infer_types()
        if name in self._elem_types:
            return self._elem_types[name]
        raise _unsupported(f"the element type of {name!r} is unknown and onnx shape "
                           f"inference does not find it (declare it in the graph's "
                           f"value_info)")

    def _infer_types(self):
        """Element types of intermediates the model does not declare, from
        ``onnx.shape_inference.infer_shapes`` (non-strict: what it cannot
        infer stays unknown)."""
        import onnx
        self._inferred = True
        try:
            inferred = onnx.shape_inference.infer_shapes(self.model, strict_mode=False)
        except Exception:  # inference itself failed: the types stay unknown
            return
        for vi in inferred.graph.value_info:
            if vi.type.tensor_type.elem_type:
                self._elem_types.setdefault(vi.name, vi.type.tensor_type.elem_type)

    # -- the import ----------------------------------------------------------
    def run(self) -> Graph:
        self._check_opset()
        self._load_initializers()
        self._declare_inputs()
        nodes = list(self.graph.node)
        replace, absorbed = self._patterns(nodes)
        for i, node in enumerate(nodes):  # static problems, reported even downstream
            if not (i in replace and node.op_type == "BatchNormalization"):  # folded
                self._prescan(i, node)
        for i, node in enumerate(nodes):
            if i not in absorbed:
                self._visit(i, node, replace.get(i))
        self._outputs()
        if self.issues:
            lines = "\n".join(f"  - {x}" for x in self.issues)
            raise OnnxImportError(
                f"cannot import the ONNX model: {len(self.issues)} unsupported construct(s):\n"
                f"{lines}\nsupported ops: compiler.frontends.onnx.supported_ops()", self.issues)
        return self.g

    def _check_opset(self):
        import onnx
        newest = onnx.defs.onnx_opset_version()
        versions = {o.domain or "ai.onnx": o.version for o in self.model.opset_import}
        v = versions.get("ai.onnx")
        if v is None:
            raise OnnxImportError(
                f"the model imports no default-domain (ai.onnx) opset, only "
                f"{sorted(versions)}; fuelc imports models of ai.onnx ops")
        if not MIN_OPSET <= v <= newest:  # older ones were converted by _upgrade
            raise OnnxImportError(
                f"the model's default-domain opset is {v}, newer than the installed onnx "
                f"{onnx.__version__} knows ({newest}); upgrade onnx, or convert the model with "
                f"onnx.version_converter.convert_version(model, {newest})")
        self.opset = v

    def _load_initializers(self):
        from onnx import TensorProto, numpy_helper
        for init in self.graph.initializer:
            if init.data_location == TensorProto.EXTERNAL:
                arr = external_data(init, self.base_dir)
                if init.data_type == TensorProto.BFLOAT16:
                    self.values[init.name] = self.g.constant(arr, name=init.name, dtype="bf16")
                else:
                    self._set_const(init.name, arr)
                continue
            if init.data_type == TensorProto.BFLOAT16:
                arr = numpy_helper.to_array(init).astype(np.float32)
                self.values[init.name] = self.g.constant(arr, name=init.name, dtype="bf16")
                continue
            try:
                from ._types import NARROW, numpy_of
                if init.data_type not in NARROW:  # narrow: unpacked to ml_dtypes arrays
                    numpy_of(init.data_type)
                arr = numpy_helper.to_array(init)
            except Exception as e:
                self.issues.append(Issue("initializer", init.name, str(e)))
                self.poisoned.add(init.name)
                continue
            self._set_const(init.name, np.asarray(arr))
        for sp in self.graph.sparse_initializer:
            self.issues.append(Issue("initializer", sp.values.name,
                                     "sparse initializers are not supported (densify them)"))
            self.poisoned.add(sp.values.name)

    def _set_const(self, name, arr):
        self.values[name] = arr
        self._const_names[id(arr)] = name

    def _declare_inputs(self):
        from ._types import dtype_of
        from ._fold import Unsupported
        real = [i for i in self.graph.input if i.name not in self.values and i.name not in
                self.poisoned]
        names = {i.name for i in real}
        sizes = {k: v for k, v in self.input_shapes.items() if k not in names}
        dims_of = {}
        for inp in real:
            tt = inp.type.tensor_type
            dims_of[inp.name] = [
                d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else
                _symbol_name(d.dim_param) if d.dim_param else _symbol_name(f"{inp.name}_{axis}")
                for axis, d in enumerate(tt.shape.dim)] if tt.HasField("shape") else None
        symbols = {d for dims in dims_of.values() for d in dims or () if isinstance(d, str)}
        unknown = sorted(set(sizes) - symbols)
        if unknown:
            raise OnnxImportError(f"input_shapes names {unknown}, which are not inputs of the "
                                  f"model (its inputs: {[i.name for i in real]}) nor symbols of "
                                  f"its input dims ({sorted(symbols)})")
        for k, v in sizes.items():
            if isinstance(v, tuple) and len(v) == 2 and all(
                    b is None or isinstance(b, (int, np.integer)) and not isinstance(b, bool)
                    for b in v) and v[0] is not None:
                sizes[k] = (k, int(v[0]), None if v[1] is None else int(v[1]))
            elif isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
                raise OnnxImportError(f"input_shapes[{k!r}] is {v!r}; a symbol takes its size "
                                      f"(a non-negative integer) or its bounds (lo, hi)")
        symbolic, bad = [], []
        shapes = {}
        for inp in real:
            dims = dims_of[inp.name]
            given = self.input_shapes.get(inp.name)
            if given is not None:
                if isinstance(given, (str, bytes)) or not hasattr(given, "__iter__") or not all(
                        d is None or isinstance(d, (int, np.integer))
                        and not isinstance(d, (bool, np.bool_)) and d >= 0 for d in given):
                    example = tuple(d if isinstance(d, int) else 1 for d in (dims or [1]))
                    raise OnnxImportError(
                        f"input_shapes[{inp.name!r}] is {given!r}; give a tuple of non-negative "
                        f"integers, one per axis (e.g. {example!r}; None keeps an axis "
                        f"symbolic)")
                given = tuple(None if d is None else int(d) for d in given)
                if (dims is not None and (len(given) != len(dims) or any(
                        isinstance(d, int) and gv is not None and d != gv
                        for d, gv in zip(dims, given)))) or (dims is None and None in given):
                    bad.append(f"input {inp.name!r}: input_shapes gives {list(given)} but the "
                               f"model declares {dims}")
                    continue
                dims = [d if gv is None else gv for d, gv in zip(dims or given, given)]
            elif dims is None:
                symbolic.append(f"input {inp.name!r}: no shape at all (rank unknown)")
                continue
            shapes[inp.name] = tuple(sizes.get(d, d) for d in dims)
        if symbolic or bad:
            fix = {i.name: tuple(shapes.get(i.name) or ("...",)) for i in real}
            raise OnnxImportError(
                "the model's input shapes cannot be read:\n" +
                "\n".join(f"  - {s}" for s in symbolic + bad) +
                f"\nfix them with import_model(model, input_shapes={{...}}), e.g. "
                f"input_shapes={fix!r} with each unknown dim replaced by its extent")
        from ._types import NARROW, Narrow, carrier_dtype
        for inp in real:
            et = inp.type.tensor_type.elem_type
            if et in NARROW:  # a byte-wide carrier (docs/onnx.md, "Narrow types")
                try:
                    carrier = self.g.input(inp.name, shapes[inp.name], carrier_dtype(et))
                except GraphBuildError as e:
                    raise OnnxImportError(str(e)) from None
                self.values[inp.name] = Narrow(carrier, et)
                continue
            try:
                dt = dtype_of(inp.type.tensor_type.elem_type)
            except Unsupported as e:
                raise OnnxImportError(f"input {inp.name!r}: {e}") from None
            try:
                self.values[inp.name] = self.g.input(inp.name, shapes[inp.name], dt)
            except GraphBuildError as e:
                raise OnnxImportError(str(e)) from None

    def _prescan(self, i, node):
        from ._fold import FOLD
        from ._ops import BUILD, static_issues
        name = node.name or f"#{i}"
        if node.domain not in ("", "ai.onnx") and \
                (node.domain, node.op_type) != ("ai.onnx.preview", "FlexAttention"):
            self.issues.append(Issue(f"{node.domain}.{node.op_type}", name,
                                     f"op domain {node.domain!r} is not supported (only the "
                                     f"default ONNX domain)"))
            self._refused.add(i)
            return
        found = []
        if node.op_type not in BUILD and node.op_type not in FOLD and node.op_type != "Constant":
            found.append("op type not supported by fuelc")
        else:
            found += static_issues(node.op_type, _attrs(node))
        if found:
            self._refused.add(i)
            self.issues += [Issue(node.op_type, name, what) for what in found]

    def _used(self, value: str) -> bool:
        return any(value in n.input for n in self.graph.node) or \
            any(o.name == value for o in self.graph.output)

    def _visit(self, i, node, replacement):
        from ._fold import FOLD, FOLD_ONLY, Unsupported
        from ._ops import BUILD
        name = node.name or f"#{i}"
        names = list(node.input) if replacement is None else replacement[0]
        if i in self._refused or any(n in self.poisoned for n in names):
            self.poisoned.update(node.output)
            return
        ins = [self.values[n] if n else None for n in names]
        at = _attrs(node)
        try:
            _check_narrow(node, names, ins)
            if replacement is not None:
                outs = replacement[1](self, ins)
            elif node.op_type == "Constant":
                outs = [self._constant_node(at)]
            elif node.op_type == "Range" and any(isinstance(v, np.ndarray) and v.dtype == object
                                                 for v in ins):
                outs = [self._symbolic_range(ins)]
            elif node.op_type == "ConstantOfShape" and isinstance(ins[0], np.ndarray) and \
                    ins[0].dtype == object:  # a symbolic shape: a broadcast scalar
                from ._fold import _constant_of_shape
                value = _constant_of_shape(at, [np.zeros(0, np.int64)])[0].reshape(())
                outs = [self.t(np.zeros((), value.dtype) + value).broadcast_to(tuple(ins[0]))]
            elif ins and ins[0] is not None and node.op_type in FOLD and all(
                    v is None or isinstance(v, np.ndarray) for v in ins) and not (
                    node.op_type in ("Slice", "Expand") and ins[0].dtype != object and any(
                        v is not None and v.dtype == object for v in ins[1:])):
                # IEEE results are ONNX's (log(0) = -inf, x/0 = inf, a NaN cast to an
                # integer is undefined): folded as the compiled graph would compute them,
                # without numpy's warnings (T5's bucket math takes log(0), then Where
                # drops it)
                with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
                    outs = [_concrete(np.asarray(v)) for v in FOLD[node.op_type](at, ins)]
            elif node.op_type in FOLD_ONLY:
                late = [n for n, v in zip(node.input, ins) if isinstance(v, Tensor)]
                raise _unsupported(f"its inputs must be constants known at import; input(s) "
                                   f"{late} are computed at run time")
            else:
                outs = BUILD[node.op_type](self, node, at, ins)
        except Unsupported as e:
            self.issues.append(Issue(node.op_type, name, str(e)))
            self.poisoned.update(node.output)
            return
        except (GraphBuildError, UnsupportedOpError) as e:
            self.issues.append(Issue(node.op_type, name, f"fuelc cannot build it: {e}"
                                     + self._symbol_origins(getattr(e, "symbols", ()))))
            self.poisoned.update(node.output)
            return
        except SymbolicError as e:
            hint = ("; bound the symbols at import, e.g. input_shapes={'seq': (1, 512)} "
                    "(lo, hi)") if "cannot decide" in str(e) else ""
            self.issues.append(Issue(node.op_type, name, f"{e}{hint}"))
            self.poisoned.update(node.output)
            return
        except (ValueError, IndexError, TypeError) as e:  # numpy folding on bad constants
            self.issues.append(Issue(node.op_type, name, f"constant folding failed: {e}"))
            self.poisoned.update(node.output)
            return
        for out_name, v in zip(node.output, outs):
            if out_name:
                self.values[out_name] = v

    def _symbol_origins(self, symbols) -> str:
        """`` (symbol 'h' is input 'x' axis 2, ...)`` for the model inputs
        whose dims declare ``symbols`` ("" for none)."""
        from compiler.graph.symbolic import Sym
        seen = []
        for name in symbols:
            for inp in self.graph.input:
                shape = getattr(self.values.get(inp.name), "shape", ())
                axes = [a for a, d in enumerate(shape) if isinstance(d, Sym) and name in d.atoms]
                if axes:
                    seen.append(f"symbol {name!r} is input {inp.name!r} axis {axes[0]}")
                    break
        return f" ({'; '.join(seen)})" if seen else ""

    def _symbolic_range(self, ins) -> Tensor:
        """Range with a symbolic limit: ``start + delta * Iota(len)``, len the
        exact (limit - start) / delta (Iota counts exactly below 2**24)."""
        start, limit, delta = (v.reshape(()).item() for v in ins)
        if isinstance(start, Sym) or isinstance(delta, Sym):
            raise _unsupported("Range with a symbolic start or delta is not supported "
                               "(only the limit may be symbolic)")
        n = (limit - start) // delta
        y = self.g.add_node("Iota", [], {"len": n})
        y = y * float(delta) + float(start) if (start, delta) != (0, 1) else y
        from ._types import dtype_of
        from onnx import helper
        return y.cast(dtype_of(helper.np_dtype_to_tensor_dtype(ins[0].dtype)))

    def _constant_node(self, at) -> np.ndarray:
        from onnx import numpy_helper
        if "value" in at:
            return np.asarray(numpy_helper.to_array(at["value"]))
        for key, dt in (("value_float", np.float32), ("value_floats", np.float32),
                        ("value_int", np.int64), ("value_ints", np.int64)):
            if key in at:
                return np.asarray(at[key], dtype=dt)
        raise _unsupported(f"attribute {next(iter(at), '?')} (only tensor, float(s) and "
                           f"int(s) constants are supported)")

    def _outputs(self):
        from ._types import dtype_of
        from ._fold import Unsupported
        for out in self.graph.output:
            if out.name in self.poisoned or out.name not in self.values:
                continue
            from ._types import Narrow
            v = self.values[out.name]
            if isinstance(v, Narrow) and v.elem_type == out.type.tensor_type.elem_type:
                self.g.output(v.carrier, name=out.name)  # bit patterns (docs/onnx.md)
                continue
            t = self.t(v)
            tt = out.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] \
                if tt.HasField("shape") else None
            try:
                dt = dtype_of(tt.elem_type)
            except Unsupported as e:
                self.issues.append(Issue("output", out.name, str(e)))
                continue
            if dt != t.dtype or (dims is not None and (len(dims) != t.ndim or any(
                    d is not None and d != s for d, s in zip(dims, t.shape)))):
                raise OnnxImportError(
                    f"output {out.name!r}: the model declares {dt.value}{dims} but the import "
                    f"computed {t.dtype.value}{list(t.shape)}; the model's declared output type "
                    f"contradicts its nodes (or this is an importer bug)")
            self.g.output(t, name=out.name)

    # -- ONNX spellings of fused ops ----------------------------------------
    def _patterns(self, nodes):
        """MatMul + bias Add -> linear; erf GELU -> GeluErf; Conv +
        BatchNormalization -> Conv with the normalization folded in. Returns
        (node index -> replacement fn, indices of absorbed nodes)."""
        consts = {k: v for k, v in self.values.items() if isinstance(v, np.ndarray)}
        producer, consumers = {}, {}
        for i, n in enumerate(nodes):
            if n.op_type == "Constant":
                try:
                    consts[n.output[0]] = self._constant_node(_attrs(n))
                except Exception:
                    pass
            elif n.op_type == "Identity" and n.input and n.input[0] in consts:
                # exporters alias shared initializers (tied or copied layers) through Identity
                consts[n.output[0]] = consts[n.input[0]]
            for o in n.output:
                producer[o] = i
            for x in n.input:
                consumers.setdefault(x, []).append(i)
        outputs = {o.name for o in self.graph.output}

        def only(value, op_type):  # the single consumer of value, if it is op_type
            c = consumers.get(value, [])
            if len(c) == 1 and value not in outputs and nodes[c[0]].op_type == op_type:
                return c[0]
            return None

        def made_by(value, op_type):
            p = producer.get(value)
            return p if p is not None and nodes[p].op_type == op_type else None

        def other(node, value):
            a, b = node.input[0], node.input[1]
            return b if a == value else a if b == value else None

        replace, absorbed = {}, set()
        for i, n in enumerate(nodes):
            if n.op_type == "Add" and len(n.input) == 2:
                for j in (0, 1):
                    m = made_by(n.input[j], "MatMul")
                    bias = n.input[1 - j]
                    if m is not None and only(n.input[j], "Add") == i and bias in consts \
                            and m not in absorbed:
                        mm = nodes[m]
                        replace[i] = ([mm.input[0], mm.input[1], bias], _linear)
                        absorbed.add(m)
                        break
            if n.op_type == "BatchNormalization":
                got = self._conv_bn(i, nodes, consts, made_by, only, absorbed)
                if got is not None:
                    c, names, fn = got
                    replace[i] = (names, fn)
                    absorbed.add(c)
            if n.op_type == "Erf":
                got = self._gelu_erf(i, nodes, consts, made_by, only, other)
                if got is not None:
                    final, x, parts = got
                    replace[final] = ([x], _gelu_erf)
                    absorbed.update(parts)
        return replace, absorbed

    def _conv_bn(self, i, nodes, consts, made_by, only, absorbed):
        """Conv (constant weight, optional constant bias) whose one consumer is
        an inference BatchNormalization with constant parameters: the
        normalization folded into the convolution's weight and bias,
        ``w * s`` and ``(b - mean) * s + beta`` with ``s = scale / sqrt(var +
        eps)`` per output channel (computed in f64, rounded once to the
        weight's dtype), as exporters' models are run by onnxruntime."""
        bn = nodes[i]
        if len(bn.input) != 5 or any(o for o in bn.output[1:]) or \
                _attrs(bn).get("training_mode", 0):
            return None
        c = made_by(bn.input[0], "Conv")
        if c is None or c in absorbed or only(bn.input[0], "BatchNormalization") != i:
            return None
        conv = nodes[c]
        w = consts.get(conv.input[1])
        b = consts.get(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
        scale, beta, mean, var = (consts.get(n) for n in bn.input[1:])
        if w is None or any(v is None for v in (scale, beta, mean, var)) or \
                w.dtype.kind != "f" or w.ndim < 3:
            return None
        cout = w.shape[0]
        if any(np.asarray(v).shape != (cout,) for v in (scale, beta, mean, var)) or \
                (b is not None and np.asarray(b).shape != (cout,)):
            return None
        w2, b2 = fold_batch_norm(w, b, scale, beta, mean, var,
                                 float(_attrs(bn).get("epsilon", 1e-5)))
        names = [conv.input[0], bn.output[0] + "::bn_folded_w", bn.output[0] + "::bn_folded_b"]
        self.values[names[1]], self.values[names[2]] = w2, b2
        at = _attrs(conv)

        def fn(cx, ins, node=conv, at=at):
            from ._ops import BUILD
            return BUILD["Conv"](cx, node, at, ins)
        return c, names, fn

    def _gelu_erf(self, e, nodes, consts, made_by, only, other):
        """x * 0.5 * (1 + erf(x / sqrt 2)) in its exported spellings."""
        u = made_by(nodes[e].input[0], "Div")
        if u is not None and _near(consts.get(nodes[u].input[1]), math.sqrt(2)):
            x = nodes[u].input[0]
        else:
            u = made_by(nodes[e].input[0], "Mul")
            if u is None:
                return None
            x = next((a for a, b in (nodes[u].input, nodes[u].input[::-1])
                      if _near(consts.get(b), math.sqrt(0.5))), None)
            if x is None:
                return None
        if only(nodes[u].output[0], "Erf") != e:
            return None
        a = only(nodes[e].output[0], "Add")
        if a is None or not _near(consts.get(other(nodes[a], nodes[e].output[0])), 1.0):
            return None
        m = only(nodes[a].output[0], "Mul")
        if m is None:
            return None
        o = other(nodes[m], nodes[a].output[0])
        if o == x:  # (x * (1 + erf)) * 0.5
            f = only(nodes[m].output[0], "Mul")
            if f is not None and _near(consts.get(other(nodes[f], nodes[m].output[0])), 0.5):
                return f, x, {u, e, a, m}
            return None
        h = made_by(o, "Mul")  # (x * 0.5) * (1 + erf)
        if h is not None and only(o, "Mul") == m and other(nodes[h], x) is not None and \
                _near(consts.get(other(nodes[h], x)), 0.5):
            return m, x, {u, e, a, h}
        return None


def fold_batch_norm(w, b, scale, beta, mean, var, eps):
    """A convolution's weight ``w`` [Cout, ...] and bias ``b`` ([Cout] or
    None) with the inference batch normalization after it folded in:
    ``w * s`` and ``(b - mean) * s + beta``, ``s = scale / sqrt(var + eps)``
    per output channel, computed in f64 and rounded once to w's dtype."""
    cout = w.shape[0]
    s = np.asarray(scale, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps)
    w2 = (w.astype(np.float64) * s.reshape((cout,) + (1,) * (w.ndim - 1))).astype(w.dtype)
    b0 = np.zeros(cout) if b is None else np.asarray(b, np.float64)
    b2 = ((b0 - np.asarray(mean, np.float64)) * s + np.asarray(beta, np.float64)).astype(w.dtype)
    return w2, b2


def _linear(cx, ins):
    from ._ops import linear_or_add
    return [linear_or_add(cx, *ins)]


def _gelu_erf(cx, ins):
    return [cx.t(ins[0]).gelu("none")]


#: the ops that read a narrow-type value (a ``_types.Narrow`` carrier)
NARROW_READERS = ("Cast", "CastLike", "DequantizeLinear", "QuantizeLinear")


def _check_narrow(node, names, ins):
    """Refuse a node other than NARROW_READERS reading a narrow-type value
    (its carrier holds bit patterns or widened integers, not the values):
    they read input 0 (QuantizeLinear only its zero point, DequantizeLinear
    both); CastLike's second input gives only its element type."""
    from ._types import Narrow
    read = {"Cast": (0,), "CastLike": (0, 1), "DequantizeLinear": (0, 2),
            "QuantizeLinear": (2,)}.get(node.op_type, ())
    bad = [f"{n!r} ({v.name})" for i, (n, v) in enumerate(zip(names, ins))
           if isinstance(v, Narrow) and i not in read]
    if bad:
        raise _unsupported(f"input(s) {', '.join(bad)} of a narrow element type: fuelc reads "
                           f"those only in {'/'.join(NARROW_READERS)} (as their data input); "
                           f"cast them to FLOAT (or INT8/UINT8) first")


def _unsupported(msg):
    from ._fold import Unsupported
    return Unsupported(msg)
