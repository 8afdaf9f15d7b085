// REQUIRES: fused-dialect
// RUN: python -m compiler.opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-prepack-weights{target=cpu:x86-64-v3})' | filecheck %s
// RUN: python -m compiler.opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-prepack-weights{target=cpu:x86-64-v4})' | filecheck %s --check-prefix=V4
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-prepack-weights{table=fused_f32})' | filecheck %s --check-prefix=NOKERNEL

// fuel-prepack-weights gives a FusedLinear whose b is a constant weight the
// panels the target's kernel reads: b_panel = nr (AVX2 16, AVX-512 32 f32
// columns) and b = Contiguize(Permute(Reshape(w, [K, N/nr, nr]), [1, 0, 2])),
// which the plan folds into a constant (N >= 64; N not a multiple of nr padded:
// @padded). A table whose FusedLinear kernel
// reads no packed B (here one without generated kernels) leaves it.

// A constant [64, 96] weight, rows ? (a run-time batch).
// CHECK-LABEL: func.func @linear
// CHECK:         %[[W:.*]] = "fuel.const"()
// CHECK:         %[[B:.*]] = "fuel.const"()
// CHECK-NEXT:    %[[R:.*]] = "fuel.reshape"(%[[W]]) {shape = [64, 6, 16]} : (tensor<64x96xf32>) -> tensor<64x6x16xf32>
// CHECK-NEXT:    %[[P:.*]] = "fuel.permute"(%[[R]]) {perm = [1, 0, 2]} : (tensor<64x6x16xf32>) -> tensor<6x64x16xf32>
// CHECK-NEXT:    %[[C:.*]] = "fuel.contiguize"(%[[P]]) : (tensor<6x64x16xf32>) -> tensor<6x64x16xf32>
// CHECK-NEXT:    %[[L:.*]] = "fuel.fused_linear"(%arg0, %[[C]], %[[B]]) {b_panel = 16 : i64} : (tensor<?x64xf32>, tensor<6x64x16xf32>, tensor<96xf32>) -> tensor<?x96xf32>
// CHECK-NEXT:    return %[[L]]
// V4-LABEL:    func.func @linear
// V4:            "fuel.reshape"(%{{.*}}) {shape = [64, 3, 32]}
// V4:            "fuel.fused_linear"(%arg0, %{{.*}}, %{{.*}}) {b_panel = 32 : i64} : (tensor<?x64xf32>, tensor<3x64x32xf32>, tensor<96xf32>) -> tensor<?x96xf32>
// NOKERNEL-LABEL: func.func @linear
// NOKERNEL-NOT:  b_panel
// NOKERNEL:      "fuel.fused_linear"(%arg0, %0, %1) : (tensor<?x64xf32>, tensor<64x96xf32>, tensor<96xf32>)
func.func @linear(%x: tensor<?x64xf32>) -> tensor<?x96xf32> {
  %w = "fuel.const"() {dtype = "f32", name = "w", shape = [64, 96]} : () -> tensor<64x96xf32>
  %b = "fuel.const"() {dtype = "f32", name = "b", shape = [96]} : () -> tensor<96xf32>
  %0 = "fuel.fused_linear"(%x, %w, %b) : (tensor<?x64xf32>, tensor<64x96xf32>, tensor<96xf32>) -> tensor<?x96xf32>
  return %0 : tensor<?x96xf32>
}

// -----

