// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32 runtime=false})' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32 runtime=false epilogues=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32 runtime=false softmax_scales=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=primitives_f32 runtime=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32 backend=cuda runtime=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32 runtime=false},fuel-decompose{all=true})' | filecheck %s --check-prefix=DECOMP
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32 runtime=false},fuel-cse,fuel-dce)' | filecheck %s --check-prefix=CSE

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

// -----

// ViT's Div by sqrt(64) = 8, a power of two: x / 8 and x * 0.125 round alike,
// so it folds (the divisor's broadcast and const go); a Mul by a scalar const too.
// CHECK-LABEL: func.func @div_pow2
// CHECK-NEXT:    %[[S:.*]] = "fuel.softmax_last_dim"(%arg0) {scale = 1.250000e-01 : f64}
// CHECK-NEXT:    %[[T:.*]] = "fuel.softmax_last_dim"(%arg0) {scale = 2.500000e-01 : f64}
// CHECK-NEXT:    "fuel.add"(%[[S]], %[[T]])
// CHECK-NOT:     fuel.const
// Softmaxes of one x with different scales are different ops to fuel-cse.
// CSE-LABEL: func.func @div_pow2
// CSE-NEXT:    "fuel.softmax_last_dim"(%arg0) {scale = 1.250000e-01 : f64}
// CSE-NEXT:    "fuel.softmax_last_dim"(%arg0) {scale = 2.500000e-01 : f64}
func.func @div_pow2(%x: tensor<3x16xf32>) -> tensor<3x16xf32> {
  %c = "fuel.const"() {name = "c", shape = [], dtype = "f32", value = dense<8.0> : tensor<f32>} : () -> tensor<f32>
  %b = "fuel.broadcast_to"(%c) {shape = [3, 16]} : (tensor<f32>) -> tensor<3x16xf32>
  %0 = "fuel.div"(%x, %b) : (tensor<3x16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  %1 = "fuel.softmax_last_dim"(%0) : (tensor<3x16xf32>) -> tensor<3x16xf32>
  %d = "fuel.const"() {name = "d", shape = [], dtype = "f32", value = dense<0.25> : tensor<f32>} : () -> tensor<f32>
  %e = "fuel.broadcast_to"(%d) {shape = [3, 16]} : (tensor<f32>) -> tensor<3x16xf32>
  %2 = "fuel.mul"(%e, %x) : (tensor<3x16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  %3 = "fuel.softmax_last_dim"(%2) : (tensor<3x16xf32>) -> tensor<3x16xf32>
  %4 = "fuel.add"(%1, %3) : (tensor<3x16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  return %4 : tensor<3x16xf32>
}

// -----

// A Div by sqrt(32), not a power of two: its reciprocal would round differently.
// CHECK-LABEL: func.func @div_other
// CHECK:         "fuel.div"
// CHECK-NEXT:    "fuel.softmax_last_dim"
// CHECK-NOT:     scale
func.func @div_other(%x: tensor<3x16xf32>) -> tensor<3x16xf32> {
  %c = "fuel.const"() {name = "c", shape = [], dtype = "f32", value = dense<5.65685415> : tensor<f32>} : () -> tensor<f32>
  %b = "fuel.broadcast_to"(%c) {shape = [3, 16]} : (tensor<f32>) -> tensor<3x16xf32>
  %0 = "fuel.div"(%x, %b) : (tensor<3x16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  %1 = "fuel.softmax_last_dim"(%0) : (tensor<3x16xf32>) -> tensor<3x16xf32>
  return %1 : tensor<3x16xf32>
}
