"""The compiled-kernel cache: content-addressed, in memory and on disk.

The key is a SHA-256 over the input IR, the entry names, the pipeline (its
version, stages and strategy, as the target's codegen package describes
it), a digest of the Python sources of that codegen package and of
``codegen/common`` (rewrites and transform scripts shape the code too, so a
changed or upgraded fuelc never reuses an object an older one compiled), the
``Target`` (triple, CPU name, features: objects for ``cpu:x86-64-v3`` and for
this machine never mix) and
the versions of the MLIR bindings and llvmlite. Objects are kept on disk under
``$FUELC_CACHE_DIR`` (default ``~/.cache/fuelc``)/``objects/<key[:2]>/<key>.o``,
so a kernel is compiled once per machine and target, across processes; in
memory the loaded ``CompiledObject`` is reused. ``KernelCache.stats`` counts
memory hits, disk hits, compiles and rejected disk entries.

Entry format (all integers little-endian)::

    offset  size  field
    0       8     magic b"FUELKOBJ"
    8       4     format version (u32, currently 1)
    12      4     key length K (u32)
    16      32    SHA-256 of the payload
    48      8     payload length N (u64)
    56      K     the entry's own full key (ASCII hex)
    56+K    N     payload: the relocatable x86-64 ELF object

Trust model: an entry is machine code that gets linked into the process, so
nothing read from disk reaches the loader unless it verified: the file is a
regular file owned by this user, the magic and version match, the key in the
entry equals the key asked for (an entry copied or swapped under another
name is refused) and the payload has exactly the recorded length and SHA-256
(a flipped bit or a truncation is refused). A bad entry is deleted, the
kernel recompiled and the entry rewritten; ``KernelCacheWarning`` reports it
once per process per kind of problem, naming the file; ``stats.rejected``
counts every one. Files in the older headerless format are bad entries.

The hash detects damage, not forgery: whoever can write the cache directory
can write a well-formed entry. So the directory must be private: fuelc
creates every directory level it makes with mode 0700 and writes entries
0600, and if the cache directory or its ``objects/`` directory is owned by
another user or is group- or world-writable, the disk cache is not used at
all (memory only, one warning saying how to fix it). Writes go to a
temporary file in the entry's directory and are renamed into place, so
readers never see a partial entry; a failed write (a full disk, a read-only
directory) removes its temporary file and only costs recompiles. A writer
holds its temporary file locked (``flock``) until the rename; the first use
of the disk cache in a process removes temp files no writer holds (left by
a writer that was killed). Entry files are opened with ``O_NOFOLLOW |
O_NONBLOCK`` (a FIFO planted at an entry's path is refused, never waited
on), and a shard directory ``objects/<xx>`` that is a symlink is removed and
recreated, never written through.
"""
from __future__ import annotations

import collections
import functools
import dataclasses
import errno
import fcntl
import hashlib
import os
import re
import stat
import struct
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Sequence

from compiler.codegen.loader import CompiledObject, ObjectLoadError, load_object
from runtime.cpu_features import check_cpu_features
from runtime.errors import FuelError

MAGIC = b"FUELKOBJ"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sII32sQ")  # magic, version, key length, sha256, payload length


class KernelCacheWarning(UserWarning):
    """The on-disk kernel cache refused an entry or is not used at all; the
    kernels still work (they are recompiled)."""


class CacheEntryError(FuelError, ValueError):
    """A disk cache entry that does not verify; ``kind`` says which check
    failed (format, key, length, hash, owner, read, load). The cache turns it
    into a recompile and a ``KernelCacheWarning``."""

    def __init__(self, kind: str, what: str):
        super().__init__(what)
        self.kind = kind


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(tag: str, message: str) -> None:
    """One ``KernelCacheWarning`` per process for each ``tag``."""
    with _warned_lock:
        if tag in _warned:
            return
        _warned.add(tag)
    warnings.warn(message, KernelCacheWarning, stacklevel=4)


