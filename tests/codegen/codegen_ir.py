"""Hand-written linalg-on-tensors modules used by the codegen tests."""

ADD_DYN = """
func.func @add(%a: tensor<4x?xf32>, %b: tensor<4x?xf32>) -> tensor<4x?xf32> {
  %c1 = arith.constant 1 : index
  %d = tensor.dim %a, %c1 : tensor<4x?xf32>
  %e = tensor.empty(%d) : tensor<4x?xf32>
  %r = linalg.add ins(%a, %b : tensor<4x?xf32>, tensor<4x?xf32>) outs(%e : tensor<4x?xf32>) -> tensor<4x?xf32>
  return %r : tensor<4x?xf32>
}
"""

SOFTMAX = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @softmax(%x: tensor<4x128xf32>) -> tensor<4x128xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<4xf32>
  %m0 = linalg.fill ins(%ninf : f32) outs(%e0 : tensor<4xf32>) -> tensor<4xf32>
  %m = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x128xf32>) outs(%m0 : tensor<4xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %r = arith.maximumf %a, %acc : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  %e1 = tensor.empty() : tensor<4x128xf32>
  %ex = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %m : tensor<4x128xf32>, tensor<4xf32>) outs(%e1 : tensor<4x128xf32>) {
  ^bb0(%a: f32, %mm: f32, %o: f32):
    %d = arith.subf %a, %mm : f32
    %r = math.exp %d : f32
    linalg.yield %r : f32
  } -> tensor<4x128xf32>
  %s0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%ex : tensor<4x128xf32>) outs(%s0 : tensor<4xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %r = arith.addf %a, %acc : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  %y = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%ex, %s : tensor<4x128xf32>, tensor<4xf32>) outs(%e1 : tensor<4x128xf32>) {
  ^bb0(%a: f32, %ss: f32, %o: f32):
    %r = arith.divf %a, %ss : f32
    linalg.yield %r : f32
  } -> tensor<4x128xf32>
  return %y : tensor<4x128xf32>
}
"""

MATMUL_DYN = """
func.func @mm(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = tensor.dim %a, %c0 : tensor<?x?xf32>
  %n = tensor.dim %b, %c1 : tensor<?x?xf32>
  %z = arith.constant 0.0 : f32
  %e = tensor.empty(%m, %n) : tensor<?x?xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
  %r = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>) outs(%f : tensor<?x?xf32>) -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}
"""

# Returning an argument bufferizes to memref.copy between two strided memrefs,
# which lowers to a call of the runtime function memrefCopy.
IDENTITY_F64 = """
func.func @ident(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  return %x : tensor<3x5xf64>
}
"""

# math.tanh / math.erf have no LLVM instruction: they become libm calls.
TANH_ERF = """
func.func @tanh_erf(%x: tensor<7xf32>) -> tensor<7xf32> {
  %e = tensor.empty() : tensor<7xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(d0)->(d0)>, affine_map<(d0)->(d0)>],
                       iterator_types = ["parallel"]} ins(%x : tensor<7xf32>) outs(%e : tensor<7xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.tanh %a : f32
    %q = math.erf %r : f32
    linalg.yield %q : f32
  } -> tensor<7xf32>
  return %y : tensor<7xf32>
}
"""

SUM_TO_SCALAR = """
func.func @sum(%x: tensor<5xf32>) -> tensor<f32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %y = linalg.generic {indexing_maps = [affine_map<(d0)->(d0)>, affine_map<(d0)->()>],
                       iterator_types = ["reduction"]} ins(%x : tensor<5xf32>) outs(%f : tensor<f32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  return %y : tensor<f32>
}
"""

TWO_RESULTS_I32 = """
func.func @addsub(%a: tensor<6xi32>, %b: tensor<6xi32>) -> (tensor<6xi32>, tensor<6xi32>) {
  %e = tensor.empty() : tensor<6xi32>
  %s = linalg.add ins(%a, %b : tensor<6xi32>, tensor<6xi32>) outs(%e : tensor<6xi32>) -> tensor<6xi32>
  %e2 = tensor.empty() : tensor<6xi32>
  %d = linalg.sub ins(%a, %b : tensor<6xi32>, tensor<6xi32>) outs(%e2 : tensor<6xi32>) -> tensor<6xi32>
  return %s, %d : tensor<6xi32>, tensor<6xi32>
}
"""

ADD_F16 = """
func.func @add16(%a: tensor<8xf16>, %b: tensor<8xf16>) -> tensor<8xf16> {
  %e = tensor.empty() : tensor<8xf16>
  %r = linalg.add ins(%a, %b : tensor<8xf16>, tensor<8xf16>) outs(%e : tensor<8xf16>) -> tensor<8xf16>
  return %r : tensor<8xf16>
}
"""

BF16_ROUNDTRIP = """
func.func @bf(%a: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0)->(d0)>, affine_map<(d0)->(d0)>],
                       iterator_types = ["parallel"]} ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %t = arith.truncf %x : f32 to bf16
    %w = arith.extf %t : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}
"""
