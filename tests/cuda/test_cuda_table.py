"""The cuda binding table claims only what compiles: every (kind, dtypes)
key it registers compiles to PTX that ptxas accepts. The default suite
compiles a representative subset (every claimed dtype through elementwise,
casts, leading-axis reductions, scans, matmul, Pad, ScatterAdd and the
fused ops) for sm_80 and sm_90; ``-m slow`` sweeps every primitive spec and
checks that the compiled kernels cover every key of the table."""
from __future__ import annotations

import sys
import zlib

import ml_dtypes
import numpy as np
import pytest

from compiler import Graph
from compiler.codegen import cuda as cuda_codegen
from compiler.codegen.cuda import ptx as cuda_ptx
from compiler.driver import compile
from compiler.registry.builders import rms_norm
from compiler.errors import PassError
from compiler.targets import table_for
from runtime.dtype import DType

from test_cuda_target import ROOT

FUSED = ("FusedLinear", "LayerNormLastDim", "RmsNormLastDim", "SoftmaxLastDim")

HAS_PTXAS = cuda_ptx.ptxas_path() is not None
DTYPES = cuda_codegen.DTYPES
FLOATS = [d for d in DTYPES if d in (DType.F32, DType.F16, DType.BF16, DType.F64)]


def _label(kind, dtypes) -> str:
    return f"{kind.name}[{','.join(d.value for d in dtypes)}]"


def _claimed(target: str) -> set[str]:
    return {_label(kind, dts) for kind, dts, _, _ in table_for(target).iter_entries()}


def _compiled(m) -> set[str]:
    out = set()
    for s in m.kernel_summary():
        label, source = s.rsplit(" ", 1)
        assert source in ("(mlir-nvptx)", "(mlir-nvptx-fused)", "(mlir-nvptx-runtime-fused)"), s
        if source != "(mlir-nvptx-runtime-fused)":  # runtime-fused chains have no table key
            out.add(label)
    # each program was assembled (ptxas rejections raise PtxasError); a graph
    # of views only (Flip) has no kernel and no PTX
    if HAS_PTXAS and m.kernel_summary():
        assert ".visible .entry" in m.ir["ptx"]
    return out


def _specs():
    sys.path.insert(0, str(ROOT / "tests" / "compiler"))
    try:
        from test_primitives import SPECS, Case
    finally:
        sys.path.pop(0)
    return SPECS, Case


def _spec_graph(spec, Case, dt, widest_only: bool):
    g, feed = Graph(), {}
    case = Case(g, feed, np.random.default_rng(zlib.crc32(spec.op.encode())), dt)
    try:
        outs = list(spec.build(case, dt))
    except Exception:  # the op does not accept dt (the table does not claim it either)
        return None
    if widest_only:
        dense = [o for o in outs if "dense" in o[0] and "flip" not in o[0]] or outs
        outs = [max(dense, key=lambda o: len(o[1].shape))]
    for label, t, _ in outs:
        g.output(t, name=label)
    return g


def _cast_graph(src: DType):
    g = Graph()
    x = g.input("x", (6, 40), src)
    for dst in DTYPES:
        if dst is not src:
            g.output(x.cast(dst), name=f"to_{dst.value}")
    return g


def _leading_axis_graph(dt: DType):
    g = Graph()
    x = g.input("x", (12, 40), dt)
    g.output(x.sum(0), name="sum0")
    g.output(x.max(0), name="max0")
    g.output(x.exp() if dt is not DType.I32 else x + x, name="ew")
    if dt in FLOATS:  # MatMul is float-only in the op table
        g.output(x @ g.input("w", (40, 16), dt), name="mm")
    return g


