"""GELU kernels: tanh GELU as x / (1 + exp(-2u)) (no cancellation in the
negative tail), both forms vectorized at the target's width."""
import math
import re

import numpy as np
import pytest

from compiler import Graph, compile
from compiler.codegen import kernels as K
from compiler.codegen.cpu import lower
from compiler.graph.opdef import TensorType
from runtime.dtype import DType


def _gelu(x, dtype, approximate):
    g = Graph()
    xi = g.input("x", x.shape, dtype)
    g.output(xi.gelu(approximate=approximate), name="y")
    return compile(g, "cpu")(x=x)


def _tanh_reference(x):
    # 0.5 x (1 + tanh u) == x / (1 + exp(-2u)); the latter keeps its relative
    # accuracy in f64 where 1 + tanh(u) cancels (u below about -18)
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        return x / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


# f32: at x = -9 the exponent is about 64, so its own rounding (a few ulp of
# the cubic) is amplified 64-fold: ~1e-5 relative is the conditioning, not the
# kernel. (0.5 x (1 + tanh u) in f32 lost every digit there.)
@pytest.mark.parametrize("dtype,rtol", [("f32", 2e-5), ("f64", 1e-13)])
def test_tanh_gelu_is_relatively_accurate_in_both_tails(dtype, rtol):
    x = np.linspace(-9, 9, 100001).astype(np.float32 if dtype == "f32" else np.float64)
    got = _gelu(x, dtype, "tanh").astype(np.float64)
    want = _tanh_reference(x)
    big = np.abs(want) > 1e-30
    np.testing.assert_allclose(got[big], want[big], rtol=rtol, atol=0)


def test_tanh_gelu_specials():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1e4, 1e4, 1e-30, -1e-30], np.float32)
    got = _gelu(x, "f32", "tanh")
    np.testing.assert_array_equal(got[[0, 2, 6]], [0.0, np.inf, 1e4])
    assert np.signbit(got[1]) and got[1] == 0 and got[5] == 0 and np.signbit(got[5])
    assert np.isnan(got[3]) and np.isnan(got[4])  # -inf * 0, as 0.5 x (1 + tanh u) gives
    np.testing.assert_allclose(got[7:], [5e-31, -5e-31], rtol=1e-6)


@pytest.mark.parametrize("target,width", [("cpu:x86-64-v3", 8), ("cpu:x86-64-v4", 16)])
@pytest.mark.parametrize("name", ["Gelu", "GeluErf"])
def test_gelu_kernels_are_vector_loops(name, target, width):
    text = K.linalg_text(K.OpInstance(name, (), (TensorType((64, 256), DType.F32),), True))
    ll = lower(text, ["kernel"], target=target).llvm_ir
    if name == "Gelu":
        assert re.search(rf"fdiv[^\n]*<{width} x float>", ll)
    else:  # erf's polynomials run in f32, as many lanes as the floats
        assert re.search(rf"@llvm\.fma\.v{width}f32", ll) and " double" not in ll
    assert "@tanhf" not in ll and "@expf" not in ll and "@erff" not in ll
