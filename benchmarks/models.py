"""Whole models, fuelc vs onnxruntime on the same ONNX model.

    python benchmarks/models.py                              # every model, batch 1 and 8
    python benchmarks/models.py --kind cnn --batch 1 --threads 2
    python benchmarks/models.py --model bert --model llama --seq 128 --steps
    python benchmarks/models.py --list
    python benchmarks/models.py --export /tmp/models         # write the .onnx files only
    python benchmarks/models.py --model mobilenet --model bert --dynamic  # + symbolic batch/seq
    python benchmarks/models.py --model resnet --dynamic --dynamic-image  # + symbolic h, w

The models are built here with ``onnx.helper`` (opset 17, float32, random
weights from a fixed seed; nothing is downloaded, torch is not needed), each
spelled as the usual exporters spell it. ``MODELS`` maps a name to its kind
("cnn" or "transformer") and builder; ``build(name, batch, seq)`` returns the
``onnx.ModelProto`` (static shapes; ``seq`` is ignored by the cnn models).
docs/benchmarks.md describes each model, the command line and the columns.

fuelc imports the model (``compiler.frontends.onnx.import_model``) and
compiles it (``compiler.compile``); onnxruntime (CPU provider, default graph
optimisations, ``--threads`` intra-op threads, spinning off) runs the same
bytes. Both get ``--threads`` threads and take turns: ``--rounds`` rounds of
``--repeats`` timed runs each (after one untimed run), the one that goes first
alternating between rounds. A row gives the medians over all runs, fuelc's
p10/p90, fuelc/ort (> 1: fuelc slower), the largest difference of the outputs
divided by the largest magnitude of onnxruntime's output, and the import +
compile time, "cold" when any kernel was compiled, "warm" when every kernel
came from the kernel cache. A model fuelc cannot import or compile is a
"FAILED" row with the error on one line; the other models still run. The
machine is shared and noisy: compare the two from the same run.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import time
from typing import Callable

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)  # this checkout's compiler

from benchmarks import busy, vcpus  # noqa: E402
from benchmarks.encoder import step_medians, times, width_note  # noqa: E402  (one timer for both)

OPSET = 17
SEED = 0

# How BatchNormalization is spelled (``--bn``): a node after each conv as an
# unfused export has it (the default; fuelc's importer folds it into the conv),
# its inference-mode equivalent as two per-channel constants, or folded already.
BN_MODES = ("affine", "fold", "node")
DEFAULT_BN = "node"
BN_EPS = 1e-5


# --------------------------------------------------------------------------
# graph building


class _Builder:
    """Collects nodes and initializers; names every value ``<prefix><n>``."""

    def __init__(self, name: str, seed: int = SEED, bn: str = DEFAULT_BN):
        if bn not in BN_MODES:
            raise ValueError(f"bn must be one of {BN_MODES}, got {bn!r}")
        self.name, self.bn = name, bn
        self.rng = np.random.RandomState(seed)
        self.nodes, self.inits, self.inputs = [], [], []
        self._n = collections.Counter()

    def fresh(self, hint: str) -> str:
        self._n[hint] += 1
        return f"{hint}_{self._n[hint]}"

    def const(self, value, hint: str = "c", dtype=np.float32) -> str:
        from onnx import numpy_helper
        name = self.fresh(hint)
        arr = np.asarray(value)
        if dtype is not None and arr.dtype.kind == "f":
            arr = arr.astype(dtype)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def ints(self, values, hint: str = "shape") -> str:
        return self.const(np.asarray(values, np.int64), hint, dtype=None)

    def op(self, kind: str, *ins: str, n_out: int = 1, **attrs):
        from onnx import helper
        outs = [self.fresh(kind.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(kind, list(ins), outs, name=self.fresh("n_" + kind),
                                           **attrs))
        return outs[0] if n_out == 1 else outs

    def input(self, name: str, shape, elem=None) -> str:
        from onnx import TensorProto, helper
        self.inputs.append(helper.make_tensor_value_info(name, elem or TensorProto.FLOAT,
                                                         list(shape)))
        return name

    # weights -----------------------------------------------------------
    def randn(self, shape, scale: float, hint: str = "w") -> str:
        return self.const(self.rng.randn(*shape) * scale, hint)

    def dense_w(self, k: int, n: int) -> str:  # [K, N], as MatMul weights are exported
        return self.randn((k, n), 1 / math.sqrt(k))

    def bias(self, n: int) -> str:
        return self.randn((n,), 0.1, "b")

    # layers --------------------------------------------------------------
    def linear(self, x: str, k: int, n: int, bias: bool = True) -> str:
        y = self.op("MatMul", x, self.dense_w(k, n))
        return self.op("Add", y, self.bias(n)) if bias else y

    def gemm(self, x2d: str, k: int, n: int) -> str:
        """torch.nn.Linear on a 2-D input: Gemm with the [N, K] weight, transB=1."""
        w = self.randn((n, k), 1 / math.sqrt(k))
        return self.op("Gemm", x2d, w, self.bias(n), alpha=1.0, beta=1.0, transB=1)

    def gemm_kn(self, x2d: str, k: int, n: int) -> str:
        """GPT-2's Conv1D (addmm with a [K, N] weight): Gemm without transB."""
        return self.op("Gemm", x2d, self.dense_w(k, n), self.bias(n), alpha=1.0, beta=1.0)

    def conv(self, x: str, cin: int, cout: int, k, stride=1, pad=None, group: int = 1,
             bias: bool = False, bn: bool = True) -> str:
        """Conv (no bias, as torchvision's conv before a BN) [+ BN]; ``k``
        an int (2-D square) or a 1-tuple (1-D)."""
        ks = tuple(k) if isinstance(k, (tuple, list)) else (k, k)
        strides = [stride] * len(ks)
        pads = [(kk - 1) // 2 for kk in ks] if pad is None else [pad] * len(ks)
        fan_in = cin // group * int(np.prod(ks))
        w = self.rng.randn(cout, cin // group, *ks) * math.sqrt(2 / fan_in)
        b = self.rng.randn(cout) * 0.1 if bias else None
        attrs = dict(kernel_shape=list(ks), strides=strides, pads=pads + pads, group=group)
        if not bn:
            ins = [x, self.const(w, "w")] + ([self.const(b, "b")] if b is not None else [])
            return self.op("Conv", *ins, **attrs)
        gamma = 1 + 0.1 * self.rng.randn(cout)
        beta = 0.1 * self.rng.randn(cout)
        mean = 0.1 * self.rng.randn(cout)
        var = self.rng.uniform(0.5, 1.5, cout)
        scale = gamma / np.sqrt(var + BN_EPS)
        shift = beta - mean * scale + (0 if b is None else b * scale)
        if self.bn == "fold":  # what torch.onnx.export leaves of Conv+BN in eval mode
            wf = w * scale.reshape(-1, *([1] * (w.ndim - 1)))
            return self.op("Conv", x, self.const(wf, "w"), self.const(shift, "b"), **attrs)
        ins = [x, self.const(w, "w")] + ([self.const(b, "b")] if b is not None else [])
        y = self.op("Conv", *ins, **attrs)
        if self.bn == "node":
            return self.op("BatchNormalization", y, self.const(gamma, "bn_g"),
                           self.const(beta, "bn_b"), self.const(mean, "bn_m"),
                           self.const(var, "bn_v"), epsilon=BN_EPS)
        bshape = (cout,) + (1,) * len(ks)  # "affine": y * scale + shift per channel
        return self.op("Add", self.op("Mul", y, self.const(scale.reshape(bshape), "bn_s")),
                       self.const(shift.reshape(bshape), "bn_t"))

    def relu(self, x):
        return self.op("Relu", x)

    def relu6(self, x):
        return self.op("Clip", x, self.const(np.float32(0), "zero"), self.const(np.float32(6), "six"))

    def silu(self, x):
        return self.op("Mul", x, self.op("Sigmoid", x))

    def gelu_erf(self, x):  # as torch exports nn.GELU(): x * (erf(x / sqrt2) + 1) * 0.5
        e = self.op("Erf", self.op("Div", x, self.const(np.float32(math.sqrt(2)), "sqrt2")))
        return self.op("Mul", self.op("Mul", x, self.op("Add", e, self.const(np.float32(1), "one"))),
                       self.const(np.float32(0.5), "half"))

    def gelu_tanh(self, x):  # GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = self.op("Pow", x, self.const(np.float32(3), "three"))
        inner = self.op("Add", x, self.op("Mul", cube, self.const(np.float32(0.044715), "k")))
        t = self.op("Tanh", self.op("Mul", inner, self.const(np.float32(math.sqrt(2 / math.pi)), "k")))
        return self.op("Mul", self.op("Mul", x, self.const(np.float32(0.5), "half")),
                       self.op("Add", t, self.const(np.float32(1), "one")))

    def layer_norm(self, x, n: int, eps: float = 1e-5):
        return self.op("LayerNormalization", x, self.const(1 + 0.1 * self.rng.randn(n), "ln_g"),
                       self.const(0.1 * self.rng.randn(n), "ln_b"), axis=-1, epsilon=eps)

    def rms_norm(self, x, n: int, eps: float = 1e-6):
        """LlamaRMSNorm as exported: x * 1/sqrt(mean(x^2) + eps) * weight."""
        var = self.op("ReduceMean", self.op("Pow", x, self.const(np.float32(2), "two")),
                      axes=[-1], keepdims=1)
        inv = self.op("Div", self.const(np.float32(1), "one"),
                      self.op("Sqrt", self.op("Add", var, self.const(np.float32(eps), "eps"))))
        return self.op("Mul", self.const(1 + 0.1 * self.rng.randn(n), "rms_g"), self.op("Mul", x, inv))

    def gap(self, x):
        return self.op("GlobalAveragePool", x)

    def model(self, output: str, name: str = "y"):
        """The ModelProto with ``output`` renamed ``name``, shapes inferred
        for the declared output, checked by onnx.checker."""
        import onnx
        from onnx import helper
        for node in self.nodes:
            node.output[:] = [name if o == output else o for o in node.output]
            node.input[:] = [name if i == output else i for i in node.input]
        g = helper.make_graph(self.nodes, self.name, self.inputs,
                              [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)],
                              self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="fuelc-benchmarks")
        m.ir_version = min(m.ir_version, 8)  # opset 17's IR version; older runtimes read it
        inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        m.graph.output[0].CopyFrom(inferred.graph.output[0])
        onnx.checker.check_model(m, full_check=True)
        return m


# --------------------------------------------------------------------------
# CNN models


def resnet(batch: int, seq: int | None = None, *, bn: str = DEFAULT_BN, image: int = 64,
           widths=(32, 64, 128, 256), blocks: int = 2, classes: int = 1000):
    """ResNet-18 style at a quarter of the width: 7x7 s2 stem + BN + ReLU +
    3x3 s2 max pool, ``blocks`` basic blocks per stage (3x3 conv, BN, ReLU,
    3x3 conv, BN, + residual, ReLU); a stage after the first starts with a
    stride-2 block whose shortcut is a 1x1 s2 conv + BN; global average pool,
    Flatten, Gemm classifier."""
    b = _Builder("resnet", bn=bn)
    x = b.input("x", (batch, 3, image, image))
    x = b.relu(b.conv(x, 3, widths[0], 7, stride=2))
    x = b.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = widths[0]
    for si, c in enumerate(widths):
        for bi in range(blocks):
            stride = 2 if si > 0 and bi == 0 else 1
            y = b.relu(b.conv(x, cin, c, 3, stride=stride))
            y = b.conv(y, c, c, 3)
            short = b.conv(x, cin, c, 1, stride=stride) if (stride != 1 or cin != c) else x
            x = b.relu(b.op("Add", y, short))
            cin = c
    x = b.op("Flatten", b.gap(x), axis=1)
    return b.model(b.gemm(x, cin, classes))


def mobilenet(batch: int, seq: int | None = None, *, bn: str = DEFAULT_BN, image: int = 112,
              classes: int = 1000):
    """MobileNetV2 style: 3x3 s2 stem + BN + ReLU6, inverted residual blocks
    (1x1 expand + BN + Clip(0, 6), depthwise 3x3 (group = channels) + BN +
    Clip, 1x1 project + BN, + input when stride 1 and the channels agree),
    1x1 head conv + BN + ReLU6, global average pool, Gemm classifier."""
    b = _Builder("mobilenet", bn=bn)
    x = b.input("x", (batch, 3, image, image))
    x = b.relu6(b.conv(x, 3, 32, 3, stride=2))
    cin = 32
    # (expansion t, channels c, repeats n, first stride s), MobileNetV2's first stages
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 2, 2)):
        for i in range(n):
            stride = s if i == 0 else 1
            hid = cin * t
            y = b.relu6(b.conv(x, cin, hid, 1)) if t != 1 else x
            y = b.relu6(b.conv(y, hid, hid, 3, stride=stride, group=hid))
            y = b.conv(y, hid, c, 1)
            x = b.op("Add", x, y) if stride == 1 and cin == c else y
            cin = c
    x = b.relu6(b.conv(x, cin, 320, 1))
    x = b.op("Flatten", b.gap(x), axis=1)
    return b.model(b.gemm(x, 320, classes))


