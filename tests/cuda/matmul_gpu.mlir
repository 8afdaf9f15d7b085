// The gpu-dialect stage of a ragged batched matmul with a bias-initialised
// accumulator: the contraction takes the matmul-smem strategy (16x16 output
// tiles, 16-wide k tiles of A and B staged in dynamic shared memory between
// barriers, guarded loads and store); the bias broadcast stays generic.
// RUN: python -m compiler.codegen.cuda %s --emit gpu | filecheck %s
// RUN: python -m compiler.codegen.cuda %s --emit launches | filecheck %s --check-prefix=LAUNCH
// RUN: python -m compiler.codegen.cuda %s --emit ptx --target=cuda:sm_90 | filecheck %s --check-prefix=PTX

// CHECK: gpu.module @kernel_matmul_smem_0
// CHECK: gpu.func @kernel_matmul_smem_0(%[[A:.*]]: memref<3x70x33xf32>, %[[B:.*]]: memref<3x33x45xf32>, %[[C:.*]]: memref<3x70x45xf32>) kernel attributes {known_block_size = array<i32: 16, 16, 1>}
// CHECK: %[[SMEM:.*]] = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// CHECK: %[[AS:.*]] = memref.view %[[SMEM]][%{{.*}}][] : {{.*}} to memref<16x16xf32, #gpu.address_space<workgroup>>
// CHECK: %[[BS:.*]] = memref.view %[[SMEM]][%{{.*}}][] : {{.*}} to memref<16x16xf32, #gpu.address_space<workgroup>>
// CHECK: gpu.block_id z
// CHECK: memref.load %[[C]]
// CHECK: memref.load %[[A]]
// CHECK: memref.load %[[B]]
// CHECK: memref.store %{{.*}}, %[[AS]]
// CHECK: memref.store %{{.*}}, %[[BS]]
// CHECK-NEXT: gpu.barrier
// CHECK: memref.load %[[AS]]
// CHECK: memref.load %[[BS]]
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: gpu.barrier
// CHECK: memref.store %{{.*}}, %[[C]]
// CHECK: func.func @kernel(
// CHECK: gpu.launch_func @kernel_kernel::@kernel_kernel
// CHECK: gpu.launch_func @kernel_matmul_smem_0::@kernel_matmul_smem_0 blocks in (%c3, %c5, %c3) threads in (%c16, %c16, %c1) dynamic_shared_memory_size %{{.*}} args(

// LAUNCH: launch kernel_kernel grid=
// LAUNCH: launch kernel_matmul_smem_0 grid=[3, 5, 3] block=[16, 16, 1] shared=2048 args=['param:0', 'param:1', 'param:3']

// PTX: .target sm_90
// PTX: .extern .shared .align {{[0-9]+}} .b8 __dynamic_shmem__0[];
// PTX: .visible .entry kernel_matmul_smem_0(
// PTX: bar.sync

#bias = affine_map<(b, m, n) -> (n)>
#id3 = affine_map<(b, m, n) -> (b, m, n)>
module {
  func.func @kernel(%a: tensor<3x70x33xf32>, %b: tensor<3x33x45xf32>, %bias: tensor<45xf32>) -> tensor<3x70x45xf32> {
    %e = tensor.empty() : tensor<3x70x45xf32>
    %c = linalg.generic {indexing_maps = [#bias, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%bias : tensor<45xf32>) outs(%e : tensor<3x70x45xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<3x70x45xf32>
    %y = linalg.batch_matmul ins(%a, %b : tensor<3x70x33xf32>, tensor<3x33x45xf32>) outs(%c : tensor<3x70x45xf32>) -> tensor<3x70x45xf32>
    return %y : tensor<3x70x45xf32>
  }
}
