"""The graph arena and its numpy-like builder API.

A ``Graph`` is an append-only list of ``Node``s; a node's ``id`` is its index
and never changes. Nodes are made through ``Graph.add_node`` (primitive ops,
checked by the op's ``OpDef``) or ``Graph.add_fused`` (fused-op registry
entries); both check shapes and dtypes when the node is made and raise
``GraphBuildError`` naming the node, the op, the operand types and the rule.

Users hold ``Tensor`` handles, which carry the numpy-like API
(``x @ w``, ``x.sum(-1, keepdims=True)``, ``x[:, 1:3]``...). The handle API
only *spells* primitive ops; numpy broadcasting is applied in one place
(``_broadcast``) and python scalars are lifted in one place (``_lift``).
There is no implicit dtype promotion: a python scalar takes the tensor's
dtype, and tensors of different dtypes are an error (insert ``cast``).
"""
from __future__ import annotations

import dataclasses
import math
import mmap
import numbers
from typing import Any, Optional, Sequence, Union

import numpy as np

from runtime.dtype import DType, f32_to_bf16, from_storage, to_storage
from runtime.errors import IndexOutOfRangeError
from runtime.indexing import check_indices

from ..errors import GraphBuildError, UnsupportedOpError
from .numerics import scalar_storage
from .ops import OP_TABLE, broadcast_shapes, check_params, fmt_types
from .opdef import VARIADIC, TensorType
from .symbolic import (Sym, SymbolicError, bind_params, bind_symbols,
                       parse_dim, recording, shape_text)

__all__ = ["Graph", "Node", "Tensor", "where", "matmul", "concat", "maximum", "minimum"]

FUSED = "Fused"


@dataclasses.dataclass(eq=False)
class Node:
    """One arena entry. ``op`` is an ``OP_TABLE`` key or ``"Fused"`` (then
    ``fused`` is the registry entry). ``shape``/``dtype`` describe slot 0;
    ``output_types`` lists every output slot (one for primitive ops)."""

    id: int
    op: str
    inputs: tuple[int, ...]
    params: dict
    shape: tuple[int, ...]
    dtype: DType
    name: str
    output_types: tuple[TensorType, ...] = ()
    fused: Any = None

    @property
    def opdef(self):
        """The primitive ``OpDef``, or None for a fused node."""
        return OP_TABLE.get(self.op)

    @property
    def type(self) -> TensorType:
        return TensorType(self.shape, self.dtype)

    def __repr__(self) -> str:
        op = f"Fused[{self.fused.name}]" if self.op == FUSED else self.op
        ins = ", ".join(f"%{i}" for i in self.inputs)
        ps = "".join(f" {k}={v.value if isinstance(v, DType) else v!r}"
                     for k, v in self.params.items())
        return (f"%{self.id} = {op}({ins}){ps} : {self.dtype.value}"
                f"[{shape_text(self.shape)}]  # {self.name}")


Scalar = Union[int, float, bool]


