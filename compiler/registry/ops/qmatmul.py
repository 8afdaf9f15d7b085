"""QMatMul (fused id 14): C = a @ dequant(W)ᵀ with W a ``[n, k]`` GGUF-quantized
weight, stored as a flat u32 stream of the raw little-endian block bytes
(what a GGUF file holds for the tensor, row after row).

Inputs a ``[..,M,k]`` (f32) and w_q ``[words]`` (u32); params ``quant_type``,
``k``, ``n``; output ``[..,M,n]`` f32. Every row of W is k/QK blocks (QK = 32,
or 256 for the K-quants); the stream holds ``n·(k/QK)·bytes_per_block`` bytes,
padded with at most 3 bytes to whole words (``words = ceil(bytes / 4)``).

Formats (ggml's block layouts, as ``gguf.quants`` dequantizes them):

* Q4_0 (18 B): f16 d, 16 B nibbles (low nibble of byte j: element j, high:
  j+16); w = d·(q - 8).
* Q4_1 (20 B): f16 d, f16 m, 16 B nibbles; w = d·q + m.
* Q5_0 (22 B): f16 d, u32 qh (bit j: 5th bit of element j), 16 B nibbles;
  w = d·(q - 16).  Q5_1 (24 B): f16 d, f16 m, qh, nibbles; w = d·q + m.
* Q8_0 (34 B): f16 d, 32 int8; w = d·q.  Q8_1 (36 B, ggml's current block):
  f16 d, f16 s (= d·Σq, unused here), 32 int8; w = d·q.
* Q4_K (144 B, 256 elements): f16 d, f16 dmin, 12 B of packed 6-bit
  (scale, min) pairs for 8 sub-blocks of 32, 128 B nibbles (bytes 32c..32c+31:
  low nibbles are elements 64c.., high nibbles 64c+32..);
  w = d·sc·q - dmin·m.
* Q6_K (210 B, 256 elements): 128 B low nibbles, 64 B 2-bit high parts,
  16 int8 sub-block scales, f16 d; w = d·sc·(q - 32).

Every format has a recipe (bytes by floor/subtract from an exact u32->f64
cast, the f16 scales decoded arithmetically, bit-exact for finite values;
all products are exact in f32, so the recipe, the reference and the CPU
kernel agree bit for bit on the weights). Q2_K, Q3_K and Q5_K are listed for
the CSE codes but rejected at build time as not supported yet.
"""
from ..entry import NOT_DIFFERENTIABLE, Decline, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from ._common import (DType, OpKind, ParamSpec, TensorType, check_arity, f16_from_bytes, fail,
                      matmul_flat, np, out, split_bytes, wide)

NAME = "QMatMul"
QUANT_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
               "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
BLOCK_BYTES = dict(zip(QUANT_TYPES, (18, 20, 22, 24, 34, 36, 84, 110, 144, 176, 210)))
SUPPORTED = QUANT_TYPES[:6] + ("Q4_K", "Q6_K")


def block_elems(quant_type: str) -> int:
    """Weights per block: 256 for the K-quants, else 32."""
    return 256 if quant_type.endswith("_K") else 32


