"""The ``cuda`` target kind: PTX (and cubins) for NVIDIA GPUs through the
CUDA codegen package.

Spellings: ``"cuda"`` (sm_90), ``"cuda:sm_90"``, ``"cuda:sm_80"``, ... (any
architecture in ``ARCHS``). The target's ``arch`` is the ``sm_XX`` name
LLVM's NVPTX backend and ``ptxas`` get, ``llvm_features`` the PTX ISA
version (``+ptx80``), ``triple`` ``nvptx64-nvidia-cuda``. It has no CPU
features: nothing it generates runs on the host CPU.
"""
from __future__ import annotations

from runtime.keys import BackendId

from . import Target, TargetError, TargetKind, register_target_kind

TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_90"
#: Accepted architectures → the PTX ISA feature LLVM emits for them
#: (the lowest PTX version that has the architecture, at least 7.8).
ARCHS = {"sm_75": "+ptx78", "sm_80": "+ptx78", "sm_86": "+ptx78",
         "sm_89": "+ptx78", "sm_90": "+ptx80"}


def _accepted() -> list[str]:
    return ["cuda"] + [f"cuda:{a}" for a in ARCHS]


def parse_cuda(arch: str | None) -> Target:
    """The cuda Target for the text after ``cuda:`` (None: plain ``cuda``)."""
    arch = DEFAULT_ARCH if arch is None else arch
    features = ARCHS.get(arch)
    if features is None:
        raise TargetError(f"target 'cuda:{arch}' is not a known CUDA architecture; accepted: "
                          f"{', '.join(_accepted())}")
    return Target("cuda", arch, frozenset(), features, TRIPLE)


register_target_kind(TargetKind("cuda", BackendId.CUDA, parse_cuda, _accepted,
                                "compiler.codegen.cuda"))
