// REQUIRES: fused-dialect
// RUN: python -m compiler.opt %s --pass-pipeline='builtin.module(fuel-fuse)' | filecheck %s --check-prefix=FUSE
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s \
// RUN:   --pass-pipeline='builtin.module(fuel-fuse,fuel-decompose{table=primitives_f32})' | filecheck %s --check-prefix=DECOMPOSE
// RUN: python -m compiler.opt %s --pass-pipeline=default | filecheck %s --check-prefix=DEFAULT

// The passes on the ? emission of a BERT-style block with symbolic batch and
// seq (tests/passes/symbolic_block.py: encoder_block; the IR below is
// graph_to_module's output to the letter, tests/dialect/test_symbolic_emit.py).
// The symbols are named by fuel.symbols / fuel.dims, extents in params by
// fuel.extents (docs/dynamic-shapes.md, "Symbols in fuel IR").

// fuel-fuse (the cpu target) fuses what it fuses on the static block: the
// linears, the softmax with its scale and additive mask, the GELU epilogue
// (its weight viewed as [1, 32, 64]); the reshapes keep their extents.
// FUSE-LABEL: func.func @encoder_block
// FUSE-COUNT-3: "fuel.fused_linear"(%arg0, %{{.*}}, %{{.*}}) : (tensor<?x?x32xf32>, tensor<?x32x32xf32>, tensor<32xf32>) -> tensor<?x?x32xf32>
// FUSE: %[[SCORES:.*]] = "fuel.mat_mul"({{.*}}) : (tensor<?x4x?x8xf32>, tensor<?x4x8x?xf32>) -> tensor<?x4x?x?xf32>
// FUSE: %[[MASK:.*]] = "fuel.mul_scalar"({{.*}}) {value = -1.000000e+04 : f64} : (tensor<?x1x1x?xf32>) -> tensor<?x1x1x?xf32>
// FUSE: "fuel.softmax_last_dim"(%[[SCORES]], %[[MASK]]) {scale = {{.*}}} : (tensor<?x4x?x?xf32>, tensor<?x1x1x?xf32>) -> tensor<?x4x?x?xf32>
// FUSE: "fuel.reshape"(%{{.*}}) {fuel.extents = {shape = ["batch", "seq", ""]}, shape = [-1, -1, 32]} : (tensor<?x?x4x8xf32>) -> tensor<?x?x32xf32>
// FUSE: "fuel.layer_norm_last_dim"
// FUSE: "fuel.fused_linear"(%{{.*}}, %{{.*}}, %{{.*}}) {gelu = true} : (tensor<?x?x32xf32>, tensor<1x32x64xf32>, tensor<64xf32>) -> tensor<?x?x64xf32>
// FUSE-NOT: "fuel.gelu_erf"
// FUSE: "fuel.layer_norm_last_dim"

// fuel-decompose on a target without the fused kernels instantiates each
// recipe on the symbols and writes the extents it needs: FusedLinear's bias
// broadcast to new ? rows, the softmax's mask and row statistics broadcast
// from 1 to seq (before the named symbols, each declined).
// DECOMPOSE-LABEL: func.func @encoder_block
// DECOMPOSE: "fuel.broadcast_to"(%{{.*}}) {fuel.extents = {shape = ["batch", "seq", ""]}, shape = [-1, -1, 32]} : (tensor<1x1x32xf32>) -> tensor<?x?x32xf32>
// DECOMPOSE: "fuel.mul_scalar"({{.*}}) {value = 0.35355339059327379 : f64} : (tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
// DECOMPOSE: "fuel.broadcast_to"(%{{.*}}) {fuel.extents = {shape = ["", "", "seq", ""]}, shape = [-1, 4, -1, -1]} : (tensor<?x1x1x?xf32>) -> tensor<?x4x?x?xf32>
// DECOMPOSE: "fuel.max_dim"
// DECOMPOSE: "fuel.broadcast_to"(%{{.*}}) {fuel.extents = {shape = ["", "", "", "seq"]}, shape = [-1, 4, -1, -1]} : (tensor<?x4x?x1xf32>) -> tensor<?x4x?x?xf32>
// DECOMPOSE: "fuel.exp"
// DECOMPOSE: "fuel.mean_dim"
// DECOMPOSE: "fuel.broadcast_to"(%{{.*}}) {shape = [-1, -1, 32]} : (tensor<?x?x1xf32>) -> tensor<?x?x32xf32>
// DECOMPOSE: "fuel.mat_mul"(%{{.*}}, %{{.*}}) : (tensor<?x?x32xf32>, tensor<1x32x64xf32>) -> tensor<?x?x64xf32>
// DECOMPOSE: "fuel.gelu_erf"
// DECOMPOSE-NOT: "fuel.fused_linear"
// DECOMPOSE-NOT: "fuel.softmax_last_dim"
// DECOMPOSE-NOT: "fuel.layer_norm_last_dim"

