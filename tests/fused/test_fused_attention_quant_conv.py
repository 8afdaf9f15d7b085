"""FlashAttn, QMatMul (Q4_0/Q8_0; every format: test_quant_formats.py), Nf4Matmul,
AwqMatmul and Conv2D kernels
(compiler/codegen/lowering/fused_{attention,quant,conv}.py, mlir-cpu-fused family).

Per op, over several shapes and params: the registry numpy ``reference`` ==
the recipe compiled through primitives (``pipeline=RECIPE``) == the fused
kernel compiled by ``compile(g)``, and the plan really runs the fused kernel
(``kernel_summary``). AWQ's registry entry has no OpKind yet (decompose-only,
as in the spec), so its kernel is checked on its own: the lowering through
MLIR's ExecutionEngine and the family's CPU pipeline object, against the same
reference; the compile(g) check switches on when the entry gets an OpKind.
Also: lowered-IR facts, the AWQ unpack order, the params round trip, the
strided_input claim, typed errors for uncovered quant types.

Tolerances (relative to the f64 reference, with an absolute floor of the same
size, ``err <= tol·(1 + |ref|)``): f64 1e-12; f32 5e-6 (the dequantized
weights are exact, only the f32 accumulation order differs); f16 2e-3,
bf16 1.6e-2 (one rounding of weights and outputs).
"""
import numpy as np
import pytest

from compiler.codegen import fused as F
from compiler.codegen.linalg import lower_to_linalg
from compiler import interpret, compile
from compiler.dialect import attrs as dattrs
from compiler.dialect.definition import default_ops, load_fuel_dialect
from compiler.dialect.types import tensor_type
from compiler.errors import GraphBuildError, LoweringError
from compiler.graph import Graph
from compiler.graph.numerics import from_compute, to_compute
from compiler.graph.opdef import TensorType
from compiler.mlir import func, ir
from compiler.registry import default_registry
from compiler.registry.builders import conv2d, fused
from compiler.codegen.lowering.fused_conv import direct as direct_conv, direct_depthwise, few_pixels
from runtime import params as P
from runtime.dtype import DType, from_storage
from runtime.layout import Layout
from tests.lowering.jit import run_module

RECIPE = "builtin.module(fuel-decompose{all=true},fuel-reconcile-dtypes,fuel-cse,fuel-dce)"
TOL = {"f64": 1e-12, "f32": 5e-6, "f16": 2e-3, "bf16": 1.6e-2}
REG = default_registry()


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def _num(a):
    return to_compute(np.asarray(a), wide=True).astype(np.float64)


