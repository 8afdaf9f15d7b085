"""Export a ``CompiledModule`` to one ``.fuel`` file (``module.save(path)``),
which ``runtime.load(path)`` runs without the compiler or MLIR.

The file format (a zip: manifest, weights, one object per compiled kernel
instance, the IR of each stage) is described and read in
``runtime.artifact``; this module writes it. Shapes are static, so every
generated kernel step calls one fixed instance: its object comes from the
kernel cache (compiled now if missing, for any target, without loading it),
and the step is bound to (object member, symbol, descriptor arity, the
descriptor layouts). Steps served by the runtime's numpy kernels name them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from runtime.artifact import (ENTRY_SYMBOL, FORMAT, FORMAT_VERSION, MANIFEST, PAD_EXTRA_ID,
                              SAFETENSORS_DTYPES, SIGNATURE, WEIGHTS, WEIGHTS_ALIGN,
                              object_revision, sign_manifest, signing_key)
from runtime.manifest import WEIGHTS_SUFFIX, chunks_root
from runtime.executor import KernelStep
from runtime.layout import Layout
from runtime.storage import Storage

from .errors import CompilerError


class ExportError(CompilerError):
    """A compiled module that cannot be exported; the message names the
    step and why."""


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def producer() -> dict:
    """The versions of the tools that built an artifact."""
    import llvmlite
    return {"fuelc": _version("fuelc"), "torch_mlir": _version("torch-mlir"),
            "llvmlite": llvmlite.__version__}


def _layout_json(l: Layout) -> dict:
    return {"shape": list(l.shape), "stride": list(l.stride), "offset": l.start_offset}


def call_layouts(step: KernelStep, specs) -> list[Layout]:
    """The layouts the runtime calls a kernel step with when its binding
    does not read strides: row-major inputs and outputs (a multi-output
    step: its bundle's first slot), as ``driver._warm`` compiles them."""
    ins = [Layout.contiguous(specs[v].shape) for v in step.inputs]
    if step.is_bundle:
        return ins + [Storage.bundle([(s.dtype, s.shape) for s in step.output_specs])
                      .bundle_views[0].layout]
    return ins + [Layout.contiguous(s.shape) for s in step.output_specs[:1]]


#: The chunk size of the weights' digest tree (the manifest's ``chunks``, next
#: to their SHA-256), which ``runtime.load`` checks in several threads.
WEIGHTS_CHUNK = 16 << 20


class _ChunkDigests:
    """The digest tree of a stream of bytes (``runtime.manifest.CHUNKS``):
    the SHA-256 of each ``WEIGHTS_CHUNK``-byte chunk, fed by ``update``."""

    def __init__(self):
        self.size, self.digests = WEIGHTS_CHUNK, []
        self.h, self.filled = hashlib.sha256(), 0

    def update(self, data) -> None:
        view = memoryview(data).cast("B")
        while len(view):
            n = min(len(view), self.size - self.filled)
            self.h.update(view[:n])
            view, self.filled = view[n:], self.filled + n
            if self.filled == self.size:
                self.digests.append(self.h.hexdigest())
                self.h, self.filled = hashlib.sha256(), 0

    def record(self) -> dict:
        digests = self.digests + ([self.h.hexdigest()] if self.filled else [])
        return {"size": self.size, "sha256": digests, "root": chunks_root(digests)}


def _hashed(chunks, tree: _ChunkDigests):
    """``chunks``, each one fed to ``tree`` in a thread while the caller
    hashes and writes it (both release the GIL): the tree costs no time."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as pool:
        for chunk in chunks:
            done = pool.submit(tree.update, chunk)
            yield chunk
            done.result()


def _stream(f, chunks, tree: bool) -> dict:
    """Write ``chunks`` to the open file ``f``; their size and SHA-256 (and,
    with ``tree``, their digest tree) as a manifest record."""
    digests = _ChunkDigests() if tree else None
    h, size = hashlib.sha256(), 0
    for chunk in _hashed(chunks, digests) if tree else chunks:
        h.update(chunk)
        f.write(chunk)
        size += len(chunk)
    return {"sha256": h.hexdigest(), "size": size,
            **({"chunks": digests.record()} if tree else {})}


class _Writer:
    """Members of one zip, each with its size and SHA-256."""

    def __init__(self, zf: zipfile.ZipFile):
        self.zf = zf
        self.members: dict[str, dict] = {}

    def add(self, name: str, chunks, *, compress: bool, align: int = 0,
            tree: bool = False) -> None:
        """Stream ``chunks`` into member ``name``. ``align`` (stored members):
        the member's data starts at a multiple of it in the file (an extra
        field of padding in its local header), so a reader can map it.
        ``tree``: record its digest tree (``chunks``) too."""
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        info.external_attr = 0o644 << 16
        if align:
            # local header: 30 bytes, the name, the extra fields (this padding
            # field's 4-byte head, and the 20-byte zip64 field zipfile adds)
            start = self.zf.fp.tell() + 30 + len(name.encode()) + 4 + 20
            pad = -start % align
            info.extra = struct.pack("<HH", PAD_EXTRA_ID, pad) + bytes(pad)
        with self.zf.open(info, "w", force_zip64=True) as f:
            self.members[name] = _stream(f, chunks, tree)


_NUMPY_TO_ST = {v.newbyteorder("="): k for k, v in SAFETENSORS_DTYPES.items()}


def _tensor_bytes(arr: np.ndarray) -> memoryview:
    """The array's bytes, little-endian row-major (a view where it already is)."""
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    arr = np.ascontiguousarray(arr)
    return memoryview(arr.reshape(-1).view(np.uint8)) if arr.size else memoryview(b"")


