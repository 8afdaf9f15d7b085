"""Targets as values: parsing, the kernel cache keeping targets apart, code
that needs nothing from the host, and the refusal to run code on a CPU that
lacks its features."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler import Graph, compile
from compiler.codegen.cache import KernelCache
from compiler.codegen.cpu import emit_object, llvm as cpu_llvm
from compiler.codegen.loader import elf_symbols
from compiler.errors import CodegenError
from compiler.targets import Target, TargetError, accepted_targets, parse_target
from runtime.cpu_features import (KNOWN_CPUS, X86_64_V3, CpuFeatureError, check_cpu_features,
                                  host_cpu_features)
from runtime.keys import BackendId

ROOT = Path(__file__).resolve().parents[2]


# -- parsing ----------------------------------------------------------------------
@pytest.mark.parametrize("spec, arch", [("cpu:x86-64-v3", "x86-64-v3"), ("CPU:X86-64-V4", "x86-64-v4"),
                                        ("cpu:znver3", "znver3"), (" cpu:haswell ", "haswell")])
def test_named_cpu_targets(spec, arch):
    t = parse_target(spec)
    assert (t.kind, t.arch, t.host) == ("cpu", arch, False)
    assert t.features == KNOWN_CPUS[arch] and X86_64_V3 <= t.features
    assert t.backend is BackendId.CPU and t.llvm_features == ""
    assert parse_target(str(t)) == t and str(t) == f"cpu:{arch}"


def test_plain_cpu_is_this_machine(monkeypatch):
    monkeypatch.delenv("FUELC_CPU", raising=False)
    t = parse_target("cpu")
    assert t.host and str(t) == "cpu" and t.features == host_cpu_features()
    assert parse_target("cpu:host") == t == parse_target("cpu:native")
    assert parse_target(t) is t


def test_host_cpu_read_from_llvmlites_library_is_what_llvmlite_reports():
    """``cpu_features._host`` reads the host's name and features from
    llvmlite's library through ctypes (no ``llvmlite.binding`` import in
    compile()'s front): exactly what ``llvmlite.binding`` reports."""
    import llvmlite.binding as llvm
    from runtime.cpu_features import _host, _host_from_library
    on = frozenset(k for k, v in llvm.get_host_cpu_features().items() if v)
    assert _host_from_library() == (llvm.get_host_cpu_name(), on) == _host()
    assert "sse2" in on


_WIDE_ADD = """
define void @add(ptr %a, ptr %b) {
  %x = load <16 x float>, ptr %a
  %y = load <16 x float>, ptr %b
  %s = fadd <16 x float> %x, %y
  store <16 x float> %s, ptr %a
  ret void
}
"""


def test_host_target_turns_off_the_features_its_cpu_name_implies_but_it_lacks(monkeypatch):
    """A Zen 4 whose AVX-512 is hidden from CPUID (a hypervisor's mask, or
    ``benchmarks/avx2_host.py``) is still named ``znver4`` by LLVM, and that
    name implies AVX-512: a feature string of only the host's features made
    zmm code for it. The host target's string turns the missing ones off."""
    import compiler.targets.cpu as cpu_kind
    avx2_zen4 = frozenset(f for f in KNOWN_CPUS["znver4"] if not f.startswith("avx512"))
    monkeypatch.setattr(cpu_kind, "_host", lambda: ("znver4", avx2_zen4))
    t = cpu_kind._host_target()
    assert t.features == avx2_zen4 and t.arch == "znver4"
    assert {"-avx512f", "-avx512vl", "+avx2", "+fma"} <= set(t.llvm_features.split(","))
    assert "ymm" in cpu_llvm.assembly(_WIDE_ADD, t) and "zmm" not in cpu_llvm.assembly(_WIDE_ADD, t)
    only_on = Target("cpu", "znver4", avx2_zen4, ",".join(f"+{f}" for f in sorted(avx2_zen4)),
                     t.triple, host=True)
    assert "zmm" in cpu_llvm.assembly(_WIDE_ADD, only_on)   # what the old string made


