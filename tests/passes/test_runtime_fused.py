"""Runtime fused ops end to end: fuel-fuse forms ``fuel.runtime_fused``
(dedup by structural hash), the IR round-trips and re-resolves, the planner
keys it ``RuntimeFused(fid)`` with ``JitScalars``, the mlir-cpu-runtime-fused
kernel computes what the interpreter does in ONE kernel, and fuel-decompose
inlines it back (total)."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import Graph
from compiler import compile
from compiler.dialect import parse_fuel_module
from compiler.dialect.structural import (RUNTIME_FUSED, attr_fused_id, attr_scalars,
                                         check_runtime_fused, resolve_runtime_fused)
from compiler.errors import DialectError
from compiler.graph.interpret import interpret
from compiler.dialect import make_context
from compiler.mlir import ir
from compiler.passes import run_pipeline
from compiler.passes._fuel import walk_ops
from runtime import BindingKey
from runtime.params import JitScalars, NoParams
from tests.passes import kernel_tables  # noqa: F401  (registers the test tables)

TABLE = "primitives_f32"  # registered by tests.passes.kernel_tables
FUSE = f"builtin.module(fuel-fuse{{table={TABLE}}})"
NO_RUNTIME = ("builtin.module(fuel-fuse{runtime=false},fuel-decompose,fuel-reconcile-dtypes,"
              "fuel-cse,fuel-dce,canonicalize)")

CHAIN = """func.func @f(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "fuel.mul_scalar"(%x) {value = SCALAR : f64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "fuel.add"(%0, %y) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "fuel.tanh"(%1) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "fuel.mul"(%2, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = "fuel.sigmoid"(%3) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}"""


def _chain(scalar=2.0):
    return CHAIN.replace("SCALAR", repr(float(scalar)))


def _fused(text, pipeline=FUSE):
    ctx = make_context()
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(text)
        run_pipeline(m, pipeline, reproducer=False)
    return ctx, m


def _runtime_ops(m):
    return walk_ops(m.operation, lambda o: o.name == RUNTIME_FUSED)


def _graph(n=4, d=8):
    g = Graph()
    x = g.input("x", (n, d), "f32")
    y = g.input("y", (n, d), "f32")
    g.output(((x * 2 + y).tanh() * x).sigmoid(), name="o")
    return g


def _inputs(n=4, d=8, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, d)).astype(np.float32),
            "y": rng.standard_normal((n, d)).astype(np.float32)}


# -- the pass ------------------------------------------------------------------------
def test_chain_fuses_into_one_runtime_op_with_its_scalar():
    _, m = _fused(_chain(2.0))
    (op,) = _runtime_ops(m)
    body = [o.operation.name for o in op.regions[0].blocks[0].operations]
    assert body == ["fuel.mul_scalar", "fuel.add", "fuel.tanh", "fuel.mul", "fuel.sigmoid",
                    "gpu.yield"]
    assert attr_scalars(op) == (2.0,)
    assert attr_fused_id(op) >= 0x8000
    func = m.body.operations[0]
    assert [o.operation.name for o in func.regions[0].blocks[0].operations] == \
        [RUNTIME_FUSED, "func.return"]


def test_same_chain_twice_gets_the_same_id_and_its_own_scalars():
    _, m1 = _fused(_chain(2.0))
    _, m2 = _fused(_chain(5.0).replace('"fuel.add"(%0, %y)', '"fuel.add"(%y, %0)'))
    (a,), (b,) = _runtime_ops(m1), _runtime_ops(m2)
    assert attr_fused_id(a) == attr_fused_id(b)
    assert (attr_scalars(a), attr_scalars(b)) == ((2.0,), (5.0,))
    # A structurally different chain (sigmoid -> tanh) is another id.
    _, m3 = _fused(_chain(2.0).replace("fuel.sigmoid", "fuel.TMP").replace(
        "fuel.tanh", "fuel.sigmoid").replace("fuel.TMP", "fuel.tanh"))
    (c,) = _runtime_ops(m3)
    assert attr_fused_id(c) != attr_fused_id(a)


def test_shared_intermediate_is_not_interior():
    text = _chain().replace("return %4 : tensor<4x8xf32>",
                            "return %4, %1 : tensor<4x8xf32>, tensor<4x8xf32>").replace(
        "-> tensor<4x8xf32> {", "-> (tensor<4x8xf32>, tensor<4x8xf32>) {", 1)
    _, m = _fused(text)
    ops = _runtime_ops(m)
    assert len(ops) == 2  # {mul_scalar, add} and {tanh, mul, sigmoid}
    ret = m.body.operations[0].regions[0].blocks[0].operations[-1]
    assert all(v.owner.name == RUNTIME_FUSED for v in ret.operands)
    for op in ops:  # no body value leaves its op except through the yield
        _, result = check_runtime_fused(op)
        assert result.owner.name in ("fuel.add", "fuel.sigmoid")


def test_no_kernel_no_fusion():
    # The table serves f32/f64 only: nothing in a bf16 chain has a kernel.
    _, m = _fused(_chain().replace("f32", "bf16").replace("bf1664", "f64"))
    assert not _runtime_ops(m)
    # A table with no kernel for these ops at all (a broadcast-baked add only).
    _, m = _fused(_chain(), "builtin.module(fuel-fuse{table="
                            "broadcast_only_add})")
    assert not _runtime_ops(m)


def test_runtime_false_forms_nothing():
    _, m = _fused(_chain(), f"builtin.module(fuel-fuse{{table={TABLE} runtime=false}})")
    assert not _runtime_ops(m)


# -- the IR ---------------------------------------------------------------------------
def test_ir_round_trips_and_re_resolves_in_a_fresh_context():
    _, m = _fused(_chain(2.0))
    text = str(m)
    again = parse_fuel_module(text)  # a fresh context: parses and verifies
    again.operation.verify()
    (op,) = _runtime_ops(again)
    assert str(again) == text
    res = resolve_runtime_fused(op)
    assert res.fused_id == attr_fused_id(op) and res.scalars == (2.0,)
    # A stale id (another process's numbering) is re-resolved by fuel-fuse.
    stale = text.replace(f"fused_id = {res.fused_id} : i64", "fused_id = 65535 : i64")
    assert stale != text
    _, m2 = _fused(stale)
    (op2,) = _runtime_ops(m2)
    assert attr_fused_id(op2) == res.fused_id


BAD_BODY = """func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.runtime_fused"(%x) ({
  ^bb0(%a: tensor<4xf32>):
    %1 = "fuel.add"(%a, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    gpu.yield %1 : tensor<4xf32>
  }) {fused_id = 32768 : i64, scalars = [],
      operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}"""


def test_malformed_body_is_a_typed_error_not_a_crash():
    m = parse_fuel_module(BAD_BODY)  # IRDL accepts it; the structural check does not
    (op,) = _runtime_ops(m)
    with pytest.raises(DialectError, match="outside the body"):
        check_runtime_fused(op)
    from compiler.errors import PassError
    with pytest.raises(PassError, match="malformed runtime fused op"):
        _fused(BAD_BODY)
    # Decompose is total: it warns and keeps the op.
    ctx = make_context()
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(BAD_BODY)
        diags = run_pipeline(m, "builtin.module(fuel-decompose{all=true})", reproducer=False)
    assert len(_runtime_ops(m)) == 1
    assert any("kept fused" in d.message for d in diags)


def test_missing_operand_segments_do_not_parse():
    with pytest.raises(DialectError):
        parse_fuel_module(BAD_BODY.replace(
            ",\n      operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>", ""))


# -- decompose ---------------------------------------------------------------------------
def test_decompose_inlines_back_to_the_primitives():
    _, m = _fused(_chain(3.0), f"builtin.module(fuel-fuse{{table={TABLE}}},"
                               f"fuel-decompose{{all=true}})")
    assert not _runtime_ops(m)
    ops = [o.operation.name for o in m.body.operations[0].regions[0].blocks[0].operations]
    assert ops == ["fuel.mul_scalar", "fuel.add", "fuel.tanh", "fuel.mul", "fuel.sigmoid",
                   "func.return"]
    assert "3.000000e+00" in str(m)


# -- plan, codegen, numerics -------------------------------------------------------------
def test_compiled_chain_is_one_kernel_and_matches_the_interpreter():
    g = _graph()
    m = compile(g)
    summary = m.kernel_summary()
    assert len(summary) == 1 and "(mlir-cpu-runtime-fused)" in summary[0], summary
    (step,) = m.plan.steps
    assert step.key.is_runtime_fused
    assert step.params == JitScalars((2.0,))
    assert m.executor.entries[0].kernel_source == "mlir-cpu-runtime-fused"
    feeds = _inputs()
    np.testing.assert_allclose(m(**feeds), interpret(g, feeds)["o"], rtol=1e-6, atol=1e-6)
    unfused = compile(g, pipeline=NO_RUNTIME)
    assert len(unfused.kernel_summary()) == 5
    np.testing.assert_allclose(unfused(**feeds), m(**feeds), rtol=1e-6, atol=1e-6)


def test_decompose_all_pipeline_compiles_to_the_primitives():
    g = _graph()
    m = compile(g, pipeline="builtin.module(fuel-fuse,fuel-decompose{all=true},"
                            "fuel-reconcile-dtypes,fuel-cse,fuel-dce)")
    assert len(m.kernel_summary()) == 5
    assert not any("runtime-fused" in s for s in m.kernel_summary())
    feeds = _inputs(seed=3)
    np.testing.assert_allclose(m(**feeds), interpret(g, feeds)["o"], rtol=1e-6, atol=1e-6)


def test_broadcast_view_and_trailing_reduction_fuse_and_match():
    g = Graph()
    x = g.input("x", (6, 16), "f32")
    b = g.input("b", (16,), "f32")
    g.output(((x + b).exp() * x).sum(-1), name="o")
    m = compile(g)
    assert [s.split(" ")[-1] for s in m.kernel_summary()] == ["(mlir-cpu-runtime-fused)"]
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((6, 16)).astype(np.float32),
             "b": rng.standard_normal(16).astype(np.float32)}
    ref = interpret(g, feeds)["o"]
    np.testing.assert_allclose(m(**feeds), ref, rtol=1e-5, atol=1e-5)


def test_kernel_is_one_fused_loop_nest():
    from compiler.codegen.runtime_fused import RuntimeFusedInstance, linalg_text
    from compiler.graph.opdef import TensorType
    from runtime.dtype import DType
    _, m = _fused(_chain(2.0))
    (op,) = _runtime_ops(m)
    res = resolve_runtime_fused(op)
    t = TensorType((4, 8), DType.F32)
    text = linalg_text(RuntimeFusedInstance(res.fused_id, res.scalars, (t, t)))
    assert text.count("linalg.generic") == 1, text
    assert "math.tanh" in text and "2.000000e+00" in text


def test_same_id_other_scalars_other_shapes_share_the_binding():
    g1, g2 = _graph(4, 8), Graph()
    x = g2.input("x", (3, 5), "f32")
    y = g2.input("y", (3, 5), "f32")
    g2.output(((x * 7 + y).tanh() * x).sigmoid(), name="o")
    m1, m2 = compile(g1), compile(g2)
    s1, s2 = m1.plan.steps[0], m2.plan.steps[0]
    assert s1.key == s2.key and s1.dtypes == s2.dtypes
    assert (s1.params, s2.params) == (JitScalars((2.0,)), JitScalars((7.0,)))
    feeds = _inputs(3, 5, seed=2)
    np.testing.assert_allclose(m2(**feeds), interpret(g2, feeds)["o"], rtol=1e-6, atol=1e-6)


def test_runtime_kernel_rejects_foreign_params():
    from compiler.codegen.runtime_fused import scalars_of
    from compiler.errors import UnsupportedOpError
    from runtime.params import Reduce
    assert scalars_of(NoParams()) == ()
    with pytest.raises(UnsupportedOpError):
        scalars_of(Reduce((0,), False))


def test_binding_key_is_runtime_fused():
    m = compile(_graph())
    fid = m.plan.steps[0].key.fused.value
    assert m.table.has_runtime_fused(fid, "cpu")
    assert m.plan.steps[0].key == BindingKey.runtime_fused(fid)


def test_a_chain_reading_more_than_max_inputs_becomes_several_groups():
    # sum_i x_i * y_i over 20 pairs: 40 inputs; each group stops growing at
    # MAX_INPUTS values read from outside instead of not forming at all
    from compiler.dialect.structural import MAX_INPUTS
    rng = np.random.default_rng(3)
    g = Graph()
    xs = [g.input(f"x{i}", (4, 8), "f32") for i in range(20)]
    ys = [g.input(f"y{i}", (4, 8), "f32") for i in range(20)]
    acc = None
    for x, y in zip(xs, ys):
        acc = x * y if acc is None else acc + x * y
    g.output(acc, name="o")
    m = compile(g)
    fused = [s for s in m.plan.steps if getattr(s, "key", None) is not None
             and s.key.is_runtime_fused]
    assert len(fused) >= 2 and all(len(s.inputs) <= MAX_INPUTS for s in fused)
    # at most a lone op left over at the chain's start (a group needs two)
    kernels = [s for s in m.plan.steps if getattr(s, "key", None) is not None]
    assert len(kernels) - len(fused) <= 1, m.kernel_summary()
    feeds = {f"{p}{i}": rng.standard_normal((4, 8)).astype(np.float32)
             for p in "xy" for i in range(20)}
    np.testing.assert_allclose(m(**feeds), interpret(g, feeds)["o"], rtol=1e-5, atol=1e-5)
