"""Packed-class matmul calls whose A rows are a multiple of 4 KiB apart with
at least ``PACK_A_COLUMNS`` columns copy each block of A into
a contiguous buffer first (``runtime.rows.pack_a``, ``fuelc.pack_a``,
``strategy._PACK_A_TILES``). AVX-512: the same FMAs in the same order, so the
same bits as the kernel reading A in place. AVX2 f32: each block of K (256)
is summed from zero and then added to C (``transforms.matmul.c_after_k``), so
the bits of those blocks' own products added in order (``_k_blocks``)."""
import numpy as np
import pytest

from compiler import Graph, compile
from compiler.codegen import family
from compiler.codegen.cpu.pipeline import choose_strategy
from compiler.codegen.cpu.strategy import isa_level, k_block_from_zero
from compiler.codegen.cpu.transforms.matmul import matmul_script
from compiler.codegen.family import single_op_linalg_text
from compiler.graph.opdef import TensorType
from compiler.registry.builders import linear
from compiler.targets import parse_target
from compiler.testing import same_bits_at_threads
from runtime.dtype import DType
from runtime.rows import PACK_A_COLUMNS, UNPACKED_ROWS


def _k_blocks(target, x, w, bias=None):
    """What the ``fuelc.pack_a`` f32 kernel of ``target`` gives for ``x @ w
    (+ bias)`` where it sums blocks of K from zero (``k_block_from_zero``):
    each block's product on its own (K within one block of the kernel
    reading A in place: one chain of FMAs from zero), added in order to
    the bias (or zero) in f32; None where the kernel chains over all of K."""
    kb = k_block_from_zero("f32", isa_level(parse_target(target)))
    if not kb:
        return None
    g = Graph()
    g.output(g.input("x", (x.shape[0], kb), "f32") @ g.input("w", (kb, w.shape[1]), "f32"), name="y")
    block, tail = compile(g, target), None
    out = np.zeros((x.shape[0], w.shape[1]), np.float32) if bias is None else \
        np.broadcast_to(bias, (x.shape[0], w.shape[1])).astype(np.float32)
    for k0 in range(0, x.shape[1], kb):
        xs, ws = np.ascontiguousarray(x[:, k0:k0 + kb]), np.ascontiguousarray(w[k0:k0 + kb])
        if xs.shape[1] < kb:
            g = Graph()
            g.output(g.input("x", xs.shape, "f32") @ g.input("w", ws.shape, "f32"), name="y")
            tail = compile(g, target)
        out = out + (block if xs.shape[1] == kb else tail)(x=xs, w=ws)
    return out


def test_pack_a_class():
    """A's rows a multiple of 1024 elements apart (4 KiB of f32), at least
    PACK_A_COLUMNS columns, more than UNPACKED_ROWS rows, unit-stride rows."""
    unit, n = (0, 1, 2), PACK_A_COLUMNS
    assert family.pack_a((UNPACKED_ROWS + 1, 64), unit, 2, 1024, n)
    assert family.pack_a((512, 64), unit, 2, 2048, n)
    assert family.pack_a((512, 64), unit, 2, 3072, n)
    assert family.pack_a((512, 64), unit, 2, 1024, 2048)
    assert not family.pack_a((UNPACKED_ROWS, 64), unit, 2, 1024, n)   # reads B in place
    assert not family.pack_a((512, 64), unit, 2, 512, n)              # 2 KiB apart
    assert not family.pack_a((512, 64), unit, 2, 1040, n)             # not a multiple
    assert not family.pack_a((512, 64), unit, 2, 2064, n)             # not a multiple
    assert not family.pack_a((512, 64), unit, 2, 1024, n - 16)        # too few columns
    assert not family.pack_a((512, 64), (1, 2), 2, 1024, n)           # A strided


