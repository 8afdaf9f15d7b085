"""The register-tiled matmul schedule (docs/toolchain.md), for dynamic shapes
and any strides.

For each ``linalg.matmul`` (or ``linalg.batch_matmul``, batch tiled by 1) of
the payload (``transform.foreach``, so modules may hold several):

1. tile M by ``mc`` and K by ``kc`` (in that order: the ``mc x kc`` block of
   A stays in L2 across the N panels), then N by ``nr``; peel the N loop so
   the main panels are exactly ``nr`` wide;
2. main panels: promote the ``kc x nr`` panel of B into a contiguous stack
   buffer (hoisted out of the loops), tile M by ``mr`` and K by 1, peel the M
   loop; the ``mr x nr x 1`` tiles and the ``1 x nr x 1`` tiles of the M
   remainder are static, so they vectorize;
3. the N remainder (< ``nr`` columns) runs one ``mr x nr/2 x 1`` panel
   where it has ``nr/2`` columns or more (rows peeled as in the main
   panels), and what is left ``mr x 1 x 1`` column tiles (then
   ``1 x 1 x 1``), vectorized with the main tiles, so their accumulators
   are hoisted too (as are those of the remainder rows' ``1 x nr x 1``
   tiles, M being tiled before K);
4. a bf16/f16 matmul (f32 init) vectorizes to extensions of broadcast and
   transposed operands: ``sink_ops`` moves the extensions before the
   broadcasts and transposes, so the multiply-reduction still becomes a
   contraction whose operands fold into its maps (as scalar code otherwise);
   fold views into the transfers, CSE + LICM so the C tile's read/write
   indices are loop invariant, hoist the C accumulators out of the K loop
   (per function),
   then lower contractions to outer products / FMAs and transfers to loads
   (the lowering's ``convert-vector-to-scf`` handles non-unit strides);
5. mark the loops around the FMAs (the K loops of the micro-kernels) "do
   not unroll": unrolled, LLVM rotates the accumulators through registers
   and spills (docs/toolchain.md).

Canonicalization sits in its own ``apply_patterns`` blocks: mixed with the
vector lowering patterns it never terminates (docs/toolchain.md).
"""
from __future__ import annotations

import re

from compiler.codegen.family import PACKED_B_ATTR

_ANY = "!transform.any_op"
#: The patterns that lower the vectorized tiles' contractions and transfers to
#: FMAs, loads and stores (both scripts).
_LOWER_VECTORS = """      transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
      transform.apply_patterns.vector.lower_outerproduct
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.split_transfer_full_partial split_transfer_strategy = "linalg-copy"
      transform.apply_patterns.vector.transfer_to_scf max_transfer_rank = 1 full_unroll = true
      transform.apply_patterns.vector.lower_transfer max_transfer_rank = 1
      transform.apply_patterns.vector.lower_shape_cast
      transform.apply_patterns.vector.lower_transpose lowering_strategy = "shuffle_1d"
      transform.apply_patterns.vector.lower_broadcast
"""
def _lower_tail(f: str) -> str:
    """The end of a script on function handle ``f``: views folded into the
    transfers, CSE, the vector ops lowered (``_LOWER_VECTORS``), canonicalized."""
    t = _ANY
    return f"""    transform.apply_patterns to {f} {{
      transform.apply_patterns.memref.fold_memref_alias_ops
      transform.apply_patterns.canonicalization
    }} : {t}
    transform.apply_cse to {f} : {t}
    transform.apply_patterns to {f} {{
{_LOWER_VECTORS}    }} : {t}
    transform.apply_patterns to {f} {{
      transform.apply_patterns.canonicalization
    }} : {t}
"""


def _match(what: str, where: str) -> str:
    """A transform op matching the ``what`` ops nested in handle ``where``."""
    return f'transform.structured.match ops{{["{what}"]}} in {where} : ({_ANY}) -> {_ANY}'


_FOR = '!transform.op<"scf.for">'


def _fma_tile(name: str, op: str) -> str:
    """Transform ops vectorizing the statically shaped tile ``op`` (a remainder
    whose M and N extents are 1: the matmuls' corners) and lowering its
    contraction to outer products at once, in the loop around it, so that
    every multiply-add is a ``vector.fma`` as in the other tiles. Left to the
    function-wide patterns, ``cast_away_vector_leading_one_dim`` makes it a
    dot product with no parallel dim, which lowers to a separate multiply and
    add: such an element rounded differently from its neighbours in FMA
    tiles, and a result depended on which tile computed it (docs/toolchain.md)."""
    t = _ANY
    return f"""      %{name}Loop = transform.get_parent_op {op} {{op_name = "scf.for"}} : ({t}) -> {t}
      transform.structured.vectorize {op} : {t}
      transform.apply_patterns to %{name}Loop {{
        transform.apply_patterns.vector.transfer_permutation_patterns
        transform.apply_patterns.vector.sink_ops
        transform.apply_patterns.vector.reduction_to_contract
      }} : {t}
      transform.apply_patterns to %{name}Loop {{
        transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
        transform.apply_patterns.vector.lower_outerproduct
      }} : {t}
"""


#: The row blocks the remainder rows of a panel (fewer than ``mr``) are cut
#: into, largest first, before single rows (``_row_tiles``).
REMAINDER_ROWS = (4, 2)


def _row_tiles(name: str, src: str, op: str, mr: int, pre0: str) -> tuple[str, str]:
    """The register tiles of the panel ``op`` (handle ``src``): its M loop
    tiled by ``mr`` and peeled, the remainder rows (fewer than ``mr``) tiled
    by each ``REMAINDER_ROWS`` block below ``mr`` and peeled (the first
    block's mins simplified to its size; in its remainder the peeling folds
    the next block's itself: the tiles are static; first part), then K
    tiled by 1 in the main rows (``%<name>V``, mr x w x 1), in the blocks
    (``%<name>R<b>``, b x w x 1) and in the rows left (``%<name>R``, 1 x w x
    1; second part). Both parts are cut before any tile is vectorized. As
    single rows, each remainder row read the panel once more with one or
    two accumulators, a chain of dependent FMAs as long as K: with B read in
    place at a stride of a multiple of 4 KiB (N = 3072) every such pass
    missed L1 ([5,768]x[768,3072] on AVX2 took 4.4x numpy's time)."""
    t = _ANY
    cut_m = f"""      %{name}T, %{name}Ml = transform.structured.tile_using_for {src} tile_sizes [{pre0}{mr}, 0, 0] : ({t}) -> ({t}, {t})
      %{name}Mf = transform.cast %{name}Ml : {t} to {_FOR}
      %{name}MainM, %{name}RemM = transform.loop.peel %{name}Mf : ({_FOR}) -> ({t}, {t})
"""
    cut_k = f"""      %{name}Mm = {_match(op, f"%{name}MainM")}
      %{name}V, %{name}Kl = transform.structured.tile_using_for %{name}Mm tile_sizes [{pre0}0, 0, 1] : ({t}) -> ({t}, {t})
"""
    rest = f"%{name}RemM"
    blocks = [b for b in REMAINDER_ROWS if b < mr]
    for b in blocks:
        n = f"%{name}B{b}"
        cut_m += f"""      {n}o = {_match(op, rest)}
      {n}t, {n}l = transform.structured.tile_using_for {n}o tile_sizes [{pre0}{b}, 0, 0] : ({t}) -> ({t}, {t})
      {n}f = transform.cast {n}l : {t} to {_FOR}
      {n}Main, {n}Rem = transform.loop.peel {n}f : ({_FOR}) -> ({t}, {t})
"""
        if b == blocks[0]:  # inside the first block's remainder, peeling folds the mins itself
            cut_m += f"""      {n}Mins = {_match("affine.min", f"{n}Main")}
      transform.affine.simplify_min_max_affine_ops {n}Mins : {t}
"""
        cut_k += f"""      {n}m = {_match(op, f"{n}Main")}
      %{name}R{b}, {n}k = transform.structured.tile_using_for {n}m tile_sizes [{pre0}0, 0, 1] : ({t}) -> ({t}, {t})
"""
        rest = f"{n}Rem"
    cut_k += f"""      %{name}Rm = {_match(op, rest)}
      %{name}R, %{name}Rl0, %{name}Rl1 = transform.structured.tile_using_for %{name}Rm tile_sizes [{pre0}1, 0, 1] : ({t}) -> ({t}, {t}, {t})
"""
    return cut_m, cut_k


