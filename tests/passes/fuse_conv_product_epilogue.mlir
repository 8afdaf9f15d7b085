// REQUIRES: fused-dialect
// RUN: python -m compiler.opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{target=cpu:x86-64-v3 runtime=false})' | filecheck %s
// RUN: python -m compiler.opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{target=cpu:x86-64-v3 runtime=false},fuel-decompose{target=cpu:x86-64-v3})' | filecheck %s --check-prefix=DEC
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=conv_f32 runtime=false})' | filecheck %s --check-prefix=NOLINEAR

// A few-pixel conv of one image or a whole-image conv (their recipes are one
// product: registry/ops/conv2d.py, product_epilogue) has no Conv2D kernel of
// its own, yet fuel-fuse folds the Add(conv, skip) and the Relu after it into
// the conv (fuse.conv_available) where the cpu FusedLinear kernel takes a
// residual and a clamp: the recipe's FusedLinear then adds the bias and the
// skip and clamps in its epilogue. A table without that FusedLinear kernel
// (NOLINEAR) keeps the Add and the Relu.

// ResNet's 3x3 128->128 at 4x4, one image: the residual and the Relu fold;
// decomposed, one fused_linear of the 16 pixel rows with the skip copied
// channels-last ([1, 16, 128]: the same ops for any batch) and the NCHW
// output a view of its result.
// CHECK-LABEL: func.func @few_pixels
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1, %arg2, %arg3) {clamp_min = 0.000000e+00 : f64, dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1>, padding = [1, 1], residual = true, stride = [1, 1]}
// CHECK-NOT:     fuel.add
// CHECK-NOT:     fuel.relu
// CHECK-NEXT:    return %[[C]]
// DEC-LABEL:   func.func @few_pixels
// DEC-NOT:       "fuel.conv2d"
// DEC:           %[[SR:.*]] = "fuel.reshape"(%arg3) {shape = [1, 128, 16]}
// DEC-NEXT:      %[[SP:.*]] = "fuel.permute"(%[[SR]]) {perm = [0, 2, 1]} : (tensor<1x128x16xf32>) -> tensor<1x16x128xf32>
// DEC-NEXT:      %[[ST:.*]] = "fuel.contiguize"(%[[SP]])
// DEC:           %[[L:.*]] = "fuel.fused_linear"(%{{.*}}, %{{.*}}, %arg2, %[[ST]]) {clamp_min = 0.000000e+00 : f64, residual = true} : (tensor<1x16x1152xf32>, tensor<1x1152x128xf32>, tensor<128xf32>, tensor<1x16x128xf32>) -> tensor<1x16x128xf32>
// DEC-NEXT:      %[[P:.*]] = "fuel.permute"(%[[L]]) {perm = [0, 2, 1]}
// DEC-NEXT:      %[[Y:.*]] = "fuel.reshape"(%[[P]]) {shape = [1, 128, 4, 4]}
// DEC-NEXT:      return %[[Y]]
// NOLINEAR-LABEL: func.func @few_pixels
// NOLINEAR:      "fuel.add"
// NOLINEAR:      "fuel.relu"
func.func @few_pixels(%x: tensor<1x128x4x4xf32>, %w: tensor<128x128x3x3xf32>, %b: tensor<128xf32>, %skip: tensor<1x128x4x4xf32>) -> tensor<1x128x4x4xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x128x4x4xf32>, tensor<128x128x3x3xf32>, tensor<128xf32>) -> tensor<1x128x4x4xf32>
  %1 = "fuel.add"(%0, %skip) : (tensor<1x128x4x4xf32>, tensor<1x128x4x4xf32>) -> tensor<1x128x4x4xf32>
  %2 = "fuel.relu"(%1) : (tensor<1x128x4x4xf32>) -> tensor<1x128x4x4xf32>
  return %2 : tensor<1x128x4x4xf32>
}

// -----

// A Relu alone (a block's first conv): the clamp folds, no residual.
// CHECK-LABEL: func.func @few_pixels_relu
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1, %arg2) {clamp_min = 0.000000e+00 : f64
// CHECK-NEXT:    return %[[C]]
// DEC-LABEL:   func.func @few_pixels_relu
// DEC:           "fuel.fused_linear"(%{{.*}}, %{{.*}}, %arg2) {clamp_min = 0.000000e+00 : f64} : (tensor<1x4x2304xf32>, tensor<1x2304x256xf32>, tensor<256xf32>) -> tensor<1x4x256xf32>
func.func @few_pixels_relu(%x: tensor<1x256x2x2xf32>, %w: tensor<256x256x3x3xf32>, %b: tensor<256xf32>) -> tensor<1x256x2x2xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x256x2x2xf32>, tensor<256x256x3x3xf32>, tensor<256xf32>) -> tensor<1x256x2x2xf32>
  %1 = "fuel.relu"(%0) : (tensor<1x256x2x2xf32>) -> tensor<1x256x2x2xf32>
  return %1 : tensor<1x256x2x2xf32>
}

