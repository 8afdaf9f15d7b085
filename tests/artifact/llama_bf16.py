"""A Llama-style decoder with random bf16 weights, written as an ONNX model
whose weights are external data (``model.onnx`` + ``weights.bin``), and its
numpy reference. The weights are generated and written one chunk at a time,
so writing a model of several GiB never holds more than a chunk of it.

The graph is what a mixed-precision export looks like: the residual stream,
RMSNorm, RoPE, attention (grouped-query, causal) and the SwiGLU gate are f32;
every projection is a bf16 MatMul on bf16 weights, its input rounded to bf16
(the normalised activations times a bf16 norm weight), its output bf16. The
token embedding (Gather) and the lm_head are bf16 too; logits are cast to f32.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper, numpy_helper

BF16 = np.dtype(ml_dtypes.bfloat16)
CHUNK = 1 << 24  # elements generated and written at a time (32 MiB of bf16)


@dataclass(frozen=True)
class Config:
    vocab: int
    hidden: int
    inter: int
    layers: int
    heads: int
    kv_heads: int
    tokens: int = 4
    eps: float = 1e-5
    theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def weights(self) -> list[tuple[str, tuple[int, ...], float]]:
        """(name, shape, init scale) of every bf16 weight, in file order; a
        scale of 0 means a norm weight (in [1, 2))."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        out = [("embed", (self.vocab, h), 1.0)]
        for i in range(self.layers):
            out += [(f"l{i}.attn_norm", (h,), 0.0), (f"l{i}.wq", (h, h), h ** -0.5),
                    (f"l{i}.wk", (h, kv), h ** -0.5), (f"l{i}.wv", (h, kv), h ** -0.5),
                    (f"l{i}.wo", (h, h), h ** -0.5), (f"l{i}.mlp_norm", (h,), 0.0),
                    (f"l{i}.w_gate", (h, self.inter), h ** -0.5),
                    (f"l{i}.w_up", (h, self.inter), h ** -0.5),
                    (f"l{i}.w_down", (self.inter, h), self.inter ** -0.5)]
        return out + [("final_norm", (h,), 0.0), ("lm_head", (h, self.vocab), h ** -0.5)]

    @property
    def params(self) -> int:
        return sum(math.prod(s) for _, s, _ in self.weights())


