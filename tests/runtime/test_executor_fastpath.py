"""The per-call fast paths: the executor's construction-time step decisions,
the kernel families' call memo (``compiler.codegen.family.CallMemo``),
descriptor templates, reused const storages, uninitialized output buffers
for kernels that write every element, and all of it under threads."""
import threading

import numpy as np
import pytest

from compiler import Graph, compile
from compiler.codegen import fused as FU
from compiler.codegen import kernels as K
from compiler.codegen.memref import DescriptorError
from compiler.errors import UnsupportedOpError
from runtime import (
    ConstStep, DType, Executor, KernelBindingTable, KernelCaps, KernelStep, Layout, OpKind, Plan,
    Storage, ValueSpec, ViewStep, global_table,
)
from runtime import params as P
from compiler.targets import parse_target

CPU = parse_target("cpu")

F32 = DType.F32
RNG = np.random.default_rng(0)
W1 = (RNG.standard_normal((16, 32)) / 4).astype(np.float32)
B1 = RNG.standard_normal(32).astype(np.float32)
W2 = (RNG.standard_normal((32, 8)) / 6).astype(np.float32)


def vs(*shape, dt="f32"):
    return ValueSpec(shape, dt)


def mlp_graph():
    g = Graph()
    x = g.input("x", (4, 16), "f32")
    h = (x @ g.constant(W1, name="w1") + g.constant(B1, name="b1")).relu()
    g.output((h @ g.constant(W2, name="w2")).softmax(-1), name="p")
    return g


def mlp_ref(x):
    h = np.maximum(x.astype(np.float64) @ W1 + B1, 0) @ W2
    e = np.exp(h - h.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def chain_graph():
    g = Graph()
    y = g.input("x", (4, 16), "f32")
    for i in range(6):
        y = (y * 1.5 + 0.25).relu() if i % 2 else y - 0.5
    g.output(y, name="y")
    return g


def chain_ref(x):
    y = x.astype(np.float32)
    for i in range(6):
        y = np.maximum(y * np.float32(1.5) + np.float32(0.25), 0) if i % 2 else y - np.float32(0.5)
    return y


@pytest.fixture(scope="module")
def mlp():
    return compile(mlp_graph())


@pytest.fixture(scope="module")
def chain():
    return compile(chain_graph(), pipeline="no-fusion")


def _inputs(n, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((4, 16)).astype(np.float32) for _ in range(n)]


# -- one plan, many calls ------------------------------------------------------------------
def test_same_plan_gives_each_input_its_own_result(mlp, chain):
    xs = _inputs(5)
    outs = [mlp(x=x) for x in xs]
    for x, out in zip(xs, outs):  # earlier results are not overwritten by later calls
        np.testing.assert_allclose(out, mlp_ref(x), rtol=1e-5, atol=1e-6)
    for x in xs:
        np.testing.assert_allclose(chain(x=x), chain_ref(x), rtol=1e-6, atol=1e-6)


def test_strided_and_contiguous_inputs_alternate_on_one_plan(chain):
    base = _inputs(1, seed=3)[0]
    variants = [base, np.ascontiguousarray(base.T).T, base[:, ::-1], base[::-1], base, base[::-1]]
    for x in variants:
        np.testing.assert_allclose(chain(x=x), chain_ref(x), rtol=1e-6, atol=1e-6)


# -- the kernel call memo ------------------------------------------------------------------------
def _call(kernel, xs, out_shape, layouts, params):
    ins = [Storage.from_numpy(x)[0] for x in xs]
    out = Storage.zeros(F32, int(np.prod(out_shape)))
    kernel(ins, [out], [*layouts, Layout.contiguous(out_shape)], params)
    return out.view(Layout.contiguous(out_shape))


def test_memo_keeps_params_and_layouts_apart():
    k = K.FAMILY.kernel(CPU, OpKind.Affine, (F32, F32))
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    contig, transposed = Layout.contiguous((3, 4)), Layout((4, 3), (1, 4), 0)
    cases = [(P.Affine(2.0, 0.0), contig, a), (P.Affine(3.0, 0.0), contig, a),
             (P.Affine(2.0, 0.0), transposed, a.T), (P.Affine(2.0, 0.0), contig, a)]
    for params, lay, want in cases:
        got = _call(k, [a], want.shape, [lay], params)
        np.testing.assert_array_equal(got, params.mul * want + params.add)
    assert len(k._calls) == 3  # the repeated call hit; the others each got an entry


def test_memo_hit_still_checks_the_storage_bounds():
    k = K.FAMILY.kernel(CPU, OpKind.Affine, (F32, F32))
    lay = Layout.contiguous((2, 4))
    _call(k, [np.ones((2, 4), np.float32)], (2, 4), [lay], P.Affine(1.0, 0.0))
    short = Storage.from_numpy(np.ones(5, np.float32))[0]
    with pytest.raises(DescriptorError, match="outside the storage"):
        k([short], [Storage.zeros(F32, 8)], [lay, lay], P.Affine(1.0, 0.0))


def test_fused_memo_keeps_shapes_apart_and_never_memoises_a_refusal():
    k = FU.FAMILY.kernel(CPU, OpKind.SoftmaxLastDim, (F32, F32))
    for shape in [(2, 5), (3, 4), (2, 5)]:
        x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        got = _call(k, [x], shape, [Layout.contiguous(shape)], P.SoftmaxLastDim(*shape))
        e = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-6)
    assert len(k._calls) == 2
    x = np.ones((2, 5), np.float32)
    for _ in range(2):  # wrong params for these inputs: refused every time
        with pytest.raises(UnsupportedOpError, match="do not describe inputs"):
            _call(k, [x], (2, 5), [Layout.contiguous((2, 5))], P.SoftmaxLastDim(5, 2))
    assert len(k._calls) == 2


