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


# -- unit-stride specialisation, blocking ---------------------------------------------
def test_matmul_instances_are_keyed_on_unit_inner_strides():
    p = P.Matmul((), (), 5, 7, 3)
    a, b, o = Layout.contiguous((5, 3)), Layout.contiguous((3, 7)), Layout.contiguous((5, 7))
    dense, _ = K.instance_for(OpKind.MatMul, (F32,) * 3, [a, b, o], p, 2)
    assert dense.unit_stride == (0, 1, 2)
    bt = Layout.contiguous((7, 3)).transpose()                  # b stored transposed
    mixed, _ = K.instance_for(OpKind.MatMul, (F32,) * 3, [a, bt, o], p, 2)
    assert mixed.unit_stride == (0, 2) and mixed.memo_key != dense.memo_key
    # one column: the stride is never used, the unit kernel serves
    one = Layout((3, 1), (1, 3))
    col, _ = K.instance_for(OpKind.MatMul, (F32,) * 3, [a, one, Layout.contiguous((5, 1))],
                            P.Matmul((), (), 5, 1, 3), 2)
    assert col.unit_stride == (0, 1, 2)
    # the entry carries the attribute; the general kernel's text has none
    assert "fuelc.unit_stride_args = [0, 2]" in K.linalg_text(mixed, platform="cpu")
    assert "fuelc.unit_stride_args" not in K.linalg_text(
        K.OpInstance("MatMul", (), mixed.input_types, True), platform="cpu")


def test_assume_unit_strides_retypes_the_listed_arguments():
    from compiler.mlir import ir
    text = """func.func @kernel(%a: memref<?x?xf32, strided<[?, ?], offset: ?>>,
                         %b: memref<?x?xf32, strided<[?, ?], offset: ?>>)
        attributes {fuelc.unit_stride_args = [1]} {
      %c0 = arith.constant 0 : index
      %x = memref.load %a[%c0, %c0] : memref<?x?xf32, strided<[?, ?], offset: ?>>
      memref.store %x, %b[%c0, %c0] : memref<?x?xf32, strided<[?, ?], offset: ?>>
      return
    }"""
    with ir.Context():
        m = ir.Module.parse(text)
        assert cpu.pipeline.assume_unit_strides(m) == 1
        out = str(m)
        m.operation.verify()
        cpu.pipeline.run_stage(m, cpu.pipeline.Stage("canonicalize", ("canonicalize",)))
        canon = str(m)
    assert "fuelc.unit_stride_args" not in out
    # the argument itself is unit-stride (same descriptor, so the same C ABI);
    # old uses go through a cast back that canonicalization folds away
    assert "%arg1: memref<?x?xf32, strided<[?, 1], offset: ?>>" in out
    assert "memref.cast %arg1 : memref<?x?xf32, strided<[?, 1], offset: ?>> to " \
           "memref<?x?xf32, strided<[?, ?], offset: ?>>" in out
    assert "memref.store %0, %cast[%c0, %c0]" in out
    assert "memref.store %0, %arg1[%c0, %c0] : memref<?x?xf32, strided<[?, 1], offset: ?>>" in canon
    assert "memref.cast" not in canon
    assert "memref.load %arg0" in canon  # %a is not listed: read through its own strides


def _scheduled_matmul(shape, target: str) -> str:
    """The unit-stride f32 MatMul instance of ``shape`` after its strategy's
    transform script (vector IR, before the LLVM lowering)."""
    from compiler.mlir import ir
    inst = K.OpInstance("MatMul", (), (TensorType(shape, F32),) * 2, True, (0, 1, 2))
    res = cpu.lower(K.linalg_text(inst, platform="cpu"), [ENTRY], target=target, keep_ir=True)
    with ir.Context():
        m = ir.Module.parse(res.stages["bufferize"])
        cpu.pipeline.assume_unit_strides(m)
        cpu.pipeline.apply_transforms(m, res.strategy.transform)
        return str(m)