class Graph:
    """An append-only arena of nodes plus the graph's signature.

    Attributes:
        nodes: the arena; ``nodes[i].id == i``.
        inputs: input name -> node id, in declaration order.
        outputs: output name -> node id, in declaration order.
        constants: Const name -> storage array.
        symbols: symbol name -> (lo, hi) bounds (``docs/dynamic-shapes.md``).
        equalities: ``(lhs, rhs, where)`` extents the shape rules assumed equal;
            a call checks them once.
    """

    def __init__(self):
        self.nodes: list[Node] = []
        self.inputs: dict[str, int] = {}
        self.outputs: dict[str, int] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.symbols: dict[str, tuple] = {}
        self.equalities: list[tuple] = []

    # -- arena access ------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self):
        return iter(self.nodes)

    def __getitem__(self, node_id: int) -> Node:
        return self.nodes[self._id(node_id)]

    def node(self, ref) -> Node:
        """The ``Node`` for an id or a handle."""
        return self.nodes[self._id(ref)]

    def handle(self, ref) -> "Tensor":
        """A ``Tensor`` handle for an existing node id."""
        return Tensor(self, self._id(ref))

    def _id(self, ref) -> int:
        if isinstance(ref, Tensor):
            if ref.graph is not self:
                raise GraphBuildError(f"node %{ref.id} ({ref.name}) belongs to another graph")
            return ref.id
        if isinstance(ref, Node):
            ref = ref.id
        if isinstance(ref, (int, np.integer)) and not isinstance(ref, bool) \
                and 0 <= int(ref) < len(self.nodes):
            return int(ref)
        raise GraphBuildError(f"{ref!r} is not a node of this graph "
                              f"({len(self.nodes)} nodes)")

    def __repr__(self) -> str:
        return f"Graph({len(self.nodes)} nodes, inputs={list(self.inputs)}, " \
               f"outputs={list(self.outputs)})"

    def dump(self) -> str:
        """Every node, one per line, then the outputs (and the symbols'
        bounds and recorded equalities of a symbolic graph)."""
        lines = [repr(n) for n in self.nodes]
        lines += [f"output {k} = %{v}" for k, v in self.outputs.items()]
        lines += [f"symbol {n} in {lo}..{'' if hi is None else hi}"
                  for n, (lo, hi) in self.symbols.items()]
        lines += [f"assume {a} == {b}  # {w}" for a, b, w in self.equalities]
        return "\n".join(lines)

    # -- symbols (docs/dynamic-shapes.md) ------------------------------------
    @property
    def is_symbolic(self) -> bool:
        """True when some input extent is a symbol."""
        return bool(self.symbols)

    def signature(self) -> dict:
        """``{"inputs": {name: "f32[batch,seq]"}, "outputs": {...}, "symbols":
        {name: [lo, hi]}}`` (plus ``"equalities"`` when rules recorded any)."""
        def text(nid):
            n = self.nodes[nid]
            return f"{n.dtype.value}[{shape_text(n.shape)}]"
        sig = {"inputs": {k: text(v) for k, v in self.inputs.items()},
               "outputs": {k: text(v) for k, v in self.outputs.items()},
               "symbols": {k: list(b) for k, b in self.symbols.items()}}
        if self.equalities:
            sig["equalities"] = [[str(a), str(b), w] for a, b, w in self.equalities]
        return sig

    def bind_shapes(self, shapes) -> dict[str, int]:
        """The symbol values of a call whose inputs have ``shapes`` (input name
        -> shape). Raises ``ShapeSignatureError`` (``runtime.symbols``) naming
        the input, axis, symbol and sizes when they contradict the signature."""
        declared = {k: self.nodes[v].shape for k, v in self.inputs.items()}
        return bind_symbols(declared, shapes, self.equalities)

    def bind(self, values, image_at_run_time: bool = False) -> "Graph":
        """A static copy of this graph with every symbol replaced by its value
        (``values``: symbol name -> int, every symbol given): each node is
        replayed with its params bound, so every shape rule runs again on the
        sizes. Names, constants and outputs are kept. ``image_at_run_time``:
        the image ops whose input has a symbolic height or width
        (``symbolic.IMAGE_OPS``) get the param ``image_at_run_time``, so
        their kernels take the image size at run time (one kernel for every
        binding; docs/dynamic-shapes.md)."""
        missing = [n for n in self.symbols if n not in values]
        if missing:
            raise GraphBuildError(f"bind: no value for symbol(s) {missing}")
        values = {k: int(v) for k, v in values.items()}
        g = Graph()
        for n in self.nodes:
            params = bind_params(n.params, values)
            if n.op == "Input":
                g.input(params["name"], params["shape"], params["dtype"])
            elif n.op == "Const":
                arr = self.constants[params["name"]]
                g.constants[params["name"]] = arr
                g._append("Const", [], params, [TensorType(arr.shape, params["dtype"])], n.name)
            elif n.op == FUSED:
                if image_at_run_time and _symbolic_image(self, n):
                    params = dict(params, image_at_run_time=True)
                g.add_fused(n.fused, list(n.inputs), params, name=n.name)
            else:
                g.add_node(n.op, list(n.inputs), params, name=n.name)
        g.outputs = dict(self.outputs)
        return g

    # -- leaves and signature ---------------------------------------------
    def input(self, name: str, shape: Sequence[int], dtype="f32") -> "Tensor":
        """Declare a graph input. ``dtype``: a DType or any name DType.parse
        accepts ("f32", "float32"). Raises GraphBuildError on a duplicate name."""
        if not isinstance(name, str) or not name:
            raise GraphBuildError(f"input name must be a non-empty string, got {name!r}")
        if name in self.inputs:
            raise GraphBuildError(f"input {name!r} declared twice")
        if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
            raise GraphBuildError(f"input {name!r}: shape {shape!r} is not a sequence of extents")
        symbols = dict(self.symbols)
        shape = tuple(parse_dim(d, symbols, f"input {name!r} axis {i}")
                      for i, d in enumerate(shape))
        t = self.add_node("Input", [], {"name": name, "shape": shape,
                                        "dtype": _parse_dtype(dtype, f"input {name!r}")},
                          name=name)
        self.symbols = symbols
        self.inputs[name] = t.id
        return t

    def constant(self, value, name: Optional[str] = None, dtype=None) -> "Tensor":
        """Add a constant. ``value``: array-like; ``dtype`` (optional) converts it.
        bf16 values are ``ml_dtypes.bfloat16`` arrays (or numbers with
        ``dtype="bf16"``, rounded); raw ``uint16`` is refused. Without ``dtype``,
        numpy arrays and numpy scalars keep their own dtype (``np.float64``
        stays f64, bool becomes u8), and python values follow PyTorch's
        defaults: floats are f32, ints i64, bools u8. The payload is a private,
        read-only, native-order copy (bf16 as bit patterns): the caller's array
        is never changed. A row-major array over a read-only memory map (an
        ONNX model's external data, a loaded module's weights) is used in
        place: nothing in this process can write it, so it is not copied.
        Returns the Const handle."""
        typed = isinstance(value, (np.ndarray, np.generic))
        arr = np.asarray(value)
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if dtype is not None:
            dt = _parse_dtype(dtype, "constant")
            arr = _to_storage(arr, dt, name)
        else:
            if arr.dtype == np.float64 and not typed:
                arr = arr.astype(np.float32)
            if arr.dtype == np.bool_:
                arr = arr.astype(np.uint8)
            try:
                dt = DType.from_numpy(arr.dtype)
            except Exception as e:
                raise GraphBuildError(f"constant {name!r}: {e}") from None
            arr = to_storage(arr, dt)  # ml_dtypes bf16/fp8 arrays -> their bit patterns
        if name is None:
            name = f"const_{len(self.nodes)}"
            while name in self.constants:
                name += "_"
        if name in self.constants:
            raise GraphBuildError(f"constant {name!r} declared twice")
        if not _read_only_map(arr):
            arr = np.array(arr, order="C", copy=True)
            arr.setflags(write=False)
        t = self.add_node("Const", [], {"name": name, "shape": arr.shape, "dtype": dt},
                          name=name)
        self.constants[name] = arr
        return t

    def output(self, node, name: Optional[str] = None) -> "Tensor":
        """Mark ``node`` as a graph output named ``name`` (default: the node's
        name). Raises GraphBuildError on a duplicate output name."""
        nid = self._id(node)
        name = name if name is not None else self.nodes[nid].name
        if name in self.outputs:
            raise GraphBuildError(f"output {name!r} declared twice")
        self.outputs[name] = nid
        return Tensor(self, nid)

    # -- generic node construction ----------------------------------------
    def add_node(self, op: str, inputs: Sequence = (), params: Optional[dict] = None,
                 name: Optional[str] = None) -> "Tensor":
        """Append a primitive op node after checking it against ``OP_TABLE[op]``:
        op known and supported, operand count, params (kinds, defaults), then the
        op's shape/dtype rule. Returns the new node's handle.

        Raises GraphBuildError (unknown op, bad operands/params/shapes/dtypes)
        or UnsupportedOpError (a spec op fuelc does not support yet); every
        message names the node, the op and the operand types."""
        nid = len(self.nodes)
        opdef = OP_TABLE.get(op)
        name = name or (f"{opdef.mnemonic}_{nid}" if opdef else None)
        label = f"node %{nid}" + (f" ({name})" if name else "")
        if opdef is None:
            import difflib
            close = difflib.get_close_matches(str(op), OP_TABLE, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise GraphBuildError(f"{label}: unknown op {op!r}{hint}")
        ids = [self._id(i) for i in inputs]
        types = [self.nodes[i].type for i in ids]
        if not opdef.supported:
            raise UnsupportedOpError(f"{label}: op {op} is not supported yet by fuelc "
                                     f"(operands {fmt_types(types)})")
        if opdef.arity == VARIADIC:
            if not ids:
                raise GraphBuildError(f"{label}: {op} needs at least one operand")
        elif len(ids) != opdef.arity:
            raise GraphBuildError(f"{label}: {op} takes {opdef.arity} operand(s), got "
                                  f"{len(ids)} {fmt_types(types)}")
        assumed: list = []
        try:
            params = check_params(opdef, params)
            if self.symbols:  # only a symbolic graph's rules can assume equalities
                with recording(assumed, f"{op} {label}"):
                    out = opdef.infer(types, params)
            else:
                out = opdef.infer(types, params)
        except (GraphBuildError, SymbolicError) as e:
            raise GraphBuildError(f"{label}: {e}") from None
        except UnsupportedOpError as e:
            raise UnsupportedOpError(f"{label}: {e}") from None
        params = _canonical_scalars(opdef, params, types)
        self._check_constant_indices(label, op, ids, types, params)
        self._assume(assumed)
        return self._append(op, ids, params, [out], name)

    def _assume(self, assumed) -> None:
        for a, b, where in assumed:
            if not any({a, b} == {x, y} for x, y, _ in self.equalities):
                self.equalities.append((a, b, where))

    def _check_constant_indices(self, label, op, ids, types, params) -> None:
        """Refuse a Const index operand with a value outside the indexed axis
        (the executor checks indices computed at run time)."""
        if op not in _INDEX_OPS:
            return
        src = self.nodes[ids[1]]
        if src.op != "Const":
            return
        size = types[0].shape[params["dim"]]
        if isinstance(size, Sym):  # checked when a call binds the symbols
            return
        try:
            check_indices(self.constants[src.params["name"]], size, f"{label} {op}",
                          f"constant indices {src.name!r} into axis {params['dim']} of {fmt_types(types[:1])}")
        except IndexOutOfRangeError as e:
            raise ConstantIndexError(str(e), e.value, e.position, e.size) from None

    def add_fused(self, entry, inputs: Sequence, params: Optional[dict] = None,
                  name: Optional[str] = None) -> "Tensor":
        """Append a fused node for a registry ``entry`` (an object with ``name``,
        ``infer(input_types, params) -> TensorType | list[TensorType]`` and
        ``reference(inputs, params)``). Slot 0's type becomes the node's
        shape/dtype; all slots are kept in ``node.output_types``. ``entry.infer``
        should raise GraphBuildError; the message gets the node prefixed."""
        nid = len(self.nodes)
        ename = getattr(entry, "name", None)
        name = name or f"{_snake(ename or 'fused')}_{nid}"
        label = f"node %{nid} ({name})"
        for attr in ("name", "infer", "reference"):
            if not hasattr(entry, attr):
                raise GraphBuildError(f"{label}: fused entry {entry!r} has no {attr!r}")
        ids = [self._id(i) for i in inputs]
        types = [self.nodes[i].type for i in ids]
        params = dict(params or {})
        assumed: list = []
        try:
            if self.symbols:
                with recording(assumed, f"Fused[{ename}] {label}"):
                    out = entry.infer(types, params)
            else:
                out = entry.infer(types, params)
        except (GraphBuildError, SymbolicError) as e:
            raise GraphBuildError(f"{label}: Fused[{ename}]: {e}") from None
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        if not outs or not all(isinstance(t, TensorType) for t in outs):
            raise GraphBuildError(f"{label}: Fused[{ename}].infer returned {out!r}; expected "
                                  f"a TensorType or a non-empty list of them")
        self._assume(assumed)
        node = self._append(FUSED, ids, params, outs, name)
        self.nodes[node.id].fused = entry
        return node

    def _append(self, op, ids, params, outs, name) -> "Tensor":
        nid = len(self.nodes)
        self.nodes.append(Node(nid, op, tuple(ids), params, tuple(outs[0].shape),
                               outs[0].dtype, name, tuple(outs)))
        return Tensor(self, nid)

    # -- the one in-place mutation ----------------------------------------
    def rewrite_input(self, node, slot: int, new_input) -> None:
        """Redirect input ``slot`` of ``node`` to ``new_input``. The new producer
        must have the same shape and dtype as the old one."""
        n = self.node(node)
        new = self.node(new_input)
        if not 0 <= slot < len(n.inputs):
            raise GraphBuildError(f"node %{n.id} ({n.op}): no input slot {slot}")
        old = self.nodes[n.inputs[slot]]
        if old.type != new.type:
            raise GraphBuildError(
                f"node %{n.id} ({n.op}): rewrite of input {slot} from %{old.id} "
                f"{fmt_types([old.type])} to %{new.id} {fmt_types([new.type])} changes "
                f"the operand type")
        if new.id == n.id:
            raise GraphBuildError(f"node %{n.id} ({n.op}): cannot consume itself")
        ins = list(n.inputs)
        ins[slot] = new.id
        n.inputs = tuple(ins)


class ConstantIndexError(GraphBuildError, IndexOutOfRangeError):
    """A constant index operand holds a value outside the indexed axis."""


#: primitive ops whose operand 1 indexes axis ``dim`` of operand 0 (valid: [0, size))
_INDEX_OPS = frozenset({"IndexSelect", "Gather", "IndexAdd", "ScatterAdd"})


def _snake(name) -> str:
    from .ops import mnemonic_of
    return mnemonic_of(str(name))


def _parse_dtype(dtype, what) -> DType:
    if dtype is None:  # numpy would read None as float64
        raise GraphBuildError(f"{what}: dtype None; give a dtype such as 'f32'")
    try:
        return DType.parse(dtype)
    except Exception as e:
        raise GraphBuildError(f"{what}: {e}") from None


def _read_only_map(arr: np.ndarray) -> bool:
    """Whether ``arr`` is a native-order, C-contiguous view whose memory is
    a read-only ``mmap`` (every array on the way to it read-only too)."""
    if not (arr.flags.c_contiguous and arr.dtype.isnative and arr.size):
        return False
    base = arr
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    if isinstance(base, memoryview):  # np.frombuffer over a map
        base = base.obj
    return isinstance(base, mmap.mmap) and memoryview(base).readonly


def _to_storage(arr: np.ndarray, dt: DType, name) -> np.ndarray:
    """``arr`` converted to ``dt`` (numbers are rounded) as a storage array."""
    if arr.dtype == dt.numpy:
        return to_storage(arr, dt)
    if dt == DType.BF16:
        if arr.dtype == np.uint16:  # numbers or bit patterns? refuse, as the executor does
            raise GraphBuildError(
                f"constant {name!r}: a bf16 constant takes an ml_dtypes.bfloat16 array or numbers, "
                f"not raw uint16; wrap bit patterns with bits.view(ml_dtypes.bfloat16)")
        return f32_to_bf16(arr.astype(np.float32)).reshape(arr.shape)
    if dt.numpy is None:
        raise GraphBuildError(f"constant {name!r}: dtype {dt.value} has no numpy type to convert "
                              f"{arr.dtype} values to")
    return to_storage(arr.astype(dt.numpy), dt)


# ---------------------------------------------------------------------------
# the handle and its numpy-like API
# ---------------------------------------------------------------------------
def _is_scalar(v) -> bool:
    return isinstance(v, (numbers.Number, np.bool_)) and not isinstance(v, complex)


class Tensor:
    """A handle on one node of a graph, with a numpy-like builder API. Every
    method appends primitive op nodes and returns a new handle."""

    __slots__ = ("graph", "id")
    __array_priority__ = 1000  # numpy defers `ndarray + Tensor` to us

    def __init__(self, graph: Graph, node_id: int):
        self.graph = graph
        self.id = node_id

    # -- facts --------------------------------------------------------------
    @property
    def node(self) -> Node:
        return self.graph.nodes[self.id]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    @property
    def dtype(self) -> DType:
        return self.node.dtype

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def op(self) -> str:
        return self.node.op

    @property
    def ndim(self) -> int:
        return len(self.node.shape)

    @property
    def size(self):
        """The element count: an int, or a ``Sym`` expression for a symbolic shape."""
        n = math.prod(self.node.shape)
        return n if isinstance(n, Sym) else int(n)

    def __repr__(self) -> str:
        return f"Tensor(%{self.id} {self.op} {self.dtype.value}[{shape_text(self.shape)}] {self.name!r})"

    def __hash__(self) -> int:
        return hash((id(self.graph), self.id))

    def __bool__(self):
        raise GraphBuildError(f"the truth value of graph tensor %{self.id} ({self.name}) is "
                              f"not known at build time; use where()/comparisons instead")

    def __len__(self) -> int:
        if not self.shape:
            raise GraphBuildError(f"len() of rank-0 tensor %{self.id} ({self.name})")
        if isinstance(self.shape[0], Sym):
            raise GraphBuildError(f"len() of tensor %{self.id} ({self.name}): extent "
                                  f"{self.shape[0]} is symbolic; use .shape[0]")
        return self.shape[0]

    def _op(self, op, inputs, **params) -> "Tensor":
        return self.graph.add_node(op, inputs, params)

    def _axis(self, axis, op, rank=None, allow_end=False) -> int:
        rank = self.ndim if rank is None else rank
        hi = rank + 1 if allow_end else rank
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise GraphBuildError(f"{op}{fmt_types([self.node.type])}: axis must be an int, "
                                  f"got {axis!r}")
        a = int(axis) + hi if axis < 0 else int(axis)
        if not 0 <= a < hi:
            raise GraphBuildError(f"{op}{fmt_types([self.node.type])}: axis {axis} out of "
                                  f"range for rank {rank}")
        return a

    def _axes(self, axis, op) -> list[int]:
        axes = [axis] if not isinstance(axis, (tuple, list)) else list(axis)
        out = sorted({self._axis(a, op) for a in axes})
        if len(out) != len(axes):
            raise GraphBuildError(f"{op}{fmt_types([self.node.type])}: repeated axis in "
                                  f"{axis!r}")
        return out

    # -- element-wise arithmetic -------------------------------------------
    def __add__(self, other):
        if _is_scalar(other):
            return self._scalar_op("AddScalar", other)
        return _binary("Add", self, other)

    def __radd__(self, other):
        if _is_scalar(other):
            return self._scalar_op("AddScalar", other)
        return _binary("Add", other, self)

    def __sub__(self, other):
        if _is_scalar(other):
            return self._scalar_op("AddScalar", other, negate=True)
        return _binary("Sub", self, other)

    def __rsub__(self, other):
        if _is_scalar(other):
            return self._op("Neg", [self])._scalar_op("AddScalar", other)
        return _binary("Sub", other, self)

    def __mul__(self, other):
        if _is_scalar(other):
            return self._scalar_op("MulScalar", other)
        return _binary("Mul", self, other)

    def __rmul__(self, other):
        if _is_scalar(other):
            return self._scalar_op("MulScalar", other)
        return _binary("Mul", other, self)

    def __truediv__(self, other):
        return _binary("Div", self, other)

    def __rtruediv__(self, other):
        return _binary("Div", other, self)

    def __mod__(self, other):
        return _binary("Rem", self, other)

    def __rmod__(self, other):
        return _binary("Rem", other, self)

    def __pow__(self, p):
        return self.pow(p)

    def __rpow__(self, other):
        return _binary("Pow", other, self)

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)

    def __neg__(self):
        return self._op("Neg", [self])

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def _scalar_op(self, op, value, negate=False) -> "Tensor":
        v = _checked_scalar(op, value, self.dtype, [self.node.type])
        if negate:
            v = -v
            if v == 2**63 and isinstance(v, int):  # x - (-2**63) = x + 2**63 = x - 2**63 (mod 2**64)
                v = -v
        return self._op(op, [self], value=v)

    # -- comparisons -> u8 ---------------------------------------------------
    def __lt__(self, other):
        return _binary("Lt", self, other)

    def __le__(self, other):
        return _binary("Le", self, other)

    def __gt__(self, other):
        return _binary("Gt", self, other)

    def __ge__(self, other):
        return _binary("Ge", self, other)

    def __eq__(self, other):  # type: ignore[override]
        return _binary("Equal", self, other)

    def __ne__(self, other):  # type: ignore[override]
        return _binary("Ne", self, other)

    # -- unary math: the op table's rows add x.exp(), x.atan(), ... (their ``methods``) --
    def log1p(self) -> "Tensor":
        """log(1 + x), accurate for tiny x where ``(x + 1).log()`` rounds
        1 + x to 1 (log1p(1e-9) in f32 is 1e-9, not 0). Kahan's formula in
        primitives: with u = 1 + x, x where u == 1 (or u is inf), else
        log(u) * (x / (u - 1)), which cancels the rounding error of u.
        f16/bf16 are computed in f32 and rounded once."""
        if self.dtype in (DType.F16, DType.BF16):
            return self.cast(DType.F32).log1p().cast(self.dtype)
        u = self + 1.0
        rest = where(u == math.inf, u, u.log() * (self / (u - 1.0)))
        return where(u == 1.0, self, rest)

    def expm1(self) -> "Tensor":
        """exp(x) - 1, accurate for tiny x where ``x.exp() - 1`` cancels
        (expm1(1e-9) in f32 is 1e-9, not 0). Kahan's formula in primitives:
        with u = exp(x), x where u == 1, -1 where u - 1 == -1, u where u is
        inf, else (u - 1) * (x / log(u)). f16/bf16 are computed in f32."""
        if self.dtype in (DType.F16, DType.BF16):
            return self.cast(DType.F32).expm1().cast(self.dtype)
        u = self.exp()
        um1 = u - 1.0
        rest = where(um1 == -1.0, um1, where(u == math.inf, u, um1 * (self / u.log())))
        return where(u == 1.0, self, rest)

    def softplus(self) -> "Tensor":
        """log(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)): no overflow for
        large x and no rounding to 0 for very negative x (softplus(-20) in
        f32 is 2.06e-9)."""
        return maximum(self, 0.0) + (-self.abs()).exp().log1p()

    def gelu(self, approximate: str = "none") -> "Tensor":
        """GELU with PyTorch's/ONNX's ``approximate`` argument: ``"none"`` (the
        default, as there) -> GeluErf, the exact x·Φ(x); ``"tanh"`` -> Gelu."""
        if approximate == "tanh":
            return self._op("Gelu", [self])
        if approximate in ("none", "erf", None):
            return self._op("GeluErf", [self])
        raise GraphBuildError(f"Gelu{fmt_types([self.node.type])}: approximate must be "
                              f"'tanh' or 'none', got {approximate!r}")

    def pow(self, p) -> "Tensor":
        """``x ** p``: an int p -> PowI (repeated multiplication); the float 0.5
        -> Sqrt, as numpy's ``arr ** 0.5`` and PyTorch's ``t ** 0.5`` compute it
        (NaN at -inf, -0 at -0, where IEEE pow gives +inf and +0); any other
        float or a tensor -> Pow, IEEE pow (float dtypes only)."""
        if isinstance(p, (int, np.integer)) and not isinstance(p, bool):
            return self._op("PowI", [self], n=int(p))
        if _is_scalar(p) and float(p) == 0.5 and self.dtype.is_float:
            return self._op("Sqrt", [self])
        return _binary("Pow", self, p)

    def clamp(self, min=None, max=None) -> "Tensor":
        """Clamp to [min, max]; a missing bound is ±inf (floats) or the dtype's range."""
        lo, hi = _bounds(self.dtype)
        return self._op("Clamp", [self], min=lo if min is None else _num(min),
                        max=hi if max is None else _num(max))

    clip = clamp

    def maximum(self, other): return _binary("Maximum", self, other)
    def minimum(self, other): return _binary("Minimum", self, other)

    def cast(self, dtype) -> "Tensor":
        return self._op("Cast", [self], dtype=_parse_dtype(dtype, "cast"))

    astype = cast

    def where(self, a, b) -> "Tensor":
        """``self`` is the u8 condition: ``where(self, a, b)``."""
        return where(self, a, b)

    def masked_fill(self, mask, value) -> "Tensor":
        """``mask != 0 ? value : self``; the mask is broadcast to self's shape."""
        mask = _as_tensor(mask, self.graph, DType.U8)
        if mask.shape != self.shape:
            mask = _broadcast_to("MaskedFill", mask, self.shape, [self, mask])
        v = _checked_scalar("MaskedFill", value, self.dtype, [self.node.type, mask.node.type])
        return self._op("MaskedFill", [self, mask], value=v)

    # -- reductions ----------------------------------------------------------
    def _reduce(self, kind, axis, keepdims) -> "Tensor":
        if axis is None:
            out = self._op(f"{kind}All", [self])
            return out.reshape((1,) * self.ndim) if keepdims else out
        axes = self._axes(axis, f"{kind}Dim")
        out, shape = self, self.shape
        if (len(axes) > 1 and axes == list(range(axes[0], axes[-1] + 1))
                and not any(isinstance(shape[a], Sym) for a in axes)):
            # adjacent static axes (a global average pool's H, W) are one axis
            # of a row-major reshape: one reduction kernel and one pass over
            # x instead of one per axis (docs/architecture.md, "Global pools")
            a0 = axes[0]
            out = out.reshape(shape[:a0] + (math.prod(shape[a] for a in axes),)
                              + shape[axes[-1] + 1:])
            out = out._op(f"{kind}Dim", [out], axis=a0)
        else:
            for a in reversed(axes):
                out = out._op(f"{kind}Dim", [out], axis=a)
        if keepdims:
            for a in axes:
                out = out._op("Unsqueeze", [out], dim=a)
        return out

    def sum(self, axis=None, keepdims=False): return self._reduce("Sum", axis, keepdims)
    def max(self, axis=None, keepdims=False): return self._reduce("Max", axis, keepdims)
    def min(self, axis=None, keepdims=False): return self._reduce("Min", axis, keepdims)
    def mean(self, axis=None, keepdims=False): return self._reduce("Mean", axis, keepdims)

    def _arg(self, op, axis, keepdims) -> "Tensor":
        if axis is None:
            flat = self.reshape((self.size,))
            out = flat._op(op, [flat], axis=0)
            return out.reshape((1,) * self.ndim) if keepdims else out
        a = self._axis(axis, op)
        out = self._op(op, [self], axis=a)
        return out._op("Unsqueeze", [out], dim=a) if keepdims else out

    def argmax(self, axis=None, keepdims=False): return self._arg("ArgMaxDim", axis, keepdims)
    def argmin(self, axis=None, keepdims=False): return self._arg("ArgMinDim", axis, keepdims)

    def cumsum(self, axis=None) -> "Tensor":
        if axis is None:
            flat = self.reshape((self.size,))
            return flat._op("CumSum", [flat], axis=0)
        return self._op("CumSum", [self], axis=self._axis(axis, "CumSum"))

    def reduce_sum_to(self, shape) -> "Tensor":
        return self._op("ReduceSumTo", [self], shape=tuple(shape))

    def reduce_max_to(self, shape) -> "Tensor":
        return self._op("ReduceMaxTo", [self], shape=tuple(shape))

    def softmax(self, axis=-1) -> "Tensor":
        """exp(x - max) / sum(exp(x - max)) along ``axis``, spelled with the
        SoftmaxLastDim recipe's primitives (MaxDim, Unsqueeze, BroadcastTo, Sub,
        Exp, SumDim, Unsqueeze, BroadcastTo, Div) so fusion can find it."""
        a = self._axis(axis, "softmax")
        e = (self - self.max(a, keepdims=True)).exp()
        return e / e.sum(a, keepdims=True)

    def log_softmax(self, axis=-1) -> "Tensor":
        """LogSoftmaxLastDim, moving ``axis`` last and back when it is not last."""
        a = self._axis(axis, "LogSoftmaxLastDim")
        if a == self.ndim - 1:
            return self._op("LogSoftmaxLastDim", [self])
        perm = list(range(self.ndim))
        perm[a], perm[-1] = perm[-1], perm[a]
        moved = self.permute(perm)
        return moved._op("LogSoftmaxLastDim", [moved]).permute(perm)

    # -- shape ---------------------------------------------------------------
    def reshape(self, *shape) -> "Tensor":
        """Row-major reshape; one extent may be -1 (inferred)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(_extent(d) for d in shape)
        if shape.count(-1) > 1:
            raise GraphBuildError(f"Reshape{fmt_types([self.node.type])}: at most one -1 in "
                                  f"{list(shape)}")
        if -1 in shape:
            known = math.prod(d for d in shape if d != -1)
            size = self.size
            try:  # symbolic: the exact quotient (docs/dynamic-shapes.md)
                inferred = None if known == 0 else size // known
                if isinstance(size, int) and isinstance(known, int) and size % known:
                    inferred = None
            except SymbolicError:
                inferred = None
            if inferred is None:
                raise GraphBuildError(f"Reshape{fmt_types([self.node.type])}: cannot infer "
                                      f"-1 in {list(shape)} for {self.size} elements")
            shape = tuple(inferred if d == -1 else d for d in shape)
        if shape == self.shape:
            return self
        return self._op("Reshape", [self], shape=shape)

    def transpose(self, axes=None) -> "Tensor":
        """numpy ``transpose``: ``axes=None`` reverses the axes. Swapping only the
        last two axes is the Transpose op; anything else is Permute."""
        if axes is None:
            axes = tuple(reversed(range(self.ndim)))
        perm = [self._axis(a, "Permute") for a in axes]
        return self.permute(perm)

    @property
    def T(self) -> "Tensor":
        return self.transpose()

    def permute(self, perm) -> "Tensor":
        perm = [self._axis(a, "Permute") for a in perm]
        if perm == list(range(self.ndim)):
            return self
        if self.ndim >= 2 and perm == list(range(self.ndim - 2)) + [self.ndim - 1, self.ndim - 2]:
            return self._op("Transpose", [self])
        return self._op("Permute", [self], perm=tuple(perm))

    def swapaxes(self, a, b) -> "Tensor":
        perm = list(range(self.ndim))
        a, b = self._axis(a, "Permute"), self._axis(b, "Permute")
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(perm)

    def broadcast_to(self, shape) -> "Tensor":
        shape = tuple(_extent(d) for d in shape)
        if shape == self.shape:
            return self
        return self._op("BroadcastTo", [self], shape=shape)

    def unsqueeze(self, axis) -> "Tensor":
        return self._op("Unsqueeze", [self], dim=self._axis(axis, "Unsqueeze", allow_end=True))

    expand_dims = unsqueeze

    def squeeze(self, axis=None) -> "Tensor":
        if axis is None:
            axes = [i for i, d in enumerate(self.shape) if d == 1]
        else:
            axes = self._axes(axis, "Squeeze")
        out = self
        for a in reversed(axes):
            out = out._op("Squeeze", [out], dim=a)
        return out

    def contiguous(self) -> "Tensor":
        return self._op("Contiguize", [self])

    def flip(self, axis) -> "Tensor":
        out = self
        for a in self._axes(axis, "Flip"):
            out = out._op("Flip", [out], dim=a)
        return out

    def roll(self, shift: int, axis: int) -> "Tensor":
        return self._op("Roll", [self], dim=self._axis(axis, "Roll"), shift=int(shift))

    def triu(self, k: int = 0) -> "Tensor":
        return self._op("Triu", [self], diagonal=int(k))

    def tril(self, k: int = 0) -> "Tensor":
        return self._op("Tril", [self], diagonal=int(k))

    def pad(self, pad_width, value: float = 0.0, mode: str = "constant") -> "Tensor":
        """numpy ``pad``: ``pad_width`` is an int, one (before, after) pair for
        every axis, or one pair per axis."""
        pw = np.asarray(pad_width, dtype=object)  # symbolic widths: docs/dynamic-shapes.md
        if not any(isinstance(v, Sym) for v in pw.reshape(-1)):
            pw = np.asarray(pad_width, dtype=np.int64)
        try:
            pairs = np.broadcast_to(pw.reshape(-1, 2) if pw.ndim == 2 else pw, (self.ndim, 2))
        except ValueError:
            raise GraphBuildError(f"Pad{fmt_types([self.node.type])}: pad_width "
                                  f"{pad_width!r} is not one (before, after) pair per axis") \
                from None
        v = _checked_scalar("Pad", value, self.dtype, [self.node.type])
        return self._op("Pad", [self], padding=tuple(v if isinstance(v, Sym) else int(v)
                                                     for v in pairs.reshape(-1)),
                        mode=mode, value=v)

    def slice(self, axis, start, length) -> "Tensor":
        return self._op("Slice", [self], dim=self._axis(axis, "Slice"), start=_extent(start),
                        len=_extent(length))

    def __getitem__(self, key) -> "Tensor":
        """Basic indexing: ints, slices with step 1, ``...`` and ``None``."""
        items = list(key) if isinstance(key, tuple) else [key]
        if sum(1 for k in items if k is Ellipsis) > 1:
            raise GraphBuildError(f"index {key!r}: at most one '...'")
        consumed = sum(1 for k in items if k is not None and k is not Ellipsis)
        if consumed > self.ndim:
            raise GraphBuildError(f"index {key!r}: too many indices for "
                                  f"{fmt_types([self.node.type])}")
        fill = [slice(None)] * (self.ndim - consumed)
        if any(k is Ellipsis for k in items):
            i = next(j for j, k in enumerate(items) if k is Ellipsis)
            items[i:i + 1] = fill
        else:
            items += fill
        out, axis = self, 0
        for k in items:
            if k is None:
                out = out._op("Unsqueeze", [out], dim=axis)
                axis += 1
            elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
                n = out.shape[axis]
                i = int(k) + n if k < 0 else int(k)
                if not _decide(lambda: 0 <= i < n, f"index {k} on axis {axis}"):
                    raise GraphBuildError(f"index {k} out of range for axis {axis} of extent "
                                          f"{n} in {fmt_types([self.node.type])}")
                out = out._op("Slice", [out], dim=axis, start=i, len=1)
                out = out._op("Squeeze", [out], dim=axis)
            elif isinstance(k, slice):
                n = out.shape[axis]
                start, stop, step = _slice_indices(k, n, axis)
                if step != 1:
                    raise GraphBuildError(f"slice {k} on axis {axis}: only step 1 is "
                                          f"supported (use flip() to reverse)")
                length = _decide(lambda: max(0, stop - start) if isinstance(n, int) else
                                 (stop - start if stop >= start else 0), f"slice {k} on axis {axis}")
                if (start, length) != (0, n):
                    out = out._op("Slice", [out], dim=axis, start=start, len=length)
                axis += 1
            else:
                raise GraphBuildError(f"index {k!r} is not supported (ints, slices, ..., None; "
                                      f"use index_select/gather for tensor indices)")
        return out

    # -- indexing ops --------------------------------------------------------
    def index_select(self, indices, axis=0) -> "Tensor":
        idx = _as_tensor(indices, self.graph, DType.U32)
        return self._op("IndexSelect", [self, idx], dim=self._axis(axis, "IndexSelect"))

    def gather(self, indices, axis) -> "Tensor":
        idx = _as_tensor(indices, self.graph, DType.U32)
        return self._op("Gather", [self, idx], dim=self._axis(axis, "Gather"))

    def index_add(self, axis, indices, src) -> "Tensor":
        idx = _as_tensor(indices, self.graph, DType.U32)
        return self._op("IndexAdd", [self, idx, src], dim=self._axis(axis, "IndexAdd"))

    def scatter_add(self, axis, indices, src) -> "Tensor":
        idx = _as_tensor(indices, self.graph, DType.U32)
        return self._op("ScatterAdd", [self, idx, src], dim=self._axis(axis, "ScatterAdd"))


def _extent(d):
    """A builder extent: a Sym as is, anything else as an int."""
    return d if isinstance(d, Sym) else int(d)


def _decide(fn, what):
    """``fn()``, turning an undecidable symbolic comparison into a GraphBuildError."""
    try:
        return fn()
    except SymbolicError as e:
        raise GraphBuildError(f"{what}: {e}") from None


def _slice_indices(k: slice, n, axis):
    """``k.indices(n)`` for an int or symbolic extent ``n`` (step 1 when symbolic)."""
    if not isinstance(n, Sym):
        return k.indices(n)
    if k.step not in (None, 1):
        raise GraphBuildError(f"slice {k} on axis {axis}: only step 1 is supported")

    def clamp(v, default):
        if v is None:
            return default
        v = int(v)
        v = v + n if v < 0 else v

        def pick():  # v clamped to [0, n], as slice.indices does
            if v >= 0:
                return v if v <= n else n if v >= n else None
            return 0
        return _decide(pick, f"slice {k} on axis {axis} of extent {n}")
    return clamp(k.start, 0), clamp(k.stop, n), 1


def _bounds(dtype: DType) -> tuple[float, float]:
    if dtype.is_float:
        return -math.inf, math.inf
    info = np.iinfo(dtype.numpy)
    return int(info.min), int(info.max)


# ---------------------------------------------------------------------------
# central operand lifting and broadcasting
# ---------------------------------------------------------------------------
def _graph_of(values) -> Graph:
    for v in values:
        if isinstance(v, Tensor):
            return v.graph
    raise GraphBuildError("at least one operand must be a graph tensor")


def _canonical_scalars(opdef, params: dict, types) -> dict:
    """``num`` params (scalar operands) in one spelling per operand dtype: a
    float for a float tensor, an exact int for an integer tensor (the infer
    rule has checked it is integral; a saturating Clamp bound beyond int64
    stays a float), so equal ops compare and hash equal."""
    nums = [s.name for s in opdef.params if s.kind == "num"]
    if not nums or not types:
        return params
    is_float = types[0].dtype.is_float
    out = dict(params)
    for k in nums:
        v = out[k]
        if is_float:
            out[k] = float(v)
        elif isinstance(v, float) and math.isfinite(v) and -2.0**63 <= v < 2.0**63:
            out[k] = int(v)
    return out


def _num(v):
    """A Clamp bound as given: an int stays exact (2**53 + 1 is no float)."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return int(v)
    return float(v)


