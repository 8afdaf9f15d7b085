"""PyTorch import: ``import_program(ep) -> Graph`` for a ``torch.export``
``ExportedProgram``, ``compile_module(model, example_args)`` (export, import,
``compiler.compile``) and the ``torch.compile(model, backend="fuelc")``
backend (``backend.py``). Needs the optional ``torch`` extra
(``pip install -e '.[torch]'``); nothing else in fuelc imports torch.

The program is first decomposed to core ATen (``ep.run_decompositions``)
with a table that keeps the ops fuelc fuses better whole (``KEEP``:
attention, layer/RMS norm, GELU, SiLU, linear, convolutions), as torch-mlir
and IREE do. Every FX node is then visited in order (``_ops.OPS`` maps an
ATen overload such as ``aten.add.Tensor`` to builder calls). Parameters,
buffers and lifted constants are numpy arrays that become named graph
constants where a graph op uses them, once per tensor (a tensor under two
names is one constant); a node whose inputs are all such constants is run
by torch itself at import (constant folding: ``arange``, ``full``, masks).

Refused with one ``TorchImportError`` listing everything found
(``.issues``): ATen ops without a handler, programs that mutate a buffer or
an input, non-tensor inputs or outputs. Symbolic dims (``torch.export.Dim``)
are a ``SymbolicShapeError``.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Optional, Sequence

import numpy as np

from ...errors import CompilerError, GraphBuildError, UnsupportedOpError
from ...graph import Graph, Tensor
from ..onnx import Issue
from ..onnx._fold import Unsupported

__all__ = ["import_program", "load_program", "compile_module", "compile_program",
           "CompiledProgram", "TorchImportError", "SymbolicShapeError", "Issue", "KEEP",
           "decomposition_table", "supported_ops"]

#: ATen ops kept whole by the decomposition table (fuelc has fused kernels for them).
KEEP = ("scaled_dot_product_attention.default", "layer_norm.default", "rms_norm.default",
        "gelu.default", "silu.default", "linear.default", "conv1d.default", "conv2d.default")


class TorchImportError(CompilerError, ValueError):
    """The program cannot be imported. ``issues`` lists every unsupported
    node found (``Issue``: ATen op, FX node name, why), or is empty for a
    program-level error."""

    def __init__(self, message: str, issues: Sequence[Issue] = ()):
        super().__init__(message)
        self.issues = list(issues)


class SymbolicShapeError(TorchImportError):
    """An input has a symbolic dim (exported with ``dynamic_shapes``)."""


def supported_ops() -> list[str]:
    """The ATen overloads the importer builds (others fold only when all
    their inputs are constants)."""
    from ._ops import OPS
    return sorted(OPS)


def decomposition_table():
    """``torch.export.default_decompositions()`` without the ``KEEP`` ops."""
    import torch
    table = torch.export.default_decompositions()
    for name in KEEP:
        packet, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet), overload)
        if op in table:
            del table[op]
    return table


def import_program(ep) -> Graph:
    """Import a ``torch.export.ExportedProgram`` into a fuelc ``Graph``.
    Inputs keep the names of the program's user inputs; outputs are
    ``output`` (one) or ``output_0``, ``output_1``, ... in the program's
    flattened order; ``torch.bool`` values are u8 (0/1). Raises
    TorchImportError / SymbolicShapeError."""
    torch = _torch()
    if not isinstance(ep, torch.export.ExportedProgram):
        raise TorchImportError(f"import_program takes a torch.export.ExportedProgram, got "
                               f"{type(ep).__name__} (export a module with "
                               f"torch.export.export(model, args), or use compile_module)")
    _check_static(ep)
    with warnings.catch_warnings():  # torch 2.13's own deprecation noise, nothing to act on
        warnings.filterwarnings("ignore", r".*isinstance\(treespec, LeafSpec\)", FutureWarning)
        ep = ep.run_decompositions(decomposition_table())
    return _Importer(ep).run()


def load_program(path) -> Graph:
    """``import_program(torch.export.load(path))`` for a program saved with
    ``torch.export.save`` (a ``.pt2`` file); an unreadable file is a
    TorchImportError."""
    torch = _torch()
    try:
        ep = torch.export.load(path)
    except Exception as e:  # zip, pickle and version errors of torch's loader
        raise TorchImportError(f"cannot read the torch.export program {path}: "
                               f"{type(e).__name__}: {e}") from None
    return import_program(ep)


def _torch():
    try:
        import torch
    except ImportError:
        raise TorchImportError("PyTorch is not installed; install fuelc's torch extra: "
                               "pip install -e '.[torch]'") from None
    return torch


def _check_static(ep):
    import torch
    from torch.export.graph_signature import InputKind
    found = []
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for spec in ep.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        val = placeholders[spec.arg.name].meta.get("val")
        if isinstance(val, torch.Tensor):
            found += [f"input {spec.arg.name!r} axis {i}: symbolic size {d}"
                      f"{_range(ep, d)}" for i, d in enumerate(val.shape)
                      if not isinstance(d, int)]
    if found:
        raise SymbolicShapeError(
            "the program has symbolic dims, which fuelc does not compile yet:\n" +
            "\n".join(f"  - {s}" for s in found) +
            "\nexport with static shapes (no dynamic_shapes / torch.export.Dim), once per "
            "input shape you need")


def _range(ep, d) -> str:
    r = ep.range_constraints.get(getattr(d, "node", None) and d.node.expr)
    return f" (range {r.lower}..{r.upper})" if r is not None else ""


class _Unavailable:
    """A value the importer cannot give (an unused second output, such as
    max_pool2d's indices); using it is an issue saying why."""

    def __init__(self, why: str):
        self.why = why


class _Importer:
    def __init__(self, ep):
        self.ep = ep
        self.g = Graph()
        self.values: dict = {}          # FX node -> Tensor | ndarray | scalar | tuple
        self.poisoned: set = set()
        self.issues: list[Issue] = []
        self._consts: dict[int, tuple[np.ndarray, Tensor]] = {}
        self._const_names: dict[int, str] = {}
        self._transposed: dict[int, np.ndarray] = {}
        self._holders: dict[int, list] = {}  # id(array) -> the placeholders holding it

    # -- values --------------------------------------------------------------
    def t(self, v, like: Optional[Tensor] = None) -> Tensor:
        """A graph tensor for value ``v`` (arrays become constants, once per
        array, named after the parameter they hold; with ``like``, a new
        constant of like's dtype)."""
        if isinstance(v, Tensor):
            return v
        if isinstance(v, _Unavailable):
            raise Unsupported(v.why)
        if like is not None:
            return self.g.constant(np.asarray(v), dtype=like.dtype)
        if not isinstance(v, np.ndarray):
            raise Unsupported(f"{type(v).__name__} {v!r} used as a tensor")
        hit = self._consts.get(id(v))
        if hit is None:
            name = self._const_names.get(id(v))
            while name is not None and name in self.g.constants:
                name += "_"
            hit = (v, self.g.constant(v, name=name))
            self._consts[id(v)] = hit
        return hit[1]

    def arr(self, v, what: str, node=None) -> np.ndarray:
        if isinstance(v, np.ndarray):
            return v
        raise Unsupported(f"{what} is computed at run time; fuelc needs it constant at import")

    def transposed(self, w: np.ndarray) -> Optional[np.ndarray]:
        """``w.T`` (a Linear weight [out, in] as [in, out]), made once per array
        and named ``<parameter>.T``; None when the parameter is also used
        otherwise than as a Linear weight (an embedding table tied to the
        head), so that it is stored once and the product reads it transposed."""
        users = [u for n in self._holders.get(id(w), ()) for u in n.users]
        if any(_op_name(u.target) != "aten.linear.default" or u.args[1] not in
               self._holders[id(w)] for u in users):
            return None
        hit = self._transposed.get(id(w))
        if hit is None:
            hit = np.ascontiguousarray(w.T)
            self._transposed[id(w)] = hit
            if id(w) in self._const_names:
                self._const_names[id(hit)] = self._const_names[id(w)] + ".T"
        return hit

    # -- the import ----------------------------------------------------------
    def run(self) -> Graph:
        from torch.export.graph_signature import OutputKind
        self._placeholders()
        from ._ops import conv_bn_pairs
        self.bn_conv = conv_bn_pairs(self)   # batch norm node -> the conv it folds into
        for node in self.ep.graph.nodes:
            if node.op == "call_function":
                self._visit(node)
        out_node = next(n for n in self.ep.graph.nodes if n.op == "output")
        specs = self.ep.graph_signature.output_specs
        mutated = [(s, a) for s, a in zip(specs, out_node.args[0])
                   if s.kind != OutputKind.USER_OUTPUT]
        for spec, arg in mutated:
            what = getattr(spec.kind, "name", str(spec.kind)).lower().replace("_", " ")
            by = _op_name(arg.target) if hasattr(arg, "target") and arg.op == "call_function" \
                else getattr(arg, "name", arg)
            self.issues.append(Issue(
                "mutation", spec.target or "?",
                f"the program writes {what.replace(' mutation', '')} {spec.target!r} (the new "
                f"value comes from {by}); fuelc compiles functional programs: export the "
                f"model in eval() mode, keep state outside it (return the new value as an "
                f"output instead)"))
        users = [(s, a) for s, a in zip(specs, out_node.args[0])
                 if s.kind == OutputKind.USER_OUTPUT]
        for i, (spec, arg) in enumerate(users):
            name = "output" if len(users) == 1 else f"output_{i}"
            if arg in self.poisoned:
                continue
            v = self.values.get(arg, arg)
            if not isinstance(v, (Tensor, np.ndarray)):
                self.issues.append(Issue("output", name, f"a {type(v).__name__} output ({v!r}); "
                                                         f"fuelc modules return tensors"))
                continue
            self.g.output(self.t(v), name=name)
        if self.issues:
            ops = sorted({x.op_type for x in self.issues if x.op_type.startswith("aten.")})
            head = f" (ATen ops without a fuelc handler or with refused arguments: " \
                   f"{', '.join(ops)})" if ops else ""
            lines = "\n".join(f"  - {x}" for x in self.issues)
            raise TorchImportError(
                f"cannot import the program: {len(self.issues)} unsupported construct(s)"
                f"{head}:\n{lines}\nsupported ops: compiler.frontends.torch.supported_ops() "
                f"(docs/torch.md)", self.issues)
        return self.g

    def _placeholders(self):
        import torch
        from torch.export.graph_signature import InputKind
        from ._dtypes import UnsupportedDType, dtype_of, to_numpy
        ep = self.ep
        nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
        by_storage = {}
        for spec in ep.graph_signature.input_specs:
            node = nodes[spec.arg.name]
            if spec.kind == InputKind.USER_INPUT:
                val = node.meta.get("val")
                if not isinstance(val, torch.Tensor):
                    self.issues.append(Issue("input", node.name,
                                             f"a {type(val).__name__} input; fuelc takes tensor "
                                             f"inputs (make it a constant of the model)"))
                    self.poisoned.add(node)
                    continue
                try:
                    dt = dtype_of(val.dtype)
                except UnsupportedDType as e:
                    raise TorchImportError(f"input {node.name!r}: {e}") from None
                self.values[node] = self.g.input(node.name, tuple(val.shape), dt)
                continue
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
                t = ep.state_dict.get(spec.target)
                if t is None:  # a non-persistent buffer
                    t = ep.constants[spec.target]
            elif spec.kind == InputKind.CONSTANT_TENSOR:
                t = ep.constants[spec.target]
            else:
                self.issues.append(Issue("input", node.name, f"input kind {spec.kind} "
                                                             f"(tokens, custom objects) "
                                                             f"is not supported"))
                self.poisoned.add(node)
                continue
            if not isinstance(t, torch.Tensor):
                self.issues.append(Issue("input", node.name, f"{spec.kind}: a "
                                                             f"{type(t).__name__}"))
                self.poisoned.add(node)
                continue
            key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
                   t.stride(), t.dtype)
            if key not in by_storage:  # one array (one constant) per tensor
                try:
                    by_storage[key] = to_numpy(t)
                except UnsupportedDType as e:
                    self.issues.append(Issue("constant", spec.target, str(e)))
                    self.poisoned.add(node)
                    continue
                self._const_names[id(by_storage[key])] = spec.target
            self.values[node] = by_storage[key]
            self._holders.setdefault(id(by_storage[key]), []).append(node)

    def _visit(self, node):
        from ._ops import OPS, bind, fold, check_result
        name = _op_name(node.target)
        if any(a in self.poisoned for a in node.all_input_nodes):
            if name not in OPS and not _is_getitem(node):
                self.issues.append(Issue(name, node.name, _missing(name)))
            self.poisoned.add(node)
            return
        try:
            if _is_getitem(node):
                src, i = node.args
                out = self.values[src][i]
                if isinstance(out, _Unavailable) and node.users:
                    raise Unsupported(out.why)
            elif node in self.bn_conv.values():
                out = None  # built by the batch normalization it folds into
            elif (folded := fold(self, node)) is not None:
                out = folded
            elif name in OPS:
                out = OPS[name](self, bind(self, node))
                out = check_result(self, node, out)
            else:
                raise Unsupported(_missing(name))
        except Unsupported as e:
            self.issues.append(Issue(name, node.name, str(e)))
            self.poisoned.add(node)
            return
        except (GraphBuildError, UnsupportedOpError) as e:
            self.issues.append(Issue(name, node.name, f"fuelc cannot build it: {e}"))
            self.poisoned.add(node)
            return
        self.values[node] = out


