"""Graph IR: the primitive op table, the graph arena and builder API, the numpy
reference interpreter and graph analyses."""
from .analysis import (GraphCycleError, consumers, dead_nodes, eliminate_dead_code,
                       reachable, roots_of, to_networkx, topological_order)
from .graph import Graph, Node, Tensor, concat, matmul, maximum, minimum, where
from .interpret import InterpretError, interpret
from .opdef import CATEGORIES, PARAM_KINDS, REQUIRED, VARIADIC, OpDef, ParamSpec, TensorType
from .ops import FLOAT_ONLY, OP_TABLE, broadcast_shapes, check_params
from .symbolic import ShapeSignatureError, Sym

__all__ = [
    "Graph", "Node", "Tensor", "where", "matmul", "concat", "maximum", "minimum",
    "OP_TABLE", "FLOAT_ONLY", "check_params", "broadcast_shapes",
    "OpDef", "ParamSpec", "TensorType", "VARIADIC", "PARAM_KINDS", "CATEGORIES", "REQUIRED",
    "interpret", "InterpretError", "Sym", "ShapeSignatureError",
    "topological_order", "reachable", "consumers", "dead_nodes", "eliminate_dead_code",
    "roots_of", "to_networkx", "GraphCycleError",
]
