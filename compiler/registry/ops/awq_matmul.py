"""AwqMatmul (fused id 25): AWQ asymmetric int4 weight-only matmul,
dequant[k,n] = (q[k,n] - z[k // gs, n])·s[k // gs, n]; out = act @ dequant.

Inputs act ``[..,M,K]`` (float), qweight ``[N, K/8]`` u32, qzeros
``[K/gs, N/8]`` u32, scales ``[K/gs, N]`` f32 (four inputs: the original's
"three inputs" doc is stale, §8.3). Params ``group_size`` and
``split_k_iters`` (launch tuning only; unused by the math). Output
``[..,M,N]`` in act's dtype. Packing: physical nibble p (LSB first) of a word
holds logical column ``AWQ_UNPACK_ORDER[p]`` = [0,2,4,6,1,3,5,7][p]; the same
order applies to qzeros along N.

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
AWQ_UNPACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
_LOGICAL_TO_PHYSICAL = tuple(AWQ_UNPACK_ORDER.index(j) for j in range(8))


def infer(types, params):
    check_arity(NAME, types, 4, names=("act", "qweight", "qzeros", "scales"))
    check_float(NAME, types, (0,))
    a, qw, qz, sc = types
    gs = params["group_size"]
    if len(a.shape) < 2 or len(qw.shape) != 2 or qw.dtype != DType.U32:
        raise fail(NAME, types, "act must be [..,M,K] and qweight u32 [N, K/8]")
    k, n = a.shape[-1], qw.shape[0]
    if k % 8 or qw.shape[1] * 8 != k or n % 8:
        raise fail(NAME, types, f"qweight must be [N, K/8] with K={k} and N={n} multiples of 8")
    if gs < 1 or k % gs:
        raise fail(NAME, types, f"group_size={gs} must be positive and divide K={k}")
    if qz.dtype != DType.U32 or tuple(qz.shape) != (k // gs, n // 8):
        raise fail(NAME, types, f"qzeros must be u32 [K/gs, N/8] = [{k // gs}, {n // 8}]")
    if sc.dtype != DType.F32 or tuple(sc.shape) != (k // gs, n):
        raise fail(NAME, types, f"scales must be f32 [K/gs, N] = [{k // gs}, {n}]")
    return TensorType(tuple(a.shape[:-1]) + (n,), a.dtype)


def unpack(words):
    """u32 ``[R, W]`` -> int64 ``[R, W*8]`` codes in logical order."""
    w = np.asarray(words).astype(np.int64)
    phys = np.stack([(w >> (4 * p)) & 0xF for p in range(8)], axis=-1)
    return phys[..., list(_LOGICAL_TO_PHYSICAL)].reshape(w.shape[0], -1)


def reference(inputs, params):
    gs = params["group_size"]
    q = unpack(inputs[1]).T.astype(np.float64)                      # [K, N]
    z = np.repeat(unpack(inputs[2]).astype(np.float64), gs, axis=0)  # [K, N]
    s = np.repeat(np.asarray(inputs[3], np.float64), gs, axis=0)
    deq = ((q - z) * s).astype(np.float32)
    dt = dtype_of(inputs[0])
    return out(np.matmul(wide(inputs[0]), wide(out(deq, dt))), dt)


def _unpack_node(src, rows, width):
    w64 = op("Cast", src, dtype=DType.F64)
    nib = []
    for p in range(8):
        shifted = w64 if p == 0 else op("Floor", op("MulScalar", w64, value=16.0 ** -p))
        nib.append(op("Sub", shifted, op("MulScalar", op("Floor", op("MulScalar", shifted,
                                                                    value=1.0 / 16)),
                                         value=16.0)))
    cols = [op("Unsqueeze", nib[p], dim=2) for p in _LOGICAL_TO_PHYSICAL]
    return op("Cast", op("Reshape", op("Concat", *cols, dim=2), shape=(rows, width * 8)),
              dtype=DType.F32)


def build(params, types):
    a, qw = types[0], types[1]
    n, k, gs = qw.shape[0], a.shape[-1], params["group_size"]
    g = k // gs
    q = op("Transpose", _unpack_node(Bind(1), n, k // 8))                 # [K, N]

    def expand(x):
        return op("Reshape", op("BroadcastTo", op("Unsqueeze", x, dim=1), shape=(g, gs, n)),
                  shape=(k, n))
    deq = op("Mul", op("Sub", q, expand(_unpack_node(Bind(2), g, n // 8))), expand(Bind(3)))
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