def _is_getitem(node) -> bool:
    import operator
    return node.target is operator.getitem


def _op_name(target) -> str:
    """``aten.add.Tensor`` for torch.ops.aten.add.Tensor; other callables by name."""
    name = getattr(target, "name", None)
    if callable(name):  # an OpOverload: name() is "aten::add.Tensor"
        n = name()
        return n.replace("::", ".") + ("" if "." in n.split("::")[-1] else ".default")
    return getattr(target, "__name__", str(target))


def _missing(name: str) -> str:
    base = name.split(".")[1] if name.count(".") >= 2 else name
    if base.endswith("_") and not base.startswith("_"):
        return (f"in-place op {name} is not supported (torch.export functionalizes in-place "
                f"ops on intermediates; this one remains because it writes an input or a "
                f"buffer: return the new value instead)")
    if "dropout" in name or "bernoulli" in name or "rand" in name:
        return ("a random op is not supported (a training-mode Dropout: export the model "
                "after model.eval())")
    return "ATen op not supported by fuelc"


@dataclasses.dataclass
class CompiledProgram:
    """A compiled ``ExportedProgram``: call it with the program's positional
    (torch tensor) arguments; returns torch tensors in the program's output
    structure, sharing memory with fuelc's outputs. ``module`` is the
    ``CompiledModule``, ``graph`` the imported ``Graph``; ``save(path)``
    writes the usual ``.fuel`` file."""
    module: object
    graph: Graph
    input_names: list
    out_spec: object
    out_dtypes: list

    def __call__(self, *args, **kwargs):
        import torch.utils._pytree as pytree
        from ._dtypes import from_numpy, to_numpy
        leaves = pytree.tree_leaves((args, kwargs))
        if len(leaves) != len(self.input_names):
            raise TypeError(f"the program takes {len(self.input_names)} tensor input(s) "
                            f"({', '.join(self.input_names)}), got {len(leaves)}")
        got = self.module.run(**{n: to_numpy(t) for n, t in zip(self.input_names, leaves)})
        names = list(self.graph.outputs)  # output, or output_0, output_1, ... in order
        outs = [from_numpy(got[n], dt) for n, dt in zip(names, self.out_dtypes)]
        return pytree.tree_unflatten(outs, self.out_spec)

    def save(self, path, sign_with=None, weights="zip"):
        return self.module.save(path, sign_with=sign_with, weights=weights)