// x @ w of a batched x: the weight broadcast over the batch; its source is
// packed (a's batch folds into M in the kernel). A transposed weight (a
// view of the constant) is packed too.
// CHECK-LABEL: func.func @broadcast_transposed
// CHECK:         %[[WT:.*]] = "fuel.transpose"
// CHECK-NEXT:    %[[BC:.*]] = "fuel.broadcast_to"(%[[WT]])
// CHECK:         %[[R:.*]] = "fuel.reshape"(%[[WT]]) {shape = [64, 4, 16]}
// CHECK-NEXT:    %[[P:.*]] = "fuel.permute"(%[[R]]) {perm = [1, 0, 2]}
// CHECK-NEXT:    %[[C:.*]] = "fuel.contiguize"(%[[P]])
// CHECK-NEXT:    "fuel.fused_linear"(%arg0, %[[C]], %{{.*}}) {b_panel = 16 : i64} : (tensor<2x?x64xf32>, tensor<4x64x16xf32>, tensor<64xf32>) -> tensor<2x?x64xf32>
func.func @broadcast_transposed(%x: tensor<2x?x64xf32>) -> tensor<2x?x64xf32> {
  %w = "fuel.const"() {dtype = "f32", name = "w", shape = [64, 64]} : () -> tensor<64x64xf32>
  %wt = "fuel.transpose"(%w) : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %wb = "fuel.broadcast_to"(%wt) {shape = [2, 64, 64]} : (tensor<64x64xf32>) -> tensor<2x64x64xf32>
  %b = "fuel.const"() {dtype = "f32", name = "b", shape = [64]} : () -> tensor<64xf32>
  %0 = "fuel.fused_linear"(%x, %wb, %b) : (tensor<2x?x64xf32>, tensor<2x64x64xf32>, tensor<64xf32>) -> tensor<2x?x64xf32>
  return %0 : tensor<2x?x64xf32>
}

// -----

// A MatMul over a constant weight becomes a packed FusedLinear with a zero
// bias (its FMAs start from 0, as MatMul's do: the same bits).
// CHECK-LABEL: func.func @matmul
// CHECK:         %[[C:.*]] = "fuel.contiguize"
// CHECK-NEXT:    %[[Z:.*]] = "fuel.const"() {dtype = "f32", name = "fuelc.zero_bias.64", shape = [64], value = dense<0.000000e+00> : tensor<64xf32>}
// CHECK-NEXT:    "fuel.fused_linear"(%arg0, %[[C]], %[[Z]]) {b_panel = 16 : i64} : (tensor<?x64xf32>, tensor<4x64x16xf32>, tensor<64xf32>) -> tensor<?x64xf32>
// CHECK-NOT:     fuel.mat_mul
func.func @matmul(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %w = "fuel.const"() {dtype = "f32", name = "w", shape = [64, 64]} : () -> tensor<64x64xf32>
  %0 = "fuel.mat_mul"(%x, %w) : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  return %0 : tensor<?x64xf32>
}

// -----

// The Conv2D recipe's few-pixel form (a CNN's late layers): cols^T @ w^T, the
// weight reshaped, permuted and made contiguous, with a batch axis of 1. A
// Contiguize of a constant is a constant too: packed, read through the chain.
// CHECK-LABEL: func.func @conv_few_pixels
// CHECK:         %[[WT:.*]] = "fuel.contiguize"
// CHECK-NEXT:    %[[R:.*]] = "fuel.reshape"(%[[WT]]) {shape = [72, 4, 16]}
// CHECK-NEXT:    %[[P:.*]] = "fuel.permute"(%[[R]]) {perm = [1, 0, 2]}
// CHECK-NEXT:    %[[C:.*]] = "fuel.contiguize"(%[[P]])
// CHECK:         "fuel.fused_linear"(%arg0, %[[C]], %{{.*}}) {b_panel = 16 : i64} : (tensor<1x4x72xf32>, tensor<4x72x16xf32>, tensor<64xf32>) -> tensor<1x4x64xf32>
// CHECK-NOT:     fuel.mat_mul
func.func @conv_few_pixels(%cols: tensor<1x4x72xf32>) -> tensor<1x4x64xf32> {
  %w = "fuel.const"() {dtype = "f32", name = "w", shape = [64, 8, 3, 3]} : () -> tensor<64x8x3x3xf32>
  %w2 = "fuel.reshape"(%w) {shape = [1, 64, 72]} : (tensor<64x8x3x3xf32>) -> tensor<1x64x72xf32>
  %wp = "fuel.permute"(%w2) {perm = [0, 2, 1]} : (tensor<1x64x72xf32>) -> tensor<1x72x64xf32>
  %wt = "fuel.contiguize"(%wp) : (tensor<1x72x64xf32>) -> tensor<1x72x64xf32>
  %0 = "fuel.mat_mul"(%cols, %wt) : (tensor<1x4x72xf32>, tensor<1x72x64xf32>) -> tensor<1x4x64xf32>
  return %0 : tensor<1x4x64xf32>
}

