// RUN: fuelc opt %s --load-pass-plugin %S/fold_double_neg.py --split-input-file \
// RUN:   --pass-pipeline='builtin.module(fold-double-neg)' | filecheck %s
// The pass is a plugin the driver loads; without it the pipeline does not build.
// RUN: not fuelc opt %s --pass-pipeline='builtin.module(fold-double-neg)' 2>&1 \
// RUN:   | filecheck %s --check-prefix=NOPLUGIN
// NOPLUGIN: fuelc opt: error: unknown pass 'fold-double-neg'

// Two negations cancel; the function returns its argument.
// CHECK-LABEL: func.func @double
// CHECK-NOT:   fuel.neg
// CHECK:       return %arg0 : tensor<4xf32>
func.func @double(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "fuel.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// An odd chain keeps one negation.
// CHECK-LABEL: func.func @triple
// CHECK:       %[[N:.*]] = "fuel.neg"(%arg0)
// CHECK-NOT:   fuel.neg
// CHECK:       return %[[N]]
func.func @triple(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "fuel.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "fuel.neg"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

// An inner negation with another user stays for that user.
// CHECK-LABEL: func.func @shared
// CHECK:       %[[N:.*]] = "fuel.neg"(%arg0)
// CHECK-NEXT:  %[[S:.*]] = "fuel.add"(%[[N]], %arg0)
// CHECK-NEXT:  return %[[S]]
func.func @shared(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "fuel.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "fuel.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "fuel.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}
