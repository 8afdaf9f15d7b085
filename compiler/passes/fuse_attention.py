"""Attention as exporters spell it -> ``fuel.flash_attn`` (part of ``fuel-fuse``).

Rooted at a ``MatMul(P, V)`` whose ``P`` is a ``SoftmaxLastDim`` (the static
patterns have fused the softmax by then), the spelling matched is::

    S = MatMul(Q', Kt)           Kt: Transpose(K') or Permute{0,1,3,2}(K')
    X = scale(S)                 MulScalar, or Mul / Div by a constant scalar
                                 (BroadcastTo of a Const), or none (scale 1)
    X = mask(X)                  none, or one or both, in either order, of:
                                 a constant band: Where(constant keep, X, fill),
                                 Where(constant drop, fill, X), Add(X, constant);
                                 an additive mask: Add(X, BroadcastTo(m))
    out = MatMul(SoftmaxLastDim(X), V')

``Q'`` and ``K'`` may each carry a constant scalar factor of their own (the
scale split as sqrt on both sides); ``K'`` and ``V'`` may be the HF
``repeat_kv`` spelling ``Reshape(BroadcastTo(Unsqueeze(kv, 2)))`` of
``[B,Hkv,S,D]`` to ``[B,Hq,S,D]``, which FlashAttn reads as grouped-query heads.

A constant band fuses only when its value is verified, for these shapes, to be
exactly FlashAttn's: all-keep (no mask), or causal with top-left alignment (key
``j <= i``: ``causal``) or bottom-right alignment (``j <= i + Sk - Sq``:
``causal`` with ``k_len = Sk``; only where no query row is fully masked, since
the unfused softmax of such a row is not FlashAttn's 0); masked positions must
hold ``-inf`` or at most the dtype's most negative finite value (``finfo.min``,
what HF adds), so ``exp`` of them underflows to exactly 0 either way. Any other
constant, a non-constant or non-scalar scale, or ``?`` extents (a constant mask
has static ones): not fused. The band's value is read from the Const's inline
``value`` or, for a large one, from the side constants the driver passes as the
``constants`` option of ``fuel-fuse``.

An additive mask whose value is not known (BERT's ``(1 - attention_mask) *
finfo.min`` of an input) becomes FlashAttn's mask operand: ``m`` as it was
before the Add's BroadcastTo, when it broadcasts to the scores as FlashAttn
reads it (rank 2 to 4, right-aligned, each extent 1 or the scores', a value
per key: ``[B,1,1,Sk]``, ``[B,1,Sq,Sk]``, ``[1,1,Sq,Sk]``, ``[Sq,Sk]``, per
head); others (``[B,1,Sq,1]``, ``[Sk]``) leave the attention unfused. The
kernel adds it to the scaled scores as the Add did, so a finite value
(``-10000``, ``finfo.min``) gives the unfused result; a row whose keys are all
``-inf`` gives FlashAttn's 0 where the unfused Softmax computes 0/0. Not with
``k_len``, nor beside a band of finite fill (GPT-2's ``Where(causal, s,
finfo.min)``): a row whose band the mask fills too (left padding) spreads
unfused over every key, all about ``finfo.min``, and fused over its band only.

Every interior op (the softmax, the mask and scale ops, the scores product,
the transpose of K, a separately scaled Q or K) must have no user outside the
match. The rewrite is gated like every fusion: ``kernel_available`` for
FlashAttn on the target (``kernel_serves`` included), and on the kernel paying
(``pays``): causal attention, whose kernel visits only the keys a row sees
([1,4,128,64]: 162 against 222 us with AVX-512, 175 against 269 with AVX2;
[8,4,32,64]: 195 against 222, 209 against 265; one core, thread time), and
attention whose scores reach ``SCORES_FUSED`` elements. Without a band the
kernel does the work of the unfused steps in one pass; one znver4 thread,
thread time min, fused against unfused, AVX-512: [1,12,128,32] 0.360 against
0.363 ms, [1,4,128,64] with BERT's mask 0.215 against 0.212, [8,4,128,64]
with it 1.74 against 2.05, [8,4,129,64] 2.08 against 2.33, [1,12,384,64] 5.27
against 6.61, but [1,4,33,64] (ViT) 0.038 against 0.034 and [8,4,64,64] 0.56
against 0.51 (AVX2 alike: [1,4,129,64] 0.258 against 0.250). Scores of 2^19
elements (2 MiB in f32) and more, which the unfused steps write and read
through memory, is where it was faster throughout. The AVX2 kernel has
since become faster (its exp pass, its padding, K's copy): on znver3 it pays
from far smaller scores, which its kernel tells the pass (``scores_fused``:
2^12 elements for f32, ``codegen.cpu.attention_scores``). The kernel takes batch and
sequence at run time (a symbolic module's bindings share it; a mask's batch,
query and key extents too) except with ``k_len``, which ``fuse_attention(...,
k_len=False)`` leaves unfused.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from compiler.mlir import ir
from compiler.passes import _fuel


@dataclasses.dataclass
class _Match:
    q: object
    k: object
    v: object
    scale: float
    causal: bool
    k_len: Optional[int]
    interior: list          # ops retired with the root (single-use checked)
    mask: object = None     # an additive mask operand (rank 2 to 4), or None
    scores: tuple = ()      # [B, Hq, Sq, Sk]


def _owner(value, mnemonic: Optional[str] = None):
    """The fuel op defining ``value`` (of ``mnemonic`` if given), or None."""
    o = value.owner
    if not isinstance(o, (ir.Operation, ir.OpView)):
        return None
    o = o.operation
    if mnemonic is not None and _fuel.mnemonic(o) != mnemonic:
        return None
    return o


def _single_use(value) -> bool:
    return len(list(value.uses)) == 1


def const_array(value, constants) -> Optional[np.ndarray]:
    """The value of a ``fuel.const`` (its inline ``value``, else the side
    constant of its name in ``constants``), or None."""
    op = _owner(value, "const")
    if op is None:
        return None
    shape = tuple(ir.RankedTensorType(value.type).shape)
    if "value" in op.attributes:
        dense = ir.DenseElementsAttr(op.attributes["value"])
        if dense.is_splat:
            return np.full(shape, np.array(dense.get_splat_value().value))
        return np.array(dense).reshape(shape)
    name = _fuel.params(op).get("name")
    arr = constants.get(name) if isinstance(constants, dict) else None
    return None if arr is None else np.asarray(arr).reshape(shape)


def _const_through_broadcast(value, constants) -> Optional[np.ndarray]:
    """A constant, seen through one BroadcastTo (its own shape kept)."""
    b = _owner(value, "broadcast_to")
    return const_array(b.operands[0] if b is not None else value, constants)


def _scalar(value, constants) -> Optional[float]:
    arr = _const_through_broadcast(value, constants)
    if arr is None or arr.size != 1 or arr.dtype.kind != "f":
        return None
    return float(arr.reshape(()))


def _scale_of(op, constants):
    """``(x, factor)`` when ``op`` scales ``x`` by a constant scalar
    (MulScalar, Mul or Div by a scalar Const), else None."""
    m = _fuel.mnemonic(op)
    if m == "mul_scalar":
        return op.operands[0], float(_fuel.params(op)["value"])
    if m not in ("mul", "div"):
        return None
    a, b = op.operands
    c = _scalar(b, constants)
    if c is not None:
        return (a, c) if m == "mul" else ((a, 1.0 / c) if c != 0 else None)
    if m == "mul":
        c = _scalar(a, constants)
        if c is not None:
            return b, c
    return None


def _unscale(value, constants, interior):
    """``(x, factor)``: ``value`` with at most one constant scalar factor
    (single use) peeled off."""
    op = _owner(value)
    got = _scale_of(op, constants) if op is not None and _single_use(value) else None
    if got is None:
        return value, 1.0
    interior.append(op)
    return got


def _unrepeat(value):
    """``(kv, group)``: the HF ``repeat_kv`` of ``kv`` [B,Hkv,S,D] to
    [B,Hkv*group,S,D] undone, or ``(value, 1)``."""
    r = _owner(value, "reshape")
    b = _owner(r.operands[0], "broadcast_to") if r is not None else None
    u = _owner(b.operands[0], "unsqueeze") if b is not None else None
    if u is None or _fuel.params(u).get("dim") != 2:
        return value, 1
    kv = u.operands[0]
    (bs, hkv, s, d), out = _shape(kv), _shape(value)
    g5 = _shape(b.results[0])
    if len(g5) != 5 or g5[:2] != (bs, hkv) or g5[3:] != (s, d) or out != (bs, hkv * g5[2], s, d):
        return value, 1
    return kv, g5[2]


def _kt(value, interior):
    """K' from its transposed view ``Kt`` (last two axes swapped), or None."""
    op = _owner(value)
    if op is None or not _single_use(value):
        return None
    m = _fuel.mnemonic(op)
    if m == "transpose" or (m == "permute" and list(_fuel.params(op)["perm"]) == [0, 1, 3, 2]):
        interior.append(op)
        return op.operands[0]
    return None


