// REQUIRES: fused-dialect
// RUN: python -m compiler.opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-prepack-weights{target=cpu:x86-64-v3})' | filecheck %s
// RUN: python -m compiler.opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-prepack-weights{target=cpu:x86-64-v4})' | filecheck %s
// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fuel-prepack-weights{table=fused_f32})' | filecheck %s --check-prefix=NOKERNEL

// fuel-prepack-weights gives a 3x3 stride-1 Conv2D over a constant w that the
// cpu kernel computes as Winograd F(2x2, 3x3) (conv_winograd.takes) the param
// winograd and, as w, its transform U [16, Cout, Cin]: the rows of w as
// [Cout*Cin, 9] times the constant kron(G, G)^T [9, 16] (two MatMuls over
// halves of the rows, each folded by the plan), [Cout, Cin, 16] permuted to
// [16, Cout, Cin]. The bias, the skip and the clamp stay. A table whose
// Conv2D kernel is not the cpu one leaves it.

// CHECK-LABEL: func.func @winograd
// CHECK:         %[[W:.*]] = "fuel.const"() {dtype = "f32", name = "w"
// CHECK:         %[[B:.*]] = "fuel.const"() {dtype = "f32", name = "b"
// CHECK-NEXT:    %[[G:.*]] = "fuel.const"() {dtype = "f32", name = "fuelc.winograd_g", shape = [9, 16], value = dense<"0x0000803F0000003F0000003F000000000000003F0000803E0000803E
// CHECK-NEXT:    %[[R:.*]] = "fuel.reshape"(%[[W]]) {shape = [384, 9]} : (tensor<16x24x3x3xf32>) -> tensor<384x9xf32>
// CHECK-NEXT:    %[[S0:.*]] = "fuel.slice"(%[[R]]) {dim = 0 : i64, len = 192 : i64, start = 0 : i64}
// CHECK-NEXT:    %[[M0:.*]] = "fuel.mat_mul"(%[[S0]], %[[G]]) : (tensor<192x9xf32>, tensor<9x16xf32>) -> tensor<192x16xf32>
// CHECK-NEXT:    %[[S1:.*]] = "fuel.slice"(%[[R]]) {dim = 0 : i64, len = 192 : i64, start = 192 : i64}
// CHECK-NEXT:    %[[M1:.*]] = "fuel.mat_mul"(%[[S1]], %[[G]])
// CHECK-NEXT:    %[[C:.*]] = "fuel.concat"(%[[M0]], %[[M1]]) {dim = 0 : i64} : (tensor<192x16xf32>, tensor<192x16xf32>) -> tensor<384x16xf32>
// CHECK-NEXT:    %[[R2:.*]] = "fuel.reshape"(%[[C]]) {shape = [16, 24, 16]}
// CHECK-NEXT:    %[[P:.*]] = "fuel.permute"(%[[R2]]) {perm = [2, 0, 1]} : (tensor<16x24x16xf32>) -> tensor<16x16x24xf32>
// CHECK-NEXT:    %[[U:.*]] = "fuel.contiguize"(%[[P]]) : (tensor<16x16x24xf32>) -> tensor<16x16x24xf32>
// CHECK-NEXT:    "fuel.conv2d"(%arg0, %[[U]], %[[B]], %arg1) {clamp_min = 0.000000e+00 : f64, {{.*}}residual = true, stride = [1, 1], winograd = true} : (tensor<2x24x16x16xf32>, tensor<16x16x24xf32>, tensor<16xf32>, tensor<2x16x16x16xf32>) -> tensor<2x16x16x16xf32>
// NOKERNEL-LABEL: func.func @winograd
// NOKERNEL-NOT:  winograd = true
// NOKERNEL:      "fuel.conv2d"(%arg0, %0, %1, %arg1) {{.*}} : (tensor<2x24x16x16xf32>, tensor<16x24x3x3xf32>
func.func @winograd(%x: tensor<2x24x16x16xf32>, %s: tensor<2x16x16x16xf32>) -> tensor<2x16x16x16xf32> {
  %w = "fuel.const"() {dtype = "f32", name = "w", shape = [16, 24, 3, 3]} : () -> tensor<16x24x3x3xf32>
  %b = "fuel.const"() {dtype = "f32", name = "b", shape = [16]} : () -> tensor<16xf32>
  %0 = "fuel.conv2d"(%x, %w, %b, %s) {clamp_min = 0.0 : f64, dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1>, padding = [1, 1], residual = true, stride = [1, 1]} : (tensor<2x24x16x16xf32>, tensor<16x24x3x3xf32>, tensor<16xf32>, tensor<2x16x16x16xf32>) -> tensor<2x16x16x16xf32>
  return %0 : tensor<2x16x16x16xf32>
}

// -----

// Left as they are: w an argument (not a constant), stride 2, a 5x5 kernel,
// an f64 conv, a 4x4 image (4 tiles in a register tile of 16: more than
// MAX_WASTE tiles computed per tile), 8 output channels (MIN_CHANNELS).
// CHECK-LABEL: func.func @refused
// CHECK-NOT:     winograd
// CHECK-NOT:     fuel.mat_mul
// CHECK:         return
func.func @refused(%x: tensor<1x16x16x16xf32>, %w: tensor<16x16x3x3xf32>, %xd: tensor<1x16x16x16xf64>, %xs: tensor<1x16x4x4xf32>) -> (tensor<1x16x16x16xf32>, tensor<1x16x8x8xf32>, tensor<1x16x16x16xf32>, tensor<1x16x16x16xf64>, tensor<1x16x4x4xf32>, tensor<1x8x16x16xf32>) {
  %c = "fuel.const"() {dtype = "f32", name = "c", shape = [16, 16, 3, 3]} : () -> tensor<16x16x3x3xf32>
  %c5 = "fuel.const"() {dtype = "f32", name = "c5", shape = [16, 16, 5, 5]} : () -> tensor<16x16x5x5xf32>
  %cd = "fuel.const"() {dtype = "f64", name = "cd", shape = [16, 16, 3, 3]} : () -> tensor<16x16x3x3xf64>
  %0 = "fuel.conv2d"(%x, %w) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x16x16x16xf32>, tensor<16x16x3x3xf32>) -> tensor<1x16x16x16xf32>
  %1 = "fuel.conv2d"(%x, %c) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [2, 2]} : (tensor<1x16x16x16xf32>, tensor<16x16x3x3xf32>) -> tensor<1x16x8x8xf32>
  %2 = "fuel.conv2d"(%x, %c5) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [2, 2], stride = [1, 1]} : (tensor<1x16x16x16xf32>, tensor<16x16x5x5xf32>) -> tensor<1x16x16x16xf32>
  %3 = "fuel.conv2d"(%xd, %cd) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x16x16x16xf64>, tensor<16x16x3x3xf64>) -> tensor<1x16x16x16xf64>
  %4 = "fuel.conv2d"(%xs, %c) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x16x4x4xf32>, tensor<16x16x3x3xf32>) -> tensor<1x16x4x4xf32>
  %c8 = "fuel.const"() {dtype = "f32", name = "c8", shape = [8, 16, 3, 3]} : () -> tensor<8x16x3x3xf32>
  %5 = "fuel.conv2d"(%x, %c8) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>, padding = [1, 1], stride = [1, 1]} : (tensor<1x16x16x16xf32>, tensor<8x16x3x3xf32>) -> tensor<1x8x16x16xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<1x16x16x16xf32>, tensor<1x16x8x8xf32>, tensor<1x16x16x16xf32>, tensor<1x16x16x16xf64>, tensor<1x16x4x4xf32>, tensor<1x8x16x16xf32>
}
