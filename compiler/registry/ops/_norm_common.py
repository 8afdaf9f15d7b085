"""Shape/dtype rule shared by the (x, g) backward helpers of the norm family."""
from ._common import check_arity, check_float, fail


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
