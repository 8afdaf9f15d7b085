// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=linear_f32_f64 runtime=false})' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=linear_f32_f64 runtime=false epilogues=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=linear_f32_f64 runtime=false linear_epilogues=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=primitives_f32 runtime=false})' | filecheck %s --check-prefix=NOKERNEL
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=linear_f32_f64 backend=cuda runtime=false})' | filecheck %s --check-prefix=NOKERNEL
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-decompose{all=true})' | filecheck %s --check-prefix=DECOMP

// fuel-fuse folds a GeluErf that is a FusedLinear's only user (directly, or
// behind the importer's Reshape back to [B, S, N]) into its gelu param
// (fold_linear_epilogues), where the f32 kernel serves it.

// CHECK-LABEL: func.func @direct
// CHECK-NEXT:    %[[L:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2) {gelu = true}
// CHECK-NOT:     fuel.gelu_erf
// CHECK-NEXT:    return %[[L]]
// OFF-LABEL:   func.func @direct
// OFF-NEXT:      %[[L:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2) :
// OFF-NEXT:      "fuel.gelu_erf"(%[[L]])
// NOKERNEL-LABEL: func.func @direct
// NOKERNEL:      "fuel.fused_linear"(%arg0, %arg1, %arg2) :
// NOKERNEL-NEXT: "fuel.gelu_erf"
// The recipe ends with the same GeluErf: a target without the kernel decomposes it.
// DECOMP-LABEL: func.func @direct
// DECOMP:         "fuel.mat_mul"
// DECOMP:         "fuel.add"
// DECOMP-NEXT:    "fuel.gelu_erf"
// DECOMP-NOT:     "fuel.fused_linear"
func.func @direct(%a: tensor<8x32xf32>, %b: tensor<32x64xf32>, %bias: tensor<64xf32>) -> tensor<8x64xf32> {
  %0 = "fuel.fused_linear"(%a, %b, %bias) : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %1 = "fuel.gelu_erf"(%0) : (tensor<8x64xf32>) -> tensor<8x64xf32>
  return %1 : tensor<8x64xf32>
}

// -----

