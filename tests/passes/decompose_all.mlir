// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file --verify-diagnostics --no-verify-types \
// RUN:   --pass-pipeline='builtin.module(fuel-decompose{all=true})' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file --verify-diagnostics --no-verify-types \
// RUN:   --pass-pipeline='builtin.module(fuel-decompose{table=primitives_f32})' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file --no-verify-types \
// RUN:   --pass-pipeline='builtin.module(fuel-decompose{all=true})' | filecheck %s --check-prefix=GONE

// (--no-verify-types: the decline chunks feed deliberately ill-typed ops,
// which the driver would otherwise reject before the pass runs.)
// fuel-decompose of every fused op of the registry, each at small realistic shapes emitted by graph_to_module from
// the registry builders. CHECK pins the recipe's shape (the key primitives in
// order, the data flow where it matters); GONE checks that no trace of the
// fused op is left anywhere in its function (a CHECK-NOT after CHECK-LABEL
// only covers the text up to the next match). --verify-diagnostics also
// proves that no decomposing chunk warns. The chunks after the 25 are the
// legitimate declines: the op stays in place and a warning says why.

// 1. Rank 3: the reductions run over axis 2.
// CHECK-LABEL: func.func @softmax_last_dim(
// CHECK-NOT:     "fuel.softmax_last_dim"
// CHECK:       %[[M:.*]] = "fuel.max_dim"(%arg0) {axis = 2 : i64}
// CHECK-NEXT:  %[[U:.*]] = "fuel.unsqueeze"(%[[M]]) {dim = 2 : i64}
// CHECK-NEXT:  %[[B:.*]] = "fuel.broadcast_to"(%[[U]]) {shape = [2, 3, 5]}
// CHECK-NEXT:  %[[S:.*]] = "fuel.sub"(%arg0, %[[B]])
// CHECK-NEXT:  %[[E:.*]] = "fuel.exp"(%[[S]])
// CHECK-NEXT:  %[[Z:.*]] = "fuel.sum_dim"(%[[E]]) {axis = 2 : i64}
// CHECK:       %[[D:.*]] = "fuel.div"(%[[E]],
// CHECK-NEXT:  return %[[D]]
// GONE-LABEL: func.func @softmax_last_dim(
// GONE-NOT:     "fuel.softmax_last_dim"
func.func @softmax_last_dim(%arg0: tensor<2x3x5xf32>) -> tensor<2x3x5xf32> {
  %0 = "fuel.softmax_last_dim"(%arg0) : (tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  return %0 : tensor<2x3x5xf32>
}

// -----

// 2. The [N] bias is lifted to [1, N] and broadcast over the rows.
// CHECK-LABEL: func.func @fused_linear(
// CHECK-NOT:     "fuel.fused_linear"
// CHECK:       %[[MM:.*]] = "fuel.mat_mul"(%arg0, %arg1) : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
// CHECK-NEXT:  %[[R:.*]] = "fuel.reshape"(%arg2) {shape = [1, 5]}
// CHECK-NEXT:  %[[BC:.*]] = "fuel.broadcast_to"(%[[R]]) {shape = [3, 5]}
// CHECK-NEXT:  %[[A:.*]] = "fuel.add"(%[[MM]], %[[BC]])
// CHECK-NEXT:  return %[[A]]
// GONE-LABEL: func.func @fused_linear(
// GONE-NOT:     "fuel.fused_linear"
func.func @fused_linear(%arg0: tensor<3x4xf32>, %arg1: tensor<4x5xf32>, %arg2: tensor<5xf32>) -> tensor<3x5xf32> {
  %0 = "fuel.fused_linear"(%arg0, %arg1, %arg2) : (tensor<3x4xf32>, tensor<4x5xf32>, tensor<5xf32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}

// -----

// 3. x / sqrt(mean(x^2) + eps); eps fills the one scalar slot.
// CHECK-LABEL: func.func @rms_norm_last_dim(
// CHECK-NOT:     "fuel.rms_norm_last_dim"
// CHECK:       %[[SQ:.*]] = "fuel.sqr"(%arg0)
// CHECK-NEXT:  %[[MS:.*]] = "fuel.mean_dim"(%[[SQ]]) {axis = 2 : i64}
// CHECK-NEXT:  %[[U:.*]] = "fuel.unsqueeze"(%[[MS]]) {dim = 2 : i64}
// CHECK-NEXT:  %[[EPS:.*]] = "fuel.add_scalar"(%[[U]]) {value = 1.000000e-01 : f64}
// CHECK-NEXT:  %[[RT:.*]] = "fuel.sqrt"(%[[EPS]])
// CHECK-NEXT:  %[[B:.*]] = "fuel.broadcast_to"(%[[RT]]) {shape = [2, 3, 8]}
// CHECK-NEXT:  %[[D:.*]] = "fuel.div"(%arg0, %[[B]])
// CHECK-NEXT:  return %[[D]]
// GONE-LABEL: func.func @rms_norm_last_dim(
// GONE-NOT:     "fuel.rms_norm_last_dim"
func.func @rms_norm_last_dim(%arg0: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  %0 = "fuel.rms_norm_last_dim"(%arg0) {eps = 1.000000e-01 : f64} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %0 : tensor<2x3x8xf32>
}

// -----

// 4. (x - mean) / sqrt(var + eps).
// CHECK-LABEL: func.func @layer_norm_last_dim(
// CHECK-NOT:     "fuel.layer_norm_last_dim"
// CHECK:       %[[MU:.*]] = "fuel.mean_dim"(%arg0) {axis = 2 : i64}
// CHECK:       %[[XC:.*]] = "fuel.sub"(%arg0,
// CHECK-NEXT:  %[[SQ:.*]] = "fuel.sqr"(%[[XC]])
// CHECK-NEXT:  "fuel.mean_dim"(%[[SQ]]) {axis = 2 : i64}
// CHECK:       "fuel.add_scalar"({{.*}}) {value = 5.000000e-01 : f64}
// CHECK-NEXT:  "fuel.sqrt"
// CHECK:       %[[D:.*]] = "fuel.div"(%[[XC]],
// CHECK-NEXT:  return %[[D]]
// GONE-LABEL: func.func @layer_norm_last_dim(
// GONE-NOT:     "fuel.layer_norm_last_dim"
func.func @layer_norm_last_dim(%arg0: tensor<3x2x7xf32>) -> tensor<3x2x7xf32> {
  %0 = "fuel.layer_norm_last_dim"(%arg0) {eps = 5.000000e-01 : f64} : (tensor<3x2x7xf32>) -> tensor<3x2x7xf32>
  return %0 : tensor<3x2x7xf32>
}

// -----

// 4 with weight and bias, f16: computed in f32 (one cast in, the affine in
// f32), rounded to f16 once at the end.
// CHECK-LABEL: func.func @layer_norm_last_dim_affine_f16(
// CHECK-NOT:     "fuel.layer_norm_last_dim"
// CHECK:       %[[X:.*]] = "fuel.cast"(%arg0) {dtype = "f32"} : (tensor<3x8xf16>) -> tensor<3x8xf32>
// CHECK:       %[[D:.*]] = "fuel.div"
// CHECK:       "fuel.cast"(%arg1) {dtype = "f32"}
// CHECK:       %[[M:.*]] = "fuel.mul"(%[[D]],
// CHECK:       "fuel.cast"(%arg2) {dtype = "f32"}
// CHECK:       %[[A:.*]] = "fuel.add"(%[[M]],
// CHECK-NEXT:  %[[Y:.*]] = "fuel.cast"(%[[A]]) {dtype = "f16"} : (tensor<3x8xf32>) -> tensor<3x8xf16>
// CHECK-NEXT:  return %[[Y]]
// GONE-LABEL: func.func @layer_norm_last_dim_affine_f16(
// GONE-NOT:     "fuel.layer_norm_last_dim"
func.func @layer_norm_last_dim_affine_f16(%arg0: tensor<3x8xf16>, %arg1: tensor<8xf16>, %arg2: tensor<8xf16>) -> tensor<3x8xf16> {
  %0 = "fuel.layer_norm_last_dim"(%arg0, %arg1, %arg2) {eps = 1.000000e-05 : f64} : (tensor<3x8xf16>, tensor<8xf16>, tensor<8xf16>) -> tensor<3x8xf16>
  return %0 : tensor<3x8xf16>
}

// -----

// 5. x*cos + rotate_half(x)*sin, rotate_half = concat(-x2, x1) over the last axis.
// CHECK-LABEL: func.func @rope(
// CHECK-NOT:     "fuel.rope"
// CHECK:       %[[C:.*]] = "fuel.broadcast_to"(%arg1) {shape = [3, 4]}
// CHECK-NEXT:  %[[XC:.*]] = "fuel.mul"(%arg0, %[[C]])
// CHECK-NEXT:  %[[X2:.*]] = "fuel.slice"(%arg0) {dim = 1 : i64, len = 2 : i64, start = 2 : i64}
// CHECK-NEXT:  %[[N:.*]] = "fuel.neg"(%[[X2]])
// CHECK-NEXT:  %[[X1:.*]] = "fuel.slice"(%arg0) {dim = 1 : i64, len = 2 : i64, start = 0 : i64}
// CHECK-NEXT:  %[[R:.*]] = "fuel.concat"(%[[N]], %[[X1]]) {dim = 1 : i64}
// CHECK-NEXT:  %[[S:.*]] = "fuel.broadcast_to"(%arg2)
// CHECK-NEXT:  %[[RS:.*]] = "fuel.mul"(%[[R]], %[[S]])
// CHECK-NEXT:  %[[A:.*]] = "fuel.add"(%[[XC]], %[[RS]])
// CHECK-NEXT:  return %[[A]]
// GONE-LABEL: func.func @rope(
// GONE-NOT:     "fuel.rope"
func.func @rope(%arg0: tensor<3x4xf32>, %arg1: tensor<3x4xf32>, %arg2: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = "fuel.rope"(%arg0, %arg1, %arg2) {interleaved = false} : (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

// 6. im2col: pad (the bottom row rounded up to the stride), the 3x2 taps as
// slices of a [N, C, H/s, s, W, 1] view, one Concat, one batched matmul, bias.
// CHECK-LABEL: func.func @conv2d(
// CHECK-NOT:     "fuel.conv2d"
// CHECK:       "fuel.reshape"(%arg1) {shape = [1, 4, 18]}
// CHECK-NEXT:  %[[WB:.*]] = "fuel.broadcast_to"
// CHECK-NEXT:  %[[P:.*]] = "fuel.pad"(%arg0) {mode = "constant", padding = [0, 0, 0, 0, 1, 2, 0, 0]
// CHECK-NEXT:  %[[V:.*]] = "fuel.reshape"(%[[P]]) {shape = [2, 3, 5, 2, 6, 1]}
// CHECK-COUNT-6: "fuel.unsqueeze"
// CHECK:       %[[ST:.*]] = "fuel.concat"({{.*}}) {dim = 2 : i64} : ({{.*}}) -> tensor<2x3x6x4x5xf32>
// CHECK-NEXT:  %[[COLS:.*]] = "fuel.reshape"(%[[ST]]) {shape = [2, 18, 20]}
// CHECK-NEXT:  %[[MM:.*]] = "fuel.mat_mul"(%[[WB]], %[[COLS]]) : (tensor<2x4x18xf32>, tensor<2x18x20xf32>) -> tensor<2x4x20xf32>
// CHECK-NEXT:  %[[Y:.*]] = "fuel.reshape"(%[[MM]]) {shape = [2, 4, 4, 5]}
// CHECK-NEXT:  "fuel.reshape"(%arg2) {shape = [1, 4, 1, 1]}
// CHECK-NEXT:  %[[BB:.*]] = "fuel.broadcast_to"
// CHECK-NEXT:  %[[OUT:.*]] = "fuel.add"(%[[Y]], %[[BB]])
// CHECK-NEXT:  return %[[OUT]]
// GONE-LABEL: func.func @conv2d(
// GONE-NOT:     "fuel.conv2d"
func.func @conv2d(%arg0: tensor<2x3x7x6xf32>, %arg1: tensor<4x3x3x2xf32>, %arg2: tensor<4xf32>) -> tensor<2x4x4x5xf32> {
  %0 = "fuel.conv2d"(%arg0, %arg1, %arg2) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 0], stride = [2, 1]} : (tensor<2x3x7x6xf32>, tensor<4x3x3x2xf32>, tensor<4xf32>) -> tensor<2x4x4x5xf32>
  return %0 : tensor<2x4x4x5xf32>
}

// -----

// 6b. A residual conv (x, w, bias, skip) with a relu: the same im2col and
// matmul, the bias, then the skip, then the clamp (the skip added before the
// activation).
// CHECK-LABEL: func.func @conv2d_residual(
// CHECK-NOT:     "fuel.conv2d"
// CHECK:       %[[MM:.*]] = "fuel.mat_mul"
// CHECK-NEXT:  %[[Y:.*]] = "fuel.reshape"(%[[MM]]) {shape = [2, 4, 4, 5]}
// CHECK-NEXT:  "fuel.reshape"(%arg2) {shape = [1, 4, 1, 1]}
// CHECK-NEXT:  %[[BB:.*]] = "fuel.broadcast_to"
// CHECK-NEXT:  %[[YB:.*]] = "fuel.add"(%[[Y]], %[[BB]])
// CHECK-NEXT:  %[[YS:.*]] = "fuel.add"(%[[YB]], %arg3)
// CHECK-NEXT:  %[[OUT:.*]] = "fuel.clamp"(%[[YS]]) {max = 0x7FF0000000000000 : f64, min = 0.000000e+00 : f64}
// CHECK-NEXT:  return %[[OUT]]
// GONE-LABEL: func.func @conv2d_residual(
// GONE-NOT:     "fuel.conv2d"
func.func @conv2d_residual(%arg0: tensor<2x3x7x6xf32>, %arg1: tensor<4x3x3x2xf32>, %arg2: tensor<4xf32>, %arg3: tensor<2x4x4x5xf32>) -> tensor<2x4x4x5xf32> {
  %0 = "fuel.conv2d"(%arg0, %arg1, %arg2, %arg3) {clamp_min = 0.0 : f64, dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1>, padding = [1, 0], residual = true, stride = [2, 1]} : (tensor<2x3x7x6xf32>, tensor<4x3x3x2xf32>, tensor<4xf32>, tensor<2x4x4x5xf32>) -> tensor<2x4x4x5xf32>
  return %0 : tensor<2x4x4x5xf32>
}

// -----

// 7. s * (g - sum(g * s)).
// CHECK-LABEL: func.func @softmax_last_dim_backward(
// CHECK-NOT:     "fuel.softmax_last_dim_backward"
// CHECK:       %[[GS:.*]] = "fuel.mul"(%arg1, %arg0)
// CHECK-NEXT:  %[[SUM:.*]] = "fuel.sum_dim"(%[[GS]]) {axis = 0 : i64}
// CHECK-NEXT:  "fuel.unsqueeze"(%[[SUM]])
// CHECK-NEXT:  %[[B:.*]] = "fuel.broadcast_to"
// CHECK-NEXT:  %[[D:.*]] = "fuel.sub"(%arg1, %[[B]])
// CHECK-NEXT:  %[[R:.*]] = "fuel.mul"(%arg0, %[[D]])
// CHECK-NEXT:  return %[[R]]
// GONE-LABEL: func.func @softmax_last_dim_backward(
// GONE-NOT:     "fuel.softmax_last_dim_backward"
func.func @softmax_last_dim_backward(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.softmax_last_dim_backward"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// 8. Three eps slots, each filled with the op's eps.
// CHECK-LABEL: func.func @layer_norm_last_dim_backward(
// CHECK-NOT:     "fuel.layer_norm_last_dim_backward"
// CHECK:       "fuel.mean_dim"(%arg0) {axis = 0 : i64}
// CHECK:       "fuel.sqr"
// CHECK:       "fuel.add_scalar"({{.*}}) {value = 1.000000e-05 : f64}
// CHECK-NEXT:  %[[RSTD:.*]] = "fuel.rsqrt"
// CHECK:       "fuel.mean_dim"(%arg1) {axis = 0 : i64}
// CHECK:       "fuel.add_scalar"({{.*}}) {value = 1.000000e-05 : f64}
// CHECK-NEXT:  "fuel.rsqrt"
// CHECK:       "fuel.add_scalar"({{.*}}) {value = 1.000000e-05 : f64}
// CHECK-NEXT:  "fuel.rsqrt"
// CHECK:       "fuel.mean_dim"
// CHECK:       %[[T:.*]] = "fuel.sub"
// CHECK-NEXT:  %[[R:.*]] = "fuel.mul"(%[[RSTD]], %[[T]])
// CHECK-NEXT:  return %[[R]]
// GONE-LABEL: func.func @layer_norm_last_dim_backward(
// GONE-NOT:     "fuel.layer_norm_last_dim_backward"
func.func @layer_norm_last_dim_backward(%arg0: tensor<6xf32>, %arg1: tensor<6xf32>) -> tensor<6xf32> {
  %0 = "fuel.layer_norm_last_dim_backward"(%arg0, %arg1) {eps = 1.000000e-05 : f64} : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

// 9. rsqrt(ms + eps) * (g - x * sum(g x) / (D (ms + eps))): two eps slots, D = 6 resolved from the shape.
// CHECK-LABEL: func.func @rms_norm_last_dim_backward(
// CHECK-NOT:     "fuel.rms_norm_last_dim_backward"
// CHECK:       "fuel.sqr"(%arg0)
// CHECK-NEXT:  "fuel.mean_dim"
// CHECK-NEXT:  %[[MS:.*]] = "fuel.unsqueeze"
// CHECK-NEXT:  "fuel.add_scalar"(%[[MS]]) {value = 9.9999999999999995E-7 : f64}
// CHECK-NEXT:  "fuel.rsqrt"
// CHECK:       "fuel.mul"(%arg1, %arg0)
// CHECK-NEXT:  "fuel.sum_dim"
// CHECK:       %[[E2:.*]] = "fuel.add_scalar"(%[[MS]]) {value = 9.9999999999999995E-7 : f64}
// CHECK-NEXT:  "fuel.mul_scalar"(%[[E2]]) {value = 6.000000e+00 : f64}
// CHECK:       "fuel.div"
// CHECK-NEXT:  "fuel.sub"(%arg1,
// CHECK-NEXT:  %[[R:.*]] = "fuel.mul"
// CHECK-NEXT:  return %[[R]]
// GONE-LABEL: func.func @rms_norm_last_dim_backward(
// GONE-NOT:     "fuel.rms_norm_last_dim_backward"
func.func @rms_norm_last_dim_backward(%arg0: tensor<6xf32>, %arg1: tensor<6xf32>) -> tensor<6xf32> {
  %0 = "fuel.rms_norm_last_dim_backward"(%arg0, %arg1) {eps = 9.9999999999999995E-7 : f64} : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

// 10. The gradient is split evenly among tied maxima: mask / count * up.
// CHECK-LABEL: func.func @reduce_max_to_backward(
// CHECK-NOT:     "fuel.reduce_max_to_backward"
// CHECK:       %[[Z:.*]] = "fuel.mul_scalar"(%arg0) {value = 0.000000e+00 : f64}
// CHECK-NEXT:  %[[MX:.*]] = "fuel.reduce_max_to"(%arg0) {shape = [3, 1]}
// CHECK-NEXT:  %[[MB:.*]] = "fuel.broadcast_to"(%[[MX]]) {shape = [3, 4]}
// CHECK-NEXT:  %[[EQ:.*]] = "fuel.equal"(%arg0, %[[MB]])
// CHECK-NEXT:  %[[MASK:.*]] = "fuel.masked_fill"(%[[Z]], %[[EQ]]) {value = 1.000000e+00 : f64}
// CHECK-NEXT:  %[[CNT:.*]] = "fuel.reduce_sum_to"(%[[MASK]]) {shape = [3, 1]}
// CHECK-NEXT:  %[[SH:.*]] = "fuel.div"(%arg1, %[[CNT]])
// CHECK-NEXT:  %[[SB:.*]] = "fuel.broadcast_to"(%[[SH]])
// CHECK-NEXT:  %[[R:.*]] = "fuel.mul"(%[[MASK]], %[[SB]])
// CHECK-NEXT:  return %[[R]]
// GONE-LABEL: func.func @reduce_max_to_backward(
// GONE-NOT:     "fuel.reduce_max_to_backward"
func.func @reduce_max_to_backward(%arg0: tensor<3x4xf32>, %arg1: tensor<3x1xf32>) -> tensor<3x4xf32> {
  %0 = "fuel.reduce_max_to_backward"(%arg0, %arg1) : (tensor<3x4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

// 11. col2im: one matmul, then scatter-add (index_add) the columns into the output buffer, then crop.
// CHECK-LABEL: func.func @conv_transpose2d(
// CHECK-NOT:     "fuel.conv_transpose2d"
// CHECK:       "fuel.permute"(%arg1) {perm = [1, 2, 3, 0]}
// CHECK:       %[[MM:.*]] = "fuel.mat_mul"
// CHECK-NEXT:  %[[COLS:.*]] = "fuel.reshape"(%[[MM]]) {shape = [1, 3, 36]}
// CHECK:       "fuel.iota"
// CHECK:       %[[IDX:.*]] = "fuel.cast"({{.*}}) {dtype = "u32"} : (tensor<36xf32>) -> tensor<36xui32>
// CHECK-NEXT:  %[[ACC:.*]] = "fuel.index_add"({{.*}}, %[[IDX]], %[[COLS]]) {dim = 2 : i64}
// CHECK-NEXT:  "fuel.reshape"(%[[ACC]]) {shape = [1, 3, 4, 4]}
// CHECK-NEXT:  "fuel.slice"({{.*}}) {dim = 2 : i64, len = 4 : i64, start = 0 : i64}
// CHECK-NEXT:  %[[Y:.*]] = "fuel.slice"({{.*}}) {dim = 3 : i64, len = 4 : i64, start = 0 : i64}
// CHECK-NEXT:  return %[[Y]]
// GONE-LABEL: func.func @conv_transpose2d(
// GONE-NOT:     "fuel.conv_transpose2d"
func.func @conv_transpose2d(%arg0: tensor<1x2x3x3xf32>, %arg1: tensor<2x3x2x2xf32>) -> tensor<1x3x4x4xf32> {
  %0 = "fuel.conv_transpose2d"(%arg0, %arg1) {dilation = [1, 1], groups = 1 : i64, output_padding = [0, 0], padding = [0, 0], stride = [1, 1]} : (tensor<1x2x3x3xf32>, tensor<2x3x2x2xf32>) -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

// 12. GQA (4 query heads over 2 kv heads), softcap, alibi and a causal mask: SDPA over primitives.
// CHECK-LABEL: func.func @flash_attn(
// CHECK-NOT:     "fuel.flash_attn"
// CHECK:       "fuel.reshape"(%arg1) {shape = [2, 2, 1, 4, 3]}
// CHECK-NEXT:  "fuel.broadcast_to"({{.*}}) {shape = [2, 2, 2, 4, 3]}
// CHECK-NEXT:  %[[K:.*]] = "fuel.reshape"({{.*}}) {shape = [2, 4, 4, 3]}
// CHECK-NEXT:  %[[KT:.*]] = "fuel.transpose"(%[[K]])
// CHECK-NEXT:  %[[S:.*]] = "fuel.mat_mul"(%arg0, %[[KT]])
// CHECK-NEXT:  "fuel.mul_scalar"(%[[S]]) {value = 0.69999999999999996 : f64}
// CHECK-NEXT:  "fuel.mul_scalar"({{.*}}) {value = 5.000000e-01 : f64}
// CHECK-NEXT:  "fuel.tanh"
// CHECK-NEXT:  "fuel.mul_scalar"({{.*}}) {value = 2.000000e+00 : f64}
// CHECK-NEXT:  "fuel.reshape"(%arg3) {shape = [1, 4, 1, 1]}
// CHECK:       "fuel.add_scalar"({{.*}}) {value = 0xFFF0000000000000 : f64}
// CHECK-NEXT:  "fuel.triu"({{.*}}) {diagonal = 1 : i64}
// CHECK:       "fuel.max_dim"({{.*}}) {axis = 3 : i64}
// CHECK:       "fuel.exp"
// CHECK:       %[[P:.*]] = "fuel.div"
// CHECK-NEXT:  "fuel.reshape"(%arg2) {shape = [2, 2, 1, 4, 3]}
// CHECK:       %[[O:.*]] = "fuel.mat_mul"(%[[P]], {{.*}}) : (tensor<2x4x4x4xf32>, tensor<2x4x4x3xf32>) -> tensor<2x4x4x3xf32>
// CHECK-NEXT:  return %[[O]]
// GONE-LABEL: func.func @flash_attn(
// GONE-NOT:     "fuel.flash_attn"
func.func @flash_attn(%arg0: tensor<2x4x4x3xf32>, %arg1: tensor<2x2x4x3xf32>, %arg2: tensor<2x2x4x3xf32>, %arg3: tensor<4xf32>) -> tensor<2x4x4x3xf32> {
  %0 = "fuel.flash_attn"(%arg0, %arg1, %arg2, %arg3) {causal = true, softcap = 2.000000e+00 : f64, softmax_scale = 0.69999999999999996 : f64} : (tensor<2x4x4x3xf32>, tensor<2x2x4x3xf32>, tensor<2x2x4x3xf32>, tensor<4xf32>) -> tensor<2x4x4x3xf32>
  return %0 : tensor<2x4x4x3xf32>
}

// -----

// 13. Gather the blocks of the table (index_select), mask keys past context_lens, SDPA;
// a batch with context_len 0 is zeroed (masked_fill).
// CHECK-LABEL: func.func @paged_attn(
// CHECK-NOT:     "fuel.paged_attn"
// CHECK:       %[[BT:.*]] = "fuel.reshape"(%arg3) {shape = [6]}
// CHECK-NEXT:  "fuel.index_select"(%arg1, %[[BT]]) {dim = 0 : i64}
// CHECK:       "fuel.mat_mul"(%arg0,
// CHECK-NEXT:  %[[S:.*]] = "fuel.mul_scalar"({{.*}}) {value = 5.000000e-01 : f64}
// CHECK:       "fuel.cast"(%arg4) {dtype = "f32"}
// CHECK:       %[[PAST:.*]] = "fuel.ge"
// CHECK-NEXT:  "fuel.masked_fill"(%[[S]], %[[PAST]]) {value = 0xFFF0000000000000 : f64}
// CHECK:       "fuel.exp"
// CHECK:       %[[P:.*]] = "fuel.div"
// CHECK-NEXT:  "fuel.index_select"(%arg2, %[[BT]]) {dim = 0 : i64}
// CHECK:       %[[O:.*]] = "fuel.mat_mul"(%[[P]],
// CHECK:       %[[EMPTY:.*]] = "fuel.broadcast_to"
// CHECK-NEXT:  %[[Z:.*]] = "fuel.masked_fill"(%[[O]], %[[EMPTY]]) {value = 0.000000e+00 : f64}
// CHECK-NEXT:  return %[[Z]]
// GONE-LABEL: func.func @paged_attn(
// GONE-NOT:     "fuel.paged_attn"
func.func @paged_attn(%arg0: tensor<2x2x1x4xf32>, %arg1: tensor<5x2x1x4xf32>, %arg2: tensor<5x2x1x4xf32>, %arg3: tensor<2x3xui32>, %arg4: tensor<2xui32>) -> tensor<2x2x1x4xf32> {
  %0 = "fuel.paged_attn"(%arg0, %arg1, %arg2, %arg3, %arg4) {block_size = 2 : i64, softmax_scale = 5.000000e-01 : f64} : (tensor<2x2x1x4xf32>, tensor<5x2x1x4xf32>, tensor<5x2x1x4xf32>, tensor<2x3xui32>, tensor<2xui32>) -> tensor<2x2x1x4xf32>
  return %0 : tensor<2x2x1x4xf32>
}

// -----

// 14. Q4_0: split the u32 stream into bytes, decode the f16 scale and the nibbles, dequantize, matmul.
// CHECK-LABEL: func.func @qmatmul(
// CHECK-NOT:     "fuel.qmatmul"
// CHECK:       "fuel.cast"(%arg1) {dtype = "f64"} : (tensor<45xui32>) -> tensor<45xf64>
// CHECK-NEXT:  "fuel.mul_scalar"({{.*}}) {value = 3.906250e-03 : f64}
// CHECK-NEXT:  "fuel.floor"
// CHECK:       "fuel.reshape"({{.*}}) {shape = [10, 18]}
// CHECK:       "fuel.concat"({{.*}}) {dim = 1 : i64} : (tensor<10x16xf32>, tensor<10x16xf32>) -> tensor<10x32xf32>
// CHECK-NEXT:  "fuel.add_scalar"({{.*}}) {value = -8.000000e+00 : f64}
// CHECK:       "fuel.broadcast_to"({{.*}}) {shape = [10, 32]}
// CHECK-NEXT:  "fuel.mul"
// CHECK-NEXT:  "fuel.reshape"({{.*}}) {shape = [5, 64]}
// CHECK-NEXT:  %[[WT:.*]] = "fuel.transpose"
// CHECK-NEXT:  %[[Y:.*]] = "fuel.mat_mul"(%arg0, %[[WT]]) : (tensor<3x64xf32>, tensor<64x5xf32>) -> tensor<3x5xf32>
// CHECK-NEXT:  return %[[Y]]
// GONE-LABEL: func.func @qmatmul(
// GONE-NOT:     "fuel.qmatmul"
func.func @qmatmul(%arg0: tensor<3x64xf32>, %arg1: tensor<45xui32>) -> tensor<3x5xf32> {
  %0 = "fuel.qmatmul"(%arg0, %arg1) {k = 64 : i64, n = 5 : i64, quant_type = "Q4_0"} : (tensor<3x64xf32>, tensor<45xui32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}

// -----

// 15. d/dx x^3 = 3 x^2.
// CHECK-LABEL: func.func @powi_backward(
// CHECK-NOT:     "fuel.powi_backward"
// CHECK:       %[[P:.*]] = "fuel.pow_i"(%arg0) {n = 2 : i64}
// CHECK-NEXT:  %[[S:.*]] = "fuel.mul_scalar"(%[[P]]) {value = 3.000000e+00 : f64}
// CHECK-NEXT:  %[[R:.*]] = "fuel.mul"(%[[S]], %arg1)
// CHECK-NEXT:  return %[[R]]
// GONE-LABEL: func.func @powi_backward(
// GONE-NOT:     "fuel.powi_backward"
func.func @powi_backward(%arg0: tensor<5xf32>, %arg1: tensor<5xf32>) -> tensor<5xf32> {
  %0 = "fuel.powi_backward"(%arg0, %arg1) {exp = 3 : i64} : (tensor<5xf32>, tensor<5xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}

// -----

// 16. Two scalar slots, mul then add.
// CHECK-LABEL: func.func @inplace_affine(
// CHECK-NOT:     "fuel.inplace_affine"
// CHECK:       %[[M:.*]] = "fuel.mul_scalar"(%arg0) {value = 2.500000e+00 : f64}
// CHECK-NEXT:  %[[A:.*]] = "fuel.add_scalar"(%[[M]]) {value = -1.000000e+00 : f64}
// CHECK-NEXT:  return %[[A]]
// GONE-LABEL: func.func @inplace_affine(
// GONE-NOT:     "fuel.inplace_affine"
func.func @inplace_affine(%arg0: tensor<5xf32>) -> tensor<5xf32> {
  %0 = "fuel.inplace_affine"(%arg0) {add = -1.000000e+00 : f64, mul = 2.500000e+00 : f64} : (tensor<5xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}

// -----

// 17. reduction=sum: log-softmax, pick the target logit (gather), zero ignore_index rows, sum.
// CHECK-LABEL: func.func @fused_softmax_cross_entropy(
// CHECK-NOT:     "fuel.fused_softmax_cross_entropy"
// CHECK:       "fuel.reduce_max_to"(%arg0) {shape = [2, 3, 1]}
// CHECK:       "fuel.exp"
// CHECK-NEXT:  "fuel.reduce_sum_to"
// CHECK-NEXT:  "fuel.log"
// CHECK:       %[[LSM:.*]] = "fuel.sub"
// CHECK-NEXT:  %[[T:.*]] = "fuel.cast"(%arg1) {dtype = "f64"}
// CHECK:       "fuel.add_scalar"({{.*}}) {value = -1.000000e+02 : f64}
// CHECK-NEXT:  %[[IGN:.*]] = "fuel.equal"(%[[T]],
// CHECK:       "fuel.cast"({{.*}}) {dtype = "u32"}
// CHECK-NEXT:  %[[IDX:.*]] = "fuel.unsqueeze"({{.*}}) {dim = 2 : i64}
// CHECK-NEXT:  "fuel.gather"(%[[LSM]], %[[IDX]]) {dim = 2 : i64}
// CHECK:       "fuel.masked_fill"({{.*}}, %[[IGN]]) {value = 0.000000e+00 : f64}
// CHECK-NEXT:  %[[L:.*]] = "fuel.sum_all"
// CHECK-NEXT:  return %[[L]] : tensor<f32>
// GONE-LABEL: func.func @fused_softmax_cross_entropy(
// GONE-NOT:     "fuel.fused_softmax_cross_entropy"
func.func @fused_softmax_cross_entropy(%arg0: tensor<2x3x6xf32>, %arg1: tensor<2x3xi64>) -> tensor<f32> {
  %0 = "fuel.fused_softmax_cross_entropy"(%arg0, %arg1) {ignore_index = -100 : i64, reduction = "sum"} : (tensor<2x3x6xf32>, tensor<2x3xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// 18. One shifted slice per tap (width 3), multiply-accumulate, bias.
// CHECK-LABEL: func.func @causal_conv1d(
// CHECK-NOT:     "fuel.causal_conv1d"
// CHECK:       "fuel.slice"(%arg0) {dim = 2 : i64, len = 4 : i64, start = 0 : i64}
// CHECK-NEXT:  "fuel.slice"(%arg1) {dim = 2 : i64, len = 1 : i64, start = 0 : i64}
// CHECK:       "fuel.mul"
// CHECK-NEXT:  "fuel.slice"(%arg0) {dim = 2 : i64, len = 4 : i64, start = 1 : i64}
// CHECK:       "fuel.add"
// CHECK-NEXT:  "fuel.slice"(%arg0) {dim = 2 : i64, len = 4 : i64, start = 2 : i64}
// CHECK:       "fuel.add"
// CHECK-NEXT:  "fuel.reshape"(%arg2) {shape = [1, 3, 1]}
// CHECK-NEXT:  "fuel.broadcast_to"
// CHECK-NEXT:  %[[Y:.*]] = "fuel.add"
// CHECK-NEXT:  return %[[Y]]
// GONE-LABEL: func.func @causal_conv1d(
// GONE-NOT:     "fuel.causal_conv1d"
func.func @causal_conv1d(%arg0: tensor<2x3x6xf32>, %arg1: tensor<3x1x3xf32>, %arg2: tensor<3xf32>) -> tensor<2x3x4xf32> {
  %0 = "fuel.causal_conv1d"(%arg0, %arg1, %arg2) {use_silu = false} : (tensor<2x3x6xf32>, tensor<3x1x3xf32>, tensor<3xf32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// -----

// 19. Two result slots: y [B, L, D] and the final state [B, D, N]; the scan is unrolled over L = 3 steps, h_t = exp(dt_t a) h_{t-1} + dt_t u_t b_t, y_t = <h_t, c_t>.
// CHECK-LABEL: func.func @selective_scan(
// CHECK-NOT:     "fuel.selective_scan"
// CHECK:       "fuel.slice"(%arg1) {dim = 1 : i64, len = 1 : i64, start = 0 : i64}
// CHECK:       %[[H0:.*]] = "fuel.mul"({{.*}}) : (tensor<2x4x2xf32>, tensor<2x4x2xf32>) -> tensor<2x4x2xf32>
// CHECK:       %[[Y0:.*]] = "fuel.reshape"({{.*}}) {shape = [2, 1, 4]}
// CHECK-NEXT:  "fuel.slice"(%arg1) {dim = 1 : i64, len = 1 : i64, start = 1 : i64}
// CHECK:       "fuel.reshape"(%arg2) {shape = [1, 4, 2]}
// CHECK:       %[[DA:.*]] = "fuel.exp"
// CHECK-NEXT:  "fuel.mul"(%[[DA]], %[[H0]])
// CHECK:       %[[H1:.*]] = "fuel.add"
// CHECK:       %[[Y1:.*]] = "fuel.reshape"({{.*}}) {shape = [2, 1, 4]}
// CHECK:       "fuel.exp"
// CHECK-NEXT:  "fuel.mul"({{.*}}, %[[H1]])
// CHECK:       %[[H2:.*]] = "fuel.add"
// CHECK:       %[[Y2:.*]] = "fuel.reshape"({{.*}}) {shape = [2, 1, 4]}
// CHECK-NEXT:  %[[Y:.*]] = "fuel.concat"(%[[Y0]], %[[Y1]], %[[Y2]]) {dim = 1 : i64}
// CHECK-NEXT:  return %[[Y]], %[[H2]] : tensor<2x3x4xf32>, tensor<2x4x2xf32>
// GONE-LABEL: func.func @selective_scan(
// GONE-NOT:     "fuel.selective_scan"
func.func @selective_scan(%arg0: tensor<2x3x4xf32>, %arg1: tensor<2x3x4xf32>, %arg2: tensor<4x2xf32>, %arg3: tensor<2x3x2xf32>, %arg4: tensor<2x3x2xf32>) -> (tensor<2x3x4xf32>, tensor<2x4x2xf32>) {
  %0:2 = "fuel.selective_scan"(%arg0, %arg1, %arg2, %arg3, %arg4) {delta_softplus = false} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4x2xf32>, tensor<2x3x2xf32>, tensor<2x3x2xf32>) -> (tensor<2x3x4xf32>, tensor<2x4x2xf32>)
  return %0#0, %0#1 : tensor<2x3x4xf32>, tensor<2x4x2xf32>
}

// -----

// 20. Two result slots: y [B, L, H, P] and the final state [B, H, P, N]; the per-head scalar decay exp(dt a) is applied step by step (L = 4).
// CHECK-LABEL: func.func @ssd_chunk_scan(
// CHECK-NOT:     "fuel.ssd_chunk_scan"
// CHECK:       "fuel.slice"(%arg0) {dim = 1 : i64, len = 1 : i64, start = 0 : i64}
// CHECK:       "fuel.reshape"(%arg2) {shape = [1, 2]}
// CHECK:       "fuel.exp"
// CHECK:       "fuel.exp"
// CHECK:       "fuel.exp"
// CHECK:       %[[H:.*]] = "fuel.add"({{.*}}) : (tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>) -> tensor<1x2x3x2xf32>
// CHECK:       %[[Y:.*]] = "fuel.concat"({{.*}}) {dim = 1 : i64} : (tensor<1x1x2x3xf32>, tensor<1x1x2x3xf32>, tensor<1x1x2x3xf32>, tensor<1x1x2x3xf32>) -> tensor<1x4x2x3xf32>
// CHECK-NEXT:  return %[[Y]], %[[H]] : tensor<1x4x2x3xf32>, tensor<1x2x3x2xf32>
// GONE-LABEL: func.func @ssd_chunk_scan(
// GONE-NOT:     "fuel.ssd_chunk_scan"
func.func @ssd_chunk_scan(%arg0: tensor<1x4x2x3xf32>, %arg1: tensor<1x4x2xf32>, %arg2: tensor<2xf32>, %arg3: tensor<1x4x2x2xf32>, %arg4: tensor<1x4x2x2xf32>) -> (tensor<1x4x2x3xf32>, tensor<1x2x3x2xf32>) {
  %0:2 = "fuel.ssd_chunk_scan"(%arg0, %arg1, %arg2, %arg3, %arg4) {chunk_size = 2 : i64} : (tensor<1x4x2x3xf32>, tensor<1x4x2xf32>, tensor<2xf32>, tensor<1x4x2x2xf32>, tensor<1x4x2x2xf32>) -> (tensor<1x4x2x3xf32>, tensor<1x2x3x2xf32>)
  return %0#0, %0#1 : tensor<1x4x2x3xf32>, tensor<1x2x3x2xf32>
}

// -----

// 21. Unpack the nibbles, map each code through the NF4 table (a relu-hat sum), scale by absmax per block, matmul.
// CHECK-LABEL: func.func @nf4_matmul(
// CHECK-NOT:     "fuel.nf4_matmul"
// CHECK:       "fuel.cast"(%arg1) {dtype = "f32"} : (tensor<5x4xui8>) -> tensor<5x4xf32>
// CHECK-NEXT:  "fuel.mul_scalar"({{.*}}) {value = 6.250000e-02 : f64}
// CHECK-NEXT:  "fuel.floor"
// CHECK:       "fuel.concat"
// CHECK:       "fuel.relu"
// CHECK:       "fuel.unsqueeze"(%arg2) {dim = 2 : i64}
// CHECK:       %[[WT:.*]] = "fuel.transpose"({{.*}}) : (tensor<5x8xf32>) -> tensor<8x5xf32>
// CHECK-NEXT:  %[[Y:.*]] = "fuel.mat_mul"(%arg0, %[[WT]]) : (tensor<3x8xf32>, tensor<8x5xf32>) -> tensor<3x5xf32>
// CHECK-NEXT:  return %[[Y]]
// GONE-LABEL: func.func @nf4_matmul(
// GONE-NOT:     "fuel.nf4_matmul"
func.func @nf4_matmul(%arg0: tensor<3x8xf32>, %arg1: tensor<5x4xui8>, %arg2: tensor<5x2xf32>) -> tensor<3x5xf32> {
  %0 = "fuel.nf4_matmul"(%arg0, %arg1, %arg2) {block_size = 4 : i64} : (tensor<3x8xf32>, tensor<5x4xui8>, tensor<5x2xf32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}

// -----

// 22. dQ = dS K with dS = scale * P * (dP - rowsum(dP * P)), dP = dO V^T; P is recomputed.
// CHECK-LABEL: func.func @flash_attn_backward_q(
// CHECK-NOT:     "fuel.flash_attn_backward_q"
// CHECK:       %[[KT:.*]] = "fuel.transpose"(%arg1)
// CHECK-NEXT:  "fuel.mat_mul"(%arg0, %[[KT]])
// CHECK-NEXT:  "fuel.mul_scalar"({{.*}}) {value = 5.000000e-01 : f64}
// CHECK:       "fuel.exp"
// CHECK:       %[[P:.*]] = "fuel.div"
// CHECK-NEXT:  %[[VT:.*]] = "fuel.transpose"(%arg2)
// CHECK-NEXT:  %[[DP:.*]] = "fuel.mat_mul"(%arg3, %[[VT]])
// CHECK-NEXT:  "fuel.mul"(%[[DP]], %[[P]])
// CHECK-NEXT:  "fuel.sum_dim"({{.*}}) {axis = 3 : i64}
// CHECK:       %[[C:.*]] = "fuel.sub"(%[[DP]],
// CHECK-NEXT:  %[[DS0:.*]] = "fuel.mul"(%[[P]], %[[C]])
// CHECK-NEXT:  %[[DS:.*]] = "fuel.mul_scalar"(%[[DS0]]) {value = 5.000000e-01 : f64}
// CHECK-NEXT:  %[[DQ:.*]] = "fuel.mat_mul"(%[[DS]], %arg1) : (tensor<1x2x3x5xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x3x4xf32>
// CHECK-NEXT:  return %[[DQ]]
// GONE-LABEL: func.func @flash_attn_backward_q(
// GONE-NOT:     "fuel.flash_attn_backward_q"
func.func @flash_attn_backward_q(%arg0: tensor<1x2x3x4xf32>, %arg1: tensor<1x2x5x4xf32>, %arg2: tensor<1x2x5x4xf32>, %arg3: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %0 = "fuel.flash_attn_backward_q"(%arg0, %arg1, %arg2, %arg3) {causal = false, softmax_scale = 5.000000e-01 : f64} : (tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %0 : tensor<1x2x3x4xf32>
}

// -----

// 23. dK = dS^T Q.
// CHECK-LABEL: func.func @flash_attn_backward_k(
// CHECK-NOT:     "fuel.flash_attn_backward_k"
// CHECK:       %[[KT:.*]] = "fuel.transpose"(%arg1)
// CHECK-NEXT:  "fuel.mat_mul"(%arg0, %[[KT]])
// CHECK-NEXT:  "fuel.mul_scalar"({{.*}}) {value = 5.000000e-01 : f64}
// CHECK:       "fuel.exp"
// CHECK:       %[[P:.*]] = "fuel.div"
// CHECK-NEXT:  %[[VT:.*]] = "fuel.transpose"(%arg2)
// CHECK-NEXT:  %[[DP:.*]] = "fuel.mat_mul"(%arg3, %[[VT]])
// CHECK-NEXT:  "fuel.mul"(%[[DP]], %[[P]])
// CHECK-NEXT:  "fuel.sum_dim"({{.*}}) {axis = 3 : i64}
// CHECK:       %[[C:.*]] = "fuel.sub"(%[[DP]],
// CHECK-NEXT:  %[[DS0:.*]] = "fuel.mul"(%[[P]], %[[C]])
// CHECK-NEXT:  %[[DS:.*]] = "fuel.mul_scalar"(%[[DS0]]) {value = 5.000000e-01 : f64}
// CHECK-NEXT:  %[[DST:.*]] = "fuel.transpose"(%[[DS]])
// CHECK-NEXT:  %[[DK:.*]] = "fuel.mat_mul"(%[[DST]], %arg0) : (tensor<1x2x5x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x5x4xf32>
// CHECK-NEXT:  return %[[DK]]
// GONE-LABEL: func.func @flash_attn_backward_k(
// GONE-NOT:     "fuel.flash_attn_backward_k"
func.func @flash_attn_backward_k(%arg0: tensor<1x2x3x4xf32>, %arg1: tensor<1x2x5x4xf32>, %arg2: tensor<1x2x5x4xf32>, %arg3: tensor<1x2x3x4xf32>) -> tensor<1x2x5x4xf32> {
  %0 = "fuel.flash_attn_backward_k"(%arg0, %arg1, %arg2, %arg3) {causal = false, softmax_scale = 5.000000e-01 : f64} : (tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x5x4xf32>
  return %0 : tensor<1x2x5x4xf32>
}

// -----

// 24. dV = P^T dO (v itself is not read).
// CHECK-LABEL: func.func @flash_attn_backward_v(
// CHECK-NOT:     "fuel.flash_attn_backward_v"
// CHECK:       %[[KT:.*]] = "fuel.transpose"(%arg1)
// CHECK-NEXT:  "fuel.mat_mul"(%arg0, %[[KT]])
// CHECK-NEXT:  "fuel.mul_scalar"({{.*}}) {value = 5.000000e-01 : f64}
// CHECK:       "fuel.exp"
// CHECK:       %[[P:.*]] = "fuel.div"
// CHECK-NEXT:  %[[PT:.*]] = "fuel.transpose"(%[[P]])
// CHECK-NEXT:  %[[DV:.*]] = "fuel.mat_mul"(%[[PT]], %arg3) : (tensor<1x2x5x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x5x4xf32>
// CHECK-NEXT:  return %[[DV]]
// GONE-LABEL: func.func @flash_attn_backward_v(
// GONE-NOT:     "fuel.flash_attn_backward_v"
func.func @flash_attn_backward_v(%arg0: tensor<1x2x3x4xf32>, %arg1: tensor<1x2x5x4xf32>, %arg2: tensor<1x2x5x4xf32>, %arg3: tensor<1x2x3x4xf32>) -> tensor<1x2x5x4xf32> {
  %0 = "fuel.flash_attn_backward_v"(%arg0, %arg1, %arg2, %arg3) {causal = false, softmax_scale = 5.000000e-01 : f64} : (tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x5x4xf32>
  return %0 : tensor<1x2x5x4xf32>
}

// -----

// 25. Unpack 8 int4 values per word (AutoAWQ GEMM: qweight [K, N/8], AWQ order), subtract the zero points, scale per group, matmul.
// CHECK-LABEL: func.func @awq_matmul(
// CHECK-NOT:     "fuel.awq_matmul"
// CHECK:       "fuel.cast"(%arg1) {dtype = "f64"} : (tensor<16x1xui32>) -> tensor<16x1xf64>
// CHECK-NEXT:  "fuel.mul_scalar"({{.*}}) {value = 6.250000e-02 : f64}
// CHECK-NEXT:  "fuel.floor"
// CHECK:       "fuel.cast"(%arg2) {dtype = "f64"}
// CHECK:       "fuel.concat"({{.*}}) {dim = 2 : i64}
// CHECK:       "fuel.sub"
// CHECK:       "fuel.mul"
// CHECK:       %[[Y:.*]] = "fuel.mat_mul"(%arg0, {{.*}}) : (tensor<3x16xf32>, tensor<16x8xf32>) -> tensor<3x8xf32>
// CHECK-NEXT:  return %[[Y]]
// GONE-LABEL: func.func @awq_matmul(
// GONE-NOT:     "fuel.awq_matmul"
func.func @awq_matmul(%arg0: tensor<3x16xf32>, %arg1: tensor<16x1xui32>, %arg2: tensor<2x1xui32>, %arg3: tensor<2x8xf32>) -> tensor<3x8xf32> {
  %0 = "fuel.awq_matmul"(%arg0, %arg1, %arg2, %arg3) {group_size = 8 : i64, split_k_iters = 1 : i64} : (tensor<3x16xf32>, tensor<16x1xui32>, tensor<2x1xui32>, tensor<2x8xf32>) -> tensor<3x8xf32>
  return %0 : tensor<3x8xf32>
}

// -----

// QMatMul Q4_1 (20-byte blocks: f16 d, f16 m, 16 bytes of nibbles):
// w = d·q + m, so no -8 offset and an added per-block min.
// CHECK-LABEL: func.func @qmatmul_q4_1(
// CHECK-NOT:     "fuel.qmatmul"
// CHECK:       "fuel.reshape"({{.*}}) {shape = [10, 20]}
// CHECK:       "fuel.concat"({{.*}}) {dim = 1 : i64} : (tensor<10x16xf32>, tensor<10x16xf32>) -> tensor<10x32xf32>
// CHECK:       "fuel.mul"
// CHECK:       "fuel.add"
// CHECK:       %[[Y:.*]] = "fuel.mat_mul"(%arg0, {{.*}}) : (tensor<3x64xf32>, tensor<64x5xf32>) -> tensor<3x5xf32>
// CHECK-NEXT:  return %[[Y]]
// GONE-LABEL:  func.func @qmatmul_q4_1(
// GONE-NOT:    "fuel.qmatmul"
func.func @qmatmul_q4_1(%a: tensor<3x64xf32>, %w: tensor<50xui32>) -> tensor<3x5xf32> {
  %0 = "fuel.qmatmul"(%a, %w) {k = 64 : i64, n = 5 : i64, quant_type = "Q4_1"} : (tensor<3x64xf32>, tensor<50xui32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}

// -----

// QMatMul Q6_K (210-byte blocks of 256): 4 low bits from ql, 2 high bits
// from qh, int8 scale per 16 elements, f16 d at byte 208. 3·210 = 630 bytes
// arrive as 158 u32 words: the 2 bytes of padding are sliced off.
// CHECK-LABEL: func.func @qmatmul_q6_k(
// CHECK-NOT:     "fuel.qmatmul"
// CHECK:       "fuel.slice"({{.*}}) {dim = 0 : i64, len = 630 : i64, start = 0 : i64} : (tensor<632xf64>) -> tensor<630xf64>
// CHECK:       "fuel.reshape"({{.*}}) {shape = [3, 210]}
// CHECK:       "fuel.add_scalar"({{.*}}) {value = -3.200000e+01 : f64}
// CHECK:       %[[Y:.*]] = "fuel.mat_mul"(%arg0, {{.*}}) : (tensor<3x256xf32>, tensor<256x3xf32>) -> tensor<3x3xf32>
// CHECK-NEXT:  return %[[Y]]
// GONE-LABEL:  func.func @qmatmul_q6_k(
// GONE-NOT:    "fuel.qmatmul"
func.func @qmatmul_q6_k(%a: tensor<3x256xf32>, %w: tensor<158xui32>) -> tensor<3x3xf32> {
  %0 = "fuel.qmatmul"(%a, %w) {k = 256 : i64, n = 3 : i64, quant_type = "Q6_K"} : (tensor<3x256xf32>, tensor<158xui32>) -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// -----

// Declines. A K-quant without a decoder (Q2_K: 84-byte blocks of 256) is not
// supported by the shape rule yet, so the recipe declines before it is built.
// CHECK-LABEL: func.func @qmatmul_k_quant(
// CHECK-NEXT:  %0 = "fuel.qmatmul"(%arg0, %arg1) {k = 256 : i64, n = 5 : i64, quant_type = "Q2_K"}
// CHECK-NEXT:  return %0
// GONE-LABEL:  func.func @qmatmul_k_quant(
// GONE:        "fuel.qmatmul"
func.func @qmatmul_k_quant(%a: tensor<3x256xf32>, %w: tensor<105xui32>) -> tensor<3x5xf32> {
  // expected-warning@+1 {{decompose declined: inputs do not fit the op: QMatMul: quant type Q2_K is not supported yet}}
  %0 = "fuel.qmatmul"(%a, %w) {k = 256 : i64, n = 5 : i64, quant_type = "Q2_K"} : (tensor<3x256xf32>, tensor<105xui32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}

// -----

// Grouped im2col indices are computed in f32: a padded plane of 2^24
// elements or more would round them, so a grouped Conv2D declines
// (ConvTranspose2D likewise for its output buffer; groups = 1 and depthwise
// slice views and need no index math).
// CHECK-LABEL: func.func @conv2d_huge_plane(
// CHECK-NEXT:  %0 = "fuel.conv2d"(%arg0, %arg1)
// CHECK-NEXT:  return %0
// CHECK-LABEL: func.func @conv_transpose2d_huge_plane(
// CHECK-NEXT:  %0 = "fuel.conv_transpose2d"(%arg0, %arg1)
// CHECK-NEXT:  return %0
// GONE-LABEL:  func.func @conv2d_huge_plane(
// GONE:        "fuel.conv2d"
// GONE-LABEL:  func.func @conv_transpose2d_huge_plane(
// GONE:        "fuel.conv_transpose2d"
func.func @conv2d_huge_plane(%x: tensor<1x4x4096x4096xf32>, %w: tensor<4x2x1x1xf32>) -> tensor<1x4x4096x4096xf32> {
  // expected-warning@+1 {{decompose declined: padded plane 4096x4096 too large for exact F32 index math}}
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [0, 0], stride = [1, 1]} : (tensor<1x4x4096x4096xf32>, tensor<4x2x1x1xf32>) -> tensor<1x4x4096x4096xf32>
  return %0 : tensor<1x4x4096x4096xf32>
}
func.func @conv_transpose2d_huge_plane(%x: tensor<1x1x4096x4096xf32>, %w: tensor<1x1x1x1xf32>) -> tensor<1x1x4096x4096xf32> {
  // expected-warning@+1 {{decompose declined: output buffer 4096x4096 too large for exact F32 index math}}
  %0 = "fuel.conv_transpose2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, output_padding = [0, 0], padding = [0, 0], stride = [1, 1]} : (tensor<1x1x4096x4096xf32>, tensor<1x1x1x1xf32>) -> tensor<1x1x4096x4096xf32>
  return %0 : tensor<1x1x4096x4096xf32>
}

// -----

// A two-slot bundle whose operands disagree (a says N = 3, b and c say N = 2):
// the recipe is not instantiated and both slots keep their fused producer.
// CHECK-LABEL: func.func @selective_scan_bad_state(
// CHECK-NEXT:  %0:2 = "fuel.selective_scan"
// CHECK-NEXT:  return %0#0, %0#1
// GONE-LABEL:  func.func @selective_scan_bad_state(
// GONE:        "fuel.selective_scan"
func.func @selective_scan_bad_state(%u: tensor<2x3x4xf32>, %dt: tensor<2x3x4xf32>, %a: tensor<4x3xf32>, %b: tensor<2x3x2xf32>, %c: tensor<2x3x2xf32>) -> (tensor<2x3x4xf32>, tensor<2x4x2xf32>) {
  // expected-warning@+1 {{decompose declined: inputs do not fit the op: SelectiveScan(}}
  %0:2 = "fuel.selective_scan"(%u, %dt, %a, %b, %c) {delta_softplus = false} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4x3xf32>, tensor<2x3x2xf32>, tensor<2x3x2xf32>) -> (tensor<2x3x4xf32>, tensor<2x4x2xf32>)
  return %0#0, %0#1 : tensor<2x3x4xf32>, tensor<2x4x2xf32>
}

// -----

// Recipes build plain tensors: a result with a tensor encoding would leave
// func.return ill-typed (the pipeline used to fail here), so decompose declines.
// CHECK-LABEL: func.func @encoded_result(
// CHECK-NEXT:  %0 = "fuel.softmax_last_dim"(%arg0) : (tensor<2x8xf32, "enc">) -> tensor<2x8xf32, "enc">
// CHECK-NEXT:  return %0
// GONE-LABEL:  func.func @encoded_result(
// GONE:        "fuel.softmax_last_dim"
func.func @encoded_result(%x: tensor<2x8xf32, "enc">) -> tensor<2x8xf32, "enc"> {
  // expected-warning@+1 {{decompose declined: the recipe computes tensor<2x8xf32> but the op's result is tensor<2x8xf32, "enc"> (tensor encodings are not carried through recipes)}}
  %0 = "fuel.softmax_last_dim"(%x) : (tensor<2x8xf32, "enc">) -> tensor<2x8xf32, "enc">
  return %0 : tensor<2x8xf32, "enc">
}

// -----

// 26. MaxPool2D: the image padded with -inf (bottom rounded up to the stride),
// its stride phases copied out once, the nine taps' unit-stride windows of
// the phases in a Maximum chain.
// CHECK-LABEL: func.func @max_pool2d(
// CHECK-NOT:     "fuel.max_pool2d"
// CHECK:       %[[P:.*]] = "fuel.pad"(%arg0) {mode = "constant", padding = [0, 0, 0, 0, 1, 2, 1, 1], value = 0xFFF0000000000000 : f64}
// CHECK-NEXT:  %[[V:.*]] = "fuel.reshape"(%[[P]]) {shape = [2, 3, 6, 2, 5, 2]}
// CHECK-NEXT:  %[[T:.*]] = "fuel.permute"(%[[V]]) {perm = [0, 1, 3, 5, 2, 4]}
// CHECK-NEXT:  "fuel.contiguize"(%[[T]]) : (tensor<2x3x2x2x6x5xf32>) -> tensor<2x3x2x2x6x5xf32>
// CHECK-COUNT-8: "fuel.maximum"
// CHECK-NOT:   "fuel.maximum"
// CHECK:       return {{.*}} : tensor<2x3x5x4xf32>
// GONE-LABEL: func.func @max_pool2d(
// GONE-NOT:     "fuel.max_pool2d"
func.func @max_pool2d(%arg0: tensor<2x3x9x8xf32>) -> tensor<2x3x5x4xf32> {
  %0 = "fuel.max_pool2d"(%arg0) {dilation = [1, 1], kernel = [3, 3], padding = [1, 1, 1, 1], stride = [2, 2]} : (tensor<2x3x9x8xf32>) -> tensor<2x3x5x4xf32>
  return %0 : tensor<2x3x5x4xf32>
}

// -----

// 27. ExpandDepthwise: its two Conv2Ds, each decomposed in turn: the 1x1
// expansion a MatMul of x itself, its bias and SiLU; the depthwise conv's
// padded stride phases, its taps' Mul/Add chain, its bias and clamp.
// CHECK-LABEL: func.func @expand_depthwise(
// CHECK-NOT:     "fuel.expand_depthwise"
// CHECK:       %[[X:.*]] = "fuel.reshape"(%arg0) {shape = [2, 4, 36]}
// CHECK-NEXT:  %[[E:.*]] = "fuel.mat_mul"(%{{.*}}, %[[X]])
// CHECK:       %[[S:.*]] = "fuel.sigmoid"
// CHECK-NEXT:  %[[M:.*]] = "fuel.mul"(%{{.*}}, %[[S]])
// CHECK-NEXT:  "fuel.pad"(%[[M]]) {mode = "constant", padding = [0, 0, 0, 0, 1, 3, 1, 1]
// CHECK-COUNT-8: "fuel.add"
// CHECK:       "fuel.clamp"
// CHECK-NEXT:  return {{.*}} : tensor<2x8x3x3xf32>
// GONE-LABEL: func.func @expand_depthwise(
// GONE-NOT:     "fuel.expand_depthwise"
func.func @expand_depthwise(%arg0: tensor<2x4x6x6xf32>, %arg1: tensor<8x4x1x1xf32>, %arg2: tensor<8xf32>, %arg3: tensor<8x1x3x3xf32>, %arg4: tensor<8xf32>) -> tensor<2x8x3x3xf32> {
  %0 = "fuel.expand_depthwise"(%arg0, %arg1, %arg2, %arg3, %arg4) {clamp_max = 6.0 : f64, clamp_min = 0.0 : f64, expand_silu = true, padding = [1, 1], stride = [2, 2]} : (tensor<2x4x6x6xf32>, tensor<8x4x1x1xf32>, tensor<8xf32>, tensor<8x1x3x3xf32>, tensor<8xf32>) -> tensor<2x8x3x3xf32>
  return %0 : tensor<2x8x3x3xf32>
}
