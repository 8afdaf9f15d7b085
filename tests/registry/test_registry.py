"""Registry facts, validation, CSE keys, runtime-registered fused ops."""
import math

import pytest

from compiler.graph.opdef import PARAM_KINDS, VARIADIC, TensorType
from compiler.registry import (
    LAST, SLOT, Any_, Bind, Decline, Dims, Extent, FusedParamsError, RecipeError, RegistryError,
    SameAs, SeeThrough, WithDim, count_scalar_slots, cse_key, default_registry, op, recipe_for,
    register_runtime_fused, runtime_entry, runtime_params, structural_hash,
    try_instantiate_recipe, validate_pattern, validate_recipe,
)
from runtime.dtype import DType
from runtime.opkind import OpKind

R = default_registry()
F32 = DType.F32


def test_the_spec_ops_with_their_ids_then_fuelc_s_and_frozen():
    # the spec's 25, then fuelc's additions (AwqMatmul is 25, MaxPool2D 26,
    # ExpandDepthwise 27)
    assert [e.id for e in R] == list(range(1, 28))
    assert R["FlashAttnBackwardV"].id == 24 and R[25].name == "AwqMatmul"
    assert R[26].name == "MaxPool2D" and R[27].name == "ExpandDepthwise"
    assert R.get("softmax_last_dim") is R[1]
    assert default_registry() is R
    with pytest.raises(Exception):
        R[1].id = 3
    with pytest.raises(RegistryError, match="did you mean SoftmaxLastDim"):
        R["SoftmaxLastDm"]


def test_entry_facts():
    mnemonics = set()
    for e in R:
        assert e.mnemonic.islower() and e.mnemonic not in mnemonics
        mnemonics.add(e.mnemonic)
        assert all(p.kind in PARAM_KINDS for p in e.params)
        assert e.arity == VARIADIC or e.arity == len(e.input_names)
        assert 1 <= e.min_arity <= e.max_arity
        assert e.destructive_input == (0 if e.name == "InplaceAffine" else None)
        assert e.num_outputs == (2 if e.name in ("SelectiveScan", "SsdChunkScan") else 1)
        if e.id <= 21:
            assert e.op_kind is not None
    assert R["PowIBackward"].op_kind == OpKind.PowIElementwiseBackward
    assert R["FlashAttnBackwardK"].op_kind == OpKind.FlashAttnBackwardK
    assert R["AwqMatmul"].op_kind == OpKind.AwqMatmul  # fuelc addition (spec: none)
    assert R["MaxPool2D"].op_kind == OpKind.MaxPool2D  # fuelc addition
    assert R["SoftmaxLastDim"].backward.fused == "SoftmaxLastDimBackward"


def test_static_recipes_and_patterns_validate():
    for e in R:
        if e.recipe.roots is not None:
            validate_recipe(e.recipe.roots)
        for p in e.patterns:
            validate_pattern(p.root)
    assert count_scalar_slots(R["LayerNormLastDimBackward"].recipe.roots) == 3
    assert count_scalar_slots(R["RmsNormLastDimBackward"].recipe.roots) == 2
    assert count_scalar_slots(R["InplaceAffine"].recipe.roots) == 2
    t = [TensorType((2, 5), F32)]
    assert count_scalar_slots(recipe_for("SoftmaxLastDim", {}, t)) == 0
    # the scale is a MulScalar param ahead of the softmax, no open slot
    assert count_scalar_slots(recipe_for("SoftmaxLastDim", {"scale": 0.25}, t)) == 0


@pytest.mark.parametrize("bad,reason", [
    (op("Add", Bind(0), Bind(2)), "NonContiguousBinds"),
    (op("Exp", SeeThrough(Bind(0))), "NonConcreteRegion"),
    (op("Add", Bind(0), Any_()), "NonConcreteRegion"),
    (op("MinDim", Bind(0), axis=0), "UnRepresentable"),
    (op("NoSuchOp", Bind(0)), "UnRepresentable"),
    (op("Add", Bind(0)), "BadArity"),
    (op("SumDim", Bind(0)), "BadAttrs"),                        # missing axis
    (op("SumDim", Bind(0), dim=0), "BadAttrs"),                 # unknown param
    (op("SumDim", Bind(0), axis=1.5), "BadAttrs"),              # wrong kind
    (op("Reshape", Bind(0), shape=LAST), "BadAttrs"),           # LAST on a shape
    (op("BroadcastTo", Bind(0), shape=SameAs(3)), "BadAttrs"),  # rel index out of range
    (op("Reshape", Bind(0), shape=Dims((Extent(1, LAST),))), "BadAttrs"),
    (op("PowI", Bind(0), n=SLOT), "BadSlot"),                    # only Add/MulScalar slots
    (op("SumDim", Bind(0), axis=WithDim(0, LAST, 1)), "BadAttrs"),
])
def test_validate_recipe_rejects(bad, reason):
    with pytest.raises(RecipeError) as e:
        validate_recipe(bad)
    assert e.value.reason == reason


