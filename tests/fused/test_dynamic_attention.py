"""The FlashAttn cpu kernel with run-time batch and sequence extents
(``lowering/fused_attention.py: dynamic_dims``, docs/dynamic-shapes.md): one
compile of a symbolic graph serves every size, against the reference
interpreter, and gives the bits of the kernel compiled for the static shape."""
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.codegen import family, parallel
from compiler.codegen.family import StaticInstance
from compiler.codegen.fused import FAMILY, FusedInstance
from compiler.graph.opdef import TensorType
from compiler.registry.builders import fused
from compiler.targets import parse_target
from runtime.cpu_features import missing_cpu_features
from runtime.dtype import DType
from runtime.memref import descriptor_from_array

TARGETS = [pytest.param(t, marks=pytest.mark.skipif(
    bool(missing_cpu_features(parse_target(t).features)), reason=f"this CPU cannot run {t}"))
    for t in ("cpu:x86-64-v3", "cpu:x86-64-v4")]

# (hq, hkv, params, alibi): causal; grouped-query heads with alibi slopes;
# sliding windows with a softcap (not causal); no mask; an additive mask
# input ("mask": BERT's [b,1,1,s], "rowmask": [b,1,s,s]), causal or not
CASES = {"causal": (4, 4, dict(causal=True), False),
         "gqa-alibi": (8, 2, dict(causal=True), True),
         "window-softcap": (2, 2, dict(window_size_left=3, window_size_right=1, softcap=5.0),
                            False),
         "unmasked": (2, 1, dict(), False),
         "mask": (4, 2, dict(), "mask"),
         "rowmask-causal": (2, 2, dict(causal=True), "rowmask")}
#: (batch, Sq, Sk): 1 row, rows left over from the 4-row blocks, more than a 16-key chunk
SIZES = [(1, 1, 1), (2, 5, 5), (3, 6, 6), (1, 37, 37), (2, 64, 64)]
D = 32


@pytest.fixture(autouse=True)
def one_thread():
    # a call split by kv heads runs a kernel of fewer heads: an instance of its own
    parallel.set_num_threads(1)
    yield
    parallel.set_num_threads(None)


def _feeds(rng, b, hq, hkv, sq, sk, alibi):
    x = {"q": rng.standard_normal((b, hq, sq, D)).astype(np.float32),
         "k": rng.standard_normal((b, hkv, sk, D)).astype(np.float32),
         "v": rng.standard_normal((b, hkv, sk, D)).astype(np.float32)}
    if alibi in ("mask", "rowmask"):
        shape = (b, 1, 1, sk) if alibi == "mask" else (b, 1, sq, sk)
        x["a"] = np.where(rng.uniform(size=shape) < 0.3, -10000.0, 0.0).astype(np.float32)
        x["a"][..., 0] = 0.0
    elif alibi:
        x["a"] = rng.uniform(0.05, 0.5, hq).astype(np.float32)
    return x


def _graph(hq, hkv, params, alibi, sq="s", sk="s"):
    g = Graph()
    ins = [g.input("q", ("b", hq, sq, D), "f32"), g.input("k", ("b", hkv, sk, D), "f32"),
           g.input("v", ("b", hkv, sk, D), "f32")]
    if alibi in ("mask", "rowmask"):
        ins.append(g.input("a", ("b", 1, 1, sk) if alibi == "mask" else ("b", 1, sq, sk), "f32"))
    elif alibi:
        ins.append(g.input("a", (hq,), "f32"))
    g.output(fused("FlashAttn", *ins, softmax_scale=0.3, **params), "y")
    return g


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_compile_serves_every_size(case, target):
    hq, hkv, params, alibi = CASES[case]
    g = _graph(hq, hkv, params, alibi)
    m = compile(g, target=target)
    rng = np.random.default_rng(11)
    for i, (b, sq, sk) in enumerate(SIZES):
        x = _feeds(rng, b, hq, hkv, sq, sk, alibi)
        np.testing.assert_allclose(m(**x), interpret(g, x)["y"], rtol=2e-5, atol=2e-5,
                                   err_msg=f"b={b} s={sq}")
        if i == 0:
            assert m.kernel_summary()[1:] == [
                f"FlashAttn[{','.join(['f32'] * (len(x) + 1))}] (mlir-cpu-fused) "
                "[run-time extents]"], m.kernel_summary()
            compiled = set(family._compiled)
        else:
            assert set(family._compiled) == compiled, f"b={b} s={sq} compiled a kernel"


