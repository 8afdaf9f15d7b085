// REQUIRES: fused-dialect
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=linear_residual runtime=false})' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=linear_residual runtime=false linear_residuals=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=linear_f32_f64 runtime=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=linear_residual backend=cuda runtime=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=linear_residual runtime=false},fuel-decompose{all=true})' | filecheck %s --check-prefix=DECOMP

// fuel-fuse folds the residual Add after a FusedLinear without an epilogue
// (a transformer's x + proj(attention), h + ffn_down(..)), directly or behind
// the importer's Reshape back to [B, S, N], into its residual operand
// (fold_linear_residuals), where the cpu kernel serves it: the skip viewed
// as the product's output, the product placed at the Add (the skip may come
// after it). Without the 5-operand kernel (linear_f32_f64), on cuda, or with
// linear_residuals=false, the Add stays. Decomposing gives the Add back.

// CHECK-LABEL: func.func @direct
// CHECK-NEXT:    %[[L:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2, %arg3) {residual = true}
// CHECK-NEXT:    return %[[L]]
// OFF-LABEL:   func.func @direct
// OFF-NEXT:      %[[L:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2) :
// OFF-NEXT:      "fuel.add"(%[[L]], %arg3)
// DECOMP-LABEL: func.func @direct
// DECOMP:         %[[M:.*]] = "fuel.mat_mul"(%arg0, %arg1)
// DECOMP:         %[[B:.*]] = "fuel.add"(%[[M]],
// DECOMP-NEXT:    "fuel.add"(%[[B]], %arg3)
func.func @direct(%a: tensor<8x16xf32>, %b: tensor<16x32xf32>, %c: tensor<32xf32>, %s: tensor<8x32xf32>) -> tensor<8x32xf32> {
  %0 = "fuel.fused_linear"(%a, %b, %c) : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %1 = "fuel.add"(%0, %s) : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  return %1 : tensor<8x32xf32>
}

// -----

