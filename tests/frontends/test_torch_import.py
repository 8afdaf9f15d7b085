"""PyTorch import: small models written as plain torch.nn modules (random
weights), exported with torch.export, imported, compiled for the CPU and
compared with eager ``model(*args)``; saved and run by the runtime alone in a
process without torch; the errors for what fuelc refuses."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from compiler.frontends.torch import (SymbolicShapeError, TorchImportError,  # noqa: E402
                                      compile_module, import_program, supported_ops)
from compiler.frontends.torch._dtypes import dtype_of, from_numpy, to_numpy  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------
# the models
# ---------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x))).relu()


class Block(nn.Module):
    """ResNet's BasicBlock: conv-bn-relu-conv-bn plus the (downsampled) input."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(Block(8, 8, 1), Block(8, 16, 2))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        y = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hid = cin * expand
        self.residual = stride == 1 and cin == cout
        self.body = nn.Sequential(
            nn.Conv2d(cin, hid, 1, bias=False), nn.BatchNorm2d(hid), nn.ReLU6(),
            nn.Conv2d(hid, hid, 3, stride, 1, groups=hid, bias=False), nn.BatchNorm2d(hid),
            nn.ReLU6(), nn.Conv2d(hid, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
            InvertedResidual(8, 8, 1, 2), InvertedResidual(8, 16, 2, 4),
            InvertedResidual(16, 16, 1, 4))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(16, 10))

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.head(out), h, c


class GPT2Block(nn.Module):
    """Token + position embeddings, a pre-LayerNorm block with causal
    attention spelled out (a tril mask, masked_fill, softmax), tanh GELU,
    and an LM head tied to the token embedding."""

    def __init__(self, vocab=50, d=32, heads=4, seq=8):
        super().__init__()
        self.heads = heads
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.ln1, self.ln2, self.lnf = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, ids):
        b, s = ids.shape
        x = self.wte(ids) + self.wpe(torch.arange(s))
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=2)
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        att = att.masked_fill(~self.mask[:s, :s], float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, -1))
        x = x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return self.head(self.lnf(x))


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class LlamaBlock(nn.Module):
    """RMSNorm, rotary embeddings, grouped-query causal SDPA, SwiGLU MLP."""

    def __init__(self, d=32, heads=4, kv_heads=2, seq=8):
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, d // heads
        self.n1, self.n2 = nn.RMSNorm(d, eps=1e-6), nn.RMSNorm(d, eps=1e-6)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, 64, bias=False), nn.Linear(d, 64, bias=False)
        self.down = nn.Linear(64, d, bias=False)
        inv = 1.0 / 10000 ** (torch.arange(0, self.hd, 2).float() / self.hd)
        ang = torch.outer(torch.arange(seq).float(), inv)
        self.register_buffer("cos", torch.cat((ang, ang), -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat((ang, ang), -1).sin(), persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, s, self.h, self.hd).transpose(1, 2)
        k = self.k(h).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.v(h).view(b, s, self.kv, self.hd).transpose(1, 2)
        q = q * self.cos + rotate_half(q) * self.sin
        k = k * self.cos + rotate_half(k) * self.sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.down(F.silu(self.gate(self.n2(x))) * self.up(self.n2(x)))


class BertLayer(nn.Module):
    """Post-LayerNorm encoder layer with a padding mask (additive, from a
    0/1 attention mask input) through SDPA's attn_mask."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-12), nn.LayerNorm(d, eps=1e-12)
        self.fc1, self.fc2 = nn.Linear(d, 64), nn.Linear(64, d)

    def forward(self, x, attention_mask):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, -1))
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = self.ln1(x + self.o(a.transpose(1, 2).reshape(b, s, d)))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


def _models():
    g = torch.Generator().manual_seed(0)

    def randn(*s):
        return torch.randn(*s, generator=g)
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0
    return {
        "mlp": (MLP, (randn(4, 16),)),
        "resnet": (ResNet, (randn(1, 3, 16, 16),)),
        "mobilenet_v2": (MobileNetV2, (randn(1, 3, 16, 16),)),
        "lstm": (LSTMNet, (randn(2, 5, 8),)),
        "gpt2": (GPT2Block, (torch.randint(0, 50, (2, 8), generator=g),)),
        "llama": (LlamaBlock, (randn(2, 8, 32),)),
        "bert": (BertLayer, (randn(2, 8, 32), mask)),
    }


MODELS = _models()


def _randomize(model):
    """Random weights, and batch-norm statistics that are not the identity."""
    torch.manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return model.eval()


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def assert_matches(got, want, rel=1e-5):
    """Each output within ``rel`` of the largest magnitude of torch's."""
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), w.detach().numpy()
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        scale = max(float(np.abs(w).max()), 1e-30)
        assert float(np.abs(g - w).max()) <= rel * scale, (float(np.abs(g - w).max()), scale)


