"""The ``.fuel`` manifest: its schema, the checks of its fields against each
other, and the ``ArtifactError`` family (``runtime.artifact`` reads and
loads the file; this module says what a well-formed manifest is).

``check_manifest`` runs before anything else of the file is trusted. First
the schema (``MANIFEST_SCHEMA`` below: every object's keys and types, every
list's items, the tagged unions of plan steps and kernel bindings), then the
cross-checks that need several fields at once: member names and IR sizes,
IR stages and objects naming members, kernel arities, the entry point
against the plan, a named CPU against its feature list, each step's binding
key, view and params. Every refusal is a ``ManifestFieldError`` whose
``field`` is the path of the offending field
(``plan.steps[3].outputs[0].shape``, ``kernels[0].binding.arity``), so a
damaged or edited file never reaches the loader as a raw ``KeyError``,
``TypeError`` or a crash.
"""
from __future__ import annotations

import hashlib
import json
import re

from .cpu_features import KNOWN_CPUS, CpuFeatureError
from .errors import FuelError

FORMAT = "fuelc-module"
FORMAT_VERSION = 5  # 2: an object kernel's revision covers its whole binding; 3: and the target;
#                    4: the weights may be a side file (``weights_file``); 5: a symbolic
#                    module (``symbolic``: one file for every size, ``runtime.symbolic``)
#: The versions this runtime reads (a static version-5 manifest is a version-4 one).
READ_VERSIONS = (4, 5)
MANIFEST = "manifest.json"
WEIGHTS = "weights.safetensors"
#: The suffix of a side weights file (``model.fuel`` -> ``model.weights``).
WEIGHTS_SUFFIX = ".weights"
ENTRY_SYMBOL = "_mlir_ciface_kernel"
#: The most bytes a compressed member may inflate to (IR text; code and weights
#: are stored uncompressed), and the most descriptors one kernel may take.
MAX_INFLATED_BYTES = 256 << 20
MAX_ARITY = 256
#: The chunk sizes a weights digest tree (``chunks``) may have: a power of two
#: in this range (``runtime.artifact`` hashes the chunks in several threads).
MIN_CHUNK, MAX_CHUNK = 64 << 10, 1 << 30


