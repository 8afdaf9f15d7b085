"""LLVM IR text fix-ups shared by every target that hands MLIR's LLVM IR to
llvmlite (``codegen/cpu`` and ``codegen/cuda``).

MLIR's translation prints float constants in LLVM 24's spellings (``-inf``,
``+qnan``, ``f0x<bits>``, shortest decimals) while llvmlite's LLVM 22 parser
reads only the hex forms; ``fixup_ir_text`` rewrites them, keeping every bit.
"""
from __future__ import annotations

import re
import struct

from compiler.errors import CodegenError

# -- special float literals ---------------------------------------------------
_SPECIAL_FLOAT = re.compile(
    r"\b(half|bfloat|float|double)\s+([+-])(inf|qnan|snan|nan)(?:\((0x[0-9a-fA-F]+)\))?")
# The same literals as a later operand (``fcmp oge half %x, +inf``): the type
# is the nearest float type keyword before it on the line.
_SPECIAL_OPERAND = re.compile(r"(?<=[\s,(\[<{])([+-])(inf|qnan|snan|nan)(?:\((0x[0-9a-fA-F]+)\))?(?![\w.])")

# (exponent bits, mantissa bits) per IR type.
_FORMATS = {"half": (5, 10), "bfloat": (8, 7), "float": (8, 23), "double": (11, 52)}


def _special_bits(kind: str, sign: str, what: str, payload: str | None) -> int:
    ebits, mbits = _FORMATS[kind]
    quiet = 1 << (mbits - 1)
    pay = int(payload, 16) if payload else 0
    mant = {"inf": 0, "qnan": quiet, "nan": quiet | pay, "snan": pay}[what]
    if what == "snan" and mant == 0:
        mant = 1  # an all-zero mantissa would be infinity
    exp = (1 << ebits) - 1
    return ((1 if sign == "-" else 0) << (ebits + mbits)) | (exp << mbits) | (mant & ((1 << mbits) - 1))


def _hex_literal(kind: str, bits: int) -> str:
    if kind == "half":
        return f"0xH{bits:04X}"
    if kind == "bfloat":
        return f"0xR{bits:04X}"
    if kind == "double":
        return f"0x{bits:016X}"
    # float literals are written as the double of the same value; NaN payloads
    # keep their bits shifted into the double mantissa.
    sign, exp, mant = bits >> 31, (bits >> 23) & 0xFF, bits & 0x7FFFFF
    dexp = 0x7FF if exp == 0xFF else exp  # only specials reach here
    return f"0x{(sign << 63) | (dexp << 52) | (mant << 29):016X}"


# LLVM 24 also prints some constants as ``f0x<bits>``: the raw bits in the
# type's own width, not always right after the type (``fcmp oge float %x,
# f0x4F000000``); the type is the nearest float type keyword before it.
_RAW_BITS = re.compile(r"(?<![\w.%@])f0x([0-9a-fA-F]+)\b")
_FLOAT_TYPE = re.compile(r"\b(half|bfloat|float|double)\b")


def _raw_bits_literal(kind: str, bits: int) -> str:
    if kind == "float" and (bits >> 23) & 0xFF != 0xFF:
        value = struct.unpack("<f", struct.pack("<I", bits))[0]
        return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"
    return _hex_literal(kind, bits)


def _fix_raw_bits_line(line: str) -> str:
    def sub(m: re.Match) -> str:
        kinds = _FLOAT_TYPE.findall(line, 0, m.start())
        if not kinds:
            raise CodegenError(f"cannot tell the type of float literal {m.group(0)} in: {line.strip()}")
        return _raw_bits_literal(kinds[-1], int(m.group(1), 16))
    return _RAW_BITS.sub(sub, line)


# LLVM 24 prints float/half constants as their shortest decimal (``fmul float
# %x, 4.471500e-02``); LLVM 22 requires a decimal literal to be exactly
# representable in the type, so such literals become hex (same bits).
_DECIMAL = re.compile(r"(?<![\w.%@\"])([-+]?\d+\.\d+(?:[eE][-+]?\d+)?)\b")


def _decimal_literal(kind: str, text: str) -> str | None:
    import numpy as np
    value = float(text)
    if kind == "float":
        f = np.float32(value)
        if float(f) == value or not np.isfinite(f):
            return None
        return f"0x{struct.unpack('<Q', struct.pack('<d', float(f)))[0]:016X}"
    if kind == "half":
        h = np.float16(value)
        if float(h) == value:
            return None
        return f"0xH{int(np.array(h).view(np.uint16)):04X}"
    if kind == "bfloat":  # (LLVM 24 prints e.g. ``fcmp oge bfloat %x, 2.147480e+09``)
        from runtime.dtype import f32_to_bf16
        return f"0xR{int(f32_to_bf16(np.float32(value))):04X}"
    return None  # double: every decimal LLVM prints is exact


def _fix_decimal_line(line: str) -> str:
    def sub(m: re.Match) -> str:
        kinds = _FLOAT_TYPE.findall(line, 0, m.start())
        if not kinds:
            return m.group(0)
        fixed = _decimal_literal(kinds[-1], m.group(1))
        return m.group(0) if fixed is None else fixed
    return _DECIMAL.sub(sub, line)


def _fix_special_operand_line(line: str) -> str:
    code, sep, comment = line.partition(";") if '"' not in line else (line, "", "")

    def sub(m: re.Match) -> str:
        kinds = _FLOAT_TYPE.findall(code, 0, m.start())
        if not kinds:
            return m.group(0)
        sign, what, payload = m.groups()
        return _hex_literal(kinds[-1], _special_bits(kinds[-1], sign, what, payload))
    return _SPECIAL_OPERAND.sub(sub, code) + sep + comment


def fixup_ir_text(text: str) -> str:
    """Rewrite the LLVM-24-only float literals of ``text`` (``-inf``,
    ``+qnan``, ``+nan(0x..)``, ``+snan(0x..)``, ``f0x<bits>``) to the hex
    forms LLVM 22 reads, keeping every bit."""
    def special(m: re.Match) -> str:
        kind, sign, what, payload = m.groups()
        return f"{kind} {_hex_literal(kind, _special_bits(kind, sign, what, payload))}"
    text = _SPECIAL_FLOAT.sub(special, text)
    if "inf" in text or "nan" in text:
        text = "\n".join(_fix_special_operand_line(l) if ("inf" in l or "nan" in l) else l
                         for l in text.split("\n"))
    if "f0x" in text:
        text = "\n".join(_fix_raw_bits_line(l) if "f0x" in l else l for l in text.split("\n"))
    text = "\n".join(_fix_decimal_line(l) if ("float" in l or "half" in l) and "e" in l else l
                     for l in text.split("\n"))
    return text