# -- executor: static decisions --------------------------------------------------------------------
def _recording_add(caps, seen):
    def k(inputs, outputs, layouts, params):
        seen.append(layouts[0])
        outputs[0].view(layouts[-1])[...] = inputs[0].view(layouts[0]) + inputs[1].view(layouts[1])
    t = KernelBindingTable()
    t.register_with_caps(OpKind.AddElementwise, [F32] * 3, "cpu", k, caps)
    return t


def test_contiguize_rule_applies_to_views_of_executor_allocated_values():
    seen = []
    table = _recording_add(KernelCaps(strided_input=True), seen)
    add = lambda i, o, shape: KernelStep(OpKind.AddElementwise, [F32] * 3, "cpu", P.NO_PARAMS,  # noqa: E731
                                         i, [o], [vs(*shape)])
    plan = Plan({"a": vs(2, 3)}, {"y": "y", "z": "z"},
                [add(["a", "a"], "s", (2, 3)),
                 add(["s", "s"], "y", (2, 3)),                 # executor-allocated: as is
                 ViewStep("narrow", {"dim": 1, "start": 1, "length": 2}, "s", "sn"),
                 add(["sn", "sn"], "z", (2, 2))])              # offset 1: always materialized
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    for _ in range(2):
        seen.clear()
        out = Executor(plan, table).run(a=a)
        np.testing.assert_array_equal(out["y"], 4 * a)
        np.testing.assert_array_equal(out["z"], 4 * a[:, 1:])
        assert seen[1] == Layout.contiguous((2, 3))
        assert seen[2] == Layout.contiguous((2, 2))  # not Layout((2, 2), (3, 1), 1)