def _weights(constants) -> tuple[dict, dict, list]:
    """(constant -> tensor name, safetensors header, tensor byte views).
    Constants with the same bytes, dtype and shape share one tensor. A
    tensor is hashed only once another of its dtype and shape turns up (a
    model's largest, the embedding and the output projection, usually have
    shapes of their own: a pass over gigabytes saved)."""
    names, header, datas, by_id, offset = {}, {}, [], {}, 0
    by_shape: dict[tuple, list] = {}  # (dtype, shape) -> [[tensor, bytes, sha256 or None]]

    def digest(entry) -> str:
        if entry[2] is None:
            entry[2] = hashlib.sha256(entry[1]).hexdigest()
        return entry[2]

    for cname, value in constants.items():
        arr = np.asarray(value)
        dt = _NUMPY_TO_ST.get(arr.dtype.newbyteorder("="))
        if dt is None:
            raise ExportError(f"constant {cname!r} has numpy dtype {arr.dtype}, which the "
                              f"weights format cannot hold ({', '.join(SAFETENSORS_DTYPES)})")
        hit = by_id.get(id(value))
        if hit is None:
            mine = [cname, _tensor_bytes(arr), None]  # named after its first constant
            same = by_shape.setdefault((dt, arr.shape), [])
            hit = next((e[0] for e in same if digest(e) == digest(mine)), None)
            if hit is None:
                hit = cname
                same.append(mine)
                header[hit] = {"dtype": dt, "shape": list(arr.shape),
                               "data_offsets": [offset, offset + len(mine[1])]}
                datas.append(mine[1])
                offset += len(mine[1])
            by_id[id(value)] = hit
        names[cname] = hit
    return names, header, datas


def _safetensors_chunks(header: dict, datas: list):
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    yield struct.pack("<Q", len(head)) + head
    yield from datas


