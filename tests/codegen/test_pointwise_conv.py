"""The pointwise Conv2D kernel (1x1, stride 1, unpadded, groups 1, with a
bias or a clamp): one matmul whose zero init, bias add and clamp run in its
register tiles (``lowering/fused_conv.py: _pointwise``, the cpu strategy
``transforms.matmul.epilogue_script``). Numerics against the reference
interpreter, on both ISA levels, with partial row and column tiles; which
convs take it; and that a row-major call reads and writes its operands in
place (no copy around the reshapes)."""
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.codegen import fused as F
from compiler.codegen.cpu import pipeline
from compiler.graph.opdef import TensorType
from compiler.registry.builders import conv2d
from runtime.dtype import DType

# (x shape, Cout): whole tiles (16 rows, 64 pixels), partial column tiles
# (49, 100 and 81 pixels on 16-wide tiles), batch 1 and 3
SHAPES = [((2, 8, 8, 8), 16), ((1, 5, 7, 7), 24), ((3, 16, 10, 10), 8), ((1, 3, 9, 9), 40)]


def _graph(xs, cout, dtype="f32", bias=True, clamp=(0.0, 6.0)):
    rng = np.random.default_rng(1)
    npdt = np.float32 if dtype == "f32" else np.float64
    g = Graph()
    x = g.input("x", xs, dtype)
    w = g.constant((rng.standard_normal((cout, xs[1], 1, 1)) * 0.7).astype(npdt), name="w")
    b = g.constant(rng.standard_normal(cout).astype(npdt), name="b") if bias else None
    y = conv2d(x, w, b)
    g.output(y.clamp(*clamp) if clamp else y, name="y")
    return g, rng.standard_normal(xs).astype(npdt) * 2


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
@pytest.mark.parametrize("shape", range(len(SHAPES)))
def test_pointwise_conv_matches_the_reference(shape, target):
    xs, cout = SHAPES[shape]
    g, x = _graph(xs, cout)
    x.reshape(-1)[::11] = np.nan                     # NaN stays NaN through the clamp
    m = compile(g, target=target)
    got, want = m.run(x=x)["y"], interpret(g, {"x": x})["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert m.kernel_summary() == ["Conv2D[f32,f32,f32,f32] (mlir-cpu-fused)"], m.kernel_summary()


@pytest.mark.parametrize("bias,clamp", [(True, None), (False, (-0.5, 0.5)), (True, (None, 1.0))])
def test_pointwise_conv_with_bias_or_clamp_alone_and_in_f64(bias, clamp):
    for dtype, tol in (("f32", 1e-5), ("f64", 1e-12)):
        g, x = _graph((2, 6, 6, 6), 24, dtype, bias=bias, clamp=clamp)
        m = compile(g, target="cpu")
        np.testing.assert_allclose(m.run(x=x)["y"], interpret(g, {"x": x})["y"], rtol=tol, atol=tol)
        assert len(m.kernel_summary()) == 1, m.kernel_summary()
        assert m.kernel_summary()[0].startswith("Conv2D["), m.kernel_summary()


def test_pointwise_convs_the_kernel_does_not_take_run_the_recipe():
    # neither bias nor clamp: nothing to fuse; few pixels: one matmul over the
    # batch's columns side by side; Cout not a multiple of the tiles' rows
    for xs, cout, bias, clamp in (((2, 8, 8, 8), 16, False, None), ((4, 32, 3, 3), 64, True, None),
                                  ((1, 5, 7, 7), 12, True, (0.0, 6.0))):
        g, x = _graph(xs, cout, bias=bias, clamp=clamp)
        m = compile(g, target="cpu")
        np.testing.assert_allclose(m.run(x=x)["y"], interpret(g, {"x": x})["y"],
                                   rtol=1e-5, atol=1e-5)
        summary = m.kernel_summary()
        assert not any(k.startswith("Conv2D") for k in summary), summary
        # a matmul kernel: few pixels' weight packed (FusedLinear) when Cout is panels
        assert any(k.startswith(("MatMul", "FusedLinear")) for k in summary), summary


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
def test_one_image_of_few_pixels_takes_the_kernel(target):
    # 7^2 = 49 pixels < min(Cout, 64): a batch of 2 takes the recipe's matmul
    # per image, one image the kernel (bias and clamp in its register tiles)
    for n, kernel in ((1, True), (2, False)):
        g, x = _graph((n, 64, 7, 7), 320)
        m = compile(g, target=target)
        np.testing.assert_allclose(m.run(x=x)["y"], interpret(g, {"x": x})["y"],
                                   rtol=1e-5, atol=1e-5)
        summary = m.kernel_summary()
        assert any(k.startswith("Conv2D[") for k in summary) == kernel, summary


def test_a_strided_input_view_is_computed_right():
    # x permuted from [N, H, W, C]: not row-major, so the kernel copies it
    rng = np.random.default_rng(2)
    g = Graph()
    xin = g.input("x", (2, 6, 6, 8), "f32")
    w = g.constant(rng.standard_normal((16, 8, 1, 1)).astype(np.float32), name="w")
    b = g.constant(rng.standard_normal(16).astype(np.float32), name="b")
    g.output(conv2d(xin.permute((0, 3, 1, 2)), w, b).relu(), name="y")
    x = rng.standard_normal((2, 6, 6, 8)).astype(np.float32)
    m = compile(g, target="cpu")
    np.testing.assert_allclose(m.run(x=x)["y"], interpret(g, {"x": x})["y"], rtol=1e-5, atol=1e-5)


def _instance(contiguous, cout=32, pixels=(14, 14), dtype=DType.F32):
    params = tuple(sorted({"stride": (1, 1), "padding": (0, 0), "groups": 1,
                           "dilation": (1, 1), "clamp_min": 0.0, "clamp_max": None}.items()))
    types = (TensorType((2, 16) + pixels, dtype), TensorType((cout, 16, 1, 1), dtype),
             TensorType((cout,), dtype))
    return F.FusedInstance("Conv2D", params, types, unit_stride=(0, 1, 2, 3),
                           contiguous=contiguous)


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
@pytest.mark.parametrize("cout,pixels", [(13, (5, 7)), (9, (4, 4)), (3, (6, 6))])
def test_the_kernel_computes_partial_row_tiles(cout, pixels, target):
    # Cout not a multiple of the rows of a tile: the fused kernel is not
    # chosen for such convs, but computes them right (masked rows)
    from runtime.memref import descriptor_from_array
    inst = _instance((0, 1, 2, 3), cout, pixels)
    fn = F.warm_instance(inst, target=target)
    rng = np.random.default_rng(4)
    x, w, b = (rng.standard_normal(t.shape).astype(np.float32) for t in inst.input_types)
    out = np.full((2, cout) + pixels, np.nan, np.float32)
    fn(*[descriptor_from_array(a) for a in (x, w, b, out)])
    want = np.maximum(np.einsum("ok,nkhw->nohw", w[:, :, 0, 0], x) + b[None, :, None, None], 0)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target,tile", [("cpu:x86-64-v3", "4x16"), ("cpu:skylake-avx512", "8x16")])
def test_the_epilogue_strategy_keeps_the_tile_in_registers(target, tile):
    text = F.linalg_text(_instance((0, 1, 2, 3), pixels=(16, 14)), platform="cpu")
    r = pipeline.lower(text, ["kernel"], target=target, keep_ir=True)
    assert r.strategy.name == f"matmul-epilogue-f32-{tile}", r.strategy.name
    tiled = r.stages["tensor-transform"]
    # the accumulator is a vector carried through the K loop, stored once
    mr, nr = tile.split("x")
    assert f"iter_args(%arg" in tiled and f"-> (vector<{mr}x{nr}xf32>)" in tiled, tiled
    assert "linalg.generic" not in tiled and "linalg.fill" not in tiled, tiled
    # row-major operands: the reshapes are views, nothing is copied, no buffer
    buffers = r.stages["bufferize"]
    assert "memref.copy" not in buffers and buffers.count("memref.collapse_shape") == 3, buffers
    assert "memref.alloc(" not in buffers, buffers
    assert "@malloc" not in r.llvm_ir


@pytest.mark.parametrize("cout", [24, 16, 40, 8])
def test_long_contractions_take_6x16_tiles_on_avx2_with_the_same_bits(cout, target="cpu:x86-64-v3"):
    # 64+ input channels (``fused_conv.POINTWISE_LONG_K``): AVX2 f32 6 x 16
    # tiles, the rows past them in blocks of 4 and 2 (16 = 6+6+4, 40 = 36+4,
    # 8 = 6+2); each output still sums K in order from zero, so the bits are
    # the 4 x 16 tiles'
    from compiler.codegen.cpu.strategy import epilogue_strategy
    from compiler.targets import parse_target
    from runtime.memref import descriptor_from_array
    params = tuple(sorted({"stride": (1, 1), "padding": (0, 0), "groups": 1, "dilation": (1, 1),
                           "clamp_min": 0.0, "clamp_max": 6.0}.items()))
    types = (TensorType((2, 96, 8, 8), DType.F32), TensorType((cout, 96, 1, 1), DType.F32),
             TensorType((cout,), DType.F32))
    inst = F.FusedInstance("Conv2D", params, types, unit_stride=(0, 1, 2, 3),
                           contiguous=(0, 1, 2, 3))
    text = F.linalg_text(inst, platform="cpu")
    tg = parse_target(target)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(t.shape).astype(np.float32) for t in types]

    def run(strategy=None):
        r = pipeline.lower(text, ["kernel"], target=target, strategy=strategy)
        out = np.full((2, cout, 8, 8), np.nan, np.float32)
        fn = pipeline.load_object(r.object, tg.features, str(tg)).ciface("kernel", 4)
        fn(*[descriptor_from_array(a) for a in (*args, out)])
        return r.strategy.name, out

    name, long_k = run()
    assert name == "matmul-epilogue-f32-6x16-4-2", name
    short_name, short = run(epilogue_strategy("f32", "avx2"))
    assert short_name == "matmul-epilogue-f32-4x16", short_name
    np.testing.assert_array_equal(long_k, short)
    want = np.clip(np.einsum("ok,nkhw->nohw", args[1][:, :, 0, 0], args[0])
                   + args[2][None, :, None, None], 0, 6)
    np.testing.assert_allclose(long_k, want, rtol=1e-5, atol=1e-5)