def test_unit_stride_matmul_keeps_the_c_tile_in_registers_across_k():
    """The accumulators of the mr x nr tile are loop-carried values of the K
    loop (loaded and stored once per K block, with vector loads), not a load
    and store of C per multiply-add: the unit-stride argument must survive
    canonicalization as the base the hoisting sees."""
    out = _scheduled_matmul((8, 8), "cpu:x86-64-v3")
    assert "iter_args" in out and "-> (vector<6x16xf32>)" in out, out[:3000]
    assert "vector.load %arg2" in out and "vector.store" in out


@pytest.mark.parametrize("target", ["cpu:x86-64-v3", "cpu:x86-64-v4"])
def test_unit_stride_matmul_packs_with_vector_loads_and_keeps_k_loops_rolled(target):
    inst = K.OpInstance("MatMul", (), (TensorType((8, 8), F32),) * 2, True, (0, 1, 2))
    res = cpu.lower(K.linalg_text(inst, platform="cpu"), [ENTRY], target=target, keep_ir=True)
    llvm_dialect = res.stages["lower-to-llvm"]
    # the micro-kernel's K loops carry "do not unroll" (unrolled, LLVM rotated
    # the accumulators through registers and spilled)
    assert "#llvm.loop_unroll<disable = true>" in llvm_dialect
    assert "llvm.loop.unroll.disable" in res.llvm_ir
    general = cpu.lower(_matmul_text(F32, 2), [ENTRY], target=target)
    assert general.object != res.object


def test_matmul_script_rejects_an_m_block_that_is_not_a_multiple_of_mr():
    from compiler.codegen.cpu.transforms.matmul import matmul_script
    with pytest.raises(ValueError, match="mc=100 is not a multiple of mr=8"):
        matmul_script(mr=8, nr=32, kc=256, mc=100)


@pytest.mark.parametrize("dt", [F32, F64])
@pytest.mark.parametrize("mkn", [(127, 1, 33), (33, 7, 127), (1, 600, 1), (401, 1100, 70)])
def test_matmul_shapes_across_register_k_and_m_blocks(table, rng, dt, mkn):
    # K=1; odd M/N; K beyond kc (256 AVX2, 512 AVX-512), M beyond mc (240, 384)
    m, k, n = mkn
    a = rng.uniform(-1, 1, (m, k)).astype(dt.numpy)
    b = rng.uniform(-1, 1, (k, n)).astype(dt.numpy)
    got = _call_matmul(table, dt, _storage(a), Layout.contiguous(a.shape),
                       _storage(b), Layout.contiguous(b.shape))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, **TOL[dt])


def test_matmul_mixed_unit_and_strided_operands(table, rng):
    # a unit-stride lhs with a transposed rhs, and a transposed lhs with a
    # unit-stride rhs (each a kernel specialised on its own operand set)
    m, k, n = 45, 70, 37
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    bt = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    got = _call_matmul(table, F32, _storage(a), Layout.contiguous(a.shape),
                       _storage(bt), Layout.contiguous(bt.shape).transpose())
    np.testing.assert_allclose(got, a.astype(np.float64) @ bt.T, **TOL[F32])
    at = np.ascontiguousarray(a.T)
    b = np.ascontiguousarray(bt.T)
    got = _call_matmul(table, F32, _storage(at), Layout.contiguous(at.shape).transpose(),
                       _storage(b), Layout.contiguous(b.shape))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, **TOL[F32])


# -- the N remainder of batched products (attention heads) --------------------------
@pytest.mark.parametrize("dt", [F32, F64])
@pytest.mark.parametrize("mkn", [(33, 64, 33), (5, 9, 47), (40, 3, 31), (129, 64, 129),
                                 (33, 33, 64), (1, 17, 15)])
@pytest.mark.parametrize("batch", [(3,), ()])
def test_batch_matmul_remainder_columns(table, rng, dt, mkn, batch):
    # N % nr columns (1 to nr - 1 on AVX2 and AVX-512) as column tiles, with
    # M remainders, unpacked (<= 32 rows) and packed calls; batched and 2-D
    m, k, n = mkn
    a = rng.uniform(-1, 1, batch + (m, k)).astype(dt.numpy)
    b = rng.uniform(-1, 1, batch + (k, n)).astype(dt.numpy)
    got = _call_matmul(table, dt, _storage(a), Layout.contiguous(a.shape),
                       _storage(b), Layout.contiguous(b.shape))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, **TOL[dt])


