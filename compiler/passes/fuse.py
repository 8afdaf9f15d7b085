"""``fuel-fuse``: rewrite registry patterns into fused ops, gated on the
target having a kernel for them.

Ops are visited in block (topological) order; at each op the patterns of
the registry's entries whose root op it is are all tried, and the full match
covering the most ops wins (ties: registration order) -- so a spelled-out
layer norm fuses to LayerNormLastDim, not to RmsNormLastDim of ``x - mean``. Matching:

* ``Bind(i)`` binds input i (a repeated index must be the same value);
  ``Any_`` matches anything; ``SeeThrough`` matches its child at the same value;
* an ``Op`` node needs the same op, operand count, and params: a concrete
  pattern param must equal the op's, a ``SLOT`` extracts the op's value (pre-
  order), a relative param (``LAST``, ``SameAs``...) is resolved against the
  bound inputs' shapes and must equal the op's; unset params are wildcards;
* commutative ops (add, mul, maximum, minimum) try both operand orders;
* **consumer-count guard**: every matched op other than the root must have
  exactly as many uses in the whole function as it has uses inside the
  pattern (1, or 2 for softmax's shared ``exp``), so a shared intermediate
  blocks fusion;
* the bound indices must be exactly [0, n).

The fused op is created only when its ``infer`` reproduces the root's type
and some candidate backend has a kernel for (OpKind, input dtypes + output
dtype) in the binding table (``backend_supports``). ``remarks=true`` reports
each match that is gated out.

Epilogues (``epilogues=true``, the default): after the patterns, an
``Add(conv, skip)`` that is the only user of a ``Conv2D`` without an
activation becomes its ``residual`` operand (``fold_conv_residuals``), then
a ``Relu`` or ``Clamp`` that is the only user of a ``Conv2D`` becomes that
conv's ``clamp_min`` / ``clamp_max`` params (``fold_conv_epilogues``; so a
ResNet block's ``Relu(conv + skip)`` is one conv), where the target still
has a kernel for the conv with them, so the kernel writes the activated
output in its own output pass, or where the conv's recipe is one product
whose FusedLinear takes them in its epilogue (``conv_available``: few-pixel
and whole-image convs, ``conv2d.product_epilogue``); a ``GeluErf`` that is the only user of a
``FusedLinear`` becomes its ``gelu`` param, a ``Gelu`` or the tanh GELU
spelled out (GPT-2's ``gelu_new``) its ``gelu_tanh`` (``fold_linear_epilogues``);
a ``MulScalar`` (a ``Mul`` by a scalar const, a ``Div`` by a power of two) whose
only user is a ``SoftmaxLastDim`` (attention scores times ``1/sqrt(d)``) becomes
the softmax's ``scale`` (``fold_softmax_scales``, ``softmax_scales=true``): the cpu
kernel reads x · scale as it reads the row, the same bits as the pair; an additive
mask ``Add`` between them (BERT's ``scores + BroadcastTo(mask [B,1,1,S])``) becomes
the softmax's ``mask`` operand (``softmax_masks=true``), read with the row too.

With ``runtime=true`` (the default), the runtime fusion of
``fuel-fuse-runtime`` (``compiler.passes.fuse_runtime``) runs after the
static patterns, with the same target.

Rewriting is worklist-driven, as MLIR's greedy driver: every op is visited
once in block order; after a rewrite only the affected ops are revisited (the
fused op, the users of its result and of its inputs, whose consumer counts
changed), earliest first, so the result is that of restarting the sweep
after each rewrite at linear cost.

Attention (``compiler.passes.fuse_attention``): after the patterns, an
exported ``MatMul(Softmax(mask(scale(Q Kᵀ))), V)`` whose constant mask is
verified causal (or absent) becomes ``FlashAttn``; ``constants`` (name ->
array, the driver's side constants) lets it read masks too large to be inline.

Sibling products (``siblings=true``, the default): after the epilogues, the products of
one ``a`` by constant weights merge into one (``merge_sibling_linears``). Then an
``Add(y, skip)`` after a ``FusedLinear`` without an epilogue, or after a 2-D
``MatMul`` by a constant weight (then with a zero bias), directly or behind a view,
becomes its ``residual`` operand (``fold_linear_residuals``,
``linear_residuals=true``): a transformer's ``x + proj(attention)`` as one kernel.

Options: ``target`` / ``table`` / ``backend`` (see ``_target``), ``remarks``,
``epilogues``, ``linear_epilogues``, ``linear_residuals``, ``softmax_scales``, ``softmax_masks``, ``siblings``, ``runtime``, ``attention`` and
``attention_k_len`` and ``attention_by_size`` (default true), ``constants``.
"""
from __future__ import annotations

import heapq
import math
from typing import Optional

from compiler.mlir import ir
from compiler.passes import ModulePass, register_pass
from compiler.passes import _fuel
from compiler.passes._target import target_of_pass
from compiler.passes.diagnostics import emit_error, emit_remark
from runtime.errors import SymbolicError
# the views of a constant that move with it: those fuel-prepack-weights reads through
from compiler.passes.prepack import _VIEWS as _CONST_VIEWS, _panel, zero_bias

class _State:
    __slots__ = ("binds", "memo", "matched", "scalars")

    def __init__(self):
        self.binds: dict[int, object] = {}     # bind index -> ir.Value
        self.memo: dict[int, object] = {}      # id(pattern node) -> ir.Value
        self.matched: list = []                # (pattern Op, ir op), pre-order
        self.scalars: list = []

    def copy(self) -> "_State":
        s = _State()
        s.binds, s.memo = dict(self.binds), dict(self.memo)
        s.matched, s.scalars = list(self.matched), list(self.scalars)
        return s


def _grammar():
    from compiler.registry import grammar
    return grammar


def _is_rel(v) -> bool:
    g = _grammar()
    return v is g.LAST or isinstance(v, (g.SameAs, g.WithDim, g.Dims, g.Extent, g.DimBin, g.Recip))


