"""Symbolic extents (``docs/dynamic-shapes.md``).

``Sym`` is an integer polynomial over named symbols: ``Sym("batch")`` is an
atom; ``+ - *`` with ints and other ``Sym``s build expressions, and ``//`` is
exact division (by an int or a one-term divisor; anything else raises
``SymbolicError``). A result with no symbols left is a plain ``int``. Equality
is that of the normalised polynomial; an atom carries its bounds, which the
polynomial's bounds are derived from (``bounds``), so a comparison that the
bounds decide is answered and any other raises ``SymbolicError``.

``floor_div(p, s)`` is the rounding quotient ``floor(p / s)`` by a positive
int (a window strided over a symbolic extent): the exact part of ``p`` stays
polynomial and the rest becomes a *quotient factor* ``(h + 1) // 2``, a
factor of the monomials like an atom, normalised (remainder coefficients in
``0..s-1`` over their common divisor with ``s``; ``(q // m + k) // s`` is
``(q + k*m) // (m*s)``), so equal quotients compare equal. ``quots`` maps its
text to ``(numerator, divisor)``; it is evaluated from the bound atoms, and
its bounds are the numerator's divided.

``bind_symbols`` binds every symbol of a signature from the shapes of a call,
raising ``ShapeSignatureError`` on the first contradiction.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from .errors import ShapeSignatureError, SymbolicError

Dim = Union[int, "Sym"]


class Sym:
    """An integer polynomial over named symbols (``docs/dynamic-shapes.md``)."""

    __slots__ = ("terms", "atoms", "name", "quots")

    def __init__(self, name: str, lo: int = 1, hi: Optional[int] = None):
        if not isinstance(name, str) or not name.isidentifier():
            raise SymbolicError(f"a symbol name must be an identifier, got {name!r}")
        if not (isinstance(lo, int) and lo >= 0) or (hi is not None and not (
                isinstance(hi, int) and hi >= lo)):
            raise SymbolicError(f"symbol {name!r}: bounds {lo}..{hi} must be ints with "
                                f"0 <= lo <= hi (hi None: unbounded)")
        self.terms = {(name,): 1}          # monomial (sorted names) -> coefficient
        self.atoms = {name: (lo, hi)}      # name -> bounds
        self.name = name                   # the atom's name; None for an expression
        self.quots = {}                    # quotient factor -> (numerator, divisor)

    @classmethod
    def _make(cls, terms: dict, atoms: dict, quots: Optional[dict] = None) -> Dim:
        terms = {m: c for m, c in terms.items() if c}
        if not terms:
            return 0
        if list(terms) == [()]:
            return terms[()]
        s = cls.__new__(cls)
        s.terms = terms
        used = {n for m in terms for n in m}
        s.quots = {n: q for n, q in (quots or {}).items() if n in used}
        used.update(a for num, _ in s.quots.values() for a in num.atoms)
        s.atoms = {n: b for n, b in atoms.items() if n in used}
        (m, c), = terms.items() if len(terms) == 1 else (((), 0),)
        s.name = m[0] if c == 1 and len(m) == 1 and m[0] not in s.quots else None
        return s

    # -- facts -------------------------------------------------------------
    @property
    def is_atom(self) -> bool:
        return self.name is not None

    @property
    def is_quotient(self) -> bool:
        """One quotient factor alone: ``(h + 1) // 2``."""
        (m, c), = self.terms.items() if len(self.terms) == 1 else (((), 0),)
        return c == 1 and len(m) == 1 and m[0] in self.quots

    def _factor_bounds(self, n) -> tuple[int, Optional[int]]:
        if n not in self.quots:
            return self.atoms[n]
        num, den = self.quots[n]
        lo, hi = num.bounds
        return lo // den, None if hi is None else hi // den

    @property
    def bounds(self) -> tuple[int, Optional[int]]:
        """(lo, hi) of the polynomial over the atoms' bounds (hi None: unbounded)."""
        lo = hi = 0
        for m, c in self.terms.items():
            fb = [self._factor_bounds(n) for n in m]
            mlo = math.prod(b[0] for b in fb)
            his = [b[1] for b in fb]
            mhi = None if None in his else math.prod(his)
            if c > 0:
                lo = None if lo is None else lo + c * mlo
                hi = None if hi is None or mhi is None else hi + c * mhi
            else:
                lo = None if lo is None or mhi is None else lo + c * mhi
                hi = None if hi is None else hi + c * mlo
        return lo, hi

    def evaluate(self, values: Mapping[str, int]) -> int:
        missing = [n for n in self.atoms if n not in values]
        if missing:
            raise SymbolicError(f"{self}: no value for symbol(s) {missing}")
        def factor(n):
            if n in self.quots:
                num, den = self.quots[n]
                return num.evaluate(values) // den
            return values[n]
        return sum(c * math.prod(factor(n) for n in m) for m, c in self.terms.items())

    # -- arithmetic --------------------------------------------------------
    @staticmethod
    def _parts(v):
        if isinstance(v, Sym):
            return v.terms, (v.atoms, v.quots)
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
            return {(): int(v)}, ({}, {})
        return None, None

    def _atoms_with(self, other):
        """The atoms and quotient factors of ``self`` and ``other`` (``_parts``)."""
        other_atoms, other_quots = other
        atoms = dict(self.atoms)
        for n, b in other_atoms.items():
            if atoms.setdefault(n, b) != b:
                raise SymbolicError(f"symbol {n!r} has two sets of bounds: {atoms[n]} and {b}")
        return atoms, {**self.quots, **other_quots}

    def __add__(self, other):
        t, a = self._parts(other)
        if t is None:
            return NotImplemented
        terms = dict(self.terms)
        for m, c in t.items():
            terms[m] = terms.get(m, 0) + c
        return Sym._make(terms, *self._atoms_with(a))

    __radd__ = __add__

    def __neg__(self):
        return Sym._make({m: -c for m, c in self.terms.items()}, self.atoms, self.quots)

    def __sub__(self, other):
        t, a = self._parts(other)
        if t is None:
            return NotImplemented
        return self + Sym._make({m: -c for m, c in t.items()}, *a)

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        t, a = self._parts(other)
        if t is None:
            return NotImplemented
        terms: dict = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in t.items():
                m = tuple(sorted(m1 + m2))
                terms[m] = terms.get(m, 0) + c1 * c2
        return Sym._make(terms, *self._atoms_with(a))

    __rmul__ = __mul__

    def __floordiv__(self, other):
        """Exact division by an int or a one-term polynomial; else SymbolicError."""
        t, a = self._parts(other)
        if t is None:
            return NotImplemented
        if len(t) != 1:
            raise SymbolicError(f"cannot divide {self} by {other} exactly")
        (dm, dc), = t.items()
        terms = {}
        for m, c in self.terms.items():
            rest = list(m)
            for n in dm:
                if n not in rest:
                    raise SymbolicError(f"{self} is not a multiple of {other}")
                rest.remove(n)
            if dc == 0 or c % dc:
                raise SymbolicError(f"{self} is not a multiple of {other}")
            terms[tuple(rest)] = c // dc
        return Sym._make(terms, *self._atoms_with(a))

    def __mod__(self, other):
        """0 when ``other`` divides ``self`` exactly; otherwise undecidable."""
        try:
            self // other
        except SymbolicError:
            raise SymbolicError(f"{self} mod {other} is not known before a call binds the "
                                f"symbols") from None
        return 0

    def __rmod__(self, other):
        raise SymbolicError(f"{other} mod the symbolic extent {self} is not known before a "
                            f"call binds the symbols")

    def __rfloordiv__(self, other):
        t, _ = self._parts(other)
        if t is None:
            return NotImplemented
        raise SymbolicError(f"cannot divide {other} by the symbolic extent {self}")

    # -- comparisons -------------------------------------------------------
    def __eq__(self, other):
        t, _ = self._parts(other)
        if t is None:
            return NotImplemented
        return self.terms == {m: c for m, c in t.items() if c}

    def __ne__(self, other):
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    def __hash__(self):
        return hash(frozenset(self.terms.items()))

    def decided_bounds(self) -> tuple[Optional[int], Optional[int]]:
        """``bounds``, tightened where quotient factors appear alone in a term:
        ``s*(p // s)`` lies in ``p - s + 1 .. p``, so ``2*((h + 1) // 2) - h``
        is 0..1 (plain ``bounds``: unbounded below)."""
        lo, hi = self.bounds
        lin = {m[0]: c for m, c in self.terms.items() if len(m) == 1 and m[0] in self.quots}
        if not lin:
            return lo, hi
        scale = math.lcm(*(self.quots[n][1] for n in lin))
        rest = self * scale - sum(c * scale * Sym._make({(n,): 1}, self.atoms, self.quots)
                                  for n, c in lin.items())
        low = high = rest
        for n, c in lin.items():
            num, den = self.quots[n]
            k = c * (scale // den)         # c*scale*(n) lies in k*(num - den + 1) .. k*num
            low = low + k * (num - (den - 1) if c > 0 else num)
            high = high + k * (num if c > 0 else num - (den - 1))
        lo2 = low.decided_bounds()[0] if isinstance(low, Sym) else low   # nested quotients:
        hi2 = high.decided_bounds()[1] if isinstance(high, Sym) else high  # one level fewer
        if lo2 is not None:
            lo = -(-lo2 // scale) if lo is None else max(lo, -(-lo2 // scale))
        if hi2 is not None:
            hi = hi2 // scale if hi is None else min(hi, hi2 // scale)
        return lo, hi

    def _sign(self, other, op):
        d = self - other
        if not isinstance(d, Sym):
            return d
        lo, hi = d.decided_bounds()
        if lo is not None and lo > 0:
            return 1
        if hi is not None and hi < 0:
            return -1
        if lo == 0 and op in (">=", "<"):
            return 0.5   # >= 0 holds, < 0 does not
        if hi == 0 and op in ("<=", ">"):
            return -0.5  # <= 0 holds, > 0 does not
        raise SymbolicError(f"cannot decide {self} {op} {other} from the symbols' bounds "
                            f"({self._bounds_text(other)})")

    def _bounds_text(self, other=None):
        atoms = dict(self.atoms)
        if isinstance(other, Sym):
            atoms.update(other.atoms)
        return ", ".join(f"{n} in {lo}..{'' if hi is None else hi}" for n, (lo, hi) in atoms.items())

    def __lt__(self, other): return self._sign(other, "<") < 0
    def __le__(self, other): return self._sign(other, "<=") <= 0
    def __gt__(self, other): return self._sign(other, ">") > 0
    def __ge__(self, other): return self._sign(other, ">=") >= 0

    def __bool__(self):
        return True  # extents are compared with ==, never tested for truth

    def __int__(self):
        raise SymbolicError(f"the extent {self} is symbolic; it has no int value before a "
                            f"call binds its symbols")

    __index__ = __int__

    # -- text --------------------------------------------------------------
    def __str__(self) -> str:
        def mono(m, c, first):
            alone = len(m) == 1 and (c == 1 or c == -1 and not first)  # -(a // b), not -a // b
            body = "*".join(n if alone or n not in self.quots else f"({n})" for n in m)
            if not m:
                return str(abs(c))
            return body if abs(c) == 1 else f"{abs(c)}*{body}"
        items = sorted(self.terms.items(), key=lambda mc: (
            -len(mc[0]), [n not in self.quots for n in mc[0]], mc[0]))
        out = ""
        for i, (m, c) in enumerate(items):
            sign = "-" if c < 0 else "+"
            out += (("-" if c < 0 else "") if i == 0 else f" {sign} ") + mono(m, c, i == 0)
        return out

    __repr__ = __str__

    def to_json(self):
        """``[[coefficient, [factors...]], ...]``, a factor an atom's name or a
        quotient ``{"floor": numerator terms, "by": divisor}`` (``from_json``
        needs the bounds)."""
        def factor(n):
            if n not in self.quots:
                return n
            num, den = self.quots[n]
            return {"floor": num.to_json(), "by": den}
        return [[c, [factor(n) for n in m]] for m, c in sorted(self.terms.items())]

    @classmethod
    def from_json(cls, terms, bounds: Mapping[str, Sequence]) -> Dim:
        if any(isinstance(n, dict) for _, m in terms for n in m):
            def factor(n):
                if isinstance(n, dict):
                    return floor_div(cls.from_json(n["floor"], bounds), int(n["by"]))
                return cls.from_json([[1, [n]]], bounds)
            return sum(int(c) * math.prod(factor(n) for n in m) for c, m in terms)
        atoms = {}
        for _, m in terms:
            for n in m:
                lo, hi = bounds[n]
                atoms[n] = (int(lo), None if hi is None else int(hi))
        return cls._make({tuple(sorted(m)): int(c) for c, m in terms}, atoms)


def floor_div(p: Dim, s: int) -> Dim:
    """``floor(p / s)`` for an int ``s >= 1``: an int for an int ``p``, else
    the exact part of ``p`` plus a normalised quotient factor (module
    docstring): ``floor_div(h - 1, 2) + 1`` is ``(h + 1) // 2``."""
    if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1:
        raise SymbolicError(f"floor division of {p} by {s!r}: the divisor must be an int >= 1")
    s = int(s)
    if not isinstance(p, Sym):
        return int(p) // s
    exact = Sym._make({m: c // s for m, c in p.terms.items()}, p.atoms, p.quots)
    rest = Sym._make({m: c % s for m, c in p.terms.items()}, p.atoms, p.quots)
    if not isinstance(rest, Sym):
        return exact    # a constant remainder in 0..s-1
    g = math.gcd(s, *rest.terms.values())
    rest, s = rest // g, s // g
    lo, hi = rest.bounds
    if hi is not None and hi < s:
        return exact    # 0 <= rest < s
    (inner, *more) = [m for m in rest.terms if m]
    if not more and len(inner) == 1 and rest.terms[inner] == 1 and inner[0] in rest.quots:
        num, den = rest.quots[inner[0]]  # (q // m + k) // s is (q + k*m) // (m*s)
        return exact + floor_div(num + rest.terms.get((), 0) * den, den * s)
    text = str(rest)
    name = f"({text}) // {s}" if " " in text else f"{text} // {s}"
    return exact + Sym._make({(name,): 1}, rest.atoms, {name: (rest, s)})


def is_symbolic(shape) -> bool:
    return any(isinstance(d, Sym) for d in shape)


def dim_text(d) -> str:
    s = str(d)
    return f"({s})" if " " in s and not (isinstance(d, Sym) and d.is_quotient) else s


def shape_text(shape) -> str:
    return ",".join(dim_text(d) for d in shape)


def evaluate(d, values: Mapping[str, int]) -> int:
    return d.evaluate(values) if isinstance(d, Sym) else int(d)


def affine_parts(d: "Sym"):
    """``(name, a, b)`` when ``d`` is ``a*name + b`` with ``a >= 1``, else None."""
    if len(d.atoms) != 1:
        return None
    (name,) = d.atoms
    if set(d.terms) - {(), (name,)} or d.terms.get((name,), 0) < 1:
        return None
    return name, d.terms[(name,)], d.terms.get((), 0)


def bind_symbols(declared: Mapping[str, Sequence], shapes: Mapping[str, Sequence[int]],
                 equalities: Sequence = ()) -> dict[str, int]:
    """Symbol values for a call. ``declared``: input name -> declared shape
    (ints, atom ``Sym``s and ``a*s + b`` derived extents); ``shapes``: input
    name -> the call's shape; ``equalities``: ``(lhs, rhs, where)`` recorded by
    shape rules. Atoms bind first, then derived extents solve or check theirs.
    Raises ShapeSignatureError naming the input, axis, symbol and sizes."""
    values: dict[str, int] = {}
    seen_at: dict[str, tuple[str, int]] = {}

    def bind(sym, v, name, axis, how):
        if sym in values:
            if values[sym] != v:
                first, fa = seen_at[sym]
                raise ShapeSignatureError(
                    f"symbol {sym!r}: input {first!r} axis {fa} gives {values[sym]}, input "
                    f"{name!r} axis {axis} gives {v}{how}; every use of {sym!r} must have one "
                    f"size", name, axis, sym, v, values[sym])
            return
        lo, hi = declared_bounds[sym]
        if v < lo or (hi is not None and v > hi):
            raise ShapeSignatureError(
                f"symbol {sym!r} = {v} (input {name!r} axis {axis}{how}) is outside its bounds "
                f"{lo}..{'' if hi is None else hi}", name, axis, sym, v, (lo, hi))
        values[sym] = v
        seen_at[sym] = (name, axis)

    declared_bounds: dict = {}
    derived = []
    for name, decl in declared.items():
        shape = tuple(shapes[name])
        if len(shape) != len(decl):
            raise ShapeSignatureError(
                f"input {name!r}: rank {len(shape)} (shape {list(shape)}), the signature "
                f"[{shape_text(decl)}] has rank {len(decl)}", name, None, None, len(shape),
                len(decl))
        for axis, (d, n) in enumerate(zip(decl, shape)):
            if not isinstance(d, Sym):
                if n != d:
                    raise ShapeSignatureError(
                        f"input {name!r} axis {axis}: size {n} (shape {list(shape)}), the "
                        f"signature [{shape_text(decl)}] fixes {d}", name, axis, None, n, d)
                continue
            declared_bounds.update(d.atoms)
            if d.is_atom:
                bind(d.name, int(n), name, axis, "")
            else:
                derived.append((name, axis, d, int(n)))
    for name, axis, d, n in derived:
        sym, a, b = affine_parts(d)
        if (n - b) % a or n - b < 0:
            raise ShapeSignatureError(
                f"input {name!r} axis {axis}: size {n} is not {d} for any integer {sym} >= 0",
                name, axis, sym, n, str(d))
        bind(sym, (n - b) // a, name, axis, f" as {d} = {n}")
    for lhs, rhs, where in equalities:
        a, b = evaluate(lhs, values), evaluate(rhs, values)
        if a != b:
            syms = [n for x in (lhs, rhs) if isinstance(x, Sym) for n in x.atoms]
            raise ShapeSignatureError(
                f"{lhs} = {a} but {rhs} = {b} ({where} assumed them equal; bound "
                f"{', '.join(f'{n}={values[n]}' for n in dict.fromkeys(syms))})",
                None, None, syms[0] if syms else None, a, b)
    return values