def test_view_layouts_follow_each_runs_input_strides():
    plan = Plan({"a": vs(2, 3)}, {"y": "y"},
                [ViewStep("transpose", {}, "a", "at"),
                 ViewStep("flip", {"dim": 0}, "at", "atf"),
                 KernelStep(OpKind.AddElementwise, [F32] * 3, "cpu", P.NO_PARAMS, ["atf", "atf"],
                            ["y"], [vs(3, 2)])])
    ex, a = Executor(plan), np.arange(6, dtype=np.float32).reshape(2, 3)
    for x in (a, np.asfortranarray(a), a[::-1][::-1], np.ascontiguousarray(a[:, ::-1])[:, ::-1], a):
        np.testing.assert_array_equal(ex.run(a=x)["y"], 2 * x.T[::-1])


@pytest.fixture
def poisoned_empty(monkeypatch):
    """np.empty returning 0xAB bytes, so a kernel that skips an element of an
    uninitialized output shows it."""
    real = np.empty

    def empty(*args, **kwargs):
        out = real(*args, **kwargs)
        out.reshape(-1).view(np.uint8)[...] = 0xAB
        return out
    monkeypatch.setattr(np, "empty", empty)


def test_full_write_kernels_overwrite_uninitialized_outputs(poisoned_empty, mlp, chain):
    for m, ref in ((mlp, mlp_ref), (chain, chain_ref)):
        ex = Executor(m.plan, m.table)  # built after the patch: allocates with the poisoned np.empty
        for x in _inputs(2):
            np.testing.assert_allclose(ex.run(x=x)[m.output_names[0]], ref(x), rtol=1e-5, atol=1e-6)
    plan = Plan({"a": vs(2, 3), "b": vs(3, 2)}, {"y": "y", "s": "s"},
                [KernelStep(OpKind.MatMul, [F32] * 3, "cpu", P.Matmul((), (), 2, 2, 3), ["a", "b"],
                            ["y"], [vs(2, 2)]),
                 KernelStep(OpKind.SumReduce, [F32] * 2, "cpu", P.Reduce((1,), True), ["a"], ["s"],
                            [vs(2, 1)])])
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((3, 2), np.float32)
    out = Executor(plan, global_table()).run(a=a, b=b)  # numpy kernels
    np.testing.assert_array_equal(out["y"], a @ b)
    np.testing.assert_array_equal(out["s"], a.sum(1, keepdims=True))


def test_other_kernels_and_partial_matmuls_still_get_zeroed_outputs(poisoned_empty):
    t = KernelBindingTable()
    t.register(OpKind.NegElementwise, [F32, F32], "cpu", lambda i, o, l, p: None)  # writes nothing
    plan = Plan({"x": vs(3)}, {"y": "y"},
                [KernelStep(OpKind.NegElementwise, [F32, F32], "cpu", P.NO_PARAMS, ["x"], ["y"], [vs(3)])])
    np.testing.assert_array_equal(Executor(plan, t).run(x=np.ones(3, np.float32))["y"], np.zeros(3))

    K.register_primitive_kernels(t, CPU, dtypes=(F32,), kinds=[OpKind.MatMul])
    rows = P.Matmul((), (), 4, 2, 3, P.MatmulM.rows(2))  # mlir-cpu computes the first 2 rows only
    plan = Plan({"a": vs(4, 3), "b": vs(3, 2)}, {"y": "y"},
                [KernelStep(OpKind.MatMul, [F32] * 3, "cpu", rows, ["a", "b"], ["y"], [vs(4, 2)])])
    a, b = np.arange(12, dtype=np.float32).reshape(4, 3), np.ones((3, 2), np.float32)
    want = a @ b
    want[2:] = 0
    np.testing.assert_array_equal(Executor(plan, t).run(a=a, b=b)["y"], want)