// -----

// N not a multiple of the panel (an ImageNet classifier's 1000 columns, the
// [1000, K] weight transposed as ONNX's Gemm transB=1 reads it): the weight and
// the constant bias are padded with zero columns to whole panels (AVX2 1008,
// AVX-512 1024), and the first 1000 columns of the product are a Slice view.
// CHECK-LABEL: func.func @padded
// CHECK:         %[[WT:.*]] = "fuel.transpose"
// CHECK:         %[[B:.*]] = "fuel.const"() {dtype = "f32", name = "b"
// CHECK-NEXT:    %[[WP:.*]] = "fuel.pad"(%[[WT]]) {mode = "constant", padding = [0, 0, 0, 8], value = 0.000000e+00 : f64} : (tensor<64x1000xf32>) -> tensor<64x1008xf32>
// CHECK-NEXT:    %[[R:.*]] = "fuel.reshape"(%[[WP]]) {shape = [64, 63, 16]}
// CHECK-NEXT:    %[[P:.*]] = "fuel.permute"(%[[R]]) {perm = [1, 0, 2]}
// CHECK-NEXT:    %[[C:.*]] = "fuel.contiguize"(%[[P]])
// CHECK-NEXT:    %[[BP:.*]] = "fuel.pad"(%[[B]]) {mode = "constant", padding = [0, 8], value = 0.000000e+00 : f64} : (tensor<1000xf32>) -> tensor<1008xf32>
// CHECK-NEXT:    %[[L:.*]] = "fuel.fused_linear"(%arg0, %[[C]], %[[BP]]) {b_panel = 16 : i64} : (tensor<?x64xf32>, tensor<63x64x16xf32>, tensor<1008xf32>) -> tensor<?x1008xf32>
// CHECK-NEXT:    %[[S:.*]] = "fuel.slice"(%[[L]]) {dim = 1 : i64, len = 1000 : i64, start = 0 : i64} : (tensor<?x1008xf32>) -> tensor<?x1000xf32>
// V4-LABEL:    func.func @padded
// V4:            "fuel.pad"(%{{.*}}) {mode = "constant", padding = [0, 0, 0, 24], value = 0.000000e+00 : f64} : (tensor<64x1000xf32>) -> tensor<64x1024xf32>
// V4:            "fuel.fused_linear"(%arg0, %{{.*}}, %{{.*}}) {b_panel = 32 : i64} : (tensor<?x64xf32>, tensor<32x64x32xf32>, tensor<1024xf32>) -> tensor<?x1024xf32>
// V4-NEXT:       "fuel.slice"(%{{.*}}) {dim = 1 : i64, len = 1000 : i64, start = 0 : i64} : (tensor<?x1024xf32>) -> tensor<?x1000xf32>
// A MatMul's zero bias is made padded.
// CHECK:         "fuel.const"() {dtype = "f32", name = "fuelc.zero_bias.1008", shape = [1008], value = dense<0.000000e+00> : tensor<1008xf32>}
// CHECK-NEXT:    "fuel.fused_linear"({{.*}}) {b_panel = 16 : i64} : (tensor<?x64xf32>, tensor<63x64x16xf32>, tensor<1008xf32>) -> tensor<?x1008xf32>
// CHECK-NEXT:    %[[S2:.*]] = "fuel.slice"
// CHECK-NEXT:    return %[[S]], %[[S2]]
// NOKERNEL-LABEL: func.func @padded
// NOKERNEL-NOT:  fuel.pad
// NOKERNEL:      return
func.func @padded(%x: tensor<?x64xf32>) -> (tensor<?x1000xf32>, tensor<?x1000xf32>) {
  %w = "fuel.const"() {dtype = "f32", name = "w", shape = [1000, 64]} : () -> tensor<1000x64xf32>
  %wt = "fuel.transpose"(%w) : (tensor<1000x64xf32>) -> tensor<64x1000xf32>
  %b = "fuel.const"() {dtype = "f32", name = "b", shape = [1000]} : () -> tensor<1000xf32>
  %0 = "fuel.fused_linear"(%x, %wt, %b) : (tensor<?x64xf32>, tensor<64x1000xf32>, tensor<1000xf32>) -> tensor<?x1000xf32>
  %1 = "fuel.mat_mul"(%x, %wt) : (tensor<?x64xf32>, tensor<64x1000xf32>) -> tensor<?x1000xf32>
  return %0, %1 : tensor<?x1000xf32>, tensor<?x1000xf32>
}

