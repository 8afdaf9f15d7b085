// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file --verify-diagnostics --no-verify-types \
// RUN:   --pass-pipeline='builtin.module(fuel-decompose{table=primitives_f32})' | filecheck %s

// Total: a recipe that cannot be instantiated leaves the op fused and says
// why (a warning); the pipeline still succeeds.

// CHECK-LABEL: func.func @rank0
// CHECK-NEXT:    "fuel.softmax_last_dim"(%arg0)
func.func @rank0(%x: tensor<f32>) -> tensor<f32> {
  // expected-warning@+1 {{'fuel.softmax_last_dim' (%0) kept fused (and the target has no kernel for it): decompose declined: }}
  %0 = "fuel.softmax_last_dim"(%x) : (tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// CHECK-LABEL: func.func @dynamic
// CHECK-NEXT:    "fuel.softmax_last_dim"(%arg0)
func.func @dynamic(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-warning@+1 {{decompose declined: unresolvable operand/result type: dynamic shape}}
  %0 = "fuel.softmax_last_dim"(%x) : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// Operand shapes the fused op's rule rejects (contraction mismatch).
// CHECK-LABEL: func.func @bad_linear
// CHECK-NEXT:    "fuel.fused_linear"
func.func @bad_linear(%a: tensor<2x3xf32>, %b: tensor<5x4xf32>, %bias: tensor<4xf32>) -> tensor<2x4xf32> {
  // expected-warning@+1 {{'fuel.fused_linear' (%0) kept fused}}
  %0 = "fuel.fused_linear"(%a, %b, %bias) : (tensor<2x3xf32>, tensor<5x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// Results that disagree with what the recipe computes.
// CHECK-LABEL: func.func @wrong_result
// CHECK-NEXT:    "fuel.softmax_last_dim"
func.func @wrong_result(%x: tensor<2x8xf32>) -> tensor<2x4xf32> {
  // expected-warning@+1 {{recipe computes f32[2, 8] but the op's results are f32[2, 4]}}
  %0 = "fuel.softmax_last_dim"(%x) : (tensor<2x8xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}
