"""Sibling products merged by ``fuel-fuse`` (``merge_sibling_linears``): the
products of one x by constant weights (a Llama block's q/k/v and gate/up,
BERT's q/k/v) become one product of the concatenated weights, packed, each
result a column slice of it. Numerics against the reference interpreter and
bit-identity with the unmerged pipeline on both ISA levels; the pass itself:
tests/passes/fuse_sibling_linears.mlir."""
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.passes import DEFAULT_PIPELINE
from compiler.registry.builders import linear
from compiler.targets import parse_target
from runtime.cpu_features import missing_cpu_features

TARGETS = [pytest.param(t, marks=pytest.mark.skipif(
    bool(missing_cpu_features(parse_target(t).features)), reason=f"this CPU cannot run {t}"))
    for t in ("cpu:x86-64-v3", "cpu:x86-64-v4")]

# (without the residual fold too: unmerged, ``kv = k + v`` would fold v as k's
# residual, whose epilogue adds k's bias after the products, not the same bits)
UNMERGED = DEFAULT_PIPELINE.replace("fuel-fuse{runtime=false}",
                                    "fuel-fuse{runtime=false siblings=false linear_residuals=false}")


def _graph(bias: bool):
    """x [2, 5, 48] times 3 weights (q 64, k 32, v 32 columns: 128 merged)
    and 2 more (gate/up of 40 each: 80, a whole number of AVX2 panels only),
    each result used on its own."""
    rng = np.random.default_rng(5)
    g = Graph()
    x = g.input("x", (2, 5, 48), "f32")
    outs = []
    for i, n in enumerate((64, 32, 32)):
        w = g.constant((rng.standard_normal((48, n)) / 7).astype(np.float32), name=f"w{i}")
        b = g.constant(rng.standard_normal(n).astype(np.float32), name=f"b{i}") if bias else None
        outs.append(linear(x, w, b))
    h = outs[0].relu()
    wg = g.constant((rng.standard_normal((64, 40)) / 8).astype(np.float32), name="wg")
    wu = g.constant((rng.standard_normal((64, 40)) / 8).astype(np.float32), name="wu")
    gate, up = linear(h, wg), linear(h, wu)
    g.output(outs[1] + outs[2], name="kv")
    g.output(gate.silu() * up, name="mlp")
    return g, rng.standard_normal((2, 5, 48)).astype(np.float32)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("bias", [True, False])
def test_merged_products_match_the_reference_and_the_unmerged_bits(target, bias):
    g, x = _graph(bias)
    m = compile(g, target=target)
    want = interpret(g, {"x": x})
    got = m.run(x=x)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=2e-5)
    split = compile(g, target=target, pipeline=UNMERGED)
    for k in want:  # each output element is the same chain of FMAs over K
        np.testing.assert_array_equal(got[k], split.run(x=x)[k])
    products = [s for s in m.kernel_summary() if s.startswith(("FusedLinear", "MatMul"))]
    unmerged = [s for s in split.kernel_summary() if s.startswith(("FusedLinear", "MatMul"))]
    assert len(unmerged) == 5
    # q/k/v merge (128 columns: whole panels on both levels); gate/up (80)
    # only where the panel is 16 columns (x86-64-v3)
    assert len(products) == (2 if target == "cpu:x86-64-v3" else 3), products
    assert all(s.endswith("[B packed]") for s in products[:1]), products