// -----

// ResNet's last stage at batch 2 (3x3 at 2x2: whole_image): one fused_linear
// of each whole image, the bias repeated over each channel's 4 pixels, the
// skip read as [2, 1024] (NCHW).
// CHECK-LABEL: func.func @whole_image
// CHECK-NEXT:    "fuel.conv2d"(%arg0, %arg1, %arg2, %arg3) {clamp_min = 0.000000e+00 : f64, {{.*}}residual = true
// DEC-LABEL:   func.func @whole_image
// DEC:           %[[S:.*]] = "fuel.reshape"(%arg3) {shape = [2, 1024]}
// DEC:           %[[L:.*]] = "fuel.fused_linear"(%{{.*}}, %{{.*}}, %{{.*}}, %[[S]]) {clamp_min = 0.000000e+00 : f64, residual = true} : (tensor<2x1024xf32>, tensor<1024x1024xf32>, tensor<1024xf32>, tensor<2x1024xf32>) -> tensor<2x1024xf32>
// DEC-NEXT:      %[[Y:.*]] = "fuel.reshape"(%[[L]]) {shape = [2, 256, 2, 2]}
// DEC-NEXT:      return %[[Y]]
func.func @whole_image(%x: tensor<2x256x2x2xf32>, %w: tensor<256x256x3x3xf32>, %b: tensor<256xf32>, %skip: tensor<2x256x2x2xf32>) -> tensor<2x256x2x2xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<2x256x2x2xf32>, tensor<256x256x3x3xf32>, tensor<256xf32>) -> tensor<2x256x2x2xf32>
  %1 = "fuel.add"(%skip, %0) : (tensor<2x256x2x2xf32>, tensor<2x256x2x2xf32>) -> tensor<2x256x2x2xf32>
  %2 = "fuel.relu"(%1) : (tensor<2x256x2x2xf32>) -> tensor<2x256x2x2xf32>
  return %2 : tensor<2x256x2x2xf32>
}

// -----

// The few-pixel conv of 2 images is banded (conv2d._row_bands: the top row,
// the two middle rows, the bottom row): the Add and the Relu fold as well, and
// each band's product adds the bias and a channels-last copy of its own rows of
// the skip and clamps (the kernel folds the images into the rows, which a
// band's slice of one copy of the skip would not allow); the Concat of the
// bands' rows is the output.
// CHECK-LABEL: func.func @banded
// CHECK-NEXT:    "fuel.conv2d"(%arg0, %arg1, %arg2, %arg3) {clamp_min = 0.000000e+00 : f64, {{.*}} residual = true
// CHECK-NEXT:    return
// DEC-LABEL:   func.func @banded
// DEC:           %[[S0:.*]] = "fuel.contiguize"({{.*}}) : (tensor<2x4x128xf32>) -> tensor<2x4x128xf32>
// DEC-NEXT:      "fuel.fused_linear"(%{{.*}}, %{{.*}}, %arg2, %[[S0]]) {clamp_min = 0.000000e+00 : f64, residual = true} : (tensor<2x4x768xf32>, tensor<1x768x128xf32>, tensor<128xf32>, tensor<2x4x128xf32>)
// DEC:           %[[S1:.*]] = "fuel.contiguize"({{.*}}) : (tensor<2x8x128xf32>) -> tensor<2x8x128xf32>
// DEC-NEXT:      "fuel.fused_linear"(%{{.*}}, %{{.*}}, %arg2, %[[S1]]) {clamp_min = 0.000000e+00 : f64, residual = true} : (tensor<2x8x1152xf32>, tensor<1x1152x128xf32>, tensor<128xf32>, tensor<2x8x128xf32>)
// DEC:           %[[S2:.*]] = "fuel.contiguize"({{.*}}) : (tensor<2x4x128xf32>) -> tensor<2x4x128xf32>
// DEC-NEXT:      "fuel.fused_linear"(%{{.*}}, %{{.*}}, %arg2, %[[S2]]) {clamp_min = 0.000000e+00 : f64, residual = true} : (tensor<2x4x768xf32>, tensor<1x768x128xf32>, tensor<128xf32>, tensor<2x4x128xf32>)
// DEC:           %[[Y:.*]] = "fuel.concat"({{.*}}) {dim = 1 : i64} : ({{.*}}) -> tensor<2x16x128xf32>
// DEC-NEXT:      "fuel.permute"(%[[Y]]) {perm = [0, 2, 1]}
// DEC-NEXT:      "fuel.reshape"
// DEC-NEXT:      return
func.func @banded(%x: tensor<2x128x4x4xf32>, %w: tensor<128x128x3x3xf32>, %b: tensor<128xf32>, %skip: tensor<2x128x4x4xf32>) -> tensor<2x128x4x4xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<2x128x4x4xf32>, tensor<128x128x3x3xf32>, tensor<128xf32>) -> tensor<2x128x4x4xf32>
  %1 = "fuel.add"(%0, %skip) : (tensor<2x128x4x4xf32>, tensor<2x128x4x4xf32>) -> tensor<2x128x4x4xf32>
  %2 = "fuel.relu"(%1) : (tensor<2x128x4x4xf32>) -> tensor<2x128x4x4xf32>
  return %2 : tensor<2x128x4x4xf32>
}

