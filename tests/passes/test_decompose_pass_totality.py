"""``fuel-decompose{all=true}`` is total on real MLIR: for every registry entry, at random (often
invalid) params, shapes and dtypes, the pass never raises and never fails
the pipeline. Either it decomposed, and then the module verifies, no fused op
is left and, where the payload is float (or the case's own structured data),
running the decomposed module on the numpy kernels agrees with the entry's
numpy ``reference``; or it declined, and then the module is exactly as it was
and one warning per fused op says why.

Valid ops are emitted through ``graph_to_module`` (the builders' path);
invalid payloads are built directly with ``ir.Operation.create``. A payload
the dialect's IRDL verifier itself rejects is not a decompose scenario and is
only counted.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.dialect import dtype_to_mlir, lookup, op_params, params_to_attributes
from compiler.dialect.definition import load_fuel_dialect
from compiler.dialect.emit import NAME_ATTR, OUTPUT_NAMES_ATTR, graph_to_module
from compiler.graph.graph import Graph
from compiler.graph.numerics import dtype_of
from compiler.graph.opdef import TensorType
from compiler.mlir import func, ir
from compiler.passes import _fuel, run_pipeline
from compiler.plan import plan_from_module
from compiler.registry import default_registry, normalize_params
from runtime.dtype import DType
from runtime.executor import Executor
from tests.passes import kernel_tables  # noqa: F401  (registers the test tables)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "registry"))
from fused_cases import cases  # noqa: E402  (the registry tests' per-op samples)

# all=true decomposes every fused op; with a binding table, an op stays fused
# exactly when the table has its kernel (fused_f32: softmax, norms, linear).
PIPELINES = ["builtin.module(fuel-decompose{all=true})",
             "builtin.module(fuel-decompose{table=primitives_f32})",
             "builtin.module(fuel-decompose{table=fused_f32})"]
CASES = cases()
NAMES = sorted(CASES)
DTYPES = [DType.F32, DType.F64, DType.F16, DType.BF16, DType.I32, DType.I64, DType.U32, DType.U8]
JUNK = [None, -3, 0, 1, 7, 2.5, -1e300, float("nan"), float("inf"), True, False, "mean",
        "Q8_0", "Q4_K_M", (1, 2), (0, 0), (), (2, -1, 3), DType.F32]
DYNAMIC = -1  # a dim spelled "?" in the tensor type


@st.composite
def scenario(draw):
    """(entry, (entry, case inputs, case params), operand types, params, result
    types or None, whether the results carry a tensor encoding).
    Result types None means "what the op's own rule infers" (the valid path)."""
    name = draw(st.sampled_from(NAMES))
    entry = default_registry()[name]
    k = draw(st.integers(0, len(CASES[name]) - 1))
    inputs, params = CASES[name][k]
    types = [TensorType(np.shape(x), dtype_of(np.asarray(x))) for x in inputs]
    params = normalize_params(entry, params)  # every attribute present, as the builders emit
    results, encoded = None, False
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.integers(0, 10))
        i = draw(st.integers(0, max(len(types) - 1, 0)))
        if kind == 0 and types and types[i].shape:  # perturb one dim
            a = draw(st.integers(0, len(types[i].shape) - 1))
            s = list(types[i].shape)
            s[a] = max(0, s[a] + draw(st.sampled_from([-1, 1, 2])))
            types[i] = TensorType(tuple(s), types[i].dtype)
        elif kind == 1 and types:  # change a dtype
            types[i] = TensorType(types[i].shape, draw(st.sampled_from(DTYPES)))
        elif kind == 2 and types:  # drop or duplicate an input
            if draw(st.booleans()):
                types.pop(i)
            else:
                types.append(types[i])
        elif kind == 3 and entry.params:  # junk a param value
            params[draw(st.sampled_from(entry.params)).name] = draw(st.sampled_from(JUNK))
        elif kind == 4 and entry.params:  # drop a param (a required one is then missing)
            params.pop(draw(st.sampled_from(entry.params)).name, None)
        elif kind == 5:
            params["bogus"] = 1
        elif kind == 6 and types and types[i].shape:  # a dynamic dim
            s = list(types[i].shape)
            s[draw(st.integers(0, len(s) - 1))] = DYNAMIC
            types[i] = TensorType(tuple(s), types[i].dtype)
        elif kind == 7 and types:  # rank change: drop the last axis / add a leading 1
            s = types[i].shape
            types[i] = TensorType(s[:-1] if s and draw(st.booleans()) else (1,) + tuple(s),
                                  types[i].dtype)
        elif kind == 8:  # results that disagree with the op's rule
            results = draw(st.sampled_from([[TensorType((2, 3), DType.F32)],
                                            [TensorType((), DType.F32)],
                                            [TensorType((1,), DType.F64)] * entry.num_outputs]))
        elif kind == 9 and entry.params:  # a value of the right kind, anywhere in its range
            spec = draw(st.sampled_from(entry.params))
            params[spec.name] = draw(_value_of_kind(spec, entry))
        elif kind == 10:  # the results carry a tensor encoding
            encoded = True
    return entry, (entry, inputs, CASES[name][k][1]), types, params, results, encoded


def _value_of_kind(spec, entry):
    if spec.name in entry.enums:
        return st.sampled_from(entry.enums[spec.name])
    return {"i64": st.integers(-4, 70) | st.sampled_from([2**31, 2**62]),
            "bool": st.booleans(),
            "f64": st.floats(width=64) | st.sampled_from([0.0, -0.0, 1e-300, 1e300]),
            "i64s": st.lists(st.integers(-2, 9), min_size=0, max_size=3).map(tuple),
            "str": st.text(max_size=3)}.get(spec.kind, st.none())


# -- building the module ------------------------------------------------------------------------
def _valid(entry, types, params):
    """The op's normalized params and result types when the payload is valid, else None."""
    if any(DYNAMIC in t.shape for t in types):
        return None
    try:
        p = normalize_params(entry, params)
        out = entry.infer(types, p)
    except Exception:
        return None
    return p, (out if isinstance(out, list) else [out])


