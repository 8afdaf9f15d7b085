"""The direct convolution (``transforms/conv.py``): the cpu Conv2D kernel of a
stride-1 groups-1 conv is one generic over the flat padded input, register-
tiled to FMA tiles by the ``conv-direct`` strategy on AVX2 and AVX-512 targets,
and its two rewrites do what they claim on small IR. Numerics of the kernel
against the reference: tests/fused/test_fused_attention_quant_conv.py."""
import re

import numpy as np
import pytest

from compiler import Graph, compile
from compiler.codegen.cpu import pipeline as P
from compiler.codegen.cpu.strategy import Strategy, VECTOR_LOWERING
from compiler.codegen.cpu.transforms.conv import (DIRECT_CONV_ATTR, fold_unit_dims,
                                                  single_reduction_contracts)
from compiler.codegen.family import single_op_linalg_text
from compiler.errors import PipelineError
from compiler.graph.opdef import TensorType
from compiler.mlir import ir
from compiler.registry.builders import conv2d
from runtime.dtype import DType

PARAMS = dict(stride=(1, 1), padding=(1, 1), groups=1, dilation=(1, 1))


def _kernel_text(dtype=DType.F32, x=(2, 5, 9, 11), w=(13, 5, 3, 3), params=PARAMS):
    ts = [TensorType(x, dtype), TensorType(w, dtype), TensorType((w[0],), dtype)]
    return single_op_linalg_text("Conv2D", dict(params), ts, False, "cpu")


@pytest.mark.parametrize("target,dtype,tile,vec", [
    ("cpu:x86-64-v3", DType.F32, "6x16", "v16f32"),
    ("cpu:skylake-avx512", DType.F32, "8x32", "v32f32"),
    ("cpu:x86-64-v3", DType.F64, "6x8", "v8f64"),
    ("cpu:skylake-avx512", DType.F64, "8x16", "v16f64"),
])
def test_direct_conv_strategy_and_fma_tiles(target, dtype, tile, vec):
    text = _kernel_text(dtype)
    assert DIRECT_CONV_ATTR in text
    elt = "f32" if dtype == DType.F32 else "f64"
    res = P.lower(text, ["kernel"], target=target)
    assert res.strategy.name == f"conv-direct-{elt}-{tile}"
    # the micro-kernel: mr broadcasts times one nr-wide vector of the plane
    assert re.search(rf"fmuladd\.{vec}", res.llvm_ir), "no vector FMA tile in the kernel"


def test_conv_kernel_outside_the_direct_class_keeps_the_loops():
    strided = dict(PARAMS, stride=(2, 2))
    assert DIRECT_CONV_ATTR not in _kernel_text(params=strided)
    grouped = dict(PARAMS, groups=5)
    assert DIRECT_CONV_ATTR not in _kernel_text(w=(5, 1, 3, 3), params=grouped)


def test_direct_conv_compiles_through_compile_and_matches_numpy():
    """Through compile(): the fused kernel, channel and pixel remainders, three
    images, no bias, dilation."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 6, 10, 12)).astype(np.float32)
    w = rng.standard_normal((11, 6, 3, 3)).astype(np.float32)
    g = Graph()
    xi = g.input("x", x.shape, "f32")
    g.output(conv2d(xi, g.constant(w, name="w"), padding=(2, 1), dilation=(2, 1)), "y")
    m = compile(g)
    assert m.kernel_summary() == ["Conv2D[f32,f32,f32] (mlir-cpu-fused)"]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (2, 2), (1, 1)))
    want = np.zeros((3, 11, 10, 12))
    for ky in range(3):
        for kx in range(3):
            want += np.einsum("nchw,oc->nohw", xp[:, :, 2 * ky:2 * ky + 10, kx:kx + 12],
                              w[:, :, ky, kx].astype(np.float64))
    np.testing.assert_allclose(m(x=x), want, rtol=1e-5, atol=1e-4)


_GENERIC = """
#x = affine_map<(co, p, c, kh, kw) -> (c, p + kh * 7 + kw)>
#w = affine_map<(co, p, c, kh, kw) -> (co, c, kh, kw)>
#o = affine_map<(co, p, c, kh, kw) -> (co, p)>
func.func @f(%x: memref<1x8xf32>, %w: memref<4x1x1x1xf32>, %o: memref<4x8xf32>) {
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel",
      "reduction", "reduction", "reduction"]} ins(%x, %w : memref<1x8xf32>, memref<4x1x1x1xf32>)
      outs(%o : memref<4x8xf32>) attrs = {fuelc.direct_conv} {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  }
  return
}
"""


def test_fold_unit_dims_leaves_projected_permutations():
    with ir.Context():
        m = ir.Module.parse(_GENERIC)
        assert fold_unit_dims(m) == 1
        text = str(m)
        # the tap offset p + kh*7 + kw reads p once kh and kw have extent 1
        assert "(d2, d1)" in text and "d3 * 7" not in text
        assert fold_unit_dims(m) == 0            # nothing left to fold
        unmarked = ir.Module.parse(_GENERIC.replace("attrs = {fuelc.direct_conv} ", ""))
        assert fold_unit_dims(unmarked) == 0     # only the marked generic is touched


_CONTRACT = """
#l = affine_map<(n, co, p, c, kh, kw) -> (n, c, p)>
#r = affine_map<(n, co, p, c, kh, kw) -> (co, c, kh, kw)>
#a = affine_map<(n, co, p, c, kh, kw) -> (n, co, p)>
func.func @f(%l: vector<1x1x16xf32>, %r: vector<8x1x1x1xf32>, %a: vector<1x8x16xf32>) -> vector<1x8x16xf32> {
  %0 = vector.contract {indexing_maps = [#l, #r, #a], iterator_types = ["parallel",
      "parallel", "parallel", "reduction", "reduction", "reduction"], kind = #vector.kind<add>}
      %l, %r, %a : vector<1x1x16xf32>, vector<8x1x1x1xf32> into vector<1x8x16xf32>
  return %0 : vector<1x8x16xf32>
}
"""


def test_single_reduction_contracts_is_an_mk_kn_product():
    with ir.Context():
        m = ir.Module.parse(_CONTRACT)
        assert single_reduction_contracts(m) == 1
        m.operation.verify()
        text = str(m)
        assert "vector<8x1xf32>, vector<1x16xf32> into vector<8x16xf32>" in text
        assert text.count("vector.contract") == 1
        assert single_reduction_contracts(m) == 0


def test_unknown_rewrite_step_is_a_pipeline_error():
    bad = Strategy(name="bad", transform=("py:no_such_rewrite",), lowering=VECTOR_LOWERING)
    with pytest.raises(PipelineError, match="unknown rewrite step 'py:no_such_rewrite'.*known"):
        P.lower(_kernel_text(), ["kernel"], strategy=bad)
