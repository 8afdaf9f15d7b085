"""benchmarks/winograd_ab.py: the layer compiled with and without Winograd in
one process, the two outputs close, the ratio printed."""
from benchmarks import winograd_ab


def test_the_script_compares_the_two_kernels(capsys):
    assert winograd_ab.main(["--layer", "16,16,16", "--batch", "2", "--threads", "1",
                             "--rounds", "2", "--repeats", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    diff, convs = out[0].removeprefix("rel diff ").split("; winograd convs: ")
    assert 0 < float(diff) < 1e-5 and int(convs) == 1, out[0]
    assert out[1].startswith("16,16,16 b2 cpu t1: direct ") and "w/d" in out[1], out[1]
