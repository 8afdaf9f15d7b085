"""``fuelc run`` and ``fuelc inspect``: the commands that need only the
runtime (no compiler, no MLIR), so a machine that only runs models can use
them as ``python -m runtime.cli run model.fuel --input x=x.npy``.

    run      verify and load a .fuel file, run it on .npy inputs, print each
             output's name, shape, dtype and min/max/mean (or save .npy files)
    inspect  verify a .fuel file and print its manifest summary, signature,
             kernels and IR stage names (--ir STAGE prints one stage)

Errors print one ``error: ...`` line on stderr and exit with status 1
(usage errors: 2).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional, Sequence

import numpy as np

from .dtype import DType
from .errors import FuelError


class CliError(Exception):
    """A user error the command reports as one ``error: ...`` line."""


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def file_problem(path: str) -> Optional[str]:
    """Why ``path`` cannot be read as a file (None when it can): no such
    file, a directory, or a device, FIFO or socket."""
    import stat
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as e:
        return f"cannot read it ({e.strerror})"
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    if not stat.S_ISREG(mode):
        return "is not a regular file (a device, FIFO or socket)"
    return None


def _parse_inputs(specs: Sequence[str]) -> dict[str, np.ndarray]:
    out = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise CliError(f"--input {spec!r}: expected NAME=FILE.npy (e.g. --input x=x.npy)")
        if name in out:
            raise CliError(f"--input {name!r} is given twice")
        problem = file_problem(path)
        if problem:
            raise CliError(f"--input {name}: {path}: {problem}")
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise CliError(f"--input {name}: {path} is not a .npy array file ({_one_line(e)})") \
                from None
        if not isinstance(arr, np.ndarray):  # an .npz archive: a mapping of arrays
            arr.close()
            raise CliError(f"--input {name}: {path} is an .npz archive, not one .npy array; "
                           "save each input with np.save and pass --input NAME=FILE.npy")
        out[name] = arr
    return out


def _check_inputs(module, given: dict[str, np.ndarray]) -> None:
    sig = module.signature["inputs"]
    unknown = sorted(set(given) - set(sig))
    missing = sorted(set(sig) - set(given))
    want = ", ".join(f"{n}: {s}" for n, s in sig.items())
    if unknown:
        raise CliError(f"unknown input {unknown[0]!r}; the module's inputs are ({want})")
    if missing:
        raise CliError(f"missing input {missing[0]!r}: pass --input {missing[0]}=FILE.npy; "
                       f"the module's inputs are ({want})")


def _summary(arr: np.ndarray) -> str:
    if arr.size == 0:
        return "empty"
    a = arr.astype(np.float64)
    return f"min={a.min():.6g} max={a.max():.6g} mean={a.mean():.6g}"


def _verify_key(args):
    from .artifact import read_key_file
    return read_key_file(args.verify_key) if getattr(args, "verify_key", None) else None


def cmd_run(args) -> int:
    from .artifact import load
    from .bundle import INDEX, load_bundle
    inputs = _parse_inputs(args.input)
    if os.path.isfile(os.path.join(args.model, INDEX)):  # a bundle of sizes
        module = load_bundle(args.model, verify_with=_verify_key(args))
    else:
        module = load(args.model, verify_with=_verify_key(args))
    _check_inputs(module, inputs)
    outputs = module.run(**inputs)
    specs = module.signature.get("outputs") or {
        n: f"{DType.from_numpy(a.dtype).value}[{','.join(map(str, a.shape))}]"
        for n, a in outputs.items()}
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
    for name, arr in outputs.items():
        line = f"{name}: {specs[name]} {_summary(arr)}"
        if args.output_dir:
            path = os.path.join(args.output_dir, f"{name}.npy")
            np.save(path, arr)
            line += f" -> {path}"
        print(line)
    return 0


def _inspect_bundle(args) -> int:
    from .bundle import load_bundle
    b = load_bundle(args.model, verify_with=_verify_key(args))
    print(f"bundle:   {b.path} (one .fuel file per binding of the symbols)")
    for n, s in b.signature["inputs"].items():
        print(f"input:    {n}: {s}")
    for n, (lo, hi) in b.symbols.items():
        print(f"symbol:   {n} in {lo}..{'' if hi is None else hi}")
    for a, c, where in b.equalities:
        print(f"assumes:  {a} == {c} ({where})")
    for binding, f in zip(b.bindings, b.files):
        print(f"binding:  {', '.join(f'{k}={v}' for k, v in binding.items())} -> {f}")
    return 0


def cmd_inspect(args) -> int:
    from .artifact import WEIGHTS, open_artifact, read_safetensors
    from .symbolic import shape_json_text
    from .bundle import INDEX
    if os.path.isfile(os.path.join(args.model, INDEX)):  # a bundle of sizes
        return _inspect_bundle(args)
    art = open_artifact(args.model, verify_with=_verify_key(args))
    m = art.manifest
    if args.ir:
        sys.stdout.write(art.ir(args.ir))
        return 0
    if args.json:
        print(json.dumps(m, indent=1))
        return 0
    t, ep = m["target"], m["entry_points"][0]
    p = m["producer"]
    print(f"file:     {art.path} (format {m['format']} v{m['format_version']})")
    print(f"built by: fuelc {p.get('fuelc')}, torch-mlir {p.get('torch_mlir')}, "
          f"llvmlite {p.get('llvmlite')}")
    print(f"target:   {t['name']} (cpu {t['cpu']}; needs {', '.join(t['features']) or 'nothing'})")
    signed = ("yes, verified" if art.verified else "yes, not verified (--verify-key)") \
        if art.signed else "no"
    print(f"signed:   {signed}")
    print(f"entry:    {ep['name']}")
    for side in ("inputs", "outputs"):
        for v in ep[side]:
            print(f"  {side[:-1]:6s} {v['name']}: {v['dtype']}[{shape_json_text(v['shape'])}]")
    for n, (lo, hi) in m.get("symbolic", {}).get("symbols", {}).items():
        print(f"symbol:   {n} in {lo}..{'' if hi is None else hi} (one file for every size)")
    for f in m.get("symbolic", {}).get("fixed", ()):
        b = ", ".join(f"{k}={v}" for k, v in f["binding"].items())
        print(f"binding:  {b} has a plan of its own ({len(f['kernels'])} kernel steps)")
    tensors = read_safetensors(art.members.get(WEIGHTS, bytearray()), art.path)
    nbytes = sum(a.nbytes for a in tensors.values())
    where = f" (in {art.weights_path})" if art.weights_path else ""
    print(f"weights:  {len(m['constants'])} constants in {len(tensors)} tensors, {nbytes} "
          f"bytes{where}")
    objects = [n for n in m["members"] if n.startswith("code/")]
    print(f"kernels:  {len(m['kernels'])} kernel steps, {len(objects)} objects")
    steps = m["plan"]["steps"]
    for k in m["kernels"]:
        b = k["binding"]
        where = f"{b['object']}:{b['symbol']}/{b['arity']}" if b["kind"] == "object" \
            else f"numpy {b['function']}" if b["kind"] == "numpy" else " ".join(
                f"{c}={e['object']}" for v in b["variants"] for c, e in v["classes"].items())
        name = steps[k["step"]].get("name") or "" if 0 <= k["step"] < len(steps) else ""
        print(f"  step {k['step']:3d} {k['kernel']:48s} {k['source']:24s} {where} "
              f"rev {k.get('revision', '?')} {name}")
    print(f"ir:       {', '.join(art.ir_stages)} (fuelc inspect FILE --ir STAGE)")
    return 0


def _add_verify_key(p) -> None:
    p.add_argument("--verify-key", metavar="KEYFILE",
                   help="require the file to be signed with the key in KEYFILE (fuelc compile "
                        "--sign-key): the shared secret, or the Ed25519 public key in PEM; "
                        "$FUELC_VERIFY_KEY_FILE requires it for every load, "
                        "$FUELC_REQUIRE_SIGNED=1 refuses loads without a key")


def add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="run a .fuel module on .npy inputs",
                       description="Verify and load a .fuel module (no compiler needed), run it "
                                   "and print each output's name, dtype[shape] and "
                                   "min/max/mean, or save the outputs as .npy files.",
                       epilog="example: fuelc run model.fuel --input x=x.npy --output-dir out/")
    p.add_argument("model", help="the .fuel file or bundle directory (from fuelc compile)")
    p.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                   help="one input by name, from a numpy .npy file (repeat for each input)")
    p.add_argument("--output-dir", "-o", metavar="DIR",
                   help="also save every output as DIR/<name>.npy")
    _add_verify_key(p)
    p.set_defaults(func=cmd_run)


def add_inspect_parser(sub) -> None:
    p = sub.add_parser("inspect", help="show what a .fuel module holds",
                       description="Verify a .fuel module (without running or linking it) and "
                                   "print its producer, target and CPU features, signature, "
                                   "weights, kernels and IR stage names.",
                       epilog="example: fuelc inspect model.fuel --ir optimized")
    p.add_argument("model", help="the .fuel file")
    p.add_argument("--ir", metavar="STAGE", help="print the IR of one stage (fuel, optimized)")
    p.add_argument("--json", action="store_true", help="print the whole manifest as JSON")
    _add_verify_key(p)
    p.set_defaults(func=cmd_inspect)


def run_command(args) -> int:
    """Run a parsed command; user errors become one ``error:`` line, exit 1."""
    try:
        return args.func(args)
    except (CliError, FuelError, OSError) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runtime.cli", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="{run,inspect}")
    add_run_parser(sub)
    add_inspect_parser(sub)
    return run_command(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