// The default pipeline (fuse, decompose, runtime fusion, dtypes, prepacked
// weights, cse, dce): the static block's ops, ? where it has symbols.
// DEFAULT-LABEL: func.func @encoder_block
// DEFAULT-COUNT-3: "fuel.fused_linear"(%arg0,
// DEFAULT: "fuel.softmax_last_dim"(%{{.*}}, %{{.*}}) {scale = {{.*}}} : (tensor<?x4x?x?xf32>, tensor<?x1x1x?xf32>)
// DEFAULT: "fuel.fused_linear"({{.*}}gelu = true{{.*}} -> tensor<?x?x64xf32>
// DEFAULT: "fuel.fused_linear"({{.*}} -> tensor<?x?x32xf32>
// DEFAULT: "fuel.layer_norm_last_dim"
// DEFAULT-NOT: "fuel.runtime_fused"

module {
  func.func @encoder_block(%arg0: tensor<?x?x32xf32> {fuel.dims = ["batch", "seq", ""], fuel.name = "x"}, %arg1: tensor<?x?xf32> {fuel.dims = ["batch", "seq"], fuel.name = "mask"}) -> (tensor<?x?x32xf32> {fuel.dims = ["batch", "seq", ""]}) attributes {fuel.output_names = ["y"], fuel.symbols = {batch = array<i64: 1>, seq = array<i64: 1, 512>}} {
    %0 = "fuel.const"() {dtype = "f32", name = "q_w", shape = [32, 32]} : () -> tensor<32x32xf32>
    %1 = "fuel.broadcast_to"(%0) {fuel.extents = {shape = ["batch", "", ""]}, shape = [-1, 32, 32]} : (tensor<32x32xf32>) -> tensor<?x32x32xf32>
    %2 = "fuel.mat_mul"(%arg0, %1) : (tensor<?x?x32xf32>, tensor<?x32x32xf32>) -> tensor<?x?x32xf32>
    %3 = "fuel.const"() {dtype = "f32", name = "q_b", shape = [32]} : () -> tensor<32xf32>
    %4 = "fuel.broadcast_to"(%3) {fuel.extents = {shape = ["batch", "seq", ""]}, shape = [-1, -1, 32]} : (tensor<32xf32>) -> tensor<?x?x32xf32>
    %5 = "fuel.add"(%2, %4) : (tensor<?x?x32xf32>, tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
    %6 = "fuel.reshape"(%5) {fuel.extents = {shape = ["batch", "seq", "", ""]}, shape = [-1, -1, 4, 8]} : (tensor<?x?x32xf32>) -> tensor<?x?x4x8xf32>
    %7 = "fuel.permute"(%6) {perm = [0, 2, 1, 3]} : (tensor<?x?x4x8xf32>) -> tensor<?x4x?x8xf32>
    %8 = "fuel.const"() {dtype = "f32", name = "k_w", shape = [32, 32]} : () -> tensor<32x32xf32>
    %9 = "fuel.broadcast_to"(%8) {fuel.extents = {shape = ["batch", "", ""]}, shape = [-1, 32, 32]} : (tensor<32x32xf32>) -> tensor<?x32x32xf32>
    %10 = "fuel.mat_mul"(%arg0, %9) : (tensor<?x?x32xf32>, tensor<?x32x32xf32>) -> tensor<?x?x32xf32>
    %11 = "fuel.const"() {dtype = "f32", name = "k_b", shape = [32]} : () -> tensor<32xf32>
    %12 = "fuel.broadcast_to"(%11) {fuel.extents = {shape = ["batch", "seq", ""]}, shape = [-1, -1, 32]} : (tensor<32xf32>) -> tensor<?x?x32xf32>
    %13 = "fuel.add"(%10, %12) : (tensor<?x?x32xf32>, tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
    %14 = "fuel.reshape"(%13) {fuel.extents = {shape = ["batch", "seq", "", ""]}, shape = [-1, -1, 4, 8]} : (tensor<?x?x32xf32>) -> tensor<?x?x4x8xf32>
    %15 = "fuel.permute"(%14) {perm = [0, 2, 1, 3]} : (tensor<?x?x4x8xf32>) -> tensor<?x4x?x8xf32>
    %16 = "fuel.const"() {dtype = "f32", name = "v_w", shape = [32, 32]} : () -> tensor<32x32xf32>
    %17 = "fuel.broadcast_to"(%16) {fuel.extents = {shape = ["batch", "", ""]}, shape = [-1, 32, 32]} : (tensor<32x32xf32>) -> tensor<?x32x32xf32>
    %18 = "fuel.mat_mul"(%arg0, %17) : (tensor<?x?x32xf32>, tensor<?x32x32xf32>) -> tensor<?x?x32xf32>
    %19 = "fuel.const"() {dtype = "f32", name = "v_b", shape = [32]} : () -> tensor<32xf32>
    %20 = "fuel.broadcast_to"(%19) {fuel.extents = {shape = ["batch", "seq", ""]}, shape = [-1, -1, 32]} : (tensor<32xf32>) -> tensor<?x?x32xf32>
    %21 = "fuel.add"(%18, %20) : (tensor<?x?x32xf32>, tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
    %22 = "fuel.reshape"(%21) {fuel.extents = {shape = ["batch", "seq", "", ""]}, shape = [-1, -1, 4, 8]} : (tensor<?x?x32xf32>) -> tensor<?x?x4x8xf32>
    %23 = "fuel.permute"(%22) {perm = [0, 2, 1, 3]} : (tensor<?x?x4x8xf32>) -> tensor<?x4x?x8xf32>
    %24 = "fuel.transpose"(%15) : (tensor<?x4x?x8xf32>) -> tensor<?x4x8x?xf32>
    %25 = "fuel.mat_mul"(%7, %24) : (tensor<?x4x?x8xf32>, tensor<?x4x8x?xf32>) -> tensor<?x4x?x?xf32>
    %26 = "fuel.mul_scalar"(%25) {value = 0.35355339059327379 : f64} : (tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
    %27 = "fuel.unsqueeze"(%arg1) {dim = 1 : i64} : (tensor<?x?xf32>) -> tensor<?x1x?xf32>
    %28 = "fuel.unsqueeze"(%27) {dim = 1 : i64} : (tensor<?x1x?xf32>) -> tensor<?x1x1x?xf32>
    %29 = "fuel.mul_scalar"(%28) {value = -1.000000e+04 : f64} : (tensor<?x1x1x?xf32>) -> tensor<?x1x1x?xf32>
    %30 = "fuel.broadcast_to"(%29) {fuel.extents = {shape = ["", "", "seq", ""]}, shape = [-1, 4, -1, -1]} : (tensor<?x1x1x?xf32>) -> tensor<?x4x?x?xf32>
    %31 = "fuel.add"(%26, %30) : (tensor<?x4x?x?xf32>, tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
    %32 = "fuel.max_dim"(%31) {axis = 3 : i64} : (tensor<?x4x?x?xf32>) -> tensor<?x4x?xf32>
    %33 = "fuel.unsqueeze"(%32) {dim = 3 : i64} : (tensor<?x4x?xf32>) -> tensor<?x4x?x1xf32>
    %34 = "fuel.broadcast_to"(%33) {fuel.extents = {shape = ["", "", "", "seq"]}, shape = [-1, 4, -1, -1]} : (tensor<?x4x?x1xf32>) -> tensor<?x4x?x?xf32>
    %35 = "fuel.sub"(%31, %34) : (tensor<?x4x?x?xf32>, tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
    %36 = "fuel.exp"(%35) : (tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
    %37 = "fuel.sum_dim"(%36) {axis = 3 : i64} : (tensor<?x4x?x?xf32>) -> tensor<?x4x?xf32>
    %38 = "fuel.unsqueeze"(%37) {dim = 3 : i64} : (tensor<?x4x?xf32>) -> tensor<?x4x?x1xf32>
    %39 = "fuel.broadcast_to"(%38) {fuel.extents = {shape = ["", "", "", "seq"]}, shape = [-1, 4, -1, -1]} : (tensor<?x4x?x1xf32>) -> tensor<?x4x?x?xf32>
    %40 = "fuel.div"(%36, %39) : (tensor<?x4x?x?xf32>, tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
    %41 = "fuel.mat_mul"(%40, %23) : (tensor<?x4x?x?xf32>, tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32>
    %42 = "fuel.permute"(%41) {perm = [0, 2, 1, 3]} : (tensor<?x4x?x8xf32>) -> tensor<?x?x4x8xf32>
    %43 = "fuel.reshape"(%42) {fuel.extents = {shape = ["batch", "seq", ""]}, shape = [-1, -1, 32]} : (tensor<?x?x4x8xf32>) -> tensor<?x?x32xf32>
    %44 = "fuel.const"() {dtype = "f32", name = "o_w", shape = [32, 32]} : () -> tensor<32x32xf32>
    %45 = "fuel.broadcast_to"(%44) {fuel.extents = {shape = ["batch", "", ""]}, shape = [-1, 32, 32]} : (tensor<32x32xf32>) -> tensor<?x32x32xf32>
    %46 = "fuel.mat_mul"(%43, %45) : (tensor<?x?x32xf32>, tensor<?x32x32xf32>) -> tensor<?x?x32xf32>
    %47 = "fuel.const"() {dtype = "f32", name = "o_b", shape = [32]} : () -> tensor<32xf32>
    %48 = "fuel.broadcast_to"(%47) {fuel.extents = {shape = ["batch", "seq", ""]}, shape = [-1, -1, 32]} : (tensor<32xf32>) -> tensor<?x?x32xf32>
    %49 = "fuel.add"(%46, %48) : (tensor<?x?x32xf32>, tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
    %50 = "fuel.add"(%arg0, %49) : (tensor<?x?x32xf32>, tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
    %51 = "fuel.layer_norm_last_dim"(%50) {eps = 1.000000e-05 : f64} : (tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
    %52 = "fuel.const"() {dtype = "f32", name = "up_w", shape = [32, 64]} : () -> tensor<32x64xf32>
    %53 = "fuel.broadcast_to"(%52) {fuel.extents = {shape = ["batch", "", ""]}, shape = [-1, 32, 64]} : (tensor<32x64xf32>) -> tensor<?x32x64xf32>
    %54 = "fuel.mat_mul"(%51, %53) : (tensor<?x?x32xf32>, tensor<?x32x64xf32>) -> tensor<?x?x64xf32>
    %55 = "fuel.const"() {dtype = "f32", name = "up_b", shape = [64]} : () -> tensor<64xf32>
    %56 = "fuel.broadcast_to"(%55) {fuel.extents = {shape = ["batch", "seq", ""]}, shape = [-1, -1, 64]} : (tensor<64xf32>) -> tensor<?x?x64xf32>
    %57 = "fuel.add"(%54, %56) : (tensor<?x?x64xf32>, tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
    %58 = "fuel.gelu_erf"(%57) : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
    %59 = "fuel.const"() {dtype = "f32", name = "down_w", shape = [64, 32]} : () -> tensor<64x32xf32>
    %60 = "fuel.broadcast_to"(%59) {fuel.extents = {shape = ["batch", "", ""]}, shape = [-1, 64, 32]} : (tensor<64x32xf32>) -> tensor<?x64x32xf32>
    %61 = "fuel.mat_mul"(%58, %60) : (tensor<?x?x64xf32>, tensor<?x64x32xf32>) -> tensor<?x?x32xf32>
    %62 = "fuel.const"() {dtype = "f32", name = "down_b", shape = [32]} : () -> tensor<32xf32>
    %63 = "fuel.broadcast_to"(%62) {fuel.extents = {shape = ["batch", "seq", ""]}, shape = [-1, -1, 32]} : (tensor<32xf32>) -> tensor<?x?x32xf32>
    %64 = "fuel.add"(%61, %63) : (tensor<?x?x32xf32>, tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
    %65 = "fuel.add"(%51, %64) : (tensor<?x?x32xf32>, tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
    %66 = "fuel.layer_norm_last_dim"(%65) {eps = 1.000000e-05 : f64} : (tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
    return %66 : tensor<?x?x32xf32>
  }
}
