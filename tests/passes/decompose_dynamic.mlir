// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file --verify-diagnostics \
// RUN:   --pass-pipeline='builtin.module(fuel-decompose{table=primitives_f32})' | filecheck %s
// A target with the fused kernels keeps them on ? extents (no warning either).
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file --verify-diagnostics \
// RUN:   --pass-pipeline='builtin.module(fuel-decompose{table=fused_f32})' | filecheck %s --check-prefix=KEEP
// Decomposed and fused again: the same fused op on the same ? types.
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file --verify-diagnostics \
// RUN:   --pass-pipeline='builtin.module(fuel-decompose{all=true},fuel-fuse{table=fused_f32})' | filecheck %s --check-prefix=ROUND

// fuel-decompose on symbolic IR: the recipe is instantiated on the ? extents
// as symbols; its ops keep ? where the recipe computes a symbol, and a
// broadcast keeping a ? extent is written -1. (A recipe needing any other
// symbolic param declines: decompose_decline.mlir.)

// CHECK-LABEL: func.func @softmax
// CHECK-NEXT:    %[[M:.*]] = "fuel.max_dim"(%arg0) {axis = 1 : i64} : (tensor<?x8xf32>) -> tensor<?xf32>
// CHECK-NEXT:    %[[U:.*]] = "fuel.unsqueeze"(%[[M]]) {dim = 1 : i64} : (tensor<?xf32>) -> tensor<?x1xf32>
// CHECK-NEXT:    %[[B:.*]] = "fuel.broadcast_to"(%[[U]]) {shape = [-1, 8]} : (tensor<?x1xf32>) -> tensor<?x8xf32>
// CHECK-NEXT:    %[[S:.*]] = "fuel.sub"(%arg0, %[[B]]) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT:    %[[E:.*]] = "fuel.exp"(%[[S]])
// CHECK-NEXT:    "fuel.sum_dim"(%[[E]]) {axis = 1 : i64} : (tensor<?x8xf32>) -> tensor<?xf32>
// CHECK-NEXT:    "fuel.unsqueeze"
// CHECK-NEXT:    "fuel.broadcast_to"({{.*}}) {shape = [-1, 8]}
// CHECK-NEXT:    %[[D:.*]] = "fuel.div"(%[[E]], {{.*}}) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT:    return %[[D]] : tensor<?x8xf32>
// KEEP-LABEL: func.func @softmax
// KEEP-NEXT:    "fuel.softmax_last_dim"(%arg0) : (tensor<?x8xf32>) -> tensor<?x8xf32>
// ROUND-LABEL: func.func @softmax
// ROUND-NEXT:    "fuel.softmax_last_dim"(%arg0) : (tensor<?x8xf32>) -> tensor<?x8xf32>
// ROUND-NEXT:    return
func.func @softmax(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "fuel.softmax_last_dim"(%x) : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// Layer norm over 64 features, batch and sequence ?: every broadcast keeps
// both ? extents.
// CHECK-LABEL: func.func @layer_norm
// CHECK-NEXT:    "fuel.mean_dim"(%arg0) {axis = 2 : i64} : (tensor<?x?x64xf32>) -> tensor<?x?xf32>
// CHECK-NEXT:    "fuel.unsqueeze"
// CHECK-NEXT:    "fuel.broadcast_to"({{.*}}) {shape = [-1, -1, 64]} : (tensor<?x?x1xf32>) -> tensor<?x?x64xf32>
// CHECK-NEXT:    "fuel.sub"
// CHECK-NEXT:    "fuel.sqr"
// CHECK-NEXT:    "fuel.mean_dim"
// CHECK-NEXT:    "fuel.unsqueeze"
// CHECK-NEXT:    "fuel.add_scalar"({{.*}}) {value = 1.000000e-05 : f64} : (tensor<?x?x1xf32>) -> tensor<?x?x1xf32>
// CHECK-NEXT:    "fuel.sqrt"
// CHECK-NEXT:    "fuel.broadcast_to"({{.*}}) {shape = [-1, -1, 64]}
// CHECK-NEXT:    "fuel.div"
// CHECK-NEXT:    return {{.*}} : tensor<?x?x64xf32>
// ROUND-LABEL: func.func @layer_norm
// ROUND-NEXT:    "fuel.layer_norm_last_dim"(%arg0) {eps = 1.000000e-05 : f64} : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
// ROUND-NEXT:    return
func.func @layer_norm(%x: tensor<?x?x64xf32>) -> tensor<?x?x64xf32> {
  %0 = "fuel.layer_norm_last_dim"(%x) {eps = 1.000000e-05 : f64} : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
  return %0 : tensor<?x?x64xf32>
}

// -----

// RMS norm on a static leading axis and ? rows in the middle.
// CHECK-LABEL: func.func @rms_norm
// CHECK-NEXT:    "fuel.sqr"(%arg0) : (tensor<2x?x16xf32>) -> tensor<2x?x16xf32>
// CHECK-NEXT:    "fuel.mean_dim"
// CHECK-NEXT:    "fuel.unsqueeze"
// CHECK-NEXT:    "fuel.add_scalar"
// CHECK-NEXT:    "fuel.sqrt"
// CHECK-NEXT:    "fuel.broadcast_to"({{.*}}) {shape = [2, -1, 16]} : (tensor<2x?x1xf32>) -> tensor<2x?x16xf32>
// CHECK-NEXT:    "fuel.div"
// ROUND-LABEL: func.func @rms_norm
// ROUND-NEXT:    "fuel.rms_norm_last_dim"(%arg0) {eps = 1.000000e-05 : f64} : (tensor<2x?x16xf32>) -> tensor<2x?x16xf32>
func.func @rms_norm(%x: tensor<2x?x16xf32>) -> tensor<2x?x16xf32> {
  %0 = "fuel.rms_norm_last_dim"(%x) {eps = 1.000000e-05 : f64} : (tensor<2x?x16xf32>) -> tensor<2x?x16xf32>
  return %0 : tensor<2x?x16xf32>
}
