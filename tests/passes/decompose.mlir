// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-decompose{table=primitives_f32})' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-decompose{table=fused_f32})' | filecheck %s --check-prefix=KEEP
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-decompose{all=true},fuel-fuse{table=fused_f32})' | filecheck %s --check-prefix=ROUNDTRIP

// With no kernel for the fused op, each becomes its recipe; where the backend
// has the kernel it stays fused; decompose-all then fuse restores it.

// CHECK-LABEL: func.func @softmax
// CHECK-NEXT:    %[[M:.*]] = "fuel.max_dim"(%arg0) {axis = 1 : i64}
// CHECK-NEXT:    %[[U:.*]] = "fuel.unsqueeze"(%[[M]]) {dim = 1 : i64}
// CHECK-NEXT:    %[[B:.*]] = "fuel.broadcast_to"(%[[U]]) {shape = [2, 8]}
// CHECK-NEXT:    %[[S:.*]] = "fuel.sub"(%arg0, %[[B]])
// CHECK-NEXT:    %[[E:.*]] = "fuel.exp"(%[[S]])
// CHECK-NEXT:    %[[Z:.*]] = "fuel.sum_dim"(%[[E]]) {axis = 1 : i64}
// CHECK-NEXT:    %[[U2:.*]] = "fuel.unsqueeze"(%[[Z]])
// CHECK-NEXT:    %[[B2:.*]] = "fuel.broadcast_to"(%[[U2]])
// CHECK-NEXT:    %[[D:.*]] = "fuel.div"(%[[E]], %[[B2]])
// CHECK-NEXT:    return %[[D]]
// KEEP-LABEL: func.func @softmax
// KEEP-NEXT:    "fuel.softmax_last_dim"
// ROUNDTRIP-LABEL: func.func @softmax
// ROUNDTRIP-NEXT:    "fuel.softmax_last_dim"(%arg0)
// ROUNDTRIP-NEXT:    return
func.func @softmax(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = "fuel.softmax_last_dim"(%x) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

// CHECK-LABEL: func.func @linear
// CHECK-NEXT:    %[[MM:.*]] = "fuel.mat_mul"(%arg0, %arg1)
// CHECK-NEXT:    %[[R:.*]] = "fuel.reshape"(%arg2) {shape = [1, 4]}
// CHECK-NEXT:    %[[BC:.*]] = "fuel.broadcast_to"(%[[R]]) {shape = [2, 4]}
// CHECK-NEXT:    %[[A:.*]] = "fuel.add"(%[[MM]], %[[BC]])
// CHECK-NEXT:    return %[[A]]
// ROUNDTRIP-LABEL: func.func @linear
// ROUNDTRIP-NEXT:    "fuel.fused_linear"(%arg0, %arg1, %arg2)
func.func @linear(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %bias: tensor<4xf32>) -> tensor<2x4xf32> {
  %0 = "fuel.fused_linear"(%a, %b, %bias) : (tensor<2x3xf32>, tensor<3x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// The eps param fills the recipe's scalar slot.
// CHECK-LABEL: func.func @rms_norm
// CHECK:         "fuel.sqr"(%arg0)
// CHECK:         "fuel.mean_dim"
// CHECK:         "fuel.add_scalar"({{.*}}) {value = 1.000000e-05 : f64}
// CHECK:         "fuel.sqrt"
// CHECK:         "fuel.div"(%arg0,
// ROUNDTRIP-LABEL: func.func @rms_norm
// ROUNDTRIP-NEXT:    "fuel.rms_norm_last_dim"(%arg0) {eps = 1.000000e-05 : f64}
func.func @rms_norm(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = "fuel.rms_norm_last_dim"(%x) {eps = 1.0e-5 : f64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

// CHECK-LABEL: func.func @layer_norm
// CHECK-NOT:     fuel.layer_norm_last_dim
// CHECK:         "fuel.mean_dim"(%arg0) {axis = 1 : i64}
// CHECK:         "fuel.add_scalar"({{.*}}) {value = 1.000000e-03 : f64}
// CHECK:         return
// The largest match wins at each node (a deliberate departure from
// first-registered-wins): RmsNorm (id 3) also matches the tail with
// x := x - mean, but LayerNorm covers more ops, so the round trip restores it.
// ROUNDTRIP-LABEL: func.func @layer_norm
// ROUNDTRIP-NOT:     fuel.rms_norm_last_dim
// ROUNDTRIP:         "fuel.layer_norm_last_dim"(%arg0) {eps = 1.000000e-03 : f64}
// ROUNDTRIP-NEXT:    return
func.func @layer_norm(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = "fuel.layer_norm_last_dim"(%x) {eps = 1.0e-3 : f64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}
