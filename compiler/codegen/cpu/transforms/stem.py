"""The stem schedule (docs/architecture.md, "Convolutions on CPU"): a
convolution with few input channels and stride 2 (``lowering/fused_conv.py:
_stem``) is one contraction over (n, co, oy, ox | c, ky, kx) reading the
stacked stride phases of the padded image, followed by an element-wise
generic (bias, activation) marked ``STEM_ATTR``. On tensors, before
bufferization, as the matmul with an epilogue (``matmul.epilogue_script``):

1. tile each epilogue (one per block of columns,
   ``fused_conv._stem_column_blocks``) 1 x ``mr`` x 1 x ``nr`` (loops n, oy, ox, co: the
   ``nr``-column strip of every phase plane stays in L1 while the channel
   blocks pass over it) and fuse the contraction and its zero fill into the
   tile; tile the contraction's c, ky, kx by 1; peel the partial last tiles
   (``scf-for-loop-peeling``: every tile static);
2. ``fold_unit_dims``: inside a tile c, ky and kx have extent 1, so the
   compound results of the phase map (``c*P + (ky mod 2)*2 + kx mod 2``,
   ``oy + ky floordiv 2``, ``ox + kx floordiv 2``) become plain dims and
   the vectorizer takes the tile;
3. vectorize every tile to its static sizes; ``single_reduction_contracts``
   leaves ``(mr x 1) * (1 x nr)`` contractions; hoist the accumulator out of
   the tap loops (``hoist_loop_invariant_subsets``): it starts as a zero
   splat, the bias and activation apply to the registers and the output
   tile is stored once.

After bufferization ``matmul.epilogue_lowering_script`` lowers the vectors
to broadcasts and FMAs.
"""
from __future__ import annotations

from compiler.codegen.family import CONTRACT_ATTR, STEM_ATTR  # marks (target-neutral)

from .conv import fold_unit_dims, single_reduction_contracts
from .matmul import _ANY, _match


def _script(body: str) -> str:
    return f"""module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: {_ANY} {{transform.readonly}}) {{
{body}    transform.yield
  }}
}}
"""


def _marked(attr: str, where: str = "%root") -> str:
    return f"transform.structured.match attributes{{{attr}}} in {where} : ({_ANY}) -> {_ANY}"


def _apply(*patterns: str, handle: str = "%f") -> str:
    body = "".join(f"      {p}\n" for p in patterns)
    return f"    transform.apply_patterns to {handle} {{\n{body}    }} : {_ANY}\n"


def stem_scripts(*, mr: int, nr: int) -> tuple[str, ...]:
    """The tensor-level steps of the stem schedule (module docstring), for
    ``mr`` x ``nr`` register tiles."""
    t = _ANY
    tile = _script(f"""    %f0 = {_match("func.func", "%root")}
    %es = transform.structured.match ops{{["linalg.generic"]}} attributes{{{STEM_ATTR}}} in %root : ({t}) -> {t}
    transform.foreach %es : {t} {{
    ^bb0(%e: {t}):
      %tiled, %ln, %loy, %lox, %lco = transform.structured.fuse %e tile_sizes [1, {mr}, 1, {nr}] interchange [0, 2, 3, 1] : ({t}) -> ({t}, {t}, {t}, {t}, {t})
      %mm = {_marked(CONTRACT_ATTR, "%ln")}
      %tk, %lc, %lky, %lkx = transform.structured.tile_using_for %mm tile_sizes [0, 0, 0, 0, 1, 1, 1] : ({t}) -> ({t}, {t}, {t}, {t})
    }}
    %f = transform.apply_registered_pass "scf-for-loop-peeling" with options = {{"skip-partial" = false}} to %f0 : ({t}) -> {t}
""" + _apply("transform.apply_patterns.tensor.fold_tensor_empty",
             "transform.apply_patterns.canonicalization"))
    vectorize = _script(f"""    %f = {_match("func.func", "%root")}
    %mm = {_marked(CONTRACT_ATTR)}
    transform.structured.vectorize %mm : {t}
    %rest = {_marked(STEM_ATTR)}
    transform.structured.vectorize %rest : {t}
""" + _apply("transform.apply_patterns.vector.transfer_permutation_patterns",
             "transform.apply_patterns.vector.reduction_to_contract")
        + _apply("transform.apply_patterns.vector.cast_away_vector_leading_one_dim"))
    hoist = _script(f"""    %f = {_match("func.func", "%root")}
""" + _apply("transform.apply_patterns.canonicalization") + f"""    %loops = {_match("scf.for", "%f")}
    transform.foreach %loops : {t} {{
    ^bb0(%l: {t}):
      transform.loop.hoist_loop_invariant_subsets %l : {t}
    }}
""" + _apply("transform.apply_patterns.canonicalization"))
    return (tile, f"py:fold_unit_dims {CONTRACT_ATTR}", vectorize,
            "py:single_reduction_contracts", hoist)


#: The ``py:`` steps of ``stem_scripts`` (``transforms.REWRITES``).
REWRITES = {"fold_unit_dims": fold_unit_dims,
            "single_reduction_contracts": single_reduction_contracts}
