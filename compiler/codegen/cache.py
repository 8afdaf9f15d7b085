"""The compiled-kernel cache: content-addressed, in memory and on disk.

The key is a SHA-256 over the input IR, the entry names, the pipeline (its
version, stages and strategy, as the target's codegen package describes
it), the ``Target`` (triple, CPU name, features: objects for
``cpu:x86-64-v3`` and for this machine never mix) and the versions of the
MLIR bindings and llvmlite. Objects are kept on disk
as relocatable ELF files under ``$FUELC_CACHE_DIR`` (default
``~/.cache/fuelc``)/``objects/``, so a kernel is compiled once per machine,
across processes; in memory the loaded ``CompiledObject`` is reused.
``KernelCache.stats`` counts memory hits, disk hits and compiles.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import os
import tempfile
import threading
from pathlib import Path
from typing import Sequence

from compiler.codegen.loader import CompiledObject, ObjectLoadError, load_object
from runtime.cpu_features import check_cpu_features


def default_cache_dir() -> Path:
    """``$FUELC_CACHE_DIR``, else ``~/.cache/fuelc``."""
    env = os.environ.get("FUELC_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "fuelc"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


@dataclasses.dataclass
class CacheStats:
    memory_hits: int = 0
    disk_hits: int = 0
    compiles: int = 0


class KernelCache:
    """Compiled objects by content hash. ``directory=None`` keeps them in
    memory only."""

    def __init__(self, directory: Path | str | None = None):
        self.directory = Path(directory) if directory is not None else None
        self.stats = CacheStats()
        self._memory: dict[str, CompiledObject] = {}
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}

    # -- keys ------------------------------------------------------------------
    def key(self, text: str, entry_names: Sequence[str], strategy=None, target=None) -> str:
        """The content hash for compiling ``text`` with these entries for
        ``target`` (default ``"cpu"``) with ``strategy`` (None: the one the
        target's rules pick)."""
        target = _target(target)
        h = hashlib.sha256()
        for part in (target.codegen.describe_pipeline(strategy), target.description,
                     _version("torch-mlir"), _version("llvmlite"), ",".join(entry_names), text):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def object_path(self, key: str) -> Path | None:
        if self.directory is None:
            return None
        return self.directory / "objects" / key[:2] / f"{key}.o"

    # -- lookups ---------------------------------------------------------------
    def get_or_compile(self, text: str, entry_names: Sequence[str], *, strategy=None,
                       target=None, load: bool = True) -> CompiledObject | None:
        """The loaded object for (text, entries, strategy, target): from
        memory, else from disk, else compiled (and stored in both). A target
        this CPU cannot run is compiled and stored, then ``CpuFeatureError``.
        ``load=False``: only make sure the object is on disk (or compile it
        when there is no disk cache) and return None."""
        target = _target(target)
        key = self.key(text, entry_names, strategy, target)
        if not load:
            path = self.object_path(key)
            if path is None or not path.is_file():
                data = target.codegen.emit_object(text, entry_names, target=target,
                                                  strategy=strategy)
                with self._lock:
                    self.stats.compiles += 1
                self._store_on_disk(key, data)
            return None
        with self._lock:
            hit = self._memory.get(key)
            if hit is not None:
                self.stats.memory_hits += 1
                return hit
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # one compile per key, even with concurrent callers
            with self._lock:
                hit = self._memory.get(key)
                if hit is not None:
                    self.stats.memory_hits += 1
                    return hit
            obj = self._load_from_disk(key, target)
            if obj is None:
                data = target.codegen.emit_object(text, entry_names, target=target,
                                                  strategy=strategy)
                with self._lock:
                    self.stats.compiles += 1
                self._store_on_disk(key, data)
                obj = load_object(data, target.features, str(target))
            with self._lock:
                self._memory[key] = obj
            return obj

    def _load_from_disk(self, key: str, target) -> CompiledObject | None:
        path = self.object_path(key)
        if path is None or not path.is_file():
            return None
        check_cpu_features(target.features, target=str(target), what="a cached kernel object")
        try:
            obj = load_object(path.read_bytes(), target.features, str(target))
        except (OSError, ObjectLoadError):
            # A truncated or foreign file: drop it and compile again.
            try:
                path.unlink()
            except OSError:
                pass
            return None
        with self._lock:
            self.stats.disk_hits += 1
        return obj

    def _store_on_disk(self, key: str, data: bytes) -> None:
        path = self.object_path(key)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # atomic: readers never see a partial object
        except OSError:
            pass  # a read-only or full cache dir only costs recompiles

    def clear_memory(self) -> None:
        """Forget loaded objects (disk entries stay)."""
        with self._lock:
            self._memory.clear()


def _target(target):
    from compiler.targets import parse_target
    return parse_target("cpu" if target is None else target)


_default: KernelCache | None = None
_default_lock = threading.Lock()


def default_cache() -> KernelCache:
    """The process-wide cache, on disk under ``default_cache_dir()``."""
    global _default
    with _default_lock:
        if _default is None:
            _default = KernelCache(default_cache_dir())
        return _default


def set_default_cache(cache: KernelCache | None) -> None:
    """Replace the process-wide cache (None: recreate from the environment)."""
    global _default
    with _default_lock:
        _default = cache


__all__ = ["KernelCache", "CacheStats", "default_cache", "set_default_cache", "default_cache_dir"]
