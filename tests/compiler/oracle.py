"""Helpers for the end-to-end compiler tests: per-dtype tolerances (stated
once, here), random inputs per value domain, and a compile-and-compare check
against the reference interpreter. (A uniquely named module rather than
conftest: pytest puts every test directory on sys.path, so a bare
``from conftest import`` could pick another directory's conftest.)

Kernels come from the default disk cache (``~/.cache/fuelc``) so reruns are
fast; reproducers of failing pipelines go to a per-test temp dir (conftest)."""

from __future__ import annotations

import numpy as np

from compiler import compile, interpret
from runtime.dtype import DType, bf16_to_f32, f32_to_bf16, from_storage

D = DType

# -- tolerances: the one place they are stated -----------------------------------------
# Element-wise ops: a few ulp of the dtype (f16/bf16 compute in f32 and round
# once, so 1 ulp of the storage type plus slack for transcendentals).
TOL = {
    D.F64: dict(rtol=1e-12, atol=1e-12),
    D.F32: dict(rtol=1e-5, atol=1e-6),
    D.F16: dict(rtol=2e-3, atol=2e-3),
    D.BF16: dict(rtol=1.6e-2, atol=1.6e-2),
}
# Accumulating ops (sums, means, cumsum, matmul, log-softmax, index/scatter
# adds) may accumulate in the operand dtype while the reference accumulates in
# f64: the error grows with the reduction length, so it is scaled by ``ACCUM``
# times the number of accumulated terms' square root (random-walk rounding).
ACCUM = 4.0
EXACT = dict(rtol=0, atol=0)  # integers, masks, indices, data movement


def tolerance(dtype: DType, terms: int = 1) -> dict:
    """The allclose tolerance for results of ``dtype`` from ``terms`` accumulated terms."""
    if not dtype.is_float:
        return EXACT
    base = TOL[dtype]
    if terms <= 1:
        return dict(base)
    scale = ACCUM * float(np.sqrt(terms))
    return dict(rtol=base["rtol"] * scale, atol=base["atol"] * scale)


def as_values(arr: np.ndarray, dtype: DType) -> np.ndarray:
    """Storage array -> numbers (bf16 bits decoded) for comparison."""
    if dtype is D.BF16:
        return bf16_to_f32(arr).astype(np.float64)
    return arr.astype(np.float64) if dtype.is_float else arr


def assert_matches(got: np.ndarray, want: np.ndarray, dtype: DType, what: str, terms: int = 1):
    """Shape, dtype and values (NaN == NaN) of a compiled result against the reference."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != reference {want.shape}"
    assert got.dtype == want.dtype, f"{what}: numpy dtype {got.dtype} != reference {want.dtype}"
    np.testing.assert_allclose(as_values(got, dtype), as_values(want, dtype), equal_nan=True,
                               err_msg=what, **tolerance(dtype, terms))


# -- inputs ---------------------------------------------------------------------------------
def random_values(rng, shape, dtype: DType, domain: str = "any") -> np.ndarray:
    """An array of ``dtype`` (``dtype.numpy``: bf16 as ml_dtypes.bfloat16) with values from ``domain``:

    any       floats in [-3, 3]; ints in [-20, 20] (unsigned [0, 40])
    pos       floats in [0.25, 3]; ints in [1, 20]
    nonzero   like ``any`` without values near 0 (divisors)
    small     floats in [-1.5, 1.5]; ints in [-3, 3] (unsigned [0, 6]) (powers)
    ties      few distinct values, so comparisons/arg-extremes see equal elements
    mask      u8 in {0, 1, 2, 255} (any non-zero is true)
    idxN      integer indices in [0, N) (e.g. ``idx3``), repeats included
    """
    shape = tuple(shape)
    if dtype.is_float:
        if domain == "pos":
            v = rng.uniform(0.25, 3.0, shape)
        elif domain == "nonzero":
            v = rng.uniform(0.5, 3.0, shape) * rng.choice([-1.0, 1.0], shape)
        elif domain == "small":
            v = rng.uniform(-1.5, 1.5, shape)
        elif domain == "ties":
            v = rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], shape)
        else:
            v = rng.uniform(-3.0, 3.0, shape)
        if dtype is D.BF16:
            return from_storage(f32_to_bf16(np.asarray(v, np.float32)).reshape(shape), dtype)
        return np.asarray(v).astype(dtype.numpy)
    if domain == "mask":
        return rng.choice(np.array([0, 1, 2, 255], np.uint8), shape).astype(dtype.numpy)
    if domain.startswith("idx"):
        return rng.integers(0, int(domain[3:]), shape).astype(dtype.numpy)
    if dtype.is_signed:
        lo, hi = {"pos": (1, 20), "small": (-3, 3), "ties": (-2, 2)}.get(domain, (-20, 20))
    else:
        lo, hi = {"pos": (1, 20), "small": (0, 6), "ties": (0, 4)}.get(domain, (0, 40))
    v = rng.integers(lo, hi + 1, shape)
    if domain == "nonzero":
        v = np.where(v == 0, 3, v)
    return np.asarray(v).astype(dtype.numpy)


# -- compile and compare --------------------------------------------------------------------
def compile_and_compare(g, feed, terms: dict | None = None, tol_terms: int = 1):
    """Compile ``g``, run it on ``feed`` and compare every output with
    ``interpret``. ``terms`` maps an output name to its accumulation length
    (default ``tol_terms``). Returns the compiled module."""
    m = compile(g)
    got = m.run(**feed)
    want = interpret(g, feed)
    assert set(got) == set(want)
    for name, w in want.items():
        dt = g.nodes[g.outputs[name]].dtype
        assert_matches(got[name], w, dt, f"output {name!r}",
                       (terms or {}).get(name, tol_terms))
    return m
