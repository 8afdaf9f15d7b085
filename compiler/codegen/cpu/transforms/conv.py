"""The direct convolution schedule (docs/architecture.md, "Convolutions on CPU").

The cpu ``Conv2D`` kernel (``lowering/fused_conv.py``) computes a stride-1
convolution as one ``linalg.generic`` marked ``DIRECT_CONV_ATTR``, over loops
(n, co, p | c, kh, kw): ``out[n, co, p] += x[n, c, p + kh*dh*Wp + kw*dw] *
w[co, c, kh, kw]``, where x is the zero-padded input flattened per channel
(``[N, C, (Hp+1)*Wp]``) and p runs over ``Ho*Wp`` full-width output rows. Every
tap of the window is then a unit-stride run of the flat plane: no im2col, no
packing. The schedule, in three transform scripts with two rewrites between
them (the ``py:`` steps of the strategy, ``REWRITES``):

1. tile (n, co, p, c, kh, kw) by (1, mr, nr, 1, 1, 1) in loop order n, p, co,
   c, kh, kw (a strip of ``nr`` pixels of every input channel stays in L1/L2
   while the ``mr``-channel blocks of the output pass over it); peel co and p,
   so the main tiles are exactly ``mr x nr`` and the remainders are static
   (a channel remainder too short for the FMA latency shares the last whole
   tile's channels: ``last_blocks``);
2. ``fold_unit_dims``: inside a tile the reduction loops have extent 1, so
   the tap offset ``p + kh*Wp + kw`` reads as ``p``: the rewrite substitutes 0
   for extent-1 loop dims in compound map results, which leaves projected
   permutations the vectorizer accepts (upstream's unit-dim folding does not
   apply to these buffers and maps);
3. vectorize; ``single_reduction_contracts``: each tile's contraction has
   three unit reduction dims (c, kh, kw) and a unit n, which the outer-product
   lowering does not take; the rewrite drops the unit dims (shape casts) and
   leaves ``(mr x 1) * (1 x nr)`` contractions;
4. as the matmul schedule: fold views, CSE + LICM, hoist the ``mr x nr``
   accumulator out of the c, kh, kw loops, lower to broadcasts and FMAs.

A depthwise kernel (a block of channels, output channel co reading plane co)
is tiled 1 x ``nr1``, channel by channel, and its row reads of the input get
prefetches of the next block's rows first (``prefetch_next_plane``); one whose
pixels are rows of a pitch of whole vectors (``DW_PITCH_ATTR``) is computed by
``depthwise_rows`` instead, blocks of output rows sharing their input loads.
"""
from __future__ import annotations

from compiler.codegen.family import last_blocks
from compiler.codegen.family import (CROP_ATTR, DIRECT_CONV_ATTR, DIRECT_ROWS_ATTR,  # marks
                                     DIRECT_STACKED_ATTR, DW_PITCH_ATTR, TUNE_CPU_ATTR)
from compiler.mlir import arith, ir, memref, scf, vector, walk_ops

from .matmul import _ANY, _FOR, _LOWER_VECTORS, _match

_HEAD = f"""module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: {_ANY} {{transform.readonly}}) {{
    %func = {_match("func.func", "%root")}
"""
_TAIL = """    transform.yield
  }
}
"""


def _marked(attr: str) -> str:
    """A transform op matching the ops marked ``attr`` (the direct conv's
    generics, its crop) in ``%root``."""
    return f"transform.structured.match attributes {{{attr}}} in %root : ({_ANY}) -> {_ANY}"


def _apply(*patterns: str, handle: str = "%func") -> str:
    body = "".join(f"      {p}\n" for p in patterns)
    return f"    transform.apply_patterns to {handle} {{\n{body}    }} : {_ANY}\n"


#: The most taps of one register tile that ``unroll_tap_loops`` unrolls into
#: the body of the input channels' loop (a 3x3 kernel's 9; a 5x5 keeps its
#: rows a loop of 5 unrolled taps each).
UNROLL_TAPS = 16


def conv_scripts(*, mr: int, nr: int, nr1: int, lanes: int, dw_accs: int,
                 accs: int, regs: int, least: int = 0, tune: str = "") -> tuple[str, ...]:
    """The strategy steps of the direct convolution: transform scripts and
    ``py:`` rewrites, in order (see the module docstring); ``least``: the
    fewest channels of a remainder tile (``last_blocks``); ``tune``: the
    LLVM tuning of a kernel with row tiles or stacked phases (``direct_rows``)."""
    t = _ANY
    tile = f"py:tile_direct_conv {mr} {nr} {nr1}" + (f" {least}" if least else "")
    vectorize = _HEAD + f"""    %g = {_marked(DIRECT_CONV_ATTR)}
    transform.structured.vectorize %g : {t}
    %copies = {_marked(ROW_COPY_ATTR)}
    transform.structured.vectorize %copies : {t}
""" + _apply("transform.apply_patterns.vector.transfer_permutation_patterns",
             "transform.apply_patterns.vector.reduction_to_contract") + _apply(
        "transform.apply_patterns.vector.cast_away_vector_leading_one_dim") + _TAIL
    lower = _HEAD + _apply("transform.apply_patterns.memref.fold_memref_alias_ops",
                           "transform.apply_patterns.canonicalization") + f"""    transform.apply_cse to %func : {t}
    %loops = {_match("scf.for", "%root")}
    transform.apply_licm to %loops : {t}
    %f2 = transform.structured.hoist_redundant_vector_transfers %func : ({t}) -> {t}
    transform.apply_patterns to %f2 {{
{_LOWER_VECTORS}    }} : {t}
""" + _apply("transform.apply_patterns.canonicalization", handle="%f2") + f"""    %fmas = {_match("vector.fma", "%f2")}
    %kloops = transform.get_parent_op %fmas {{op_name = "scf.for", deduplicate, allow_empty_results}} : ({t}) -> {t}
    %no_unroll = transform.param.constant #llvm.loop_annotation<unroll = #llvm.loop_unroll<disable = true>> -> !transform.any_param
    transform.annotate %kloops "loop_annotation" = %no_unroll : {t}, !transform.any_param
""" + _TAIL
    return ("py:prefetch_next_plane", f"py:depthwise_rows {lanes} {dw_accs}",
            f"py:direct_rows {lanes} {accs} {mr} {regs} {tune}".rstrip(), tile,
            "py:fold_unit_dims", vectorize,
            "py:single_reduction_contracts", lower, f"py:unroll_tap_loops {UNROLL_TAPS}",
            "py:roll_broadcasts")


