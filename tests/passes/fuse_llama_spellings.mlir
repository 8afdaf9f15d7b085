// REQUIRES: fused-dialect
// RUN: python -m compiler.opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{target=cpu:x86-64-v3 runtime=false})' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=primitives_f32 runtime=false})' | filecheck %s --check-prefix=NOKERNEL

// A Llama block as exporters spell it: RoPE's rotate-half (Slice, Neg,
// Concat, x * cos + rot * sin) fuses to Rope, HF's RMSNorm (x * Recip(sqrt(
// mean(x^2) + eps)), then * weight) to RmsNormLastDim with its weight. A
// table without the kernels keeps the spelling.

// CHECK-LABEL: func.func @rope
// CHECK:         %[[R:.*]] = "fuel.rope"(%arg0, %arg1, %arg2) {interleaved = false} : (tensor<1x2x4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NEXT:    return %[[R]]
// NOKERNEL-LABEL: func.func @rope
// NOKERNEL:      "fuel.concat"
func.func @rope(%x: tensor<1x2x4x8xf32>, %cos: tensor<4x8xf32>, %sin: tensor<4x8xf32>) -> tensor<1x2x4x8xf32> {
  %0 = "fuel.slice"(%x) {dim = 3 : i64, len = 4 : i64, start = 0 : i64} : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %1 = "fuel.slice"(%x) {dim = 3 : i64, len = 4 : i64, start = 4 : i64} : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %2 = "fuel.neg"(%1) : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %3 = "fuel.concat"(%2, %0) {dim = 3 : i64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x8xf32>
  %4 = "fuel.broadcast_to"(%cos) {shape = [1, 2, 4, 8]} : (tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
  %5 = "fuel.mul"(%x, %4) : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %6 = "fuel.broadcast_to"(%sin) {shape = [1, 2, 4, 8]} : (tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
  %7 = "fuel.mul"(%3, %6) : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %8 = "fuel.add"(%5, %7) : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %8 : tensor<1x2x4x8xf32>
}

// -----

// The halves swapped (concat(-x1, x2)) is no rotation: nothing fuses.
// CHECK-LABEL: func.func @not_rope
// CHECK-NOT:     "fuel.rope"
// CHECK:         "fuel.concat"
func.func @not_rope(%x: tensor<1x2x4x8xf32>, %cos: tensor<4x8xf32>, %sin: tensor<4x8xf32>) -> tensor<1x2x4x8xf32> {
  %0 = "fuel.slice"(%x) {dim = 3 : i64, len = 4 : i64, start = 0 : i64} : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %1 = "fuel.slice"(%x) {dim = 3 : i64, len = 4 : i64, start = 4 : i64} : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %2 = "fuel.neg"(%0) : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %3 = "fuel.concat"(%2, %1) {dim = 3 : i64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x8xf32>
  %4 = "fuel.broadcast_to"(%cos) {shape = [1, 2, 4, 8]} : (tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
  %5 = "fuel.mul"(%x, %4) : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %6 = "fuel.broadcast_to"(%sin) {shape = [1, 2, 4, 8]} : (tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
  %7 = "fuel.mul"(%3, %6) : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %8 = "fuel.add"(%5, %7) : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %8 : tensor<1x2x4x8xf32>
}

// -----

// CHECK-LABEL: func.func @rms_norm
// CHECK:         %[[N:.*]] = "fuel.rms_norm_last_dim"(%arg0, %arg1) {eps = 9.9999999747524271E-7 : f64} : (tensor<2x3x16xf32>, tensor<16xf32>) -> tensor<2x3x16xf32>
// CHECK-NEXT:    return %[[N]]
// NOKERNEL-LABEL: func.func @rms_norm
// NOKERNEL:      "fuel.recip"
func.func @rms_norm(%x: tensor<2x3x16xf32>, %w: tensor<16xf32>) -> tensor<2x3x16xf32> {
  %0 = "fuel.sqr"(%x) : (tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
  %1 = "fuel.mean_dim"(%0) {axis = 2 : i64} : (tensor<2x3x16xf32>) -> tensor<2x3xf32>
  %2 = "fuel.unsqueeze"(%1) {dim = 2 : i64} : (tensor<2x3xf32>) -> tensor<2x3x1xf32>
  %3 = "fuel.add_scalar"(%2) {value = 9.9999999747524271E-7 : f64} : (tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
  %4 = "fuel.sqrt"(%3) : (tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
  %5 = "fuel.recip"(%4) : (tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
  %6 = "fuel.broadcast_to"(%5) {shape = [2, 3, 16]} : (tensor<2x3x1xf32>) -> tensor<2x3x16xf32>
  %7 = "fuel.mul"(%x, %6) : (tensor<2x3x16xf32>, tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
  %8 = "fuel.broadcast_to"(%w) {shape = [2, 3, 16]} : (tensor<16xf32>) -> tensor<2x3x16xf32>
  %9 = "fuel.mul"(%8, %7) : (tensor<2x3x16xf32>, tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
  return %9 : tensor<2x3x16xf32>
}

// -----

// The inverse RMS has another user: nothing fuses.
// CHECK-LABEL: func.func @rms_norm_shared
// CHECK-NOT:     "fuel.rms_norm_last_dim"
// CHECK:         "fuel.recip"
func.func @rms_norm_shared(%x: tensor<2x3x16xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x1xf32>) {
  %0 = "fuel.sqr"(%x) : (tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
  %1 = "fuel.mean_dim"(%0) {axis = 2 : i64} : (tensor<2x3x16xf32>) -> tensor<2x3xf32>
  %2 = "fuel.unsqueeze"(%1) {dim = 2 : i64} : (tensor<2x3xf32>) -> tensor<2x3x1xf32>
  %3 = "fuel.add_scalar"(%2) {value = 9.9999999747524271E-7 : f64} : (tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
  %4 = "fuel.sqrt"(%3) : (tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
  %5 = "fuel.recip"(%4) : (tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
  %6 = "fuel.broadcast_to"(%5) {shape = [2, 3, 16]} : (tensor<2x3x1xf32>) -> tensor<2x3x16xf32>
  %7 = "fuel.mul"(%x, %6) : (tensor<2x3x16xf32>, tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
  return %7, %5 : tensor<2x3x16xf32>, tensor<2x3x1xf32>
}
