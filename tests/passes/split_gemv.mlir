// REQUIRES: fused-dialect
// RUN: python -m compiler.opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-split-gemv{target=cpu:x86-64-v3})' | filecheck %s
// RUN: python -m compiler.opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-split-gemv{target=cuda})' | filecheck %s --check-prefix=CUDA
// RUN: python -m compiler.opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-split-gemv{target=cpu:x86-64-v4})' | filecheck %s --check-prefix=V4

// fuel-split-gemv: a FusedLinear or MatMul of 1-4 rows over a B input of at
// least 2^20 elements becomes a product batched over 2 chunks of K (views of a
// and b), its chunks summed, then the bias added (docs/architecture.md); on
// AVX2 also 5-16 rows where B's rows are a multiple of 1024 elements apart
// (2048 or more). A target other than cpu keeps the product.
// CUDA-NOT: fuel.sum_dim

// CHECK-LABEL: func.func @linear
// CHECK-NEXT:    %[[A:.*]] = "fuel.reshape"(%arg0) {shape = [2, 1, 384]} : (tensor<1x768xf32>) -> tensor<2x1x384xf32>
// CHECK-NEXT:    %[[B:.*]] = "fuel.reshape"(%arg1) {shape = [2, 384, 2048]} : (tensor<768x2048xf32>) -> tensor<2x384x2048xf32>
// CHECK-NEXT:    %[[P:.*]] = "fuel.mat_mul"(%[[A]], %[[B]]) : (tensor<2x1x384xf32>, tensor<2x384x2048xf32>) -> tensor<2x1x2048xf32>
// CHECK-NEXT:    %[[S:.*]] = "fuel.sum_dim"(%[[P]]) {axis = 0 : i64} : (tensor<2x1x2048xf32>) -> tensor<1x2048xf32>
// CHECK-NEXT:    %[[C:.*]] = "fuel.reshape"(%arg2) {shape = [1, 2048]} : (tensor<2048xf32>) -> tensor<1x2048xf32>
// CHECK-NEXT:    %[[Y:.*]] = "fuel.add"(%[[S]], %[[C]]) : (tensor<1x2048xf32>, tensor<1x2048xf32>) -> tensor<1x2048xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @linear(%x: tensor<1x768xf32>, %w: tensor<768x2048xf32>, %b: tensor<2048xf32>) -> tensor<1x2048xf32> {
  %0 = "fuel.fused_linear"(%x, %w, %b) : (tensor<1x768xf32>, tensor<768x2048xf32>, tensor<2048xf32>) -> tensor<1x2048xf32>
  return %0 : tensor<1x2048xf32>
}

// -----

// A MatMul (no bias, f64).
// CHECK-LABEL: func.func @matmul
// CHECK:         "fuel.mat_mul"(%{{.*}}, %{{.*}}) : (tensor<2x1x512xf64>, tensor<2x512x1024xf64>) -> tensor<2x1x1024xf64>
// CHECK-NEXT:    %[[S:.*]] = "fuel.sum_dim"(%{{.*}}) {axis = 0 : i64} : (tensor<2x1x1024xf64>) -> tensor<1x1024xf64>
// CHECK-NEXT:    return %[[S]]
func.func @matmul(%x: tensor<1x1024xf64>, %w: tensor<1024x1024xf64>) -> tensor<1x1024xf64> {
  %0 = "fuel.mat_mul"(%x, %w) : (tensor<1x1024xf64>, tensor<1024x1024xf64>) -> tensor<1x1024xf64>
  return %0 : tensor<1x1024xf64>
}

// -----

// Three rows: a's chunks a permuted view, the bias broadcast over the rows.
// CHECK-LABEL: func.func @three_rows
// CHECK-NEXT:    %[[R:.*]] = "fuel.reshape"(%arg0) {shape = [3, 2, 384]} : (tensor<3x768xf32>) -> tensor<3x2x384xf32>
// CHECK-NEXT:    %[[A:.*]] = "fuel.permute"(%[[R]]) {perm = [1, 0, 2]} : (tensor<3x2x384xf32>) -> tensor<2x3x384xf32>
// CHECK-NEXT:    %[[B:.*]] = "fuel.reshape"(%arg1) {shape = [2, 384, 2048]}
// CHECK-NEXT:    %[[P:.*]] = "fuel.mat_mul"(%[[A]], %[[B]]) : (tensor<2x3x384xf32>, tensor<2x384x2048xf32>) -> tensor<2x3x2048xf32>
// CHECK-NEXT:    %[[S:.*]] = "fuel.sum_dim"(%[[P]]) {axis = 0 : i64} : (tensor<2x3x2048xf32>) -> tensor<3x2048xf32>
// CHECK-NEXT:    %[[C:.*]] = "fuel.reshape"(%arg2) {shape = [1, 2048]}
// CHECK-NEXT:    %[[D:.*]] = "fuel.broadcast_to"(%[[C]]) {shape = [3, 2048]} : (tensor<1x2048xf32>) -> tensor<3x2048xf32>
// CHECK-NEXT:    %[[Y:.*]] = "fuel.add"(%[[S]], %[[D]]) : (tensor<3x2048xf32>, tensor<3x2048xf32>) -> tensor<3x2048xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @three_rows(%x: tensor<3x768xf32>, %w: tensor<768x2048xf32>, %b: tensor<2048xf32>) -> tensor<3x2048xf32> {
  %0 = "fuel.fused_linear"(%x, %w, %b) : (tensor<3x768xf32>, tensor<768x2048xf32>, tensor<2048xf32>) -> tensor<3x2048xf32>
  return %0 : tensor<3x2048xf32>
}

