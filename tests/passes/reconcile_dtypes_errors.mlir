// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file --verify-diagnostics \
// RUN:   --pass-pipeline='builtin.module(fuel-reconcile-dtypes{table=primitives_f32})'
// RUN: not python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file --no-reproducer \
// RUN:   --pass-pipeline='builtin.module(fuel-reconcile-dtypes{table=primitives_f32})' 2>&1 | filecheck %s

// Integers never promote: the coverage diagnostic names the op, the dtypes,
// the backends and what is bound for this op.
// CHECK: reconcile_dtypes_errors.mlir:10:8: error: no kernel for 'fuel.add' (%0) (AddElementwise) with dtypes [i32, i32, i32] on cpu, and no lossless promotion (bf16/f16 -> f32 -> f64) is served either: fuel.add: no kernel bound for Static(AddElementwise) with dtypes [i32, i32, i32] on backend cpu. Available backends: cpu; bound for this op: cpu:[f32, f32, f32]; cpu:[f64, f64, f64]
func.func @int_add(%a: tensor<4xi32>) -> tensor<4xi32> {
  %0 = "fuel.add"(%a, %a) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32> // expected-error {{no kernel for 'fuel.add'}}
  return %0 : tensor<4xi32>
}

// -----

// An op with no kernel at any float width cannot be promoted.
// CHECK: reconcile_dtypes_errors.mlir:19:8: error: no kernel for 'fuel.gelu' (%0) (GeluElementwise) with dtypes [f32, f32]
func.func @no_gelu(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.gelu"(%a) : (tensor<4xf32>) -> tensor<4xf32> // expected-error {{this op has no binding on any backend}}
  return %0 : tensor<4xf32>
}

// -----

// Casts themselves are never promoted (and f32 -> i32 is not lossless).
func.func @cast_kind(%a: tensor<4xf32>) -> tensor<4xi32> {
  // expected-error@+1 {{no kernel for 'fuel.cast'}}
  %0 = "fuel.cast"(%a) {dtype = "i32"} : (tensor<4xf32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

// On ? extents the error is the same (the pass reads only dtypes).
func.func @dynamic_int_add(%a: tensor<?x4xi32>) -> tensor<?x4xi32> {
  // expected-error@+1 {{no kernel for 'fuel.add' (%0) (AddElementwise) with dtypes [i32, i32, i32] on cpu, and no lossless promotion}}
  %0 = "fuel.add"(%a, %a) : (tensor<?x4xi32>, tensor<?x4xi32>) -> tensor<?x4xi32>
  return %0 : tensor<?x4xi32>
}
