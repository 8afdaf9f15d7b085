"""AwqMatmul (fused id 25): AWQ asymmetric int4 weight-only matmul in
AutoAWQ's GEMM checkpoint layout (``WQLinear_GEMM``),
dequant[k,n] = (q[k,n] - z[k // gs, n])·s[k // gs, n]; out = act @ dequant.

Inputs act ``[..,M,K]`` (float), qweight ``[K, N/8]`` (in_features,
out_features // 8) i32 or u32, qzeros ``[K/gs, N/8]`` of the same dtype,
scales ``[K/gs, N]`` f16 (as checkpoints store them) or f32. Params
``group_size`` and ``split_k_iters`` (launch tuning only; unused by the
math). Output ``[..,M,N]`` in act's dtype. Packing (AutoAWQ's ``AWQ_ORDER``):
eight 4-bit values per 32-bit word along N, physical nibble p (LSB first) of
word j holding column ``8·j + AWQ_ORDER[p]``, ``AWQ_ORDER`` =
[0,2,4,6,1,3,5,7]; qzeros is packed the same way.

``op_kind`` is ``OpKind.AwqMatmul``, a fuelc addition: the original was
decompose-only in v1 (no OpKind, no kernel); fuelc compiles AWQ to one
kernel, so it needs a dispatch key. The decomposition is a per-call recipe
(data), not imperative.
"""
from runtime.opkind import OpKind

from ..entry import NOT_DIFFERENTIABLE, FusedOpEntry, Family, Recipe
from ..grammar import Bind, op
from ._common import (DType, ParamSpec, TensorType, check_arity, check_float, dtype_of, fail,
                      matmul_flat, np, out, wide)

NAME = "AwqMatmul"
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
#: logical column j of a word sits in physical nibble AWQ_REVERSE_ORDER[j]
AWQ_REVERSE_ORDER = tuple(AWQ_ORDER.index(j) for j in range(8))
WORD_DTYPES = (DType.I32, DType.U32)
SCALE_DTYPES = (DType.F16, DType.F32)


def infer(types, params):
    check_arity(NAME, types, 4, names=("act", "qweight", "qzeros", "scales"))
    check_float(NAME, types, (0,))
    a, qw, qz, sc = types
    gs = params["group_size"]
    if len(a.shape) < 2:
        raise fail(NAME, types, "act must be [..,M,K]")
    k = a.shape[-1]
    if qw.dtype not in WORD_DTYPES or len(qw.shape) != 2 or qw.shape[0] != k \
            or qw.shape[1] < 1:
        raise fail(NAME, types, f"qweight must be i32/u32 [in_features, out_features // 8] = "
                                f"[K={k}, N/8] (AutoAWQ GEMM layout), got {qw.dtype}"
                                f"{list(qw.shape)}")
    n = qw.shape[1] * 8
    if gs < 1 or k % gs:
        raise fail(NAME, types, f"group_size={gs} must be positive and divide K={k}")
    if qz.dtype != qw.dtype or tuple(qz.shape) != (k // gs, n // 8):
        raise fail(NAME, types, f"qzeros must be {qw.dtype} [K/group_size, N/8] = "
                                f"[{k // gs}, {n // 8}], got {qz.dtype}{list(qz.shape)}")
    if sc.dtype not in SCALE_DTYPES or tuple(sc.shape) != (k // gs, n):
        raise fail(NAME, types, f"scales must be f16/f32 [K/group_size, N] = [{k // gs}, {n}], "
                                f"got {sc.dtype}{list(sc.shape)}")
    return TensorType(tuple(a.shape[:-1]) + (n,), a.dtype)


def unpack(words):
    """i32/u32 words ``[R, W]`` -> int64 ``[R, W*8]`` 4-bit codes in column order."""
    w = np.asarray(words).astype(np.int64)
    phys = np.stack([(w >> (4 * p)) & 0xF for p in range(8)], axis=-1)
    return phys[..., list(AWQ_REVERSE_ORDER)].reshape(w.shape[0], -1)


def reference(inputs, params):
    gs = params["group_size"]
    q = unpack(inputs[1]).astype(np.float64)                         # [K, N]
    z = np.repeat(unpack(inputs[2]).astype(np.float64), gs, axis=0)  # [K, N]
    s = np.repeat(wide(inputs[3]), gs, axis=0)
    deq = ((q - z) * s).astype(np.float32)
    dt = dtype_of(inputs[0])
    return out(np.matmul(wide(inputs[0]), wide(out(deq, dt))), dt)


def _unpack_node(src, rows, width):
    """Recipe: ``[rows, width]`` words -> ``[rows, width*8]`` F32 codes. Floor
    division is an arithmetic shift, so negative i32 words unpack right too."""
    w64 = op("Cast", src, dtype=DType.F64)
    nib = []
    for p in range(8):
        shifted = w64 if p == 0 else op("Floor", op("MulScalar", w64, value=16.0 ** -p))
        nib.append(op("Sub", shifted, op("MulScalar", op("Floor", op("MulScalar", shifted,
                                                                    value=1.0 / 16)),
                                         value=16.0)))
    cols = [op("Unsqueeze", nib[p], dim=2) for p in AWQ_REVERSE_ORDER]
    return op("Cast", op("Reshape", op("Concat", *cols, dim=2), shape=(rows, width * 8)),
              dtype=DType.F32)


def build(params, types):
    a, qw, sc = types[0], types[1], types[3]
    k, n, gs = a.shape[-1], qw.shape[1] * 8, params["group_size"]
    g = k // gs
    q = _unpack_node(Bind(1), k, n // 8)                                 # [K, N]

    def expand(x):
        return op("Reshape", op("BroadcastTo", op("Unsqueeze", x, dim=1), shape=(g, gs, n)),
                  shape=(k, n))
    scales = Bind(3) if sc.dtype == DType.F32 else op("Cast", Bind(3), dtype=DType.F32)
    deq = op("Mul", op("Sub", q, expand(_unpack_node(Bind(2), g, n // 8))), expand(scales))
    if a.dtype != DType.F32:
        deq = op("Cast", deq, dtype=a.dtype)
    return matmul_flat(Bind(0), a.shape, deq, n)


ENTRY = FusedOpEntry(
    id=25, name=NAME, mnemonic="awq_matmul", family=Family.QUANTIZED,
    arity=4, params=(ParamSpec("group_size", "i64", 128), ParamSpec("split_k_iters", "i64", 1)),
    infer=infer, reference=reference, recipe=Recipe(build=build), backward=NOT_DIFFERENTIABLE,
    op_kind=OpKind.AwqMatmul, destructive_input=None, cse_tag=23,
    input_names=("act", "qweight", "qzeros", "scales"), doc=__doc__,
)
