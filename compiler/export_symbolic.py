"""One ``.fuel`` file for every size of a symbolic module
(``SymbolicModule.save``; ``docs/dynamic-shapes.md``, "One file for every
size").

The passes and the plan run on the graph bound at sample sizes (no ``?``
extents in the dialect): a grid of three sizes per symbol (two for a
symbol of degree 1, ``symbol_degrees``), and sizes at the symbols' lower
bounds and at the edges of the matmul row classes. Every
sample must give the same plan and kernel records but for their integers;
each integer that varies is interpolated over the grid as a polynomial of
the symbols with integer coefficients (degree at most 2 per symbol) and
checked at every other sample; a symbol of an image axis is interpolated
over 1, itself and its floor quotients in the graph's shapes instead
(``image_basis``), down to its lower bound: the samples plan every conv
over a symbolic image in one form at every size (``conv2d.ONE_FORM``, no
few-pixel form). A kernel step whose object differs between
samples must be explained by the matmul row class of its call
(``runtime.rows``): the file then holds one object per class and the runtime
picks one per binding. Anything else (a kernel compiled per shape, a param
that is not a polynomial of the sizes, a plan whose structure depends on
them) is refused with an ``ExportError`` naming the step and op. Constants
folded at compile time whose value depends on the sizes (a slice of a
position table) are left unfolded: they run as kernel steps; an ``Iota``
(a constant ``arange(len)`` in the plan) is listed in ``symbolic.iotas`` and
made by the runtime per binding.
"""
from __future__ import annotations

import itertools
import json
import math
import re
from fractions import Fraction

import numpy as np

from runtime.bundle import signature_json
from runtime.layout import Layout
from runtime.manifest import object_revision
from runtime.rows import FEW_ROWS, UNPACKED_ROWS, row_class
from runtime.symbolic import SYM, TEMPLATE_FIELDS, expression_value
from runtime.symbols import Sym, floor_div

from .export import ExportError, manifest_body, target_json, write_fuel
from .graph.symbolic import IMAGE_OPS

#: The kernels whose instance depends on the row class of the call.
ROW_CLASS_OPS = ("MatMul", "FusedLinear")
#: Row ranges of the classes: (class, lowest rows, highest rows or None).
ROW_CLASSES = (("few_rows", 0, FEW_ROWS), ("unpacked", FEW_ROWS + 1, UNPACKED_ROWS),
               ("packed", UNPACKED_ROWS + 1, None))


def _clip(v: int, lo: int, hi) -> int:
    return max(lo, v if hi is None else min(v, hi))


def sample_bindings(symbols: dict, quotients: dict | None = None,
                    degrees: dict | None = None) -> tuple[list, list[dict]]:
    """``(grid, samples)``: per symbol up to three sizes near 6 above its
    lower bound (the interpolation grid; ``degrees``: a symbol of degree 1
    gets two, ``symbol_degrees``); the samples: for every subset of the
    symbols held at their lower bound (a batch of 1 squeezes an axis: another
    kernel instance), the grid of the others (with ``degrees``, the lean
    sampling: where two or more others vary, their grids side by side, the
    i-th size of one with the (i+1)-th of the next, instead of their product), then the others
    at 2, 3, 33 and 40 (clipped to the bounds: the matmul row classes). An
    image symbol (``quotients``: its floor-quotient factors,
    ``image_quotients``) gets the sizes from its lower bound up on which its
    basis (``image_basis``) is independent, is not held apart at its lower
    bound (no unit extent there), and one more sample past its grid checks
    the fit."""
    quotients = quotients or {}
    names = list(symbols)
    grid = []
    for n in names:
        lo, hi = symbols[n]
        if n in quotients:
            grid.append(_image_grid(n, quotients[n], lo, hi))
            continue
        top = lo + 40 if hi is None else min(hi, lo + 40)
        # above the lower bound where the range allows (it is sampled apart)
        pool = sorted(range(lo + 1, top + 1), key=lambda v: abs(v - 6)) + [lo]
        grid.append(sorted(pool[:3 if degrees is None else degrees[n] + 1]))
    samples: list[dict] = []
    for pinned in itertools.product((False, True), repeat=len(names)):
        if any(p and n in quotients for n, p in zip(names, pinned)):
            continue
        axes = [[symbols[n][0]] if p else g for n, g, p in zip(names, grid, pinned)]
        if degrees is not None and any(pinned) and sum(len(a) > 1 for a in axes) > 1:
            points = [tuple(a[(i + k) % len(a)] for k, a in enumerate(axes))
                      for i in range(max(map(len, axes)))]
        else:
            points = list(itertools.product(*axes))
        more = [dict(zip(names, q)) for q in points]
        more += [{n: symbols[n][0] if p else _clip(v, *symbols[n])
                  for n, p in zip(names, pinned)} for v in (2, 3, 33, 40)]
        samples += [b for b in more if b not in samples]
    if quotients:  # each image symbol past its grid by two of its largest divisor
        past = {n: g[0] for n, g in zip(names, grid)}
        for i, n in enumerate(quotients):
            by = max([next(iter(q.quots.values()))[1] for q in quotients[n]] + [1])
            past[n] = _clip(max(grid[names.index(n)]) + 2 * by + 1 + i, *symbols[n])
        samples += [past] if past not in samples else []
    return grid, samples