def _equal(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def pattern_use_counts(root) -> dict[int, int]:
    """id(Op node) -> number of uses inside the pattern (its required
    consumer count in the graph)."""
    g = _grammar()
    counts: dict[int, int] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        children = n.operands if isinstance(n, g.Op) else (
            (n.then,) if isinstance(n, g.SeeThrough) else ())
        for c in children:
            counts[id(c)] = counts.get(id(c), 0) + 1
            stack.append(c)
    return counts


class Matcher:
    """Matches one registry pattern (a grammar tree) rooted at a value."""

    def __init__(self, root):
        self.root = root
        self.uses = pattern_use_counts(root)

    def match(self, value) -> Optional[_State]:
        st = self._match(self.root, value, _State(), is_root=True)
        if st is None:
            return None
        if sorted(st.binds) != list(range(len(st.binds))):
            return None
        return st

    def _match(self, node, value, st: _State, is_root=False) -> Optional[_State]:
        g = _grammar()
        if isinstance(node, g.Any_):
            return st
        if isinstance(node, g.Bind):
            prev = st.binds.get(node.index)
            if prev is not None and prev != value:
                return None
            st.binds[node.index] = value
            return st
        if isinstance(node, g.SeeThrough):
            return self._match(node.then, value, st)
        if not isinstance(node, g.Op):
            return None
        seen = st.memo.get(id(node))
        if seen is not None:
            return st if seen == value else None
        op = value.owner
        if not isinstance(op, (ir.Operation, ir.OpView)):
            return None  # a block argument
        op = op.operation
        if _fuel.mnemonic(op) != _mnemonic_of(node.op) or len(op.results) != 1:
            return None
        if len(op.operands) != len(node.operands):
            return None
        if not is_root and len(list(value.uses)) != self.uses.get(id(node), 1):
            return None  # consumer-count guard
        try:
            actual = _fuel.params(op)
        except Exception:
            return None
        for k, v in node.params:
            if v is g.SLOT:
                if k not in actual or (isinstance(actual[k], int) and float(actual[k]) != actual[k]):
                    return None  # absent, or an integer scalar an f64 slot would round
                st.scalars.append(actual[k])
            elif not _is_rel(v) and not _equal(v, actual.get(k)):
                return None
        st.memo[id(node)] = value
        st.matched.append((node, op))
        operands = list(op.operands)
        if _fuel.mnemonic(op) in _fuel.COMMUTATIVE and len(operands) == 2:
            for order in (operands, operands[::-1]):
                trial = self._children(node, order, st.copy())
                if trial is not None:
                    return trial
            return None
        return self._children(node, operands, st)

    def _children(self, node, operands, st):
        for child, v in zip(node.operands, operands):
            st = self._match(child, v, st)
            if st is None:
                return None
        return st


def _mnemonic_of(name: str) -> Optional[str]:
    from compiler.graph.ops import OP_TABLE
    d = OP_TABLE.get(name)
    if d is not None:
        return d.mnemonic
    reg = _fuel.registry()
    e = reg.get(name) if reg is not None else None
    return e.mnemonic if e is not None else None


def rel_params_hold(st: _State, dims: Optional[_fuel.SymbolicDims] = None) -> bool:
    """Relative pattern params, resolved against the bound inputs' types,
    equal the matched ops' params. With ``dims``, ``?`` extents are its
    symbols, and a resolved param is compared as the dialect writes it
    (``_fuel.dialect_params``: a broadcast keeping a ``?`` extent is -1); a
    param no attribute can hold (``1/Extent`` of a ``?`` axis) fails the match."""
    from compiler.registry.grammar import op_signature
    from compiler.registry.recipe import resolve_params
    dims = dims or _fuel.SymbolicDims()
    try:
        binds = [_fuel.tensor_type(st.binds[i], dims) for i in range(len(st.binds))]
        with dims.recording():
            for node, op in st.matched:
                rel = {k: v for k, v in node.params if _is_rel(v)}
                if not rel:
                    continue
                _, specs, _ = op_signature(node.op)
                kids = [_fuel.tensor_type(v, dims) for v in op.operands]
                want = _fuel.dialect_params(
                    node.op, resolve_params(node.op, specs, rel, binds, kids), kids, dims)
                actual = _fuel.params(op)
                if not all(_equal(want[k], actual.get(k)) for k in want):
                    return False
    except Exception:  # unresolvable at these shapes (a symbolic divisor): no match
        return False
    return True


@register_pass
class Fuse(ModulePass):
    name = "fuel-fuse"
    summary = "rewrite registry patterns to fused ops the target backend has kernels for"

    target: str = ""
    table: object = ""
    backend: str = ""
    remarks: bool = False
    epilogues: bool = True
    runtime: bool = True
    constants: object = ""
    attention: bool = True
    #: also fuse bottom-right aligned attention (``k_len``: keys beyond the
    #: queries), whose FlashAttn kernel is compiled per shape (off for a
    #: symbolic module's bindings: one ``.fuel`` file runs every size)
    attention_k_len: bool = True
    #: also fuse attention without a causal band whose scores reach
    #: ``fuse_attention.SCORES_FUSED`` elements: a choice by shape (off for a
    #: symbolic module's bindings, whose every size must run the same kernels)
    attention_by_size: bool = True
    #: fold a GELU (erf or tanh) into its FusedLinear
    linear_epilogues: bool = True
    #: fold the residual Add after a FusedLinear into it (``fold_linear_residuals``)
    linear_residuals: bool = True
    #: fold the scale before a softmax into it (``fold_softmax_scales``)
    softmax_scales: bool = True
    #: ... and the additive mask between them (with ``softmax_scales``)
    softmax_masks: bool = True
    #: merge the products of one ``a`` by constant weights (``merge_sibling_linears``)
    siblings: bool = True
    #: fuse a 1x1 expansion conv into the depthwise conv reading it
    #: (``fuse_expand_depthwise``; after the epilogue folds)
    expand_depthwise: bool = True

    def apply(self, module) -> None:
        from compiler.passes.fuse_attention import fuse_attention
        from compiler.passes.fuse_runtime import RuntimeFusion
        reg = _fuel.registry()
        if reg is None:
            emit_error(module, f"{self.name}: the fused-op registry is not available")
            return
        resolved = target_of_pass(module, self.name, self.table, self.target, self.backend)
        if resolved is None:
            return
        self._table, self._backends = resolved
        by_root: dict[str, list] = {}
        for entry in reg:
            for pat in entry.patterns:
                m = _mnemonic_of(getattr(pat.root, "op", ""))
                if m is not None:
                    by_root.setdefault(m, []).append((entry, pat, Matcher(pat.root)))
        self._reported: set = set()
        self._worklist(module, by_root)
        if self.attention:
            fuse_attention(module, self._table, self._backends, self.constants,
                           k_len=self.attention_k_len, by_size=self.attention_by_size)
        if self.epilogues:
            fold_conv_residuals(module, self._table, self._backends)
            fold_conv_epilogues(module, self._table, self._backends)
            if self.expand_depthwise:
                fuse_expand_depthwise(module, self._table, self._backends)
            if self.linear_epilogues:
                fold_linear_epilogues(module, self._table, self._backends)
            if self.softmax_scales:
                fold_softmax_scales(module, self._table, self._backends, self.softmax_masks)
        if self.siblings:
            merge_sibling_linears(module, self._table, self._backends)
        if self.epilogues and self.linear_residuals:  # after the merge, which takes no epilogue
            fold_linear_residuals(module, self._table, self._backends)
        if self.runtime:
            RuntimeFusion(self.name, self._table, self._backends, self.remarks).run(module)

    def _worklist(self, module, by_root) -> None:
        """Visit every fuel op in block order; after a fusion revisit only the
        ops it affected, lowest position first (a fused op takes its root's)."""
        ops = _fuel.fuel_ops(module)
        index = {op: i for i, op in enumerate(ops)}   # live ops only
        prio = list(range(len(ops)))
        alive = [True] * len(ops)
        heap = [(i, i) for i in range(len(ops))]
        queued = set(range(len(ops)))

        def push(op) -> None:
            j = index.get(op)
            if j is not None and j not in queued:
                queued.add(j)
                heapq.heappush(heap, (prio[j], j))

        def forget(op) -> None:  # called just before ``op`` is erased
            j = index.pop(op, None)
            if j is not None:
                alive[j] = False

        while heap:
            _, i = heapq.heappop(heap)
            queued.discard(i)
            if not alive[i]:
                continue
            op = ops[i]
            _fuel.count("fuse.visits")
            fused = self._fuse_at(op, by_root, forget)
            if fused is None:
                continue
            j = len(ops)
            ops.append(fused)
            prio.append(prio[i])
            alive.append(True)
            index[fused] = j
            push(fused)
            for v in [*fused.operands, fused.results[0]]:
                for u in v.uses:
                    push(_op_of(u.owner))

    def _fuse_at(self, op, by_root, forget):
        """Fuse the best pattern rooted at ``op``; the fused op, or None."""
        cands = by_root.get(_fuel.mnemonic(op))
        if not cands or len(op.results) != 1:
            return None
        # The match covering the most ops wins (a spelled-out layer norm
        # also contains an RMS-norm-shaped tail); ties keep registry order.
        matches = []
        dims = _fuel.SymbolicDims()  # ``?`` extents, one symbol per value and axis
        for entry, pat, matcher in cands:
            _fuel.count("fuse.match_attempts")
            st = matcher.match(op.results[0])
            if st is not None and rel_params_hold(st, dims):
                matches.append((entry, pat, st))
        matches.sort(key=lambda m: -len({id(o) for _, o in m[2].matched}))
        for entry, pat, st in matches:
            fused = self._rewrite(op, entry, pat, st, forget, dims)
            if fused is not None:
                return fused
        return None

    def _rewrite(self, root, entry, pat, st: _State, forget=lambda op: None, dims=None):
        """Replace the match ``st`` by one fused op; return it, or None (the
        IR unchanged) when the match does not type or has no kernel.
        ``forget(op)`` is called before each matched op is erased. ``?``
        extents are ``dims``' symbols: the fused op's rule must give the
        root's type, ``?`` where it has ``?``."""
        from compiler.registry import normalize_params
        dims = dims or _fuel.SymbolicDims()
        inputs = [st.binds[i] for i in range(len(st.binds))]
        try:
            params = normalize_params(entry, pat.params(tuple(st.scalars)))
            in_types = [_fuel.tensor_type(v, dims) for v in inputs]
            out_type = _fuel.tensor_type(root.results[0], dims)
            with dims.recording():
                inferred = entry.infer(in_types, params)
        except Exception:
            return None  # the match does not type as this fused op
        if not _fuel.same_type(inferred, out_type):
            return None
        dts = [t.dtype for t in in_types] + [out_type.dtype]
        if not kernel_available(entry, params, in_types, dts, self._table, self._backends):
            if self.remarks and id(root) not in self._reported:
                self._reported.add(id(root))
                emit_remark(root, f"{self.name}: matched {entry.name} ({pat.name or 'pattern'}) "
                                  f"but {'/'.join(str(b) for b in self._backends)} has no "
                                  f"kernel for {_fuel.dtype_list(dts)}; not fused")
            return None
        fused = None
        try:
            with ir.InsertionPoint(root), root.location:
                fused = _fuel.create_op(entry.mnemonic, inputs, [root.results[0].type],
                                        params, loc=root.location)
            fused.verify()
        except Exception:
            if fused is not None:
                fused.erase()
            return None
        # the matched ops are unused now (the consumer guard ensured no outside use)
        _fuel.replace_op(root, [fused.results[0]], dead=[op for _, op in st.matched],
                         forget=forget)
        return fused


def _op_of(owner):
    return getattr(owner, "operation", owner)


def kernel_available(entry, params, in_types, dtypes, table, backends) -> bool:
    """Whether fused ``entry`` with these params runs as its kernel: the kernel
    is meant for them (``kernel_serves``) and some candidate backend has its
    dtype key (``backend_supports``; ``dtypes``: inputs then output). The
    rule ``decompose.has_kernel`` applies to an op already in the IR, for a
    fused op not built yet. A predicate undecidable on symbolic extents
    (``SymbolicError``) answers False: not fused; one that fails otherwise
    raises ``KernelPredicateError``."""
    from compiler.registry.kernel_params import kernel_serves
    if entry.op_kind is None:
        return False
    try:
        if not kernel_serves(entry.name, params, in_types):
            return False
    except SymbolicError:
        return False
    return any(table.backend_supports(entry.op_kind, dtypes, b) for b in backends)


def conv_available(entry, params, in_types, dtypes, table, backends) -> bool:
    """Whether a ``Conv2D`` with these params runs as one kernel: its own
    (``kernel_available``), or, where its recipe is one product that takes
    the bias, the skip and the clamp in a FusedLinear epilogue
    (``conv2d.product_epilogue``: few-pixel and whole-image convs), that
    FusedLinear's kernel on a candidate cpu backend (the epilogue is the cpu
    kernel's)."""
    if kernel_available(entry, params, in_types, dtypes, table, backends):
        return True
    from compiler.registry.ops import conv2d
    from runtime.keys import BackendId
    try:
        if not conv2d.product_epilogue(in_types, params):
            return False
    except SymbolicError:
        return False
    lin = {k: params.get(k) for k in ("clamp_min", "clamp_max") if params.get(k) is not None}
    if params.get("residual"):
        lin["residual"] = True
    types = conv2d.product_linear_types(in_types, params)
    cpu = [b for b in backends if BackendId.parse(b) is BackendId.CPU]
    return kernel_available(_fuel.registry()["FusedLinear"], lin, types,
                            [t.dtype for t in types] + [dtypes[-1]], table, cpu)


def _clamp_bounds(op):
    """(min, max) of a ``Relu`` / ``Clamp`` op as a Conv2D epilogue (None:
    an open side), or None for any other op."""
    m = _fuel.mnemonic(op)
    if m == "relu":
        return 0.0, None
    if m != "clamp":
        return None
    p = _fuel.params(op)
    lo, hi = float(p["min"]), float(p["max"])
    if math.isnan(lo) or math.isnan(hi):
        return None
    return (None if lo == -math.inf else lo), (None if hi == math.inf else hi)


def _unary_activation(act):
    """The conv params of a one-operand activation op (Relu / Clamp: the
    clamp bounds, Silu, GeluErf), or None."""
    m = _fuel.mnemonic(act)
    if m == "silu":
        return {"silu": True}
    if m == "gelu_erf":
        return {"gelu": True}
    bounds = _clamp_bounds(act)
    return None if bounds is None else {"clamp_min": bounds[0], "clamp_max": bounds[1]}


#: View ops an activation may move above (an element-wise op commutes with them).
_VIEWS = ("reshape", "squeeze", "unsqueeze")


def _conv_view_epilogue(conv):
    """``(params, view, activation)`` when the conv's only user is a view op
    (``_VIEWS``: a conv1d imported as a Conv2D, then squeezed) whose only
    user is a one-operand activation of the view's type; else None."""
    users = [_op_of(u) for u in _fuel.users(conv.results[0])]
    if len(users) != 1 or _fuel.mnemonic(users[0]) not in _VIEWS:
        return None
    view = users[0]
    after = [_op_of(u) for u in _fuel.users(view.results[0])]
    if len(after) != 1 or len(after[0].operands) != 1 or len(after[0].results) != 1 \
            or after[0].results[0].type != view.results[0].type:
        return None
    update = _unary_activation(after[0])
    return None if update is None else (update, view, after[0])


def _conv_epilogue(conv):
    """The activation that may fold into ``conv``: ``(params, last op,
    ops it retires)`` for a ``Relu`` / ``Clamp`` that is its only user
    (``clamp_min`` / ``clamp_max``), a ``Silu`` that is, or a ``Mul(y,
    Sigmoid(y))`` whose two ops are its only users (``silu``), a ``GeluErf``
    that is (``gelu``), of the conv's type; else None."""
    y = conv.results[0]
    users = [_op_of(u) for u in _fuel.users(y)]
    if len(users) == 1:
        act = users[0]
        if len(act.results) != 1 or act.results[0].type != y.type:
            return None             # (a func.return, a reshape, ...)
        update = _unary_activation(act)
        return None if update is None else (update, act, [conv])
    if len(users) != 2:
        return None
    kinds = {_fuel.mnemonic(u): u for u in users}
    sig, mul = kinds.get("sigmoid"), kinds.get("mul")
    if sig is None or mul is None or mul.results[0].type != y.type:
        return None
    sig_users = [_op_of(u) for u in _fuel.users(sig.results[0])]
    if len(sig_users) != 1 or sig_users[0] != mul:
        return None
    a, b = list(mul.operands)
    s = sig.results[0]
    if not ((a == y and b == s) or (a == s and b == y)):
        return None
    return {"silu": True}, mul, [sig, conv]


def _conv_residual(conv):
    """``(add, skip)`` when the only user of ``conv``'s result is an ``Add`` of
    it and a ``skip`` of the same type (no broadcast); else None. The conv
    being the add's only path to its result, the skip cannot depend on it."""
    y = conv.results[0]
    users = [_op_of(u) for u in _fuel.users(y)]
    if len(users) != 1 or _fuel.mnemonic(users[0]) != "add":
        return None
    add = users[0]
    a, b = list(add.operands)
    skip = b if a == y else a
    if skip == y or skip.type != y.type or add.results[0].type != y.type:
        return None
    return add, skip


def fold_conv_residuals(module, table, backends) -> int:
    """Fold each ``Add(conv, skip)`` that is the only user of a ``Conv2D``
    without an activation, ``skip`` of the conv's type, into the conv's
    ``residual`` operand (``conv2d(x, w, [bias], skip)``: the skip is added
    before any activation folded later), where some candidate backend has a
    kernel for the conv with it. The new conv takes the add's place (the
    skip may be computed after the conv). Returns how many were folded."""
    entry = _fuel.registry()["Conv2D"]
    folded = 0
    for conv in [o for o in _fuel.fuel_ops(module) if _fuel.mnemonic(o) == entry.mnemonic]:
        params = _fuel.params(conv)
        if params.get("clamp_min") is not None or params.get("clamp_max") is not None \
                or params.get("silu") or params.get("gelu") or params.get("residual"):
            continue
        found = _conv_residual(conv)
        if found is None:
            continue
        add, skip = found
        params["residual"] = True
        # (the skip's ? batch is the conv's: the same type)
        folded += _replace_by(entry, add, [*conv.operands, skip], params, [conv],
                              conv_available, table, backends, "fuse.conv_residuals")
    return folded


def _replace_by(entry, at, operands, params, dead, available, table, backends,
                counter) -> bool:
    """Replace the op ``at`` by the fused ``entry`` of ``operands`` and
    ``params`` (of ``at``'s result type), retiring ``dead``, where
    ``available(entry, params, in_types, dtypes, table, backends)`` says it
    runs as a kernel; a ``?`` batch is a run-time extent of the kernel.
    Whether it did."""
    dims = _fuel.SymbolicDims()
    try:
        in_types = [_fuel.tensor_type(v, dims) for v in operands]
        dts = [t.dtype for t in in_types] + [_fuel.dtype_of(at.results[0])]
    except Exception:  # an operand that does not type as a tensor
        return False
    with dims.recording("fuel-fuse"):
        if not available(entry, params, in_types, dts, table, backends):
            return False
    with ir.InsertionPoint(at), at.location:
        fused = _fuel.create_op(entry.mnemonic, operands, [at.results[0].type], params,
                                loc=at.location)
    _fuel.replace_op(at, [fused.results[0]], dead=dead)
    _fuel.count(counter)
    return True


def fold_conv_epilogues(module, table, backends) -> int:
    """Fold each ``Relu`` / ``Clamp`` that is the only user of a ``Conv2D``
    (of the same type) into that conv's ``clamp_min`` / ``clamp_max``, and a
    ``Silu`` or ``Mul(y, Sigmoid(y))`` (its two ops the only users) into its
    ``silu``, and a ``GeluErf`` into its ``gelu``; a one-operand activation
    behind a view of the conv (``Reshape`` / ``Squeeze`` / ``Unsqueeze``, the
    conv's and the view's only user: a conv1d imported as a Conv2D) moves above
    the view and folds the same way. Only when the conv has no epilogue yet and
    some candidate backend has a kernel for it (``kernel_serves`` with the new params, and the
    binding table's key). Returns how many were folded."""
    entry = _fuel.registry()["Conv2D"]
    folded = 0
    for conv in _fuel.fuel_ops(module):
        if _fuel.mnemonic(conv) != entry.mnemonic:
            continue
        view, found = None, _conv_epilogue(conv)
        if found is None:
            through = _conv_view_epilogue(conv)
            if through is None:
                continue
            update, view, act = through
            dead = [conv]
        else:
            update, act, dead = found
        params = _fuel.params(conv)
        if params.get("clamp_min") is not None or params.get("clamp_max") is not None \
                or params.get("silu") or params.get("gelu"):
            continue
        params.update(update)
        dims = _fuel.SymbolicDims()  # a ``?`` batch: the kernel takes it at run time
        try:
            in_types = [_fuel.tensor_type(v, dims) for v in conv.operands]
            dts = [t.dtype for t in in_types] + [_fuel.dtype_of(conv.results[0])]
        except Exception:  # an operand that does not type as a tensor
            continue
        if not conv_available(entry, params, in_types, dts, table, backends):
            continue
        with ir.InsertionPoint(conv), act.location:
            fused = _fuel.create_op(entry.mnemonic, list(conv.operands),
                                    [(conv if view is not None else act).results[0].type],
                                    params, loc=act.location)
        _fuel.replace_activation(act, view, fused, dead)  # conv (activated) -> view
        _fuel.count("fuse.conv_epilogues")
        folded += 1
    return folded


def _expansion_of(dw):
    """The 1x1 expansion ``Conv2D`` whose result is the depthwise ``Conv2D``
    ``dw``'s x and has no other user, or None: both with a bias and without
    a residual or GELU, the expansion groups 1, stride 1, unpadded, the
    depthwise conv's groups its channels (> 1), undilated."""
    conv = _fuel.registry()["Conv2D"].mnemonic
    pd = _fuel.params(dw)
    if len(dw.operands) != 3 or pd.get("residual") or pd.get("gelu") \
            or tuple(pd.get("dilation", (1, 1))) != (1, 1):
        return None
    x = dw.operands[0]
    if isinstance(x.owner, ir.Block):   # a function argument
        return None
    e = _op_of(x.owner)
    if _fuel.mnemonic(e) != conv or len(e.operands) != 3:
        return None
    pe = _fuel.params(e)
    if pe.get("residual") or pe.get("gelu") or pe.get("groups", 1) != 1 \
            or tuple(pe["stride"]) != (1, 1) or tuple(pe["padding"]) != (0, 0) \
            or tuple(pe.get("dilation", (1, 1))) != (1, 1) \
            or [_op_of(u) for u in _fuel.users(x)] != [_op_of(dw)]:
        return None
    try:
        we, wd = (_fuel.tensor_type(v) for v in (e.operands[1], dw.operands[1]))
    except Exception:
        return None
    ce = wd.shape[0]
    if tuple(we.shape[2:]) != (1, 1) or pd["groups"] != ce or ce < 2 \
            or tuple(wd.shape[:2]) != (ce, 1):
        return None
    return e


def fuse_expand_depthwise(module, table, backends) -> int:
    """Replace each depthwise ``Conv2D`` reading a 1x1 expansion ``Conv2D``
    that has no other user (``_expansion_of``) by one ``ExpandDepthwise``
    (x, we, be, wd, bd; each conv's clamp or silu as its epilogue params),
    where some candidate backend has its kernel and it serves the params:
    the kernel never writes the expanded tensor to memory. Runs after the
    epilogue folds, whose activations it carries. Returns how many."""
    from compiler.registry.ops.expand_depthwise import DEPTHWISE_EPILOGUE, EXPAND_EPILOGUE
    reg = _fuel.registry()
    entry, conv = reg["ExpandDepthwise"], reg["Conv2D"].mnemonic
    fused_n = 0
    for dw in [o for o in _fuel.fuel_ops(module) if _fuel.mnemonic(o) == conv]:
        e = _expansion_of(dw)
        if e is None:
            continue
        pe, pd = _fuel.params(e), _fuel.params(dw)
        params = {"stride": tuple(pd["stride"]), "padding": tuple(pd["padding"])}
        for names, p in ((EXPAND_EPILOGUE, pe), (DEPTHWISE_EPILOGUE, pd)):
            params.update({k: p.get(c) for k, c in names if p.get(c) is not None})
        fused_n += _replace_by(entry, dw, [*e.operands, *dw.operands[1:]], params, [e],
                               kernel_available, table, backends, "fuse.expand_depthwise")
    return fused_n


def _unbroadcast_weight(b):
    """``(matrix, shape)`` when FusedLinear operand ``b`` ``[B.., K, N]`` is a
    ``BroadcastTo`` of one ``[K, N]`` matrix over the batch axes (``x @ w`` of
    a batched x): the epilogue kernel reads that matrix as ``shape`` ``[1..,
    K, N]`` (``_weight_view``), so the fold does not depend on the batch size
    (with a batch of 1 the broadcast already had unit batch axes; with more,
    the kernel did not serve it). Else None."""
    owner = b.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)) or _fuel.mnemonic(owner) != "broadcast_to":
        return None
    src = owner.operands[0]
    bt, st = ir.RankedTensorType(b.type), ir.RankedTensorType(src.type)
    shape = [1] * (bt.rank - 2) + list(bt.shape[-2:])
    if not st.has_static_shape or st.rank > bt.rank or list(st.shape)[-2:] != shape[-2:] \
            or any(d != 1 for d in list(st.shape)[:-2]):
        return None
    return src, shape


