"""PyTorch/ONNX/numpy conventions the compiled kernels and the reference
interpreter must both follow (each test states the convention as a numpy
formula and checks ``compile(g)`` and ``interpret`` against it)."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import Graph, compile, interpret
from runtime.dtype import bf16_to_f32, f32_to_bf16


def _both(g, **inputs):
    """(compiled, interpreted) outputs of a one-output graph."""
    (name,) = g.outputs
    return compile(g)(**inputs), interpret(g, inputs)[name]


# -- bf16 constants inline in the IR (at most 64 elements) --------------------
def test_bf16_splat_constant_compiles():
    g = Graph()
    x = g.input("x", (8,), "bf16")
    g.output(2.5 / x, name="y")
    xv = f32_to_bf16(np.linspace(1, 2, 8, dtype=np.float32))
    got, ref = _both(g, x=xv)
    want = f32_to_bf16(np.float32(2.5) / bf16_to_f32(xv))
    assert got.tolist() == ref.tolist() == want.tolist()


def test_bf16_dense_constant_compiles_bit_exact():
    g = Graph()
    x = g.input("x", (2, 4), "bf16")
    c = np.array([[.5, 1.5, np.inf, np.nan], [-0.0, 1e-40, 3, -2]], np.float32)
    g.output(x * g.constant(c, dtype="bf16"), name="y")
    xv = f32_to_bf16(np.ones((2, 4), np.float32))
    got, ref = _both(g, x=xv)
    assert got.tolist() == ref.tolist() == f32_to_bf16(c).tolist()


# -- powi_backward ----------------------------------------------------------------
@pytest.mark.parametrize("exp", [0, 1, 2, -1])
def test_powi_backward_matches_d_dx_x_pow_n(exp):
    from compiler.registry.builders import powi_backward
    g = Graph()
    x, up = g.input("x", (5,)), g.input("up", (5,))
    g.output(powi_backward(x, up, exp), name="y")
    xv = np.array([0.0, 1.0, -2.0, 0.5, 3.0], np.float32)
    uv = np.array([1.0, 2.0, 0.5, -1.0, 1.0], np.float32)
    got, ref = _both(g, x=xv, up=uv)
    with np.errstate(divide="ignore"):  # d/dx x^n = n x^(n-1), and 0 for n = 0
        want = np.zeros(5, np.float32) if exp == 0 else exp * xv ** np.float32(exp - 1) * uv
    np.testing.assert_allclose(ref, want, rtol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6)
