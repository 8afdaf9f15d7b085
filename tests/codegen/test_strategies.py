"""CPU code-generation strategies: which one is selected, that the selected one
really is the vectorized code, and numerics against numpy on awkward shapes,
batches, strided/transposed/flipped layouts and f64."""
import numpy as np
import pytest

from compiler.codegen import cpu, kernels as K
from compiler.codegen.family import ENTRY
from compiler.codegen.cpu import strategy as S
from compiler.graph.opdef import TensorType
from runtime import params as P
from runtime.binding import KernelBindingTable
from runtime.dtype import DType
from runtime.keys import BackendId
from runtime.layout import Layout
from runtime.opkind import OpKind
from runtime.storage import Storage
from compiler.targets import parse_target

F32, F64 = DType.F32, DType.F64
TOL = {F32: dict(rtol=1e-4, atol=1e-4), F64: dict(rtol=1e-11, atol=1e-11)}


@pytest.fixture(scope="module")
def table():
    t = KernelBindingTable()
    K.register_primitive_kernels(t, parse_target("cpu"), dtypes=(F32, F64))
    t.finalize()
    return t


def _storage(arr: np.ndarray) -> Storage:
    return Storage(np.ascontiguousarray(arr).view(np.uint8).reshape(-1), DType.parse(str(arr.dtype)))


def _matmul_text(dt: DType, rank: int, dynamic: bool = True, n: int = 8) -> str:
    shape = (n,) * rank
    return K.linalg_text(K.OpInstance("MatMul", (), (TensorType(shape, dt),) * 2, dynamic))


def _call_matmul(table, dt, a_store, a_lay, b_store, b_lay):
    out_shape = a_lay.shape[:-1] + (b_lay.shape[-1],)
    out = Storage.zeros(dt, max(1, int(np.prod(out_shape))))
    ol = Layout.contiguous(out_shape)
    m, k = a_lay.shape[-2:]
    params = P.Matmul(tuple(range(a_lay.rank - 2)), tuple(range(b_lay.rank - 2)), m,
                      b_lay.shape[-1], k)
    table.lookup(OpKind.MatMul, (dt, dt, dt), BackendId.CPU)(
        [a_store, b_store], [out], [a_lay, b_lay, ol], params)
    return out.view(ol).copy()


# -- selection ------------------------------------------------------------------------
@pytest.mark.parametrize("target,dt,rank,name", [
    ("cpu:x86-64-v3", F32, 2, "matmul-matmul-f32-6x16"),
    ("cpu:x86-64-v3", F64, 2, "matmul-matmul-f64-6x8"),
    ("cpu:x86-64-v3", F32, 3, "matmul-batch_matmul-f32-6x16"),
    ("cpu:x86-64-v3", F64, 3, "matmul-batch_matmul-f64-6x8"),
    ("cpu:x86-64-v4", F32, 2, "matmul-matmul-f32-8x32"),
    ("cpu:x86-64-v4", F64, 3, "matmul-batch_matmul-f64-8x16"),
    ("cpu:znver3", F32, 2, "matmul-matmul-f32-6x16"),
    ("cpu:skylake-avx512", F32, 3, "matmul-batch_matmul-f32-8x32")])
def test_matmul_instances_select_the_matmul_strategy(target, dt, rank, name):
    assert cpu.choose_strategy(_matmul_text(dt, rank), [ENTRY], target).name == name


def _assembly(ll: str, target: str) -> str:
    from compiler.codegen.cpu import llvm as L
    t = parse_target(target)
    return L.target_machine(t).emit_assembly(L.parse_ir(ll, fixup=False))


@pytest.mark.parametrize("target,reg,width", [("cpu:x86-64-v3", "ymm", 8),
                                              ("cpu:x86-64-v4", "zmm", 16)])
def test_matmul_fmas_use_the_targets_vector_width(target, reg, width):
    # AVX2: 8-float ymm FMAs only; AVX-512: 16-float zmm FMAs in the micro-kernel
    import re
    asm = _assembly(cpu.lower(_matmul_text(F32, 2), [ENTRY], target=target).llvm_ir, target)
    fmas = re.findall(r"vfmadd\d+ps\s+[^\n]*%(xmm|ymm|zmm)", asm)
    assert fmas.count(reg) >= 12, f"{target}: {fmas.count(reg)} {reg} FMAs"  # 6x16 / 8x32 tiles
    assert "zmm" not in asm if reg == "ymm" else fmas.count("zmm") > fmas.count("ymm")


def test_static_matmul_and_elementwise_keep_loops():
    # transform.loop.peel fails on statically divisible loops: static shapes stay loops.
    assert cpu.choose_strategy(_matmul_text(F32, 2, dynamic=False, n=64), [ENTRY]) is S.LOOPS
    add = K.linalg_text(K.OpInstance("Add", (), (TensorType((4, 4), F32),) * 2, True))
    assert cpu.choose_strategy(add, [ENTRY]) is S.LOOPS


def test_matmul_strategy_emits_vector_fmas_and_loops_do_not():
    text = _matmul_text(F32, 2)
    fast = cpu.lower(text, [ENTRY], target="cpu:x86-64-v3")
    slow = cpu.lower(text, [ENTRY], target="cpu:x86-64-v3", strategy=S.LOOPS)
    assert fast.strategy.name.startswith("matmul-")
    # the 6x16 micro-kernel: 16-wide FMAs (two ymm each) on the packed B panel
    assert "@llvm.fmuladd.v16f32" in fast.llvm_ir
    assert "fmuladd.v16f32" not in slow.llvm_ir
    assert fast.object != slow.object