def _register_tiles(op: str, mr: int, nr: int, canon2: str) -> str:
    """The part of ``matmul_script`` after B is packed (handle ``%pr``, the
    main N panels; ``%remN``, the N remainder): the register tiles of the main
    panels (mr x nr x 1, loops M, K, the M loop peeled) and their remainder
    rows (1 x nr x 1); of the N remainder's half panel where it has nr/2
    columns or more (mr x nr/2 x 1, rows 1 x nr/2 x 1); and of the columns
    left (mr x 1 x 1, then 1 x 1 x 1), vectorized."""
    t = _ANY
    pre0 = "0, " if op == "linalg.batch_matmul" else ""
    res2 = ", ".join([t] * 3)
    match = _match
    # M is tiled before K, so the remainder rows' tiles are in loops row, K,
    # and the N remainder becomes mr x 1 x 1 column tiles (then 1 x 1 x 1):
    # every accumulator stays in registers across K (docs/toolchain.md). As
    # scalar loops m, k, n the remainder stored C at every step of K: ViT's
    # [8,4,33,64]x[8,4,64,33] attention products 0.29 -> 0.09 ms, a 2-D
    # [784,64]x[64,196] 0.35 -> 0.22 ms, [32,2304]x[2304,36] 0.29 -> 0.10 ms
    # (one znver4 core; products without remainders unchanged). All tiling
    # and canonicalization precede vectorization: canonicalizing a
    # vectorized tile turned its contraction into scalar code.
    # A remainder of nr/2 columns or more first runs one half-width panel
    # ([256,256]x[256,688] on AVX-512: 16 columns as 16 column tiles cost a
    # third of the product). Peeling leaves that panel's width an
    # unsimplified affine.min (its bound is the composed remainder extent),
    # so the tile would not vectorize: simplify_min_max_affine_ops proves it
    # nr/2 from the loop's bounds.
    main_m, main_k = _row_tiles("mm", "%pr", op, mr, pre0)
    half_m, half_k = _row_tiles("h", "%hm", op, mr, pre0)
    return (main_m + f"""      %hN = {match(op, "%remN")}
      %h1, %hl = transform.structured.tile_using_for %hN tile_sizes [{pre0}0, {nr // 2}, 0] : ({t}) -> ({t}, {t})
      %hlf = transform.cast %hl : {t} to {_FOR}
      %hMainN, %hRemN = transform.loop.peel %hlf : ({_FOR}) -> ({t}, {t})
      %hMins = {match("affine.min", "%hMainN")}
      transform.affine.simplify_min_max_affine_ops %hMins : {t}
      %hm = {match(op, "%hMainN")}
""" + half_m + f"""      %mmN = {match(op, "%hRemN")}
      %c1, %cl = transform.structured.tile_using_for %mmN tile_sizes [{pre0}0, 1, 0] : ({t}) -> ({t}, {t})
      %c2, %cm, %ck = transform.structured.tile_using_for %c1 tile_sizes [{pre0}{mr}, 0, 1] : ({t}) -> ({res2})
      %cmf = transform.cast %cm : {t} to {_FOR}
      %cMain, %cRem = transform.loop.peel %cmf : ({_FOR}) -> ({t}, {t})
{canon2}""" + main_k + half_k + f"""      %cv = {match(op, "%cMain")}
      %cr = {match(op, "%cRem")}
      %c3, %cl3, %ck3 = transform.structured.tile_using_for %cr tile_sizes [{pre0}1, 0, 1] : ({t}) -> ({res2})
{canon2}""" + "".join(f"      transform.structured.vectorize {h} : {t}\n"
                      for h in ("%mmV", "%mmR", "%hV", "%hR", "%cv",
                                *(f"%{p}R{b}" for p in ("mm", "h") for b in REMAINDER_ROWS
                                  if b < mr))) + _fma_tile("corner", "%c3"))