def _channel_wise(op) -> bool:
    """Whether a direct-conv generic is a depthwise one (a block of
    channels: output channel co reads plane co, ``out[n, co, p] +=
    plane[n, co, p + ..] * w[co, 0, ..]``)."""
    m = ir.AffineMapAttr(ir.ArrayAttr(op.attributes["indexing_maps"])[0]).value
    return _dim(m.results[1]) == 1


def tile_script(mr: int, nr: int, cout: int, npix: int, by_channel: bool = False,
                least: int = 0) -> str:
    """Step 1 for one generic of ``cout`` channels and ``npix`` pixels: a loop
    is peeled only where the tile does not divide it (peeling a divisible
    loop fails). ``by_channel`` (a depthwise block, tiled 1 x nr): the
    channels outermost, each channel's pixels in turn. A remainder of fewer
    than ``least`` channels is balanced with the last whole tile
    (``last_blocks``): each pixel tile's channels are split there, the two
    parts tiled by ``mr`` and by the smaller block."""
    t = _ANY
    split = None if by_channel else last_blocks(mr, cout, least)
    if split:
        return _split_tile_script(mr, nr, cout, npix, *split)
    peel = "".join(_peel(loop) for loop, extent, tile in (("%lco", cout, mr), ("%lp", npix, nr))
                   if extent % tile and extent > tile)
    # the loop handles come in loop order
    order = "0, 1, 2, 3, 4, 5" if by_channel else "0, 2, 1, 3, 4, 5"
    loops = "%lco, %lp" if by_channel else "%lp, %lco"
    return _HEAD + f"""    %all = {_marked(DIRECT_CONV_ATTR)}
    transform.foreach %all : {t} {{
    ^bb0(%g: {t}):
      %t0, %ln, {loops}, %lc, %lkh, %lkw = transform.structured.tile_using_for %g tile_sizes [1, {mr}, {nr}, 1, 1, 1] interchange = [{order}] : ({t}) -> ({t}, {t}, {t}, {t}, {t}, {t}, {t})
""" + peel + "    }\n" + _apply("transform.apply_patterns.canonicalization") + _TAIL


def _peel(loop: str) -> str:
    """Peel the loop of handle ``loop`` (its last, partial tile apart)."""
    t = _ANY
    return (f"      %f{loop[1:]} = transform.cast {loop} : {t} to {_FOR}\n"
            f"      %m{loop[1:]}, %r{loop[1:]} = transform.loop.peel %f{loop[1:]} "
            f": ({_FOR}) -> ({t}, {t})\n")


def _split_tile_script(mr: int, nr: int, cout: int, npix: int, k: int, h: int) -> str:
    """``tile_script`` with the channels from ``k`` on tiled by ``h``: the
    pixels tiled by ``nr`` (n, p), each tile's channels split at ``k``, the
    first part tiled (co, c, kh, kw) by (mr, 1, 1, 1), the rest by (h, 1, 1, 1)."""
    t = _ANY
    tile = ("      %t{0}, %l{0}, %l{0}c, %l{0}kh, %l{0}kw = transform.structured.tile_using_for "
            "%{0} tile_sizes [0, {1}, 0, 1, 1, 1] : ({2}) -> ({2}, {2}, {2}, {2}, {2})\n")
    body = (f"      %t0, %ln, %lp = transform.structured.tile_using_for %g tile_sizes "
            f"[1, 0, {nr}, 0, 0, 0] : ({t}) -> ({t}, {t}, {t})\n")
    if k:
        body += (f"      %parts = transform.structured.split %t0 after {k} "
                 f"{{dimension = 1}} : {t}\n"
                 f"      %a, %b = transform.split_handle %parts : ({t}) -> ({t}, {t})\n"
                 + tile.format("a", mr, t) + tile.format("b", h, t))
    else:
        body += tile.format("t0", h, t).replace("%lt0", "%lb")
    if (cout - k) % h and cout - k > h:
        body += _peel("%lb")
    if npix % nr and npix > nr:
        body += _peel("%lp")
    return _HEAD + f"""    %all = {_marked(DIRECT_CONV_ATTR)}
    transform.foreach %all : {t} {{
    ^bb0(%g: {t}):
""" + body + "    }\n" + _apply("transform.apply_patterns.canonicalization") + _TAIL


