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