def _shape(value) -> tuple:
    return tuple(ir.RankedTensorType(value.type).shape)


def _band(keep: np.ndarray, sq: int, sk: int):
    """``(causal, k_len)`` of FlashAttn whose key set per query row is
    ``keep`` [Sq, Sk], or None."""
    if keep.all():
        return False, None
    i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]
    if np.array_equal(keep, j <= i):
        return True, None                      # top-left (SDPA's is_causal)
    if sq <= sk and np.array_equal(keep, j <= i + (sk - sq)):
        return True, sk                        # bottom-right (decoding with a cache)
    return None


def _mask_2d(arr: Optional[np.ndarray], sq: int, sk: int) -> Optional[np.ndarray]:
    """``arr`` as the [Sq, Sk] mask it broadcasts the same to every batch and
    head, or None."""
    if arr is None or arr.ndim < 2 or arr.shape[-2:] != (sq, sk) or arr.size != sq * sk:
        return None
    return arr.reshape(sq, sk)


def _is_neg(x, dtype) -> np.ndarray:
    return np.asarray(x, np.float64) <= float(np.finfo(dtype).min)


def _unmask(value, constants, interior, sq, sk, dtype):
    """``(scores, causal, k_len, finite)`` with an exactly-causal constant
    mask peeled off ``value`` (``finite``: its masked entries are not all
    ``-inf``), ``(value, False, None, False)`` without a mask, or None for a
    mask FlashAttn cannot express."""
    op = _owner(value)
    m = _fuel.mnemonic(op) if op is not None else None
    if m == "where":
        c, a, b = op.operands
        cond = _mask_2d(_const_through_broadcast(c, constants), sq, sk)
        for scores, fill, keep_is_cond in ((a, b, True), (b, a, False)):
            f = _scalar(fill, constants)
            if cond is None or f is None or not _is_neg(f, dtype):
                continue
            keep = (cond != 0) if keep_is_cond else (cond == 0)
            band = _band(keep, sq, sk)
            if band is not None:
                interior.append(op)
                return (scores, *band, bool(np.isfinite(f)))
        return None
    if m == "add":
        for scores, other in (op.operands, list(op.operands)[::-1]):
            arr = _mask_2d(_const_through_broadcast(other, constants), sq, sk)
            if arr is None or arr.dtype.kind != "f":
                continue
            keep = arr == 0
            if not (keep | _is_neg(arr, dtype)).all():
                return None                    # a bias, not a mask
            band = _band(keep, sq, sk)
            if band is None:
                return None
            interior.append(op)
            return (scores, *band, bool(np.isfinite(arr[~keep]).any()))
        return None
    return value, False, None, False


