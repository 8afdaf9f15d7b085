"""Nf4Matmul (fused id 21): bitsandbytes NF4 weight-only matmul,
out = act @ (NF4[code[n,k]]·absmax[n, k // block_size])ᵀ.

Inputs act ``[..,M,K]`` (bf16, f16, f32), w_packed ``[N, K/2]`` u8, absmax
``[N, K/block_size]`` f32. Param ``block_size`` (default 64). Output
``[..,M,N]`` in act's dtype.

Packing follows bitsandbytes' ``quantize_4bit(quant_type="nf4")`` (what NF4
checkpoints hold): two codes per byte, the *first* element (even k) in the
high nibble, the odd k in the low nibble; one absmax per block of
``block_size`` consecutive elements of a row; the 16-entry NF4 code table.
Recipe: nibbles by floor/subtract, codebook lookup as the indicator sum
Σᵢ NF4ᵢ·Relu(1 - |code - i|) (i = 7 skipped, its value is 0), per-block
absmax, cast to act's dtype, Transpose, flattened MatMul.
"""
from ..entry import NOT_DIFFERENTIABLE, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from ._common import (DType, OpKind, ParamSpec, TensorType, check_arity, check_float, dtype_of,
                      fail, matmul_flat, np, out, wide)

NAME = "Nf4Matmul"
#: The bitsandbytes NF4 codebook (float32 values).
NF4 = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
       -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
       0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
       0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0)


def infer(types, params):
    check_arity(NAME, types, 3, names=("act", "w_packed", "absmax"))
    check_float(NAME, types, (0,))
    a, w, s = types
    bs = params["block_size"]
    if len(a.shape) < 2 or len(w.shape) != 2 or w.dtype != DType.U8:
        raise fail(NAME, types, "act must be [..,M,K] and w_packed u8 [N, K/2]")
    k, n = a.shape[-1], w.shape[0]
    if k % 2 or w.shape[1] * 2 != k:
        raise fail(NAME, types, f"w_packed must be [N, K/2] = [{n}, {k // 2}] (K even)")
    if bs < 1 or k % bs:
        raise fail(NAME, types, f"block_size={bs} must be positive and divide K={k}")
    if s.dtype != DType.F32 or tuple(s.shape) != (n, k // bs):
        raise fail(NAME, types, f"absmax must be f32 [N, K/block_size] = [{n}, {k // bs}]")
    return TensorType(tuple(a.shape[:-1]) + (n,), a.dtype)


def dequantize(w_packed, absmax, block_size):
    w = np.asarray(w_packed).astype(np.int64)
    codes = np.stack([w >> 4, w & 0xF], axis=-1).reshape(w.shape[0], -1)  # high nibble first
    lut = np.asarray(NF4, dtype=np.float32)
    scale = np.repeat(np.asarray(absmax, np.float32), block_size, axis=1)
    return (lut[codes] * scale).astype(np.float32)


def reference(inputs, params):
    w = dequantize(inputs[1], inputs[2], params["block_size"])
    dt = dtype_of(inputs[0])
    w = wide(out(w, dt))  # dequantized weights take act's dtype
    return out(np.matmul(wide(inputs[0]), w.T), dt)


def build(params, types):
    a, w = types[0], types[1]
    n, k, bs = w.shape[0], a.shape[-1], params["block_size"]
    wf = op("Cast", Bind(1), dtype=DType.F32)
    upper = op("Floor", op("MulScalar", wf, value=1.0 / 16))
    lower = op("Sub", wf, op("MulScalar", upper, value=16.0))
    codes = op("Reshape", op("Concat", op("Unsqueeze", upper, dim=2),   # even k: high nibble
                             op("Unsqueeze", lower, dim=2), dim=2), shape=(n, k))
    val = None
    for i, c in enumerate(NF4):
        if c == 0.0:
            continue
        hit = op("Relu", op("AddScalar", op("Neg", op("Abs", op("AddScalar", codes,
                                                                   value=float(-i)))), value=1.0))
        term = op("MulScalar", hit, value=c)
        val = term if val is None else op("Add", val, term)
    scale = op("Reshape", op("BroadcastTo", op("Unsqueeze", Bind(2), dim=2),
                             shape=(n, k // bs, bs)), shape=(n, k))
    deq = op("Mul", val, scale)
    if a.dtype != DType.F32:
        deq = op("Cast", deq, dtype=a.dtype)
    return matmul_flat(Bind(0), a.shape, op("Transpose", deq), n)


ENTRY = FusedOpEntry(
    id=21, name=NAME, mnemonic="nf4_matmul", family=Family.QUANTIZED,
    arity=3, params=(ParamSpec("block_size", "i64", 64),), infer=infer, reference=reference,
    recipe=Recipe(build=build), backward=NOT_DIFFERENTIABLE, op_kind=OpKind.Nf4Matmul,
    destructive_input=None, cse_tag=21, input_names=("act", "w_packed", "absmax"), doc=__doc__,
)
