// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32 runtime=false})' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32 runtime=false epilogues=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=primitives_f32 runtime=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32 runtime=false},fuel-decompose{all=true})' | filecheck %s --check-prefix=DECOMP

// fuel-fuse folds a MulScalar whose only user is a SoftmaxLastDim (the
// attention scores' 1/sqrt(d)) into the softmax's scale param
// (fold_softmax_scales), where the kernel serves it; the recipe starts with
// the same MulScalar, so decomposing gives the pair back.

// CHECK-LABEL: func.func @scaled
// CHECK-NEXT:    %[[S:.*]] = "fuel.softmax_last_dim"(%arg0) {scale = 1.250000e-01 : f64}
// CHECK-NOT:     fuel.mul_scalar
// CHECK-NEXT:    return %[[S]]
// OFF-LABEL:   func.func @scaled
// OFF-NEXT:      %[[M:.*]] = "fuel.mul_scalar"(%arg0) {value = 1.250000e-01 : f64}
// OFF-NEXT:      "fuel.softmax_last_dim"(%[[M]]) :
// DECOMP-LABEL: func.func @scaled
// DECOMP-NEXT:    %[[M:.*]] = "fuel.mul_scalar"(%arg0) {value = 1.250000e-01 : f64}
// DECOMP-NEXT:    "fuel.max_dim"(%[[M]])
// DECOMP:         "fuel.sub"(%[[M]],
// DECOMP:         "fuel.exp"
// DECOMP-NOT:     "fuel.softmax_last_dim"
func.func @scaled(%x: tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32> {
  %0 = "fuel.mul_scalar"(%x) {value = 0.125 : f64} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %1 = "fuel.softmax_last_dim"(%0) : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %1 : tensor<2x4x8x8xf32>
}

// -----

// The scaled scores have another user: the MulScalar stays.
// CHECK-LABEL: func.func @shared
// CHECK-NEXT:    %[[M:.*]] = "fuel.mul_scalar"(%arg0) {value = 5.000000e-01 : f64}
// CHECK-NEXT:    %[[S:.*]] = "fuel.softmax_last_dim"(%[[M]]) :
// CHECK-NEXT:    "fuel.add"(%[[S]], %[[M]])
func.func @shared(%x: tensor<3x16xf32>) -> tensor<3x16xf32> {
  %0 = "fuel.mul_scalar"(%x) {value = 0.5 : f64} : (tensor<3x16xf32>) -> tensor<3x16xf32>
  %1 = "fuel.softmax_last_dim"(%0) : (tensor<3x16xf32>) -> tensor<3x16xf32>
  %2 = "fuel.add"(%1, %0) : (tensor<3x16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  return %2 : tensor<3x16xf32>
}

// -----

// Another op between the scale and the softmax (an additive mask): nothing folds.
// CHECK-LABEL: func.func @masked
// CHECK-NEXT:    "fuel.mul_scalar"(%arg0)
// CHECK-NEXT:    "fuel.add"
// CHECK-NEXT:    "fuel.softmax_last_dim"
// CHECK-NOT:     scale
func.func @masked(%x: tensor<3x16xf32>, %m: tensor<3x16xf32>) -> tensor<3x16xf32> {
  %0 = "fuel.mul_scalar"(%x) {value = 0.5 : f64} : (tensor<3x16xf32>) -> tensor<3x16xf32>
  %1 = "fuel.add"(%0, %m) : (tensor<3x16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  %2 = "fuel.softmax_last_dim"(%1) : (tensor<3x16xf32>) -> tensor<3x16xf32>
  return %2 : tensor<3x16xf32>
}

// -----

// f64 scores: fused_f32 has no f64 softmax kernel, the pair stays.
// CHECK-LABEL: func.func @no_kernel_f64
// CHECK-NEXT:    "fuel.mul_scalar"(%arg0)
// CHECK-NEXT:    "fuel.softmax_last_dim"
func.func @no_kernel_f64(%x: tensor<3x16xf64>) -> tensor<3x16xf64> {
  %0 = "fuel.mul_scalar"(%x) {value = 0.5 : f64} : (tensor<3x16xf64>) -> tensor<3x16xf64>
  %1 = "fuel.softmax_last_dim"(%0) : (tensor<3x16xf64>) -> tensor<3x16xf64>
  return %1 : tensor<3x16xf64>
}