def test_binding_table_shares_equal_claims_and_keys():
    """A table's build makes each precision claim once per (exact, ulp,
    target) and each static key once per kind (the serial front,
    docs/compile-at-scale.md): the values are those made afresh for each."""
    from compiler.codegen import kernels
    from runtime.keys import BindingKey, OpKind
    target = parse_target("cpu:x86-64-v3")
    checked = 0
    for (key, dtypes, _), alts in target.table()._bindings.items():
        for e in alts:
            if e.kernel_source == "mlir-cpu" and key.op is not None:
                exact = key.op in kernels._EXACT
                ulp = (target.codegen.transcendental_ulp(kernels._TRANSCENDENTAL[key.op], dtypes[-1])
                       if not exact and key.op in kernels._TRANSCENDENTAL else None)
                assert e.precision == kernels._claim.__wrapped__(exact, ulp, target)
                checked += 1
    assert checked > 500
    assert BindingKey.of(OpKind.MatMul) is BindingKey.of(OpKind.MatMul) == BindingKey.static(OpKind.MatMul)
    with pytest.raises(Exception, match="tag only"):
        BindingKey.of(OpKind.RuntimeFused)


def test_fuelc_cpu_redirects_plain_cpu_only(monkeypatch):
    monkeypatch.setenv("FUELC_CPU", "x86-64-v3")
    assert parse_target("cpu") == parse_target("cpu:x86-64-v3")
    assert parse_target("cpu:host").host
    monkeypatch.setenv("FUELC_CPU", "pentium4")
    with pytest.raises(TargetError, match=r"\$FUELC_CPU='pentium4'.*cpu:x86-64-v3"):
        parse_target("cpu")


@pytest.mark.parametrize("spec, match", [
    ("gpu", r"unknown target 'gpu'; accepted: cpu, cpu:host, .*cpu:x86-64-v3"),
    ("cpu:", r"empty architecture"),
    ("cpu:pentium4", r"'cpu:pentium4' is not a known x86-64 CPU or level; accepted: .*znver3"),
    ("cpu:x86-64-v2", r"below the supported baseline x86-64-v3"),
    ("", r"a target is a string"),
    (3, r"a target is a string"),
])
def test_bad_targets_list_what_is_accepted(spec, match):
    with pytest.raises(TargetError, match=match):
        parse_target(spec)
    assert "cpu:x86-64-v3" in accepted_targets()


def test_compile_refuses_an_unknown_target_before_doing_anything():
    g = Graph()
    g.output(g.input("x", (2,)).exp(), name="y")
    with pytest.raises(TargetError, match="accepted"):
        compile(g, target="cuda:sm_1")


# -- the same graph on two targets ------------------------------------------------
def _graph():
    g = Graph()
    x = g.input("x", (16, 64), "f32")
    w = g.constant(np.linspace(-1, 1, 64 * 32, dtype=np.float32).reshape(64, 32), name="w")
    y = ((x @ w).gelu() * 0.5 + x.sum(-1, keepdims=True)).softmax(-1)
    g.output(y, name="y")
    return g


def test_baseline_and_host_targets_agree_within_the_stated_precision():
    x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    host = compile(_graph(), target="cpu:host")
    v3 = compile(_graph(), target="cpu:x86-64-v3")
    assert v3.target == parse_target("cpu:x86-64-v3") and host.target.host
    np.testing.assert_allclose(v3(x=x), host(x=x), rtol=2e-6, atol=1e-7)
    assert [s.split(" (")[0] for s in v3.kernel_summary()] == \
        [s.split(" (")[0] for s in host.kernel_summary()]


def test_kernel_cache_keeps_targets_apart(tmp_path):
    from compiler.codegen.kernels import OpInstance, linalg_text
    from compiler.graph.opdef import TensorType
    from runtime.dtype import DType
    text = linalg_text(OpInstance("Exp", (), (TensorType((8,), DType.F32),), True))
    cache = KernelCache(tmp_path)
    host, v3 = parse_target("cpu:host"), parse_target("cpu:x86-64-v3")
    assert cache.key(text, ["kernel"], None, host) != cache.key(text, ["kernel"], None, v3)
    a = cache.get_or_compile(text, ["kernel"], target=host)
    b = cache.get_or_compile(text, ["kernel"], target=v3)
    assert a is not b and cache.stats.compiles == 2
    assert len(list((tmp_path / "objects").rglob("*.o"))) == 2
    assert cache.get_or_compile(text, ["kernel"], target=v3) is b and cache.stats.compiles == 2


