// The gpu-dialect stage of a large element-wise op (1024x512 elements, more
// than GRID_STRIDE_MIN): a grid-stride loop over a bounded grid of 1056
// blocks of 256 threads, each thread stepping by gridDim*blockDim.
// RUN: python -m compiler.codegen.cuda %s --emit gpu | filecheck %s
// RUN: python -m compiler.codegen.cuda %s --emit launches | filecheck %s --check-prefix=LAUNCH

// CHECK: gpu.module @kernel_grid_stride_0
// CHECK: gpu.func @kernel_grid_stride_0(%[[X:.*]]: memref<1024x512xf32>, %[[B:.*]]: memref<512xf32>, %[[Y:.*]]: memref<1024x512xf32>) kernel attributes {known_block_size = array<i32: 256, 1, 1>}
// CHECK-DAG: %[[STRIDE:.*]] = arith.constant 270336 : index
// CHECK-DAG: %[[N:.*]] = arith.constant 524288 : index
// CHECK: ^bb1(%[[I:.*]]: index):
// CHECK: arith.cmpi slt, %[[I]], %[[N]]
// CHECK: memref.load %[[X]]
// CHECK: memref.load %[[B]]
// CHECK: arith.addf
// CHECK: math.tanh
// CHECK: memref.store %{{.*}}, %[[Y]]
// CHECK: arith.addi %[[I]], %[[STRIDE]]
// CHECK: func.func @kernel(
// CHECK-NOT: scf.parallel
// CHECK: gpu.launch_func @kernel_grid_stride_0::@kernel_grid_stride_0 blocks in (%c1056, %c1, %c1) threads in (%c256, %c1, %c1)

// LAUNCH: launch kernel_grid_stride_0 grid=[1056, 1, 1] block=[256, 1, 1] shared=0 args=['param:0', 'param:1', 'param:2']
// LAUNCH-NOT: launch

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
module {
  func.func @kernel(%x: tensor<1024x512xf32>, %b: tensor<512xf32>) -> tensor<1024x512xf32> {
    %e = tensor.empty() : tensor<1024x512xf32>
    %y = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %b : tensor<1024x512xf32>, tensor<512xf32>) outs(%e : tensor<1024x512xf32>) {
    ^bb0(%in: f32, %bias: f32, %out: f32):
      %s = arith.addf %in, %bias : f32
      %t = math.tanh %s : f32
      linalg.yield %t : f32
    } -> tensor<1024x512xf32>
    return %y : tensor<1024x512xf32>
  }
}
