"""FusedLinear's gelu epilogue: ``fuel-fuse`` folds a GeluErf that is a
FusedLinear's only user (``passes.fuse.fold_linear_epilogues``), the cpu
kernel applies the erf GELU in its register tiles
(``lowering.fused_forward._linear_epilogue``; packed B: the strategy
``matmul-packed-epilogue``), and the recipe ends with the same GeluErf.
Numerics against the reference interpreter of the unfused graph on both ISA
levels; the pass itself: tests/passes/fuse_linear_epilogue.mlir."""
import itertools
import math

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


def _tanh_chain(y):
    """GPT-2's gelu_new as exporters spell it (Pow(x, 3), the constants in
    f32): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    c, k = float(np.float32(0.044715)), float(np.float32(math.sqrt(2 / math.pi)))
    return (y * 0.5) * ((((y + (y ** 3) * c) * k).tanh()) + 1.0)


ACTIVATIONS = {"erf": lambda y: y.gelu(), "tanh": lambda y: y.gelu("tanh"),
               "tanh-chain": _tanh_chain}


def _graph(x_shape, n, dtype="f32", extra_use=False, bias_scale=1.0, act="erf"):
    rng = np.random.default_rng(7)
    npdt = {"f32": np.float32, "f64": np.float64}[dtype]
    k = x_shape[-1]
    g = Graph()
    x = g.input("x", x_shape, dtype)
    w = g.constant((rng.standard_normal((k, n)) / np.sqrt(k)).astype(npdt), name="w")
    b = g.constant((rng.standard_normal(n) * bias_scale).astype(npdt), name="b")
    y = linear(x, w, b)
    g.output(ACTIVATIONS[act](y), name="y")
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
@pytest.mark.parametrize("case", ["packed", "rank3", "unpacked"])
@pytest.mark.parametrize("act", ["tanh", "tanh-chain"])
def test_folded_tanh_gelu_matches_the_unfused_graph(act, case, target):
    # the Gelu primitive or its spelled-out chain becomes gelu_tanh: one
    # kernel, within f32 rounding of the reference interpreter's unfused graph
    x_shape, n = SHAPES[case]
    g, x = _graph(x_shape, n, act=act)
    m = compile(g, target=target)
    np.testing.assert_allclose(m.run(x=x)["y"], interpret(g, {"x": x})["y"], rtol=2e-5,
                               atol=2e-5)
    steps = _steps(m)
    assert [s.split("[")[0] for s in steps] == ["FusedLinear"], steps
    assert ("[B packed]" in steps[0]) == (case != "unpacked"), steps


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


@pytest.mark.parametrize("act", ["erf", "tanh-chain"])
def test_shared_pre_activation_keeps_the_gelu_kernel(act):
    g, x = _graph((50, 96), 128, extra_use=True, act=act)
    m = compile(g, target="cpu")
    out, want = m.run(x=x), interpret(g, {"x": x})
    for k in ("y", "pre"):
        np.testing.assert_allclose(out[k], want[k], rtol=1e-5, atol=1e-5)
    steps = _steps(m)
    assert not any("gelu" in s.lower() and s.startswith("FusedLinear") for s in steps)
    assert len(steps) > 1, steps


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
    from runtime.elementwise import gelu_erf, gelu_tanh
    for (wt, p), (act, ref) in itertools.product(
            ((w, {}), (packed, {"b_panel": 16})),
            (("gelu", gelu_erf), ("gelu_tanh", gelu_tanh))):
        g = Graph()
        xi = g.input("x", x.shape, "f32")
        g.output(fused("FusedLinear", xi, g.constant(wt, name="w"), g.constant(bias, name="b"),
                       **{act: True}, **p), name="y")
        m = compile(g, "cpu:x86-64-v3", pipeline="base-map")
        assert "fused_linear" not in m.ir["optimized"]
        assert ("fuel.gelu_erf" if act == "gelu" else "fuel.gelu\"") in m.ir["optimized"]
        want = interpret(g, {"x": x})["y"]
        y = x.astype(np.float64) @ w + bias
        np.testing.assert_allclose(want, ref(y), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(m(x=x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_rows_are_a_run_time_extent(target):
    """One kernel for every row count of a row class (``fused._linear_dims``;
    over packed B two classes: at most ``UNPACKED_ROWS`` rows, and more): a
    symbolic batch and sequence through a packed (N = 128, erf GELU) and a
    padded (N = 100, tanh GELU) epilogue, row counts of every remainder class
    (1..mr-1 rows left over, several blocks of 96 rows), bit-identical to the
    static compile (the same object) and compiled once per class."""
    from compiler.codegen import family, parallel
    parallel.set_num_threads(1)  # thread tiles by panels are instances of their own
    try:
        _run_time_rows(target)
    finally:
        parallel.set_num_threads(None)


def _run_time_rows(target):
    from compiler.codegen import family
    rng = np.random.default_rng(5)
    g = Graph()
    x = g.input("x", ("batch", ("seq", 1, 300), 48), "f32")
    h = x
    for n, k, approximate in ((128, 48, "none"), (100, 128, "tanh")):
        w = g.constant((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), name=f"w{n}")
        b = g.constant(rng.standard_normal(n).astype(np.float32), name=f"b{n}")
        h = linear(h, w, b).gelu(approximate)
    g.output(h, name="y")
    m = compile(g, target=target)
    sizes = [(1, 1), (1, 3), (2, 5), (3, 7), (1, 97), (2, 101), (1, 300)]
    for i, (batch, seq) in enumerate(sizes):
        feeds = {"x": rng.standard_normal((batch, seq, 48)).astype(np.float32)}
        got = m(**feeds)
        np.testing.assert_allclose(got, interpret(g, feeds)["y"], rtol=1e-5, atol=1e-5)
        if i == 0:
            steps = m.kernel_summary()[1:]
            assert [s.startswith("FusedLinear") for s in steps] == [True, True], steps
            assert all(s.endswith("[run-time extents]") for s in steps), steps
        if batch * seq in (1, 97):  # the first call of each row class
            compiled = set(family._compiled)
        else:
            assert set(family._compiled) == compiled, f"{batch}x{seq} compiled a kernel"
        if i in (1, 5):
            static = compile(g.bind({"batch": batch, "seq": seq}), target=target)
            np.testing.assert_array_equal(static(**feeds), got)


def test_both_gelu_epilogues_are_refused():
    from compiler.errors import GraphBuildError
    g = Graph()
    xi = g.input("x", (4, 8), "f32")
    w = g.constant(np.ones((8, 16), np.float32), name="w")
    b = g.constant(np.zeros(16, np.float32), name="b")
    with pytest.raises(GraphBuildError, match="gelu .erf. and gelu_tanh exclude each other"):
        fused("FusedLinear", xi, w, b, gelu=True, gelu_tanh=True)


@pytest.mark.parametrize("target,act,tiles", [("cpu:x86-64-v3", "gelu", ("6x16", "4x16")),
                                              ("cpu:x86-64-v3", "gelu_tanh", ("6x16", "4x16")),
                                              ("cpu:x86-64-v4", "gelu", ("8x32", "8x32")),
                                              ("cpu:x86-64-v4", "gelu_tanh", ("4x32", "4x32"))])
def test_packed_epilogue_row_classes_pick_their_tiles(target, act, tiles):
    # over packed B the GELU epilogue has two row classes: more than
    # UNPACKED_ROWS rows (AVX2 6 x 16 register tiles) and at most that many
    # (AVX2 4 x 16: 8 or 32 rows are whole tiles); few rows share the latter.
    # The tanh GELU's exp (feature math.exp) takes AVX-512 4 x 32 tiles in both
    from compiler.codegen import cpu, fused as F
    from compiler.codegen.family import ENTRY
    from compiler.graph.opdef import TensorType
    from runtime.dtype import DType
    nr = 16 if target.endswith("v3") else 32
    types = (TensorType((40, 8), DType.F32), TensorType((2, 8, nr), DType.F32),
             TensorType((2 * nr,), DType.F32))
    for unpacked, tile in zip((False, True), tiles):
        inst = F.FusedInstance("FusedLinear", (("b_panel", nr), (act, True)), types,
                               (0, 1, 2, 3), unpacked=unpacked)
        res = cpu.lower(F.linalg_text(inst, platform="cpu"), [ENTRY], target=target)
        assert res.strategy.name == f"matmul-packed-epilogue-f32-{tile}", res.strategy.name


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("act", ["erf", "tanh"])
def test_packed_epilogue_row_classes_give_the_same_bits(target, act):
    # a row's bits do not depend on the class of its call nor on its tile:
    # 40 rows (AVX2: 6-row tiles, a 4-row block; AVX-512 8-row tiles, the
    # tanh GELU's 4-row tiles), 33, 35 and 38 (the rows left over in 4- and
    # 2-row blocks and single rows), 8, 7, 3 and 2 rows (the other class:
    # AVX2 4-row tiles, 2-row blocks, single rows; AVX-512 4- and 2-row
    # blocks, single rows); each element one FMA chain in K order, then the
    # same bias and activation
    g = Graph()
    x = g.input("x", (("rows", 1, 64), 96), "f32")
    rng = np.random.default_rng(11)
    w = g.constant((rng.standard_normal((96, 128)) / 10).astype(np.float32), name="w")
    b = g.constant(rng.standard_normal(128).astype(np.float32), name="b")
    g.output(ACTIVATIONS[act](linear(x, w, b)), name="y")
    m = compile(g, target=target)
    xs = rng.standard_normal((40, 96)).astype(np.float32)
    whole = m(x=xs)
    assert "FusedLinear" in " ".join(_steps(m)) and "Gelu" not in " ".join(_steps(m)), _steps(m)
    np.testing.assert_allclose(whole, interpret(g, {"x": xs})["y"], rtol=2e-5, atol=2e-5)
    for rows in (8, 7, 3, 2, 33, 35, 38):
        np.testing.assert_array_equal(m(x=xs[:rows]), whole[:rows], err_msg=f"{rows} rows")


def test_epilogue_row_blocks_must_lie_below_the_tile():
    from compiler.codegen.cpu.transforms.matmul import epilogue_script
    assert "fuelc.row_block_4" in epilogue_script(mr=6, nr=16, blocks=(4, 2))
    for bad in ((6,), (1,), (8, 4)):
        with pytest.raises(ValueError, match="row block .* is not between 1 and mr=6"):
            epilogue_script(mr=6, nr=16, blocks=bad)


@pytest.mark.parametrize("target,mr,nr", [("cpu:x86-64-v3", 6, 16), ("cpu:x86-64-v4", 8, 32)])
def test_the_row_block_loop_is_not_peeled(target, mr, nr):
    """The loop over blocks of ``mc`` (96) rows stays one loop whose last
    block may be partial (``transforms.matmul.PEELED_MARK``): one copy of the
    ``mr``-row tile and of the GELU's polynomial per tile class, not a second
    one for the last block (which took the compile of a GELU FusedLinear from
    0.27 to 0.38 s). 200 rows: two whole blocks and a partial one."""
    from compiler.codegen import cpu, fused as F
    from compiler.codegen.family import ENTRY
    from compiler.graph.opdef import TensorType
    from compiler.testing import filecheck
    from runtime.dtype import DType
    types = (TensorType((200, 64), DType.F32), TensorType((2, 64, nr), DType.F32),
             TensorType((2 * nr,), DType.F32))
    inst = F.FusedInstance("FusedLinear", (("b_panel", nr), ("gelu", True)), types, (0, 1, 2, 3))
    res = cpu.lower(F.linalg_text(inst, platform="cpu"), [ENTRY], target=target, keep_ir=True)
    filecheck(res.stages["tensor-transform"], f"""
