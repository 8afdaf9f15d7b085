"""Shape/dtype rules and recipe/pattern pieces shared by the norm family:
the (x, g) backward helpers and the optional affine ``weight``/``bias``
of the forward norms."""
from ..grammar import SLOT, Bind, SameAs, op
from ._common import DType, check_arity, check_float, fail

_NARROW = (DType.F16, DType.BF16)


def infer_pair(name: str, names=("x", "g")):
    def infer(types, params):
        check_arity(name, types, 2, names=names)
        check_float(name, types, (0, 1))
        if types[0] != types[1]:
            raise fail(name, types, f"{names[0]} and {names[1]} must have the same shape "
                                    f"and dtype")
        if len(types[0].shape) < 1:
            raise fail(name, types, "inputs need rank >= 1 (the last axis is reduced)")
        return types[0]
    return infer


def check_affine(name: str, types, names) -> None:
    """``x`` (rank >= 1) then up to ``len(names) - 1`` vectors ``[D]`` of x's
    dtype (D = x's last extent)."""
    check_arity(name, types, 1, len(names), names=names)
    x = types[0]
    if len(x.shape) < 1:
        raise fail(name, types, "x needs rank >= 1")
    for n, t in zip(names[1:], types[1:]):
        if tuple(t.shape) != (x.shape[-1],) or t.dtype != x.dtype:
            raise fail(name, types, f"{n} must be [D] = [{x.shape[-1]}] of x's dtype "
                                    f"{x.dtype.value}, got {list(t.shape)} {t.dtype.value}")


def affine_recipe(norm):
    """A per-call recipe builder: ``norm(x_node)`` (the normalisation of x,
    shapes relative to bind 0), times ``Bind(1)`` and plus ``Bind(2)`` when
    present (broadcast over the leading axes); f16/bf16 cast to f32 first
    and round once at the end."""
    def build(params, types):
        dt = types[0].dtype
        narrow = dt in _NARROW

        def wide(node):
            return op("Cast", node, dtype=DType.F32) if narrow else node

        y = norm(wide(Bind(0)))
        for i, name in ((1, "Mul"), (2, "Add")):
            if len(types) > i:
                y = op(name, y, op("BroadcastTo", wide(Bind(i)), shape=SameAs(0)))
        return op("Cast", y, dtype=dt) if narrow else y
    return build


def affine_patterns(name: str, params, n_affine: int = 2):
    """Fusion patterns folding ``* weight`` and then ``+ bias`` (each ``[D]``,
    broadcast with or without the leading-1 Reshape) into the fused op
    ``name`` already matched on x (its ``eps`` read from it); ``n_affine=1``:
    the weight only."""
    from ..entry import FusedPattern

    def lifted(b):
        return (op("BroadcastTo", op("Reshape", b)), op("BroadcastTo", b))
    out = []
    for n_in, combine in ((1, "Mul"), (2, "Add"))[:n_affine]:
        inner = op(name, *(Bind(i) for i in range(n_in)), eps=SLOT)
        for k, vec in enumerate(lifted(Bind(n_in))):
            out.append(FusedPattern(op(combine, inner, vec), params,
                                    f"{'weight' if n_in == 1 else 'bias'}{'-padded' if k == 0 else ''}"))
    return tuple(out)