def _reaches_product(value, depth: int = 3) -> bool:
    """Whether ``value`` is the scores side of a mask Add: a MatMul, seen
    through at most ``depth`` scale or mask ops."""
    op = _owner(value)
    m = _fuel.mnemonic(op) if op is not None else None
    if m == "mat_mul":
        return True
    if depth == 0 or m not in ("mul_scalar", "mul", "div", "where", "add"):
        return False
    return any(_reaches_product(o, depth - 1) for o in op.operands)


def _input_mask(value, interior, full):
    """``(scores, mask)`` for ``value`` = Add(scores, BroadcastTo(mask)) (either
    order) where ``mask`` broadcasts to the scores ``full`` as FlashAttn's
    additive mask operand reads it (``_attention.mask_mismatch``), e.g. BERT's
    ``(1 - m) * finfo.min`` of shape [B,1,1,Sk]; else None. The mask's value
    need not be known: it is added in the kernel as the Add did."""
    from compiler.registry.ops._attention import mask_mismatch
    op = _owner(value, "add")
    if op is None:
        return None
    for scores, other in (op.operands, list(op.operands)[::-1]):
        if not _reaches_product(scores) or _reaches_product(other):
            continue
        b = _owner(other, "broadcast_to")
        mask = b.operands[0] if b is not None else other
        try:
            shape = tuple(ir.RankedTensorType(mask.type).shape)
        except ValueError:
            return None
        if mask_mismatch(shape, full) is not None:
            return None                        # not a mask FlashAttn reads: left unfused
        interior.append(op)
        return scores, mask
    return None