def test_batch_matmul_remainder_columns_of_transposed_keys(table, rng):
    # Q K^T as exported: K^T a transposed view (stride 1 along K), 33 keys
    q = rng.uniform(-1, 1, (4, 33, 64)).astype(np.float32)
    key = rng.uniform(-1, 1, (4, 33, 64)).astype(np.float32)
    kt = Layout.contiguous(key.shape).permute((0, 2, 1))
    got = _call_matmul(table, F32, _storage(q), Layout.contiguous(q.shape), _storage(key), kt)
    np.testing.assert_allclose(got, q.astype(np.float64) @ key.transpose(0, 2, 1), **TOL[F32])


@pytest.mark.parametrize("target,mr,nr", [("cpu:x86-64-v3", 6, 16), ("cpu:x86-64-v4", 8, 32)])
def test_batch_matmul_remainders_keep_accumulators_in_registers(target, mr, nr):
    """The N remainder's mr x 1 column tiles and the M remainder's 4 x nr,
    2 x nr and 1 x nr row tiles carry their accumulators through the K loop,
    in batched and 2-D products."""
    import re
    from compiler.codegen.cpu.transforms.matmul import REMAINDER_ROWS
    blocks = sum(b for b in REMAINDER_ROWS if b < mr)
    for rank, want in ((3, True), (2, True)):
        out = _scheduled_matmul((8,) * rank, target)
        # the main tile is still mr FMAs of a broadcast and a row of B (not
        # scalar code, as when the remainder was canonicalized after the main
        # tile was vectorized), the remainder's blocks of 4 and 2 rows 6
        # more, and the last remainder row one more
        fmas = len(re.findall(rf"vector.fma .*: vector<{nr}xf32>", out))
        assert fmas == mr + blocks + 1, (rank, fmas)
        assert (f"-> (vector<{mr}x1xf32>)" in out) is want, (rank, out[:2000])
        assert (f"-> (vector<{nr}xf32>)" in out) is want, (rank, out[:2000])


@pytest.mark.parametrize("target,mr,nr", [("cpu:x86-64-v3", 6, 16), ("cpu:x86-64-v4", 8, 32)])
def test_half_a_panel_of_remainder_columns_runs_half_width_register_tiles(target, mr, nr):
    """An N remainder of nr/2 columns or more runs an mr x nr/2 tile (rows
    1 x nr/2) of vector FMAs whose accumulators are carried through K, not
    nr/2 column tiles ([256,256]x[256,688] on AVX-512: 1.25 -> 1.00 ms). Its
    width is static only once its affine.min is simplified after the peel."""
    import re
    from compiler.codegen.cpu.transforms.matmul import REMAINDER_ROWS
    h = nr // 2
    for rank in (3, 2):
        out = _scheduled_matmul((8,) * rank, target)
        assert f"-> (vector<{mr}x{h}xf32>)" in out, (rank, out[:2000])
        assert f"-> (vector<{h}xf32>)" in out, (rank, out[:2000])
        fmas = len(re.findall(rf"vector.fma .*: vector<{h}xf32>", out))
        assert fmas == mr + sum(b for b in REMAINDER_ROWS if b < mr) + 1, (rank, fmas)


@pytest.mark.parametrize("dt", [F32, F64])
@pytest.mark.parametrize("m", [37, 13])
def test_remainder_columns_of_half_a_panel_and_more_match_numpy(table, rng, dt, m):
    # N % nr in nr/2..nr-1 (half-width tile, then column tiles) and below, on
    # AVX-512 (nr 32) and AVX2 (nr 16): 688 = 21*32 + 16 (43*16), 680 =
    # 21*32 + 8 (42*16 + 8), 24, 40, 47, 56; packed (37 rows) and unpacked
    # (13) calls, both with remainder rows
    k = 70
    for n in (688, 680, 24, 40, 47, 56):
        a = rng.uniform(-1, 1, (m, k)).astype(dt.numpy)
        b = rng.uniform(-1, 1, (k, n)).astype(dt.numpy)
        got = _call_matmul(table, dt, _storage(a), Layout.contiguous(a.shape),
                           _storage(b), Layout.contiguous(b.shape))
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, **TOL[dt], err_msg=f"n={n}")


