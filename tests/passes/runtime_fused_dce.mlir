// RUN: python -m compiler.opt %s --pass-pipeline='builtin.module(fuel-dce)' | filecheck %s

// An unused runtime fused op is pure (its body is primitive ops) and is erased.
// CHECK-LABEL: func.func @unused_runtime_fused
// CHECK-NOT:     fuel.runtime_fused
// CHECK-NOT:     fuel.exp
// CHECK:         return %arg0
func.func @unused_runtime_fused(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.runtime_fused"(%arg0) ({
  ^bb0(%arg1: tensor<4xf32>):
    %1 = "fuel.exp"(%arg1) : (tensor<4xf32>) -> tensor<4xf32>
    %2 = "fuel.tanh"(%1) : (tensor<4xf32>) -> tensor<4xf32>
    gpu.yield %2 : tensor<4xf32>
  }) {fused_id = 32768 : i64, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, scalars = []} : (tensor<4xf32>) -> tensor<4xf32>
  return %arg0 : tensor<4xf32>
}