def _write_weights(cfg: Config, path: Path, seed: int) -> dict[str, tuple[int, tuple]]:
    """Random bf16 weights into ``path``, chunk by chunk; name -> (offset,
    shape). Each value is made from random bits: a random sign and 7-bit
    mantissa under the exponent of its matrix's scale s, so |w| lies in
    [2^e, 2^(e+1)) with 2^e <= s (RMS about 1.5 * 2^e); norm weights are
    positive, in [1, 2). (Raw random bits cost a tenth of normal samples:
    1.1 billion of those took 20-60 s.)"""
    rng = np.random.default_rng(seed)
    where = {}
    with open(path, "wb") as f:
        for name, shape, scale in cfg.weights():
            where[name] = (f.tell(), shape)
            keep = np.uint16(0x007F if scale == 0 else 0x807F)  # (sign and) mantissa
            exp = np.uint16((math.floor(math.log2(scale or 1)) + 127) << 7)
            left = math.prod(shape)
            while left:
                n = min(left, CHUNK)
                raw = rng.bit_generator.random_raw(-(-n // 4)).view(np.uint16)[:n]
                bits = raw & keep | exp
                f.write(bits.tobytes())
                left -= n
    return where


def write_model(cfg: Config, d: Path, seed: int = 0) -> int:
    """``d/model.onnx`` (opset 17) with its weights in ``d/weights.bin``;
    returns the weights' bytes."""
    where = _write_weights(cfg, d / "weights.bin", seed)
    nodes, inits = [], []
    counter = [0]

    def op(kind, *ins, **attrs):
        counter[0] += 1
        out = f"{kind.lower()}_{counter[0]}"
        nodes.append(helper.make_node(kind, list(ins), [out], **attrs))
        return out

    def const(arr, name):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    for name, (offset, shape) in where.items():
        t = TensorProto(name=name, data_type=TensorProto.BFLOAT16, dims=shape)
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "weights.bin"), ("offset", offset),
                     ("length", math.prod(shape) * 2)):
            t.external_data.add(key=k, value=str(v))
        inits.append(t)

    T, h, hd, nh, nkv = cfg.tokens, cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads
    cos, sin = _rope_tables(cfg)
    const(cos, "rope_cos"), const(sin, "rope_sin")
    const(np.triu(np.full((T, T), -1e9, np.float32), 1), "causal")
    const(np.float32(cfg.eps), "eps"), const(np.float32(1 / math.sqrt(hd)), "scale")
    const(np.array([0], np.int64), "s0"), const(np.array([hd // 2], np.int64), "s1")
    const(np.array([hd], np.int64), "s2"), const(np.array([-1], np.int64), "ax")
    const(np.array([2], np.int64), "ax2")
    const(np.array([1, nkv, nh // nkv, T, hd], np.int64), "kv_expand")
    const(np.array([1, nh, T, hd], np.int64), "q_heads")
    const(np.array([1, T, h], np.int64), "flat")
    for n in (nh, nkv):
        const(np.array([1, T, n, hd], np.int64), f"split{n}")

    def rms(x, w):  # f32 x -> bf16 (x / rms(x)) * w
        var = op("ReduceMean", op("Mul", x, x), axes=[-1], keepdims=1)
        n = op("Mul", x, op("Reciprocal", op("Sqrt", op("Add", var, "eps"))))
        return op("Mul", op("Cast", n, to=TensorProto.BFLOAT16), w)

    def f32(x):
        return op("Cast", x, to=TensorProto.FLOAT)

    def heads(x, n):  # bf16 [1, T, n*d] -> f32 [1, n, T, d]
        return op("Transpose", op("Reshape", f32(x), f"split{n}"), perm=[0, 2, 1, 3])

    def rope(t):
        x1, x2 = op("Slice", t, "s0", "s1", "ax"), op("Slice", t, "s1", "s2", "ax")
        rot = op("Concat", op("Neg", x2), x1, axis=-1)
        return op("Add", op("Mul", t, "rope_cos"), op("Mul", rot, "rope_sin"))

    def repeat_kv(t):
        return op("Reshape", op("Expand", op("Unsqueeze", t, "ax2"), "kv_expand"), "q_heads")

    x = f32(op("Gather", "embed", "ids", axis=0))
    for i in range(cfg.layers):
        a = rms(x, f"l{i}.attn_norm")
        q = rope(heads(op("MatMul", a, f"l{i}.wq"), nh))
        k = repeat_kv(rope(heads(op("MatMul", a, f"l{i}.wk"), nkv)))
        v = repeat_kv(heads(op("MatMul", a, f"l{i}.wv"), nkv))
        s = op("Add", op("Mul", op("MatMul", q, op("Transpose", k, perm=[0, 1, 3, 2])), "scale"),
               "causal")
        ctx = op("MatMul", op("Softmax", s, axis=-1), v)
        ctx = op("Reshape", op("Transpose", ctx, perm=[0, 2, 1, 3]), "flat")
        o = op("MatMul", op("Cast", ctx, to=TensorProto.BFLOAT16), f"l{i}.wo")
        x = op("Add", x, f32(o))
        m = rms(x, f"l{i}.mlp_norm")
        gate = f32(op("MatMul", m, f"l{i}.w_gate"))
        up = f32(op("MatMul", m, f"l{i}.w_up"))
        act = op("Cast", op("Mul", op("Mul", gate, op("Sigmoid", gate)), up),
                 to=TensorProto.BFLOAT16)
        x = op("Add", x, f32(op("MatMul", act, f"l{i}.w_down")))
    nodes.append(helper.make_node("Cast", [op("MatMul", rms(x, "final_norm"), "lm_head")],
                                  ["logits"], to=TensorProto.FLOAT))
    g = helper.make_graph(
        nodes, "llama_bf16", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, T])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, T, cfg.vocab])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (d / "model.onnx").write_bytes(model.SerializeToString())
    return cfg.params * 2


def _rope_tables(cfg: Config):
    d = cfg.head_dim
    inv = 1.0 / cfg.theta ** (np.arange(0, d, 2) / d)
    emb = np.outer(np.arange(cfg.tokens), inv)
    emb = np.concatenate([emb, emb], -1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def _r(x):  # round to bf16, compute on in f32
    return x.astype(BF16).astype(np.float32)


def reference(cfg: Config, d: Path, ids: np.ndarray) -> np.ndarray:
    """The logits of ``ids`` [1, T] in numpy, the weights read from the
    model's data file through a map, one matrix (or lm_head column block)
    converted to f32 at a time."""
    offsets = {}
    off = 0
    for name, shape, _ in cfg.weights():
        offsets[name] = (off, shape)
        off += math.prod(shape) * 2
    data = np.memmap(d / "weights.bin", dtype=BF16, mode="r")

    def w(name):
        o, shape = offsets[name]
        return data[o // 2:o // 2 + math.prod(shape)].reshape(shape)

    def mm(a, name):  # bf16 x bf16 -> bf16, accumulated in f32
        return _r(a @ w(name).astype(np.float32))

    def rms(x, name):
        n = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + np.float32(cfg.eps))
        return _r(_r(n) * w(name).astype(np.float32))

    T, nh, nkv, hd = cfg.tokens, cfg.heads, cfg.kv_heads, cfg.head_dim
    cos, sin = _rope_tables(cfg)

    def rope(t):
        rot = np.concatenate([-t[..., hd // 2:], t[..., :hd // 2]], -1)
        return t * cos + rot * sin

    x = w("embed")[ids[0]].astype(np.float32)  # [T, h]
    for i in range(cfg.layers):
        a = rms(x, f"l{i}.attn_norm")
        q = rope(mm(a, f"l{i}.wq").reshape(T, nh, hd).transpose(1, 0, 2))
        k = rope(mm(a, f"l{i}.wk").reshape(T, nkv, hd).transpose(1, 0, 2))
        v = mm(a, f"l{i}.wv").reshape(T, nkv, hd).transpose(1, 0, 2)
        k, v = np.repeat(k, nh // nkv, 0), np.repeat(v, nh // nkv, 0)
        s = q @ k.transpose(0, 2, 1) / np.float32(math.sqrt(hd))
        s = s + np.triu(np.full((T, T), -1e9, np.float32), 1)
        p = np.exp(s - s.max(-1, keepdims=True))
        ctx = (p / p.sum(-1, keepdims=True)) @ v
        x = x + mm(_r(ctx.transpose(1, 0, 2).reshape(T, -1)), f"l{i}.wo")
        m = rms(x, f"l{i}.mlp_norm")
        gate, up = mm(m, f"l{i}.w_gate"), mm(m, f"l{i}.w_up")
        x = x + mm(_r(gate / (1 + np.exp(-gate)) * up), f"l{i}.w_down")
    h = rms(x, "final_norm")
    head = w("lm_head")
    cols = 1 << 15
    out = np.concatenate([_r(h @ head[:, j:j + cols].astype(np.float32))
                          for j in range(0, cfg.vocab, cols)], -1)
    return out[None]
