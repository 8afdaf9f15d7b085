"""emit_object → a fresh process where importing MLIR is impossible →
load_object → correct results."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

import codegen_ir as IR
from compiler.codegen.cpu import emit_object

REPO = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent("""
    import sys

    class _NoMLIR:  # any attempt to import MLIR bindings fails loudly
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch_mlir", "mlir"):
                raise ImportError(f"MLIR import blocked in this process: {name}")
            return None

    sys.meta_path.insert(0, _NoMLIR())
    import numpy as np
    from compiler.codegen.loader import load_object
    from compiler.codegen.memref import descriptor_from_array as D

    co = load_object(open(sys.argv[1], "rb").read())
    a = np.arange(20, dtype=np.float32).reshape(5, 4).T          # 4x5, transposed
    b = np.broadcast_to(np.float32(0.5) * np.arange(5, dtype=np.float32), (4, 5))
    out = np.zeros((4, 5), np.float32)
    co.ciface("add", 3)(D(a[::-1]), D(b), D(out))
    assert np.array_equal(out, a[::-1] + b), out
    x = np.linspace(-3, 3, 512, dtype=np.float32).reshape(4, 128)
    y = np.empty_like(x)
    co.ciface("softmax", 2)(D(x), D(y))
    e = np.exp(x - x.max(1, keepdims=True))
    assert np.allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert not [m for m in sys.modules if m.split(".")[0] in ("torch_mlir", "mlir")]
    assert "compiler.mlir" not in sys.modules
    print("OK", len(co.object_bytes))
""")


def test_object_runs_in_a_process_without_mlir(tmp_path):
    data = emit_object(IR.ADD_DYN + IR.SOFTMAX, ["add", "softmax"])
    assert data[:4] == b"\x7fELF"
    obj = tmp_path / "kernels.o"
    obj.write_bytes(data)
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(script), str(obj)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"OK {len(data)}"


def test_blocked_import_really_blocks(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_CHILD.split("import numpy as np")[0] + "import torch_mlir\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0 and "MLIR import blocked" in proc.stderr


def test_corrupt_objects_are_refused(tmp_path):
    import pytest
    from compiler.codegen.loader import ObjectLoadError, load_object
    with pytest.raises(ObjectLoadError, match="not an ELF object"):
        load_object(b"not an object at all, clearly" * 4)
    data = emit_object(IR.ADD_DYN, ["add"])
    with pytest.raises(ObjectLoadError):
        load_object(data[:200])


def test_symbol_lookup_names_what_exists():
    import pytest
    from compiler.codegen.loader import SymbolNotFoundError, load_object
    co = load_object(emit_object(IR.ADD_DYN, ["add"]))
    with pytest.raises(SymbolNotFoundError, match="_mlir_ciface_add"):
        co.address("nope")