def test_long_contractions_keep_their_tiles_on_avx512():
    from compiler.codegen.cpu.strategy import select_strategy
    from compiler.targets import parse_target
    names = {"fuelc.mm_epilogue", "fuelc.long_k", "linalg.generic:f32"}
    assert select_strategy(names, parse_target("cpu:skylake-avx512")).name \
        == "matmul-epilogue-f32-8x16"


@pytest.mark.parametrize("target,tile", [("cpu:x86-64-v3", "6x16"), ("cpu:skylake-avx512", "16x16")])
def test_pixels_not_whole_column_tiles_run_as_one_row_under_the_stem_schedule(target, tile):
    # 196 pixels = 12 x 16 + 4: the last column tile is peeled to 4 columns,
    # not masked (masked, its accumulator was in memory and x read by a
    # transposing masked load: 2x slower than the recipe)
    text = F.linalg_text(_instance((0, 1, 2, 3)), platform="cpu")
    r = pipeline.lower(text, ["kernel"], target=target, keep_ir=True)
    assert r.strategy.name == f"conv-stem-f32-{tile}", r.strategy.name
    tiled = r.stages["tensor-transform"]
    mr, nr = tile.split("x")
    assert f"-> (vector<{mr}x1x{nr}xf32>)" in tiled and "x1x4xf32>)" in tiled, tiled
    assert "vector.mask" not in tiled and "linalg.generic" not in tiled, tiled


