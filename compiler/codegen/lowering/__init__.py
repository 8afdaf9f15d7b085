"""fuel -> linalg lowering rules, one module per op family. Importing this
package registers every rule: generic ones in ``RULES`` (keyed by op-table
name), platform-specific ones in ``PLATFORM_RULES`` (keyed by (name, target
kind)); ``rule_for(name, platform)`` picks."""
from . import elementwise, index, layout, matmul, reduce  # noqa: F401  (registration)
from . import fused_attention, fused_conv, fused_pool, fused_quant  # noqa: F401  (registration)
from . import fused_expand  # noqa: F401  (registration: after fused_conv, whose kernel it extends)
from . import fused_forward, fused_norm  # noqa: F401  (registration: fused row ops, linear, rope)
from .core import PLATFORM_RULES, RULES, Lowering, lowers, rule_for

__all__ = ["RULES", "PLATFORM_RULES", "Lowering", "lowers", "rule_for"]
