"""Per-op GPU strategies of the CUDA pipeline, keyed by the linalg structure.

After bufferization (named ops generalized, parallel dims first) every
``linalg.generic`` of the host function is offered to the strategies of
``STRATEGIES`` in order; the first that matches replaces it by a
``gpu.launch_func`` of a kernel it writes directly as a ``gpu.func`` (static
shapes, the op's own body cloned into it). An op no strategy matches stays on
the generic path (tiled ``scf.parallel``, one thread per output, a serial
loop over reduced dims).

* ``matmul-smem``   ``C[b.., m, n] += A[.., m, k] * B[.., k, n]`` on f32
                    (MatMul, FusedLinear, batched matmul): 16x16 output
                    tiles per block, the k loop walks 16-wide tiles of A and
                    B staged in workgroup memory between ``gpu.barrier``s,
                    each thread accumulates one output in a register; edges
                    are guarded (zero-filled tiles, a guarded store).
* ``row-reduce``    reductions over the trailing dims whose every reduced
                    output combines its accumulator with one op (addf,
                    maximumf, ... on f32/i32): one block per row, each
                    thread strides over the row accumulating, then
                    ``gpu.all_reduce`` (warp shuffles and a workgroup
                    buffer once lowered), thread 0 combines with the
                    output's initial value. Element-wise outputs of the same
                    op (softmax's exponentials) are stored in the same pass.
* ``grid-stride``   element-wise ops over more than ``GRID_STRIDE_MIN``
                    elements: a bounded grid (``GRID_CAP`` blocks of 256
                    threads), each thread loops with stride gridDim*blockDim.

Kernel names carry the strategy (``<entry>_<strategy>_<i>``, see
``strategy_of``), so the launch list of a program says which one ran.
Only operands that are dense row-major function arguments or allocations
are handled (a view operand keeps the generic path).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

from compiler.errors import PipelineError
from compiler.codegen.common.stages import write_reproducer
from compiler.mlir import MLIRError, ir

#: Threads per block of the row-reduction and grid-stride kernels.
BLOCK = 256
#: Output tile edge of the shared-memory matmul (TILE x TILE threads).
TILE = 16
#: Blocks of a grid-stride kernel (8 blocks of 256 threads on 132 SMs).
GRID_CAP = 1056
#: Element-wise ops larger than this become grid-stride loops.
GRID_STRIDE_MIN = GRID_CAP * BLOCK
#: Rows shorter than this keep one thread per row (a block per row would idle).
ROW_MIN = 32

_COMBINE = {  # combiner op -> (gpu.all_reduce kind, identity by element type)
    "arith.addf": ("add", {"f32": "0.0"}),
    "arith.mulf": ("mul", {"f32": "1.0"}),
    "arith.maximumf": ("maximumf", {"f32": "0xFF800000"}),
    "arith.minimumf": ("minimumf", {"f32": "0x7F800000"}),
    "arith.maxnumf": ("maxnumf", {"f32": "0xFF800000"}),
    "arith.minnumf": ("minnumf", {"f32": "0x7F800000"}),
    "arith.addi": ("add", {"i32": "0"}),
    "arith.muli": ("mul", {"i32": "1"}),
    "arith.maxsi": ("maxsi", {"i32": str(-2 ** 31)}),
    "arith.minsi": ("minsi", {"i32": str(2 ** 31 - 1)}),
}


@dataclasses.dataclass(frozen=True)
class GpuStrategy:
    """One strategy: ``match(generic) -> plan or None``, ``emit(plan, name)
    -> (gpu.module text, grid, block)``."""

    name: str
    match: Callable
    emit: Callable


# -- reading a linalg.generic on memrefs ---------------------------------------------------
@dataclasses.dataclass
class Generic:
    op: object
    ins: list
    outs: list
    maps: list            # per operand: list of ("d", pos) / ("c", value)
    iters: list[str]
    bounds: list[int]
    body: object          # the region's block


def _dense(value) -> bool:
    """A dense row-major memref that is a function argument or an allocation."""
    try:
        t = ir.MemRefType(value.type)
    except ValueError:
        return False
    if not t.has_static_shape or (isinstance(t.layout, ir.AffineMapAttr)
                                  and t.layout.value != ir.AffineMap.get_identity(t.rank)):
        return False
    return isinstance(value.owner, ir.Block) or value.owner.name == "memref.alloc"


def read_generic(op) -> Generic | None:
    if op.name != "linalg.generic" or len(op.regions[0].blocks) != 1:
        return None
    n_in, n_out = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])
    operands = list(op.operands)
    if not all(_dense(v) for v in operands):
        return None
    maps = []
    for a in ir.ArrayAttr(op.attributes["indexing_maps"]):
        m = ir.AffineMapAttr(a).value
        res = []
        for e in m.results:
            e = e.maybe_downcast()
            if isinstance(e, ir.AffineDimExpr):
                res.append(("d", e.position))
            elif isinstance(e, ir.AffineConstantExpr):
                res.append(("c", e.value))
            else:
                return None
        maps.append(res)
    iters = ["reduction" if "reduction" in str(a) else "parallel"
             for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    bounds = [None] * len(iters)
    for v, m in zip(operands, maps):
        for (kind, pos), n in zip(m, ir.MemRefType(v.type).shape):
            if kind == "d":
                bounds[pos] = n
    if None in bounds or 0 in bounds:
        return None  # an empty op keeps the generic path (no zero-sized grids)
    return Generic(op, operands[:n_in], operands[n_in:n_in + n_out], maps, iters, bounds,
                   op.regions[0].blocks[0])


def _elt(value) -> str:
    return str(ir.MemRefType(value.type).element_type)


def _ty(value) -> str:
    return str(value.type)


def _body_ops(g: Generic):
    ops = list(g.body.operations)
    return ops[:-1], ops[-1]


def _captured_ok(g: Generic) -> bool:
    """Every value the body uses from outside is an arith.constant (cloned
    into the kernel), and no body op has regions."""
    for op in g.body.operations:
        if len(op.regions) and any(len(r.blocks) for r in op.regions):
            return False
        for v in op.operands:
            if isinstance(v.owner, ir.Block):
                if v.owner != g.body:
                    return False
            elif v.owner.operation.parent.operation != g.op and v.owner.name != "arith.constant":
                return False
    return True


# -- kernel text helpers ----------------------------------------------------------------
class _Text:
    """A gpu.func body under construction (one SSA name per line)."""

    def __init__(self):
        self.lines: list[str] = []
        self.n = 0
        self.consts: dict = {}
        self.prologue: list[str] = []

    def fresh(self) -> str:
        self.n += 1
        return f"%v{self.n}"

    def op(self, text: str) -> str:
        name = self.fresh()
        self.lines.append(f"{name} = {text}")
        return name

    def index(self, value: int) -> str:
        if value not in self.consts:  # hoisted: usable in every nested region
            self.consts[value] = self.fresh()
            self.prologue.append(f"{self.consts[value]} = arith.constant {value} : index")
        return self.consts[value]

    def body(self) -> list[str]:
        return self.prologue + self.lines

    def delinearize(self, flat: str, extents: list[int]) -> list[str]:
        """Row-major indices of ``flat`` (less than their product) over
        ``extents``."""
        out = []
        for i, n in enumerate(reversed(extents)):
            if i == len(extents) - 1:
                out.append(flat)  # the outermost index needs no remainder
                continue
            if n == 1:
                out.append(self.index(0))
                continue
            out.append(self.op(f"arith.remui {flat}, {self.index(n)} : index"))
            flat = self.op(f"arith.divui {flat}, {self.index(n)} : index")
        return out[::-1]

    def access(self, m, dims: list[str]) -> str:
        return ", ".join(dims[p] if k == "d" else self.index(p) for k, p in m)


def _placeholder(t: _Text, g: Generic, loaded: list[str], dims: list[str],
                 results: list[str]) -> list[str]:
    """A ``fuel.body`` op standing for the generic's body (``substitute_body``
    replaces it): operands the loaded inputs, the outputs' (unused) values
    as the loaded inputs' first, then the loop dims; results typed as
    ``results``."""
    names = [t.fresh() for _ in results]
    operands = loaded + dims
    types = [str(ir.MemRefType(v.type).element_type) for v in g.ins] + ["index"] * len(dims)
    lhs = ", ".join(names)
    t.lines.append(f"{lhs} = \"fuel.body\"({', '.join(operands)}) : ({', '.join(types)}) -> "
                   f"({', '.join(results)})")
    return names


def _kernel(name: str, args: list, body: list[str], block: tuple) -> str:
    params = ", ".join(f"%a{i}: {_ty(v)}" for i, v in enumerate(args))
    inner = "\n      ".join(body)
    known = ", ".join(map(str, block))
    return (f"gpu.module @{name} {{\n  gpu.func @{name}({params}) kernel attributes "
            f"{{known_block_size = array<i32: {known}>}} {{\n"
            f"      {inner}\n      gpu.return\n  }}\n}}")


# -- row reductions -------------------------------------------------------------------------
def match_row_reduce(g: Generic):
    red = [i for i, k in enumerate(g.iters) if k == "reduction"]
    if not red or red != list(range(len(g.iters) - len(red), len(g.iters))):
        return None
    npar = len(g.iters) - len(red)
    row = math.prod(g.bounds[npar:])
    if row < ROW_MIN or math.prod(g.bounds[:npar]) >= 2 ** 31 or not _captured_ok(g):
        return None
    ops, yld = _body_ops(g)
    args = list(g.body.arguments)
    acc_args = args[len(g.ins):]
    combines = {}
    for i, (out, m) in enumerate(zip(g.outs, g.maps[len(g.ins):])):
        pos = [p for k, p in m if k == "d"]
        v = yld.operands[i]
        if sorted(pos) == list(range(len(g.iters))) and len(pos) == len(m):
            continue  # an element-wise output
        if pos != list(range(npar)) or len(m) != npar:
            return None
        owner = v.owner
        if isinstance(owner, ir.Block) or owner.name not in _COMBINE:
            return None
        kind, ident = _COMBINE[owner.name]
        if _elt(out) not in ident:
            return None
        a, b = owner.operands
        if a == acc_args[i]:
            elem = b
        elif b == acc_args[i]:
            elem = a
        else:
            return None
        if elem in acc_args or any(u.owner.operation != yld.operation for u in owner.result.uses):
            return None  # accumulators combined together, or a partial result read
        combines[i] = (owner.operation, kind, ident[_elt(out)], elem)
    if not combines:
        return None
    skip = [c[0] for c in combines.values()]
    for op in ops:
        if op.operation in skip:
            continue
        if any(v in acc_args for v in op.operands):
            return None  # the accumulator feeds more than its combiner
    if any(len(list(acc_args[i].uses)) for i in range(len(g.outs)) if i not in combines):
        return None
    return dict(npar=npar, row=row, combines=combines)


def emit_row_reduce(g: Generic, plan: dict, name: str):
    npar, row, combines = plan["npar"], plan["row"], plan["combines"]
    rows = math.prod(g.bounds[:npar])
    block = min(BLOCK, 32 * -(-row // 32))
    t = _Text()
    bid = t.op("gpu.block_id x")
    tid = t.op("gpu.thread_id x")
    pdims = t.delinearize(bid, g.bounds[:npar]) if npar else []
    inits = []
    for i, (_, _, ident, _) in sorted(combines.items()):
        ty = _elt(g.outs[i])
        inits.append(t.op(f"arith.constant {ident} : {ty}"))
    types = [_elt(g.outs[i]) for i in sorted(combines)]
    loop_res = t.fresh()
    iters = [f"%acc{i}" for i in sorted(combines)]
    nres = len(iters)
    header = (f"{loop_res}:{nres} = scf.for %j = {tid} to {t.index(row)} step "
              f"{t.index(block)} iter_args("
              + ", ".join(f"{a} = {b}" for a, b in zip(iters, inits))
              + f") -> ({', '.join(types)}) {{")
    t.lines.append(header)
    rdims = t.delinearize("%j", g.bounds[npar:])
    dims = pdims + rdims
    args = g.ins + g.outs
    loaded = [t.op(f"memref.load %a{k}[{t.access(g.maps[k], dims)}] : {_ty(v)}")
              for k, v in enumerate(g.ins)]
    elementwise = [i for i in range(len(g.outs)) if i not in combines]
    results = [_elt(g.outs[i]) for i in elementwise] + types
    vals = _placeholder(t, g, loaded, dims, results)
    for v, i in zip(vals, elementwise):
        k = len(g.ins) + i
        t.lines.append(f"memref.store {v}, %a{k}[{t.access(g.maps[k], dims)}] : {_ty(args[k])}")
    nxt = []
    for acc, v, i in zip(iters, vals[len(elementwise):], sorted(combines)):
        op = combines[i][0].name
        nxt.append(t.op(f"{op} {acc}, {v} : {_elt(g.outs[i])}"))
    t.lines.append(f"scf.yield {', '.join(nxt)} : {', '.join(types)}")
    t.lines.append("}")
    totals = []
    for r, i in enumerate(sorted(combines)):
        kind = combines[i][1]
        totals.append(t.op(f"gpu.all_reduce {kind} {loop_res}#{r} uniform {{}} : "
                           f"({types[r]}) -> ({types[r]})"))
    first = t.op(f"arith.cmpi eq, {tid}, {t.index(0)} : index")
    t.lines.append(f"scf.if {first} {{")
    for total, i in zip(totals, sorted(combines)):
        k = len(g.ins) + i
        where = f"%a{k}[{t.access(g.maps[k], pdims)}]"
        old = t.op(f"memref.load {where} : {_ty(args[k])}")
        new = t.op(f"{combines[i][0].name} {old}, {total} : {_elt(g.outs[i])}")
        t.lines.append(f"memref.store {new}, {where} : {_ty(args[k])}")
    t.lines.append("}")
    return _kernel(name, args, t.body(), (block, 1, 1)), (rows, 1, 1), (block, 1, 1), 0


# -- shared-memory matmul ----------------------------------------------------------------------
def match_matmul(g: Generic):
    nd = len(g.iters)
    if (nd < 3 or g.iters != ["parallel"] * (nd - 1) + ["reduction"] or len(g.ins) != 2
            or len(g.outs) != 1 or not all(_elt(v) == "f32" for v in g.ins + g.outs)):
        return None
    m_, n_, k_ = nd - 3, nd - 2, nd - 1
    cmap = g.maps[2]
    if cmap != [("d", i) for i in range(nd - 1)]:
        return None
    dims = [[p for k, p in m if k == "d"] for m in g.maps[:2]]
    if any(len(d) != len(m) for d, m in zip(dims, g.maps[:2])):
        return None

    def has(i, *want, absent=()):
        return all(w in dims[i] for w in want) and not any(a in dims[i] for a in absent)

    if -(-g.bounds[m_] // TILE) > 65535 or math.prod(g.bounds[:m_]) > 65535:
        return None  # grid y / z limits
    if has(0, m_, k_, absent=(n_,)) and has(1, k_, n_, absent=(m_,)):
        a, b = 0, 1
    elif has(1, m_, k_, absent=(n_,)) and has(0, k_, n_, absent=(m_,)):
        a, b = 1, 0
    else:
        return None
    ops, yld = _body_ops(g)
    if len(ops) != 2:
        return None
    mul, add = ops
    x, y, acc = g.body.arguments
    if (mul.name != "arith.mulf" or add.name != "arith.addf" or yld.operands[0] != add.result
            or {mul.operands[0], mul.operands[1]} != {x, y} or mul.operands[0] == mul.operands[1]
            or {add.operands[0], add.operands[1]} != {acc, mul.result}):
        return None
    return dict(a=a, b=b)


def emit_matmul(g: Generic, plan: dict, name: str):
    nd = len(g.iters)
    batch = g.bounds[:nd - 3]
    M, N, K = g.bounds[nd - 3:]
    a, b = plan["a"], plan["b"]
    t = _Text()
    tx, ty = t.op("gpu.thread_id x"), t.op("gpu.thread_id y")
    bx, by, bz = t.op("gpu.block_id x"), t.op("gpu.block_id y"), t.op("gpu.block_id z")
    bdims = t.delinearize(bz, batch) if batch else []
    row = t.op(f"arith.addi {t.op(f'arith.muli {by}, {t.index(TILE)} : index')}, {ty} : index")
    col = t.op(f"arith.addi {t.op(f'arith.muli {bx}, {t.index(TILE)} : index')}, {tx} : index")
    row_ok = t.op(f"arith.cmpi ult, {row}, {t.index(M)} : index")
    col_ok = t.op(f"arith.cmpi ult, {col}, {t.index(N)} : index")
    ok = t.op(f"arith.andi {row_ok}, {col_ok} : i1")
    zero = t.op("arith.constant 0.0 : f32")
    cty = _ty(g.outs[0])
    cidx = ", ".join(bdims + [row, col])

    def guarded(cond, operand, idx):
        v = t.fresh()
        t.lines.append(f"{v} = scf.if {cond} -> (f32) {{")
        x = t.op(f"memref.load %a{operand}[{idx}] : {_ty((g.ins + g.outs)[operand])}")
        t.lines += [f"scf.yield {x} : f32", "} else {", f"scf.yield {zero} : f32", "}"]
        return v

    init = guarded(ok, 2, cidx)  # the output C is operand 2 of the kernel
    res = t.fresh()
    t.lines.append(f"{res} = scf.for %k0 = {t.index(0)} to {t.index(K)} step {t.index(TILE)} "
                   f"iter_args(%acc = {init}) -> (f32) {{")
    ka = t.op(f"arith.addi %k0, {tx} : index")
    kb = t.op(f"arith.addi %k0, {ty} : index")
    ka_ok = t.op(f"arith.andi {row_ok}, {t.op(f'arith.cmpi ult, {ka}, {t.index(K)} : index')} : i1")
    kb_ok = t.op(f"arith.andi {col_ok}, {t.op(f'arith.cmpi ult, {kb}, {t.index(K)} : index')} : i1")
    m_, n_, k_ = nd - 3, nd - 2, nd - 1
    adims = bdims + [None] * 3
    adims[m_], adims[k_] = row, ka
    bdims_ = bdims + [None] * 3
    bdims_[k_], bdims_[n_] = kb, col
    va = guarded(ka_ok, a, t.access(g.maps[a], adims))
    vb = guarded(kb_ok, b, t.access(g.maps[b], bdims_))
    wg = f"memref<{TILE}x{TILE}xf32, #gpu.address_space<workgroup>>"
    raw = "memref<?xi8, #gpu.address_space<workgroup>>"
    t.prologue += [f"%smem = gpu.dynamic_shared_memory : {raw}",
                   f"%As = memref.view %smem[{t.index(0)}][] : {raw} to {wg}",
                   f"%Bs = memref.view %smem[{t.index(TILE * TILE * 4)}][] : {raw} to {wg}"]
    t.lines += [f"memref.store {va}, %As[{ty}, {tx}] : {wg}",
                f"memref.store {vb}, %Bs[{ty}, {tx}] : {wg}", "gpu.barrier"]
    s = t.fresh()
    t.lines.append(f"{s} = scf.for %kk = {t.index(0)} to {t.index(TILE)} step {t.index(1)} "
                   f"iter_args(%x = %acc) -> (f32) {{")
    pa = t.op(f"memref.load %As[{ty}, %kk] : {wg}")
    pb = t.op(f"memref.load %Bs[%kk, {tx}] : {wg}")
    p = t.op(f"arith.mulf {pa}, {pb} : f32")
    t.lines += [f"scf.yield {t.op(f'arith.addf %x, {p} : f32')} : f32", "}", "gpu.barrier",
                f"scf.yield {s} : f32", "}"]
    t.lines += [f"scf.if {ok} {{", f"memref.store {res}, %a2[{cidx}] : {cty}", "}"]
    grid = (-(-N // TILE), -(-M // TILE), max(1, math.prod(batch)))
    return (_kernel(name, g.ins + g.outs, t.body(), (TILE, TILE, 1)), grid, (TILE, TILE, 1),
            2 * TILE * TILE * 4)


# -- grid-stride element-wise ----------------------------------------------------------------
def match_grid_stride(g: Generic):
    if "reduction" in g.iters or math.prod(g.bounds) <= GRID_STRIDE_MIN or not _captured_ok(g):
        return None
    full = [("d", i) for i in range(len(g.iters))]
    if any(m != full for m in g.maps[len(g.ins):]):
        return None  # outputs written in row-major order, each element once
    if any(len(list(a.uses)) for a in list(g.body.arguments)[len(g.ins):]):
        return None
    return {}


def emit_grid_stride(g: Generic, plan: dict, name: str):
    total = math.prod(g.bounds)
    grid = min(GRID_CAP, -(-total // BLOCK))
    t = _Text()
    bid, tid = t.op("gpu.block_id x"), t.op("gpu.thread_id x")
    start = t.op(f"arith.addi {t.op(f'arith.muli {bid}, {t.index(BLOCK)} : index')}, {tid} : index")
    t.lines.append(f"scf.for %i = {start} to {t.index(total)} step {t.index(grid * BLOCK)} {{")
    dims = t.delinearize("%i", g.bounds)
    args = g.ins + g.outs
    loaded = [t.op(f"memref.load %a{k}[{t.access(g.maps[k], dims)}] : {_ty(v)}")
              for k, v in enumerate(g.ins)]
    vals = _placeholder(t, g, loaded, dims, [_elt(v) for v in g.outs])
    for i, v in enumerate(vals):
        k = len(g.ins) + i
        t.lines.append(f"memref.store {v}, %a{k}[{t.access(g.maps[k], dims)}] : {_ty(args[k])}")
    t.lines.append("}")
    return _kernel(name, args, t.body(), (BLOCK, 1, 1)), (grid, 1, 1), (BLOCK, 1, 1), 0


#: The strategy table, tried in order (the generic path is the fallback).
STRATEGIES = (GpuStrategy("matmul-smem", match_matmul, emit_matmul),
              GpuStrategy("row-reduce", match_row_reduce, emit_row_reduce),
              GpuStrategy("grid-stride", match_grid_stride, emit_grid_stride))

_SLUG = {s.name: s.name.replace("-", "_") for s in STRATEGIES}


def strategy_of(kernel: str) -> str:
    """The strategy that wrote ``kernel`` (a launch's kernel name);
    ``generic`` for kernels of the tiled ``scf.parallel`` path."""
    for name, slug in _SLUG.items():
        if f"_{slug}_" in kernel:
            return name
    return "generic"


# -- applying the table -----------------------------------------------------------------------
def substitute_body(kernel_func, g: Generic, results_of) -> None:
    """Replace each ``fuel.body`` op in ``kernel_func`` by clones of the
    generic's body ops: its operands stand for the inputs then the loop
    dims; ``results_of(mapping)`` gives the values its results become."""
    holders = []

    def visit(op):
        if op.name == "fuel.body":
            holders.append(op)
        return ir.WalkResult.ADVANCE

    kernel_func.walk(visit)
    ops, _ = _body_ops(g)
    args = list(g.body.arguments)
    for holder in holders:
        operands = list(holder.operands)
        mapping = {a: v for a, v in zip(args[:len(g.ins)], operands)}
        dims = operands[len(g.ins):]
        ip = ir.InsertionPoint(holder)
        for op in ops:
            if op.name == "linalg.index":
                mapping[op.result] = dims[ir.IntegerAttr(op.attributes["dim"]).value]
                continue
            if results_of.skip(op):
                continue
            for v in op.operands:  # constants captured from the host function
                if v not in mapping and not isinstance(v.owner, ir.Block) \
                        and v.owner.name == "arith.constant":
                    mapping[v] = v.owner.clone(ip).result
            clone = op.clone(ip)
            for old in set(op.operands):
                if old in mapping:
                    clone.operation.replace_uses_of_with(old, mapping[old])
            for old, new in zip(op.results, clone.results):
                mapping[old] = new
        for v in results_of.values():  # a constant yielded or combined as is
            if v not in mapping and not isinstance(v.owner, ir.Block):
                mapping[v] = v.owner.clone(ip).result
        for r, v in zip(holder.results, results_of(mapping)):
            r.replace_all_uses_with(v)
        holder.erase()


class _Results:
    """The values a ``fuel.body`` stands for, per strategy."""

    def __init__(self, g: Generic, name: str, plan: dict):
        _, self.yld = _body_ops(g)
        self.g = g
        self.combines = plan.get("combines", {}) if name == "row-reduce" else {}
        self.skip_ops = [c[0] for c in self.combines.values()]

    def skip(self, op) -> bool:
        return op.operation in self.skip_ops

    def values(self) -> list:
        """The body values the ``fuel.body`` results stand for."""
        outs = range(len(self.g.outs))
        return ([self.yld.operands[i] for i in outs if i not in self.combines]
                + [self.combines[i][3] for i in sorted(self.combines)])

    def __call__(self, mapping) -> list:
        return [mapping[v] for v in self.values()]


def apply_strategies(module: "ir.Module", entry: str) -> list[tuple[str, str]]:
    """Replace every ``linalg.generic`` of the host functions that a strategy
    matches by a launch of its kernel; returns (kernel name, strategy name)
    per replacement."""
    done = []
    for fn in list(module.body.operations):
        if fn.operation.name != "func.func" or not len(fn.regions[0].blocks):
            continue
        for op in list(fn.regions[0].blocks[0].operations):
            g = read_generic(op.operation)
            if g is None:
                continue
            for s in STRATEGIES:
                plan = s.match(g)
                if plan is not None:
                    name = f"{entry}_{_SLUG[s.name]}_{len(done)}"
                    _replace(module, g, s, plan, name)
                    done.append((name, s.name))
                    break
    return done


def _replace(module, g: Generic, s: GpuStrategy, plan: dict, name: str) -> None:
    text, grid, block, shared = s.emit(g, plan, name)
    ctx = module.context
    text = f"module attributes {{gpu.container_module}} {{\n{text}\n}}"
    unregistered = ctx.allow_unregistered_dialects
    ctx.allow_unregistered_dialects = True  # the ``fuel.body`` placeholder
    try:
        parsed = ir.Module.parse(text, ctx)
    except MLIRError as e:
        path = write_reproducer(text, f"cuda-{s.name}", ".mlir")
        raise PipelineError(f"the CUDA {s.name} strategy wrote a kernel for {name} that MLIR "
                            f"rejects: {e}\n  reproducer: {path}\n  (a compiler bug: without "
                            f"'{s.name}' in compiler.codegen.cuda.strategy.STRATEGIES the op "
                            "takes the generic path)") from None
    finally:
        ctx.allow_unregistered_dialects = unregistered
    kmod = parsed.body.operations[0]
    kfunc = kmod.regions[0].blocks[0].operations[0]
    substitute_body(kfunc.operation, g, _Results(g, s.name, plan))
    kmod.operation.move_before(module.body.operations[0])
    # the launch: static geometry, the dynamic shared memory the kernel uses
    index, i32 = ir.IndexType.get(ctx), ir.IntegerType.get_signless(32, ctx)
    with ir.InsertionPoint(g.op):
        dims = [ir.Operation.create("arith.constant", [index],
                                    attributes={"value": ir.IntegerAttr.get(index, d)}).result
                for d in (*grid, *block)]
        smem = [ir.Operation.create("arith.constant", [i32],
                                    attributes={"value": ir.IntegerAttr.get(i32, shared)}).result
                ] if shared else []
        ir.Operation.create(
            "gpu.launch_func", [], [*dims, *smem, *g.ins, *g.outs],
            attributes={"kernel": ir.SymbolRefAttr.get([name, name], ctx),
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get(
                            [0, 1, 1, 1, 1, 1, 1, 0, 0, 0, len(smem), len(g.ins) + len(g.outs), 0])})
    g.op.erase()


__all__ = ["GpuStrategy", "STRATEGIES", "apply_strategies", "strategy_of", "BLOCK", "TILE",
           "GRID_CAP", "GRID_STRIDE_MIN", "ROW_MIN"]
