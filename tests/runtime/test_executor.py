"""Plan / Executor: construction-time resolution, input checks, the §2.3
contiguize rule, views/reshape/const steps, bundles, JSON round-trip."""
import json

import numpy as np
import pytest

from runtime import (
    ConstStep, ContiguizeStep, DType, Executor, IndexOutOfRangeError, KernelBindingTable, KernelCaps,
    KernelError, KernelStep, Layout, NoBackendForOp, OpKind, Plan, PlanError, ReshapeStep, Storage,
    ValueSpec, ViewStep, global_table,
)
from runtime import params as P
from runtime.executor import needs_contiguize

F32 = DType.F32


def vs(*shape, dt="f32"):
    return ValueSpec(shape, dt)


def sample_plan():
    return Plan(
        inputs={"a": vs(2, 3), "b": vs(3)},
        outputs={"y": "y", "flat": "flat", "z": "z"},
        constants={"w": np.arange(6, dtype=np.float32).reshape(3, 2)},
        steps=[
            ViewStep("broadcast_as", {"shape": (2, 3)}, "b", "bb", name="bcast"),
            KernelStep(OpKind.AddElementwise, [F32] * 3, "cpu", P.NO_PARAMS, ["a", "bb"], ["s"], [vs(2, 3)], "add"),
            ViewStep("transpose", {}, "s", "st"),
            ReshapeStep("st", "flat", (6,)),
            ConstStep("w", "w"),
            KernelStep(OpKind.MatMul, [F32] * 3, "cpu", P.Matmul((), (), 2, 2, 3), ["s", "w"], ["y"], [vs(2, 2)], "mm"),
            ViewStep("flip", {"dim": 1}, "st", "stf"),
            ContiguizeStep("stf", "z"),
        ])


def test_runs_views_reshape_const_and_kernels():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([10, 20, 30], np.float32)
    out = Executor(sample_plan()).run(a=a, b=b)
    s = a + b
    np.testing.assert_allclose(out["y"], s @ np.arange(6, dtype=np.float32).reshape(3, 2))
    np.testing.assert_array_equal(out["flat"], s.T.reshape(-1))
    np.testing.assert_array_equal(out["z"], s.T[:, ::-1])
    assert out["z"].flags.c_contiguous


def test_plan_round_trips_through_json():
    plan = sample_plan()
    d = json.loads(json.dumps(plan.to_dict(), allow_nan=False))
    back = Plan.from_dict(d, plan.constants)
    assert back.to_dict() == plan.to_dict()
    a, b = np.ones((2, 3), np.float32), np.ones(3, np.float32)
    np.testing.assert_array_equal(Executor(back).run(a=a, b=b)["y"], Executor(plan).run(a=a, b=b)["y"])
    with pytest.raises(PlanError, match="constant 'w' .* was not supplied"):
        Plan.from_dict(d, {})
    with pytest.raises(PlanError, match="version"):
        Plan.from_dict({**d, "version": 99}, plan.constants)


def test_missing_kernel_fails_at_construction_naming_the_step():
    plan = Plan({"a": vs(3, dt="f16")}, {"y": "y"},
                [KernelStep(OpKind.ErfElementwise, ["f16"] * 2, "cuda", P.NO_PARAMS, ["a"], ["y"], [vs(3, dt="f16")], "erf1")])
    with pytest.raises(NoBackendForOp, match=r"step 0 \(KernelStep 'erf1'\).*ErfElementwise.*\[f16, f16\].*cuda.*cpu:\[f16, f16\]"):
        Executor(plan)


@pytest.mark.parametrize("steps, message", [
    ([KernelStep(OpKind.AddElementwise, [F32] * 3, "cpu", P.NO_PARAMS, ["a", "nope"], ["y"], [vs(3)])],
     "uses value 'nope' before it is defined"),
    ([KernelStep(OpKind.AddElementwise, ["f64"] * 3, "cpu", P.NO_PARAMS, ["a", "a"], ["y"], [vs(3)])],
     r"key dtypes \[f64, f64, f64\] do not match the operands \[f32, f32, f32\]"),
    ([KernelStep(OpKind.AddElementwise, [F32] * 3, "cpu", P.Affine(1.0, 0.0), ["a", "a"], ["y"], [vs(3)])],
     "AddElementwise.*receive NoParams, got Affine"),
    ([ReshapeStep("a", "y", (4,))], r"cannot reshape f32\[3\] \(3 elements\) to \[4\]"),
    ([ViewStep("squeeze", {"dim": 0}, "a", "y")], "has size 3, not 1"),
    ([ContiguizeStep("a", "a")], "value 'a' is defined twice"),
])
def test_malformed_plans_raise_plan_error(steps, message):
    with pytest.raises(PlanError, match=message):
        Executor(Plan({"a": vs(3)}, {"y": steps[-1].output if not isinstance(steps[-1], KernelStep) else "y"}, steps))