// -----

// Five and sixteen rows over B rows 2048 elements apart: split on AVX2, kept on
// AVX-512 (whose 8 x 32 tiles read such a B once for 8 rows).
// CHECK-LABEL: func.func @avx2_rows
// CHECK:         "fuel.mat_mul"(%{{.*}}, %{{.*}}) : (tensor<2x5x384xf32>, tensor<2x384x2048xf32>) -> tensor<2x5x2048xf32>
// CHECK:         "fuel.mat_mul"(%{{.*}}, %{{.*}}) : (tensor<2x16x384xf32>, tensor<2x384x2048xf32>) -> tensor<2x16x2048xf32>
// CHECK-NOT:     fuel.fused_linear
// V4-LABEL: func.func @avx2_rows
// V4-NOT:     fuel.sum_dim
// V4-COUNT-2: "fuel.fused_linear"
// V4-NOT:     fuel.sum_dim
func.func @avx2_rows(%x5: tensor<5x768xf32>, %x16: tensor<16x768xf32>, %w: tensor<768x2048xf32>,
                     %b: tensor<2048xf32>) -> (tensor<5x2048xf32>, tensor<16x2048xf32>) {
  %0 = "fuel.fused_linear"(%x5, %w, %b) : (tensor<5x768xf32>, tensor<768x2048xf32>, tensor<2048xf32>) -> tensor<5x2048xf32>
  %1 = "fuel.fused_linear"(%x16, %w, %b) : (tensor<16x768xf32>, tensor<768x2048xf32>, tensor<2048xf32>) -> tensor<16x2048xf32>
  return %0, %1 : tensor<5x2048xf32>, tensor<16x2048xf32>
}

// -----

// Left as they are: 17 rows, and 8 over B rows 2064 elements apart (not a
// multiple of 1024); a B below 2^20 elements; an odd K; a constant
// B (fuel-prepack-weights packs it); an epilogue; a run-time row count.
// CHECK-LABEL: func.func @kept
// CHECK-NOT:     fuel.sum_dim
// CHECK-COUNT-4: "fuel.fused_linear"
// CHECK:         "fuel.mat_mul"(%arg4, %{{.*}}) : (tensor<1x768xf32>, tensor<768x2048xf32>)
// CHECK-COUNT-2: "fuel.fused_linear"
// CHECK-NOT:     fuel.sum_dim
func.func @kept(%x2: tensor<17x768xf32>, %x8: tensor<8x768xf32>, %wn: tensor<768x2064xf32>, %bn: tensor<2064xf32>, %x: tensor<1x768xf32>, %x1: tensor<1x1025xf32>, %xd: tensor<?x768xf32>,
                %w: tensor<768x2048xf32>, %ws: tensor<768x1024xf32>, %w1: tensor<1025x2048xf32>, %b: tensor<2048xf32>,
                %bs: tensor<1024xf32>) -> (tensor<17x2048xf32>, tensor<8x2064xf32>, tensor<1x1024xf32>, tensor<1x2048xf32>, tensor<1x2048xf32>, tensor<1x2048xf32>, tensor<1x2048xf32>, tensor<?x2048xf32>) {
  %0 = "fuel.fused_linear"(%x2, %w, %b) : (tensor<17x768xf32>, tensor<768x2048xf32>, tensor<2048xf32>) -> tensor<17x2048xf32>
  %n = "fuel.fused_linear"(%x8, %wn, %bn) : (tensor<8x768xf32>, tensor<768x2064xf32>, tensor<2064xf32>) -> tensor<8x2064xf32>
  %1 = "fuel.fused_linear"(%x, %ws, %bs) : (tensor<1x768xf32>, tensor<768x1024xf32>, tensor<1024xf32>) -> tensor<1x1024xf32>
  %2 = "fuel.fused_linear"(%x1, %w1, %b) : (tensor<1x1025xf32>, tensor<1025x2048xf32>, tensor<2048xf32>) -> tensor<1x2048xf32>
  %wc = "fuel.const"() {dtype = "f32", name = "w", shape = [768, 2048]} : () -> tensor<768x2048xf32>
  %3 = "fuel.mat_mul"(%x, %wc) : (tensor<1x768xf32>, tensor<768x2048xf32>) -> tensor<1x2048xf32>
  %4 = "fuel.fused_linear"(%x, %w, %b) {gelu = true} : (tensor<1x768xf32>, tensor<768x2048xf32>, tensor<2048xf32>) -> tensor<1x2048xf32>
  %5 = "fuel.fused_linear"(%xd, %w, %b) : (tensor<?x768xf32>, tensor<768x2048xf32>, tensor<2048xf32>) -> tensor<?x2048xf32>
  return %0, %n, %1, %2, %3, %3, %4, %5 : tensor<17x2048xf32>, tensor<8x2064xf32>, tensor<1x1024xf32>, tensor<1x2048xf32>, tensor<1x2048xf32>, tensor<1x2048xf32>, tensor<1x2048xf32>, tensor<?x2048xf32>
}