def _weight_view(src, shape):
    """``src`` viewed as ``shape`` (a ``Reshape`` created where they differ)."""
    st = ir.RankedTensorType(src.type)
    if list(st.shape) == list(shape):
        return src
    return _fuel.create_op("reshape", [src], [ir.RankedTensorType.get(shape, st.element_type)],
                           {"shape": tuple(shape)}).results[0]


def _linear_activation(x):
    """The activation of ``x`` (a FusedLinear's result, or the one view of it)
    that may become FusedLinear's epilogue: ``(params, root op, matched ops)``
    for a ``GeluErf`` (``gelu``) or ``Gelu`` (``gelu_tanh``) that is x's only
    user, or for the tanh GELU spelled out as exporters write it (one of
    ``FusedLinear``'s ``GELU_TANH_SPELLINGS``, rooted at a ``Mul`` /
    ``MulScalar`` whose constants are ``GELU_TANH_CONSTANTS``), whose ops use
    x and nothing else outside it; the root of x's type. Else None."""
    from compiler.registry.ops.fused_linear import GELU_TANH_CONSTANTS, GELU_TANH_SPELLINGS
    users = [_op_of(u) for u in _fuel.users(x)]
    if len(users) == 1 and len(users[0].results) == 1 and users[0].results[0].type == x.type:
        kind = {"gelu_erf": "gelu", "gelu": "gelu_tanh"}.get(_fuel.mnemonic(users[0]))
        return None if kind is None else ({kind: True}, users[0], [])
    # the spelled-out chain: its root is a Mul / MulScalar at most 7 ops below x
    frontier, seen, roots = list(users), set(), []
    for _ in range(7):
        nxt = []
        for o in frontier:
            if o in seen or len(o.results) != 1:
                continue
            seen.add(o)
            if _fuel.mnemonic(o) in ("mul", "mul_scalar"):
                roots.append(o)
            nxt += [_op_of(u) for u in _fuel.users(o.results[0])]
        frontier = nxt
    for root in reversed(roots):  # the furthest first: a whole chain, not its tail
        if root.results[0].type != x.type:
            continue
        for pat in GELU_TANH_SPELLINGS:
            st = Matcher(pat).match(root.results[0])
            if st is None or st.binds.get(0) != x or len(users) != _bind_leaves(pat):
                continue
            if all(math.isclose(float(v), c, rel_tol=1e-6)
                   for v, c in zip(st.scalars, GELU_TANH_CONSTANTS)):
                return {"gelu_tanh": True}, root, [o for _, o in st.matched]
    return None


