"""Exported modules (``.fuel`` files): verify them, load them, run them, with
the runtime alone (no ``compiler``, no MLIR; llvmlite to link the code).

A ``.fuel`` file is a zip archive (written by ``compiler.export``):

* ``manifest.json``: the format and its version; the compiler, MLIR
  (torch-mlir) and LLVM (llvmlite) versions that built it; the target (its
  string, CPU name and the CPU features the code needs); the entry point
  (input and output names, shapes, dtypes); the runtime ``Plan``
  (``Plan.to_dict``); the constant -> tensor map; one record per kernel step
  (binding key, dtypes, kernel source, precision, cost, revision hash, and
  how to bind it: an object member, its symbol, descriptor arity and the
  layouts the descriptors describe, or a runtime numpy kernel by name); the
  IR stage members; and the size and SHA-256 of every other member.
* ``weights.safetensors``: the plan's constants (safetensors format, stored
  uncompressed; a weight shared by several constants is stored once); or,
  saved with ``weights="side"``, the same bytes in ``<name>.weights`` next to
  the file, named by the manifest's ``weights_file`` with its size and SHA-256.
  The weights' record also holds their digest tree (``chunks``: the SHA-256
  of each fixed-size chunk and a root), which ``load`` checks in threads.
* ``code/<n>.o``: one relocatable x86-64 ELF object per compiled kernel
  instance (entry ``_mlir_ciface_kernel``, one memref descriptor per
  operand).
* ``ir/<stage>.mlir``: the IR of each compile stage, for debugging.

``load(path)`` checks everything before any code is mapped: the zip
structure, the signature where one is required (``runtime.signing``), the
manifest schema and format version (``runtime.manifest``), every member's
size and SHA-256, and this CPU's features; it then links the objects, binds every
kernel step in a fresh ``KernelBindingTable`` and returns a
``LoadedModule`` (``m(x=...)``, ``.run``, ``.input_names``,
``.output_names``, ``.signature``, ``.entry_points``). ``open_artifact``
does the same checks without linking code (what ``inspect`` needs). Every
failure is an ``ArtifactError`` subclass.

Trust model: a ``.fuel`` file is native code, like a shared library. Loading
one and calling it runs its objects' machine code in this process with this
process's rights. The checks above (and the cross-checks of every manifest
field against the rest of the manifest: each layout within its tensor, each
kernel's arity and object bound to its step, the CPU name consistent with the
feature list) catch a *damaged* or inconsistently edited file with a typed
error instead of a crash; they are not authentication. The SHA-256 of each
member lives in the unauthenticated manifest, so whoever can write the file
can replace its code and weights and fix up the hashes. Load only files you
would run as programs, or require them signed (``load(path, verify_with=KEY)``,
``runtime.signing``; ``docs/artifacts.md``).
"""
from __future__ import annotations

import hashlib
import mmap
import json
import math
import os
import struct
import threading
import zipfile
import zlib

import numpy as np

from .binding import KernelBindingTable, KernelCaps, KernelRef
from .cost import default_cost_for_op_kind, unknown_cost
from .cpu_features import CpuFeatureError, check_cpu_features, usable_cpus
from .errors import FuelError, KernelError
from .executor import Executor, KernelStep, Plan, PlanModule
from .keys import BindingKey
from .layout import Layout
from .manifest import (ENTRY_SYMBOL, FORMAT, FORMAT_VERSION, MANIFEST, MAX_ARITY,
                       MAX_INFLATED_BYTES, WEIGHTS, ArtifactCodeError,
                       ArtifactCpuError, ArtifactError, ArtifactFormatError,
                       ArtifactIntegrityError, ArtifactSignatureError, ArtifactVersionError,
                       ArtifactWeightsFileError, ManifestFieldError, check_manifest,
                       chunks_root, object_revision)
from .precision import PrecisionGuarantee
from .signing import (KEY_FILE_ENV, MAX_SIGNATURE_BYTES, REQUIRE_ENV, SIGNATURE, key_source,
                      read_key_file, required_key, sign_manifest, signing_key, verify_manifest)

#: The weights member is stored with its data at a multiple of this in the
#: file (a padding extra field, id ``PAD_EXTRA_ID``, in its local header), so
#: ``load`` maps it read-only instead of reading it.
WEIGHTS_ALIGN = max(mmap.ALLOCATIONGRANULARITY, 4096)
PAD_EXTRA_ID = 0xD935  # the id Android's zipalign pads with
MAX_MANIFEST_BYTES = 64 << 20
#: The most bytes one value of the plan may have (1 TiB: beyond any real model).
MAX_VALUE_BYTES = 1 << 40
_DEFLATE_MAX_RATIO = 1032  # deflate cannot expand data more than this

#: safetensors dtype names <-> numpy (little-endian). bf16 constants are
#: raw uint16 bits in the plan and are stored as U16, so they load unchanged.
SAFETENSORS_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


# -- reading and checking ----------------------------------------------------------------


