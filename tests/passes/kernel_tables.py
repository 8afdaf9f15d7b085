"""Small, explicit binding tables for the pass tests, so "has a kernel" is
decided by the test and not by whatever the default table registers.

A driver plugin: importing it registers the tables under their function
names (and ``test-fail-on-fuel-ops``, a pass that fails at every fuel op,
to test reproducers), so RUN lines say
``fuelc opt --load-plugin=tests.passes.kernel_tables ... fuel-fuse{table=fused_f32}``
and Python tests import it before naming them."""
from __future__ import annotations

import functools

import compiler.codegen.lowering  # noqa: F401  (the fused kernels' serves predicates: a
# fold or fusion asks them whatever ran before in the process)
from compiler.passes import ModulePass, register_pass, register_table
from compiler.passes._fuel import fuel_ops
from compiler.passes.diagnostics import emit_error
from runtime.binding import KernelBindingTable, KernelCaps
from runtime.dtype import DType
from runtime.opkind import OpKind

F32, F64, BF16, F16 = DType.F32, DType.F64, DType.BF16, DType.F16

_UNARY = [OpKind.NegElementwise, OpKind.ExpElementwise, OpKind.LogElementwise,
          OpKind.SqrtElementwise, OpKind.RecipElementwise, OpKind.SqrElementwise,
          OpKind.ReluElementwise, OpKind.TanhElementwise, OpKind.SigmoidElementwise,
          OpKind.SiluElementwise, OpKind.AbsElementwise, OpKind.RsqrtElementwise,
          OpKind.Affine, OpKind.SumReduce, OpKind.MaxReduce, OpKind.MeanReduce,
          OpKind.MinReduce, OpKind.ReduceSumTo, OpKind.ReduceMaxTo]
_BINARY = [OpKind.AddElementwise, OpKind.SubElementwise, OpKind.MulElementwise,
           OpKind.DivElementwise, OpKind.MaximumElementwise, OpKind.MinimumElementwise,
           OpKind.MatMul]


def _kernel(inputs, outputs, layouts, params):  # never run by pass tests
    raise NotImplementedError("test table kernel")


def _primitives(t: KernelBindingTable, dtypes=(F32, F64), backend="cpu") -> None:
    for d in dtypes:
        for k in _UNARY:
            t.register(k, [d, d], backend, _kernel)
        for k in _BINARY:
            t.register(k, [d, d, d], backend, _kernel)
    floats = (BF16, F16, F32, F64)
    for s in floats:
        for d in floats:
            if s != d:
                t.register(OpKind.Cast, [s, d], backend, _kernel)


@functools.cache
def primitives_f32() -> KernelBindingTable:
    """f32/f64 primitives and float casts on cpu; no fused kernels, no bf16."""
    t = KernelBindingTable()
    _primitives(t)
    return t.freeze()


@functools.cache
def fused_f32() -> KernelBindingTable:
    """primitives_f32 plus f32 kernels for the norm/softmax/linear fused ops."""
    t = KernelBindingTable()
    _primitives(t)
    for k in (OpKind.SoftmaxLastDim, OpKind.RmsNormLastDim, OpKind.LayerNormLastDim):
        t.register(k, [F32, F32], "cpu", _kernel)
    t.register(OpKind.FusedLinear, [F32, F32, F32, F32], "cpu", _kernel)
    return t.freeze()


@functools.cache
def softmax_mask() -> KernelBindingTable:
    """fused_f32 plus SoftmaxLastDim with an additive mask (x, mask) in f32,
    and f64 with and without it, on cpu; f32 with the mask on cuda."""
    t = KernelBindingTable()
    _primitives(t)
    _primitives(t, (F32,), backend="cuda")
    t.register(OpKind.SoftmaxLastDim, [F32, F32], "cpu", _kernel)
    for d in (F32, F64):
        t.register(OpKind.SoftmaxLastDim, [d] * 3, "cpu", _kernel)
    t.register(OpKind.SoftmaxLastDim, [F64] * 2, "cpu", _kernel)
    t.register(OpKind.SoftmaxLastDim, [F32] * 3, "cuda", _kernel)
    return t.freeze()


@functools.cache
def linear_f32_f64() -> KernelBindingTable:
    """primitives_f32 plus f32 and f64 FusedLinear kernels (whether an epilogue
    folds is then up to the kernel's ``serves``), and an f32 one on cuda."""
    t = KernelBindingTable()
    _primitives(t)
    _primitives(t, (F32,), backend="cuda")
    for d in (F32, F64):
        t.register(OpKind.FusedLinear, [d] * 4, "cpu", _kernel)
    t.register(OpKind.FusedLinear, [F32] * 4, "cuda", _kernel)
    return t.freeze()


@functools.cache
def linear_residual() -> KernelBindingTable:
    """linear_f32_f64 plus the f32 FusedLinear with a residual (a, b, bias,
    skip) on cpu and cuda."""
    t = KernelBindingTable()
    _primitives(t)
    _primitives(t, (F32,), backend="cuda")
    for d in (F32, F64):
        t.register(OpKind.FusedLinear, [d] * 4, "cpu", _kernel)
    for backend in ("cpu", "cuda"):
        t.register(OpKind.FusedLinear, [F32] * 5, backend, _kernel)
    return t.freeze()


@functools.cache
def attention_f32() -> KernelBindingTable:
    """fused_f32 plus the f32 FlashAttn kernel (q, k, v, [mask or alibi])."""
    t = KernelBindingTable()
    _primitives(t)
    t.register(OpKind.SoftmaxLastDim, [F32, F32], "cpu", _kernel)
    t.register(OpKind.FlashAttn, [F32] * 4, "cpu", _kernel)
    t.register(OpKind.FlashAttn, [F32] * 5, "cpu", _kernel)
    return t.freeze()


@functools.cache
def conv_f32() -> KernelBindingTable:
    """primitives_f32 plus the f32 Conv2D kernel (with and without bias and
    residual)."""
    t = KernelBindingTable()
    _primitives(t)
    t.register(OpKind.Conv2D, [F32] * 3, "cpu", _kernel)
    t.register(OpKind.Conv2D, [F32] * 4, "cpu", _kernel)
    t.register(OpKind.Conv2D, [F32] * 5, "cpu", _kernel)
    return t.freeze()


@functools.cache
def expand_conv_f32() -> KernelBindingTable:
    """conv_f32 plus the f32 ExpandDepthwise kernel."""
    t = KernelBindingTable()
    _primitives(t)
    for n in (3, 4, 5):
        t.register(OpKind.Conv2D, [F32] * n, "cpu", _kernel)
    t.register(OpKind.ExpandDepthwise, [F32] * 6, "cpu", _kernel)
    return t.freeze()


@functools.cache
def broadcast_only_add() -> KernelBindingTable:
    """An f32 add that exists only as a broadcast-baked sibling: not servable."""
    t = KernelBindingTable()
    t.register_with_caps(OpKind.AddElementwise, [F32, F32, F32], "cpu", _kernel,
                         KernelCaps(requires_broadcast=True))
    return t.freeze()


for _factory in (primitives_f32, fused_f32, softmax_mask, linear_f32_f64, linear_residual, attention_f32, conv_f32,
                 expand_conv_f32, broadcast_only_add):
    register_table(_factory.__name__, _factory)


@register_pass
class FailOnFuelOps(ModulePass):
    name = "test-fail-on-fuel-ops"
    summary = "fail with an error at every fuel op (reproducer tests)"

    def apply(self, module) -> None:
        for op in fuel_ops(module):
            emit_error(op, f"{self.name}: refusing {op.name}")