def _bind_leaves(node) -> int:
    """How many ``Bind`` leaves a pattern tree has (each is one use of a
    bound value; the tanh GELU spellings share no node)."""
    g = _grammar()
    if isinstance(node, g.Bind):
        return 1
    return sum(_bind_leaves(c) for c in getattr(node, "operands", ()))


def fold_linear_epilogues(module, table, backends) -> int:
    """Fold the GELU after a ``FusedLinear`` (without an epilogue yet) into
    its ``gelu`` (a ``GeluErf``) or ``gelu_tanh`` param (a ``Gelu``, or the
    tanh GELU spelled out: ``_linear_activation``) when it is the only user
    of the result, or of a view of it as ``fold_conv_epilogues`` does (an
    importer's ``Reshape`` back to ``[B, S, N]``: the activation moves above
    the view), where some candidate cpu backend has a kernel for it
    (``kernel_serves`` with the new params, and the binding table's key).
    Returns how many were folded."""
    from compiler.graph.opdef import TensorType
    from runtime.keys import BackendId
    entry = _fuel.registry()["FusedLinear"]
    # the epilogue is the cpu kernel's (another backend's FusedLinear ignores it)
    backends = [b for b in backends if BackendId.parse(b) is BackendId.CPU]
    folded = 0
    for lin in [o for o in _fuel.fuel_ops(module) if _fuel.mnemonic(o) == entry.mnemonic]:
        y, view = lin.results[0], None
        params = _fuel.params(lin)
        if params.get("gelu") or params.get("gelu_tanh"):
            continue
        users = [_op_of(u) for u in _fuel.users(y)]
        found = _linear_activation(y)
        if found is None and len(users) == 1 and _fuel.mnemonic(users[0]) in _VIEWS:
            view = users[0]
            found = _linear_activation(view.results[0])
        if found is None:
            continue
        update, act, matched = found
        params.update(update)
        weight = _unbroadcast_weight(lin.operands[1])
        # ``?`` rows: the epilogue kernel takes them at run time (``kernel_serves`` decides)
        in_types = [_fuel.tensor_type(v, _fuel.SymbolicDims()) for v in lin.operands]
        if weight is not None:
            in_types[1] = TensorType(tuple(weight[1]), in_types[1].dtype)
        dts = [t.dtype for t in in_types] + [_fuel.dtype_of(y)]
        if not kernel_available(entry, params, in_types, dts, table, backends):
            continue
        with ir.InsertionPoint(lin), act.location:
            operands = list(lin.operands)
            if weight is not None:
                operands[1] = _weight_view(*weight)
            fused = _fuel.create_op(entry.mnemonic, operands, [y.type], params,
                                    loc=act.location)
        # the broadcast of an unbroadcast weight goes with the old op where unused
        dead = [*matched, lin] + ([lin.operands[1].owner] if weight is not None else [])
        _fuel.replace_activation(act, view, fused, dead)
        _fuel.count("fuse.linear_epilogues")
        folded += 1
    return folded



