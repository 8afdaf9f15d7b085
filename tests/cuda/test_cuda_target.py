"""The cuda target without a GPU: target parsing, PTX for every f32
primitive and fused op (accepted by ptxas for sm_90 and sm_80), launch
geometry and argument ABI, the kernel-program format, the error paths, and
the gpu-dialect stage (FileCheck). With a GPU (``gpu`` marker): numerics
against the numpy reference."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import zlib

import numpy as np
import pytest

from compiler import Graph
from compiler.codegen.cuda import pipeline as cuda_pipeline
from compiler.codegen.cuda import ptx as cuda_ptx
from compiler.codegen.family import single_op_linalg_text
from compiler.driver import CompileError, compile
from compiler.errors import CodegenError
from compiler.graph.opdef import TensorType
from compiler.targets import TargetError, parse_target
from runtime.cuda import CudaUnavailableError
from runtime.cuda.program import Buffer, KernelProgram, Launch
from runtime.dtype import DType
from runtime.errors import KernelError
from runtime.keys import BackendId

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent.parent
HAS_PTXAS = cuda_ptx.ptxas_path() is not None
needs_ptxas = pytest.mark.skipif(not HAS_PTXAS, reason="ptxas is not on PATH")


def _f32(*shape):
    return TensorType(tuple(shape), DType.F32)


def _lower(op, params, types, target="cuda:sm_90", **kw):
    text = single_op_linalg_text(op, params, types, False, "cuda")
    return cuda_pipeline.lower(text, ["kernel"], target=target, **kw)


# -- targets -------------------------------------------------------------------------
@pytest.mark.parametrize("spec,arch,ptx", [("cuda", "sm_90", "+ptx80"),
                                           ("cuda:sm_90", "sm_90", "+ptx80"),
                                           ("cuda:sm_80", "sm_80", "+ptx78")])
def test_parse_cuda_targets(spec, arch, ptx):
    t = parse_target(spec)
    assert (t.kind, t.arch, t.llvm_features, t.triple) == ("cuda", arch, ptx, "nvptx64-nvidia-cuda")
    assert t.backend is BackendId.CUDA and t.features == frozenset()
    assert parse_target(str(t)) == t
    assert t.codegen.SOURCE == "mlir-nvptx"


def test_unknown_cuda_arch_names_the_accepted_ones():
    with pytest.raises(TargetError, match=r"cuda:sm_42.*accepted: cuda, cuda:sm_75"):
        parse_target("cuda:sm_42")


# -- PTX for every f32 primitive and fused op --------------------------------------------
def _primitive_graphs():
    """One small graph per primitive spec of the CPU primitive tests (f32;
    integer-only ops in their first dtype)."""
    sys.path.insert(0, str(ROOT / "tests" / "compiler"))
    try:
        from test_primitives import SPECS, Case
    finally:
        sys.path.pop(0)
    for spec in SPECS:
        if spec.op == "Cast":  # casts: tests/cuda/test_cuda_table.py
            continue
        g, feed = Graph(), {}
        dt = DType.F32 if DType.F32 in spec.fast_dtypes else spec.fast_dtypes[0]  # bit ops: i32
        case = Case(g, feed, np.random.default_rng(zlib.crc32(spec.op.encode())), dt)
        outs = list(spec.build(case, dt))
        # the widest dense case (the first ones are rank-0/1 and fold away)
        dense = [o for o in outs if "dense" in o[0] and "flip" not in o[0]] or outs
        label, t, _ = max(dense, key=lambda o: len(o[1].shape))
        g.output(t, name=label)
        yield spec.op, g


def _assert_ptx(m, arch):
    ptx = m.ir["ptx"]
    assert f".target {arch}" in ptx and ".visible .entry" in ptx
    assert ".extern .func" not in ptx  # libdevice linked, nothing left undefined


@pytest.mark.slow  # a sweep over every primitive: once per CI run, in the slow lane
def test_every_primitive_compiles_to_ptx_and_cubin():
    """Every f32 primitive the cuda table claims compiles (no device) to PTX
    with all its entries; where ptxas is present each program carries a
    cubin ptxas accepted for sm_90."""
    ops, gaps = [], {}
    for op, g in _primitive_graphs():
        try:
            m = compile(g, "cuda:sm_90")
        except CompileError as e:
            gaps[op] = str(e)
            continue
        if not m.kernel_summary():
            continue
        _assert_ptx(m, "sm_90")
        assert all(s.endswith(("(mlir-nvptx)", "(mlir-nvptx-fused)")) for s in m.kernel_summary()), \
            (op, m.kernel_summary())
        ops.append(op)
    # No gaps: leading-axis reductions and scans run their reduced dims as a
    # serial loop per thread, Pad and ScatterAdd copy through linalg.copy.
    assert not gaps, {k: v[:300] for k, v in gaps.items()}
    assert len(ops) > 65


FUSED_GRAPHS = {
    "SoftmaxLastDim": lambda g, x: x.softmax(-1),
    "LayerNormLastDim": lambda g, x: x.layer_norm(
        g.constant(np.ones(48, np.float32), name="w"), g.constant(np.zeros(48, np.float32), name="b")),
    "RmsNormLastDim": lambda g, x: x.rms_norm(g.constant(np.ones(48, np.float32), name="w")),
    "FusedLinear": lambda g, x: x @ g.constant(np.ones((48, 24), np.float32), name="w")
    + g.constant(np.zeros(24, np.float32), name="b"),
}


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("name", sorted(FUSED_GRAPHS))
def test_fused_ops_compile_for_both_archs(name, arch):
    g = Graph()
    x = g.input("x", (10, 48), "f32")
    g.output(FUSED_GRAPHS[name](g, x), name="y")
    m = compile(g, f"cuda:{arch}")
    assert any(name in s and "mlir-nvptx-fused" in s for s in m.kernel_summary()), m.kernel_summary()
    _assert_ptx(m, arch)
    if HAS_PTXAS:
        programs = _programs(m)
        assert programs and all(p.cubin and p.cubin[:4] == b"\x7fELF" for p in programs)


def _programs(m):
    from compiler.codegen.cuda import compile_program
    from compiler.codegen.family import for_target
    from runtime.executor import KernelStep
    from runtime.layout import Layout
    out = []
    specs = m.executor.specs
    for i, step in enumerate(m.plan.steps):
        if not isinstance(step, KernelStep):
            continue
        fn = m.executor.entries[i].kernel.fn
        layouts = [Layout.contiguous(specs[v].shape) for v in step.inputs]
        layouts.append(Layout.contiguous(step.output_specs[0].shape))
        inst, _ = fn.family.instance(fn.key, fn.dtypes, layouts, step.params, len(step.inputs))
        inst = for_target(inst, m.target)
        out.append(compile_program(fn.family.linalg_text(inst, m.target), ["kernel"],
                                   target=m.target))
    return out


@needs_ptxas
def test_ptxas_rejection_is_a_typed_error():
    with pytest.raises(cuda_ptx.PtxasError, match="ptxas -arch=sm_90 rejected"):
        cuda_ptx.assemble(".version 8.0\n.target sm_90\n.address_size 64\nnot ptx", "sm_90")


# -- launch geometry and argument ABI ----------------------------------------------------
def test_elementwise_launch_geometry_and_abi():
    p = _lower("Exp", {}, [_f32(64, 128)], assemble=False).program
    assert [b.shape for b in p.params] == [(64, 128), (64, 128)] and p.temps == ()
    (launch,) = p.launches
    # 8x32 tiles, the innermost dim on x (coalesced): grid (128/32, 64/8)
    assert launch.grid == (4, 8, 1) and launch.block == (32, 8, 1) and launch.shared_bytes == 0
    assert launch.args == (("param", 0), ("param", 1))
    assert ".param .u64 .ptr .align 1 kernel_kernel_param_0" in p.ptx  # bare pointers
    assert ".extern" not in p.ptx and "ex2.approx" in p.ptx  # libdevice __nv_expf inlined


def test_ragged_shapes_are_guarded():
    p = _lower("Add", {}, [_f32(7, 45), _f32(7, 45)], assemble=False).program
    (launch,) = p.launches
    assert launch.grid == (2, 1, 1) and launch.block == (32, 8, 1)  # ceil(45/32), ceil(7/8)
    assert "setp" in p.ptx  # the bound check of the partial tiles


def test_one_dimensional_and_full_reduction_launches():
    p = _lower("Relu", {}, [_f32(1000)], assemble=False).program
    assert p.launches[0].grid == (4, 1, 1) and p.launches[0].block == (256, 1, 1)
    p = _lower("SumAll", {}, [_f32(5, 6)], assemble=False).program
    assert p.params[-1].shape == () and p.launches  # a serial loop nest as a one-thread kernel


def test_matmul_launch_and_abi():
    p = _lower("MatMul", {}, [_f32(64, 32), _f32(32, 48)], assemble=False).program
    kernels = {l.kernel: l for l in p.launches}
    assert len(kernels) == 2  # zero fill, then the shared-memory tiled contraction
    assert p.launches[-1].args == (("param", 0), ("param", 1), ("param", 2))
    # 16x16 output tiles: grid (48/16, 64/16), two 16x16 f32 tiles of shared memory
    assert p.launches[-1].grid == (3, 4, 1) and p.launches[-1].block == (16, 16, 1)
    assert p.launches[-1].shared_bytes == 2048


def test_kernel_program_round_trips_and_rejects_garbage():
    p = _lower("Exp", {}, [_f32(8, 8)], assemble=False).program
    again = KernelProgram.from_bytes(p.to_bytes())
    assert again == p
    with pytest.raises(KernelError, match="not a serialized CUDA kernel program"):
        KernelProgram.from_bytes(b"\x05\0\0\0\0\0\0\0{oops")
    with pytest.raises(KernelError, match=r"argument \(temp, 0\) is out of range"):
        KernelProgram("sm_90", "", None, (Buffer((4,), "f32", 4),), (),
                      (Launch("k", (1, 1, 1), (4, 1, 1), 0, (("temp", 0),)),))
    with pytest.raises(KernelError, match="not a valid CUDA launch"):
        KernelProgram("sm_90", "", None, (), (), (Launch("k", (1, 1, 1), (2048, 1, 1), 0, ()),))


# -- error paths ---------------------------------------------------------------------------
def test_calling_without_a_device_raises_cuda_unavailable():
    import runtime.cuda
    if runtime.cuda.available():
        pytest.skip("a CUDA device is present")
    g = Graph()
    x = g.input("x", (4, 8), "f32")
    g.output(x.exp(), name="y")
    m = compile(g, "cuda:sm_90")  # warm compiles without loading
    assert ".entry" in m.ir["ptx"] and "grid=" in m.ir["launches"]
    with pytest.raises(CudaUnavailableError, match="no CUDA device is available"):
        m(x=np.zeros((4, 8), np.float32))


def test_missing_libdevice_says_how_to_install(monkeypatch):
    monkeypatch.setenv("FUELC_LIBDEVICE", "/nonexistent/libdevice.10.bc")
    monkeypatch.setattr(cuda_ptx, "_libdevice_bytes", None)
    with pytest.raises(cuda_ptx.LibdeviceNotFound, match="FUELC_LIBDEVICE.*libdevice.10.bc"):
        _lower("Exp", {}, [_f32(3, 3)], assemble=False)


def test_cpu_pipeline_refuses_cuda_targets_and_vice_versa():
    with pytest.raises(CodegenError, match="compiles for cuda targets, not cpu"):
        cuda_pipeline.lower("module {}", ["kernel"], target="cpu")


def test_unmappable_device_ops_are_refused_before_translation(tmp_path):
    """An op left in device code would crash translation; it is a
    PipelineError with a reproducer instead (in a subprocess: a crash must
    not take the test run down)."""
    code = (
        "from compiler.mlir import ir\n"
        "from compiler.codegen.cuda import pipeline as p\n"
        "from compiler.errors import PipelineError\n"
        "ctx = ir.Context(); ctx.allow_unregistered_dialects = True\n"
        "m = ir.Module.parse('module attributes {gpu.container_module} { gpu.module @k { "
        "llvm.func @k() attributes {nvvm.kernel} { \"foo.bar\"() : () -> () llvm.return } } }', ctx)\n"
        "try:\n    p.device_modules(m)\nexcept PipelineError as e:\n    print('REFUSED', e)\n")
    env = dict(os.environ, FUELC_REPRO_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "REFUSED" in r.stdout and "foo.bar" in r.stdout and "reproducer" in r.stdout


# -- the gpu-dialect stage (FileCheck) ---------------------------------------------------------
@pytest.mark.parametrize("name", ["softmax_gpu.mlir", "matmul_gpu.mlir", "gridstride_gpu.mlir"])
def test_filecheck_gpu_stage(name, tmp_path):
    """Through the lit-style runner, in this process: ``python -m
    compiler.codegen.cuda`` and ``filecheck`` are calls (the filecheck
    package's API), never whatever is on PATH."""
    from compiler.testing import MlirTest
    case = MlirTest(HERE / name)
    assert "RUN:" in case.path.read_text()
    case.run(tmp_path, cwd=ROOT)


# -- with a GPU --------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("op", ["Exp", "Add", "SumDim", "MatMul"])
def test_gpu_numerics_vs_reference(op):
    from compiler.graph.interpret import interpret  # noqa: F401
    rng = np.random.default_rng(0)
    g = Graph()
    a = g.input("a", (33, 70), "f32")
    b = g.input("b", (70, 33) if op == "MatMul" else (33, 70), "f32")
    y = {"Exp": lambda: a.exp(), "Add": lambda: a + b, "SumDim": lambda: a.sum(-1),
         "MatMul": lambda: a @ b}[op]()
    g.output(y, name="y")
    feed = {"a": rng.standard_normal((33, 70)).astype(np.float32),
            "b": rng.standard_normal((70, 33) if op == "MatMul" else (33, 70)).astype(np.float32)}
    want = compile(g, "cpu")(**feed)
    got = compile(g, "cuda")(**feed)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_gpu_mlp_example():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from mlp import build, numpy_mlp
    finally:
        sys.path.pop(0)
    g, w = build()
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    out = compile(g, "cuda:sm_90")(x=x)
    np.testing.assert_allclose(out, numpy_mlp(x.astype(np.float64), *w), rtol=1e-4, atol=1e-5)