def _checked_scalar(op: str, value, dtype: DType, types) -> "int | float":
    """``value`` as a param after checking that ``dtype`` can hold it:
    integer dtypes take integral values within their range (no implicit
    promotion, no silent wrap-around) and get them as an exact int (2**53 + 1
    stays 2**53 + 1), float dtypes as a float. Raises GraphBuildError naming
    the op."""
    v = float(value)
    if dtype.is_int:
        info = np.iinfo(dtype.numpy)
        if not (math.isfinite(v) and v.is_integer() and info.min <= int(value) <= info.max):
            raise GraphBuildError(
                f"{op}{fmt_types(types)}: python scalar {value!r} is not representable in "
                f"{dtype.value} (range {info.min}..{info.max}, integers only; no implicit "
                f"promotion: cast the tensor first)")
        return int(value)
    return v


def _as_tensor(value, graph: Graph, dtype: DType, op: str = "operand", types=()) -> Tensor:
    """A handle for ``value``: a Tensor as is (same graph), a python scalar as a
    rank-0 Const of ``dtype`` (checked by ``_checked_scalar``, errors naming
    ``op`` and the operand ``types``), an ndarray as a Const of its own dtype
    (``dtype`` when it is a python list)."""
    if isinstance(value, Tensor):
        if value.graph is not graph:
            raise GraphBuildError(f"operand %{value.id} ({value.name}) belongs to another graph")
        return value
    if _is_scalar(value):
        v = _checked_scalar(op, value, dtype, types)
        return graph.constant(from_storage(scalar_storage(v, dtype), dtype), dtype=dtype)
    if isinstance(value, np.ndarray):
        return graph.constant(value)
    if isinstance(value, (list, tuple)):
        return graph.constant(np.asarray(value), dtype=dtype)
    raise GraphBuildError(f"cannot use {type(value).__name__} {value!r} as a graph operand")


