"""Completeness of the primitive records: every fact every layer needs about a
primitive, checked for every row of the op table, so a new primitive with a
fact missing fails here by name instead of silently (the numpy kernel running
unannounced, an op left out of fused chains, an "unknown" cost).

The facts of a primitive with a kernel (``op_kind``): a numpy formula
(``reference``) and a numpy kernel of its kind, a lowering rule for the cpu
target, a cost family, and a params mapping. An element-wise row also states
its precision class, is in the recipe vocabulary, has a builder, and its
runtime row (``runtime/elementwise.py``: formula, dtypes, cost family, kind)
agrees with it."""
import dataclasses

import pytest

from compiler.codegen.lowering import rule_for
from compiler.graph import OP_TABLE, Graph, Tensor, TensorType
from compiler.graph import kernel_params
from compiler.graph.opdef import ELEMENTWISE_CATEGORIES
from compiler.registry.grammar import COMMUTATIVE, RECIPE_VOCABULARY
from runtime import elementwise as EW
from runtime import params as P
from runtime.cost import default_cost_for_op_kind, unknown_cost
from runtime.numpy_kernels import numpy_kernel_bindings
from runtime.opkind import OpKind

PRECISIONS = ("exact", "approx", "exp", "tanh", "log", "erf")
NUMPY_KINDS = frozenset(k for k, _, _ in numpy_kernel_bindings())


def _built_by_hand() -> set:
    """The element-wise ops the hand-written builders make (operators with
    their scalar forms, ``x.gelu(...)``): the rows without ``methods``."""
    g = Graph()
    x, y = g.input("x", (2,), "f32"), g.input("y", (2,), "f32")
    made = [x + y, x - y, x * y, x / y, x ** y, x % y, x.gelu("tanh"), x.gelu(),
            x.maximum(y), x.minimum(y)]
    return {t.node.op for t in made}


HAND_BUILT = _built_by_hand()


def missing_facts(name: str, d) -> list[str]:
    """What the record of primitive ``name`` lacks, one phrase per fact."""
    if not d.supported or d.op_kind is None:
        return []
    out = []
    if d.reference is None:
        out.append("no numpy formula (reference)")
    if d.op_kind not in NUMPY_KINDS:
        out.append(f"no numpy kernel for {d.op_kind.name} (runtime/numpy_kernels.py)")
    if rule_for(name, "cpu") is None:
        out.append("no lowering rule for the cpu target (@lowers in compiler/codegen/lowering)")
    if default_cost_for_op_kind(d.op_kind) is unknown_cost:
        out.append(f"no cost family for {d.op_kind.name} (runtime/cost.py)")
    if d.category not in ELEMENTWISE_CATEGORIES:
        return out
    if d.precision not in PRECISIONS:
        out.append(f"precision class {d.precision!r} is not one of {PRECISIONS}")
    if name not in RECIPE_VOCABULARY:
        out.append("element-wise but not in the recipe vocabulary (recipe=False)")
    if d.commutative and name not in COMMUTATIVE:
        out.append("commutative row missing from grammar.COMMUTATIVE")
    if d.category in ("unary", "binary"):
        out += _elementwise_facts(name, d)
    return out


def _elementwise_facts(name, d) -> list[str]:
    out = []
    if not d.methods and name not in HAND_BUILT:
        out.append("no builder: give the row methods (x.op() / a.op(b))")
    row = EW.ROWS.get(name)
    if row is None:
        return out + ["no runtime row (runtime/elementwise.py: formula, dtypes, cost family)"]
    if d.op_kind.name != EW.kind_name(name):
        out.append(f"kind {d.op_kind.name} is not the runtime row's {EW.kind_name(name)}")
    if not set(row.dtypes) <= set(d.dtypes):
        out.append(f"numpy kernel dtypes {[t.value for t in row.dtypes]} outside the row's")
    t = TensorType((2, 3), next(iter(sorted(d.dtypes, key=lambda t: t.value))))
    try:
        op_params = kernel_params.to_op_params(name, {}, [t] * d.arity, [t])
        back = kernel_params.from_op_params(d.op_kind, op_params, [t] * d.arity, [t])
        if op_params != P.NO_PARAMS or back != (name, {}):
            out.append(f"params mapping round-trips to {back}, not ({name!r}, {{}})")
    except Exception as e:  # a missing mapping raises KernelParamsError
        out.append(f"no params mapping: {e}")
    return out


@pytest.mark.parametrize("name", sorted(OP_TABLE))
def test_every_primitive_states_every_fact(name):
    assert missing_facts(name, OP_TABLE[name]) == [], f"{name}: {missing_facts(name, OP_TABLE[name])}"


def test_every_runtime_row_has_an_op_table_row():
    for name in EW.ROWS:
        assert name in OP_TABLE and OP_TABLE[name].op_kind is OpKind[EW.kind_name(name)], name


def test_builder_methods_make_their_row():
    g = Graph()
    for name, d in OP_TABLE.items():
        dt = sorted(d.dtypes, key=lambda t: t.value)[0] if d.dtypes else "f32"
        xs = [g.input(f"{name}{i}", (3,), dt) for i in range(d.arity)]
        for m in d.methods:
            out = getattr(Tensor, m)(*xs)
            assert out.node.op == name, (name, m, out.node.op)


def test_a_record_with_facts_missing_is_named():
    """The check can fail: a row like Atan's under a new name has no lowering
    rule, no runtime row and no builder; without precision and recipe flags
    those are named too."""
    fake = dataclasses.replace(OP_TABLE["Atan"], name="Fake", precision=None, recipe=False,
                               methods=())
    got = missing_facts("Fake", fake)
    for fact in ("no lowering rule for the cpu target", "precision class None",
                 "not in the recipe vocabulary", "no builder", "no runtime row"):
        assert any(fact in g for g in got), (fact, got)
    # and a kind without a cost family (NonZeroIndices has none)
    bare = dataclasses.replace(OP_TABLE["Atan"], op_kind=OpKind.NonZeroIndices, category="index")
    assert missing_facts("Atan", bare) == ["no cost family for NonZeroIndices (runtime/cost.py)"]
