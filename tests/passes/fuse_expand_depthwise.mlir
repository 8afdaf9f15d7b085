// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=expand_conv_f32 runtime=false})' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=expand_conv_f32 runtime=false expand_depthwise=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=conv_f32 runtime=false})' | filecheck %s --check-prefix=NOKERNEL
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-decompose{table=conv_f32})' | filecheck %s --check-prefix=DECOMP

// fuel-fuse replaces a depthwise Conv2D reading a 1x1 expansion Conv2D (its
// only user) by one ExpandDepthwise, after the epilogue folds, whose clamps
// and SiLUs it carries (fuse_expand_depthwise), where the table has the kernel.

// MobileNetV2: 1x1 expand + ReLU6, depthwise 3x3 s2 + ReLU6.
// CHECK-LABEL: func.func @relu6
// CHECK-NEXT:    %[[F:.*]] = "fuel.expand_depthwise"(%arg0, %arg1, %arg2, %arg3, %arg4) {clamp_max = 6.000000e+00 : f64, clamp_min = 0.000000e+00 : f64, expand_clamp_max = 6.000000e+00 : f64, expand_clamp_min = 0.000000e+00 : f64, padding = [1, 1], stride = [2, 2]}
// CHECK-NOT:     fuel.conv2d
// CHECK-NOT:     fuel.clamp
// CHECK-NEXT:    return %[[F]]
// OFF-LABEL:   func.func @relu6
// OFF-COUNT-2:   "fuel.conv2d"
// OFF-NEXT:      return
// NOKERNEL-LABEL: func.func @relu6
// NOKERNEL-COUNT-2: "fuel.conv2d"
// NOKERNEL-NEXT: return
func.func @relu6(%x: tensor<2x4x8x8xf32>, %we: tensor<16x4x1x1xf32>, %be: tensor<16xf32>, %wd: tensor<16x1x3x3xf32>, %bd: tensor<16xf32>) -> tensor<2x16x4x4xf32> {
  %0 = "fuel.conv2d"(%x, %we, %be) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [0, 0], stride = [1, 1]} : (tensor<2x4x8x8xf32>, tensor<16x4x1x1xf32>, tensor<16xf32>) -> tensor<2x16x8x8xf32>
  %1 = "fuel.clamp"(%0) {min = 0.0 : f64, max = 6.0 : f64} : (tensor<2x16x8x8xf32>) -> tensor<2x16x8x8xf32>
  %2 = "fuel.conv2d"(%1, %wd, %bd) {dilation = [1, 1], groups = 16 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [2, 2]} : (tensor<2x16x8x8xf32>, tensor<16x1x3x3xf32>, tensor<16xf32>) -> tensor<2x16x4x4xf32>
  %3 = "fuel.clamp"(%2) {min = 0.0 : f64, max = 6.0 : f64} : (tensor<2x16x4x4xf32>) -> tensor<2x16x4x4xf32>
  return %3 : tensor<2x16x4x4xf32>
}

// -----

// A SiLU (Mul(y, Sigmoid(y))) on the depthwise conv, a 5x5 one; the
// expansion's ReLU6.
// CHECK-LABEL: func.func @silu
// CHECK-NEXT:    %[[F:.*]] = "fuel.expand_depthwise"(%arg0, %arg1, %arg2, %arg3, %arg4) {expand_clamp_max = 6.000000e+00 : f64, expand_clamp_min = 0.000000e+00 : f64, padding = [2, 2], silu = true, stride = [1, 1]}
// CHECK-NEXT:    return %[[F]]
func.func @silu(%x: tensor<2x4x8x8xf32>, %we: tensor<8x4x1x1xf32>, %be: tensor<8xf32>, %wd: tensor<8x1x5x5xf32>, %bd: tensor<8xf32>) -> tensor<2x8x8x8xf32> {
  %0 = "fuel.conv2d"(%x, %we, %be) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [0, 0], stride = [1, 1]} : (tensor<2x4x8x8xf32>, tensor<8x4x1x1xf32>, tensor<8xf32>) -> tensor<2x8x8x8xf32>
  %1 = "fuel.clamp"(%0) {min = 0.0 : f64, max = 6.0 : f64} : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %2 = "fuel.conv2d"(%1, %wd, %bd) {dilation = [1, 1], groups = 8 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [2, 2], stride = [1, 1]} : (tensor<2x8x8x8xf32>, tensor<8x1x5x5xf32>, tensor<8xf32>) -> tensor<2x8x8x8xf32>
  %3 = "fuel.sigmoid"(%2) : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %4 = "fuel.mul"(%2, %3) : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  return %4 : tensor<2x8x8x8xf32>
}

// -----

// A SiLU on the expansion: the kernel does not serve it (slower than the two
// kernels on AVX2): not fused.
// CHECK-LABEL: func.func @expand_silu
// CHECK-COUNT-2: "fuel.conv2d"
// CHECK-NEXT:    return
func.func @expand_silu(%x: tensor<2x4x8x8xf32>, %we: tensor<8x4x1x1xf32>, %be: tensor<8xf32>, %wd: tensor<8x1x3x3xf32>, %bd: tensor<8xf32>) -> tensor<2x8x8x8xf32> {
  %0 = "fuel.conv2d"(%x, %we, %be) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [0, 0], stride = [1, 1]} : (tensor<2x4x8x8xf32>, tensor<8x4x1x1xf32>, tensor<8xf32>) -> tensor<2x8x8x8xf32>
  %1 = "fuel.sigmoid"(%0) : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %2 = "fuel.mul"(%0, %1) : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %3 = "fuel.conv2d"(%2, %wd, %bd) {dilation = [1, 1], groups = 8 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<2x8x8x8xf32>, tensor<8x1x3x3xf32>, tensor<8xf32>) -> tensor<2x8x8x8xf32>
  return %3 : tensor<2x8x8x8xf32>
}