def sha256_hex(data) -> str:
    return hashlib.sha256(data).hexdigest()

class Artifact:
    """A verified ``.fuel`` file: ``manifest`` and the bytes of every member
    (the weights: a map of the member or of the side file ``weights_path``)
    but the IR (each already checked against its size and SHA-256; the IR
    members were hashed as they streamed by and are read again, and checked
    again, by ``ir(stage)``). Nothing is linked."""

    def __init__(self, path: str, manifest: dict, members: dict[str, bytearray],
                 signed: bool = False, verified: bool = False, weights_path=None):
        self.path = path
        self.weights_path = weights_path  # the side weights file, if the module has one
        self.manifest = manifest
        self.members = members
        self.signed = signed  # carries a manifest signature
        self.verified = verified  # ... checked against a key by open_artifact

    @property
    def ir_stages(self) -> list[str]:
        return list(self.manifest["ir"])

    def ir(self, stage: str) -> str:
        """The IR text of compile stage ``stage``; ArtifactFormatError names
        the stages there are."""
        member = self.manifest["ir"].get(stage)
        if member is None:
            raise ArtifactFormatError(f"no IR stage {stage!r}; stages: "
                                      f"{', '.join(self.ir_stages)}", self.path)
        data = self.members.get(member)
        if data is None:  # IR is read on demand
            rec = self.manifest["members"][member]
            try:
                with zipfile.ZipFile(self.path) as zf:
                    data = _read_member(zf, zf.getinfo(member), rec["size"], self.path)
            except ArtifactError:
                raise
            except (*_ZIP_ERRORS, KeyError) as e:
                raise ArtifactIntegrityError(f"member {member}: {type(e).__name__}: {e}",
                                             self.path) from None
            if sha256_hex(data) != rec["sha256"]:
                raise ArtifactIntegrityError(f"member {member} does not match its SHA-256 in "
                                             "the manifest: the file was modified", self.path)
        try:
            return bytes(data).decode()
        except UnicodeDecodeError:
            raise ArtifactFormatError(f"IR stage {stage!r} is not UTF-8 text", self.path) from None

    def constants(self) -> dict[str, np.ndarray]:
        """The plan's constants, as arrays over the weights member's bytes
        (no copy; constants sharing a tensor share the array)."""
        tensors = read_safetensors(self.members.get(WEIGHTS, bytearray()), self.path)
        out = {}
        for cname, tname in self.manifest["constants"].items():
            if tname not in tensors:
                raise ManifestFieldError(f"constants[{cname!r}]", f"names tensor {tname!r}, which "
                                         "the weights do not hold", self.path)
            out[cname] = tensors[tname]
        made = set(self.manifest.get("symbolic", {}).get("iotas", ()))  # per binding
        for i, c in enumerate(self.manifest["plan"].get("constants", [])):
            if isinstance(c, dict) and c.get("name") in made:
                continue
            arr = out.get(c.get("name")) if isinstance(c, dict) else None
            try:
                dt = np.dtype(c.get("numpy_dtype")) if arr is not None else None
            except (TypeError, ValueError):
                raise ManifestFieldError(f"plan.constants[{i}].numpy_dtype",
                                         f"{c.get('numpy_dtype')!r} is not a numpy dtype",
                                         self.path) from None
            if arr is None or list(arr.shape) != c.get("shape") or \
                    arr.dtype.newbyteorder("=") != dt.newbyteorder("="):
                got = None if arr is None else (arr.dtype.str, arr.shape)
                raise ManifestFieldError(f"plan.constants[{i}]", f"{c!r} does not match the "
                                         f"weights ({got})", self.path)
        return out


def _member_start(zf: zipfile.ZipFile, info: zipfile.ZipInfo, size: int, path: str):
    """Where a stored member's data starts in the file, when that is a
    multiple of ``mmap.ALLOCATIONGRANULARITY`` (``WEIGHTS_ALIGN``) so it can
    be mapped; else None (read it instead). A mapped member is checked like
    a read one (size, SHA-256), not by the zip's CRC; the map shows the file
    as it is on disk, so a file replaced by ``save`` (a rename) leaves it
    intact, one truncated in place does not."""
    if info.compress_type != zipfile.ZIP_STORED or not size or info.compress_size != size:
        return None
    f = zf.fp
    f.seek(info.header_offset)
    head = f.read(30)
    if len(head) != 30 or head[:4] != b"PK\x03\x04":
        raise ArtifactIntegrityError(f"member {info.filename}: no local header at its offset",
                                     path)
    start = info.header_offset + 30 + sum(struct.unpack_from("<HH", head, 26))
    if start % mmap.ALLOCATIONGRANULARITY or start + size > os.fstat(f.fileno()).st_size:
        return None
    return start


#: The buffer each hashing thread reads the weights through.
READ_BUFFER = 64 << 10
#: The most threads ``load`` hashes the weights' chunks in.
MAX_HASH_THREADS = 8


