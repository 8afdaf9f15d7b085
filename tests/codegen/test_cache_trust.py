"""The disk cache is loaded as code: entries verify before anything is
loaded, the directory must be private, writes are atomic and clean up."""
import errno
import os
import random
import re
import shutil
import stat
import struct
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import codegen_ir as IR
from compiler.codegen import cache as cache_mod
from compiler.codegen.cache import (CacheEntryError, KernelCache, KernelCacheWarning,
                                    decode_entry, encode_entry)
from compiler.codegen.cpu import choose_strategy, compile_module, emit_object
from compiler.codegen.loader import ObjectLoadError, elf_symbols, load_object
from compiler.codegen.memref import descriptor_from_array as D

REPO = Path(__file__).resolve().parents[2]
SUB_DYN = IR.ADD_DYN.replace("linalg.add", "linalg.sub")  # same signature and symbol, a - b


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(cache_mod, "_warned", set())


@pytest.fixture(scope="module")
def add_object():
    return emit_object(IR.ADD_DYN, ["add"])


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- the entry format ---------------------------------------------------------------
def test_entry_round_trip():
    entry = encode_entry("ab" * 32, b"payload bytes")
    assert entry[:8] == b"FUELKOBJ"
    assert decode_entry("ab" * 32, entry) == b"payload bytes"


@pytest.mark.parametrize("damage, kind, message", [
    (lambda e: b"\x7fELF" + e[4:], "format", "not a fuelc cache entry"),
    (lambda e: e[:8] + struct.pack("<I", 99) + e[12:], "format", "format version 99"),
    (lambda e: e[:56] + b"cd" + e[58:], "key", "holds the entry for key"),
    (lambda e: e[:-1], "length", "payload has 12 bytes where the header records 13"),
    (lambda e: e + b"x", "length", "payload has 14 bytes"),
    (lambda e: e[:-1] + bytes([e[-1] ^ 1]), "hash", "SHA-256"),
    (lambda e: e[:20], "format", "not a fuelc cache entry"),
])
def test_damaged_entries_are_refused(damage, kind, message):
    entry = encode_entry("ab" * 32, b"payload bytes")
    with pytest.raises(CacheEntryError, match=message) as e:
        decode_entry("ab" * 32, damage(entry))
    assert e.value.kind == kind


def test_entry_for_another_key_is_refused():
    with pytest.raises(CacheEntryError, match="not for 'cdcd"):
        decode_entry("cd" * 32, encode_entry("ab" * 32, b"payload"))


# -- in-process: bad entries are recompiled and reported ----------------------------
def _check_add(co):
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = np.zeros((4, 3), np.float32)
    co.ciface("add", 3)(D(a), D(a), D(out))
    np.testing.assert_array_equal(out, a + a)


def test_flipped_bit_is_refused_recompiled_and_reported_once(tmp_path):
    KernelCache(tmp_path).get_or_compile(IR.ADD_DYN, ["add"])
    (path,) = (tmp_path / "objects").rglob("*.o")
    entry = bytearray(path.read_bytes())
    entry[-100] ^= 0x10
    path.write_bytes(bytes(entry))
    c = KernelCache(tmp_path)
    with pytest.warns(KernelCacheWarning, match=f"{path}.*SHA-256") as record:
        _check_add(c.get_or_compile(IR.ADD_DYN, ["add"]))
    assert len(record) == 1
    assert (c.stats.compiles, c.stats.disk_hits, c.stats.rejected) == (1, 0, 1)
    decode_entry(c.key(IR.ADD_DYN, ["add"]), path.read_bytes())  # rewritten, valid
    # The same problem again in this process is counted, not warned again.
    path.write_bytes(bytes(entry))
    c2 = KernelCache(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelCacheWarning)
        _check_add(c2.get_or_compile(IR.ADD_DYN, ["add"]))
    assert c2.stats.rejected == 1


def test_headerless_object_from_an_older_fuelc_is_refused(tmp_path, add_object):
    c = KernelCache(tmp_path)
    path = c.object_path(c.key(IR.ADD_DYN, ["add"]))
    path.parent.mkdir(parents=True)
    path.write_bytes(add_object)  # a valid object, but no header
    with pytest.warns(KernelCacheWarning, match="older fuelc"):
        _check_add(c.get_or_compile(IR.ADD_DYN, ["add"]))
    assert (c.stats.compiles, c.stats.rejected) == (1, 1)


def test_symlinked_entry_is_refused(tmp_path, add_object):
    c = KernelCache(tmp_path)
    key = c.key(IR.ADD_DYN, ["add"])
    target = tmp_path / "elsewhere.o"
    target.write_bytes(encode_entry(key, add_object))
    path = c.object_path(key)
    path.parent.mkdir(parents=True)
    path.symlink_to(target)
    with pytest.warns(KernelCacheWarning, match="cannot be read"):
        _check_add(c.get_or_compile(IR.ADD_DYN, ["add"]))
    assert (c.stats.compiles, c.stats.rejected) == (1, 1)


