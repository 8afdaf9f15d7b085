"""Narrow ONNX element types (float8 x4, float8e8m0, float4e2m1, int4/uint4,
int2/uint2): graph inputs cross as a byte-wide carrier and Cast, CastLike and
DequantizeLinear decode them in generated code (a table lookup on the bit
patterns for the float formats), checked against ONNX's reference evaluator
on every bit pattern; Cast encodes float values into the float8 formats and
float4 (every value, every tie, saturate on and off); every other use is
refused, naming the value, its type and the fix."""
import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from compiler import compile  # noqa: E402
from compiler.frontends.onnx import OnnxImportError, import_model  # noqa: E402
from compiler.frontends.onnx._types import to_carrier  # noqa: E402

FLOATS = {T.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, T.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
          T.FLOAT8E5M2: ml_dtypes.float8_e5m2, T.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
          T.FLOAT8E8M0: ml_dtypes.float8_e8m0fnu, T.FLOAT4E2M1: ml_dtypes.float4_e2m1fn}
INTS = {T.INT4: (ml_dtypes.int4, -8, 8), T.UINT4: (ml_dtypes.uint4, 0, 16),
        T.INT2: (ml_dtypes.int2, -2, 2), T.UINT2: (ml_dtypes.uint2, 0, 4)}


def _name(elem_type):
    return T.DataType.Name(elem_type)


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "narrow", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])


def _every_pattern(elem):
    n = 16 if elem == T.FLOAT4E2M1 else 256
    return np.arange(n, dtype=np.uint8).view(FLOATS[elem]).reshape(-1, 8 if n == 16 else 16)


def _check(model, feeds):
    m = compile(import_model(model))
    summary = m.kernel_summary()
    assert all("numpy" not in k for k in summary), summary  # (int4 -> int8: no kernel)
    want = ReferenceEvaluator(model).run(None, feeds)
    carried = {k: to_carrier(v, next(i.type.tensor_type.elem_type for i in model.graph.input
                                     if i.name == k)) for k, v in feeds.items()}
    got = m(**carried)
    got = [got] if not isinstance(got, dict) else [got[o.name] for o in model.graph.output]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.parametrize("elem", sorted(FLOATS), ids=_name)
@pytest.mark.parametrize("to", [T.FLOAT, T.FLOAT16, T.DOUBLE], ids=_name)
def test_narrow_float_cast_decodes_every_bit_pattern(elem, to):
    x = _every_pattern(elem)
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=to)],
                   [helper.make_tensor_value_info("x", elem, x.shape)],
                   [helper.make_tensor_value_info("y", to, x.shape)])
    _check(model, {"x": x})


@pytest.mark.parametrize("elem", sorted(INTS), ids=_name)
@pytest.mark.parametrize("to", [T.FLOAT, T.FLOAT16, T.INT8, T.INT32, T.UINT8], ids=_name)
def test_narrow_int_castlike_matches_reference(elem, to):
    npd, lo, hi = INTS[elem]
    x = np.arange(lo, hi).astype(npd).reshape(1, -1)
    like = helper.make_tensor("like", to, [1], [0])
    model = _model([helper.make_node("CastLike", ["x", "like"], ["y"])],
                   [helper.make_tensor_value_info("x", elem, x.shape)],
                   [helper.make_tensor_value_info("y", to, x.shape)], [like])
    _check(model, {"x": x})


@pytest.mark.parametrize("elem,zp", [(T.FLOAT8E4M3FN, 0.0), (T.FLOAT8E5M2, None), (T.INT4, -3),
                                     (T.UINT4, 9), (T.FLOAT4E2M1, None)])
def test_dequantize_narrow_data_matches_reference(elem, zp):
    npd = FLOATS.get(elem) or INTS[elem][0]
    x = (_every_pattern(elem) if elem in FLOATS else
         np.arange(INTS[elem][1], INTS[elem][2]).astype(npd).reshape(2, -1))
    inits = [helper.make_tensor("s", T.FLOAT, [], [0.375])]
    ins = ["x", "s"]
    if zp is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(zp).astype(npd), "zp"))
        ins.append("zp")
    model = _model([helper.make_node("DequantizeLinear", ins, ["y"])],
                   [helper.make_tensor_value_info("x", elem, x.shape)],
                   [helper.make_tensor_value_info("y", T.FLOAT, x.shape)], inits)
    _check(model, {"x": x})


