"""The binding table's behaviours, one test each, plus the table
behaviours the planner relies on."""
import numpy as np
import pytest

from runtime import (
    Ambiguous, BackendId, BindingKey, BindingTableError, CostEstimate, DType, FusedOpId,
    KernelBindingTable, KernelCaps, KernelError, KernelRef, Layout, NoBackendForOp, NotBound,
    OpKind, OpParams, PrecisionGuarantee, Storage, Unique, default_cost_for_op_kind, unknown_cost,
)
from runtime.params import NO_PARAMS, Affine, Cast, Matmul, MatmulM, Reduce, Slice

F32x3 = (DType.F32, DType.F32, DType.F32)
CPU, CUDA = BackendId.CPU, BackendId.CUDA


def ok_kernel(inputs, outputs, layouts, params):
    return None


def ok_kernel_alt(inputs, outputs, layouts, params):
    return None


# -- kernel_ref_stores_function_pointer ---------------------------------------
def test_kernel_ref_stores_callable_and_compares_by_identity():
    k = KernelRef(ok_kernel, kernel_source="test")
    assert k.fn is ok_kernel
    assert k == KernelRef(ok_kernel) and hash(k) == hash(KernelRef(ok_kernel))
    assert k != KernelRef(ok_kernel_alt)
    assert KernelRef(k).fn is ok_kernel  # wrapping a KernelRef does not nest


# -- op_params_variants_construct -------------------------------------------------
def test_op_params_variants_construct_and_format():
    reprs = [repr(p) for p in (
        NO_PARAMS, Reduce(dims=(0, 1), keepdim=False),
        Matmul(lhs_batch_dims=(), rhs_batch_dims=(), m=4, n=8, k=16, m_compute=MatmulM.ALL),
        Slice(dim=0, start=0, end=10, step=1), Cast(), Affine(mul=2.0, add=1.0))]
    assert reprs[0] == "NoParams()" and "dims=(0, 1)" in reprs[1]
    assert OpParams.Matmul is Matmul and OpParams.NoParams is type(NO_PARAMS)


# -- kernel_ref_can_be_called ---------------------------------------------------------
def test_kernel_ref_can_be_called_and_writes_preallocated_output():
    def copy_kernel(inputs, outputs, layouts, params):
        outputs[0].data[:] = inputs[0].data

    src, lay = Storage.from_numpy(np.array([1.0, 2.0, 3.0, 4.0], np.float32))
    out = Storage.zeros(DType.F32, 4)
    KernelRef(copy_kernel)([src], [out], [lay, lay], NO_PARAMS)
    assert out.view(lay).tolist() == [1.0, 2.0, 3.0, 4.0]


def test_kernel_ref_turns_exceptions_into_kernel_error_naming_the_kernel():
    def boom(inputs, outputs, layouts, params):
        raise ZeroDivisionError("inner detail")

    src, lay = Storage.from_numpy(np.zeros(2, np.float32))
    with pytest.raises(KernelError, match=r"boom.*ZeroDivisionError: inner detail") as ei:
        KernelRef(boom, kernel_source="mine")([src], [src], [lay, lay], NO_PARAMS)
    assert isinstance(ei.value.__cause__, ZeroDivisionError)
    with pytest.raises(KernelError, match="1 layouts for 1 inputs \\+ 1 outputs"):
        KernelRef(ok_kernel)([src], [src], [lay], NO_PARAMS)
    with pytest.raises(KernelError, match="must be an OpParams"):
        KernelRef(ok_kernel)([src], [src], [lay, lay], None)


# -- step_9a_two_alternatives_append_then_first_wins_on_legacy_lookup ----------------
def test_two_alternatives_append_then_first_wins():
    t = KernelBindingTable()
    dts = (DType.BF16,) * 3
    t.register(OpKind.MatMul, dts, CUDA, ok_kernel)
    t.register(OpKind.MatMul, dts, CUDA, ok_kernel_alt)
    k, caps = t.lookup_with_caps(OpKind.MatMul, dts, CUDA)
    assert k.fn is ok_kernel and caps == KernelCaps()
    alts = t.lookup_alternatives(OpKind.MatMul, dts, CUDA)
    assert [a.kernel.fn for a in alts] == [ok_kernel, ok_kernel_alt]
    assert t.key_count() == 1 and len(t) == 2