def _broadcast_to(op, t: Tensor, shape, operands) -> Tensor:
    if broadcast_shapes(t.shape, shape) != tuple(shape) or len(t.shape) > len(shape):
        raise GraphBuildError(f"{op}{fmt_types([o.node.type for o in operands])}: operand "
                              f"shape {list(t.shape)} cannot broadcast to {list(shape)}")
    return t.broadcast_to(shape)


def _broadcast(op: str, operands: list) -> list[Tensor]:
    """Lift python scalars/arrays to Consts (taking the tensors' dtype) and
    broadcast every operand to the common numpy shape with BroadcastTo. The
    single place where builder-level broadcasting happens."""
    graph = _graph_of(operands)
    like = next(v for v in operands if isinstance(v, Tensor))
    types = [v.node.type for v in operands if isinstance(v, Tensor)]
    ts = [_as_tensor(v, graph, like.dtype, op, types) for v in operands]
    shape: Optional[tuple] = ()
    for t in ts:
        with recording([], op):  # the BroadcastTo nodes record the equalities
            shape = broadcast_shapes(shape, t.shape)
        if shape is None:
            raise GraphBuildError(f"{op}{fmt_types([t.node.type for t in ts])}: shapes are "
                                  f"not broadcast-compatible (numpy rules: right-aligned, "
                                  f"each axis equal or 1)")
    return [t.broadcast_to(shape) for t in ts]


