"""The kernel ABI of CUDA kernels: what the compiler records with each
compiled op and what the runtime needs to run it (no CUDA needed here).

A compiled op is a ``KernelProgram``: the device code (PTX, and a cubin when
``ptxas`` was available), its parameters (the op's inputs then its output,
each a dense row-major buffer), the device temporaries it allocates, and the
ordered launches. Each ``Launch`` names one ``.entry`` of the PTX, its grid
and block (x, y, z), the dynamic shared memory in bytes, and its argument
list: each argument is a ``("param", i)`` or ``("temp", i)`` buffer passed
as one bare device pointer (``.param .u64``), or a ``("i64", value)``
scalar.
"""
from __future__ import annotations

import dataclasses
import json
import math

from ..errors import KernelError


@dataclasses.dataclass(frozen=True)
class Buffer:
    """A dense row-major device buffer: shape, MLIR element type (``f32``,
    ``bf16``, ``i1``, ...) and bytes per element."""

    shape: tuple[int, ...]
    element: str
    itemsize: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize


@dataclasses.dataclass(frozen=True)
class Launch:
    """One kernel launch: ``.entry`` name, grid and block (x, y, z), dynamic
    shared memory bytes, arguments (see the module docstring)."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: tuple[tuple[str, int], ...]

    @property
    def threads(self) -> int:
        return math.prod(self.block)


@dataclasses.dataclass(frozen=True)
class KernelProgram:
    """One compiled op for a CUDA architecture (see the module docstring)."""

    arch: str
    ptx: str
    cubin: bytes | None
    params: tuple[Buffer, ...]
    temps: tuple[Buffer, ...]
    launches: tuple[Launch, ...]

    def __post_init__(self):
        for launch in self.launches:
            for kind, i in launch.args:
                bound = {"param": len(self.params), "temp": len(self.temps)}.get(kind)
                if bound is not None and not 0 <= i < bound:
                    raise KernelError(f"launch of {launch.kernel}: argument ({kind}, {i}) is out "
                                      f"of range ({bound} {kind}s)")
                if bound is None and kind != "i64":
                    raise KernelError(f"launch of {launch.kernel}: unknown argument kind {kind!r}")
            if launch.threads > 1024 or min(launch.block + launch.grid) < 1:
                raise KernelError(f"launch of {launch.kernel}: grid {launch.grid} block "
                                  f"{launch.block} is not a valid CUDA launch")

    def to_bytes(self) -> bytes:
        """A self-describing serialisation (JSON header, then the cubin)."""
        head = {"arch": self.arch, "ptx": self.ptx,
                "params": [dataclasses.astuple(b) for b in self.params],
                "temps": [dataclasses.astuple(b) for b in self.temps],
                "launches": [[l.kernel, l.grid, l.block, l.shared_bytes, l.args]
                             for l in self.launches],
                "cubin": len(self.cubin) if self.cubin is not None else None}
        text = json.dumps(head).encode()
        return len(text).to_bytes(8, "little") + text + (self.cubin or b"")

    @classmethod
    def from_bytes(cls, data: bytes) -> "KernelProgram":
        try:
            n = int.from_bytes(data[:8], "little")
            head = json.loads(data[8:8 + n])
            cubin = data[8 + n:] if head["cubin"] is not None else None
            if cubin is not None and len(cubin) != head["cubin"]:
                raise ValueError(f"cubin length {len(cubin)} != {head['cubin']}")
            buf = lambda b: Buffer(tuple(b[0]), b[1], b[2])  # noqa: E731
            return cls(head["arch"], head["ptx"], cubin, tuple(map(buf, head["params"])),
                       tuple(map(buf, head["temps"])),
                       tuple(Launch(k, tuple(g), tuple(b), s, tuple(tuple(a) for a in args))
                             for k, g, b, s, args in head["launches"]))
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise KernelError(f"not a serialized CUDA kernel program: {e}") from None


__all__ = ["Buffer", "Launch", "KernelProgram"]
