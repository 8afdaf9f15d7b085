"""FusedLinear over a B packed at compile time (``b_panel``; the pass
``fuel-prepack-weights``, the cpu kernel ``transforms.matmul.packed_script``):
numerics against the numpy reference interpreter on both ISA levels, the
recipe, the constant folded into the plan, and the errors."""
import numpy as np
import pytest

from compiler import Graph, compile, interpret
from compiler.errors import GraphBuildError
from compiler.registry.builders import fused
from compiler.registry.ops.fused_linear import unpack
from compiler.targets import parse_target
from runtime import params as P
from runtime.cpu_features import missing_cpu_features
from runtime.params import OpParamsError

TARGETS = [pytest.param(t, marks=pytest.mark.skipif(
    bool(missing_cpu_features(parse_target(t).features)), reason=f"this CPU cannot run {t}"))
    for t in ("cpu:x86-64-v3", "cpu:x86-64-v4")]


@pytest.fixture
def rng():
    return np.random.default_rng(17)


def _pack(w, nr):
    k, n = w.shape
    return np.ascontiguousarray(w.reshape(k, n // nr, nr).transpose(1, 0, 2))


def _packed_graph(a_shape, w, bias, nr):
    g = Graph()
    x = g.input("x", a_shape, w.dtype.name)
    g.output(fused("FusedLinear", x, g.constant(_pack(w, nr), name="wp"),
                   g.constant(bias, name="b"), b_panel=nr), name="y")
    return g


def test_unpack_inverts_the_panel_layout(rng):
    w = rng.standard_normal((5, 48)).astype(np.float32)
    np.testing.assert_array_equal(unpack(_pack(w, 16), 16), w)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype,a_shape", [("float32", (13, 37)), ("float64", (2, 9, 37)),
                                           ("float32", (3, 37)), ("float64", (4, 37)),
                                           ("float32", (2, 2, 37))])
def test_kernel_matches_the_reference_interpreter(target, dtype, a_shape, rng):
    nr = 16 if dtype == "float32" else 8
    w = rng.standard_normal((37, 5 * nr)).astype(dtype)
    bias = rng.standard_normal(5 * nr).astype(dtype)
    x = rng.standard_normal(a_shape).astype(dtype)
    g = _packed_graph(a_shape, w, bias, nr)
    want = interpret(g, {"x": x})["y"]
    m = compile(g, target)
    assert any("[B packed]" in line for line in m.kernel_summary()), m.kernel_summary()
    got = m(x=x)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(want, x.astype(np.float64) @ w + bias, rtol=tol, atol=tol)


