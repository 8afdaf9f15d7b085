"""``OpKind``: the dispatch key of the binding table.

Declaration order is fixed: new kinds are appended. ``RuntimeFused`` is a tag only: runtime
fused ops are keyed by ``BindingKey.runtime_fused(fid)``, never by this kind.
"""
from __future__ import annotations

import enum

from .errors import UnknownOpKindError


class OpKind(enum.IntEnum):
    MatMul = 0
    AddElementwise = 1
    SubElementwise = 2
    MulElementwise = 3
    DivElementwise = 4
    ReluElementwise = 5
    NegElementwise = 6
    SqrElementwise = 7
    SqrtElementwise = 8
    RecipElementwise = 9
    AbsElementwise = 10
    TanhElementwise = 11
    ExpElementwise = 12
    LogElementwise = 13
    SinElementwise = 14
    CosElementwise = 15
    SigmoidElementwise = 16
    SiluElementwise = 17
    GeluElementwise = 18
    StepElementwise = 19
    SumReduce = 20
    MaxReduce = 21
    MinReduce = 22
    MeanReduce = 23
    Cast = 24
    Conv2D = 25
    ConvTranspose2D = 26
    ReduceSumTo = 27
    ReduceMaxTo = 28
    FusedLinear = 29
    FlashAttn = 30
    FlashAttnBackwardQ = 31
    FlashAttnBackwardK = 32
    FlashAttnBackwardV = 33
    PagedAttn = 34
    Affine = 35
    ClampElementwise = 36
    PowIElementwise = 37
    PowIElementwiseBackward = 38
    MaximumElementwise = 39
    MinimumElementwise = 40
    EqualElementwise = 41
    NotEqualElementwise = 42
    LessElementwise = 43
    LessEqualElementwise = 44
    GreaterElementwise = 45
    GreaterEqualElementwise = 46
    Where = 47
    FloorElementwise = 48
    CeilElementwise = 49
    RoundElementwise = 50
    SignElementwise = 51
    ErfElementwise = 52
    GeluErfElementwise = 53
    PowElementwise = 54
    RsqrtElementwise = 55
    RemElementwise = 56
    Flip = 57
    Roll = 58
    CumSum = 59
    Pad = 60
    Triu = 61
    Tril = 62
    LogSoftmaxLastDim = 63
    LogSoftmaxLastDimBackward = 64
    MaskedFill = 65
    PadBackward = 66
    Concat = 67
    SoftmaxLastDim = 68
    SoftmaxLastDimBackward = 69
    RmsNormLastDim = 70
    RmsNormLastDimBackward = 71
    LayerNormLastDim = 72
    LayerNormLastDimBackward = 73
    ReduceMaxToBackward = 74
    IndexSelect = 75
    Gather = 76
    Rope = 77
    IndexAdd = 78
    ScatterAdd = 79
    ArgMaxDim = 80
    ArgMinDim = 81
    QMatMul = 82
    WriteSlice = 83
    WriteSliceRotating = 84
    WriteSliceDoff = 85
    Copy = 86
    ReluInplace = 87
    SiluInplace = 88
    GeluInplace = 89
    TanhInplace = 90
    SigmoidInplace = 91
    NegInplace = 92
    AbsInplace = 93
    SqrInplace = 94
    SqrtInplace = 95
    RsqrtInplace = 96
    RecipInplace = 97
    ExpInplace = 98
    LogInplace = 99
    SinInplace = 100
    CosInplace = 101
    SignInplace = 102
    FloorInplace = 103
    CeilInplace = 104
    RoundInplace = 105
    ErfInplace = 106
    GeluErfInplace = 107
    ClampInplace = 108
    PowIInplace = 109
    InplaceAffine = 110
    FusedSoftmaxCrossEntropy = 111
    CausalConv1d = 112
    SelectiveScan = 113
    SsdChunkScan = 114
    Nf4Matmul = 115
    RuntimeFused = 116
    NonZeroIndices = 117
    # Added later (fused id 25 was decompose-only at first); fuelc gives AWQ
    # its own kernel, so it gets a dispatch key. OpKind is open.
    AwqMatmul = 118

    @classmethod
    def parse(cls, value: "OpKind | str") -> "OpKind":
        """Accept an OpKind or its exact name; raise UnknownOpKindError."""
        if isinstance(value, OpKind):
            return value
        try:
            return cls[value]
        except (KeyError, TypeError):
            import difflib
            close = difflib.get_close_matches(str(value), cls.__members__, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UnknownOpKindError(f"unknown OpKind {value!r}{hint}") from None

    def __str__(self) -> str:
        return self.name
