"""Matmul calls of at most ``family.FEW_ROWS`` rows run on the row kernel
(1 x nr x kr tiles, loops K, M, N; B unpacked; kr = 8 for f32, 4 for f64): same
values as the reference, with N and K remainders (75 = 4*16 + 11 columns, 37 =
4*8 + 5 (f32) or 9*4 + 1 (f64) steps of K),
on every strategy boundary."""
import numpy as np
import pytest

from compiler import Graph, compile
from compiler.codegen import family
from compiler.codegen.cpu.pipeline import choose_strategy
from compiler.codegen.family import single_op_linalg_text
from compiler.graph.opdef import TensorType
from compiler.registry.builders import linear
from runtime.dtype import DType


def test_few_rows_selects_the_row_strategy():
    ts = [TensorType((3, 40), DType.F32), TensorType((40, 70), DType.F32)]
    rows = single_op_linalg_text("MatMul", {}, ts, True, "cpu", (0, 1, 2), True)
    tiled = single_op_linalg_text("MatMul", {}, ts, True, "cpu", (0, 1, 2), False)
    assert choose_strategy(rows, ["kernel"], "cpu").name.startswith("matmul-rows-matmul-f32-")
    assert choose_strategy(tiled, ["kernel"], "cpu").name.startswith("matmul-matmul-f32-")
    few = family.FEW_ROWS
    assert family.few_rows((few, 40), (0, 1, 2), 2) and not family.few_rows((few + 1, 40), (0, 1, 2), 2)
    assert not family.few_rows((1, 40), (0, 2), 2)        # B not unit-stride: tiled kernel


@pytest.mark.parametrize("dtype", ["f32", "f64"])
# 1..4 rows: the row kernel; 5..32: the tiled kernel reading B in place; 33: packed
@pytest.mark.parametrize("m", [1, 3, 4, 5, 9, 16, 17, 31, 32, 33])
def test_matmul_and_linear_of_few_rows(m, dtype):
    rng = np.random.default_rng(m)
    npt = np.float32 if dtype == "f32" else np.float64
    a = rng.standard_normal((m, 37)).astype(npt)
    w = rng.standard_normal((37, 75)).astype(npt)
    b = rng.standard_normal(75).astype(npt)
    g = Graph()
    x = g.input("x", a.shape, dtype)
    wc, bc = g.constant(w, name="w"), g.constant(b, name="b")
    g.output(x @ wc, name="mm")
    g.output(linear(x, wc, bc), name="lin")
    out = compile(g)(x=a)
    tol = 1e-5 if dtype == "f32" else 1e-12
    np.testing.assert_allclose(out["mm"], a.astype(np.float64) @ w, rtol=tol, atol=tol)
    np.testing.assert_allclose(out["lin"], a.astype(np.float64) @ w + b, rtol=tol, atol=tol)


def test_batched_matmul_of_few_rows():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 2, 19)).astype(np.float32)
    w = rng.standard_normal((3, 19, 45)).astype(np.float32)     # 19 = 4*4 + 3, 45 = 2*16 + 13
    g = Graph()
    x = g.input("x", a.shape, "f32")
    g.output(x @ g.constant(w, name="w"), name="y")
    np.testing.assert_allclose(compile(g)(x=a), a.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)


def test_a_few_dozen_rows_select_the_unpacked_strategy():
    """More than FEW_ROWS and at most UNPACKED_ROWS rows: the tiled schedule
    without the packing of B; beyond, the packed one."""
    def chosen(rows, unit=(0, 1, 2)):
        ts = [TensorType((rows, 40), DType.F32), TensorType((40, 70), DType.F32)]
        unpacked = family.unpacked_rows((rows, 40), unit, 2, 70)
        text = single_op_linalg_text("MatMul", {}, ts, True, "cpu", unit,
                                     family.few_rows((rows, 40), unit, 2), (), unpacked)
        return choose_strategy(text, ["kernel"], "cpu").name
    assert chosen(family.FEW_ROWS).startswith("matmul-rows-")
    assert chosen(family.FEW_ROWS + 1).startswith("matmul-unpacked-matmul-f32-")
    assert chosen(family.UNPACKED_ROWS).startswith("matmul-unpacked-matmul-f32-")
    assert chosen(family.UNPACKED_ROWS + 1).startswith("matmul-matmul-f32-")
    assert not family.unpacked_rows((16, 40), (0, 2), 2, 70)     # B strided: packed


