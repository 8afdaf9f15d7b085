"""torch dtypes <-> fuelc dtypes, and torch tensors <-> numpy arrays.

Each float and integer dtype maps to the fuelc dtype of the same name; bf16
arrays are ``ml_dtypes.bfloat16`` (``DType.BF16.numpy``) and ``torch.bool``
is ``u8`` (0/1, as fuelc's comparisons produce). Conversions share memory
where the layout allows (a contiguous CPU tensor and its numpy view).
"""
from __future__ import annotations

import numpy as np
import torch

from runtime.dtype import DType

#: torch dtype -> fuelc dtype
DTYPES = {
    torch.float32: DType.F32, torch.float64: DType.F64, torch.float16: DType.F16,
    torch.bfloat16: DType.BF16, torch.int8: DType.I8, torch.uint8: DType.U8,
    torch.int16: DType.I16, torch.int32: DType.I32, torch.int64: DType.I64,
    torch.uint32: DType.U32, torch.bool: DType.U8,
}
#: fuelc dtype -> torch dtype (u8 is torch.uint8; bool outputs are restored by the caller)
TORCH_DTYPES = {d: t for t, d in DTYPES.items() if t is not torch.bool}


class UnsupportedDType(ValueError):
    """A torch dtype with no fuelc dtype."""


def dtype_of(t: torch.dtype) -> DType:
    """The fuelc dtype of torch dtype ``t`` (UnsupportedDType if none)."""
    try:
        return DTYPES[t]
    except KeyError:
        names = ", ".join(str(k).removeprefix("torch.") for k in DTYPES)
        raise UnsupportedDType(f"dtype {t} has no fuelc dtype (supported: {names})") from None


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A numpy array of ``t``'s values (a view of its memory when ``t`` is a
    contiguous CPU tensor): bf16 as ``ml_dtypes.bfloat16``, bool as u8 (0/1)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    dt = dtype_of(t.dtype)
    if t.dtype is torch.bfloat16:
        return t.view(torch.int16).numpy().view(DType.BF16.numpy)
    if t.dtype is torch.bool:
        return t.view(torch.uint8).numpy()
    out = t.numpy()
    assert out.dtype == dt.numpy, (out.dtype, dt)
    return out


def from_numpy(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A torch tensor of dtype ``dtype`` sharing ``a``'s memory (``a`` holds
    fuelc's values of it: ml_dtypes bf16, u8 for bool)."""
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    if dtype is torch.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    t = torch.from_numpy(a)
    return t.view(torch.bool) if dtype is torch.bool else t