def test_recipe_matches_the_reference(rng):
    # a target without the packed kernel runs the recipe: the panels back
    # to [K, N] (Permute, Reshape), MatMul, + bias
    w = rng.standard_normal((37, 64)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    x = rng.standard_normal((2, 7, 37)).astype(np.float32)
    g = _packed_graph((2, 7, 37), w, bias, 16)
    m = compile(g, "cpu:x86-64-v3", pipeline="base-map")
    assert "fused_linear" not in m.ir["optimized"]
    np.testing.assert_allclose(m(x=x), interpret(g, {"x": x})["y"], rtol=1e-5, atol=1e-5)


def test_the_packed_weight_is_a_folded_constant(rng):
    # the plan computes Contiguize(Permute(Reshape(w))) once: no copy step
    # is left, and the constant the kernel reads is the panel layout
    w = rng.standard_normal((64, 96)).astype(np.float32)
    bias = rng.standard_normal(96).astype(np.float32)
    g = Graph()
    x = g.input("x", (8, 64), "f32")
    g.output(x @ g.constant(w, name="w") + g.constant(bias, name="b"), name="y")
    m = compile(g, "cpu:x86-64-v3")
    assert m.kernel_summary() == ["FusedLinear[f32,f32,f32,f32] (mlir-cpu-fused) [B packed]"]
    packed = [v for v in m.plan.constants.values() if np.shape(v) == (6, 64, 16)]
    assert len(packed) == 1
    np.testing.assert_array_equal(np.asarray(packed[0]).view(np.float32).reshape(6, 64, 16),
                                  _pack(w, 16))


@pytest.mark.parametrize("b_shape,bias_n,match", [
    ((4, 37, 8), 64, r"b_panel=16: b must be packed \[N/16, K, 16\]"),
    ((4, 36, 16), 64, r"contraction mismatch: a K=37 vs packed b K=36"),
    ((4, 37, 16), 60, r"bias must be \[N\] = \[64\]"),
])
def test_shape_rule_errors_name_the_op_and_the_rule(b_shape, bias_n, match):
    g = Graph()
    x = g.input("x", (5, 37), "f32")
    b = g.input("b", b_shape, "f32")
    c = g.input("c", (bias_n,), "f32")
    with pytest.raises(GraphBuildError, match=r"FusedLinear\(f32\[5, 37\], .*" + match):
        fused("FusedLinear", x, b, c, b_panel=16)


def test_kernel_params_refuse_a_batched_or_ragged_packed_rhs():
    with pytest.raises(OpParamsError, match=r"a packed rhs \(b_panel=16\) needs no batch axes "
                                            r"and n a multiple of b_panel"):
        P.Matmul((2,), (2,), 5, 64, 37, b_panel=16)
    with pytest.raises(OpParamsError, match="b_panel=16"):
        P.Matmul((), (), 5, 60, 37, b_panel=16)
    assert P.OpParams.from_dict(P.Matmul((), (), 5, 64, 37).to_dict() | {}) == \
        P.Matmul((), (), 5, 64, 37)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 8, 37])
def test_columns_padded_to_whole_panels(target, rows, rng):
    # N = 200 is no multiple of the panel (AVX2 16, AVX-512 32): the weight
    # (transposed, as ONNX Gemm's transB reads it) and the bias are padded
    # to whole panels once at compile time, the kernel's first 200 columns
    # are the result: the same bits as the unpacked kernel, and no Pad step
    # left in the plan
    w = rng.standard_normal((200, 48)).astype(np.float32)
    bias = rng.standard_normal(200).astype(np.float32)
    x = rng.standard_normal((rows, 48)).astype(np.float32)
    g = Graph()
    xi = g.input("x", (rows, 48), "f32")
    wt = g.add_node("Transpose", [g.constant(w, name="w")])
    g.output(fused("FusedLinear", xi, wt, g.constant(bias, name="b")), name="y")
    g.output(xi @ wt, name="z")
    m = compile(g, target)
    assert m.kernel_summary() == ["FusedLinear[f32,f32,f32,f32] (mlir-cpu-fused) [B packed]"] * 2
    got = m(x=x)
    plain = compile(g, target, pipeline="no-prepack")(x=x)
    for name, want in (("y", x.astype(np.float64) @ w.T + bias), ("z", x.astype(np.float64) @ w.T)):
        assert got[name].shape == (rows, 200)
        np.testing.assert_array_equal(got[name], plain[name])
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5)


# a panel loop over a packed B [P, K, 16] and a K loop inside it reading a
# row of the panel (as packed_script's tiles, lowered); a load from a rank-2
# argument and one at a panel that is no loop's variable stay alone
_PANELS = """
func.func @kernel(%a: memref<?x?xf32>, %b: memref<?x?x16xf32>, %c: memref<4x16xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %p_n = memref.dim %b, %c0 : memref<?x?x16xf32>
  %k_n = memref.dim %b, %c1 : memref<?x?x16xf32>
  scf.for %p = %c0 to %p_n step %c1 {
    scf.for %k = %c0 to %k_n step %c1 {
      %x = vector.load %b[%p, %k, %c0] : memref<?x?x16xf32>, vector<16xf32>
      %y = vector.load %a[%p, %k] : memref<?x?xf32>, vector<16xf32>
      %z = vector.load %b[%c1, %k, %c0] : memref<?x?x16xf32>, vector<16xf32>
      %s = arith.addf %x, %y : vector<16xf32>
      %t = arith.addf %s, %z : vector<16xf32>
      vector.store %t, %c[%c0, %c0] : memref<4x16xf32>, vector<16xf32>
    }
  }
  return
}
"""


