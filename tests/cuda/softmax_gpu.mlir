// The gpu-dialect stage of a row softmax: both row reductions take the
// row-reduce strategy (one block per row, a strided pass per thread, then
// gpu.all_reduce); the fills and the final division stay on the generic
// tiled path; the host only allocates and launches.
// RUN: python -m compiler.codegen.cuda %s --emit gpu | filecheck %s
// RUN: python -m compiler.codegen.cuda %s --emit launches | filecheck %s --check-prefix=LAUNCH
// RUN: python -m compiler.codegen.cuda %s --emit ptx --target=cuda:sm_80 | filecheck %s --check-prefix=PTX

// CHECK: module attributes {gpu.container_module}
// CHECK: gpu.module @kernel_row_reduce_1
// CHECK: gpu.func @kernel_row_reduce_1(%{{.*}}: memref<64x128xf32>, %{{.*}}: memref<64xf32>, %{{.*}}: memref<64x128xf32>, %{{.*}}: memref<64xf32>) kernel attributes {known_block_size = array<i32: 128, 1, 1>}
// CHECK: gpu.block_id x
// CHECK: gpu.thread_id x
// CHECK: math.exp
// CHECK: memref.store
// CHECK: arith.addf
// CHECK: gpu.all_reduce add
// CHECK: gpu.module @kernel_row_reduce_0
// CHECK: gpu.all_reduce maximumf
// CHECK: func.func @kernel(%[[X:.*]]: memref<64x128xf32>, %[[Y:.*]]: memref<64x128xf32>)
// CHECK-NOT: scf.
// CHECK: gpu.launch_func @kernel_kernel::@kernel_kernel blocks in
// CHECK: gpu.launch_func @kernel_row_reduce_0::@kernel_row_reduce_0 blocks in (%c64, %c1, %c1) threads in (%c128, %c1, %c1) args(%[[X]] : memref<64x128xf32>, %{{.*}} : memref<64xf32>)
// CHECK: gpu.launch_func @kernel_row_reduce_1::@kernel_row_reduce_1
// CHECK: gpu.launch_func @kernel_kernel_1::@kernel_kernel {{.*}} args(%{{.*}} : memref<64x128xf32>, %{{.*}} : memref<64xf32>, %[[Y]] : memref<64x128xf32>)
// CHECK-NEXT: return
// CHECK: gpu.module @kernel_kernel
// CHECK: gpu.func @kernel_kernel({{.*}}) kernel

// LAUNCH: launch kernel_kernel grid=[8, 1, 1] block=[8, 1, 1] shared=0 args=['temp:{{[0-9]}}']
// LAUNCH: launch kernel_row_reduce_0 grid=[64, 1, 1] block=[128, 1, 1] shared=0 args=['param:0', 'temp:{{[0-9]}}']
// LAUNCH: launch kernel_row_reduce_1 grid=[64, 1, 1] block=[128, 1, 1] shared=0 args=['param:0', 'temp:{{[0-9]}}', 'temp:{{[0-9]}}', 'temp:{{[0-9]}}']
// LAUNCH: launch kernel_kernel_1 grid=[4, 8, 1] block=[32, 8, 1] shared=0 args=['temp:{{[0-9]}}', 'temp:{{[0-9]}}', 'param:1']

// PTX: .target sm_80
// PTX-DAG: .visible .entry kernel_row_reduce_0(
// PTX-DAG: .visible .entry kernel_row_reduce_1(
// PTX-DAG: shfl.sync.bfly.b32
// PTX-DAG: bar.sync
// PTX-NOT: .extern .func __nv_expf

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @kernel(%arg0: tensor<64x128xf32>) -> tensor<64x128xf32> {
    %ninf = arith.constant 0xFF800000 : f32
    %zero = arith.constant 0.0 : f32
    %e0 = tensor.empty() : tensor<64xf32>
    %m0 = linalg.fill ins(%ninf : f32) outs(%e0 : tensor<64xf32>) -> tensor<64xf32>
    %m = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<64x128xf32>) outs(%m0 : tensor<64xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %r = arith.maximumf %in, %acc : f32
      linalg.yield %r : f32
    } -> tensor<64xf32>
    %s0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<64xf32>) -> tensor<64xf32>
    %e1 = tensor.empty() : tensor<64x128xf32>
    %ex:2 = linalg.generic {indexing_maps = [#map, #map1, #map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0, %m : tensor<64x128xf32>, tensor<64xf32>) outs(%e1, %s0 : tensor<64x128xf32>, tensor<64xf32>) {
    ^bb0(%in: f32, %mx: f32, %o: f32, %acc: f32):
      %d = arith.subf %in, %mx : f32
      %x = math.exp %d : f32
      %a = arith.addf %acc, %x : f32
      linalg.yield %x, %a : f32, f32
    } -> (tensor<64x128xf32>, tensor<64xf32>)
    %e2 = tensor.empty() : tensor<64x128xf32>
    %y = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%ex#0, %ex#1 : tensor<64x128xf32>, tensor<64xf32>) outs(%e2 : tensor<64x128xf32>) {
    ^bb0(%in: f32, %s: f32, %o: f32):
      %q = arith.divf %in, %s : f32
      linalg.yield %q : f32
    } -> tensor<64x128xf32>
    return %y : tensor<64x128xf32>
  }
}