def efficientnet(batch: int, seq: int | None = None, *, bn: str = DEFAULT_BN, image: int = 112,
                 classes: int = 1000):
    """EfficientNet-B0 style: 3x3 s2 stem + BN + SiLU (x * Sigmoid(x)), MBConv
    blocks (1x1 expand + BN + SiLU, depthwise kxk + BN + SiLU, squeeze-excite:
    GlobalAveragePool, 1x1 conv + SiLU, 1x1 conv + Sigmoid, Mul; 1x1 project
    + BN, + input when stride 1 and the channels agree), 1x1 head + BN + SiLU,
    global average pool, Gemm classifier."""
    b = _Builder("efficientnet", bn=bn)
    x = b.input("x", (batch, 3, image, image))
    x = b.silu(b.conv(x, 3, 32, 3, stride=2))
    cin = 32
    # (expansion, kernel, channels, repeats, first stride): B0's first four stages
    for t, k, c, n, s in ((1, 3, 16, 1, 1), (6, 3, 24, 2, 2), (6, 5, 40, 2, 2), (6, 3, 80, 1, 2)):
        for i in range(n):
            stride = s if i == 0 else 1
            hid = cin * t
            y = b.silu(b.conv(x, cin, hid, 1)) if t != 1 else x
            y = b.silu(b.conv(y, hid, hid, k, stride=stride, group=hid))
            se = max(1, cin // 4)
            z = b.gap(y)
            z = b.silu(b.conv(z, hid, se, 1, bias=True, bn=False))
            z = b.op("Sigmoid", b.conv(z, se, hid, 1, bias=True, bn=False))
            y = b.conv(b.op("Mul", y, z), hid, c, 1)
            x = b.op("Add", y, x) if stride == 1 and cin == c else y
            cin = c
    x = b.silu(b.conv(x, cin, 320, 1))
    x = b.op("Flatten", b.gap(x), axis=1)
    return b.model(b.gemm(x, 320, classes))


def audio(batch: int, seq: int | None = None, *, bn: str = DEFAULT_BN, samples: int = 8000,
          channels: int = 128, hidden: int = 256):
    """wav2vec2-style feature encoder on a raw waveform [N, 1, T] (0.5 s at
    16 kHz): seven Conv1d (kernel/stride 10/5, then 3/2 x4, 2/2 x2; no bias)
    each followed by erf-GELU, then Transpose to [N, T', C], LayerNorm and
    the feature projection (MatMul + Add)."""
    b = _Builder("audio", bn=bn)
    x = b.input("x", (batch, 1, samples))
    cin = 1
    for k, s in ((10, 5), (3, 2), (3, 2), (3, 2), (3, 2), (2, 2), (2, 2)):
        x = b.gelu_erf(b.conv(x, cin, channels, (k,), stride=s, pad=0, bn=False))
        cin = channels
    x = b.op("Transpose", x, perm=[0, 2, 1])
    return b.model(b.linear(b.layer_norm(x, channels), channels, hidden))


# --------------------------------------------------------------------------
# transformer models

HIDDEN, HEADS, FFN = 256, 4, 1024
NEG = float(np.finfo(np.float32).min)  # what HF models add for a masked position


def _attention(b: _Builder, x: str, batch: int, seq: int, *, mask: str | None = None,
               causal_where: str | None = None, fused_qkv: bool = False, scale_op: str = "Div"):
    """Multi-head self-attention on [B, S, HIDDEN] as BERT/ViT/GPT-2 export
    it: projections, Reshape/Transpose to heads, Q K^T, Div by sqrt(d) (or
    Mul by 1/sqrt(d)), + additive ``mask`` or Where(``causal_where``),
    Softmax, x V, Transpose/Reshape back, output projection."""
    d = HIDDEN // HEADS
    heads_shape = b.ints([0, 0, HEADS, d])  # 0: x's extent (batch, seq), as exporters write it
    if fused_qkv:  # GPT-2's c_attn: one Gemm on the 2-D view, Split in three
        flat = b.op("Reshape", x, b.ints([batch * seq, HIDDEN]))
        qkv = b.op("Reshape", b.gemm_kn(flat, HIDDEN, 3 * HIDDEN), b.ints([batch, seq, 3 * HIDDEN]))
        q, k, v = b.op("Split", qkv, b.ints([HIDDEN] * 3, "split"), axis=2, n_out=3)
    else:
        q, k, v = (b.linear(x, HIDDEN, HIDDEN) for _ in range(3))
    q, k, v = (b.op("Transpose", b.op("Reshape", t, heads_shape), perm=[0, 2, 1, 3]) for t in (q, k, v))
    scores = b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2]))
    if scale_op == "Div":
        scores = b.op("Div", scores, b.const(np.float32(math.sqrt(d)), "sqrt_d"))
    else:
        scores = b.op("Mul", scores, b.const(np.float32(1 / math.sqrt(d)), "scale"))
    if causal_where is not None:
        scores = b.op("Where", causal_where, scores, b.const(np.float32(NEG), "neg"))
    if mask is not None:
        scores = b.op("Add", scores, mask)
    ctx = b.op("MatMul", b.op("Softmax", scores, axis=-1), v)
    ctx = b.op("Reshape", b.op("Transpose", ctx, perm=[0, 2, 1, 3]), b.ints([0, 0, HIDDEN]))
    if fused_qkv:
        flat = b.op("Reshape", ctx, b.ints([batch * seq, HIDDEN]))
        return b.op("Reshape", b.gemm_kn(flat, HIDDEN, HIDDEN), b.ints([batch, seq, HIDDEN]))
    return b.linear(ctx, HIDDEN, HIDDEN)


