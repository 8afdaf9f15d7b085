// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32})' | filecheck %s

// The recipe spelling of softmax (exp consumed exactly twice) fuses.
// CHECK-LABEL: func.func @softmax
// CHECK-NEXT:    %[[S:.*]] = "fuel.softmax_last_dim"(%arg0) : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:    return %[[S]]
func.func @softmax(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = "fuel.max_dim"(%x) {axis = 1 : i64} : (tensor<2x8xf32>) -> tensor<2xf32>
  %1 = "fuel.unsqueeze"(%0) {dim = 1 : i64} : (tensor<2xf32>) -> tensor<2x1xf32>
  %2 = "fuel.broadcast_to"(%1) {shape = [2, 8]} : (tensor<2x1xf32>) -> tensor<2x8xf32>
  %3 = "fuel.sub"(%x, %2) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %4 = "fuel.exp"(%3) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %5 = "fuel.sum_dim"(%4) {axis = 1 : i64} : (tensor<2x8xf32>) -> tensor<2xf32>
  %6 = "fuel.unsqueeze"(%5) {dim = 1 : i64} : (tensor<2xf32>) -> tensor<2x1xf32>
  %7 = "fuel.broadcast_to"(%6) {shape = [2, 8]} : (tensor<2x1xf32>) -> tensor<2x8xf32>
  %8 = "fuel.div"(%4, %7) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %8 : tensor<2x8xf32>
}

// -----

// A second consumer of an intermediate (the max) blocks fusion.
// CHECK-LABEL: func.func @shared_intermediate
// CHECK-NOT:     fuel.softmax_last_dim
// CHECK:         "fuel.div"
// CHECK:         return
func.func @shared_intermediate(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2xf32>) {
  %0 = "fuel.max_dim"(%x) {axis = 1 : i64} : (tensor<2x8xf32>) -> tensor<2xf32>
  %1 = "fuel.unsqueeze"(%0) {dim = 1 : i64} : (tensor<2xf32>) -> tensor<2x1xf32>
  %2 = "fuel.broadcast_to"(%1) {shape = [2, 8]} : (tensor<2x1xf32>) -> tensor<2x8xf32>
  %3 = "fuel.sub"(%x, %2) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %4 = "fuel.exp"(%3) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %5 = "fuel.sum_dim"(%4) {axis = 1 : i64} : (tensor<2x8xf32>) -> tensor<2xf32>
  %6 = "fuel.unsqueeze"(%5) {dim = 1 : i64} : (tensor<2xf32>) -> tensor<2x1xf32>
  %7 = "fuel.broadcast_to"(%6) {shape = [2, 8]} : (tensor<2x1xf32>) -> tensor<2x8xf32>
  %8 = "fuel.div"(%4, %7) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %8, %0 : tensor<2x8xf32>, tensor<2xf32>
}

// -----

// The slot of RmsNorm's add_scalar is extracted as the fused op's eps.
// CHECK-LABEL: func.func @rms_norm
// CHECK-NEXT:    %[[R:.*]] = "fuel.rms_norm_last_dim"(%arg0) {eps = 1.000000e-05 : f64}
// CHECK-NEXT:    return %[[R]]
func.func @rms_norm(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = "fuel.sqr"(%x) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %1 = "fuel.mean_dim"(%0) {axis = 1 : i64} : (tensor<2x8xf32>) -> tensor<2xf32>
  %2 = "fuel.unsqueeze"(%1) {dim = 1 : i64} : (tensor<2xf32>) -> tensor<2x1xf32>
  %3 = "fuel.add_scalar"(%2) {value = 1.000000e-05 : f64} : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %4 = "fuel.sqrt"(%3) : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %5 = "fuel.broadcast_to"(%4) {shape = [2, 8]} : (tensor<2x1xf32>) -> tensor<2x8xf32>
  %6 = "fuel.div"(%x, %5) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %6 : tensor<2x8xf32>
}

// -----

// Linear with the bias broadcast, operands of the commutative add swapped.
// CHECK-LABEL: func.func @linear
// CHECK-NEXT:    %[[L:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2) : (tensor<2x3xf32>, tensor<3x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    return %[[L]]
func.func @linear(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %bias: tensor<4xf32>) -> tensor<2x4xf32> {
  %0 = "fuel.mat_mul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %1 = "fuel.reshape"(%bias) {shape = [1, 4]} : (tensor<4xf32>) -> tensor<1x4xf32>
  %2 = "fuel.broadcast_to"(%1) {shape = [2, 4]} : (tensor<1x4xf32>) -> tensor<2x4xf32>
  %3 = "fuel.add"(%2, %0) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %3 : tensor<2x4xf32>
}

// -----

// A relative param that does not hold (reducing the first axis) is no match.
// CHECK-LABEL: func.func @wrong_axis
// CHECK-NOT:     fuel.rms_norm_last_dim
// CHECK:         return
func.func @wrong_axis(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = "fuel.sqr"(%x) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = "fuel.mean_dim"(%0) {axis = 0 : i64} : (tensor<8x8xf32>) -> tensor<8xf32>
  %2 = "fuel.unsqueeze"(%1) {dim = 1 : i64} : (tensor<8xf32>) -> tensor<8x1xf32>
  %3 = "fuel.add_scalar"(%2) {value = 1.000000e-05 : f64} : (tensor<8x1xf32>) -> tensor<8x1xf32>
  %4 = "fuel.sqrt"(%3) : (tensor<8x1xf32>) -> tensor<8x1xf32>
  %5 = "fuel.broadcast_to"(%4) {shape = [8, 8]} : (tensor<8x1xf32>) -> tensor<8x8xf32>
  %6 = "fuel.div"(%x, %5) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %6 : tensor<8x8xf32>
}