def test_decline_reasons():
    t = TensorType((2, 4), F32)
    assert isinstance(try_instantiate_recipe(R["RmsNormLastDim"], {"eps": 1e-5}, [t, t]), Decline)
    d = try_instantiate_recipe(R["RmsNormLastDim"], {}, [t])
    assert isinstance(d, Decline) and "eps" in d.reason
    d = try_instantiate_recipe(R["QMatMul"], {"quant_type": "Q2_K", "k": 256, "n": 1},
                               [TensorType((1, 256), F32), TensorType((21,), DType.U32)])
    assert isinstance(d, Decline) and "Q2_K is not supported yet" in d.reason
    d = try_instantiate_recipe(R["Conv2D"], {}, [TensorType((1, 1, 2, 2), F32),
                                                 TensorType((1, 1, 3, 3), F32)])
    assert isinstance(d, Decline) and "kernel" in d.reason


def test_cse_key_is_deterministic_and_bit_exact():
    e = R["FlashAttn"]
    k1 = cse_key(e, {"softmax_scale": 0.125, "causal": True})
    k2 = cse_key(e, {"softmax_scale": 0.125, "causal": True, "softcap": None,
                     "window_size_left": None})
    assert k1 == k2 and hash(k1) == hash(k2) and k1.tag == 12
    assert cse_key(e, {"softmax_scale": 0.125 + 2**-52}) != cse_key(e, {"softmax_scale": 0.125})
    assert cse_key(e, {"softmax_scale": 1.0, "window_size_left": 0}) != \
        cse_key(e, {"softmax_scale": 1.0})
    n = R["RmsNormLastDim"]
    assert cse_key(n, {"eps": 0.0}) != cse_key(n, {"eps": -0.0})
    assert cse_key(n, {"eps": math.nan}) == cse_key(n, {"eps": math.nan})
    assert cse_key(R["FlashAttnBackwardQ"], {"softmax_scale": 1.0}) != \
        cse_key(R["FlashAttnBackwardK"], {"softmax_scale": 1.0})
    assert cse_key(R["AwqMatmul"], {}).tag == 23
    f = R["FusedSoftmaxCrossEntropy"]
    assert cse_key(f, {"reduction": "sum"}).ints == (1, -100)
    with pytest.raises(FusedParamsError, match="reduction"):
        cse_key(f, {"reduction": "avg"})


def test_runtime_fused_dedup_monotonic_and_never_reused():
    # regions no other test or model builds (the registry is process-wide: a
    # region another test registered first would keep that test's name and id)
    odd = lambda v: op("Floor", op("Sin", op("Floor", v)))
    a = register_runtime_fused(op("MulScalar", op("Add", Bind(0), op("Tanh", odd(Bind(1)))),
                                  value=SLOT), "first")
    assert a >= 0x8000
    # same structure, commutative operands swapped, different name: same id
    b = register_runtime_fused(op("MulScalar", op("Add", op("Tanh", odd(Bind(1))), Bind(0)),
                                  value=SLOT), "second")
    assert b == a and runtime_entry(a).name == "first"
    c = register_runtime_fused(op("MulScalar", op("Sub", Bind(0), op("Tanh", odd(Bind(1)))),
                                  value=SLOT))
    d = register_runtime_fused(op("Sigmoid", op("Cos", odd(Bind(0)))))
    assert a < c < d and len({a, c, d}) == 3
    assert register_runtime_fused(op("Sigmoid", op("Cos", odd(Bind(0))))) == d
    with pytest.raises(RecipeError):
        register_runtime_fused(op("Add", Bind(1), Bind(1)))
    e = runtime_entry(c)
    assert e.destructive_input is None and e.arity == 2 and e.recipe.roots == recipe_for(c)
    assert cse_key(e, runtime_params([2.0])).bits == (0x4000000000000000,)
    with pytest.raises(RegistryError):
        runtime_entry(0xFFF0)


def test_structural_hash_ignores_dag_spelling():
    x = Bind(0)
    shared = op("Exp", x)
    dag = op("Add", shared, shared)
    tree = op("Add", op("Exp", Bind(0)), op("Exp", Bind(0)))
    assert structural_hash(dag) == structural_hash(tree)
    assert structural_hash(op("Sub", x, op("Exp", x))) != structural_hash(op("Sub", op("Exp", x), x))


def test_recipe_for_static_and_per_call():
    assert recipe_for("InplaceAffine") is R["InplaceAffine"].recipe.roots
    with pytest.raises(RegistryError, match="input_types"):
        recipe_for("Conv2D")
    root = recipe_for("Conv2D", {}, [TensorType((1, 1, 4, 4), F32), TensorType((1, 1, 2, 2), F32)])
    validate_recipe(root)
