"""A FusedLinear or MatMul of 1-4 rows over a B input of at least
``split_gemv.MIN_ELEMENTS`` elements runs as a product batched over chunks of
K, summed, then the bias added (``fuel-split-gemv``): the reference
interpreter's values, the same bits at one and two threads (at two the
chunks are the tiles), and calls of five rows keep the one kernel; on AVX2,
5-16 rows over a B whose rows fall in few cache sets (N a multiple of 1024)
are split too."""
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.codegen import parallel
from compiler.passes import split_gemv
from compiler.registry.builders import linear
from compiler.targets import parse_target
from runtime.cpu_features import missing_cpu_features

K, N = 512, 2048       # B of 2^20 elements: the smallest that is split
V3 = "cpu:x86-64-v3"
needs_v3 = pytest.mark.skipif(bool(missing_cpu_features(parse_target(V3).features)),
                              reason="this CPU cannot run x86-64-v3")
CASES = [("cpu", "f32"), ("cpu", "f64"), pytest.param(V3, "f32", marks=needs_v3)]


def _graph(m, dtype):
    g = Graph()
    x, w, b = g.input("x", (m, K), dtype), g.input("w", (K, N), dtype), g.input("b", (N,), dtype)
    g.output(linear(x, w, b), name="lin")
    g.output(x @ w, name="mm")
    return g


@pytest.mark.parametrize("target,dtype", CASES)
@pytest.mark.parametrize("m", [1, 3])
def test_few_row_products_over_a_large_b_input_are_split_over_k(target, dtype, m):
    assert K * N == split_gemv.MIN_ELEMENTS
    _check_split(target, dtype, m, seed=3)


def _check_split(target, dtype, m, seed):
    """The product of ``m`` rows runs as the split's three kernels, gives the
    reference interpreter's values, and the same bits at one and two threads."""
    rng = np.random.default_rng(seed)
    npt = np.float32 if dtype == "f32" else np.float64
    inputs = {"x": rng.standard_normal((m, K)).astype(npt),
              "w": rng.standard_normal((K, N)).astype(npt), "b": rng.standard_normal(N).astype(npt)}
    g = _graph(m, dtype)
    mod = compile(g, target)
    # (both outputs read the one batched product: fuel-cse merges it)
    assert sorted(mod.kernel_summary()) == _split_kernels(dtype)
    want = interpret(g, inputs)
    tol = 1e-5 if dtype == "f32" else 1e-12
    try:
        outs = []
        for threads in (1, 2):
            parallel.set_num_threads(threads)
            outs.append(mod.run(**inputs))
    finally:
        parallel.set_num_threads(None)
    for name in ("lin", "mm"):
        np.testing.assert_allclose(outs[0][name], want[name], rtol=tol, atol=tol * 10)
        np.testing.assert_array_equal(outs[1][name], outs[0][name], err_msg=f"{name}: 2 threads")


def _split_kernels(dtype="f32"):
    return sorted([f"AddElementwise[{dtype},{dtype},{dtype}] (mlir-cpu)",
                   f"MatMul[{dtype},{dtype},{dtype}] (mlir-cpu)", f"SumReduce[{dtype},{dtype}] (mlir-cpu)"])


@needs_v3
@pytest.mark.parametrize("m", [5, 8, 16])
def test_avx2_splits_up_to_sixteen_rows_over_an_aliased_b(m):
    """B [512, 2048]: its rows 8 KiB apart (``runtime.rows.aliased_rows``)."""
    _check_split(V3, "f32", m, seed=m)


def test_the_wider_split_is_avx2s_alone():
    """17 rows on AVX2, 5-16 rows over a B whose rows are not a multiple of
    1024 elements apart, and 5-16 rows on AVX-512 keep the one product kernel
    (compiled, not run: the module's kernels are what is checked)."""
    from compiler.passes.split_gemv import avx2_rows
    assert avx2_rows(parse_target(V3)) and not avx2_rows(parse_target("cpu:x86-64-v4"))
    assert split_gemv.ALIASED_ROWS == 16

    def kernels(m, n, target):
        g = Graph()
        x, w, b = g.input("x", (m, 1024), "f32"), g.input("w", (1024, n), "f32"), g.input("b", (n,), "f32")
        g.output(linear(x, w, b), name="lin")
        return sorted(compile(g, target, warm=False).kernel_summary())

    assert kernels(8, 2048, V3) == _split_kernels()
    for m, n, target in ((17, 2048, V3), (8, 2064, V3), (8, 2048, "cpu:x86-64-v4"),
                         (16, 3072, "cpu:x86-64-v4")):
        assert kernels(m, n, target) == ["FusedLinear[f32,f32,f32,f32] (mlir-cpu-fused)"], \
            (m, n, target)


def test_five_rows_or_a_smaller_b_keep_the_product_kernel():
    five = compile(_graph(5, "f32")).kernel_summary()
    from compiler.passes.split_gemv import avx2_rows
    assert any("SumReduce" in k for k in five) == avx2_rows(parse_target("cpu"))
    g = Graph()
    x, w = g.input("x", (1, K), "f32"), g.input("w", (K, N - 16), "f32")
    g.output(x @ w, name="mm")
    assert compile(g).kernel_summary() == ["MatMul[f32,f32,f32] (mlir-cpu)"]