def _close(got, want, dtype, what):
    got, want = _num(got), _num(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    tol = TOL[dtype]
    err = np.abs(got - want)
    bad = ~((err <= tol * (1.0 + np.abs(want))) | (np.isnan(got) & np.isnan(want)))
    assert not bad.any(), (f"{what} ({dtype}): max err {np.nanmax(err):.3g} > tol {tol:.1g} at "
                           f"{np.argwhere(bad)[0]}: {got[bad][0]} vs {want[bad][0]}")


def _data(rng, shape, dtype, scale=1.0):
    return from_compute(rng.standard_normal(shape) * scale, DType.parse(dtype))


def _reference(name, arrays, params):
    entry = REG[name]
    full = {p.name: p.default for p in entry.params}
    full.update(params)
    return np.asarray(entry.reference(arrays, full))


def _graph(name, arrays, dtypes, params):
    g = Graph()
    ins = [g.input(f"in{k}", a.shape, dt) for k, (a, dt) in enumerate(zip(arrays, dtypes))]
    g.output(fused(name, *ins, **params), "y")
    return g, {f"in{k}": from_storage(a, DType.parse(dt)) for k, (a, dt) in enumerate(zip(arrays, dtypes))}


def _check_kernel(name, arrays, dtypes, params, dtype):
    """reference == the fused kernel through compile(g); the plan runs that kernel."""
    g, feed = _graph(name, arrays, dtypes, params)
    m = compile(g)
    summary = m.kernel_summary()
    assert len(summary) == 1 and summary[0].startswith(f"{REG[name].op_kind.name}[") \
        and summary[0].endswith("(mlir-cpu-fused)"), summary
    _close(m(**feed), _reference(name, arrays, params), dtype, f"{name} kernel")


def _check_recipe(name, arrays, dtypes, params, dtype):
    """reference == the recipe compiled through primitives (no fused kernel)."""
    g, feed = _graph(name, arrays, dtypes, params)
    r = compile(g, pipeline=RECIPE)
    assert not any("mlir-cpu-fused" in s for s in r.kernel_summary()), r.kernel_summary()
    _close(r(**feed), _reference(name, arrays, params), dtype, f"{name} recipe")


def _run_lowering(name, arrays, dtypes, params):
    """The lowering alone: a one-op module (unset optional params carried as
    absent attributes, which ``op_params`` reads back as None), lowered and run
    with MLIR's ExecutionEngine."""
    entry = REG[name]
    full = {p.name: p.default for p in entry.params}
    full.update(params)
    types = [TensorType(tuple(a.shape), DType.parse(d)) for a, d in zip(arrays, dtypes)]
    out_t = entry.infer(types, full)
    spec = next(d for d in default_ops().values() if d.name == name)
    ctx = ir.Context()
    load_fuel_dialect(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            f = func.FuncOp("k", ([tensor_type(t) for t in types], [tensor_type(out_t)]))
            f.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
            block = f.add_entry_block()
            with ir.InsertionPoint(block):
                attrs = {p.name: dattrs.param_to_attr(p, full[p.name], spec.op_name)
                         for p in spec.attr_params if full.get(p.name) is not None}
                op = ir.Operation.create(spec.op_name, results=[tensor_type(out_t)],
                                         operands=list(block.arguments), attributes=attrs)
                func.ReturnOp(list(op.results))
    lower_to_linalg(module)
    text = str(module)
    assert "fuel." not in text
    return run_module(module, "k", arrays, out_t.shape, out_t.dtype), text


# -- FlashAttn ------------------------------------------------------------------
def _attn_inputs(rng, b, hq, hkv, sq, sk, d, dtype, alibi=False):
    arrs = [_data(rng, (b, hq, sq, d), dtype), _data(rng, (b, hkv, sk, d), dtype),
            _data(rng, (b, hkv, sk, d), dtype)]
    if alibi:
        arrs.append(from_compute(rng.uniform(0.05, 0.5, hq), DType.parse(dtype)))
    return arrs


ATTN = [
    ((1, 2, 2, 3, 5, 4), dict(causal=True), False, "f32"),                      # Sk > Sq
    ((2, 4, 2, 4, 4, 8), dict(causal=False, softcap=2.0), True, "f32"),  # GQA, softcap, alibi
    ((1, 4, 1, 6, 6, 4), dict(causal=True, window_size_left=2), False, "f32"),  # MQA sliding window
    ((1, 2, 1, 3, 7, 4), dict(causal=True, k_len=5, window_size_right=0), True, "f32"),  # k_len
    ((1, 1, 1, 4, 4, 4), dict(causal=False, window_size_left=0, window_size_right=0), False,
     "f32"),                                                                    # diagonal only
    ((1, 6, 2, 5, 5, 8), dict(causal=True, window_size_left=1, softcap=5.0, k_len=5), True,
     "f64"),
]


@pytest.mark.parametrize("shape,params,alibi,dtype", ATTN)
def test_flash_attn_kernel(rng, shape, params, alibi, dtype):
    arrs = _attn_inputs(rng, *shape, dtype, alibi)
    _check_kernel("FlashAttn", arrs, [dtype] * len(arrs), dict(params, softmax_scale=0.4), dtype)


@pytest.mark.parametrize("target", ["cpu:x86-64-v3", "cpu:x86-64-v4"])
@pytest.mark.parametrize("sq,params", [(8, dict(causal=False)), (19, dict(causal=True)),
                                       (21, dict(causal=True, window_size_left=5))])
def test_flash_attn_row_blocks_of_each_isa(rng, target, sq, params):
    # f32 kernels for 512-bit vectors run query rows in blocks of 8, the others
    # in blocks of 4 (fused_attention._ROWS_WIDE, _ROWS): whole blocks and the
    # rows left over, GQA, against the reference on both ISA levels
    from compiler.targets import parse_target
    from runtime.cpu_features import missing_cpu_features
    if missing_cpu_features(parse_target(target).features):
        pytest.skip(f"this CPU cannot run {target}")
    arrs = _attn_inputs(rng, 2, 4, 2, sq, sq + 3, 16, "f32")
    params = dict(params, softmax_scale=0.3)
    g, feed = _graph("FlashAttn", arrs, ["f32"] * 3, params)
    m = compile(g, target=target)
    assert [s.split("[")[0] for s in m.kernel_summary()] == ["FlashAttn"], m.kernel_summary()
    _close(m(**feed), _reference("FlashAttn", arrs, params), "f32", f"FlashAttn {target}")


def test_flash_attn_row_block_follows_the_vector_width():
    from compiler.codegen.lowering.conv_spatial import vector_bits
    inst = F.FusedInstance("FlashAttn", (("softmax_scale", 0.5), ("causal", False)),
                           (TensorType((1, 2, 16, 16), DType.F32),) * 3, (0, 1, 2, 3))
    texts = {}
    for bits in (256, 512):
        with vector_bits(bits):
            texts[bits] = F.linalg_text(inst, platform="cpu")
    # the score buffer holds one block's rows
    assert "tensor<4x?xf32>" in texts[256] and "tensor<8x?xf32>" not in texts[256]
    assert "tensor<8x?xf32>" in texts[512] and "tensor<4x?xf32>" not in texts[512]


@pytest.mark.parametrize("shape,params,alibi,dtype", [ATTN[0], ATTN[1], ATTN[3]])
def test_flash_attn_recipe(rng, shape, params, alibi, dtype):
    arrs = _attn_inputs(rng, *shape, dtype, alibi)
    _check_recipe("FlashAttn", arrs, [dtype] * len(arrs), dict(params, softmax_scale=0.4), dtype)


def test_flash_attn_lowering_ir(rng):
    """One function of linalg ops, tanh only with a softcap, no repeated K/V
    (GQA reads kv head h // g through the indexing map)."""
    arrs = _attn_inputs(rng, 1, 4, 2, 3, 3, 4, "f32")
    for cap in (None, 2.0):
        params = dict(softmax_scale=0.5, causal=True, softcap=cap)
        got, text = _run_lowering("FlashAttn", arrs, ["f32"] * 3, params)
        assert ("math.tanh" in text) == (cap is not None)
        assert "floordiv 2" in text and "tensor<1x4x3x4xf32>" in text
        _close(got, _reference("FlashAttn", arrs, params), "f32", f"FlashAttn softcap={cap}")


#: additive masks of the shapes exporters give (BERT's [B,1,1,Sk], a per-row
#: [B,1,Sq,Sk], a shared [1,1,Sq,Sk] or [Sq,Sk], per head [B,Hq,Sq,Sk]) for
#: q [2,4,5,D], k/v [2,2,7,D]
MASKS = [(2, 1, 1, 7), (2, 1, 5, 7), (1, 1, 5, 7), (5, 7), (2, 4, 5, 7)]


def _masked(rng, mshape, fill, dtype="f32", full_row=True):
    """q, k, v (GQA, 7 keys: one 16-key chunk, part of it past Sk) and an
    additive mask of ``mshape``: ``fill`` at random keys and (``full_row``)
    at every key of the mask's first row (a fully masked row), 0 elsewhere;
    key 0 is kept in every other row."""
    arrs = _attn_inputs(rng, 2, 4, 2, 5, 7, 8, dtype)
    m = np.where(rng.uniform(size=mshape) < 0.3, fill, 0.0)
    m[..., 0] = 0.0
    if full_row:
        m.reshape(-1, mshape[-1])[0] = fill
    return arrs + [from_compute(m, DType.parse(dtype))]


@pytest.mark.parametrize("fill", [-10000.0, float("-inf")])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mshape", MASKS)
def test_flash_attn_additive_mask_kernel(rng, mshape, causal, fill):
    """The additive mask operand (``fuel-fuse`` feeds it BERT's): the kernel
    (the host's target; ``FUELC_CPU=x86-64-v3`` runs AVX2) == the reference; a
    row whose keys are all ``-inf`` is 0 (FlashAttn's convention), one of
    ``-10000`` the softmax of its scores: there f32's ``s - 10000`` keeps s to
    ulp(10000) = 2^-10, as the unfused f32 Add does, against the f64
    reference's exact sum, hence the wider tolerance."""
    arrs = _masked(rng, mshape, fill)
    params = dict(softmax_scale=0.4, causal=causal)
    want = _reference("FlashAttn", arrs, params)
    if fill == float("-inf"):
        assert (want[0, 0, 0] == 0).all()               # (batch 0, head 0) row 0: fully masked
    assert np.isfinite(want).all()
    if fill == float("-inf"):
        _check_kernel("FlashAttn", arrs, ["f32"] * 4, params, "f32")
        return
    g, feed = _graph("FlashAttn", arrs, ["f32"] * 4, params)
    m = compile(g)
    assert m.kernel_summary() == ["FlashAttn[f32,f32,f32,f32,f32] (mlir-cpu-fused)"]
    np.testing.assert_allclose(_num(m(**feed)), want, rtol=0, atol=2e-3)


@pytest.mark.parametrize("mshape", [MASKS[1], MASKS[4]])
def test_flash_attn_additive_mask_kernel_f64(rng, mshape):
    """The f64 kernel with a mask (fully ``-10000`` rows exact in f64)."""
    arrs = _masked(rng, mshape, -10000.0, "f64")
    _check_kernel("FlashAttn", arrs, ["f64"] * 4, dict(softmax_scale=0.4, causal=True), "f64")


@pytest.mark.parametrize("mshape", [MASKS[0], MASKS[3]])
def test_flash_attn_additive_mask_recipe_and_lowering(rng, mshape):
    """The recipe (scores + the broadcast mask before the softmax: the
    unfused graph) and the generic lowering == the reference, f32 and f64.
    Without a fully masked row: where every key is ``-inf`` the recipe's
    Softmax, as the unfused graph's, computes 0/0 (FlashAttn's kernels 0)."""
    for dtype in ("f32", "f64"):
        arrs = _masked(rng, mshape, float("-inf"), dtype, full_row=False)
        params = dict(softmax_scale=0.4, causal=True)
        _check_recipe("FlashAttn", arrs, [dtype] * 4, params, dtype)
        got, _ = _run_lowering("FlashAttn", arrs, [dtype] * 4, params)
        _close(got, _reference("FlashAttn", arrs, params), dtype, "FlashAttn lowering")


@pytest.mark.parametrize("mshape,why", [((2, 1, 5, 1), "a key extent of 1"),
                                        ((2, 3, 5, 7), "extent 3 where the scores have 4"),
                                        ((7,), "alibi slopes must be [Hq]"),
                                        ((2, 2, 1, 5, 7), "rank 5 (2 to 4 wanted)")])
def test_flash_attn_mask_that_does_not_broadcast_is_refused(rng, mshape, why):
    """A typed error naming the mask and the scores' shape, not a mis-read."""
    g = Graph()
    ins = [g.input("q", (2, 4, 5, 8), "f32"), g.input("k", (2, 2, 7, 8), "f32"),
           g.input("v", (2, 2, 7, 8), "f32"), g.input("m", mshape, "f32")]
    with pytest.raises(GraphBuildError, match="FlashAttn") as e:
        fused("FlashAttn", *ins, softmax_scale=0.4)
    assert why in str(e.value)


def test_flash_attn_mask_with_k_len_is_refused():
    g = Graph()
    ins = [g.input("q", (1, 2, 2, 8), "f32"), g.input("k", (1, 2, 6, 8), "f32"),
           g.input("v", (1, 2, 6, 8), "f32"), g.input("m", (1, 1, 1, 6), "f32")]
    with pytest.raises(GraphBuildError, match="k_len"):
        fused("FlashAttn", *ins, softmax_scale=0.4, causal=True, k_len=4)


def _sdpa(q, k, v, scale, mask):
    """PyTorch's scaled_dot_product_attention as numpy, with its convention
    that a query row whose keys are all masked (``mask`` False) gives 0."""
    s = np.where(mask, scale * q @ np.swapaxes(k, -1, -2), -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0))
    den = e.sum(-1, keepdims=True)
    return np.where(den > 0, (e / np.where(den > 0, den, 1)) @ v, 0.0)


def test_flash_attn_fully_masked_rows_are_zero(rng):
    """k_len=2 with Sq=4: the first two query rows see no key under the causal
    band (offset -2): 0 there, as PyTorch's SDPA/FlashAttention, in the
    reference, the lowering, the fused kernel and the recipe."""
    arrs = _attn_inputs(rng, 1, 2, 1, 4, 4, 4, "f32")
    params = dict(softmax_scale=0.5, causal=True, k_len=2)
    q, k, v = (_num(a) for a in arrs)
    i, j = np.arange(4)[:, None], np.arange(2)[None, :]
    want = _sdpa(q, k[:, :, :2], v[:, :, :2], 0.5, j <= i - 2)
    assert (want[0, :, :2] == 0).all()
    _close(_reference("FlashAttn", arrs, params), want, "f32", "FlashAttn reference")
    got, _ = _run_lowering("FlashAttn", arrs, ["f32"] * 3, params)
    _close(got, want, "f32", "FlashAttn lowering")
    _check_kernel("FlashAttn", arrs, ["f32"] * 3, params, "f32")
    _check_recipe("FlashAttn", arrs, ["f32"] * 3, params, "f32")
    g, feed = _graph("FlashAttn", arrs, ["f32"] * 3, params)
    _close(interpret(g, feed)["y"], want, "f32", "FlashAttn interpreter")


def test_paged_attn_empty_context_is_zero(rng):
    b, hq, hkv, d, bs = 2, 2, 1, 4, 2
    q = _data(rng, (b, hq, 1, d), "f32")
    kc, vc = _data(rng, (4, bs, hkv, d), "f32"), _data(rng, (4, bs, hkv, d), "f32")
    bt = np.array([[0, 1], [2, 3]], np.uint32)
    cl = np.array([3, 0], np.uint32)
    arrs = [q, kc, vc, bt, cl]
    dts = ["f32", "f32", "f32", "u32", "u32"]
    params = dict(softmax_scale=0.5, block_size=bs)
    want = _reference("PagedAttn", arrs, params)
    assert (want[1] == 0).all() and np.isfinite(want).all()
    k0 = np.concatenate([kc[0], kc[1]])[:3, 0]  # batch 0: its first 3 keys, kv head 0
    v0 = np.concatenate([vc[0], vc[1]])[:3, 0]
    _close(want[0], _sdpa(_num(q[0]), k0[None], v0[None], 0.5, True), "f32", "PagedAttn ref")
    _check_recipe("PagedAttn", arrs, dts, params, "f32")
    g, feed = _graph("PagedAttn", arrs, dts, params)
    _close(compile(g)(**feed), want, "f32", "PagedAttn compiled")


def test_flash_attn_params_round_trip():
    """Graph params -> OpParams -> the instance the kernel compiles, for both arities."""
    q, kv = TensorType((1, 4, 3, 8), DType.F32), TensorType((1, 2, 6, 8), DType.F32)
    slopes = TensorType((4,), DType.F32)
    for types, params in [([q, kv, kv], dict(softmax_scale=0.5, causal=True, k_len=None)),
                          ([q, kv, kv, slopes], dict(softmax_scale=0.5, causal=False, k_len=4,
                                                     window_size_left=1, softcap=3.0))]:
        p = F.fused_op_params("FlashAttn", params, types)
        assert isinstance(p, P.FlashAttn) and p.hq == 4 and p.hkv == 2
        assert p.k_len == (0 if params["k_len"] is None else params["k_len"])  # 0: unset
        lays = [Layout.contiguous(t.shape) for t in types] + [Layout.contiguous(q.shape)]
        inst = F.instance_from_params("FlashAttn", p, [t.dtype for t in types] + [DType.F32],
                                      lays, len(types))
        got = dict(inst.params)
        for k, v in params.items():
            assert got[k] == v, (k, got[k], v)


# -- QMatMul --------------------------------------------------------------------
def _gguf_stream(rng, qt, n, k):
    nb = {"Q4_0": 18, "Q8_0": 34}[qt]
    blocks = n * k // 32
    raw = rng.integers(0, 256, (blocks, nb), dtype=np.uint8)
    d = (rng.standard_normal(blocks) * 0.05).astype(np.float16)
    d[0] = np.float16(3e-6)        # a subnormal scale
    d[-1] = -d[-1]                 # a negative scale
    raw[:, 0:2] = d.view(np.uint8).reshape(blocks, 2)
    return raw.reshape(-1).view("<u4").copy()


@pytest.mark.parametrize("qt,lead,m,n,k", [("Q4_0", (), 3, 4, 64), ("Q4_0", (2,), 2, 6, 32),
                                           ("Q8_0", (), 1, 4, 96), ("Q8_0", (2,), 3, 4, 64)])
def test_qmatmul(rng, qt, lead, m, n, k):
    a = _data(rng, lead + (m, k), "f32")
    w = _gguf_stream(rng, qt, n, k)
    _check_kernel("QMatMul", [a, w], ["f32", "u32"], dict(quant_type=qt, k=k, n=n), "f32")


@pytest.mark.parametrize("qt", ["Q4_0", "Q8_0"])
def test_qmatmul_recipe(rng, qt):
    a = _data(rng, (2, 3, 64), "f32")
    _check_recipe("QMatMul", [a, _gguf_stream(rng, qt, 4, 64)], ["f32", "u32"],
                  dict(quant_type=qt, k=64, n=4), "f32")


def test_qmatmul_unsupported_quant_types_are_typed_errors():
    """Q2_K has no decoder: the shape rule refuses it, and so does the kernel's
    params mapping (the per-format tests are in test_quant_formats.py)."""
    from compiler.errors import UnsupportedOpError
    from compiler.graph.kernel_params import KernelParamsError
    types = [TensorType((2, 256), DType.F32), TensorType((21,), DType.U32)]
    with pytest.raises(UnsupportedOpError, match="Q2_K is not supported yet"):
        REG["QMatMul"].infer(types, dict(quant_type="Q2_K", k=256, n=1))
    with pytest.raises(KernelParamsError, match="not Q2_K"):
        F.fused_op_params("QMatMul", dict(quant_type="Q2_K", k=256, n=1), types)


# -- Nf4Matmul ------------------------------------------------------------------
@pytest.mark.parametrize("lead,m,n,k,bs,dtype", [((), 3, 4, 128, 64, "f32"),
                                                 ((2,), 2, 3, 64, 32, "f32"),
                                                 ((), 2, 5, 64, 16, "f64"),
                                                 ((), 4, 3, 64, 64, "f16")])
def test_nf4_matmul(rng, lead, m, n, k, bs, dtype):
    act = _data(rng, lead + (m, k), dtype)
    packed = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
    absmax = rng.uniform(0.1, 2.0, (n, k // bs)).astype(np.float32)
    arrs, dts = [act, packed, absmax], [dtype, "u8", "f32"]
    _check_kernel("Nf4Matmul", arrs, dts, dict(block_size=bs), dtype)


def test_nf4_matmul_recipe(rng):
    act = _data(rng, (2, 64), "f32")
    packed = rng.integers(0, 256, (3, 32), dtype=np.uint8)
    absmax = rng.uniform(0.1, 2.0, (3, 2)).astype(np.float32)
    _check_recipe("Nf4Matmul", [act, packed, absmax], ["f32", "u8", "f32"], dict(block_size=32),
                  "f32")


# -- AwqMatmul --------------------------------------------------------------------
def _awq_inputs(rng, lead, m, n, k, gs, dtype):
    act = _data(rng, lead + (m, k), dtype)
    qw = rng.integers(0, 2 ** 32, (k, n // 8), dtype=np.uint64).astype(np.uint32)
    qz = rng.integers(0, 2 ** 32, (k // gs, n // 8), dtype=np.uint64).astype(np.uint32)
    sc = rng.uniform(0.01, 0.1, (k // gs, n)).astype(np.float32)
    return [act, qw, qz, sc], [dtype, "u32", "u32", "f32"]


@pytest.mark.parametrize("lead,m,n,k,gs,dtype", [((), 3, 16, 128, 64, "f32"),
                                                 ((2,), 2, 8, 64, 32, "f32"),
                                                 ((), 2, 8, 32, 8, "bf16")])
def test_awq_matmul(rng, lead, m, n, k, gs, dtype):
    arrs, dts = _awq_inputs(rng, lead, m, n, k, gs, dtype)
    params = dict(group_size=gs)
    want = _reference("AwqMatmul", arrs, params)
    got, _ = _run_lowering("AwqMatmul", arrs, dts, params)
    _close(got, want, dtype, "AwqMatmul lowering")
    if REG["AwqMatmul"].op_kind is not None:     # the kernel is registered: through compile(g)
        _check_kernel("AwqMatmul", arrs, dts, params, dtype)


def test_awq_matmul_recipe(rng):
    arrs, dts = _awq_inputs(rng, (), 2, 8, 64, 32, "f32")
    _check_recipe("AwqMatmul", arrs, dts, dict(group_size=32), "f32")


def test_awq_unpack_order_is_logical(rng):
    """One nonzero nibble per word: physical nibble p of qweight[k, 0] must
    land in column [0,2,4,6,1,3,5,7][p] of row k (a wrong order moves the 1)."""
    n, k, gs = 8, 8, 8
    act = np.eye(k, dtype=np.float32)
    for p in range(8):
        qw = np.zeros((k, n // 8), np.uint32)
        qw[0, 0] = np.uint32(1 << (4 * p))
        qz = np.zeros((1, 1), np.uint32)
        sc = np.ones((1, n), np.float32)
        got, _ = _run_lowering("AwqMatmul", [act, qw, qz, sc], ["f32", "u32", "u32", "f32"],
                               dict(group_size=gs))
        want = np.zeros((k, n), np.float32)
        want[0, (0, 2, 4, 6, 1, 3, 5, 7)[p]] = 1.0
        np.testing.assert_array_equal(got, want)


# -- Conv2D -------------------------------------------------------------------------
CONV = [
    ((1, 2, 5, 5), (3, 2, 3, 3), dict(stride=(1, 1), padding=(1, 1), groups=1), False, "f32"),
    ((2, 4, 7, 6), (6, 2, 3, 2), dict(stride=(2, 1), padding=(0, 1), groups=2), True, "f32"),
    ((1, 3, 6, 6), (4, 3, 2, 2), dict(stride=(2, 2), padding=(0, 0), groups=1), True, "f64"),
    ((1, 4, 5, 5), (4, 1, 3, 3), dict(stride=(1, 1), padding=(1, 1), groups=4), False, "f32"),
    ((1, 2, 9, 8), (3, 2, 3, 3), dict(stride=(1, 1), padding=(0, 0), groups=1,
                                      dilation=(2, 3)), True, "f32"),
    ((2, 4, 10, 9), (4, 2, 2, 3), dict(stride=(2, 1), padding=(2, 1), groups=2,
                                       dilation=(3, 2)), False, "f64"),
    # 5x5 taps (two Concats), stride 2, dilation: the column then the row shifts
    ((1, 3, 13, 12), (4, 3, 5, 5), dict(stride=(2, 2), padding=(2, 1), groups=1,
                                        dilation=(1, 2)), True, "f32"),
    # patches (kernel = stride), an input not a multiple of the patch
    ((2, 3, 9, 10), (5, 3, 4, 4), dict(stride=(4, 4), padding=(0, 0), groups=1), True, "f32"),
    ((1, 3, 17, 16), (4, 3, 4, 4), dict(stride=(4, 4), padding=(0, 0), groups=1), True, "f32"),
    # 1x1 with stride 2: one tap
    ((1, 4, 7, 7), (6, 4, 1, 1), dict(stride=(2, 2), padding=(0, 0), groups=1), False, "f64"),
    # 2x2 output pixels, 40 channels, 2 images: the recipe multiplies w @ the
    # images' columns side by side (one image: cols^T @ w^T)
    ((1, 8, 4, 4), (40, 8, 3, 3), dict(stride=(2, 2), padding=(1, 1), groups=1), True, "f32"),
    ((2, 8, 4, 4), (40, 8, 3, 3), dict(stride=(2, 2), padding=(1, 1), groups=1), True, "f32"),
    # ... written by one Concat of the taps, each viewed [cin, 1, n, ho, wo]
    ((3, 6, 3, 3), (24, 6, 3, 2), dict(stride=(1, 1), padding=(1, 1), groups=1,
                                       dilation=(1, 2)), False, "f64"),
    # stride 1, groups 1: the direct kernel; channel and pixel counts that leave
    # register-tile remainders (13 = 8 + 5 / 6 + 6 + 1 channels), several images
    ((3, 5, 9, 11), (13, 5, 3, 3), dict(stride=(1, 1), padding=(1, 1), groups=1), True, "f32"),
    ((2, 7, 12, 10), (20, 7, 5, 3), dict(stride=(1, 1), padding=(2, 1), groups=1,
                                         dilation=(1, 2)), False, "f64"),
    ((1, 6, 7, 7), (9, 6, 1, 1), dict(stride=(1, 1), padding=(1, 1), groups=1), True, "f32"),
    # large enough to be split over threads: by output channels, then by images
    ((1, 8, 48, 48), (32, 8, 3, 3), dict(stride=(1, 1), padding=(1, 1), groups=1), True, "f32"),
    ((2, 8, 48, 48), (32, 8, 3, 3), dict(stride=(1, 1), padding=(0, 0), groups=1), False, "f32"),
    # depthwise (groups = Cin = Cout): the taps' fused Mul/Add chain over flat
    # planes; strides split the plane into phases; 5x5 (25 taps: several groups)
    ((2, 6, 9, 7), (6, 1, 3, 3), dict(stride=(1, 1), padding=(1, 1), groups=6), True, "f32"),
    ((1, 5, 11, 10), (5, 1, 3, 3), dict(stride=(2, 2), padding=(1, 1), groups=5), True, "f64"),
    ((1, 4, 9, 12), (4, 1, 5, 5), dict(stride=(1, 2), padding=(2, 2), groups=4,
                                       dilation=(1, 2)), False, "f32"),
    ((1, 3, 8, 8), (3, 1, 2, 3), dict(stride=(3, 2), padding=(0, 1), groups=3), True, "f32"),
]


def _numpy_conv(x, w, b, stride, padding, dilation, groups):
    """Cross-correlation from its definition: y[n,o,i,j] = b[o] + Σ_{c,ky,kx}
    xpad[n, g·Cin/g + c, i·sh + ky·dh, j·sw + kx·dw] · w[o,c,ky,kx]."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, cin, hp, wp = xp.shape
    cout, cpg, kh, kw = w.shape
    ho, wo = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, cout, ho, wo)) + (0 if b is None else b[None, :, None, None])
    for o in range(cout):
        g0 = (o // (cout // groups)) * cpg
        for i in range(ho):
            for j in range(wo):
                win = xp[:, g0:g0 + cpg, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                         j * sw:j * sw + dw * (kw - 1) + 1:dw]
                y[:, o, i, j] += (win * w[o]).sum(axis=(1, 2, 3))
    return y


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", [
    ((1, 3, 11, 10), (2, 3, 3, 3), 1, 0, 2, 1),
    ((2, 2, 12, 9), (4, 1, 3, 2), (2, 1), (1, 2), (2, 3), 2),
    ((1, 1, 7, 7), (1, 1, 2, 2), 3, 1, (3, 1), 1),
    ((1, 3, 12, 11), (3, 1, 3, 3), (2, 3), (2, 1), (2, 3), 3),     # depthwise
])
def test_conv2d_dilation_matches_numpy(rng, xs, ws, stride, padding, dilation, groups):
    """The builder's ``dilation`` through the fused kernel and through the
    recipe (no kernel) against a numpy dilated convolution."""
    x, w, b = (rng.standard_normal(s) for s in (xs, ws, (ws[0],)))
    pair = lambda v: (v, v) if isinstance(v, int) else v
    want = _numpy_conv(x, w, b, pair(stride), pair(padding), pair(dilation), groups)
    g = Graph()
    xi, wi, bi = g.input("x", xs, "f64"), g.input("w", ws, "f64"), g.input("b", (ws[0],), "f64")
    g.output(conv2d(xi, wi, bi, stride=stride, padding=padding, groups=groups,
                    dilation=dilation), "y")
    m = compile(g)
    fused_kernel = m.kernel_summary() == ["Conv2D[f64,f64,f64,f64] (mlir-cpu-fused)"]
    # groups = 1, stride 1: the direct kernel; other groups = 1: im2col + MatMul;
    # depthwise: the direct kernel at stride 1 or 2, else the taps' Mul/Add chain
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)
    dwise = groups == xs[1] == ws[0]
    direct = direct_conv(groups, pair(stride), ws[2:], pair(padding), pair(dilation)) or \
        dwise and direct_depthwise(pair(stride), pair(dilation))
    assert fused_kernel == (direct or groups != 1 and not dwise), m.kernel_summary()
    np.testing.assert_allclose(m(x=x, w=w, b=b), want, rtol=1e-12, atol=1e-12)
    mr = compile(g, pipeline="base-map")
    assert not any(k.startswith("Conv2D") for k in mr.kernel_summary())
    np.testing.assert_allclose(mr(x=x, w=w, b=b), want, rtol=1e-12, atol=1e-12)


def test_conv2d_dilation_errors_name_the_rule():
    g = Graph()
    x, w = g.input("x", (1, 1, 5, 5), "f32"), g.input("w", (1, 1, 3, 3), "f32")
    with pytest.raises(GraphBuildError, match=r"Conv2D.*dilation 3x3: extent 7x7.*5x5"):
        conv2d(x, w, dilation=3)
    with pytest.raises(GraphBuildError, match=r"Conv2D.*dilation must be >= 1"):
        conv2d(x, w, dilation=(1, 0))


@pytest.mark.parametrize("xs,ws,params,bias,dtype", CONV)
def test_conv2d(rng, xs, ws, params, bias, dtype):
    arrs = [_data(rng, xs, dtype), _data(rng, ws, dtype)]
    if bias:
        arrs.append(_data(rng, (ws[0],), dtype))
    depthwise = params["groups"] == xs[1] == ws[0]
    direct = direct_conv(params["groups"], params["stride"], ws[2:], params["padding"],
                         params.get("dilation", (1, 1))) or depthwise and dtype in (
        "f32", "f64") and direct_depthwise(params["stride"], params.get("dilation", (1, 1)))
    if params["groups"] == 1 and few_pixels({"dilation": (1, 1), **params},
                                            [TensorType(xs, DType.parse(dtype)),
                                             TensorType(ws, DType.parse(dtype))]):
        direct = False   # a few pixels per image: the images' pixels are one matmul's columns
    if params["groups"] != 1 and not depthwise or direct:
        _check_kernel("Conv2D", arrs, [dtype] * len(arrs), params, dtype)
        return
    # other groups = 1 and depthwise: compile() takes the recipe (im2col + MatMul,
    # or the taps' fused chain; the kernel's ``serves`` predicate), and the fused
    # kernel's lowering still computes it.
    g, feed = _graph("Conv2D", arrs, [dtype] * len(arrs), params)
    summary = compile(g).kernel_summary()
    assert not any(s.startswith("Conv2D[") for s in summary), summary
    want = "mlir-cpu-runtime-fused" if depthwise else "MatMul["
    assert any(want in s for s in summary), summary
    _close(compile(g)(**feed), _reference("Conv2D", arrs, params), dtype, "Conv2D via its recipe")
    got, _ = _run_lowering("Conv2D", arrs, [dtype] * len(arrs), params)
    _close(got, _reference("Conv2D", arrs, params), dtype, "Conv2D kernel")


@pytest.mark.parametrize("xs,ws,params,bias,dtype", CONV)
def test_conv2d_recipe(rng, xs, ws, params, bias, dtype):
    arrs = [_data(rng, xs, dtype), _data(rng, ws, dtype)]
    if bias:
        arrs.append(_data(rng, (ws[0],), dtype))
    _check_recipe("Conv2D", arrs, [dtype] * len(arrs), params, dtype)


def test_conv2d_named_op_for_groups_1_generic_for_groups(rng):
    """The target-neutral lowering: the named conv for groups = 1, a generic
    for groups > 1."""
    x = _data(rng, (1, 4, 4, 4), "f32")
    for g, named in ((1, True), (2, False)):
        w = _data(rng, (2, 4 // g, 3, 3), "f32")
        got, text = _run_lowering("Conv2D", [x, w], ["f32", "f32"],
                                  dict(stride=(1, 1), padding=(1, 1), groups=g))
        assert ("linalg.conv_2d_nchw_fchw" in text) == named
        _close(got, _reference("Conv2D", [x, w], dict(stride=(1, 1), padding=(1, 1), groups=g)),
               "f32", f"Conv2D groups={g}")


def test_registration_facts():
    from compiler.targets import parse_target
    specs = F.fused_specs()
    for name, precision in (("FlashAttn", F.ATTN), ("QMatMul", F.QMATMUL),
                            ("Nf4Matmul", F.QMATMUL), ("Conv2D", F.CONV2D)):
        s = specs[name]
        claim = precision.for_target(parse_target("cpu"))
        assert s.precision is precision and claim.bit_stable_on_same_hardware
        assert claim.max_ulp is None and claim.max_relative is None
    assert specs["FlashAttn"].keys(DType.F32) == [(DType.F32,) * 4, (DType.F32,) * 5]
    assert specs["Conv2D"].keys(DType.F64) == [(DType.F64,) * 3, (DType.F64,) * 4,
                                              (DType.F64,) * 5]   # + bias + residual
    assert specs["QMatMul"].keys(DType.F32) == [(DType.F32, DType.U32, DType.F32)]


# -- direct kernel calls: strided inputs (the strided_input claim) ------------------------
def _call(kind, dtypes, ins, out_shape, params):
    from compiler.targets import table_for
    from runtime.keys import BackendId
    from runtime.storage import Storage
    entry = table_for("cpu").lookup_entry(kind, dtypes, BackendId.CPU)
    assert entry.kernel_source == "mlir-cpu-fused" and entry.caps.strided_input
    out = Storage.zeros(dtypes[-1], int(np.prod(out_shape)))
    entry.kernel([s for s, _ in ins], [out], [l for _, l in ins] + [Layout.contiguous(out_shape)],
                 params)
    return out.data.view(dtypes[-1].storage_numpy)[:int(np.prod(out_shape))].reshape(out_shape)


def test_strided_inputs(rng):
    """q stored [B,Sq,Hq,D] and read as [B,Hq,Sq,D]; x stored NHWC and read as NCHW."""
    from runtime.opkind import OpKind
    from runtime.storage import Storage
    q_bshd = rng.standard_normal((1, 3, 4, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
    v = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
    sq, lq = Storage.from_numpy(q_bshd)
    sk, lk = Storage.from_numpy(k)
    sv, lv = Storage.from_numpy(v)
    q = np.ascontiguousarray(q_bshd.transpose(0, 2, 1, 3))
    params = dict(softmax_scale=0.3, causal=True)
    p = F.fused_op_params("FlashAttn", params,
                          [TensorType(a.shape, DType.F32) for a in (q, k, v)])
    got = _call(OpKind.FlashAttn, (DType.F32,) * 4,
                [(sq, lq.permute((0, 2, 1, 3))), (sk, lk), (sv, lv)], q.shape, p)
    _close(got, _reference("FlashAttn", [q, k, v], params), "f32", "strided FlashAttn")

    x_nhwc = rng.standard_normal((2, 5, 5, 4)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    sx, lx = Storage.from_numpy(x_nhwc)
    sw, lw = Storage.from_numpy(w)
    x = np.ascontiguousarray(x_nhwc.transpose(0, 3, 1, 2))
    cparams = dict(stride=(2, 1), padding=(1, 0), groups=2)
    types = [TensorType(x.shape, DType.F32), TensorType(w.shape, DType.F32)]
    want = _reference("Conv2D", [x, w], cparams)
    got = _call(OpKind.Conv2D, (DType.F32,) * 3, [(sx, lx.permute((0, 3, 1, 2))), (sw, lw)],
                want.shape, F.fused_op_params("Conv2D", cparams, types))
    _close(got, want, "f32", "strided Conv2D")


def test_awq_kernel_through_the_cpu_pipeline(rng):
    """The AWQ instance compiled by the family's CPU pipeline (llvmlite object),
    called on strided descriptors: also covered while the entry has no OpKind."""
    from compiler.codegen.memref import descriptor_from_storage
    from runtime.storage import Storage
    arrs, dts = _awq_inputs(rng, (2,), 3, 16, 64, 32, "f32")
    params = dict(group_size=32, split_k_iters=1)
    types = tuple(TensorType(a.shape, DType.parse(d)) for a, d in zip(arrs, dts))
    fn = F.warm_instance(F.FusedInstance("AwqMatmul", tuple(sorted(params.items())), types),
                         target="cpu:host")
    want = _reference("AwqMatmul", arrs, params)
    out = Storage.zeros(DType.F32, want.size)
    ins = [Storage.from_numpy(a) for a in arrs]
    fn(*[descriptor_from_storage(s, l) for s, l in ins],
       descriptor_from_storage(out, Layout.contiguous(want.shape)))
    got = out.data.view(np.float32)[:want.size].reshape(want.shape)
    _close(got, want, "f32", "AwqMatmul CPU-pipeline kernel")


@pytest.mark.parametrize("xs,ws,groups,stride,padding", [
    ((1, 32, 48, 48), (32, 2, 3, 3), 16, 1, 1),      # (depthwise takes the recipe)
    ((1, 12, 150, 150), (12, 2, 3, 3), 6, 2, 1),     # two in / two out channels per group
])
def test_grouped_conv_splits_by_whole_groups(rng, xs, ws, groups, stride, padding):
    """A grouped call large enough to split runs as tiles of whole groups (each
    its own instance with fewer groups): the same values on 1, 2 and 3
    threads, equal to the reference."""
    from compiler.codegen import parallel
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (xs, ws, (ws[0],)))
    g = Graph()
    xi = g.input("x", xs, "f32")
    g.output(conv2d(xi, g.constant(w, name="w"), g.constant(b, name="b"), stride=stride,
                    padding=padding, groups=groups), "y")
    want = _reference("Conv2D", [x, w, b], dict(stride=(stride, stride),
                                                padding=(padding, padding), groups=groups))
    outs = []
    try:
        for threads in (1, 2, 3):
            parallel.set_num_threads(threads)
            m = compile(g)
            assert m.kernel_summary() == ["Conv2D[f32,f32,f32,f32] (mlir-cpu-fused)"]
            outs.append(m(x=x))
    finally:
        parallel.set_num_threads(None)
    _close(outs[0], want, "f32", "grouped Conv2D")
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    from compiler.codegen.fused import FAMILY, _conv_group_tiles
    from runtime.layout import Layout
    lays = [Layout.contiguous(s) for s in (xs, ws, (ws[0],))]
    out_shape = (xs[0], ws[0], (xs[2] + 2 * padding - 3) // stride + 1,
                 (xs[3] + 2 * padding - 3) // stride + 1)
    tiles = _conv_group_tiles(dict(groups=groups), lays + [Layout.contiguous(out_shape)], 3, 2)
    assert tiles is not None and len(tiles) == 2
    cpg = xs[1] // groups
    assert all(t[0].shape[1] % cpg == 0 and t[0].shape[1] == t[3].shape[1] for t in tiles)


def test_flash_attn_builder_mask(rng):
    """``flash_attn(..., mask=m)`` passes the additive mask as the 4th input
    (kernel == reference); a mask and alibi slopes together are refused."""
    from compiler import flash_attn
    arrs = _masked(rng, (2, 1, 1, 7), -10000.0, full_row=False)
    g = Graph()
    ins = [g.input(f"in{i}", a.shape, "f32") for i, a in enumerate(arrs)]
    g.output(flash_attn(*ins[:3], causal=False, scale=0.4, mask=ins[3]), "y")
    feed = {f"in{i}": a for i, a in enumerate(arrs)}
    _close(compile(g)(**feed), _reference("FlashAttn", arrs, dict(softmax_scale=0.4)), "f32",
           "flash_attn(mask=)")
    with pytest.raises(ValueError, match="not both"):
        flash_attn(*ins[:3], mask=ins[3], alibi_slopes=g.input("a", (4,), "f32"))