def match_attention(root, constants) -> Optional[_Match]:
    """The exported attention rooted at ``MatMul(SoftmaxLastDim(X), V)``
    ``root``, or None."""
    if _fuel.mnemonic(root) != "mat_mul" or len(root.results) != 1:
        return None
    p, v = root.operands
    sm = _owner(p, "softmax_last_dim")
    if sm is None or not _single_use(p) or len(sm.operands) != 1 \
            or _fuel.params(sm).get("scale") is not None:
        return None                            # a folded scale or mask: not the exported chain
    x = sm.operands[0]
    try:
        for t in (x, v, root.results[0]):
            if not ir.RankedTensorType(t.type).has_static_shape:
                return None                    # ``?`` extents: no constant mask reads them
    except ValueError:
        return None
    if len(_shape(x)) != 4 or not _single_use(x):
        return None
    _, _, sq, sk = _shape(x)
    dtype = _fuel.dtype_of(x).storage_numpy
    if np.dtype(dtype).kind != "f":
        return None
    interior = [sm]
    full = _shape(x)
    causal, k_len, mask, finite = False, None, None, False
    for _ in range(2):          # a constant band mask and an additive mask operand, either order
        if not causal:
            got = _unmask(x, constants, interior, sq, sk, dtype)
            if got is not None and got[0] is not x:
                x, causal, k_len, finite = got
                if not _single_use(x):
                    return None
                continue
        got = _input_mask(x, interior, full) if mask is None else None
        if got is None:
            break
        x, mask = got
        if not _single_use(x):
            return None
    if mask is not None and (k_len is not None or finite):
        # FlashAttn takes no mask with k_len; and a band of finite fill (finfo.min) with
        # a mask that may fill a row's visible keys too: unfused, such a row spreads
        # over every key, fused over its band only. With -inf they agree.
        return None
    if not _single_use(x):
        return None
    s, scale = _unscale(x, constants, interior)
    mm = _owner(s, "mat_mul")
    if mm is None or not _single_use(s):
        return None
    interior.append(mm)
    qs, kts = mm.operands
    q, fq = _unscale(qs, constants, interior)
    kt, fk1 = _unscale(kts, constants, interior)
    k = _kt(kt, interior)
    if k is None:
        return None
    k, fk2 = _unscale(k, constants, interior)
    if any(len(_shape(t)) != 4 for t in (q, k, v)):
        return None
    kr, gk = _unrepeat(k)
    vr, gv = _unrepeat(v)
    if gk == gv and gk > 1:
        k, v = kr, vr
    return _Match(q, k, v, scale * fq * fk1 * fk2, causal, k_len, interior, mask, full)