def hash_threads() -> int:
    """The threads to hash a digest tree's chunks in: the CPUs this process
    may run on, at most ``MAX_HASH_THREADS``."""
    return min(usable_cpus(), MAX_HASH_THREADS)


def map_checked(fd: int, start: int, rec: dict, fail):
    """A read-only map of the ``rec["size"]`` bytes of ``fd`` at ``start``
    (page-aligned), checked against ``rec`` (``check_digests``) by reading
    the file through small buffers, not the map: the bytes pass through the
    page cache, and the map stays unread, so a loaded module is not resident
    at its weights' size until it runs (hashing over the map would page all
    of it in). The map is made first: both read the file's one page cache,
    so the hash is of what the map shows (unless the file is rewritten in
    place later, which a map never guards against)."""
    size = rec["size"]
    m = mmap.mmap(fd, size, access=mmap.ACCESS_READ, offset=start)

    def digest(lo: int, hi: int, buf: memoryview) -> bytes:
        h = hashlib.sha256()
        while lo < hi:
            n = os.preadv(fd, [buf[:min(len(buf), hi - lo)]], start + lo)
            if not n:
                fail(f"ends at byte {lo}, before the {size} bytes the manifest lists "
                     "(truncated in place)")
            h.update(buf[:n])
            lo += n
        return h.digest()
    check_digests(rec, digest, fail)
    return m


def check_digests(rec: dict, digest, fail) -> None:
    """Check the ``rec["size"]`` bytes that ``digest(lo, hi, buf)`` hashes
    (the SHA-256 of bytes ``[lo, hi)``; ``buf``: a buffer of the calling
    thread's to read them through) against ``rec``: against its digest tree
    (``chunks``), each chunk hashed once, in ``hash_threads()`` threads (a
    SHA-256 update and a read release the GIL), and the root; or, in a file
    written before there were trees, against its SHA-256, in one pass.
    ``fail(message)`` raises (the message says what differs: the SHA-256,
    or a chunk, by its bytes)."""
    size, tree = rec["size"], rec.get("chunks")
    if tree is None:
        if digest(0, size, memoryview(bytearray(min(size, READ_BUFFER)))).hex() != rec["sha256"]:
            fail("does not match its SHA-256 in the manifest")
        return
    step = tree["size"]
    spans = [(lo, min(lo + step, size)) for lo in range(0, size, step)]
    got, errors, lock = [b""] * len(spans), [], threading.Lock()
    todo = iter(range(len(spans)))

    def work():
        buf = memoryview(bytearray(min(step, size, READ_BUFFER)))
        try:
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                got[i] = digest(*spans[i], buf)
        except BaseException as e:  # raised again by the calling thread
            errors.append(e)
            with lock:
                for _ in todo:  # the others stop too
                    pass
    threads = [threading.Thread(target=work, daemon=True)
               for _ in range(min(hash_threads(), len(spans)) - 1)]
    for t in threads:
        t.start()
    work()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    if chunks_root(d.hex() for d in got) != tree["root"]:  # the root the manifest was checked for
        i = next((i for i, (d, want) in enumerate(zip(got, tree["sha256"])) if d.hex() != want), 0)
        fail(f"does not match its SHA-256 in the manifest: chunk {i} of {len(spans)} (bytes "
             f"[{spans[i][0]}, {spans[i][1]})) differs")


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, size: int, path: str,
                 keep: bool = True, sizes_only: bool = False):
    """The member's bytes, read once into one buffer; the zip's own CRC is
    checked by zipfile at the end of the read. With ``keep=False``, only its
    SHA-256 (hex), hashed as it streams by; with ``sizes_only``, only the
    sizes are checked (None)."""
    if info.file_size != size:
        raise ArtifactIntegrityError(f"member {info.filename} is {info.file_size} bytes, the "
                                     f"manifest says {size}", path)
    if info.compress_type == zipfile.ZIP_STORED:
        ok = info.compress_size == size
    else:
        ok = size <= max(_DEFLATE_MAX_RATIO * info.compress_size, 1 << 16)
    if not ok:
        raise ArtifactIntegrityError(f"member {info.filename}: sizes in the zip directory do "
                                     "not agree", path)
    if info.compress_type != zipfile.ZIP_STORED and size > MAX_INFLATED_BYTES:
        raise ArtifactFormatError(f"member {info.filename} inflates to {size} bytes; a "
                                  f"compressed member may hold at most "
                                  f"{MAX_INFLATED_BYTES >> 20} MiB", path)
    if sizes_only:
        return None
    if not keep:
        h, got = hashlib.sha256(), 0
        with zf.open(info) as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                got += len(chunk)
                if got > size:
                    break
        if got != size:
            raise ArtifactIntegrityError(f"member {info.filename} is not {size} bytes long", path)
        return h.hexdigest()
    buf = bytearray(size)
    view = memoryview(buf)
    with zf.open(info) as f:
        got = 0
        while got < size:
            n = f.readinto(view[got:])
            if not n:
                break
            got += n
        if got != size or f.read(1):
            raise ArtifactIntegrityError(f"member {info.filename} is not {size} bytes long", path)
    return buf


