// RUN: python -m compiler.opt %s --split-input-file --pass-pipeline='builtin.module(fuel-cse,fuel-dce)' | filecheck %s

// fuel-cse and fuel-dce on ? extents: two ops are one computation when their
// name, operands, attributes and result types agree, ? types included.

// Identical ops on a ? batch merge, commutative operands in either order.
// CHECK-LABEL: func.func @merge
// CHECK-NEXT:    %[[A:.*]] = "fuel.add"(%arg0, %arg1) : (tensor<?x768xf32>, tensor<?x768xf32>) -> tensor<?x768xf32>
// CHECK-NEXT:    %[[E:.*]] = "fuel.exp"(%[[A]]) : (tensor<?x768xf32>) -> tensor<?x768xf32>
// CHECK-NEXT:    %[[M:.*]] = "fuel.mul"(%[[E]], %[[E]])
// CHECK-NEXT:    return %[[M]]
func.func @merge(%a: tensor<?x768xf32>, %b: tensor<?x768xf32>) -> tensor<?x768xf32> {
  %0 = "fuel.add"(%a, %b) : (tensor<?x768xf32>, tensor<?x768xf32>) -> tensor<?x768xf32>
  %1 = "fuel.add"(%b, %a) : (tensor<?x768xf32>, tensor<?x768xf32>) -> tensor<?x768xf32>
  %2 = "fuel.exp"(%0) : (tensor<?x768xf32>) -> tensor<?x768xf32>
  %3 = "fuel.exp"(%1) : (tensor<?x768xf32>) -> tensor<?x768xf32>
  %4 = "fuel.mul"(%2, %3) : (tensor<?x768xf32>, tensor<?x768xf32>) -> tensor<?x768xf32>
  return %4 : tensor<?x768xf32>
}

// -----

// The same op with a static and a ? result type is two values (types differ).
// CHECK-LABEL: func.func @refined
// CHECK-NEXT:    "fuel.exp"(%arg0) : (tensor<?x4xf32>) -> tensor<?x4xf32>
// CHECK-NEXT:    "fuel.exp"(%arg0) : (tensor<?x4xf32>) -> tensor<2x4xf32>
func.func @refined(%a: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<2x4xf32>) {
  %0 = "fuel.exp"(%a) : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %1 = "fuel.exp"(%a) : (tensor<?x4xf32>) -> tensor<2x4xf32>
  return %0, %1 : tensor<?x4xf32>, tensor<2x4xf32>
}

// -----

// Views keeping a ? extent merge by their params (-1: keep the input's extent).
// CHECK-LABEL: func.func @views
// CHECK-NEXT:    %[[B:.*]] = "fuel.broadcast_to"(%arg0) {shape = [-1, 8]} : (tensor<?x1xf32>) -> tensor<?x8xf32>
// CHECK-NEXT:    "fuel.sub"(%[[B]], %[[B]])
func.func @views(%a: tensor<?x1xf32>) -> tensor<?x8xf32> {
  %0 = "fuel.broadcast_to"(%a) {shape = [-1, 8]} : (tensor<?x1xf32>) -> tensor<?x8xf32>
  %1 = "fuel.broadcast_to"(%a) {shape = [-1, 8]} : (tensor<?x1xf32>) -> tensor<?x8xf32>
  %2 = "fuel.sub"(%0, %1) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %2 : tensor<?x8xf32>
}

// -----

// An identity cast and a scale by 1 on ? extents forward their operand; the
// unused chain on ? extents is erased.
// CHECK-LABEL: func.func @simplify_and_dce
// CHECK-NEXT:    return %arg0 : tensor<?x?xf32>
func.func @simplify_and_dce(%a: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %0 = "fuel.cast"(%a) {dtype = "f32"} : (tensor<?x?xf32>) -> tensor<?x?xf32>
  %1 = "fuel.mul_scalar"(%0) {value = 1.0 : f64} : (tensor<?x?xf32>) -> tensor<?x?xf32>
  %2 = "fuel.exp"(%1) : (tensor<?x?xf32>) -> tensor<?x?xf32>
  %3 = "fuel.sum_dim"(%2) {axis = 1 : i64} : (tensor<?x?xf32>) -> tensor<?xf32>
  return %1 : tensor<?x?xf32>
}
