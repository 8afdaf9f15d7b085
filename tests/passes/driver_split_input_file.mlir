// RUN: python -m compiler.opt %s --split-input-file --pass-pipeline='builtin.module(fuel-cse,cse)' | filecheck %s

// Each chunk is parsed and transformed on its own; outputs are joined with
// the split marker.

// CHECK-LABEL: func.func @fuel_chunk
// CHECK-NEXT:    %[[A:.*]] = "fuel.add"(%arg0, %arg0)
// CHECK-NEXT:    %[[M:.*]] = "fuel.mul"(%[[A]], %[[A]])
// CHECK-NEXT:    return %[[M]]
func.func @fuel_chunk(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "fuel.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = "fuel.mul"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----
// CHECK: // -----
// CHECK-LABEL: func.func @arith_chunk
// CHECK-NEXT:    %[[A:.*]] = arith.addi %arg0, %arg0
// CHECK-NEXT:    arith.muli %[[A]], %[[A]]
func.func @arith_chunk(%a: i32) -> i32 {
  %0 = arith.addi %a, %a : i32
  %1 = arith.addi %a, %a : i32
  %2 = arith.muli %0, %1 : i32
  return %2 : i32
}