def _via_graph(entry, types, params):
    """graph_to_module over the registry's graph builder; every output slot is returned."""
    g = Graph()
    hs = [g.input(f"in{i}", t.shape, t.dtype) for i, t in enumerate(types)]
    g.output(g.add_fused(entry, hs, params), "y")
    em = graph_to_module(g)
    if entry.num_outputs > 1:
        _return_every_slot(em.module)
    return em.module


def _return_every_slot(module):
    """graph_to_module returns slot 0 of a multi-output op; return them all."""
    with module.context, ir.Location.unknown():
        f = plan_find_main(module)
        block = f.regions[0].blocks[0]
        op = next(o for o in _fuel.fuel_ops(module) if _fuel.fused_entry(o) is not None)
        ret = list(block.operations)[-1]
        with ir.InsertionPoint(ret):
            func.ReturnOp(list(op.results))
        ret.erase()
        f.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in block.arguments], [r.type for r in op.results]))
        f.attributes[OUTPUT_NAMES_ATTR] = ir.ArrayAttr.get(
            [ir.StringAttr.get("y" if i == 0 else f"y{i}") for i in range(len(op.results))])


def plan_find_main(module):
    return next(o for o in module.body.operations if o.operation.name == "func.func")


def _mlir_type(t: TensorType, encoded: bool = False):
    shape = [ir.ShapedType.get_dynamic_size() if d == DYNAMIC else d for d in t.shape]
    return ir.RankedTensorType.get(shape, dtype_to_mlir(t.dtype),
                                   ir.StringAttr.get("enc") if encoded else None)


def _attr(spec, value):
    """An attribute for a (possibly junk) param value: by the spec's kind
    when the value fits it, else by the python type (IRDL may refuse it)."""
    from compiler.dialect.attrs import param_to_attr
    from compiler.registry.grammar import value_fits_kind
    if spec is not None and value_fits_kind(value, spec.kind, allow_none=False):
        try:
            return param_to_attr(spec, value)
        except Exception:
            pass
    if isinstance(value, bool):
        return ir.BoolAttr.get(value)
    if isinstance(value, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
    if isinstance(value, float):
        return ir.FloatAttr.get(ir.F64Type.get(), value)
    if isinstance(value, DType):
        return ir.StringAttr.get(value.value)
    if isinstance(value, str):
        return ir.StringAttr.get(value)
    if isinstance(value, tuple):
        return ir.ArrayAttr.get([ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)
                                 for v in value])
    return None