# -- cost_expr_field_defaults_none_for_hand_written_registration ----------------------
def test_hand_written_registration_has_no_cost_expr_generic_or_revision():
    t = KernelBindingTable()
    t.register(OpKind.AddElementwise, F32x3, CPU, ok_kernel)
    (e,) = t.lookup_alternatives(OpKind.AddElementwise, F32x3, CPU)
    assert e.cost_expr is None and e.is_generic is False and e.kernel_revision_hash == 0
    t.register_full_with_source_generic(OpKind.AddElementwise, F32x3, CPU, ok_kernel_alt, KernelCaps(),
                                        PrecisionGuarantee.UNAUDITED, unknown_cost, "fkc", True, 77, "ast")
    e2 = t.lookup_alternatives(OpKind.AddElementwise, F32x3, CPU)[1]
    assert (e2.is_generic, e2.kernel_revision_hash, e2.cost_expr, e2.kernel_source) == (True, 77, "ast", "fkc")


# -- iter_entries_yields_full_entries_and_filters_runtime_fused ------------------------
def test_iter_entries_yields_every_alternative_and_skips_runtime_fused():
    t = KernelBindingTable()
    t.register(OpKind.AddElementwise, F32x3, CPU, ok_kernel)
    t.register(OpKind.AddElementwise, F32x3, CPU, ok_kernel_alt)
    t.register(BindingKey.runtime_fused(FusedOpId(FusedOpId.RUNTIME_FUSED_BASE)), F32x3, CPU, ok_kernel)
    entries = list(t.iter_entries())
    assert len(entries) == 2
    assert {e.kernel.fn for *_, e in entries} == {ok_kernel, ok_kernel_alt}
    assert all(op is OpKind.AddElementwise and d == F32x3 and b is CPU for op, d, b, _ in entries)
    assert len(list(t.iter_precision())) == len(list(t.iter_cost())) == 2
    assert list(t.iter_keys()) == [(OpKind.AddElementwise, F32x3, CPU)]
    assert t.key_count() == 2 and len(t) == 3


# -- step_9a_duplicate_kernel_ref_detected_by_finalize_not_panic ----------------------
def test_duplicate_kernel_is_appended_then_reported_by_finalize():
    t = KernelBindingTable()
    t.register(OpKind.MatMul, F32x3, CPU, ok_kernel)
    t.register(OpKind.MatMul, F32x3, CPU, KernelRef(ok_kernel, name="other-name"))  # same callable
    assert len(t) == 2
    with pytest.raises(BindingTableError, match=r"duplicate KernelRef.*MatMul.*\[f32, f32, f32\].*cpu"):
        t.finalize()


# -- finalize_ok_for_distinct_sibling_kernels -----------------------------------------
def test_finalize_ok_for_distinct_siblings_and_same_kernel_on_other_keys():
    t = KernelBindingTable()
    t.register(OpKind.MatMul, F32x3, CPU, ok_kernel)
    t.register(OpKind.MatMul, F32x3, CPU, ok_kernel_alt)
    t.register(OpKind.MatMul, (DType.F64,) * 3, CPU, ok_kernel)
    t.finalize()


# -- lookup_with_caps_skips_broadcast_baked_sibling_regardless_of_order ---------------
def test_lookup_with_caps_skips_broadcast_baked_sibling_registered_first():
    t = KernelBindingTable()
    t.register_with_caps(OpKind.AddElementwise, F32x3, CPU, ok_kernel, KernelCaps(True, True))
    t.register_with_caps(OpKind.AddElementwise, F32x3, CPU, ok_kernel_alt, KernelCaps(True, False))
    k, caps = t.lookup_with_caps(OpKind.AddElementwise, F32x3, CPU)
    assert k.fn is ok_kernel_alt and not caps.requires_broadcast
    assert t.lookup(OpKind.AddElementwise, F32x3, CPU).fn is ok_kernel_alt
    assert len(t.lookup_alternatives(OpKind.AddElementwise, F32x3, CPU)) == 2
    assert t.backend_supports(OpKind.AddElementwise, F32x3, CPU)