def test_b_rows_a_multiple_of_4_kib_apart_are_packed_above_aliased_rows():
    """B's rows 2048 or 3072 f32 apart (8, 12 KiB: few cache sets) are read in
    place by calls of at most ALIASED_ROWS rows only; 1024 or 1536 apart by
    calls of up to UNPACKED_ROWS (runtime/rows.py); the runtime's row class
    (a symbolic .fuel file's) says the same."""
    from runtime.layout import Layout
    from runtime.rows import ALIASED_ROWS, row_class
    unit, top = (0, 1, 2), family.UNPACKED_ROWS
    for n in (2048, 3072):
        assert family.unpacked_rows((ALIASED_ROWS, 768), unit, 2, n)
        assert not family.unpacked_rows((ALIASED_ROWS + 1, 768), unit, 2, n)
    for n in (1024, 1536, 768):
        assert family.unpacked_rows((top, 768), unit, 2, n)
    lays = lambda m, n: [Layout.contiguous((m, 64)), Layout.contiguous((64, n)),
                         Layout.contiguous((m, n))]
    assert row_class(lays(20, 1536), 2) == "unpacked"
    assert row_class(lays(ALIASED_ROWS, 2048), 2) == "unpacked"
    # packed, by a kernel of its own up to UNPACKED_ROWS (its own row class)
    assert row_class(lays(ALIASED_ROWS + 1, 2048), 2) == "aliased_packed"
    assert row_class(lays(family.UNPACKED_ROWS, 3072), 2) == "aliased_packed"
    assert row_class(lays(family.UNPACKED_ROWS + 1, 2048), 2) == "packed"
    assert family.aliased_unpacked((ALIASED_ROWS, 768), unit, 2, 3072)
    assert not family.aliased_unpacked((ALIASED_ROWS, 768), unit, 2, 1536)   # not aliased
    assert not family.aliased_unpacked((ALIASED_ROWS + 1, 768), unit, 2, 3072)  # packed
    assert not family.aliased_unpacked((family.FEW_ROWS, 768), unit, 2, 3072)  # row kernel


def test_aliased_b_selects_k_blocks_of_8_on_avx2():
    """An unpacked entry whose B rows fall in few cache sets (``fuelc.aliased_b``)
    walks K in blocks of 8 with 4 x 16 tiles on AVX2 (f32); without the mark,
    or on f64, the unpacked tiles."""
    def chosen(aliased, dtype=DType.F32, target="cpu:x86-64-v3"):
        ts = [TensorType((8, 40), dtype), TensorType((40, 3072), dtype)]
        text = single_op_linalg_text("MatMul", {}, ts, True, "cpu", (0, 1, 2), False, (), True,
                                     aliased=aliased)
        return choose_strategy(text, ["kernel"], target).name
    assert chosen(True) == "matmul-unpacked-matmul-f32-4x16-k8"
    assert chosen(False) == "matmul-unpacked-matmul-f32-6x16"
    assert chosen(True, DType.F64) == "matmul-unpacked-matmul-f64-6x8-k512"


@pytest.mark.parametrize("m,k", [(5, 21), (7, 8), (8, 21), (8, 35), (9, 21), (14, 21), (16, 21),
                                 (17, 21)])
