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
   so the main tiles are exactly ``mr x nr`` and the remainders are static;
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
"""
from __future__ import annotations

from compiler.codegen.family import CROP_ATTR, DIRECT_CONV_ATTR  # marks (target-neutral)
from compiler.mlir import ir, vector, walk_ops

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


def conv_scripts(*, mr: int, nr: int, nr1: int) -> tuple[str, ...]:
    """The strategy steps of the direct convolution: transform scripts and
    ``py:`` rewrites, in order (see the module docstring)."""
    t = _ANY
    tile = f"py:tile_direct_conv {mr} {nr} {nr1}"
    vectorize = _HEAD + f"""    %g = {_marked(DIRECT_CONV_ATTR)}
    transform.structured.vectorize %g : {t}
    %copies = {_match("linalg.copy", "%root")}
    transform.structured.vectorize %copies : {t}
    %crop = {_marked(CROP_ATTR)}
    transform.structured.vectorize %crop : {t}
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
    return (tile, "py:fold_unit_dims", vectorize, "py:single_reduction_contracts", lower)


def tile_script(mr: int, nr: int, cout: int, npix: int) -> str:
    """Step 1 for one generic of ``cout`` channels and ``npix`` pixels: a loop
    is peeled only where the tile does not divide it (peeling a divisible
    loop fails)."""
    t = _ANY
    peel = ""
    for loop, extent, tile in (("%lco", cout, mr), ("%lp", npix, nr)):
        if extent % tile and extent > tile:
            peel += (f"      %f{loop[1:]} = transform.cast {loop} : {t} to {_FOR}\n"
                     f"      %m{loop[1:]}, %r{loop[1:]} = transform.loop.peel %f{loop[1:]} "
                     f": ({_FOR}) -> ({t}, {t})\n")
    return _HEAD + f"""    %all = {_marked(DIRECT_CONV_ATTR)}
    transform.foreach %all : {t} {{
    ^bb0(%g: {t}):
      %t0, %ln, %lp, %lco, %lc, %lkh, %lkw = transform.structured.tile_using_for %g tile_sizes [1, {mr}, {nr}, 1, 1, 1] interchange = [0, 2, 1, 3, 4, 5] : ({t}) -> ({t}, {t}, {t}, {t}, {t}, {t}, {t})
""" + peel + "    }\n" + _apply("transform.apply_patterns.canonicalization") + _TAIL


def tile_direct_conv(module: "ir.Module", mr: str, nr: str, nr1: str | None = None) -> int:
    """Step 1 (``tile_script``) on the ``DIRECT_CONV_ATTR`` generics (the
    phases of one convolution: one accumulator shape), the peeling chosen
    from their static extents. A generic of one output channel (a depthwise
    conv's, a channel at a time) is tiled ``1 x nr1``: its one weight per tap
    is broadcast once for ``nr1`` pixels. Returns the count."""
    from compiler.codegen.cpu.pipeline import apply_transform
    convs = walk_ops(module, lambda o: o.name == "linalg.generic"
                     and DIRECT_CONV_ATTR in o.attributes)
    shapes = [ir.ShapedType(op.operands[len(op.operands) - 1].type).shape for op in convs]
    distinct = {tuple(s) for s in shapes}
    if len(distinct) > 1:   # one script tiles every marked generic
        raise ValueError(f"direct convolutions of several accumulator shapes in one module: "
                         f"{sorted(distinct)}")
    for _, cout, npix in distinct:
        rows, cols = (1, int(nr1 or nr)) if cout == 1 else (int(mr), int(nr))
        apply_transform(module, tile_script(rows, cols, cout, npix))
    # the copies in (padding) and out (the crop), a row at a time, long rows
    # in ROW_VECTOR pieces (the vectorizer makes one vector of the whole tile)
    copies = walk_ops(module, lambda o: o.name == "linalg.copy" or (
        o.name == "linalg.generic" and CROP_ATTR in o.attributes))
    for k, op in enumerate(copies):
        shape = ir.ShapedType(op.operands[len(op.operands) - 1].type).shape
        if len(shape) != 4:
            raise ValueError(f"direct convolution: a copy of rank {len(shape)} ({shape}); "
                             f"the schedule tiles [N, C, H, W] copies")
        attr = f"fuelc.row_copy_{k}"
        op.attributes[attr] = ir.UnitAttr.get()
        apply_transform(module, row_copy_script(attr, shape[3]))
    return len(convs)


#: Elements of a row copied by one vector (a longer row is copied in pieces:
#: a whole 1600-wide row of a 1-D conv as one vector took LLVM a minute).
ROW_VECTOR = 64


def row_copy_script(attr: str, width: int) -> str:
    """Tile the ``attr``-marked copy ``[N, C, H, W]`` to rows, and a row
    wider than ``ROW_VECTOR`` to pieces of it (the remainder peeled: every
    piece static, vectorized without masks)."""
    t = _ANY
    cols = ROW_VECTOR if width > ROW_VECTOR else 0
    loops = ", ".join([t] * (4 if cols else 3))
    names = ", ".join(f"%l{i}" for i in range(4 if cols else 3))
    peel = ""
    if cols and width % cols:
        peel = (f"    %fl = transform.cast %l3 : {t} to {_FOR}\n"
                f"    %ml, %rl = transform.loop.peel %fl : ({_FOR}) -> ({t}, {t})\n")
    return _HEAD + f"""    %ops = {_marked(attr)}
    %tiled, {names} = transform.structured.tile_using_for %ops tile_sizes [1, 1, 1, {cols}] : ({t}) -> ({t}, {loops})
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


#: The ``py:`` steps a strategy's transform may name.
REWRITES = {"tile_direct_conv": tile_direct_conv, "fold_unit_dims": fold_unit_dims,
            "single_reduction_contracts": single_reduction_contracts}
