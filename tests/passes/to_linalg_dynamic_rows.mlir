// RUN: python -m compiler.opt %s --split-input-file --pass-pipeline='builtin.module(fuel-to-linalg)' | filecheck %s

// The kernels of symbolic graphs (docs/dynamic-shapes.md) take batch and
// sequence at run time and keep feature dims static. A layer norm over
// tensor<?x?x64xf32>: the rows are sized by tensor.dim, the normalised axis
// stays 64 and the result type keeps it.
// CHECK-LABEL: func.func @layer_norm_rows
// CHECK-NOT:     fuel.
// CHECK:         tensor.dim
// CHECK:         linalg.generic
// CHECK:         return {{.*}} : tensor<?x?x64xf32>
func.func @layer_norm_rows(%x: tensor<?x?x64xf32>, %w: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<?x?x64xf32> {
  %0 = "fuel.layer_norm_last_dim"(%x, %w, %b) {eps = 1.000000e-05 : f64} : (tensor<?x?x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<?x?x64xf32>
  return %0 : tensor<?x?x64xf32>
}

// -----

// Softmax rows of a run-time length (the sequence, in attention).
// CHECK-LABEL: func.func @softmax_rows
// CHECK-NOT:     fuel.
// CHECK:         tensor.dim
// CHECK:         math.exp
// CHECK:         return {{.*}} : tensor<?x?x?x?xf32>
func.func @softmax_rows(%x: tensor<?x?x?x?xf32>) -> tensor<?x?x?x?xf32> {
  %0 = "fuel.softmax_last_dim"(%x) : (tensor<?x?x?x?xf32>) -> tensor<?x?x?x?xf32>
  return %0 : tensor<?x?x?x?xf32>
}

// -----

// An embedding lookup: the table (a weight) static, the index count dynamic.
// CHECK-LABEL: func.func @embedding
// CHECK-NOT:     fuel.
// CHECK:         tensor.dim
// CHECK:         tensor.empty({{.*}}) : tensor<?x64xf32>
// CHECK:         linalg.generic
// CHECK:           tensor.extract
// CHECK:         return {{.*}} : tensor<?x64xf32>
func.func @embedding(%t: tensor<50x64xf32>, %i: tensor<?xui32>) -> tensor<?x64xf32> {
  %0 = "fuel.index_select"(%t, %i) {dim = 0 : i64} : (tensor<50x64xf32>, tensor<?xui32>) -> tensor<?x64xf32>
  return %0 : tensor<?x64xf32>
}

// -----

// A broadcast keeping a ? extent (-1, as the passes write it on symbolic IR:
// fuse_dynamic.mlir) sizes that axis by the input's tensor.dim.
// CHECK-LABEL: func.func @broadcast_keep
// CHECK-NOT:     fuel.
// CHECK:         %[[D:.*]] = tensor.dim %arg0, %c0 : tensor<?x1xf32>
// CHECK:         tensor.empty(%[[D]]) : tensor<?x8xf32>
// CHECK:         linalg.generic
// CHECK:         return {{.*}} : tensor<?x8xf32>
func.func @broadcast_keep(%x: tensor<?x1xf32>) -> tensor<?x8xf32> {
  %0 = "fuel.broadcast_to"(%x) {shape = [-1, 8]} : (tensor<?x1xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}