def matmul_script(op: str = "linalg.matmul", *, mr: int = 6, nr: int = 16, kc: int = 512,
                  mc: int = 240, pack: bool = True, pack_a: bool = False, nb: int = 0,
                  copy_rows: int = 0) -> str:
    """The transform script for every ``op`` (``linalg.matmul`` or
    ``linalg.batch_matmul``) of the payload; ``mr x nr`` register tile, ``kc``
    rows of B packed per panel, ``mc`` rows of A per block (a multiple of
    ``mr``, so the thread count never changes which rows fall in the M
    remainder). ``pack_a``: each ``mc x kc`` block of A is first copied into
    a contiguous buffer (``transform.structured.promote``), which the register
    tiles of the block read. ``nb`` (with ``pack``; a multiple of ``nr``):
    B is copied a ``kc x nb`` block at a time (row segments of ``nb``
    columns, read in order; the buffer on the heap, once per call), and the
    panels of the block are read from it, not copied one by one.
    ``copy_rows`` (with ``nb``): that copy is cut into loops of
    ``copy_rows`` rows (for ``prefetch_copy_rows``). Raises ValueError."""
    if op not in ("linalg.matmul", "linalg.batch_matmul"):
        raise ValueError(f"matmul_script: unsupported op {op}")
    b = [1] if op == "linalg.batch_matmul" else []
    lead = ", ".join(str(x) for x in b)
    pre = lead + ", " if lead else ""
    pre0 = "0, " if b else ""  # the batch is already tiled to 1
    t = _ANY
    n_loops = len(b)
    if mc % mr:
        raise ValueError(f"matmul_script: mc={mc} is not a multiple of mr={mr}")
    res0 = ", ".join([t] * (1 + n_loops + 2))
    loops0 = ", ".join([f"%bl{i}" for i in range(n_loops)] + ["%lM", "%lK"])
    pm = lambda body: "    transform.apply_patterns to %func {\n" + body + "    } : " + t + "\n"
    canon = pm("      transform.apply_patterns.canonicalization\n")
    canon2 = "\n".join("  " + line if line else line for line in canon.split("\n"))
    promote = (f"      %pr = transform.structured.promote %mmMain {{ operands_to_promote = [1], "
               f"use_full_tile_buffers = [false, false], use_alloca }} : ({t}) -> {t}\n"
               f"      transform.bufferization.buffer_loop_hoisting %func : {t}\n") if pack else (
               "      %pr = transform.cast %mmMain : !transform.any_op to !transform.any_op\n")
    match = _match
    if pack_a and not pack:
        raise ValueError("matmul_script: pack_a needs pack (B packed too)")
    if nb and (not pack or nb % nr):
        raise ValueError(f"matmul_script: nb={nb} needs pack and a multiple of nr={nr}")
    if copy_rows and not nb:
        raise ValueError("matmul_script: copy_rows needs nb (B copied in blocks)")
    # the block of A (mc x kc: 720 KiB for AVX2 f32) on the heap, not the stack
    # of whichever thread runs the kernel: allocated once per call (hoisted;
    # its dealloc then needs ``py:sink_hoisted_deallocs``)
    pack_a_ops = (f"      %ta = transform.structured.promote %t0 {{ operands_to_promote = [0], "
                  f"use_full_tile_buffers = [false, false] }} : ({t}) -> {t}\n") if pack_a else (
                  "      %ta = transform.cast %t0 : !transform.any_op to !transform.any_op\n")
    block_b = (f"      %tnb, %lNB = transform.structured.tile_using_for %ta tile_sizes [{pre0}0, {nb}, 0] : ({t}) -> ({t}, {t})\n"
               f"      %tb = transform.structured.promote %tnb {{ operands_to_promote = [1], "
               f"use_full_tile_buffers = [false, false] }} : ({t}) -> {t}\n"
               f"      transform.bufferization.buffer_loop_hoisting %func : {t}\n") if nb else ""
    if copy_rows:  # the block's copy, in loops of copy_rows rows
        block_b += (f"      %cpy = {match('linalg.copy', '%lNB')}\n"
                    f"      %cpyT, %cpyL = transform.structured.tile_using_for %cpy tile_sizes [{copy_rows}, 0] "
                    f": ({t}) -> ({t}, {t})\n")
    if nb:  # the panels are read from the block
        promote = "      %pr = transform.cast %mmMain : !transform.any_op to !transform.any_op\n"
    return f"""module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: {t} {{transform.readonly}}) {{
    %func = {match("func.func", "%root")}
    %mm = {match(op, "%root")}
    transform.foreach %mm : {t} {{
    ^bb0(%m: {t}):
      %t0, {loops0} = transform.structured.tile_using_for %m tile_sizes [{pre}{mc}, 0, {kc}] : ({t}) -> ({res0})
{pack_a_ops}{block_b}      %t1, %lN = transform.structured.tile_using_for {"%tb" if nb else "%ta"} tile_sizes [{pre0}0, {nr}, 0] : ({t}) -> ({t}, {t})
      %lNf = transform.cast %lN : {t} to {_FOR}
      %mainN, %remN = transform.loop.peel %lNf : ({_FOR}) -> ({t}, {t})
      %mmMain = {match(op, "%mainN")}
{promote}{_register_tiles(op, mr, nr, canon2)}    }}
{_tiles_to_fmas()}    transform.yield
  }}
}}
"""


def _tiles_to_fmas() -> str:
    """The end of ``matmul_script`` and ``packed_script`` after the register
    tiles are vectorized (steps 4 and 5 of the module docstring)."""
    t = _ANY
    pm = lambda body: "    transform.apply_patterns to %func {\n" + body + "    } : " + t + "\n"
    match = _match
    return f"""{pm('''      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.sink_ops
      transform.apply_patterns.vector.reduction_to_contract
''')}{pm('''      transform.apply_patterns.vector.cast_away_vector_leading_one_dim
''')}{pm('''      transform.apply_patterns.memref.fold_memref_alias_ops
      transform.apply_patterns.canonicalization
''')}    transform.apply_cse to %func : {t}
    %loops = {match("scf.for", "%root")}
    transform.apply_licm to %loops : {t}
    transform.foreach %func : {t} {{
    ^bb0(%f: {t}):
    %f2 = transform.structured.hoist_redundant_vector_transfers %f : ({t}) -> {t}
    transform.apply_patterns to %f2 {{
{_LOWER_VECTORS}    }} : {t}
    transform.apply_patterns to %f2 {{
      transform.apply_patterns.canonicalization
    }} : {t}
    %fmas = {match("vector.fma", "%f2")}
    %kloops = transform.get_parent_op %fmas {{op_name = "scf.for", deduplicate}} : ({t}) -> {t}
    %no_unroll = transform.param.constant #llvm.loop_annotation<unroll = #llvm.loop_unroll<disable = true>> -> !transform.any_param
    transform.annotate %kloops "loop_annotation" = %no_unroll : {t}, !transform.any_param
    }}
"""


def packed_script(*, mr: int, nr: int, kc: int, mc: int, prefetch: bool = False) -> tuple[str, ...]:
    """The strategy steps of a FusedLinear whose B is pre-packed: the
    ``PACKED_B_ATTR`` generic over (p, m, j | k), ``out[m, p*nr + j] +=
    a[m, k] * b[p, k, j]`` with ``j`` the static panel width ``nr``. Tile M
    by ``mc`` and K by ``kc``, then the panels p by 1, M by ``mr`` (peeled)
    and K by 1: ``mr x nr x 1`` register tiles, the remainder rows in ``2 x
    nr x 1`` tiles (peeled: their min simplified to 2) and a last ``1 x nr x
    1`` (one row alone is a chain of dependent FMAs as long as K; two rows
    halve it: AVX2 [32,768]x[768,3072], 2 remainder rows, about 10% faster),
    each reading its K x nr panel of B contiguously. p is a reduction
    loop of extent 1 inside a tile (as the direct convolution's taps,
    ``transforms.conv``): ``fold_unit_dims`` reads the output column as
    ``j`` (the panel's offset is in the tile's view), the tiles vectorize,
    ``single_reduction_contracts`` drops their unit dims, and they lower to
    FMAs as ``matmul_script``'s (no packing per call, no N remainder: N is
    a multiple of ``nr``). ``prefetch``: then ``prefetch_next_panel``.
    Raises ValueError."""
    t = _ANY
    if mc % mr:
        raise ValueError(f"packed_script: mc={mc} is not a multiple of mr={mr}")
    match = _match
    body = f"""      %t0, %lM, %lK = transform.structured.tile_using_for %m tile_sizes [0, {mc}, 0, {kc}] : ({t}) -> ({t}, {t}, {t})
      %t1, %lP = transform.structured.tile_using_for %t0 tile_sizes [1, 0, 0, 0] : ({t}) -> ({t}, {t})
      %t2, %lm = transform.structured.tile_using_for %t1 tile_sizes [0, {mr}, 0, 0] : ({t}) -> ({t}, {t})
      %lmf = transform.cast %lm : {t} to {_FOR}
      %mainM, %remM = transform.loop.peel %lmf : ({_FOR}) -> ({t}, {t})
      %mmM = {match("linalg.generic", "%mainM")}
      %v, %lk = transform.structured.tile_using_for %mmM tile_sizes [0, 0, 0, 1] : ({t}) -> ({t}, {t})
      %mmR = {match("linalg.generic", "%remM")}
      %r2, %lr = transform.structured.tile_using_for %mmR tile_sizes [0, 2, 0, 0] : ({t}) -> ({t}, {t})
      %lrf = transform.cast %lr : {t} to {_FOR}
      %mainR, %remR = transform.loop.peel %lrf : ({_FOR}) -> ({t}, {t})
      %rMins = {match("affine.min", "%mainR")}
      transform.affine.simplify_min_max_affine_ops %rMins : {t}
      %mmR2 = {match("linalg.generic", "%mainR")}
      %r2k, %lr2k = transform.structured.tile_using_for %mmR2 tile_sizes [0, 0, 0, 1] : ({t}) -> ({t}, {t})
      %mmR1 = {match("linalg.generic", "%remR")}
      %r, %lr0, %lr1 = transform.structured.tile_using_for %mmR1 tile_sizes [0, 1, 0, 1] : ({t}) -> ({t}, {t}, {t})
"""
    return _packed_steps(body) + (("py:prefetch_next_panel",) if prefetch else ())