def tile_direct_conv(module: "ir.Module", mr: str, nr: str, nr1: str | None = None,
                     least: str = "0") -> int:
    """Step 1 (``tile_script``) on the ``DIRECT_CONV_ATTR`` generics (the
    phases of one convolution: one accumulator shape), the peeling chosen
    from their static extents. A depthwise generic (one output channel, or a
    block whose channel co reads plane co: ``_channel_wise``) is tiled ``1 x
    nr1``, channel by channel: its one weight per tap is broadcast once for
    ``nr1`` pixels. Returns the count."""
    from compiler.codegen.cpu.pipeline import apply_transform
    convs = walk_ops(module, lambda o: o.name == "linalg.generic"
                     and DIRECT_CONV_ATTR in o.attributes)
    shapes = [ir.ShapedType(op.operands[len(op.operands) - 1].type).shape for op in convs]
    distinct = {tuple(s) for s in shapes}
    if len(distinct) > 1:   # one script tiles every marked generic
        raise ValueError(f"direct convolutions of several accumulator shapes in one module: "
                         f"{sorted(distinct)}")
    for _, cout, npix in distinct:
        if cout == 1 or all(_channel_wise(op) for op in convs):
            apply_transform(module, tile_script(1, int(nr1 or nr), cout, npix, by_channel=True))
        else:
            apply_transform(module, tile_script(int(mr), int(nr), cout, npix, least=int(least)))
    # the copies in (padding) and out (the crop), a row at a time, long rows
    # in ROW_VECTOR pieces (the vectorizer makes one vector of the whole tile),
    # and so the accumulator's fill ([N, C, pixels]: LLVM unrolled a small
    # one into scalar stores)
    copies = walk_ops(module, lambda o: o.name == "linalg.copy" or (
        o.name == "linalg.generic" and CROP_ATTR in o.attributes) or (
        o.name == "linalg.fill" and ir.ShapedType(o.operands[1].type).rank == 3))
    for k, op in enumerate(copies):
        shape = ir.ShapedType(op.operands[len(op.operands) - 1].type).shape
        if len(shape) != (3 if op.name == "linalg.fill" else 4):
            raise ValueError(f"direct convolution: a copy of rank {len(shape)} ({shape}); "
                             f"the schedule tiles [N, C, H, W] copies")
        attr = f"fuelc.row_copy_{k}"
        op.attributes[attr] = ir.UnitAttr.get()
        op.attributes[ROW_COPY_ATTR] = ir.UnitAttr.get()
        apply_transform(module, row_copy_script(attr, shape))
    return len(convs)


#: Marks the row-tiled copies and fills (``tile_direct_conv``) for the vectorizer.
ROW_COPY_ATTR = "fuelc.row_copy"


#: Elements of a row copied by one vector (a longer row is copied in pieces:
#: a whole 1600-wide row of a 1-D conv as one vector took LLVM a minute).
ROW_VECTOR = 64


def row_copy_script(attr: str, shape) -> str:
    """Tile the ``attr``-marked copy ``[N, C, H, W]`` (or fill ``[N, C,
    P]``) to rows, and a row wider than ``ROW_VECTOR`` to pieces of it (the
    remainder peeled: every piece static, vectorized without masks)."""
    t = _ANY
    rank, width = len(shape), shape[-1]
    cols = ROW_VECTOR if width > ROW_VECTOR else 0
    n = rank if cols else rank - 1
    loops = ", ".join([t] * n)
    names = ", ".join(f"%l{i}" for i in range(n))
    peel = ""
    if cols and width % cols:
        peel = (f"    %fl = transform.cast %l{rank - 1} : {t} to {_FOR}\n"
                f"    %ml, %rl = transform.loop.peel %fl : ({_FOR}) -> ({t}, {t})\n")
    sizes = ", ".join(["1"] * (rank - 1) + [str(cols)])
    return _HEAD + f"""    %ops = {_marked(attr)}
    %tiled, {names} = transform.structured.tile_using_for %ops tile_sizes [{sizes}] : ({t}) -> ({t}, {loops})
""" + peel + _apply("transform.apply_patterns.canonicalization") + _TAIL


def _dim(e) -> int | None:
    return ir.AffineDimExpr(e).position if isinstance(e, ir.AffineDimExpr) else None


def fold_unit_dims(module: "ir.Module", *marks: str) -> int:
    """In every ``DIRECT_CONV_ATTR`` generic (or those carrying one of
    ``marks``, when given): the loop dims of extent 1 (read
    off the operand shapes through plain-dim map results) become 0 inside the
    compound results of its maps; a result that becomes the constant 0 reads
    an operand dim of extent 1 and is spelled as an unused extent-1 dim, so
    every map stays a projected permutation. Returns the ops rewritten."""
    n = 0
    marks = marks or (DIRECT_CONV_ATTR, CROP_ATTR)
    for op in walk_ops(module, lambda o: o.name == "linalg.generic"
                       and any(m in o.attributes for m in marks)):
        maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
        nd = maps[0].n_dims
        extent: dict[int, int] = {}
        for m, v in zip(maps, op.operands):
            for e, size in zip(m.results, ir.ShapedType(v.type).shape):
                if _dim(e) is not None and size >= 0:
                    extent[_dim(e)] = size
        unit = [d for d in range(nd) if extent.get(d) == 1]
        if not unit:
            continue
        zero = ir.AffineMap.get(nd, 0, [ir.AffineConstantExpr.get(0) if d in unit
                                        else ir.AffineDimExpr.get(d) for d in range(nd)])
        new, changed = [], False
        for m in maps:
            used = {_dim(e) for e in m.results}
            results = []
            for e in m.results:
                if _dim(e) is None and not isinstance(e, ir.AffineConstantExpr):
                    e2 = e.compose(zero)
                    if str(e2) == "0":   # compose() returns a plain AffineExpr
                        free = [d for d in unit if d not in used]
                        if not free:
                            results.append(e)
                            continue
                        e2 = ir.AffineDimExpr.get(free[0])
                        used.add(free[0])
                    changed |= str(e2) != str(e)
                    e = e2
                results.append(e)
            new.append(ir.AffineMapAttr.get(ir.AffineMap.get(nd, 0, results)))
        if DIRECT_CONV_ATTR in op.attributes and _channel_wise(op) and \
                extent.get(1) == extent.get(3) == 1:
            # a one-channel tile of a depthwise block: its plane read through
            # the unit reduction dim c (n, c, p), as a one-channel conv's, so
            # the tile's contraction is the axpy ``single_reduction_contracts``
            # takes (through co the weight was broadcast along the pixels)
            first = ir.AffineMapAttr(new[0]).value
            new[0] = ir.AffineMapAttr.get(ir.AffineMap.get(nd, 0, [
                first.results[0], ir.AffineDimExpr.get(3), *list(first.results)[2:]]))
            changed = True
        if changed:
            op.attributes["indexing_maps"] = ir.ArrayAttr.get(new)
            n += 1
    return n


