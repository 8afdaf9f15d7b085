"""Issue 22, numerics: math whose naive expansion loses the answer, and
integer scalar operands kept exact end to end.

* log1p, expm1 and softplus were spelled ``(x + 1).log()``,
  ``x.exp() - 1`` and ``(x.exp() + 1).log()`` (torch ``log1p``/``expm1``/
  ``elu``, ONNX Softplus/Mish/Elu/Celu/Selu), so softplus(-20) in f32 was 0
  instead of 2.06e-9 and expm1(1e-9) was 0; ONNX Sinh as (e^x - e^-x) / 2 was
  0 for tiny x; torch exp2 as exp(x ln 2) was off by |x| ulps. Each is checked
  against numpy, compiled and in the numpy interpreter, at every float dtype.
"""
import math

import numpy as np
import pytest

from compiler import Graph, compile
from compiler.graph import interpret
from runtime.dtype import DType

FLOAT_DTYPES = ("f64", "f32", "f16", "bf16")
# relative error allowed against the f64 numpy result (a few ulps of each dtype)
RTOL = {"f64": 1e-14, "f32": 4e-7, "f16": 2e-3, "bf16": 1.6e-2}

XS = np.array([-20.0, -5.0, -1.5, -0.75, -1e-3, -3e-6, -1e-9, -1e-30, -0.0, 0.0, 1e-30, 1e-9,
               3e-6, 1e-3, 0.5, 2.0, 7.0, 30.0])


def _np(name, x):
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        return {"log1p": np.log1p, "expm1": np.expm1,
                "softplus": lambda v: np.logaddexp(0.0, v)}[name](x)


def _close(got, want, dtype):
    got = np.asarray(got).astype(np.float64)
    both_nan = np.isnan(got) & np.isnan(want)
    tol = RTOL[dtype] * np.abs(want)
    ok = both_nan | (got == want) | (np.abs(got - want) <= tol)
    assert ok.all(), f"{dtype}: {got[~ok]} vs numpy {want[~ok]}"


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_log1p_expm1_softplus_are_accurate(dtype):
    nd = DType.parse(dtype).numpy
    x = XS.astype(nd)
    # f16 underflows 1e-30 to 0 and overflows exp(30): keep the representable ones
    with np.errstate(over="ignore"):
        keep = np.isfinite(x) & np.isfinite(np.exp(x.astype(np.float64)).astype(nd))
    x = x[keep]
    g = Graph()
    t = g.input("x", x.shape, dtype)
    for name in ("log1p", "expm1", "softplus"):
        g.output(getattr(t, name)(), name=name)
    compiled = compile(g)(x=x)
    reference = interpret(g, {"x": x})
    for name in ("log1p", "expm1", "softplus"):
        want = _np(name, x)
        if name == "log1p":
            want = np.where(x < -1, np.nan, want)
        # the exact value rounded to the dtype, then compared with a few ulps
        want = want.astype(nd).astype(np.float64)
        _close(compiled[name], want, dtype)
        _close(reference[name], want, dtype)
    if dtype != "f16":  # 2.06e-9 is below f16's smallest subnormal
        assert compiled["softplus"][0] > 0  # softplus(-20) = 2.06e-9, not 0


def test_log1p_expm1_edge_values():
    x = np.array([-1.0, -2.0, np.inf, -np.inf, np.nan, -0.0, 0.0, 1e38, -1e38, 88.0, 89.0],
                 np.float32)
    g = Graph()
    t = g.input("x", x.shape, "f32")
    g.output(t.log1p(), name="a")
    g.output(t.expm1(), name="b")
    g.output(t.softplus(), name="c")
    got = compile(g)(x=x)
    with np.errstate(all="ignore"):
        for name, want in (("a", np.log1p(x)), ("b", np.expm1(x)),
                           ("c", np.logaddexp(np.float32(0), x))):
            np.testing.assert_allclose(got[name], want, rtol=4e-7, equal_nan=True,
                                       err_msg=name)
            # signed zeros kept (log1p(-0) = expm1(-0) = -0)
            assert np.array_equal(np.signbit(got[name][5:7]), np.signbit(want[5:7])), name


def test_log1p_of_an_integer_tensor_is_refused():
    from compiler.errors import GraphBuildError
    g = Graph()
    t = g.input("x", (3,), "i32")
    with pytest.raises(GraphBuildError):
        t.log1p()


def _onnx_model(op, **attrs):
    oh = pytest.importorskip("onnx.helper")
    from onnx import TensorProto as TP
    vi = lambda n: oh.make_tensor_value_info(n, TP.FLOAT, [8])  # noqa: E731
    m = oh.make_model(oh.make_graph([oh.make_node(op, ["x"], ["y"], **attrs)], "g", [vi("x")],
                                    [vi("y")]), opset_imports=[oh.make_opsetid("", 18)])  # Mish: 18
    m.ir_version = 10
    return m


