"""Conv2D with a run-time image size (``codegen/lowering/conv_spatial.py``;
docs/dynamic-shapes.md, "Dynamic spatial size"): a graph whose image has
symbolic batch, height and width compiles once, and one kernel per weight
shape runs every size against the reference, on both ISA levels. A static
graph keeps the kernels specialised on its image size."""
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.errors import GraphBuildError, LoweringError
from compiler.registry.builders import fused
from runtime.errors import ShapeSignatureError

RNG = np.random.default_rng(7)

# (Cin, Cout, kernel, stride, padding, groups, dilation, epilogue, dtype):
# every class the kernel takes (docs/dynamic-shapes.md)
CASES = {
    "3x3 relu": (8, 12, 3, 1, 1, 1, 1, dict(clamp_min=0.0), "f32"),
    "3x3 s2": (6, 16, 3, 2, 1, 1, 1, {}, "f32"),
    "3x3 dilated relu6": (5, 9, 3, 1, 2, 1, 2, dict(clamp_min=0.0, clamp_max=6.0), "f32"),
    "1x1 s2 projection": (8, 16, 1, 2, 0, 1, 1, {}, "f32"),
    "depthwise relu6": (16, 16, 3, 1, 1, 16, 1, dict(clamp_min=0.0, clamp_max=6.0), "f32"),
    "depthwise s2": (12, 12, 3, 2, 1, 12, 1, {}, "f32"),
    "stem 7x7 s2": (3, 8, 7, 2, 3, 1, 1, dict(clamp_min=0.0), "f32"),
    "pointwise relu6": (12, 24, 1, 1, 0, 1, 1, dict(clamp_min=0.0, clamp_max=6.0), "f32"),
    "residual": (8, 8, 3, 1, 1, 1, 1, dict(residual=True, clamp_min=0.0), "f32"),
    "f64": (6, 5, 3, 1, 1, 1, 1, {}, "f64"),
}
# odd sizes: a masked last vector, a half vector, single rows after the row blocks;
# 58 wide: a rest of 26 (29 at stride 2) is one masked two-vector tile on AVX-512;
# rows of one vector or less (8, 6 wide): tiles of 4, 3, 2 and 1 rows on AVX-512
SIZES = [(1, 33, 47), (2, 9, 8), (1, 16, 70), (1, 9, 58), (1, 14, 6)]


