"""Kernel cache hazards (issue 22): a FIFO at an entry's path (the next compile
blocked forever on opening it), temp files left by killed writers (never
removed), and a shard directory replaced by a symlink (entries were unlinked
and written through it)."""
import fcntl
import os
import shutil
import threading
import time
import warnings

import pytest

import codegen_ir as IR
from compiler.codegen import cache as cache_mod
from compiler.codegen.cache import KernelCache, encode_entry, sweep_stale_temp_files
from compiler.codegen.cpu import emit_object


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(cache_mod, "_warned", set())


@pytest.fixture(scope="module")
def add_object():
    return emit_object(IR.ADD_DYN, ["add"])


def _seeded(tmp_path, data):
    """A cache whose disk holds the verified entry of IR.ADD_DYN."""
    c = KernelCache(tmp_path / "cache")
    key = c.key(IR.ADD_DYN, ["add"])
    assert c.disk_enabled
    path = c.object_path(key)
    os.makedirs(path.parent, mode=0o700, exist_ok=True)
    path.write_bytes(encode_entry(key, data))
    os.chmod(path, 0o600)
    return c, key, path


def test_fifo_at_an_entry_path_is_refused_not_waited_on(tmp_path, add_object):
    c, key, path = _seeded(tmp_path, add_object)
    path.unlink()
    os.mkfifo(path, 0o600)
    done = threading.Event()
    result = {}

    def compile_it():
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            result["obj"] = KernelCache(c.directory).get_or_compile(IR.ADD_DYN, ["add"])
            result["warnings"] = [str(x.message) for x in w]
        done.set()

    t = threading.Thread(target=compile_it, daemon=True)
    t.start()
    hung = not done.wait(60)
    if hung:  # unblock the reader so the thread ends: a writer opens and closes the FIFO
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        t.join(30)
    assert not hung, "the compile blocked opening a FIFO planted at the entry's path"
    assert result["obj"] is not None
    assert any("not a regular file" in m for m in result["warnings"]), result["warnings"]
    assert path.is_file() and not path.is_symlink()  # replaced by a fresh, verified entry


def test_stale_temp_files_are_swept_but_not_a_live_writers(tmp_path):
    shard = tmp_path / "cache" / "objects" / "ab"
    os.makedirs(shard, mode=0o700)
    os.chmod(tmp_path / "cache", 0o700)
    os.chmod(tmp_path / "cache" / "objects", 0o700)
    old = time.time() - 3600
    stale = [shard / f".{i:016x}.deadbeef.tmp" for i in range(5)]
    for p in stale:
        p.write_bytes(bytes(1000))
        os.utime(p, (old, old))
    live = shard / ".00000000000000ff.live.tmp"  # a writer still writing: holds the lock
    live.write_bytes(b"partial")
    os.utime(live, (old, old))
    fresh = shard / ".00000000000000ee.fresh.tmp"  # just created: its writer may lock it next
    fresh.write_bytes(b"new")
    entry = shard / ("ab" + "0" * 62 + ".o")  # entries are left alone
    entry.write_bytes(b"entry")
    with open(live, "rb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        assert KernelCache(tmp_path / "cache").disk_enabled  # first use: the sweep
        left = sorted(p.name for p in shard.iterdir())
    assert left == sorted([live.name, fresh.name, entry.name]), left
    os.utime(fresh, (old, old))
    assert sweep_stale_temp_files(tmp_path / "cache" / "objects") == 2  # now live and fresh


def test_a_symlinked_shard_is_replaced_never_written_through(tmp_path, add_object):
    c, key, path = _seeded(tmp_path, add_object)
    shard = path.parent
    elsewhere = tmp_path / "elsewhere"
    os.makedirs(elsewhere, mode=0o700)
    shutil.move(str(shard), str(elsewhere / "moved"))
    os.symlink(elsewhere / "moved", shard)
    target = elsewhere / "moved" / path.name
    os.utime(target, (0, 0))
    before = target.read_bytes()
    c2 = KernelCache(c.directory)
    with pytest.warns(cache_mod.KernelCacheWarning):
        assert c2.get_or_compile(IR.ADD_DYN, ["add"]) is not None
    assert target.stat().st_mtime == 0 and target.read_bytes() == before  # untouched
    assert sorted(p.name for p in (elsewhere / "moved").iterdir()) == [path.name]
    assert shard.is_dir() and not shard.is_symlink() and path.is_file()
    assert KernelCache(c.directory).get_or_compile(IR.ADD_DYN, ["add"]) is not None
