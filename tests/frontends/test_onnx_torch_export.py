"""Models in the style of BERT, RoBERTa, T5, U-Net and LSTM/GRU networks, written
here from small configs with random weights, exported by both PyTorch exporters
(the TorchScript one, ``dynamo=False``, and the default ``torch.export`` one,
which needs ``onnxscript``), imported, compiled for the CPU and compared with
onnxruntime on the same exported file."""
import importlib.util
import math
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import compiler  # noqa: E402
from compiler.frontends.onnx import import_model  # noqa: E402
from test_onnx_import import ort_run  # noqa: E402

#: the dynamo exporter's op library
HAVE_ONNXSCRIPT = importlib.util.find_spec("onnxscript") is not None

EXPORTERS = [pytest.param(False, id="torchscript"),
             pytest.param(True, id="dynamo", marks=pytest.mark.skipif(
                 not HAVE_ONNXSCRIPT, reason="the dynamo exporter needs onnxscript"))]


# ---------------------------------------------------------------------------
# the models


class BertLayer(nn.Module):
    def __init__(self, d, heads, ffn, sdpa=False):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.qkv = nn.ModuleList(nn.Linear(d, d) for _ in range(3))
        self.out = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d, eps=1e-12)
        self.up, self.down = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = (lin(x).view(b, s, self.heads, -1).transpose(1, 2) for lin in self.qkv)
        if self.sdpa:  # transformers' default attention: a boolean keep-mask
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:  # the eager one: an additive mask
            ctx = (q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + mask).softmax(-1) @ v
        x = self.ln1(x + self.out(ctx.transpose(1, 2).reshape(b, s, d)))
        act = F.gelu(self.up(x), approximate="tanh" if self.sdpa else "none")
        return self.ln2(x + self.down(act))


class Bert(nn.Module):
    """BERT: word, absolute position and token-type embeddings, LayerNorm, the
    extended attention mask, GELU, a tanh pooler. ``roberta``: position ids by
    cumsum over the non-padding mask, offset by the padding index (fairseq)."""

    def __init__(self, vocab=50, d=32, heads=4, ffn=64, layers=2, max_pos=16, roberta=False,
                 sdpa=False):
        super().__init__()
        self.roberta, self.sdpa, self.pad = roberta, sdpa, 1
        self.words = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_pos + 2, d)
        self.types = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(d, heads, ffn, sdpa) for _ in range(layers))
        self.pool = nn.Linear(d, d)
        self.register_buffer("pos_ids", torch.arange(max_pos)[None], persistent=False)

    def forward(self, ids, mask, types):
        if self.roberta:
            m = ids.ne(self.pad).int()
            pos = (torch.cumsum(m, dim=1).type_as(m) * m).long() + self.pad
        else:
            pos = self.pos_ids[:, :ids.shape[1]]
        x = self.ln(self.words(ids) + self.pos(pos) + self.types(types))
        if self.sdpa:
            mask = mask[:, None, None, :].bool()
        else:
            mask = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pool(x[:, 0]))