def test_prefetch_next_panel_reads_the_same_row_of_the_next_panel():
    from compiler.codegen.cpu.transforms.matmul import prefetch_next_panel
    from compiler.mlir import ir
    from compiler.testing import filecheck
    with ir.Context():
        m = ir.Module.parse(_PANELS)
        assert prefetch_next_panel(m) == 1
        m.operation.verify()
        filecheck(str(m), """
// CHECK:     scf.for %[[P:.*]] = %{{.*}} to %{{.*}} step
// CHECK:       scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step
// CHECK:         %[[N:.*]] = memref.dim %arg1, %{{.*}} : memref<?x?x16xf32>
// CHECK:         %[[LAST:.*]] = arith.subi %[[N]], %{{.*}} : index
// CHECK:         %[[UP:.*]] = arith.addi %[[P]], %{{.*}} : index
// CHECK:         %[[NEXT:.*]] = arith.minui %[[UP]], %[[LAST]] : index
// CHECK:         memref.prefetch %arg1[%[[NEXT]], %[[K]], %{{.*}}], read, locality<2>, data
// CHECK-NEXT:    vector.load %arg1[%[[P]], %[[K]], %{{.*}}]
// CHECK-NEXT:    vector.load %arg0
// CHECK-NEXT:    vector.load %arg1
// CHECK-NOT:     memref.prefetch
""")


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_f32_packed_kernels_prefetch_the_next_panel(isa):
    # strategy._PACKED_PREFETCH: f32 (measured); f64 not
    from compiler.codegen.cpu.strategy import packed_epilogue_strategy, packed_strategy
    for make in (packed_strategy, packed_epilogue_strategy):
        for dozen in (False, True):
            assert "py:prefetch_next_panel" in make("f32", isa, dozen=dozen).transform
        assert "py:prefetch_next_panel" not in make("f64", isa).transform


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("rows", [13, 130])
def test_packed_kernel_over_several_k_blocks_matches_the_reference(target, rows, rng):
    # K = 800 (past family.SHORT_K_MAX): four K blocks of the AVX2 kernel (kc
    # 256), two of AVX-512's; 7 panels of 16 (AVX2: each prefetches the
    # next, the last itself)
    w = rng.standard_normal((800, 7 * 16)).astype(np.float32)
    bias = rng.standard_normal(7 * 16).astype(np.float32)
    x = rng.standard_normal((rows, 800)).astype(np.float32)
    g = _packed_graph((rows, 800), w, bias, 16)
    m = compile(g, target)
    got = m(x=x)
    np.testing.assert_allclose(got, interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, x.astype(np.float64) @ w + bias, rtol=1e-4, atol=1e-4)


def _linear_tiles(m):
    """The (instance, layouts) tiles of the compiled module's one FusedLinear call."""
    from runtime.executor import KernelStep
    from runtime.layout import Layout
    step = next(s for s in m.plan.steps if isinstance(s, KernelStep))
    lays = [Layout.contiguous(m.executor.specs[v].shape) for v in (*step.inputs, *step.outputs)]
    kernel = next(iter(m.executor.entries.values())).kernel.fn
    return kernel._tiles(lays, step.params, len(step.inputs))