@pytest.mark.parametrize("op, attrs, ref", [
    ("Softplus", {}, lambda x: np.logaddexp(0.0, x)),
    ("Mish", {}, lambda x: x * np.tanh(np.logaddexp(0.0, x))),
    ("Elu", {"alpha": 0.7}, lambda x: np.where(x < 0, 0.7 * np.expm1(x), x)),
    ("Celu", {"alpha": 2.0}, lambda x: np.maximum(x, 0) + np.minimum(2.0 * np.expm1(x / 2), 0)),
    ("Selu", {}, lambda x: 1.0507009873554805 * np.where(x <= 0, 1.6732632423543772 * np.expm1(x),
                                                         x)),
    ("Sinh", {}, np.sinh),
])
def test_onnx_activations_are_accurate_near_zero_and_in_the_tail(op, attrs, ref):
    from compiler.frontends.onnx import import_model
    x = np.array([-20.0, -3.0, -1e-6, -1e-9, 1e-9, 1e-6, 0.5, 3.0], np.float32)
    g = import_model(_onnx_model(op, **attrs))
    got = np.asarray(compile(g)(x=x)).astype(np.float64)
    want = ref(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0, err_msg=op)


def test_torch_log1p_expm1_exp2_are_accurate():
    torch = pytest.importorskip("torch")
    from compiler.frontends.torch import compile_module

    class M(torch.nn.Module):
        def forward(self, x):
            return (x.log1p(), x.expm1(), torch.exp2(x * 100), torch.nn.functional.elu(x),
                    torch.nn.functional.softplus(x - 20))

    x = torch.tensor([1e-9, -1e-9, 3e-6, 0.25, -0.5, 1.0])
    got = compile_module(M(), (x,))(x)
    want = [t.double() for t in M()(x.double())]
    for i, (a, b) in enumerate(zip(got, want)):
        a = a.numpy() if hasattr(a, "numpy") else np.asarray(a)
        np.testing.assert_allclose(a.astype(np.float64), b.numpy(), rtol=2e-6, atol=0,
                                   err_msg=f"output {i}")


# ---------------------------------------------------------------------------
# integer scalar operands: exact end to end (graph params, MLIR attribute,
# kernel OpParams, lowering, numpy interpreter). Before, the value was an f64
# param: i64 x + (2**53 + 1) added 2**53 and x + (2**63 - 1) wrapped.
# ---------------------------------------------------------------------------
INT_DTYPES = ("i8", "i16", "i32", "i64", "u8", "u32")


def _int_graph(dtype, n):
    info = np.iinfo(DType.parse(dtype).numpy)
    big = int(info.max) if dtype != "i64" else 2**53 + 1
    g = Graph()
    x = g.input("x", (n,), dtype)
    g.output(x + big, name="add")
    g.output(x * big, name="mul")
    g.output(x - big if dtype[0] == "i" else x + 0, name="sub")
    g.output(x.clamp(int(info.min) + 1, big - 1), name="clamp")
    g.output(x.masked_fill(x > 2, big), name="fill")
    return g, big


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_scalar_operands_are_exact(dtype):
    nd = DType.parse(dtype).numpy
    x = np.array([0, 1, 2, 3, 5], nd)
    g, big = _int_graph(dtype, len(x))
    b = nd.type(big)
    info = np.iinfo(nd)
    with np.errstate(over="ignore"):
        want = {"add": x + b, "mul": x * b, "sub": x - b if dtype[0] == "i" else x,
                "clamp": np.clip(x, nd.type(int(info.min) + 1), nd.type(big - 1)),
                "fill": np.where(x > 2, b, x)}
    for got in (compile(g)(x=x), interpret(g, {"x": x})):
        for name, w in want.items():
            assert got[name].dtype == nd and np.array_equal(got[name], w), (name, got[name], w)


def test_i64_scalars_beyond_2_pow_53_and_at_int64_max():
    x = np.array([0, 1, -5], np.int64)
    g = Graph()
    t = g.input("x", (3,), "i64")
    g.output(t + (2**53 + 1), name="a")
    g.output(t + (2**63 - 1), name="b")
    g.output(t * (2**53 + 1), name="c")
    g.output(t - (2**63 - 1), name="d")
    # a runtime-fused chain: its f64 scalar slots must not round the constant
    g.output(((t * 3 + t) + (2**53 + 1)).relu() * t, name="e")
    with np.errstate(over="ignore"):
        want = {"a": x + np.int64(2**53 + 1), "b": x + np.int64(2**63 - 1),
                "c": x * np.int64(2**53 + 1), "d": x - np.int64(2**63 - 1),
                "e": np.maximum(x * 3 + x + np.int64(2**53 + 1), 0) * x}
    assert want["a"][0] == 2**53 + 1 and want["b"][0] == 2**63 - 1
    for got in (compile(g)(x=x), interpret(g, {"x": x})):
        for name, w in want.items():
            assert np.array_equal(got[name], w), (name, got[name], w)