_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError,
               RuntimeError, ValueError, struct.error, OverflowError)


def _check_regular_file(p: str) -> None:
    import stat
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise ArtifactFormatError("no such file", p) from None
    except OSError as e:
        raise ArtifactFormatError(f"cannot read: {e.strerror}", p) from None
    if stat.S_ISDIR(mode):
        raise ArtifactFormatError("is a directory, not a .fuel file", p)
    if not stat.S_ISREG(mode):
        raise ArtifactFormatError("is not a regular file (a device, FIFO or socket); give a "
                                  ".fuel file", p)


def _check_signature(zf, by_name: dict, raw, key, source: str, path: str) -> None:
    info = by_name.get(SIGNATURE)
    if info is None:
        raise ArtifactSignatureError(f"the file is not signed, and a signature is required "
                                     f"({source}); save it with sign_with=KEY (fuelc compile "
                                     "--sign-key FILE)", path)
    if info.file_size > MAX_SIGNATURE_BYTES:
        raise ArtifactSignatureError(f"{SIGNATURE} is {info.file_size} bytes", path)
    verify_manifest(key, raw, _read_member(zf, info, info.file_size, path), path)


def open_artifact(path, verify_with=None, require_signature: bool = False) -> Artifact:
    """Open and verify a ``.fuel`` file (zip structure, manifest, format
    version, every member's size and SHA-256) without linking any code.
    With ``verify_with`` (a key), or a key file named by
    ``$FUELC_VERIFY_KEY_FILE``, the file must carry a signature of its
    manifest under that key (``ArtifactSignatureError`` otherwise); with
    ``require_signature`` or ``$FUELC_REQUIRE_SIGNED=1``, there must be
    such a key (see ``load``)."""
    p = os.fspath(path)
    key = required_key(verify_with, require_signature, p)
    _check_regular_file(p)
    try:
        with zipfile.ZipFile(p) as zf:
            infos = zf.infolist()
            names = [i.filename for i in infos]
            if len(set(names)) != len(names):
                raise ArtifactFormatError("duplicate member names", p)
            by_name = {i.filename: i for i in infos}
            info = by_name.get(MANIFEST)
            if info is None:
                raise ArtifactFormatError(f"no {MANIFEST}: not a fuelc module", p)
            if info.file_size > MAX_MANIFEST_BYTES:
                raise ArtifactFormatError(f"{MANIFEST} is {info.file_size} bytes", p)
            raw = _read_member(zf, info, info.file_size, p)
            if key is not None:
                _check_signature(zf, by_name, raw, key, key_source(verify_with), p)
            try:
                manifest = json.loads(bytes(raw).decode())
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
                raise ArtifactFormatError(f"{MANIFEST} is not JSON: {e}", p) from None
            check_manifest(manifest, p)
            listed = manifest["members"]
            extra = sorted(set(by_name) - set(listed) - {MANIFEST, SIGNATURE})
            missing = sorted(set(listed) - set(by_name))
            if extra or missing:
                raise ArtifactFormatError(f"members differ from the manifest: missing "
                                          f"{missing}, unexpected {extra}", p)
            members = {}
            for name, rec in listed.items():
                keep = not name.startswith("ir/")
                if name == WEIGHTS:  # mapped where it can be, hashed in threads
                    members[name] = _weights_member(zf, by_name[name], rec, p)
                    continue
                data = _read_member(zf, by_name[name], rec["size"], p, keep)
                if (sha256_hex(data) if keep else data) != rec["sha256"]:
                    raise ArtifactIntegrityError(f"member {name} does not match its SHA-256 in "
                                                 "the manifest: the file was modified", p)
                if keep:
                    members[name] = data
        weights_path = None
        if "weights_file" in manifest:
            weights_path = os.path.join(os.path.dirname(os.path.realpath(p)),
                                        manifest["weights_file"]["name"])
            members[WEIGHTS] = _map_weights_file(weights_path, manifest["weights_file"], p)
    except ArtifactError:
        raise
    except _ZIP_ERRORS as e:
        raise ArtifactIntegrityError(f"damaged or truncated file ({type(e).__name__}: {e}); "
                                     "re-export it", p) from None
    return Artifact(p, manifest, members, SIGNATURE in by_name, key is not None, weights_path)


def _weights_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, rec: dict, path: str):
    """The weights member, checked against ``rec``: a read-only map where it
    is stored aligned (as ``save`` writes it), else its bytes, read."""
    def fail(message):
        raise ArtifactIntegrityError(f"member {WEIGHTS} {message}: the file was modified",
                                     path)
    _read_member(zf, info, rec["size"], path, sizes_only=True)
    start = _member_start(zf, info, rec["size"], path)
    if start is not None:
        return map_checked(zf.fp.fileno(), start, rec, fail)
    data = _read_member(zf, info, rec["size"], path)
    view = memoryview(data)
    check_digests(rec, lambda lo, hi, buf: hashlib.sha256(view[lo:hi]).digest(), fail)
    return data