def _direct(entry, types, params, results, encoded=False):
    """A module whose func calls ``fuel.<mnemonic>`` built with Operation.create."""
    if results is None:
        results = [TensorType((2, 3), DType.F32)] * entry.num_outputs
    ctx = ir.Context()
    load_fuel_dialect(ctx)
    specs = {p.name: p for p in lookup(entry.mnemonic).params}
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        arg_types = [_mlir_type(t) for t in types]
        res_types = [_mlir_type(t, encoded) for t in results]
        with ir.InsertionPoint(module.body):
            f = func.FuncOp("main", (arg_types, res_types))
            f.arg_attrs = ir.ArrayAttr.get([ir.DictAttr.get({NAME_ATTR: ir.StringAttr.get(f"in{i}")})
                                            for i in range(len(types))])
            block = f.add_entry_block()
        attrs = {}
        for k, v in params.items():
            a = None if v is None else _attr(specs.get(k), v)
            if a is not None:
                attrs[k] = a
        with ir.InsertionPoint(block):
            op = ir.Operation.create(f"fuel.{entry.mnemonic}", results=res_types,
                                     operands=list(block.arguments), attributes=attrs)
            func.ReturnOp(list(op.results))
    return module


# -- running it ---------------------------------------------------------------------------------
def _run_plan(module, inputs):
    plan = plan_from_module(module)
    out = Executor(plan).run(**{f"in{i}": x for i, x in enumerate(inputs)})
    names = list(out)
    return [out[n] for n in names]


def _data(types, params, case, rng):
    """Input arrays: the case's own (structured: indices, packed weights)
    data when the types and params are the case's, random floats when every
    operand is f32/f64, else None."""
    entry, inputs, case_params = case
    case_types = [TensorType(np.shape(x), dtype_of(np.asarray(x))) for x in inputs]
    if types == case_types and params == normalize_params(entry, case_params):
        return [np.asarray(x) for x in inputs]
    if all(t.dtype in (DType.F32, DType.F64) for t in types):
        return [rng.uniform(-1, 1, t.shape).astype(t.dtype.numpy) for t in types]
    return None


def _in_numerics_domain(params, types) -> bool:
    """Whether agreement with the reference is meaningful at these params.
    The reference computes in f64 and rounds once; the decomposition computes
    in the payload dtype. A float param beyond f32's range (softmax_scale
    1e300 or an eps of 1e-300 that rounds to 0) overflows or vanishes in an
    f32 recipe where the f64 reference does not, so f32 payloads are compared
    only for finite params within [1e-30, 1e6] in magnitude. Huge integer
    params (PowI exponents of 2**31) would run the numpy kernels for minutes."""
    f32 = any(t.dtype == DType.F32 for t in types)
    for v in params.values():
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, int) and abs(v) > 1024:
            return False
        if isinstance(v, float) and f32 and not (v == 0 or 1e-30 <= abs(v) <= 1e6):
            return False
    return True


def _agree(got, ref):
    got = got.astype(np.float64)
    ref = np.asarray(ref).astype(np.float64)
    assert got.shape == ref.shape
    # Junk params such as -1e300 overflow the payload dtype: where the
    # reference overflows the decomposition must too (inf - inf may be NaN in
    # one evaluation order and inf in the other); elsewhere they agree.
    over = ~np.isfinite(ref)
    assert not np.isfinite(got[over]).any(), "decomposition finite where the reference overflows"
    np.testing.assert_allclose(got[~over], ref[~over], rtol=2e-4, atol=2e-4, equal_nan=True)


STATS: dict[str, int] = {}


def _count(what):
    STATS[what] = STATS.get(what, 0) + 1