def default_cache_dir() -> Path:
    """``$FUELC_CACHE_DIR``, else ``~/.cache/fuelc``."""
    env = os.environ.get("FUELC_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "fuelc"


@functools.lru_cache(maxsize=None)
def _version(dist: str) -> str:
    """The installed version of ``dist`` as ``importlib.metadata.version``
    reports it ("?" when it is not installed): part of every key. Read here
    from the one ``.dist-info`` of ``dist`` in the first ``sys.path`` entry
    that has its metadata, the entry ``importlib.metadata`` takes it from
    (some 0.1 ms, where ``importlib.metadata`` took 3-4 ms of compile()'s
    serial front on first use, more when the process had not imported it:
    docs/compile-at-scale.md); anything else (no such entry, several
    candidates, an egg, a zip on the path) is asked of ``importlib.metadata``."""
    found = _dist_info(dist)
    version = _metadata_version(found) if found else None
    if version is not None:
        return version
    import importlib.metadata
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _dist_info(dist: str) -> "str | None":
    """The ``<name>-<version>.dist-info`` directory of ``dist`` that
    ``importlib.metadata`` would read (names normalised as it does), when
    the first ``sys.path`` entry with metadata of ``dist`` is a plain
    directory holding exactly that one; else None."""
    name = re.sub(r"[-_.]+", "_", dist).lower()
    for entry in sys.path:
        entry = entry or "."
        if entry.lower().endswith(".egg"):
            return None
        try:
            children = os.listdir(entry)
        except NotADirectoryError:  # a zip file on the path: importlib.metadata looks inside
            return None
        except OSError:  # a missing entry (python3XX.zip) holds nothing
            continue
        infos = [c for c in children if c.lower().endswith((".dist-info", ".egg-info"))
                 and re.sub(r"[-_.]+", "_", c.rpartition(".")[0].partition("-")[0]).lower() == name]
        if infos:
            one = len(infos) == 1 and infos[0].lower().endswith(".dist-info")
            return os.path.join(entry, infos[0]) if one else None
    return None


def _metadata_version(dist_info: str) -> "str | None":
    """The first ``Version`` header of ``dist_info``'s ``METADATA`` (its
    header lines end at the first blank line), or None."""
    try:
        with open(os.path.join(dist_info, "METADATA"), encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    return None
                key, sep, value = line.partition(":")
                if sep and key.strip().lower() == "version":
                    return value.strip() or None
    except (OSError, UnicodeDecodeError):
        return None
    return None


_COMMON_CODEGEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "common")


@functools.lru_cache(maxsize=None)
def sources_digest(package_dir: str) -> str:
    """A SHA-256 over the ``.py`` files under ``package_dir`` (relative
    paths and contents, in sorted order)."""
    h = hashlib.sha256()
    root = Path(package_dir)
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def encode_entry(key: str, payload: bytes) -> bytes:
    """The on-disk entry for ``payload`` stored under ``key``."""
    k = key.encode("ascii")
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(k), hashlib.sha256(payload).digest(),
                        len(payload)) + k + payload


def decode_entry(key: str, entry: bytes) -> bytes:
    """The payload of ``entry`` if it is a well-formed entry for ``key`` whose
    payload matches its recorded length and SHA-256; else CacheEntryError."""
    if len(entry) < _HEADER.size or entry[:8] != MAGIC:
        raise CacheEntryError("format", "it is not a fuelc cache entry (no FUELKOBJ header: a "
                                 "damaged file, an entry from an older fuelc, or a foreign file)")
    magic, version, key_len, digest, length = _HEADER.unpack_from(entry)
    if version != FORMAT_VERSION:
        raise CacheEntryError("format", f"it has entry format version {version}; this fuelc "
                                 f"reads version {FORMAT_VERSION}")
    k = key.encode("ascii")
    stored = entry[_HEADER.size:_HEADER.size + key_len]
    if stored != k:
        raise CacheEntryError("key", f"it holds the entry for key {stored[:80]!r}, not for "
                              f"{key!r} (a copied, swapped or planted file)")
    payload = entry[_HEADER.size + key_len:]
    if len(payload) != length:
        raise CacheEntryError("length", f"its payload has {len(payload)} bytes where the header "
                                 f"records {length} (a truncated or extended file)")
    if hashlib.sha256(payload).digest() != digest:
        raise CacheEntryError("hash", "the SHA-256 of its payload does not match the header "
                               "(the file was damaged or modified)")
    return payload


