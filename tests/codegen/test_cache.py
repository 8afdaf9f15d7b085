"""The kernel cache: memory hits, disk hits, across processes, invalidation."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import codegen_ir as IR
from compiler.codegen import cache as cache_mod
from compiler.codegen.cache import KernelCache, KernelCacheWarning, default_cache
from compiler.codegen.cpu import compile_module
from compiler.codegen.memref import descriptor_from_array as D
from compiler.codegen.cpu.strategy import LOOPS, Strategy

REPO = Path(__file__).resolve().parents[2]


def _check_add(co):
    a = np.ones((4, 3), np.float32)
    out = np.zeros((4, 3), np.float32)
    co.ciface("add", 3)(D(a), D(a), D(out))
    assert (out == 2).all()


def test_memory_hit_returns_the_same_object(tmp_path):
    c = KernelCache(tmp_path)
    first = c.get_or_compile(IR.ADD_DYN, ["add"])
    second = c.get_or_compile(IR.ADD_DYN, ["add"])
    assert first is second
    assert (c.stats.compiles, c.stats.memory_hits, c.stats.disk_hits) == (1, 1, 0)
    _check_add(second)


def test_disk_hit_in_a_new_cache(tmp_path):
    KernelCache(tmp_path).get_or_compile(IR.ADD_DYN, ["add"])
    assert len(list((tmp_path / "objects").rglob("*.o"))) == 1
    c = KernelCache(tmp_path)
    co = c.get_or_compile(IR.ADD_DYN, ["add"])
    assert (c.stats.compiles, c.stats.disk_hits) == (0, 1)
    _check_add(co)


def test_key_covers_text_entries_and_strategy(tmp_path):
    c = KernelCache(tmp_path)
    k = c.key(IR.ADD_DYN, ["add"])
    assert k == c.key(IR.ADD_DYN, ["add"])
    assert k != c.key(IR.ADD_DYN + "\n", ["add"])
    assert k != c.key(IR.ADD_DYN + IR.MATMUL_DYN, ["add", "mm"])
    other = Strategy("loops-no-canon", lowering=LOOPS.lowering[1:])
    assert c.key(IR.ADD_DYN, ["add"], LOOPS) != c.key(IR.ADD_DYN, ["add"], other)


def test_sources_digest_follows_every_python_file(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("A = 1\n")
    (pkg / "sub" / "b.py").write_text("B = 1\n")
    (pkg / "notes.txt").write_text("not code")
    digest = cache_mod.sources_digest.__wrapped__
    first = digest(str(pkg))
    (pkg / "notes.txt").write_text("changed, still not code")
    assert digest(str(pkg)) == first
    (pkg / "sub" / "b.py").write_text("B = 2\n")
    second = digest(str(pkg))
    assert second != first
    (pkg / "sub" / "b.py").rename(pkg / "b.py")  # same bytes, another module
    assert digest(str(pkg)) not in (first, second)


@pytest.mark.parametrize("dist", ["torch-mlir", "llvmlite", "numpy", "typing_extensions",
                                  "no-such-distribution-fuelc"])
def test_key_versions_are_importlib_metadata_s(dist):
    """The versions in the key, read from the dist-info directly, are the
    ones importlib.metadata reports ("?" for a missing distribution)."""
    import importlib.metadata
    try:
        expected = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        expected = "?"
    assert cache_mod._version.__wrapped__(dist) == expected


def _dist(root, folder, version):
    (root / folder).mkdir(parents=True)
    (root / folder / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: fuelc-probe\nVersion: {version}\n\nVersion: not this\n")


def test_key_version_follows_the_path_order_and_defers_when_unsure(tmp_path, monkeypatch):
    """The first sys.path entry with metadata of the distribution decides,
    as importlib.metadata has it; two candidates there (or an egg-info) go to
    importlib.metadata itself, and whatever it says is the version."""
    import importlib.metadata
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(second, "fuelc_probe-2.0.dist-info", "2.0")
    first.mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing.zip"), str(first), str(second)])
    version = cache_mod._version.__wrapped__
    assert version("fuelc-probe") == "2.0" == importlib.metadata.version("fuelc-probe")
    _dist(first, "Fuelc.Probe-1.0.dist-info", "1.0")
    assert cache_mod._dist_info("fuelc_probe") == str(first / "Fuelc.Probe-1.0.dist-info")
    assert version("fuelc-probe") == "1.0" == importlib.metadata.version("fuelc-probe")
    _dist(first, "fuelc_probe-1.1.dist-info", "1.1")  # two: importlib.metadata picks
    assert cache_mod._dist_info("fuelc-probe") is None
    assert version("fuelc-probe") == importlib.metadata.version("fuelc-probe")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing.zip")])
    assert version("fuelc-probe") == "?"


def test_key_covers_the_codegen_sources(tmp_path, monkeypatch):
    """A fuelc whose code generator changed (a rewrite, a transform script)
    never reuses an object the older one compiled."""
    c = KernelCache(tmp_path)
    k = c.key(IR.ADD_DYN, ["add"])
    cpu_dir = str(Path(cache_mod.__file__).parent / "cpu")
    real = cache_mod.sources_digest
    monkeypatch.setattr(cache_mod, "sources_digest",
                        lambda d: "edited" if os.path.samefile(d, cpu_dir) else real(d))
    assert c.key(IR.ADD_DYN, ["add"]) != k


def test_corrupt_disk_entry_is_recompiled(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_mod, "_warned", set())
    c = KernelCache(tmp_path)
    c.get_or_compile(IR.ADD_DYN, ["add"])
    (path,) = (tmp_path / "objects").rglob("*.o")
    path.write_bytes(b"garbage")
    c2 = KernelCache(tmp_path)
    with pytest.warns(KernelCacheWarning, match="not a fuelc cache entry"):
        _check_add(c2.get_or_compile(IR.ADD_DYN, ["add"]))
    assert (c2.stats.compiles, c2.stats.disk_hits, c2.stats.rejected) == (1, 0, 1)
    assert path.read_bytes()[:8] == cache_mod.MAGIC


def test_memory_only_cache(tmp_path):
    c = KernelCache(None)
    c.get_or_compile(IR.ADD_DYN, ["add"])
    c.get_or_compile(IR.ADD_DYN, ["add"])
    assert (c.stats.compiles, c.stats.memory_hits) == (1, 1)


def test_compile_module_uses_the_default_cache_dir_across_processes(tmp_path):
    # The autouse fixture points FUELC_CACHE_DIR at tmp_path/"cache".
    compile_module(IR.ADD_DYN, ["add"])
    compile_module(IR.ADD_DYN, ["add"])
    assert (default_cache().stats.compiles, default_cache().stats.memory_hits) == (1, 1)
    assert default_cache().directory == Path(os.environ["FUELC_CACHE_DIR"])
    child = (
        "import sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])\n"
        "import codegen_ir as IR\n"
        "from compiler.codegen.cpu import compile_module\n"
        "from compiler.codegen.cache import default_cache\n"
        "compile_module(IR.ADD_DYN, ['add'])\n"
        "s = default_cache().stats\n"
        "print(s.compiles, s.disk_hits)\n")
    proc = subprocess.run([sys.executable, "-c", child, str(REPO), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "1"]