def _decompose_is_total(sc, pipeline, seed):
    entry, case, types, params, results, encoded = sc
    valid = _valid(entry, types, params)
    if valid is not None and results is None and not encoded:
        params, results = valid
        module = _via_graph(entry, types, params)
    else:
        if valid is not None and results is None:
            results = valid[1]
        module = _direct(entry, types, params, results, encoded)
        if not _verifies(module):
            _count("rejected by the dialect verifier")
            return
    before = str(module)
    # What the pass sees: the params the op carries (unknown attributes are
    # not params) and its operand/result types.
    carried = _carried(module, entry)

    served = _served(module, pipeline)
    diags = run_pipeline(module, pipeline, reproducer=False)  # must not raise

    assert module.operation.verify()
    warnings = [d for d in diags if d.severity == "warning"]
    assert all(d.severity in ("warning", "remark") for d in diags), diags
    fused_left = [o for o in _fuel.fuel_ops(module) if _fuel.fused_entry(o) is not None]
    if served:
        _count("kept: the table has the kernel")
        assert str(module) == before and not warnings, [d.message for d in diags]
        return
    if str(module) == before:
        _count(f"declined: {entry.name}")
        # Declined: the IR is untouched and the fused op says why.
        assert len(fused_left) == 1 and len(warnings) == 1, [d.message for d in diags]
        msg = warnings[0].message
        kept = "kept fused: " if "all=true" in pipeline else \
            "kept fused (and the target has no kernel for it): "
        assert f"'fuel.{entry.mnemonic}'" in msg and kept + "decompose declined: " in msg, msg
        assert msg.split("decompose declined: ", 1)[1].strip(), msg
        return
    # Decomposed: fused ops are left only where the table has their kernel
    # (FlashAttn's nested SoftmaxLastDim under fused_f32).
    assert all(_served_op(o, pipeline) for o in fused_left), str(module)
    _count(f"decomposed: {entry.name}")
    assert carried is not None, f"decomposed an op whose payload its own rule rejects: {before}"
    assert not warnings, [d.message for d in warnings]
    data = _data(types, carried, case, np.random.default_rng(seed))
    if data is None or fused_left:  # the numpy kernels run primitives only
        return
    if not _in_numerics_domain(carried, types):
        _count("numerics skipped: extreme params")
        return
    want = entry.reference(data, carried)
    want = want if isinstance(want, list) else [want]
    got = _run_plan(module, data)
    assert len(got) == len(want) == entry.num_outputs
    for g, w in zip(got, want):
        _agree(g, w)
    _count("numerics checked")


# The default run draws 150 scenarios; the slow lane draws 600 (derandomized:
# the same first ones, then more), so the sweep runs once per CI run in full.
_scenarios = given(scenario(), st.sampled_from(PIPELINES), st.integers(0, 2**31))
test_decompose_pass_is_total = settings(
    max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))(
    _scenarios(_decompose_is_total))
test_decompose_pass_is_total_at_length = pytest.mark.slow(settings(
    max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))(
    _scenarios(_decompose_is_total)))


def _served(module, pipeline) -> bool:
    """Whether the pipeline's table has a kernel for the fused op as built."""
    return _served_op(next(o for o in _fuel.fuel_ops(module) if _fuel.fused_entry(o) is not None),
                      pipeline)


def _served_op(op, pipeline) -> bool:
    from compiler.passes._target import resolve_table
    from compiler.passes.decompose import has_kernel
    from runtime.keys import BackendId
    if "all=true" in pipeline:
        return False
    table = resolve_table(pipeline.split("table=")[1].rstrip("})"))
    return has_kernel(op, table, [BackendId.CPU])


def _verifies(module) -> bool:
    try:
        return bool(module.operation.verify())
    except Exception:
        return False


def _carried(module, entry):
    """The fused op's normalized params when its payload is valid (params of
    the right kinds, operand types its rule accepts, results equal to what
    the rule infers), else None."""
    op = next(o for o in _fuel.fuel_ops(module) if _fuel.fused_entry(o) is not None)
    try:
        params = normalize_params(entry, op_params(op))
        ins = [_fuel.tensor_type(v) for v in op.operands]
        outs = [_fuel.tensor_type(v) for v in op.results]
        want = entry.infer(ins, params)
    except Exception:
        return None
    want = want if isinstance(want, list) else [want]
    return params if [(tuple(w.shape), w.dtype) for w in want] == \
        [(tuple(o.shape), o.dtype) for o in outs] else None