# -- lookup_with_caps_misses_when_only_broadcast_baked_siblings_exist -----------------
def test_lookup_misses_when_only_broadcast_baked_siblings_exist():
    t = KernelBindingTable()
    t.register_with_caps(OpKind.AddElementwise, F32x3, CPU, ok_kernel, KernelCaps(True, True))
    with pytest.raises(NoBackendForOp):
        t.lookup_with_caps(OpKind.AddElementwise, F32x3, CPU)
    assert not t.backend_supports(OpKind.AddElementwise, F32x3, CPU)
    assert len(t.lookup_alternatives(OpKind.AddElementwise, F32x3, CPU)) == 1  # not filtered


# -- step_9a_fill_passes_touch_every_alternative ---------------------------------------
def test_fill_precision_touches_every_cpu_alternative_only():
    t = KernelBindingTable()
    t.register(OpKind.AddElementwise, F32x3, CPU, ok_kernel)
    t.register(OpKind.AddElementwise, F32x3, CPU, ok_kernel_alt)
    t.register(OpKind.AddElementwise, F32x3, CUDA, ok_kernel)
    assert all(not e.precision.bit_stable_on_same_hardware
               for e in t.lookup_alternatives(OpKind.AddElementwise, F32x3, CPU))
    stable = PrecisionGuarantee(True, 0, None, None, "test default")
    t.fill_unset_cpu_precision(stable)
    assert [e.precision for e in t.lookup_alternatives(OpKind.AddElementwise, F32x3, CPU)] == [stable, stable]
    assert t.lookup_precision(OpKind.AddElementwise, F32x3, CUDA) == PrecisionGuarantee.UNAUDITED


# -- gap_095_fill_preserves_audited_none_but_still_upgrades_unaudited ------------------
def test_fill_preserves_audited_none_but_upgrades_unaudited():
    t = KernelBindingTable()
    reason = "audited: accumulation order is scheduler-dependent; no static bound applies"
    t.register_with_precision(OpKind.MatMul, F32x3, CPU, ok_kernel, PrecisionGuarantee.none(reason))
    t.register(OpKind.AddElementwise, F32x3, CPU, ok_kernel)
    t.fill_unset_cpu_precision(PrecisionGuarantee.PRIMITIVE_DETERMINISTIC_CPU)
    audited = t.lookup_precision(OpKind.MatMul, F32x3, CPU)
    assert not audited.bit_stable_on_same_hardware and audited.notes == reason
    assert t.lookup_precision(OpKind.AddElementwise, F32x3, CPU).bit_stable_on_same_hardware


# -- more ---------------------------------------------------------------------------------
def test_fill_cost_replaces_only_the_sentinel_and_skips_runtime_fused_and_other_backends():
    def mine(shapes, dtypes, params):
        return CostEstimate(1, 2, 3)

    t = KernelBindingTable()
    t.register(OpKind.AddElementwise, F32x3, CPU, ok_kernel)
    t.register_full(OpKind.AddElementwise, F32x3, CPU, ok_kernel_alt, KernelCaps(),
                    PrecisionGuarantee.UNAUDITED, mine)
    t.register(BindingKey.runtime_fused(0x8001), F32x3, CPU, ok_kernel)
    t.register(OpKind.AddElementwise, F32x3, CUDA, ok_kernel)
    t.fill_unset_cpu_cost()
    a, b = t.lookup_alternatives(OpKind.AddElementwise, F32x3, CPU)
    assert a.cost is default_cost_for_op_kind(OpKind.AddElementwise) and b.cost is mine
    assert t.lookup_cost(BindingKey.runtime_fused(0x8001), F32x3, CPU) is unknown_cost
    assert t.lookup_cost(OpKind.AddElementwise, F32x3, CUDA) is unknown_cost
    t.fill_unset_cost_for_backend(CUDA, default_cost_for_op_kind)
    assert t.lookup_cost(OpKind.AddElementwise, F32x3, CUDA) is not unknown_cost
    assert t.lookup_cost(OpKind.MatMul, F32x3, CPU) is unknown_cost  # unbound