// Behind a Reshape (a rank-3 x flattened for the product): the GeluErf
// moves above the view and folds.
// CHECK-LABEL: func.func @through_reshape
// CHECK-NEXT:    %[[L:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2) {gelu = true}
// CHECK-NEXT:    %[[R:.*]] = "fuel.reshape"(%[[L]]) {shape = [2, 4, 64]}
// CHECK-NEXT:    return %[[R]]
func.func @through_reshape(%a: tensor<8x32xf32>, %b: tensor<32x64xf32>, %bias: tensor<64xf32>) -> tensor<2x4x64xf32> {
  %0 = "fuel.fused_linear"(%a, %b, %bias) : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %1 = "fuel.reshape"(%0) {shape = [2, 4, 64]} : (tensor<8x64xf32>) -> tensor<2x4x64xf32>
  %2 = "fuel.gelu_erf"(%1) : (tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
  return %2 : tensor<2x4x64xf32>
}

// -----

// A batched x times one matrix (the Graph API's x @ w broadcasts w over x's
// batch): the kernel reads the matrix as [1, K, N], so the fold does not
// depend on the batch size (a symbolic module's bindings plan alike).
// CHECK-LABEL: func.func @broadcast_weight
// CHECK-NEXT:    %[[W:.*]] = "fuel.reshape"(%arg1) {shape = [1, 32, 64]} : (tensor<32x64xf32>) -> tensor<1x32x64xf32>
// CHECK-NEXT:    %[[L:.*]] = "fuel.fused_linear"(%arg0, %[[W]], %arg2) {gelu = true} : (tensor<3x8x32xf32>, tensor<1x32x64xf32>, tensor<64xf32>)
// CHECK-NOT:     fuel.broadcast_to
// CHECK-NEXT:    return %[[L]]
// OFF-LABEL:   func.func @broadcast_weight
// OFF-NEXT:      "fuel.broadcast_to"
// OFF-NEXT:      %[[L:.*]] = "fuel.fused_linear"
// OFF-NEXT:      "fuel.gelu_erf"(%[[L]])
func.func @broadcast_weight(%a: tensor<3x8x32xf32>, %b: tensor<32x64xf32>, %bias: tensor<64xf32>) -> tensor<3x8x64xf32> {
  %w = "fuel.broadcast_to"(%b) {shape = [3, 32, 64]} : (tensor<32x64xf32>) -> tensor<3x32x64xf32>
  %0 = "fuel.fused_linear"(%a, %w, %bias) : (tensor<3x8x32xf32>, tensor<3x32x64xf32>, tensor<64xf32>) -> tensor<3x8x64xf32>
  %1 = "fuel.gelu_erf"(%0) : (tensor<3x8x64xf32>) -> tensor<3x8x64xf32>
  return %1 : tensor<3x8x64xf32>
}

// -----

// The pre-activation result has another user: both stay.
// CHECK-LABEL: func.func @shared
// CHECK:         %[[L:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2) :
// CHECK-NEXT:    %[[G:.*]] = "fuel.gelu_erf"(%[[L]])
// CHECK-NEXT:    return %[[G]], %[[L]]
func.func @shared(%a: tensor<8x32xf32>, %b: tensor<32x64xf32>, %bias: tensor<64xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>) {
  %0 = "fuel.fused_linear"(%a, %b, %bias) : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %1 = "fuel.gelu_erf"(%0) : (tensor<8x64xf32>) -> tensor<8x64xf32>
  return %1, %0 : tensor<8x64xf32>, tensor<8x64xf32>
}

// -----

// f64: the table has the FusedLinear kernel, but it does not serve the gelu
// epilogue (an f64 erf has no vector expansion): the GeluErf stays.
// CHECK-LABEL: func.func @f64
// CHECK:         %[[L:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2) :
// CHECK-NEXT:    %[[G:.*]] = "fuel.gelu_erf"(%[[L]])
// CHECK-NEXT:    return %[[G]]
func.func @f64(%a: tensor<8x32xf64>, %b: tensor<32x64xf64>, %bias: tensor<64xf64>) -> tensor<8x64xf64> {
  %0 = "fuel.fused_linear"(%a, %b, %bias) : (tensor<8x32xf64>, tensor<32x64xf64>, tensor<64xf64>) -> tensor<8x64xf64>
  %1 = "fuel.gelu_erf"(%0) : (tensor<8x64xf64>) -> tensor<8x64xf64>
  return %1 : tensor<8x64xf64>
}

// -----

// Already folded: a second GeluErf is not folded again.
// CHECK-LABEL: func.func @already
// CHECK-NEXT:    %[[L:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2) {gelu = true}
// CHECK-NEXT:    %[[G:.*]] = "fuel.gelu_erf"(%[[L]])
// CHECK-NEXT:    return %[[G]]
func.func @already(%a: tensor<8x32xf32>, %b: tensor<32x64xf32>, %bias: tensor<64xf32>) -> tensor<8x64xf32> {
  %0 = "fuel.fused_linear"(%a, %b, %bias) {gelu = true} : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %1 = "fuel.gelu_erf"(%0) : (tensor<8x64xf32>) -> tensor<8x64xf32>
  return %1 : tensor<8x64xf32>
}

// -----

// A Relu is not a FusedLinear epilogue: it stays.
// CHECK-LABEL: func.func @relu
// CHECK:         "fuel.fused_linear"(%arg0, %arg1, %arg2) :
// CHECK-NEXT:    "fuel.relu"
func.func @relu(%a: tensor<8x32xf32>, %b: tensor<32x64xf32>, %bias: tensor<64xf32>) -> tensor<8x64xf32> {
  %0 = "fuel.fused_linear"(%a, %b, %bias) : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %1 = "fuel.relu"(%0) : (tensor<8x64xf32>) -> tensor<8x64xf32>
  return %1 : tensor<8x64xf32>
}

// -----

// GPT-2's tanh GELU as the ONNX importer leaves it (Pow(x, 3) a PowI, the
// constants scalar ops): the whole chain folds into gelu_tanh.
// CHECK-LABEL: func.func @tanh_chain
// CHECK-NEXT:    %[[L:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2) {gelu_tanh = true}
// CHECK-NOT:     fuel.tanh
// CHECK-NEXT:    return %[[L]]
// OFF-LABEL:   func.func @tanh_chain
// OFF:           "fuel.tanh"
// NOKERNEL-LABEL: func.func @tanh_chain
// NOKERNEL:      "fuel.tanh"
func.func @tanh_chain(%a: tensor<8x32xf32>, %b: tensor<32x64xf32>, %bias: tensor<64xf32>) -> tensor<8x64xf32> {
  %0 = "fuel.fused_linear"(%a, %b, %bias) : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %1 = "fuel.pow_i"(%0) {n = 3 : i64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %2 = "fuel.mul_scalar"(%1) {value = 0.044714998453855515 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %3 = "fuel.add"(%0, %2) : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %4 = "fuel.mul_scalar"(%3) {value = 0.79788458347320556 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %5 = "fuel.tanh"(%4) : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %6 = "fuel.mul_scalar"(%0) {value = 5.000000e-01 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %7 = "fuel.add_scalar"(%5) {value = 1.000000e+00 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %8 = "fuel.mul"(%6, %7) : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  return %8 : tensor<8x64xf32>
}

// -----

// Another spelling behind the importer's Reshape: x * x * x, the half applied
// last ((x * (1 + t)) * 0.5), operands in the other order: it moves above the
// view and folds.
// CHECK-LABEL: func.func @tanh_chain_through_reshape
// CHECK-NEXT:    %[[L:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2) {gelu_tanh = true}
// CHECK-NEXT:    %[[R:.*]] = "fuel.reshape"(%[[L]]) {shape = [2, 4, 64]}
// CHECK-NEXT:    return %[[R]]
func.func @tanh_chain_through_reshape(%a: tensor<8x32xf32>, %b: tensor<32x64xf32>, %bias: tensor<64xf32>) -> tensor<2x4x64xf32> {
  %0 = "fuel.fused_linear"(%a, %b, %bias) : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %r = "fuel.reshape"(%0) {shape = [2, 4, 64]} : (tensor<8x64xf32>) -> tensor<2x4x64xf32>
  %1 = "fuel.mul"(%r, %r) : (tensor<2x4x64xf32>, tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
  %c = "fuel.mul"(%1, %r) : (tensor<2x4x64xf32>, tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
  %2 = "fuel.mul_scalar"(%c) {value = 0.044715 : f64} : (tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
  %3 = "fuel.add"(%2, %r) : (tensor<2x4x64xf32>, tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
  %4 = "fuel.mul_scalar"(%3) {value = 0.79788456080286541 : f64} : (tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
  %5 = "fuel.tanh"(%4) : (tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
  %6 = "fuel.add_scalar"(%5) {value = 1.000000e+00 : f64} : (tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
  %7 = "fuel.mul"(%6, %r) : (tensor<2x4x64xf32>, tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
  %8 = "fuel.mul_scalar"(%7) {value = 5.000000e-01 : f64} : (tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
  return %8 : tensor<2x4x64xf32>
}

// -----

// The Gelu primitive (ONNX Gelu{approximate = "tanh"}) folds the same way.
// CHECK-LABEL: func.func @gelu_primitive
// CHECK-NEXT:    %[[L:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2) {gelu_tanh = true}
// CHECK-NEXT:    return %[[L]]
func.func @gelu_primitive(%a: tensor<8x32xf32>, %b: tensor<32x64xf32>, %bias: tensor<64xf32>) -> tensor<8x64xf32> {
  %0 = "fuel.fused_linear"(%a, %b, %bias) : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %1 = "fuel.gelu"(%0) : (tensor<8x64xf32>) -> tensor<8x64xf32>
  return %1 : tensor<8x64xf32>
}

// -----

// Not the tanh GELU (0.25 instead of the half): nothing folds.
// CHECK-LABEL: func.func @tanh_chain_other_constant
// CHECK:         "fuel.fused_linear"(%arg0, %arg1, %arg2) :
// CHECK:         "fuel.tanh"
func.func @tanh_chain_other_constant(%a: tensor<8x32xf32>, %b: tensor<32x64xf32>, %bias: tensor<64xf32>) -> tensor<8x64xf32> {
  %0 = "fuel.fused_linear"(%a, %b, %bias) : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %1 = "fuel.pow_i"(%0) {n = 3 : i64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %2 = "fuel.mul_scalar"(%1) {value = 0.044714998453855515 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %3 = "fuel.add"(%0, %2) : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %4 = "fuel.mul_scalar"(%3) {value = 0.79788458347320556 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %5 = "fuel.tanh"(%4) : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %6 = "fuel.mul_scalar"(%0) {value = 2.500000e-01 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %7 = "fuel.add_scalar"(%5) {value = 1.000000e+00 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %8 = "fuel.mul"(%6, %7) : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  return %8 : tensor<8x64xf32>
}

// -----

// An op of the chain has another user (the tanh is returned too): nothing
// folds (the chain's values are still needed).
// CHECK-LABEL: func.func @tanh_chain_shared
// CHECK:         "fuel.fused_linear"(%arg0, %arg1, %arg2) :
// CHECK:         %[[T:.*]] = "fuel.tanh"
// CHECK:         return %{{.*}}, %[[T]]
func.func @tanh_chain_shared(%a: tensor<8x32xf32>, %b: tensor<32x64xf32>, %bias: tensor<64xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>) {
  %0 = "fuel.fused_linear"(%a, %b, %bias) : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %1 = "fuel.pow_i"(%0) {n = 3 : i64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %2 = "fuel.mul_scalar"(%1) {value = 0.044714998453855515 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %3 = "fuel.add"(%0, %2) : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %4 = "fuel.mul_scalar"(%3) {value = 0.79788458347320556 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %5 = "fuel.tanh"(%4) : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %6 = "fuel.mul_scalar"(%0) {value = 5.000000e-01 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %7 = "fuel.add_scalar"(%5) {value = 1.000000e+00 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %8 = "fuel.mul"(%6, %7) : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  return %8, %5 : tensor<8x64xf32>, tensor<8x64xf32>
}

// -----

// The recipe of gelu_tanh ends with the Gelu primitive.
// DECOMP-LABEL: func.func @tanh_recipe
// DECOMP:         "fuel.mat_mul"
// DECOMP:         "fuel.add"
// DECOMP-NEXT:    "fuel.gelu"
// DECOMP-NOT:     "fuel.fused_linear"
func.func @tanh_recipe(%a: tensor<8x32xf32>, %b: tensor<32x64xf32>, %bias: tensor<64xf32>) -> tensor<8x64xf32> {
  %0 = "fuel.fused_linear"(%a, %b, %bias) {gelu_tanh = true} : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}
