// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32})' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=conv_f32 runtime=false})' | filecheck %s --check-prefix=CONV

// fuel-fuse on symbolic IR (docs/dynamic-shapes.md, "Passes on ? extents"):
// each ? extent is a symbol, the fused op's rule must give the root's type
// (? where it has ?), and a broadcast keeping a ? extent is written -1.

// The recipe spelling of softmax over rows of 768, the batch ?.
// CHECK-LABEL: func.func @softmax
// CHECK-NEXT:    %[[S:.*]] = "fuel.softmax_last_dim"(%arg0) : (tensor<?x768xf32>) -> tensor<?x768xf32>
// CHECK-NEXT:    return %[[S]]
func.func @softmax(%x: tensor<?x768xf32>) -> tensor<?x768xf32> {
  %0 = "fuel.max_dim"(%x) {axis = 1 : i64} : (tensor<?x768xf32>) -> tensor<?xf32>
  %1 = "fuel.unsqueeze"(%0) {dim = 1 : i64} : (tensor<?xf32>) -> tensor<?x1xf32>
  %2 = "fuel.broadcast_to"(%1) {shape = [-1, 768]} : (tensor<?x1xf32>) -> tensor<?x768xf32>
  %3 = "fuel.sub"(%x, %2) : (tensor<?x768xf32>, tensor<?x768xf32>) -> tensor<?x768xf32>
  %4 = "fuel.exp"(%3) : (tensor<?x768xf32>) -> tensor<?x768xf32>
  %5 = "fuel.sum_dim"(%4) {axis = 1 : i64} : (tensor<?x768xf32>) -> tensor<?xf32>
  %6 = "fuel.unsqueeze"(%5) {dim = 1 : i64} : (tensor<?xf32>) -> tensor<?x1xf32>
  %7 = "fuel.broadcast_to"(%6) {shape = [-1, 768]} : (tensor<?x1xf32>) -> tensor<?x768xf32>
  %8 = "fuel.div"(%4, %7) : (tensor<?x768xf32>, tensor<?x768xf32>) -> tensor<?x768xf32>
  return %8 : tensor<?x768xf32>
}

// -----

// Softmax over rows of 128 of attention scores [batch, heads, seq, 128].
// (Rows of a ? length cannot be spelled: the broadcast of the row maximum
// from 1 to ? has no encoding, docs/dynamic-shapes.md.)
// CHECK-LABEL: func.func @softmax_scores
// CHECK-NEXT:    "fuel.softmax_last_dim"(%arg0) : (tensor<?x4x?x128xf32>) -> tensor<?x4x?x128xf32>
// CHECK-NEXT:    return
func.func @softmax_scores(%x: tensor<?x4x?x128xf32>) -> tensor<?x4x?x128xf32> {
  %0 = "fuel.max_dim"(%x) {axis = 3 : i64} : (tensor<?x4x?x128xf32>) -> tensor<?x4x?xf32>
  %1 = "fuel.unsqueeze"(%0) {dim = 3 : i64} : (tensor<?x4x?xf32>) -> tensor<?x4x?x1xf32>
  %2 = "fuel.broadcast_to"(%1) {shape = [-1, 4, -1, 128]} : (tensor<?x4x?x1xf32>) -> tensor<?x4x?x128xf32>
  %3 = "fuel.sub"(%x, %2) : (tensor<?x4x?x128xf32>, tensor<?x4x?x128xf32>) -> tensor<?x4x?x128xf32>
  %4 = "fuel.exp"(%3) : (tensor<?x4x?x128xf32>) -> tensor<?x4x?x128xf32>
  %5 = "fuel.sum_dim"(%4) {axis = 3 : i64} : (tensor<?x4x?x128xf32>) -> tensor<?x4x?xf32>
  %6 = "fuel.unsqueeze"(%5) {dim = 3 : i64} : (tensor<?x4x?xf32>) -> tensor<?x4x?x1xf32>
  %7 = "fuel.broadcast_to"(%6) {shape = [-1, 4, -1, 128]} : (tensor<?x4x?x1xf32>) -> tensor<?x4x?x128xf32>
  %8 = "fuel.div"(%4, %7) : (tensor<?x4x?x128xf32>, tensor<?x4x?x128xf32>) -> tensor<?x4x?x128xf32>
  return %8 : tensor<?x4x?x128xf32>
}

// -----

