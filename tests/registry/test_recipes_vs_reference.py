"""For every fused op: its recipe, instantiated and run on the numpy
references of the primitives, equals the op's own reference (written from
the spec's math), over several shapes and params."""
import numpy as np
import pytest

from compiler.graph.numerics import dtype_of
from compiler.graph.opdef import TensorType
from compiler.registry import (Decline, default_registry, evaluate_dag, normalize_params,
                               try_instantiate_recipe)

from fused_cases import cases

CASES = cases()
ALL = [(name, i) for name, cs in CASES.items() for i in range(len(cs))]


def test_every_entry_has_cases():
    assert sorted(CASES) == sorted(default_registry().names())


def types_of(inputs):
    return [TensorType(np.shape(x), dtype_of(np.asarray(x))) for x in inputs]


@pytest.mark.parametrize("name,i", ALL)
def test_recipe_equals_reference(name, i):
    entry = default_registry()[name]
    inputs, params = CASES[name][i]
    p = normalize_params(entry, params)
    types = types_of(inputs)
    want = entry.infer(types, p)
    dag = try_instantiate_recipe(entry, params, types)
    assert not isinstance(dag, Decline), str(dag)
    ref = entry.reference(inputs, p)
    got = evaluate_dag(dag, inputs)
    refs = ref if isinstance(ref, list) else [ref]
    wants = want if isinstance(want, list) else [want]
    assert len(got) == len(refs) == len(wants) == entry.num_outputs
    for g, r, w in zip(got, refs, wants):
        assert g.shape == r.shape == tuple(w.shape)
        assert dtype_of(g) == dtype_of(r) == w.dtype
        np.testing.assert_allclose(g.astype(np.float64), r.astype(np.float64),
                                   rtol=2e-5, atol=2e-5, equal_nan=True)
