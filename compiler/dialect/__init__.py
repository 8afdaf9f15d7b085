"""The ``fuel`` MLIR dialect: IRDL generated from the op tables, the
DType <-> element-type mapping, param <-> attribute conversion, and the
emission of a graph as a ``func.func`` of ``fuel.*`` ops (``emit``)."""
from .attrs import op_params, params_to_attributes
from .definition import (DIALECT, DialectOp, collect_ops, default_ops, fuel_irdl_text,
                         is_fuel_loaded, load_fuel_dialect, lookup, parse_fuel_module)
from .types import dtype_to_mlir, mlir_to_dtype, signless, tensor_type

__all__ = ["DIALECT", "DialectOp", "collect_ops", "default_ops", "fuel_irdl_text",
           "is_fuel_loaded", "load_fuel_dialect", "lookup", "parse_fuel_module",
           "op_params", "params_to_attributes", "dtype_to_mlir", "mlir_to_dtype",
           "signless", "tensor_type"]
