// RUN: python -m compiler.opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(fuel-cse)'

// The type verifier on ? IR that names its symbols (fuel.symbols, fuel.dims,
// fuel.extents; docs/dynamic-shapes.md, "Symbols in fuel IR"): each op's rule
// runs on the named extents, as the graph's shape rules do, and what the
// symbols contradict is an error naming the op and its operands.

func.func @wrong_static_extent(%x: tensor<?x?x32xf32> {fuel.dims = ["batch", "seq", ""]}) -> tensor<?x33xf32> attributes {fuel.symbols = {batch = array<i64: 1>, seq = array<i64: 1, 64>}} {
  // expected-error@+1 {{'fuel.reshape' op operands (f32[?,?,32]) break the op's rule: Reshape(f32[batch,seq,32]): target [batch*seq, 33] must be non-negative with the same element count (32*batch*seq)}}
  %0 = "fuel.reshape"(%x) {fuel.extents = {shape = ["batch*seq", ""]}, shape = [-1, 33]} : (tensor<?x?x32xf32>) -> tensor<?x33xf32>
  return %0 : tensor<?x33xf32>
}

// -----

func.func @two_symbols(%x: tensor<?x?xf32> {fuel.dims = ["batch", "seq"]}, %y: tensor<?x?xf32> {fuel.dims = ["seq", "batch"]}) -> tensor<?x?xf32> attributes {fuel.symbols = {batch = array<i64: 1>, seq = array<i64: 1>}} {
  // expected-error@+1 {{'fuel.add' op needs batch == seq, which the symbols do not give (operands %arg0: [batch,seq], %arg1: [seq,batch]); the extents differ, or declare the equality in the function's fuel.equalities}}
  %0 = "fuel.add"(%x, %y) : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}

// -----

// An equality the graph recorded (graph.equalities) is declared: no error.
func.func @declared_equality(%x: tensor<?x?xf32> {fuel.dims = ["batch", "seq"]}, %y: tensor<?x?xf32> {fuel.dims = ["seq", "batch"]}) -> tensor<?x?xf32> attributes {fuel.symbols = {batch = array<i64: 1>, seq = array<i64: 1>}, fuel.equalities = [["seq", "batch"]]} {
  %0 = "fuel.add"(%x, %y) : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}

// -----

func.func @symbol_vs_static_result(%x: tensor<?x?x32xf32> {fuel.dims = ["batch", "seq", ""]}) -> tensor<4x32xf32> attributes {fuel.symbols = {batch = array<i64: 1>, seq = array<i64: 1, 64>}} {
  // expected-error@+1 {{'fuel.reshape' op result #0 axis 0 is 4 but the rule gives batch*seq (operands %arg0: [batch,seq,32])}}
  %0 = "fuel.reshape"(%x) {fuel.extents = {shape = ["batch*seq", ""]}, shape = [-1, 32]} : (tensor<?x?x32xf32>) -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

func.func @undeclared_symbol(%x: tensor<?x?x32xf32> {fuel.dims = ["batch", "seq", ""]}) -> tensor<?x32xf32> attributes {fuel.symbols = {batch = array<i64: 1>, seq = array<i64: 1, 64>}} {
  // expected-error@+1 {{extent 'batch*heads' names the symbol 'heads', which the function's fuel.symbols does not declare (batch, seq)}}
  %0 = "fuel.reshape"(%x) {fuel.extents = {shape = ["batch*heads", ""]}, shape = [-1, 32]} : (tensor<?x?x32xf32>) -> tensor<?x32xf32>
  return %0 : tensor<?x32xf32>
}

// -----

func.func @not_an_extent(%x: tensor<?x?x32xf32> {fuel.dims = ["batch", "seq", ""]}) -> tensor<?x32xf32> attributes {fuel.symbols = {batch = array<i64: 1>, seq = array<i64: 1, 64>}} {
  // expected-error@+1 {{extent 'batch*seq/2': 'batch * seq / 2' is not an int, a symbol, +, -, * or // by a positive int}}
  %0 = "fuel.reshape"(%x) {fuel.extents = {shape = ["batch*seq/2", ""]}, shape = [-1, 32]} : (tensor<?x?x32xf32>) -> tensor<?x32xf32>
  return %0 : tensor<?x32xf32>
}

// -----

func.func @extents_of_no_param(%x: tensor<?x?x32xf32> {fuel.dims = ["batch", "seq", ""]}) -> tensor<?x32xf32> attributes {fuel.symbols = {batch = array<i64: 1>, seq = array<i64: 1, 64>}} {
  // expected-error@+1 {{fuel.reshape: fuel.extents names 'dims', which is not a param}}
  %0 = "fuel.reshape"(%x) {fuel.extents = {dims = ["batch*seq", ""]}, shape = [-1, 32]} : (tensor<?x?x32xf32>) -> tensor<?x32xf32>
  return %0 : tensor<?x32xf32>
}

// -----

// expected-error@+1 {{'func.func' op argument #0 of type tensor<?x?x32xf32> has fuel.dims ['batch', '', '']: one entry per axis, an extent on each ? axis and "" on each static one}}
func.func @unnamed_axis(%x: tensor<?x?x32xf32> {fuel.dims = ["batch", "", ""]}) -> tensor<?x?x32xf32> attributes {fuel.symbols = {batch = array<i64: 1>}} {
  return %x : tensor<?x?x32xf32>
}

// -----

// expected-error@+1 {{'func.func' op result #0 axis 0: fuel.dims says 2*batch*seq but the returned value %0 has the extent batch*seq}}
func.func @result_dims(%x: tensor<?x?x32xf32> {fuel.dims = ["batch", "seq", ""]}) -> (tensor<?x32xf32> {fuel.dims = ["2*batch*seq", ""]}) attributes {fuel.symbols = {batch = array<i64: 1>, seq = array<i64: 1, 64>}} {
  %0 = "fuel.reshape"(%x) {fuel.extents = {shape = ["batch*seq", ""]}, shape = [-1, 32]} : (tensor<?x?x32xf32>) -> tensor<?x32xf32>
  return %0 : tensor<?x32xf32>
}

// -----

// Extents through a reshape and back, and a reshape swapping the symbols:
// well typed.
func.func @well_typed(%x: tensor<?x?x32xf32> {fuel.dims = ["batch", "seq", ""]}) -> (tensor<?x?x4x8xf32> {fuel.dims = ["seq", "batch", "", ""]}) attributes {fuel.symbols = {batch = array<i64: 1>, seq = array<i64: 1, 64>}} {
  %0 = "fuel.reshape"(%x) {fuel.extents = {shape = ["batch*seq", ""]}, shape = [-1, 32]} : (tensor<?x?x32xf32>) -> tensor<?x32xf32>
  %1 = "fuel.reshape"(%0) {fuel.extents = {shape = ["batch", "seq", "", ""]}, shape = [-1, -1, 4, 8]} : (tensor<?x32xf32>) -> tensor<?x?x4x8xf32>
  %2 = "fuel.reshape"(%1) {fuel.extents = {shape = ["seq", "batch", "", ""]}, shape = [-1, -1, 4, 8]} : (tensor<?x?x4x8xf32>) -> tensor<?x?x4x8xf32>
  return %2 : tensor<?x?x4x8xf32>
}