// -----

// Left as they are: a weight that is an input (not a constant), N not a
// multiple of the panel where padding would add more than N/8 columns (66
// columns: 14 more on AVX2, 30 on AVX-512) or the bias is not a constant,
// fewer than 64 columns (on every target), a batched weight.
// CHECK-LABEL: func.func @kept
// CHECK-NOT:     b_panel
// CHECK-NOT:     fuel.permute
// CHECK-NOT:     fuel.pad
// CHECK:         return
// V4-LABEL:    func.func @kept
// V4-NOT:        b_panel
// V4-NOT:        fuel.pad
// V4:            return
func.func @kept(%x: tensor<8x64xf32>, %win: tensor<64x96xf32>, %xb: tensor<2x8x64xf32>, %bin: tensor<1000xf32>) -> (tensor<8x96xf32>, tensor<8x40xf32>, tensor<8x16xf32>, tensor<2x8x96xf32>, tensor<8x66xf32>, tensor<8x1000xf32>) {
  %b = "fuel.const"() {dtype = "f32", name = "b", shape = [96]} : () -> tensor<96xf32>
  %0 = "fuel.fused_linear"(%x, %win, %b) : (tensor<8x64xf32>, tensor<64x96xf32>, tensor<96xf32>) -> tensor<8x96xf32>
  %w40 = "fuel.const"() {dtype = "f32", name = "w40", shape = [64, 40]} : () -> tensor<64x40xf32>
  %b40 = "fuel.const"() {dtype = "f32", name = "b40", shape = [40]} : () -> tensor<40xf32>
  %1 = "fuel.fused_linear"(%x, %w40, %b40) : (tensor<8x64xf32>, tensor<64x40xf32>, tensor<40xf32>) -> tensor<8x40xf32>
  %w16 = "fuel.const"() {dtype = "f32", name = "w16", shape = [64, 16]} : () -> tensor<64x16xf32>
  %b16 = "fuel.const"() {dtype = "f32", name = "b16", shape = [16]} : () -> tensor<16xf32>
  %2 = "fuel.fused_linear"(%x, %w16, %b16) : (tensor<8x64xf32>, tensor<64x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %wb = "fuel.const"() {dtype = "f32", name = "wb", shape = [2, 64, 96]} : () -> tensor<2x64x96xf32>
  %4 = "fuel.fused_linear"(%xb, %wb, %b) : (tensor<2x8x64xf32>, tensor<2x64x96xf32>, tensor<96xf32>) -> tensor<2x8x96xf32>
  %w66 = "fuel.const"() {dtype = "f32", name = "w66", shape = [64, 66]} : () -> tensor<64x66xf32>
  %b66 = "fuel.const"() {dtype = "f32", name = "b66", shape = [66]} : () -> tensor<66xf32>
  %5 = "fuel.fused_linear"(%x, %w66, %b66) : (tensor<8x64xf32>, tensor<64x66xf32>, tensor<66xf32>) -> tensor<8x66xf32>
  %w1k = "fuel.const"() {dtype = "f32", name = "w1k", shape = [64, 1000]} : () -> tensor<64x1000xf32>
  %6 = "fuel.fused_linear"(%x, %w1k, %bin) : (tensor<8x64xf32>, tensor<64x1000xf32>, tensor<1000xf32>) -> tensor<8x1000xf32>
  return %0, %1, %2, %4, %5, %6 : tensor<8x96xf32>, tensor<8x40xf32>, tensor<8x16xf32>, tensor<2x8x96xf32>, tensor<8x66xf32>, tensor<8x1000xf32>
}

// -----

// bf16 and f16 weights are packed in their own dtype (the cpu kernel extends
// the panels to f32 in its register tiles), with the panel width of f32; so
// is the bf16 weight of an f32 x (MatMul's mixed pair f32 x bf16): a
// FusedLinear over the bf16 panels with an f32 zero bias, and with N padded
// (120 -> 128 on AVX2) its f32 bias padded in f32.
// CHECK-LABEL: func.func @narrow
// CHECK:         %[[W:.*]] = "fuel.const"() {dtype = "bf16", name = "w", shape = [64, 96]}
// CHECK:         %[[R:.*]] = "fuel.reshape"(%[[W]]) {shape = [64, 6, 16]} : (tensor<64x96xbf16>) -> tensor<64x6x16xbf16>
// CHECK-NEXT:    %[[P:.*]] = "fuel.permute"(%[[R]]) {perm = [1, 0, 2]} : (tensor<64x6x16xbf16>) -> tensor<6x64x16xbf16>
// CHECK-NEXT:    %[[C:.*]] = "fuel.contiguize"(%[[P]]) : (tensor<6x64x16xbf16>) -> tensor<6x64x16xbf16>
// CHECK-NEXT:    "fuel.fused_linear"(%arg0, %[[C]], %{{.*}}) {b_panel = 16 : i64} : (tensor<?x64xbf16>, tensor<6x64x16xbf16>, tensor<96xbf16>) -> tensor<?x96xbf16>
// CHECK:         "fuel.contiguize"(%{{.*}}) : (tensor<6x64x16xf16>) -> tensor<6x64x16xf16>
// CHECK-NEXT:    %[[ZH:.*]] = "fuel.const"() {dtype = "f16", name = "fuelc.zero_bias.96"
// CHECK-NEXT:    "fuel.fused_linear"(%arg1, %{{.*}}, %[[ZH]]) {b_panel = 16 : i64} : (tensor<8x64xf16>, tensor<6x64x16xf16>, tensor<96xf16>) -> tensor<8x96xf16>
// CHECK:         %[[CM:.*]] = "fuel.contiguize"(%{{.*}}) : (tensor<6x64x16xbf16>) -> tensor<6x64x16xbf16>
// CHECK-NEXT:    %[[Z:.*]] = "fuel.const"() {dtype = "f32", name = "fuelc.zero_bias.96", shape = [96], value = dense<0.000000e+00> : tensor<96xf32>}
// CHECK-NEXT:    "fuel.fused_linear"(%arg2, %[[CM]], %[[Z]]) {b_panel = 16 : i64} : (tensor<3x64xf32>, tensor<6x64x16xbf16>, tensor<96xf32>) -> tensor<3x96xf32>
// CHECK:         "fuel.pad"(%{{.*}}) {{.*}} : (tensor<64x120xbf16>) -> tensor<64x128xbf16>
// CHECK:         %[[BP:.*]] = "fuel.pad"(%{{.*}}) {{.*}} : (tensor<120xf32>) -> tensor<128xf32>
// CHECK-NEXT:    %[[LP:.*]] = "fuel.fused_linear"(%arg2, %{{.*}}, %[[BP]]) {b_panel = 16 : i64} : (tensor<3x64xf32>, tensor<8x64x16xbf16>, tensor<128xf32>) -> tensor<3x128xf32>
// CHECK-NEXT:    "fuel.slice"(%[[LP]]) {dim = 1 : i64, len = 120 : i64, start = 0 : i64} : (tensor<3x128xf32>) -> tensor<3x120xf32>
// V4-LABEL:    func.func @narrow
// V4:            "fuel.fused_linear"(%arg0, %{{.*}}, %{{.*}}) {b_panel = 32 : i64} : (tensor<?x64xbf16>, tensor<3x64x32xbf16>, tensor<96xbf16>) -> tensor<?x96xbf16>
// V4:            "fuel.fused_linear"(%arg1, %{{.*}}, %{{.*}}) {b_panel = 32 : i64} : (tensor<8x64xf16>, tensor<3x64x32xf16>, tensor<96xf16>) -> tensor<8x96xf16>
// V4:            "fuel.fused_linear"(%arg2, %{{.*}}, %{{.*}}) {b_panel = 32 : i64} : (tensor<3x64xf32>, tensor<3x64x32xbf16>, tensor<96xf32>) -> tensor<3x96xf32>
// NOKERNEL-LABEL: func.func @narrow
// NOKERNEL-NOT:  b_panel
// NOKERNEL:      return
func.func @narrow(%x: tensor<?x64xbf16>, %xh: tensor<8x64xf16>, %xf: tensor<3x64xf32>) -> (tensor<?x96xbf16>, tensor<8x96xf16>, tensor<3x96xf32>, tensor<3x120xf32>) {
  %w = "fuel.const"() {dtype = "bf16", name = "w", shape = [64, 96]} : () -> tensor<64x96xbf16>
  %b = "fuel.const"() {dtype = "bf16", name = "b", shape = [96]} : () -> tensor<96xbf16>
  %0 = "fuel.fused_linear"(%x, %w, %b) : (tensor<?x64xbf16>, tensor<64x96xbf16>, tensor<96xbf16>) -> tensor<?x96xbf16>
  %wh = "fuel.const"() {dtype = "f16", name = "wh", shape = [64, 96]} : () -> tensor<64x96xf16>
  %1 = "fuel.mat_mul"(%xh, %wh) : (tensor<8x64xf16>, tensor<64x96xf16>) -> tensor<8x96xf16>
  %2 = "fuel.mat_mul"(%xf, %w) : (tensor<3x64xf32>, tensor<64x96xbf16>) -> tensor<3x96xf32>
  %w120 = "fuel.const"() {dtype = "bf16", name = "w120", shape = [64, 120]} : () -> tensor<64x120xbf16>
  %b120 = "fuel.const"() {dtype = "f32", name = "b120", shape = [120]} : () -> tensor<120xf32>
  %3 = "fuel.fused_linear"(%xf, %w120, %b120) : (tensor<3x64xf32>, tensor<64x120xbf16>, tensor<120xf32>) -> tensor<3x120xf32>
  return %0, %1, %2, %3 : tensor<?x96xbf16>, tensor<8x96xf16>, tensor<3x96xf32>, tensor<3x120xf32>
}

// -----

// Slices and unsqueezes of a constant, stacked by a Concat (the Conv2D recipe's
// whole-image weight, registry/ops/conv2d.py: whole_image) are a constant the
// plan folds: the product's weight is packed.
// CHECK-LABEL: func.func @sliced_stack
// CHECK:         %[[CAT:.*]] = "fuel.concat"
// CHECK-NEXT:    %[[WD:.*]] = "fuel.reshape"(%[[CAT]]) {shape = [16, 64]}
// CHECK:         %[[R:.*]] = "fuel.reshape"(%[[WD]]) {shape = [16, 4, 16]}
// CHECK-NEXT:    %[[P:.*]] = "fuel.permute"(%[[R]]) {perm = [1, 0, 2]}
// CHECK-NEXT:    %[[C:.*]] = "fuel.contiguize"(%[[P]])
// CHECK:         "fuel.fused_linear"(%arg0, %[[C]], %{{.*}}) {b_panel = 16 : i64} : (tensor<8x16xf32>, tensor<4x16x16xf32>, tensor<64xf32>) -> tensor<8x64xf32>
func.func @sliced_stack(%x: tensor<8x16xf32>) -> tensor<8x64xf32> {
  %w = "fuel.const"() {dtype = "f32", name = "w", shape = [8, 3, 32]} : () -> tensor<8x3x32xf32>
  %s0 = "fuel.slice"(%w) {dim = 1 : i64, start = 0 : i64, len = 2 : i64} : (tensor<8x3x32xf32>) -> tensor<8x2x32xf32>
  %s1 = "fuel.slice"(%w) {dim = 1 : i64, start = 1 : i64, len = 2 : i64} : (tensor<8x3x32xf32>) -> tensor<8x2x32xf32>
  %u0 = "fuel.unsqueeze"(%s0) {dim = 3 : i64} : (tensor<8x2x32xf32>) -> tensor<8x2x32x1xf32>
  %u1 = "fuel.unsqueeze"(%s1) {dim = 3 : i64} : (tensor<8x2x32xf32>) -> tensor<8x2x32x1xf32>
  %cat = "fuel.concat"(%u0, %u1) {dim = 3 : i64} : (tensor<8x2x32x1xf32>, tensor<8x2x32x1xf32>) -> tensor<8x2x32x2xf32>
  %wd = "fuel.reshape"(%cat) {shape = [16, 64]} : (tensor<8x2x32x2xf32>) -> tensor<16x64xf32>
  %0 = "fuel.mat_mul"(%x, %wd) : (tensor<8x16xf32>, tensor<16x64xf32>) -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}
// V4-LABEL:    func.func @sliced_stack
// V4:            "fuel.fused_linear"(%arg0, %{{.*}}, %{{.*}}) {b_panel = 32 : i64}

// -----

// A weight that is a Slice of rows (K) of a constant matrix (the Conv2D
// recipe's row bands, registry/ops/conv2d.py: _band_product) packs the whole
// matrix and slices its panels: every band's product reads one packed constant
// (fuel-cse merges the two packings). A small part of a large weight (under
// half its rows) is packed alone.
// CHECK-LABEL: func.func @row_bands
// CHECK:         %[[W:.*]] = "fuel.const"()
// CHECK:         %[[R:.*]] = "fuel.reshape"(%[[W]]) {shape = [72, 4, 16]}
// CHECK-NEXT:    %[[P:.*]] = "fuel.permute"(%[[R]]) {perm = [1, 0, 2]}
// CHECK-NEXT:    %[[C:.*]] = "fuel.contiguize"(%[[P]])
// CHECK-NEXT:    %[[S:.*]] = "fuel.slice"(%[[C]]) {dim = 1 : i64, len = 48 : i64, start = 24 : i64} : (tensor<4x72x16xf32>) -> tensor<4x48x16xf32>
// CHECK:         "fuel.fused_linear"(%arg0, %[[S]], %{{.*}}) {b_panel = 16 : i64} : (tensor<8x48xf32>, tensor<4x48x16xf32>, tensor<64xf32>) -> tensor<8x64xf32>
// CHECK:         %[[R2:.*]] = "fuel.reshape"(%[[W]]) {shape = [72, 4, 16]}
// CHECK-NEXT:    %[[P2:.*]] = "fuel.permute"(%[[R2]]) {perm = [1, 0, 2]}
// CHECK-NEXT:    %[[C2:.*]] = "fuel.contiguize"(%[[P2]])
// CHECK-NEXT:    %[[S2:.*]] = "fuel.slice"(%[[C2]]) {dim = 1 : i64, len = 72 : i64, start = 0 : i64}
// CHECK:         "fuel.fused_linear"(%arg1, %[[S2]], %{{.*}}) {b_panel = 16 : i64}
// CHECK:         %[[SMALL:.*]] = "fuel.slice"(%[[W]]) {dim = 0 : i64, len = 16 : i64, start = 0 : i64}
// CHECK-NEXT:    %[[R3:.*]] = "fuel.reshape"(%[[SMALL]]) {shape = [16, 4, 16]}
// CHECK:         "fuel.fused_linear"(%arg2, %{{.*}}, %{{.*}}) {b_panel = 16 : i64} : (tensor<8x16xf32>, tensor<4x16x16xf32>, tensor<64xf32>) -> tensor<8x64xf32>
func.func @row_bands(%x: tensor<8x48xf32>, %y: tensor<8x72xf32>, %z: tensor<8x16xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>) {
  %w = "fuel.const"() {dtype = "f32", name = "w", shape = [72, 64]} : () -> tensor<72x64xf32>
  %band = "fuel.slice"(%w) {dim = 0 : i64, start = 24 : i64, len = 48 : i64} : (tensor<72x64xf32>) -> tensor<48x64xf32>
  %0 = "fuel.mat_mul"(%x, %band) : (tensor<8x48xf32>, tensor<48x64xf32>) -> tensor<8x64xf32>
  %all = "fuel.slice"(%w) {dim = 0 : i64, start = 0 : i64, len = 72 : i64} : (tensor<72x64xf32>) -> tensor<72x64xf32>
  %1 = "fuel.mat_mul"(%y, %all) : (tensor<8x72xf32>, tensor<72x64xf32>) -> tensor<8x64xf32>
  %small = "fuel.slice"(%w) {dim = 0 : i64, start = 0 : i64, len = 16 : i64} : (tensor<72x64xf32>) -> tensor<16x64xf32>
  %2 = "fuel.mat_mul"(%z, %small) : (tensor<8x16xf32>, tensor<16x64xf32>) -> tensor<8x64xf32>
  return %0, %1, %2 : tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>
}
// V4-LABEL:    func.func @row_bands
// V4:            "fuel.slice"(%{{.*}}) {dim = 1 : i64, len = 48 : i64, start = 24 : i64} : (tensor<2x72x32xf32>) -> tensor<2x48x32xf32>

// -----

// Products whose constant weights hold more than MAX_PACKED_BYTES (1 GiB; here
// two f32 [16384, 16384], 2 GiB) keep every weight as it is: packed copies
// beside weights mapped from the model's files would double them
// (compile-at-scale.md). No product of the module is packed.
// CHECK-LABEL: func.func @big_weights
// CHECK-NOT:     b_panel
// CHECK-NOT:     fuel.contiguize
// CHECK:         return
// V4-LABEL:    func.func @big_weights
// V4-NOT:        b_panel
// V4:            return
func.func @big_weights(%x: tensor<?x16384xf32>) -> tensor<?x16384xf32> {
  %w1 = "fuel.const"() {dtype = "f32", name = "w1", shape = [16384, 16384]} : () -> tensor<16384x16384xf32>
  %w2 = "fuel.const"() {dtype = "f32", name = "w2", shape = [16384, 16384]} : () -> tensor<16384x16384xf32>
  %b = "fuel.const"() {dtype = "f32", name = "b", shape = [16384]} : () -> tensor<16384xf32>
  %0 = "fuel.fused_linear"(%x, %w1, %b) : (tensor<?x16384xf32>, tensor<16384x16384xf32>, tensor<16384xf32>) -> tensor<?x16384xf32>
  %1 = "fuel.fused_linear"(%0, %w2, %b) : (tensor<?x16384xf32>, tensor<16384x16384xf32>, tensor<16384xf32>) -> tensor<?x16384xf32>
  return %1 : tensor<?x16384xf32>
}