def _binary(op: str, a, b) -> Tensor:
    a, b = _broadcast(op, [a, b])
    return a.graph.add_node(op, [a, b])


def where(cond, a, b) -> Tensor:
    """``cond != 0 ? a : b`` with numpy broadcasting; ``cond`` must be u8 (a
    comparison result); a python scalar branch takes the other branch's dtype."""
    graph = _graph_of([cond, a, b])
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise GraphBuildError("Where: at least one branch must be a graph tensor (its dtype "
                              "types the other)")
    like = a if isinstance(a, Tensor) else b
    types = [like.node.type]
    c = _as_tensor(cond, graph, DType.U8, "Where", types)
    a = _as_tensor(a, graph, like.dtype, "Where", types)
    b = _as_tensor(b, graph, like.dtype, "Where", types)
    c, a, b = _broadcast("Where", [c, a, b])
    return graph.add_node("Where", [c, a, b])


def maximum(a, b) -> Tensor:
    return _binary("Maximum", a, b)


def minimum(a, b) -> Tensor:
    return _binary("Minimum", a, b)


def matmul(a, b) -> Tensor:
    """numpy ``matmul``: 1-D operands are promoted (and the added axis removed),
    batch axes broadcast; a batch axis where lhs is a multiple of rhs is kept
    (GQA, handled by the MatMul op). f32 @ bf16 gives f32."""
    graph = _graph_of([a, b])
    like = a if isinstance(a, Tensor) else b
    a = _as_tensor(a, graph, like.dtype)
    b = _as_tensor(b, graph, like.dtype)
    if a.ndim == 0 or b.ndim == 0:
        raise GraphBuildError(f"MatMul{fmt_types([a.node.type, b.node.type])}: operands must "
                              f"have rank >= 1")
    squeeze = []
    if a.ndim == 1:
        a = a.reshape((1, a.shape[0]))
        squeeze.append(-2)
    if b.ndim == 1:
        b = b.reshape((b.shape[0], 1))
        squeeze.append(-1)
    ba, bb = a.shape[:-2], b.shape[:-2]
    n = max(len(ba), len(bb))
    ba, bb = (1,) * (n - len(ba)) + ba, (1,) * (n - len(bb)) + bb
    ta, tb = [], []
    for x, y in zip(ba, bb):
        if x == y or (y != 0 and y != 1 and x % y == 0):  # equal, or GQA (kept)
            ta.append(x)
            tb.append(y)
        elif x == 1 or y == 1:
            ta.append(max(x, y) if x == 1 else x)
            tb.append(max(x, y) if y == 1 else y)
        else:
            raise GraphBuildError(f"MatMul{fmt_types([a.node.type, b.node.type])}: batch "
                                  f"extents {x} and {y} neither broadcast nor form a GQA "
                                  f"multiple")
    a = a.broadcast_to(tuple(ta) + a.shape[-2:])
    b = b.broadcast_to(tuple(tb) + b.shape[-2:])
    out = graph.add_node("MatMul", [a, b])
    if squeeze:  # drop the axes added for 1-D operands
        keep = [ax for ax in (-2, -1) if ax not in squeeze]
        out = out.reshape(out.shape[:-2] + tuple(out.shape[ax] for ax in keep))
    return out


