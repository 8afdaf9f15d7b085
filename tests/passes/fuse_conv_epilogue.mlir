// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=conv_f32 runtime=false})' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=conv_f32 runtime=false epilogues=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=primitives_f32 runtime=false})' | filecheck %s --check-prefix=NOKERNEL
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-decompose{all=true})' | filecheck %s --check-prefix=DECOMP

// fuel-fuse folds a Relu or Clamp that is a Conv2D's only user into the conv's
// clamp_min / clamp_max, and a SiLU (Mul(y, Sigmoid(y)), its two ops the conv's
// only users) into its silu, and a GeluErf into its gelu (fold_conv_epilogues),
// where the conv keeps a kernel.

// A Relu: clamp_min = 0, the top open.
// CHECK-LABEL: func.func @relu
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1, %arg2) {clamp_min = 0.000000e+00 : f64, dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]}
// CHECK-NOT:     fuel.relu
// CHECK-NEXT:    return %[[C]]
// OFF-LABEL:   func.func @relu
// OFF:           "fuel.relu"
// NOKERNEL-LABEL: func.func @relu
// NOKERNEL:      "fuel.relu"
func.func @relu(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) -> tensor<1x8x6x6xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x6x6xf32>
  %1 = "fuel.relu"(%0) : (tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  return %1 : tensor<1x8x6x6xf32>
}

// -----

// A ReLU6 (Clamp 0..6) on a depthwise conv: both bounds.
// CHECK-LABEL: func.func @relu6_depthwise
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1) {clamp_max = 6.000000e+00 : f64, clamp_min = 0.000000e+00 : f64, dilation = [1, 1], groups = 4 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [2, 2]}
// CHECK-NEXT:    return %[[C]]
func.func @relu6_depthwise(%x: tensor<1x4x6x6xf32>, %w: tensor<4x1x3x3xf32>) -> tensor<1x4x3x3xf32> {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 4 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [2, 2]} : (tensor<1x4x6x6xf32>, tensor<4x1x3x3xf32>) -> tensor<1x4x3x3xf32>
  %1 = "fuel.clamp"(%0) {min = 0.0 : f64, max = 6.0 : f64} : (tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  return %1 : tensor<1x4x3x3xf32>
}

// -----

