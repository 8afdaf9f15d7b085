"""fuel -> linalg lowering rules, one module per op family. Importing this
package registers every rule in ``RULES`` (keyed by op-table name)."""
from . import elementwise, index, layout, matmul, reduce  # noqa: F401  (registration)
from . import fused_attention, fused_conv, fused_quant  # noqa: F401  (registration)
from . import fused_forward, fused_norm  # noqa: F401  (registration: fused row ops, linear, rope)
from .core import RULES, Lowering, lowers

__all__ = ["RULES", "Lowering", "lowers"]
