// RUN: python -m compiler.opt %s --split-input-file --pass-pipeline='builtin.module(fuel-to-linalg{platform=cpu})' | filecheck %s

// The cpu kernels of a symbolic image size (docs/dynamic-shapes.md, "Dynamic
// spatial size"): batch, height and width are ? and read by tensor.dim; the
// output's height and width are computed from them ((H + 2p - k) // s + 1);
// the conv's register tiles are vector FMAs carried through an scf.for over
// the input channels, the row's rest stored masked (a transfer_write not
// marked in bounds: the masked half of the 8-lane vectors the kernel writes
// without a target); channels, kernel and weights stay static. The output
// is a buffer the tiles write in place (marked for the entry's out-param to
// replace), made a tensor once at the end: no loop carries it as a tensor.
// CHECK-LABEL: func.func @conv_spatial
// CHECK-NOT:     fuel.
// CHECK:         tensor.dim
// CHECK:         arith.floordivsi
// CHECK:         %[[OUT:.*]] = memref.alloc({{.*}}) {fuelc.output_buffer} : memref<?x8x?x?xf32>
// CHECK-NOT:     -> (tensor<?x8x?x?xf32>)
// CHECK:         scf.for
// CHECK:         vector.fma
// CHECK:         vector.transfer_write {{.*}}] : vector<4xf32>, memref<?x8x?x?xf32>
// CHECK:         %[[T:.*]] = bufferization.to_tensor %[[OUT]] restrict
// CHECK:         return %[[T]] : tensor<?x8x?x?xf32>
func.func @conv_spatial(%x: tensor<?x4x?x?xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) -> tensor<?x8x?x?xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [2, 2], clamp_min = 0.0 : f64, image_at_run_time = true} : (tensor<?x4x?x?xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<?x8x?x?xf32>
  return %0 : tensor<?x8x?x?xf32>
}

// -----

// The max pool: rows by tensor.dim (a window row below the image is its last
// row), the input read where it is; whole 16-lane vectors whose reads lie in
// the row (marked in bounds), then whole 16-lane and 8-lane ones with masked
// reads, then a masked half (its write not marked in bounds either).
// CHECK-LABEL: func.func @max_pool_spatial
// CHECK-NOT:     fuel.
// CHECK-NOT:     linalg.fill
// CHECK:         tensor.dim
// CHECK:         arith.floordivsi
// CHECK:         arith.minsi
// CHECK:         vector.transfer_read %arg0{{.*}} {in_bounds = [true]} : tensor<?x3x?x?xf32>, vector<32xf32>
// CHECK:         arith.maximumf
// CHECK:         vector.transfer_read %arg0{{.*}}], %{{[^ ]*}} : tensor<?x3x?x?xf32>, vector<32xf32>
// CHECK:         vector.transfer_read %arg0{{.*}}], %{{[^ ]*}} : tensor<?x3x?x?xf32>, vector<16xf32>
// CHECK:         vector.transfer_write {{.*}}] : vector<8xf32>, tensor<?x3x?x?xf32>
// CHECK:         return {{.*}} : tensor<?x3x?x?xf32>
func.func @max_pool_spatial(%x: tensor<?x3x?x?xf32>) -> tensor<?x3x?x?xf32> {
  %0 = "fuel.max_pool2d"(%x) {kernel = [3, 3], stride = [2, 2], dilation = [1, 1], padding = [1, 1, 1, 1], image_at_run_time = true} : (tensor<?x3x?x?xf32>) -> tensor<?x3x?x?xf32>
  return %0 : tensor<?x3x?x?xf32>
}

// -----

// A depthwise conv: a small image (at most 256 flat output pixels per
// channel, tested at run time) is computed as flat pixel runs with a
// run-time pitch: each row deinterleaved into its phase planes (a 2-D
// tensor, a block of 4 channels x 4 phases), the rows' last piece under a
// mask made once, the taps unit-stride reads of a plane; a larger one takes
// the row tiles (a loop of 0 or 1 trips each).
// CHECK-LABEL: func.func @depthwise_spatial
// CHECK-NOT:     fuel.
// CHECK:         arith.cmpi ule
// CHECK:         vector.create_mask {{.*}} : vector<16xi1>
// CHECK:         vector.create_mask {{.*}} : vector<8xi1>
// CHECK:         vector.deinterleave
// CHECK:         vector.transfer_write {{.*}} : vector<8xf32>, tensor<16x?xf32>
// CHECK:         vector.transfer_read {{.*}} : tensor<16x?xf32>, vector<8xf32>
// CHECK:         vector.fma
// CHECK:         vector.transfer_write {{.*}}, %{{.*}} {in_bounds = [true]} : vector<8xf32>, memref<?x8x?x?xf32>
// CHECK:         vector.fma
// CHECK:         bufferization.to_tensor {{.*}} restrict
// CHECK:         return {{.*}} : tensor<?x8x?x?xf32>
func.func @depthwise_spatial(%x: tensor<?x8x?x?xf32>, %w: tensor<8x1x3x3xf32>, %b: tensor<8xf32>) -> tensor<?x8x?x?xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 8 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [1, 1], stride = [2, 2], clamp_min = 0.0 : f64, image_at_run_time = true} : (tensor<?x8x?x?xf32>, tensor<8x1x3x3xf32>, tensor<8xf32>) -> tensor<?x8x?x?xf32>
  return %0 : tensor<?x8x?x?xf32>
}

// -----

// A pointwise conv of a run-time image: a product over the flat H*W pixels
// (x collapsed to [N, C, H*W], the output expanded back), register tiles of
// vector FMAs carried through an scf.for over the input channels, no plane.
// CHECK-LABEL: func.func @pointwise_spatial
// CHECK-NOT:     fuel.
// CHECK:         tensor.collapse_shape {{.*}} {{\[}}[0], [1], [2, 3]]
// CHECK-NOT:     linalg.fill
// CHECK:         scf.for
// CHECK:         vector.fma
// CHECK:         tensor.expand_shape {{.*}} : tensor<?x8x?xf32> into tensor<?x8x?x?xf32>
// CHECK:         return {{.*}} : tensor<?x8x?x?xf32>
func.func @pointwise_spatial(%x: tensor<?x4x?x?xf32>, %w: tensor<8x4x1x1xf32>, %b: tensor<8xf32>) -> tensor<?x8x?x?xf32> {
  %0 = "fuel.conv2d"(%x, %w, %b) {dilation = [1, 1], groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = [0, 0], stride = [1, 1], clamp_min = 0.0 : f64, image_at_run_time = true} : (tensor<?x4x?x?xf32>, tensor<8x4x1x1xf32>, tensor<8xf32>) -> tensor<?x8x?x?xf32>
  return %0 : tensor<?x8x?x?xf32>
}