def test_narrow_values_outside_the_readers_are_refused_naming_the_value_and_fix():
    add = _model([helper.make_node("Add", ["x", "x"], ["y"], name="add8")],
                 [helper.make_tensor_value_info("x", T.FLOAT8E5M2, [4])],
                 [helper.make_tensor_value_info("y", T.FLOAT8E5M2, [4])])
    with pytest.raises(OnnxImportError, match=r"Add node 'add8'.*'x' \(FLOAT8E5M2\).*Cast.*"
                                              r"cast them to FLOAT"):
        import_model(add)
    ident = _model([helper.make_node("Identity", ["x"], ["y"], name="id4")],
                   [helper.make_tensor_value_info("x", T.INT4, [4])],
                   [helper.make_tensor_value_info("y", T.INT4, [4])])
    with pytest.raises(OnnxImportError, match=r"'x' \(INT4\)"):
        import_model(ident)


@pytest.mark.parametrize("to", [T.FLOAT8E8M0], ids=_name)
def test_casts_to_an_unencoded_narrow_type_are_refused(to):
    model = _model([helper.make_node("Cast", ["x"], ["y"], name="down", to=to)],
                   [helper.make_tensor_value_info("x", T.FLOAT, [4])],
                   [helper.make_tensor_value_info("y", to, [4])])
    with pytest.raises(OnnxImportError, match=r"Cast node 'down': a cast to "
                                              + T.DataType.Name(to) + ".*produces only the float8"):
        import_model(model)


def test_to_carrier_refuses_an_array_of_another_dtype():
    with pytest.raises(ValueError, match="FLOAT8E4M3FN takes an array of ml_dtypes.float8_e4m3fn"):
        to_carrier(np.zeros(3, np.float32), T.FLOAT8E4M3FN)
    np.testing.assert_array_equal(to_carrier(np.array([-8, 7], ml_dtypes.int4), T.INT4),
                                  np.array([-8, 7], np.int8))


ENCODED = [T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ, T.FLOAT4E2M1]


def _probes(elem, npd):
    """Every value of the format and every rounding midpoint between two (the
    ties), a little either side of each, +-0, +-inf, NaN, overflow, values
    below the smallest subnormal, and random values over the whole range."""
    vals = _every_pattern(elem).ravel().astype(np.float64)
    vals = np.unique(vals[np.isfinite(vals) & (vals >= 0)])
    mids = (vals[:-1] + vals[1:]) / 2
    top = vals[-1] + (vals[-1] - vals[-2]) / 2
    pts = np.concatenate([vals, mids, [top, top * 1.01, top * 0.99, 1e30, np.inf, 1e-30]])
    pts = np.concatenate([pts, pts * (1 + 2.0 ** -10), pts * (1 - 2.0 ** -10)])
    rng = np.random.default_rng(elem)
    pts = np.concatenate([pts, np.exp(rng.uniform(np.log(vals[1] / 4), np.log(top * 2), 300))])
    pts = np.concatenate([pts, -pts, [0.0, -0.0, np.nan]]).astype(npd)
    return pts.reshape(1, -1)


def _cast_both(x, src, elem, **attrs):
    """A one-Cast model run compiled (no numpy kernel) and by ONNX's reference."""
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=elem, **attrs)],
                   [helper.make_tensor_value_info("x", src, x.shape)],
                   [helper.make_tensor_value_info("y", elem, x.shape)])
    m = compile(import_model(model))
    assert all("numpy" not in k for k in m.kernel_summary()), m.kernel_summary()
    with np.errstate(all="ignore"):
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    return np.asarray(m(x=x)), want


@pytest.mark.parametrize("elem", ENCODED, ids=_name)
@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("src", [T.FLOAT, T.FLOAT16, T.DOUBLE], ids=_name)
def test_cast_to_narrow_float_rounds_as_the_reference(elem, saturate, src):
    npd = {T.FLOAT: np.float32, T.FLOAT16: np.float16, T.DOUBLE: np.float64}[src]
    x = _probes(elem, npd)
    got, want = _cast_both(x, src, elem, **({} if elem == T.FLOAT4E2M1 else
                                            {"saturate": saturate}))
    assert got.dtype == np.uint8
    bad = got != want.view(np.uint8)
    if elem in (T.FLOAT8E4M3FN, T.FLOAT8E5M2, T.FLOAT4E2M1):  # any NaN pattern is NaN
        bad &= ~(np.isnan(got.view(FLOATS[elem]).astype(np.float32)) & np.isnan(
            want.astype(np.float32)))
    assert not bad.any(), (x[bad], got[bad], want.view(np.uint8)[bad])