def test_operands_not_known_row_major_are_copied_but_computed():
    text = F.linalg_text(_instance(()), platform="cpu")
    r = pipeline.lower(text, ["kernel"], target="cpu:x86-64-v3", keep_ir=True)
    assert "memref.copy" in r.stages["bufferize"] or "linalg.copy" in r.stages["bufferize"]


@pytest.mark.parametrize("xs,cout,cut", [((1, 64, 16, 16), 64, "rows"),
                                          ((1, 128, 12, 12), 96, "rows"),
                                          ((1, 256, 8, 8), 256, "channels"),
                                          ((3, 64, 16, 16), 64, "images")])
def test_pointwise_conv_split_over_threads(xs, cout, cut):
    # one image of more pixels than output channels: by rows of pixels (each
    # tile reads its share of x, in its planes only row-major: 12 rows of 12
    # pixels in tiles of 4 rows, so each tile is whole 16-pixel column
    # tiles); of fewer: by blocks of output channels; 3 images over 2
    # threads: a tile per image. The same bits as one thread.
    from compiler.codegen import parallel
    before = parallel.num_threads()
    g, x = _graph(xs, cout)
    try:
        parallel.set_num_threads(1)
        one = compile(g, target="cpu").run(x=x)["y"]
        parallel.set_num_threads(2)
        m = compile(g, target="cpu")
        got = m.run(x=x)["y"]
        # (K up to 256 products of ~N(0, 2) terms: f32 sums to ~1e-5 of 6)
        np.testing.assert_allclose(got, interpret(g, {"x": x})["y"], rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(got, one)
        assert m.kernel_summary() == ["Conv2D[f32,f32,f32,f32] (mlir-cpu-fused)"]
        kernel = next(iter(m.executor.entries.values())).kernel.fn
        assert kernel._calls.lookup(*_call_args(m))   # the call ran these tiles
        tiles = kernel._tiles(*_call_args(m))
        outs = [tuple(lays[-1].shape) for _, lays in tiles]
        if cut == "rows":
            assert len(tiles) > 2 and {o[:2] for o in outs} == {(1, cout)}, outs
            assert all(o[2] * o[3] % 16 == 0 for o in outs), outs
            # x and the output row-major in their planes, w and the bias whole
            for inst, _ in tiles:
                assert (inst.planes, inst.contiguous) == ((0, 3), (1, 2)), inst
        elif cut == "channels":
            # split_parts(2) tiles (TILES_PER_THREAD per thread) of 8-channel blocks
            assert len(tiles) == parallel.split_parts(2), outs
            assert all(o[2:] == xs[2:] and o[1] < cout for o in outs), outs
        else:
            assert len(tiles) == 3 and all(o[0] == 1 for o in outs), outs
    finally:
        parallel.set_num_threads(before)


def test_pixel_row_tiles_are_read_and_written_in_place():
    """A tile of pixel rows (``FusedInstance.planes``: row-major in its last
    two axes, at the whole image's channel stride) is viewed as [N, C, H*W]
    like a row-major call: no copy, no buffer. Without it the reshapes of
    the strided operands are copies (still correct)."""
    import dataclasses
    from compiler.codegen.common.stages import contiguous_layout
    from compiler.mlir import ir
    inst = _instance((1, 2), 32, (4, 16))
    r = pipeline.lower(F.linalg_text(dataclasses.replace(inst, planes=(0, 3)), platform="cpu"),
                       ["kernel"], target="cpu:x86-64-v3", keep_ir=True)
    buffers = r.stages["bufferize"]
    assert "memref.copy" not in buffers and "memref.alloc(" not in buffers, buffers
    assert "strided<[?, ?, 16, 1], offset: ?>" in buffers, buffers
    strided = pipeline.lower(F.linalg_text(inst, platform="cpu"), ["kernel"],
                             target="cpu:x86-64-v3", keep_ir=True).stages["bufferize"]
    assert "memref.copy" in strided or "linalg.copy" in strided
    with ir.Context():
        assert str(contiguous_layout((2, 3, 4, 5), planes=True)) == \
            "strided<[?, ?, 5, 1], offset: ?>"
        assert str(contiguous_layout((2, 3, 4, 5))) == "strided<[60, 20, 5, 1], offset: ?>"


def test_pointwise_conv_of_fewer_images_than_threads_is_cut_by_images():
    # 3 images at 4 threads: a tile per image (cut by channels, the tiles of
    # several images came out wrong: NaN)
    from compiler.codegen import parallel
    before = parallel.num_threads()
    parallel.set_num_threads(4)
    try:
        g, x = _graph((3, 64, 16, 16), 64)
        m = compile(g, target="cpu")
        np.testing.assert_allclose(m.run(x=x)["y"], interpret(g, {"x": x})["y"],
                                   rtol=1e-5, atol=1e-5)
        hit = next(iter(m.executor.entries.values())).kernel.fn._calls.lookup(*_call_args(m))
        assert len(hit) == 3, hit
    finally:
        parallel.set_num_threads(before)


def _call_args(m):
    """(layouts, params, n_inputs) of the plan's one kernel call."""
    from runtime.executor import KernelStep
    from runtime.layout import Layout
    step = next(s for s in m.plan.steps if isinstance(s, KernelStep))
    specs = m.executor.specs
    lays = [Layout.contiguous(specs[v].shape) for v in (*step.inputs, *step.outputs)]
    return lays, step.params, len(step.inputs)
