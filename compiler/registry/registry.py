"""The frozen static fused-op registry.

``default_registry()`` builds it once from ``ENTRY_MODULES`` (one module per
fused op under ``compiler/registry/ops/``; adding a fused op is one new module
plus one line there) and returns the same frozen object afterwards.
"""
from __future__ import annotations

import importlib
import threading
from types import MappingProxyType
from typing import Iterator, Optional

from .entry import RUNTIME_FUSED_BASE, FusedOpEntry
from .errors import RegistryError

#: (module under compiler.registry.ops, attribute) of every static entry, in id order.
ENTRY_MODULES = (
    ("softmax_last_dim", "ENTRY"),
    ("fused_linear", "ENTRY"),
    ("rms_norm_last_dim", "ENTRY"),
    ("layer_norm_last_dim", "ENTRY"),
    ("rope", "ENTRY"),
    ("conv2d", "ENTRY"),
    ("softmax_last_dim_backward", "ENTRY"),
    ("layer_norm_last_dim_backward", "ENTRY"),
    ("rms_norm_last_dim_backward", "ENTRY"),
    ("reduce_max_to_backward", "ENTRY"),
    ("conv_transpose_2d", "ENTRY"),
    ("flash_attn", "ENTRY"),
    ("paged_attn", "ENTRY"),
    ("qmatmul", "ENTRY"),
    ("powi_backward", "ENTRY"),
    ("inplace_affine", "ENTRY"),
    ("fused_softmax_cross_entropy", "ENTRY"),
    ("causal_conv1d", "ENTRY"),
    ("selective_scan", "ENTRY"),
    ("ssd_chunk_scan", "ENTRY"),
    ("nf4_matmul", "ENTRY"),
    ("flash_attn_backward", "ENTRY_Q"),
    ("flash_attn_backward", "ENTRY_K"),
    ("flash_attn_backward", "ENTRY_V"),
    ("awq_matmul", "ENTRY"),
    ("max_pool2d", "ENTRY"),
    ("expand_depthwise", "ENTRY"),
)


class FusedOpRegistry:
    """An immutable table of static entries, by id and by name."""

    def __init__(self, entries):
        by_id: dict[int, FusedOpEntry] = {}
        by_name: dict[str, FusedOpEntry] = {}
        by_mnemonic: dict[str, FusedOpEntry] = {}
        for e in entries:
            if not 1 <= e.id < RUNTIME_FUSED_BASE:
                raise RegistryError(f"{e.name}: static id {e.id} must be in [1, 0x8000)")
            for table, key in ((by_id, e.id), (by_name, e.name), (by_mnemonic, e.mnemonic)):
                if key in table:
                    raise RegistryError(f"duplicate fused op {key!r} ({table[key].name} and "
                                        f"{e.name})")
                table[key] = e
        self._by_id = MappingProxyType(by_id)
        self._by_name = MappingProxyType(by_name)
        self._by_mnemonic = MappingProxyType(by_mnemonic)

    def get(self, key) -> Optional[FusedOpEntry]:
        """The entry for an id, name or mnemonic, or None."""
        if isinstance(key, int):
            return self._by_id.get(key)
        return self._by_name.get(key) or self._by_mnemonic.get(key)

    def __getitem__(self, key) -> FusedOpEntry:
        e = self.get(key)
        if e is None:
            import difflib
            close = difflib.get_close_matches(str(key), list(self._by_name), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise RegistryError(f"no static fused op {key!r}{hint} (ids 1..{len(self)})")
        return e

    def __contains__(self, key) -> bool:
        return self.get(key) is not None

    def __iter__(self) -> Iterator[FusedOpEntry]:
        return iter(sorted(self._by_id.values(), key=lambda e: e.id))

    def __len__(self) -> int:
        return len(self._by_id)

    def id_for_name(self, name: str) -> Optional[int]:
        e = self._by_name.get(name)
        return e.id if e else None

    def names(self) -> list[str]:
        return [e.name for e in self]


_LOCK = threading.RLock()
_REGISTRY: Optional[FusedOpRegistry] = None


def build_registry(modules=ENTRY_MODULES) -> FusedOpRegistry:
    entries = []
    for mod, attr in modules:
        m = importlib.import_module(f"compiler.registry.ops.{mod}")
        entries.append(getattr(m, attr))
    return FusedOpRegistry(entries)


def default_registry() -> FusedOpRegistry:
    """The frozen registry of the 25 static fused ops (built once)."""
    global _REGISTRY
    if _REGISTRY is None:
        with _LOCK:
            if _REGISTRY is None:
                _REGISTRY = build_registry()
    return _REGISTRY