def bert(batch: int, seq: int = 128, *, layers: int = 2):
    """BERT encoder layers (post-LayerNorm, hidden 256, 4 heads, FFN 1024,
    erf-GELU) on hidden states x [B, S, 256] with attention_mask [B, S]
    (int64, 1 = token, 0 = padding) turned into the additive mask as
    exporters do: Unsqueeze, Cast, (1 - m) * float32.min."""
    b = _Builder("bert")
    x = b.input("x", (batch, seq, HIDDEN))
    from onnx import TensorProto
    m = b.input("attention_mask", (batch, seq), TensorProto.INT64)
    m = b.op("Cast", b.op("Unsqueeze", m, b.ints([1, 2], "axes")), to=TensorProto.FLOAT)
    mask = b.op("Mul", b.op("Sub", b.const(np.float32(1), "one"), m), b.const(np.float32(NEG), "neg"))
    for _ in range(layers):
        h = b.layer_norm(b.op("Add", _attention(b, x, batch, seq, mask=mask), x), HIDDEN, 1e-12)
        f = b.linear(b.gelu_erf(b.linear(h, HIDDEN, FFN)), FFN, HIDDEN)
        x = b.layer_norm(b.op("Add", f, h), HIDDEN, 1e-12)
    return b.model(x)


def gpt2(batch: int, seq: int = 128, *, layers: int = 2):
    """GPT-2 decoder layers (pre-LayerNorm, hidden 256, 4 heads, FFN 1024):
    c_attn as one Gemm on the [B*S, 256] view + Split, causal mask as
    Where(constant lower-triangular bool, scores, float32.min), tanh GELU
    (gelu_new, with Pow(x, 3)), final LayerNorm; input hidden states."""
    b = _Builder("gpt2")
    x = b.input("x", (batch, seq, HIDDEN))
    causal = b.const(np.tril(np.ones((seq, seq), bool)).reshape(1, 1, seq, seq), "causal", dtype=None)
    for _ in range(layers):
        x = b.op("Add", x, _attention(b, b.layer_norm(x, HIDDEN), batch, seq, causal_where=causal,
                                      fused_qkv=True))
        flat = b.op("Reshape", b.layer_norm(x, HIDDEN), b.ints([batch * seq, HIDDEN]))
        f = b.gemm_kn(b.gelu_tanh(b.gemm_kn(flat, HIDDEN, FFN)), FFN, HIDDEN)
        x = b.op("Add", x, b.op("Reshape", f, b.ints([batch, seq, HIDDEN])))
    return b.model(b.layer_norm(x, HIDDEN))


