// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=primitives_f32})' | filecheck %s
// The printed IR parses back, verifies and fuses to the same thing (idempotent).
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=primitives_f32})' \
// RUN:   | python -m compiler.opt --load-plugin=tests.passes.kernel_tables - \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=primitives_f32},fuel-cse,fuel-dce,canonicalize)' | filecheck %s
// runtime=false forms nothing.
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=primitives_f32 runtime=false})' | filecheck %s --check-prefix=OFF
// Decompose-all inlines every runtime fused op back into its primitives.
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=primitives_f32},fuel-decompose{all=true})' | filecheck %s --check-prefix=DECOMP
// A target with no kernel for the body ops (only a broadcast-baked add) gets them inlined too.
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=primitives_f32},fuel-decompose{table=broadcast_only_add})' | filecheck %s --check-prefix=DECOMP

// OFF-NOT: fuel.runtime_fused
// DECOMP-NOT: fuel.runtime_fused
// DECOMP-NOT: gpu.yield

// A chain of five elementwise ops becomes one runtime fused op; x feeds two
// members and is one input; the MulScalar value is the op's scalar slot.
// (Operands follow the region's canonical bind order, here y before x.)
// CHECK-LABEL: func.func @chain
// CHECK-NEXT:    %[[R:.*]] = "fuel.runtime_fused"(%arg1, %arg0) ({
// CHECK-NEXT:    ^bb0(%[[B:.*]]: tensor<4x8xf32>, %[[A:.*]]: tensor<4x8xf32>):
// CHECK-NEXT:      %[[M:.*]] = "fuel.mul_scalar"(%[[A]]) {value = 2.000000e+00 : f64}
// CHECK-NEXT:      %[[S:.*]] = "fuel.add"(%[[M]], %[[B]])
// CHECK-NEXT:      %[[T:.*]] = "fuel.tanh"(%[[S]])
// CHECK-NEXT:      %[[P:.*]] = "fuel.mul"(%[[T]], %[[A]])
// CHECK-NEXT:      %[[G:.*]] = "fuel.sigmoid"(%[[P]])
// CHECK-NEXT:      gpu.yield %[[G]] : tensor<4x8xf32>
// CHECK-NEXT:    }) {fused_id = [[ID:[0-9]+]] : i64, operandSegmentSizes = array<i32: 1, 1{{(, 0)+}}>, scalars = [2.000000e+00]} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    return %[[R]]
// DECOMP-LABEL: func.func @chain
// DECOMP-NEXT:    "fuel.mul_scalar"(%arg0) {value = 2.000000e+00 : f64}
// DECOMP-NEXT:    "fuel.add"
// DECOMP-NEXT:    "fuel.tanh"
// DECOMP-NEXT:    "fuel.mul"
// DECOMP-NEXT:    "fuel.sigmoid"
// DECOMP-NEXT:    return
func.func @chain(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "fuel.mul_scalar"(%x) {value = 2.000000e+00 : f64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "fuel.add"(%0, %y) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "fuel.tanh"(%1) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "fuel.mul"(%2, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = "fuel.sigmoid"(%3) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}

// The same chain with another scalar (and the commutative add spelled the
// other way round) dedups to the same id; only the scalars differ.
// CHECK-LABEL: func.func @same_chain_again
// CHECK:         "fuel.runtime_fused"(%arg1, %arg0)
// CHECK:         }) {fused_id = [[ID]] : i64, {{.*}}scalars = [3.000000e+00]}
// CHECK-NOT:     fuel.tanh
func.func @same_chain_again(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "fuel.mul_scalar"(%x) {value = 3.000000e+00 : f64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "fuel.add"(%y, %0) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "fuel.tanh"(%1) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "fuel.mul"(%2, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = "fuel.sigmoid"(%3) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}

// A shared intermediate (exp is also returned) cannot be interior: it stays
// outside, and only tanh -> sigmoid fuse.
// CHECK-LABEL: func.func @shared_intermediate
// CHECK-NEXT:    %[[E:.*]] = "fuel.exp"(%arg0)
// CHECK-NEXT:    %[[R:.*]] = "fuel.runtime_fused"(%[[E]]) ({
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<4x8xf32>):
// CHECK-NEXT:      %[[T:.*]] = "fuel.tanh"(%[[A]])
// CHECK-NEXT:      %[[G:.*]] = "fuel.sigmoid"(%[[T]])
// CHECK-NEXT:      gpu.yield %[[G]]
// CHECK-NEXT:    })
// CHECK-NEXT:    return %[[R]], %[[E]]
func.func @shared_intermediate(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = "fuel.exp"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "fuel.tanh"(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "fuel.sigmoid"(%1) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %2, %0 : tensor<4x8xf32>, tensor<4x8xf32>
}

// No kernel, no fusion: the table has no sin kernel, so the chain splits at
// sin (exp alone is too small); and no bf16 kernel at all.
// CHECK-LABEL: func.func @no_kernel_splits
// CHECK-NEXT:    "fuel.exp"(%arg0)
// CHECK-NEXT:    "fuel.sin"
// CHECK-NEXT:    "fuel.runtime_fused"
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      "fuel.tanh"
// CHECK-NEXT:      "fuel.sigmoid"
func.func @no_kernel_splits(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "fuel.exp"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "fuel.sin"(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "fuel.tanh"(%1) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "fuel.sigmoid"(%2) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @no_kernel_bf16
// CHECK-NOT:     fuel.runtime_fused
// CHECK:         return
func.func @no_kernel_bf16(%x: tensor<4x8xbf16>) -> tensor<4x8xbf16> {
  %0 = "fuel.exp"(%x) : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %1 = "fuel.tanh"(%0) : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  return %1 : tensor<4x8xbf16>
}

// Broadcast views of an input and a trailing last-axis reduction join the group.
// CHECK-LABEL: func.func @bias_exp_sum
// CHECK-NEXT:    %[[R:.*]] = "fuel.runtime_fused"(%arg1, %arg0) ({
// CHECK-NEXT:    ^bb0(%[[B:.*]]: tensor<16xf32>, %[[A:.*]]: tensor<4x16xf32>):
// CHECK-NEXT:      "fuel.unsqueeze"(%[[B]])
// CHECK-NEXT:      "fuel.broadcast_to"
// CHECK-NEXT:      "fuel.add"
// CHECK-NEXT:      "fuel.exp"
// CHECK-NEXT:      %[[S:.*]] = "fuel.sum_dim"
// CHECK-NEXT:      gpu.yield %[[S]] : tensor<4xf32>
// CHECK-NEXT:    }) {{.*}}scalars = []} : (tensor<16xf32>, tensor<4x16xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return %[[R]]
func.func @bias_exp_sum(%x: tensor<4x16xf32>, %b: tensor<16xf32>) -> tensor<4xf32> {
  %0 = "fuel.unsqueeze"(%b) {dim = 0 : i64} : (tensor<16xf32>) -> tensor<1x16xf32>
  %1 = "fuel.broadcast_to"(%0) {shape = [4, 16]} : (tensor<1x16xf32>) -> tensor<4x16xf32>
  %2 = "fuel.add"(%x, %1) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %3 = "fuel.exp"(%2) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %4 = "fuel.sum_dim"(%3) {axis = 1 : i64} : (tensor<4x16xf32>) -> tensor<4xf32>
  return %4 : tensor<4xf32>
}

// A reduction over a non-last axis is not taken in; the chain before it is.
// A reduction over fewer than MIN_REDUCED_EXTENT (16) elements stays outside:
// the chain before it runs as its own elementwise region, in vectors.
// CHECK-LABEL: func.func @short_axis_sum
// CHECK:         %[[E:.*]] = "fuel.runtime_fused"(%arg0)
// CHECK:           "fuel.exp"
// CHECK-NOT:       "fuel.sum_dim"
// CHECK:           gpu.yield %{{.*}} : tensor<4x8xf32>
// CHECK:         "fuel.sum_dim"(%[[E]]) {axis = 1 : i64}
func.func @short_axis_sum(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  %0 = "fuel.exp"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "fuel.tanh"(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "fuel.sum_dim"(%1) {axis = 1 : i64} : (tensor<4x8xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// CHECK-LABEL: func.func @first_axis_reduction
// CHECK:         "fuel.runtime_fused"
// CHECK:         gpu.yield %{{.*}} : tensor<4x8xf32>
// CHECK:         "fuel.sum_dim"(%{{.*}}) {axis = 0 : i64}
func.func @first_axis_reduction(%x: tensor<4x8xf32>) -> tensor<8xf32> {
  %0 = "fuel.exp"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "fuel.tanh"(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "fuel.sum_dim"(%1) {axis = 0 : i64} : (tensor<4x8xf32>) -> tensor<8xf32>
  return %2 : tensor<8xf32>
}

// A single op is no fusion.
// CHECK-LABEL: func.func @single_op
// CHECK-NOT:     fuel.runtime_fused
// CHECK:         "fuel.exp"
func.func @single_op(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "fuel.exp"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
