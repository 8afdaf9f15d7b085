// RUN: not python -m compiler.opt %s --verify-diagnostics 2>&1 | filecheck %s

// A wrong expectation fails the run and names both sides.
// CHECK-DAG: expects exactly 2 operands, but got 1
// CHECK-DAG: (unexpected error)
// CHECK-DAG: driver_verify_diagnostics_mismatch.mlir:8: expected error "this text is never emitted" at line 9 was not produced
func.func @wrong_arity(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{this text is never emitted}}
  %0 = "fuel.add"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