def llama(batch: int, seq: int = 128, *, q_heads: int = 8, kv_heads: int = 2, inter: int = 688,
          theta: float = 10000.0):
    """One Llama decoder block (hidden 256, 8 query heads, 2 KV heads of 32):
    RMSNorm as Pow/ReduceMean/Add/Sqrt/Div/Mul, q/k/v MatMul without bias,
    RoPE with constant cos/sin [S, 32] and rotate-half as Slice/Neg/Concat,
    grouped-query attention with the KV heads repeated by Unsqueeze/Expand/
    Reshape (HF repeat_kv), scores * 1/sqrt(d) + a constant causal mask,
    Softmax, o_proj, residual, RMSNorm, SwiGLU MLP (SiLU(x W1) * (x W3)) W2,
    residual."""
    b = _Builder("llama")
    d = HIDDEN // q_heads
    rep = q_heads // kv_heads
    x = b.input("x", (batch, seq, HIDDEN))
    inv = 1.0 / theta ** (np.arange(0, d, 2) / d)
    freqs = np.outer(np.arange(seq), inv)
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = b.const(np.cos(emb), "cos"), b.const(np.sin(emb), "sin")
    half_lo, half_hi = b.ints([0], "starts"), b.ints([d // 2], "mid")
    end, axis = b.ints([d], "ends"), b.ints([-1], "axes")

    def rope(t):  # [B, H, S, d]: t * cos + rotate_half(t) * sin
        x1 = b.op("Slice", t, half_lo, half_hi, axis)
        x2 = b.op("Slice", t, half_hi, end, axis)
        rot = b.op("Concat", b.op("Neg", x2), x1, axis=-1)
        return b.op("Add", b.op("Mul", t, cos), b.op("Mul", rot, sin))

    def heads(t, n):
        return b.op("Transpose", b.op("Reshape", t, b.ints([batch, seq, n, d])), perm=[0, 2, 1, 3])

    def repeat_kv(t):  # [B, KV, S, d] -> [B, KV * rep, S, d]
        e = b.op("Expand", b.op("Unsqueeze", t, b.ints([2], "axes")),
                 b.ints([batch, kv_heads, rep, seq, d]))
        return b.op("Reshape", e, b.ints([batch, q_heads, seq, d]))

    h = b.rms_norm(x, HIDDEN)
    q = rope(heads(b.linear(h, HIDDEN, q_heads * d, bias=False), q_heads))
    k = repeat_kv(rope(heads(b.linear(h, HIDDEN, kv_heads * d, bias=False), kv_heads)))
    v = repeat_kv(heads(b.linear(h, HIDDEN, kv_heads * d, bias=False), kv_heads))
    causal = np.triu(np.full((seq, seq), NEG, np.float32), 1).reshape(1, 1, seq, seq)
    scores = b.op("Mul", b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2])),
                  b.const(np.float32(1 / math.sqrt(d)), "scale"))
    probs = b.op("Softmax", b.op("Add", scores, b.const(causal, "causal")), axis=-1)
    ctx = b.op("Reshape", b.op("Transpose", b.op("MatMul", probs, v), perm=[0, 2, 1, 3]),
               b.ints([batch, seq, HIDDEN]))
    x = b.op("Add", x, b.linear(ctx, HIDDEN, HIDDEN, bias=False))
    h = b.rms_norm(x, HIDDEN)
    gate = b.linear(h, HIDDEN, inter, bias=False)
    up = b.linear(h, HIDDEN, inter, bias=False)
    x = b.op("Add", x, b.linear(b.op("Mul", b.silu(gate), up), inter, HIDDEN, bias=False))
    return b.model(x)


