"""benchmarks/dynamic_kernels.py: one run on the smallest attention and GELU
cases (the script asserts each run-time kernel gives the bits of its static
instance) prints a dynamic/static ratio per kernel."""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import dynamic_kernels  # noqa: E402


def test_the_script_runs(capsys):
    assert dynamic_kernels.main(["--rounds", "1", "--repeats", "1",
                                 "--only", "attn b1 s32,gelu rows 32"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith(("attn b1 s32", "gelu rows 32"))]
    assert len(rows) == 2
    for row in rows:  # name (16 columns), static ms, dynamic ms, dyn/static, mins, ratio
        static_ms, dynamic_ms, ratio = map(float, row[16:].split()[:3])
        assert static_ms > 0 and dynamic_ms > 0 and ratio > 0, row