def _graph(case, dims=("n", "h", "w")):
    cin, cout, k, stride, pad, groups, dil, epi, dtype = CASES[case]
    np_t = {"f32": np.float32, "f64": np.float64}[dtype]
    g = Graph()
    x = g.input("x", (dims[0], cin, dims[1], dims[2]), dtype)
    w = g.constant((RNG.standard_normal((cout, cin // groups, k, k)) / k).astype(np_t))
    b = g.constant(RNG.standard_normal(cout).astype(np_t))
    epi = dict(epi)
    skip = None
    if epi.get("residual"):
        skip = g.input("skip", (dims[0], cout, dims[1], dims[2]), dtype)
    y = fused("Conv2D", x, w, b, skip, stride=(stride, stride), padding=(pad, pad),
              groups=groups, dilation=(dil, dil), **epi)
    g.output(y, name="y")
    return g, np_t


def _feeds(g, case, n, h, w, np_t):
    cin, cout = CASES[case][:2]
    feeds = {"x": RNG.standard_normal((n, cin, h, w)).astype(np_t)}
    if "skip" in g.inputs:
        feeds["skip"] = RNG.standard_normal((n, cout, h, w)).astype(np_t)
    return feeds


#: the AVX2 lane of the default run: one case per tile shape (groups 1,
#: depthwise, pointwise); the others in the slow lane
AVX2 = ("3x3 relu", "depthwise s2", "pointwise relu6")


@pytest.mark.parametrize("target,case", [("cpu", c) for c in CASES] + [
    pytest.param("cpu:x86-64-v3", c, marks=() if c in AVX2 else pytest.mark.slow) for c in CASES])
def test_one_kernel_runs_every_image_size(case, target):
    g, np_t = _graph(case)
    m = compile(g, target=target)
    for n, h, w in SIZES:
        feeds = _feeds(g, case, n, h, w, np_t)
        got, want = m.run(**feeds)["y"], interpret(g, feeds)["y"]
        assert got.shape == want.shape
        tol = 1e-5 if np_t is np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    convs = [s for s in m.kernel_summary()[1:] if s.startswith("Conv2D")]
    assert convs and all(s.endswith("[run-time extents]") for s in convs), convs


# a depthwise conv whose stride phases are small (``conv_spatial._flat_depthwise``:
# flat pixel runs with a run-time pitch): a 7^2 image, images narrower than a
# vector or a register tile, a row of whole vectors and a masked rest; a wide
# image (16x70) takes the row tiles in the same kernel
FLAT = {"depthwise relu6": CASES["depthwise relu6"], "depthwise s2": CASES["depthwise s2"],
        "depthwise 5x5 dilated": (6, 6, 5, 1, 4, 6, 2, dict(clamp_min=0.0), "f32"),
        "depthwise residual": (8, 8, 3, 1, 1, 8, 1, dict(residual=True, clamp_min=0.0), "f32"),
        "depthwise f64": (5, 5, 3, 1, 1, 5, 1, dict(clamp_min=-1.0, clamp_max=1.0), "f64")}
FLAT_SIZES = [(3, 7, 7), (2, 1, 2), (1, 5, 33), (1, 3, 40), (1, 16, 70)]


def _run_cases(cases, sizes, target, monkeypatch, at_first_size=None, runner=None):
    """Compile each case of ``cases`` once and run it at every (n, h, w) of
    ``sizes`` against the reference interpreter; ``at_first_size(m)`` checks
    the module after the first size; ``runner(m, n, h, w)``, if given, is
    what runs at that size instead of the module."""
    for case, spec in cases.items():
        monkeypatch.setitem(CASES, case, spec)
        g, np_t = _graph(case)
        m = compile(g, target=target)
        for n, h, w in sizes:
            feeds = _feeds(g, case, n, h, w, np_t)
            run = m if runner is None else runner(m, n, h, w)
            got, want = run.run(**feeds)["y"], interpret(g, feeds)["y"]
            tol = 1e-5 if np_t is np.float32 else 1e-12
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max(),
                                       err_msg=f"{case} {n}x{h}x{w}")
            if at_first_size is not None and (n, h, w) == sizes[0]:
                at_first_size(m)


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
def test_small_depthwise_images_in_flat_runs(target, monkeypatch):
    _run_cases(FLAT, FLAT_SIZES, target, monkeypatch)


def test_the_memo_key_holds_the_weights_not_the_image():
    from compiler.codegen.fused import FusedInstance
    from compiler.graph.opdef import TensorType
    from runtime.dtype import DType

    def key(xs, ws, run_time=True):
        params = dict(stride=(1, 1), padding=(1, 1), groups=1, dilation=(1, 1),
                      **({"image_at_run_time": True} if run_time else {}))
        types = (TensorType(xs, DType.F32), TensorType(ws, DType.F32))
        return FusedInstance("Conv2D", tuple(sorted(params.items())), types).memo_key
    assert key((1, 8, 33, 47), (16, 8, 3, 3)) == key((4, 8, 224, 200), (16, 8, 3, 3))
    assert key((1, 8, 33, 47), (16, 8, 3, 3)) != key((1, 8, 33, 47), (12, 8, 3, 3))
    # a static graph (no image_at_run_time): the image size compiled in
    assert key((1, 8, 33, 47), (16, 8, 3, 3), False) != key((1, 8, 32, 47), (16, 8, 3, 3), False)


def test_a_static_graph_keeps_the_static_kernel():
    from runtime.executor import KernelStep
    g, _ = _graph("3x3 relu", dims=(2, 12, 12))
    m = compile(g)
    step = next(s for s in m.plan.steps if isinstance(s, KernelStep))
    assert step.params.image_at_run_time is False


def test_silu_stays_per_image_size():
    """The silu and gelu epilogues are not in the kernel (their vector
    forms): such a conv is compiled per image size, and says so."""
    g = Graph()
    x = g.input("x", ("n", 4, "h", "w"), "f32")
    w = g.constant(RNG.standard_normal((8, 4, 3, 3)).astype(np.float32))
    g.output(fused("Conv2D", x, w, None, None, stride=(1, 1), padding=(1, 1), groups=1,
                   dilation=(1, 1), silu=True), name="y")
    m = compile(g)
    xv = RNG.standard_normal((1, 4, 9, 11)).astype(np.float32)
    np.testing.assert_allclose(m(x=xv), interpret(g, {"x": xv})["y"], rtol=1e-5, atol=1e-5)
    assert any(s.startswith("Conv2D") and s.endswith("[run-time batch, per image size]")
               for s in m.kernel_summary()), m.kernel_summary()


def test_the_lowering_refuses_a_class_it_does_not_take():
    """A grouped (not depthwise) conv has no run-time image kernel: emitting
    it with ``?`` spatial extents is a LoweringError naming the conv and
    the fix."""
    from compiler.codegen.family import single_op_linalg_text
    from compiler.graph.opdef import TensorType
    from runtime.dtype import DType
    types = [TensorType((1, 8, 9, 9), DType.F32), TensorType((8, 4, 3, 3), DType.F32)]
    dyn = (True, False, True, True)
    with pytest.raises(LoweringError, match=r"Conv2D .*groups=2.*a run-time image size needs "
                                            r"the cpu spatial kernel.*static image size"):
        single_op_linalg_text("Conv2D", dict(stride=(1, 1), padding=(1, 1), groups=2,
                                             dilation=(1, 1), image_at_run_time=True),
                              types, (dyn, (False,) * 4, dyn), "cpu")


def test_an_image_too_small_for_the_window_is_a_typed_shape_error():
    """A 3x3 VALID conv needs h, w >= 3: unbounded symbols are refused when
    the graph is built; a call below the bounds given names the input, the
    symbol and its bounds."""
    g = Graph()
    x = g.input("x", ("n", 4, "h", "w"), "f32")
    w = g.constant(RNG.standard_normal((8, 4, 3, 3)).astype(np.float32))
    with pytest.raises(GraphBuildError, match=r"Conv2D.*h"):
        fused("Conv2D", x, w, None, None, stride=(1, 1), padding=(0, 0), groups=1,
              dilation=(1, 1))
    g = Graph()
    x = g.input("x", ("n", 4, ("h", 3, 512), ("w", 3, 512)), "f32")
    w = g.constant(RNG.standard_normal((8, 4, 3, 3)).astype(np.float32))
    g.output(fused("Conv2D", x, w, None, None, stride=(2, 2), padding=(0, 0), groups=1,
                   dilation=(1, 1)), name="y")
    m = compile(g)
    xv = RNG.standard_normal((1, 4, 3, 7)).astype(np.float32)
    np.testing.assert_allclose(m(x=xv), interpret(g, {"x": xv})["y"], rtol=1e-5, atol=1e-5)
    with pytest.raises(ShapeSignatureError, match=r"symbol 'h' = 2 \(input 'x' axis 2\) is "
                                                  r"outside its bounds 3..512"):
        m(x=np.zeros((1, 4, 2, 7), np.float32))


# a pointwise conv (``conv_spatial._flat_pointwise``): the image's H*W pixels
# as one flat run, in channel x vector tiles with the rest masked; a
# skip, f64, images of a few pixels, a 7^2 one, one whose
# pixels end in a vector block and one ending mid-vector
POINTWISE = {"pointwise relu6": CASES["pointwise relu6"],
             "pointwise residual": (12, 8, 1, 1, 0, 1, 1, dict(residual=True, clamp_min=0.0), "f32"),
             "pointwise f64": (12, 8, 1, 1, 0, 1, 1, dict(clamp_min=-1.0, clamp_max=1.0), "f64")}
POINTWISE_SIZES = [(3, 7, 7), (2, 1, 3), (1, 8, 8), (1, 5, 33), (2, 13, 11)]


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
def test_pointwise_images_as_flat_pixel_runs(target, monkeypatch):
    def run_time_kernels(m):   # (a few-pixel image is planned as a product)
        convs = [s for s in m.kernel_summary()[1:] if s.startswith("Conv2D")]
        assert convs and all(s.endswith("[run-time extents]") for s in convs), convs
    _run_cases(POINTWISE, POINTWISE_SIZES, target, monkeypatch, run_time_kernels)


@pytest.mark.parametrize("residual", [False, True])
def test_pointwise_reads_and_writes_in_place(residual):
    """Row-major operands (``FusedInstance.contiguous``) of run-time extents:
    x, the skip and the output are viewed as [N, C, H*W] by their strides
    (``stages._row_major_view``), not collapsed into copies (no copy, no
    buffer but the few-pixel product's)."""
    import dataclasses

    from compiler.codegen.cpu import lower
    from compiler.codegen.fused import FAMILY, FusedInstance
    from compiler.graph.opdef import TensorType
    from compiler.targets import parse_target
    from runtime.dtype import DType
    params = dict(stride=(1, 1), padding=(0, 0), groups=1, dilation=(1, 1), clamp_min=0.0,
                  residual=True if residual else None, image_at_run_time=True)
    shapes = [(1, 16, 9, 9), (24, 16, 1, 1), (24,)] + [(1, 24, 9, 9)] * residual
    inst = FusedInstance("Conv2D", tuple(sorted(params.items())),
                         tuple(TensorType(s, DType.F32) for s in shapes))
    assert inst.dynamic
    n = len(shapes) + 1
    ir = lambda i: lower(FAMILY.linalg_text(i, parse_target("cpu")), ["kernel"],
                         target="cpu", keep_ir=True).stages["bufferize"]
    # the one buffer: the few-pixel product's pixel rows (``_few_pixels``)
    view = ir(dataclasses.replace(inst, contiguous=tuple(range(n))))
    allocs = [ln for ln in view.splitlines() if "memref.alloc(" in ln]
    assert len(allocs) == 1 and "memref<?x16xf32>" in allocs[0] and "memref.copy" not in view
    assert "memref.copy" in ir(inst)   # strided operands: copied, still correct


# a groups-1 conv of few output pixels per image (``conv_spatial._few_pixels``:
# at most 16 and fewer than min(Cout, 64), decided at run time): the batch's
# pixels as rows of a product over (c, qy, qx), im2col'd with the padding as
# zeros; a pointwise conv's too (its output [N, Cout, H*W]: ``_flat_pointwise``).
# Cin*Kh*Kw a multiple of the lanes (16*9) and not (5*9, 3*49: a masked
# rest; 8*1); every tile (4 pixels, single pixels, 8 channels and a rest of
# channels: Cout 20, 12); a few-pixel image and a larger one in one kernel
FEW = {"few 3x3 relu": (16, 20, 3, 1, 1, 1, 1, dict(clamp_min=0.0), "f32"),
       "few 3x3 s2": (5, 12, 3, 2, 1, 1, 1, {}, "f32"),
       "few 3x3 dilated relu6": (5, 18, 3, 1, 2, 1, 2, dict(clamp_min=0.0, clamp_max=6.0), "f32"),
       "few 1x1 s2 projection": (8, 24, 1, 2, 0, 1, 1, {}, "f32"),
       "few stem 7x7 s2": (3, 16, 7, 2, 3, 1, 1, dict(clamp_min=0.0), "f32"),
       "few residual": (12, 20, 3, 1, 1, 1, 1, dict(residual=True, clamp_min=0.0), "f32"),
       "few f64": (6, 17, 3, 1, 1, 1, 1, {}, "f64"),
       "few pointwise relu6": (12, 24, 1, 1, 0, 1, 1, dict(clamp_min=0.0, clamp_max=6.0), "f32"),
       "few pointwise residual": (20, 24, 1, 1, 0, 1, 1, dict(residual=True), "f32"),
       "few pointwise f64": (9, 32, 1, 1, 0, 1, 1, dict(clamp_min=-1.0), "f64")}
FEW_SIZES = [(1, 1, 1), (2, 2, 2), (3, 1, 2), (1, 3, 3), (2, 4, 4), (1, 2, 7), (1, 9, 13)]


@pytest.mark.parametrize("target", ["cpu", "cpu:x86-64-v3"])
def test_few_pixel_images_as_a_product_of_pixel_rows(target, monkeypatch):
    """The file's plan (``export_sample``: the kernel of run-time extents at
    every size; the in-process module plans a few-pixel image as the
    recipe's product) against the reference at every size."""
    from runtime.executor import KernelStep

    def sample_at(m, n, h, w):
        sample = m.export_sample({"n": n, "h": h, "w": w})
        steps = [s for s in sample.plan.steps if isinstance(s, KernelStep)]
        assert len(steps) == 1 and steps[0].params.image_at_run_time, sample.kernel_summary()
        return sample

    _run_cases(FEW, FEW_SIZES, target, monkeypatch, runner=sample_at)


def test_few_pixels_read_the_weight_in_place():
    """The few-pixel product reads the weight as [Cout, Cin*Kh*Kw] rows: a
    view where the plan passes it row-major (``FusedInstance.contiguous``,
    which ``FusedFamily.instance`` sets for a run-time image's groups-1
    conv), a copy of it on every call where not."""
    import dataclasses

    from compiler.codegen.cpu import lower
    from compiler.codegen.fused import FAMILY, FusedInstance
    from compiler.graph.opdef import TensorType
    from compiler.targets import parse_target
    from runtime.dtype import DType
    params = dict(stride=(1, 1), padding=(1, 1), groups=1, dilation=(1, 1), clamp_min=0.0,
                  image_at_run_time=True)
    shapes = [(1, 16, 9, 9), (24, 16, 3, 3), (24,)]
    inst = FusedInstance("Conv2D", tuple(sorted(params.items())),
                         tuple(TensorType(s, DType.F32) for s in shapes))
    ir = lambda i: lower(FAMILY.linalg_text(i, parse_target("cpu")), ["kernel"],
                         target="cpu", keep_ir=True).stages["bufferize"]
    # the pixel rows and the plane; a strided weight: its copy as well
    view = ir(dataclasses.replace(inst, contiguous=(1,)))
    assert view.count("memref.alloc(") == 2 and "memref.copy" not in view
    copied = ir(inst)
    assert copied.count("memref.alloc(") == 3 and copied.count("memref.copy") == 1


@pytest.mark.parametrize("params,shapes", [
    (dict(groups=1, dilation=(2, 2), padding=(2, 2)), [(1, 5, 9, 9), (18, 5, 3, 3), (18,)]),
    (dict(groups=6, dilation=(1, 1), padding=(1, 1)), [(1, 6, 9, 9), (6, 1, 3, 3), (6,)])])
def test_the_output_is_written_in_place_not_carried_through_the_loops(params, shapes):
    """The output is a buffer the tiles write in place (``conv_spatial.
    _output``), not a tensor threaded through the kernel's 40-70 loops (whose
    buffer types One-Shot Bufferize had worked out in 5-6 s for a Cout with
    a rest, 18 here), and the entry's out-param replaces it: no loop carries
    a tensor of the output's type, no buffer of it is allocated or copied."""
    from compiler.codegen.cpu import lower
    from compiler.codegen.fused import FAMILY, FusedInstance
    from compiler.graph.opdef import TensorType
    from compiler.targets import parse_target
    from compiler.testing import filecheck
    from runtime.dtype import DType
    params = dict(params, stride=(1, 1), clamp_min=0.0, image_at_run_time=True)
    inst = FusedInstance("Conv2D", tuple(sorted(params.items())),
                         tuple(TensorType(s, DType.F32) for s in shapes))
    ir = lower(FAMILY.linalg_text(inst, parse_target("cpu:x86-64-v3")), ["kernel"],
               target="cpu:x86-64-v3", keep_ir=True).stages
    out = f"?x{shapes[1][0]}x?x?xf32"
    assert f"-> (tensor<{out}>" not in ir["prepare"] and f"-> tensor<{out}>" not in ir["prepare"]
    filecheck(ir["bufferize"], f"CHECK: func.func @kernel({{{{.*}}}}, %arg3: memref<{out}, "
                               f"strided<[?, ?, ?, ?], offset: ?>>)\n"
                               f"CHECK-NOT: memref.alloc({{{{.*}}}}) : memref<{out}>\n"
                               f"CHECK-NOT: memref.copy {{{{.*}}}}, %arg3\nCHECK: return")
