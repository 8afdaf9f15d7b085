"""Conv nets with a symbolic batch (docs/dynamic-shapes.md): the models of
benchmarks/models.py exported with ``batch`` as a dim_param
(``models.symbolic``), compiled once, run at batch 1, 3, 8 against
onnxruntime; the direct conv kernels take the batch at run time, so once
each layout class has run a new batch compiles no kernel."""
import pathlib
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import compiler  # noqa: E402
from benchmarks import models as bm  # noqa: E402
from compiler.codegen import family  # noqa: E402
from compiler.codegen.family import single_op_linalg_text  # noqa: E402
from compiler.codegen.fused import FusedInstance  # noqa: E402
from compiler.codegen.lowering.fused_conv import batch_dims  # noqa: E402
from compiler.errors import LoweringError  # noqa: E402
from compiler.frontends.onnx import import_model  # noqa: E402
from compiler.graph.opdef import TensorType  # noqa: E402
from runtime.dtype import DType  # noqa: E402

RNG = np.random.default_rng(11)
TOL = 1e-4  # max |fuelc - ort| / max |ort|


def _params(groups=1, stride=1, dilation=1):
    return {"stride": (stride, stride), "padding": (1, 1), "groups": groups,
            "dilation": (dilation, dilation), "clamp_min": None, "clamp_max": None}


def _types(cin, cout, groups, hw=12):
    f32 = DType.F32
    return (TensorType((2, cin, hw, hw), f32), TensorType((cout, cin // groups, 3, 3), f32),
            TensorType((cout,), f32))


def run_batches(model, batches=(1, 3, 8)):
    """Compile the symbolic ``model`` once; per batch: the kernels compiled
    by that call, after checking the output against onnxruntime."""
    m = compiler.compile(import_model(model))
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    sess = bm.ort_session(model.SerializeToString(), 1)
    seen = {}
    for batch in batches:
        x = RNG.standard_normal((batch, *shape)).astype(np.float32)
        before = set(family._compiled)
        out = m(x=x)
        seen[batch] = set(family._compiled) - before
        ref = sess.run(None, {"x": x})[0]
        assert out.shape == ref.shape
        assert np.abs(out - ref).max() / np.abs(ref).max() < TOL, batch
    return m, seen


def test_direct_conv_kernels_take_the_batch_at_run_time():
    """groups 1 (stride 1, 2) and depthwise (stride 1, 2): x's and the
    output's batch are ``?``, the channels, spatial size and weights static;
    one memo key for every batch."""
    for groups, cin, stride in ((1, 8, 1), (1, 8, 2), (8, 8, 1), (8, 8, 2)):
        types, params = _types(cin, 16 if groups == 1 else 8, groups), _params(groups, stride)
        masks = batch_dims(types, params)
        assert masks == ((True, False, False, False), (False,) * 4, (False,),
                         (True, False, False, False))
        text = single_op_linalg_text("Conv2D", params, types, masks, "cpu")
        assert f"tensor<?x{cin}x12x12xf32>" in text and "tensor.dim" in text, text[:2000]
        inst = FusedInstance("Conv2D", tuple(sorted(params.items())), types)
        other = FusedInstance("Conv2D", tuple(sorted(params.items())),
                              (TensorType((7,) + types[0].shape[1:], DType.F32),) + types[1:])
        assert inst.dynamic and inst.memo_key == other.memo_key


def test_other_conv_classes_stay_static_and_refuse_a_dynamic_batch():
    """A grouped (not depthwise) conv runs the generic kernel: no run-time
    batch (``batch_dims`` None), and asking its lowering for one is a
    LoweringError naming the op, the type and the fix; so is a ``?`` extent
    other than x's batch."""
    types, params = _types(8, 16, 2), _params(groups=2)
    assert batch_dims(types, params) is None
    masks = ((True, False, False, False), (False,) * 4, (False,), (True, False, False, False))
    with pytest.raises(LoweringError, match=r"Conv2D tensor<\?x8x12x12xf32> \(groups=2.*"
                                            r"needs the cpu direct kernel.*static batch"):
        single_op_linalg_text("Conv2D", params, types, masks, "cpu")
    types, params = _types(8, 16, 1), _params()
    with pytest.raises(LoweringError, match=r"static shapes but for x's \(and the skip's\) "
                                            r"batch and image size, got "
                                            r"tensor<\?x8x3x3xf32>"):
        single_op_linalg_text("Conv2D", params, types,
                              ((True,) + (False,) * 3, (True,) + (False,) * 3, (False,),
                               (True,) + (False,) * 3), "cpu")


def test_symbolic_batch_conv_net_matches_onnxruntime():
    """A reduced MobileNetV2 (3x32x32: stem, inverted residuals with
    depthwise 3x3 s1/s2, 1x1 convs as matmuls, ReLU6 epilogues, global
    pool, Gemm) with a symbolic batch, batch 1, 3, 8, then 5 and 2: once each
    layout class has run (a batch of 1: the squeezed matmuls; batch 8: the
    classifier's unpacked row class) a new batch compiles nothing, and every
    kernel has run-time extents."""
    model = bm.symbolic(bm.build("mobilenet", 1, image=32))
    assert import_model(model).signature()["inputs"] == {"x": "f32[batch,3,32,32]"}
    m, seen = run_batches(model, (1, 3, 8, 5, 2))
    assert not seen[5] and not seen[2], seen
    summary = m.kernel_summary()[1:]
    assert sum("Conv2D" in line for line in summary) >= 5
    assert all(line.endswith("[run-time extents]") for line in summary), summary


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet", "efficientnet"])
def test_symbolic_batch_full_conv_nets_match_onnxruntime(name):
    """The full ResNet-style (3x64x64) and EfficientNet-style (3x112x112)
    models of benchmarks/models.py with a symbolic batch, batch 1, 3, 8."""
    run_batches(bm.symbolic(bm.build(name, 1)))


def test_grouped_conv_calls_split_by_images_when_there_are_enough():
    """A depthwise call of at least as many images as threads is cut by
    images (each tile the kernel of all channels, its batch a run-time
    extent); fewer images: by channel groups, as before."""
    from compiler.codegen.fused import _conv_group_tiles
    from runtime.layout import Layout
    params = _params(groups=32)

    def lays(n):
        return [Layout.contiguous(s) for s in ((n, 32, 64, 64), (32, 1, 3, 3), (32,),
                                                (n, 32, 64, 64))]
    tiles = _conv_group_tiles(params, lays(4), 3, 2)
    assert [t[0].shape for t in tiles] == [(2, 32, 64, 64)] * 2
    assert all(t[1].shape == (32, 1, 3, 3) and t[3].shape == (2, 32, 64, 64) for t in tiles)
    tiles = _conv_group_tiles(params, lays(1), 3, 2)
    assert [t[0].shape for t in tiles] == [(1, 16, 64, 64)] * 2
    assert all(t[1].shape == (16, 1, 3, 3) for t in tiles)
