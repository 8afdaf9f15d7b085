// RUN: not python -m compiler.opt %s --split-input-file --no-reproducer \
// RUN:   --pass-pipeline='builtin.module(fuel-to-linalg)' 2>&1 | filecheck %s
// RUN: not python -m compiler.opt %s --split-input-file --no-reproducer --no-verify-types \
// RUN:   --pass-pipeline='builtin.module(fuel-to-linalg)' 2>&1 | filecheck %s --check-prefix=LOWER

// What fuel-to-linalg refuses on ? extents, each a diagnostic naming the op
// and what to do.

// -1 keeps the input's extent; a new leading axis has none to keep.
// The type verifier refuses it before any pass, at the op; the lowering too.
// CHECK: to_linalg_dynamic_errors.mlir:14:8: error: 'fuel.broadcast_to' op operands (f32[?]) break the op's rule: BroadcastTo to [-1, -1]: -1 (keep the input's extent) on a new leading axis of a rank-1 input
// LOWER: error: fuel-to-linalg: lowering fuel.broadcast_to(tensor<?xf32>) -> (tensor<?x?xf32>) params={'shape': (-1, -1)} failed: DialectError: BroadcastTo to [-1, -1]: -1 (keep the input's extent) on a new leading axis of a rank-1 input
func.func @broadcast_new_axis(%x: tensor<?xf32>) -> tensor<?x?xf32> {
  %0 = "fuel.broadcast_to"(%x) {shape = [-1, -1]} : (tensor<?xf32>) -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}

// -----

// A grouped (not depthwise) conv has no kernel with a run-time batch.
// CHECK: error: fuel-to-linalg: Conv2D tensor<?x4x6x6xf32> (groups=2, stride (1, 1), dilation (1, 1)): a run-time batch needs the cpu direct kernel (batch_dims); compile it for a static batch
func.func @grouped_conv(%x: tensor<?x4x6x6xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<?x4x4x4xf32> {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [0, 0], stride = [1, 1]} : (tensor<?x4x6x6xf32>, tensor<4x2x3x3xf32>) -> tensor<?x4x4x4xf32>
  return %0 : tensor<?x4x4x4xf32>
}

// -----

// A ? spatial size: only the cpu kernel of conv_spatial takes it (the
// platform-neutral rules here have none); a static graph's kernels are
// specialised on it.
// CHECK: error: fuel-to-linalg: Conv2D tensor<1x4x?x?xf32> (groups=1, stride (1, 1), dilation (1, 1), kernel 3x3): a run-time image size needs the cpu spatial kernel (``spatial_class``); compile it for a static image size
func.func @spatial_conv(%x: tensor<1x4x?x?xf32>, %w: tensor<8x4x3x3xf32>) -> tensor<1x8x?x?xf32> {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x4x?x?xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x?x?xf32>
  return %0 : tensor<1x8x?x?xf32>
}
