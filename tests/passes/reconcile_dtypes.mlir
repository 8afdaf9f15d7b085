// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-reconcile-dtypes{table=primitives_f32})' | filecheck %s

// Servable keys are left alone.
// CHECK-LABEL: func.func @native
// CHECK-NEXT:    "fuel.add"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return
func.func @native(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// The spec's motivating case: a mixed [f32, bf16] -> f32 matmul gets one
// cast on the bf16 operand; the result type is already the target.
// CHECK-LABEL: func.func @mixed_matmul
// CHECK-NEXT:    %[[C:.*]] = "fuel.cast"(%arg1) {dtype = "f32"} : (tensor<3x4xbf16>) -> tensor<3x4xf32>
// CHECK-NEXT:    %[[M:.*]] = "fuel.mat_mul"(%arg0, %[[C]]) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    return %[[M]]
func.func @mixed_matmul(%a: tensor<2x3xf32>, %b: tensor<3x4xbf16>) -> tensor<2x4xf32> {
  %0 = "fuel.mat_mul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xbf16>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// bf16 ops with no bf16 kernel compute in f32 and cast the result back, so
// the function's types do not change. %arg0 is cast once and shared.
// CHECK-LABEL: func.func @bf16_chain
// CHECK-NEXT:    %[[A:.*]] = "fuel.cast"(%arg0) {dtype = "f32"} : (tensor<4xbf16>) -> tensor<4xf32>
// CHECK-NEXT:    %[[B:.*]] = "fuel.cast"(%arg1) {dtype = "f32"}
// CHECK-NEXT:    %[[S:.*]] = "fuel.add"(%[[A]], %[[B]]) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[SB:.*]] = "fuel.cast"(%[[S]]) {dtype = "bf16"} : (tensor<4xf32>) -> tensor<4xbf16>
// CHECK-NEXT:    %[[SF:.*]] = "fuel.cast"(%[[SB]]) {dtype = "f32"}
// CHECK-NEXT:    %[[P:.*]] = "fuel.mul"(%[[A]], %[[SF]])
// CHECK-NEXT:    %[[PB:.*]] = "fuel.cast"(%[[P]]) {dtype = "bf16"}
// CHECK-NEXT:    %[[E:.*]] = "fuel.exp"(%[[A]])
// CHECK-NEXT:    "fuel.cast"(%[[E]]) {dtype = "bf16"}
// CHECK-NOT:     "fuel.cast"(%arg0)
// CHECK:         return %[[SB]], %[[PB]]
func.func @bf16_chain(%a: tensor<4xbf16>, %b: tensor<4xbf16>) -> (tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>) {
  %0 = "fuel.add"(%a, %b) : (tensor<4xbf16>, tensor<4xbf16>) -> tensor<4xbf16>
  %1 = "fuel.mul"(%a, %0) : (tensor<4xbf16>, tensor<4xbf16>) -> tensor<4xbf16>
  %2 = "fuel.exp"(%a) : (tensor<4xbf16>) -> tensor<4xbf16>
  return %0, %1, %2 : tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>
}

// -----

// Ops with no OpKind (views, reshapes) are not dispatched and not touched.
// CHECK-LABEL: func.func @structural
// CHECK-NEXT:    "fuel.reshape"(%arg0) {shape = [4]} : (tensor<2x2xbf16>) -> tensor<4xbf16>
// CHECK-NEXT:    return
func.func @structural(%a: tensor<2x2xbf16>) -> tensor<4xbf16> {
  %0 = "fuel.reshape"(%a) {shape = [4]} : (tensor<2x2xbf16>) -> tensor<4xbf16>
  return %0 : tensor<4xbf16>
}