#: The row blocks of ``packed_rows_script``, largest first: each whole block
#: reads the packed B once.
PACKED_ROW_BLOCKS = (4, 3, 2)


def packed_rows_script(*, panels: int = 4, blocks: tuple[int, ...] = PACKED_ROW_BLOCKS) -> tuple[str, ...]:
    """``packed_script`` for calls of few rows (``family.FEW_ROWS``). The
    rows are cut into blocks of each size in ``blocks`` (largest first, each
    loop peeled; the first block's mins simplified to its size): a whole
    block of b rows runs as ``b x nr x 1`` register tiles in loops block,
    panel, K, so the packed B is read once per block, not once per row (as
    ``packed_script``'s ``mr x nr`` tiles). A row left alone would be one
    chain of dependent FMAs as long as K per panel; instead its loops are
    blocks of ``panels`` panels (peeled), K, and the panels of the block,
    unrolled: ``panels`` independent ``1 x nr`` accumulators per step of K
    (the partial last block: panel by panel)."""
    t = _ANY
    match = _match
    body, rest = "", "%m"
    for i, b in enumerate(blocks):
        n = f"%b{b}"
        src = rest if not i else f"{n}o"
        if i:
            body += f"      {n}o = {match('linalg.generic', rest)}\n"
        # inside the first block's remainder the next block's extent is a min
        # of its size and the rows left: simplified to its size (as _row_tiles)
        mins = "" if i != 1 else (f"      {n}Mins = {match('affine.min', f'{n}Main')}\n"
                                  f"      transform.affine.simplify_min_max_affine_ops {n}Mins : {t}\n")
        body += f"""      {n}t, {n}l = transform.structured.tile_using_for {src} tile_sizes [0, {b}, 0, 0] : ({t}) -> ({t}, {t})
      {n}f = transform.cast {n}l : {t} to {_FOR}
      {n}Main, {n}Rem = transform.loop.peel {n}f : ({_FOR}) -> ({t}, {t})
{mins}      {n}m = {match("linalg.generic", f"{n}Main")}
      {n}v, {n}lp, {n}lk = transform.structured.tile_using_for {n}m tile_sizes [1, 0, 0, 1] : ({t}) -> ({t}, {t}, {t})
"""
        rest = f"{n}Rem"
    body += f"""      %mmL = {match("linalg.generic", rest)}
      %t0, %lP, %lM = transform.structured.tile_using_for %mmL tile_sizes [{panels}, 1, 0, 0] : ({t}) -> ({t}, {t}, {t})
      %lPf = transform.cast %lP : {t} to {_FOR}
      %mainP, %remP = transform.loop.peel %lPf : ({_FOR}) -> ({t}, {t})
      %mmP = {match("linalg.generic", "%mainP")}
      %t1, %lk = transform.structured.tile_using_for %mmP tile_sizes [0, 0, 0, 1] : ({t}) -> ({t}, {t})
      %t2, %lp = transform.structured.tile_using_for %t1 tile_sizes [1, 0, 0, 0] : ({t}) -> ({t}, {t})
      %lpf = transform.cast %lp : {t} to {_FOR}
      transform.loop.unroll %lpf {{ factor = {panels} }} : {_FOR}
      %mmR = {match("linalg.generic", "%remP")}
      %r, %lr0, %lr1 = transform.structured.tile_using_for %mmR tile_sizes [1, 0, 0, 1] : ({t}) -> ({t}, {t}, {t})
"""
    return _packed_steps(body)


def _packed_steps(body: str) -> tuple[str, ...]:
    """The strategy steps of a packed-B generic whose tiling, for each
    marked generic ``%m``, is ``body``; then ``_PACKED_TAIL``."""
    t = _ANY
    tile = _PACKED_HEAD + f"""    transform.foreach %mm : {t} {{
    ^bb0(%m: {t}):
{body}    }}
    transform.apply_patterns to %func {{
      transform.apply_patterns.canonicalization
    }} : {t}
""" + _YIELD
    return (tile, *_PACKED_TAIL)


_PACKED_HEAD = f"""module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: {_ANY} {{transform.readonly}}) {{
    %func = {_match("func.func", "%root")}
    %mm = transform.structured.match attributes{{{PACKED_B_ATTR}}} in %root : ({_ANY}) -> {_ANY}
"""
_YIELD = """    transform.yield
  }
}
"""
#: After a packed-B generic is tiled: p folded out of the tiles' maps, the
#: tiles vectorized, their unit dims dropped, lowered to FMAs.
_PACKED_TAIL = (f"py:fold_unit_dims {PACKED_B_ATTR}", _PACKED_HEAD + f"""    transform.foreach %mm : {_ANY} {{
    ^bb0(%m: {_ANY}):
      transform.structured.vectorize %m : {_ANY}
    }}
    transform.apply_patterns to %func {{
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.reduction_to_contract
    }} : {_ANY}
""" + _YIELD, "py:single_reduction_contracts", _PACKED_HEAD + _tiles_to_fmas() + _YIELD)