def test_full_write_is_a_kernel_cap_not_a_kernel_source(poisoned_empty):
    """Uninitialized outputs follow ``KernelCaps.full_write`` alone: a kernel
    that claims a compiler kernel source but not the cap still gets zeros, and
    a kernel from any source with the cap gets np.empty's bytes."""
    from runtime import KernelRef, PrecisionGuarantee, unknown_cost
    plan = Plan({"x": vs(3)}, {"y": "y"},
                [KernelStep(OpKind.NegElementwise, [F32, F32], "cpu", P.NO_PARAMS, ["x"], ["y"], [vs(3)])])
    for source, caps, want in (("mlir-cpu", KernelCaps(strided_input=True), np.zeros(3, np.float32)),
                               ("numpy", KernelCaps(), np.zeros(3, np.float32)),
                               ("mine", KernelCaps(full_write=True), None)):
        t = KernelBindingTable()
        t.register_full_with_source(OpKind.NegElementwise, [F32, F32], "cpu",
                                    KernelRef(lambda i, o, l, p: None, "skips", source), caps,
                                    PrecisionGuarantee.UNAUDITED, unknown_cost, source)
        got = Executor(plan, t).run(x=np.ones(3, np.float32))["y"]
        if want is None:
            assert got.view(np.uint8).tolist() == [0xAB] * 12, source
        else:
            np.testing.assert_array_equal(got, want, err_msg=source)
    entry = global_table().lookup_entry(OpKind.NegElementwise, [F32, F32], "cpu")
    assert entry.kernel_source == "numpy" and entry.caps.full_write


def test_const_storage_follows_the_plan_constant():
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    plan = Plan({"a": vs(2, 3)}, {"y": "y"},
                [ConstStep("w", "w"),
                 KernelStep(OpKind.MatMul, [F32] * 3, "cpu", P.Matmul((), (), 2, 2, 3), ["a", "w"],
                            ["y"], [vs(2, 2)])],
                constants={"w": w})
    ex, a = Executor(plan), np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(ex.run(a=a)["y"], a @ w)
    w[0, 0] = 100.0  # in place: seen (the storage shares the array's memory), as before
    np.testing.assert_array_equal(ex.run(a=a)["y"], a @ w)
    w2 = np.full((3, 2), 2.0, np.float32)
    plan.constants["w"] = w2  # a new array: a new storage
    np.testing.assert_array_equal(ex.run(a=a)["y"], a @ w2)
    wf = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(3, 2))
    plan.constants["w"] = wf  # copied every run, so in-place edits are seen too
    np.testing.assert_array_equal(ex.run(a=a)["y"], a @ wf)
    wf[2, 1] = -7.0
    np.testing.assert_array_equal(ex.run(a=a)["y"], a @ wf)


# -- threads ---------------------------------------------------------------------------------------
def _hammer(fn, jobs, n_threads=4, rounds=25):
    barrier, errors, results = threading.Barrier(n_threads), [], {}

    def worker(t):
        try:
            barrier.wait()
            for r in range(rounds):
                j = (t + r) % len(jobs)
                results[(t, r)] = (j, fn(jobs[j]))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    return results.values()


@pytest.mark.parametrize("which", ["mlp", "chain"])
def test_one_compiled_module_from_four_threads(which, request):
    m = request.getfixturevalue(which)
    xs = _inputs(6, seed=7) + [np.asfortranarray(x) for x in _inputs(2, seed=8)]
    serial = [m(x=x) for x in xs]
    for j, out in _hammer(lambda x: m(x=x), xs):
        np.testing.assert_array_equal(out, serial[j])


def test_a_cold_kernel_memo_from_four_threads():
    k = K.FAMILY.kernel(CPU, OpKind.Affine, (F32, F32))  # empty memo: the threads race to fill it
    a = np.arange(20, dtype=np.float32).reshape(4, 5)
    jobs = [(P.Affine(float(m), 0.0), lay, x) for m in (2, 3)
            for lay, x in ((Layout.contiguous((4, 5)), a), (Layout((5, 4), (1, 5), 0), a.T))]
    for j, out in _hammer(lambda job: _call(k, [a], job[2].shape, [job[1]], job[0]), jobs):
        params, _, x = jobs[j]
        np.testing.assert_array_equal(out, params.mul * x + params.add)
    assert len(k._calls) == 4
