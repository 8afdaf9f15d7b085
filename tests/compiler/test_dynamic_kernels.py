"""Kernels with run-time extents for symbolic graphs (docs/dynamic-shapes.md):
a new binding of an encoder-style graph replans but compiles no kernel once
each matmul row class (few / unpacked / packed rows) has been seen."""
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.codegen import family
from compiler.codegen.fused import FusedInstance
from compiler.codegen.kernels import OpInstance
from compiler.codegen.linalg import emit_single_op_module
from compiler.errors import DialectError
from compiler.graph.opdef import TensorType
from compiler.registry import builders as B
from runtime.dtype import DType

RNG = np.random.default_rng(7)
F32 = DType.F32


def _encoder_graph():
    """Embedding lookup, layer norm, linear, per-head scores, softmax over the
    sequence, an element-wise chain: the row ops and matmuls of an encoder."""
    g = Graph()
    ids = g.input("ids", ("batch", "seq"), "u32")
    x = g.input("x", ("batch", "seq", 16), "f32")
    table = g.constant(RNG.standard_normal((10, 16)).astype(np.float32), name="table")
    w = g.constant(RNG.standard_normal((16, 16)).astype(np.float32) / 4, name="w")
    b = g.constant(RNG.standard_normal(16).astype(np.float32), name="b")
    ln_w = g.constant(RNG.standard_normal(16).astype(np.float32), name="ln_w")
    ln_b = g.constant(RNG.standard_normal(16).astype(np.float32), name="ln_b")
    emb = table.index_select(ids.reshape(-1)).reshape(x.shape[0], x.shape[1], 16)
    h = B.layer_norm(x + emb, ln_w, ln_b, eps=1e-5)
    q = B.linear(h, w, b)
    scores = (q @ h.permute((0, 2, 1))).softmax(-1)
    g.output(B.layer_norm((scores @ q).gelu() * 0.5 + h, ln_w, ln_b), name="y")
    return g


def _feeds(batch, seq):
    return {"ids": RNG.integers(0, 10, (batch, seq)).astype(np.uint32),
            "x": RNG.standard_normal((batch, seq, 16)).astype(np.float32)}


def test_new_bindings_compile_no_kernel():
    """The kernels are compiled per layout class, not per size: matmul rows
    (few <= 4, unpacked <= 32, packed), a batch of 1 (squeezed: rank 2) and a
    sequence of 1 (a transposed view that is contiguous). Once one binding of
    each class has run, other sizes compile nothing."""
    g = _encoder_graph()
    m = compile(g)
    for batch in (1, 3):
        for seq in (1, 3, 7, 40):
            m(**_feeds(batch, seq))
    before = set(family._compiled)
    for batch, seq in ((8, 2), (2, 5), (5, 33), (1, 128), (8, 128), (2, 1)):
        feeds = _feeds(batch, seq)
        np.testing.assert_allclose(m(**feeds), interpret(g, feeds)["y"], rtol=2e-4, atol=2e-4)
    assert set(family._compiled) == before, "a new binding compiled a kernel"
    summary = m.kernel_summary()
    assert summary[0].startswith("symbolic module: passes and plan per input-shape binding")
    kinds = " ".join(summary[1:])
    for op in ("IndexSelect", "LayerNormLastDim", "FusedLinear", "MatMul", "SoftmaxLastDim"):
        assert op in kinds
    assert all(line.endswith("[run-time extents]") for line in summary[1:]), summary


def test_kernels_without_a_dynamic_instance_are_marked_per_shape():
    """Roll has no dynamic instance yet: it is compiled per binding, and
    kernel_summary says so; the element-wise kernel after it is shared."""
    g = Graph()
    x = g.input("x", ("batch", 8), "f32")
    g.output(x.roll(1, 1).exp(), name="y")
    m = compile(g)
    for batch in (3, 5):
        feeds = {"x": RNG.standard_normal((batch, 8)).astype(np.float32)}
        np.testing.assert_allclose(m(**feeds), interpret(g, feeds)["y"], rtol=1e-6)
    assert m.kernel_summary()[1:] == ["Roll[f32,f32] (mlir-cpu) [per shape]",
                                      "ExpElementwise[f32,f32] (mlir-cpu) [run-time extents]"]