def fold_linear_residuals(module, table, backends) -> int:
    """Fold the ``Add(y, skip)`` after a ``FusedLinear`` without an epilogue
    (or a ``MatMul`` by a constant 2-D weight, ``_plain_product``: made a
    FusedLinear with a zero bias, the same bits as the MatMul and the Add),
    the only user of its result ``y`` or of the one view of it (an
    importer's ``Reshape`` back to ``[B, S, N]``), ``skip`` of the Add's type
    (no broadcast), into its ``residual`` operand (the skip viewed as the
    product's output): a transformer's ``x + proj(attention)`` and ``h +
    ffn_down(...)`` as one kernel whose epilogue adds the bias, then the skip
    (one rounding each, as the Add), where some candidate cpu backend's
    kernel serves it (``kernel_available``: static shapes). Within f32
    rounding of the two kernels, not their bits: the packed product starts
    its accumulators from the bias, the epilogue adds it after the products
    (bit-identical with a zero bias). The new product takes the Add's place
    (the skip may be computed after the product). Runs after
    ``merge_sibling_linears`` (merged products take no epilogue). Returns how
    many were folded."""
    from compiler.graph.opdef import TensorType
    from compiler.registry.ops.fused_linear import has_epilogue
    from runtime.keys import BackendId
    entry = _fuel.registry()["FusedLinear"]
    backends = [b for b in backends if BackendId.parse(b) is BackendId.CPU]
    folded = 0
    for lin in [o for o in _fuel.fuel_ops(module)
                if _fuel.mnemonic(o) == entry.mnemonic or _plain_product(o)]:
        linear = _fuel.mnemonic(lin) == entry.mnemonic  # else a MatMul (_plain_product)
        params = _fuel.params(lin) if linear else {}
        if linear and (len(lin.operands) != 3 or has_epilogue(params)):
            continue
        y, view = lin.results[0], None
        users = [_op_of(u) for u in _fuel.users(y)]
        if len(users) == 1 and _fuel.mnemonic(users[0]) in _VIEWS:
            view = users[0]
            users = [_op_of(u) for u in _fuel.users(view.results[0])]
        if len(users) != 1 or _fuel.mnemonic(users[0]) != "add":
            continue
        add, v = users[0], (view.results[0] if view is not None else y)
        others = [o for o in add.operands if o != v]
        if len(others) != 1 or others[0].type != add.results[0].type or v.type != add.results[0].type:
            continue
        skip = others[0]
        params["residual"] = True
        try:
            in_types = [_fuel.tensor_type(o) for o in lin.operands] + [_fuel.tensor_type(y)]
        except Exception:  # ``?`` extents: no static types to ask the table with
            continue
        n = in_types[1].shape[-1]
        if len(lin.operands) == 2:  # a MatMul: a zero bias (the FMAs start from 0 as before)
            in_types.insert(2, TensorType((n,), in_types[0].dtype))
        in_types[3] = TensorType(in_types[3].shape, _fuel.dtype_of(skip))
        dts = [t.dtype for t in in_types] + [_fuel.dtype_of(y)]
        if not kernel_available(entry, params, in_types, dts, table, backends):
            continue
        yt = ir.RankedTensorType(y.type)
        with ir.InsertionPoint(add), add.location:
            sk = skip if view is None else _weight_view(skip, list(yt.shape))
            operands = list(lin.operands)
            if len(operands) == 2:
                operands.append(zero_bias(n, yt.element_type, in_types[0].dtype))
            fused = _fuel.create_op(entry.mnemonic, operands + [sk], [y.type], params,
                                    loc=add.location)
            out = fused.results[0] if view is None else _weight_view(
                fused.results[0], list(ir.RankedTensorType(add.results[0].type).shape))
        _fuel.replace_op(add, [out], dead=[view, lin] if view is not None else [lin])
        _fuel.count("fuse.linear_residuals")
        folded += 1
    return folded


