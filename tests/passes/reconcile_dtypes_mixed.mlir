// RUN: python -m compiler.opt %s --pass-pipeline='builtin.module(fuel-reconcile-dtypes{target=cpu})' | filecheck %s
// RUN: python -m compiler.opt %s --pass-pipeline='builtin.module(fuel-reconcile-dtypes{target=cuda})' | filecheck %s --check-prefix=CUDA

// The mixed f32 x bf16 MatMul: the cpu table has a generated kernel for the
// key (the product extends the bf16 operand itself), so it is left as it is;
// the cuda table has none, and the bf16 operand is cast to f32 (lossless).
// CHECK-LABEL: func.func @mixed
// CHECK-NOT:     fuel.cast
// CHECK:         "fuel.mat_mul"(%arg0, %arg1) : (tensor<3x64xf32>, tensor<64x96xbf16>) -> tensor<3x96xf32>
// CUDA-LABEL:  func.func @mixed
// CUDA:          %[[C:.*]] = "fuel.cast"(%arg1) {dtype = "f32"} : (tensor<64x96xbf16>) -> tensor<64x96xf32>
// CUDA-NEXT:     "fuel.mat_mul"(%arg0, %[[C]]) : (tensor<3x64xf32>, tensor<64x96xf32>) -> tensor<3x96xf32>
func.func @mixed(%x: tensor<3x64xf32>, %w: tensor<64x96xbf16>) -> tensor<3x96xf32> {
  %0 = "fuel.mat_mul"(%x, %w) : (tensor<3x64xf32>, tensor<64x96xbf16>) -> tensor<3x96xf32>
  return %0 : tensor<3x96xf32>
}