// -----

// Not folded: the conv's result is read elsewhere too (the Add is not its only
// user). (A skip of another shape or dtype is no Add of fuel's: the op's rule
// wants identical types, which the fold checks as well.)
// CHECK-LABEL: func.func @read_elsewhere
// CHECK-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1, %arg2) {dilation
// CHECK-NEXT:    "fuel.add"(%[[C]], %arg3)
// CHECK-NEXT:    "fuel.relu"
// CHECK-NEXT:    return
func.func @read_elsewhere(%x: tensor<1x128x4x4xf32>, %w: tensor<128x128x3x3xf32>, %b: tensor<128xf32>, %skip: tensor<1x128x4x4xf32>) -> (tensor<1x128x4x4xf32>, tensor<1x128x4x4xf32>) {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x128x4x4xf32>, tensor<128x128x3x3xf32>, tensor<128xf32>) -> tensor<1x128x4x4xf32>
  %1 = "fuel.add"(%0, %skip) : (tensor<1x128x4x4xf32>, tensor<1x128x4x4xf32>) -> tensor<1x128x4x4xf32>
  %2 = "fuel.relu"(%1) : (tensor<1x128x4x4xf32>) -> tensor<1x128x4x4xf32>
  return %2, %0 : tensor<1x128x4x4xf32>, tensor<1x128x4x4xf32>
}

// -----

// A 1x1 conv at 4x4 of 2 images (one band): folds; the product's 32 rows are
// the pixels of both images, the skip copied channels-last as [2, 16, 64].
// DEC-LABEL:   func.func @batch_one_band
// DEC:           %[[SR:.*]] = "fuel.reshape"(%arg3) {shape = [2, 64, 16]}
// DEC-NEXT:      %[[SP:.*]] = "fuel.permute"(%[[SR]])
// DEC-NEXT:      %[[ST:.*]] = "fuel.contiguize"(%[[SP]])
// DEC-NEXT:      "fuel.fused_linear"(%{{.*}}, %{{.*}}, %arg2, %[[ST]]) {clamp_min = 0.000000e+00 : f64, residual = true} : (tensor<2x16x32xf32>, tensor<1x32x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
func.func @batch_one_band(%x: tensor<2x32x4x4xf32>, %w: tensor<64x32x1x1xf32>, %b: tensor<64xf32>, %skip: tensor<2x64x4x4xf32>) -> tensor<2x64x4x4xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [0, 0], stride = [1, 1]} : (tensor<2x32x4x4xf32>, tensor<64x32x1x1xf32>, tensor<64xf32>) -> tensor<2x64x4x4xf32>
  %1 = "fuel.add"(%0, %skip) : (tensor<2x64x4x4xf32>, tensor<2x64x4x4xf32>) -> tensor<2x64x4x4xf32>
  %2 = "fuel.relu"(%1) : (tensor<2x64x4x4xf32>) -> tensor<2x64x4x4xf32>
  return %2 : tensor<2x64x4x4xf32>
}

// -----

// Not folded: f16 (the FusedLinear epilogue takes f32 and f64; the conv's own
// recipe adds and clamps after its product).
// CHECK-LABEL: func.func @half
// CHECK-NEXT:    "fuel.conv2d"(%arg0, %arg1, %arg2) {dilation
// CHECK-NEXT:    "fuel.add"
// CHECK-NEXT:    "fuel.relu"
func.func @half(%x: tensor<1x128x4x4xf16>, %w: tensor<128x128x3x3xf16>, %b: tensor<128xf16>, %skip: tensor<1x128x4x4xf16>) -> tensor<1x128x4x4xf16> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x128x4x4xf16>, tensor<128x128x3x3xf16>, tensor<128xf16>) -> tensor<1x128x4x4xf16>
  %1 = "fuel.add"(%0, %skip) : (tensor<1x128x4x4xf16>, tensor<1x128x4x4xf16>) -> tensor<1x128x4x4xf16>
  %2 = "fuel.relu"(%1) : (tensor<1x128x4x4xf16>) -> tensor<1x128x4x4xf16>
  return %2 : tensor<1x128x4x4xf16>
}