def _plain_product(op) -> bool:
    """Whether ``op`` is a ``MatMul`` of a 2-D ``a`` by a constant 2-D ``b``
    (a Llama block's o_proj and down_proj as exported, without a bias): a
    ``FusedLinear`` with a zero bias that ``fold_linear_residuals`` may take."""
    if _fuel.mnemonic(op) != "mat_mul" or _constant_chain(op.operands[1]) is None:
        return False
    ta, tb = (ir.RankedTensorType(v.type) for v in op.operands)
    return ta.rank == 2 and tb.rank == 2 and ta.element_type == tb.element_type


def _softmax_scale_of(op):
    """``(x, scale)`` when ``op`` is x times a constant scalar (``MulScalar``, a
    ``Mul`` by a scalar const: ``fuse_attention._scale_of``) or x divided by a
    power of two (ViT's ``/ sqrt(64)``: x / 2^e and x · 2^-e round alike; any
    other divisor's reciprocal would change the bits), else None."""
    from compiler.passes.fuse_attention import _scalar, _scale_of
    m = _fuel.mnemonic(op)
    if m not in ("mul_scalar", "mul", "div"):
        return None
    if m == "div":
        c = _scalar(op.operands[1], {})
        if c is None or not math.isfinite(c) or c == 0 or math.frexp(abs(c))[0] != 0.5:
            return None
    return _scale_of(op, {})


