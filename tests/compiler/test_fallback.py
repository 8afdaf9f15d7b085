"""No silent fallback (issue 22): a step the target has no generated kernel
for, which would run its table's reference numpy kernel, makes ``compile()``
warn once naming the ops, ``kernel_summary()`` mark it, and ``strict=True``
or ``$FUELC_STRICT=1`` refuse it."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from compiler import Graph, compile
from compiler.driver import FALLBACK_MARK, FallbackError, FallbackWarning


@pytest.fixture
def no_generated_exp(monkeypatch):
    """The cpu targets' tables built without the generated Exp kernels (a
    target lacking that lowering): the numpy Exp kernel binds instead."""
    from runtime.opkind import OpKind
    from runtime.numpy_kernels import register_numpy_kernels
    from runtime.binding import KernelBindingTable
    from runtime.precision import PrecisionGuarantee
    from runtime.cost import default_cost_for_op_kind
    from compiler.codegen import cpu
    from compiler.codegen.fused import register_fused_kernels
    from compiler.codegen.kernels import register_primitive_kernels, supported_kinds
    from compiler.targets import Target

    built = {}

    def table(self):
        if self.kind != "cpu":
            return original(self)
        if self not in built:
            t = KernelBindingTable()
            register_primitive_kernels(t, self, dtypes=cpu.DTYPES,
                                       kinds=[k for k in supported_kinds() if k != OpKind.ExpElementwise])
            register_fused_kernels(t, self)
            register_numpy_kernels(t)
            t.fill_unset_cpu_precision(PrecisionGuarantee.PRIMITIVE_DETERMINISTIC_CPU)
            t.fill_unset_cpu_cost(default_cost_for_op_kind)
            t.finalize()
            built[self] = t.freeze()
        return built[self]

    original = Target.table
    monkeypatch.setattr(Target, "table", table)
    monkeypatch.delenv("FUELC_STRICT", raising=False)


def _graph():
    g = Graph()
    x = g.input("x", (4, 8), "f32")
    g.output(x.exp(), name="y")    # one op (two would be one runtime-fused kernel)
    g.output(x.neg(), name="z")
    return g


X = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)


def test_fallback_warns_once_naming_the_ops_and_the_summary_marks_them(no_generated_exp):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = compile(_graph())
    fallbacks = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(fallbacks) == 1, [str(w.message) for w in caught]
    msg = str(fallbacks[0].message)
    assert "no generated kernel for ExpElementwise[f32,f32] (numpy)" in msg, msg
    assert "FUELC_STRICT=1" in msg
    assert fallbacks[0].filename == __file__    # attributed to the caller of compile()
    summary = m.kernel_summary()
    marked = [line for line in summary if line.endswith(FALLBACK_MARK)]
    assert len(marked) == 1 and marked[0].startswith("ExpElementwise[f32,f32] (numpy)"), summary
    assert any(line.startswith("NegElementwise") and not line.endswith(FALLBACK_MARK)
               for line in summary), summary
    out = m(x=X)
    np.testing.assert_allclose(out["y"], np.exp(X), rtol=1e-6)
    np.testing.assert_array_equal(out["z"], -X)


def test_strict_refuses_before_compiling(no_generated_exp, monkeypatch):
    with pytest.raises(FallbackError, match=r"ExpElementwise\[f32,f32\].*strict"):
        compile(_graph(), strict=True)
    monkeypatch.setenv("FUELC_STRICT", "1")
    with pytest.raises(FallbackError, match="no generated kernel for ExpElementwise"):
        compile(_graph())
    with warnings.catch_warnings(record=True) as caught:   # the argument wins over the env
        warnings.simplefilter("always")
        compile(_graph(), strict=False, warm=False)
    assert any(issubclass(w.category, FallbackWarning) for w in caught)


def test_generated_kernels_only_no_warning(monkeypatch):
    monkeypatch.setenv("FUELC_STRICT", "1")
    g = Graph()
    x = g.input("x", (4, 8), "f32")
    g.output((x @ x.transpose((1, 0))).exp().neg(), name="y")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        m = compile(g)
    assert not any(line.endswith(FALLBACK_MARK) for line in m.kernel_summary())


def test_folded_steps_are_not_fallbacks(no_generated_exp):
    """A step on constants alone runs once at compile time (constant
    folding), so its reference kernel never runs in the module: neither
    warned of nor refused by ``strict``."""
    rng = np.random.default_rng(1)
    c = rng.standard_normal((8, 6)).astype(np.float32)
    g = Graph()
    x = g.input("x", (4, 8), "f32")
    g.output(x @ g.constant(c, name="c").exp(), name="y")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        m = compile(g, strict=True)
    assert not any(line.endswith(FALLBACK_MARK) for line in m.kernel_summary())
    np.testing.assert_allclose(m(x=X), X @ np.exp(c), rtol=1e-5, atol=1e-5)
    with pytest.raises(FallbackError, match="ExpElementwise"):  # not folded without warm
        compile(g, strict=True, warm=False)