def _grid(seq: int) -> tuple[int, int]:
    """Patch grid (rows, cols) with rows * cols == seq, as square as possible."""
    r = int(math.isqrt(seq))
    while seq % r:
        r -= 1
    return r, seq // r


def vit(batch: int, seq: int = 128, *, patch: int = 16, layers: int = 2, classes: int = 1000):
    """ViT: patch embedding as Conv (kernel = stride = 16) on an image of
    ``seq`` patches (rows x cols as square as possible: seq 128 is 128x256
    pixels), Reshape/Transpose to [B, seq, 256], class token (Expand) Concat,
    + position embedding, ``layers`` pre-LayerNorm encoder layers (erf-GELU
    FFN 1024), final LayerNorm, the class token (Gather), Gemm classifier.
    The encoder sees seq + 1 tokens."""
    b = _Builder("vit")
    rows, cols = _grid(seq)
    x = b.input("x", (batch, 3, rows * patch, cols * patch))
    x = b.conv(x, 3, HIDDEN, patch, stride=patch, pad=0, bias=True, bn=False)
    x = b.op("Transpose", b.op("Reshape", x, b.ints([batch, HIDDEN, seq])), perm=[0, 2, 1])
    cls = b.op("Expand", b.randn((1, 1, HIDDEN), 0.02, "cls"), b.ints([batch, 1, HIDDEN]))
    x = b.op("Add", b.op("Concat", cls, x, axis=1), b.randn((1, seq + 1, HIDDEN), 0.02, "pos"))
    for _ in range(layers):
        x = b.op("Add", x, _attention(b, b.layer_norm(x, HIDDEN, 1e-12), batch, seq + 1))
        f = b.linear(b.gelu_erf(b.linear(b.layer_norm(x, HIDDEN, 1e-12), HIDDEN, FFN)), FFN, HIDDEN)
        x = b.op("Add", x, f)
    x = b.layer_norm(x, HIDDEN, 1e-12)
    first = b.op("Gather", x, b.const(np.int64(0), "idx", dtype=None), axis=1)
    return b.model(b.gemm(first, HIDDEN, classes))


# --------------------------------------------------------------------------
# registry


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    kind: str                      # "cnn" or "transformer"
    fn: Callable                   # fn(batch, seq, **options) -> onnx.ModelProto
    summary: str

    @property
    def uses_seq(self) -> bool:
        return self.kind == "transformer"


MODELS: dict[str, ModelSpec] = {
    "resnet": ModelSpec("cnn", resnet, "ResNet-18 style, widths 32-256, 3x64x64, BN, 1x1 s2 projections"),
    "mobilenet": ModelSpec("cnn", mobilenet, "MobileNetV2 inverted residuals, depthwise 3x3, ReLU6, 3x112x112"),
    "efficientnet": ModelSpec("cnn", efficientnet, "EfficientNet-B0 MBConv, SiLU, squeeze-excite, 3x112x112"),
    "audio": ModelSpec("cnn", audio, "wav2vec2 conv1d feature encoder, erf-GELU, 8000 samples"),
    "bert": ModelSpec("transformer", bert, "2 post-LN encoder layers, hidden 256, 4 heads, mask input"),
    "gpt2": ModelSpec("transformer", gpt2, "2 pre-LN causal decoder layers, Gemm+Split qkv, tanh-GELU"),
    "llama": ModelSpec("transformer", llama, "1 block: RMSNorm, RoPE, GQA 8/2 heads, SwiGLU"),
    "vit": ModelSpec("transformer", vit, "patch-16 Conv embedding, class token, 2 pre-LN layers"),
}
KINDS = ("cnn", "transformer")


def build(name: str, batch: int = 1, seq: int | None = None, **options):
    """The model ``name`` (a key of MODELS) at ``batch`` (and ``seq`` for a
    transformer; default 128) as a checked onnx.ModelProto. ``options``:
    ``bn=`` for the cnn models (BN_MODES), the builder's size keywords."""
    spec = MODELS[name]
    if spec.uses_seq:
        return spec.fn(batch, 128 if seq is None else seq, **options)
    return spec.fn(batch, **options)


def symbolic(model, seq: int | None = None, image: bool = False):
    """A copy of ``model`` whose inputs and outputs have a symbolic ``batch``
    axis 0 (and a symbolic ``seq`` axis 1 where that axis is ``seq`` long:
    the tokens of a transformer, not a ViT's channels or classes), as
    ``torch.onnx.export(..., dynamic_axes=...)`` writes them
    (docs/dynamic-shapes.md). ``image``: an image input's (rank 4) axes 2
    and 3 are ``h`` and ``w`` too (``dynamic_axes={"x": {0: "batch", 2: "h",
    3: "w"}}``)."""
    out = type(model)()
    out.CopyFrom(model)
    for vi in list(out.graph.input) + list(out.graph.output):
        dims = vi.type.tensor_type.shape.dim
        for axis, name in ((0, "batch"), (1, "seq")):
            if len(dims) > max(axis, 1) and (axis == 0 or dims[axis].dim_value == seq):
                dims[axis].ClearField("dim_value")
                dims[axis].dim_param = name
        if image and len(dims) == 4 and vi in out.graph.input:
            for axis, name in ((2, "h"), (3, "w")):
                dims[axis].ClearField("dim_value")
                dims[axis].dim_param = name
    return out