def test_matmul_and_linear_inputs_with_b_rows_8_kib_apart(m, k):
    # both inputs: 5-16 rows read B in place in K blocks of 8 and row blocks
    # of 8 (k = 21, 35: a partial last K block; rows 5, 7, 9, 14: a partial
    # row block, 4-row tiles and a 2- or 1-row one on AVX2), 17 pack it per call
    rng = np.random.default_rng(m)
    a, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, 2048)).astype(np.float32)
    b = rng.standard_normal(2048).astype(np.float32)
    g = Graph()
    x, wi, bi = g.input("x", a.shape, "f32"), g.input("w", w.shape, "f32"), g.input("b", b.shape, "f32")
    g.output(x @ wi, name="mm")
    g.output(linear(x, wi, bi), name="lin")
    out = compile(g)(x=a, w=w, b=b)
    np.testing.assert_allclose(out["mm"], a.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["lin"], a.astype(np.float64) @ w + b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m", [5, 8, 13])
def test_aliased_b_kernel_gives_the_bits_of_the_unpacked_one(m):
    """The K blocks of 8 over B rows 8 KiB apart (``fuelc.aliased_b``) are the
    same FMAs in the same order of K as the unpacked kernel's over rows 16
    elements further apart (not aliased): the same bits."""
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, 45)).astype(np.float32)
    wide = rng.standard_normal((45, 2048 + 16)).astype(np.float32)
    b = rng.standard_normal(2048).astype(np.float32)
    g = Graph()
    x, wi, bi = g.input("x", a.shape, "f32"), g.input("w", (45, 2048), "f32"), g.input("b", b.shape, "f32")
    g.output(linear(x, wi, bi), name="lin")
    mod = compile(g)
    aliased = mod(x=a, w=np.ascontiguousarray(wide[:, :2048]), b=b)
    spread = mod(x=a, w=wide[:, :2048], b=b)
    np.testing.assert_array_equal(aliased, spread)
    np.testing.assert_allclose(aliased, a.astype(np.float64) @ wide[:, :2048] + b, rtol=1e-5, atol=1e-5)


def test_aliased_packed_selects_blocks_of_b_on_avx2():
    """A packed-class entry of 17-32 rows whose B rows fall in few cache sets
    (``fuelc.aliased_b`` without ``fuelc.unpacked``: ``runtime.rows.aliased_packed``)
    copies B in blocks of 112 columns x 768 rows on AVX2 f32; f64 and AVX-512
    keep the packed tiles."""
    from runtime.rows import ALIASED_ROWS
    unit = (0, 1, 2)
    assert family.aliased_packed((ALIASED_ROWS + 1, 768), unit, 2, 3072)
    assert family.aliased_packed((family.UNPACKED_ROWS, 768), unit, 2, 2048)
    assert not family.aliased_packed((family.UNPACKED_ROWS + 1, 768), unit, 2, 3072)
    assert not family.aliased_packed((ALIASED_ROWS, 768), unit, 2, 3072)  # in place
    assert not family.aliased_packed((24, 768), unit, 2, 1536)  # not aliased
    assert not family.aliased_packed((24, 768), (0, 2), 2, 3072)  # B strided

    def chosen(aliased, dtype=DType.F32, target="cpu:x86-64-v3"):
        ts = [TensorType((24, 40), dtype), TensorType((40, 3072), dtype)]
        text = single_op_linalg_text("MatMul", {}, ts, True, "cpu", unit, False, (), False,
                                     aliased=aliased)
        return choose_strategy(text, ["kernel"], target).name
    assert chosen(True) == "matmul-matmul-f32-6x16-k768-b112-pf8-vc"
    assert chosen(False) == "matmul-matmul-f32-6x16"
    assert chosen(True, DType.F64) == "matmul-matmul-f64-6x8-k512"
    assert "-b" not in chosen(True, target="cpu:x86-64-v4")


def test_blocks_of_b_need_a_packed_b_and_whole_panels():
    from compiler.codegen.cpu.transforms.matmul import matmul_script
    with pytest.raises(ValueError, match="nb=200 needs pack and a multiple of nr=16"):
        matmul_script(nb=200)
    with pytest.raises(ValueError, match="nb=240 needs pack"):
        matmul_script(nb=240, pack=False)
    with pytest.raises(ValueError, match="copy_rows needs nb"):
        matmul_script(copy_rows=2)


