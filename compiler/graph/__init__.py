"""Graph IR: the primitive op table, the graph arena and builder API, the numpy
reference interpreter and graph analyses."""
from .opdef import CATEGORIES, PARAM_KINDS, REQUIRED, VARIADIC, OpDef, ParamSpec, TensorType
from .ops import OP_TABLE, check_params

__all__ = ["CATEGORIES", "PARAM_KINDS", "REQUIRED", "VARIADIC", "OpDef", "ParamSpec",
           "TensorType", "OP_TABLE", "check_params"]
