"""The mlir-cpu-fused kernels (compiler/codegen/fused.py + lowering/fused_*.py).

For every lowered fused op, over several shapes, params and dtypes:
registry ``reference`` == the recipe compiled through primitives
(``pipeline=RECIPE``) == the fused kernel compiled by ``compile(g)``,
and the plan really runs the fused kernel. Tolerances (vs the f64-accumulated
reference, after rounding to the dtype): f64 1e-12, f32 2e-6·scale, f16
2e-3, bf16 1.6e-2 (relative, with the same absolute floor). Plus: the params
mapping round trip and its refusals, the registration facts, strided input
layouts, masked (-inf) softmax rows, ignore_index / out-of-range targets, and
primitive-spelled graphs fused by the default pipeline.
"""
import math

import numpy as np
import pytest

from compiler import compile, interpret
from compiler.codegen import fused as F
from compiler.errors import GraphBuildError, UnsupportedOpError
from compiler.graph import Graph
from compiler.graph.kernel_params import KernelParamsError
from compiler.graph.numerics import dtype_of, from_compute, to_compute
from compiler.graph.opdef import TensorType
from compiler.registry import default_registry
from compiler.registry.builders import fused, rms_norm
from compiler.targets import parse_target, table_for
from runtime import params as P
from runtime.cost import default_cost_for_op_kind
from runtime.dtype import DType, from_storage
from runtime.keys import BackendId
from runtime.layout import Layout
from runtime.opkind import OpKind
from runtime.storage import Storage

#: every fused op to its recipe ("no-fusion" keeps fused ops the table has kernels for)
RECIPE = "base-map"
TOL = {"f64": 1e-12, "f32": 2e-6, "f16": 2e-3, "bf16": 1.6e-2}
REG = default_registry()


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def _data(rng, shape, dtype, scale=1.0):
    x = rng.standard_normal(shape) * scale
    return from_compute(x, DType.parse(dtype))


def _api(a):
    """A storage array as compiled modules take it (bf16 as ml_dtypes.bfloat16)."""
    return from_storage(a, dtype_of(a))


def _num(a):
    return to_compute(np.asarray(a), wide=True).astype(np.float64)


