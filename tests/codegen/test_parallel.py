"""Multi-threaded kernel calls: tiles, thread-count settings, and results that
are bit-identical whatever the thread count (strided and offset operands)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from compiler.codegen import parallel
from runtime.layout import Layout


@pytest.fixture
def threads():
    yield parallel.set_num_threads
    parallel.set_num_threads(None)


def test_chunks_cover_the_range_aligned():
    assert parallel.chunks(10, 2) == [(0, 5), (5, 5)]
    assert parallel.chunks(13, 2, align=6) == [(0, 12), (12, 1)]
    assert parallel.chunks(5, 3) == [(0, 2), (2, 2), (4, 1)]
    assert parallel.chunks(0, 4) == []
    assert parallel.split_layouts([Layout.contiguous((4, 3))], [0], 4, 8, align=6) is None


def test_row_tiles_split_rows_and_keep_broadcast_operands_whole():
    x, w, out = Layout.contiguous((512, 512)), Layout.contiguous((512,)), Layout.contiguous((512, 512))
    tiles = parallel.row_tiles([x, w, out], 2, 2, keep_last=True)
    assert [t[0].shape for t in tiles] == [(256, 512), (256, 512)]
    assert tiles[1][0].start_offset == 256 * 512 and tiles[1][1] is w
    # below MIN_ELEMENTS output elements a call runs whole (a pool round trip costs more)
    small = [Layout.contiguous((parallel.MIN_ELEMENTS // 512 - 1, 512))] * 2
    assert parallel.row_tiles(small, 1, 2, keep_last=False) is None
    # a row op over rank 1 (the one axis is the reduced one) runs whole
    assert parallel.row_tiles([Layout.contiguous((1 << 18,))] * 2, 1, 2, keep_last=True) is None
    # elementwise over one long axis splits it; a tiny call runs whole
    assert len(parallel.row_tiles([Layout.contiguous((1 << 18,))] * 2, 1, 2, keep_last=False)) == 2
    assert parallel.row_tiles([Layout.contiguous((4, 4))] * 2, 1, 2, keep_last=False) is None
    # the first axis with too few rows is skipped
    t = parallel.row_tiles([Layout.contiguous((1, 256, 1024))] * 2, 1, 2, keep_last=True)
    assert t[0][0].shape == (1, 128, 1024)


def test_matmul_tiles_by_batch_or_aligned_rows():
    a, b, o = Layout.contiguous((4, 128, 64)), Layout.contiguous((4, 64, 128)), Layout.contiguous((4, 128, 128))
    tiles = parallel.matmul_tiles([a, b, o], 2, 2, align=6)
    assert [(t[0].shape, t[1].shape) for t in tiles] == [((2, 128, 64), (2, 64, 128))] * 2
    a2, b2, o2 = Layout.contiguous((301, 256)), Layout.contiguous((256, 64)), Layout.contiguous((301, 64))
    tiles = parallel.matmul_tiles([a2, b2, o2], 2, 2, align=6)
    assert [t[0].shape[0] for t in tiles] == [156, 145] and all(t[1] is b2 for t in tiles)


def test_thread_count_settings_and_errors(threads):
    threads(3)
    assert parallel.num_threads() == 3
    for bad in (0, -2, "two", 1.5, True):
        with pytest.raises(parallel.ThreadCountError, match="positive integer"):
            threads(bad)
    env = dict(os.environ, FUELC_NUM_THREADS="zero")
    r = subprocess.run([sys.executable, "-c", "from compiler.codegen import parallel as p; p.num_threads()"],
                       env=env, capture_output=True, text=True, cwd=os.getcwd())
    assert r.returncode != 0 and "FUELC_NUM_THREADS" in r.stderr and "ThreadCountError" in r.stderr
    env["FUELC_NUM_THREADS"] = "5"
    r = subprocess.run([sys.executable, "-c", "from compiler.codegen import parallel as p; print(p.num_threads())"],
                       env=env, capture_output=True, text=True, cwd=os.getcwd())
    assert r.stdout.strip() == "5", r.stderr


def _graphs():
    from compiler import Graph
    from compiler.registry import builders as B
    rng = np.random.default_rng(1)
    w = rng.uniform(0.5, 1.5, 96).astype(np.float32)
    g = Graph()
    x = g.input("x", (700, 96), "f32")
    m = g.input("m", (96, 64), "f32")
    bias = g.input("bias", (64,), "f32")
    g.output(B.softmax_last_dim(x), name="softmax")
    g.output(B.rms_norm(x, g.constant(w, name="w"), eps=1e-6), name="rms")
    g.output((x * 1.5 + 0.25).tanh(), name="chain")            # a runtime fused region
    g.output(x.gelu(), name="gelu")
    g.output(x @ m, name="mm")
    g.output(B.fused("FusedLinear", x, m, bias), name="linear")
    return g


def test_results_do_not_depend_on_the_thread_count(threads, rng):
    from compiler import compile, interpret
    g = _graphs()
    big = rng.standard_normal((1400, 96), dtype=np.float32)
    ins = {"x": big[::2],                                       # strided rows
           "m": rng.standard_normal((96, 64), dtype=np.float32),
           "bias": rng.standard_normal(64, dtype=np.float32)}
    threads(1)
    one = compile(g, "cpu")
    want = one(**ins)
    ref = interpret(g, ins)
    for name in want:
        np.testing.assert_allclose(want[name], ref[name], rtol=2e-4, atol=2e-5, err_msg=name)
    for n in (2, 3):
        threads(n)
        got = compile(g, "cpu")(**ins)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name}, {n} threads")


def test_calls_are_split_into_tiles(threads):
    from compiler.codegen import kernels as K
    from runtime import params as P
    from runtime.dtype import DType
    from runtime.opkind import OpKind
    from compiler.targets import parse_target
    k = K.FAMILY.kernel(parse_target("cpu"), OpKind.MatMul, (DType.F32,) * 3)
    lays = [Layout.contiguous((300, 128)), Layout.contiguous((128, 64)), Layout.contiguous((300, 64))]
    p = P.Matmul((), (), 300, 64, 128)
    threads(2)
    # row tiles start at multiples of MATMUL_ROW_ALIGN (24)
    assert [t[1][0].shape for t in k._tiles(lays, p, 2)] == [(168, 128), (132, 128)]
    threads(1)
    assert len(k._tiles(lays, p, 2)) == 1
