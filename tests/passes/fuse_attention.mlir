// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=attention_f32 runtime=false},fuel-dce)' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32 runtime=false},fuel-dce)' | filecheck %s --check-prefix=NOKERNEL
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=attention_f32 runtime=false attention_k_len=false attention_by_size=false},fuel-dce)' | filecheck %s --check-prefix=NOKLEN

// Exported attention (compiler/passes/fuse_attention.py): MatMul(Q, Transpose(K)),
// Div by a constant sqrt(d), Softmax, MatMul(., V) is matched, but without a causal
// mask the FlashAttn kernel does not pay (measured: ``pays``): only the softmax fuses,
// and the Div by 8 (a power of two) folds into its scale (fold_softmax_scales).
// CHECK-LABEL: func.func @unmasked
// CHECK-NOT:     fuel.flash_attn
// CHECK-NOT:     "fuel.div"
// CHECK:         "fuel.softmax_last_dim"(%{{.*}}) {scale = 1.250000e-01 : f64}
// NOKERNEL-LABEL: func.func @unmasked
// NOKERNEL-NOT:    fuel.flash_attn
// NOKERNEL:        fuel.softmax_last_dim
func.func @unmasked(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %0 = "fuel.transpose"(%k) : (tensor<2x4x8x16xf32>) -> tensor<2x4x16x8xf32>
  %1 = "fuel.mat_mul"(%q, %0) : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %2 = "fuel.const"() {dtype = "f32", name = "sqrt_d", shape = [], value = dense<8.000000e+00> : tensor<f32>} : () -> tensor<f32>
  %3 = "fuel.broadcast_to"(%2) {shape = [2, 4, 8, 8]} : (tensor<f32>) -> tensor<2x4x8x8xf32>
  %4 = "fuel.div"(%1, %3) : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %5 = "fuel.softmax_last_dim"(%4) : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %6 = "fuel.mat_mul"(%5, %v) : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %6 : tensor<2x4x8x16xf32>
}

// -----