def _close(got, want, dtype, what, scale=1.0):
    got, want = _num(got), _num(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    tol = TOL[dtype] * scale
    err = np.abs(got - want)
    bound = tol * (1.0 + np.abs(want))
    bad = ~((err <= bound) | (np.isnan(got) & np.isnan(want)))
    assert not bad.any(), (f"{what} ({dtype}): max err {np.nanmax(err):.3g} > tol {tol:.1g}; "
                           f"first bad at {np.argwhere(bad)[0]}: {got[bad][0]} vs {want[bad][0]}")


def _graph(name, specs, params):
    g = Graph()
    ins = [g.input(f"in{k}", shape, dt) for k, (shape, dt) in enumerate(specs)]
    g.output(fused(name, *ins, **params), "y")
    return g


def _check_op(name, specs, params, arrays, dtype, *, recipe=True, scale=1.0):
    """reference == fused kernel (== recipe through primitives)."""
    kind = REG[name].op_kind
    g = _graph(name, specs, params)
    feeds = {f"in{k}": _api(a) for k, a in enumerate(arrays)}
    ref = REG[name].reference(arrays, params)
    m = compile(g)
    summary = m.kernel_summary()
    assert len(summary) == 1 and summary[0].startswith(f"{kind.name}[") \
        and summary[0].endswith("(mlir-cpu-fused)"), summary
    got = m(**feeds)
    assert got.dtype == _api(ref).dtype
    _close(got, ref, dtype, f"{name} fused kernel vs reference", scale)
    if recipe:
        mr = compile(g, pipeline=RECIPE)
        assert not any(s.startswith(f"{kind.name}[") for s in mr.kernel_summary())
        _close(mr(**feeds), ref, dtype, f"{name} recipe vs reference", scale)
        _close(got, mr(**feeds), dtype, f"{name} fused kernel vs recipe", 2 * scale)
    return got


# -- per-op numerics ---------------------------------------------------------------
ROW_SHAPES = [(7,), (3, 16), (2, 5, 33)]


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_softmax(rng, shape, dtype):
    x = _data(rng, shape, dtype, scale=4.0)
    _check_op("SoftmaxLastDim", [(shape, dtype)], {}, [x], dtype, recipe=dtype in ("f32", "f64"))


def test_softmax_masked_rows_and_large_logits(rng):
    """A -inf row prefix (causal masks) must not poison the row sum;
    huge logits must not overflow (max subtraction)."""
    x = rng.standard_normal((4, 9)).astype(np.float32) * 3
    x[0, :4] = -np.inf
    x[1, :] = -np.inf
    x[1, 8] = 0.5
    x[2] += 1e4
    got = _check_op("SoftmaxLastDim", [((4, 9), "f32")], {}, [x], "f32", recipe=False)
    np.testing.assert_allclose(got[1], np.eye(9, dtype=np.float32)[8])
    assert np.isfinite(got).all()


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16"])
@pytest.mark.parametrize("shape,eps", [((5,), 1e-6), ((4, 32), 1e-5), ((2, 3, 17), 0.1)])
def test_rms_norm(rng, shape, eps, dtype):
    x = _data(rng, shape, dtype)
    _check_op("RmsNormLastDim", [(shape, dtype)], {"eps": eps}, [x], dtype,
              recipe=dtype != "bf16")


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("shape", [(5,), (4, 32), (2, 3, 17)])
def test_rms_norm_with_weight(rng, shape, dtype):
    arrs = [_data(rng, shape, dtype), _data(rng, shape[-1:], dtype)]
    _check_op("RmsNormLastDim", [(a.shape, dtype) for a in arrs], {"eps": 1e-6}, arrs, dtype,
              recipe=dtype != "bf16")


def test_rms_norm_weight_is_fused_and_checked(rng):
    """The builder's weight and a ``* w`` spelled after the op both end in
    the one kernel; a weight of the wrong shape or dtype, or a third input,
    is refused naming the op and the operand."""
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, 16).astype(np.float32)
    for spelled in (False, True):
        g = Graph()
        xi, wi = g.input("x", x.shape, "f32"), g.input("w", w.shape, "f32")
        y = fused("RmsNormLastDim", xi, eps=1e-6) * wi if spelled else rms_norm(xi, wi, eps=1e-6)
        g.output(y, "y")
        m = compile(g)
        assert m.kernel_summary() == ["RmsNormLastDim[f32,f32,f32] (mlir-cpu-fused)"]
        x64 = x.astype(np.float64)
        want = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6) * w
        np.testing.assert_allclose(m(x=x, w=w), want, rtol=3e-6, atol=1e-7)
    g = Graph()
    x = g.input("x", (4, 8), "f32")
    with pytest.raises(GraphBuildError, match=r"RmsNormLastDim.*weight must be \[D\] = \[8\]"):
        fused("RmsNormLastDim", x, g.input("w", (4,), "f32"), eps=1e-6)
    with pytest.raises(GraphBuildError, match=r"RmsNormLastDim.*weight must be \[D\].*dtype f32"):
        fused("RmsNormLastDim", x, g.input("w2", (8,), "f16"), eps=1e-6)
    with pytest.raises(GraphBuildError, match=r"RmsNormLastDim.*takes 1 to 2 input"):
        fused("RmsNormLastDim", x, g.input("w3", (8,), "f32"), g.input("w4", (8,), "f32"), eps=1e-6)


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16"])
@pytest.mark.parametrize("shape,eps", [((6,), 1e-5), ((4, 32), 1e-6), ((2, 3, 17), 0.5)])
def test_layer_norm(rng, shape, eps, dtype):
    x = (_num(_data(rng, shape, "f64")) + 100.0)  # offset: a one-pass E[x²]-E[x]² would cancel
    x = from_compute(x, DType.parse(dtype))
    _check_op("LayerNormLastDim", [(shape, dtype)], {"eps": eps}, [x], dtype,
              recipe=dtype != "f16", scale=(50 if dtype == "f32" else 1))


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("shape,n_affine", [((6,), 2), ((4, 32), 1), ((2, 3, 17), 2)])
def test_layer_norm_with_weight_and_bias(rng, shape, n_affine, dtype):
    arrs = [_data(rng, shape, dtype)] + [_data(rng, shape[-1:], dtype)
                                         for _ in range(n_affine)]
    specs = [(a.shape, dtype) for a in arrs]
    _check_op("LayerNormLastDim", specs, {"eps": 1e-5}, arrs, dtype, recipe=dtype != "bf16")