def _block_copy_ir(step_name: str) -> tuple[str, str]:
    """The AVX2 f32 ``aliased_packed`` kernel's IR just before and just after
    its strategy step ``py:<step_name> ...``."""
    import dataclasses
    from compiler.codegen.cpu import pipeline
    from compiler.codegen.cpu.transforms import REWRITES
    ts = [TensorType((24, 40), DType.F32), TensorType((40, 3072), DType.F32)]
    text = single_op_linalg_text("MatMul", {}, ts, True, "cpu", (0, 1, 2), False, (), False, aliased=True)
    strat = choose_strategy(text, ["kernel"], "cpu:x86-64-v3")
    steps = list(strat.transform[1:])
    step = next(s for s in steps if s.startswith(f"py:{step_name} "))
    seen = []
    REWRITES["_test_keep"] = lambda m: seen.append(str(m)) or 0
    try:
        at = steps.index(step)
        steps[at:at + 1] = ["py:_test_keep", step, "py:_test_keep"]
        pipeline.lower(text, ["kernel"], target="cpu:x86-64-v3",
                       strategy=dataclasses.replace(strat, transform=(strat.transform[0], *steps)))
    finally:
        del REWRITES["_test_keep"]
    return seen[0], seen[1]


def test_blocks_of_b_are_copied_four_rows_at_a_time_behind_prefetches():
    """The AVX2 f32 ``aliased_packed`` kernel copies each block of B in loops
    of 4 rows (``copy_rows``), and ``prefetch_copy_rows`` puts before each
    piece prefetches of the first and last line (columns 0 and 111 of the
    block) of the rows 8 to 11 further on, clamped to B's last row and
    column; before the step the copy has none."""
    from compiler.testing import filecheck
    before, after = _block_copy_ir("prefetch_copy_rows")
    assert "memref.prefetch" not in before
    filecheck(before, "CHECK: scf.for {{.*}} step %c4\nCHECK: memref.subview\n"
                      "CHECK-NEXT: memref.subview\nCHECK-NEXT: linalg.copy")
    filecheck(after, """
    CHECK: scf.for {{.*}} step %c4
    CHECK: %[[B:[a-z0-9_]+]] = memref.subview %[[SRC:[a-z0-9_]+]][%[[R:[a-z0-9_]+]], %[[C:[a-z0-9_]+]]]
    CHECK: %[[LASTR:[a-z0-9_]+]] = arith.subi %{{.*}}, %c1
    CHECK: %[[LASTC:[a-z0-9_]+]] = arith.subi %{{.*}}, %c1
    CHECK: %[[C0:[a-z0-9_]+]] = arith.addi %[[C]], %c0
    CHECK-NEXT: %[[COL0:[a-z0-9_]+]] = arith.minui %[[C0]], %[[LASTC]]
    CHECK: %[[C1:[a-z0-9_]+]] = arith.addi %[[C]], %c111
    CHECK-NEXT: %[[COL1:[a-z0-9_]+]] = arith.minui %[[C1]], %[[LASTC]]
    CHECK: %[[P:[a-z0-9_]+]] = arith.addi %[[R]], %c8
    CHECK-NEXT: %[[Q:[a-z0-9_]+]] = arith.minui %[[P]], %[[LASTR]]
    CHECK-NEXT: memref.prefetch %[[SRC]][%[[Q]], %[[COL0]]], read, locality<3>, data
    CHECK-NEXT: memref.prefetch %[[SRC]][%[[Q]], %[[COL1]]], read, locality<3>, data
    CHECK: arith.addi %[[R]], %c9
    CHECK: arith.addi %[[R]], %c10
    CHECK: arith.addi %[[R]], %c11
    CHECK: memref.prefetch %[[SRC]]
    CHECK-NEXT: memref.prefetch %[[SRC]]
    CHECK-NEXT: linalg.copy ins(%[[B]]
    """)


