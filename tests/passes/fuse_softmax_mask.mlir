// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=softmax_mask runtime=false})' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=softmax_mask runtime=false softmax_masks=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32 runtime=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=softmax_mask backend=cuda runtime=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=softmax_mask runtime=false},fuel-decompose{all=true})' | filecheck %s --check-prefix=DECOMP

// fuel-fuse folds the Add of an additive mask between the attention scores
// (scaled or not) and their SoftmaxLastDim into the softmax's mask operand
// (fold_softmax_scales, softmax_masks=true): the mask itself, not its
// BroadcastTo, of x's rank (a view where it has fewer axes), each extent 1 or
// x's, the last x's. Without a kernel for the masked softmax (fused_f32 has
// none; a cuda backend: the fold is the cpu kernel's), or with
// softmax_masks=false, the Add stays and so does the scale before it.
// Decomposing gives the Add of the broadcast mask back.

// BERT: (Q K^T) / 8 + BroadcastTo(mask [B,1,1,S]), softmax.
// CHECK-LABEL: func.func @bert
// CHECK-NEXT:    %[[S:.*]] = "fuel.softmax_last_dim"(%arg0, %arg1) {scale = 1.250000e-01 : f64} : (tensor<2x4x8x8xf32>, tensor<2x1x1x8xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT:    return %[[S]]
// OFF-LABEL:   func.func @bert
// OFF:           "fuel.div"
// OFF:           "fuel.add"
// OFF-NEXT:      "fuel.softmax_last_dim"(%{{.*}}) : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
// DECOMP-LABEL: func.func @bert
// DECOMP-NEXT:    %[[M:.*]] = "fuel.mul_scalar"(%arg0) {value = 1.250000e-01 : f64}
// DECOMP-NEXT:    %[[B:.*]] = "fuel.broadcast_to"(%arg1) {shape = [2, 4, 8, 8]}
// DECOMP-NEXT:    %[[A:.*]] = "fuel.add"(%[[M]], %[[B]])
// DECOMP-NEXT:    "fuel.max_dim"(%[[A]])
// DECOMP:         "fuel.exp"
// DECOMP-NOT:     "fuel.softmax_last_dim"
func.func @bert(%x: tensor<2x4x8x8xf32>, %m: tensor<2x1x1x8xf32>) -> tensor<2x4x8x8xf32> {
  %c = "fuel.const"() {name = "c", shape = [], dtype = "f32", value = dense<8.0> : tensor<f32>} : () -> tensor<f32>
  %b = "fuel.broadcast_to"(%c) {shape = [2, 4, 8, 8]} : (tensor<f32>) -> tensor<2x4x8x8xf32>
  %0 = "fuel.div"(%x, %b) : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %mb = "fuel.broadcast_to"(%m) {shape = [2, 4, 8, 8]} : (tensor<2x1x1x8xf32>) -> tensor<2x4x8x8xf32>
  %1 = "fuel.add"(%0, %mb) : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %2 = "fuel.softmax_last_dim"(%1) : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %2 : tensor<2x4x8x8xf32>
}

// -----