@pytest.fixture(scope="module")
def compiled():
    """name -> (model, args, CompiledProgram), each compiled once."""
    out = {}
    for name, (cls, args) in MODELS.items():
        model = _randomize(cls())
        out[name] = (model, args, compile_module(model, args))
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_eager(compiled, name):
    model, args, program = compiled[name]
    with torch.no_grad():
        want = model(*args)
    got = program(*args)
    assert type(got) is type(want)
    assert_matches(got, want)


def test_saved_modules_run_without_torch(compiled, tmp_path):
    """save() -> runtime.load() in a process where torch cannot be imported."""
    cases = {}
    for name, (model, args, program) in compiled.items():
        program.save(tmp_path / f"{name}.fuel")
        with torch.no_grad():
            want = _flat(model(*args))
        ins = dict(zip(program.input_names, (to_numpy(a) for a in args)))
        np.savez(tmp_path / f"{name}_in.npz", **ins)
        np.savez(tmp_path / f"{name}_want.npz", *[w.numpy() for w in want])
        cases[name] = list(program.module.output_names)
    script = f"""
import sys, json
sys.modules["torch"] = None  # any import of torch fails
import numpy as np, runtime
cases = json.loads({json.dumps(json.dumps(cases))})
for name, outs in cases.items():
    m = runtime.load(f"{tmp_path}/{{name}}.fuel")
    got = m.run(**dict(np.load(f"{tmp_path}/{{name}}_in.npz")))
    want = np.load(f"{tmp_path}/{{name}}_want.npz")
    for i, o in enumerate(outs):
        w = want[f"arr_{{i}}"]
        err = float(np.abs(got[o] - w).max()) / max(float(np.abs(w).max()), 1e-30)
        assert got[o].shape == w.shape and err <= 1e-5, (name, o, err)
assert "torch" not in sys.modules or sys.modules["torch"] is None
print("ok", len(cases))
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["ok", str(len(compiled))]


# ---------------------------------------------------------------------------
# parameters, dtypes, the CLI
# ---------------------------------------------------------------------------
def test_parameters_are_named_constants_shared_once(compiled):
    """The GPT-2 block's tied embedding/head weight is one tensor: one
    constant, which the head reads transposed; other Linear weights are
    stored transposed ([in, out]) once."""
    g = compiled["gpt2"][2].graph
    assert "wte.weight" in g.constants and "wte.weight.T" not in g.constants
    assert not any(n.startswith("head.") for n in g.constants)
    assert "qkv.weight.T" in g.constants and "qkv.bias" in g.constants
    # the LSTM's recurrent weights serve every time step: transposed once each
    names = list(compiled["lstm"][2].graph.constants)
    assert names.count("lstm.weight_hh_l0.T") == 1 and names.count("lstm.weight_hh_l1.T") == 1


def test_batch_norm_folds_into_the_convolution(compiled):
    g = compiled["resnet"][2].graph
    assert "stem.0.weight::bn_folded" in g.constants
    assert not any("running_mean" in n for n in g.constants)


@pytest.mark.parametrize("tdt, name", [(torch.float32, "f32"), (torch.float64, "f64"),
                                       (torch.float16, "f16"), (torch.bfloat16, "bf16"),
                                       (torch.int8, "i8"), (torch.uint8, "u8"),
                                       (torch.int16, "i16"), (torch.int32, "i32"),
                                       (torch.int64, "i64"), (torch.bool, "u8")])
def test_dtypes_as_torch_names_them(tdt, name):
    assert dtype_of(tdt).value == name
    t = (torch.arange(6).reshape(2, 3) % 3).to(tdt)
    a = to_numpy(t)
    assert a.dtype == dtype_of(tdt).numpy  # bool: u8 0/1
    back = from_numpy(a, tdt)
    assert back.dtype == tdt and torch.equal(back, t)
    assert back.data_ptr() == t.data_ptr()  # no copies


def test_bf16_mlp_and_bool_input_and_output():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(16, 8)

        def forward(self, x, keep):
            y = self.l(x) * keep
            return y, y > 0

    model = M().to(torch.bfloat16).eval()
    x = torch.randn(4, 16).to(torch.bfloat16)
    keep = torch.rand(4, 8) > 0.3
    got_y, got_pos = compile_module(model, (x, keep))(x, keep)
    want_y, want_pos = model(x, keep)
    assert got_y.dtype == torch.bfloat16 and got_pos.dtype == torch.bool
    assert torch.allclose(got_y.float(), want_y.float(), rtol=2e-2, atol=2e-2)
    assert (got_pos == (got_y > 0)).all()


def test_cli_compiles_a_saved_program(compiled, tmp_path, capsys):
    import runtime
    from compiler.cli import main
    model, args, _ = compiled["mlp"]
    torch.export.save(torch.export.export(model, args), tmp_path / "mlp.pt2")
    assert main(["compile", str(tmp_path / "mlp.pt2"), "-o", str(tmp_path / "mlp.fuel")]) == 0
    got = runtime.load(tmp_path / "mlp.fuel")(x=args[0].numpy())
    assert_matches(got, model(*args))
    assert main(["compile", str(tmp_path / "mlp.pt2"), "--input-shape", "x=1,16"]) == 1
    (tmp_path / "junk.pt2").write_bytes(b"not a program")
    assert main(["compile", str(tmp_path / "junk.pt2")]) == 1
    assert "cannot read the torch.export program" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# what is refused
# ---------------------------------------------------------------------------
def test_every_unsupported_op_in_one_error():
    class M(nn.Module):
        def forward(self, x):
            y = torch.sort(x, -1).values.relu()         # downstream of a refused op, too
            return torch.cumprod(y, 1), torch.sort(x * 2, 0).values

    with pytest.raises(TorchImportError) as e:
        import_program(torch.export.export(M(), (torch.randn(3, 4),)))
    ops = [i.op_type for i in e.value.issues]
    assert ops.count("aten.sort.default") == 2 and ops.count("aten.cumprod.default") == 1
    msg = str(e.value)
    assert "3 unsupported construct(s)" in msg and "aten.cumprod.default, aten.sort.default" in msg


def test_symbolic_dims_are_refused():
    batch = torch.export.Dim("batch")
    model, (x,) = MLP().eval(), MODELS["mlp"][1]
    ep = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
    with pytest.raises(SymbolicShapeError, match=r"input 'x' axis 0: symbolic size s\d+ \(range"):
        import_program(ep)
    with pytest.raises(SymbolicShapeError):
        compile_module(model, (x,), dynamic_shapes={"x": {0: batch}})


def test_mutations_and_training_mode_are_refused_by_name():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x):
            self.calls.add_(1)
            return x * 2

    with pytest.raises(TorchImportError, match=r"writes buffer 'calls'.*aten.add.Tensor"):
        import_program(torch.export.export(Counter(), (torch.randn(3),)))
    bn = nn.BatchNorm2d(4).train()  # training batch norm updates its running statistics
    with pytest.raises(TorchImportError) as e:
        import_program(torch.export.export(bn, (torch.randn(2, 4, 3, 3),)))
    targets = {i.node for i in e.value.issues if i.op_type == "mutation"}
    assert {"running_mean", "running_var", "num_batches_tracked"} <= targets

    drop = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    with pytest.raises(TorchImportError, match=r"native_dropout.*model\.eval\(\)"):
        import_program(torch.export.export(drop, (torch.randn(2, 4),)))

    class InPlaceInput(nn.Module):
        def forward(self, x):
            x.mul_(2)
            return x + 1

    with pytest.raises(TorchImportError, match=r"writes user input 'x'"):
        import_program(torch.export.export(InPlaceInput(), (torch.randn(3),)))


def test_docs_list_the_importer_table():
    from compiler.frontends.torch import _doc
    text = (ROOT / "docs" / "torch.md").read_text()
    assert _doc.ops_table() in text, \
        "docs/torch.md is stale: python -m compiler.frontends.torch._doc"
    assert len(supported_ops()) > 60


# ---------------------------------------------------------------------------
# op coverage, on the reference interpreter (no code generation: fast)
# ---------------------------------------------------------------------------
class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


_G = torch.Generator().manual_seed(3)
X = torch.randn(2, 3, 6, 6, generator=_G)
V = torch.randn(4, 6, generator=_G)
I = torch.randint(-3, 6, (4, 6), generator=_G)
Q, K = torch.randn(1, 2, 4, 8, generator=_G), torch.randn(1, 2, 6, 8, generator=_G)
W1 = torch.randn(5, 3, 3, generator=_G)
WT = torch.randn(3, 4, 3, 3, generator=_G)

OP_CASES = {
    "arith_promotion": (lambda v, i: (v * i + 2, i // 2 * 3 - v / 4, i + 1.5, (i * 2) % 5),
                        (V, I)),
    "div_modes": (lambda v: (torch.div(v * 5, 2, rounding_mode="floor"),
                             torch.div(v * 5, 2, rounding_mode="trunc"), 1 / (v.abs() + 1)),
                  (V,)),
    "compare_logic": (lambda v, i: ((v > 0) & (i < 2), (v <= 0.5) | (i == 3), ~(v > 0),
                                    torch.where(i > 0, v, -v), (v > 0) ^ (i >= 0)), (V, I)),
    "unary": (lambda v: (v.exp(), v.abs().log1p(), v.expm1(), v.sigmoid(), v.tanh(), v.sign(),
                         v.clamp(-0.5, 0.5), F.leaky_relu(v, 0.1), F.elu(v), F.hardtanh(v),
                         v.abs().sqrt(), (v.abs() + 1).rsqrt(), v ** 3, v.abs() ** 0.7,
                         torch.floor(v), torch.round(v * 3), F.silu(v), F.gelu(v),
                         (v + 3) ** -2, (v * 2).to(torch.bool), (v > 0).float()), (V,)),
    "reductions": (lambda v: (v.sum(), v.mean(-1, keepdim=True), v.amax(0), v.max(1),
                              v.argmax(-1), v.argmin(), v.var(1), v.cumsum(1),
                              torch.std(v, 0), v.min()), (V,)),
    "softmax": (lambda v: (v.softmax(0), v.log_softmax(-1)), (V,)),
    "shapes": (lambda x: (x.flatten(1), x.permute(0, 2, 3, 1), x[:, 1:, ::2, 3], x[..., -1],
                          x.unsqueeze(2).expand(2, 3, 4, 6, 6), x.squeeze(0) * 1,
                          torch.cat([x, x * 2], 1), x.split([1, 2], 1)[1], x.unbind(1)[2],
                          x.flip(-1), F.pad(x, (1, 2, 0, -1), value=0.5), x.tril(),
                          x.chunk(2, -1)[1].contiguous(), x.transpose(-1, -2)), (X,)),
    "indexing": (lambda v, i: (v[:, i[0].clamp(0, 5)], v.gather(1, i.clamp(0, 5)),
                               v.index_select(0, torch.tensor([3, 0, 1])),
                               F.embedding(i.clamp(0, 3), v), v[torch.tensor([2, -1])]),
                 (V, I)),
    "pooling": (lambda x: (F.max_pool2d(x, 3, 2, 1, ceil_mode=True), F.avg_pool2d(x, 2),
                           F.avg_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 3, 2, 1,
                                                                  count_include_pad=False),
                           F.adaptive_avg_pool2d(x, (2, 3)), F.adaptive_avg_pool2d(x, 1)), (X,)),
    "convolutions": (lambda x: (F.conv1d(x.flatten(2)[:, :, :8], W1, stride=2, padding=1),
                                F.conv_transpose2d(x, WT, stride=2, padding=1),
                                F.conv2d(x, WT.transpose(0, 1), dilation=2, groups=1)), (X,)),
    "attention": (lambda q, k: (F.scaled_dot_product_attention(q, k, k),
                                F.scaled_dot_product_attention(q, k, k, is_causal=True),
                                F.scaled_dot_product_attention(
                                    q, k, k, attn_mask=torch.ones(4, 6, dtype=torch.bool).tril(1)),
                                F.scaled_dot_product_attention(q, q, q, is_causal=True,
                                                               scale=0.3)), (Q, K)),
    "matmuls": (lambda v: (v @ v.T, torch.addmm(v[:, 0], v, v.T), torch.bmm(v[None], v.T[None]),
                           torch.outer(v[0], v[1]), v.to(torch.float64) * 2,
                           v.to(torch.int32)), (V,)),
    "norms_resize": (lambda x: (F.group_norm(x, 3, torch.ones(3), torch.arange(3.0)),
                                F.instance_norm(x), F.normalize(x, dim=-1),
                                torch.linalg.vector_norm(x, 1, dim=(1, 2)), x.norm(dim=1),
                                F.interpolate(x, scale_factor=2, mode="nearest"),
                                F.interpolate(x, size=(9, 4), mode="nearest"),
                                F.interpolate(x, size=(9, 7), mode="bilinear"),
                                F.interpolate(x, scale_factor=2, mode="bilinear",
                                              align_corners=True)), (X,)),
    "more_ops": (lambda v, i: (v.topk(3, -1), v.topk(2, 0, largest=False).indices,
                               (v > 1).any(-1), (i >= -3).all(), (v > 0).any(),
                               v.repeat(2, 1, 3), F.hardswish(v), F.mish(v), F.softplus(v),
                               F.glu(v, 1), F.logsigmoid(v), torch.stack([v, v * 2], 1)),
                 (V, I)),
    "constants": (lambda v: (v + torch.arange(6), v * torch.ones(4, 6).triu(),
                             torch.full_like(v, 2.5), torch.zeros_like(v, dtype=torch.int64)),
                  (V,)),
}


#: beyond what the models above use: under -m slow (the default run stays fast)
SLOW_OP_CASES = {"norms_resize", "more_ops"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_OP_CASES
                                  else n for n in OP_CASES])
def test_ops_match_eager_on_the_interpreter(name):
    from compiler import interpret
    fn, args = OP_CASES[name]
    ep = torch.export.export(Fn(fn), args)
    g = import_program(ep)
    got = interpret(g, {n: to_numpy(a) for n, a in zip(g.inputs, args)})
    with torch.no_grad():
        want = _flat(fn(*args))
    want = [w for w in torch.utils._pytree.tree_leaves(want)]
    assert len(got) == len(want)
    for (k, g_), w in zip(got.items(), want):
        w = to_numpy(w)
        assert g_.shape == w.shape and g_.dtype == w.dtype, (k, g_.shape, w.shape, g_.dtype,
                                                             w.dtype)
        if w.dtype.kind == "f":
            scale = max(float(np.abs(w).max()), 1e-30)
            assert float(np.abs(g_ - w).max()) <= 1e-5 * scale, (k, float(np.abs(g_ - w).max()))
        else:
            np.testing.assert_array_equal(g_, w, err_msg=k)


class UNetish(nn.Module):
    """GroupNorm, SiLU, a stride-2 convolution and bilinear/nearest upsampling
    with a skip connection (a diffusion U-Net's pieces)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Conv2d(3, 8, 3, padding=1)
        self.down = nn.Sequential(nn.GroupNorm(4, 8), nn.SiLU(), nn.Conv2d(8, 16, 3, 2, 1))
        self.up = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"),
                                nn.Conv2d(16, 8, 3, padding=1), nn.InstanceNorm2d(8))
        self.out = nn.Conv2d(8, 3, 1)

    def forward(self, x):
        h = self.inp(x)
        h = h + self.up(self.down(h))
        return self.out(F.interpolate(h, scale_factor=0.5, mode="bilinear"))


LIBRARY_MODELS = {
    "transformer_encoder_layer": (
        lambda: nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
        (torch.randn(2, 8, 32, generator=_G),)),
    "gru": (lambda: nn.GRU(8, 16, num_layers=2, batch_first=True),
            (torch.randn(2, 5, 8, generator=_G),)),
    "multihead_attention": (lambda: Fn(nn.MultiheadAttention(32, 4, batch_first=True)),
                            (torch.randn(2, 6, 32, generator=_G),) * 3),
    "unetish": (UNetish, (torch.randn(1, 3, 16, 16, generator=_G),)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LIBRARY_MODELS))
def test_torch_library_modules_compile(name):
    make, args = LIBRARY_MODELS[name]
    model = make().eval()
    with torch.no_grad():
        want = model(*args)
    assert_matches(compile_module(model, args)(*args), want)
