"""Issue 22, graph building, import and memory: typed errors naming the
argument instead of MLIR binding errors, a silent f64 or a bare ValueError;
and a deleted module's machine code released once the documented memos are
cleared (the process-wide binding table's per-kernel memo kept it mapped)."""
import gc
import weakref

import numpy as np
import pytest

from compiler import Graph, compile
from compiler.errors import GraphBuildError


@pytest.mark.parametrize("shape", [(2**63, 4), (4, -2**63 - 1)])
def test_dim_outside_int64_is_a_graph_build_error(shape):
    g = Graph()
    with pytest.raises(GraphBuildError, match=r"param 'shape' has value -?\d+, outside int64"):
        g.input("x", shape, "f32")


def test_input_dtype_none_is_refused_not_f64():
    g = Graph()
    with pytest.raises(GraphBuildError, match="input 'x': dtype None; give a dtype such as 'f32'"):
        g.input("x", (2,), None)
    assert g.input("x", (2,)).dtype.value == "f32"


@pytest.mark.parametrize("given", [("a", 3), (1.5, 3), 3, (True, 3), (-1, 3)])
def test_onnx_input_shapes_not_ints_is_an_import_error(given):
    oh = pytest.importorskip("onnx.helper")
    from onnx import TensorProto as TP

    from compiler.frontends.onnx import OnnxImportError, import_model
    vi = lambda n: oh.make_tensor_value_info(n, TP.FLOAT, ["N", 3])  # noqa: E731
    m = oh.make_model(oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g", [vi("x")],
                                    [vi("y")]), opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 10
    with pytest.raises(OnnxImportError, match=r"input_shapes\['x'\] is .*; give a tuple of "
                       "non-negative integers"):
        import_model(m, {"x": given})
    assert import_model(m, {"x": (2, 3)}).inputs


def test_deleted_module_code_is_released_with_the_documented_memos():
    from compiler.codegen import family
    from compiler.codegen.cache import default_cache
    before = set(family._compiled)
    g = Graph()
    x = g.input("x", (3, 37), "f32")  # a shape no other test compiles
    g.output((x.tanh() * 3.0).softmax(-1), name="y")
    m = compile(g)
    m(x=np.ones((3, 37), np.float32))
    m(x=np.ones((3, 37), np.float32))  # through the binding table's memo (general or direct)
    new = [k for k in family._compiled if k not in before]
    assert new
    owners = [weakref.ref(family._compiled[k].owner) for k in new]
    del m
    for k in new:
        family._compiled.pop(k, None)
    default_cache().clear_memory()
    gc.collect()
    assert [r() for r in owners] == [None] * len(owners), \
        "a deleted module's objects are still mapped (held by a kernel's CallMemo)"


def _drop_documented_memos():
    from compiler.codegen import family
    from compiler.codegen.cache import default_cache
    family._compiled.clear()
    default_cache().clear_memory()
    gc.collect()


def _memo_entries() -> int:
    from compiler.codegen import family
    gc.collect()
    return sum(len(o) for o in gc.get_objects() if type(o) is family.CallMemo)


def test_many_distinct_graphs_leave_no_code_and_no_memo_entries_behind():
    """A server compiling on demand: after its modules go (and the bounded,
    documented memos are cleared) their machine code is unmapped and the
    per-kernel memos of the process-wide table are back to their size; the
    table itself gained no entries (before: every CallMemo kept one entry per
    call shape, a dead one, until it reached MAX_ENTRIES)."""
    from compiler.codegen import family
    from compiler.targets import table_for
    _drop_documented_memos()
    base_memo, base_table = _memo_entries(), len(table_for("cpu"))
    owners = []
    for i in range(6):
        rows = 5 + i  # shapes no other test compiles
        g = Graph()
        x = g.input("x", (rows, 43), "f32")
        g.output((x.tanh() * float(i + 2)).softmax(-1) + x.exp(), name="y")
        m = compile(g)
        for _ in range(2):  # the general path, then the direct path
            m(x=np.ones((rows, 43), np.float32))
        owners += [weakref.ref(fn.owner) for fn in family._compiled.values()]
        del m
        _drop_documented_memos()
    assert owners
    assert [r() for r in owners] == [None] * len(owners), "machine code still mapped"
    assert _memo_entries() == base_memo, "CallMemo entries of deleted modules kept"
    assert len(table_for("cpu")) == base_table
