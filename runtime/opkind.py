"""``OpKind``: the dispatch key of the binding table.

Declaration order is fixed: new kinds are appended, and a kind's value is its
position. ``_FIXED`` lists the kinds declared here; after them come the kinds
of the element-wise primitives of ``runtime/elementwise.py`` that are not among
them (``<Op>Elementwise``, in that table's order), so a new element-wise
primitive declares its kind with its row there. ``RuntimeFused`` is a tag
only: runtime fused ops are keyed by ``BindingKey.runtime_fused(fid)``, never
by this kind. (``AwqMatmul`` came later: fused id 25 was decompose-only at
first; fuelc gives AWQ its own kernel, so it got a dispatch key.)
"""
from __future__ import annotations

import enum

from . import elementwise
from .errors import UnknownOpKindError

_FIXED = """
    MatMul AddElementwise SubElementwise MulElementwise DivElementwise ReluElementwise
    NegElementwise SqrElementwise SqrtElementwise RecipElementwise AbsElementwise
    TanhElementwise ExpElementwise LogElementwise SinElementwise CosElementwise
    SigmoidElementwise SiluElementwise GeluElementwise StepElementwise SumReduce MaxReduce
    MinReduce MeanReduce Cast Conv2D ConvTranspose2D ReduceSumTo ReduceMaxTo FusedLinear
    FlashAttn FlashAttnBackwardQ FlashAttnBackwardK FlashAttnBackwardV PagedAttn Affine
    ClampElementwise PowIElementwise PowIElementwiseBackward MaximumElementwise
    MinimumElementwise EqualElementwise NotEqualElementwise LessElementwise
    LessEqualElementwise GreaterElementwise GreaterEqualElementwise Where FloorElementwise
    CeilElementwise RoundElementwise SignElementwise ErfElementwise GeluErfElementwise
    PowElementwise RsqrtElementwise RemElementwise Flip Roll CumSum Pad Triu Tril
    LogSoftmaxLastDim LogSoftmaxLastDimBackward MaskedFill PadBackward Concat SoftmaxLastDim
    SoftmaxLastDimBackward RmsNormLastDim RmsNormLastDimBackward LayerNormLastDim
    LayerNormLastDimBackward ReduceMaxToBackward IndexSelect Gather Rope IndexAdd ScatterAdd
    ArgMaxDim ArgMinDim QMatMul WriteSlice WriteSliceRotating WriteSliceDoff Copy
    ReluInplace SiluInplace GeluInplace TanhInplace SigmoidInplace NegInplace AbsInplace
    SqrInplace SqrtInplace RsqrtInplace RecipInplace ExpInplace LogInplace SinInplace
    CosInplace SignInplace FloorInplace CeilInplace RoundInplace ErfInplace GeluErfInplace
    ClampInplace PowIInplace InplaceAffine FusedSoftmaxCrossEntropy CausalConv1d
    SelectiveScan SsdChunkScan Nf4Matmul RuntimeFused NonZeroIndices AwqMatmul MaxPool2D
    ExpandDepthwise
""".split()


class _OpKindBase(enum.IntEnum):
    """The methods of ``OpKind`` (its members are made below)."""

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


_ADDED = [k for k in map(elementwise.kind_name, elementwise.ROWS) if k not in _FIXED]
OpKind = _OpKindBase("OpKind", [(n, i) for i, n in enumerate(_FIXED + _ADDED)],
                     module=__name__, qualname="OpKind")
