// RUN: not python -m compiler.opt %s --no-reproducer \
// RUN:   --pass-pipeline='builtin.module(fuel-to-linalg{platform=cpu})' 2>&1 | filecheck %s

// The max pool kernel's left padding taps are the previous vector's lanes: at
// most half a vector (8 x the column stride). A wider one is refused by the
// lowering, naming the window and the way out (the registry's `serves` sends
// such a pool to the recipe, tests/fused/test_max_pool.py).
// CHECK: error: fuel-to-linalg: MaxPool2D kernel: window 1x19 (dilation 1x1, stride 1x1, left padding 9): needs a column stride of 1 or 2 and a left padding of at most 8; other pools decompose into the recipe
func.func @wide_left_padding(%x: tensor<1x2x3x30xf32>) -> tensor<1x2x3x30xf32> {
  %0 = "fuel.max_pool2d"(%x) {kernel = [1, 19], stride = [1, 1], dilation = [1, 1], padding = [0, 9, 0, 9]} : (tensor<1x2x3x30xf32>) -> tensor<1x2x3x30xf32>
  return %0 : tensor<1x2x3x30xf32>
}