def _map_weights_file(wp: str, rec: dict, path: str):
    """A read-only map of the side weights file ``wp``, checked against its
    manifest record (a regular file, its size, its SHA-256)."""
    import stat
    try:
        fd = os.open(wp, os.O_RDONLY)
    except FileNotFoundError:
        raise ArtifactWeightsFileError("missing: the module keeps its weights in this file, "
                                       "next to it; copy it along with the .fuel file", path,
                                       wp) from None
    except OSError as e:
        raise ArtifactWeightsFileError(f"cannot be read: {e.strerror}", path, wp) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ArtifactWeightsFileError("is not a regular file", path, wp)
        if st.st_size != rec["size"]:
            raise ArtifactWeightsFileError(f"is {st.st_size} bytes, the manifest says "
                                           f"{rec['size']} (truncated or replaced)", path, wp)
        def fail(message):
            raise ArtifactWeightsFileError(f"{message}: it was modified, or belongs to another "
                                           "save", path, wp)
        return map_checked(fd, 0, rec, fail)
    finally:
        os.close(fd)


def read_safetensors(buf, path: str = "") -> dict[str, np.ndarray]:
    """The tensors of a safetensors buffer as arrays over ``buf`` (no copy).
    ArtifactFormatError for a malformed header or offsets."""
    if len(buf) < 8:
        raise ArtifactFormatError("weights: shorter than a safetensors header", path)
    n, = struct.unpack_from("<Q", buf, 0)
    if n > len(buf) - 8:
        raise ArtifactFormatError(f"weights: header of {n} bytes does not fit", path)
    try:
        header = json.loads(bytes(buf[8:8 + n]).decode())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ArtifactFormatError(f"weights: header is not JSON: {e}", path) from None
    if not isinstance(header, dict):
        raise ArtifactFormatError("weights: header is not a JSON object", path)
    data_len, out = len(buf) - 8 - n, {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        try:
            dt = SAFETENSORS_DTYPES[t["dtype"]]
            shape = tuple(int(d) for d in t["shape"])
            begin, end = (int(o) for o in t["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ArtifactFormatError(f"weights: malformed entry {name!r}: {t!r}", path) from None
        count = math.prod(shape)
        if min(shape, default=0) < 0 or not 0 <= begin <= end <= data_len or \
                end - begin != count * dt.itemsize:
            raise ArtifactFormatError(f"weights: tensor {name!r} ({t['dtype']}{list(shape)}) has "
                                      f"offsets [{begin}, {end}) outside or not matching the "
                                      f"{data_len} data bytes", path)
        out[name] = np.frombuffer(buf, dtype=dt, count=count, offset=8 + n + begin).reshape(shape)
    return out


# -- loading -------------------------------------------------------------------------------


class _ExportedKernel:
    """The callable behind a loaded generated ``KernelRef`` (one binding
    key and dtype tuple): each call is dispatched on (params, input shapes)
    to the instance exported for it. The executor hands it row-major inputs
    (the binding has no ``strided_input``), so the descriptors are the
    layouts recorded at export over the call's storages."""

    def __init__(self, name: str):
        self.__qualname__ = name
        self._calls: dict = {}

    def add(self, params, shapes, fn, layouts) -> None:
        from .memref import DescriptorTemplate
        self._calls[(params, shapes)] = (fn, tuple(DescriptorTemplate(l) for l in layouts))

    def __call__(self, inputs, outputs, layouts, params) -> None:
        hit = self._calls.get((params, tuple(l.shape for l in layouts)))
        if hit is None:
            raise KernelError(f"{self.__qualname__}: no exported instance for shapes "
                              f"{[list(l.shape) for l in layouts]} and params {params}; the "
                              f"module was exported for {len(self._calls)} other call(s)")
        for lay in layouts:
            if lay.start_offset or not lay.is_contiguous():
                raise KernelError(f"{self.__qualname__}: exported kernels take row-major "
                                  f"operands, got {lay}")
        fn, templates = hit
        fn(*[t.bind(s) for t, s in zip(templates, (*inputs, *outputs))])

    def prepare_raw(self, layouts, params, n_inputs: int):
        """The exported instance for these row-major layouts as one raw call
        (``(fn, templates, (probe, value))``, as ``runtime.direct`` takes
        it), or None when a call with them would fail (the call reports it)."""
        hit = self._calls.get((params, tuple(l.shape for l in layouts)))
        if hit is None or any(l.start_offset or not l.is_contiguous() for l in layouts):
            return None
        return hit[0], hit[1], (_no_threads, 0)


def _no_threads() -> int:
    """An exported kernel runs as exported: nothing at run time changes it."""
    return 0


def _layout(rec, path: str, where: str) -> Layout:
    try:
        return Layout(tuple(rec["shape"]), tuple(rec["stride"]), rec["offset"])
    except FuelError as e:
        raise ManifestFieldError(where, f"{rec!r}: {e}", path) from None


def _check_object_binding(art: Artifact, rec: dict, step: KernelStep, k: int) -> list:
    """Check an object binding against its step and its object before any
    code is linked; return its descriptor layouts. The kernel is called with
    one descriptor per step input and one for its output (a multi-output
    step's bundle), each over a row-major buffer of its call shape: the
    arity, the call shapes and the reach of every layout must agree with
    that, and the revision with the object and the binding."""
    b, path, where = rec["binding"], art.path, f"kernels[{k}].binding"
    if rec.get("key") != step.key.to_json() or rec.get("dtypes") != [d.value for d in
                                                                    step.dtypes]:
        raise ManifestFieldError(f"kernels[{k}].key/dtypes", f"{rec.get('key')} "
                                 f"{rec.get('dtypes')} are not those of step {rec['step']} "
                                 f"({step.key.to_json()} {[d.value for d in step.dtypes]}); the "
                                 "file was edited or damaged", path)
    n_in = len(step.inputs)
    if b["arity"] != n_in + 1:
        raise ManifestFieldError(f"{where}.arity", f"is {b['arity']}, but step {rec['step']} "
                                 f"calls its kernel with {n_in + 1} descriptors ({n_in} "
                                 "inputs, 1 output); the file was edited or damaged", path)
    for key in ("layouts", "call_shapes"):
        if len(b[key]) != b["arity"]:
            raise ManifestFieldError(f"{where}.{key}", f"has {len(b[key])} entries for arity "
                                     f"{b['arity']}", path)
    shapes = [tuple(s) for s in b["call_shapes"]]
    out = step.output_specs[0]
    if not step.is_bundle and shapes[-1] != tuple(out.shape):
        raise ManifestFieldError(f"{where}.call_shapes[{n_in}]", f"{list(shapes[-1])} is not the "
                                 f"shape {list(out.shape)} of step {rec['step']}'s output "
                                 "(plan.steps[].outputs)", path)
    layouts = []
    for j, lrec in enumerate(b["layouts"]):
        lay = _layout(lrec, path, f"{where}.layouts[{j}]")
        if j < n_in or not step.is_bundle:
            extent = math.prod(shapes[j])
        else:  # the bundle buffer: every output, each aligned to its itemsize
            nbytes = 0
            for spec in step.output_specs:
                isz = spec.dtype.itemsize
                nbytes = -(-nbytes // isz) * isz + math.prod(spec.shape) * isz
            extent = nbytes // out.dtype.itemsize
        lo, hi = lay.element_span()
        if lay.numel and (lo < 0 or hi >= extent):
            raise ManifestFieldError(f"{where}.layouts[{j}]", f"(shape {list(lay.shape)}, stride "
                                     f"{list(lay.stride)}, offset {lay.start_offset}) reaches "
                                     f"elements [{lo}, {hi}] outside its tensor of {extent} "
                                     "elements; the file was edited or damaged", path)
        layouts.append(lay)
    m = art.manifest
    if rec["revision"] != object_revision(rec, m["members"][b["object"]]["sha256"], m["target"]):
        raise ManifestFieldError(f"kernels[{k}].revision", f"does not match its binding and "
                                 f"object {b['object']} (step {rec['step']} was re-pointed at "
                                 "another object, or its key, symbol, arity, instance, call "
                                 "shapes or layouts, or the target's CPU name or features "
                                 "were edited); re-export the model", path)
    return layouts


def check_call_shapes(art: Artifact, plan: Plan, specs) -> None:
    """Each object kernel's input call shapes are its step's input shapes
    (``specs``: the executor's value specs)."""
    for k, rec in enumerate(art.manifest["kernels"]):
        b = rec["binding"]
        if b["kind"] != "object":
            continue
        step = plan.steps[rec["step"]]
        for j, v in enumerate(step.inputs):
            if tuple(b["call_shapes"][j]) != tuple(specs[v].shape):
                raise ManifestFieldError(
                    f"kernels[{k}].binding.call_shapes[{j}]", f"{b['call_shapes'][j]} is not the "
                    f"shape {list(specs[v].shape)} of step {rec['step']}'s input {v!r}", art.path)


def _check_entry_outputs(art: Artifact, plan: Plan, specs) -> None:
    """The entry point's output shapes and dtypes are the plan's."""
    for j, v in enumerate(art.manifest["entry_points"][0]["outputs"]):
        spec = specs[plan.outputs[v["name"]]]
        if v["shape"] != list(spec.shape) or v["dtype"] != spec.dtype.value:
            raise ManifestFieldError(f"entry_points[0].outputs[{j}]", f"{v['dtype']}{v['shape']} "
                                     f"is not the plan's output {v['name']!r} ({spec})", art.path)


def _check_value_sizes(plan: Plan, path: str) -> None:
    for i, step in enumerate(plan.steps):
        for j, spec in enumerate(getattr(step, "output_specs", ())):
            if math.prod(spec.shape) * spec.dtype.itemsize > MAX_VALUE_BYTES:
                raise ManifestFieldError(f"plan.steps[{i}].outputs[{j}].shape",
                                         f"{list(spec.shape)} is larger than any module "
                                         f"({MAX_VALUE_BYTES >> 40} TiB)", path)
    for name, spec in plan.inputs.items():
        if math.prod(spec.shape) * spec.dtype.itemsize > MAX_VALUE_BYTES:
            raise ManifestFieldError(f"plan.inputs[{name!r}].shape", f"{list(spec.shape)} is "
                                     f"larger than any module ({MAX_VALUE_BYTES >> 40} TiB)", path)


def _numpy_kernels() -> dict:
    from .numpy_kernels import numpy_kernel_bindings
    return {(BindingKey.static(op), tuple(dts)): fn for op, dts, fn in numpy_kernel_bindings()}


def build_table(art: Artifact, plan: Plan, objects: dict | None = None) -> KernelBindingTable:
    """A fresh binding table holding exactly the kernels ``plan`` calls:
    the artifact's objects (linked now, or taken from ``objects``: member ->
    linked object, which this fills) and the runtime's numpy kernels."""
    from .cpu_loader import ObjectLoadError, load_object
    m, path = art.manifest, art.path
    target = m["target"]
    objects = {} if objects is None else objects
    refs, numpy = {}, None
    table = KernelBindingTable()
    for k, rec in enumerate(m["kernels"]):
        i = rec["step"]
        step = plan.steps[i] if 0 <= i < len(plan.steps) else None
        if not isinstance(step, KernelStep):
            raise ManifestFieldError(f"kernels[{k}].step", f"{i} is not a kernel step", path)
        b, ident = rec["binding"], (step.key, step.dtypes, step.backend)
        if b["kind"] == "object":
            layouts = _check_object_binding(art, rec, step, k)
            obj = objects.get(b["object"])
            if obj is None:
                try:
                    obj = objects[b["object"]] = load_object(bytes(art.members[b["object"]]),
                                                             target["features"], target["name"])
                except ObjectLoadError as e:
                    raise ArtifactCodeError(f"{b['object']}: {e}", path) from None
            try:
                fn = obj.ciface(b["symbol"].removeprefix("_mlir_ciface_"), b["arity"])
            except FuelError as e:
                raise ArtifactCodeError(f"step {i}: {e}", path) from None
            ref = refs.get(ident)
            if ref is None:
                ref = refs[ident] = (_ExportedKernel(rec["kernel"]), "object", rec)
            elif ref[1] != "object":
                raise ArtifactFormatError(f"step {i}: {step.key} bound to two kinds of kernel", path)
            shapes = tuple(tuple(s) for s in b["call_shapes"])
            ref[0].add(step.params, shapes, fn, layouts)
        else:
            numpy = numpy if numpy is not None else _numpy_kernels()
            fn = numpy.get((step.key, step.dtypes))
            if fn is None or fn.__qualname__ != b["function"]:
                raise ArtifactCodeError(
                    f"step {i}: the module calls numpy kernel {b['function']} for {step.key}"
                    f"[{','.join(d.value for d in step.dtypes)}], which this runtime provides "
                    f"{'as ' + fn.__qualname__ if fn else 'not at all'}; re-export the model", path)
            if refs.setdefault(ident, (fn, "numpy", rec))[0] is not fn:
                raise ArtifactFormatError(f"step {i}: {step.key} bound to two kernels", path)
    for (key, dtypes, backend), (fn, kind, rec) in refs.items():
        try:
            precision = PrecisionGuarantee.from_json(rec["precision"])
        except FuelError as e:
            raise ManifestFieldError(f"kernels[{m['kernels'].index(rec)}].precision", f"is not "
                                     f"valid: {e}", path) from None
        caps = KernelCaps(strided_input=kind == "numpy", full_write=rec["full_write"])
        cost = default_cost_for_op_kind(key.op) if key.op is not None else unknown_cost
        table.register_full_with_source(key, dtypes, backend, KernelRef(fn, rec["kernel"],
                                                                        rec["source"]),
                                        caps, precision, cost, rec["source"])
    table.finalize()
    return table.freeze()


def load(path, verify_with=None, require_signature: bool = False) -> "LoadedModule":
    """Verify and load a ``.fuel`` file (see the module docstring); nothing
    is linked before every check has passed. Raises ``ArtifactError``
    subclasses: ``ArtifactFormatError``, ``ArtifactVersionError``,
    ``ArtifactIntegrityError``, ``ArtifactCpuError``, ``ArtifactCodeError``.

    A ``.fuel`` file is native code, like a shared library: calling the
    module runs its machine code in this process with this process's
    rights. The checks detect damage and inconsistent edits, not forgery
    (the hashes are in the manifest, which anyone who can write the file
    can rewrite), so load only files you would run as programs, or require
    a signature (``runtime.signing``):

    * ``verify_with``: the shared secret given to ``save(path,
      sign_with=key)``, or the Ed25519 public key of the private key it was
      signed with; an unsigned file, or one whose signature does not match,
      raises ``ArtifactSignatureError`` before the manifest is parsed. A key
      file named by ``$FUELC_VERIFY_KEY_FILE`` does the same for every load
      without ``verify_with``.
    * ``require_signature=True`` (or ``$FUELC_REQUIRE_SIGNED=1``): a load
      without any key is refused too."""
    art = open_artifact(path, verify_with, require_signature)
    target = art.manifest["target"]
    try:
        check_cpu_features(target["features"], target=target["name"],
                           what=f"module {os.path.basename(art.path)}")
    except CpuFeatureError as e:
        raise ArtifactCpuError(str(e), art.path, e.missing, target["name"]) from None
    if "symbolic" in art.manifest:  # one file for every size: a module per binding
        from .symbolic import SymbolicLoadedModule, iota_constants
        constants, objects = _guarded(art.path, art.constants), {}
        return SymbolicLoadedModule(art, lambda manifest: _guarded(art.path, lambda: _load_plan(
            Artifact(art.path, check_manifest(manifest, art.path), art.members, art.signed,
                     art.verified, art.weights_path),
            {**constants, **iota_constants(manifest, art.manifest)}, objects)))
    return _guarded(art.path, lambda: _load_plan(art, art.constants(), {}))


def _load_plan(art: Artifact, constants: dict, objects: dict) -> "LoadedModule":
    """The ``LoadedModule`` of a checked static manifest (``art.manifest``),
    its objects linked once into ``objects``."""
    plan = Plan.from_dict(art.manifest["plan"], constants)
    _check_value_sizes(plan, art.path)
    table = build_table(art, plan, objects)
    module = LoadedModule(art, plan, table)
    check_call_shapes(art, plan, module.executor.specs)
    _check_entry_outputs(art, plan, module.executor.specs)
    return module


def _guarded(path: str, load):
    """``load()``, any error of a malformed manifest raised as an ``ArtifactError``."""
    try:
        return load()
    except ArtifactError:
        raise
    except FuelError as e:  # PlanError, BindingTableError, ... from a malformed plan
        raise ArtifactFormatError(f"the plan does not load: {e}", path) from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError,
            RecursionError) as e:  # a field of the wrong type or missing, deep in the plan
        raise ArtifactFormatError(f"malformed manifest: the plan does not load "
                                  f"({type(e).__name__}: {e})", path) from None


class LoadedModule(PlanModule):
    """A module loaded from a ``.fuel`` file: call it like the compiled
    module it was exported from. ``m(x=...)`` returns one array for a
    one-output module, else a dict by output name; ``run`` always a dict.
    Attributes: ``manifest``, ``plan``, ``table``, ``target`` (its string),
    ``entry_points``, ``signature``, ``ir_stages`` and ``ir(stage)``."""

    def __init__(self, artifact: Artifact, plan: Plan, table: KernelBindingTable):
        self.path = artifact.path
        self.manifest = artifact.manifest
        self._artifact = artifact
        self.plan = plan
        self.table = table
        self.target = artifact.manifest["target"]["name"]
        self.executor = Executor(plan, table)

    @property
    def entry_points(self) -> list[dict]:
        return list(self.manifest["entry_points"])

    @property
    def signature(self) -> dict:
        """``{"inputs": {name: "f32[1,128]"}, "outputs": {...}}``."""
        specs = self.executor.specs
        return {"inputs": {n: str(s) for n, s in self.plan.inputs.items()},
                "outputs": {n: str(specs[v]) for n, v in self.plan.outputs.items()}}

    @property
    def ir_stages(self) -> list[str]:
        return self._artifact.ir_stages

    def ir(self, stage: str) -> str:
        return self._artifact.ir(stage)

    def __repr__(self) -> str:
        sig = ", ".join(f"{n}: {s}" for n, s in self.plan.inputs.items())
        return f"<LoadedModule {os.path.basename(self.path)} target={self.target} ({sig}) -> " \
               f"{self.output_names}>"


__all__ = ["FORMAT", "FORMAT_VERSION", "MANIFEST", "WEIGHTS", "ENTRY_SYMBOL", "SIGNATURE",
           "KEY_FILE_ENV", "REQUIRE_ENV", "ArtifactSignatureError", "ManifestFieldError",
           "sign_manifest", "verify_manifest", "signing_key", "read_key_file",
           "SAFETENSORS_DTYPES", "ArtifactError", "ArtifactFormatError", "ArtifactVersionError",
           "ArtifactIntegrityError", "ArtifactCpuError", "ArtifactCodeError", "Artifact",
           "LoadedModule", "check_manifest", "open_artifact", "read_safetensors", "build_table",
           "load", "sha256_hex", "object_revision", "MAX_INFLATED_BYTES", "MAX_ARITY"]