def rows_script(op: str = "linalg.matmul", *, nr: int = 16, kr: int = 4) -> str:
    """The transform script of a matmul whose calls have a few rows (no
    packing: B is read in place, in order). Tiles of 1 row x ``nr`` columns
    x ``kr`` steps of K, in loop order K, M, N: one pass over ``kr`` rows of
    B serves every row of A while they are in L1, and each C tile is loaded
    and stored once per ``kr`` FMAs per vector. N and K are peeled; the K
    remainder runs as 1 x ``nr`` x 1 and 1 x 1 x 1 FMA tiles, the N remainder
    as scalar loops whose multiply and add carry ``contract``: LLVM vectorizes
    them across the columns and fuses each pair into one FMA (as 1 x 1 x
    ``kr`` tiles, [4,2304] x [2304,255] ran 10-25% slower). Every
    multiply-add is then an FMA in the order of K, as in the tiled schedule,
    so a row's result does not depend on the kernel that computed it.
    Raises ValueError."""
    if op not in ("linalg.matmul", "linalg.batch_matmul"):
        raise ValueError(f"rows_script: unsupported op {op}")
    t = _ANY
    if op == "linalg.batch_matmul":
        sizes, order, n_loops, pre0 = f"[1, 1, {nr}, {kr}]", "[0, 3, 1, 2]", 4, "0, "
    else:
        sizes, order, n_loops, pre0 = f"[1, {nr}, {kr}]", "[2, 0, 1]", 3, ""
    loops = ", ".join(f"%l{i}" for i in range(n_loops))
    res = ", ".join([t] * (n_loops + 1))
    match = _match
    k_loop = f"%l{n_loops - 3}"  # the nest: (batch,) K, M, N

    def peel_n(inside: str, main: str, rem: str) -> str:
        # peel the N loop around the matmul in ``inside``
        return f"""      %{main}op = {match(op, inside)}
      %{main}l = transform.get_parent_op %{main}op {{op_name = "scf.for"}} : ({t}) -> {t}
      %{main}f = transform.cast %{main}l : {t} to {_FOR}
      %{main}, %{rem} = transform.loop.peel %{main}f : ({_FOR}) -> ({t}, {t})
"""
    tail = _lower_tail("%func")
    return f"""module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: {t} {{transform.readonly}}) {{
    %func = {match("func.func", "%root")}
    %mm = {match(op, "%root")}
    transform.foreach %mm : {t} {{
    ^bb0(%m: {t}):
      %tl, {loops} = transform.structured.tile_using_for %m tile_sizes {sizes} interchange = {order} : ({t}) -> ({res})
      %kf = transform.cast {k_loop} : {t} to {_FOR}
      %mainK, %remK = transform.loop.peel %kf : ({_FOR}) -> ({t}, {t})
{peel_n("%mainK", "mainN", "remN")}{peel_n("%remK", "kMainN", "kRemN")}      %rn = {match(op, "%remN")}
      // the N remainder: scalar loops, each multiply-add contractible to an FMA
      %rng = transform.structured.generalize %rn : ({t}) -> {t}
      %rnops = transform.structured.match ops{{["arith.mulf", "arith.addf"]}} in %rng : ({t}) -> {t}
      %contract = transform.param.constant #arith.fastmath<contract> -> !transform.any_param
      transform.annotate %rnops "fastmath" = %contract : {t}, !transform.any_param
      %kn = {match(op, "%kMainN")}
      %kn1, %knl = transform.structured.tile_using_for %kn tile_sizes [{pre0}0, 0, 1] : ({t}) -> ({t}, {t})
      %kc = {match(op, "%kRemN")}
      %kc1, %kcl0, %kcl1 = transform.structured.tile_using_for %kc tile_sizes [{pre0}0, 1, 1] : ({t}) -> ({t}, {t}, {t})
      transform.apply_patterns to %func {{
        transform.apply_patterns.canonicalization
      }} : {t}
      %v = {match(op, "%mainN")}
      transform.structured.vectorize %v : {t}
      transform.structured.vectorize %kn1 : {t}
{_fma_tile("corner", "%kc1")}    }}
    transform.apply_patterns to %func {{
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.sink_ops
      transform.apply_patterns.vector.reduction_to_contract
    }} : {t}
    transform.apply_patterns to %func {{
      transform.apply_patterns.vector.cast_away_vector_leading_one_dim
    }} : {t}
{tail}    transform.yield
  }}
}}
"""


# The marks of a matmul with an epilogue (target-neutral, set by the lowering)
from compiler.codegen.family import CONTRACT_ATTR, EPILOGUE_ATTR  # noqa: E402
#: Marks the linalg ops of ``epilogue_script``'s remainder rows (1 x nr tiles).
ONE_ROW_ATTR = "fuelc.one_row"


#: Marks the linalg ops of ``epilogue_script``'s remainder row blocks (``b x nr``
#: tiles; the attribute is this prefix and ``b``).
ROW_BLOCK_ATTR = "fuelc.row_block_"


#: The mark ``scf-for-loop-peeling`` puts on the loops it has peeled (and
#: drops when done): a loop carrying it is left whole. ``epilogue_script``
#: marks its ``mc``-row block loop so: peeled, the last block repeated every
#: tile of the block (``mr`` rows, the row blocks, single rows) after a copy
#: of the whole blocks' ``mr``-row tiles, 23 rows of tile code where 15 do the
#: same; the GELU FusedLinear compiled in 0.38 s against 0.27 s, the same
#: bits (docs/compile-at-scale.md, "Seventeenth round").
PEELED_MARK = "__peeled_loop__"


