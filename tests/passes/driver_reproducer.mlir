// RUN: not python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s --reproducer-dir=%t \
// RUN:   --pass-pipeline='builtin.module(fuel-reconcile-dtypes{table=primitives_f32})' 2>&1 | filecheck %s

// A failing pipeline writes its input IR and prints the command to rerun it,
// with every option made explicit.
// CHECK: pass pipeline failed; reproducer written to {{.*}}fuelc-reproducer-{{.*}}.mlir
// CHECK-NEXT: rerun with: python -m compiler.opt {{.*}}fuelc-reproducer-{{.*}}.mlir --pass-pipeline='builtin.module(fuel-reconcile-dtypes{table=primitives_f32})' --load-plugin=tests.passes.kernel_tables
// CHECK: driver_reproducer.mlir:10:8: error: no kernel for 'fuel.neg' (%0) (NegElementwise) with dtypes [i64, i64] on cpu
func.func @f(%a: tensor<4xi64>) -> tensor<4xi64> {
  %0 = "fuel.neg"(%a) : (tensor<4xi64>) -> tensor<4xi64>
  return %0 : tensor<4xi64>
}
