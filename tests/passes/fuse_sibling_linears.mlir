// REQUIRES: fused-dialect
// RUN: python -m compiler.opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{target=cpu:x86-64-v3 runtime=false})' | filecheck %s
// RUN: python -m compiler.opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{target=cpu:x86-64-v3 runtime=false siblings=false})' | filecheck %s --check-prefix=OFF
// RUN: python -m compiler.opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{target=cpu:x86-64-v3 runtime=false},fuel-prepack-weights{target=cpu:x86-64-v3})' | filecheck %s --check-prefix=PACK
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse{table=fused_f32 runtime=false})' | filecheck %s --check-prefix=NOPANEL

// fuel-fuse merges the products of one a by constant weights (a Llama
// block's q/k/v, each of its own Reshape of the same x; then gate/up) into
// one product of the concatenated weights, each result a Slice of its
// columns (merge_sibling_linears), where the merged column count is a
// multiple of the packed panel (x86-64-v3: 16), so the merged weight packs.
// A table whose kernel reads no packed B leaves them.

// CHECK-LABEL: func.func @qkv
// CHECK:         %[[WQ:.*]] = "fuel.const"() {dtype = "f32", name = "wq"
// CHECK-NEXT:    %[[A:.*]] = "fuel.reshape"(%arg0) {shape = [8, 32]}
// CHECK-NEXT:    %[[WK:.*]] = "fuel.const"() {dtype = "f32", name = "wk"
// CHECK-NEXT:    %[[WV:.*]] = "fuel.const"() {dtype = "f32", name = "wv"
// CHECK-NEXT:    %[[W:.*]] = "fuel.concat"(%[[WQ]], %[[WK]], %[[WV]]) {dim = 1 : i64} : (tensor<32x64xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<32x96xf32>
// CHECK-NEXT:    %[[M:.*]] = "fuel.mat_mul"(%[[A]], %[[W]]) : (tensor<8x32xf32>, tensor<32x96xf32>) -> tensor<8x96xf32>
// CHECK-NEXT:    %[[Q:.*]] = "fuel.slice"(%[[M]]) {dim = 1 : i64, len = 64 : i64, start = 0 : i64}
// CHECK-NEXT:    %[[K:.*]] = "fuel.slice"(%[[M]]) {dim = 1 : i64, len = 16 : i64, start = 64 : i64}
// CHECK-NEXT:    %[[V:.*]] = "fuel.slice"(%[[M]]) {dim = 1 : i64, len = 16 : i64, start = 80 : i64}
// CHECK-NOT:     "fuel.mat_mul"
// CHECK:         return %[[Q]], %[[K]], %[[V]]
// OFF-LABEL:   func.func @qkv
// OFF-COUNT-3:   "fuel.mat_mul"
// OFF-NOT:       "fuel.concat"
// NOPANEL-LABEL: func.func @qkv
// NOPANEL-COUNT-3: "fuel.mat_mul"
// The merged weight is a Concat of constants: prepacked.
// PACK-LABEL:  func.func @qkv
// PACK:          %[[W:.*]] = "fuel.concat"
// PACK:          "fuel.fused_linear"(%{{.*}}, %{{.*}}, %{{.*}}) {b_panel = 16 : i64} : (tensor<8x32xf32>, tensor<6x32x16xf32>, tensor<96xf32>) -> tensor<8x96xf32>
// PACK-NOT:      "fuel.mat_mul"
func.func @qkv(%x: tensor<1x8x32xf32>) -> (tensor<8x64xf32>, tensor<8x16xf32>, tensor<8x16xf32>) {
  %wq = "fuel.const"() {dtype = "f32", name = "wq", shape = [32, 64]} : () -> tensor<32x64xf32>
  %a0 = "fuel.reshape"(%x) {shape = [8, 32]} : (tensor<1x8x32xf32>) -> tensor<8x32xf32>
  %q = "fuel.mat_mul"(%a0, %wq) : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
  %wk = "fuel.const"() {dtype = "f32", name = "wk", shape = [32, 16]} : () -> tensor<32x16xf32>
  %a1 = "fuel.reshape"(%x) {shape = [8, 32]} : (tensor<1x8x32xf32>) -> tensor<8x32xf32>
  %k = "fuel.mat_mul"(%a1, %wk) : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %wv = "fuel.const"() {dtype = "f32", name = "wv", shape = [32, 16]} : () -> tensor<32x16xf32>
  %a2 = "fuel.reshape"(%x) {shape = [8, 32]} : (tensor<1x8x32xf32>) -> tensor<8x32xf32>
  %v = "fuel.mat_mul"(%a2, %wv) : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  return %q, %k, %v : tensor<8x64xf32>, tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

// FusedLinear siblings (BERT's q/k/v): the biases are concatenated too; a
// transposed weight (a view of its constant) moves with it.
// CHECK-LABEL: func.func @linears
// PACK-LABEL:  func.func @linears
// CHECK:         %[[W:.*]] = "fuel.concat"(%{{.*}}, %{{.*}}) {dim = 1 : i64} : (tensor<32x24xf32>, tensor<32x40xf32>) -> tensor<32x64xf32>
// CHECK-NEXT:    %[[B:.*]] = "fuel.concat"(%{{.*}}, %{{.*}}) {dim = 0 : i64} : (tensor<24xf32>, tensor<40xf32>) -> tensor<64xf32>
// CHECK-NEXT:    %[[L:.*]] = "fuel.fused_linear"(%arg0, %[[W]], %[[B]]) : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
// CHECK-NEXT:    %[[S0:.*]] = "fuel.slice"(%[[L]]) {dim = 1 : i64, len = 24 : i64, start = 0 : i64}
// CHECK-NEXT:    %[[S1:.*]] = "fuel.slice"(%[[L]]) {dim = 1 : i64, len = 40 : i64, start = 24 : i64}
// CHECK-NEXT:    %[[S2:.*]] = "fuel.slice"(%[[S1]]) {dim = 1 : i64, len = 24 : i64, start = 0 : i64}
// CHECK-NEXT:    "fuel.add"(%[[S0]], %[[S2]])
func.func @linears(%x: tensor<8x32xf32>) -> tensor<8x24xf32> {
  %w0 = "fuel.const"() {dtype = "f32", name = "w0", shape = [32, 24]} : () -> tensor<32x24xf32>
  %b0 = "fuel.const"() {dtype = "f32", name = "b0", shape = [24]} : () -> tensor<24xf32>
  %0 = "fuel.fused_linear"(%x, %w0, %b0) : (tensor<8x32xf32>, tensor<32x24xf32>, tensor<24xf32>) -> tensor<8x24xf32>
  %w1 = "fuel.const"() {dtype = "f32", name = "w1", shape = [40, 32]} : () -> tensor<40x32xf32>
  %w1t = "fuel.transpose"(%w1) : (tensor<40x32xf32>) -> tensor<32x40xf32>
  %b1 = "fuel.const"() {dtype = "f32", name = "b1", shape = [40]} : () -> tensor<40xf32>
  %1 = "fuel.fused_linear"(%x, %w1t, %b1) : (tensor<8x32xf32>, tensor<32x40xf32>, tensor<40xf32>) -> tensor<8x40xf32>
  %2 = "fuel.slice"(%1) {dim = 1 : i64, start = 0 : i64, len = 24 : i64} : (tensor<8x40xf32>) -> tensor<8x24xf32>
  %3 = "fuel.add"(%0, %2) : (tensor<8x24xf32>, tensor<8x24xf32>) -> tensor<8x24xf32>
  return %3 : tensor<8x24xf32>
}

// -----

// Not merged: 40 + 20 columns are no whole number of panels; a weight that is
// no constant; another a; a FusedLinear with an epilogue; ? rows.
// CHECK-LABEL: func.func @not_merged
// CHECK-NOT:     "fuel.concat"
// CHECK-COUNT-9: "fuel.{{mat_mul|fused_linear}}"
// CHECK-NOT:     "fuel.concat"
func.func @not_merged(%x: tensor<8x32xf32>, %y: tensor<8x32xf32>, %wa: tensor<32x64xf32>,
                      %d: tensor<?x32xf32>) -> (tensor<8x40xf32>, tensor<8x20xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) {
  %w40 = "fuel.const"() {dtype = "f32", name = "w40", shape = [32, 40]} : () -> tensor<32x40xf32>
  %w20 = "fuel.const"() {dtype = "f32", name = "w20", shape = [32, 20]} : () -> tensor<32x20xf32>
  %0 = "fuel.mat_mul"(%x, %w40) : (tensor<8x32xf32>, tensor<32x40xf32>) -> tensor<8x40xf32>
  %1 = "fuel.mat_mul"(%x, %w20) : (tensor<8x32xf32>, tensor<32x20xf32>) -> tensor<8x20xf32>
  %w = "fuel.const"() {dtype = "f32", name = "w", shape = [32, 64]} : () -> tensor<32x64xf32>
  %2 = "fuel.mat_mul"(%y, %wa) : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
  %3 = "fuel.mat_mul"(%y, %w) : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
  %b = "fuel.const"() {dtype = "f32", name = "b", shape = [64]} : () -> tensor<64xf32>
  %4 = "fuel.fused_linear"(%x, %w, %b) {gelu = true} : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %5 = "fuel.fused_linear"(%y, %w, %b) : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %6 = "fuel.fused_linear"(%x, %w, %b) {gelu_tanh = true} : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %7 = "fuel.mat_mul"(%d, %w) : (tensor<?x32xf32>, tensor<32x64xf32>) -> tensor<?x64xf32>
  %8 = "fuel.mat_mul"(%d, %w) : (tensor<?x32xf32>, tensor<32x64xf32>) -> tensor<?x64xf32>
  return %0, %1, %2, %3, %4, %5, %6, %7, %8 : tensor<8x40xf32>, tensor<8x20xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>
}