def test_fewer_queries_than_keys():
    """Sq and Sk two symbols (top-left causal: a query sees keys up to its own
    index), Sk above and below Sq."""
    g = _graph(4, 2, dict(causal=True), False, sq="sq", sk="sk")
    m = compile(g, target="cpu")
    rng = np.random.default_rng(3)
    for b, sq, sk in ((1, 3, 20), (2, 20, 3), (1, 7, 7)):
        x = _feeds(rng, b, 4, 2, sq, sk, False)
        np.testing.assert_allclose(m(**x), interpret(g, x)["y"], rtol=2e-5, atol=2e-5)
    assert m.kernel_summary()[1].endswith("[run-time extents]")


@pytest.mark.parametrize("case", ["causal", "gqa-alibi", "window-softcap", "mask",
                                  "rowmask-causal"])
def test_bits_of_the_static_kernel(case):
    """The run-time kernel gives the bits of the kernel compiled for each
    static shape (a run-time Sq runs its left-over rows one at a time, the
    static kernel as one block: the keys a block adds outside a row's band
    add exact zeros)."""
    hq, hkv, params, alibi = CASES[case]
    rng = np.random.default_rng(5)
    for b, sq, sk in ((2, 7, 7), (1, 18, 18)):
        x = _feeds(rng, b, hq, hkv, sq, sk, alibi)
        types = tuple(TensorType(a.shape, DType.F32) for a in x.values())
        full = {**dict(softmax_scale=0.3, causal=False, window_size_left=None,
                       window_size_right=None, softcap=None, k_len=None), **params}
        inst = FusedInstance("FlashAttn", tuple(sorted(full.items())), types)
        assert inst.dynamic
        outs = []
        for which in (inst, StaticInstance(inst)):
            out = np.full((b, hq, sq, D), np.nan, np.float32)
            descs = [descriptor_from_array(a) for a in (*x.values(), out)]
            FAMILY.compiled(which, "cpu")(*descs)
            outs.append(out)
        np.testing.assert_array_equal(outs[0], outs[1])
        g = _graph(hq, hkv, params, alibi)
        np.testing.assert_allclose(outs[0], interpret(g, x)["y"], rtol=2e-5, atol=2e-5)


def test_k_len_stays_per_shape():
    """``k_len`` (bottom-right aligned keys) is a static param whose offset
    needs Sq: that kernel is compiled per shape."""
    types = (TensorType((1, 2, 3, 8), DType.F32), TensorType((1, 2, 5, 8), DType.F32),
             TensorType((1, 2, 5, 8), DType.F32))
    params = dict(softmax_scale=0.5, causal=True, window_size_left=None,
                  window_size_right=None, softcap=None)
    assert FusedInstance("FlashAttn", tuple(sorted({**params, "k_len": None}.items())),
                         types).dynamic
    assert not FusedInstance("FlashAttn", tuple(sorted({**params, "k_len": 5}.items())),
                             types).dynamic


@pytest.mark.parametrize("platform,k_len", [(None, None), ("cpu", 5)])
def test_run_time_extents_the_rule_cannot_take_are_refused(platform, k_len):
    """The generic rule (targets without a FlashAttn rule of their own) and
    the cpu rule with ``k_len`` are static: a ``?`` batch or sequence is a
    ``LoweringError`` naming the extents and what takes them."""
    from compiler.codegen.family import single_op_linalg_text
    from compiler.errors import LoweringError
    q, kv = TensorType((1, 2, 3, 8), DType.F32), TensorType((1, 2, 5, 8), DType.F32)
    bs = (True, False, True, False)
    params = dict(softmax_scale=0.5, causal=True, k_len=k_len)
    with pytest.raises(LoweringError, match=r"FlashAttn: B, Sq, Sk must be static here.*"
                                            r"run-time extents are B, Sq and Sk, on the cpu "
                                            r"rule, without k_len"):
        single_op_linalg_text("FlashAttn", params, [q, kv, kv], (bs, bs, bs, bs), platform)