def _kernel_record(module, i: int, step: KernelStep, objects: dict, writer: _Writer) -> dict:
    from .codegen.family import ENTRY, GeneratedKernel, runnable_here
    entry = module.executor.entries[i]
    fn, target = entry.kernel.fn, module.target
    where = f"step {i} ({step.name or step.key}[{','.join(d.value for d in step.dtypes)}])"
    rec = {"step": i, "name": step.name, "key": step.key.to_json(),
           "dtypes": [d.value for d in step.dtypes], "backend": step.backend.value,
           "kernel": entry.kernel.name, "source": entry.kernel_source,
           "precision": entry.precision.to_json(), "full_write": entry.caps.full_write}
    specs = module.executor.specs
    in_shapes = [specs[v].shape for v in step.inputs] + [s.shape for s in step.output_specs]
    try:
        rec["cost"] = dataclasses.asdict(entry.cost(in_shapes, step.dtypes, step.params))
    except Exception:  # a cost model that cannot price this call: recorded as unknown
        rec["cost"] = None
    if isinstance(fn, GeneratedKernel):
        m = getattr(step.params, "m_compute", None)
        if m is not None and m.mode == "deferred":
            raise ExportError(f"{where}: its row count is only known at run time (deferred "
                              "m_compute), so no fixed kernel instance can be exported")
        lays = call_layouts(step, specs)
        inst, desc = fn.family.instance(fn.key, fn.dtypes, lays, step.params, len(step.inputs),
                                        target=fn.target)
        if runnable_here(target):  # the compile-once memo already holds it: no re-lowering
            data = fn.family.compiled(inst, target).owner.object_bytes
        else:
            data = target.codegen.object_bytes(fn.family.linalg_text(inst, target), [ENTRY],
                                               target=target)
        digest = hashlib.sha256(data).hexdigest()
        member = objects.get(digest)
        if member is None:
            member = objects[digest] = f"code/{len(objects)}.o"
            writer.add(member, [data], compress=False)
        rec["binding"] = {"kind": "object", "object": member, "symbol": ENTRY_SYMBOL,
                          "arity": len(desc), "instance": repr(inst.memo_key),
                          "call_shapes": [list(l.shape) for l in lays],
                          "layouts": [_layout_json(l) for l in desc]}
        rec["revision"] = object_revision(rec, digest, target_json(target))
        return rec
    elif entry.kernel_source == "numpy":
        rec["binding"] = {"kind": "numpy", "function": fn.__qualname__}
        revision = [rec["source"], fn.__qualname__, _version("fuelc")]
    else:
        raise ExportError(f"{where}: kernel {entry.kernel.name} ({entry.kernel_source}) is "
                          "neither generated nor a runtime numpy kernel, so a file cannot "
                          "hold it; bind the op to a generated kernel or leave it to numpy")
    rec["revision"] = hashlib.sha256(json.dumps(revision).encode()).hexdigest()[:16]
    return rec


def target_json(target) -> dict:
    """The manifest's ``target``: what the objects were compiled for."""
    return {"name": str(target), "kind": target.kind, "cpu": target.arch,
            "triple": target.triple, "features": sorted(target.features)}


def check_output_path(path) -> Path:
    """Check that ``path`` can be replaced by a new ``.fuel`` file: its
    directory exists and it is not a directory, device, FIFO or socket (the
    file is written next to it and renamed over it, which would replace such
    a node, /dev/null included). Raises ``ExportError`` or
    ``FileNotFoundError`` naming the path."""
    import stat
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise FileNotFoundError(f"cannot write {path}: directory {parent} does not exist "
                                "(create it first)")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return path
    if stat.S_ISDIR(mode):
        raise ExportError(f"cannot write {path}: it is a directory; give a file name such as "
                          f"{path / 'model.fuel'}")
    if not stat.S_ISREG(mode):
        raise ExportError(f"cannot write {path}: it is not a regular file (a device, FIFO or "
                          "socket), which saving would replace; give a file name")
    return path


def side_weights_path(path) -> Path:
    """Where a module saved to ``path`` with ``weights="side"`` keeps its
    weights: the same name with the suffix ``.weights`` (``model.fuel`` ->
    ``model.weights``), in the same directory."""
    return Path(path).with_suffix(WEIGHTS_SUFFIX)


def _temp_next_to(path: Path):
    return tempfile.mkstemp(dir=path.parent if str(path.parent) else ".",
                            prefix=f".{path.name}.", suffix=".tmp")


def _write_side_weights(path: Path, chunks) -> tuple[str, dict]:
    """Stream ``chunks`` into a temporary file next to ``path``; returns it
    and its manifest record (name, size, SHA-256, digest tree)."""
    fd, tmp = _temp_next_to(path)
    try:
        with os.fdopen(fd, "wb") as f:
            rec = _stream(f, chunks, tree=True)
        os.chmod(tmp, 0o644)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp, {"name": path.name, **rec}


