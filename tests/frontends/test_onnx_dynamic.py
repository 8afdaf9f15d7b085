"""ONNX models with symbolic batch/sequence dims: imported once, compiled once,
run at several sizes, compared with onnxruntime (docs/dynamic-shapes.md)."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import compiler  # noqa: E402
from compiler.frontends.onnx import import_model  # noqa: E402
from test_onnx_import import encoder_block, make, node, ort_run, vi  # noqa: E402

RNG = np.random.default_rng(3)


def test_symbolic_mlp_compiles_once_for_every_batch():
    w = RNG.standard_normal((6, 4)).astype(np.float32)
    model = make([node("MatMul", ["x", "w"], ["h"]), node("Relu", ["h"], ["y"])],
                 [vi("x", shape=["batch", 6])], [vi("y", shape=["batch", 4])], {"w": w})
    m = compiler.compile(import_model(model))
    for batch in (1, 5):
        x = RNG.standard_normal((batch, 6)).astype(np.float32)
        np.testing.assert_allclose(m(x=x), ort_run(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)
    with pytest.raises(compiler.ShapeSignatureError, match="axis 1: size 7.*fixes 6"):
        m(x=np.zeros((2, 7), np.float32))


@pytest.mark.slow
def test_bert_style_encoder_symbolic_batch_and_seq_matches_onnxruntime():
    """Shape -> Slice -> Concat heads targets and Range position ids over the
    symbolic sequence length, one compile, four sizes."""
    model, _ = encoder_block(64, 4, 256, 16, batch=2)
    g = import_model(model)
    assert g.signature()["outputs"] == {"y": "f32[batch,seq,64]"}
    m = compiler.compile(g)
    for batch, seq in ((2, 16), (1, 5), (3, 9), (1, 1)):
        _, feeds = encoder_block(64, 4, 256, seq, batch=batch)
        np.testing.assert_allclose(m(**feeds), ort_run(model, feeds)["y"], rtol=1e-4, atol=2e-4)
    assert len(m.bindings) == 4


@pytest.mark.slow
def test_bert_style_encoder_new_sizes_compile_no_kernel():
    """batch 1, 3, 8 x sequence 1, 7, 128 against onnxruntime; the kernels
    take batch and sequence at run time, so once a binding of each layout
    class has run (batch 1 or more; sequence 1, few, a few dozen or many
    rows; the GELU product's two row classes, its call whole or split over
    threads by panels: 3 x 16 = 48 rows are many rows in one call) the other
    sizes compile no kernel (docs/dynamic-shapes.md)."""
    from compiler.codegen import family
    model, _ = encoder_block(64, 4, 256, 128, batch=2)
    m = compiler.compile(import_model(model))
    sizes = [(b, s) for b in (1, 3, 8) for s in (1, 7, 128)] + [(3, 16)]
    sizes.sort(key=lambda bs: bs[0])
    seen = {}
    for batch, seq in sizes:
        before = set(family._compiled)
        _, feeds = encoder_block(64, 4, 256, seq, batch=batch)
        np.testing.assert_allclose(m(**feeds), ort_run(model, feeds)["y"], rtol=1e-4, atol=2e-4)
        seen[(batch, seq)] = set(family._compiled) - before
    # batch 8 (a batch above 1, as 3 was) and a repeated row class compile nothing
    assert all(not seen[(8, s)] for s in (1, 7, 128)), seen
    assert all(line.endswith("[run-time extents]") for line in m.kernel_summary()[1:])


def _position_slice_model(rows=8):
    """y = x + table[:S] with S = Shape(x)[0]: a Slice of a constant whose end is
    symbolic, as exporters write position_ids[:, :seq]."""
    table = RNG.standard_normal((rows, 4)).astype(np.float32)
    nodes = [node("Shape", ["x"], ["xs"]), node("Gather", ["xs", "zero"], ["s"], axis=0),
             node("Unsqueeze", ["s", "zero1"], ["s1"]),
             node("Slice", ["table", "zero1", "s1", "zero1"], ["rows"]),
             node("Add", ["x", "rows"], ["y"])]
    inits = {"table": table, "zero": np.array(0, np.int64), "zero1": np.array([0], np.int64)}
    return make(nodes, [vi("x", shape=["seq", 4])], [vi("y", shape=["seq", 4])], inits)


def test_slice_of_a_constant_to_a_symbolic_end_needs_and_uses_bounds():
    model = _position_slice_model(rows=8)
    with pytest.raises(compiler.frontends.onnx.OnnxImportError,
                       match=r"cannot decide seq <= 8.*input_shapes=\{'seq': \(1, 512\)\}"):
        import_model(model)
    g = import_model(model, input_shapes={"seq": (1, 8)})
    assert g.signature()["symbols"] == {"seq": [1, 8]}
    for seq in (1, 8):
        x = RNG.standard_normal((seq, 4)).astype(np.float32)
        np.testing.assert_allclose(compiler.interpret(g, {"x": x})["y"],
                                   ort_run(model, {"x": x})["y"], rtol=1e-6)
    with pytest.raises(compiler.ShapeSignatureError, match="seq' = 9 .*bounds 1..8"):
        compiler.interpret(g, {"x": np.zeros((9, 4), np.float32)})


@pytest.mark.slow
def test_torch_exported_encoder_with_dynamic_axes(tmp_path):
    """A BERT-style layer exported by torch.onnx with dynamic batch/seq axes
    (Shape/Gather/Concat view targets, position_ids[:, :seq] Slice)."""
    torch = pytest.importorskip("torch")
    import math

    class Layer(torch.nn.Module):
        def __init__(self, h=32, nh=2, ffn=64, maxpos=64, vocab=50):
            super().__init__()
            self.nh, self.h = nh, h
            self.emb, self.pos = torch.nn.Embedding(vocab, h), torch.nn.Embedding(maxpos, h)
            self.register_buffer("position_ids", torch.arange(maxpos)[None])
            self.q, self.k, self.v, self.o = (torch.nn.Linear(h, h) for _ in range(4))
            self.ln0, self.ln1, self.ln2 = (torch.nn.LayerNorm(h) for _ in range(3))
            self.f1, self.f2 = torch.nn.Linear(h, ffn), torch.nn.Linear(ffn, h)

        def forward(self, ids, mask):
            b, s = ids.shape
            x = self.ln0(self.emb(ids) + self.pos(self.position_ids[:, :s]))

            def heads(t):
                return t.view(b, s, self.nh, -1).transpose(1, 2)
            q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
            m = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
            sc = q @ k.transpose(-1, -2) / math.sqrt(self.h // self.nh) + m
            ctx = (sc.softmax(-1) @ v).transpose(1, 2).reshape(b, s, self.h)
            h = self.ln1(x + self.o(ctx))
            return self.ln2(h + self.f2(torch.nn.functional.gelu(self.f1(h))))

    torch.manual_seed(0)
    path = str(tmp_path / "layer.onnx")
    ids, mask = torch.randint(0, 50, (2, 7)), torch.ones(2, 7, dtype=torch.int64)
    torch.onnx.export(Layer().eval(), (ids, mask), path, input_names=["ids", "mask"],
                      output_names=["y"], opset_version=17, dynamo=False,
                      dynamic_axes={"ids": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}})
    model = onnx.load(path)
    m = compiler.compile(import_model(model, input_shapes={"seq": (1, 64)}))
    import runtime
    loaded = runtime.load(m.save(tmp_path / "layer.fuel"))  # one file for every size
    for batch, seq in ((2, 7), (1, 3), (4, 20), (1, 1), (3, 64)):
        feeds = {"ids": RNG.integers(0, 50, (batch, seq)).astype(np.int64),
                 "mask": np.ones((batch, seq), np.int64)}
        feeds["mask"][:, -1] = 0
        want = ort_run(model, feeds)["y"]
        np.testing.assert_allclose(m(**feeds), want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(loaded(**feeds), want, rtol=1e-4, atol=1e-4)


def test_constant_of_shape_and_expand_to_symbolic_shapes():
    row = RNG.standard_normal((1, 4)).astype(np.float32)
    nodes = [node("Shape", ["x"], ["xs"]),
             node("ConstantOfShape", ["xs"], ["ones"],
                  value=onnx.numpy_helper.from_array(np.array([2.0], np.float32))),
             node("Expand", ["row", "xs"], ["rows"]),
             node("Add", ["ones", "rows"], ["a"]), node("Mul", ["a", "x"], ["y"])]
    model = make(nodes, [vi("x", shape=["n", 4])], [vi("y", shape=["n", 4])], {"row": row})
    g = import_model(model)
    assert g.signature()["outputs"] == {"y": "f32[n,4]"}
    for n in (1, 6):
        x = RNG.standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_allclose(compiler.interpret(g, {"x": x})["y"],
                                   ort_run(model, {"x": x})["y"], rtol=1e-6)


@pytest.mark.slow
def test_torch_exported_causal_block_with_dynamic_axes(tmp_path):
    """A GPT-2-style block: Range positions, Split of the fused QKV, and the
    causal mask sliced from a buffer as bias[:, :, k - q:k, :k] (symbolic start
    and end), then Where."""
    torch = pytest.importorskip("torch")
    import math

    class Block(torch.nn.Module):
        def __init__(self, h=32, nh=2, maxpos=64, vocab=50):
            super().__init__()
            self.nh, self.h = nh, h
            self.wte, self.wpe = torch.nn.Embedding(vocab, h), torch.nn.Embedding(maxpos, h)
            self.register_buffer("bias", torch.tril(torch.ones(maxpos, maxpos,
                                                               dtype=torch.bool))[None, None])
            self.ln1, self.ln2 = torch.nn.LayerNorm(h), torch.nn.LayerNorm(h)
            self.c_attn, self.c_proj = torch.nn.Linear(h, 3 * h), torch.nn.Linear(h, h)
            self.fc, self.proj = torch.nn.Linear(h, 4 * h), torch.nn.Linear(4 * h, h)

        def forward(self, ids):
            b, t = ids.size()
            x = self.wte(ids) + self.wpe(torch.arange(0, t, dtype=torch.long).unsqueeze(0))
            q, k, v = self.c_attn(self.ln1(x)).split(self.h, dim=2)

            def heads(z):
                return z.view(b, t, self.nh, self.h // self.nh).transpose(1, 2)
            q, k, v = heads(q), heads(k), heads(v)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            ql, kl = q.size(-2), k.size(-2)
            att = torch.where(self.bias[:, :, kl - ql:kl, :kl], att,
                              torch.tensor(torch.finfo(att.dtype).min))
            y = (att.softmax(-1) @ v).transpose(1, 2).contiguous().view(b, t, self.h)
            x = x + self.c_proj(y)
            return x + self.proj(torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    torch.manual_seed(0)
    path = str(tmp_path / "block.onnx")
    torch.onnx.export(Block().eval(), (torch.randint(0, 50, (2, 7)),), path, input_names=["ids"],
                      output_names=["y"], opset_version=17, dynamo=False,
                      dynamic_axes={"ids": {0: "batch", 1: "seq"}})
    model = onnx.load(path)
    m = compiler.compile(import_model(model, input_shapes={"seq": (1, 64)}))
    for batch, seq in ((2, 7), (1, 1), (3, 30)):
        feeds = {"ids": RNG.integers(0, 50, (batch, seq)).astype(np.int64)}
        np.testing.assert_allclose(m(**feeds), ort_run(model, feeds)["y"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("index", [0, -1])
def test_gather_of_one_position_on_a_symbolic_axis(index):
    """x[:, 0] (a pooler) and x[:, -1] (the last token) on the sequence axis."""
    model = make([node("Gather", ["x", "i"], ["y"], axis=1)], [vi("x", shape=["b", "s", 4])],
                 [vi("y", shape=["b", 4])], {"i": np.array(index, np.int64)})
    g = import_model(model)
    for seq in (1, 5):
        x = RNG.standard_normal((2, seq, 4)).astype(np.float32)
        np.testing.assert_array_equal(compiler.interpret(g, {"x": x})["y"],
                                      ort_run(model, {"x": x})["y"])


def test_static_extent_of_a_symbolic_shape_is_plain_data():
    """Shape(x)[[1, 1]] of a static axis while axis 0 is symbolic, added to the
    data: the folded value is a plain int64 constant again (not a shape value)."""
    nodes = [node("Shape", ["x"], ["xs"]), node("Gather", ["xs", "ones"], ["d"], axis=0),
             node("Add", ["x", "d"], ["y"])]
    model = make(nodes, [vi("x", onnx.TensorProto.INT64, ["b", 2])],
                 [vi("y", onnx.TensorProto.INT64, ["b", 2])], {"ones": np.array([1, 1], np.int64)})
    g = import_model(model)
    x = RNG.integers(0, 9, (3, 2)).astype(np.int64)
    np.testing.assert_array_equal(compiler.interpret(g, {"x": x})["y"], x + 2)