def test_reduction_bodies_are_marked_reassociable():
    text = K.linalg_text(K.OpInstance("SumDim", (("axis", 1),), (TensorType((4, 4), F32),), True))
    res = cpu.lower(text, [ENTRY], keep_ir=True)
    assert "fastmath<reassoc,contract>" in res.stages["prepare"]
    assert "reassoc" in res.llvm_ir


def test_strategy_fingerprints_differ():
    fps = {S.LOOPS.fingerprint, *(S.matmul_strategy(op, e, isa).fingerprint
                                  for op in ("linalg.matmul", "linalg.batch_matmul")
                                  for e in ("f32", "f64") for isa in ("avx2", "avx512"))}
    assert len(fps) == 9


# -- numerics ------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [F32, F64])
@pytest.mark.parametrize("mkn", [(1, 1, 1), (7, 13, 5), (65, 33, 17), (6, 1, 16), (13, 40, 35),
                                 (1, 70, 3)])
def test_matmul_awkward_shapes(table, rng, dt, mkn):
    m, k, n = mkn
    a = rng.uniform(-1, 1, (m, k)).astype(dt.numpy)
    b = rng.uniform(-1, 1, (k, n)).astype(dt.numpy)
    got = _call_matmul(table, dt, _storage(a), Layout.contiguous(a.shape),
                       _storage(b), Layout.contiguous(b.shape))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, **TOL[dt])


@pytest.mark.parametrize("dt", [F32, F64])
def test_batch_matmul(table, rng, dt):
    a = rng.uniform(-1, 1, (3, 65, 33)).astype(dt.numpy)
    b = rng.uniform(-1, 1, (3, 33, 17)).astype(dt.numpy)
    got = _call_matmul(table, dt, _storage(a), Layout.contiguous(a.shape),
                       _storage(b), Layout.contiguous(b.shape))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, **TOL[dt])


@pytest.mark.parametrize("dt", [F32, F64])
def test_matmul_transposed_strided_flipped_inputs(table, rng, dt):
    m, k, n = 37, 70, 45
    at = rng.uniform(-1, 1, (k, m)).astype(dt.numpy)          # A stored transposed
    bs = rng.uniform(-1, 1, (k, 2 * n + 1)).astype(dt.numpy)  # B: every other column
    a_lay = Layout.contiguous(at.shape).transpose()
    b_lay = Layout.contiguous(bs.shape)
    b_lay = Layout((k, n), (b_lay.stride[0], 2), 1)
    got = _call_matmul(table, dt, _storage(at), a_lay, _storage(bs), b_lay)
    want = at.T.astype(np.float64) @ bs[:, 1::2]
    np.testing.assert_allclose(got, want, **TOL[dt])
    # flipped rows of B (negative stride)
    b_flip = Layout.contiguous((k, 2 * n + 1)).flip(0)
    b_flip = Layout((k, n), (b_flip.stride[0], 2), b_flip.start_offset)
    got = _call_matmul(table, dt, _storage(at), a_lay, _storage(bs), b_flip)
    np.testing.assert_allclose(got, at.T.astype(np.float64) @ bs[::-1, 0:2 * n:2], **TOL[dt])


def test_matmul_writes_a_strided_output(rng):
    # Call the compiled function directly with a strided output descriptor.
    from compiler.codegen.memref import descriptor_from_array
    fn = K.FAMILY.compiled(K.OpInstance("MatMul", (), (TensorType((8, 8), F32),) * 2, True),
                          parse_target("cpu"))
    a = rng.uniform(-1, 1, (29, 19)).astype(np.float32)
    b = rng.uniform(-1, 1, (19, 40)).astype(np.float32)
    big = np.full((29, 81), 7.0, np.float32)
    out = big[:, 1::2]
    fn(descriptor_from_array(a), descriptor_from_array(b), descriptor_from_array(out))
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert (big[:, 0::2] == 7.0).all()  # untouched between the written columns


@pytest.mark.parametrize("dt", [F32, F64])
def test_reductions_and_elementwise_strided(table, rng, dt):
    x = rng.uniform(-2, 2, (33, 70)).astype(dt.numpy)
    st = _storage(x)
    lay = Layout.contiguous(x.shape).transpose()  # (70, 33), inner stride 70
    xt = x.T.astype(np.float64)
    for kind, dims, ref in [(OpKind.SumReduce, (1,), xt.sum(1)), (OpKind.SumReduce, (0,), xt.sum(0)),
                            (OpKind.MaxReduce, (1,), xt.max(1))]:
        out_shape = (xt.shape[1 - dims[0]],)
        out = Storage.zeros(dt, out_shape[0])
        table.lookup(kind, (dt, dt), BackendId.CPU)(
            [st], [out], [lay, Layout.contiguous(out_shape)], P.Reduce(dims=dims))
        np.testing.assert_allclose(out.view(Layout.contiguous(out_shape)), ref, **TOL[dt])
    out = Storage.zeros(dt, xt.size)
    table.lookup(OpKind.ExpElementwise, (dt, dt), BackendId.CPU)(
        [st], [out], [lay, Layout.contiguous(xt.shape)], P.NO_PARAMS)
    np.testing.assert_allclose(out.view(Layout.contiguous(xt.shape)), np.exp(xt), **TOL[dt])