// The RMS norm's eps slot is extracted on ? rows as on static ones.
// CHECK-LABEL: func.func @rms_norm
// CHECK-NEXT:    "fuel.rms_norm_last_dim"(%arg0) {eps = 1.000000e-05 : f64} : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
// CHECK-NEXT:    return
func.func @rms_norm(%x: tensor<?x?x64xf32>) -> tensor<?x?x64xf32> {
  %0 = "fuel.sqr"(%x) : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
  %1 = "fuel.mean_dim"(%0) {axis = 2 : i64} : (tensor<?x?x64xf32>) -> tensor<?x?xf32>
  %2 = "fuel.unsqueeze"(%1) {dim = 2 : i64} : (tensor<?x?xf32>) -> tensor<?x?x1xf32>
  %3 = "fuel.add_scalar"(%2) {value = 1.000000e-05 : f64} : (tensor<?x?x1xf32>) -> tensor<?x?x1xf32>
  %4 = "fuel.sqrt"(%3) : (tensor<?x?x1xf32>) -> tensor<?x?x1xf32>
  %5 = "fuel.broadcast_to"(%4) {shape = [-1, -1, 64]} : (tensor<?x?x1xf32>) -> tensor<?x?x64xf32>
  %6 = "fuel.div"(%x, %5) : (tensor<?x?x64xf32>, tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
  return %6 : tensor<?x?x64xf32>
}

// -----

// A second consumer of an intermediate still blocks fusion on ? extents.
// CHECK-LABEL: func.func @shared_intermediate
// CHECK-NOT:     fuel.softmax_last_dim
// CHECK:         "fuel.div"
func.func @shared_intermediate(%x: tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?xf32>) {
  %0 = "fuel.max_dim"(%x) {axis = 1 : i64} : (tensor<?x8xf32>) -> tensor<?xf32>
  %1 = "fuel.unsqueeze"(%0) {dim = 1 : i64} : (tensor<?xf32>) -> tensor<?x1xf32>
  %2 = "fuel.broadcast_to"(%1) {shape = [-1, 8]} : (tensor<?x1xf32>) -> tensor<?x8xf32>
  %3 = "fuel.sub"(%x, %2) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %4 = "fuel.exp"(%3) : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %5 = "fuel.sum_dim"(%4) {axis = 1 : i64} : (tensor<?x8xf32>) -> tensor<?xf32>
  %6 = "fuel.unsqueeze"(%5) {dim = 1 : i64} : (tensor<?xf32>) -> tensor<?x1xf32>
  %7 = "fuel.broadcast_to"(%6) {shape = [-1, 8]} : (tensor<?x1xf32>) -> tensor<?x8xf32>
  %8 = "fuel.div"(%4, %7) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %8, %0 : tensor<?x8xf32>, tensor<?xf32>
}

// -----

// A pattern whose relative param is a static shape where the IR has a ?
// extent is no match: the broadcast does not keep x's extent (8 != ?).
// CHECK-LABEL: func.func @static_broadcast_of_dynamic
// CHECK-NOT:     fuel.softmax_last_dim
// CHECK:         "fuel.div"
func.func @static_broadcast_of_dynamic(%x: tensor<2x?xf32>) -> tensor<2x?xf32> {
  %0 = "fuel.max_dim"(%x) {axis = 1 : i64} : (tensor<2x?xf32>) -> tensor<2xf32>
  %1 = "fuel.unsqueeze"(%0) {dim = 1 : i64} : (tensor<2xf32>) -> tensor<2x1xf32>
  %2 = "fuel.broadcast_to"(%1) {shape = [2, 8]} : (tensor<2x1xf32>) -> tensor<2x8xf32>
  %3 = "fuel.sub"(%x, %2) : (tensor<2x?xf32>, tensor<2x8xf32>) -> tensor<2x?xf32>
  %4 = "fuel.exp"(%3) : (tensor<2x?xf32>) -> tensor<2x?xf32>
  %5 = "fuel.sum_dim"(%4) {axis = 1 : i64} : (tensor<2x?xf32>) -> tensor<2xf32>
  %6 = "fuel.unsqueeze"(%5) {dim = 1 : i64} : (tensor<2xf32>) -> tensor<2x1xf32>
  %7 = "fuel.broadcast_to"(%6) {shape = [2, 8]} : (tensor<2x1xf32>) -> tensor<2x8xf32>
  %8 = "fuel.div"(%4, %7) : (tensor<2x?xf32>, tensor<2x8xf32>) -> tensor<2x?xf32>
  return %8 : tensor<2x?xf32>
}

// -----

// Runtime fusion of an elementwise chain on ? rows of 768 (a tanh GELU's
// tail): one region, its block arguments and members keep the ? types.
// CHECK-LABEL: func.func @gelu_tail
// CHECK-NEXT:    %[[R:.*]] = "fuel.runtime_fused"(%arg0) ({
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<?x768xf32>):
// CHECK-NEXT:      "fuel.mul_scalar"(%[[A]]) {{.*}} : (tensor<?x768xf32>) -> tensor<?x768xf32>
// CHECK-NEXT:      "fuel.tanh"
// CHECK-NEXT:      "fuel.add_scalar"
// CHECK-NEXT:      "fuel.mul"
// CHECK-NEXT:      gpu.yield {{.*}} : tensor<?x768xf32>
// CHECK-NEXT:    }) {{.*}} : (tensor<?x768xf32>) -> tensor<?x768xf32>
// CHECK-NEXT:    return %[[R]]
func.func @gelu_tail(%x: tensor<?x768xf32>) -> tensor<?x768xf32> {
  %0 = "fuel.mul_scalar"(%x) {value = 0.70710678118654757 : f64} : (tensor<?x768xf32>) -> tensor<?x768xf32>
  %1 = "fuel.tanh"(%0) : (tensor<?x768xf32>) -> tensor<?x768xf32>
  %2 = "fuel.add_scalar"(%1) {value = 1.0 : f64} : (tensor<?x768xf32>) -> tensor<?x768xf32>
  %3 = "fuel.mul"(%x, %2) : (tensor<?x768xf32>, tensor<?x768xf32>) -> tensor<?x768xf32>
  return %3 : tensor<?x768xf32>
}