def compile_program(ep, target="cpu", **kwargs) -> CompiledProgram:
    """Import and compile an ``ExportedProgram`` (see ``compile_module``)."""
    import torch
    from torch.export.graph_signature import InputKind, OutputKind
    from ...driver import compile as compile_graph
    graph = import_program(ep)
    module = compile_graph(graph, target, **kwargs)
    names = [s.arg.name for s in ep.graph_signature.input_specs
             if s.kind == InputKind.USER_INPUT]
    out_node = next(n for n in ep.graph.nodes if n.op == "output")
    dtypes = []
    for spec, arg in zip(ep.graph_signature.output_specs, out_node.args[0]):
        if spec.kind == OutputKind.USER_OUTPUT:
            val = arg.meta.get("val") if hasattr(arg, "meta") else torch.as_tensor(arg)
            dtypes.append(val.dtype)
    return CompiledProgram(module, graph, names, ep.call_spec.out_spec, dtypes)


def compile_module(model, example_args, target="cpu", dynamic_shapes=None, **kwargs
                   ) -> CompiledProgram:
    """``torch.export.export(model, example_args, dynamic_shapes=...)``, then
    ``import_program`` and ``compiler.compile(graph, target)``. The result is
    called like the model (torch tensors in, torch tensors out) and saves
    with ``.save(path)``. Symbolic dims in ``dynamic_shapes`` raise
    SymbolicShapeError."""
    torch = _torch()
    ep = torch.export.export(model, tuple(example_args), dynamic_shapes=dynamic_shapes)
    return compile_program(ep, target, **kwargs)
