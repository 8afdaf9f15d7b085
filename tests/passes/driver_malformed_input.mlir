// RUN: not python -m compiler.opt %s 2>&1 | filecheck %s
// RUN: echo 'func.func @f( {' | not python -m compiler.opt - 2>&1 | filecheck %s --check-prefix=STDIN
// RUN: not python -m compiler.opt %s.does-not-exist 2>&1 | filecheck %s --check-prefix=MISSING

// CHECK: driver_malformed_input.mlir:8:8: error: unregistered operation 'fuel.nope'
// CHECK-NOT: Traceback
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.nope"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
// STDIN: <stdin>:1:14: error: expected non-function type
// MISSING: fuelc opt: error: cannot read {{.*}}does-not-exist