def concat(xs: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along ``axis`` (Concat); shapes must match elsewhere."""
    xs = list(xs)
    if not xs:
        raise GraphBuildError("Concat: needs at least one operand")
    graph = _graph_of(xs)
    ts = [_as_tensor(x, graph, xs[0].dtype) for x in xs]
    a = ts[0]._axis(axis, "Concat")
    return graph.add_node("Concat", ts, {"dim": a})


def _row_method(name: str, arity: int):
    """The builder method an op-table row names in its ``methods``."""
    if arity == 1:
        def method(self):
            return self._op(name, [self])
    else:
        def method(self, other):
            return _binary(name, self, other)
    method.__doc__ = f"The ``{name}`` primitive ({OP_TABLE[name].category})."
    return method


for _name, _d in OP_TABLE.items():
    for _m in _d.methods:
        if _m in vars(Tensor):
            raise TypeError(f"op {_name}: Tensor.{_m} is defined twice (by hand and by the row)")
        setattr(Tensor, _m, _row_method(_name, _d.arity))


def _symbolic_image(graph: "Graph", node) -> bool:
    """Whether ``node`` is an image op (``symbolic.IMAGE_OPS``) taking the
    run-time image param whose input has a symbolic height or width."""
    from .symbolic import IMAGE_OPS
    if node.fused.name not in IMAGE_OPS or not any(
            p.name == "image_at_run_time" for p in node.fused.params):
        return False
    shape = graph.nodes[node.inputs[0]].type.shape
    return any(isinstance(shape[a], Sym) for a in (2, 3) if a < len(shape))
