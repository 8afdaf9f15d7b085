"""fuel -> linalg lowering rules, one module per op family. Importing this
package registers every rule in ``RULES`` (keyed by op-table name)."""
from . import elementwise, index, layout, matmul, reduce  # noqa: F401  (registration)
from .core import RULES, Lowering, lowers

__all__ = ["RULES", "Lowering", "lowers"]
