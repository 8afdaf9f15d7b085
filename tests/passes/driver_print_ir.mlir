// RUN: python -m compiler.opt %s --print-ir-after-all \
// RUN:   --pass-pipeline='builtin.module(fuel-cse,fuel-dce)' 2>&1 >/dev/null | filecheck %s

// CHECK:      IR Dump After FuelCSE: fuel-cse
// CHECK:      "fuel.exp"
// CHECK:      IR Dump After FuelDCE: fuel-dce
// CHECK-NOT:  "fuel.exp"
// CHECK:      return
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %a : tensor<4xf32>
}
