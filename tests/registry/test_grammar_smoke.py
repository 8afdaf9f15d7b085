import numpy as np
import pytest

from compiler.graph.opdef import TensorType
from compiler.registry.ops import softmax_last_dim, layer_norm_last_dim
from compiler.registry import (Bind, Decline, RecipeError, count_scalar_slots, evaluate_dag, op,
                               try_instantiate_recipe, validate_recipe, LAST)
from runtime.dtype import DType


def test_softmax_recipe_matches_reference():
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    dag = try_instantiate_recipe(softmax_last_dim.ENTRY, {}, [TensorType((3, 5), DType.F32)])
    assert len(dag.nodes) == 9
    np.testing.assert_allclose(evaluate_dag(dag, [x])[0],
                               softmax_last_dim.ENTRY.reference([x], {}), rtol=1e-6)


def test_layer_norm_has_one_slot_and_declines_bad_payload():
    assert count_scalar_slots(layer_norm_last_dim.RECIPE) == 1
    d = try_instantiate_recipe(layer_norm_last_dim.ENTRY, {"eps": "x"}, [TensorType((2,), DType.F32)])
    assert isinstance(d, Decline) and "eps" in d.reason


def test_validate_rejects_gap_in_binds():
    with pytest.raises(RecipeError) as e:
        validate_recipe(op("Add", Bind(0), Bind(2)))
    assert e.value.reason == "NonContiguousBinds"
    with pytest.raises(RecipeError) as e:
        validate_recipe(op("SumDim", Bind(0), dim=LAST))
    assert e.value.reason == "BadAttrs"
