// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --split-input-file --verify-diagnostics \
// RUN:   --pass-pipeline='builtin.module(fuel-reconcile-dtypes{table=primitives_f32})'

// Verifier diagnostics from the parser, matched by line offset.
func.func @wrong_arity(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{expects exactly 2 operands, but got 1}}
  %0 = "fuel.add"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A pass diagnostic on the same line, and a chunk that succeeds after it.
func.func @unservable(%a: tensor<4xi32>) -> tensor<4xi32> {
  %0 = "fuel.add"(%a, %a) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32> // expected-error {{no kernel for 'fuel.add'}}
  return %0 : tensor<4xi32>
}

// -----

func.func @fine(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
