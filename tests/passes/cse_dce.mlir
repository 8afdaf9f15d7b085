// RUN: python -m compiler.opt %s --split-input-file --pass-pipeline='builtin.module(fuel-cse,fuel-dce)' | filecheck %s
// RUN: python -m compiler.opt %s --split-input-file --pass-pipeline='builtin.module(cse,canonicalize)' | filecheck %s --check-prefix=NATIVE

// MLIR's own cse/canonicalize leave IRDL ops (no Pure trait) alone.
// NATIVE-LABEL: func.func @merge
// NATIVE-COUNT-2: "fuel.add"

// CHECK-LABEL: func.func @merge
// CHECK-NEXT:    %[[A:.*]] = "fuel.add"(%arg0, %arg1)
// CHECK-NEXT:    %[[M:.*]] = "fuel.mul"(%[[A]], %[[A]])
// CHECK-NEXT:    return %[[M]]
func.func @merge(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "fuel.add"(%b, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = "fuel.mul"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

// Non-commutative operands and differing params are different computations.
// CHECK-LABEL: func.func @distinct
// CHECK-COUNT-2: "fuel.sub"
// CHECK:         "fuel.sum_dim"(%arg0) {axis = 0 : i64}
// CHECK-NEXT:    "fuel.sum_dim"(%arg0) {axis = 1 : i64}
func.func @distinct(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = "fuel.sub"(%a, %b) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = "fuel.sub"(%b, %a) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = "fuel.sum_dim"(%a) {axis = 0 : i64} : (tensor<4x4xf32>) -> tensor<4xf32>
  %3 = "fuel.sum_dim"(%a) {axis = 1 : i64} : (tensor<4x4xf32>) -> tensor<4xf32>
  return %0, %1, %2, %3 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Identity cast / add 0 / mul 1 / pow 1 forward their operand; unused pure
// ops are erased, transitively.
// CHECK-LABEL: func.func @simplify
// CHECK-NEXT:    %[[E:.*]] = "fuel.exp"(%arg0)
// CHECK-NEXT:    return %[[E]]
func.func @simplify(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.cast"(%a) {dtype = "f32"} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "fuel.add_scalar"(%0) {value = 0.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "fuel.mul_scalar"(%1) {value = 1.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  %3 = "fuel.pow_i"(%2) {n = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  %4 = "fuel.exp"(%3) : (tensor<4xf32>) -> tensor<4xf32>
  %5 = "fuel.log"(%4) : (tensor<4xf32>) -> tensor<4xf32>
  %6 = "fuel.neg"(%5) : (tensor<4xf32>) -> tensor<4xf32>
  return %4 : tensor<4xf32>
}

// -----

// Non-identity scalars stay.
// CHECK-LABEL: func.func @keep_scalars
// CHECK: "fuel.add_scalar"(%arg0) {value = 2.0
// CHECK: "fuel.cast"(%arg0) {dtype = "f64"}
func.func @keep_scalars(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf64>) {
  %0 = "fuel.add_scalar"(%a) {value = 2.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "fuel.cast"(%a) {dtype = "f64"} : (tensor<4xf32>) -> tensor<4xf64>
  return %0, %1 : tensor<4xf32>, tensor<4xf64>
}