def test_row_norm_instances_share_one_kernel_across_rows_not_features():
    def inst(*shape):
        d = shape[-1]
        return FusedInstance("LayerNormLastDim", (("eps", 1e-5),),
                             (TensorType(shape, F32), TensorType((d,), F32),
                              TensorType((d,), F32)))
    assert inst(2, 5, 64).memo_key == inst(7, 1, 64).memo_key
    assert inst(2, 5, 64).memo_key != inst(2, 5, 32).memo_key
    assert inst(2, 5, 64).dynamic_dims[0] == (True, True, False)
    softmax = [FusedInstance("SoftmaxLastDim", (), (TensorType(s, F32),))
               for s in ((2, 4, 7, 7), (1, 4, 128, 128))]
    assert softmax[0].memo_key == softmax[1].memo_key


def test_index_select_keeps_the_table_static():
    def inst(rows, n):
        return OpInstance("IndexSelect", (("dim", 0),),
                          (TensorType((rows, 64), F32), TensorType((n,), DType.U32)), True)
    assert inst(50, 3).memo_key == inst(50, 1024).memo_key
    assert inst(50, 3).memo_key != inst(128, 3).memo_key
    text = str(emit_single_op_module("IndexSelect", {"dim": 0}, list(inst(50, 3).input_types),
                                     dynamic=inst(50, 3).dynamic_dims))
    assert "tensor<50x64xf32>, %arg1: tensor<?xui32>" in text and "-> tensor<?x64xf32>" in text


def test_elementwise_runtime_fused_region_is_one_kernel_for_every_size():
    g = Graph()
    x = g.input("x", ("batch", 8), "f32")
    g.output((x.exp() * 2.0).tanh(), name="y")
    m = compile(g)
    m(x=RNG.standard_normal((3, 8)).astype(np.float32))
    before = set(family._compiled)
    feeds = {"x": RNG.standard_normal((11, 8)).astype(np.float32)}
    np.testing.assert_allclose(m(**feeds), interpret(g, feeds)["y"], rtol=1e-6)
    assert set(family._compiled) == before
    (line,) = m.kernel_summary()[1:]
    assert line.startswith("fused#") and line.endswith("(mlir-cpu-runtime-fused) [run-time extents]")


def test_wrong_number_of_dynamic_masks_is_a_dialect_error():
    with pytest.raises(DialectError, match=r"LayerNormLastDim: 3 dynamic-dim masks for 1 "
                                           r"inputs and one result"):
        emit_single_op_module("LayerNormLastDim", {"eps": 1e-5}, [TensorType((2, 8), F32)],
                              dynamic=((True, False),) * 3)


def test_compile_warms_the_view_instances_a_call_uses():
    """``q @ h^T`` passes the transposed view as it is (no copy): compile()
    warms the kernel instance of that layout, so the call compiles nothing."""
    g = _encoder_graph()
    m = compile(g)
    m.specialize(batch=3, seq=40)
    before = set(family._compiled)
    feeds = _feeds(3, 40)
    np.testing.assert_allclose(m(**feeds), interpret(g, feeds)["y"], rtol=2e-4, atol=2e-4)
    assert set(family._compiled) == before


def test_pad_and_concat_take_the_batch_at_run_time():
    """The conv recipe's Pad (spatial padding) and Concat (taps along another
    axis) have run-time batch instances; a Pad of the batch axis itself, or a
    Concat along it, stays per shape."""
    from compiler.graph.graph import concat
    g = Graph()
    x = g.input("x", ("batch", 3, 5), "f32")
    p = x.pad(((0, 0), (1, 1), (2, 0)), value=0.5)
    g.output(concat([p, p * 2.0], axis=1).exp(), name="y")
    g.output(concat([x, x], axis=0).pad(((1, 0), (0, 0), (0, 0))), name="z")
    m = compile(g)
    for batch in (1, 3, 4):
        feeds = {"x": RNG.standard_normal((batch, 3, 5)).astype(np.float32)}
        want = interpret(g, feeds)
        for k, v in m(**feeds).items():
            np.testing.assert_allclose(v, want[k], rtol=1e-6)
    lines = m.kernel_summary()[1:]
    assert sum("Pad" in s and s.endswith("[run-time extents]") for s in lines) == 1, lines
    assert sum("Concat" in s and s.endswith("[run-time extents]") for s in lines) == 1, lines
    assert sum(s.endswith("[per shape]") for s in lines) == 2, lines