# -- the directory must be private ---------------------------------------------------
def test_created_directories_are_0700_and_entries_0600(tmp_path):
    root = tmp_path / "a" / "b"
    c = KernelCache(root)
    c.get_or_compile(IR.ADD_DYN, ["add"])
    (path,) = (root / "objects").rglob("*.o")
    for d in (tmp_path / "a", root, root / "objects", path.parent):
        assert _mode(d) == 0o700, d
    assert _mode(path) == 0o600
    assert c.disk_enabled


@pytest.mark.parametrize("which", ["root", "objects"])
def test_group_writable_directory_bypasses_the_disk(tmp_path, add_object, which):
    c = KernelCache(tmp_path)
    key = c.key(IR.ADD_DYN, ["add"])
    (tmp_path / "objects").mkdir()
    os.chmod(tmp_path if which == "root" else tmp_path / "objects", 0o770)
    planted = c.object_path(key)
    planted.parent.mkdir()
    planted.write_bytes(encode_entry(key, emit_object(SUB_DYN, ["add"])))  # well formed
    with pytest.warns(KernelCacheWarning, match="group- or world-writable.*chmod 700"):
        _check_add(c.get_or_compile(IR.ADD_DYN, ["add"]))
    assert not c.disk_enabled
    assert (c.stats.compiles, c.stats.disk_hits) == (1, 0)
    assert decode_entry(key, planted.read_bytes()) != add_object  # not read, not rewritten


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_directory_owned_by_another_user_bypasses_the_disk(tmp_path):
    os.chmod(tmp_path, 0o700)
    os.chown(tmp_path, 12345, -1)
    c = KernelCache(tmp_path)
    with pytest.warns(KernelCacheWarning, match="owned by uid 12345.*FUELC_CACHE_DIR"):
        _check_add(c.get_or_compile(IR.ADD_DYN, ["add"]))
    assert not c.disk_enabled and c.stats.compiles == 1


def test_uncreatable_directory_is_memory_only(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    c = KernelCache(blocker / "cache")
    with pytest.warns(KernelCacheWarning, match="cannot be created"):
        _check_add(c.get_or_compile(IR.ADD_DYN, ["add"]))
    c.get_or_compile(IR.ADD_DYN, ["add"])
    assert (c.stats.compiles, c.stats.memory_hits) == (1, 1)


# -- failed writes leave nothing behind ----------------------------------------------
class _FullDisk:
    def __init__(self, f):
        self._f = f

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def test_failed_write_removes_its_temp_file(tmp_path, monkeypatch):
    real_fdopen = os.fdopen
    monkeypatch.setattr(cache_mod.os, "fdopen", lambda fd, mode="r": _FullDisk(real_fdopen(fd, mode)))
    c = KernelCache(tmp_path)
    with pytest.warns(KernelCacheWarning, match="could not write.*No space left"):
        _check_add(c.get_or_compile(IR.ADD_DYN, ["add"]))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    monkeypatch.undo()
    c2 = KernelCache(tmp_path)
    _check_add(c2.get_or_compile(IR.ADD_DYN, ["add"]))
    assert c2.stats.compiles == 1


def test_failed_rename_removes_its_temp_file(tmp_path, monkeypatch):
    def denied(src, dst):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(dst))
    monkeypatch.setattr(cache_mod.os, "replace", denied)
    c = KernelCache(tmp_path)
    with pytest.warns(KernelCacheWarning, match="could not write.*Permission denied"):
        _check_add(c.get_or_compile(IR.ADD_DYN, ["add"]))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


# -- the ELF parser never raises anything but ObjectLoadError -----------------------
def test_damaged_elf_header_is_an_object_load_error(add_object):
    data = bytearray(add_object)
    struct.pack_into("<Q", data, 0x28, 1 << 63)  # e_shoff far beyond any file
    with pytest.raises(ObjectLoadError, match="section header table"):
        load_object(bytes(data))
    data = bytearray(add_object)
    struct.pack_into("<H", data, 0x12, 183)  # an AArch64 object
    with pytest.raises(ObjectLoadError, match="machine 183"):
        load_object(bytes(data))


