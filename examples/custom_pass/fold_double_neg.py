"""A pass plugin: ``fold-double-neg`` rewrites ``fuel.neg(fuel.neg(x))`` to ``x``.

Load it into the driver and name it in a pipeline::

    fuelc opt in.mlir --load-pass-plugin examples/custom_pass/fold_double_neg.py \\
        --pass-pipeline='builtin.module(fold-double-neg)'

The rewrite is an MLIR rewrite pattern driven by the greedy driver, so chains
fold to a fixpoint: ``neg(neg(neg(x)))`` becomes ``neg(x)``.
"""
from __future__ import annotations

from compiler.mlir import ir, rewrite
from compiler.passes import ModulePass, register_pass


def _fold_double_neg(op, rewriter):
    """``neg(neg(x))`` -> ``x``. Returns a truthy value for "no match"."""
    producer = op.operands[0].owner
    if not isinstance(producer, ir.OpView) or producer.operation.name != "fuel.neg":
        return True                         # a block argument or another op
    x = producer.operands[0]
    if x.type != op.results[0].type:
        return True                         # never change a value's type
    rewriter.replace_op(op, [x])
    inner = producer.operation
    if not list(inner.results[0].uses):     # the inner neg was used only here
        rewriter.erase_op(inner)
    return False


@register_pass
class FoldDoubleNeg(ModulePass):
    name = "fold-double-neg"
    summary = "fold fuel.neg(fuel.neg(x)) to x"

    def apply(self, module) -> None:
        with module.context:                # the pass may run with no context entered
            patterns = rewrite.RewritePatternSet()
            patterns.add("fuel.neg", _fold_double_neg, benefit=1)
            frozen = patterns.freeze()      # keep it referenced while it runs
            rewrite.apply_patterns_and_fold_greedily(module, frozen)