def file_name(name: str, batch: int, seq: int | None = None) -> str:
    """``<name>_b<batch>[_s<seq>].onnx`` (seq only for transformers)."""
    return f"{name}_b{batch}" + (f"_s{seq}" if MODELS[name].uses_seq else "") + ".onnx"


def make_inputs(model, seed: int = SEED) -> dict[str, np.ndarray]:
    """Inputs for ``model``: standard normal floats; an int64
    ``attention_mask`` of ones with the last quarter of every odd row zero
    (padding)."""
    import onnx
    rng = np.random.RandomState(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        elem = vi.type.tensor_type.elem_type
        if elem == onnx.TensorProto.FLOAT:
            feeds[vi.name] = rng.randn(*shape).astype(np.float32)
        elif vi.name == "attention_mask":
            m = np.ones(shape, np.int64)
            m[1::2, shape[1] - shape[1] // 4:] = 0
            feeds[vi.name] = m
        else:
            raise ValueError(f"no input generator for {vi.name} ({onnx.TensorProto.DataType.Name(elem)})")
    return feeds


# --------------------------------------------------------------------------
# measuring


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ort_session(proto: bytes, threads: int, profile_prefix: str | None = None):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    # idle onnxruntime threads spin by default, taking the cores from fuelc's
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return ort.InferenceSession(proto, so, providers=["CPUExecutionProvider"])


def _pct(sorted_ts: list[float], p: float) -> float:
    return sorted_ts[min(len(sorted_ts) - 1, int(p * len(sorted_ts)))]


def fuelc_op_times(m, inputs: dict, repeats: int) -> list[tuple[float, int, str]]:
    """(ms per run, steps, OpKind) per op kind, slowest first: the median of
    each step over ``repeats`` runs (``encoder.step_medians``: the direct
    path's calls timed one by one where the plan takes it, else the
    executor's step runners), summed per OpKind; a plan's own copy steps
    count as ``Copy``."""
    from runtime.executor import ContiguizeStep, KernelStep
    medians = step_medians(m, inputs, repeats)
    per_kind, count = collections.defaultdict(float), collections.Counter()
    for i, t in medians.items():
        s = m.plan.steps[i]
        if isinstance(s, KernelStep):
            kind = s.key.op.name if s.key.op is not None else "RuntimeFused"
        elif isinstance(s, ContiguizeStep):
            kind = "Copy"
        else:
            continue
        per_kind[kind] += t * 1e3
        count[kind] += 1
    return sorted(((ms, count[k], k) for k, ms in per_kind.items()), reverse=True)


def ort_op_times(proto: bytes, threads: int, inputs: dict, repeats: int) -> list[tuple[float, int, str]]:
    """(ms per run, nodes, op type) per op type onnxruntime ran, slowest
    first: its profiler's per-node kernel times (a separate session with
    profiling on), each node's median, summed per op type."""
    import tempfile
    session = ort_session(proto, threads, os.path.join(tempfile.mkdtemp(), "ort"))
    for _ in range(repeats + 1):
        session.run(None, inputs)
    path = session.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    acc, op_of = collections.defaultdict(list), {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            node = e["name"][:-len("_kernel_time")]
            acc[node].append(e["dur"] / 1e3)
            op_of[node] = e.get("args", {}).get("op_name", "?")
    per_op, count = collections.defaultdict(float), collections.Counter()
    for node, ts in acc.items():
        per_op[op_of[node]] += statistics.median(ts)
        count[op_of[node]] += 1
    return sorted(((ms, count[k], k) for k, ms in per_op.items()), reverse=True)


def _one_line(e: BaseException) -> str:
    issues = getattr(e, "issues", None)  # OnnxImportError: each distinct reason, counted
    if issues:
        reasons = collections.Counter(f"{i.op_type}: {i.what}" for i in issues)
        return f"{type(e).__name__}: " + "; ".join(
            f"{r} (x{n})" if n > 1 else r for r, n in reasons.items())
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" + ("..." if len(text) > 300 else "")


def run_case(name: str, batch: int, seq: int | None, args, threads: int) -> dict:
    """Build, import, compile and time one (model, batch, seq); the record."""
    from compiler import compile
    from compiler.codegen.cache import default_cache
    from compiler.frontends.onnx import import_model
    rec = {"model": name, "kind": MODELS[name].kind, "batch": batch,
           "seq": seq if MODELS[name].uses_seq else None}
    opts = {"bn": args.bn} if MODELS[name].kind == "cnn" else {}
    model = build(name, batch, seq, **opts)
    proto = model.SerializeToString()
    feeds = make_inputs(model)
    session = ort_session(proto, threads)
    theirs = session.run(None, feeds)[0]
    stats = default_cache().stats
    before = (stats.compiles, stats.disk_hits + stats.memory_hits)
    t0 = time.perf_counter()
    stage = "import"
    try:
        graph = import_model(model)
        stage = "compile"
        m = compile(graph, target=args.target)
        rec["compile_s"] = time.perf_counter() - t0
        stage = "run"
        ours = m(**feeds)
    except Exception as e:  # noqa: BLE001 - reported, the other models go on
        rec["error"] = f"{stage}: {_one_line(e)}"
        return rec
    compiled, cached = stats.compiles - before[0], stats.disk_hits + stats.memory_hits - before[1]
    rec["compile"] = "cold" if compiled else "warm"
    rec["kernels_compiled"], rec["kernels_cached"] = compiled, cached
    if isinstance(ours, dict):
        ours = next(iter(ours.values()))
    scale = float(np.max(np.abs(theirs))) or 1.0
    rec["rel_diff"] = float(np.max(np.abs(np.asarray(ours, np.float64) - theirs))) / scale
    tf, to = [], []
    probe = getattr(args, "vcpus", None)
    rounds = []   # (state, fuelc's times, onnxruntime's)
    for r in range(args.rounds):  # in turn, first one then the other: a slow spell lands on both
        before = probe.now() if probe else None
        rf, ro = [], []
        order = ((rf, lambda: m(**feeds)), (ro, lambda: session.run(None, feeds)))
        for acc, fn in (order if r % 2 == 0 else order[::-1]):
            acc += times(fn, args.repeats)
        rounds.append((probe.round_state(before) if probe else None, rf, ro))
        tf += rf
        to += ro
    tf.sort()
    to.sort()
    if probe:
        states = rec["round_states"] = [st for st, _, _ in rounds]
        q = vcpus.quiet_medians(states, {"fuelc": [rf for _, rf, _ in rounds],
                                         "ort": [ro for _, _, ro in rounds]})
        if q:
            rec.update(quiet_fuelc_ms=q["fuelc"] * 1e3, quiet_ort_ms=q["ort"] * 1e3,
                       quiet_ratio=q["fuelc"] / q["ort"])
    rec.update(fuelc_ms=statistics.median(tf) * 1e3, fuelc_p10_ms=_pct(tf, 0.1) * 1e3,
               fuelc_p90_ms=_pct(tf, 0.9) * 1e3, ort_ms=statistics.median(to) * 1e3,
               ort_p10_ms=_pct(to, 0.1) * 1e3, ort_p90_ms=_pct(to, 0.9) * 1e3)
    rec["ratio"] = rec["fuelc_ms"] / rec["ort_ms"]
    rec["steps_n"] = sum(1 for _ in m.kernel_summary())
    if getattr(args, "dynamic", False):
        _time_dynamic(rec, name, m, feeds, theirs, scale, args)
    if args.steps:
        rec["fuelc_ops"] = fuelc_op_times(m, feeds, args.repeats)
        rec["ort_ops"] = ort_op_times(proto, threads, feeds, args.repeats)
    return rec


def _time_dynamic(rec: dict, name: str, m, feeds: dict, theirs, scale: float, args) -> None:
    """``--dynamic``: the model with a symbolic batch (and sequence:
    ``symbolic``; with ``--dynamic-image`` the image size of the conv nets),
    compiled once per model for every case, timed against the
    static module ``m`` in interleaved rounds (first one, then the other,
    alternating), medians: ``dynamic_ms`` and dynamic/static ``dyn_ratio``."""
    from compiler import compile
    from compiler.frontends.onnx import import_model
    cache = args.__dict__.setdefault("dynamic_modules", {})
    try:
        if name not in cache:
            t0 = time.perf_counter()
            opts = {"bn": args.bn} if MODELS[name].kind == "cnn" else {}
            model = symbolic(build(name, 1, rec["seq"], **opts), seq=rec["seq"],
                             image=getattr(args, "dynamic_image", False) and MODELS[name].kind == "cnn")
            cache[name] = compile(import_model(model), target=args.target)
            rec["dynamic_compile_s"] = time.perf_counter() - t0
        dyn = cache[name]
        t0 = time.perf_counter()
        out = dyn(**feeds)  # this binding's passes and plan (its kernels serve every size)
        rec["dynamic_plan_s"] = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - reported with the static row
        rec["dynamic_error"] = _one_line(e)
        return
    out = next(iter(out.values())) if isinstance(out, dict) else out
    rec["dynamic_rel_diff"] = float(np.max(np.abs(np.asarray(out, np.float64) - theirs))) / scale
    ts, td = [], []
    for r in range(args.rounds):
        order = ((ts, lambda: m(**feeds)), (td, lambda: dyn(**feeds)))
        for acc, fn in (order if r % 2 == 0 else order[::-1]):
            acc += times(fn, args.repeats)
    rec["static_ms"], rec["dynamic_ms"] = statistics.median(ts) * 1e3, statistics.median(td) * 1e3
    rec["dyn_ratio"] = rec["dynamic_ms"] / rec["static_ms"]


def format_dynamic(rec: dict) -> str:
    if "dynamic_error" in rec:
        return "    dynamic: FAILED " + rec["dynamic_error"]
    return (f"    dynamic: {rec['dynamic_ms']:9.3f} ms vs static {rec['static_ms']:9.3f} ms "
            f"(same rounds) | dynamic/static {rec['dyn_ratio']:5.2f} | rel diff "
            f"{rec['dynamic_rel_diff']:8.1e} | this size planned in {rec['dynamic_plan_s']:.2f} s"
            + (f", compiled once in {rec['dynamic_compile_s']:.1f} s"
               if "dynamic_compile_s" in rec else ""))


HEADER = (f"{'model':12s} {'kind':11s} {'batch':>5s} {'seq':>4s} | {'fuelc ms':>9s} {'p10':>8s} "
          f"{'p90':>8s} | {'ort ms':>8s} | {'fuelc/ort':>9s} | {'rel diff':>8s} | compile")


def format_row(rec: dict) -> str:
    head = (f"{rec['model']:12s} {rec['kind']:11s} {rec['batch']:5d} "
            f"{'-' if rec['seq'] is None else rec['seq']:>4} | ")
    if "error" in rec:
        return head + "FAILED " + rec["error"]
    return head + (f"{rec['fuelc_ms']:9.3f} {rec['fuelc_p10_ms']:8.3f} {rec['fuelc_p90_ms']:8.3f} | "
                   f"{rec['ort_ms']:8.3f} | {rec['ratio']:9.2f} | {rec['rel_diff']:8.1e} | "
                   f"{rec['compile_s']:5.1f} s {rec['compile']} ({rec['kernels_compiled']} compiled, "
                   f"{rec['kernels_cached']} from cache)")


def format_states(rec: dict) -> str | None:
    """The line under a row whose rounds were not all quiet (the vCPUs
    probed before and after each round: ``benchmarks/vcpus.py``), else None."""
    if "error" in rec or not rec.get("round_states"):
        return None
    quiet = (f"fuelc {rec['quiet_fuelc_ms']:.3f} ms, ort {rec['quiet_ort_ms']:.3f} ms, "
             f"fuelc/ort {rec['quiet_ratio']:.2f}") if "quiet_ratio" in rec else None
    return vcpus.note(rec["round_states"], quiet)


def format_ops(rec: dict) -> list[str]:
    lines = []
    for who, key in (("fuelc", "fuelc_ops"), ("onnxruntime", "ort_ops")):
        ops = rec.get(key) or []
        what = "kernel steps" if who == "fuelc" else "nodes"
        lines.append(f"    {who} per op kind (sum {sum(ms for ms, _, _ in ops):.3f} ms; "
                     f"ms per run, {what}):")
        lines += [f"      {ms:8.3f} ms  x{n:<3d} {kind}" for ms, n, kind in ops]
    return lines


def _csv(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", choices=sorted(MODELS),
                    help="a model to run (repeatable; default: all, or all of --kind)")
    ap.add_argument("--kind", choices=KINDS, help="only the models of this kind")
    ap.add_argument("--batch", type=_csv, default=[1, 8], help="batch sizes, comma-separated (1,8)")
    ap.add_argument("--seq", type=_csv, default=[32, 128],
                    help="sequence lengths of the transformer models, comma-separated (32,128)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for fuelc and onnxruntime (default: $FUELC_NUM_THREADS or CPUs)")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of fuelc and onnxruntime in turn")
    ap.add_argument("--repeats", type=int, default=7, help="timed runs of each per round")
    ap.add_argument("--bn", choices=BN_MODES, default=DEFAULT_BN,
                    help="BatchNormalization in the cnn models: 'node' a BatchNormalization "
                         "node (default), 'affine' per-channel Mul+Add, 'fold' into the conv "
                         "weights and bias")
    ap.add_argument("--steps", action="store_true",
                    help="also time per op kind: fuelc's kernel steps, onnxruntime's profiler")
    ap.add_argument("--dynamic", action="store_true",
                    help="also compile each model once with a symbolic batch (and sequence) "
                         "and time it against the static module at each size: dynamic/static")
    ap.add_argument("--dynamic-image", action="store_true",
                    help="with --dynamic: the cnn models' image height and width symbolic too "
                         "(one compile for every batch and image size)")
    ap.add_argument("--busy-cpu", metavar="CPU:ON/OFF",
                    help="time beside another process pinned to CPU, busy ON us and asleep OFF "
                         "us in turn at nice -10 (benchmarks/busy.py), e.g. 1:1000/1000")
    ap.add_argument("--json", help="write every record here")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--export", metavar="DIR",
                    help="write each model as DIR/<name>_b<batch>[_s<seq>].onnx and exit")
    args = ap.parse_args(argv)
    busy_spec = None
    if args.busy_cpu:
        try:
            busy_spec = busy.parse(args.busy_cpu)
        except ValueError as e:
            ap.error(str(e))
    names = args.model or [n for n, s in MODELS.items() if args.kind in (None, s.kind)]
    if args.kind:
        names = [n for n in names if MODELS[n].kind == args.kind]

    def cases():
        for name in names:
            for batch in args.batch:
                for seq in (args.seq if MODELS[name].uses_seq else [None]):
                    yield name, batch, seq

    if args.list:
        for n, s in MODELS.items():
            print(f"{n:12s} {s.kind:11s} {s.summary}")
        return 0
    if args.export:
        os.makedirs(args.export, exist_ok=True)
        for name, batch, seq in cases():
            opts = {"bn": args.bn} if MODELS[name].kind == "cnn" else {}
            path = os.path.join(args.export, file_name(name, batch, seq))
            with open(path, "wb") as f:
                f.write(build(name, batch, seq, **opts).SerializeToString())
            print(path)
        return 0

    from compiler.codegen import parallel
    from compiler.targets import parse_target
    import onnxruntime
    if args.threads is not None:
        parallel.set_num_threads(args.threads)
    threads = parallel.num_threads()
    t = parse_target(args.target)
    print(f"cpu: {cpu_name()} ({os.cpu_count()} CPUs)")
    print(f"target: {args.target} = {t.arch} {t.triple}, {len(t.features)} features"
          f" (avx512f: {'yes' if 'avx512f' in t.features else 'no'}, "
          f"avx2: {'yes' if 'avx2' in t.features else 'no'})")
    if note := width_note(args.target):
        print(note)
    print(f"{threads} threads each, {args.rounds} rounds of {args.repeats} runs, onnxruntime "
          f"{onnxruntime.__version__}, bn {args.bn}; fuelc/ort > 1: fuelc slower; rel diff: "
          f"max |fuelc - ort| / max |ort|")
    if busy_spec:
        cpu, on, off = busy_spec
        print(f"beside a process on CPU {cpu}: busy {on} us, asleep {off} us, in turn "
              f"(nice {busy.NICE})")
    args.vcpus = vcpus.probe_for(threads, "row")
    print(HEADER, flush=True)
    records = []
    with busy.busy_cpu(args.busy_cpu):
        for name, batch, seq in cases():
            try:
                rec = run_case(name, batch, seq, args, threads)
            except Exception as e:  # noqa: BLE001 - e.g. onnxruntime refused it
                rec = {"model": name, "kind": MODELS[name].kind, "batch": batch,
                       "seq": seq, "error": f"benchmark: {_one_line(e)}"}
            records.append(rec)
            print(format_row(rec), flush=True)
            if (line := format_states(rec)) is not None:
                print(line, flush=True)
            if args.dynamic and "error" not in rec:
                print(format_dynamic(rec), flush=True)
            if args.steps and "error" not in rec:
                print("\n".join(format_ops(rec)), flush=True)
    for kind in KINDS:
        ratios = [r["ratio"] for r in records if r["kind"] == kind and "ratio" in r]
        failed = sum(1 for r in records if r["kind"] == kind and "error" in r)
        if ratios or failed:
            gm = (f"geometric mean fuelc/ort {math.exp(statistics.fmean(map(math.log, ratios))):.2f}"
                  f" over {len(ratios)} cases" if ratios else "no case ran")
            print(f"{kind}: {gm}" + (f", {failed} failed" if failed else ""))
        dyn = [r["dyn_ratio"] for r in records if r["kind"] == kind and "dyn_ratio" in r]
        if dyn:
            print(f"{kind}: geometric mean dynamic/static "
                  f"{math.exp(statistics.fmean(map(math.log, dyn))):.2f} over {len(dyn)} cases")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_name(), "target": args.target, "threads": threads,
                       "rounds": args.rounds, "repeats": args.repeats, "bn": args.bn,
                       "cases": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