V3 = pytest.mark.skipif(bool(missing_cpu_features(parse_target("cpu:x86-64-v3").features)),
                        reason="this CPU cannot run cpu:x86-64-v3")


@V3
@pytest.mark.parametrize("case", ["causal", "gqa-alibi", "window-softcap", "mask",
                                  "rowmask-causal"])
def test_256_bit_exp_gives_fastmath_bits(case, monkeypatch):
    """256-bit code takes the softmax's exp for x <= 0 (``_exp_nonpositive``,
    a row at a time) and runs P·V over the rows' keys only: the bits of the
    kernel with fastmath's exp, wherever the exps are normal floats (these
    scores)."""
    import collections

    from compiler.codegen.lowering import fused_attention
    from compiler.mlir import math as mlir_math
    hq, hkv, params, alibi = CASES[case]
    outs = []
    for exp in (fused_attention._exp_nonpositive, mlir_math.exp):
        monkeypatch.setattr(fused_attention, "_exp_nonpositive", exp)
        monkeypatch.setattr(family, "_compiled", collections.OrderedDict())
        got = []
        for b, sq, sk in ((2, 7, 7), (1, 37, 37)):
            x = _feeds(np.random.default_rng(sq), b, hq, hkv, sq, sk, alibi)
            full = {**dict(softmax_scale=0.3, causal=False, window_size_left=None,
                           window_size_right=None, softcap=None, k_len=None), **params}
            inst = FusedInstance("FlashAttn", tuple(sorted(full.items())),
                                 tuple(TensorType(a.shape, DType.F32) for a in x.values()))
            out = np.full((b, hq, sq, D), np.nan, np.float32)
            FAMILY.compiled(inst, "cpu:x86-64-v3")(
                *[descriptor_from_array(a) for a in (*x.values(), out)])
            got.append(out)
        outs.append(got)
    for a, b_ in zip(*outs):
        np.testing.assert_array_equal(a, b_)


@V3
def test_256_bit_exp_far_below_the_row_max():
    """Scores x - m from 0 down to -120 and -inf (an additive mask, q = 0, V
    the identity: out[i, j] = p[i, j] / l[i]): within 2 ulp of the float64
    softmax where p is a normal float, and 0 where x < -88 (``_exp_nonpositive``
    flushes what fastmath's exp gives as denormals)."""
    sq = sk = D
    rng = np.random.default_rng(3)
    x = {"q": np.zeros((1, 1, sq, D), np.float32),
         "k": rng.standard_normal((1, 1, sk, D)).astype(np.float32),
         "v": np.eye(sk, D, dtype=np.float32)[None, None],
         "a": rng.uniform(-120.0, 0.0, (1, 1, sq, sk)).astype(np.float32)}
    x["a"][0, 0, :, 0] = 0.0
    x["a"][0, 0, ::3, 5] = -np.inf
    x["a"][0, 0, 1, :] = -np.float32(np.linspace(0.0, 100.0, sk))
    inst = FusedInstance("FlashAttn", tuple(sorted(dict(
        softmax_scale=0.3, causal=False, window_size_left=None, window_size_right=None,
        softcap=None, k_len=None).items())), tuple(TensorType(a.shape, DType.F32)
                                                    for a in x.values()))
    out = np.full((1, 1, sq, D), np.nan, np.float32)
    FAMILY.compiled(inst, "cpu:x86-64-v3")(*[descriptor_from_array(a)
                                             for a in (*x.values(), out)])
    s = x["a"][0, 0].astype(np.float64)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    got = out[0, 0]
    normal = ref > 2.0 ** -125
    np.testing.assert_allclose(got[normal], ref[normal], rtol=2.5e-7, atol=0)
    assert (got[s - s.max(axis=1, keepdims=True) < -88.0] == 0).all()


@V3
@pytest.mark.parametrize("b,sq,sk,d", [(2, 13, 13, 20), (1, 37, 37, 32), (1, 5, 8, 8),
                                       (2, 7, 3, 16)])