def epilogue_script(*, mr: int, nr: int, mc: int = 0, blocks: tuple[int, ...] = ()) -> str:
    """The transform script (on tensors, before bufferization) of a matmul
    whose init and epilogue run in its register tiles: the epilogue generic
    is tiled 1 x ``mr`` x ``nr`` (loops batch, n, m: a K x ``nr`` panel of B
    stays in L1 while every row block of A passes over it) and the
    contraction and its init are fused into the tile; the contraction's K is
    tiled by 1. A row loop that does not divide is peeled: the rows that
    fill no ``mr`` tile (a static count or, for rows that are a run-time
    extent, a dynamic one) run as ``1 x nr`` tiles (marked ``ONE_ROW_ATTR``),
    never under row masks (their masked transfers did not lower).
    ``scf-for-loop-peeling`` splits off the other partial last tiles
    (only where a loop does not divide; static or dynamic), every linalg op is
    vectorized to its tile's sizes (a partial column tile under masks), and the
    accumulator becomes a vector carried through the K loop
    (``hoist_loop_invariant_subsets``): the init is a register splat of the
    bias, the epilogue runs on registers, and C is written once. With ``mc``
    the epilogue is first tiled (and the rest fused) by blocks of ``mc``
    rows (dim 1), so a block of A stays in L2 while the panels pass; that
    loop is not peeled (``PEELED_MARK``): a partial last block runs the same
    tiles with fewer rows.
    ``blocks`` (sizes below ``mr``, largest first): the rows left over run
    first as ``b x nr`` tiles of each size (each loop peeled), then single
    rows; a single row's ``nr`` columns are one or two accumulators, a chain
    of dependent FMAs as long as K."""
    t = _ANY
    pm = lambda body: f"    transform.apply_patterns to %f {{\n{body}    }} : {t}\n"
    canon = pm("      transform.apply_patterns.canonicalization\n")
    block, blocked = "", ""
    if mc:  # blocks of mc rows first: their rows of A stay in L2 across the panels
        block = (f"    %epi_b, %lmc = transform.structured.fuse %epi tile_sizes [0, {mc}, 0] "
                 f": ({t}) -> ({t}, {t})\n"
                 f'    transform.annotate %lmc "{PEELED_MARK}" : {t}\n')
        blocked = "_b"
    row_blocks, block_vectors, last = "", "", ""
    for b in blocks:
        if not 1 < b < mr:
            raise ValueError(f"epilogue_script: row block {b} is not between 1 and mr={mr}")
        src, last, a = f"%epiR{last}", f"{last}_{b}", f"{ROW_BLOCK_ATTR}{b}"
        row_blocks += f"""          %tb{last}, %lb{last} = transform.structured.fuse {src} tile_sizes [0, {b}, 0] : ({t}) -> ({t}, {t})
          %lbf{last} = transform.cast %lb{last} : {t} to {_FOR}
          %mb{last}, %rb{last} = transform.loop.peel %lbf{last} : ({_FOR}) -> ({t}, {t})
          %opsb{last} = transform.structured.match interface{{LinalgOp}} in %mb{last} : ({t}) -> {t}
          transform.annotate %opsb{last} "{a}" : {t}
          %epiR{last} = transform.structured.match attributes{{{EPILOGUE_ATTR}}} in %rb{last} : ({t}) -> {t}
"""
        block_vectors += f"""    %bc{b} = transform.structured.match attributes{{{CONTRACT_ATTR}, {a}}} in %f : ({t}) -> {t}
    transform.foreach %bc{b} : {t} {{
    ^bb0(%o: {t}):
      transform.structured.vectorize %o vector_sizes [1, {b}, {nr}, 1] : {t}
    }}
    %br{b} = transform.structured.match attributes{{{a}}} in %f : ({t}) -> {t}
    transform.foreach %br{b} : {t} {{
    ^bb0(%o: {t}):
      transform.structured.vectorize %o vector_sizes [1, {b}, {nr}] : {t}
    }}
"""
    return f"""module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: {t} {{transform.readonly}}) {{
    %f0 = {_match("func.func", "%root")}
    %epi = transform.structured.match attributes{{{EPILOGUE_ATTR}}} in %root : ({t}) -> {t}
{block}    %tiled, %lb, %ln, %lm = transform.structured.fuse %epi{blocked} tile_sizes [1, {mr}, {nr}] interchange [0, 2, 1] : ({t}) -> ({t}, {t}, {t}, {t})
    %lmf = transform.cast %lm : {t} to {_FOR}
    transform.foreach %lmf : {_FOR} {{
    ^bb0(%l0: {_FOR}):
      transform.sequence %l0 : {_FOR} failures(suppress) {{
      ^bb1(%l: {_FOR}):
        %mainM, %remM = transform.loop.peel %l : ({_FOR}) -> ({t}, {t})
        transform.foreach %remM : {t} {{
        ^bb2(%r: {t}):
          %epiR = transform.structured.match attributes{{{EPILOGUE_ATTR}}} in %r : ({t}) -> {t}
{row_blocks}          %tr, %lr = transform.structured.fuse %epiR{last} tile_sizes [0, 1, 0] : ({t}) -> ({t}, {t})
          %rowOps = transform.structured.match interface{{LinalgOp}} in %lr : ({t}) -> {t}
          transform.annotate %rowOps "{ONE_ROW_ATTR}" : {t}
        }}
      }}
    }}
    %mm = transform.structured.match attributes{{{CONTRACT_ATTR}}} in %lb : ({t}) -> {t}
    %tk, %lk = transform.structured.tile_using_for %mm tile_sizes [0, 0, 0, 1] : ({t}) -> ({t}, {t})
    %f = transform.apply_registered_pass "scf-for-loop-peeling" to %f0 : ({t}) -> {t}
{pm('''      transform.apply_patterns.tensor.fold_tensor_empty
      transform.apply_patterns.scf.for_loop_canonicalization
      transform.apply_patterns.canonicalization
''')}    transform.apply_cse to %f : {t}
{canon}{block_vectors}    %rowContractions = transform.structured.match attributes{{{CONTRACT_ATTR}, {ONE_ROW_ATTR}}} in %f : ({t}) -> {t}
    transform.foreach %rowContractions : {t} {{
    ^bb0(%o: {t}):
      transform.structured.vectorize %o vector_sizes [1, 1, {nr}, 1] : {t}
    }}
    %rowRest = transform.structured.match attributes{{{ONE_ROW_ATTR}}} in %f : ({t}) -> {t}
    transform.foreach %rowRest : {t} {{
    ^bb0(%o: {t}):
      transform.structured.vectorize %o vector_sizes [1, 1, {nr}] : {t}
    }}
    %contractions = transform.structured.match attributes{{{CONTRACT_ATTR}}} in %f : ({t}) -> {t}
    transform.foreach %contractions : {t} {{
    ^bb0(%o: {t}):
      transform.structured.vectorize %o vector_sizes [1, {mr}, {nr}, 1] : {t}
    }}
    %rest = transform.structured.match interface{{LinalgOp}} in %f : ({t}) -> {t}
    transform.foreach %rest : {t} {{
    ^bb0(%o: {t}):
      transform.structured.vectorize %o vector_sizes [1, {mr}, {nr}] : {t}
    }}
{pm('''      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.reduction_to_contract
''')}{pm('''      transform.apply_patterns.vector.cast_away_vector_leading_one_dim
''')}{canon}{pm('''      transform.apply_patterns.vector.lower_masked_transfers
''')}    %loops = {_match("scf.for", "%f")}
    transform.foreach %loops : {t} {{
    ^bb0(%l: {t}):
      transform.loop.hoist_loop_invariant_subsets %l : {t}
    }}
{canon}    transform.yield
  }}
}}
"""


def epilogue_lowering_script() -> str:
    """After bufferization, for ``epilogue_script``'s kernels: the vector
    contractions and transfers to FMAs, loads and stores, and the K loops
    around the FMAs marked "do not unroll" (as ``matmul_script``)."""
    t = _ANY
    return f"""module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: {t} {{transform.readonly}}) {{
    %f = {_match("func.func", "%root")}
    transform.apply_patterns to %f {{
      transform.apply_patterns.vector.cast_away_vector_leading_one_dim
      transform.apply_patterns.memref.alloc_to_alloca size_limit(4096)
    }} : {t}
    transform.bufferization.buffer_loop_hoisting %f : {t}
{_lower_tail("%f")}    %fmas = {_match("vector.fma", "%f")}
    %kloops = transform.get_parent_op %fmas {{op_name = "scf.for", deduplicate}} : ({t}) -> {t}
    %no_unroll = transform.param.constant #llvm.loop_annotation<unroll = #llvm.loop_unroll<disable = true>> -> !transform.any_param
    transform.annotate %kloops "loop_annotation" = %no_unroll : {t}, !transform.any_param
    transform.yield
  }}
}}
"""


def prefetch_next_panel(module: "ir.Module", locality: str = "2") -> int:
    """Before each ``vector.load`` of a packed B (a kernel argument ``[P, K,
    nr]``, ``packed_script``) at ``[p, k, 0]`` with ``p`` a loop's induction
    variable (the panel loop), a ``memref.prefetch`` (to L2: ``locality``)
    of the same row of the next panel, ``[min(p + 1, P - 1), k, 0]``: one
    cache line per step of K for a 16-float panel. A block of K reads a
    slice of each panel, and the slices lie ``K * nr`` floats apart: the
    hardware prefetcher does not carry a stream from one into the next (nor
    reliably across pages where K is one block); the weights of a model's product are cold (in
    L3 at best) when it is called, and the first register tile of every
    panel waited on them. The tiles after the first prefetch lines already
    near (cheap: one load slot per ``mr`` broadcasts and FMAs). Returns the
    loads given prefetches."""
    from compiler.mlir import arith, ir, memref, walk_ops
    n = 0
    for op in walk_ops(module, lambda o: o.name == "vector.load"):
        base = op.operands[0]
        if not isinstance(base, ir.BlockArgument) or ir.MemRefType(base.type).rank != 3:
            continue
        p, k, j = list(op.operands)[1:4]
        owner = p.owner if isinstance(p, ir.BlockArgument) else None
        if owner is None or owner.owner.name != "scf.for":
            continue
        line = 64 // (ir.FloatType(ir.MemRefType(base.type).element_type).width // 8)
        width = ir.VectorType(op.result.type).shape[-1]
        with ir.InsertionPoint(op), op.location:
            idx = ir.IndexType.get()
            one = arith.constant(idx, 1)
            last = arith.subi(memref.dim(base, arith.constant(idx, 0)), one)
            nxt = arith.minui(arith.addi(p, one), last)
            for c in range(0, width, line):
                col = arith.addi(j, arith.constant(idx, c)) if c else j
                memref.PrefetchOp(base, [nxt, k, col], False, int(locality), True)
        n += 1
    return n