def infer(types, params):
    from compiler.errors import UnsupportedOpError
    check_arity(NAME, types, 2, names=("a", "w_q"))
    a, w = types
    qt, k, n = params["quant_type"], params["k"], params["n"]
    if qt not in SUPPORTED:
        raise UnsupportedOpError(f"{NAME}: quant type {qt} is not supported yet (supported: "
                                 f"{', '.join(SUPPORTED)})")
    qk = block_elems(qt)
    if a.dtype != DType.F32 or len(a.shape) < 2 or a.shape[-1] != k:
        raise fail(NAME, types, f"a must be f32 [..,M,k={k}]")
    if w.dtype != DType.U32 or len(w.shape) != 1:
        raise fail(NAME, types, "w_q must be a flat u32 stream of GGUF block bytes")
    if k < qk or k % qk or n < 1:
        raise fail(NAME, types, f"k={k} must be a positive multiple of the {qt} block ({qk}), "
                                f"n >= 1")
    need = n * (k // qk) * BLOCK_BYTES[qt]
    if w.shape[0] != -(-need // 4):
        raise fail(NAME, types, f"{qt} weight [{n},{k}] needs {need} bytes = "
                                f"{-(-need // 4)} u32 words (the last one zero-padded), w_q "
                                f"holds {w.shape[0]} words")
    return TensorType(tuple(a.shape[:-1]) + (n,), DType.F32)


def _f16(raw, at):
    return raw[:, at:at + 2].copy().view(np.float16)[:, 0].astype(np.float64)[:, None]


def _nibbles(qs):
    """``[B, 16·c]`` bytes -> ``[B, 32·c]``: per run of 16 (32 for the K-quants'
    32-byte runs) bytes, the low nibbles then the high nibbles."""
    return np.concatenate([qs & 0xF, qs >> 4], axis=1)


def dequantize(words: np.ndarray, quant_type: str, k: int, n: int) -> np.ndarray:
    """GGUF block bytes -> the float64 ``[n, k]`` weight (ggml layouts; every
    value is exactly representable in f32)."""
    nb = BLOCK_BYTES[quant_type]
    raw = np.ascontiguousarray(words, dtype="<u4").view(np.uint8)
    raw = raw[:n * k // block_elems(quant_type) * nb].reshape(-1, nb)
    r = raw.astype(np.int64)
    d = _f16(raw, 0)
    if quant_type in ("Q8_0", "Q8_1"):
        w = d * raw[:, nb - 32:].view(np.int8).astype(np.float64)
    elif quant_type in ("Q4_0", "Q4_1"):
        q = _nibbles(r[:, nb - 16:]).astype(np.float64)
        w = d * (q - 8) if quant_type == "Q4_0" else d * q + _f16(raw, 2)
    elif quant_type in ("Q5_0", "Q5_1"):
        qh = r[:, nb - 20:nb - 16]                                   # 4 bytes, bit j: element j
        hi = ((qh[:, :, None] >> np.arange(8)) & 1).reshape(-1, 32)
        q = (_nibbles(r[:, nb - 16:]) | (hi << 4)).astype(np.float64)
        w = d * (q - 16) if quant_type == "Q5_0" else d * q + _f16(raw, 2)
    elif quant_type == "Q4_K":
        s = r[:, 4:16]
        lo, mid, hi = s[:, 0:4], s[:, 4:8], s[:, 8:12]
        sc = np.concatenate([lo & 63, (hi & 15) | ((lo >> 6) << 4)], axis=1)
        mn = np.concatenate([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], axis=1)
        qs = r[:, 16:].reshape(-1, 4, 1, 32)
        q = np.concatenate([qs & 0xF, qs >> 4], axis=2).reshape(-1, 8, 32)
        w = (d * sc)[:, :, None] * q - (_f16(raw, 2) * mn)[:, :, None]
    elif quant_type == "Q6_K":
        ql = r[:, 0:128].reshape(-1, 2, 1, 2, 32)                    # (half, _, t % 2, l)
        low = np.concatenate([ql & 0xF, ql >> 4], axis=2).reshape(-1, 2, 4, 32)
        qh = r[:, 128:192].reshape(-1, 2, 1, 32)
        high = (qh >> (2 * np.arange(4))[None, None, :, None]) & 3   # (half, t, l)
        q = (low | (high << 4)).reshape(-1, 16, 16) - 32
        sc = raw[:, 192:208].view(np.int8).astype(np.float64)
        w = (_f16(raw, 208) * sc)[:, :, None] * q
    else:
        raise ValueError(f"{NAME}: no dequantization for {quant_type}")
    return w.reshape(n, k)


def reference(inputs, params):
    w = dequantize(np.asarray(inputs[1]), params["quant_type"], params["k"], params["n"])
    w = w.astype(np.float32).astype(np.float64)  # dequantized weights are f32 values
    return out(np.matmul(wide(inputs[0]), w.T), DType.F32)


# -- the recipe: exact arithmetic on byte values held in f32 ----------------------
def _mod(x, m: int):
    """``x mod m`` for non-negative integer-valued ``x`` (floor/subtract)."""
    return op("Sub", x, op("MulScalar", op("Floor", op("MulScalar", x, value=1.0 / m)),
                           value=float(m)))


def _shr(x, bits: int):
    """``x >> bits`` for non-negative integer-valued ``x``."""
    return op("Floor", op("MulScalar", x, value=1.0 / (1 << bits)))


def _int8(b):
    """int8 from a byte value: b - 256·[b > 127]."""
    return op("Sub", b, op("MulScalar", op("Step", op("AddScalar", b, value=-127.5)),
                           value=256.0))


def _stack(parts, axis: int, shape):
    """Interleave equally shaped tensors along a new ``axis``, then reshape."""
    cols = [op("Unsqueeze", p, dim=axis) for p in parts]
    return op("Reshape", op("Concat", *cols, dim=axis), shape=shape)


def _per_element(x, blocks: int, groups: int, size: int):
    """``[blocks, groups]`` -> ``[blocks, groups·size]``, each value repeated."""
    return op("Reshape", op("BroadcastTo", op("Unsqueeze", x, dim=2),
                            shape=(blocks, groups, size)), shape=(blocks, groups * size))


def _recipe_weights(qt: str, raw, blocks: int):
    """The ``[blocks, QK]`` dequantized weights from the ``[blocks, bytes]`` raw bytes."""
    def col(i, ln=1):
        return op("Slice", raw, dim=1, start=i, len=ln)

    def f16(i):
        return f16_from_bytes(col(i), col(i + 1))                   # [blocks, 1]

    def nibbles(at):  # 16 bytes -> 32 codes: low nibbles, then high nibbles
        qs = col(at, 16)
        return op("Concat", _mod(qs, 16), _shr(qs, 4), dim=1)

    def per_block(x, size=32):
        return op("BroadcastTo", x, shape=(blocks, size))

    if qt in ("Q8_0", "Q8_1"):
        return op("Mul", _int8(col(BLOCK_BYTES[qt] - 32, 32)), per_block(f16(0)))
    if qt in ("Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        q = nibbles(BLOCK_BYTES[qt] - 16)
        if qt in ("Q5_0", "Q5_1"):
            qh = col(BLOCK_BYTES[qt] - 20, 4)                        # bit j: element j
            bits = _stack([_mod(_shr(qh, b), 2) for b in range(8)], 2, (blocks, 32))
            q = op("Add", q, op("MulScalar", bits, value=16.0))
        if qt in ("Q4_0", "Q5_0"):
            return op("Mul", op("AddScalar", q, value=-8.0 if qt == "Q4_0" else -16.0),
                      per_block(f16(0)))
        return op("Add", op("Mul", q, per_block(f16(0))), per_block(f16(2)))
    if qt == "Q4_K":
        lo, mid, hi = col(4, 4), col(8, 4), col(12, 4)
        sc = op("Concat", _mod(lo, 64),
                op("Add", _mod(hi, 16), op("MulScalar", _shr(lo, 6), value=16.0)), dim=1)
        mn = op("Concat", _mod(mid, 64),
                op("Add", _shr(hi, 4), op("MulScalar", _shr(mid, 6), value=16.0)), dim=1)
        dsc = op("Mul", op("BroadcastTo", f16(0), shape=(blocks, 8)), sc)
        dmn = op("Mul", op("BroadcastTo", f16(2), shape=(blocks, 8)), mn)
        qs = op("Reshape", col(16, 128), shape=(blocks, 4, 32))
        q = _stack([_mod(qs, 16), _shr(qs, 4)], 2, (blocks, 256))
        return op("Sub", op("Mul", _per_element(dsc, blocks, 8, 32), q),
                  _per_element(dmn, blocks, 8, 32))
    if qt == "Q6_K":
        ql = op("Reshape", col(0, 128), shape=(blocks, 2, 2, 32))     # (half, t % 2, l)
        low = _stack([_mod(ql, 16), _shr(ql, 4)], 2, (blocks, 2, 4, 32))
        qh = op("Reshape", col(128, 64), shape=(blocks, 2, 32))
        high = _stack([_mod(_shr(qh, 2 * t), 4) for t in range(4)], 2, (blocks, 2, 4, 32))
        q = op("Reshape", op("AddScalar", op("Add", low, op("MulScalar", high, value=16.0)),
                             value=-32.0), shape=(blocks, 256))
        dsc = op("Mul", op("BroadcastTo", f16(208), shape=(blocks, 16)), _int8(col(192, 16)))
        return op("Mul", _per_element(dsc, blocks, 16, 16), q)
    return Decline(NAME, f"no recipe for {qt}")


def build(params, types):
    qt, k, n = params["quant_type"], params["k"], params["n"]
    nwords = types[1].shape[0]
    blocks = n * (k // block_elems(qt))
    stream = split_bytes(op("Cast", Bind(1), dtype=DType.F64), nwords)
    if 4 * nwords != blocks * BLOCK_BYTES[qt]:   # drop the padding of the last word
        stream = op("Slice", stream, dim=0, start=0, len=blocks * BLOCK_BYTES[qt])
    raw = op("Reshape", op("Cast", stream, dtype=DType.F32), shape=(blocks, BLOCK_BYTES[qt]))
    w = _recipe_weights(qt, raw, blocks)
    if isinstance(w, Decline):
        return w
    w_kn = op("Transpose", op("Reshape", w, shape=(n, k)))
    return matmul_flat(Bind(0), types[0].shape, w_kn, n)


ENTRY = FusedOpEntry(
    id=14, name=NAME, mnemonic="qmatmul", family=Family.QUANTIZED,
    arity=2, params=(ParamSpec("quant_type", "str"), ParamSpec("k", "i64"), ParamSpec("n", "i64")),
    infer=infer, reference=reference, recipe=Recipe(build=build), backward=NOT_DIFFERENTIABLE,
    op_kind=OpKind.QMatMul, destructive_input=None, cse_tag=14, input_names=("a", "w_q"),
    enums={"quant_type": QUANT_TYPES}, doc=__doc__,
)
