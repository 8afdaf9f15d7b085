// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --option table=fused_f32 \
// RUN:   --pass-pipeline=default | filecheck %s

// The default pipeline (fuel-fuse, fuel-decompose, fuel-fuse-runtime,
// fuel-reconcile-dtypes, fuel-cse, fuel-dce) on a block whose rows are ?:
// the spelled-out softmax fuses, the tanh * x tail becomes one runtime fused
// region, the bf16 weight is cast for the f32 x bf16 matmul, the duplicated exp is merged and the
// unused neg is erased.
// CHECK-LABEL: func.func @block
// CHECK-NEXT:    %[[C:.*]] = "fuel.cast"(%arg2) {dtype = "f32"} : (tensor<64x64xbf16>) -> tensor<64x64xf32>
// CHECK-NEXT:    %[[M:.*]] = "fuel.mat_mul"(%arg0, %[[C]]) : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
// CHECK-NEXT:    %[[A:.*]] = "fuel.add"(%[[M]], %arg1) : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
// CHECK-NEXT:    %[[S:.*]] = "fuel.softmax_last_dim"(%[[A]]) : (tensor<?x64xf32>) -> tensor<?x64xf32>
// CHECK-NEXT:    %[[R:.*]] = "fuel.runtime_fused"(%[[S]]) ({
// CHECK-NEXT:    ^bb0(%[[B:.*]]: tensor<?x64xf32>):
// CHECK-NEXT:      "fuel.tanh"(%[[B]]) : (tensor<?x64xf32>) -> tensor<?x64xf32>
// CHECK-NEXT:      "fuel.mul"
// CHECK-NEXT:      gpu.yield {{.*}} : tensor<?x64xf32>
// CHECK-NEXT:    }) {{.*}} : (tensor<?x64xf32>) -> tensor<?x64xf32>
// CHECK-NEXT:    %[[E:.*]] = "fuel.exp"(%[[A]]) : (tensor<?x64xf32>) -> tensor<?x64xf32>
// CHECK-NEXT:    return %[[R]], %[[E]], %[[E]] : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>
func.func @block(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>, %w: tensor<64x64xbf16>) -> (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) {
  %m = "fuel.mat_mul"(%x, %w) : (tensor<?x64xf32>, tensor<64x64xbf16>) -> tensor<?x64xf32>
  %a = "fuel.add"(%m, %y) : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  %0 = "fuel.max_dim"(%a) {axis = 1 : i64} : (tensor<?x64xf32>) -> tensor<?xf32>
  %1 = "fuel.unsqueeze"(%0) {dim = 1 : i64} : (tensor<?xf32>) -> tensor<?x1xf32>
  %2 = "fuel.broadcast_to"(%1) {shape = [-1, 64]} : (tensor<?x1xf32>) -> tensor<?x64xf32>
  %3 = "fuel.sub"(%a, %2) : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  %4 = "fuel.exp"(%3) : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %5 = "fuel.sum_dim"(%4) {axis = 1 : i64} : (tensor<?x64xf32>) -> tensor<?xf32>
  %6 = "fuel.unsqueeze"(%5) {dim = 1 : i64} : (tensor<?xf32>) -> tensor<?x1xf32>
  %7 = "fuel.broadcast_to"(%6) {shape = [-1, 64]} : (tensor<?x1xf32>) -> tensor<?x64xf32>
  %8 = "fuel.div"(%4, %7) : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  %9 = "fuel.tanh"(%8) : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %10 = "fuel.mul"(%9, %8) : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  %11 = "fuel.exp"(%a) : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %12 = "fuel.exp"(%a) : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %13 = "fuel.neg"(%12) : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return %10, %11, %12 : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>
}