class ArtifactError(FuelError):
    """A ``.fuel`` file that cannot be used; ``path`` names it."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


class ArtifactFormatError(ArtifactError, ValueError):
    """Not a fuelc module: not a zip, truncated, members missing or
    unexpected, a malformed manifest or weights table."""


class ManifestFieldError(ArtifactFormatError):
    """A manifest field that is missing, of the wrong type, or disagrees
    with the rest of the manifest; ``field`` is its path
    (``kernels[0].binding.layouts[1]``)."""

    def __init__(self, field: str, message: str, path: str = ""):
        super().__init__(f"malformed manifest: {field} {message}", path)
        self.field = field


class ArtifactVersionError(ArtifactError):
    """A module written in another format version than this runtime reads."""


class ArtifactIntegrityError(ArtifactError):
    """A member whose bytes do not match the manifest (size, SHA-256 or the
    zip's CRC): the file was damaged or tampered with."""


class ArtifactWeightsFileError(ArtifactIntegrityError):
    """The side weights file a module names (``weights_file``) is missing,
    not a regular file, or does not match the manifest's size or SHA-256;
    ``weights_path`` names it."""

    def __init__(self, message: str, path: str, weights_path: str):
        super().__init__(f"weights file {weights_path}: {message}", path)
        self.weights_path = weights_path


class ArtifactSignatureError(ArtifactIntegrityError):
    """A signature was required (``verify_with``, ``require_signature`` or
    the environment's policy) and the file has none, it does not match the
    manifest under the key, or there is no key to check it with."""


class ArtifactCpuError(ArtifactError, CpuFeatureError):
    """The module's code needs CPU features this machine lacks (``missing``)."""

    def __init__(self, message: str, path: str, missing, target: str):
        ArtifactError.__init__(self, message, path)
        self.missing = sorted(missing)
        self.target = target


class ArtifactCodeError(ArtifactError):
    """A verified object that this process cannot link (a symbol it needs is
    missing), or a kernel the runtime does not provide."""


# -- the schema ----------------------------------------------------------------------------
#
# A schema is a Python type (``str``, ``int``, ``bool``, ``dict``, ``list``), a dict
# (an object with these keys; a key ending in "?" is optional; other keys are
# ignored), a one-item list (a list of such items), or one of the classes below.


class Map:
    """An object whose every value matches ``schema`` (its keys are names)."""

    def __init__(self, schema):
        self.schema = schema


class Tagged:
    """An object whose ``tag`` field picks its schema from ``cases``."""

    def __init__(self, tag: str, cases: dict):
        self.tag, self.cases = tag, cases


class Check:
    """``schema``, and then ``test(value)`` true; else the field ``says``."""

    def __init__(self, schema, test, says: str):
        self.schema, self.test, self.says = schema, test, says


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


EXTENT = Check(int, lambda v: 0 <= v < 1 << 62, "is not an extent in [0, 2**62)")
SHAPE = [EXTENT]
HEX64 = Check(str, re.compile(r"[0-9a-f]{64}").fullmatch, "is not a SHA-256 hex digest")
#: The weights' digest tree, next to their whole-file SHA-256: the SHA-256 of
#: each ``size``-byte chunk (the last one shorter) and ``root``, the SHA-256 of
#: those digests' bytes in order (``chunks_root``).
CHUNKS = {"size": Check(int, lambda v: MIN_CHUNK <= v <= MAX_CHUNK and not v & (v - 1),
                        f"is not a power of two in [{MIN_CHUNK >> 10} KiB, "
                        f"{MAX_CHUNK >> 30} GiB]"),
          "sha256": [HEX64], "root": HEX64}
DTYPE = Check(str, lambda v: v in _dtype_names(), "is not a dtype (f32, i64, bf16, ...)")
VALUE = {"name": str, "shape": SHAPE, "dtype": DTYPE}
BINDING_KEY = Check(dict, lambda v: set(v) in ({"op"}, {"fused"}),
                    "is not {'op': NAME} or {'fused': ID}")
LAYOUT = {"shape": SHAPE, "stride": [int], "offset": Check(int, lambda v: v >= 0, "is < 0")}
_IO = {"name?": str, "input": str, "output": str}
STEP = Tagged("kind", {
    "kernel": {"name?": str, "key": BINDING_KEY, "dtypes": [DTYPE], "backend": str,
               "params": Tagged("kind", {}), "inputs": [str],
               "outputs": [{"id": str, "shape": SHAPE, "dtype": DTYPE}]},
    "view": {**_IO, "op": str, "args": dict},
    "reshape": {**_IO, "shape": SHAPE},
    "contiguize": _IO,
    "const": {"name?": str, "const": str, "output": str},
})
PLAN = {"version": int, "inputs": [VALUE], "outputs": [{"name": str, "value": str}],
        "constants?": [{"name": str, "shape": SHAPE, "numpy_dtype": str}], "steps": [STEP]}
KERNEL = {
    "step": int, "source": str, "kernel": str, "precision": dict, "full_write": bool,
    "revision": str,
    "key?": BINDING_KEY, "dtypes?": [DTYPE],
    "binding": Tagged("kind", {
        "object": {"object": str, "symbol": str,
                   "arity": Check(int, lambda v: 0 < v <= MAX_ARITY,
                                  f"is outside [1, {MAX_ARITY}]"),
                   "instance": str, "call_shapes": [SHAPE], "layouts": [LAYOUT]},
        "numpy": {"function": str},
    }),
}
MANIFEST_SCHEMA = {
    "format": str, "format_version": int, "producer": dict,
    "target": {"name": str, "kind": str, "cpu": str, "features": [str]},
    "entry_points": Check([{"name": str, "inputs": [VALUE], "outputs": [VALUE]}], bool,
                          "is empty (a module has one entry point, 'main'); re-export the "
                          "model"),
    "plan": PLAN, "constants": Map(str), "kernels": [KERNEL], "ir": Map(str),
    "members": Map({"sha256": HEX64, "size": Check(int, lambda v: v >= 0, "is < 0"),
                    "chunks?": CHUNKS}),  # the weights member only
    # weights kept in a file next to the .fuel file (save(weights="side")),
    # instead of the weights.safetensors member
    "weights_file?": {"name": str, "sha256": HEX64,
                      "size": Check(int, lambda v: v > 0, "is not > 0"), "chunks?": CHUNKS},
}


def _dtype_names() -> frozenset:
    from .dtype import DType
    return frozenset(d.value for d in DType)


def _type_name(schema) -> str:
    return {str: "a string", int: "an int", bool: "a bool", dict: "an object",
            list: "a list"}[schema]


def validate(value, schema, field: str, path: str = "") -> None:
    """Check ``value`` against ``schema``; ``ManifestFieldError`` naming
    ``field`` (extended to the offending sub-field) otherwise."""
    def fail(says):
        raise ManifestFieldError(field, says, path)
    if isinstance(schema, Check):
        validate(value, schema.schema, field, path)
        if not schema.test(value):
            fail(f"{value!r} {schema.says}" if not isinstance(value, (list, dict))
                 else schema.says)
    elif isinstance(schema, type):
        if not isinstance(value, schema) or (schema is int and isinstance(value, bool)):
            fail(f"must be {_type_name(schema)}, got {type(value).__name__}")
    elif isinstance(schema, list):
        validate(value, list, field, path)
        for i, item in enumerate(value):
            validate(item, schema[0], f"{field}[{i}]", path)
    elif isinstance(schema, Map):
        validate(value, dict, field, path)
        for k, v in value.items():
            validate(v, schema.schema, f"{field}[{k!r}]", path)
    elif isinstance(schema, Tagged):
        validate(value, dict, field, path)
        if schema.tag not in value:
            fail(f"has no {schema.tag!r}")
        tag = value[schema.tag]
        if not isinstance(tag, str):
            fail(f"{schema.tag} must be a string, got {type(tag).__name__}")
        if schema.cases:
            if tag not in schema.cases:
                fail(f"{schema.tag} {tag!r} is not one of {', '.join(schema.cases)}")
            validate(value, schema.cases[tag], field, path)
    else:  # an object
        validate(value, dict, field, path)
        for key, sub in schema.items():
            name = key.rstrip("?")
            if name not in value:
                if key.endswith("?"):
                    continue
                fail(f"has no {name!r}")
            validate(value[name], sub, f"{field}.{name}" if field else name, path)


# -- the cross-checks ----------------------------------------------------------------------

_MEMBER = re.compile(r"(manifest\.json|weights\.safetensors|code/[0-9]+\.o"
                     r"|ir/[A-Za-z0-9_.-]+\.mlir)")


def check_manifest(m, path: str = "") -> dict:
    """Check the manifest's format, version, schema and the agreement of its
    fields; return it. ``ArtifactVersionError`` for another format version,
    else ``ManifestFieldError`` (an ``ArtifactFormatError``) naming the first
    bad field."""
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise ArtifactFormatError(f"not a fuelc module (manifest format "
                                  f"{m.get('format') if isinstance(m, dict) else None!r}, "
                                  f"expected {FORMAT!r})", path)
    version = m.get("format_version")
    if version not in READ_VERSIONS or "symbolic" in m and version < 5:
        raise ArtifactVersionError(
            f"format version {version!r}{' with a symbolic signature' if 'symbolic' in m else ''}"
            f"; this runtime reads versions {', '.join(map(str, READ_VERSIONS))} (symbolic "
            "modules: 5): re-export the model with this fuelc (fuelc compile ... -o ...)", path)
    if "symbolic" in m:  # a template: its fields, then the manifest of one binding
        from .symbolic import TEMPLATE_FIELDS, check_symbolic
        validate(m, {k: v for k, v in MANIFEST_SCHEMA.items() if k not in TEMPLATE_FIELDS},
                 "", path)
        check_symbolic(m, path, _check_static)
        return m
    _check_static(m, path)
    return m


def _check_static(m: dict, path: str) -> None:
    """``check_manifest`` of a manifest whose extents are all ints."""
    validate(m, MANIFEST_SCHEMA, "", path)
    _check_target(m["target"], path)
    for name, rec in m["members"].items():
        where = f"members[{name!r}]"
        if not _MEMBER.fullmatch(name) or name == MANIFEST:
            raise ManifestFieldError(where, "is not a member name this format has", path)
        if name.startswith("ir/") and rec["size"] > MAX_INFLATED_BYTES:
            raise ManifestFieldError(f"{where}.size", f"is {rec['size']} bytes; an IR member "
                                     f"may hold at most {MAX_INFLATED_BYTES >> 20} MiB", path)
        if "chunks" in rec:
            if name != WEIGHTS:
                raise ManifestFieldError(f"{where}.chunks", f"is given, but only the weights "
                                         f"({WEIGHTS}, weights_file) have chunk digests", path)
            _check_chunks(rec, where, path)
    side = m.get("weights_file")
    if side is not None:
        if "chunks" in side:
            _check_chunks(side, "weights_file", path)
        name = side["name"]
        if not name.endswith(WEIGHTS_SUFFIX) or name == WEIGHTS_SUFFIX or \
                any(c in name for c in "/\\\0"):
            raise ManifestFieldError("weights_file.name", f"{name!r} is not a file name "
                                     f"ending in {WEIGHTS_SUFFIX!r} (the file lies next to "
                                     "the module, in its directory)", path)
        if WEIGHTS in m["members"]:
            raise ManifestFieldError("weights_file", f"and the member {WEIGHTS} both hold "
                                     "weights; a module keeps them in one place", path)
    for stage, member in m["ir"].items():
        if member not in m["members"] or not member.startswith("ir/"):
            raise ManifestFieldError(f"ir[{stage!r}]", f"names no IR member ({member!r})", path)
    ep, plan = m["entry_points"][0], m["plan"]
    def sig(values):
        return [{k: v[k] for k in ("name", "shape", "dtype")} for v in values]
    if sig(ep["inputs"]) != sig(plan["inputs"]) \
            or [v["name"] for v in ep["outputs"]] != [v["name"] for v in plan["outputs"]]:
        raise ManifestFieldError("entry_points[0]", "does not match the plan's inputs and "
                                 "outputs (plan.inputs, plan.outputs)", path)
    for i, step in enumerate(plan["steps"]):
        _check_step(step, f"plan.steps[{i}]", path)
    for i, k in enumerate(m["kernels"]):
        b, where = k["binding"], f"kernels[{i}].binding"
        if b["kind"] != "object":
            continue
        if b["object"] not in m["members"] or not b["object"].startswith("code/"):
            raise ManifestFieldError(f"{where}.object", f"{b['object']!r} is not an object "
                                     "member", path)
        if b["symbol"] != ENTRY_SYMBOL:
            raise ManifestFieldError(f"{where}.symbol", f"is {b['symbol']!r}; exported kernels "
                                     f"are {ENTRY_SYMBOL!r}", path)


def chunks_root(digests) -> str:
    """The root of a digest tree: the SHA-256 of its chunk digests (hex) as
    bytes, in order."""
    return hashlib.sha256(b"".join(bytes.fromhex(d) for d in digests)).hexdigest()


def _check_chunks(rec: dict, where: str, path: str) -> None:
    """A digest tree (``rec["chunks"]``) lists one digest per chunk of the
    ``rec["size"]`` bytes, and its root is theirs."""
    tree = rec["chunks"]
    step, n, size = tree["size"], len(tree["sha256"]), rec["size"]
    if n != -(-size // step):
        raise ManifestFieldError(f"{where}.chunks.sha256", f"lists {n} chunk(s) of {step} bytes "
                                 f"(bytes [0, {n * step})), but the weights are {size} bytes: "
                                 f"{-(-size // step)} chunk(s); the file was edited or "
                                 "damaged", path)
    if chunks_root(tree["sha256"]) != tree["root"]:
        raise ManifestFieldError(f"{where}.chunks.root", "is not the SHA-256 of the chunk "
                                 "digests; the file was edited or damaged", path)


def _check_step(step: dict, where: str, path: str) -> None:
    """What the schema cannot say of one plan step: a kernel step's binding
    key, backend and params, a view's op and arguments."""
    from .executor import VIEW_OPS
    from .keys import BackendId, BindingKey
    from .params import OpParams
    try:
        if step["kind"] == "kernel":
            field = f"{where}.key"
            BindingKey.from_json(step["key"])
            field = f"{where}.backend"
            BackendId.parse(step["backend"])
            field = f"{where}.params"
            OpParams.from_dict(step["params"])
    except FuelError as e:
        raise ManifestFieldError(field, f"is not valid: {e}", path) from None
    if step["kind"] == "view":
        if step["op"] not in VIEW_OPS:
            raise ManifestFieldError(f"{where}.op", f"{step['op']!r} is not a view op", path)
        for k, v in step["args"].items():
            ok = _int(v) or isinstance(v, list) and all(_int(d) for d in v)
            if not ok or not k.isidentifier():
                raise ManifestFieldError(f"{where}.args[{k!r}]", f"{v!r} is not an int or a "
                                         "list of ints", path)


def _check_target(t: dict, path: str) -> None:
    """A named CPU target (``cpu:x86-64-v4``) needs at least the features
    its CPU implies: a features list edited down would let code that uses
    them load on a CPU without them (SIGILL)."""
    if t["kind"] != "cpu" or t["name"] == "cpu":  # the host target lists what the host has
        return
    if t["name"] != f"cpu:{t['cpu']}":
        raise ManifestFieldError("target.name", f"{t['name']!r} does not match target.cpu "
                                 f"{t['cpu']!r}", path)
    lacks = sorted(KNOWN_CPUS.get(t["cpu"], frozenset()) - set(t["features"]))
    if lacks:
        raise ManifestFieldError("target.features", f"lacks {', '.join(lacks)}, which "
                                 f"target.cpu {t['cpu']!r} implies; the file was edited or "
                                 "damaged: re-export it", path)


def object_revision(rec: dict, object_sha256: str, target: dict) -> str:
    """The revision of an object kernel record: a hash over its source, its
    binding key and dtypes, the object's SHA-256, every field of its binding
    and the target it was compiled for (``manifest["target"]``: CPU name and
    features), so an object re-pointed or swapped, a record moved to another
    kind of step, an arity or layout edited, or the feature list of the file
    edited (which would let code load on a CPU that cannot run it) no longer
    matches."""
    b = rec["binding"]
    fields = [rec.get("source"), rec.get("key"), rec.get("dtypes"), object_sha256] + \
        [b.get(k) for k in ("symbol", "arity", "instance", "call_shapes", "layouts")] + \
        [target.get("name"), target.get("cpu"), sorted(target.get("features", ()))]
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
