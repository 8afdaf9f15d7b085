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
from .graph import Graph, Node, Tensor, concat, interpret, matmul, maximum, minimum, where


def compile(graph, target: str = "cpu", **kwargs):
    """Compile ``graph`` for ``target``; see ``compiler.compile.compile``."""
    from .compile import compile as _compile
    return _compile(graph, target, **kwargs)


__all__ = ["Graph", "Node", "Tensor", "compile", "where", "matmul", "concat", "maximum",
           "minimum", "interpret", "CompilerError", "GraphBuildError", "UnsupportedOpError"]
