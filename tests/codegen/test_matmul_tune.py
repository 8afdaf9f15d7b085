"""The f32 AVX2 matmul kernels, and the products over a B packed at compile
time, are scheduled with x86-64-v3's LLVM model whatever the target CPU
(``strategy._MATMUL_TUNE``): on a Zen 3 host the Zen 3 model ran them
1.14-1.17x (packed: 1.02-1.08x) slower at two threads. Same instructions
set, same FMAs in the same order: the same bits as the x86-64-v3 build. The
packed few-rows kernel keeps the target's model (Zen 3's was faster)."""
import numpy as np
import pytest

from compiler import Graph, compile
from compiler.codegen import fused as F
from compiler.codegen.family import ENTRY
from compiler.codegen.cpu.pipeline import choose_strategy, lower
from compiler.codegen.family import single_op_linalg_text
from compiler.graph.opdef import TensorType
from compiler.targets import parse_target
from runtime.cpu_features import missing_cpu_features
from runtime.dtype import DType


def _llvm_ir(target, dtype=DType.F32, pack_a=False):
    ts = [TensorType((64, 40), dtype), TensorType((40, 70), dtype)]
    text = single_op_linalg_text("MatMul", {}, ts, True, "cpu", (0, 1, 2), pack_a=pack_a)
    strategy = choose_strategy(text, ["kernel"], target)
    return strategy, lower(text, ["kernel"], target=target, strategy=strategy, keep_ir=True).llvm_ir


@pytest.mark.parametrize("pack_a", [False, True])
def test_f32_avx2_matmul_is_scheduled_as_x86_64_v3(pack_a):
    strategy, ll = _llvm_ir("cpu:znver3", pack_a=pack_a)
    assert strategy.name.startswith("matmul-matmul-f32-6x16"), strategy.name
    assert '"tune-cpu"="x86-64-v3"' in ll   # (the target CPU is the target machine's)


@pytest.mark.parametrize("target,dtype", [("cpu:x86-64-v4", DType.F32), ("cpu:znver3", DType.F64)])
def test_other_matmul_kernels_keep_the_target_model(target, dtype):
    strategy, ll = _llvm_ir(target, dtype)
    assert strategy.name.startswith("matmul-"), strategy.name
    assert '"tune-cpu"' not in ll


def _packed_llvm_ir(target, rows=64, k=40, **cls):
    types = (TensorType((rows, k), DType.F32), TensorType((3, k, 16), DType.F32),
             TensorType((48,), DType.F32))
    inst = F.FusedInstance("FusedLinear", (("b_panel", 16),), types, (0, 1, 2, 3), **cls)
    res = lower(F.linalg_text(inst, platform="cpu"), [ENTRY], target=target, keep_ir=True)
    return res.strategy.name, res.llvm_ir


@pytest.mark.parametrize("cls,name", [({}, "matmul-packed-b-f32-6x16"),
                                      ({"unpacked": True}, "matmul-packed-b-f32-4x16"),
                                      ({"short_k": True, "k": 300}, "matmul-packed-b-f32-6x16-short-k")])
def test_f32_avx2_packed_products_are_scheduled_as_x86_64_v3(cls, name):
    cls = dict(cls)
    name_, ll = _packed_llvm_ir("cpu:znver3", k=cls.pop("k", 40), **cls)
    assert name_ == name
    assert '"tune-cpu"="x86-64-v3"' in ll


@pytest.mark.parametrize("target,rows,cls", [("cpu:znver3", 4, {"few_rows": True}),
                                             ("cpu:x86-64-v4", 64, {})])
def test_packed_rows_and_avx512_products_keep_the_target_model(target, rows, cls):
    name, ll = _packed_llvm_ir(target, rows=rows, **cls)
    assert name.startswith("matmul-packed-b-"), name
    assert '"tune-cpu"' not in ll


@pytest.mark.skipif(bool(missing_cpu_features(parse_target("cpu:znver3").features)),
                    reason="runs Zen 3 code: this CPU lacks some of its features")
@pytest.mark.parametrize("packed,shape", [(False, (37, 29, 53)), (False, (365, 600, 130)),
                                          (True, (37, 300, 96)), (True, (200, 600, 160))])
def test_zen3_and_x86_64_v3_products_give_the_same_bits(packed, shape):
    # packed: B a constant, packed at compile time (a MatMul made a FusedLinear)
    m, k, n = shape
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    g = Graph()
    rhs = g.constant(b, name="b") if packed else g.input("b", (k, n), "f32")
    g.output(g.input("a", (m, k), "f32") @ rhs, name="y")
    inputs = {"a": a} if packed else {"a": a, "b": b}
    zen3, v3 = compile(g, target="cpu:znver3"), compile(g, target="cpu:x86-64-v3")
    assert ("b_panel" in zen3.ir["optimized"]) == packed
    got = zen3(**inputs)
    np.testing.assert_array_equal(got, v3(**inputs))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