// A Clamp open at the bottom (min = -inf) keeps only clamp_max.
// CHECK-LABEL: func.func @upper_only
// CHECK-NEXT:    "fuel.conv2d"(%arg0, %arg1) {clamp_max = 1.000000e+00 : f64, dilation
// CHECK-NEXT:    return
func.func @upper_only(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32> {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  %1 = "fuel.clamp"(%0) {min = 0xFFF0000000000000 : f64, max = 1.0 : f64} : (tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  return %1 : tensor<1x8x6x6xf32>
}

// -----

// The conv's result has a second user: the Relu stays, the conv unclamped.
// CHECK-LABEL: func.func @shared
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1) {dilation
// CHECK-NEXT:    %[[R:.*]] = "fuel.relu"(%[[C]])
// CHECK-NEXT:    return %[[R]], %[[C]]
func.func @shared(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x3x3xf32>) -> (tensor<1x8x6x6xf32>, tensor<1x8x6x6xf32>) {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  %1 = "fuel.relu"(%0) : (tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  return %1, %0 : tensor<1x8x6x6xf32>, tensor<1x8x6x6xf32>
}

// -----

// Two activations in a row: the first folds, the second (on a conv that has
// a clamp already) stays.
// CHECK-LABEL: func.func @twice
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1) {clamp_min = 0.000000e+00 : f64, dilation
// CHECK-NEXT:    %[[K:.*]] = "fuel.clamp"(%[[C]])
// CHECK-NEXT:    return %[[K]]
func.func @twice(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32> {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  %1 = "fuel.relu"(%0) : (tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  %2 = "fuel.clamp"(%1) {min = 0.0 : f64, max = 6.0 : f64} : (tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  return %2 : tensor<1x8x6x6xf32>
}

// -----

// Decomposed, a clamped conv is its recipe followed by the same Clamp (an
// open side as an infinite bound).
// DECOMP-LABEL: func.func @clamped_recipe
// DECOMP-NOT:     "fuel.conv2d"
// DECOMP:         %[[MM:.*]] = "fuel.mat_mul"
// DECOMP:         %[[Y:.*]] = "fuel.reshape"(%[[MM]])
// DECOMP-NEXT:    %[[K:.*]] = "fuel.clamp"(%[[Y]]) {max = 0x7FF0000000000000 : f64, min = 0.000000e+00 : f64}
// DECOMP-NEXT:    return %[[K]]
func.func @clamped_recipe(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x1x1xf32>) -> tensor<1x8x6x6xf32> {
  %0 = "fuel.conv2d"(%x, %w) {clamp_min = 0.0 : f64, dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [0, 0], stride = [1, 1]} : (tensor<1x4x6x6xf32>, tensor<8x4x1x1xf32>) -> tensor<1x8x6x6xf32>
  return %0 : tensor<1x8x6x6xf32>
}

// -----

// SiLU: Mul(y, Sigmoid(y)), either operand order, folds into silu.
// CHECK-LABEL: func.func @silu
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1, %arg2) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], silu = true, stride = [1, 1]}
// CHECK-NOT:     fuel.sigmoid
// CHECK-NOT:     fuel.mul
// CHECK-NEXT:    return %[[C]]
// OFF-LABEL:   func.func @silu
// OFF:           "fuel.sigmoid"
// OFF:           "fuel.mul"
// NOKERNEL-LABEL: func.func @silu
// NOKERNEL:      "fuel.mul"
func.func @silu(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) -> tensor<1x8x6x6xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x6x6xf32>
  %1 = "fuel.sigmoid"(%0) : (tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  %2 = "fuel.mul"(%1, %0) : (tensor<1x8x6x6xf32>, tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  return %2 : tensor<1x8x6x6xf32>
}

// -----

// The Silu primitive (the Graph API's x.silu(), torch's SiLU) folds the same way.
// CHECK-LABEL: func.func @silu_op
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], silu = true, stride = [1, 1]}
// CHECK-NEXT:    return %[[C]]
func.func @silu_op(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32> {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  %1 = "fuel.silu"(%0) : (tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  return %1 : tensor<1x8x6x6xf32>
}

// -----

// The exact GELU (GeluErf: ONNX Gelu, torch's default nn.GELU) folds into gelu;
// the fused op's recipe ends with the same GeluErf.
// CHECK-LABEL: func.func @gelu
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1, %arg2) {dilation = [1, 1], gelu = true, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]}
// CHECK-NEXT:    return %[[C]]
// OFF-LABEL:   func.func @gelu
// OFF:           "fuel.gelu_erf"
// NOKERNEL-LABEL: func.func @gelu
// NOKERNEL:      "fuel.gelu_erf"
func.func @gelu(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) -> tensor<1x8x6x6xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x6x6xf32>
  %1 = "fuel.gelu_erf"(%0) : (tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  return %1 : tensor<1x8x6x6xf32>
}

// -----

// A conv1d imported as a Conv2D over [N, C, 1, W], squeezed: the activation
// behind the view moves above it and folds.
// CHECK-LABEL: func.func @gelu_behind_a_view
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1, %arg2) {dilation = [1, 1], gelu = true, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [0, 1], stride = [1, 2]}
// CHECK-NEXT:    %[[V:.*]] = "fuel.reshape"(%[[C]]) {shape = [1, 8, 20]}
// CHECK-NEXT:    return %[[V]]
// OFF-LABEL:   func.func @gelu_behind_a_view
// OFF:           "fuel.gelu_erf"
func.func @gelu_behind_a_view(%x: tensor<1x4x1x40xf32>, %w: tensor<8x4x1x3xf32>, %b: tensor<8xf32>) -> tensor<1x8x20xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [0, 1], stride = [1, 2]} : (tensor<1x4x1x40xf32>, tensor<8x4x1x3xf32>, tensor<8xf32>) -> tensor<1x8x1x20xf32>
  %1 = "fuel.reshape"(%0) {shape = [1, 8, 20]} : (tensor<1x8x1x20xf32>) -> tensor<1x8x20xf32>
  %2 = "fuel.gelu_erf"(%1) : (tensor<1x8x20xf32>) -> tensor<1x8x20xf32>
  return %2 : tensor<1x8x20xf32>
}

// -----

// wav2vec2's first conv (1 channel, k10 s5, no bias: a conv1d stem) takes its
// GELU too: the stem kernel applies it in its register tiles.
// CHECK-LABEL: func.func @gelu_conv1d_stem
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1) {dilation = [1, 1], gelu = true, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [0, 0], stride = [1, 5]}
// CHECK-NEXT:    %[[V:.*]] = "fuel.reshape"(%[[C]]) {shape = [2, 16, 159]}
// CHECK-NEXT:    return %[[V]]
// OFF-LABEL:   func.func @gelu_conv1d_stem
// OFF:           "fuel.gelu_erf"
func.func @gelu_conv1d_stem(%x: tensor<2x1x1x800xf32>, %w: tensor<16x1x1x10xf32>) -> tensor<2x16x159xf32> {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [0, 0], stride = [1, 5]} : (tensor<2x1x1x800xf32>, tensor<16x1x1x10xf32>) -> tensor<2x16x1x159xf32>
  %1 = "fuel.reshape"(%0) {shape = [2, 16, 159]} : (tensor<2x16x1x159xf32>) -> tensor<2x16x159xf32>
  %2 = "fuel.gelu_erf"(%1) : (tensor<2x16x159xf32>) -> tensor<2x16x159xf32>
  return %2 : tensor<2x16x159xf32>
}

