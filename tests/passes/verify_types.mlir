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

// -----

// On ? operands the rule runs on symbols: the ranks and static extents it
// computes are checked (a reduction keeps its rank here: wrong).
func.func @dynamic_rank(%c: tensor<?x5xf32>) -> tensor<?x5xf32> {
  // expected-error@+1 {{'fuel.sum_dim' op result #0 is f32[?,5] but operands (f32[?,5]) give f32[?]}}
  %0 = "fuel.sum_dim"(%c) {axis = 1 : i64} : (tensor<?x5xf32>) -> tensor<?x5xf32>
  return %0 : tensor<?x5xf32>
}

// -----

func.func @dynamic_matmul(%a: tensor<?x3xf32>, %b: tensor<3x4xf32>) -> tensor<?x5xf32> {
  // expected-error@+1 {{'fuel.mat_mul' op result #0 is f32[?,5] but operands (f32[?,3], f32[3,4]) give f32[?,4]}}
  %0 = "fuel.mat_mul"(%a, %b) : (tensor<?x3xf32>, tensor<3x4xf32>) -> tensor<?x5xf32>
  return %0 : tensor<?x5xf32>
}

// -----

// A broadcast's -1 keeps the input's extent; the static extents must match.
func.func @dynamic_broadcast(%a: tensor<?x1xf32>) -> tensor<?x9xf32> {
  // expected-error@+1 {{'fuel.broadcast_to' op result #0 is f32[?,9] but operands (f32[?,1]) give f32[?,8]}}
  %0 = "fuel.broadcast_to"(%a) {shape = [-1, 8]} : (tensor<?x1xf32>) -> tensor<?x9xf32>
  return %0 : tensor<?x9xf32>
}

// -----

// Accepted: ? operands that must be equal (they unify), a static result of
// ? operands (a refinement), a ? result of static ones, a broadcast keeping ?.
func.func @dynamic_ok2(%a: tensor<?x4xf32>, %b: tensor<?x4xf32>, %c: tensor<?x1xf32>, %d: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<?x4xf32>, tensor<?x8xf32>) {
  %0 = "fuel.add"(%a, %b) : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<2x4xf32>
  %1 = "fuel.exp"(%d) : (tensor<2x4xf32>) -> tensor<?x4xf32>
  %2 = "fuel.broadcast_to"(%c) {shape = [-1, 8]} : (tensor<?x1xf32>) -> tensor<?x8xf32>
  return %0, %1, %2 : tensor<2x4xf32>, tensor<?x4xf32>, tensor<?x8xf32>
}