// -----

// The expansion has another user (its output must be written anyway): not fused.
// CHECK-LABEL: func.func @shared
// CHECK:         "fuel.conv2d"
// CHECK:         "fuel.conv2d"
// CHECK-NOT:     fuel.expand_depthwise
func.func @shared(%x: tensor<2x4x8x8xf32>, %we: tensor<8x4x1x1xf32>, %be: tensor<8xf32>, %wd: tensor<8x1x3x3xf32>, %bd: tensor<8xf32>) -> (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) {
  %0 = "fuel.conv2d"(%x, %we, %be) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [0, 0], stride = [1, 1]} : (tensor<2x4x8x8xf32>, tensor<8x4x1x1xf32>, tensor<8xf32>) -> tensor<2x8x8x8xf32>
  %1 = "fuel.conv2d"(%0, %wd, %bd) {dilation = [1, 1], groups = 8 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<2x8x8x8xf32>, tensor<8x1x3x3xf32>, tensor<8xf32>) -> tensor<2x8x8x8xf32>
  return %0, %1 : tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>
}

// -----

// A 3x3 groups-1 conv after the 1x1 (not depthwise), and a Ce of 12 (not a
// multiple of the kernel's block of 8): not fused.
// CHECK-LABEL: func.func @not_depthwise
// CHECK-NOT:     fuel.expand_depthwise
// CHECK-LABEL: func.func @odd_channels
// CHECK-NOT:     fuel.expand_depthwise
func.func @not_depthwise(%x: tensor<2x4x8x8xf32>, %we: tensor<8x4x1x1xf32>, %be: tensor<8xf32>, %wd: tensor<8x8x3x3xf32>, %bd: tensor<8xf32>) -> tensor<2x8x8x8xf32> {
  %0 = "fuel.conv2d"(%x, %we, %be) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [0, 0], stride = [1, 1]} : (tensor<2x4x8x8xf32>, tensor<8x4x1x1xf32>, tensor<8xf32>) -> tensor<2x8x8x8xf32>
  %1 = "fuel.conv2d"(%0, %wd, %bd) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<2x8x8x8xf32>, tensor<8x8x3x3xf32>, tensor<8xf32>) -> tensor<2x8x8x8xf32>
  return %1 : tensor<2x8x8x8xf32>
}
func.func @odd_channels(%x: tensor<2x4x8x8xf32>, %we: tensor<12x4x1x1xf32>, %be: tensor<12xf32>, %wd: tensor<12x1x3x3xf32>, %bd: tensor<12xf32>) -> tensor<2x12x8x8xf32> {
  %0 = "fuel.conv2d"(%x, %we, %be) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [0, 0], stride = [1, 1]} : (tensor<2x4x8x8xf32>, tensor<12x4x1x1xf32>, tensor<12xf32>) -> tensor<2x12x8x8xf32>
  %1 = "fuel.conv2d"(%0, %wd, %bd) {dilation = [1, 1], groups = 12 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<2x12x8x8xf32>, tensor<12x1x3x3xf32>, tensor<12xf32>) -> tensor<2x12x8x8xf32>
  return %1 : tensor<2x12x8x8xf32>
}

// -----

// A target with the Conv2D kernel but not this one: fuel-decompose writes the
// recipe, the two Conv2Ds, each with its epilogue.
// CHECK-LABEL: func.func @recipe
// CHECK-NEXT:    "fuel.expand_depthwise"
// DECOMP-LABEL: func.func @recipe
// DECOMP-NEXT:   %[[E:.*]] = "fuel.conv2d"(%arg0, %arg1, %arg2) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [0, 0], silu = true, stride = [1, 1]}
// DECOMP-NEXT:   %[[D:.*]] = "fuel.conv2d"(%[[E]], %arg3, %arg4) {clamp_max = 6.000000e+00 : f64, clamp_min = 0.000000e+00 : f64, dilation = [1, 1], groups = 8 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [2, 2]}
// DECOMP-NEXT:   return %[[D]]
func.func @recipe(%arg0: tensor<2x4x6x6xf32>, %arg1: tensor<8x4x1x1xf32>, %arg2: tensor<8xf32>, %arg3: tensor<8x1x3x3xf32>, %arg4: tensor<8xf32>) -> tensor<2x8x3x3xf32> {
  %0 = "fuel.expand_depthwise"(%arg0, %arg1, %arg2, %arg3, %arg4) {clamp_max = 6.0 : f64, clamp_min = 0.0 : f64, expand_silu = true, padding = [1, 1], stride = [2, 2]} : (tensor<2x4x6x6xf32>, tensor<8x4x1x1xf32>, tensor<8xf32>, tensor<8x1x3x3xf32>, tensor<8xf32>) -> tensor<2x8x3x3xf32>
  return %0 : tensor<2x8x3x3xf32>
}