def _insecure(path: Path, st: os.stat_result) -> str | None:
    """Why a cache directory is not private to this user, or None."""
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is group- or world-writable (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _make_private_dirs(path: Path) -> None:
    """``mkdir -p path`` where every level created gets mode 0700."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for p in reversed(missing):
        try:
            os.mkdir(p, 0o700)
        except FileExistsError:
            continue  # made concurrently; its owner and mode are checked by the caller
        os.chmod(p, 0o700)  # the umask may only have narrowed it; make it exact


def _real_private_dir(path: Path) -> bool:
    """Whether ``path`` itself (not a symlink) is a directory private to
    this user."""
    try:
        return _insecure(path, os.lstat(path)) is None
    except OSError:
        return False


def _make_shard_dir(path: Path) -> None:
    """Make sure the shard directory ``objects/<xx>`` is a real directory
    private to this user. A symlink (or other non-directory) planted there
    is removed and replaced, so entries are never written through it; a
    directory that is not private raises OSError (the entry is not written)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        _make_private_dirs(path)
        st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)  # inside our private objects/ directory
        _warn_once(f"shard:{path}", f"fuelc kernel cache: {path} was not a directory (a "
                   "symlink or file planted there); it was removed and made a private directory")
        _make_private_dirs(path)
        st = os.lstat(path)
    problem = _insecure(path, st)
    if problem is not None:
        raise OSError(errno.EPERM, f"the cache shard is not private: {problem}")


#: A temp file older than this that no writer holds locked is a leftover.
STALE_TEMP_SECONDS = 1.0


def sweep_stale_temp_files(objects: Path) -> int:
    """Remove the temp files writers that died (SIGKILL, power loss) left in
    ``objects/<xx>/``: ``.*.tmp`` files no live writer holds locked, older
    than ``STALE_TEMP_SECONDS``. Shards that are not real private
    directories are skipped. Returns how many were removed."""
    import time
    removed, now = 0, time.time()
    try:
        shards = list(os.scandir(objects))
    except OSError:
        return 0
    for shard in shards:
        if not shard.is_dir(follow_symlinks=False) or not _real_private_dir(Path(shard.path)):
            continue
        try:
            names = [e.name for e in os.scandir(shard.path)
                     if e.name.startswith(".") and e.name.endswith(".tmp")]
        except OSError:
            continue
        for name in names:
            p = os.path.join(shard.path, name)
            try:
                fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or \
                        now - st.st_mtime < STALE_TEMP_SECONDS:
                    continue
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: a live writer
                os.unlink(p)
                removed += 1
            except OSError:
                continue
            finally:
                os.close(fd)
    return removed


@dataclasses.dataclass
class CacheStats:
    memory_hits: int = 0
    disk_hits: int = 0
    compiles: int = 0
    rejected: int = 0  # disk entries refused (damaged, swapped, planted, old format)


