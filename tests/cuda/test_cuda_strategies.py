"""The cuda target's per-op GPU strategies (``compiler.codegen.cuda.strategy``):
which instances each strategy takes and which keep the generic tiled path,
launch geometry and argument ABI, ptxas acceptance for sm_80 and sm_90, the
error path of a strategy writing bad IR; with a GPU (``gpu`` marker):
numerics against the reference interpreter. The gpu-dialect stage of each
strategy is FileChecked by test_cuda_target.py (softmax_gpu.mlir,
matmul_gpu.mlir, gridstride_gpu.mlir)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compiler import Graph
from compiler.codegen.cuda import pipeline as cuda_pipeline
from compiler.codegen.cuda import ptx as cuda_ptx
from compiler.codegen.cuda import strategy as cuda_strategy
from compiler.codegen.cuda.strategy import GRID_CAP, strategy_of
from compiler.codegen.family import single_op_linalg_text
from compiler.driver import compile
from compiler.errors import PipelineError
from compiler.graph.interpret import interpret
from compiler.graph.opdef import TensorType
from runtime.dtype import DType

needs_ptxas = pytest.mark.skipif(cuda_ptx.ptxas_path() is None, reason="ptxas is not on PATH")


def _t(*shape, dtype=DType.F32):
    return TensorType(tuple(shape), dtype)


def _lower(op, params, types, target="cuda:sm_90", assemble=False):
    text = single_op_linalg_text(op, params, types, False, "cuda")
    return cuda_pipeline.lower(text, ["kernel"], target=target, assemble=assemble).program


def _by_strategy(program):
    out: dict = {}
    for launch in program.launches:
        out.setdefault(strategy_of(launch.kernel), []).append(launch)
    return out


# -- which instance takes which strategy -------------------------------------------------
ROWS = [("SoftmaxLastDim", {}, [_t(64, 100)], 2),
        ("LogSoftmaxLastDim", {}, [_t(64, 100)], 2),
        ("LayerNormLastDim", {"eps": 1e-5}, [_t(64, 100), _t(100), _t(100)], 2),
        ("RmsNormLastDim", {"eps": 1e-6}, [_t(64, 100)], 1),
        ("SumDim", {"axis": 1}, [_t(64, 100)], 1),
        ("MaxDim", {"axis": 1}, [_t(64, 100)], 1),
        ("MeanDim", {"axis": 1}, [_t(64, 100)], 1),
        ("SumAll", {}, [_t(64, 100)], 1),
        ("SoftmaxLastDim", {}, [_t(4, 16, 100)], 2)]


@pytest.mark.parametrize("op,params,types,n", ROWS, ids=lambda v: v if isinstance(v, str) else None)
def test_row_reductions_take_one_block_per_row(op, params, types, n):
    p = _lower(op, params, types)
    rows = _by_strategy(p).get("row-reduce", [])
    assert len(rows) == n, [l.kernel for l in p.launches]
    nrows = int(np.prod(types[0].shape[:-1])) if op != "SumAll" else 1
    for launch in rows:
        assert launch.grid == (nrows, 1, 1)
        assert launch.block == (256 if op == "SumAll" else 128, 1, 1)  # 100 -> 4 warps
        assert launch.shared_bytes == 0 and launch.args[0] == ("param", 0)


@pytest.mark.parametrize("shape,grid", [((64, 48), (3, 4, 1)), ((70, 45), (3, 5, 1))])
def test_matmul_takes_shared_memory_tiles(shape, grid):
    m, n = shape
    p = _lower("MatMul", {}, [_t(m, 33), _t(33, n)])
    (launch,) = _by_strategy(p)["matmul-smem"]
    assert launch.grid == grid and launch.block == (16, 16, 1) and launch.shared_bytes == 2048
    assert launch.args == (("param", 0), ("param", 1), ("param", 2))


def test_batched_matmul_and_fused_linear_take_shared_memory_tiles():
    p = _lower("MatMul", {}, [_t(3, 40, 20), _t(3, 20, 50)])
    (launch,) = _by_strategy(p)["matmul-smem"]
    assert launch.grid == (4, 3, 3) and launch.block == (16, 16, 1)  # batch on z
    p = _lower("FusedLinear", {}, [_t(64, 32), _t(32, 48), _t(48)])
    (launch,) = _by_strategy(p)["matmul-smem"]
    # accumulates onto the output the bias broadcast filled (param 3)
    assert launch.args == (("param", 0), ("param", 1), ("param", 3))
    assert [strategy_of(l.kernel) for l in p.launches] == ["generic", "matmul-smem"]


def test_large_elementwise_is_a_bounded_grid_stride_loop():
    (launch,) = _lower("Exp", {}, [_t(1024, 1024)]).launches
    assert strategy_of(launch.kernel) == "grid-stride"
    assert launch.grid == (GRID_CAP, 1, 1) and launch.block == (256, 1, 1)
    assert launch.args == (("param", 0), ("param", 1))
    (scaled,) = _lower("MulScalar", {"value": 2.5}, [_t(1024, 1024)]).launches
    assert strategy_of(scaled.kernel) == "grid-stride"  # its captured constant is cloned in
    (small,) = _lower("Exp", {}, [_t(64, 128)]).launches  # below GRID_STRIDE_MIN: tiled
    assert strategy_of(small.kernel) == "generic" and small.block == (32, 8, 1)


@pytest.mark.parametrize("op,params,types,why", [
    ("SumDim", {"axis": 1}, [_t(64, 8)], "rows shorter than ROW_MIN"),
    ("MinDim", {"axis": 1}, [_t(64, 100, dtype=DType.F64)], "f64 accumulator (no shuffle)"),
    ("ArgMaxDim", {"axis": 1}, [_t(64, 100)], "a select-based combiner"),
    ("MatMul", {}, [_t(40, 20, dtype=DType.F16), _t(20, 50, dtype=DType.F16)], "f16 matmul"),
])
def test_instances_no_strategy_handles_keep_the_generic_path(op, params, types, why):
    p = _lower(op, params, types)
    assert set(_by_strategy(p)) == {"generic"}, why


def _one_generic(body: str, pre: str = "") -> str:
    """A row reduction of 64x128 into 64 with ``body``; ``pre``: host ops."""
    return f"""
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
module {{
  func.func @kernel(%x: tensor<64x128xf32> {{bufferization.writable = false}},
                    %init: tensor<64xf32> {{bufferization.writable = false}}) -> tensor<64xf32> {{
{pre}
    %r = linalg.generic {{indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}}
        ins(%x : tensor<64x128xf32>) outs(%init : tensor<64xf32>) {{
    ^bb0(%in: f32, %acc: f32):
{body}
    }} -> tensor<64xf32>
    return %r : tensor<64xf32>
  }}
}}"""


def test_an_accumulator_used_beyond_its_combiner_keeps_the_generic_path():
    # acc' = 2*acc + x is no (combiner, element) pair: a block reduction would be wrong
    text = _one_generic("      %c2 = arith.constant 2.0 : f32\n"
                        "      %d = arith.mulf %acc, %c2 : f32\n"
                        "      %s = arith.addf %d, %in : f32\n"
                        "      linalg.yield %s : f32")
    p = cuda_pipeline.lower(text, ["kernel"], assemble=False).program
    assert set(_by_strategy(p)) == {"generic"}
    text = _one_generic("      %c2 = arith.constant 2.0 : f32\n"
                        "      %d = arith.mulf %in, %c2 : f32\n"
                        "      %s = arith.addf %acc, %d : f32\n"
                        "      linalg.yield %s : f32")
    p = cuda_pipeline.lower(text, ["kernel"], assemble=False).program
    # copies of the initial value stay generic; one block per row reduces
    (launch,) = _by_strategy(p)["row-reduce"]
    assert launch.grid == (64, 1, 1) and launch.args[0] == ("param", 0)


def test_row_reduce_bodies_it_must_refuse_or_clone():
    # a partial result read by another op: the per-thread split would change it
    text = _one_generic("      %s = arith.addf %acc, %in : f32\n"
                        "      %t = arith.mulf %s, %s : f32\n"
                        "      linalg.yield %t : f32")
    p = cuda_pipeline.lower(text, ["kernel"], assemble=False).program
    assert set(_by_strategy(p)) == {"generic"}
    # two accumulators combined: no (combiner, element) pair either
    text = _one_generic("      %s = arith.addf %acc, %acc : f32\n      linalg.yield %s : f32")
    p = cuda_pipeline.lower(text, ["kernel"], assemble=False).program
    assert set(_by_strategy(p)) == {"generic"}
    # counting with a constant of the host function: the constant is cloned in
    text = _one_generic("      %s = arith.addf %acc, %one : f32\n      linalg.yield %s : f32",
                        pre="    %one = arith.constant 1.0 : f32")
    p = cuda_pipeline.lower(text, ["kernel"], assemble=False).program
    assert len(_by_strategy(p)["row-reduce"]) == 1


def test_strategy_of_names_the_generic_path():
    assert strategy_of("kernel_kernel_3") == "generic"
    assert strategy_of("kernel_row_reduce_0") == "row-reduce"
    assert strategy_of("kernel_matmul_smem_2") == "matmul-smem"
    assert strategy_of("kernel_grid_stride_1") == "grid-stride"


def test_strategies_are_part_of_the_pipeline_fingerprint():
    text = cuda_pipeline.describe_pipeline()
    assert "strategies:matmul-smem,row-reduce,grid-stride" in text
    assert cuda_pipeline.PIPELINE_VERSION == "cuda-3"


def test_a_strategy_writing_invalid_ir_is_a_pipeline_error(monkeypatch, tmp_path):
    monkeypatch.setenv("FUELC_REPRO_DIR", str(tmp_path))
    broken = [dataclasses.replace(s, emit=lambda g, plan, name: (
        f"gpu.module @{name} {{ gpu.func @{name}() kernel {{ %x = arith.addf }} }}",
        (1, 1, 1), (1, 1, 1), 0)) for s in cuda_strategy.STRATEGIES]
    monkeypatch.setattr(cuda_strategy, "STRATEGIES", tuple(broken))
    with pytest.raises(PipelineError, match=r"(?s)the CUDA matmul-smem strategy wrote a "
                                            r"kernel for kernel_matmul_smem_0 that MLIR rejects.*"
                                            r"\n  reproducer: .*STRATEGIES"):
        _lower("MatMul", {}, [_t(16, 16), _t(16, 16)])


# -- ptxas --------------------------------------------------------------------------------------
@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("op,params,types,marks", [
    ("SoftmaxLastDim", {}, [_t(64, 100)], ("shfl.sync.bfly", "bar.sync")),
    ("LayerNormLastDim", {"eps": 1e-5}, [_t(64, 100), _t(100), _t(100)], ("shfl.sync.bfly",)),
    ("MatMul", {}, [_t(3, 40, 20), _t(3, 20, 50)], (".extern .shared", "bar.sync")),
    ("Exp", {}, [_t(1024, 1024)], ("ex2.approx",)),
], ids=["softmax", "layernorm", "bmm", "exp-grid-stride"])
def test_ptxas_accepts_every_strategy(op, params, types, marks, arch):
    p = _lower(op, params, types, target=f"cuda:{arch}", assemble=True)
    assert p.cubin and p.arch == arch and f".target {arch}" in p.ptx
    assert set(_by_strategy(p)) - {"generic"}, [l.kernel for l in p.launches]
    for mark in marks:
        assert mark in p.ptx, mark


# -- with a GPU ----------------------------------------------------------------------------------
def _graph(op, params, shapes):
    from compiler.registry import default_registry
    from compiler.registry.builders import fused
    g = Graph()
    xs = [g.input(f"x{i}", s, "f32") for i, s in enumerate(shapes)]
    y = fused(op, *xs, **params) if op in default_registry() else g.add_node(op, xs, params)
    g.output(y, name="y")
    return g


def test_gpu_cases_build_and_compile_without_a_device():
    """The ``gpu`` numerics cases are well formed here too: each builds,
    runs on the reference interpreter, compiles for cuda (no device needed
    to compile) and uses a GPU strategy."""
    for op, params, shapes in GPU_CASES[::4]:
        g = _graph(op, params, shapes)
        feed = {f"x{i}": np.ones(s, np.float32) for i, s in enumerate(shapes)}
        assert interpret(g, feed)["y"].size
        launches = compile(g, "cuda").ir["launches"].splitlines()
        assert {strategy_of(l.split()[0]) for l in launches} - {"generic"}, (op, launches)


GPU_CASES = [("SoftmaxLastDim", {}, [(33, 1000)]),
             ("LogSoftmaxLastDim", {}, [(7, 300)]),
             ("LayerNormLastDim", {"eps": 1e-5}, [(33, 257), (257,), (257,)]),
             ("RmsNormLastDim", {"eps": 1e-6}, [(5, 4096)]),
             ("SumDim", {"axis": 1}, [(9, 5000)]),
             ("MaxDim", {"axis": 1}, [(9, 77)]),
             ("MeanDim", {"axis": 0}, [(300, 40)]),
             ("SumAll", {}, [(123, 457)]),
             ("MatMul", {}, [(70, 33), (33, 45)]),
             ("MatMul", {}, [(3, 17, 64), (3, 64, 31)]),
             ("FusedLinear", {}, [(50, 96), (96, 130), (130,)]),
             ("Exp", {}, [(700, 1000)]),
             ("Add", {}, [(700, 1000), (700, 1000)])]


@pytest.mark.gpu
@pytest.mark.parametrize("op,params,shapes", GPU_CASES,
                         ids=[f"{c[0]}-{'x'.join(map(str, c[2][0]))}" for c in GPU_CASES])
def test_gpu_strategy_numerics_vs_reference(op, params, shapes):
    rng = np.random.default_rng(3)
    g = _graph(op, params, shapes)
    feed = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    want = interpret(g, feed)["y"]
    got = compile(g, "cuda")(**feed)
    k = shapes[0][-1]
    np.testing.assert_allclose(got, want, rtol=2e-5 * max(1, np.sqrt(k) / 8), atol=1e-4)


def test_softmax_mask_lowers_through_the_generic_rule():
    """SoftmaxLastDim's additive mask (folded on cpu only) still lowers where
    the generic rule runs it: x * scale + mask (a generic reading the mask at
    index 0 on its extents of 1), then the two row reductions."""
    text = single_op_linalg_text("SoftmaxLastDim", {"scale": 0.125},
                                 [_t(2, 4, 16, 100), _t(2, 1, 1, 100)], False, "cuda")
    assert "affine_map<(d0, d1, d2, d3) -> (d0, 0, 0, d3)>" in text, text
    assert text.count("reduction") >= 2  # the row max and the row sum
    from compiler.codegen.cpu import lower  # the generic rule's linalg is valid IR
    assert lower(text, ["kernel"]).object


def test_softmax_scale_lowers_through_the_generic_rule():
    """SoftmaxLastDim's ``scale`` (folded on cpu only, ``fold_softmax_scales``)
    still lowers where the generic rule runs it: x * scale, then the two row
    reductions."""
    p = _lower("SoftmaxLastDim", {"scale": 0.125}, [_t(64, 100)])
    assert len(_by_strategy(p).get("row-reduce", [])) == 2, [l.kernel for l in p.launches]
