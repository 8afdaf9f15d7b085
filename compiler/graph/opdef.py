"""The op-table record: one ``OpDef`` per primitive op.

This is the single source of truth every layer derives from: the graph
builder checks shapes/dtypes with ``infer``, the reference interpreter runs
``reference``, the IRDL text of the ``fuel`` dialect is generated from
``mnemonic``/``arity``/``params``, and the dispatch key comes from ``op_kind``.

Contract (shared by compiler.graph, compiler.dialect, compiler.codegen,
compiler.registry):

* ``name``      the op's CamelCase name, e.g. ``"SumDim"``, ``"AddScalar"``.
* ``mnemonic``  snake_case; the MLIR op is ``fuel.<mnemonic>`` (``fuel.sum_dim``).
* ``arity``     number of tensor operands, or ``VARIADIC`` (Concat).
* ``params``    ordered ``ParamSpec``s; a node stores its params as a plain
                dict ``{name: value}`` with python values of the declared kind.
* ``infer(input_types, params) -> TensorType``; raises ``GraphBuildError``
  naming the op, the operand shapes/dtypes and the rule broken.
* ``reference(inputs: list[np.ndarray], params) -> np.ndarray``: numpy math,
  the oracle for all numerics tests.
* ``op_kind``   the runtime ``OpKind`` (None: no binding-table kernel; handled
                structurally by the executor, e.g. views, Const, Reshape).
* ``category``  one of CATEGORIES, used by lowering and fusion to apply a
                rule per family instead of per op.
* ``supported`` False for ops the table lists but rejects with a
                "not supported yet" error (in-place, memory/state, control).
* ``dtypes``    the element types accepted for the op's data operand(s) ("T"
                in a signature); ``None`` means the op does not constrain them
                (leaves, pure data movement on raw bits). ``infer`` enforces it;
                lowering and kernel coverage may read it instead of re-deriving.
* ``commutative`` a binary op whose operands may be swapped (fusion matching
                tries both orders; CSE and the structural hash sort them).
* ``recipe``    in the recipe/fusion vocabulary (``registry.grammar``): fused
                ops' recipes and ``fuel-fuse-runtime`` regions may contain it.
                Element-wise rows are in it unless they say otherwise.
* ``precision`` the claim of its generated kernel: ``"exact"`` (correctly
                rounded or exact), a transcendental whose ulp bound the
                target's codegen states (``"exp"``, ``"tanh"``, ``"log"``,
                ``"erf"``), or ``"approx"`` (no ulp claim). None: not stated
                (the completeness test requires it of element-wise rows).
* ``methods``   the ``Tensor`` builder methods made from the row
                (``x.atan()``, ``a.bitwise_and(b)``, ``a & b``).

The numpy formula and cost family of an element-wise row live on the runtime
side (``runtime/elementwise.py``), which also declares its ``OpKind``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from runtime.dtype import DType
from runtime.opkind import OpKind

VARIADIC = -1

# Param kinds and their python value types / MLIR attribute encodings:
#   "i64"     int            -> IntegerAttr i64
#   "f64"     float          -> FloatAttr f64
#   "num"     int | float    -> IntegerAttr i64 for an int, FloatAttr f64 for a float
#                               (scalar operands: an integer scalar stays exact)
#   "i64s"    tuple[int,...] -> ArrayAttr of IntegerAttr i64
#   "dtype"   DType          -> StringAttr ("f32")
#   "str"     str            -> StringAttr
#   "bool"    bool           -> IntegerAttr i1 (BoolAttr)
#   "bytes"   bytes          -> (Const payload; not an MLIR attribute, carried as a
#                               DenseResourceElementsAttr/DenseElementsAttr by emission)
PARAM_KINDS = ("i64", "f64", "num", "i64s", "dtype", "str", "bool", "bytes")

CATEGORIES = (
    "leaf", "binary", "unary", "scalar", "compare", "select", "reduce",
    "matmul", "view", "shape", "cast", "index", "softmax", "inplace",
    "memory", "control", "fused",
)

#: The element-wise categories: one output element per input element.
ELEMENTWISE_CATEGORIES = frozenset({"binary", "unary", "scalar", "compare", "select", "cast"})


class _Required:
    """Sentinel default of a required param (``dataclasses.MISSING`` cannot be
    a field default: the dataclass would treat the field as having none)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    name: str
    kind: str
    default: Any = REQUIRED  # REQUIRED: the node must supply it

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def __post_init__(self):
        if self.kind not in PARAM_KINDS:
            raise ValueError(f"ParamSpec {self.name!r}: unknown kind {self.kind!r}")


@dataclasses.dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: DType


@dataclasses.dataclass(frozen=True)
class OpDef:
    name: str
    mnemonic: str
    arity: int
    params: tuple[ParamSpec, ...]
    category: str
    op_kind: Optional[OpKind]
    infer: Callable[[list[TensorType], dict], TensorType]
    reference: Optional[Callable[[list, dict], Any]]
    supported: bool = True
    doc: str = ""
    dtypes: Optional[frozenset] = None
    commutative: bool = False
    recipe: bool = False
    precision: Optional[str] = None
    methods: tuple = ()
