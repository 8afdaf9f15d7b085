"""The ``fuel`` MLIR dialect: IRDL generated from the op tables, the
DType <-> element-type mapping, param <-> attribute conversion, and the
emission of a graph as a ``func.func`` of ``fuel.*`` ops (``emit``)."""
from .attrs import op_params, params_to_attributes
from .definition import (DIALECT, DialectOp, collect_ops, default_ops, fuel_irdl_text,
                         is_fuel_loaded, load_fuel_dialect, lookup, parse_fuel_module)
from .types import dtype_to_mlir, mlir_to_dtype, signless, tensor_type


def make_context():
    """A new ``ir.Context`` with the fuel dialect loaded (once, guarded:
    loading IRDL twice into one context crashes the process)."""
    from compiler.mlir import ir
    ctx = ir.Context()
    load_fuel_dialect(ctx)
    return ctx


__all__ = ["DIALECT", "DialectOp", "collect_ops", "default_ops", "fuel_irdl_text",
           "is_fuel_loaded", "load_fuel_dialect", "lookup", "parse_fuel_module",
           "op_params", "params_to_attributes", "dtype_to_mlir", "mlir_to_dtype",
           "signless", "tensor_type", "make_context"]