def _broadcast_source(value):
    """The ``BroadcastTo`` defining ``value``, or None."""
    owner = value.owner
    op = None if isinstance(owner, ir.Block) else _op_of(owner)
    return op if op is not None and _fuel.mnemonic(op) == "broadcast_to" else None


def _softmax_mask_of(add, x_shape, dims=None):
    """``(scores, mask, view)`` when ``add`` is ``Add(scores, mask')`` where
    ``mask'`` is ``mask`` or a ``BroadcastTo`` of it, ``mask`` of the scores'
    dtype and, left-padded with 1s to their rank (``view``: that shape, None
    when it is the mask's own), SoftmaxLastDim's additive mask
    (``softmax_last_dim.mask_mismatch``: each extent 1 or the scores', the last
    theirs), the scores not a broadcast (a row-broadcast mask [B,H,S,1] as
    the scores' partner does not make them the mask); a broadcast mask first,
    then a scaled scores side. Else None."""
    from compiler.registry.ops.softmax_last_dim import mask_mismatch
    if _fuel.mnemonic(add) != "add" or len(add.operands) != 2:
        return None
    found = []
    for scores, other in (add.operands, list(add.operands)[::-1]):
        if _broadcast_source(scores) is not None:
            continue  # a broadcast value as the scores: another shape of Add
        bc = _broadcast_source(other)
        is_bc = bc is not None
        mask = bc.operands[0] if is_bc else other
        try:
            mt, st = ir.RankedTensorType(mask.type), ir.RankedTensorType(scores.type)
        except ValueError:
            continue
        if (not mt.has_static_shape and dims is None) or mt.rank > len(x_shape) \
                or mt.element_type != st.element_type:
            continue
        mask_shape = list(mt.shape) if mt.has_static_shape else list(dims.shape(mask, mt))
        shape = [1] * (len(x_shape) - mt.rank) + mask_shape
        if (not mt.has_static_shape and len(shape) != mt.rank) or \
                mask_mismatch(shape, x_shape) is not None:
            continue  # (a ? mask is taken as it is, no view to the scores' rank)
        owner = scores.owner
        scaled = not isinstance(owner, ir.Block) and _softmax_scale_of(_op_of(owner)) is not None
        view = None if shape == mask_shape else shape
        found.append(((is_bc, scaled), (scores, mask, view)))
    if not found:
        return None
    return max(found, key=lambda f: f[0])[1]