def test_unknown_view_op_is_rejected_when_the_step_is_built():
    with pytest.raises(PlanError, match="unknown view op 'reverse'; expected one of transpose"):
        ViewStep("reverse", {}, "a", "y")


def test_run_checks_input_names_shapes_and_dtypes():
    ex = Executor(sample_plan())
    with pytest.raises(PlanError, match=r"plan inputs are \(a: f32\[2,3\], b: f32\[3\]\); missing \['b'\], unexpected \['c'\]"):
        ex.run(a=np.zeros((2, 3), np.float32), c=1)
    with pytest.raises(PlanError, match=r"input 'a': expected f32\[2,3\] \(numpy float32\), got numpy float64\[2, 3\]"):
        ex.run(a=np.zeros((2, 3)), b=np.zeros(3, np.float32))
    with pytest.raises(PlanError, match=r"got numpy float32\[3, 2\]"):
        ex.run(a=np.zeros((3, 2), np.float32), b=np.zeros(3, np.float32))


def test_contiguize_rule_of_spec_2_3():
    s, l = Storage.from_numpy(np.zeros((2, 3), np.float32))
    assert not needs_contiguize(s, l, False)                         # (a)
    assert needs_contiguize(s, l.transpose(), False)
    assert not needs_contiguize(s, l.transpose(), True)              # (b)
    assert needs_contiguize(s, l.narrow(0, 1, 1), True)              # offset != 0 always
    assert needs_contiguize(s, l.narrow(1, 0, 2), True)              # bytes != numel*size
    row, rl = Storage.from_numpy(np.zeros(3, np.float32))
    assert needs_contiguize(row, rl.broadcast_as((2, 3)), True)      # stride-0: bytes differ


def test_view_input_kernels_get_every_view_as_it_is():
    s, l = Storage.from_numpy(np.zeros((2, 3), np.float32))
    row, rl = Storage.from_numpy(np.zeros(3, np.float32))
    for st, lay in ((s, l.narrow(0, 1, 1)), (s, l.narrow(1, 0, 2)), (s, l.flip(1)),
                    (row, rl.broadcast_as((2, 3)))):
        assert needs_contiguize(st, lay, True)
        assert not needs_contiguize(st, lay, True, view_input=True)
        assert not needs_contiguize(st, lay, False, True)


@pytest.mark.parametrize("caps, copies", [(KernelCaps(strided_input=True), 3),
                                          (KernelCaps(strided_input=True, view_input=True), 0)])
def test_executor_contiguizes_views_only_for_kernels_without_view_input(caps, copies, monkeypatch):
    """Broadcast, offset and flipped operands: copied (the §2.3 rule) unless
    the kernel reads any view; the result is the same either way."""
    table, seen = _recording_table(caps)
    made = []
    real = Storage.contiguize
    monkeypatch.setattr(Storage, "contiguize", lambda st, lay: made.append(lay) or real(st, lay))
    plan = Plan({"a": vs(3, 4), "b": vs(4)}, {"y": "y", "z": "z"},
                [ViewStep("broadcast_as", {"shape": (2, 4)}, "b", "bb"),
                 ViewStep("narrow", {"dim": 0, "start": 1, "length": 2}, "a", "an"),
                 ViewStep("flip", {"dim": 1}, "an", "af"),
                 KernelStep(OpKind.AddElementwise, [F32] * 3, "cpu", P.NO_PARAMS, ["an", "bb"], ["y"],
                            [vs(2, 4)]),
                 KernelStep(OpKind.AddElementwise, [F32] * 3, "cpu", P.NO_PARAMS, ["af", "y"], ["z"],
                            [vs(2, 4)])])
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.array([10, 20, 30, 40], np.float32)
    out = Executor(plan, table).run(a=a, b=b)
    np.testing.assert_array_equal(out["y"], a[1:] + b)
    np.testing.assert_array_equal(out["z"], a[1:, ::-1] + a[1:] + b)
    assert len(made) == copies
    if not copies:
        assert seen[0] == Layout((2, 4), (4, 1), 4) and seen[1] == Layout((2, 4), (4, -1), 7)


def test_large_output_buffers_are_reused_only_once_released():
    """A step's large output buffer is kept and reused by the next run once
    nothing refers to it; an output the caller still holds is never written
    again, and zero-filled outputs are zeroed again."""
    n = (1 << 18) // 4 + 8
    table, _ = _recording_table(KernelCaps(full_write=True))

    def part(inputs, outputs, layouts, params):  # writes only element 0 (not full_write)
        outputs[0].view(layouts[-1])[0] = inputs[0].view(layouts[0])[0]
    table.register_with_caps(OpKind.NegElementwise, [F32] * 2, "cpu", part, KernelCaps())
    plan = Plan({"a": vs(n)}, {"y": "y", "p": "p"},
                [KernelStep(OpKind.AddElementwise, [F32] * 3, "cpu", P.NO_PARAMS, ["a", "a"], ["y"], [vs(n)]),
                 KernelStep(OpKind.NegElementwise, [F32] * 2, "cpu", P.NO_PARAMS, ["a"], ["p"], [vs(n)])])
    ex = Executor(plan, table)
    first = ex.run(a=np.ones(n, np.float32))
    addr = first["y"].ctypes.data
    second = ex.run(a=np.full(n, 2, np.float32))          # `first` still alive: new buffers
    assert second["y"].ctypes.data != addr
    assert (first["y"] == 2).all() and (second["y"] == 4).all()
    del first
    third = ex.run(a=np.full(n, 3, np.float32))
    assert (second["y"] == 4).all() and (third["y"] == 6).all()
    del second
    view = third["y"][10:]                                 # a view keeps the buffer in use
    addr, paddr = third["y"].ctypes.data, third["p"].ctypes.data
    third["p"][:] = 7
    del third
    fourth = ex.run(a=np.full(n, 4, np.float32))
    assert fourth["y"].ctypes.data != addr and (view == 6).all()
    assert fourth["p"].ctypes.data == paddr                # released: reused, and zeroed again
    assert fourth["p"][0] == 4 and not fourth["p"][1:].any()