def test_float8_output_crosses_back_as_ml_dtypes_through_the_backend():
    from compiler.frontends.onnx.backend import FuelcBackend
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=T.FLOAT8E5M2)],
                   [helper.make_tensor_value_info("x", T.FLOAT, [3])],
                   [helper.make_tensor_value_info("y", T.FLOAT8E5M2, [3])])
    y, = FuelcBackend.prepare(model, mode="compile").run([np.array([1.0, -3.3, 7e4],
                                                                   np.float32)])
    assert y.dtype == np.dtype(ml_dtypes.float8_e5m2)
    np.testing.assert_array_equal(y.astype(np.float32), [1.0, -3.5, 57344.0])


def test_cast_of_integers_to_float8_is_refused():
    model = _model([helper.make_node("Cast", ["x"], ["y"], name="i2f8", to=T.FLOAT8E4M3FN)],
                   [helper.make_tensor_value_info("x", T.INT32, [3])],
                   [helper.make_tensor_value_info("y", T.FLOAT8E4M3FN, [3])])
    with pytest.raises(OnnxImportError, match=r"Cast node 'i2f8': a cast of i32 values to "
                                              r"FLOAT8E4M3FN.*cast them to FLOAT first"):
        import_model(model)


@pytest.mark.parametrize("elem", sorted(INTS), ids=_name)
@pytest.mark.parametrize("src", [T.FLOAT, T.FLOAT16], ids=_name)
def test_cast_to_narrow_int_matches_the_reference(elem, src):
    """Truncated toward zero, 0 outside the range (ml_dtypes, ONNX's reference)."""
    npd = {T.FLOAT: np.float32, T.FLOAT16: np.float16}[src]
    x = np.array([[-9, -8.5, -8.4, -2.5, -1.7, -0.3, 0, 0.7, 1.5, 2.5, 3.9, 7.6, 8, 15, 16,
                   1e4, np.inf, -np.inf, np.nan]], npd)
    got, want = _cast_both(x, src, elem)
    np.testing.assert_array_equal(got, want.astype(np.int32))


@pytest.mark.parametrize("elem,zp", [(T.INT4, -3), (T.UINT4, 9), (T.INT2, None), (T.UINT2, 1),
                                     (T.FLOAT8E4M3FN, 0.0), (T.FLOAT8E5M2, None),
                                     (T.FLOAT4E2M1, 1.0)])
def test_quantize_to_narrow_types_matches_reference(elem, zp):
    from compiler.frontends.onnx.backend import FuelcBackend
    x = np.linspace(-40, 40, 41, dtype=np.float32).reshape(1, -1)
    inits = [helper.make_tensor("s", T.FLOAT, [], [0.75])]
    ins, attrs = ["x", "s"], {}
    if zp is not None:
        npd = FLOATS.get(elem) or INTS[elem][0]
        inits.append(onnx.numpy_helper.from_array(np.array(zp).astype(npd), "zp"))
        ins.append("zp")
    else:
        attrs["output_dtype"] = elem
    model = _model([helper.make_node("QuantizeLinear", ins, ["y"], **attrs)],
                   [helper.make_tensor_value_info("x", T.FLOAT, x.shape)],
                   [helper.make_tensor_value_info("y", elem, x.shape)], inits)
    rep = FuelcBackend.prepare(model, mode="compile")
    assert all("numpy" not in k for k in rep._module.kernel_summary())
    got, = rep.run([x])
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


def test_quantize_to_float8e8m0_is_refused():
    model = helper.make_model(helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s"], ["y"], name="q8m0",
                          output_dtype=T.FLOAT8E8M0)], "q",
        [helper.make_tensor_value_info("x", T.FLOAT, [3])],
        [helper.make_tensor_value_info("y", T.FLOAT8E8M0, [3])],
        [helper.make_tensor("s", T.FLOAT, [], [1.0])]),
        opset_imports=[helper.make_opsetid("", 24)])
    with pytest.raises(OnnxImportError, match=r"QuantizeLinear node 'q8m0': QuantizeLinear to "
                                              r"FLOAT8E8M0 \(fuelc produces the float8"):
        import_model(model)