def test_unique_runtime_fused_three_outcomes():
    t = KernelBindingTable()
    fid = FusedOpId(0x8003)
    assert t.unique_runtime_fused(fid, CPU) == NotBound() and not t.has_runtime_fused(fid, CPU)
    t.register(fid, (DType.F32, DType.F32), CPU, ok_kernel)
    t.register(fid, (DType.F32, DType.F32), CPU, ok_kernel_alt)
    r = t.unique_runtime_fused(fid, CPU)
    assert isinstance(r, Unique) and r.dtypes == (DType.F32, DType.F32) and r.entry.kernel.fn is ok_kernel
    assert t.unique_runtime_fused(fid, CUDA) == NotBound()
    t.register(fid, (DType.F32,) * 3, CPU, ok_kernel)
    t.register(fid, (DType.F16, DType.F16), CPU, ok_kernel)
    r = t.unique_runtime_fused(fid, CPU)
    assert isinstance(r, Ambiguous)
    assert r.signatures == ((DType.F16, DType.F16), (DType.F32, DType.F32), (DType.F32,) * 3)
    assert t.has_runtime_fused(fid, CPU) and not t.has_runtime_fused(FusedOpId(0x8004), CPU)
    t.remove_runtime_fused_for_tests()
    assert t.unique_runtime_fused(fid, CPU) == NotBound()


def test_no_backend_for_op_carries_the_coverage_diagnostic():
    t = KernelBindingTable()
    t.register(OpKind.MatMul, F32x3, CPU, ok_kernel)
    t.register(OpKind.MatMul, (DType.F16,) * 3, CUDA, ok_kernel)
    t.register(OpKind.AddElementwise, F32x3, CPU, ok_kernel)
    with pytest.raises(NoBackendForOp) as ei:
        t.lookup(OpKind.MatMul, (DType.F32, DType.BF16, DType.F32), CPU)
    e = ei.value
    assert e.key == BindingKey.static(OpKind.MatMul) and e.backend is CPU
    assert e.dtypes == (DType.F32, DType.BF16, DType.F32)
    assert e.available_backends == (CPU, CUDA)
    assert (CUDA, OpKind.MatMul, (DType.F16,) * 3) in e.supported_combinations
    msg = str(e)
    assert "Static(MatMul)" in msg and "[f32, bf16, f32]" in msg and "cpu:[f32, f32, f32]" in msg
    assert "cuda:[f16, f16, f16]" in msg and "3 static bindings" in msg
    assert t.coverage_diagnostic() == ([CPU, CUDA], sorted(e.supported_combinations,
                                                            key=lambda c: (c[0].value, int(c[1]), [d.value for d in c[2]])))


def test_unknown_op_dtype_backend_and_bad_registrations_raise_typed_errors():
    t = KernelBindingTable()
    with pytest.raises(Exception, match="NotAnOp") as ei:
        t.register("NotAnOp", F32x3, CPU, ok_kernel)
    assert ei.type.__name__ == "UnknownOpKindError"
    with pytest.raises(Exception, match="f33") as ei:
        t.register(OpKind.MatMul, ["f33"], CPU, ok_kernel)
    assert ei.type.__name__ == "UnknownDTypeError"
    with pytest.raises(BindingTableError, match="tpu.*cpu, cuda"):
        t.register(OpKind.MatMul, F32x3, "tpu", ok_kernel)
    with pytest.raises(BindingTableError, match="at least one"):
        t.register(OpKind.MatMul, [], CPU, ok_kernel)
    with pytest.raises(BindingTableError, match="callable"):
        t.register(OpKind.MatMul, F32x3, CPU, 42)
    with pytest.raises(BindingTableError, match="tag only"):
        t.register(OpKind.RuntimeFused, F32x3, CPU, ok_kernel)
    with pytest.raises(BindingTableError, match="runtime id"):
        BindingKey.runtime_fused(5)
    assert t.is_empty()


def test_string_and_enum_spellings_address_the_same_key():
    t = KernelBindingTable()
    t.register("MatMul", ["float32", "f32", DType.F32], "cpu", ok_kernel)
    assert t.lookup(BindingKey.Static(OpKind.MatMul), F32x3, CPU).fn is ok_kernel


def test_frozen_table_rejects_mutation_and_clone_is_independent():
    t = KernelBindingTable()
    t.register(OpKind.MatMul, F32x3, CPU, ok_kernel)
    t.freeze()
    with pytest.raises(BindingTableError, match="frozen"):
        t.register(OpKind.MatMul, F32x3, CPU, ok_kernel_alt)
    c = t.clone()
    c.register(OpKind.MatMul, F32x3, CPU, ok_kernel_alt)
    assert len(c) == 2 and len(t) == 1 and not c.frozen