class T5LayerNorm(nn.Module):
    """RMS norm without mean or bias, as T5's."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        var = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


class T5(nn.Module):
    """A T5 encoder: bidirectional relative position buckets (log-spaced past
    ``buckets // 4``) to a per-head bias shared by the layers, no biases, no
    attention scaling, T5LayerNorm before each block, a ReLU feed-forward."""

    def __init__(self, vocab=50, d=32, heads=4, ffn=64, layers=2, buckets=8, max_dist=20):
        super().__init__()
        self.heads, self.buckets, self.max_dist = heads, buckets, max_dist
        self.emb = nn.Embedding(vocab, d)
        self.rel = nn.Embedding(buckets, heads)
        self.attn = nn.ModuleList(nn.ModuleDict(
            {n: nn.Linear(d, d, bias=False) for n in "qkvo"}) for _ in range(layers))
        self.ffn = nn.ModuleList(nn.Sequential(
            nn.Linear(d, ffn, bias=False), nn.ReLU(), nn.Linear(ffn, d, bias=False))
            for _ in range(layers))
        self.n1 = nn.ModuleList(T5LayerNorm(d) for _ in range(layers))
        self.n2 = nn.ModuleList(T5LayerNorm(d) for _ in range(layers))
        self.final = T5LayerNorm(d)

    def bucket(self, rel):  # transformers' T5Attention._relative_position_bucket
        n = self.buckets // 2
        out = (rel > 0).to(torch.long) * n
        rel = torch.abs(rel)
        exact = n // 2
        large = exact + (torch.log(rel.float() / exact) / math.log(self.max_dist / exact)
                         * (n - exact)).to(torch.long)
        large = torch.min(large, torch.full_like(large, n - 1))
        return out + torch.where(rel < exact, rel, large)

    def forward(self, ids, mask):
        b, s = ids.shape
        rel = torch.arange(s)[None, :] - torch.arange(s)[:, None]
        bias = self.rel(self.bucket(rel)).permute(2, 0, 1)[None]
        bias = bias + (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        x = self.emb(ids)
        for a, f, n1, n2 in zip(self.attn, self.ffn, self.n1, self.n2):
            h = n1(x)
            q, k, v = (a[n](h).view(b, s, self.heads, -1).transpose(1, 2) for n in "qkv")
            w = (q @ k.transpose(-1, -2) + bias).softmax(-1)
            x = x + a["o"]((w @ v).transpose(1, 2).reshape(b, s, -1))
            x = x + f(n2(x))
        return self.final(x)


class UNet(nn.Module):
    """Down by max pooling and a strided conv; up by a transposed conv, bilinear
    interpolation (align_corners False and True) and nearest to a size; skip
    connections concatenated; conv + BatchNorm + ReLU blocks."""

    def __init__(self, cin=3, c=4, cout=2):
        super().__init__()

        def blk(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())
        self.e1, self.e2, self.e3 = blk(cin, c), blk(c, 2 * c), blk(2 * c, 4 * c)
        self.down3 = nn.Conv2d(2 * c, 2 * c, 3, stride=2, padding=1)
        self.mid = blk(4 * c, 4 * c)
        self.up = nn.ConvTranspose2d(4 * c, 4 * c, 2, stride=2)
        self.d3, self.d2, self.d1 = blk(8 * c, 2 * c), blk(4 * c, c), blk(2 * c, c)
        self.head, self.aux = nn.Conv2d(c, cout, 1), nn.Conv2d(2 * c, cout, 1)
        for m in self.modules():  # running statistics other than 0 and 1
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        s1 = self.e1(x)
        s2 = self.e2(F.max_pool2d(s1, 2))
        s3 = self.e3(self.down3(s2))
        m = self.mid(F.max_pool2d(s3, 2))
        y = self.d3(torch.cat([self.up(m), s3], 1))
        y = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        y = self.d2(torch.cat([y, s2], 1))
        y = F.interpolate(y, size=s1.shape[-2:], mode="nearest")
        y = self.d1(torch.cat([y, s1], 1))
        aux = F.interpolate(self.aux(s2), scale_factor=2, mode="bilinear", align_corners=True)
        return self.head(y) + aux


class Recurrent(nn.Module):
    """nn.LSTM / nn.GRU: 2 layers, bidirectional, batch_first; a linear head on
    the sequence output, the final hidden states returned too."""

    def __init__(self, cell, i=6, h=8, out=3):
        super().__init__()
        self.rnn = getattr(nn, cell)(i, h, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(2 * h, out)

    def forward(self, x):
        y, state = self.rnn(x)
        h = state[0] if isinstance(state, tuple) else state
        return self.head(y), h


class PackedLSTM(nn.Module):
    """An LSTM over padded sequences of unsorted lengths, packed and unpacked:
    the TorchScript exporter sorts the lengths (TopK), runs LSTM with
    sequence_lens and restores the batch order through a ScatterElements of the
    run-time sort permutation."""

    def __init__(self, i=6, h=8):
        super().__init__()
        self.rnn = nn.LSTM(i, h, batch_first=True, bidirectional=True)

    def forward(self, x, lens):
        p = nn.utils.rnn.pack_padded_sequence(x, lens, batch_first=True, enforce_sorted=False)
        y, (h, _) = self.rnn(p)
        y, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        return y, h


class TorchEncoder(nn.Module):
    """nn.TransformerEncoder (GELU, batch_first) under a boolean key-padding mask."""

    def __init__(self, d=32, heads=4, ffn=64, layers=2):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, activation="gelu",
                                           batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x, pad):
        return self.enc(x, src_key_padding_mask=pad)


# ---------------------------------------------------------------------------
# export, import, compile, compare


def export(model, args, names, dynamo, path, opset=None):
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notes
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, str(path), input_names=names, dynamo=dynamo,
                          opset_version=opset)
    return onnx.load(str(path))


def text_ids():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, 50, (2, 7), generator=g)
    ids[1, 5:] = 1  # padding (id 1) at the end of the second row
    types = torch.zeros_like(ids)
    types[:, 4:] = 1
    return ids, (ids != 1).long(), types


def check_export(model, args, names, dynamo, path, ops=(), opset=None):
    """Export ``model`` (eval mode), check that the file holds ``ops`` (the
    exporter's spelling under test), compile its import and compare every output
    with onnxruntime's."""
    proto = export(model.eval(), args, names, dynamo, path, opset)
    present = {n.op_type for n in proto.graph.node}
    assert set(ops) <= present, sorted(present)
    feeds = {n: a.numpy() for n, a in zip(names, args)}
    want = ort_run(proto, feeds)
    # booleans are u8 (0/1) in fuelc graphs: a bool input is given as uint8
    got = compiler.compile(import_model(proto))(**{
        k: v.astype(np.uint8) if v.dtype == np.bool_ else v for k, v in feeds.items()})
    got = got if isinstance(got, dict) else {next(iter(want)): got}
    assert set(got) == set(want)
    for k, w in want.items():
        assert got[k].shape == w.shape, k
        w = w.astype(np.uint8) if w.dtype == np.bool_ else w
        np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("dynamo", EXPORTERS)
@pytest.mark.parametrize("variant,ops", [
    ("bert", {"Gather", "LayerNormalization", "Gelu", "Softmax", "Tanh"}),
    ("roberta", {"CumSum"}),
    # SDPA with a boolean mask: Where(mask, 0, -inf), then a NaN guard on the softmax
    pytest.param("bert-sdpa", {"IsNaN", "Where"}, marks=pytest.mark.slow),
])
def test_bert_style_encoder(variant, ops, dynamo, tmp_path):
    torch.manual_seed(0)
    model = Bert(roberta=variant == "roberta", sdpa=variant == "bert-sdpa")
    check_export(model, text_ids(), ["ids", "mask", "types"], dynamo, tmp_path / "m.onnx", ops)


@pytest.mark.parametrize("dynamo", EXPORTERS)
def test_t5_style_encoder(dynamo, tmp_path):
    torch.manual_seed(1)
    ids, mask, _ = text_ids()
    # the TorchScript exporter keeps the bucket math (Log, Min, Where), dynamo folds it
    check_export(T5(), (ids, mask), ["ids", "mask"], dynamo, tmp_path / "m.onnx",
                 {"Pow", "ReduceMean", "Sqrt"} | (set() if dynamo else {"Log", "Where"}))


@pytest.mark.parametrize("dynamo", EXPORTERS)
def test_unet_style_segmenter(dynamo, tmp_path):
    torch.manual_seed(2)
    x = torch.randn(1, 3, 16, 16)
    check_export(UNet(), (x,), ["x"], dynamo, tmp_path / "m.onnx",
                 {"Resize", "ConvTranspose", "MaxPool", "Concat"})


@pytest.mark.parametrize("dynamo", EXPORTERS)
@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_recurrent_network(cell, dynamo, tmp_path):
    torch.manual_seed(3)
    x = torch.randn(2, 5, 6)
    check_export(Recurrent(cell), (x,), ["x"], dynamo, tmp_path / "m.onnx", {cell})


@pytest.mark.slow
@pytest.mark.parametrize("dynamo", EXPORTERS)
def test_torch_transformer_encoder_with_padding_mask(dynamo, tmp_path):
    torch.manual_seed(5)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[1, 5:] = True
    check_export(TorchEncoder(), (torch.randn(2, 7, 32), pad), ["x", "pad"], dynamo,
                 tmp_path / "m.onnx", {"Where"})


def test_packed_lstm_of_unsorted_lengths(tmp_path):
    """TorchScript only: the dynamo exporter cannot export pack_padded_sequence.
    The lengths are a run-time input: other lengths than the exported ones run."""
    torch.manual_seed(6)
    x, lens = torch.randn(3, 5, 6), torch.tensor([5, 2, 4])
    check_export(PackedLSTM(), (x, lens), ["x", "lens"], False, tmp_path / "m.onnx",
                 {"TopK", "ScatterElements", "LSTM"})
    proto = onnx.load(str(tmp_path / "m.onnx"))
    m = compiler.compile(import_model(proto))
    for other in ([3, 5, 1], [2, 2, 5]):
        feeds = {"x": x.numpy(), "lens": np.array(other, np.int64)}
        want, got = ort_run(proto, feeds), m(**feeds)
        for k, w in want.items():
            np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ONNXSCRIPT, reason="the dynamo exporter needs onnxscript")
def test_bert_style_encoder_with_dynamic_shapes_at_two_sizes(tmp_path):
    """dynamo=True with dynamic_shapes: batch and seq stay symbolic in the file;
    the sequence bound torch knew (the position table) is not written, so the
    import gives it (input_shapes), and one compiled module runs both sizes."""
    torch.manual_seed(0)
    batch, seq = torch.export.Dim("batch", max=8), torch.export.Dim("seq", max=16)
    names = ["ids", "mask", "types"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Bert().eval(), text_ids(), str(tmp_path / "m.onnx"), input_names=names,
                          dynamo=True, dynamic_shapes={n: {0: batch, 1: seq} for n in names})
    proto = onnx.load(str(tmp_path / "m.onnx"))
    assert [d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim] == \
        ["batch", "seq"]
    m = compiler.compile(import_model(proto, input_shapes={"seq": (1, 16)}))
    rng = np.random.default_rng(1)
    for b, s in ((2, 7), (3, 12)):
        feeds = {"ids": rng.integers(2, 50, (b, s)), "mask": np.ones((b, s), np.int64),
                 "types": np.zeros((b, s), np.int64)}
        feeds["ids"][0, -2:], feeds["mask"][0, -2:] = 1, 0
        want, got = ort_run(proto, feeds), m(**feeds)
        for k, w in want.items():
            np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.slow
@pytest.mark.parametrize("opset", [11, 14])
def test_torchscript_exports_at_older_opsets(opset, tmp_path):
    """Users still pin opset_version 11-14: those files are converted at import."""
    torch.manual_seed(4)
    ids, mask, types = text_ids()
    check_export(Bert(roberta=True), (ids, mask, types), ["ids", "mask", "types"], False,
                 tmp_path / "r.onnx", {"CumSum"}, opset=opset)
    check_export(UNet(), (torch.randn(1, 3, 16, 16),), ["x"], False, tmp_path / "u.onnx",
                 {"Resize"}, opset=opset)
    check_export(Recurrent("GRU"), (torch.randn(2, 5, 6),), ["x"], False, tmp_path / "g.onnx",
                 {"GRU"}, opset=opset)
