// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --verify-diagnostics \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=primitives_f32 remarks=true})' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32})' | filecheck %s --check-prefix=BF16

// The pattern matches but the backend has no SoftmaxLastDim kernel: no fusion
// (the remark proves the match happened and says why it was not rewritten).
// CHECK-LABEL: func.func @softmax
// CHECK-NOT:     fuel.softmax_last_dim
// CHECK:         "fuel.div"
// A kernel for f32 only does not gate in a bf16 softmax either.
// BF16-NOT:      fuel.softmax_last_dim
func.func @softmax(%x: tensor<2x8xbf16>) -> tensor<2x8xbf16> {
  %0 = "fuel.max_dim"(%x) {axis = 1 : i64} : (tensor<2x8xbf16>) -> tensor<2xbf16>
  %1 = "fuel.unsqueeze"(%0) {dim = 1 : i64} : (tensor<2xbf16>) -> tensor<2x1xbf16>
  %2 = "fuel.broadcast_to"(%1) {shape = [2, 8]} : (tensor<2x1xbf16>) -> tensor<2x8xbf16>
  %3 = "fuel.sub"(%x, %2) : (tensor<2x8xbf16>, tensor<2x8xbf16>) -> tensor<2x8xbf16>
  %4 = "fuel.exp"(%3) : (tensor<2x8xbf16>) -> tensor<2x8xbf16>
  %5 = "fuel.sum_dim"(%4) {axis = 1 : i64} : (tensor<2x8xbf16>) -> tensor<2xbf16>
  %6 = "fuel.unsqueeze"(%5) {dim = 1 : i64} : (tensor<2xbf16>) -> tensor<2x1xbf16>
  %7 = "fuel.broadcast_to"(%6) {shape = [2, 8]} : (tensor<2x1xbf16>) -> tensor<2x8xbf16>
  // expected-remark@+1 {{fuel-fuse: matched SoftmaxLastDim (recipe) but cpu has no kernel for [bf16, bf16]; not fused}}
  %8 = "fuel.div"(%4, %7) : (tensor<2x8xbf16>, tensor<2x8xbf16>) -> tensor<2x8xbf16>
  return %8 : tensor<2x8xbf16>
}