// No scale, the mask first in the Add (commutative), a [1,H,S,S] bias: folds
// without a scale.
// CHECK-LABEL: func.func @unscaled
// CHECK-NEXT:    %[[S:.*]] = "fuel.softmax_last_dim"(%arg0, %arg1) : (tensor<2x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT:    return %[[S]]
// OFF-LABEL:   func.func @unscaled
// OFF:           "fuel.add"
// OFF-NEXT:      "fuel.softmax_last_dim"(%{{.*}}) :
func.func @unscaled(%x: tensor<2x4x8x8xf32>, %m: tensor<1x4x8x8xf32>) -> tensor<2x4x8x8xf32> {
  %mb = "fuel.broadcast_to"(%m) {shape = [2, 4, 8, 8]} : (tensor<1x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %1 = "fuel.add"(%mb, %x) : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %2 = "fuel.softmax_last_dim"(%1) : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %2 : tensor<2x4x8x8xf32>
}

// -----

// A mask of fewer axes ([S], right-aligned) is passed as a [1,1,1,S] view; a
// mask of x's own shape (no broadcast) is passed as it is, the scaled side
// taken as the scores.
// CHECK-LABEL: func.func @views
// CHECK-NEXT:    %[[V:.*]] = "fuel.reshape"(%arg1) {shape = [1, 1, 1, 8]} : (tensor<8xf32>) -> tensor<1x1x1x8xf32>
// CHECK-NEXT:    %[[S:.*]] = "fuel.softmax_last_dim"(%arg0, %[[V]]) {scale = 5.000000e-01 : f64} : (tensor<2x4x8x8xf32>, tensor<1x1x1x8xf32>)
// CHECK-NEXT:    %[[T:.*]] = "fuel.softmax_last_dim"(%arg0, %arg2) {scale = 2.500000e-01 : f64} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>)
// CHECK-NEXT:    "fuel.add"(%[[S]], %[[T]])
func.func @views(%x: tensor<2x4x8x8xf32>, %m: tensor<8xf32>, %full: tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32> {
  %0 = "fuel.mul_scalar"(%x) {value = 0.5 : f64} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %mb = "fuel.broadcast_to"(%m) {shape = [2, 4, 8, 8]} : (tensor<8xf32>) -> tensor<2x4x8x8xf32>
  %1 = "fuel.add"(%0, %mb) : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %2 = "fuel.softmax_last_dim"(%1) : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %3 = "fuel.mul_scalar"(%x) {value = 0.25 : f64} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %4 = "fuel.add"(%full, %3) : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %5 = "fuel.softmax_last_dim"(%4) : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %6 = "fuel.add"(%2, %5) : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %6 : tensor<2x4x8x8xf32>
}

// -----

// A mask broadcast along the rows ([B,H,S,1]: one value for a whole row) is
// not the softmax's mask operand: the Add stays (and the scale before it).
// CHECK-LABEL: func.func @row_broadcast
// CHECK:         "fuel.mul_scalar"(%arg0)
// CHECK:         "fuel.broadcast_to"(%arg1)
// CHECK-NEXT:    "fuel.add"
// CHECK-NEXT:    "fuel.softmax_last_dim"(%{{.*}}) : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
func.func @row_broadcast(%x: tensor<2x4x8x8xf32>, %m: tensor<2x4x8x1xf32>) -> tensor<2x4x8x8xf32> {
  %0 = "fuel.mul_scalar"(%x) {value = 0.5 : f64} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %mb = "fuel.broadcast_to"(%m) {shape = [2, 4, 8, 8]} : (tensor<2x4x8x1xf32>) -> tensor<2x4x8x8xf32>
  %1 = "fuel.add"(%0, %mb) : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %2 = "fuel.softmax_last_dim"(%1) : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %2 : tensor<2x4x8x8xf32>
}

// -----

// The masked scores have another user: the Add stays (and so does the scale);
// the masked scores' scale has another user: only the Add folds.
// CHECK-LABEL: func.func @shared
// CHECK:         %[[A:.*]] = "fuel.add"
// CHECK-NEXT:    %[[S:.*]] = "fuel.softmax_last_dim"(%[[A]]) :
// CHECK-NEXT:    "fuel.add"(%[[S]], %[[A]])
// CHECK-LABEL: func.func @shared_scale
// CHECK-NEXT:    %[[M:.*]] = "fuel.mul_scalar"(%arg0) {value = 5.000000e-01 : f64}
// CHECK-NEXT:    %[[S:.*]] = "fuel.softmax_last_dim"(%[[M]], %arg1) : (tensor<3x16xf32>, tensor<1x16xf32>)
// CHECK-NEXT:    "fuel.add"(%[[S]], %[[M]])
func.func @shared(%x: tensor<3x16xf32>, %m: tensor<1x16xf32>) -> tensor<3x16xf32> {
  %0 = "fuel.mul_scalar"(%x) {value = 0.5 : f64} : (tensor<3x16xf32>) -> tensor<3x16xf32>
  %mb = "fuel.broadcast_to"(%m) {shape = [3, 16]} : (tensor<1x16xf32>) -> tensor<3x16xf32>
  %1 = "fuel.add"(%0, %mb) : (tensor<3x16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  %2 = "fuel.softmax_last_dim"(%1) : (tensor<3x16xf32>) -> tensor<3x16xf32>
  %3 = "fuel.add"(%2, %1) : (tensor<3x16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  return %3 : tensor<3x16xf32>
}
func.func @shared_scale(%x: tensor<3x16xf32>, %m: tensor<1x16xf32>) -> tensor<3x16xf32> {
  %0 = "fuel.mul_scalar"(%x) {value = 0.5 : f64} : (tensor<3x16xf32>) -> tensor<3x16xf32>
  %mb = "fuel.broadcast_to"(%m) {shape = [3, 16]} : (tensor<1x16xf32>) -> tensor<3x16xf32>
  %1 = "fuel.add"(%0, %mb) : (tensor<3x16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  %2 = "fuel.softmax_last_dim"(%1) : (tensor<3x16xf32>) -> tensor<3x16xf32>
  %3 = "fuel.add"(%2, %0) : (tensor<3x16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  return %3 : tensor<3x16xf32>
}

// -----

// f64 folds (the table has the kernel); f16 does not (the kernel serves the
// mask for x of its compute type only: f32, f64).
// CHECK-LABEL: func.func @f64
// CHECK-NEXT:    "fuel.softmax_last_dim"(%arg0, %arg1) {scale = 5.000000e-01 : f64} : (tensor<3x16xf64>, tensor<3x16xf64>)
// CHECK-LABEL: func.func @f16
// CHECK-NEXT:    "fuel.mul_scalar"(%arg0)
// CHECK-NEXT:    "fuel.add"
// CHECK-NEXT:    "fuel.softmax_last_dim"(%{{.*}}) : (tensor<3x16xf16>) -> tensor<3x16xf16>
func.func @f64(%x: tensor<3x16xf64>, %m: tensor<3x16xf64>) -> tensor<3x16xf64> {
  %0 = "fuel.mul_scalar"(%x) {value = 0.5 : f64} : (tensor<3x16xf64>) -> tensor<3x16xf64>
  %1 = "fuel.add"(%0, %m) : (tensor<3x16xf64>, tensor<3x16xf64>) -> tensor<3x16xf64>
  %2 = "fuel.softmax_last_dim"(%1) : (tensor<3x16xf64>) -> tensor<3x16xf64>
  return %2 : tensor<3x16xf64>
}
func.func @f16(%x: tensor<3x16xf16>, %m: tensor<3x16xf16>) -> tensor<3x16xf16> {
  %0 = "fuel.mul_scalar"(%x) {value = 0.5 : f64} : (tensor<3x16xf16>) -> tensor<3x16xf16>
  %1 = "fuel.add"(%0, %m) : (tensor<3x16xf16>, tensor<3x16xf16>) -> tensor<3x16xf16>
  %2 = "fuel.softmax_last_dim"(%1) : (tensor<3x16xf16>) -> tensor<3x16xf16>
  return %2 : tensor<3x16xf16>
}

// -----

// `?` extents: no static types to ask the table with, nothing folds.
// CHECK-LABEL: func.func @dynamic
// CHECK:         "fuel.add"
// CHECK-NEXT:    "fuel.softmax_last_dim"(%{{.*}}) : (tensor<?x16xf32>) -> tensor<?x16xf32>
func.func @dynamic(%x: tensor<?x16xf32>, %m: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %1 = "fuel.add"(%x, %m) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  %2 = "fuel.softmax_last_dim"(%1) : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return %2 : tensor<?x16xf32>
}
