// RUN: python -m compiler.opt --load-plugin=tests.passes.kernel_tables %s \
// RUN:   --pass-pipeline='builtin.module(fuel-reconcile-dtypes{table=primitives_f32})' | filecheck %s --check-prefix=RECONCILE
// RUN: python -m compiler.opt %s --pass-pipeline='builtin.module(fuel-cse,fuel-dce)' | filecheck %s --check-prefix=CSE

// fuel-reconcile-dtypes and fuel-cse/fuel-dce on the ? emission of an f16
// [batch, 8] flattened to [8*batch] (tests/passes/symbolic_block.py: flat_f16;
// the IR below is graph_to_module's output, tests/dialect/test_symbolic_emit.py).

// The f16 ops a target without f16 kernels runs in f32: casts of ? types.
// RECONCILE-LABEL: func.func @flat_f16
// RECONCILE: %[[R:.*]] = "fuel.reshape"(%arg0) {fuel.extents = {shape = ["8*batch"]}, shape = [-1]} : (tensor<?x8xf16>) -> tensor<?xf16>
// RECONCILE: %[[C:.*]] = "fuel.cast"(%[[R]]) {dtype = "f32"} : (tensor<?xf16>) -> tensor<?xf32>
// RECONCILE: "fuel.exp"(%[[C]]) : (tensor<?xf32>) -> tensor<?xf32>
// RECONCILE: "fuel.add"({{.*}}) : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
// RECONCILE: "fuel.cast"({{.*}}) {dtype = "f16"} : (tensor<?xf32>) -> tensor<?xf16>

// The two reshapes are one computation (the same extents).
// CSE-LABEL: func.func @flat_f16
// CSE: %[[R:.*]] = "fuel.reshape"(%arg0) {fuel.extents = {shape = ["8*batch"]}, shape = [-1]}
// CSE-NOT: "fuel.reshape"
// CSE: %[[E:.*]] = "fuel.exp"(%[[R]])
// CSE: "fuel.add"(%[[E]], %[[R]])

module {
  func.func @flat_f16(%arg0: tensor<?x8xf16> {fuel.dims = ["batch", ""], fuel.name = "x"}) -> (tensor<?xf16> {fuel.dims = ["8*batch"]}) attributes {fuel.output_names = ["y"], fuel.symbols = {batch = array<i64: 1>}} {
    %0 = "fuel.reshape"(%arg0) {fuel.extents = {shape = ["8*batch"]}, shape = [-1]} : (tensor<?x8xf16>) -> tensor<?xf16>
    %1 = "fuel.exp"(%0) : (tensor<?xf16>) -> tensor<?xf16>
    %2 = "fuel.reshape"(%arg0) {fuel.extents = {shape = ["8*batch"]}, shape = [-1]} : (tensor<?x8xf16>) -> tensor<?xf16>
    %3 = "fuel.add"(%1, %2) : (tensor<?xf16>, tensor<?xf16>) -> tensor<?xf16>
    return %3 : tensor<?xf16>
  }
}