def prefetch_copy_rows(module: "ir.Module", distance: str = "8") -> int:
    """Before each piece of a B block's copy (``matmul_script``'s ``nb``
    with ``copy_rows``: a ``linalg.copy`` of ``copy_rows`` rows of a view
    of B into the block's buffer, in a loop over the block's rows), a
    ``memref.prefetch`` (to L1) of the first and the last 64-byte line of
    each of the same rows of the block ``distance`` rows further on (at
    most B's last row and column). B's rows are a multiple of 4 KiB apart
    there (``runtime.rows.aliased_packed``), each row segment of the block
    in another page, so the hardware prefetchers do not run ahead of the
    copy into the next row, and the copy of a block from memory waited on
    each row in turn; the hardware fetches the lines between once a row's
    first is in (every line prefetched: 0.89-0.95 of the plain copy's time
    from memory, against 0.96 here, but 2% slower from the L3;
    docs/benchmarks.md, "Issue 17's M = 32 on AVX2: the copy of B from
    memory"). Returns the copies given prefetches."""
    from compiler.mlir import arith, ir, memref
    dist, n = int(distance), 0
    idx = ir.IndexType.get()
    for copy, view, rows, width in _block_copies(module):
        b, row0, col0 = view.operands[0], view.operands[1], view.operands[2]
        with ir.InsertionPoint(copy), copy.location:
            one = arith.constant(idx, 1)
            last_row = arith.subi(memref.dim(b, arith.constant(idx, 0)), one)
            last_col = arith.subi(memref.dim(b, one), one)
            cols = [arith.minui(arith.addi(col0, arith.constant(idx, c)), last_col)
                    for c in (0, width - 1)]
            for i in range(rows):
                row = arith.minui(arith.addi(row0, arith.constant(idx, dist + i)), last_row)
                for col in cols:
                    memref.PrefetchOp(b, [row, col], False, 3, True)
        n += 1
    return n


def _block_copies(module: "ir.Module") -> "list[tuple]":
    """The pieces of B blocks' copies (``matmul_script``'s ``nb`` with
    ``copy_rows``): each ``linalg.copy`` of a view of a 2-D B (offsets
    dynamic) in a loop of constant step over the block's rows, into a
    buffer of static row pitch, as (copy, B's view, rows per piece, pitch)."""
    from compiler.mlir import ir, walk_ops
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    found = []
    for copy in walk_ops(module, lambda o: o.name == "linalg.copy"):
        loop, view = copy.operation.parent, copy.operands[0].owner
        if (loop.name != "scf.for" or isinstance(view, ir.Block) or view.name != "memref.subview"
                or ir.MemRefType(view.operands[0].type).rank != 2
                or list(ir.DenseI64ArrayAttr(view.attributes["static_offsets"])) != [dynamic, dynamic]):
            continue
        rows = _constant(loop.operands[2])
        width = ir.MemRefType(copy.operands[1].type).get_strides_and_offset()[0][0]
        if rows is not None and width != dynamic:
            found.append((copy, view, rows, width))
    return found


def vector_copy_rows(module: "ir.Module", width: str = "8") -> int:
    """Each whole piece of a B block's copy (``_block_copies``: ``copy_rows``
    rows of the block's full pitch, ``nb`` columns) as vector loads and
    stores of ``width`` elements, straight-line; the pieces at B's last
    columns or rows (fewer) keep the ``linalg.copy`` (an ``scf.if`` on the
    piece's sizes). The copy lowered to a libc ``memcpy`` per row (a call
    and a ``vzeroupper`` per 448 bytes at ``nb`` 112); LLVM turns a loop of
    such loads and stores back into that call, so the piece is unrolled.
    The same values: the same bits. Returns the copies rewritten."""
    from compiler.mlir import arith, ir, memref, scf, vector
    step, n = int(width), 0
    idx = ir.IndexType.get()
    for copy, _, rows, pitch in _block_copies(module):
        src, dst = copy.operands[0], copy.operands[1]
        if pitch % step:
            continue
        with ir.InsertionPoint(copy), copy.location:
            vt = ir.VectorType.get([step], ir.MemRefType(src.type).element_type)
            c = {v: arith.constant(idx, v) for v in sorted({1, rows, pitch, *range(rows), *range(0, pitch, step)})}
            whole = [arith.cmpi(arith.CmpIPredicate.eq, memref.dim(src, c[d]), c[size])
                     for d, size in ((0, rows), (1, pitch))]
            branch = scf.IfOp(arith.andi(*whole), [], has_else=True)
            with ir.InsertionPoint(branch.then_block):
                for r in range(rows):
                    for col in range(0, pitch, step):
                        vector.StoreOp(vector.LoadOp(vt, src, [c[r], c[col]]).result, dst, [c[r], c[col]])
                scf.yield_([])
            with ir.InsertionPoint(branch.else_block):
                copy.operation.move_before(scf.yield_([]).operation)
        n += 1
    return n


def sink_hoisted_deallocs(module: "ir.Module") -> int:
    """Move each ``memref.dealloc`` of a buffer allocated in a function's
    entry block (a promoted block of A that ``buffer_loop_hoisting`` moved
    out of the loops, leaving its dealloc inside them) to the end of that
    block, before its return: the buffer is allocated once per call and
    freed once. Returns the deallocs moved."""
    from compiler.mlir import ir, walk_ops
    n = 0
    for func in walk_ops(module, lambda o: o.name == "func.func"):
        entry = func.regions[0].blocks[0]
        ret = list(entry.operations)[-1]
        for op in walk_ops(func, lambda o: o.name == "memref.dealloc"):
            owner = op.operands[0].owner
            if isinstance(owner, ir.Block) or owner.name != "memref.alloc" \
                    or owner.parent.operation != func.operation \
                    or op.operation.parent.operation == func.operation:
                continue
            op.operation.move_before(ret)
            n += 1
    return n


def _panel_of_row(row: "ir.Value", mr: "ir.Value", step: int, cache: dict) -> "tuple":
    """The panel and the row within it (index values) of ``row``, a row of a
    copied block of A in panels of ``step`` rows. A register tile's rows are
    its loop's variable plus 0 to ``step - 1`` (``(d0) -> (d0 + c)``); where
    that loop starts at 0 and steps by a multiple of ``step`` the panel is
    the variable / ``step`` for all of them (one address for the tile's
    loads), else ``row`` / and % ``step``. Built before the first user."""
    from compiler.mlir import arith, ir
    base, c = row, 0
    owner = row.owner
    if not isinstance(owner, ir.Block) and owner.name == "affine.apply":
        m = re.fullmatch(r"affine_map<\(d0\) -> \(d0 \+ (\d+)\)>", str(owner.attributes["map"]))
        if m and int(m.group(1)) < step:
            base, c = owner.operands[0], int(m.group(1))
    if isinstance(base, ir.BlockArgument) and base.owner.owner.name == "scf.for" and base.arg_number == 0:
        loop = base.owner.owner
        lo, st = (_constant(v) for v in list(loop.operands)[0:3:2])
        if lo is not None and st is not None and lo % step == 0 and st % step == 0:
            if base not in cache:
                with ir.InsertionPoint.at_block_begin(base.owner), loop.location:
                    cache[base] = arith.divui(base, arith.constant(ir.IndexType.get(), step))
            return cache[base], arith.constant(ir.IndexType.get(), c)
    return arith.divui(row, mr), arith.remui(row, mr)


def _constant(v: "ir.Value") -> "int | None":
    """The value of an ``arith.constant`` index, else None."""
    from compiler.mlir import ir
    o = v.owner
    if isinstance(o, ir.Block) or o.name != "arith.constant":
        return None
    return ir.IntegerAttr(o.attributes["value"]).value