def test_fuzzed_objects_raise_only_object_load_error():
    data = emit_object(IR.SOFTMAX, ["softmax"])  # has relocations and external symbols
    shoff, = struct.unpack_from("<Q", data, 0x28)
    tables = list(range(64)) + list(range(min(shoff, len(data) - 2048), len(data)))
    rng = random.Random(0)
    parsed = refused = 0
    for _ in range(3000):
        d = bytearray(data)
        how = rng.randrange(4)
        if how == 0:
            d = d[:rng.randrange(len(d))]
        elif how == 1:
            i = rng.randrange(len(d))
            d[i] ^= 1 << rng.randrange(8)
        else:
            for _ in range(how):
                d[rng.choice(tables)] = rng.randrange(256)
        try:
            elf_symbols(bytes(d))
            parsed += 1
        except ObjectLoadError:
            refused += 1
            # Refused before MCJIT: load_object must refuse it the same way.
            with pytest.raises(ObjectLoadError):
                load_object(bytes(d))
    assert parsed > 100 and refused > 1000, (parsed, refused)


# -- end to end, each damaged cache in its own process -------------------------------
_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
    import numpy as np
    import codegen_ir as IR
    from compiler.codegen.cpu import compile_module
    from compiler.codegen.cache import default_cache
    from compiler.codegen.memref import descriptor_from_array as D
    sub = IR.ADD_DYN.replace("linalg.add", "linalg.sub")
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    b = np.full((4, 3), 0.5, np.float32)
    for text, want in ((IR.ADD_DYN, a + b), (sub, a - b)):
        out = np.zeros((4, 3), np.float32)
        compile_module(text, ["add"]).ciface("add", 3)(D(a), D(b), D(out))
        assert np.array_equal(out, want), (out, want)
    s = default_cache().stats
    print(s.compiles, s.disk_hits, s.rejected)
""")


def _child(tmp_path, cache_dir):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = dict(os.environ, FUELC_CACHE_DIR=str(cache_dir))
    return subprocess.run([sys.executable, str(script), str(REPO), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=180, env=env)


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    """A cache directory holding valid entries for the child's two kernels,
    compiled here the way the child compiles them."""
    cache_dir = tmp_path_factory.mktemp("warm") / "kc"
    c = KernelCache(cache_dir)
    for text in (IR.ADD_DYN, SUB_DYN):
        compile_module(text, ["add"], cache=c)
    assert c.stats.compiles == 2
    return cache_dir


def _entries(cache_dir):
    """{'add': path, 'sub': path} of the child's two entries."""
    c = KernelCache(cache_dir)
    keys = {name: c.key(text, ["add"], choose_strategy(text, ["add"]))
            for name, text in (("add", IR.ADD_DYN), ("sub", SUB_DYN))}
    return {name: c.object_path(k) for name, k in keys.items()}


def _flip(paths, cache_dir):
    entry = bytearray(paths["add"].read_bytes())
    entry[len(entry) // 2] ^= 0x04  # in the code of the payload
    paths["add"].write_bytes(bytes(entry))
    return "SHA-256"


def _swap(paths, cache_dir):
    a, s = paths["add"].read_bytes(), paths["sub"].read_bytes()
    paths["add"].write_bytes(s)
    paths["sub"].write_bytes(a)
    return "holds the entry for key"


def _plant_raw_object(paths, cache_dir):
    paths["add"].write_bytes(emit_object(SUB_DYN, ["add"]))
    return "not a fuelc cache entry"


def _plant_in_shared_dir(paths, cache_dir):
    key = paths["add"].stem
    paths["add"].write_bytes(encode_entry(key, emit_object(SUB_DYN, ["add"])))
    os.chmod(cache_dir, 0o777)
    return "not using the disk cache.*world-writable"


@pytest.mark.parametrize("damage", [_flip, _swap, _plant_raw_object, _plant_in_shared_dir],
                         ids=["bit-flip", "swapped-entries", "planted-object", "shared-dir"])
def test_damaged_cache_in_a_fresh_process_gives_correct_numbers(tmp_path, warm_cache, damage):
    cache_dir = tmp_path / "kc"
    shutil.copytree(warm_cache, cache_dir)
    warning = damage(_entries(cache_dir), cache_dir)
    child = _child(tmp_path, cache_dir)
    assert child.returncode == 0, child.stderr  # no SIGSEGV / SIGILL / SIGABRT
    assert "KernelCacheWarning" in child.stderr
    assert re.search(warning, child.stderr), child.stderr
    # Only the damaged entries were recompiled (both when the disk is bypassed).
    damaged = 2 if damage in (_swap, _plant_in_shared_dir) else 1
    assert child.stdout.split()[0] == str(damaged)


def test_undamaged_cache_in_a_fresh_process_is_all_disk_hits(tmp_path, warm_cache):
    cache_dir = tmp_path / "kc"
    shutil.copytree(warm_cache, cache_dir)
    child = _child(tmp_path, cache_dir)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["0", "2", "0"]
    assert "KernelCacheWarning" not in child.stderr