def test_unit_stride_k_transposed_in_tiles(b, sq, sk, d):
    """With unit-stride operands (as ``FusedFamily.instance`` keys FlashAttn)
    256-bit code copies K transposed in 8 x 8 register tiles, the keys and
    columns past the last whole tile one at a time: the bits of the kernel
    for any strides (which copies element by element), and the reference's
    numerics; a strided K view too."""
    import dataclasses
    rng = np.random.default_rng(b * 100 + sk)
    q, k, v = (rng.standard_normal((b, 2, n, d)).astype(np.float32) for n in (sq, sk, sk))
    params = dict(softmax_scale=0.3, causal=True, window_size_left=None,
                  window_size_right=None, softcap=None, k_len=None)
    inst = FusedInstance("FlashAttn", tuple(sorted(params.items())),
                         tuple(TensorType(a.shape, DType.F32) for a in (q, k, v)))
    outs = []
    for which in (inst, dataclasses.replace(inst, unit_stride=(0, 1, 2, 3))):
        out = np.full((b, 2, sq, d), np.nan, np.float32)
        FAMILY.compiled(which, "cpu:x86-64-v3")(*[descriptor_from_array(a)
                                                  for a in (q, k, v, out)])
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    kview = np.ascontiguousarray(k.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)  # d-stride sk
    out = np.full((b, 2, sq, d), np.nan, np.float32)
    FAMILY.compiled(inst, "cpu:x86-64-v3")(*[descriptor_from_array(a) for a in (q, kview, v, out)])
    np.testing.assert_array_equal(out, outs[0])
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k) * 0.3
    s = np.where(np.tril(np.ones((sq, sk), bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("bhij,bhjd->bhid", e / e.sum(-1, keepdims=True), v)
    np.testing.assert_allclose(outs[0], ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_loops_run_rolled_with_the_bits_of_the_unrolled(target):
    """The cpu kernel's entry carries ``family.ROLLED_ATTR``, so it takes
    ``VECTORIZED_ROLLED`` (LLVM unrolls none of its loops: BERT b8's kernel
    336 -> 196 KB of optimized IR, docs/compile-at-scale.md "Seventeenth
    round"); its object gives the bits of the one LLVM unrolled, in less code."""
    from compiler.codegen import cpu
    from compiler.codegen.cpu import strategy as S
    from compiler.codegen.family import ENTRY, ROLLED_ATTR
    from compiler.codegen.loader import load_object
    tgt = parse_target(target)
    b, hq, hkv, sq, sk = 2, 4, 2, 37, 37
    params = dict(softmax_scale=0.3, causal=False, window_size_left=None,
                  window_size_right=None, softcap=None, k_len=None)
    inst = FusedInstance("FlashAttn", tuple(sorted(params.items())),
                         (TensorType((b, hq, sq, D), DType.F32),
                          *[TensorType((b, hkv, sk, D), DType.F32)] * 2))
    text = FAMILY.linalg_text(family.for_target(inst, tgt), tgt)
    assert ROLLED_ATTR in text
    assert cpu.choose_strategy(text, [ENTRY], tgt) is S.VECTORIZED_ROLLED
    rng = np.random.default_rng(1)
    q = rng.standard_normal((b, hq, sq, D)).astype(np.float32)
    k, v = (rng.standard_normal((b, hkv, sk, D)).astype(np.float32) for _ in "kv")
    outs, sizes = [], []
    for strategy in (S.VECTORIZED_ROLLED, S.VECTORIZED):
        res = cpu.lower(text, [ENTRY], target=tgt, strategy=strategy)
        sizes.append(len(res.llvm_ir))
        out = np.full((b, hq, sq, D), np.nan, np.float32)
        obj = load_object(res.object, tgt.features, str(tgt))
        obj.ciface(ENTRY, 4)(*[descriptor_from_array(a) for a in (q, k, v, out)])
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    assert sizes[0] < 0.8 * sizes[1], sizes
    kk = np.repeat(k, hq // hkv, axis=1).astype(np.float64)
    vv = np.repeat(v, hq // hkv, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), kk) * 0.3
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(outs[0], np.einsum("bhij,bhjd->bhid", e / e.sum(-1, keepdims=True), vv),
                               rtol=2e-5, atol=2e-5)
