// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-reconcile-dtypes{table=primitives_f32})' | filecheck %s

// fuel-reconcile-dtypes reads only dtypes: ops on ? extents are reconciled as
// static ones are, and every cast keeps its value's ? type (the coverage
// error on a ? tensor: reconcile_dtypes_errors.mlir).

// A bf16 matmul of ? rows computes in f32; the result is cast back.
// CHECK-LABEL: func.func @bf16_matmul
// CHECK-NEXT:    %[[A:.*]] = "fuel.cast"(%arg0) {dtype = "f32"} : (tensor<?x3xbf16>) -> tensor<?x3xf32>
// CHECK-NEXT:    %[[B:.*]] = "fuel.cast"(%arg1) {dtype = "f32"} : (tensor<3x4xbf16>) -> tensor<3x4xf32>
// CHECK-NEXT:    %[[M:.*]] = "fuel.mat_mul"(%[[A]], %[[B]]) : (tensor<?x3xf32>, tensor<3x4xf32>) -> tensor<?x4xf32>
// CHECK-NEXT:    %[[R:.*]] = "fuel.cast"(%[[M]]) {dtype = "bf16"} : (tensor<?x4xf32>) -> tensor<?x4xbf16>
// CHECK-NEXT:    return %[[R]] : tensor<?x4xbf16>
func.func @bf16_matmul(%a: tensor<?x3xbf16>, %b: tensor<3x4xbf16>) -> tensor<?x4xbf16> {
  %0 = "fuel.mat_mul"(%a, %b) : (tensor<?x3xbf16>, tensor<3x4xbf16>) -> tensor<?x4xbf16>
  return %0 : tensor<?x4xbf16>
}

// -----

// A mixed f32 x bf16 matmul over ? extents: one cast, shared by both users.
// CHECK-LABEL: func.func @mixed_matmuls
// CHECK-NEXT:    %[[C:.*]] = "fuel.cast"(%arg1) {dtype = "f32"} : (tensor<?x?xbf16>) -> tensor<?x?xf32>
// CHECK-NEXT:    "fuel.mat_mul"(%arg0, %[[C]]) : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
// CHECK-NEXT:    "fuel.mat_mul"(%arg0, %[[C]]) : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
// CHECK-NOT:     "fuel.cast"
// CHECK:         return
func.func @mixed_matmuls(%a: tensor<?x?xf32>, %b: tensor<?x?xbf16>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %0 = "fuel.mat_mul"(%a, %b) : (tensor<?x?xf32>, tensor<?x?xbf16>) -> tensor<?x?xf32>
  %1 = "fuel.mat_mul"(%a, %b) : (tensor<?x?xf32>, tensor<?x?xbf16>) -> tensor<?x?xf32>
  return %0, %1 : tensor<?x?xf32>, tensor<?x?xf32>
}

// -----

// Servable keys on ? extents are left alone.
// CHECK-LABEL: func.func @native
// CHECK-NEXT:    "fuel.exp"(%arg0) : (tensor<?x8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT:    return
func.func @native(%a: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "fuel.exp"(%a) : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}