def test_f16_layer_norm_affine_rounds_once():
    """f16 LayerNorm with weight and bias against an f64 numpy LayerNorm on
    N(0,1) rows of width 1024: the affine is computed in f32 inside the op and
    rounded once, so every output is within half an f16 ulp (+ f32 noise) of
    the exact value -- within 1e-3 wherever |y| < 4, PyTorch's f16 level --
    where separate f16 Mul/Add lose whole ulps. Kernel and recipe alike."""
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s).astype(np.float16) for s in ((16, 1024), (1024,), (1024,)))
    xd = x.astype(np.float64)
    mu = xd.mean(-1, keepdims=True)
    norm = (xd - mu) / np.sqrt(((xd - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    want = norm * w.astype(np.float64) + b.astype(np.float64)
    ulp = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
    separate = ((norm.astype(np.float16) * w).astype(np.float16) + b).astype(np.float64)
    assert (np.abs(separate - want) / ulp).max() > 2  # what the old builder's Mul/Add gave
    g = Graph()
    xi, wi, bi = (g.input(n, a.shape, "f16") for n, a in (("x", x), ("w", w), ("b", b)))
    g.output(xi.layer_norm(wi, bi, eps=1e-5), "y")
    m = compile(g)
    assert m.kernel_summary() == ["LayerNormLastDim[f16,f16,f16,f16] (mlir-cpu-fused)"]
    mr = compile(g, pipeline=RECIPE)  # no kernel: the recipe, also f32 inside
    assert not any(k.startswith("LayerNormLastDim") for k in mr.kernel_summary())
    for what, mod in (("kernel", m), ("recipe", mr)):
        got = mod(x=x, w=w, b=b)
        assert got.dtype == np.float16
        err = np.abs(got.astype(np.float64) - want)
        assert (err / ulp).max() <= 0.51, what
        assert err[np.abs(want) < 4].max() <= 1e-3, what


def test_layer_norm_affine_inputs_are_checked():
    g = Graph()
    x = g.input("x", (4, 8), "f32")
    with pytest.raises(GraphBuildError, match=r"LayerNormLastDim.*weight must be \[D\] = \[8\]"):
        x.layer_norm(g.input("w", (4,), "f32"))
    with pytest.raises(GraphBuildError, match=r"LayerNormLastDim.*bias must be \[D\].*dtype f32"):
        x.layer_norm(g.input("w2", (8,), "f32"), g.input("b", (8,), "f16"))
    with pytest.raises(GraphBuildError, match=r"LayerNormLastDim.*takes 1 to 3 input"):
        fused("LayerNormLastDim", x, x, x, x, eps=1e-5)


LINEAR = [((4, 8), (8, 6)), ((1, 3), (3, 1)), ((2, 5, 7), (2, 7, 3)), ((4, 3, 5), (2, 5, 6)),
          ((2, 2, 3, 4), (2, 1, 4, 5))]


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16"])
@pytest.mark.parametrize("sa,sb", LINEAR)
def test_fused_linear(rng, sa, sb, dtype):
    a, b, bias = _data(rng, sa, dtype), _data(rng, sb, dtype), _data(rng, (sb[-1],), dtype)
    _check_op("FusedLinear", [(sa, dtype), (sb, dtype), ((sb[-1],), dtype)], {},
              [a, b, bias], dtype, recipe=dtype != "bf16", scale=4)


def test_fused_linear_mixed_f32_bf16(rng):
    a, b, bias = _data(rng, (3, 8), "f32"), _data(rng, (8, 4), "bf16"), _data(rng, (4,), "f32")
    # (f32, bf16, f32) -> f32 is a generated cpu kernel (the product extends the bf16
    # operand on its own): no fallback, not decomposed
    g = _graph("FusedLinear", [((3, 8), "f32"), ((8, 4), "bf16"), ((4,), "f32")], {})
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = compile(g, strict=True)
    assert [s.split(" (")[0] for s in m.kernel_summary()] == ["FusedLinear[f32,bf16,f32,f32]"], \
        m.kernel_summary()
    _close(m(in0=a, in1=_api(b), in2=bias), REG["FusedLinear"].reference([a, b, bias], {}), "f32",
           "mixed linear", 4)


ROPE = [((6,), (6,)), ((5, 8), (5, 8)), ((2, 3, 5, 16), (5, 16)), ((2, 4, 6), (1, 6)),
        ((3, 4, 2), (4, 1))]


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", ["f32", "f64", "f16"])
@pytest.mark.parametrize("sx,sc", ROPE)
def test_rope(rng, sx, sc, dtype, interleaved):
    x, c, s = _data(rng, sx, dtype), _data(rng, sc, dtype), _data(rng, sc, dtype)
    _check_op("Rope", [(sx, dtype), (sc, dtype), (sc, dtype)], {"interleaved": interleaved},
              [x, c, s], dtype, recipe=dtype != "f16")


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_layouts_match_gptj_and_neox(rng, interleaved):
    """ONNX RotaryEmbedding / GPT-J ``rotary_interleaved`` (pairs (2i, 2i+1))
    and NeoX rotate-half (pairs (i, i+d/2)), as numpy from angles theta."""
    seq, d = 5, 8
    theta = np.arange(seq)[:, None] * (10000.0 ** (-np.arange(d // 2) / (d // 2)))[None]
    rep = (lambda a: np.repeat(a, 2, axis=-1)) if interleaved else \
        (lambda a: np.concatenate([a, a], axis=-1))
    cos, sin = rep(np.cos(theta)), rep(np.sin(theta))
    x = rng.standard_normal((2, seq, d))
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    else:
        x1, x2 = x[..., :d // 2], x[..., d // 2:]
    r1, r2 = x1 * np.cos(theta) - x2 * np.sin(theta), x2 * np.cos(theta) + x1 * np.sin(theta)
    want = np.empty_like(x)
    if interleaved:
        want[..., 0::2], want[..., 1::2] = r1, r2
    else:
        want = np.concatenate([r1, r2], axis=-1)
    g = _graph("Rope", [((2, seq, d), "f64"), ((seq, d), "f64"), ((seq, d), "f64")],
               {"interleaved": interleaved})
    feeds = {"in0": x, "in1": cos, "in2": sin}
    _close(compile(g)(**feeds), want, "f64", "rope kernel")
    _close(compile(g, pipeline=RECIPE)(**feeds), want, "f64", "rope recipe")
    _close(interpret(g, feeds)["y"], want, "f64", "rope interpreter")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype,tdt", [("f32", "i64"), ("f64", "i32"), ("f32", "u32"),
                                       ("bf16", "i64")])
@pytest.mark.parametrize("lshape,ignore", [((6, 10), -100), ((2, 3, 7), 2), ((5,), -100)])
def test_softmax_cross_entropy(rng, lshape, ignore, dtype, tdt, reduction):
    logits = _data(rng, lshape, dtype, scale=3)
    t = rng.integers(0, lshape[-1], lshape[:-1])
    if t.ndim and tdt != "u32":
        t.flat[1] = ignore
    targets = t.astype(DType.parse(tdt).numpy)
    params = {"reduction": reduction, "ignore_index": ignore}
    _check_op("FusedSoftmaxCrossEntropy", [(lshape, dtype), (lshape[:-1], tdt)], params,
              [logits, targets], "f32" if dtype != "bf16" else "bf16",
              recipe=dtype != "bf16", scale=8)


def test_cross_entropy_all_ignored_and_out_of_range():
    lg = np.zeros((3, 4), np.float32)
    specs = [((3, 4), "f32"), ((3,), "i64")]
    ign = np.full(3, -100, np.int64)
    m = compile(_graph("FusedSoftmaxCrossEntropy", specs, {"reduction": "mean"}))
    assert np.isnan(m(in0=lg, in1=ign))  # 0/0, as the reference and PyTorch
    m = compile(_graph("FusedSoftmaxCrossEntropy", specs, {"reduction": "none"}))
    got = m(in0=lg, in1=np.array([1, 7, -3], np.int64))
    assert got[0] == pytest.approx(math.log(4)) and np.isnan(got[1]) and np.isnan(got[2])


# -- the params mapping --------------------------------------------------------------
def _tt(shape, dt="f32"):
    return TensorType(tuple(shape), DType.parse(dt))


MAPPING_CASES = [
    ("SoftmaxLastDim", {}, [_tt((2, 3, 5))], P.SoftmaxLastDim(6, 5)),
    ("RmsNormLastDim", {"eps": 1e-6}, [_tt((4, 8))], P.NormLastDim(4, 8, 1e-6)),
    ("LayerNormLastDim", {"eps": 0.5}, [_tt((8,))], P.NormLastDim(1, 8, 0.5)),
    ("FusedLinear", {}, [_tt((4, 3, 5)), _tt((2, 5, 6)), _tt((6,))],
     P.Matmul((4,), (2,), 3, 6, 5)),
    ("Rope", {}, [_tt((2, 3, 5, 16)), _tt((5, 16)), _tt((5, 16))], P.Rope(6, 5, 16)),
    ("Rope", {"interleaved": True}, [_tt((5, 16)), _tt((5, 16)), _tt((5, 16))],
     P.Rope(1, 5, 16, True)),
    ("FusedSoftmaxCrossEntropy", {"reduction": "sum", "ignore_index": 3},
     [_tt((2, 3, 7)), _tt((2, 3), "i64")], P.FusedSoftmaxCrossEntropy(6, 7, P.Reduction.SUM, 3)),
]


@pytest.mark.parametrize("name,params,types,expected", MAPPING_CASES, ids=lambda v: str(v)[:20])
def test_params_mapping_round_trip(name, params, types, expected):
    p = F.fused_op_params(REG[name], params, types)
    assert p == expected
    dtypes = [t.dtype for t in types] + [REG[name].infer(types, params).dtype]
    out = REG[name].infer(types, params)
    layouts = [Layout.contiguous(t.shape) for t in types] + [Layout.contiguous(out.shape)]
    inst = F.instance_from_params(name, p, dtypes, layouts, len(types))
    assert inst.input_types == tuple(types)
    from compiler.registry.entry import normalize_params
    assert dict(inst.params) == normalize_params(REG[name], params)


def test_mapping_refuses_mismatched_calls():
    # params that do not describe the layouts
    with pytest.raises(UnsupportedOpError, match="do not describe"):
        F.instance_from_params("SoftmaxLastDim", P.SoftmaxLastDim(3, 4), [DType.F32] * 2,
                               [Layout.contiguous((2, 4))] * 2, 1)
    with pytest.raises(UnsupportedOpError, match="output layout"):
        F.instance_from_params("SoftmaxLastDim", P.SoftmaxLastDim(2, 4), [DType.F32] * 2,
                               [Layout.contiguous((2, 4)), Layout.contiguous((4, 2))], 1)
    with pytest.raises(KernelParamsError, match="no kernel params mapping"):
        F.fused_op_params(REG["ReduceMaxToBackward"], {}, [_tt((2, 3)), _tt((2, 1))])


def test_registration_in_the_cpu_table():
    table = table_for("cpu")
    specs = F.fused_specs()
    for name in ("SoftmaxLastDim", "RmsNormLastDim", "LayerNormLastDim", "FusedLinear", "Rope",
                 "FusedSoftmaxCrossEntropy"):
        assert name in specs
        spec = specs[name]
        for dt in (DType.F32, DType.F64, DType.F16, DType.BF16):
            for key in spec.keys(dt):
                entry = table.lookup_entry(spec.op_kind, key, BackendId.CPU)
                assert entry.kernel_source == "mlir-cpu-fused"
                assert entry.caps.strided_input
                assert entry.precision.bit_stable_on_same_hardware
                assert entry.precision == spec.precision.for_target(parse_target("cpu"))
                assert entry.precision.notes.startswith("mlir-cpu-fused ")
                assert entry.cost is default_cost_for_op_kind(spec.op_kind)
    assert specs["SoftmaxLastDim"].precision is F.NORM_FAMILY
    assert specs["FusedLinear"].precision is F.FUSED_LINEAR
    assert specs["Rope"].precision is F.ROPE


def _call(kind, dtypes, ins, out_shape, params):
    entry = table_for("cpu").lookup_entry(kind, dtypes, BackendId.CPU)
    out = Storage.zeros(dtypes[-1], max(1, math.prod(out_shape)))
    lays = [l for _, l in ins] + [Layout.contiguous(out_shape)]
    entry.kernel([s for s, _ in ins], [out], lays, params)
    return out.data.view(dtypes[-1].storage_numpy)[:math.prod(out_shape)].reshape(out_shape)


def test_strided_inputs_are_read_through_their_strides(rng):
    """The strided_input claim: a transposed x and a stride-0 broadcast cos."""
    x = rng.standard_normal((16, 6)).astype(np.float32)
    sx, lx = Storage.from_numpy(x)
    got = _call(OpKind.SoftmaxLastDim, (DType.F32, DType.F32), [(sx, lx.transpose())],
                (6, 16), P.SoftmaxLastDim(6, 16))
    _close(got, REG["SoftmaxLastDim"].reference([x.T.copy()], {}), "f32", "strided softmax")
    xr = rng.standard_normal((3, 4, 8)).astype(np.float32)
    c = rng.standard_normal((1, 8)).astype(np.float32)
    sc, lc = Storage.from_numpy(c)
    lcb = lc.broadcast_as((4, 8))
    sxr, lxr = Storage.from_numpy(xr)
    got = _call(OpKind.Rope, (DType.F32,) * 4, [(sxr, lxr), (sc, lcb), (sc, lcb)],
                (3, 4, 8), P.Rope(3, 4, 8))
    cb = np.broadcast_to(c, (4, 8))
    _close(got, REG["Rope"].reference([xr, cb, cb], {}), "f32", "broadcast rope")


def test_kernel_ref_refuses_wrong_params():
    entry = table_for("cpu").lookup_entry(OpKind.SoftmaxLastDim, (DType.F32,) * 2, BackendId.CPU)
    s = Storage.zeros(DType.F32, 8)
    with pytest.raises(Exception, match="do not describe"):
        entry.kernel([s], [Storage.zeros(DType.F32, 8)],
                     [Layout.contiguous((2, 4))] * 2, P.SoftmaxLastDim(4, 2))


# -- fusion of primitive spellings ------------------------------------------------------
def _bc_last(g, v, x):
    k = g.add_node("Unsqueeze", [v], {"dim": len(x.shape) - 1})
    return g.add_node("BroadcastTo", [k], {"shape": tuple(x.shape)})


def _spelled(kind):
    g = Graph()
    x = g.input("x", (4, 12), "f32")
    r = 1
    if kind == "softmax":
        e = g.add_node("Exp", [g.add_node("Sub", [x, _bc_last(g, g.add_node("MaxDim", [x], {"axis": r}), x)])])
        y = g.add_node("Div", [e, _bc_last(g, g.add_node("SumDim", [e], {"axis": r}), x)])
    elif kind == "rmsnorm":
        ms = g.add_node("Unsqueeze", [g.add_node("MeanDim", [g.add_node("Sqr", [x])], {"axis": r})],
                        {"dim": r})
        den = g.add_node("Sqrt", [g.add_node("AddScalar", [ms], {"value": 1e-6})])
        y = g.add_node("Div", [x, g.add_node("BroadcastTo", [den], {"shape": (4, 12)})])
    elif kind.startswith("layernorm"):
        c = g.add_node("Sub", [x, _bc_last(g, g.add_node("MeanDim", [x], {"axis": r}), x)])
        v = g.add_node("Unsqueeze", [g.add_node("MeanDim", [g.add_node("Sqr", [c])], {"axis": r})],
                       {"dim": r})
        den = g.add_node("Sqrt", [g.add_node("AddScalar", [v], {"value": 1e-5})])
        y = g.add_node("Div", [c, g.add_node("BroadcastTo", [den], {"shape": (4, 12)})])
        if kind == "layernorm_affine":  # * w + b as numpy broadcasting spells them
            y = y * g.input("w", (12,), "f32") + g.input("b", (12,), "f32")
    else:  # linear + bias
        w = g.input("w", (12, 5), "f32")
        b = g.input("b", (5,), "f32")
        mm = g.add_node("MatMul", [x, w])
        bb = g.add_node("BroadcastTo", [g.add_node("Reshape", [b], {"shape": (1, 5)})],
                        {"shape": (4, 5)})
        y = g.add_node("Add", [mm, bb])
    g.output(y, "y")
    return g


@pytest.mark.parametrize("kind,op", [
    ("softmax", "SoftmaxLastDim"), ("linear", "FusedLinear"),
    ("rmsnorm", "RmsNormLastDim"), ("layernorm", "LayerNormLastDim"),
    ("layernorm_affine", "LayerNormLastDim")])
def test_primitive_spellings_fuse_to_the_fused_kernel(rng, kind, op):
    g = _spelled(kind)
    feeds = {"x": rng.standard_normal((4, 12)).astype(np.float32)}
    if kind == "linear":
        feeds |= {"w": rng.standard_normal((12, 5)).astype(np.float32),
                  "b": rng.standard_normal(5).astype(np.float32)}
    if kind == "layernorm_affine":
        feeds |= {"w": rng.standard_normal(12).astype(np.float32),
                  "b": rng.standard_normal(12).astype(np.float32)}
    m = compile(g)
    assert m.kernel_summary() == [f"{op}[{','.join(['f32'] * (len(feeds) + 1))}] (mlir-cpu-fused)"]
    mr = compile(g, pipeline=RECIPE)
    assert len(mr.kernel_summary()) > 1
    _close(m(**feeds), mr(**feeds), "f32", f"fused {kind} vs primitives", 4)
