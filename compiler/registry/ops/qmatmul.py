"""QMatMul (fused id 14): C = a @ dequant(W)ᵀ with W a ``[n, k]`` GGUF-quantized
weight, stored as a flat u32 stream of the raw little-endian block bytes.

Inputs a ``[..,M,k]`` (f32) and w_q ``[words]`` (u32); params ``quant_type``,
``k``, ``n``; output ``[..,M,n]`` f32. Every row of W is k/32 blocks, row after
row; ``4·words = n·(k/32)·bytes_per_block``.

Coverage (fuel-spec §8.7 gap): the reference dequantizes Q4_0, Q4_1, Q5_0,
Q5_1, Q8_0 and Q8_1 exactly (ggml's block layouts); the recipe covers Q4_0
and Q8_0 with exact arithmetic (bytes by floor/subtract from an exact u32->f64
cast, the f16 block scale decoded arithmetically, bit-exact for finite
values) and declines the other types with a reason. The K-quants (Q2K..Q6K)
are listed for the CSE codes but rejected at build time as not supported yet.
"""
from ..entry import NOT_DIFFERENTIABLE, Decline, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from ._common import (DType, OpKind, ParamSpec, TensorType, check_arity, f16_from_bytes, fail,
                      matmul_flat, np, out, split_bytes, wide)

NAME = "QMatMul"
QUANT_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
               "Q2K", "Q3K", "Q4_K_M", "Q5K", "Q6K")
BLOCK_BYTES = dict(zip(QUANT_TYPES, (18, 20, 22, 24, 34, 36, 84, 110, 144, 176, 210)))
SUPPORTED = QUANT_TYPES[:6]


def infer(types, params):
    from compiler.errors import UnsupportedOpError
    check_arity(NAME, types, 2, names=("a", "w_q"))
    a, w = types
    qt, k, n = params["quant_type"], params["k"], params["n"]
    if qt not in SUPPORTED:
        raise UnsupportedOpError(f"{NAME}: quant type {qt} is not supported yet (supported: "
                                 f"{', '.join(SUPPORTED)})")
    if a.dtype != DType.F32 or len(a.shape) < 2 or a.shape[-1] != k:
        raise fail(NAME, types, f"a must be f32 [..,M,k={k}]")
    if w.dtype != DType.U32 or len(w.shape) != 1:
        raise fail(NAME, types, "w_q must be a flat u32 stream of GGUF block bytes")
    if k < 32 or k % 32 or n < 1:
        raise fail(NAME, types, f"k={k} must be a positive multiple of 32, n >= 1")
    if 4 * w.shape[0] != n * (k // 32) * BLOCK_BYTES[qt]:
        raise fail(NAME, types, f"{qt} weight [{n},{k}] needs {n * (k // 32) * BLOCK_BYTES[qt]} "
                                f"bytes, w_q holds {4 * w.shape[0]}")
    return TensorType(tuple(a.shape[:-1]) + (n,), DType.F32)


def _f16(raw, at):
    return raw[:, at:at + 2].copy().view(np.float16)[:, 0].astype(np.float64)


def dequantize(words: np.ndarray, quant_type: str, k: int, n: int) -> np.ndarray:
    """GGUF block bytes -> the float64 ``[n, k]`` weight (ggml layouts)."""
    nb = BLOCK_BYTES[quant_type]
    raw = np.ascontiguousarray(words, dtype="<u4").view(np.uint8).reshape(-1, nb)
    d = _f16(raw, 0)[:, None]
    if quant_type in ("Q8_0", "Q8_1"):
        q = raw[:, nb - 32:].view(np.int8).astype(np.float64)
        w = d * q
    elif quant_type in ("Q4_0", "Q4_1"):
        qs = raw[:, nb - 16:].astype(np.int64)
        q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.float64)
        w = d * (q - 8) if quant_type == "Q4_0" else d * q + _f16(raw, 2)[:, None]
    else:  # Q5_0 / Q5_1
        qh = raw[:, nb - 20:nb - 16].copy().view("<u4")[:, 0].astype(np.int64)[:, None]
        qs = raw[:, nb - 16:].astype(np.int64)
        j = np.arange(16)[None, :]
        lo = (qs & 0xF) | (((qh >> j) << 4) & 0x10)
        hi = (qs >> 4) | ((qh >> (j + 12)) & 0x10)
        q = np.concatenate([lo, hi], axis=1).astype(np.float64)
        w = d * (q - 16) if quant_type == "Q5_0" else d * q + _f16(raw, 2)[:, None]
    return w.reshape(n, k)


def reference(inputs, params):
    w = dequantize(np.asarray(inputs[1]), params["quant_type"], params["k"], params["n"])
    w = w.astype(np.float32).astype(np.float64)  # dequantized weights are f32 values
    return out(np.matmul(wide(inputs[0]), w.T), DType.F32)


def build(params, types):
    qt, k, n = params["quant_type"], params["k"], params["n"]
    if qt not in ("Q4_0", "Q8_0"):
        return Decline(NAME, f"the recipe covers Q4_0 and Q8_0; {qt} stays fused "
                             f"(needs a kernel)")
    nwords = types[1].shape[0]
    nb = BLOCK_BYTES[qt]
    blocks = n * (k // 32)
    stream = split_bytes(op("Cast", Bind(1), dtype=DType.F64), nwords)
    raw = op("Reshape", op("Cast", stream, dtype=DType.F32), shape=(blocks, nb))

    def col(i, ln=1):
        return op("Slice", raw, dim=1, start=i, len=ln)

    scale = f16_from_bytes(col(0), col(1))                        # [blocks, 1]
    if qt == "Q4_0":
        qs = col(2, 16)
        hi = op("Floor", op("MulScalar", qs, value=1.0 / 16))
        lo = op("Sub", qs, op("MulScalar", hi, value=16.0))
        q = op("AddScalar", op("Concat", lo, hi, dim=1), value=-8.0)
    else:
        b = col(2, 32)  # int8 from a byte: b - 256·[b > 127]
        q = op("Sub", b, op("MulScalar", op("Step", op("AddScalar", b, value=-127.5)),
                            value=256.0))
    w = op("Mul", q, op("BroadcastTo", scale, shape=(blocks, 32)))
    w_kn = op("Transpose", op("Reshape", w, shape=(n, k)))
    return matmul_flat(Bind(0), types[0].shape, w_kn, n)


ENTRY = FusedOpEntry(
    id=14, name=NAME, mnemonic="qmatmul", family=Family.QUANTIZED,
    arity=2, params=(ParamSpec("quant_type", "str"), ParamSpec("k", "i64"), ParamSpec("n", "i64")),
    infer=infer, reference=reference, recipe=Recipe(build=build), backward=NOT_DIFFERENTIABLE,
    op_kind=OpKind.QMatMul, destructive_input=None, cse_tag=14, input_names=("a", "w_q"),
    enums={"quant_type": QUANT_TYPES}, doc=__doc__,
)
