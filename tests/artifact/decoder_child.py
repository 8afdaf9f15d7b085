"""Child process of test_big_decoder.py: one step of the decoder's way from
ONNX to a loaded module, in a fresh process so that its peak is its own.

    decoder_child.py STEP MODEL_DIR FUEL [SIDE]
    decoder_child.py write MODEL_DIR CONFIG_JSON

STEP is ``write`` (generate the model: ``llama_bf16.write_model``),
``import`` (import_model), ``compile`` (import, compile), ``save`` (import,
compile, save; ``SIDE`` = ``side``: weights in a side file), ``load`` (a
SHA-256 of the file(s), i.e. the page-in, then runtime.load) or ``run``
(load, run the ids in MODEL_DIR/ids.npy, write MODEL_DIR/logits.npy).
Prints one JSON line: the process's peak resident memory (VmHWM), its
resident memory after the step, and the step's seconds; for ``load`` and
``run``, load's seconds and the resident memory right after it, and whether
every loaded constant is a read-only map; for ``load``, the seconds of the
SHA-256 before it (what load's own check costs), in wall and CPU seconds.
"""
import hashlib
import json
import mmap
import sys
import time
from pathlib import Path

import numpy as np


def proc_field(name: str, field: str) -> int:
    """The number after ``field:`` in /proc/self/``name``."""
    with open(f"/proc/self/{name}") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def status_kb(field: str) -> int:
    return proc_field("status", field)


def bytes_read() -> int:
    """Bytes this process has read through read(2) and friends (``rchar`` of
    /proc/self/io): pages of a memory map that become resident do not count."""
    return proc_field("io", "rchar")


def mapped(arr) -> bool:
    base = arr
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, mmap.mmap) and memoryview(base).readonly


def main(step: str, model_dir: str, fuel: str, side: str = "") -> dict:
    out = {}
    t0 = time.perf_counter()
    if step == "write":
        from llama_bf16 import Config, write_model
        out["weights"] = write_model(Config(**json.loads(fuel)), Path(model_dir))
    elif step in ("import", "compile", "save"):
        from compiler import compile
        from compiler.frontends.onnx import import_model
        g = import_model(f"{model_dir}/model.onnx")
        if step != "import":
            m = compile(g)
            if step == "save":
                m.save(fuel, **({"weights": "side"} if side == "side" else {}))
    else:
        import runtime
        files = [p for p in (Path(fuel), Path(fuel).with_suffix(".weights")) if p.exists()]
        if step == "load":  # the page-in: what a SHA-256 of the file(s) costs alone
            t, cpu = time.perf_counter(), time.process_time()
            for name in files:
                with open(name, "rb") as f:
                    hashlib.file_digest(f, "sha256")
            out["hash_seconds"] = round(time.perf_counter() - t, 3)
            out["hash_cpu_seconds"] = round(time.process_time() - cpu, 3)
        rss0, read0 = status_kb("VmRSS"), bytes_read()
        t, cpu = time.perf_counter(), time.process_time()
        loaded = runtime.load(fuel)
        out["load_seconds"] = round(time.perf_counter() - t, 3)
        out["load_cpu_seconds"] = round(time.process_time() - cpu, 3)
        out["load_read_bytes"] = bytes_read() - read0
        out["file_bytes"] = sum(p.stat().st_size for p in files)
        out["rss_after_load_kb"] = status_kb("VmRSS") - rss0
        out["mapped"] = all(mapped(c) for c in loaded.plan.constants.values())
        if step == "run":
            ids = np.load(f"{model_dir}/ids.npy")
            np.save(f"{model_dir}/logits.npy", loaded(ids=ids))
    out.update(seconds=round(time.perf_counter() - t0, 2), peak_kb=status_kb("VmHWM"),
               rss_kb=status_kb("VmRSS"))
    return out


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:])))