// -----

// The view is also an output: the activation stays after it.
// CHECK-LABEL: func.func @view_used_elsewhere
// CHECK:         "fuel.relu"
func.func @view_used_elsewhere(%x: tensor<1x4x1x40xf32>, %w: tensor<8x4x1x3xf32>) -> (tensor<1x8x20xf32>, tensor<1x8x20xf32>) {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [0, 1], stride = [1, 2]} : (tensor<1x4x1x40xf32>, tensor<8x4x1x3xf32>) -> tensor<1x8x1x20xf32>
  %1 = "fuel.reshape"(%0) {shape = [1, 8, 20]} : (tensor<1x8x1x20xf32>) -> tensor<1x8x20xf32>
  %2 = "fuel.relu"(%1) : (tensor<1x8x20xf32>) -> tensor<1x8x20xf32>
  return %1, %2 : tensor<1x8x20xf32>, tensor<1x8x20xf32>
}

// -----

// A conv with a gelu: its recipe ends with the GeluErf.
// DECOMP-LABEL: func.func @gelu_recipe
// DECOMP-NOT:     "fuel.conv2d"
// DECOMP:         %[[Y:.*]] = "fuel.add"
// DECOMP-NEXT:    %[[G:.*]] = "fuel.gelu_erf"(%[[Y]])
// DECOMP-NEXT:    return %[[G]]
func.func @gelu_recipe(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) -> tensor<1x8x6x6xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], gelu = true, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x6x6xf32>
  return %0 : tensor<1x8x6x6xf32>
}

// -----

// The sigmoid is also an output (a gate used elsewhere): nothing folds.
// CHECK-LABEL: func.func @silu_shared
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1) {dilation
// CHECK-NEXT:    %[[S:.*]] = "fuel.sigmoid"(%[[C]])
// CHECK-NEXT:    %[[M:.*]] = "fuel.mul"(%[[C]], %[[S]])
// CHECK-NEXT:    return %[[M]], %[[S]]
func.func @silu_shared(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x3x3xf32>) -> (tensor<1x8x6x6xf32>, tensor<1x8x6x6xf32>) {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  %1 = "fuel.sigmoid"(%0) : (tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  %2 = "fuel.mul"(%0, %1) : (tensor<1x8x6x6xf32>, tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  return %2, %1 : tensor<1x8x6x6xf32>, tensor<1x8x6x6xf32>
}

// -----

// Decomposed, a silu conv is its recipe followed by the same Mul of Sigmoid.
// DECOMP-LABEL: func.func @silu_recipe
// DECOMP-NOT:     "fuel.conv2d"
// DECOMP:         %[[MM:.*]] = "fuel.mat_mul"
// DECOMP:         %[[Y:.*]] = "fuel.reshape"(%[[MM]])
// DECOMP-NEXT:    %[[S:.*]] = "fuel.sigmoid"(%[[Y]])
// DECOMP-NEXT:    %[[M:.*]] = "fuel.mul"(%[[Y]], %[[S]])
// DECOMP-NEXT:    return %[[M]]
func.func @silu_recipe(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x1x1xf32>) -> tensor<1x8x6x6xf32> {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [0, 0], silu = true, stride = [1, 1]} : (tensor<1x4x6x6xf32>, tensor<8x4x1x1xf32>) -> tensor<1x8x6x6xf32>
  return %0 : tensor<1x8x6x6xf32>
}

// -----

// A residual: Add(conv, skip) of the conv's type, the conv's only user, folds
// into its residual operand (the segments say which operand is which), and a
// Relu after it into the clamp: ResNet's Relu(conv + bias + skip) is one conv.
// The skip is computed after the conv: the new conv takes the add's place.
// CHECK-LABEL: func.func @residual_relu
// CHECK-NEXT:    %[[S:.*]] = "fuel.neg"(%arg0)
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1, %arg2, %[[S]]) {clamp_min = 0.000000e+00 : f64, dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1>, padding = [1, 1], residual = true, stride = [1, 1]}
// CHECK-NOT:     fuel.add
// CHECK-NEXT:    return %[[C]]
// OFF-LABEL:   func.func @residual_relu
// OFF:           "fuel.add"
// OFF:           "fuel.relu"
// NOKERNEL-LABEL: func.func @residual_relu
// NOKERNEL:      "fuel.add"
func.func @residual_relu(%x: tensor<2x8x6x6xf32>, %w: tensor<8x8x3x3xf32>, %b: tensor<8xf32>) -> tensor<2x8x6x6xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<2x8x6x6xf32>, tensor<8x8x3x3xf32>, tensor<8xf32>) -> tensor<2x8x6x6xf32>
  %s = "fuel.neg"(%x) : (tensor<2x8x6x6xf32>) -> tensor<2x8x6x6xf32>
  %1 = "fuel.add"(%s, %0) : (tensor<2x8x6x6xf32>, tensor<2x8x6x6xf32>) -> tensor<2x8x6x6xf32>
  %2 = "fuel.relu"(%1) : (tensor<2x8x6x6xf32>) -> tensor<2x8x6x6xf32>
  return %2 : tensor<2x8x6x6xf32>
}