// GPT-2's causal mask: Where(constant lower-triangular bool, scores, finfo.min),
// the scale as a Mul by a constant 1/sqrt(d) and the softmax spelled out.
// CHECK-LABEL: func.func @causal_where
// CHECK-NEXT:    %[[A:.*]] = "fuel.flash_attn"(%arg0, %arg1, %arg2) {causal = true, softmax_scale = 2.500000e-01 : f64}
// CHECK-NEXT:    return %[[A]]
// attention_k_len=false (a symbolic module's bindings) still fuses top-left
// causal attention, whose kernel takes batch and sequence at run time.
// NOKLEN-LABEL: func.func @causal_where
// NOKLEN-NEXT:    "fuel.flash_attn"(%arg0, %arg1, %arg2) {causal = true, softmax_scale = 2.500000e-01 : f64}
func.func @causal_where(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %0 = "fuel.permute"(%k) {perm = [0, 1, 3, 2]} : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %1 = "fuel.mat_mul"(%q, %0) : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %2 = "fuel.const"() {dtype = "f32", name = "scale", shape = [], value = dense<2.500000e-01> : tensor<f32>} : () -> tensor<f32>
  %3 = "fuel.broadcast_to"(%2) {shape = [1, 2, 4, 4]} : (tensor<f32>) -> tensor<1x2x4x4xf32>
  %4 = "fuel.mul"(%3, %1) : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %5 = "fuel.const"() {dtype = "u8", name = "causal", shape = [1, 1, 4, 4], value = dense<[[[[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]]]> : tensor<1x1x4x4xui8>} : () -> tensor<1x1x4x4xui8>
  %6 = "fuel.const"() {dtype = "f32", name = "neg", shape = [], value = dense<-3.40282347E+38> : tensor<f32>} : () -> tensor<f32>
  %7 = "fuel.broadcast_to"(%5) {shape = [1, 2, 4, 4]} : (tensor<1x1x4x4xui8>) -> tensor<1x2x4x4xui8>
  %8 = "fuel.broadcast_to"(%6) {shape = [1, 2, 4, 4]} : (tensor<f32>) -> tensor<1x2x4x4xf32>
  %9 = "fuel.where"(%7, %4, %8) : (tensor<1x2x4x4xui8>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %10 = "fuel.max_dim"(%9) {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4xf32>
  %11 = "fuel.unsqueeze"(%10) {dim = 3 : i64} : (tensor<1x2x4xf32>) -> tensor<1x2x4x1xf32>
  %12 = "fuel.broadcast_to"(%11) {shape = [1, 2, 4, 4]} : (tensor<1x2x4x1xf32>) -> tensor<1x2x4x4xf32>
  %13 = "fuel.sub"(%9, %12) : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %14 = "fuel.exp"(%13) : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %15 = "fuel.sum_dim"(%14) {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4xf32>
  %16 = "fuel.unsqueeze"(%15) {dim = 3 : i64} : (tensor<1x2x4xf32>) -> tensor<1x2x4x1xf32>
  %17 = "fuel.broadcast_to"(%16) {shape = [1, 2, 4, 4]} : (tensor<1x2x4x1xf32>) -> tensor<1x2x4x4xf32>
  %18 = "fuel.div"(%14, %17) : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %19 = "fuel.mat_mul"(%18, %v) : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %19 : tensor<1x2x4x8xf32>
}

// -----

// Llama: an additive constant causal mask (0 / finfo.min), MulScalar scale, and K/V
// repeated from 1 to 2 heads (HF repeat_kv): FlashAttn reads the kv heads as GQA.
// CHECK-LABEL: func.func @causal_add_gqa
// CHECK-NEXT:    %[[A:.*]] = "fuel.flash_attn"(%arg0, %arg1, %arg2) {causal = true, softmax_scale = 5.000000e-01 : f64}
// CHECK-SAME:      (tensor<1x2x3x4xf32>, tensor<1x1x3x4xf32>, tensor<1x1x3x4xf32>) -> tensor<1x2x3x4xf32>
// CHECK-NEXT:    return %[[A]]
func.func @causal_add_gqa(%q: tensor<1x2x3x4xf32>, %k: tensor<1x1x3x4xf32>, %v: tensor<1x1x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %0 = "fuel.unsqueeze"(%k) {dim = 2 : i64} : (tensor<1x1x3x4xf32>) -> tensor<1x1x1x3x4xf32>
  %1 = "fuel.broadcast_to"(%0) {shape = [1, 1, 2, 3, 4]} : (tensor<1x1x1x3x4xf32>) -> tensor<1x1x2x3x4xf32>
  %2 = "fuel.reshape"(%1) {shape = [1, 2, 3, 4]} : (tensor<1x1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  %3 = "fuel.unsqueeze"(%v) {dim = 2 : i64} : (tensor<1x1x3x4xf32>) -> tensor<1x1x1x3x4xf32>
  %4 = "fuel.broadcast_to"(%3) {shape = [1, 1, 2, 3, 4]} : (tensor<1x1x1x3x4xf32>) -> tensor<1x1x2x3x4xf32>
  %5 = "fuel.reshape"(%4) {shape = [1, 2, 3, 4]} : (tensor<1x1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  %6 = "fuel.transpose"(%2) : (tensor<1x2x3x4xf32>) -> tensor<1x2x4x3xf32>
  %7 = "fuel.mat_mul"(%q, %6) : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %8 = "fuel.mul_scalar"(%7) {value = 5.000000e-01 : f64} : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %9 = "fuel.const"() {dtype = "f32", name = "causal", shape = [1, 1, 3, 3], value = dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0]]]]> : tensor<1x1x3x3xf32>} : () -> tensor<1x1x3x3xf32>
  %10 = "fuel.broadcast_to"(%9) {shape = [1, 2, 3, 3]} : (tensor<1x1x3x3xf32>) -> tensor<1x2x3x3xf32>
  %11 = "fuel.add"(%8, %10) : (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %12 = "fuel.softmax_last_dim"(%11) : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %13 = "fuel.mat_mul"(%12, %5) : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %13 : tensor<1x2x3x4xf32>
}

// -----

// Sq = 2 queries over Sk = 4 keys, the mask bottom-right aligned (the last query
// sees every key): causal with k_len = Sk. The scale split as sqrt on Q and on K.
// CHECK-LABEL: func.func @bottom_right
// CHECK-NEXT:    %[[A:.*]] = "fuel.flash_attn"(%arg0, %arg1, %arg2) {causal = true, k_len = 4 : i64, softmax_scale = 2.500000e-01 : f64}
// CHECK-NEXT:    return %[[A]]
// With k_len the kernel is compiled per shape: attention_k_len=false leaves it.
// NOKLEN-LABEL: func.func @bottom_right
// NOKLEN-NOT:     fuel.flash_attn
// NOKLEN:         "fuel.softmax_last_dim"
// NOKLEN-NEXT:    "fuel.mat_mul"
func.func @bottom_right(%q: tensor<1x1x2x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x2x8xf32> {
  %0 = "fuel.mul_scalar"(%q) {value = 5.000000e-01 : f64} : (tensor<1x1x2x8xf32>) -> tensor<1x1x2x8xf32>
  %1 = "fuel.mul_scalar"(%k) {value = 5.000000e-01 : f64} : (tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  %2 = "fuel.transpose"(%1) : (tensor<1x1x4x8xf32>) -> tensor<1x1x8x4xf32>
  %3 = "fuel.mat_mul"(%0, %2) : (tensor<1x1x2x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x2x4xf32>
  %4 = "fuel.const"() {dtype = "u8", name = "keep", shape = [2, 4], value = dense<[[1, 1, 1, 0], [1, 1, 1, 1]]> : tensor<2x4xui8>} : () -> tensor<2x4xui8>
  %5 = "fuel.const"() {dtype = "f32", name = "neg", shape = [], value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
  %6 = "fuel.broadcast_to"(%4) {shape = [1, 1, 2, 4]} : (tensor<2x4xui8>) -> tensor<1x1x2x4xui8>
  %7 = "fuel.broadcast_to"(%5) {shape = [1, 1, 2, 4]} : (tensor<f32>) -> tensor<1x1x2x4xf32>
  %8 = "fuel.where"(%6, %3, %7) : (tensor<1x1x2x4xui8>, tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  %9 = "fuel.softmax_last_dim"(%8) : (tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  %10 = "fuel.mat_mul"(%9, %v) : (tensor<1x1x2x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x2x8xf32>
  return %10 : tensor<1x1x2x8xf32>
}

// -----

// The causal mask with the Div spelling of the scale; without the FlashAttn kernel
// in the table nothing but the softmax fuses.
// CHECK-LABEL: func.func @causal_div
// CHECK-NEXT:    %[[A:.*]] = "fuel.flash_attn"(%arg0, %arg1, %arg2) {causal = true, softmax_scale = 1.250000e-01 : f64}
// CHECK-NEXT:    return %[[A]]
// NOKERNEL-LABEL: func.func @causal_div
// NOKERNEL-NOT:    fuel.flash_attn
// NOKERNEL:        fuel.softmax_last_dim
func.func @causal_div(%q: tensor<1x1x2x4xf32>, %k: tensor<1x1x2x4xf32>, %v: tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32> {
  %0 = "fuel.transpose"(%k) : (tensor<1x1x2x4xf32>) -> tensor<1x1x4x2xf32>
  %1 = "fuel.mat_mul"(%q, %0) : (tensor<1x1x2x4xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x2x2xf32>
  %2 = "fuel.const"() {dtype = "f32", name = "sqrt_d", shape = [], value = dense<8.000000e+00> : tensor<f32>} : () -> tensor<f32>
  %3 = "fuel.broadcast_to"(%2) {shape = [1, 1, 2, 2]} : (tensor<f32>) -> tensor<1x1x2x2xf32>
  %4 = "fuel.div"(%1, %3) : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %5 = "fuel.const"() {dtype = "f32", name = "mask", shape = [2, 2], value = dense<[[0.0, 0xFF800000], [0.0, 0.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %6 = "fuel.broadcast_to"(%5) {shape = [1, 1, 2, 2]} : (tensor<2x2xf32>) -> tensor<1x1x2x2xf32>
  %7 = "fuel.add"(%6, %4) : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %8 = "fuel.softmax_last_dim"(%7) : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %9 = "fuel.mat_mul"(%8, %v) : (tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  return %9 : tensor<1x1x2x4xf32>
}

// -----

// A constant mask that is not exactly causal (a sliding window of 2 keys) stays unfused.
// CHECK-LABEL: func.func @not_causal
// CHECK-NOT:     fuel.flash_attn
// CHECK:         "fuel.where"
// CHECK:         "fuel.softmax_last_dim"
func.func @not_causal(%q: tensor<1x1x3x4xf32>, %k: tensor<1x1x3x4xf32>, %v: tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32> {
  %0 = "fuel.transpose"(%k) : (tensor<1x1x3x4xf32>) -> tensor<1x1x4x3xf32>
  %1 = "fuel.mat_mul"(%q, %0) : (tensor<1x1x3x4xf32>, tensor<1x1x4x3xf32>) -> tensor<1x1x3x3xf32>
  %2 = "fuel.const"() {dtype = "u8", name = "band", shape = [1, 1, 3, 3], value = dense<[[[[1, 0, 0], [1, 1, 0], [0, 1, 1]]]]> : tensor<1x1x3x3xui8>} : () -> tensor<1x1x3x3xui8>
  %3 = "fuel.const"() {dtype = "f32", name = "neg", shape = [], value = dense<-3.40282347E+38> : tensor<f32>} : () -> tensor<f32>
  %4 = "fuel.broadcast_to"(%3) {shape = [1, 1, 3, 3]} : (tensor<f32>) -> tensor<1x1x3x3xf32>
  %5 = "fuel.where"(%2, %1, %4) : (tensor<1x1x3x3xui8>, tensor<1x1x3x3xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %6 = "fuel.softmax_last_dim"(%5) : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %7 = "fuel.mat_mul"(%6, %v) : (tensor<1x1x3x3xf32>, tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32>
  return %7 : tensor<1x1x3x4xf32>
}

// -----

// A causal pattern whose masked value (-1e4) does not make exp underflow to 0
// for every score: not FlashAttn's mask, unfused.
// CHECK-LABEL: func.func @soft_mask
// CHECK-NOT:     fuel.flash_attn
// CHECK:         "fuel.add"
func.func @soft_mask(%q: tensor<1x1x2x4xf32>, %k: tensor<1x1x2x4xf32>, %v: tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32> {
  %0 = "fuel.transpose"(%k) : (tensor<1x1x2x4xf32>) -> tensor<1x1x4x2xf32>
  %1 = "fuel.mat_mul"(%q, %0) : (tensor<1x1x2x4xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x2x2xf32>
  %2 = "fuel.const"() {dtype = "f32", name = "mask", shape = [1, 1, 2, 2], value = dense<[[[[0.0, -1.0e+04], [0.0, 0.0]]]]> : tensor<1x1x2x2xf32>} : () -> tensor<1x1x2x2xf32>
  %3 = "fuel.add"(%1, %2) : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %4 = "fuel.softmax_last_dim"(%3) : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %5 = "fuel.mat_mul"(%4, %v) : (tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  return %5 : tensor<1x1x2x4xf32>
}

// -----

// A scale that is not a constant scalar (an input) blocks the fusion.
// CHECK-LABEL: func.func @scale_not_constant
// CHECK-NOT:     fuel.flash_attn
// CHECK:         "fuel.div"
func.func @scale_not_constant(%q: tensor<1x1x2x4xf32>, %k: tensor<1x1x2x4xf32>, %v: tensor<1x1x2x4xf32>, %s: tensor<f32>) -> tensor<1x1x2x4xf32> {
  %0 = "fuel.transpose"(%k) : (tensor<1x1x2x4xf32>) -> tensor<1x1x4x2xf32>
  %1 = "fuel.mat_mul"(%q, %0) : (tensor<1x1x2x4xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x2x2xf32>
  %2 = "fuel.broadcast_to"(%s) {shape = [1, 1, 2, 2]} : (tensor<f32>) -> tensor<1x1x2x2xf32>
  %3 = "fuel.div"(%1, %2) : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %4 = "fuel.softmax_last_dim"(%3) : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %5 = "fuel.mat_mul"(%4, %v) : (tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  return %5 : tensor<1x1x2x4xf32>
}

// -----

// A softmax over the query axis (2), spelled out, is not FlashAttn's: unfused.
// CHECK-LABEL: func.func @softmax_other_axis
// CHECK-NOT:     fuel.flash_attn
// CHECK:         "fuel.max_dim"(%{{.*}}) {axis = 2 : i64}
func.func @softmax_other_axis(%q: tensor<1x1x2x4xf32>, %k: tensor<1x1x2x4xf32>, %v: tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32> {
  %0 = "fuel.transpose"(%k) : (tensor<1x1x2x4xf32>) -> tensor<1x1x4x2xf32>
  %1 = "fuel.mat_mul"(%q, %0) : (tensor<1x1x2x4xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x2x2xf32>
  %2 = "fuel.max_dim"(%1) {axis = 2 : i64} : (tensor<1x1x2x2xf32>) -> tensor<1x1x2xf32>
  %3 = "fuel.unsqueeze"(%2) {dim = 2 : i64} : (tensor<1x1x2xf32>) -> tensor<1x1x1x2xf32>
  %4 = "fuel.broadcast_to"(%3) {shape = [1, 1, 2, 2]} : (tensor<1x1x1x2xf32>) -> tensor<1x1x2x2xf32>
  %5 = "fuel.sub"(%1, %4) : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %6 = "fuel.exp"(%5) : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %7 = "fuel.sum_dim"(%6) {axis = 2 : i64} : (tensor<1x1x2x2xf32>) -> tensor<1x1x2xf32>
  %8 = "fuel.unsqueeze"(%7) {dim = 2 : i64} : (tensor<1x1x2xf32>) -> tensor<1x1x1x2xf32>
  %9 = "fuel.broadcast_to"(%8) {shape = [1, 1, 2, 2]} : (tensor<1x1x1x2xf32>) -> tensor<1x1x2x2xf32>
  %10 = "fuel.div"(%6, %9) : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %11 = "fuel.mat_mul"(%10, %v) : (tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  return %11 : tensor<1x1x2x4xf32>
}

// -----

// `?` extents (a symbolic batch): not matched (a constant causal mask has static
// extents, and unmasked attention does not pay); the softmax still fuses. A
// symbolic module's bindings are static IR: there it fuses, and the kernel takes
// batch and sequence at run time.
// CHECK-LABEL: func.func @dynamic_batch
// CHECK-NOT:     fuel.flash_attn
// CHECK:         "fuel.softmax_last_dim"
func.func @dynamic_batch(%q: tensor<?x2x4x8xf32>, %k: tensor<?x2x4x8xf32>, %v: tensor<?x2x4x8xf32>) -> tensor<?x2x4x8xf32> {
  %0 = "fuel.transpose"(%k) : (tensor<?x2x4x8xf32>) -> tensor<?x2x8x4xf32>
  %1 = "fuel.mat_mul"(%q, %0) : (tensor<?x2x4x8xf32>, tensor<?x2x8x4xf32>) -> tensor<?x2x4x4xf32>
  %2 = "fuel.mul_scalar"(%1) {value = 2.500000e-01 : f64} : (tensor<?x2x4x4xf32>) -> tensor<?x2x4x4xf32>
  %3 = "fuel.softmax_last_dim"(%2) : (tensor<?x2x4x4xf32>) -> tensor<?x2x4x4xf32>
  %4 = "fuel.mat_mul"(%3, %v) : (tensor<?x2x4x4xf32>, tensor<?x2x4x8xf32>) -> tensor<?x2x4x8xf32>
  return %4 : tensor<?x2x4x8xf32>
}

// -----

// A causal band of -inf (constant) and BERT's padding mask fed as an input
// ([B,1,1,Sk], broadcast to the scores): the mask is FlashAttn's 4th operand,
// read before its BroadcastTo; the band is its causal flag.
// CHECK-LABEL: func.func @causal_input_mask
// CHECK-NEXT:    %[[A:.*]] = "fuel.flash_attn"(%arg0, %arg1, %arg2, %arg3) {causal = true, softmax_scale = 2.500000e-01 : f64}
// CHECK-SAME:      (tensor<2x2x3x8xf32>, tensor<2x2x3x8xf32>, tensor<2x2x3x8xf32>, tensor<2x1x1x3xf32>) -> tensor<2x2x3x8xf32>
// CHECK-NEXT:    return %[[A]]
// NOKERNEL-LABEL: func.func @causal_input_mask
// NOKERNEL-NOT:    fuel.flash_attn
func.func @causal_input_mask(%q: tensor<2x2x3x8xf32>, %k: tensor<2x2x3x8xf32>, %v: tensor<2x2x3x8xf32>, %m: tensor<2x1x1x3xf32>) -> tensor<2x2x3x8xf32> {
  %0 = "fuel.transpose"(%k) : (tensor<2x2x3x8xf32>) -> tensor<2x2x8x3xf32>
  %1 = "fuel.mat_mul"(%q, %0) : (tensor<2x2x3x8xf32>, tensor<2x2x8x3xf32>) -> tensor<2x2x3x3xf32>
  %2 = "fuel.mul_scalar"(%1) {value = 2.500000e-01 : f64} : (tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %3 = "fuel.const"() {dtype = "f32", name = "causal", shape = [3, 3], value = dense<[[0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0]]> : tensor<3x3xf32>} : () -> tensor<3x3xf32>
  %4 = "fuel.broadcast_to"(%3) {shape = [2, 2, 3, 3]} : (tensor<3x3xf32>) -> tensor<2x2x3x3xf32>
  %5 = "fuel.add"(%2, %4) : (tensor<2x2x3x3xf32>, tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %6 = "fuel.broadcast_to"(%m) {shape = [2, 2, 3, 3]} : (tensor<2x1x1x3xf32>) -> tensor<2x2x3x3xf32>
  %7 = "fuel.add"(%6, %5) : (tensor<2x2x3x3xf32>, tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %8 = "fuel.softmax_last_dim"(%7) : (tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %9 = "fuel.mat_mul"(%8, %v) : (tensor<2x2x3x3xf32>, tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32>
  return %9 : tensor<2x2x3x8xf32>
}

// -----

// The input mask added first and the band after; the mask [Sq,Sk], shared by
// every batch and head.
// CHECK-LABEL: func.func @input_mask_then_band
// CHECK-NEXT:    "fuel.flash_attn"(%arg0, %arg1, %arg2, %arg3) {causal = true, softmax_scale = 1.000000e+00 : f64}
// CHECK-SAME:      tensor<3x3xf32>) -> tensor<1x2x3x8xf32>
func.func @input_mask_then_band(%q: tensor<1x2x3x8xf32>, %k: tensor<1x2x3x8xf32>, %v: tensor<1x2x3x8xf32>, %m: tensor<3x3xf32>) -> tensor<1x2x3x8xf32> {
  %0 = "fuel.transpose"(%k) : (tensor<1x2x3x8xf32>) -> tensor<1x2x8x3xf32>
  %1 = "fuel.mat_mul"(%q, %0) : (tensor<1x2x3x8xf32>, tensor<1x2x8x3xf32>) -> tensor<1x2x3x3xf32>
  %2 = "fuel.broadcast_to"(%m) {shape = [1, 2, 3, 3]} : (tensor<3x3xf32>) -> tensor<1x2x3x3xf32>
  %3 = "fuel.add"(%1, %2) : (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %4 = "fuel.const"() {dtype = "f32", name = "causal", shape = [3, 3], value = dense<[[0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0]]> : tensor<3x3xf32>} : () -> tensor<3x3xf32>
  %5 = "fuel.broadcast_to"(%4) {shape = [1, 2, 3, 3]} : (tensor<3x3xf32>) -> tensor<1x2x3x3xf32>
  %6 = "fuel.add"(%3, %5) : (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %7 = "fuel.softmax_last_dim"(%6) : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %8 = "fuel.mat_mul"(%7, %v) : (tensor<1x2x3x3xf32>, tensor<1x2x3x8xf32>) -> tensor<1x2x3x8xf32>
  return %8 : tensor<1x2x3x8xf32>
}

// -----

// A mask of one value per query row ([B,1,Sq,1]) broadcast over the keys: the
// Add reads it, FlashAttn's mask operand (a value per key) does not: unfused,
// not mis-fused.
// CHECK-LABEL: func.func @mask_not_per_key
// CHECK-NOT:     fuel.flash_attn
// CHECK:         "fuel.softmax_last_dim"
func.func @mask_not_per_key(%q: tensor<2x2x3x8xf32>, %k: tensor<2x2x3x8xf32>, %v: tensor<2x2x3x8xf32>, %m: tensor<2x1x3x1xf32>) -> tensor<2x2x3x8xf32> {
  %0 = "fuel.transpose"(%k) : (tensor<2x2x3x8xf32>) -> tensor<2x2x8x3xf32>
  %1 = "fuel.mat_mul"(%q, %0) : (tensor<2x2x3x8xf32>, tensor<2x2x8x3xf32>) -> tensor<2x2x3x3xf32>
  %3 = "fuel.const"() {dtype = "f32", name = "causal", shape = [3, 3], value = dense<[[0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0]]> : tensor<3x3xf32>} : () -> tensor<3x3xf32>
  %4 = "fuel.broadcast_to"(%3) {shape = [2, 2, 3, 3]} : (tensor<3x3xf32>) -> tensor<2x2x3x3xf32>
  %5 = "fuel.add"(%1, %4) : (tensor<2x2x3x3xf32>, tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %6 = "fuel.broadcast_to"(%m) {shape = [2, 2, 3, 3]} : (tensor<2x1x3x1xf32>) -> tensor<2x2x3x3xf32>
  %7 = "fuel.add"(%5, %6) : (tensor<2x2x3x3xf32>, tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %8 = "fuel.softmax_last_dim"(%7) : (tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %9 = "fuel.mat_mul"(%8, %v) : (tensor<2x2x3x3xf32>, tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32>
  return %9 : tensor<2x2x3x8xf32>
}

// -----

// BERT: the additive input mask without a causal band, small scores. Matched (the mask an
// operand), but the kernel does not pay without a band (``pays``): unfused.
// CHECK-LABEL: func.func @bert_input_mask
// CHECK-NOT:     fuel.flash_attn
// CHECK:         "fuel.softmax_last_dim"
func.func @bert_input_mask(%q: tensor<2x2x3x8xf32>, %k: tensor<2x2x3x8xf32>, %v: tensor<2x2x3x8xf32>, %m: tensor<2x1x1x3xf32>) -> tensor<2x2x3x8xf32> {
  %0 = "fuel.transpose"(%k) : (tensor<2x2x3x8xf32>) -> tensor<2x2x8x3xf32>
  %1 = "fuel.mat_mul"(%q, %0) : (tensor<2x2x3x8xf32>, tensor<2x2x8x3xf32>) -> tensor<2x2x3x3xf32>
  %2 = "fuel.mul_scalar"(%1) {value = 2.500000e-01 : f64} : (tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %6 = "fuel.broadcast_to"(%m) {shape = [2, 2, 3, 3]} : (tensor<2x1x1x3xf32>) -> tensor<2x2x3x3xf32>
  %7 = "fuel.add"(%2, %6) : (tensor<2x2x3x3xf32>, tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %8 = "fuel.softmax_last_dim"(%7) : (tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %9 = "fuel.mat_mul"(%8, %v) : (tensor<2x2x3x3xf32>, tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32>
  return %9 : tensor<2x2x3x8xf32>
}

// -----

// BERT's input mask, scores of 2^19 elements (2 x 4 x 256 x 256): without a band
// the kernel pays from that size (``pays``): fused, the mask the 4th operand.
// With the options of a symbolic module's bindings (attention_by_size=false) the
// choice may not depend on the sizes: unfused.
// CHECK-LABEL: func.func @bert_input_mask_large
// CHECK-NEXT:    %[[A:.*]] = "fuel.flash_attn"(%arg0, %arg1, %arg2, %arg3) {causal = false, softmax_scale = 2.500000e-01 : f64}
// CHECK-SAME:      tensor<2x1x1x256xf32>) -> tensor<2x4x256x8xf32>
// CHECK-NEXT:    return %[[A]]
// NOKLEN-LABEL: func.func @bert_input_mask_large
// NOKLEN-NOT:     fuel.flash_attn
// NOKLEN:         "fuel.softmax_last_dim"
func.func @bert_input_mask_large(%q: tensor<2x4x256x8xf32>, %k: tensor<2x4x256x8xf32>, %v: tensor<2x4x256x8xf32>, %m: tensor<2x1x1x256xf32>) -> tensor<2x4x256x8xf32> {
  %0 = "fuel.transpose"(%k) : (tensor<2x4x256x8xf32>) -> tensor<2x4x8x256xf32>
  %1 = "fuel.mat_mul"(%q, %0) : (tensor<2x4x256x8xf32>, tensor<2x4x8x256xf32>) -> tensor<2x4x256x256xf32>
  %2 = "fuel.mul_scalar"(%1) {value = 2.500000e-01 : f64} : (tensor<2x4x256x256xf32>) -> tensor<2x4x256x256xf32>
  %3 = "fuel.broadcast_to"(%m) {shape = [2, 4, 256, 256]} : (tensor<2x1x1x256xf32>) -> tensor<2x4x256x256xf32>
  %4 = "fuel.add"(%2, %3) : (tensor<2x4x256x256xf32>, tensor<2x4x256x256xf32>) -> tensor<2x4x256x256xf32>
  %5 = "fuel.softmax_last_dim"(%4) : (tensor<2x4x256x256xf32>) -> tensor<2x4x256x256xf32>
  %6 = "fuel.mat_mul"(%5, %v) : (tensor<2x4x256x256xf32>, tensor<2x4x256x8xf32>) -> tensor<2x4x256x8xf32>
  return %6 : tensor<2x4x256x8xf32>
}
