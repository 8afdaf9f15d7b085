// RUN: python -m compiler.opt %s --split-input-file --pass-pipeline='builtin.module(fuel-to-linalg{platform=cpu})' | filecheck %s

// The max pool's cpu kernel (docs/architecture.md, "Max pooling") reads the
// input where it is, without a padded copy: no plane filled with -inf; the
// rows' maximum of one 32-column read per window row (the row above the
// image is the image's first row), deinterleaved into its two stride phases,
// and the left padding's tap the odd phase shifted right by one lane behind
// the previous piece's (a -inf vector before the first). A 16x16 output is one
// piece per row, every read in bounds.
// CHECK-LABEL: func.func @max_pool_stem
// CHECK-NOT:     linalg.fill
// CHECK:         %[[NEG:.*]] = arith.constant 0xFF800000 : f32
// CHECK:         scf.for
// CHECK:         scf.for
// CHECK:         scf.for
// CHECK:         arith.maxsi
// CHECK:         %[[PREV:.*]] = vector.broadcast %[[NEG]] : f32 to vector<16xf32>
// CHECK:         vector.transfer_read %arg0{{.*}} {in_bounds = [true]} : tensor<?x32x32x32xf32>, vector<32xf32>
// CHECK:         vector.transfer_read %arg0{{.*}} {in_bounds = [true]} : tensor<?x32x32x32xf32>, vector<32xf32>
// CHECK:         vector.transfer_read %arg0{{.*}} {in_bounds = [true]} : tensor<?x32x32x32xf32>, vector<32xf32>
// CHECK:         %[[EVEN:.*]], %[[ODD:.*]] = vector.deinterleave {{.*}} : vector<32xf32> -> vector<16xf32>
// CHECK:         %[[LEFT:.*]] = vector.shuffle %[[PREV]], %[[ODD]] [15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30]
// CHECK:         %[[M:.*]] = arith.maximumf %[[EVEN]], %[[ODD]] : vector<16xf32>
// CHECK:         arith.maximumf %[[M]], %[[LEFT]] : vector<16xf32>
// CHECK:         vector.transfer_write {{.*}} {in_bounds = [true]} : vector<16xf32>, tensor<?x32x16x16xf32>
// CHECK-NOT:     vector.transfer_read
// CHECK:         return
func.func @max_pool_stem(%x: tensor<?x32x32x32xf32>) -> tensor<?x32x16x16xf32> {
  %0 = "fuel.max_pool2d"(%x) {kernel = [3, 3], stride = [2, 2], dilation = [1, 1], padding = [1, 1, 1, 1]} : (tensor<?x32x32x32xf32>) -> tensor<?x32x16x16xf32>
  return %0 : tensor<?x32x16x16xf32>
}

// -----

// Two output pieces per row (21 columns: 16, then 5): the second's left tap
// takes the first piece's last odd lane; its reads (10 columns from column
// 32) pass the row's end (41 columns) and are masked with -inf.
// CHECK-LABEL: func.func @max_pool_two_pieces
// CHECK:         %[[EVEN:.*]], %[[ODD:.*]] = vector.deinterleave {{.*}} : vector<32xf32> -> vector<16xf32>
// CHECK:         vector.transfer_write {{.*}} {in_bounds = [true]} : vector<16xf32>
// CHECK:         vector.transfer_read %arg0{{.*}}], %{{[^ ]*}} : tensor<1x4x9x41xf32>, vector<10xf32>
// CHECK:         vector.deinterleave {{.*}} : vector<10xf32> -> vector<5xf32>
// CHECK:         vector.shuffle %[[ODD]], {{.*}} [15, 16, 17, 18, 19] : vector<16xf32>, vector<5xf32>
// CHECK:         vector.transfer_write {{.*}} : vector<5xf32>
func.func @max_pool_two_pieces(%x: tensor<1x4x9x41xf32>) -> tensor<1x4x5x21xf32> {
  %0 = "fuel.max_pool2d"(%x) {kernel = [3, 3], stride = [2, 2], dilation = [1, 1], padding = [1, 1, 1, 1]} : (tensor<1x4x9x41xf32>) -> tensor<1x4x5x21xf32>
  return %0 : tensor<1x4x5x21xf32>
}