# -- portable objects ---------------------------------------------------------------
def test_bf16_conversions_on_the_avx2_baseline_need_no_compiler_runtime():
    """int -> bf16 conversions made LLVM call __truncsfbf2 on AVX2 targets
    (GCC 12's libgcc lacks it); every bf16 cast now expands in IR."""
    from runtime.dtype import DType
    g = Graph()
    outs = {}
    for dt in ("i32", "u8", "f32", "f64", "i8", "f16"):
        x = g.input(f"x_{dt}", (5,), dt)
        outs[dt] = x.cast("bf16")
        g.output(outs[dt], name=f"y_{dt}")
    m = compile(g, target="cpu:x86-64-v3")
    inputs = {f"x_{dt}": np.array([-3, 0, 1, 7, 100], dtype=DType.parse(dt).numpy)
              for dt in ("i32", "f32", "f64", "i8", "f16")}
    inputs["x_u8"] = np.array([0, 1, 7, 100, 255], dtype=np.uint8)
    got = m(**inputs)
    from compiler import interpret
    want = interpret(g, inputs)
    for name, value in got.items():
        np.testing.assert_array_equal(np.asarray(value).view(np.uint16),
                                      np.asarray(want[name]).view(np.uint16), err_msg=name)


def test_object_calling_a_compiler_runtime_builtin_is_refused():
    ir_text = """
declare bfloat @__truncsfbf2(float)
define bfloat @f(float %x) {
  %r = call bfloat @__truncsfbf2(float %x)
  ret bfloat %r
}
"""
    with pytest.raises(CodegenError, match=r"__truncsfbf2.*expanded in IR"):
        cpu_llvm.compile_ir_to_object(ir_text, parse_target("cpu:x86-64-v3"))


@pytest.mark.parametrize("target", ["cpu:x86-64-v3", "cpu:x86-64-v4", "cpu:znver3"])
def test_objects_for_every_level_are_self_contained(target):
    from compiler.codegen.kernels import OpInstance, linalg_text
    from compiler.graph.opdef import TensorType
    from runtime.dtype import DType
    for name, dt in (("Exp", DType.BF16), ("Tanh", DType.F16), ("Erf", DType.F32)):
        text = linalg_text(OpInstance(name, (), (TensorType((8,), dt),), True))
        _, undefined = elf_symbols(emit_object(text, ["kernel"], target=target))
        assert not [s for s in undefined if s.startswith("__")], (name, dt, undefined)


# -- feature checks -------------------------------------------------------------------
def test_check_cpu_features_names_what_is_missing(monkeypatch):
    monkeypatch.setenv("FUELC_HOST_FEATURES_MASK", "avx2,fma")
    with pytest.raises(CpuFeatureError) as info:
        check_cpu_features(X86_64_V3, target="cpu:x86-64-v3", what="an object")
    assert info.value.missing == ["avx2", "fma"] and info.value.target == "cpu:x86-64-v3"
    assert "needs CPU features this machine" in str(info.value) and "avx2, fma" in str(info.value)
    check_cpu_features(X86_64_V3 - {"avx2", "fma"})


def test_code_for_features_the_cpu_lacks_compiles_but_refuses_to_run(tmp_path):
    """In a fresh process whose CPU pretends to lack AVX2 (the mask), code for
    x86-64-v3 compiles ahead of time but calling it raises CpuFeatureError;
    code for the (masked) host still runs."""
    child = """
import numpy as np
from compiler import Graph, compile
from runtime.cpu_features import CpuFeatureError
g = Graph()
g.output((g.input("x", (4,), "f32") * 3.0).exp(), name="y")
m = compile(g, target="cpu:x86-64-v3")
try:
    m(x=np.ones(4, np.float32))
except CpuFeatureError as e:
    print("refused:", ",".join(e.missing))
"""
    env = dict(os.environ, FUELC_HOST_FEATURES_MASK="avx2", FUELC_CACHE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", child], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "refused: avx2"
    assert list((tmp_path / "objects").rglob("*.o")), "the objects were compiled and cached"


def test_target_value_is_hashable_and_frozen():
    t = parse_target("cpu:x86-64-v3")
    assert {t: 1}[parse_target("cpu:x86-64-v3")] == 1
    with pytest.raises(Exception):
        t.arch = "znver3"
    assert isinstance(t, Target) and "x86-64-v3" in t.description


def test_usable_cpus_is_the_affinity_mask_else_every_cpu(monkeypatch):
    from runtime import artifact
    from runtime.cpu_features import usable_cpus
    from compiler.codegen import jobs, parallel
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    monkeypatch.delenv("FUELC_JOBS", raising=False)
    monkeypatch.delenv(parallel.ENV, raising=False)
    assert usable_cpus() == 3
    assert jobs.default_jobs() == parallel._default() == artifact.hash_threads() == 3
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 12)
    assert usable_cpus() == 12
    assert artifact.hash_threads() == artifact.MAX_HASH_THREADS == 8
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert usable_cpus() == 1