def _copy_to_panels(src: "ir.Value", panels: "ir.Value", step: int) -> None:
    """Loops copying ``src`` (rows x K, after a unit batch where ``panels``
    has one) into ``panels`` ([(1,) rows / step, kc, step]): the whole panels in loops panel, K, with the ``step`` rows of a
    panel unrolled (a store group LLVM's loop vectorizer interleaves), then
    the rows left (fewer than ``step``) in loops row, K."""
    from compiler.mlir import arith, ir, memref, scf
    idx = ir.IndexType.get()
    c0, c1, cm = (arith.constant(idx, v) for v in (0, 1, step))
    lead = [c0] * (ir.MemRefType(src.type).rank - 2)
    m, kc = (memref.dim(src, arith.constant(idx, len(lead) + d)) for d in (0, 1))
    whole = arith.divui(m, cm)

    def k_loop(body):
        ks = scf.ForOp(c0, kc, c1)
        with ir.InsertionPoint(ks.body):
            body(ks.induction_variable)
            scf.yield_([])

    ps = scf.ForOp(c0, whole, c1)
    with ir.InsertionPoint(ps.body):
        p = ps.induction_variable
        rows = [arith.addi(arith.muli(p, cm), arith.constant(idx, r)) for r in range(step)]
        k_loop(lambda k: [memref.store(memref.load(src, [*lead, i, k]), panels,
                                       [*lead, p, k, arith.constant(idx, r)]) for r, i in enumerate(rows)])
        scf.yield_([])
    rest = scf.ForOp(arith.muli(whole, cm), m, c1)
    with ir.InsertionPoint(rest.body):
        i = rest.induction_variable
        k_loop(lambda k: memref.store(memref.load(src, [*lead, i, k]), panels,
                                      [*lead, whole, k, arith.remui(i, cm)]))
        scf.yield_([])


def pack_a_panels(module: "ir.Module", mr: str = "6") -> int:
    """Lay each copied block of A (``pack_a``: a static ``mc x kc`` view of
    the buffer ``transform.structured.promote`` made, filled by a
    ``linalg.copy`` and read by the register tiles' one-element loads) out
    in panels of ``mr`` rows, K-major: element (i, k) at panel i / mr, k *
    mr + i % mr (a ``[mc / mr, kc, mr]`` view of the same buffer). A
    register tile then reads its ``mr`` rows of A from one stream (a row
    tile is one panel: tiles start at multiples of ``mr`` and the remainder
    rows' tiles fall in the last panel), as OpenBLAS's packed A; the copy
    becomes loops rows, K. The same values in the same FMAs: the same bits.
    Returns the blocks laid out."""
    from compiler.mlir import arith, ir, memref, scf, vector, walk_ops
    step, n = int(mr), 0
    for view in walk_ops(module, lambda o: o.name == "memref.view"):
        t = ir.MemRefType(view.result.type)
        users = [u.owner for u in view.result.uses]
        subs = [u for u in users if u.name == "memref.subview"]
        loads = [u for u in users if u.name == "vector.load"]
        lead = t.shape[:-2]  # a batch_matmul's block: [1, mc, kc]
        if (t.rank not in (2, 3) or not t.has_static_shape or lead not in ([], [1])
                or t.shape[-2] % step or len(subs) != 1
                or len(subs) + len(loads) != len(users)
                or any(ir.VectorType(o.result.type).shape != [1] for o in loads)):
            continue
        copies = [u.owner for u in subs[0].result.uses]
        if len(copies) != 1 or copies[0].name != "linalg.copy" or len(copies[0].operands) != 2:
            continue
        copy, idx = copies[0], ir.IndexType.get()
        with ir.InsertionPoint(view), view.location:
            panels = memref.ViewOp(ir.MemRefType.get([*lead, t.shape[-2] // step, t.shape[-1], step],
                                                     t.element_type),
                                   view.operands[0], view.operands[1], []).result
        cache: dict = {}
        for load in loads:
            *b, row, k = list(load.operands)[1:]
            with ir.InsertionPoint(load), load.location:
                p, r = _panel_of_row(row, arith.constant(idx, step), step, cache)
                new = vector.LoadOp(load.result.type, panels, [*b, p, k, r])
            load.result.replace_all_uses_with(new.result)
            load.erase()
        with ir.InsertionPoint(copy), copy.location:
            _copy_to_panels(copy.operands[0], panels, step)
        copy.erase()
        subs[0].erase()
        view.erase()
        n += 1
    return n


def c_after_k(module: "ir.Module") -> int:
    """Start each register tile's loop over K (the loops ``matmul_script``
    marks "do not unroll", carrying the tile's accumulators) at zero, and
    add the tile of C to its result after the loop, before the store: a
    block of K is summed from zero, then added to C (OpenBLAS's order). The
    loop no longer waits on C's loads, nor do they follow the previous
    tile's stores to the same page offsets (C's rows a multiple of 4 KiB
    apart: docs/benchmarks.md, "The AVX2 micro-kernel against OpenBLAS's
    Haswell kernel"). Another rounding than the one chain over all of K.
    A loop without accumulators is left as it was: the 1 x 1 x 1 corner
    tiles (the rows past the last whole ``mr`` rows, in the columns past
    the last half panel) fold C in each step of K, in the one chain.
    Returns the loops rewritten."""
    from compiler.mlir import arith, ir, vector, walk_ops
    n = 0
    for loop in walk_ops(module, lambda o: o.name == "scf.for" and "loop_annotation" in o.attributes):
        if len(loop.results) != 1:
            continue
        res = loop.results[0]
        stores = []  # (the value stored, its store)
        for use in res.uses:
            o = use.owner
            pairs = [(res, o)] if o.name == "vector.store" else \
                [(o.result, u.owner) for u in o.result.uses] if o.name == "vector.extract" else []
            if not pairs or any(st.name != "vector.store" or st.operands[0] != v for v, st in pairs):
                stores = []
                break
            stores += pairs
        if not stores:
            continue
        vt = ir.VectorType(res.type)
        with ir.InsertionPoint(loop), loop.location:
            loop.operands[3] = arith.constant(vt, ir.DenseElementsAttr.get_splat(
                vt, ir.FloatAttr.get(vt.element_type, 0.0)))
        for value, store in stores:
            with ir.InsertionPoint(store), store.location:
                c = vector.LoadOp(value.type, store.operands[1], list(store.operands)[2:]).result
                store.operands[0] = arith.addf(c, value)
        n += 1
    return n


def tune_cpu(module: "ir.Module", cpu: str) -> int:
    """Schedule ``module``'s code with LLVM's model and tuning of ``cpu``
    (``family.TUNE_CPU_ATTR``, read by ``pipeline.tune_functions``) instead
    of the target's; its instructions stay the target's. Returns 1."""
    from compiler.codegen.family import TUNE_CPU_ATTR
    from compiler.mlir import ir
    module.operation.attributes[TUNE_CPU_ATTR] = ir.StringAttr.get(cpu)
    return 1


#: The ``py:`` steps of this module's scripts.
REWRITES = {"prefetch_next_panel": prefetch_next_panel, "sink_hoisted_deallocs": sink_hoisted_deallocs,
             "pack_a_panels": pack_a_panels, "c_after_k": c_after_k, "tune_cpu": tune_cpu,
             "prefetch_copy_rows": prefetch_copy_rows, "vector_copy_rows": vector_copy_rows}