def test_whole_pieces_of_a_block_copy_are_vector_loads_and_stores():
    """``vector_copy_rows`` turns each piece of the block's copy into an
    ``scf.if`` on its sizes: where it is whole (4 rows of the block's 112
    columns) 56 loads and stores of 8 floats, each row's at columns 0, 8,
    ..., 104 of the same view of B and of the buffer; else (B's last rows
    or columns) the ``linalg.copy``. Before the step: the copy alone."""
    from compiler.testing import filecheck
    before, after = _block_copy_ir("vector_copy_rows")
    assert "scf.if" not in before and "vector<8xf32>" not in before.split("linalg.copy")[0][-400:]
    filecheck(after, """
    CHECK: scf.for {{.*}} step %c4
    CHECK: %[[B:[a-z0-9_]+]] = memref.subview
    CHECK-NEXT: %[[D:[a-z0-9_]+]] = memref.subview
    CHECK: arith.addi %{{.*}}, %c11 : index
    CHECK: memref.prefetch
    CHECK-NEXT: memref.prefetch
    CHECK-NEXT: %[[C0:c0[_0-9]*]] = arith.constant 0 : index
    CHECK: %[[C3:c3[_0-9]*]] = arith.constant 3 : index
    CHECK-NEXT: %[[C4:c4[_0-9]*]] = arith.constant 4 : index
    CHECK-NEXT: %[[C8:c8[_0-9]*]] = arith.constant 8 : index
    CHECK: %[[C104:c104[_0-9]*]] = arith.constant 104 : index
    CHECK-NEXT: %[[C112:c112[_0-9]*]] = arith.constant 112 : index
    CHECK-NEXT: %[[H:[a-z0-9_]+]] = memref.dim %[[B]], %[[C0]]
    CHECK-NEXT: %[[HOK:[a-z0-9_]+]] = arith.cmpi eq, %[[H]], %[[C4]]
    CHECK-NEXT: %[[W:[a-z0-9_]+]] = memref.dim %[[B]], %{{c1[_0-9]*}}
    CHECK-NEXT: %[[WOK:[a-z0-9_]+]] = arith.cmpi eq, %[[W]], %[[C112]]
    CHECK-NEXT: %[[OK:[a-z0-9_]+]] = arith.andi %[[HOK]], %[[WOK]]
    CHECK-NEXT: scf.if %[[OK]] {
    CHECK-NEXT: %[[V0:[a-z0-9_]+]] = vector.load %[[B]][%[[C0]], %[[C0]]] {{.*}} vector<8xf32>
    CHECK-NEXT: vector.store %[[V0]], %[[D]][%[[C0]], %[[C0]]]
    CHECK-NEXT: %[[V1:[a-z0-9_]+]] = vector.load %[[B]][%[[C0]], %[[C8]]]
    CHECK-NEXT: vector.store %[[V1]], %[[D]][%[[C0]], %[[C8]]]
    CHECK: %[[VL:[a-z0-9_]+]] = vector.load %[[B]][%[[C3]], %[[C104]]]
    CHECK-NEXT: vector.store %[[VL]], %[[D]][%[[C3]], %[[C104]]]
    CHECK-NEXT: } else {
    CHECK-NEXT: linalg.copy ins(%[[B]] {{.*}} outs(%[[D]]
    CHECK-NEXT: }
    """)
    branch = after.split("scf.if")[1].split("} else {")[0]
    assert branch.count("vector.load") == branch.count("vector.store") == 4 * 112 // 8