def test_pack_a_selects_the_copy_of_a_on_avx2_f32():
    def chosen(pack_a, dtype=DType.F32):
        ts = [TensorType((64, 40), dtype), TensorType((40, 70), dtype)]
        text = single_op_linalg_text("MatMul", {}, ts, True, "cpu", (0, 1, 2), pack_a=pack_a)
        return choose_strategy(text, ["kernel"], "cpu:x86-64-v3").name
    assert chosen(True) == "matmul-matmul-f32-6x16-pack-a-panels"
    assert chosen(False) == "matmul-matmul-f32-6x16"
    assert chosen(True, DType.F64) == "matmul-matmul-f64-6x8"


def test_pack_a_needs_b_packed():
    with pytest.raises(ValueError, match="pack_a needs pack"):
        matmul_script(pack=False, pack_a=True)


def test_pack_a_kernel_gives_the_bits_of_a_in_place_or_of_its_k_blocks():
    """FusedLinear with A [365, 600] a view of rows 2048 apart (copied blocks: a
    partial block of rows and of K) against the same values contiguous (rows
    600 apart: read in place; AVX2 f32: against its blocks of K, ``_k_blocks``);
    N = 2056: 128 panels and a half-width one."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((365, 2048)).astype(np.float32)[:, :600]
    w = rng.standard_normal((600, 2048 + 8)).astype(np.float32)
    b = rng.standard_normal(w.shape[1]).astype(np.float32)
    g = Graph()
    x, wi, bi = g.input("x", a.shape, "f32"), g.input("w", w.shape, "f32"), g.input("b", b.shape, "f32")
    g.output(linear(x, wi, bi), name="lin")
    mod = compile(g)
    copied, in_place = mod(x=a, w=w, b=b), mod(x=np.ascontiguousarray(a), w=w, b=b)
    blocks = _k_blocks("cpu", a, w, b)
    np.testing.assert_array_equal(copied, in_place if blocks is None else blocks)
    np.testing.assert_allclose(copied, a.astype(np.float64) @ w + b, rtol=1e-4, atol=1e-4)


def test_batched_pack_a_kernel():
    """MatMul, batched ([2, 33, 100] rows 2048 apart): the batch_matmul schedule
    copies its blocks of A too (against the float64 product)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, UNPACKED_ROWS + 1, 2048)).astype(np.float32)[:, :, :100]
    w = rng.standard_normal((2, 100, 2048)).astype(np.float32)
    g = Graph()
    g.output(g.input("x", a.shape, "f32") @ g.input("w", w.shape, "f32"), name="y")
    np.testing.assert_allclose(compile(g)(x=a, w=w), a.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


def test_pack_a_kernel_same_bits_at_one_and_two_threads():
    """MatMul [40, 2048] x [2048, 2072] (A's rows 8 KiB apart: 4 K blocks, 129
    panels of B and a half-width one): the same bits at 1 and 2 threads (cut
    into row tiles of 24 and 16: the kernel copies A, f32 on AVX2 and
    AVX-512) and as A read in place (rows 2064 apart; AVX2 f32: as its
    blocks of K, 8 of 256), within f32 rounding of the float64 product."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((UNPACKED_ROWS + 8, 2048)).astype(np.float32)
    w = rng.standard_normal((2048, 2048 + 24)).astype(np.float32)
    g = Graph()
    g.output(g.input("x", a.shape, "f32") @ g.input("w", w.shape, "f32"), name="y")
    mod = compile(g)
    y = same_bits_at_threads(lambda: mod(x=a, w=w))
    in_place = np.zeros((a.shape[0], 2064), np.float32)[:, :2048]
    in_place[...] = a
    blocks = _k_blocks("cpu", a, w)
    np.testing.assert_array_equal(y, mod(x=in_place, w=w) if blocks is None else blocks)
    np.testing.assert_allclose(y, a.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("spec, dtype, rows", [("cpu:x86-64-v3", DType.F32, True),
                                               ("cpu:skylake-avx512", DType.F32, True),
                                               ("cpu:skylake-avx512", DType.F64, False)])
def test_a_call_that_copies_a_is_cut_by_rows_at_two_threads(spec, dtype, rows):
    """At 2 threads a MatMul whose kernel copies its blocks of A (f32, AVX2
    and AVX-512) is cut into row tiles of at most one block (column tiles
    would each copy all of A); where the kernel reads A in place (f64), into
    column tiles as before."""
    from compiler.codegen import kernels as K, parallel
    from compiler.targets import parse_target
    from runtime import params as P
    from runtime.layout import Layout
    from runtime.opkind import OpKind
    k = K.FAMILY.kernel(parse_target(spec), OpKind.MatMul, (dtype,) * 3)
    lays = [Layout.contiguous((600, 2048)), Layout.contiguous((2048, 2048)),
            Layout.contiguous((600, 2048))]
    p = P.Matmul((), (), 600, 2048, 2048)
    parallel.set_num_threads(2)
    try:
        tiles = [lay for _, lay in k._tiles(lays, p, 2)]
    finally:
        parallel.set_num_threads(None)
    if rows:
        assert [(t[0].shape, t[1].shape) for t in tiles] == [((312, 2048), (2048, 2048)),
                                                            ((288, 2048), (2048, 2048))]
    else:
        # four column tiles, halved (parallel.TILE_SCHEDULE): two of a third, two of a sixth
        assert [t[2].shape[1] for t in tiles] == [672, 672, 352, 352]


def _matmul_row_tiles(m, k, n, threads=2, spec="cpu:x86-64-v3"):
    """The rows of each tile of MatMul [m, k] x [k, n] (f32 on ``spec``, A
    copied) at ``threads`` threads."""
    from compiler.codegen import kernels as K, parallel
    from compiler.targets import parse_target
    from runtime import params as P
    from runtime.layout import Layout
    from runtime.opkind import OpKind
    kern = K.FAMILY.kernel(parse_target(spec), OpKind.MatMul, (DType.F32,) * 3)
    lays = [Layout.contiguous((m, k)), Layout.contiguous((k, n)), Layout.contiguous((m, n))]
    parallel.set_num_threads(threads)
    try:
        tiles = kern._tiles(lays, P.Matmul((), (), m, n, k), 2)
    finally:
        parallel.set_num_threads(None)
    assert all(inst.pack_a for inst, _ in tiles)
    return [lay[0].shape[0] for _, lay in tiles]


@pytest.mark.parametrize("m, tiles", [(120, [72, 48]), (744, [384, 360]),
                                     (1464, [480, 480, 264, 240])])
def test_a_matmul_with_rows_4_kib_apart_copies_a_and_keeps_its_bits(m, tiles):
    """MatMul [m, 1024] x [1024, 1040] (A's rows 4 KiB apart, at least
    PACK_A_COLUMNS columns): the instance copies A, is cut into row tiles
    on AVX2 (one per thread, or 4 of at most one block of A), and
    gives the same bits at 1 and 2 threads as its blocks of K (4 of 256,
    ``_k_blocks``), within f32 rounding of the float64 product."""
    k, n = 1024, PACK_A_COLUMNS + 16
    assert _matmul_row_tiles(m, k, n) == tiles
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    g = Graph()
    g.output(g.input("x", a.shape, "f32") @ g.input("w", w.shape, "f32"), name="y")
    mod = compile(g, "cpu:x86-64-v3")
    y = same_bits_at_threads(lambda: mod(x=a, w=w))
    np.testing.assert_array_equal(y, _k_blocks("cpu:x86-64-v3", a, w))
    np.testing.assert_allclose(y, a.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)


def test_a_call_that_copies_a_is_cut_into_row_tiles_of_one_block_at_two_threads(monkeypatch):
    """At 2 threads (tiles taken one by one) a MatMul that copies its blocks
    of A (AVX2 f32, blocks of 720 rows) is cut into the fewest row tiles, an
    even number, of at most one block each: each tile packs B once. One tile
    per thread with $FUELC_TILES_PER_THREAD=1, and at other thread counts."""
    from compiler.codegen import parallel
    from compiler.codegen.cpu.strategy import a_block_rows
    assert a_block_rows("f32", "avx2") == 720 and a_block_rows("f64", "avx512") == 0
    # 4 tiles halved (parallel.TILE_SCHEDULE: two of a third, two of half
    # the rest), each within a block
    assert _matmul_row_tiles(2048, 2048, 2048) == [696, 696, 336, 320]
    assert _matmul_row_tiles(1024, 1024, 1024) == [528, 496]
    assert _matmul_row_tiles(720, 1024, 1024) == [360, 360]
    assert _matmul_row_tiles(120, 1024, 1024) == [72, 48]
    assert _matmul_row_tiles(2048, 2048, 2048, threads=3) == [696, 696, 656]
    monkeypatch.setattr(parallel, "TILES_PER_THREAD", 1)
    assert _matmul_row_tiles(2048, 2048, 2048) == [1032, 1016]



def _row_major_blocks(monkeypatch):
    """Swap the registered ``fuelc.pack_a`` matmul strategies (AVX2) for the
    ones that copy A's blocks row-major (``a_panels`` off: the kernel before
    the 6-row panels)."""
    from compiler.codegen.cpu import strategy as S
    tiles = {**S._PACK_A_TILES["f32", "avx2"], "a_panels": False}
    monkeypatch.setitem(S._PACK_A_TILES, ("f32", "avx2"), tiles)
    for _, variants in S._RULES:
        for isa, v in list(variants.items()):
            if isinstance(v, S.Strategy) and v.name.endswith("-f32-6x16-pack-a-panels"):
                op = "linalg.batch_matmul" if "batch_matmul" in v.name else "linalg.matmul"
                monkeypatch.setitem(variants, isa, S.matmul_strategy(op, "f32", "avx2", pack_a=True))


@pytest.mark.parametrize("batch", [(), (2,)])
def test_pack_a_blocks_are_6_row_k_major_panels(batch):
    """The AVX2 f32 ``pack_a`` kernel lays its copied block of A (720 x 256)
    out as [120, 256, 6] (a unit batch first for batch_matmul): element (i, k)
    at panel i / 6, k * 6 + i % 6; the register tiles read it there, and no
    load reads a row-major block."""
    import dataclasses
    from compiler.codegen.cpu import pipeline
    from compiler.codegen.cpu.transforms import REWRITES
    from compiler.codegen.cpu.transforms.matmul import pack_a_panels
    ts = [TensorType((*batch, 64, 40), DType.F32), TensorType((*batch, 40, 70), DType.F32)]
    text = single_op_linalg_text("MatMul", {}, ts, True, "cpu", (0, 1, 2), pack_a=True)
    strat = pipeline.choose_strategy(text, ["kernel"], "cpu:x86-64-v3")
    assert "py:pack_a_panels 6" in strat.transform
    seen = []
    REWRITES["_test_keep"] = lambda m: seen.append(str(m)) or 0
    try:
        steps = [s for s in strat.transform if not s.startswith("py:pack_a_panels")]
        pipeline.lower(text, ["kernel"], target="cpu:x86-64-v3", strategy=dataclasses.replace(
            strat, transform=(*steps[:1], "py:_test_keep", *steps[1:])))
    finally:
        del REWRITES["_test_keep"]
    from compiler.mlir import ir
    with ir.Context():
        module = ir.Module.parse(seen[0])
        assert pack_a_panels(module, "6") == 1
        ir_text = str(module)
    lead = "1x" if batch else ""
    assert f"to memref<{lead}120x256x6xf32>" in ir_text
    assert f"memref<{lead}720x256xf32>" not in ir_text
    assert f"vector.load %view[{'%c0, ' if batch else ''}" in ir_text


def test_avx2_pack_a_tiles_sum_each_k_block_from_zero():
    """The AVX2 f32 ``pack_a`` kernel (blocks of 256 of K) starts each
    register tile's loop over K at zero (6 x 16 tiles, the 4- and 2-row
    blocks, single rows, the half panel) and adds the tile of C after it,
    before the store (``transforms.matmul.c_after_k``); the other kernels
    still start from C."""
    import dataclasses
    from compiler.codegen.cpu import pipeline
    from compiler.codegen.cpu.transforms import REWRITES
    from compiler.testing import filecheck
    assert k_block_from_zero("f32", "avx2") == 256
    assert k_block_from_zero("f32", "avx512") == k_block_from_zero("f64", "avx2") == 0
    ts = [TensorType((64, 40), DType.F32), TensorType((40, 70), DType.F32)]
    seen = []
    REWRITES["_test_keep"] = lambda m: seen.append(str(m)) or 0
    try:
        for pack_a in (True, False):
            text = single_op_linalg_text("MatMul", {}, ts, True, "cpu", (0, 1, 2), pack_a=pack_a)
            strat = choose_strategy(text, ["kernel"], "cpu:x86-64-v3")
            steps = list(strat.transform[1:]) if pack_a else []
            assert ("py:c_after_k" in steps) == pack_a
            steps.insert(steps.index("py:c_after_k") + 1 if pack_a else 0, "py:_test_keep")
            first = strat.transform if isinstance(strat.transform, str) else strat.transform[0]
            pipeline.lower(text, ["kernel"], target="cpu:x86-64-v3",
                           strategy=dataclasses.replace(strat, transform=(first, *steps)))
    finally:
        del REWRITES["_test_keep"]
    tile = """
    CHECK: %[[Z:.*]] = arith.constant dense<0.000000e+00> : vector<SHAPExf32>
    CHECK-NEXT: %[[R:.*]] = scf.for {{.*}} iter_args(%{{.*}} = %[[Z]]) -> (vector<SHAPExf32>)
    CHECK: vector.fma
    CHECK: } {loop_annotation
    CHECK: %[[E:.*]] = vector.extract %[[R]][0]
    CHECK-NEXT: %[[C:.*]] = vector.load %arg2
    CHECK-NEXT: %[[S:.*]] = arith.addf %[[C]], %[[E]] : vector<WIDTHxf32>
    CHECK-NEXT: vector.store %[[S]], %arg2
    """
    filecheck(seen[0], "".join(tile.replace("SHAPE", s).replace("WIDTH", s.split("x")[1])
                               for s in ("6x16", "4x16", "2x16")))
    filecheck(seen[1], "CHECK-NOT: arith.addf\nCHECK: vector.fma")
    assert "iter_args" in seen[1] and "dense<0.000000e+00> : vector<6x16xf32>" not in seen[1]


@pytest.mark.parametrize("m", [365, 725])
def test_pack_a_panels_give_the_bits_of_row_major_blocks(monkeypatch, m):
    """MatMul [m, 1024] x [1024, 1040] (A's rows 4 KiB apart: A copied; a
    partial last panel of 5 rows, blocks of 720 rows and 256 of K) and a
    batched one ([2, 61, 1024] x [2, 1024, 1040]): the panel kernel
    gives the same bits as the kernel copying A's blocks row-major (the same
    FMAs in the same order)."""
    rng = np.random.default_rng(4)
    for a_shape, w_shape in (((m, 1024), (1024, 1040)), ((2, 61, 1024), (2, 1024, 1040))):
        a = rng.standard_normal(a_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        g = Graph()
        g.output(g.input("x", a.shape, "f32") @ g.input("w", w.shape, "f32"), name="y")
        panels = compile(g, "cpu:x86-64-v3")(x=a, w=w)
        with monkeypatch.context() as mp:
            _row_major_blocks(mp)
            rows = compile(g, "cpu:haswell")(x=a, w=w)
        np.testing.assert_array_equal(panels, rows)
        np.testing.assert_allclose(panels, a.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)


def test_a_fused_linear_over_b_in_place_follows_the_matmul_rule():
    """A FusedLinear over a B that is an input (not packed at compile time)
    copies its blocks of A where MatMul does (A's rows 4 KiB apart, at least
    PACK_A_COLUMNS columns: linear+bias 512x1024x1024) and is cut at 2
    threads into MatMul's row tiles (column tiles would each copy all of A);
    the same bits at 1 and 2 threads, and as its blocks of K added in order
    to the bias (``_k_blocks``)."""
    from compiler.codegen import parallel
    from runtime.executor import KernelStep
    from runtime.layout import Layout
    m, k, n = 512, 1024, PACK_A_COLUMNS
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    g = Graph()
    g.output(linear(g.input("x", a.shape, "f32"), g.input("w", w.shape, "f32"),
                    g.input("b", b.shape, "f32")), name="y")
    mod = compile(g, "cpu:x86-64-v3")
    step = next(s for s in mod.plan.steps if isinstance(s, KernelStep))
    lays = [Layout.contiguous(mod.executor.specs[v].shape) for v in (*step.inputs, *step.outputs)]
    kernel = next(iter(mod.executor.entries.values())).kernel.fn
    parallel.set_num_threads(2)
    try:
        tiles = kernel._tiles(lays, step.params, len(step.inputs))
    finally:
        parallel.set_num_threads(None)
    assert all(inst.pack_a for inst, _ in tiles)
    assert [lay[0].shape[0] for _, lay in tiles] == [264, 248]
    assert all(lay[1].shape == (k, n) and lay[2].shape == (n,) for _, lay in tiles)
    y = same_bits_at_threads(lambda: mod(x=a, w=w, b=b))
    np.testing.assert_array_equal(y, _k_blocks("cpu:x86-64-v3", a, w, b))
    np.testing.assert_allclose(y, a.astype(np.float64) @ w + b, rtol=1e-4, atol=1e-3)


def test_avx512_f32_pack_a_copies_8_row_panels_and_keeps_its_bits():
    """AVX-512 f32 copies its blocks of A too (384 x 512, in 8-row K-major
    panels: [48, 512, 8]), is cut at 2 threads into row tiles of at most one
    block (1024^3: 4, 2048^3: 6), and gives the same bits at 1 and 2 threads
    as A read in place (the kernel before), within f32 rounding of the
    float64 product (docs/benchmarks.md, "The per-call matmul's blocks on
    AVX-512 (Zen 4)")."""
    import dataclasses
    from compiler.codegen.cpu import pipeline
    from compiler.codegen.cpu.strategy import a_block_rows
    from compiler.codegen.cpu.transforms import REWRITES
    from compiler.targets import parse_target
    from runtime.cpu_features import missing_cpu_features
    ts = [TensorType((64, 40), DType.F32), TensorType((40, 70), DType.F32)]
    text = single_op_linalg_text("MatMul", {}, ts, True, "cpu", (0, 1, 2), pack_a=True)
    strat = choose_strategy(text, ["kernel"], "cpu:x86-64-v4")
    assert strat.name == "matmul-matmul-f32-8x32-pack-a-panels"
    assert a_block_rows("f32", "avx512") == 384
    seen = []
    REWRITES["_test_keep"] = lambda m: seen.append(str(m)) or 0
    try:
        steps = list(strat.transform)
        steps.insert(steps.index("py:pack_a_panels 8") + 1, "py:_test_keep")
        pipeline.lower(text, ["kernel"], target="cpu:x86-64-v4",
                       strategy=dataclasses.replace(strat, transform=tuple(steps)))
    finally:
        del REWRITES["_test_keep"]
    assert "to memref<48x512x8xf32>" in seen[0] and "memref<384x512xf32>" not in seen[0]
    v4 = "cpu:x86-64-v4"
    assert _matmul_row_tiles(1024, 1024, 1024, spec=v4) == [336, 336, 192, 160]
    assert _matmul_row_tiles(2048, 2048, 2048, spec=v4) == [360] * 5 + [248]
    if missing_cpu_features(parse_target(v4).features):
        pytest.skip("runs AVX-512 code: this CPU lacks some of its features")
    m, k, n = 773, 1024, PACK_A_COLUMNS + 40   # a partial panel of 5 rows, of 8 columns
    rng = np.random.default_rng(6)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    g = Graph()
    g.output(g.input("x", a.shape, "f32") @ g.input("w", w.shape, "f32"), name="y")
    mod = compile(g, v4)
    y = same_bits_at_threads(lambda: mod(x=a, w=w))
    in_place = np.zeros((m, 1040), np.float32)[:, :k]
    in_place[...] = a
    np.testing.assert_array_equal(y, same_bits_at_threads(lambda: mod(x=in_place, w=w)))
    np.testing.assert_allclose(y, a.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)
