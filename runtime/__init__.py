"""fuelc runtime: the ABI the compiler targets.

Imports with only numpy and ml_dtypes (the numpy bf16/fp8 types, loaded on
first use) installed; never imports ``compiler`` or MLIR, and does not import
llvmlite at top level. The default process-wide binding
table (``global_table()``) is built lazily on first use and holds the numpy
reference kernels (``runtime.numpy_kernels``). ``runtime.load(path)`` loads
a module exported with ``CompiledModule.save`` (``runtime.artifact``).
"""
from .dtype import DType
from .opkind import OpKind
from .errors import (
    BindingTableError, FuelError, IndexOutOfRangeError, KernelError, LayoutError, NoBackendForOp,
    OpParamsError, PlanError, StorageError, UnknownDTypeError, UnknownOpKindError,
)
from .keys import BackendId, BindingKey, FusedOpId
from .layout import Layout
from .storage import OutputView, Storage
from .params import (
    NO_PARAMS, PARAMS_FOR_KIND, MatmulM, NoParams, OpParams, PadMode, QuantType, Reduction,
    check_params_for, params_type_for,
)
from .precision import PrecisionGuarantee
from .cost import CostEstimate, CostFn, composite_ns, default_cost_for_op_kind, unknown_cost
from .binding import (
    Ambiguous, BindingEntry, KernelBindingTable, KernelCaps, KernelRef, NotBound,
    RuntimeFusedLookup, Unique, global_table, reset_global_table, update_global_table,
)
from .executor import (
    ConstStep, ContiguizeStep, Executor, KernelStep, Plan, ReshapeStep, ValueSpec, ViewStep,
)
from .artifact import (
    ArtifactCodeError, ArtifactCpuError, ArtifactError, ArtifactFormatError,
    ArtifactIntegrityError, ArtifactSignatureError, ArtifactVersionError,
    ArtifactWeightsFileError, LoadedModule, ManifestFieldError, load,
)

__all__ = [
    "Plan", "Executor", "ValueSpec", "KernelStep", "ViewStep", "ReshapeStep", "ContiguizeStep",
    "ConstStep",
    "DType", "OpKind", "BackendId", "BindingKey", "FusedOpId", "Layout", "Storage", "OutputView",
    "OpParams", "NoParams", "NO_PARAMS", "PARAMS_FOR_KIND", "MatmulM", "PadMode", "QuantType",
    "Reduction", "check_params_for", "params_type_for", "PrecisionGuarantee", "CostEstimate",
    "CostFn", "composite_ns", "default_cost_for_op_kind", "unknown_cost", "BindingEntry",
    "KernelBindingTable", "KernelCaps", "KernelRef", "NotBound", "Unique", "Ambiguous",
    "RuntimeFusedLookup", "global_table", "update_global_table", "reset_global_table",
    "FuelError", "UnknownDTypeError", "UnknownOpKindError", "LayoutError", "StorageError",
    "OpParamsError", "BindingTableError", "NoBackendForOp", "KernelError", "PlanError",
    "IndexOutOfRangeError",
    "load", "LoadedModule", "ArtifactError", "ArtifactFormatError", "ArtifactVersionError",
    "ArtifactIntegrityError", "ArtifactCpuError", "ArtifactCodeError", "ArtifactSignatureError",
    "ArtifactWeightsFileError",
    "ManifestFieldError",
]