// -----

// A trailing row reduction joins the region over a static row of 64; over a
// ? row it does not (its length is not known to reach MIN_REDUCED_EXTENT).
// CHECK-LABEL: func.func @row_sums
// CHECK-NEXT:    "fuel.runtime_fused"(%arg0)
// CHECK:           "fuel.sum_dim"({{.*}}) {axis = 1 : i64} : (tensor<?x64xf32>) -> tensor<?xf32>
// CHECK:         }) {{.*}} : (tensor<?x64xf32>) -> tensor<?xf32>
// CHECK-NEXT:    %[[E:.*]] = "fuel.exp"(%arg1) : (tensor<4x?xf32>) -> tensor<4x?xf32>
// CHECK-NEXT:    "fuel.sum_dim"(%[[E]]) {axis = 1 : i64} : (tensor<4x?xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return
func.func @row_sums(%x: tensor<?x64xf32>, %y: tensor<4x?xf32>) -> (tensor<?xf32>, tensor<4xf32>) {
  %0 = "fuel.exp"(%x) : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %1 = "fuel.sum_dim"(%0) {axis = 1 : i64} : (tensor<?x64xf32>) -> tensor<?xf32>
  %2 = "fuel.exp"(%y) : (tensor<4x?xf32>) -> tensor<4x?xf32>
  %3 = "fuel.sum_dim"(%2) {axis = 1 : i64} : (tensor<4x?xf32>) -> tensor<4xf32>
  return %1, %3 : tensor<?xf32>, tensor<4xf32>
}

// -----

// A ReLU folds into a conv with a ? batch (its kernel takes the batch at run
// time, docs/dynamic-shapes.md).
// CONV-LABEL: func.func @conv_relu
// CONV-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1, %arg2) {clamp_min = 0.000000e+00 : f64, {{.*}}} : (tensor<?x4x6x6xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<?x8x6x6xf32>
// CONV-NOT:     fuel.relu
// CONV-NEXT:    return %[[C]]
func.func @conv_relu(%x: tensor<?x4x6x6xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) -> tensor<?x8x6x6xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<?x4x6x6xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<?x8x6x6xf32>
  %1 = "fuel.relu"(%0) : (tensor<?x8x6x6xf32>) -> tensor<?x8x6x6xf32>
  return %1 : tensor<?x8x6x6xf32>
}

// -----

// A skip of the conv's ? type folds into its residual (the ? batches are one).
// CONV-LABEL: func.func @conv_residual
// CONV-NEXT:    %[[C:.*]] = "fuel.conv2d"(%arg0, %arg1, %arg2) {{{.*}}operandSegmentSizes = array<i32: 1, 1, 0, 1>, padding = [0, 0], residual = true{{.*}}} : (tensor<?x16x6x6xf32>, tensor<16x16x1x1xf32>, tensor<?x16x6x6xf32>) -> tensor<?x16x6x6xf32>
// CONV-NEXT:    return %[[C]]
func.func @conv_residual(%x: tensor<?x16x6x6xf32>, %w: tensor<16x16x1x1xf32>, %skip: tensor<?x16x6x6xf32>) -> tensor<?x16x6x6xf32> {
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [0, 0], stride = [1, 1]} : (tensor<?x16x6x6xf32>, tensor<16x16x1x1xf32>) -> tensor<?x16x6x6xf32>
  %1 = "fuel.add"(%0, %skip) : (tensor<?x16x6x6xf32>, tensor<?x16x6x6xf32>) -> tensor<?x16x6x6xf32>
  return %1 : tensor<?x16x6x6xf32>
}