def _concat_text(shape, n, axis):
    return K.linalg_text(K.OpInstance("Concat", (("dim", axis),),
                                      (TensorType(shape, F32),) * n, False))


def test_copy_kernels_take_the_copies_strategy_and_stay_small():
    # a Concat of ten [8, 1599] rows (the audio model's): unrolled by LLVM it was
    # 2.4 MB of IR and 3-4 s of LLVM; not unrolled, a vectorized loop per copy
    text = _concat_text((8, 1, 1, 1, 1599), 10, 2)
    assert cpu.choose_strategy(text, [ENTRY]) is S.COPIES
    res = cpu.lower(text, [ENTRY])
    assert res.strategy is S.COPIES
    assert len(res.llvm_ir) < 400_000
    assert res.llvm_ir.count("store <") < 200  # 10 copy loops, not 8000 unrolled stores
    unrolled = cpu.lower(text, [ENTRY], strategy=S.LOOPS)
    assert len(unrolled.llvm_ir) > 4 * len(res.llvm_ir)
    assert S.COPIES.fingerprint != S.LOOPS.fingerprint
    pad = K.linalg_text(K.OpInstance("Pad", (("mode", "constant"),
                                             ("padding", (0, 0, 0, 0, 1, 1, 1, 1)),
                                             ("value", 0.0)),
                                     (TensorType((8, 256, 2, 2), F32),), False))
    assert "linalg.fill" in pad and cpu.choose_strategy(pad, [ENTRY]) is S.COPIES


def test_batch_generic_copy_kernels_take_the_copies_strategy():
    # a run-time batch reads its extent (tensor.dim): still only copies. The
    # im2col Concat of ResNet's 2x2 images took LOOPS: 0.6 s of LLVM, unrolled
    concat = K.linalg_text(K.OpInstance("Concat", (("dim", 3),),
                                        (TensorType((8, 2, 2, 1, 128), F32),) * 9, True, (0,)))
    pad = K.linalg_text(K.OpInstance("Pad", (("mode", "constant"),
                                             ("padding", (0, 0, 1, 1, 0, 0, 1, 1)),
                                             ("value", 0.0)),
                                     (TensorType((8, 2, 2, 64), F32),), True, (0,)))
    for text in (concat, pad):
        assert "tensor.dim" in text and cpu.choose_strategy(text, [ENTRY]) is S.COPIES
    assert len(cpu.lower(concat, [ENTRY]).llvm_ir) < 200_000


def test_kernels_that_compute_keep_unrolling():
    # a row kernel written as scf loops has no linalg op either, but computes
    from compiler.codegen import fused as F
    text = F.linalg_text(F.FusedInstance("SoftmaxLastDim", (), (TensorType((4, 64), F32),)),
                         "cpu")
    assert "scf.for" in text and "linalg." not in text
    assert cpu.choose_strategy(text, [ENTRY]).llvm_unroll
    add = K.linalg_text(K.OpInstance("Add", (), (TensorType((4, 4), F32),) * 2, True))
    assert cpu.choose_strategy(add, [ENTRY]).llvm_unroll


@pytest.mark.parametrize("shape,n,axis", [((8, 1, 1, 1, 1599), 10, 2), ((8, 256, 1, 2, 2), 9, 2),
                                          ((3, 5, 7), 3, 1), ((2, 3), 4, 0),
                                          ((2, 2, 2, 1, 128), 9, 3)])
def test_concat_through_the_copies_strategy_matches_numpy(rng, shape, n, axis):
    from compiler import Graph, compile, concat
    g = Graph()
    xs = [g.input(f"x{i}", shape, "f32") for i in range(n)]
    g.output(concat(xs, axis), name="y")
    feeds = {f"x{i}": rng.standard_normal(shape).astype(np.float32) for i in range(n)}
    np.testing.assert_array_equal(compile(g)(**feeds),
                                  np.concatenate(list(feeds.values()), axis))