def _fused_graph(name: str, dt: DType):
    g = Graph()
    x = g.input("x", (10, 48), dt)
    npdt = ml_dtypes.bfloat16 if dt is DType.BF16 else np.dtype(dt.value.replace("f", "float"))
    const = lambda name, *shape: g.constant(np.full(shape, 0.5, npdt), name=name)  # noqa: E731
    w, b = const("w", 48), const("b", 48)
    y = {"SoftmaxLastDim": lambda: x.softmax(-1),
         "LayerNormLastDim": lambda: x.layer_norm(w, b),
         "RmsNormLastDim": lambda: x.rms_norm(w),
         "FusedLinear": lambda: x @ const("m", 48, 24) + const("c", 24)}[name]()
    g.output(y, name="y")
    return g


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.value)
def test_claimed_dtypes_compile(dt, arch):
    """Elementwise, casts to every other claimed dtype, leading-axis
    reductions and matmul compile for every claimed dtype, and each
    compiled key is one the table claims."""
    target = f"cuda:{arch}"
    claimed = _claimed(target)
    got = _compiled(compile(_leading_axis_graph(dt), target))
    got |= _compiled(compile(_cast_graph(dt), target))
    assert got <= claimed, got - claimed
    assert {f"Cast[{dt.value},{d.value}]" for d in DTYPES if d is not dt} <= got
    assert dt not in FLOATS or f"MatMul[{dt.value},{dt.value},{dt.value}]" in got


@pytest.mark.parametrize("op", ["SumDim", "ArgMaxDim", "ReduceSumTo", "CumSum", "Pad",
                                "ScatterAdd", "LogSoftmaxLastDim"])
def test_former_gaps_compile(op):
    """The ops that used to leave host code (leading-axis reductions, scans,
    views) compile for every dtype the table claims for them."""
    SPECS, Case = _specs()
    spec = next(s for s in SPECS if s.op == op)
    claimed = _claimed("cuda:sm_90")
    built = 0
    for dt in DTYPES:
        g = _spec_graph(spec, Case, dt, widest_only=True)
        if g is None:
            continue
        got = _compiled(compile(g, "cuda:sm_90"))
        assert got and got <= claimed, (dt, got - claimed)
        built += 1
    assert built


@pytest.mark.parametrize("name", FUSED)
def test_fused_ops_compile_for_claimed_dtypes(name):
    claimed = _claimed("cuda:sm_90")
    kinds = {c for c in claimed if c.startswith(name + "[")}
    assert kinds, claimed
    for dt in FLOATS:
        if not any(f"[{dt.value}," in k or k.endswith(f"[{dt.value}]") for k in kinds):
            continue
        got = _compiled(compile(_fused_graph(name, dt), "cuda:sm_90"))
        assert any(k.startswith(name + "[") for k in got) and got <= claimed, (dt, got)