@pytest.mark.parametrize("target", TARGETS)
def test_short_k_runs_all_of_k_in_one_block_with_the_same_bits(target, monkeypatch, rng):
    # a K of at most family.SHORT_K_MAX (688 here: three blocks of kc 256)
    # marks the instance short_k on AVX2 f32; its kernel then takes kc =
    # 1024, the same FMAs in the same order: the same bits as the kernel of
    # three K blocks. AVX-512 (whose short-K kernel would be the plain one)
    # takes no class
    from compiler.codegen import fused as F
    from compiler.codegen.cpu.pipeline import choose_strategy
    w = rng.standard_normal((688, 64)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    x = rng.standard_normal((130, 688)).astype(np.float32)
    g = _packed_graph((130, 688), w, bias, 16)
    avx2 = target == "cpu:x86-64-v3"
    names, outs = [], []
    for flag in (True, False):
        if not flag:
            monkeypatch.setattr(F, "SHORT_K_MAX", 687)
        m = compile(g, target)
        outs.append(m(x=x))
        (inst, _), *_ = _linear_tiles(m)
        assert inst.short_k is (flag and avx2), inst
        names.append(choose_strategy(F.linalg_text(inst, platform="cpu"), ["kernel"], target).name)
    got, ref = outs
    assert names[0] == names[1] + ("-short-k" if avx2 else ""), names
    assert np.array_equal(got, ref)
    np.testing.assert_allclose(got, interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows, k, act, flag", [(130, 768, {}, True), (130, 769, {}, False),
                                                (130, 257, {}, True), (130, 256, {}, False),
                                                (20, 688, {}, False), (130, 688, {"gelu": True}, False)])
def test_the_short_k_class(rows, k, act, flag, rng):
    # packed B, no epilogue, more than UNPACKED_ROWS rows, K <= SHORT_K_MAX
    # (768), and on AVX2 f32 K past one plain block (256)
    w = rng.standard_normal((k, 32)).astype(np.float32)
    g = Graph()
    x = g.input("x", (rows, k), "f32")
    g.output(fused("FusedLinear", x, g.constant(_pack(w, 16), name="wp"),
                   g.constant(np.zeros(32, np.float32), name="b"), b_panel=16, **act), name="y")
    (inst, _), *_ = _linear_tiles(compile(g, "cpu:x86-64-v3"))
    assert inst.short_k is flag, inst


def _packed_kernels(m):
    """The compile-once keys of every tile of the compiled module's FusedLinear calls."""
    from compiler.codegen.fused import FAMILY
    from runtime.executor import KernelStep
    from runtime.layout import Layout
    keys = set()
    for i, step in enumerate(m.plan.steps):
        if not isinstance(step, KernelStep):
            continue
        lays = [Layout.contiguous(m.executor.specs[v].shape) for v in (*step.inputs, *step.outputs)]
        keys |= {FAMILY.entry_key(inst)
                 for inst, _ in m.executor.entries[i].kernel.fn._tiles(lays, step.params, len(step.inputs))}
    return keys


@pytest.mark.parametrize("target, k, kernels", [("cpu:x86-64-v3", 256, 1), ("cpu:x86-64-v3", 688, 2),
                                                ("cpu:x86-64-v4", 688, 1), ("cpu:x86-64-v4", 256, 1)])
def test_a_short_k_kernel_only_where_it_differs(target, k, kernels, rng):
    # two packed products of 130 rows, K = k and K = 800 (past SHORT_K_MAX):
    # one kernel where the short-K kernel would be the plain one (K = 256,
    # one block of 256 either way; AVX-512, no short-K tiles), two where it
    # differs. Only the instances are made: AVX-512 need not run here
    g = Graph()
    x = g.input("x", (130, k), "f32")
    h = fused("FusedLinear", x, g.constant(_pack(rng.standard_normal((k, 800)).astype(np.float32), 16),
                                           name="w1"),
              g.constant(np.zeros(800, np.float32), name="b1"), b_panel=16)
    g.output(fused("FusedLinear", h, g.constant(_pack(rng.standard_normal((800, 32)).astype(np.float32),
                                                      16), name="w2"),
                   g.constant(np.zeros(32, np.float32), name="b2"), b_panel=16), name="y")
    assert len(_packed_kernels(compile(g, target))) == kernels
