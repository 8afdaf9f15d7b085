"""Decompose is total at the data level: for random (often invalid) params
and input types, ``try_instantiate_recipe`` returns a DAG or a Decline and
never raises; a DAG over float inputs computes what the reference computes."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.graph.numerics import dtype_of
from compiler.graph.opdef import TensorType
from compiler.registry import Decline, RecipeDag, default_registry, evaluate_dag, \
    try_instantiate_recipe
from runtime.dtype import DType

from fused_cases import cases

CASES = cases()
NAMES = sorted(CASES)
DTYPES = [DType.F32, DType.F16, DType.F64, DType.I32, DType.U32, DType.U8, DType.BF16]
JUNK = [None, -3, 0, 1, 7, 2.5, -1e300, float("nan"), True, "mean", "Q8_0", (1, 2), (0, 0), (),
        DType.F32, b"x"]


@st.composite
def scenario(draw):
    name = draw(st.sampled_from(NAMES))
    entry = default_registry()[name]
    inputs, params = CASES[name][draw(st.integers(0, len(CASES[name]) - 1))]
    types = [TensorType(np.shape(x), dtype_of(np.asarray(x))) for x in inputs]
    params = dict(params)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.integers(0, 5))
        if kind == 0 and types:  # perturb one dim
            i = draw(st.integers(0, len(types) - 1))
            if types[i].shape:
                a = draw(st.integers(0, len(types[i].shape) - 1))
                s = list(types[i].shape)
                s[a] = max(0, s[a] + draw(st.sampled_from([-1, 1, 2])))
                types[i] = TensorType(tuple(s), types[i].dtype)
        elif kind == 1 and types:  # change a dtype
            i = draw(st.integers(0, len(types) - 1))
            types[i] = TensorType(types[i].shape, draw(st.sampled_from(DTYPES)))
        elif kind == 2:  # drop or duplicate an input
            if types and draw(st.booleans()):
                types.pop(draw(st.integers(0, len(types) - 1)))
            elif types:
                types.append(types[0])
        elif kind == 3 and entry.params:  # junk a param value
            p = draw(st.sampled_from(entry.params)).name
            params[p] = draw(st.sampled_from(JUNK))
        elif kind == 4 and entry.params:  # drop a param
            params.pop(draw(st.sampled_from(entry.params)).name, None)
        elif kind == 5:
            params["bogus"] = 1
    return entry, types, params


def _data(t, rng):
    if t.dtype == DType.BF16:
        return None
    return rng.uniform(-1, 1, t.shape).astype(t.dtype.numpy)


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(scenario(), st.integers(0, 2**31))
def test_try_instantiate_never_raises(sc, seed):
    entry, types, params = sc
    out = try_instantiate_recipe(entry, params, types)
    assert isinstance(out, (RecipeDag, Decline))
    if isinstance(out, Decline):
        assert out.op == entry.name and out.reason
        return
    want = entry.infer(types, params)  # an instantiated recipe implies valid inputs
    want = want if isinstance(want, list) else [want]
    assert [(tuple(w.shape), w.dtype) for w in want] == \
        [(tuple(t.shape), t.dtype) for t in out.output_types()]
    if not all(t.dtype in (DType.F32, DType.F64) for t in types):
        return  # integer payloads (indices, packed weights) need structured data
    rng = np.random.default_rng(seed)
    inputs = [_data(t, rng) for t in types]
    got = evaluate_dag(out, inputs)
    ref = entry.reference(inputs, params)
    ref = ref if isinstance(ref, list) else [ref]
    for g, r in zip(got, ref):
        g, r = g.astype(np.float64), r.astype(np.float64)
        # Junk params such as -1e300 overflow the payload dtype: where the
        # reference overflows, the recipe must overflow too (inf - inf may be
        # NaN in one evaluation order and inf in the other); elsewhere, agree.
        over = ~np.isfinite(r)
        assert not np.isfinite(g[over]).any(), "recipe finite where the reference overflows"
        np.testing.assert_allclose(g[~over], r[~over], rtol=1e-4, atol=1e-4, equal_nan=True)