@pytest.mark.slow
def test_every_table_key_compiles():
    """The full sweep: every primitive spec at every claimed dtype, every
    cast pair and the fused ops; the compiled kernels must cover every key
    the cuda table claims (a key nothing compiles is a false claim).

    Each spec compiles all its shapes and views (ranks 0-3, strided and
    broadcast operands) at its first dtype that takes them all, and its
    widest dense case at every other dtype: kernels are compiled per shape,
    and the shapes' launch geometry does not depend on the dtype nor the
    dtype's code (libdevice calls, conversions) on the shape. The whole
    product lowered 1656 kernels instead of 632 for the same 311 keys (177 s
    instead of 66 on the CI VM)."""
    SPECS, Case = _specs()
    got: set[str] = set()
    for spec in SPECS:
        every_shape = True
        for dt in DTYPES:
            g = _spec_graph(spec, Case, dt, widest_only=not every_shape)
            if g is None:
                continue
            try:
                got |= _compiled(compile(g, "cuda:sm_90"))
                every_shape = False
            except PassError as e:  # a case with an operand dtype the table does not claim
                assert every_shape and "no kernel for" in str(e), str(e)[:500]
                got |= _compiled(compile(_spec_graph(spec, Case, dt, widest_only=True),
                                         "cuda:sm_90"))
    for dt in DTYPES:
        got |= _compiled(compile(_cast_graph(dt), "cuda:sm_90"))
        got |= _compiled(compile(_leading_axis_graph(dt), "cuda:sm_90"))
    for name in FUSED:
        for dt in FLOATS:
            got |= _compiled(compile(_fused_graph(name, dt), "cuda:sm_90"))
    for dt in DTYPES:  # the backward primitives the builder specs do not cover
        g = Graph()
        dy = g.input("dy", (4, 33), dt)
        g.output(g.add_node("PadBackward", [dy], {"in_shape": (4, 30), "padding": (0, 0, 1, 2)}),
                 name="dp")
        if dt in FLOATS:
            g.output(g.add_node("LogSoftmaxLastDimBackward", [g.input("y", (4, 33), dt), dy]),
                     name="dx")
        got |= _compiled(compile(g, "cuda:sm_90"))
    for dt in FLOATS:  # LayerNorm's other arities: no affine, weight only
        for affine in ((), ("w",)):
            g = Graph()
            x = g.input("x", (10, 48), dt)
            npdt = ml_dtypes.bfloat16 if dt is DType.BF16 else \
                np.dtype(dt.value.replace("f", "float"))
            ws = [g.constant(np.full(48, 0.5, npdt), name=n) for n in affine]
            g.output(x.layer_norm(*ws), name="y")
            got |= _compiled(compile(g, "cuda:sm_90"))
        g = Graph()  # RmsNorm without its optional weight
        g.output(rms_norm(g.input("x", (10, 48), dt)), name="y")
        got |= _compiled(compile(g, "cuda:sm_90"))
    # Flip is planned as a view (a negative stride), never as a kernel step
    claimed = {k for k in _claimed("cuda:sm_90") if not k.startswith("Flip[")}
    assert not claimed - got, sorted(claimed - got)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.value)
def test_gpu_dtypes_match_cpu(dt):
    """Elementwise, a leading-axis reduction and matmul in every claimed
    dtype against the CPU target (bf16/f16 within their own precision)."""
    g = _leading_axis_graph(dt)
    rng = np.random.default_rng(7)
    npdt = ml_dtypes.bfloat16 if dt is DType.BF16 else np.dtype(dt.value.replace("f", "float")
                                                                .replace("i32", "int32"))
    feed = {"x": (rng.standard_normal((12, 40)) * (4 if dt is DType.I32 else 0.5)).astype(npdt)}
    if dt in FLOATS:
        feed["w"] = (rng.standard_normal((40, 16)) * 0.5).astype(npdt)
    want = compile(g, "cpu")(**feed)
    got = compile(g, "cuda")(**feed)
    tol = {DType.BF16: 2e-2, DType.F16: 2e-3, DType.F32: 1e-5, DType.F64: 1e-12}.get(dt, 0)
    for k in want:
        np.testing.assert_allclose(np.asarray(got[k], np.float64), np.asarray(want[k], np.float64),
                                   rtol=tol, atol=tol * 10, err_msg=k)


def test_fused_precision_claims_are_the_targets_own():
    """The CUDA fused kernels claim what the CUDA codegen does (libdevice),
    not the CPU's fastmath polynomials; the CPU ones keep theirs."""
    from compiler.codegen.fused import spec_for_kind
    from runtime.keys import BackendId
    from runtime.opkind import OpKind
    spec = spec_for_kind(OpKind.SoftmaxLastDim)
    key = spec.keys(DType.F32)[0]
    gpu = table_for("cuda").lookup_entry(spec.op_kind, key, BackendId.parse("cuda")).precision
    cpu = table_for("cpu").lookup_entry(spec.op_kind, key, BackendId.CPU).precision
    assert gpu.notes.startswith("mlir-nvptx-fused norm family") and "libdevice" in gpu.notes
    assert "fastmath" not in gpu.notes and "cpu" not in gpu.notes.lower(), gpu.notes
    assert cpu.notes.startswith("mlir-cpu-fused norm family") and "fastmath" in cpu.notes
