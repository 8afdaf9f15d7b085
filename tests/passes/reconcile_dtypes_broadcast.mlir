// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --verify-diagnostics \
// RUN:   --pass-pipeline='builtin.module(fuel-reconcile-dtypes{table=broadcast_only_add})'

// A broadcast-baked sibling alone does not serve a dense op (backend_supports).
func.func @broadcast_only(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> // expected-error {{no kernel for 'fuel.add' (%0) (AddElementwise) with dtypes [f32, f32, f32] on cpu}}
  return %0 : tensor<4xf32>
}