def test_integer_scalar_stays_an_int_in_params_attribute_and_op_params():
    from compiler.dialect import emit
    from compiler.graph.kernel_params import from_op_params, to_op_params
    from compiler.graph.opdef import TensorType
    from runtime.opkind import OpKind
    from runtime.params import Affine, Clamp, MaskedFill, OpParams
    g = Graph()
    t = g.input("x", (3,), "i64")
    y = t + (2**53 + 1)
    assert y.node.params["value"] == 2**53 + 1 and isinstance(y.node.params["value"], int)
    assert isinstance((g.input("f", (3,), "f32") + 1).node.params["value"], float)
    g.output(y, name="y")
    text = str(emit.graph_to_module(g).module)
    assert "value = 9007199254740993 : i64" in text
    ty = [TensorType((3,), DType.I64)]
    p = to_op_params("AddScalar", {"value": 2**53 + 1}, ty, ty)
    assert p == Affine(mul=1.0, add=2**53 + 1) and p != Affine(mul=1.0, add=float(2**53 + 1))
    assert OpParams.from_dict(p.to_dict()).add == 2**53 + 1
    assert from_op_params(OpKind.Affine, p, ty, ty) == ("AddScalar", {"value": 2**53 + 1})
    assert OpParams.from_dict(Clamp(min=-2**62 - 1, max=2**62 + 1).to_dict()).min == -2**62 - 1
    assert OpParams.from_dict(MaskedFill(value=float("inf")).to_dict()).value == float("inf")


def test_integer_scalar_out_of_range_errors():
    from compiler.errors import GraphBuildError
    from runtime.errors import OpParamsError
    from runtime.params import Affine
    g = Graph()
    t = g.input("x", (3,), "i64")
    with pytest.raises(GraphBuildError, match=r"python scalar 9223372036854775808 is not "
                       r"representable in i64"):
        t + 2**63
    with pytest.raises(GraphBuildError, match="not representable in u8"):
        g.input("u", (3,), "u8") * 256
    with pytest.raises(GraphBuildError, match=r"param 'value' has value 9223372036854775808, "
                       "outside int64"):
        g.add_node("AddScalar", [t], {"value": 2**63})
    with pytest.raises(OpParamsError, match="Affine.add must fit in int64"):
        Affine(mul=1, add=2**63)
    with pytest.raises(OpParamsError, match="Affine.mul must be a number"):
        Affine(mul="2", add=0)


def test_runtime_numpy_kernels_take_integer_scalars_exactly():
    from runtime import numpy_kernels as NK
    from runtime.params import Affine, Clamp, MaskedFill
    from runtime.storage import Storage
    x = np.array([0, 1, -5], np.int64)
    big = 2**53 + 1
    for kernel, params, mask, want in (
            (NK.affine_kernel, Affine(mul=1.0, add=big), None, x + np.int64(big)),
            (NK.affine_kernel, Affine(mul=big, add=0.0), None, x * np.int64(big)),
            (NK.clamp_kernel, Clamp(min=-big, max=big), None, x),
            (NK.masked_fill_kernel, MaskedFill(value=big), np.array([1, 0, 1], np.uint8),
             np.where([True, False, True], np.int64(big), x))):
        ins = [Storage.from_numpy(x)] + ([Storage.from_numpy(mask)] if mask is not None else [])
        out, out_layout = Storage.from_numpy(np.zeros(3, np.int64))
        kernel([s for s, _ in ins], [out], [l for _, l in ins] + [out_layout], params)
        assert np.array_equal(out.to_numpy(out_layout), want), (kernel.__name__, params)


def test_subtracting_int64_min_wraps_as_numpy_does():
    x = np.array([0, 5, -5], np.int64)
    g = Graph()
    t = g.input("x", (3,), "i64")
    g.output(t - (-2**63), name="y")
    with np.errstate(over="ignore"):
        want = x - np.int64(-2**63)
    assert np.array_equal(compile(g)(x=x), want)
    assert np.array_equal(interpret(g, {"x": x})["y"], want)


def test_onnx_int64_add_of_a_large_scalar_constant_is_exact():
    oh = pytest.importorskip("onnx.helper")
    from onnx import TensorProto as TP
    from onnx import numpy_helper
    from compiler.frontends.onnx import import_model
    vi = lambda n: oh.make_tensor_value_info(n, TP.INT64, [3])  # noqa: E731
    c = numpy_helper.from_array(np.array(2**53 + 1, np.int64), "c")
    m = oh.make_model(oh.make_graph([oh.make_node("Add", ["x", "c"], ["y"])], "g", [vi("x")],
                                    [vi("y")], initializer=[c]),
                      opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 10
    g = import_model(m)
    assert [n.op for n in g.nodes if n.op not in ("Input",)][0] == "AddScalar"
    x = np.array([0, 1, -5], np.int64)
    assert np.array_equal(np.asarray(compile(g)(x=x)), x + np.int64(2**53 + 1))