def single_reduction_contracts(module: "ir.Module") -> int:
    """Rewrite each ``vector.contract`` whose reduction dims all have extent
    1 (and that has two parallel dims of extent > 1, or fewer) into a
    contraction over (m, n, k) of its operands shape-cast without the other
    unit dims, operands ordered (m, k) x (k, n); the result is cast back.
    Returns the contractions rewritten."""
    n = 0
    for op in walk_ops(module, lambda o: o.name == "vector.contract"):
        its = ["reduction" in str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
        maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
        lhs, rhs, acc = op.operands[0], op.operands[1], op.operands[2]
        if not isinstance(acc.type, ir.VectorType):
            continue
        extent: dict[int, int] = {}
        for m, v in zip(maps, (lhs, rhs, acc)):
            for e, size in zip(m.results, ir.VectorType(v.type).shape):
                extent[_dim(e)] = size
        red = [d for d, r in enumerate(its) if r]
        par = [d for d, r in enumerate(its) if not r]
        if len(par) == 1 and red and all(extent.get(d) == 1 for d in red):
            n += _axpy(op, maps, par[0])
            continue
        if len(red) < 2 and len(par) <= 2 or any(extent.get(d) != 1 for d in red):
            continue
        big = [d for d in par if extent.get(d, 1) > 1]
        if len(big) > 2:
            continue
        keep_par = (big + [d for d in par if d not in big])[:2]
        keep_par.sort()
        if len(keep_par) < 2:
            continue
        order = {keep_par[0]: 0, keep_par[1]: 1, red[0]: 2}   # m, n, k

        def squeeze(v, m):
            t = ir.VectorType(v.type)
            kept = [(order[_dim(e)], s) for e, s in zip(m.results, t.shape) if _dim(e) in order]
            nt = ir.VectorType.get([s for _, s in kept], t.element_type)
            cast = v if list(nt.shape) == list(t.shape) else vector.ShapeCastOp(nt, v).result
            return cast, [d for d, _ in kept]

        with ir.InsertionPoint(op), op.location:
            a, am = squeeze(lhs, maps[0])
            b, bm = squeeze(rhs, maps[1])
            c, cm = squeeze(acc, maps[2])
            if 0 not in am:
                a, am, b, bm = b, bm, a, am
            if sorted(am) != [0, 2] or sorted(bm) != [1, 2] or cm != [0, 1]:
                continue

            def amap(r):
                return ir.AffineMapAttr.get(ir.AffineMap.get(3, 0, [ir.AffineDimExpr.get(d)
                                                                    for d in r]))
            iters = ir.ArrayAttr.get([ir.Attribute.parse(f"#vector.iterator_type<{k}>")
                                      for k in ("parallel", "parallel", "reduction")])
            new = vector.ContractionOp(c.type, a, b, c, [amap(am), amap(bm), amap([0, 1])],
                                       iters, kind=op.attributes["kind"]).result
            if new.type != acc.type:
                new = vector.ShapeCastOp(acc.type, new).result
        op.result.replace_all_uses_with(new)
        op.erase()
        n += 1
    return n


def _axpy(op, maps, p: int) -> int:
    """A contraction of one parallel dim ``p`` and unit reductions (a one-channel
    tile: ``acc[p] += x[.., p] * w[..]``, w one element) as ``vector.fma`` of x
    and w broadcast; the outer-product lowering would take it element by
    element. Returns 1 when rewritten."""
    lhs, rhs, acc = op.operands[0], op.operands[1], op.operands[2]
    if "add" not in str(op.attributes["kind"]):
        return 0
    x, w = (lhs, rhs) if p in {_dim(e) for e in maps[0].results} else (rhs, lhs)
    at, wt = ir.VectorType(acc.type), ir.VectorType(w.type)
    if ir.VectorType(x.type).shape.count(1) != ir.VectorType(x.type).rank - 1 or \
            any(s != 1 for s in wt.shape):
        return 0
    with ir.InsertionPoint(op), op.location:
        xs = vector.ShapeCastOp(at, x).result if x.type != at else x
        w1 = vector.ShapeCastOp(ir.VectorType.get([1], wt.element_type), w).result
        new = vector.FMAOp(xs, vector.BroadcastOp(at, w1).result, acc).result
    op.result.replace_all_uses_with(new)
    op.erase()
    return 1


def prefetch_next_plane(module: "ir.Module", locality: str = "2") -> int:
    """Before each ``vector.transfer_read`` of a row of a kernel argument's
    channel plane (a depthwise conv's ``_scatter_rows``: a read from a
    ``memref.subview`` of an argument ``[N, C, H, W]``, or of its
    ``memref.cast``, at a dynamic channel), a ``memref.prefetch`` (to L2:
    ``locality``) of the same row one channel block further (the subview's
    channels; the last channel prefetches itself), one per cache line the
    read covers. Its lines arrive while this block is computed in L1,
    instead of stalling the next block's reads. Returns the reads given
    prefetches."""
    n = 0
    for op in walk_ops(module, lambda o: o.name == "vector.transfer_read"):
        if not isinstance(op.operands[0], ir.OpResult):
            continue
        view = op.operands[0].owner
        if view.name != "memref.subview":
            continue
        base = view.operands[0]
        while isinstance(base, ir.OpResult) and base.owner.name == "memref.cast":
            base = base.owner.operands[0]
        if not isinstance(base, ir.BlockArgument) or ir.MemRefType(base.type).rank != 4:
            continue
        static = list(ir.DenseI64ArrayAttr(view.attributes["static_offsets"]))
        dyn = iter(list(view.operands)[1:])
        channels = ir.ShapedType(base.type).shape[1]
        if static[1] != ir.ShapedType.get_dynamic_stride_or_offset() or channels < 0:
            continue
        elt = ir.MemRefType(base.type).element_type
        line = 64 // (ir.FloatType(elt).width // 8)
        width = ir.VectorType(op.result.type).shape[-1]
        idx = list(op.operands)[1:5]
        with ir.InsertionPoint(op), op.location:
            at = [next(dyn) if v == ir.ShapedType.get_dynamic_stride_or_offset()
                  else arith.constant(ir.IndexType.get(), v) for v in static]
            full = [arith.addi(a, i) for a, i in zip(at, idx)]
            block = list(ir.DenseI64ArrayAttr(view.attributes["static_sizes"]))[1]
            full[1] = arith.minui(arith.addi(full[1], _const(block)), _const(channels - 1))
            for k in range(0, width, line):
                col = arith.addi(full[3], _const(k)) if k else full[3]
                memref.PrefetchOp(base, full[:3] + [col], False, int(locality), True)
        n += 1
    return n


def _const(v: int) -> "ir.Value":
    return arith.constant(ir.IndexType.get(), v)


#: Vectors of a depthwise row block's row computed together (``depthwise_rows``).
DW_ROW_VECTORS = 4


def depthwise_rows(module: "ir.Module", lanes: str, accs: str) -> int:
    """Each depthwise generic whose pixels are rows of a pitch of whole
    vectors (``DW_PITCH_ATTR``: ``acc[0, co, p] += plane[0, co, p + qy*A +
    qx*B] * w[co, 0, qy, qx]``, p < Ho*pitch) as explicit vector code, channel
    by channel: blocks of R output rows x V vectors of ``lanes`` pixels (R*V
    <= ``accs`` accumulators in registers, V <= ``DW_ROW_VECTORS``), the
    weights broadcast once per channel. A block loads each input vector it
    reads once (aligned when the tap's column offset is 0), whichever of its
    rows and taps read it: an input row feeds Kh output rows, where the
    1 x nr1 tiles of ``tile_direct_conv`` loaded it once per tap, misaligned
    (a cache-line split per 512-bit load). The block walks its input rows in
    order, so every pixel still sums its taps in (qy, qx) order. A zero fill of the accumulator just before is dropped
    (the block starts from zero). Returns the generics rewritten."""
    n, lanes0, accs = 0, int(lanes), int(accs)
    for op in walk_ops(module, lambda o: o.name == "linalg.generic" and (
            DW_PITCH_ATTR in o.attributes
            or DIRECT_ROWS_ATTR in o.attributes and _channel_wise(o))):
        plane, w, acc = op.operands[0], op.operands[1], op.operands[2]
        _, k, npix = ir.ShapedType(acc.type).shape
        kh, kw = ir.ShapedType(w.type).shape[2:]
        lanes = lanes0
        if DW_PITCH_ATTR in op.attributes:
            pitch = ir.IntegerAttr(op.attributes[DW_PITCH_ATTR]).value
            if pitch % lanes or npix % pitch or not _channel_wise(op):
                raise ValueError(f"depthwise_rows: {op.name} marked {DW_PITCH_ATTR}={pitch} "
                                 f"with {npix} pixels is not rows of whole {lanes}-lane vectors")
            nv, rows = pitch // lanes, npix // pitch
        else:   # the first whole vectors of each row of Wq pixels (``direct_rows``)
            pitch, rows, wo = list(ir.DenseI64ArrayAttr(op.attributes[DIRECT_ROWS_ATTR]))
            lanes = _row_lanes(lanes, wo)
            nv = -(-wo // lanes)
            if nv * lanes > pitch or nv > 2 * DW_ROW_VECTORS:
                continue
        tap = ir.AffineMapAttr(ir.ArrayAttr(op.attributes["indexing_maps"])[0]).value.results[2]
        a, b = (_coefficient(tap, d, 6) for d in (4, 5))
        chunks = -(-nv // DW_ROW_VECTORS)
        sizes = [nv // chunks + (i < nv % chunks) for i in range(chunks)]
        r = min(rows, max(1, accs // sizes[0]))
        zero = _zero_fill_before(op, acc)
        elt = ir.ShapedType(acc.type).element_type
        with ir.InsertionPoint(op), op.location:
            vt = ir.VectorType.get([lanes], elt)
            c = ir.IndexType.get()

            def at(base, off):
                return arith.addi(base, arith.constant(c, off)) if off else base

            def block(co, wv, base, nrows):
                for i, nvec in enumerate(sizes):
                    j0 = sum(sizes[:i]) * lanes
                    out = {(y, v): at(base, y * pitch + j0 + v * lanes)
                           for y in range(nrows) for v in range(nvec)}
                    sums = {yv: arith.constant(vt, ir.DenseElementsAttr.get_splat(
                        vt, ir.FloatAttr.get(elt, 0.0))) if zero else
                        vector.LoadOp(vt, acc, [_const(0), co, i]).result for yv, i in out.items()}
                    # input rows in order, each vector loaded once for every
                    # (output row, tap row) reading it: a row's taps stay in
                    # (qy, qx) order, and a loaded vector is live briefly
                    readers = {}
                    for y in range(nrows):
                        for qy in range(kh):
                            readers.setdefault(y * pitch + qy * a, []).append((y, qy))
                    for row in sorted(readers):
                        for qx in range(kw):
                            for v in range(nvec):
                                off = row + qx * b + j0 + v * lanes
                                x = vector.LoadOp(vt, plane, [_const(0), co, at(base, off)]).result
                                for y, qy in readers[row]:
                                    sums[y, v] = vector.FMAOp(x, wv[qy][qx], sums[y, v]).result
                    for yv, i in out.items():
                        vector.StoreOp(sums[yv], acc, [_const(0), co, i])

            per_channel = scf.ForOp(_const(0), _const(k), _const(1))
            with ir.InsertionPoint(per_channel.body):
                co = per_channel.induction_variable
                wv = [[vector.BroadcastOp(vt, memref.LoadOp(
                    w, [co, _const(0), _const(qy), _const(qx)]).result).result
                    for qx in range(kw)] for qy in range(kh)]
                full, tail = divmod(rows, r)
                if full:
                    blocks = scf.ForOp(_const(0), _const(full * r * pitch), _const(r * pitch))
                    with ir.InsertionPoint(blocks.body):
                        block(co, wv, blocks.induction_variable, r)
                        scf.YieldOp([])
                if tail:
                    block(co, wv, _const(full * r * pitch), tail)
                scf.YieldOp([])
        op.erase()
        if zero:
            zero.erase()
        n += 1
    return n


def _row_lanes(lanes: int, wo: int) -> int:
    """The vector width for rows of ``wo`` pixels: ``lanes``, halved while
    a vector would be half padding (AVX-512: 8x8 outputs in 8 lanes)."""
    while lanes > 8 and -(-wo // lanes) * lanes - wo >= lanes // 2:
        lanes //= 2
    return lanes


#: The most vectors of one output row a ``direct_rows`` tile holds.
ROW_TILE_VECTORS = 4
#: Rows of more column blocks than this are left to the flat tiles: their
#: padding columns are a small share (3x3 64->64 at 56^2: 2 of 58, no faster
#: as rows), and each block is a copy of the tile's code (a conv1d's
#: 800-column row: 50 blocks, 2 -> 20 s to compile).
ROW_COLUMN_BLOCKS = 2


def direct_rows(module: "ir.Module", lanes: str, accs: str, mr: str, regs: str,
                tune: str = "") -> int:
    """Each groups-1 direct-conv generic marked ``DIRECT_ROWS_ATTR`` ``[Wq,
    Ho, Wo]`` (``acc[0, co, p] += plane[0, c, p + qy*A + qx*B] * w[co, c, qy,
    qx]``, pixel p = oy*Wq + ox) as explicit vector code that computes only
    the first ``V*lanes >= Wo`` columns of each output row (the flat tiles of
    ``tile_direct_conv`` computed all Wq columns, the padding's too: 8x8
    outputs of a 10-wide plane are 25% more FMAs). Register tiles of m output
    channels x R rows x V vectors (``_row_tile``), the tile's accumulators
    carried through an ``scf.for`` over the input channels whose body is
    every tap, unrolled: per tap R*V plane loads, then per channel its
    weight broadcast and its R*V FMAs. Each pixel sums its taps in (c, qy,
    qx) order from the accumulator's value, as the tiled schedule does: the
    same bits. A row of more vectors is cut into column blocks of at most
    ``ROW_TILE_VECTORS`` (more than ``ROW_COLUMN_BLOCKS``: left to the flat
    tiles); a 16-lane vector that would be half padding is
    halved (AVX-512: 8x8 outputs in 8 lanes); where whole vectors would run
    past the row pitch (Wo = 28 of a 30-wide plane in 8-lane vectors) the
    generic is left to ``tile_direct_conv``. With ``tune`` (an LLVM CPU name)
    a module that has such tiles, or a generic of stacked stride phases
    (``DIRECT_STACKED_ATTR``: every tap of a channel in one block too), is
    marked ``TUNE_CPU_ATTR`` (``strategy._BLOCK_TUNE``). Returns the generics
    rewritten."""
    n, lanes0, accs, mr0, regs = 0, int(lanes), int(accs), int(mr), int(regs)
    if tune and walk_ops(module, lambda o: DIRECT_STACKED_ATTR in o.attributes):
        module.operation.attributes[TUNE_CPU_ATTR] = ir.StringAttr.get(tune)
    for op in walk_ops(module, lambda o: o.name == "linalg.generic"
                       and DIRECT_ROWS_ATTR in o.attributes and not _channel_wise(o)):
        wq, ho, wo = list(ir.DenseI64ArrayAttr(op.attributes[DIRECT_ROWS_ATTR]))
        lanes = _row_lanes(lanes0, wo)
        nv = -(-wo // lanes)
        if nv * lanes > wq:
            continue
        plane, w, acc = op.operands[0], op.operands[1], op.operands[2]
        cout, cin, kh, kw = ir.ShapedType(w.type).shape
        tap = ir.AffineMapAttr(ir.ArrayAttr(op.attributes["indexing_maps"])[0]).value.results[2]
        a, b = (_coefficient(tap, d, 6) for d in (4, 5))
        elt = ir.ShapedType(acc.type).element_type
        chunks = -(-nv // ROW_TILE_VECTORS)
        vmax = min(-(-nv // chunks), max(1, accs // min(mr0, cout)))
        cols = [(j, min(vmax, nv - j)) for j in range(0, nv, vmax)]   # (first vector, count)
        if len(cols) > ROW_COLUMN_BLOCKS:
            continue
        # the channels of a tile: mr, or a divisor of Co (no remainder tile)
        m0, _ = _row_tile(sorted({min(mr0, cout)} | {d for d in range(1, accs + 1)
                                                     if cout % d == 0}), vmax, ho, kw, accs, regs)
        with ir.InsertionPoint(op), op.location:
            vt = ir.VectorType.get([lanes], elt)

            def at(base, off):
                return arith.addi(base, _const(off)) if off else base

            def tile(co, m, row0, r, j0, v):
                """The tile of channels co.. co+m, rows row0.. row0+r (row0 an
                index: oy*Wq), vectors j0.. j0+v of each row."""
                out = [(i, y, k) for i in range(m) for y in range(r) for k in range(v)]
                pix = {(y, k): at(row0, y * wq + (j0 + k) * lanes)
                       for y in range(r) for k in range(v)}
                init = [vector.LoadOp(vt, acc, [_const(0), at(co, i), pix[y, k]]).result
                        for i, y, k in out]
                loop = scf.ForOp(_const(0), _const(cin), _const(1), init)
                with ir.InsertionPoint(loop.body):
                    c = loop.induction_variable
                    sums = dict(zip(out, loop.inner_iter_args))
                    for qy in range(kh):
                        for qx in range(kw):
                            # the plane's vectors, then per channel its weight
                            # broadcast just before its FMAs (live: the
                            # accumulators, R*V vectors and one weight)
                            xs = {(y, k): vector.LoadOp(vt, plane, [
                                _const(0), c, at(pix[y, k], qy * a + qx * b)]).result
                                for y in range(r) for k in range(v)}
                            for i in range(m):
                                wv = vector.BroadcastOp(vt, memref.LoadOp(
                                    w, [at(co, i), c, _const(qy), _const(qx)]).result).result
                                for (y, k), x in xs.items():
                                    sums[i, y, k] = vector.FMAOp(x, wv, sums[i, y, k]).result
                    scf.YieldOp([sums[t] for t in out])
                for t, s in zip(out, loop.results):
                    vector.StoreOp(s, acc, [_const(0), at(co, t[0]), pix[t[1], t[2]]])

            def channel_block(co, m):
                for j0, v in cols:
                    _, r = _row_tile([m], v, ho, kw, accs, regs)
                    full, tail = divmod(ho, r)
                    if full > 1:
                        rows = scf.ForOp(_const(0), _const(full * r * wq), _const(r * wq))
                        with ir.InsertionPoint(rows.body):
                            tile(co, m, rows.induction_variable, r, j0, v)
                            scf.YieldOp([])
                    elif full:
                        tile(co, m, _const(0), r, j0, v)
                    if tail:
                        tile(co, m, _const(full * r * wq), tail, j0, v)

            whole, rest = divmod(cout, m0)
            blocks = scf.ForOp(_const(0), _const(whole * m0), _const(m0))
            with ir.InsertionPoint(blocks.body):
                channel_block(blocks.induction_variable, m0)
                scf.YieldOp([])
            if rest:
                channel_block(_const(whole * m0), rest)
        op.erase()
        n += 1
    if tune and n:
        module.operation.attributes[TUNE_CPU_ATTR] = ir.StringAttr.get(tune)
    return n


#: Independent accumulators a tile wants at least (two FMA pipes x 4 cycles
#: of latency), before it is judged by its loads per FMA (``_row_tile``).
MIN_ACCS = 8

#: How many vectors the live registers ``_row_tile`` counts may exceed the
#: register file by: LLVM then stores and reloads one of the plane vectors
#: kept for the next tap row, not an accumulator (docs/architecture.md, "Rows
#: of whole vectors"). AVX2 3x3 64->64 at 8x8 (a ResNet's second stage) takes
#: 6 channels x 2 rows (12 accumulators, 17 vectors counted) instead of 4 x 2.
REUSE_SLACK = 1


def _row_tile(ms, v: int, ho: int, kw: int, accs: int, regs: int) -> tuple[int, int]:
    """(m, R) of a ``direct_rows`` tile of V vectors per row, m taken from
    ``ms``: at most ``accs`` accumulators m*R*V whose live registers fit in
    ``regs`` (a plane vector of row y+1 is the one of row y a tap row later,
    and LLVM keeps such a load for its second use: (R-1)*V*Kw of them, plus
    the tap's V loads and a weight; ``REUSE_SLACK`` over the register file
    allowed), at least ``MIN_ACCS`` where any tile
    has that many, then the fewest loads (R*V plane vectors, m broadcasts)
    per FMA."""
    best = None
    for m in ms:
        for r in range(1, ho + 1):
            n = m * r * v
            if n > accs or n + (r - 1) * v * kw + v + 1 > regs + REUSE_SLACK:
                break
            key = (min(n, MIN_ACCS), -(r * v + m) / n)
            if best is None or key > best[0]:
                best = (key, m, r)
    return (best[1], best[2]) if best else (min(ms), 1)


def _coefficient(e, d: int, nd: int) -> int:
    """The coefficient of dim ``d`` in the affine expression ``e`` of ``nd``
    dims, linear in it."""
    one = ir.AffineMap.get(nd, 0, [ir.AffineConstantExpr.get(int(i == d)) for i in range(nd)])
    zero = ir.AffineMap.get(nd, 0, [ir.AffineConstantExpr.get(0)] * nd)
    return int(str(e.compose(one))) - int(str(e.compose(zero)))


def _zero_fill_before(op, buf):
    """The ``linalg.fill`` of 0 into ``buf`` that is the last op before ``op``
    in its block to use ``buf`` (nested uses included), if any."""
    last = None
    for o in op.operation.block.operations:
        if o == op.operation:
            break
        if _uses(o.operation, buf):
            last = o.operation
    if last is None or last.name != "linalg.fill" or last.operands[1] != buf or \
            not isinstance(last.operands[0], ir.OpResult):
        return None
    cst = last.operands[0].owner
    if cst.name != "arith.constant" or ir.FloatAttr(cst.attributes["value"]).value != 0.0:
        return None
    return last


def _uses(op, value) -> bool:
    found = []

    def visit(o):
        if any(v == value for v in o.operands):
            found.append(o)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE
    op.walk(visit)
    return bool(found)


def _trip(loop) -> int | None:
    """The static trip count of the ``scf.for`` ``loop``, None if not static."""
    def const(v):
        op = v.owner
        if isinstance(op, ir.Block) or op.name != "arith.constant":
            return None
        return ir.IntegerAttr(op.attributes["value"]).value
    lo, hi, step = (const(v) for v in list(loop.operands)[:3])
    return None if None in (lo, hi, step) else len(range(lo, hi, step))


def _carries_vectors(op) -> bool:
    """Whether ``op`` is an ``scf.for`` carrying vectors only (accumulators)."""
    return op is not None and op.name == "scf.for" and bool(op.results) and all(
        isinstance(r.type, ir.VectorType) for r in op.results)


#: Attribute of the loops ``unroll_tap_loops`` unrolls (level and factor).
_UNROLL_ATTR = "fuelc.unroll_taps"


def unroll_tap_loops(module: "ir.Module", limit: str) -> int:
    """Fully unroll the tap loops (qy, qx) of each direct-conv register
    tile, from the innermost out while their trip counts multiply to at most
    ``limit``: a tile's FMAs sit in the loop the ``lower`` script marked not
    to unroll (its ``loop_annotation``), which for a stride-2 phase of 2 x 2
    taps was a 2-trip loop inside a 2-trip loop inside the input channels'
    loop: a counter, a multiply for the weight's address and a branch per
    12 FMAs, and the accumulators passed through two loop headers per tap.
    The mark moves to the first loop left (the input channels': LLVM must
    not unroll it, it rotates accumulators and spills). Only loops carrying
    vectors (the hoisted accumulators) with static bounds. Returns the loops
    unrolled."""
    from compiler.codegen.cpu.pipeline import apply_transform
    limit = int(limit)
    levels: dict[tuple[int, int], int] = {}
    for loop in walk_ops(module, lambda o: o.name == "scf.for" and "loop_annotation" in o.attributes
                         and any(op.name == "vector.fma"
                                 for op in o.operation.regions[0].blocks[0].operations)):
        note, taps, level, cur = loop.attributes["loop_annotation"], 1, 0, loop
        # a tap loop carries the accumulators and is inside another loop that
        # does (the input channels' loop, its parent, carries them from the
        # tile's loads)
        while _carries_vectors(cur) and _carries_vectors(cur.parent):
            trip = _trip(cur)
            if trip is None or taps * trip > limit:
                break
            taps *= trip
            cur.attributes[_UNROLL_ATTR] = ir.DenseI64ArrayAttr.get([level, trip])
            levels[level, trip] = levels.get((level, trip), 0) + 1
            cur, level = cur.parent.opview, level + 1
        if level:
            del loop.attributes["loop_annotation"]
            cur.attributes["loop_annotation"] = note
    t = _ANY
    for level, trip in sorted(levels):
        match = (f'transform.structured.match attributes {{{_UNROLL_ATTR} = '
                 f'array<i64: {level}, {trip}>}} in %root : ({t}) -> {t}')
        apply_transform(module, _HEAD + f"""    %l = {match}
    %f = transform.cast %l : {t} to {_FOR}
    transform.loop.unroll %f {{ factor = {trip} }} : {_FOR}
""" + _TAIL)
    return sum(levels.values())


#: Attribute of the generics ``roll_broadcasts`` lowers to rolled loops.
_ROLLED_ATTR = "fuelc.rolled"


def roll_broadcasts(module: "ir.Module") -> int:
    """Lower each generic that only copies an input (the bias broadcast
    that starts a conv's accumulators) to loops LLVM must not unroll: on a
    small image (a 16 x 16 plane of 32 channels) its O3 unrolled the fill into
    a thousand vector stores, 0.25 MB of IR and 1 s of LLVM per kernel,
    none of it faster to run. Returns the generics."""
    from compiler.codegen.cpu.pipeline import apply_transform
    found = walk_ops(module, lambda o: o.name == "linalg.generic"
                     and DIRECT_CONV_ATTR not in o.attributes
                     and len(o.regions[0].blocks[0].operations) == 1
                     and "reduction" not in str(o.attributes["iterator_types"]))
    for op in found:
        op.attributes[_ROLLED_ATTR] = ir.UnitAttr.get()
    if found:
        t = _ANY
        apply_transform(module, _HEAD + f"""    %g = {_marked(_ROLLED_ATTR)}
    %loops = transform.structured.convert_to_loops %g : ({t}) -> {t}
    %no_unroll = transform.param.constant #llvm.loop_annotation<unroll = #llvm.loop_unroll<disable = true>> -> !transform.any_param
    transform.annotate %loops "loop_annotation" = %no_unroll : {t}, !transform.any_param
""" + _TAIL)
    return len(found)


#: The ``py:`` steps a strategy's transform may name.
REWRITES = {"tile_direct_conv": tile_direct_conv, "fold_unit_dims": fold_unit_dims,
            "unroll_tap_loops": unroll_tap_loops, "roll_broadcasts": roll_broadcasts,
            "single_reduction_contracts": single_reduction_contracts,
            "prefetch_next_plane": prefetch_next_plane, "depthwise_rows": depthwise_rows,
            "direct_rows": direct_rows}
