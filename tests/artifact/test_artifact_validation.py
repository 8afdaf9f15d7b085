""".fuel files whose manifest was edited or damaged (issue 22): every field is
checked against the rest of the manifest before code is linked, so each edit
is a typed ``ArtifactError`` naming the field, never a crash, wrong numbers or
a raw KeyError/TypeError; and paths that are not regular files (directories,
devices, FIFOs) are named as such by ``save``, ``runtime.load`` and the CLI.

One module is compiled and saved for the whole file; each test rewrites a
copy of it. Loads that are refused never link code, so nothing here runs an
edited kernel (the edits below crashed the process before these checks)."""
import hashlib
import json
import os
import re
import stat
import zipfile

import numpy as np
import pytest

import runtime
from runtime.artifact import (MAX_INFLATED_BYTES, ArtifactError, ArtifactFormatError,
                              open_artifact)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved module with three objects: MatMul, softmax and a runtime-fused
    exp-sum (the graph of the reproducers)."""
    from compiler import Graph, compile
    g = Graph()
    x = g.input("x", (8, 64), "f32")
    w = g.constant(np.full((64, 32), 0.01, np.float32), name="w")
    g.output((x @ w).softmax(-1), name="y")
    g.output(x.exp().sum(axis=1), name="s")
    cm = compile(g)
    path = tmp_path_factory.mktemp("valid") / "m.fuel"
    cm.save(path)
    a = np.linspace(-1, 1, 8 * 64, dtype=np.float32).reshape(8, 64)
    return cm, path, a


def _rewrite(src, dst, edit_manifest=None, members=None):
    """Copy ``src`` to ``dst``: the manifest through ``edit_manifest(m)``,
    members replaced by ``members[name]`` (bytes)."""
    members = members or {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as z:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename == "manifest.json":
                m = json.loads(data)
                if edit_manifest:
                    edit_manifest(m)
                data = json.dumps(m).encode()
            z.writestr(info, members.get(info.filename, data))
    return dst


def _refused(saved, tmp_path, edit, match, cls=ArtifactFormatError, members=None):
    _, path, a = saved
    bad = _rewrite(path, tmp_path / "edited.fuel", edit, members)
    with pytest.raises(cls, match=match) as e:
        runtime.load(bad)(x=a)
    assert isinstance(e.value, ArtifactError)
    return e.value


def test_the_unedited_file_loads_and_matches(saved, tmp_path):
    cm, path, a = saved
    copy = _rewrite(path, tmp_path / "copy.fuel")  # the rewrite itself changes nothing
    got, want = runtime.load(copy).run(x=a), cm.run(x=a)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def _binding(m, k=0):
    return m["kernels"][k]["binding"]


@pytest.mark.parametrize("edit, match", [
    # an input descriptor's stride far outside x (read ~3 GB past it: SIGSEGV)
    (lambda m: _binding(m)["layouts"][0].update(stride=[10**8, 10**6]),
     r"kernels\[0\]\.binding\.layouts\[0\] .* reaches elements \[0, 763000000\] outside its "
     r"tensor of 512 elements"),
    (lambda m: _binding(m)["layouts"][1].update(offset=1),
     r"layouts\[1\] .* reaches elements \[1, 2048\] outside its tensor of 2048 elements"),
    (lambda m: _binding(m)["layouts"][1].update(offset=-4),
     r"kernels\[0\]\.binding\.layouts\[1\]\.offset -4 is < 0"),
    # arity shortened together with the layouts (SIGSEGV on the first call)
    (lambda m: _binding(m).update(arity=2, layouts=_binding(m)["layouts"][:2]),
     r"kernels\[0\]\.binding\.arity is 2, but step 1 calls its kernel with 3 descriptors"),
    (lambda m: _binding(m).update(arity=0, layouts=[]), r"kernels\[0\]\.binding\.arity 0"),
    # arity 100000 (a raw ctypes.ArgumentError before)
    (lambda m: _binding(m).update(arity=100000, layouts=_binding(m)["layouts"] * 33334),
     r"kernels\[0\]\.binding\.arity 100000 is outside \[1, 256\]"),
    (lambda m: _binding(m).update(call_shapes=[[8, 64], [64, 32], [4, 32]]),
     r"call_shapes\[2\] \[4, 32\] is not the shape \[8, 32\] of step 1's output"),
    (lambda m: _binding(m).update(symbol="system"), r"binding\.symbol is 'system'"),
    # step 0 re-pointed at another step's object (silently wrong numbers before)
    (lambda m: _binding(m).update(object=_binding(m, -1)["object"]),
     r"kernels\[0\]\.revision does not match its binding and object code/2\.o"),
    (lambda m: _binding(m).update(instance=_binding(m, 1)["instance"]),
     r"kernels\[0\]\.revision does not match"),
    # a record moved to another step (same arity, other op)
    (lambda m: m["kernels"][2].update(step=m["kernels"][1]["step"]),
     r"kernels\[2\]\.key/dtypes \{'fused': \d+\} .* are not those of step 2"),
    # the features of a named CPU edited away (SIGILL on a CPU without them)
    (lambda m: m["target"].update(name="cpu:x86-64-v4", cpu="x86-64-v4", features=[]),
     r"target\.features lacks .*avx512f.*which target\.cpu 'x86-64-v4' implies"),
    (lambda m: m["target"].update(name="cpu:x86-64-v3", cpu="x86-64-v4"),
     r"target\.name 'cpu:x86-64-v3' does not match target\.cpu 'x86-64-v4'"),
    # malformed manifests that escaped as raw KeyError/TypeError/ValueError
    (lambda m: m["plan"].pop("steps"), r"plan has no 'steps'"),
    (lambda m: m["plan"].update(steps=7), r"plan\.steps must be a list"),
    (lambda m: m["plan"]["constants"][0].update(numpy_dtype="zzz"),
     r"plan\.constants\[0\]\.numpy_dtype 'zzz' is not a numpy dtype"),
    (lambda m: m["plan"]["steps"][1]["outputs"][0].update(shape=[2**40, 2**40]),
     r"plan\.steps\[1\]\.outputs\[0\]\.shape .* is larger than any module"),
    (lambda m: m["plan"]["steps"][1].update(inputs=7),
     r"plan\.steps\[1\]\.inputs must be a list, got int"),
    (lambda m: m.update(entry_points=[]), r"entry_points is empty"),
    (lambda m: m["entry_points"][0]["inputs"][0].update(shape=[8, 65]),
     r"entry_points\[0\] does not match the plan's inputs and outputs"),
], ids=["input-stride", "offset-past-end", "negative-offset", "arity-shortened", "arity-0",
        "arity-100000", "call-shape", "symbol", "object-repointed", "instance", "record-moved",
        "features", "cpu-name",
        "steps-missing", "steps-int", "constant-dtype", "huge-output", "inputs-int",
        "no-entry-points", "entry-point-shape"])
def test_edited_manifest_field_is_named(saved, tmp_path, edit, match):
    from runtime.manifest import ManifestFieldError
    e = _refused(saved, tmp_path, edit, match, ManifestFieldError)
    assert e.field and f"malformed manifest: {e.field} " in str(e)


def _step(m, kind):
    return next(i for i, s in enumerate(m["plan"]["steps"]) if s["kind"] == kind)


@pytest.mark.parametrize("edit, field, says", [
    (lambda m: m["plan"]["steps"][1]["outputs"][0].update(shape="8x32"),
     "plan.steps[1].outputs[0].shape", "must be a list, got str"),
    (lambda m: m["plan"]["steps"][1]["outputs"][0].update(shape=[8, -32]),
     "plan.steps[1].outputs[0].shape[1]", "-32 is not an extent"),
    (lambda m: m["plan"]["steps"][1].update(kind="python"),
     "plan.steps[1]", "kind 'python' is not one of kernel, view, reshape"),
    (lambda m: m["plan"]["steps"][1]["dtypes"].__setitem__(0, "f33"),
     "plan.steps[1].dtypes[0]", "'f33' is not a dtype"),
    (lambda m: m["plan"]["steps"][1].update(key={"op": "NoSuchOp"}),
     "plan.steps[1].key", "is not valid"),
    (lambda m: m["plan"]["steps"][1]["params"].update(kind=[]),
     "plan.steps[1].params", "kind must be a string, got list"),
    (lambda m: m["plan"]["steps"][1]["params"].update(m="eight"),
     "plan.steps[1].params", "is not valid"),
    (lambda m: m["plan"]["steps"][1].update(backend="tpu"),
     "plan.steps[1].backend", "is not valid"),
    (lambda m: m["plan"]["steps"][_step(m, "const")].update(const=None),
     "plan.steps[0].const", "must be a string, got NoneType"),
    (lambda m: _binding(m)["layouts"][0].update(stride="wide"),
     "kernels[0].binding.layouts[0].stride", "must be a list, got str"),
    (lambda m: _binding(m).update(kind="python"),
     "kernels[0].binding", "kind 'python' is not one of object, numpy"),
    (lambda m: _binding(m).pop("layouts"), "kernels[0].binding", "has no 'layouts'"),
    (lambda m: m["kernels"][0].pop("revision"), "kernels[0]", "has no 'revision'"),
    (lambda m: _binding(m).update(object="weights.safetensors"),
     "kernels[0].binding.object", "is not an object member"),
    (lambda m: m["members"]["code/0.o"].update(sha256="zz"),
     "members['code/0.o'].sha256", "is not a SHA-256 hex digest"),
    (lambda m: m["members"]["code/0.o"].update(size=-1), "members['code/0.o'].size", "is < 0"),
    (lambda m: m["members"].update({"../evil.o": m["members"]["code/0.o"]}),
     "members['../evil.o']", "is not a member name"),
    (lambda m: m["target"].update(features="avx2"), "target.features",
     "must be a list, got str"),
    (lambda m: m["ir"].update(fuel="code/0.o"), "ir['fuel']", "names no IR member"),
    (lambda m: m["constants"].update(w=3), "constants['w']", "must be a string, got int"),
    (lambda m: m["entry_points"][0]["inputs"][0].update(dtype=7),
     "entry_points[0].inputs[0].dtype", "must be a string, got int"),
    (lambda m: m["entry_points"][0]["outputs"][0].update(shape=[8]),
     "entry_points[0].outputs[0]", "f32[8] is not the plan's output 'y' (f32[8,32])"),
    (lambda m: m["plan"]["outputs"][0].update(value="x"),
     "entry_points[0].outputs[0]", "is not the plan's output 'y' (f32[8,64])"),
    (lambda m: m.update(plan=[]), "plan", "must be an object, got list"),
], ids=lambda v: v if isinstance(v, str) and "[" not in v and " " not in v else None)
def test_schema_names_the_field(saved, tmp_path, edit, field, says):
    """Each malformed field is a ManifestFieldError whose ``field`` is its path."""
    from runtime.manifest import ManifestFieldError
    e = _refused(saved, tmp_path, edit, re.escape(says), ManifestFieldError)
    assert e.field == field, str(e)


def test_an_edited_host_feature_list_is_refused(saved, tmp_path):
    """The host target (``cpu``) lists what the build machine had; edited
    down, its code would load on a CPU without those features (SIGILL):
    every object's revision covers the target. (Where the build's CPU has a
    name, e.g. under ``FUELC_CPU=x86-64-v3``, the features that name implies
    are checked first.)"""
    _refused(saved, tmp_path, lambda m: m["target"].update(features=["sse2"]),
             r"kernels\[0\]\.revision does not match .* the target's CPU name or features"
             r"|target\.features lacks .* which target\.cpu '[^']+' implies")


def test_a_claimed_feature_the_host_lacks_is_refused_before_linking(saved, tmp_path,
                                                                     monkeypatch):
    """Simulated with the feature mask: nothing is linked."""
    import runtime.cpu_loader as loader
    _, path, _ = saved
    monkeypatch.setenv("FUELC_HOST_FEATURES_MASK", "avx2")
    linked = []
    monkeypatch.setattr(loader, "load_object", lambda *a, **k: linked.append(a))
    with pytest.raises(runtime.ArtifactCpuError, match="avx2"):
        runtime.load(path)
    assert linked == []


def test_every_field_replaced_is_refused_or_harmless(saved, tmp_path):
    """Every leaf of the manifest replaced by a value of another type or out
    of range: an ArtifactError, or (names, costs, precision notes) a module
    that computes what the original does; never a raw exception."""
    import copy
    cm, path, a = saved
    with zipfile.ZipFile(path) as z:
        m0 = json.loads(z.read("manifest.json"))
    want = cm.run(x=a)

    def leaves(o, at=()):
        items = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()
        for k, v in items:
            yield at + (k,)
            yield from leaves(v, at + (k,))
    for at in leaves(m0):
        if at[0] in ("producer", "members") or "cost" in at or "precision" in at:
            continue
        for value in (None, -1, 2**70, "x", []):
            def edit(m):
                o = m
                for k in at[:-1]:
                    o = o[k]
                o[at[-1]] = copy.deepcopy(value)
            bad = _rewrite(path, tmp_path / "leaf.fuel", edit)
            try:
                got = runtime.load(bad).run(x=a)
            except ArtifactError:
                continue
            except Exception as e:  # pragma: no cover - the failure this test is for
                pytest.fail(f"{at} = {value!r}: {type(e).__name__}: {e}")
            for k in want:
                np.testing.assert_array_equal(got[k], want[k], err_msg=f"{at} = {value!r}")


def test_swapped_objects_with_swapped_hashes_are_refused(saved, tmp_path):
    """code/0.o and code/1.o swapped, their hashes too (SIGSEGV before)."""
    _, path, _ = saved
    with zipfile.ZipFile(path) as z:
        o0, o1 = z.read("code/0.o"), z.read("code/1.o")

    def swap(m):
        ms = m["members"]
        ms["code/0.o"], ms["code/1.o"] = ms["code/1.o"], ms["code/0.o"]
    _refused(saved, tmp_path, swap, r"kernels\[0\]\.revision does not match its binding and "
             r"object code/0\.o", members={"code/0.o": o1, "code/1.o": o0})


def test_a_planted_object_with_its_hash_recomputed_is_refused(saved, tmp_path):
    """code/0.o replaced by other machine code and its SHA-256 recomputed in
    the manifest (the planted-code reproducer of issue 22, whose object called
    ``system``; this one only returns): the object's revision binds it to its
    step, so the load is refused before anything is linked. (Whoever also
    recomputes the revision is stopped only by a signature: test_signing.py.)"""
    import llvmlite.binding as llvm
    from compiler.codegen.family import ENTRY
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    ir = (f"define void @_mlir_ciface_{ENTRY}(ptr %a, ptr %b, ptr %c) {{\n  ret void\n}}\n"
          f"define void @{ENTRY}() {{\n  ret void\n}}\n")
    tm = llvm.Target.from_default_triple().create_target_machine(reloc="pic")
    other = tm.emit_object(llvm.parse_assembly(ir))
    _refused(saved, tmp_path, lambda m: m["members"].update({"code/0.o": {
        "sha256": hashlib.sha256(other).hexdigest(), "size": len(other)}}),
        r"kernels\[0\]\.revision does not match its binding and object code/0\.o",
        members={"code/0.o": other})


def test_weights_header_nested_too_deep_is_a_format_error(saved, tmp_path):
    """A safetensors header nested 100k deep (a raw RecursionError before)."""
    import struct
    _, path, _ = saved
    with zipfile.ZipFile(path) as z:
        w = z.read("weights.safetensors")
    n, = struct.unpack_from("<Q", w, 0)
    head = b'{"__metadata__": ' + b"[" * 100000 + b"]" * 100000 + b", " + w[9:8 + n]
    head += b" " * (-len(head) % 8)
    w2 = struct.pack("<Q", len(head)) + head + w[8 + n:]
    _refused(saved, tmp_path, lambda m: m["members"].update({"weights.safetensors": {
        "sha256": hashlib.sha256(w2).hexdigest(), "size": len(w2)}}),
        "weights: header is not JSON", members={"weights.safetensors": w2})


def test_ir_members_are_capped_and_read_on_demand(saved, tmp_path, monkeypatch):
    """An IR member declared as 1 GiB (a deflate bomb took load to ~3 GB) is
    refused from the manifest alone; IR under the cap is only hashed while
    loading (streamed) and read, checked again, by ``ir(stage)``."""
    _, path, _ = saved

    def bomb(m):
        m["members"]["ir/bomb.mlir"] = {"sha256": "0" * 64, "size": 1 << 30}
        m["ir"]["bomb"] = "ir/bomb.mlir"
    bad = _rewrite(path, tmp_path / "bomb.fuel", bomb)
    with zipfile.ZipFile(bad, "a") as z:
        z.writestr("ir/bomb.mlir", b"")
    with pytest.raises(ArtifactFormatError, match=r"members\['ir/bomb.mlir'\]\.size is "
                       rf"1073741824 bytes; an IR member may hold at most "
                       rf"{MAX_INFLATED_BYTES >> 20} MiB"):
        runtime.load(bad)
    art = open_artifact(path)
    assert not any(n.startswith("ir/") for n in art.members)  # not kept in memory
    assert "fuel." in art.ir("optimized")


@pytest.mark.parametrize("kind", ["dir", "fifo", "chardev"])
def test_save_never_replaces_a_directory_device_or_fifo(saved, tmp_path, kind):
    from compiler.export import ExportError
    cm, _, _ = saved
    node = tmp_path / "node"
    if kind == "dir":
        node.mkdir()
    elif kind == "fifo":
        os.mkfifo(node)
    else:
        if os.geteuid() != 0:
            node = "/dev/null"  # refused before anything is written
        else:
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    before = os.lstat(node)
    with pytest.raises(ExportError, match="cannot write .*(directory|not a regular file)"):
        cm.save(node)
    after = os.lstat(node)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_save_into_a_missing_directory_names_it(saved, tmp_path):
    cm, _, _ = saved
    with pytest.raises(FileNotFoundError, match=r"directory .*/nodir does not exist") as e:
        cm.save(tmp_path / "nodir" / "m.fuel")
    assert ".tmp" not in str(e.value)


def test_cli_names_directories_devices_npz_and_empty_entry_points(saved, tmp_path, capsys):
    """In-process ``fuelc`` commands: each failure one ``error:`` line that
    says what the path is (``no such file`` for all of them before)."""
    from compiler.cli import main
    _, path, a = saved
    np.save(tmp_path / "x.npy", a)
    np.savez(tmp_path / "x.npz", x=a)
    (tmp_path / "dir.fuel").mkdir()
    (tmp_path / "in.onnx").write_bytes(b"")
    no_ep = _rewrite(path, tmp_path / "no_ep.fuel", lambda m: m.update(entry_points=[]))
    cases = [
        (["inspect", str(tmp_path)], "is a directory, not a .fuel file"),
        (["run", str(tmp_path / "dir.fuel")], "is a directory, not a .fuel file"),
        (["run", str(path), "--input", f"x={tmp_path}"], "is a directory, not a file"),
        (["run", str(path), "--input", "x=/dev/zero"], "/dev/zero: is not a regular file"),
        (["run", str(path), "--input", f"x={tmp_path / 'x.npz'}"], "is an .npz archive"),
        (["inspect", str(no_ep)], "entry_points is empty"),
        (["compile", str(tmp_path / "in.onnx"), "-o", str(tmp_path / "nodir" / "m.fuel")],
         "directory .*nodir does not exist"),
        (["compile", str(tmp_path / "in.onnx"), "-o", "/dev/null"],
         "cannot write /dev/null: it is not a regular file"),
        (["compile", str(tmp_path / "in.onnx"), "-o", str(tmp_path)], "it is a directory"),
    ]
    import re
    for argv, want in cases:
        assert main(argv) == 1, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err and re.search(want, err), (argv, err)
        assert ".tmp" not in err
    assert main(["run", str(path), "--input", f"x={tmp_path / 'x.npy'}"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("arg, want", [("/dev/zero", "it is a device or socket, not a file"),
                                       ("DIR", "it is a directory, not a file"),
                                       ("DIR/missing.mlir", "no such file or directory")])
def test_fuelc_opt_names_what_its_input_is(tmp_path, capsys, arg, want):
    """``fuelc opt /dev/zero`` read until memory ran out (MemoryError)."""
    from compiler.cli import main
    assert main(["opt", arg.replace("DIR", str(tmp_path)), "-p", "builtin.module()"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fuelc opt: error: cannot read ") and err.endswith(want), err


def test_signed_files_verify_and_edits_with_recomputed_hashes_do_not(saved, tmp_path,
                                                                    monkeypatch, capsys):
    """HMAC-SHA256 signatures: the one defence against a rewritten member whose
    hash was recomputed (weights with every exponent bit flipped load without
    a key and compute other numbers)."""
    from runtime import ArtifactSignatureError
    from runtime.cli import main as run_main
    cm, unsigned, a = saved
    signed = cm.save(tmp_path / "signed.fuel", sign_with=b"shared secret")
    want = cm.run(x=a)
    got = runtime.load(signed, verify_with="shared secret").run(x=a)
    np.testing.assert_array_equal(got["y"], want["y"])
    with pytest.raises(ArtifactSignatureError, match="signature does not match"):
        runtime.load(signed, verify_with=b"another key")
    with pytest.raises(ArtifactSignatureError, match="not signed, and a signature is required"):
        runtime.load(unsigned, verify_with=b"shared secret")

    with zipfile.ZipFile(signed) as z:
        w = bytearray(z.read("weights.safetensors"))
    w[-1] ^= 0x40  # the last f32 of w: its exponent
    w = bytes(w)
    forged = _rewrite(signed, tmp_path / "forged.fuel", lambda m: m["members"].update(
        {"weights.safetensors": {"sha256": hashlib.sha256(w).hexdigest(), "size": len(w)}}),
        members={"weights.safetensors": w})
    runtime.load(forged)  # without a key: accepted (the trust model: files are code)
    with pytest.raises(ArtifactSignatureError, match="signature does not match"):
        runtime.load(forged, verify_with=b"shared secret")

    key_file = tmp_path / "key"
    key_file.write_bytes(b"shared secret\n")
    monkeypatch.setenv("FUELC_VERIFY_KEY_FILE", str(key_file))  # the policy: every load
    with pytest.raises(ArtifactSignatureError, match="FUELC_VERIFY_KEY_FILE"):
        runtime.load(unsigned)
    runtime.load(signed)
    monkeypatch.delenv("FUELC_VERIFY_KEY_FILE")
    np.save(tmp_path / "x.npy", a)
    assert run_main(["run", str(signed), "--input", f"x={tmp_path / 'x.npy'}",
                     "--verify-key", str(key_file)]) == 0
    assert run_main(["inspect", str(forged), "--verify-key", str(key_file)]) == 1
    assert "signature does not match" in capsys.readouterr().err
    for argv, want in (([str(signed), "--verify-key", str(key_file)], "signed:   yes, verified"),
                       ([str(signed)], "signed:   yes, not verified"),
                       ([str(unsigned)], "signed:   no")):
        assert run_main(["inspect", *argv]) == 0
        assert want in capsys.readouterr().out