def _recording_table(caps):
    seen = []

    def k(inputs, outputs, layouts, params):
        seen.append(layouts[0])
        outputs[0].view(layouts[-1])[...] = inputs[0].view(layouts[0]) + inputs[1].view(layouts[1])

    t = KernelBindingTable()
    t.register_with_caps(OpKind.AddElementwise, [F32] * 3, "cpu", k, caps)
    return t, seen


@pytest.mark.parametrize("strided, expect_transposed", [(False, False), (True, True)])
def test_executor_passes_strided_views_only_to_strided_capable_kernels(strided, expect_transposed):
    table, seen = _recording_table(KernelCaps(strided_input=strided))
    plan = Plan({"a": vs(2, 3)}, {"y": "y"},
                [ViewStep("transpose", {}, "a", "at"),
                 KernelStep(OpKind.AddElementwise, [F32] * 3, "cpu", P.NO_PARAMS, ["at", "at"], ["y"], [vs(3, 2)])])
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = Executor(plan, table).run(a=a)["y"]
    np.testing.assert_array_equal(y, 2 * a.T)
    assert (seen[0] == Layout((3, 2), (1, 3), 0)) is expect_transposed
    assert seen[0].is_contiguous() is not expect_transposed


def test_kernel_failure_is_a_kernel_error_naming_the_step():
    plan = Plan({"x": vs(3), "i": vs(1, dt="u32")}, {"y": "y"},
                [KernelStep(OpKind.IndexSelect, [F32, "u32", F32], "cpu", P.IndexSelect(1, 3, 1, 1),
                            ["x", "i"], ["y"], [vs(1)], "pick")])
    ex = Executor(plan)
    assert ex.run(x=np.array([1, 2, 3], np.float32), i=np.array([2], np.uint32))["y"].tolist() == [3.0]
    with pytest.raises(IndexOutOfRangeError, match=r"step 0 \(pick\) IndexSelect: .* value 7 at position \[0\]"):
        ex.run(x=np.zeros(3, np.float32), i=np.array([7], np.uint32))  # checked before the kernel

    def boom(inputs, outputs, layouts, params):
        raise ValueError("no")
    t = KernelBindingTable()
    t.register(OpKind.NegElementwise, [F32, F32], "cpu", boom)
    plan = Plan({"x": vs(3)}, {"y": "y"},
                [KernelStep(OpKind.NegElementwise, [F32, F32], "cpu", P.NO_PARAMS, ["x"], ["y"], [vs(3)], "neg")])
    with pytest.raises(KernelError, match=r"step 0 \(neg\): kernel .*boom.* failed: ValueError: no"):
        Executor(plan, t).run(x=np.zeros(3, np.float32))


def test_bundle_outputs_and_deferred_matmul_rows():
    plan = Plan(
        {"x": vs(4, dt="i32"), "a": vs(4, 2), "b": vs(2, 3)},
        {"idx": "idx", "count": "count", "y": "y"},
        [KernelStep(OpKind.NonZeroIndices, ["i32", "u32"], "cpu", P.NonZeroIndices(4, 7), ["x"],
                    ["idx", "count"], [vs(4, dt="u32"), vs(1, dt="u32")], "nz"),
         KernelStep(OpKind.MatMul, [F32] * 3, "cpu", P.Matmul((), (), 4, 3, 2, P.MatmulM.deferred(7)),
                    ["a", "b"], ["y"], [vs(4, 3)], "mm")])
    a = np.arange(8, dtype=np.float32).reshape(4, 2)
    b = np.ones((2, 3), np.float32)
    out = Executor(plan).run(x=np.array([5, 0, 0, 9], np.int32), a=a, b=b)
    assert out["idx"].tolist() == [0, 3, 0, 0] and out["count"].tolist() == [2]
    np.testing.assert_array_equal(out["y"][:2], a[:2] @ b)
    assert (out["y"][2:] == 0).all()


def test_executor_uses_the_global_table_by_default():
    assert Executor(sample_plan()).table is global_table()
