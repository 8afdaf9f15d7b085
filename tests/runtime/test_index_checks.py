"""runtime.indexing: index operands are checked by the executor before the
kernel runs (one min/max per operand), for any kernel source."""
import numpy as np
import pytest

from runtime import (
    DType, Executor, IndexOutOfRangeError, KernelBindingTable, KernelStep, OpKind, Plan, Storage,
    ValueSpec,
)
from runtime import params as P
from runtime.indexing import INDEX_OPERANDS, check_indices

F32, U32 = DType.F32, DType.U32


def _table(kind, dtypes, seen):
    def k(inputs, outputs, layouts, params):
        seen.append(inputs[1].view(layouts[1]).copy())
    t = KernelBindingTable()
    t.register(kind, dtypes, "cpu", k)
    return t


def test_checked_before_any_kernel_source_runs():
    seen = []
    t = _table(OpKind.IndexSelect, [F32, U32, F32], seen)
    plan = Plan({"x": ValueSpec((2, 5, 3), F32), "i": ValueSpec((4,), U32)}, {"y": "y"},
                [KernelStep(OpKind.IndexSelect, [F32, U32, F32], "cpu", P.IndexSelect(2, 5, 4, 3),
                            ["x", "i"], ["y"], [ValueSpec((2, 4, 3), F32)], "sel")])
    ex, x = Executor(plan, t), np.zeros((2, 5, 3), np.float32)
    ex.run(x=x, i=np.array([4, 0, 4, 1], np.uint32))
    assert len(seen) == 1
    with pytest.raises(IndexOutOfRangeError) as info:
        ex.run(x=x, i=np.array([4, 0, 5, 1], np.uint32))
    assert len(seen) == 1  # the kernel never saw the bad indices
    e = info.value
    assert (e.value, e.position, e.size) == (5, (2,), 5)
    assert str(e) == ("step 0 (sel) IndexSelect: input 1 ('i': index into the selected axis) value 5 at "
                      "position [2] is out of range; valid values are [0, 4] (the axis has size 5); "
                      "1 of 4 indices are out of range")


def test_paged_attn_block_ids_are_checked():
    seen = []
    dts = [F32, F32, F32, U32, U32, F32]
    t = _table(OpKind.PagedAttn, dts, seen)
    q, cache = ValueSpec((1, 2, 1, 8), F32), ValueSpec((5, 4, 1, 8), F32)
    plan = Plan({"q": q, "k": cache, "v": cache, "bt": ValueSpec((1, 3), U32), "cl": ValueSpec((1,), U32)},
                {"y": "y"},
                [KernelStep(OpKind.PagedAttn, dts, "cpu", P.PagedAttn(1, 2, 1, 1, 8, 4, 3, 5, 0.5),
                            ["q", "k", "v", "bt", "cl"], ["y"], [q], "pa")])
    ex = Executor(plan, t)
    feed = dict(q=np.zeros((1, 2, 1, 8), np.float32), k=np.zeros((5, 4, 1, 8), np.float32),
                v=np.zeros((5, 4, 1, 8), np.float32), cl=np.array([100], np.uint32))  # lengths: unchecked
    ex.run(bt=np.array([[4, 0, 2]], np.uint32), **feed)
    with pytest.raises(IndexOutOfRangeError, match=r"step 0 \(pa\) PagedAttn: input 3 \('bt': block_table "
                                                   r"entry .*value 5 at position \[0, 1\].*\[0, 4\]"):
        ex.run(bt=np.array([[4, 5, 2]], np.uint32), **feed)
    assert len(seen) == 1


def test_an_allowed_extra_value_passes_and_signed_offenders_are_named():
    check_indices(np.array([3, -100, 0]), 4, "w", "t", allowed=-100)
    for bad, pos in ((4, 0), (-1, 1), (-101, 2)):
        tgt = np.array([0, -100, 0])
        tgt[pos] = bad
        with pytest.raises(IndexOutOfRangeError, match=rf"w: t value {bad} at position \[{pos}\] is out of "
                                                       rf"range; valid values are \[0, 3\] or -100"):
            check_indices(tgt, 4, "w", "t", allowed=-100)


def test_check_reads_through_strided_and_broadcast_views():
    base = np.arange(12, dtype=np.uint32).reshape(3, 4)
    s, lay = Storage.from_numpy(base)
    check_indices(s.view(lay.transpose()), 12, "w", "idx")
    with pytest.raises(IndexOutOfRangeError, match=r"value 11 at position \[3, 2\]"):
        check_indices(s.view(lay.transpose()), 11, "w", "idx")
    row, rl = Storage.from_numpy(np.array([0, 9], np.uint32))
    with pytest.raises(IndexOutOfRangeError, match=r"value 9 at position \[0, 1\].*4 of 8"):
        check_indices(row.view(rl.broadcast_as((4, 2))), 9, "w", "idx")
    check_indices(np.zeros((0, 3), np.uint32), 0, "w", "idx")  # nothing to check


def test_every_index_operand_rule_names_a_real_params_field():
    samples = {OpKind.IndexSelect: P.IndexSelect(1, 5, 2, 1), OpKind.Gather: P.Gather((3, 5), (3, 2), 1),
               OpKind.IndexAdd: P.IndexAdd(1, 5, 2, 1), OpKind.ScatterAdd: P.ScatterAdd((5, 2), (3, 2), 0),
               OpKind.PagedAttn: P.PagedAttn(1, 2, 1, 1, 8, 4, 3, 5, 0.5)}
    assert set(samples) == set(INDEX_OPERANDS)
    sizes = {k: [r.size(p) for r in INDEX_OPERANDS[k]] for k, p in samples.items()}
    assert sizes == {OpKind.IndexSelect: [5], OpKind.Gather: [5], OpKind.IndexAdd: [5],
                     OpKind.ScatterAdd: [5], OpKind.PagedAttn: [5]}