// CHECK:     scf.for %{{{{.*}}}} = %{{{{.*}}}} to %{{{{.*}}}} step %c96
// CHECK-NOT: step %c96
// CHECK:     -> (vector<{mr}x1x{nr}xf32>)
// CHECK-NOT: -> (vector<{mr}x1x{nr}xf32>)
// CHECK-NOT: step %c96
""")


@pytest.mark.parametrize("target", TARGETS)
def test_a_partial_last_block_of_rows_gives_the_bits_of_a_whole_one(target):
    # rows 96-129 are the partial last block of a 130-row call and part of a
    # whole block of a 200-row call (whose last block has 8 rows): the same
    # tiles, the same bits
    g = Graph()
    x = g.input("x", (("rows", 1, 256), 64), "f32")
    rng = np.random.default_rng(3)
    w = g.constant((rng.standard_normal((64, 128)) / 8).astype(np.float32), name="w")
    b = g.constant(rng.standard_normal(128).astype(np.float32), name="b")
    g.output(linear(x, w, b).gelu(), name="y")
    m = compile(g, target=target)
    xs = rng.standard_normal((200, 64)).astype(np.float32)
    whole = m(x=xs)
    np.testing.assert_allclose(whole, interpret(g, {"x": xs})["y"], rtol=2e-5, atol=2e-5)
    for rows in (130, 101, 97):
        np.testing.assert_array_equal(m(x=xs[:rows]), whole[:rows], err_msg=f"{rows} rows")
