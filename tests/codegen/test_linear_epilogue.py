"""FusedLinear's gelu epilogue: ``fuel-fuse`` folds a GeluErf that is a
FusedLinear's only user (``passes.fuse.fold_linear_epilogues``), the cpu
kernel applies the erf GELU in its register tiles
(``lowering.fused_forward._linear_epilogue``; packed B: the strategy
``matmul-packed-epilogue``), and the recipe ends with the same GeluErf.
Numerics against the reference interpreter of the unfused graph on both ISA
levels; the pass itself: tests/passes/fuse_linear_epilogue.mlir."""
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.registry.builders import fused, linear
from compiler.targets import parse_target
from runtime.cpu_features import missing_cpu_features

TARGETS = [pytest.param(t, marks=pytest.mark.skipif(
    bool(missing_cpu_features(parse_target(t).features)), reason=f"this CPU cannot run {t}"))
    for t in ("cpu:x86-64-v3", "cpu:x86-64-v4")]

# (x shape, N): packed B (a multiple of both panels, 64 columns or more) with
# full and remainder register rows, few rows (1-4), a rank-3 x (the builder's
# Reshape between the product and the GeluErf), a call large enough to split
# over threads; N padded to whole panels (200 columns: 208 on AVX2, 224 on
# AVX-512, the product's first 200 a view); an unpacked B (N not a multiple
# of the panel, too far from one to be padded: one [1, K, N] panel, partial
# column tiles)
SHAPES = {"packed": ((50, 96), 128), "few-rows": ((3, 64), 64), "rank3": ((2, 9, 40), 96),
          "threads": ((256, 128), 512), "padded": ((17, 48), 200), "unpacked": ((17, 48), 70)}


def _graph(x_shape, n, dtype="f32", extra_use=False, bias_scale=1.0):
    rng = np.random.default_rng(7)
    npdt = {"f32": np.float32, "f64": np.float64}[dtype]
    k = x_shape[-1]
    g = Graph()
    x = g.input("x", x_shape, dtype)
    w = g.constant((rng.standard_normal((k, n)) / np.sqrt(k)).astype(npdt), name="w")
    b = g.constant((rng.standard_normal(n) * bias_scale).astype(npdt), name="b")
    y = linear(x, w, b)
    g.output(y.gelu(), name="y")
    if extra_use:
        g.output(y, name="pre")
    return g, (rng.standard_normal(x_shape) * 2).astype(npdt)


def _steps(m):
    return m.kernel_summary()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(SHAPES))
def test_folded_gelu_matches_the_reference(case, target):
    x_shape, n = SHAPES[case]
    g, x = _graph(x_shape, n)
    m = compile(g, target=target)
    got, want = m.run(x=x)["y"], interpret(g, {"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    steps = _steps(m)
    assert not any("Gelu" in s for s in steps), steps      # folded: one kernel
    linear_steps = [s for s in steps if s.startswith("FusedLinear")]
    assert len(linear_steps) == 1, steps
    assert ("[B packed]" in linear_steps[0]) == (case != "unpacked"), steps


@pytest.mark.parametrize("target", TARGETS)
def test_epilogue_agrees_with_the_unfused_kernels(target):
    # the same erf expansion as the GeluErf kernel and the same FMA chain over
    # K: with a zero bias the results are bit-identical; with a bias they
    # differ by its rounding (the packed kernel starts from the bias, the
    # epilogue kernel adds it after the products, as the recipe does)
    from compiler.passes import DEFAULT_PIPELINE
    split_pipeline = DEFAULT_PIPELINE.replace("fuel-fuse{runtime=false}",
                                              "fuel-fuse{runtime=false epilogues=false}")
    for scale in (0.0, 1.0):
        g, x = _graph((64, 128), 256, bias_scale=scale)
        fused_y = compile(g, target=target).run(x=x)["y"]
        split = compile(g, target=target, pipeline=split_pipeline)
        assert any("Gelu" in s for s in _steps(split))
        if scale:
            np.testing.assert_allclose(fused_y, split.run(x=x)["y"], rtol=1e-5, atol=4e-6)
        else:
            np.testing.assert_array_equal(fused_y, split.run(x=x)["y"])


def test_shared_pre_activation_keeps_the_gelu_kernel():
    g, x = _graph((50, 96), 128, extra_use=True)
    m = compile(g, target="cpu")
    out, want = m.run(x=x), interpret(g, {"x": x})
    for k in ("y", "pre"):
        np.testing.assert_allclose(out[k], want[k], rtol=1e-5, atol=1e-5)
    assert any("Gelu" in s for s in _steps(m))


def test_f64_keeps_the_gelu_kernel():
    # an f64 erf has no vector expansion: the kernel does not serve it
    g, x = _graph((50, 96), 128, dtype="f64")
    m = compile(g, target="cpu")
    np.testing.assert_allclose(m.run(x=x)["y"], interpret(g, {"x": x})["y"], rtol=1e-12,
                               atol=1e-12)
    assert any("Gelu" in s for s in _steps(m))


def test_recipe_ends_with_the_gelu():
    # a target without the fused kernel decomposes FusedLinear{gelu} (packed
    # or not) to MatMul + bias + GeluErf
    rng = np.random.default_rng(3)
    w = rng.standard_normal((37, 64)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    x = rng.standard_normal((7, 37)).astype(np.float32)
    packed = np.ascontiguousarray(w.reshape(37, 4, 16).transpose(1, 0, 2))
    for wt, p in ((w, {}), (packed, {"b_panel": 16})):
        g = Graph()
        xi = g.input("x", x.shape, "f32")
        g.output(fused("FusedLinear", xi, g.constant(wt, name="w"), g.constant(bias, name="b"),
                       gelu=True, **p), name="y")
        m = compile(g, "cpu:x86-64-v3", pipeline="base-map")
        assert "fused_linear" not in m.ir["optimized"]
        want = interpret(g, {"x": x})["y"]
        y = x.astype(np.float64) @ w + bias
        from runtime.elementwise import gelu_erf
        np.testing.assert_allclose(want, gelu_erf(y), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(m(x=x), want, rtol=1e-5, atol=1e-5)
