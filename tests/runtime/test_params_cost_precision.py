"""OpParams variants, PARAMS_FOR_KIND, PrecisionGuarantee, the cost model,
DType/BackendId/FusedOpId facts."""
import dataclasses
import json

import pytest

from runtime import (
    BackendId, BindingKey, CostEstimate, DType, FusedOpId, OpKind, OpParams, OpParamsError,
    PARAMS_FOR_KIND, PrecisionGuarantee, UnknownDTypeError, check_params_for,
    default_cost_for_op_kind, unknown_cost,
)
from runtime import params as P

SAMPLES = [
    P.NO_PARAMS, P.Reduce((0, 2), True),
    P.Matmul((4, 2), (2, 2), 3, 5, 7, P.MatmulM.rows(2)), P.Matmul((), (), 1, 1, 1, P.MatmulM.deferred(9)),
    P.Conv1D(1, 10, 4, 2, 3, padding=1), P.Conv2D((1, 2, 5, 5), (4, 2, 3, 3), (1, 4, 3, 3)),
    P.MaxPool2D((1, 2, 5, 5), (1, 2, 3, 3), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    P.ExpandDepthwise((1, 2, 5, 5), (8, 1, 3, 3), (1, 8, 3, 3), (2, 2), (1, 1), 0.0, 6.0),
    P.ConvTranspose1D(1, 4, 2, 3, 3), P.ConvTranspose2D((1, 2, 3, 3), (2, 4, 3, 3), (1, 4, 5, 5), groups=1),
    P.ReduceSumTo((2, 3), (1, 3)), P.ReduceMaxTo((2, 3), (3,)), P.ReduceMaxToBackward((2, 3), (2, 1)),
    P.FlashAttn(1, 4, 2, 3, 5, 8, 5, 0.125, True, None, 2, 30.0),
    P.PagedAttn(1, 4, 2, 1, 8, 16, 4, 32, 0.125), P.Slice(0, 1, 3, 1), P.Cast(),
    P.Affine(2.0, -1.0), P.Clamp(-1.0, 1.0), P.PowI(-3), P.Concat(2, (1, 3), 4, 1),
    P.SoftmaxLastDim(4, 8), P.NormLastDim(4, 8, 1e-5), P.IndexSelect(2, 5, 3, 4),
    P.Gather((2, 5), (2, 3), 1), P.Rope(2, 3, 8), P.QMatMul(P.QuantType.Q4_0, 1, 2, 3, 64),
    P.IndexAdd(2, 5, 3, 4), P.ScatterAdd((2, 5), (2, 3), 1), P.Flip(2, 3, 4, 1),
    P.Roll(2, 3, 4, -5, 1), P.CumSum(2, 3, 4, 1), P.Triangular(2, 3, 3, -1),
    P.LogSoftmaxLastDim(4, 8), P.MaskedFill(float("-inf")),
    P.Pad((2, 3), (3, 6), ((1, 0), (1, 2)), P.PadMode.CONSTANT, 0.5),
    P.PadBackward((2, 3), (3, 6), ((1, 0), (1, 2))),
    P.WriteSlice((4, 8), ((0, 4), (2, 5)), (1, 3)), P.WriteSliceRotating((4, 8), 1, 8, ((0, 4), (0, 3))),
    P.WriteSliceDoff((4, 8), 1, ((0, 4), (0, 3))),
    P.FusedSoftmaxCrossEntropy(4, 10, P.Reduction.SUM, -100), P.CausalConv1d(1, 2, 6, 4, 3, True),
    P.SelectiveScan(1, 4, 2, 3), P.SsdChunkScan(1, 4, 2, 3, 5, 2), P.Nf4Matmul(1, 2, 3, 128, 64), P.AwqMatmul(1, 2, 8, 128, 64),
    P.JitScalars((0.5, -2.0)), P.NonZeroIndices(12, 3),
]


def test_every_variant_is_sampled_frozen_and_round_trips_through_json():
    assert {type(s).__name__ for s in SAMPLES} == set(OpParams._VARIANTS)
    for s in SAMPLES:
        back = OpParams.from_dict(json.loads(json.dumps(s.to_dict(), allow_nan=False)))
        assert back == s and type(back) is type(s), s
        if dataclasses.fields(s):
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(s, dataclasses.fields(s)[0].name, 0)


def test_sequences_become_tuples_and_numbers_are_canonical():
    r = P.Reduce([1, 2])
    assert r.dims == (1, 2) and hash(r) == hash(P.Reduce((1, 2)))
    assert P.Affine(2.0, 3).mul == 2.0 and isinstance(P.Affine(2.0, 3).mul, float)
    # a scalar operand's int stays an exact int (an integer tensor's scalar, issue 22)
    assert P.Affine(2, 2**53 + 1).add == 2**53 + 1 and isinstance(P.Affine(2, 3).mul, int)
    assert P.Affine(2, 3) != P.Affine(2.0, 3.0)


@pytest.mark.parametrize("make, message", [
    (lambda: P.Reduce((2, 1)), "Reduce: dims must be sorted and unique"),
    (lambda: P.Reduce((-1,)), r"Reduce.dims must be >= 0, got -1"),
    (lambda: P.Reduce("ab"), "Reduce.dims must be a sequence"),
    (lambda: P.Matmul((3,), (2,), 1, 1, 1), "batch dims 3 vs 2 neither equal nor GQA-divisible"),
    (lambda: P.Matmul((), (), 2, 1, 1, P.MatmulM.rows(3)), "m_compute rows 3 > m 2"),
    (lambda: P.Clamp(1.0, 0.0), "min must be <= max"),
    (lambda: P.Pad((2,), (4,), ((1, 0),)), r"out_shape \(4,\) != in_shape"),
    (lambda: P.PowI(2.5), "PowI.exp must be an int"),
    (lambda: P.FlashAttn(1, 3, 2, 1, 1, 1, 1, 1.0), "hq must be a multiple of hkv"),
    (lambda: P.SsdChunkScan(1, 5, 1, 1, 1, 2), "chunk_size must be > 0 and divide seqlen"),
    (lambda: P.QMatMul(P.QuantType.Q4_K, 1, 1, 1, 32), "multiple of the Q4_K block .256."),
    (lambda: P.SelectiveScan(1, 1, 1, 1, delta_softplus=1), "delta_softplus must be a bool"),
    (lambda: P.ReduceSumTo((2, 3), (2, 4)), "not broadcast-compatible"),
    (lambda: P.WriteSlice((4,), ((2, 5),)), r"range \(2, 5\) not within 0..4"),
    (lambda: P.MaxPool2D((1, 1, 4, 4), (1, 1, 2, 2), (2, 2), (0, 2)),
     "MaxPool2D.*stride and dilation must be >= 1"),
    (lambda: P.ExpandDepthwise((1, 2, 5, 5), (8, 1, 3, 3), (1, 8, 5, 5), clamp_min=0.0,
                               silu=True), "ExpandDepthwise.*exclusive"),
])
def test_invalid_params_raise_typed_errors_naming_the_variant(make, message):
    with pytest.raises(OpParamsError, match=message):
        make()


def test_from_dict_rejects_unknown_kinds_and_fields():
    with pytest.raises(OpParamsError, match="unknown OpParams kind 'Bogus'.*Affine"):
        OpParams.from_dict({"kind": "Bogus"})
    with pytest.raises(OpParamsError, match=r"Affine: unknown fields \['scale'\]"):
        OpParams.from_dict({"kind": "Affine", "mul": 1.0, "add": 0.0, "scale": 2})
    with pytest.raises(OpParamsError, match="not a QuantType"):
        OpParams.from_dict({**P.QMatMul(P.QuantType.Q4_0, 1, 1, 1, 32).to_dict(), "quant_type": "Q9"})


def test_params_for_kind_covers_every_kind_with_a_kernel_and_is_enforced():
    missing = [k for k in OpKind if k not in PARAMS_FOR_KIND and k is not OpKind.RuntimeFused]
    assert missing == []
    assert PARAMS_FOR_KIND[OpKind.AddElementwise] is P.NoParams
    assert PARAMS_FOR_KIND[OpKind.ArgMaxDim] is P.Reduce
    assert PARAMS_FOR_KIND[OpKind.Tril] is P.Triangular
    assert PARAMS_FOR_KIND[OpKind.RmsNormLastDim] is P.NormLastDim
    check_params_for(OpKind.ClampElementwise, P.Clamp(0.0, 1.0))
    check_params_for(BindingKey.runtime_fused(0x8000), P.JitScalars((1.0,)))
    with pytest.raises(OpParamsError, match="ClampElementwise.*receive Clamp, got Affine"):
        check_params_for(OpKind.ClampElementwise, P.Affine(1.0, 0.0))


def test_precision_guarantee_predicates():
    PG = PrecisionGuarantee
    assert PG.UNAUDITED.makes_no_static_claim() and not PG.UNAUDITED.is_audited_no_bound()
    n = PG.none("audited: nondeterministic reduction")
    assert n.makes_no_static_claim() and n.is_audited_no_bound()
    assert not PG.PRIMITIVE_DETERMINISTIC_CPU.makes_no_static_claim()
    assert PG.REFERENCE.max_ulp == 0 and PG.REFERENCE.bit_stable_on_same_hardware
    assert not PG(max_relative=1e-3).makes_no_static_claim()
    assert not PG().is_audited_no_bound()  # empty notes are not an audit
    with pytest.raises(Exception, match="non-empty audit reason"):
        PG.none("  ")
    assert PG.from_json(n.to_json()) == n


def test_cost_model_families_and_roofline():
    f32 = [DType.F32] * 3
    mm = default_cost_for_op_kind(OpKind.MatMul)([(2, 3, 4), (2, 4, 5), (2, 3, 5)], f32, None)
    assert mm == CostEstimate(2 * 2 * 3 * 5 * 4, 2 * (12 + 20 + 15) * 4, 100)
    add = default_cost_for_op_kind(OpKind.AddElementwise)([(10,), (10,), (10,)], f32, None)
    assert add == CostEstimate(10, 120, 50)
    exp = default_cost_for_op_kind(OpKind.ExpElementwise)([(10,), (10,)], [DType.F16] * 2, None)
    assert exp == CostEstimate(100, 40, 50)
    cast = default_cost_for_op_kind(OpKind.Cast)([(10,), (10,)], [DType.F64, DType.BF16], None)
    assert cast == CostEstimate(0, 100, 50)
    cmp_ = default_cost_for_op_kind(OpKind.LessElementwise)([(8,), (8,), (8,)], [DType.F32] * 2 + [DType.U8], None)
    assert cmp_ == CostEstimate(8, 72, 50)
    assert default_cost_for_op_kind(OpKind.ReluInplace) is unknown_cost
    assert unknown_cost([], [], None).is_unknown
    assert mm.composite_ns() == max(mm.flops / 1.0, mm.bytes_moved / 4.0) + 100
    assert mm.composite_ns(backend=BackendId.CUDA) == max(mm.flops / 30, mm.bytes_moved / 40) + 100
    assert mm.composite_ns(float("nan"), -1) == mm.composite_ns()
    assert mm.composite_ns(1000.0, 1000.0) == 100 + max(mm.flops, mm.bytes_moved) / 1000


def test_dtype_facts_and_parsing():
    assert [d.size_in_bytes for d in (DType.F32, DType.BF16, DType.F4, DType.I64)] == [4, 2, 0, 8]
    assert DType.parse("float32") is DType.F32 and DType.parse("bfloat16") is DType.BF16
    assert DType.BF16.storage_numpy.name == "uint16" and DType.BF16.numpy.name == "bfloat16"
    assert DType.U32.is_int and not DType.U32.is_signed and DType.F8E4M3.is_float
    with pytest.raises(UnknownDTypeError, match="unknown dtype 'f33'"):
        DType.parse("f33")


def test_ids():
    assert FusedOpId.UNASSIGNED.value == 0 and FusedOpId.RUNTIME_FUSED_BASE == 0x8000
    assert FusedOpId(0x8000).is_runtime and not FusedOpId(25).is_runtime
    with pytest.raises(Exception, match="0..=0xFFFF"):
        FusedOpId(0x10000)
    k = BindingKey.RuntimeFused(FusedOpId(0x8001))
    assert k.static_op is None and BindingKey.from_json(k.to_json()) == k
    assert BindingKey.of(OpKind.Flip) == BindingKey.Static(OpKind.Flip) == BindingKey.of("Flip")
    assert BackendId.parse("CUDA") is BackendId.CUDA and BackendId.CUDA.is_gpu_class


def test_params_equality_is_bit_exact():
    """Kernels are memoised per params: 0.0 and -0.0 must not share a key."""
    a, b = P.Affine(mul=0.0, add=1.0), P.Affine(mul=-0.0, add=1.0)
    assert a != b and P.Affine(mul=0.0, add=1.0) == a
    assert hash(a) == hash(P.Affine(mul=0.0, add=1.0))
    assert {a: "plus"}.get(b) is None
    nan = P.MaskedFill(value=float("nan"))
    assert nan == P.MaskedFill(value=float("nan"))  # NaN keys by its bits
    assert P.Reduce(dims=(1,)) == P.Reduce(dims=(1,), keepdim=False)