def image_basis(name: str, quotients: list) -> list:
    """The functions an integer of the plan is fitted over, per image
    symbol: 1, the symbol, and each floor-quotient factor of it
    (``(h + 1) // 2``, ...) that the graph's extents hold, as
    ``(json factor or None, function)``."""
    out = [(None, lambda v: 1), (name, lambda v: v)]
    for q in quotients:
        (text, (num, by)), = q.quots.items()
        out.append(({"floor": num.to_json(), "by": by},
                    lambda v, num=num, by=by: num.evaluate({name: v}) // by))
    return out


def _rank(rows: list[list[int]]) -> int:
    m = [[Fraction(x) for x in r] for r in rows]
    rank = 0
    for c in range(len(m[0]) if m else 0):
        piv = next((i for i in range(rank, len(m)) if m[i][c]), None)
        if piv is None:
            continue
        m[rank], m[piv] = m[piv], m[rank]
        for i in range(len(m)):
            if i != rank and m[i][c]:
                f = m[i][c] / m[rank][c]
                m[i] = [a - f * b for a, b in zip(m[i], m[rank])]
        rank += 1
    return rank


def _image_grid(name: str, quotients: list, lo: int, hi) -> list[int]:
    """The sizes from ``lo`` up, each kept where it makes the basis's values
    independent of the kept ones', until there are as many as functions."""
    funcs = [f for _, f in image_basis(name, quotients)]
    kept: list[int] = []
    v = lo
    while len(kept) < len(funcs):
        if hi is not None and v > hi:
            raise ExportError(f"cannot write one .fuel file for every size: symbol {name!r} in "
                              f"{lo}..{hi} has too few sizes to fit its extents' floor quotients "
                              f"({', '.join(str(q) for q in quotients)}); widen its bounds or "
                              "save a bundle (m.save_bundle)")
        if _rank([[f(x) for f in funcs] for x in kept + [v]]) == len(kept) + 1:
            kept.append(v)
        v += 1
    return kept


def image_quotients(g) -> dict:
    """Per symbol of an image axis (a height or width an ``IMAGE_OPS`` node
    reads), the distinct floor-quotient factors (``Sym``s: ``(h + 1) // 2``)
    in the graph's value shapes, by divisor. A quotient of more than one
    symbol is an ``ExportError``."""
    out: dict = {}
    for n in g.nodes:
        if n.op == "Fused" and n.fused.name in IMAGE_OPS:
            for d in g.nodes[n.inputs[0]].type.shape[2:]:
                if isinstance(d, Sym):
                    for name in d.atoms:
                        out.setdefault(name, [])
    for n in g.nodes:
        for d in n.type.shape:
            if not isinstance(d, Sym):
                continue
            for text, (num, by) in d.quots.items():
                if len(num.atoms) != 1:
                    raise ExportError(
                        f"cannot write one .fuel file for every size: node %{n.id} ({n.name}) "
                        f"has the extent {d}, whose factor {text} is a quotient of several "
                        "symbols; save a bundle (m.save_bundle)")
                (name,) = num.atoms
                q = floor_div(num, by)
                if all(q != x for x in out.setdefault(name, [])):
                    out[name].append(q)
    for qs in out.values():
        qs.sort(key=lambda q: (next(iter(q.quots.values()))[1], str(q)))
    return out


def symbol_degrees(g) -> dict:
    """Per symbol, its highest degree (1 or 2) in the element count of any
    value of the graph: the degree of every integer of the plan in it (a
    shape, stride, offset or size is a product of some value's extents, or a
    sum of such). A symbol of degree 1 (a conv net's batch) is fitted over two
    sizes instead of three; the other samples still check every field."""
    out = {n: 1 for n in g.symbols}
    for n in g.nodes:
        count = math.prod(n.type.shape, start=1)
        if isinstance(count, Sym):
            for m in count.terms:
                for name in set(m) & set(out):
                    out[name] = max(out[name], min(2, m.count(name)))
    return out


class _Fit:
    """Polynomials with integer coefficients of the symbols ``names`` through
    values at ``samples`` (tensor-product Lagrange interpolation over the
    grid points among them, exact in fractions; checked at every sample).
    An image symbol (``funcs``: its ``image_basis``) is interpolated over
    its basis instead of its powers: 1, the symbol and its floor quotients."""

    def __init__(self, names: list[str], grid: list, samples: list[dict], funcs=None):
        self.names, self.grid, self.samples = names, grid, samples
        self.funcs = funcs = funcs or {}
        bases = [self._inverse([[f(x) for _, f in funcs[n]] for x in xs]) if n in funcs
                 else self._basis(xs) for n, xs in zip(names, grid)]
        self.exps = list(itertools.product(*[range(len(xs)) for xs in grid]))
        self.weights = [[math.prod(bases[i][p[i]][e[i]] for i in range(len(names)))
                         for e in self.exps]
                        for p in itertools.product(*[range(len(xs)) for xs in grid])]
        self.at = []  # the sample index of each grid point
        for point in itertools.product(*grid):
            hit = [j for j, b in enumerate(samples) if all(b[n] == v for n, v in
                                                           zip(names, point))]
            self.at.append(hit[0] if hit else None)
        # per function e: the weights over a common denominator, as integers
        # (a plan has thousands of integer fields; fitting each in Fractions
        # took most of a symbolic conv net's save), and the fits made so far
        self._scaled = []
        for k in range(len(self.exps)):
            den = math.lcm(*(w[k].denominator for w in self.weights))
            self._scaled.append((den, [int(w[k] * den) for w in self.weights]))
        self._fits: dict = {}

    def restrict(self, idx: list[int]) -> "_Fit | None":
        """The fit over the samples ``idx``: the symbols constant among them
        are held, the others interpolated (None when their grid is not
        among those samples)."""
        sub = [self.samples[j] for j in idx]
        free = [n for n in self.names if len({b[n] for b in sub}) > 1]
        grid = [[v for v in g if any(b[n] == v for b in sub)]
                for n, g in zip(self.names, self.grid) if n in free]
        if any(n in self.funcs and len(g) != len(self.funcs[n]) for n, g in zip(free, grid)):
            return None
        fit = _Fit(free, grid, sub, {n: f for n, f in self.funcs.items() if n in free})
        return None if None in fit.at else fit

    @staticmethod
    def _inverse(m: list[list[int]]) -> list[list[Fraction]]:
        """``out[j][e]``: the inverse of the square matrix ``m`` (rows: the
        grid points, columns: the functions), transposed like ``_basis``."""
        k = len(m)
        a = [[Fraction(x) for x in r] + [Fraction(int(i == j)) for j in range(k)]
             for i, r in enumerate(m)]
        for c in range(k):
            piv = next(i for i in range(c, k) if a[i][c])
            a[c], a[piv] = a[piv], a[c]
            a[c] = [x / a[c][c] for x in a[c]]
            for i in range(k):
                if i != c and a[i][c]:
                    a[i] = [x - a[i][c] * y for x, y in zip(a[i], a[c])]
        inv = [r[k:] for r in a]  # inv[e][j]
        return [[inv[e][j] for e in range(k)] for j in range(k)]

    @staticmethod
    def _basis(xs) -> list[list[Fraction]]:
        out = []
        for j, xj in enumerate(xs):
            coeffs, denom = [Fraction(1)], 1
            for m, xm in enumerate(xs):
                if m != j:
                    coeffs = [(coeffs[i - 1] if i else 0) - xm * (coeffs[i] if i < len(coeffs)
                                                                 else 0)
                              for i in range(len(coeffs) + 1)]
                    denom *= xj - xm
            out.append([c / denom for c in coeffs])
        return out

    def fit(self, values: list[int]):
        """The expression (``{"sym": terms}``) through ``values`` (one per
        sample), or None when no polynomial fits them all."""
        key = tuple(values)
        if key not in self._fits:
            self._fits[key] = self._fit(values)
        expr = self._fits[key]
        return None if expr is None else json.loads(json.dumps(expr))  # the caller's own

    def _fit(self, values: list[int]):
        terms = []
        for (den, nums), e in zip(self._scaled, self.exps):
            c, rest = divmod(sum(values[j] * w for j, w in zip(self.at, nums)), den)
            if rest:
                return None
            if c:
                names = [x for n, d in zip(self.names, e) for x in (
                    [n] * d if n not in self.funcs else [self.funcs[n][d][0]] if d else [])]
                terms.append([int(c), sorted(names, key=_factor_key)])
        expr = {SYM: sorted(terms, key=lambda t: (len(t[1]), [_factor_key(n) for n in t[1]]))}
        if not all(expression_value(expr, b) == v for b, v in zip(self.samples, values)):
            return None
        return expr


def _factor_key(n):
    """Sorts a term's factors: symbols by name, then floor quotients."""
    return (0, n) if isinstance(n, str) else (1, json.dumps(n, sort_keys=True))


class _Template:
    """Merges the manifest bodies of the samples into one template."""

    def __init__(self, fit: _Fit, modules, bounds: dict):
        self.fit, self.modules, self.bounds = fit, modules, bounds

    def merge(self, values: list, field: str):
        first = values[0]
        if isinstance(first, dict) and all(isinstance(v, dict) for v in values):
            if any(v.keys() != first.keys() for v in values):
                self._refuse(field, "has different fields at different sizes")
            return {k: self.merge([v[k] for v in values], f"{field}.{k}") for k in first}
        if isinstance(first, list) and all(isinstance(v, list) for v in values):
            if any(len(v) != len(first) for v in values):
                self._refuse(field, f"has {sorted({len(v) for v in values})} entries at "
                                    "different sizes")
            return [self.merge([v[i] for v in values], f"{field}[{i}]")
                    for i in range(len(first))]
        if all(v == first and type(v) is type(first) for v in values):
            return first
        if all(type(v) is int for v in values):
            expr = self.fit.fit(values)
            if expr is not None:
                return expr
            self._refuse(field, f"takes the values {values[:6]}... at the sample sizes, which "
                                "no polynomial of the symbols fits")
        self._refuse(field, f"depends on the sizes ({values[0]!r} vs {values[-1]!r})")

    def _refuse(self, field: str, says: str):
        m = re.match(r"plan\.steps\[(\d+)\]", field)
        what = ""
        if m:
            step = self.modules[0].plan.steps[int(m.group(1))]
            what = f" (step {m.group(1)}: {getattr(step, 'name', None) or type(step).__name__})"
        raise ExportError(f"cannot write one .fuel file for every size: {field}{what} {says}; "
                          "save one binding (m.specialize(...).save) or a bundle "
                          "(m.save_bundle)")


def _kernels(template: _Template, recs: list[list[dict]], members: dict, target: dict) -> list:
    """The kernel records of the template: integers as expressions; a kernel
    whose object or descriptors depend on the sizes gets one variant per
    pattern of unit extents in its call shapes (a squeezed batch of 1), each
    with one object per matmul row class."""
    out = []
    for k, per_sample in enumerate(zip(*recs)):
        where = f"kernels[{k}] (step {per_sample[0]['step']}: {per_sample[0]['name']})"
        if any(r["binding"]["kind"] != per_sample[0]["binding"]["kind"] for r in per_sample):
            template._refuse(f"kernels[{k}]", "is bound to different kinds of kernel")
        if per_sample[0]["binding"]["kind"] != "object":
            rec = template.merge([{**r, "cost": None} for r in per_sample], f"kernels[{k}]")
            out.append(rec)
            continue
        plain = [{**r, "cost": None, "revision": "",
                  "binding": {x: v for x, v in r["binding"].items()
                              if x not in ("object", "instance", "layouts")}} for r in per_sample]
        rec = template.merge(plain, f"kernels[{k}]")
        try:  # one variant for every size
            variants = [_variant(template, rec, None, per_sample, range(len(per_sample)), where)]
        except ExportError:  # one per pattern of unit extents in the call shapes
            groups: dict[tuple, list[int]] = {}
            for j, r in enumerate(per_sample):
                ones = tuple(d == 1 for shape in r["binding"]["call_shapes"] for d in shape)
                groups.setdefault(ones, []).append(j)
            variants = [_variant(template, rec, ones, [per_sample[j] for j in idx], idx, where)
                        for ones, idx in groups.items()]
        op = re.match(r"\('(\w+)'", per_sample[0]["binding"]["instance"])
        b = rec["binding"]
        if len(variants) == 1 and len(set(variants[0]["classes"].values())) == 1 and not (
                op and op.group(1) in ROW_CLASS_OPS):
            obj, inst = next(iter(variants[0]["classes"].values()))
            rec["binding"] = {**b, "layouts": variants[0]["layouts"], "object": obj,
                              "instance": inst}
            rec["revision"] = object_revision(rec, members[obj]["sha256"], target)
            out.append(rec)
            continue
        for v in variants:
            for c, (obj, inst) in v["classes"].items():
                one = {**rec, "binding": {**b, "layouts": v["layouts"], "object": obj,
                                          "instance": inst}}
                v["classes"][c] = {"object": obj, "instance": inst, "revision":
                                   object_revision(one, members[obj]["sha256"], target)}
        rec["binding"] = {**b, "kind": "classes", "variants": variants}
        out.append(rec)
    return out


def _variant(template: _Template, rec: dict, ones: tuple, recs: list[dict], idx: list[int],
             where: str) -> dict:
    """One variant of a kernel step: the samples ``idx`` whose call shapes
    have the unit extents ``ones``; its descriptor layouts and its object per
    row class."""
    fit = template.fit.restrict(list(idx))
    # the symbols one size among these samples; the others vary, and where the
    # (lean) samples lack their grid the layouts must be the same at each of them
    held = [n for n in template.fit.names
            if len({template.fit.samples[j][n] for j in idx}) == 1]
    same = all(r["binding"]["layouts"] == recs[0]["binding"]["layouts"] for r in recs)
    flat = [d for shape in rec["binding"]["call_shapes"] for d in shape]
    # a unit extent that is a product of symbols holds each of them at 1
    implied = {n for e, one in zip(flat, ones or ()) if one and isinstance(e, dict)
               and len(e[SYM]) == 1 and e[SYM][0][0] == 1 for n in e[SYM][0][1]
               if isinstance(n, str)}
    # ... and one that is not 1 holds a symbol of bounds 1..2 at 2
    implied |= {n for e, one in zip(flat, ones or ()) if not one and isinstance(e, dict)
                and e[SYM] == [[1, [n := e[SYM][0][1][0]]]] and isinstance(n, str)
                and template.bounds[n] == (1, 2)}
    implied |= {n for n, (lo, hi) in template.bounds.items() if lo == hi}
    if fit is None and not same or not set(held) <= implied:
        raise ExportError(f"cannot write one .fuel file for every size: {where}: its kernel "
                          f"instance at the sizes {[template.fit.samples[j] for j in idx][:3]} "
                          "differs from the others in a way the unit extents of its call do "
                          "not explain; save one binding (m.specialize(...).save) or a bundle "
                          "(m.save_bundle)")
    layouts = recs[0]["binding"]["layouts"] if fit is None else _Template(
        fit, template.modules, template.bounds).merge(
        [r["binding"]["layouts"] for r in recs], f"{where}.binding.layouts")
    op = re.match(r"\('(\w+)'", recs[0]["binding"]["instance"])
    row_op = bool(op and op.group(1) in ROW_CLASS_OPS)
    classes: dict[str, tuple] = {}
    rows = []
    for r in recs:
        b = r["binding"]
        lays = [Layout(tuple(lay["shape"]), tuple(lay["stride"]), lay["offset"])
                for lay in b["layouts"]]
        # another kernel has one object for every row count: one class here
        c = row_class(lays, b["arity"] - 1) if row_op else ROW_CLASSES[0][0]
        rows.append(lays[0].shape[-2] if lays[0].rank >= 2 else 1)
        if classes.setdefault(c, (b["object"], b["instance"])) != (b["object"], b["instance"]):
            raise ExportError(
                f"cannot write one .fuel file for every size: {where} is compiled per shape "
                f"(instances {classes[c][1]} and {b['instance']} in row class {c!r}); a "
                "symbolic .fuel file needs kernels with run-time extents "
                "(docs/dynamic-shapes.md: the kernel table); save one binding "
                "(m.specialize(...).save) or a bundle (m.save_bundle)")
    a = layouts[0]["shape"]
    expr = a[-2] if len(a) >= 2 else 1
    lo, hi = (Sym.from_json(expr[SYM], template.bounds).bounds if isinstance(expr, dict)
              else (expr, expr))
    for name, clo, chi in ROW_CLASSES if row_op else ():
        reach = (chi is None or lo <= chi) and (hi is None or hi >= clo)
        if reach and not any(clo <= n and (chi is None or n <= chi) for n in rows):
            raise ExportError(f"cannot write one .fuel file for every size: {where}: row "
                              f"class {name!r} is reachable within the symbols' bounds but no "
                              "sample size reached it")
    if not row_op:  # the runtime picks a class by rows: each holds the one object
        classes = {name: classes[ROW_CLASSES[0][0]] for name, _, _ in ROW_CLASSES}
    return {**({} if ones is None else {"ones": list(ones)}), "layouts": layouts,
            "classes": classes}


def _is_iota(a) -> bool:
    """Whether ``a`` is what the plan makes of an ``Iota``: ``arange(len)`` in f32."""
    return (a is not None and a.ndim == 1 and a.dtype == np.float32
            and np.array_equal(a, np.arange(len(a), dtype=np.float32)))


def export_symbolic(module, path, sign_with=None, weights: str = "zip"):
    """Write ``module`` (a ``SymbolicModule``) to one ``.fuel`` file that
    ``runtime.load(path)`` runs at every size the signature allows; see the
    module docstring. Raises ``ExportError`` naming what depends on the
    sizes in a way the file cannot hold.

    When the samples do not share one plan, the binding of every symbol at
    its lower bound (a batch of 1, whose few-pixel conv recipe multiplies
    one image's pixels as rows where a batch of 17-63 pixels per image
    multiplies ``w @ cols``) is tried apart: the file
    then holds its static plan (``symbolic.fixed``) and the template of the
    other samples; if that fails too, the first error is raised."""
    g = module.graph
    if g.equalities:
        raise ExportError(f"cannot write one .fuel file for every size: the graph's shape "
                          f"rules assumed extents equal ({', '.join(w for *_, w in g.equalities)}),"
                          " which sampling the symbols independently would break; save one "
                          "binding (m.specialize(...).save) or a bundle (m.save_bundle)")
    quotients = image_quotients(g)
    symbols = dict(g.symbols)
    memo: dict = {}

    def sample(sizes: dict, keep: frozenset):
        key = (tuple(sizes.items()), keep)
        if key not in memo:
            memo[key] = module.export_sample(sizes, keep)
        return memo[key]

    low = {n: lo for n, (lo, _) in symbols.items()}
    failed: dict = {}  # (full sampling, no fixed plan) -> its error
    # the lean samples first (a subset of the full ones: a retry compiles only the rest)
    for degrees in (symbol_degrees(g), None):
        for fixed in (None, low):
            if fixed is not None and (
                    low not in sample_bindings(symbols, quotients, degrees)[1]
                    or any("no kernel with run-time" in str(e) or "per image size" in str(e)
                           for e in failed.values())):
                continue
            try:
                return _export(module, path, sign_with, weights, sample, symbols, quotients,
                               fixed, degrees)
            except ExportError as e:
                if "compiled per" in str(e):  # no sampling changes a kernel's kind
                    raise
                failed[degrees is None, fixed is None] = e
    raise failed[True, True] from None


def _export(module, path, sign_with, weights, sample, symbols, quotients, fixed, degrees):
    """``export_symbolic`` over the samples (``sample_bindings`` of
    ``degrees``: None, the full sampling) but ``fixed`` (a binding whose own
    static plan the file holds; None: every sample in the template);
    ``symbols``: the file's bounds, ``quotients``: the image symbols' floor
    quotients (``image_quotients``)."""
    g = module.graph
    names = list(g.symbols)
    grid, samples = sample_bindings(symbols, quotients, degrees)
    samples = [b for b in samples if b != fixed]
    # folded constants whose value depends on the sizes stay kernel steps (then
    # the values they are computed from may fold instead: until none differs)
    keep: frozenset = frozenset()
    far = samples[math.prod(len(v) for v in grid) - 1]  # the grid point unlike samples[0] in all
    while True:
        a, b = (sample(s, keep).plan.constants for s in (samples[0], far))
        more = frozenset(n.removeprefix("folded:") for n in a if n.startswith("folded:") and (
            n not in b or a[n].shape != b[n].shape or not np.array_equal(a[n], b[n])))
        if more <= keep:
            break
        keep |= more
    modules = [sample(samples[0], keep)]
    module.refuse_per_shape_kernels(modules[0], per_image=bool(quotients))
    modules += [sample(s, keep) for s in samples[1:]]
    base = dict(modules[0].plan.constants)
    iotas = sorted(n for n in base if n.startswith("const:iota") and all(  # made per binding
        _is_iota(m.plan.constants.get(n)) for m in modules))
    for n in iotas:
        del base[n]
    for s, m in zip(samples, modules):
        c = m.plan.constants
        differ = sorted(set(c) - set(iotas) ^ set(base)) or [n for n in c if n in base and (
            c[n] is not base[n] and (c[n].shape != base[n].shape
                                     or not np.array_equal(c[n], base[n])))]
        if differ:
            raise ExportError(f"cannot write one .fuel file for every size: constant(s) "
                              f"{', '.join(differ)} at {s} differ from those at {samples[0]} "
                              "(computed from the sizes at compile time)")
    alone = None if fixed is None else sample(fixed, keep)
    if alone is not None:  # its own plan: its constants join the file's, equal where shared
        for n, a in alone.plan.constants.items():
            if n in iotas:  # made per binding (runtime.symbolic.iota_constants)
                continue
            if n in base and (a.shape != base[n].shape or not np.array_equal(a, base[n])):
                raise ExportError(f"cannot write one .fuel file for every size: constant {n} "
                                  f"of the plan at {fixed} differs from the one at {samples[0]}")
            base.setdefault(n, a)
    fit = _Fit(names, grid, samples, {n: image_basis(n, q) for n, q in quotients.items()})
    bounds = dict(symbols)
    if fixed is not None and len(names) == 1 and bounds[names[0]][1] != fixed[names[0]]:
        # one symbol: the template serves the sizes above the fixed lower bound
        bounds[names[0]] = (fixed[names[0]] + 1, bounds[names[0]][1])
    template = _Template(fit, modules, bounds)
    target = target_json(modules[0].target)

    def body(w):
        objects: dict = {}
        bodies = [manifest_body(m, w, objects) for m in modules]
        out = {k: template.merge([bd[k] for bd in bodies], k) for k in ("entry_points", "plan")}
        out["kernels"] = _kernels(template, [bd["kernels"] for bd in bodies], w.members, target)
        sig = signature_json({n: (g.nodes[i].shape, g.nodes[i].dtype)
                              for n, i in g.inputs.items()}, symbols, g.equalities)
        out["symbolic"] = {**sig, "example": samples[0], "iotas": iotas}
        if alone is not None:
            own = manifest_body(alone, w, objects)
            out["symbolic"]["fixed"] = [{"binding": fixed, **{k: own[k] for k in TEMPLATE_FIELDS}}]
        return out

    return write_fuel(path, modules[0].target, base, modules[0].ir, body, sign_with, weights)
