// RUN: not python -m compiler.opt %s --pass-pipeline='builtin.module(fuel-fusee)' 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: not python -m compiler.opt %s --pass-pipeline='builtin.module(no-such-mlir-pass)' 2>&1 | filecheck %s --check-prefix=NATIVE
// RUN: not python -m compiler.opt %s --pass-pipeline='builtin.module(fuel-fuse{bogus=1})' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not python -m compiler.opt %s --pass-pipeline='builtin.module(fuel-cse' 2>&1 | filecheck %s --check-prefix=SYNTAX
// RUN: not python -m compiler.opt %s --pass-pipeline='builtin.module(func.func(fuel-cse))' 2>&1 | filecheck %s --check-prefix=NESTED

// UNKNOWN: unknown pass 'fuel-fusee' in pipeline 'builtin.module(fuel-fusee)' (did you mean 'fuel-fuse'?). fuelc passes: fuel-cse, fuel-dce, fuel-decompose, fuel-fuse, fuel-fuse-runtime, fuel-prepack-weights, fuel-reconcile-dtypes, fuel-split-gemv, fuel-to-linalg; any MLIR pass (cse, canonicalize, symbol-dce, ...) is accepted too.
// NATIVE: unknown pass 'no-such-mlir-pass'
// NATIVE: MLIR says: {{.*}}'no-such-mlir-pass' does not refer to a registered pass
// OPTION: pass 'fuel-fuse' has no option 'bogus'; its options: target, table, backend, remarks, epilogues, runtime
// SYNTAX: unbalanced '(' at column 15 in pass pipeline 'builtin.module(fuel-cse'
// NESTED: pass 'fuel-cse' runs on the whole module; write it at the top level
func.func @f() {
  return
}