// Behind the Reshape back to [B, S, N], the skip (the Add's first operand)
// computed after the product: the skip is viewed as [B*S, N], the product
// moves to the Add, the Reshape reads it.
// CHECK-LABEL: func.func @view
// CHECK:         %[[X:.*]] = "fuel.exp"(%arg3)
// CHECK-NEXT:    %[[V:.*]] = "fuel.reshape"(%[[X]]) {shape = [8, 32]} : (tensor<2x4x32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    %[[L:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2, %[[V]]) {residual = true}
// CHECK-NEXT:    %[[R:.*]] = "fuel.reshape"(%[[L]]) {shape = [2, 4, 32]}
// CHECK-NEXT:    return %[[R]]
// OFF-LABEL:   func.func @view
// OFF:           "fuel.add"
func.func @view(%a: tensor<8x16xf32>, %b: tensor<16x32xf32>, %c: tensor<32xf32>, %s: tensor<2x4x32xf32>) -> tensor<2x4x32xf32> {
  %0 = "fuel.fused_linear"(%a, %b, %c) : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %1 = "fuel.reshape"(%0) {shape = [2, 4, 32]} : (tensor<8x32xf32>) -> tensor<2x4x32xf32>
  %x = "fuel.exp"(%s) : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %2 = "fuel.add"(%x, %1) : (tensor<2x4x32xf32>, tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  return %2 : tensor<2x4x32xf32>
}

// -----

// Left alone: a product with a GELU epilogue; a product with another user;
// an f64 product (no f64 residual kernel in the table). A skip that is a
// BroadcastTo (of the output's type) folds as any other.
// CHECK-LABEL: func.func @left_alone
// CHECK:         "fuel.fused_linear"(%arg0, %arg1, %arg2) {gelu = true}
// CHECK-NEXT:    "fuel.add"
// CHECK:         %[[L:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2) :
// CHECK-NEXT:    "fuel.add"(%[[L]], %arg3)
// CHECK-NEXT:    "fuel.mul"(%{{.*}}, %[[L]])
// CHECK-NEXT:    %[[B:.*]] = "fuel.broadcast_to"(%arg2)
// CHECK-NEXT:    %[[K:.*]] = "fuel.fused_linear"(%arg0, %arg1, %arg2, %[[B]]) {residual = true}
// CHECK-NEXT:    "fuel.add"
// CHECK-NEXT:    "fuel.add"(%{{.*}}, %[[K]])
// CHECK-LABEL: func.func @f64
// CHECK-NEXT:    "fuel.fused_linear"(%arg0, %arg1, %arg2) :
// CHECK-NEXT:    "fuel.add"
func.func @left_alone(%a: tensor<8x16xf32>, %b: tensor<16x32xf32>, %c: tensor<32xf32>, %s: tensor<8x32xf32>) -> tensor<8x32xf32> {
  %0 = "fuel.fused_linear"(%a, %b, %c) {gelu = true} : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %1 = "fuel.add"(%0, %s) : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  %2 = "fuel.fused_linear"(%a, %b, %c) : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %3 = "fuel.add"(%2, %s) : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  %4 = "fuel.mul"(%3, %2) : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  %5 = "fuel.fused_linear"(%a, %b, %c) : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %6 = "fuel.broadcast_to"(%c) {shape = [8, 32]} : (tensor<32xf32>) -> tensor<8x32xf32>
  %7 = "fuel.add"(%5, %6) : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  %8 = "fuel.add"(%1, %4) : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  %9 = "fuel.add"(%8, %7) : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  return %9 : tensor<8x32xf32>
}
func.func @f64(%a: tensor<8x16xf64>, %b: tensor<16x32xf64>, %c: tensor<32xf64>, %s: tensor<8x32xf64>) -> tensor<8x32xf64> {
  %0 = "fuel.fused_linear"(%a, %b, %c) : (tensor<8x16xf64>, tensor<16x32xf64>, tensor<32xf64>) -> tensor<8x32xf64>
  %1 = "fuel.add"(%0, %s) : (tensor<8x32xf64>, tensor<8x32xf64>) -> tensor<8x32xf64>
  return %1 : tensor<8x32xf64>
}

// -----

// A MatMul by a constant weight without a bias (a Llama block's o_proj and
// down_proj as exported), behind the Reshape back to [B, S, N]: a FusedLinear
// with a zero bias and the skip (its FMAs start from 0 as the MatMul's: the
// same bits as the MatMul and the Add). A MatMul by a weight that is not a
// constant keeps its Add.
// CHECK-LABEL: func.func @matmul
// CHECK:         %[[W:.*]] = "fuel.const"() {dtype = "f32", name = "w"
// CHECK:         %[[V:.*]] = "fuel.reshape"(%arg1) {shape = [8, 32]} : (tensor<2x4x32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    %[[Z:.*]] = "fuel.const"() {dtype = "f32", name = "fuelc.zero_bias.32", shape = [32], value = dense<0.000000e+00> : tensor<32xf32>}
// CHECK-NEXT:    %[[L:.*]] = "fuel.fused_linear"(%arg0, %[[W]], %[[Z]], %[[V]]) {residual = true}
// CHECK-NEXT:    %[[R:.*]] = "fuel.reshape"(%[[L]]) {shape = [2, 4, 32]}
// CHECK-NEXT:    %[[M:.*]] = "fuel.mat_mul"(%arg0, %arg2)
// CHECK-NEXT:    %[[N:.*]] = "fuel.reshape"(%[[M]])
// CHECK-NEXT:    "fuel.add"(%[[R]], %[[N]])
// OFF-LABEL:   func.func @matmul
// OFF:           "fuel.mat_mul"
// OFF:           "fuel.add"
func.func @matmul(%a: tensor<8x16xf32>, %s: tensor<2x4x32xf32>, %b: tensor<16x32xf32>) -> tensor<2x4x32xf32> {
  %w = "fuel.const"() {dtype = "f32", name = "w", shape = [16, 32]} : () -> tensor<16x32xf32>
  %0 = "fuel.mat_mul"(%a, %w) : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %1 = "fuel.reshape"(%0) {shape = [2, 4, 32]} : (tensor<8x32xf32>) -> tensor<2x4x32xf32>
  %2 = "fuel.add"(%s, %1) : (tensor<2x4x32xf32>, tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %3 = "fuel.mat_mul"(%a, %b) : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %4 = "fuel.reshape"(%3) {shape = [2, 4, 32]} : (tensor<8x32xf32>) -> tensor<2x4x32xf32>
  %5 = "fuel.add"(%2, %4) : (tensor<2x4x32xf32>, tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  return %5 : tensor<2x4x32xf32>
}
