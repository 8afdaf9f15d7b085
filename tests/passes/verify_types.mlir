// RUN: python -m compiler.opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(fuel-cse)'

// The driver checks each fuel op's result type against its shape/dtype rule
// before any pass runs (IRDL checks only operand counts and attribute kinds).

func.func @shape_mismatch(%a: tensor<2xf32>, %b: tensor<3xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{'fuel.add' op operands (f32[2], f32[3]) break the op's rule}}
  %0 = "fuel.add"(%a, %b) : (tensor<2xf32>, tensor<3xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @wrong_result_shape(%d: tensor<4x5xf32>) -> tensor<5xf32> {
  // expected-error@+1 {{'fuel.sum_dim' op result #0 is f32[5] but operands (f32[4,5]) give f32[4]}}
  %0 = "fuel.sum_dim"(%d) {axis = 1 : i64} : (tensor<4x5xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}

// -----

func.func @wrong_result_dtype(%c: tensor<?x4xf32>) -> tensor<?x4xf64> {
  // expected-error@+1 {{'fuel.exp' op result #0 is f64 but (f32[?,4]) gives f32}}
  %0 = "fuel.exp"(%c) : (tensor<?x4xf32>) -> tensor<?x4xf64>
  return %0 : tensor<?x4xf64>
}

// -----

// Dynamic dims are accepted: only what is static is compared.
func.func @dynamic_ok(%c: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %0 = "fuel.exp"(%c) : (tensor<?x4xf32>) -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}
