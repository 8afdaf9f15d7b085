"""fuelc: an ahead-of-time compiler for ML graphs on MLIR and LLVM.

    from compiler import Graph, compile
    g = Graph()
    x = g.input("x", (8, 64), "f32")
    g.output((x @ g.constant(w, name="w")).gelu().softmax(-1), name="y")
    m = compile(g, target="cpu")
    y = m(x=np_x)      # one output -> one array; several -> dict by name

MLIR is imported lazily (by ``compile`` and the passes), so building graphs
and interpreting them is cheap.
"""
from .errors import CompilerError, GraphBuildError, UnsupportedOpError
from .graph import (Graph, Node, ShapeSignatureError, Sym, Tensor, concat, interpret, matmul,
                    maximum, minimum, where)
from .registry.builders import (awq_matmul, causal_conv1d, conv2d, conv_transpose2d,
                                cross_entropy, flash_attn, layer_norm, linear, nf4_matmul,
                                paged_attn, qmatmul, rms_norm, rope, selective_scan,
                                softmax_last_dim, ssd_chunk_scan)

# Fused ops as Tensor methods: ``x.rms_norm(eps=...)``, ``x.layer_norm(w, b)``, ...
Tensor.rms_norm = rms_norm
Tensor.layer_norm = layer_norm
Tensor.softmax_last_dim = softmax_last_dim
Tensor.rope = rope
Tensor.linear = linear


def compile(graph, target: str = "cpu", **kwargs):
    """Compile ``graph`` for ``target``; see ``compiler.driver.compile``."""
    from .driver import compile as _compile
    return _compile(graph, target, **kwargs)


__all__ = ["Graph", "Node", "Tensor", "Sym", "ShapeSignatureError", "compile", "where", "matmul", "concat", "maximum",
           "minimum", "interpret", "CompilerError", "GraphBuildError", "UnsupportedOpError",
           "linear", "rms_norm", "layer_norm", "softmax_last_dim", "rope", "flash_attn",
           "paged_attn", "conv2d", "conv_transpose2d", "qmatmul", "nf4_matmul", "awq_matmul",
           "cross_entropy", "causal_conv1d", "selective_scan", "ssd_chunk_scan"]