// -----

// MobileNetV2's projection: a linear pointwise conv without a bias, then the
// skip: the lone optional operand is the residual (segments 1, 1, 0, 1).
// CHECK-LABEL: func.func @residual_no_bias
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1, %arg2) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 1>, padding = [0, 0], residual = true, stride = [1, 1]}
// CHECK-NEXT:    return %[[C]]
// DECOMP-LABEL: func.func @residual_no_bias
// DECOMP-NOT:     "fuel.conv2d"
// DECOMP:         %[[MM:.*]] = "fuel.mat_mul"
// DECOMP:         %[[Y:.*]] = "fuel.reshape"(%[[MM]])
// DECOMP-NEXT:    %[[A:.*]] = "fuel.add"(%[[Y]], %arg2)
// DECOMP-NEXT:    return %[[A]]
func.func @residual_no_bias(%x: tensor<2x16x8x8xf32>, %w: tensor<16x16x1x1xf32>, %skip: tensor<2x16x8x8xf32>) -> tensor<2x16x8x8xf32> {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [0, 0], stride = [1, 1]} : (tensor<2x16x8x8xf32>, tensor<16x16x1x1xf32>) -> tensor<2x16x8x8xf32>
  %1 = "fuel.add"(%0, %skip) : (tensor<2x16x8x8xf32>, tensor<2x16x8x8xf32>) -> tensor<2x16x8x8xf32>
  return %1 : tensor<2x16x8x8xf32>
}

// -----

// The conv's result is used twice: the add stays.
// CHECK-LABEL: func.func @residual_shared
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]}
// CHECK-NEXT:    %[[A:.*]] = "fuel.add"(%[[C]], %arg2)
// CHECK-NEXT:    return %[[A]], %[[C]]
func.func @residual_shared(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x3x3xf32>, %skip: tensor<1x8x6x6xf32>) -> (tensor<1x8x6x6xf32>, tensor<1x8x6x6xf32>) {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  %1 = "fuel.add"(%0, %skip) : (tensor<1x8x6x6xf32>, tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  return %1, %0 : tensor<1x8x6x6xf32>, tensor<1x8x6x6xf32>
}

// -----

// The skip's type is not the conv's (a static batch against the conv's ?):
// the add stays.
// CHECK-LABEL: func.func @residual_other_shape
// CHECK:         "fuel.add"
func.func @residual_other_shape(%x: tensor<?x4x6x6xf32>, %w: tensor<8x4x3x3xf32>, %skip: tensor<2x8x6x6xf32>) -> tensor<2x8x6x6xf32> {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<?x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<?x8x6x6xf32>
  %1 = "fuel.add"(%0, %skip) : (tensor<?x8x6x6xf32>, tensor<2x8x6x6xf32>) -> tensor<2x8x6x6xf32>
  return %1 : tensor<2x8x6x6xf32>
}

// -----

// A conv with an activation already: conv -> relu -> add is Relu then add, not
// the residual's order (added before the activation): the Relu folds, the add stays.
// CHECK-LABEL: func.func @residual_after_activation
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1) {clamp_min = 0.000000e+00 : f64, dilation
// CHECK-NEXT:    %[[A:.*]] = "fuel.add"(%[[C]], %arg2)
// CHECK-NEXT:    return %[[A]]
func.func @residual_after_activation(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x3x3xf32>, %skip: tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32> {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  %1 = "fuel.relu"(%0) : (tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  %2 = "fuel.add"(%1, %skip) : (tensor<1x8x6x6xf32>, tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  return %2 : tensor<1x8x6x6xf32>
}

// -----

// A conv the kernel does not serve (few output pixels: the recipe's matmul
// over the batch): the add stays for the runtime fusion.
// CHECK-LABEL: func.func @residual_few_pixels
// CHECK:         "fuel.add"
func.func @residual_few_pixels(%x: tensor<2x32x2x2xf32>, %w: tensor<32x32x3x3xf32>, %skip: tensor<2x32x2x2xf32>) -> tensor<2x32x2x2xf32> {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<2x32x2x2xf32>, tensor<32x32x3x3xf32>) -> tensor<2x32x2x2xf32>
  %1 = "fuel.add"(%0, %skip) : (tensor<2x32x2x2xf32>, tensor<2x32x2x2xf32>) -> tensor<2x32x2x2xf32>
  return %1 : tensor<2x32x2x2xf32>
}