def test_blocks_of_b_give_the_bits_of_b_in_place(m=29):
    """MatMul and FusedLinear of 29 rows (4 6-row tiles, a 4-row and a 1-row
    block) with B [800, 2008] a view of rows 2048 apart (copied in blocks: K
    768 + 32, columns 17 x 112 + 104, a partial panel of B; 17 rows:
    ``test_matmul_and_linear_inputs_with_b_rows_8_kib_apart``) against the same values 2064 apart (B read in place): the same FMAs
    in the same order of K, the same bits; and the float64 reference."""
    rng = np.random.default_rng(m)
    k, n = 800, 2008
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    g = Graph()
    x, wi, bi = g.input("x", a.shape, "f32"), g.input("w", (k, n), "f32"), g.input("b", b.shape, "f32")
    g.output(x @ wi, name="mm")
    g.output(linear(x, wi, bi), name="lin")
    mod = compile(g)
    w8 = np.zeros((k, 2048), np.float32)
    w8[:, :n] = rng.standard_normal((k, n))
    w_spread = np.zeros((k, 2064), np.float32)
    w_spread[:, :n] = w8[:, :n]
    aliased = mod(x=a, w=w8[:, :n], b=b)
    spread = mod(x=a, w=w_spread[:, :n], b=b)
    for name in ("mm", "lin"):
        np.testing.assert_array_equal(aliased[name], spread[name])
    np.testing.assert_allclose(aliased["mm"], a.astype(np.float64) @ w8[:, :n], rtol=1e-5, atol=2e-4)
    np.testing.assert_allclose(aliased["lin"], a.astype(np.float64) @ w8[:, :n] + b,
                               rtol=1e-5, atol=2e-4)


def test_linear_of_32_rows_over_an_aliased_b_same_bits_at_two_threads():
    """ops.py's few-row linear (32 x 768 x 3072 + bias, B an input, rows 12
    KiB apart: ``aliased_packed``), cut at two threads into column tiles of
    whole panels: every tile runs the one-block-of-K kernel on its columns,
    so the bits are those of one thread; and the float64 reference."""
    from compiler.testing import same_bits_at_threads
    from runtime.rows import row_class
    from runtime.layout import Layout
    rng = np.random.default_rng(32)
    a = rng.standard_normal((32, 768)).astype(np.float32)
    w = rng.standard_normal((768, 3072)).astype(np.float32)
    b = rng.standard_normal(3072).astype(np.float32)
    assert row_class([Layout.contiguous(a.shape), Layout.contiguous(w.shape),
                      Layout.contiguous((32, 3072))], 2) == "aliased_packed"
    g = Graph()
    x, wi, bi = g.input("x", a.shape, "f32"), g.input("w", w.shape, "f32"), g.input("b", b.shape, "f32")
    g.output(linear(x, wi, bi), name="y")
    mod = compile(g)
    y = same_bits_at_threads(lambda: mod(x=a, w=w, b=b))
    np.testing.assert_allclose(y, a.astype(np.float64) @ w + b, rtol=1e-5, atol=2e-4)


def test_a_symbolic_file_runs_17_to_32_rows_over_an_aliased_b(tmp_path):
    """Rows a symbol: calls of 17-32 rows over B rows 2048 apart are a row
    class of their own (``runtime.rows.row_class``: ``aliased_packed``); a
    ``.fuel`` file whose samples did not reach it runs them on its packed
    object (``runtime.symbolic``): the same bits as the module's own kernel."""
    import runtime
    from compiler import Sym
    from runtime.rows import row_class
    from runtime.layout import Layout
    g = Graph()
    x = g.input("x", (Sym("m", 1, 64), 24), "f32")
    wi, bi = g.input("w", (24, 2048), "f32"), g.input("b", (2048,), "f32")
    g.output(linear(x, wi, bi), name="y")
    mod = compile(g)
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((24, 2048)).astype(np.float32), rng.standard_normal(2048).astype(np.float32)
    loaded = runtime.load(mod.save(tmp_path / "m.fuel"))
    for rows in (20, 40, 60):
        a = rng.standard_normal((rows, 24)).astype(np.float32)
        lays = [Layout.contiguous(a.shape), Layout.contiguous(w.shape), Layout.contiguous((rows, 2048))]
        assert (row_class(lays, 2) == "aliased_packed") == (rows <= family.UNPACKED_ROWS)
        y = lambda out: out["y"] if isinstance(out, dict) else out
        got = y(loaded(x=a, w=w, b=b))
        np.testing.assert_array_equal(got, y(mod(x=a, w=w, b=b)))
        np.testing.assert_allclose(got, a.astype(np.float64) @ w + b, rtol=1e-5, atol=1e-4)