def fold_softmax_scales(module, table, backends, masks: bool = True) -> int:
    """Make ``SoftmaxLastDim(x * s)`` (``_softmax_scale_of``: a MulScalar, a Mul
    by a scalar const, a Div by a power of two), where the product has
    no other user, one ``SoftmaxLastDim(x)`` with ``scale = s`` where some
    candidate backend's kernel serves it (``kernel_serves``: x f32 or f64,
    read as x · scale in its own type: the product the MulScalar rounds and
    stores, so the same bits). With ``masks``, an ``Add`` of an additive mask
    between them (``_softmax_mask_of``: BERT's ``scores + BroadcastTo(mask
    [B,1,1,S])``), where the Add has no other user, becomes the softmax's
    ``mask`` operand (the mask itself, not its broadcast; a view to x's rank
    where it has fewer axes): ``SoftmaxLastDim(x [* s] + mask)`` as one
    kernel, the same bits as the Add's. Runs after ``fuse_attention``, which
    takes the scale and the mask into ``FlashAttn`` where it fuses the whole
    attention. Returns how many softmaxes were folded into."""
    from compiler.graph.opdef import TensorType
    from runtime.keys import BackendId
    entry = _fuel.registry()["SoftmaxLastDim"]
    # the scale and mask are the cpu row kernel's; the generic rule (cuda's)
    # computes them in a launch of their own, no better than the ops
    backends = [b for b in backends if BackendId.parse(b) is BackendId.CPU]
    folded = 0
    for sm in [o for o in _fuel.fuel_ops(module) if _fuel.mnemonic(o) == entry.mnemonic]:
        params = _fuel.params(sm)
        x = sm.operands[0]
        if params.get("scale") is not None or len(sm.operands) != 1 or isinstance(x.owner, ir.Block):
            continue
        # ``?`` extents: the kernel takes the rows, the row length and a mask's
        # extents but 1 at run time (``codegen/fused.py: DYNAMIC_FUSED``)
        dims = _fuel.SymbolicDims()
        x_shape = list(_fuel.tensor_type(x, dims).shape)
        dead, mask, view = [], None, None
        add = _op_of(x.owner)
        got = _softmax_mask_of(add, x_shape, dims) if masks and len(_fuel.users(x)) == 1 else None
        if got is not None:
            x, mask, view = got
            bc = add.operands[1] if add.operands[0] == x else add.operands[0]
            dead += [add] + ([_op_of(bc.owner)] if bc != mask else [])
        owner = x.owner
        mul = None if isinstance(owner, ir.Block) else _op_of(owner)
        scaled = _softmax_scale_of(mul) if mul is not None else None
        if scaled is not None and len(_fuel.users(mul.results[0])) == 1:
            x, params["scale"] = scaled
            # the constant divisor's broadcast and const go too where unused
            consts = [_op_of(v.owner) for v in mul.operands
                      if v != x and not isinstance(v.owner, ir.Block)]
            consts += [_op_of(o.operands[0].owner) for o in consts
                       if o.operands and not isinstance(o.operands[0].owner, ir.Block)]
            dead += [mul, *consts]
        if not dead:
            continue
        in_types = [_fuel.tensor_type(x, dims)] + (
            [_fuel.tensor_type(mask, dims)] if mask is not None else [])
        if view is not None:
            in_types[1] = TensorType(tuple(view), in_types[1].dtype)
        dts = [t.dtype for t in in_types] + [_fuel.dtype_of(sm.results[0])]
        if not kernel_available(entry, params, in_types, dts, table, backends):
            continue
        with ir.InsertionPoint(sm), sm.location:
            operands = [x]
            if mask is not None:
                operands.append(mask if view is None else _weight_view(mask, view))
            fused = _fuel.create_op(entry.mnemonic, operands, [sm.results[0].type], params,
                                    loc=sm.location)
        _fuel.replace_op(sm, [fused.results[0]], dead=dead)
        _fuel.count("fuse.softmax_masks" if mask is not None else "fuse.softmax_scales")
        folded += 1
    return folded


def _constant_chain(value) -> Optional[list]:
    """The ops computing ``value`` from one ``fuel.const`` through views
    (``_CONST_VIEWS``), the const first, or None when it is anything else."""
    chain = []
    while True:
        op = value.owner
        if isinstance(op, ir.Block):
            return None
        op = op.operation
        m = _fuel.mnemonic(op)
        chain.append(op)
        if m == "const":
            return chain[::-1]
        if m not in _CONST_VIEWS:
            return None
        value = op.operands[0]


def _sibling_key(op):
    """What ``MatMul`` / ``FusedLinear`` ``op`` may be merged by: the kind,
    its ``a`` (seen through a ``Reshape``: importers reshape the same x for
    each product) with a's type; None when ``op`` is not a 2-D product of a
    static ``a [M, K]`` and a constant ``b [K, N]`` (the bias a constant too)
    without params."""
    m = _fuel.mnemonic(op)
    if m not in ("mat_mul", "fused_linear") or any(v is not None for v in _fuel.params(op).values()):
        return None
    try:
        ta, tb = (_fuel.tensor_type(v) for v in op.operands[:2])
    except Exception:  # symbolic extents
        return None
    if len(ta.shape) != 2 or len(tb.shape) != 2 or ta.dtype != tb.dtype:
        return None
    if any(_constant_chain(v) is None for v in op.operands[1:]):
        return None
    a = op.operands[0]
    src = a.owner.operation if not isinstance(a.owner, ir.Block) else None
    if src is not None and _fuel.mnemonic(src) == "reshape":
        a = src.operands[0]
    # a value by its definition (the bindings' wrappers of one block
    # argument need not hash alike)
    where = ("arg", ir.BlockArgument(a).arg_number) if isinstance(a.owner, ir.Block) else \
        (a.owner.operation, ir.OpResult(a).result_number)
    return m, where, str(op.operands[0].type)


def merge_sibling_linears(module, table, backends) -> int:
    """Merge the products of one ``a`` by constant weights (a Llama block's
    q/k/v and gate/up projections, BERT's q/k/v: ``MatMul`` or
    ``FusedLinear`` without params, 2-D, the same kind and ``a`` seen
    through a ``Reshape``) into one, ``a @ Concat(b_i)`` (+ ``Concat(bias_i)``),
    each original result a ``Slice`` of its columns (a view): ``a`` is read
    once, one kernel call instead of several, and a column count packing
    cannot take alone (Llama's 688) may pack merged (1376). Only where the
    merged op has a kernel whose packed panel (``fuel-prepack-weights``)
    divides the merged column count, so the merged weight packs; every
    output element is the same chain of FMAs over K as before (the same
    bits). The weights' constants (and their views) move above the first
    product. Returns how many products were merged away."""
    entry = _fuel.registry()["FusedLinear"]
    groups: dict = {}
    for op in _fuel.fuel_ops(module):
        key = _sibling_key(op)
        if key is not None:
            groups.setdefault(key, []).append(op)
    merged = 0
    for (kind, _a, _t), ops in groups.items():
        if len(ops) < 2:
            continue
        ta = _fuel.tensor_type(ops[0].operands[0])
        ns = [ir.RankedTensorType(o.operands[1].type).shape[1] for o in ops]
        total = sum(ns)
        dts = [ta.dtype] * 4  # a, b, bias, result
        nr = _panel(entry, dts, table, backends)
        if not nr or total % nr:
            continue
        first = ops[0]
        pos = {o.operation: i for i, o in enumerate(first.block.operations)}
        for o in ops:  # the weights (and biases) before the first product
            for v in o.operands[1:]:
                for c in _constant_chain(v):
                    if pos[c] > pos[first]:
                        c.move_before(first)
        elt = ir.RankedTensorType(first.results[0].type).element_type
        m = ta.shape[0]

        def make(name, operands, shape, **p):
            return _fuel.create_op(name, operands, [ir.RankedTensorType.get(shape, elt)], p,
                                   loc=first.location).results[0]

        k = ta.shape[1]
        with ir.InsertionPoint(first), first.location:
            b = make("concat", [o.operands[1] for o in ops], [k, total], dim=1)
            operands = [first.operands[0], b]
            if kind == "fused_linear":
                operands.append(make("concat", [o.operands[2] for o in ops], [total], dim=0))
            out = make(kind, operands, [m, total])
            start = 0
            slices = []
            for n in ns:
                slices.append(make("slice", [out], [m, n], dim=1, start=start, len=n))
                start += n
        for o, s in zip(ops, slices):
            _fuel.replace_op(o, [s])
        _fuel.count("fuse.sibling_linears", len(ops) - 1)
        merged += len(ops) - 1
    return merged