class KernelCache:
    """Compiled objects by content hash. ``directory=None`` keeps them in
    memory only; so does a directory that is not private to this user.
    At most ``MAX_LOADED`` objects stay loaded (least recently used dropped
    first), so a process compiling ever-new graphs stays bounded."""

    MAX_LOADED = 2048

    def __init__(self, directory: Path | str | None = None):
        self.directory = Path(directory) if directory is not None else None
        self.stats = CacheStats()
        # Loaded objects, least recently used first; beyond MAX_LOADED the
        # oldest are dropped (unmapped once no kernel refers to them).
        self._memory: "collections.OrderedDict[str, CompiledObject]" = collections.OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._disk_checked = False
        self._disk_usable = False

    # -- keys ------------------------------------------------------------------
    def key(self, text: str, entry_names: Sequence[str], strategy=None, target=None) -> str:
        """The content hash for compiling ``text`` with these entries for
        ``target`` (default ``"cpu"``) with ``strategy`` (None: the one the
        target's rules pick)."""
        target = _target(target)
        h = hashlib.sha256()
        codegen = target.codegen
        # every codegen package builds on the shared stage helpers and LLVM fix-ups
        packages = dict.fromkeys([_COMMON_CODEGEN,
                                  os.path.dirname(os.path.abspath(codegen.__file__))])
        for part in (codegen.describe_pipeline(strategy), *map(sources_digest, packages),
                     target.description,
                     _version("torch-mlir"), _version("llvmlite"), ",".join(entry_names), text):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def object_path(self, key: str) -> Path | None:
        if self.directory is None:
            return None
        return self.directory / "objects" / key[:2] / f"{key}.o"

    @property
    def disk_enabled(self) -> bool:
        """Whether entries are read from and written to disk: there is a
        directory, and it (with ``objects/``) is private to this user. Checked
        (and created, mode 0700) on first use."""
        if self.directory is None:
            return False
        with self._lock:
            if not self._disk_checked:
                self._disk_usable = self._check_directory()
                self._disk_checked = True
            return self._disk_usable

    def _check_directory(self) -> bool:
        objects = self.directory / "objects"
        try:
            _make_private_dirs(objects)
            problem = (_insecure(self.directory, os.stat(self.directory))
                       or _insecure(objects, os.lstat(objects)))
        except OSError as e:
            problem = f"it cannot be created or inspected ({e})"
        if problem is None:
            sweep_stale_temp_files(objects)
            return True
        _warn_once(f"dir:{self.directory}",
                   f"fuelc kernel cache: not using the disk cache in {self.directory}: "
                   f"{problem}. Its entries are loaded as code, so it must be private: run "
                   f"`chmod 700 {self.directory} {objects}` if it is yours, or point "
                   "FUELC_CACHE_DIR at a directory of your own. Kernels are kept in memory "
                   "only until then.")
        return False

    # -- lookups ---------------------------------------------------------------
    def get_or_compile(self, text: str, entry_names: Sequence[str], *, strategy=None,
                       target=None, load: bool = True) -> CompiledObject | None:
        """The loaded object for (text, entries, strategy, target): from
        memory, else from a verified disk entry, else compiled (and stored in
        both). A target this CPU cannot run is compiled and stored, then
        ``CpuFeatureError``. ``load=False``: only make sure a verified entry
        is on disk (compiling when there is none) and return None."""
        target = _target(target)
        key = self.key(text, entry_names, strategy, target)
        if not load:
            if not self._has_verified_entry(key):
                data = target.codegen.emit_object(text, entry_names, target=target,
                                                  strategy=strategy)
                with self._lock:
                    self.stats.compiles += 1
                self._store_on_disk(key, data)
            return None
        with self._lock:
            hit = self._memory.get(key)
            if hit is not None:
                self._memory.move_to_end(key)
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
                while len(self._memory) > self.MAX_LOADED:
                    old, _ = self._memory.popitem(last=False)
                    self._key_locks.pop(old, None)
            return obj

    def has(self, text: str, entry_names: Sequence[str], *, strategy=None, target=None) -> bool:
        """Whether (text, entries, strategy, target) is loaded or has a
        verified disk entry: ``get_or_compile`` would not compile."""
        key = self.key(text, entry_names, strategy, _target(target))
        with self._lock:
            if key in self._memory:
                return True
        return self._has_verified_entry(key)

    def put(self, text: str, entry_names: Sequence[str], data: bytes, *, strategy=None,
            target=None, load: bool = True) -> CompiledObject | None:
        """Store ``data``, the object another process compiled for (text,
        entries, strategy, target) (``compiler.codegen.jobs``), on disk and,
        with ``load``, in memory; returns the loaded object (else None)."""
        target = _target(target)
        key = self.key(text, entry_names, strategy, target)
        with self._lock:
            self.stats.compiles += 1
        self._store_on_disk(key, data)
        if not load:
            return None
        obj = load_object(data, target.features, str(target))
        with self._lock:
            obj = self._memory.setdefault(key, obj)
            self._memory.move_to_end(key)
            while len(self._memory) > self.MAX_LOADED:
                old, _ = self._memory.popitem(last=False)
                self._key_locks.pop(old, None)
        return obj

    def object_bytes(self, text: str, entry_names: Sequence[str], *, strategy=None,
                     target=None) -> bytes:
        """The relocatable object for (text, entries, strategy, target)
        without loading it (for export; any target): from memory, else a
        verified disk entry, else compiled (and stored on disk)."""
        target = _target(target)
        key = self.key(text, entry_names, strategy, target)
        with self._lock:
            hit = self._memory.get(key)
        if hit is not None:
            return hit.object_bytes
        if self.disk_enabled:
            try:
                data = decode_entry(key, self._read_entry(self.object_path(key)))
                with self._lock:
                    self.stats.disk_hits += 1
                return data
            except FileNotFoundError:
                pass
            except (OSError, CacheEntryError):
                pass  # recompiled and rewritten below
        data = target.codegen.emit_object(text, entry_names, target=target, strategy=strategy)
        with self._lock:
            self.stats.compiles += 1
        self._store_on_disk(key, data)
        return data

    def _has_verified_entry(self, key: str) -> bool:
        if not self.disk_enabled:
            return False
        path = self.object_path(key)
        try:
            decode_entry(key, self._read_entry(path))
            return True
        except (OSError, CacheEntryError):
            return False

    def _load_from_disk(self, key: str, target) -> CompiledObject | None:
        """The object of the verified entry for ``key`` (built for ``target``);
        None if there is none (a bad entry is deleted, counted and reported)."""
        if not self.disk_enabled:
            return None
        path = self.object_path(key)
        check_cpu_features(target.features, target=str(target), what="a cached kernel object")
        try:
            payload = decode_entry(key, self._read_entry(path))
            obj = load_object(payload, target.features, str(target))
        except FileNotFoundError:
            return None
        except OSError as e:
            self._reject(path, CacheEntryError("read", f"it cannot be read ({e})"))
            return None
        except CacheEntryError as e:
            self._reject(path, e)
            return None
        except ObjectLoadError as e:  # verified, but not loadable in this process
            self._reject(path, CacheEntryError("load", f"its object does not load: {e}"))
            return None
        with self._lock:
            self.stats.disk_hits += 1
        return obj

    @staticmethod
    def _read_entry(path: Path) -> bytes:
        """The bytes of the entry file at ``path``: a regular file (not a
        symlink) owned by this user, in a directory only this user can write."""
        problem = _insecure(path.parent, os.lstat(path.parent))
        if problem is not None:
            raise CacheEntryError("owner", f"its directory is not private: {problem}")
        # O_NONBLOCK: a FIFO planted at the entry's path must not block the open
        # (it is refused as "not a regular file" just below).
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                raise CacheEntryError("owner", f"it is not a regular file owned by this user "
                                        f"(uid {st.st_uid}, mode {st.st_mode:o})")
            return f.read()

    def _reject(self, path: Path, why: CacheEntryError) -> None:
        with self._lock:
            self.stats.rejected += 1
        try:
            if _real_private_dir(path.parent):  # never unlink through a planted symlink
                path.unlink()
        except OSError:
            pass  # a new entry replaces it atomically anyway
        _warn_once(f"entry:{why.kind}",
                   f"fuelc kernel cache: refused entry {path}: {why}. It was deleted and "
                   "the kernel is recompiled (further entries refused for this reason in "
                   "this process are only counted in KernelCache.stats.rejected).")

    def _store_on_disk(self, key: str, data: bytes) -> None:
        """Write the entry for ``key`` atomically (temp file + rename, 0600);
        on failure remove the temp file and report once."""
        if not self.disk_enabled:
            return
        path = self.object_path(key)
        tmp = None
        try:
            _make_shard_dir(path.parent)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:16]}.", suffix=".tmp")
            # Locked while it exists under its temp name: a sweep only removes
            # temp files no live writer holds.
            fcntl.flock(fd, fcntl.LOCK_EX)
            with os.fdopen(fd, "wb") as f:  # mkstemp: mode 0600, owned by this user
                f.write(encode_entry(key, data))
                f.flush()
                os.replace(tmp, path)  # atomic: readers never see a partial entry
        except OSError as e:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            reason = errno.errorcode.get(e.errno, "error") if e.errno else type(e).__name__
            _warn_once(f"write:{reason}",
                       f"fuelc kernel cache: could not write {path}: {e}. Kernels still "
                       "work but are recompiled in every process; free space in (or fix "
                       "permissions of) the directory, or point FUELC_CACHE_DIR elsewhere.")

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


__all__ = ["KernelCache", "CacheStats", "KernelCacheWarning", "CacheEntryError", "encode_entry", "decode_entry",
           "default_cache", "set_default_cache", "default_cache_dir"]