def manifest_body(module, writer: "_Writer", objects: dict) -> dict:
    """The manifest fields of one ``CompiledModule``'s plan (``entry_points``,
    ``plan``, ``kernels``), writing each kernel object into ``writer`` once
    (``objects``: SHA-256 -> member, shared by the caller's modules)."""
    plan, specs = module.plan, module.executor.specs
    kernels = [_kernel_record(module, i, s, objects, writer)
               for i, s in enumerate(plan.steps) if isinstance(s, KernelStep)]
    return {"entry_points": [{
                "name": "main",
                "inputs": [{"name": n, **s.to_dict()} for n, s in plan.inputs.items()],
                "outputs": [{"name": n, **specs[v].to_dict()} for n, v in plan.outputs.items()]}],
            "plan": plan.to_dict(), "kernels": kernels}


def export_module(module, path, sign_with=None, weights: str = "zip") -> Path:
    """Write ``module`` (a ``CompiledModule``) to ``path`` atomically and
    return the path. With ``sign_with`` (a shared secret, bytes or text, or
    an Ed25519 private key: ``runtime.signing``), the file also carries a
    signature of its manifest, which ``runtime.load(path, verify_with=key)``
    checks (the secret, or the public key). ``weights``: ``"zip"`` keeps the
    weights in the file, ``"side"`` in ``side_weights_path(path)``
    (``model.weights`` next to ``model.fuel``), which the manifest names
    with its size and SHA-256 (so a signature covers it too). Raises
    ``ExportError`` (a step that cannot be exported, an unknown ``weights``)
    or ``OSError``."""
    return write_fuel(path, module.target, module.plan.constants, module.ir,
                      lambda w: manifest_body(module, w, {}), sign_with, weights)


def write_fuel(path, target, constants, ir_texts: dict, body, sign_with=None,
               weights: str = "zip") -> Path:
    """Write a ``.fuel`` file atomically: the weights (``constants``), the IR
    stages, and the manifest whose plan fields ``body(writer)`` returns
    (writing its kernel objects into ``writer``); see ``export_module``."""
    if weights not in ("zip", "side"):
        raise ExportError(f"save(weights={weights!r}): weights is 'zip' (in the .fuel file) "
                          "or 'side' (a .weights file next to it)")
    key = signing_key(sign_with) if sign_with is not None else None
    path = check_output_path(path)
    side = side_weights_path(path) if weights == "side" else None
    if side is not None and side.name == path.name:
        raise ExportError(f"cannot save {path} with weights='side': its weights file would "
                          f"have the same name; name the module file {path.stem}.fuel")
    if side is not None:
        check_output_path(side)
    const_names, header, datas = _weights(constants)
    side_tmp = side_rec = None
    fd, tmp = _temp_next_to(path)
    try:
        if side is not None:
            side_tmp, side_rec = _write_side_weights(side, _safetensors_chunks(header, datas))
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", allowZip64=True) as zf:
            w = _Writer(zf)
            if side is None:
                w.add(WEIGHTS, _safetensors_chunks(header, datas), compress=False,
                      align=WEIGHTS_ALIGN, tree=True)
            fields = body(w)
            ir = {}
            for stage, text in ir_texts.items():
                ir[stage] = f"ir/{stage}.mlir"
                w.add(ir[stage], [text.encode()], compress=True)
            manifest = {
                "format": FORMAT, "format_version": FORMAT_VERSION, "producer": producer(),
                "target": target_json(target), **fields, "constants": const_names,
                "ir": ir, "members": w.members,
            }
            if side_rec is not None:
                manifest["weights_file"] = side_rec
            raw = json.dumps(manifest, indent=1).encode()
            w.add(MANIFEST, [raw], compress=True)
            del w.members[MANIFEST]
            if key is not None:
                w.add(SIGNATURE, [sign_manifest(key, raw)], compress=False)
        os.chmod(tmp, 0o644)
        if side_tmp is not None:  # the weights first: the new manifest names their hash
            os.replace(side_tmp, side)
        os.replace(tmp, path)
    except BaseException:
        for t in (tmp, side_tmp):
            try:
                if t is not None:
                    os.unlink(t)
            except OSError:
                pass
        raise
    return path
