"""The fused-op registry: 25 static fused ops (one module each under
``ops/``), the declarative pattern/recipe grammar, recipe instantiation
(total decompose at the data level), runtime-registered fused ops and the
graph builders.

Public API:

* ``default_registry()`` -> frozen ``FusedOpRegistry`` (by id, name, mnemonic)
* ``FusedOpEntry``, ``Family``, ``BackwardKind``, ``Recipe``, ``FusedPattern``
* grammar: ``Op``/``op``, ``Bind``, ``SeeThrough``, ``Any_``, ``LAST``, ``SLOT``,
  ``SameAs``, ``WithDim``, ``Dims``, ``Extent``, ``Recip``;
  ``validate_recipe``, ``count_scalar_slots``, ``structural_hash``
* ``try_instantiate_recipe`` (total: ``RecipeDag`` or ``Decline``),
  ``instantiate_recipe``, ``emit_recipe``, ``emit_dag``, ``evaluate_dag``
* ``cse_key``, ``normalize_params``
* ``register_runtime_fused``, ``runtime_entry``, ``recipe_for``
"""
from .entry import (  # noqa: F401
    CUSTOM, DECOMPOSE, NOT_DIFFERENTIABLE, RUNTIME_FUSED_BASE, BackwardKind, Decline,
    Family, FusedOpEntry, FusedOpParamsKey, FusedPattern, Recipe, cse_key, normalize_params,
)
from .errors import FusedParamsError, RecipeError, RegistryError, RuntimeFusedError  # noqa: F401
from .grammar import (  # noqa: F401
    LAST, SLOT, Any_, Bind, Dims, Extent, Op, Recip, SameAs, SeeThrough, WithDim,
    bind_indices, count_scalar_slots, op, structural_hash, validate_pattern, validate_recipe,
)
from .recipe import (  # noqa: F401
    DagNode, RecipeDag, Ref, emit_dag, emit_recipe, evaluate_dag, instantiate_recipe,
    try_instantiate_recipe,
)
from .registry import FusedOpRegistry, default_registry  # noqa: F401
from .runtime_fused import (  # noqa: F401
    is_runtime, lookup, recipe_for, register_runtime_fused, runtime_entries, runtime_entry,
    runtime_params, runtime_scalars,
)
