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

// On ? extents a recipe is instantiated with the extents as symbols
// (decompose_dynamic.mlir); one needing a symbolic param the dialect cannot
// write declines, naming the param. A weight broadcast to ? rows (a new
// axis of a ? extent):
// CHECK-LABEL: func.func @dynamic_linear
// CHECK-NEXT:    "fuel.fused_linear"(%arg0, %arg1, %arg2)
func.func @dynamic_linear(%a: tensor<?x3xf32>, %b: tensor<3x4xf32>, %bias: tensor<4xf32>) -> tensor<?x4xf32> {
  // expected-warning@+1 {{decompose declined: the recipe on symbolic extents needs BroadcastTo to [d0,4]: the symbolic extent d0 of axis 0 is not the input's own extent there ([1,4])}}
  %0 = "fuel.fused_linear"(%a, %b, %bias) : (tensor<?x3xf32>, tensor<3x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}

// -----

// A row maximum broadcast from 1 to a ? row length:
// CHECK-LABEL: func.func @dynamic_rows
// CHECK-NEXT:    "fuel.softmax_last_dim"(%arg0)
func.func @dynamic_rows(%x: tensor<4x?xf32>) -> tensor<4x?xf32> {
  // expected-warning@+1 {{needs BroadcastTo to [4,d0]: the symbolic extent d0 of axis 1 is not the input's own extent there ([4,1])}}
  %0 = "fuel.softmax_last_dim"(%x) : (tensor<4x?xf32>) -> tensor<4x?xf32>
  return %0 : tensor<4x?xf32>
}

// -----

// The conv recipe's reshapes to a ? batch:
// CHECK-LABEL: func.func @dynamic_conv
// CHECK-NEXT:    "fuel.conv2d"(%arg0, %arg1, %arg2)
func.func @dynamic_conv(%x: tensor<?x4x6x6xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) -> tensor<?x8x6x6xf32> {
  // expected-warning@+1 {{decompose declined: recipe rejected: BadAttrs: Reshape.shape: (d0, 8, 6, 6) is not a value of kind i64s}}
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<?x4x6x6xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<?x8x6x6xf32>
  return %0 : tensor<?x8x6x6xf32>
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
