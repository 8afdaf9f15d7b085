"""Out-of-range indices are refused before any kernel runs (IndexOutOfRangeError,
like PyTorch and ONNX Runtime), for generated and numpy kernels alike, and at
graph-build time for constant indices."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.errors import GraphBuildError
from runtime import Executor, IndexOutOfRangeError, global_table

RNG = np.random.default_rng(3)
X = RNG.standard_normal((5, 4)).astype(np.float32)


def _build(op):
    """(graph, feed with in-range indices, index input name, axis size) for ``op``."""
    g = Graph()
    x = g.input("x", (5, 4), "f32")
    if op == "index_select":
        i = g.input("i", (3,), "u32")
        y, size, idx = x.index_select(i, axis=0), 5, np.array([4, 0, 2], np.uint32)
    elif op == "gather":
        i = g.input("i", (2, 4), "u32")
        y, size, idx = x.gather(i, axis=1), 4, np.array([[3, 0, 1, 1], [2, 2, 0, 3]], np.uint32)
    elif op == "index_add":
        i = g.input("i", (2,), "u32")
        y = x.index_add(0, i, g.constant(np.ones((2, 4), np.float32)))
        size, idx = 5, np.array([4, 4], np.uint32)
    else:
        i = g.input("i", (5, 4), "u32")
        y = x.scatter_add(0, i, g.constant(np.ones((5, 4), np.float32)))
        size, idx = 5, RNG.integers(0, 5, (5, 4)).astype(np.uint32)
    g.output(y, name="y")
    return g, {"x": X, "i": idx}, size


OPS = ["index_select", "gather", "index_add", "scatter_add"]


@pytest.fixture(scope="module", params=OPS)
def case(request):
    g, feed, size = _build(request.param)
    return request.param, g, compile(g), feed, size


def test_in_range_indices_match_the_interpreter(case):
    _, g, m, feed, size = case
    np.testing.assert_allclose(m(**feed), interpret(g, feed)["y"], rtol=1e-6)


BAD = {"size": None, "huge": 1 << 30, "max_u32": (1 << 32) - 1}
KIND = {"index_select": "IndexSelect", "gather": "Gather", "index_add": "IndexAdd",
        "scatter_add": "ScatterAdd"}


def _bad_feed(op, bad):
    """The in-range feed with one index replaced by ``bad``; (feed, value, position, size)."""
    _, feed, size = _build(op)
    idx = feed["i"].copy()
    value = size if BAD[bad] is None else BAD[bad]
    pos = tuple(n - 1 for n in idx.shape)
    idx[pos] = value
    return {"x": feed["x"], "i": idx}, value, pos, size


def _check_error(e, op, value, pos, size):
    assert isinstance(e, IndexOutOfRangeError) and isinstance(e, IndexError), repr(e)
    assert (e.value, e.position, e.size) == (value, pos, size)
    msg = str(e)
    assert f"{KIND[op]}: input 1 ('i'" in msg and f"value {value} at position {list(pos)}" in msg, msg
    assert f"valid values are [0, {size - 1}]" in msg, msg


@pytest.mark.parametrize("bad", sorted(BAD))
def test_out_of_range_indices_raise_before_the_numpy_kernels(case, bad):
    op, g, m, _, _ = case
    feed, value, pos, size = _bad_feed(op, bad)
    with pytest.raises(IndexOutOfRangeError) as info:   # (a regression: the numpy kernel's KernelError)
        Executor(m.plan, global_table()).run(**feed)
    _check_error(info.value, op, value, pos, size)


def test_out_of_range_indices_raise_before_the_generated_kernels():
    """In a subprocess: without the check a generated kernel reads or writes
    past its buffers (2**32-1 rows past the end segfaulted), and a regression
    must fail this test, not kill the test runner."""
    script = textwrap.dedent("""
        import json, sys
        sys.path.insert(0, "tests/compiler")
        from test_index_bounds import BAD, OPS, _bad_feed, _build
        from compiler import compile
        from runtime import IndexOutOfRangeError
        for op in OPS:
            m = compile(_build(op)[0])
            for bad in sorted(BAD):
                feed, value, pos, size = _bad_feed(op, bad)
                try:
                    m.run(**feed)
                    print(json.dumps([op, bad, "no error"]), flush=True)
                except IndexOutOfRangeError as e:
                    print(json.dumps([op, bad, str(e), e.value, list(e.position), e.size]), flush=True)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"exit {r.returncode}; stdout {r.stdout[-2000:]}; stderr {r.stderr[-2000:]}"
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(row[0], row[1]) for row in rows] == [(op, bad) for op in OPS for bad in sorted(BAD)]
    for op, bad, *err in rows:
        assert len(err) == 4, f"{op} with a {bad} index: {err}"
        _, value, pos, size = _bad_feed(op, bad)
        assert (err[1], tuple(err[2]), err[3]) == (value, pos, size)
        assert f"{KIND[op]}: input 1 ('i'" in err[0] and f"valid values are [0, {size - 1}]" in err[0]


def test_constant_indices_out_of_range_are_refused_at_build_time():
    g = Graph()
    x = g.input("x", (5, 4), "f32")
    with pytest.raises(GraphBuildError, match=r"IndexSelect: constant indices .* value 5 at position \[2\] "
                                              r"is out of range; valid values are \[0, 4\]") as info:
        x.index_select(np.array([0, 1, 5], np.uint32), axis=0)
    assert isinstance(info.value, IndexOutOfRangeError) and info.value.position == (2,)
    with pytest.raises(IndexOutOfRangeError, match=r"Gather: .*value 4 at position \[0, 1\]"):
        x.gather(np.array([[0, 4]], np.uint32), axis=1)
    with pytest.raises(IndexOutOfRangeError, match=r"IndexAdd: .*value 9 at position \[0\]"):
        x.index_add(0, np.array([9], np.uint32), g.constant(np.ones((1, 4), np.float32)))
    with pytest.raises(IndexOutOfRangeError, match=r"ScatterAdd: .*value 4294967295"):
        x.scatter_add(1, np.full((5, 4), 2**32 - 1, np.uint32), g.constant(np.ones((5, 4), np.float32)))
    y = x.index_select(np.array([4, 0], np.uint32), axis=0)  # in range: accepted
    assert y.shape == (2, 4)