#: Scores of at least this many elements (f32: 2 MiB, twice a znver4 core's
#: L2) fuse without a causal band: the unfused steps then stream the scores
#: and probabilities through memory, the kernel keeps a block's in L1.
SCORES_FUSED = 1 << 19


def pays(match: _Match, by_size: bool = True, least: int = SCORES_FUSED) -> bool:
    """Whether the FlashAttn kernel is faster than the unfused steps it
    replaces (measured: the module docstring): causal attention, and
    attention whose scores reach ``least`` elements (``SCORES_FUSED``, or
    the target kernel's own size: ``scores_fused``). A ``?`` extent (a
    symbolic module's batch or sequence) counts as 1: such attention fuses
    where its static extents alone reach the size (MLIR gives a ``?`` extent
    as a negative sentinel, whose product with the others overflows).
    ``by_size`` false: causal attention only (the fusion then does not
    depend on the sizes: a symbolic module's bindings)."""
    if match.causal:
        return True
    return by_size and math.prod(d if d >= 0 else 1 for d in match.scores) >= least


def scores_fused(entry, dtypes, table, backends) -> int:
    """The scores size from which attention without a causal band pays as
    the table's FlashAttn kernel for ``dtypes`` (its ``attention_scores``:
    AVX2 f32 kernels pay from far smaller scores than AVX-512's), else
    ``SCORES_FUSED``."""
    for b in backends:
        if table.backend_supports(entry.op_kind, dtypes, b):
            size = getattr(table.lookup(entry.op_kind, dtypes, b).fn, "attention_scores", None)
            got = size() if callable(size) else None
            return SCORES_FUSED if got is None else int(got)
    return SCORES_FUSED


def fuse_attention(module, table, backends, constants=None, forget=lambda op: None,
                   k_len: bool = True, by_size: bool = True) -> int:
    """Rewrite every matched exported attention into ``fuel.flash_attn``
    where a candidate backend has its kernel; returns how many. ``k_len``
    false: not the bottom-right aligned matches (their kernel is compiled per
    shape; the others take batch and sequence at run time); ``by_size``
    false: not the attention that fuses for its size alone (``pays``)."""
    from compiler.passes.fuse import kernel_available
    from compiler.registry import normalize_params
    entry = _fuel.registry()["FlashAttn"]
    done = 0
    for root in _fuel.fuel_ops(module):
        if _fuel.mnemonic(root) != "mat_mul":
            continue
        got = match_attention(root, constants)
        if got is None or (got.k_len is not None and not k_len):
            continue
        try:
            params = normalize_params(entry, {"softmax_scale": got.scale, "causal": got.causal,
                                              "k_len": got.k_len})
            operands = [got.q, got.k, got.v] + ([got.mask] if got.mask is not None else [])
            in_types = [_fuel.tensor_type(t) for t in operands]
            out_type = _fuel.tensor_type(root.results[0])
            if not _fuel.same_type(entry.infer(in_types, params), out_type):
                continue
        except Exception:  # the match does not type as FlashAttn
            continue
        dts = [t.dtype for t in in_types] + [out_type.dtype]
        if not pays(got, by_size, scores_fused(entry, dts, table, backends)) \
                or not kernel_available(entry, params, in_types, dts, table, backends):
            continue
        with ir.InsertionPoint(root), root.location:
            fused = _fuel.create_op(entry.mnemonic, operands, [root.results[0].type], params,
                                    loc=root.location)
        _fuel.replace_op(root, [fused.results[0]], dead=got.interior, forget=forget)
        _fuel.count("fuse.attention")
        done += 1
    return done
