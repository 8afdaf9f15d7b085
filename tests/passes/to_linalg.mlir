// RUN: python -m compiler.opt %s --split-input-file --pass-pipeline='builtin.module(fuel-to-linalg)' | filecheck %s
// RUN: python -m compiler.opt %s --split-input-file --pass-pipeline='builtin.module(fuel-fuse,fuel-to-linalg)' | filecheck %s --check-prefix=FUSED

// A dynamic-shape add becomes one elementwise linalg.generic over tensor.empty
// sized by tensor.dim: the kernel is shape-generic.
// CHECK-LABEL: func.func @add
// CHECK-NOT:     fuel.
// CHECK:         tensor.dim
// CHECK:         tensor.empty
// CHECK:         linalg.generic
// CHECK:           arith.addf
// CHECK:         return
func.func @add(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %0 = "fuel.add"(%a, %b) : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}

// -----

// f32 matmul lowers to the named op the CPU strategy vectorizes; the
// accumulator starts from zeros.
// CHECK-LABEL: func.func @matmul
// CHECK:         linalg.fill
// CHECK:         linalg.matmul
// CHECK:         return
func.func @matmul(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>) -> tensor<4x3xf32> {
  %0 = "fuel.mat_mul"(%a, %b) : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// A spelled-out linear + bias fuses, and the fused op lowers to one matmul
// whose accumulator is the broadcast bias (no separate add afterwards).
// FUSED-LABEL: func.func @linear
// FUSED-NOT:     fuel.
// FUSED:         linalg.generic
// FUSED:         linalg.matmul
// FUSED-NOT:     arith.addf
// FUSED:         return
func.func @linear(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>, %b: tensor<3xf32>) -> tensor<4x3xf32> {
  %0 = "fuel.mat_mul"(%x, %w) : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %1 = "fuel.reshape"(%b) {shape = [1, 3]} : (tensor<3xf32>) -> tensor<1x3xf32>
  %2 = "fuel.broadcast_to"(%1) {shape = [4, 3]} : (tensor<1x3xf32>) -> tensor<4x3xf32>
  %3 = "fuel.add"(%0, %2) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  return %3 : tensor<4x3xf32>
}
