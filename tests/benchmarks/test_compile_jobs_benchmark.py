"""benchmarks/compile_jobs.py's protocol: the order of the runs, the runs a
neighbour disturbed run again, the machine's CPU seconds (no compile here)."""
import argparse
import time

import pytest

from benchmarks import compile_jobs


class _Probe:
    """Stands in for ``vcpus.Probe``: ``states(call index)`` is the state
    around that run."""

    def __init__(self, calls, states):
        self.calls, self.states = calls, states

    def now(self):
        return "quiet"

    def round_state(self, before):
        return self.states(len(self.calls) - 1)


def _fake_runs(monkeypatch, others, states=lambda i: "quiet"):
    """run_child replaced: each call appends (model, jobs) to the list
    returned and reports ``others(call index)`` seconds of others' CPU; the
    vCPUs' probe reports ``states(call index)`` around it."""
    calls = []
    monkeypatch.setattr(compile_jobs, "vcpu_probe", lambda jobs: _Probe(calls, states))

    def run_child(spec, jobs, breakdown, root, pycache):
        calls.append((spec, jobs))
        return {"compile": 2.0 / jobs, "cpu": 2.0 / jobs, "cpu_workers": 1.0 * (jobs - 1),
                "others": others(len(calls) - 1), "stolen": 0.0, "digest": "d", "payloads": "p",
                "front cpu": 0.2, "sys_faults": (0.01, 100, 0)}
    monkeypatch.setattr(compile_jobs, "run_child", run_child)
    return calls


def _args(runs=3, redo=2):
    return argparse.Namespace(models=["audio:1"], jobs=[1, 2], runs=runs, breakdown=False,
                              roots=["here"], redo=redo)


def test_rounds_alternate_which_jobs_goes_first(monkeypatch, capsys):
    calls = _fake_runs(monkeypatch, lambda i: 0.0)
    compile_jobs.measure(_args(runs=4), None)
    assert [j for _, j in calls] == [1, 2, 2, 1, 1, 2, 2, 1]
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| audio:1")]
    assert row and "| 2.00x | 2.00x | 2.00x (2.00-2.00) |" in row[0]


def test_a_disturbed_run_is_run_again_until_the_redo_runs_out(monkeypatch, capsys):
    # the second call (round 1's jobs=2) is disturbed once; round 2's jobs=2 (calls 3-5) always
    calls = _fake_runs(monkeypatch, lambda i: 1.0 if i in (1, 3, 4, 5) else 0.01)
    compile_jobs.measure(_args(runs=2, redo=2), None)
    assert [j for _, j in calls] == [1, 2, 2, 2, 2, 2, 1]
    out = capsys.readouterr().out
    assert out.count("  disturbed") == 4
    assert "| 0, 3 (1 kept disturbed) |" in out


def test_a_run_on_a_shared_core_is_run_again(monkeypatch, capsys):
    # the vCPUs were one core's two hardware threads around the second call
    calls = _fake_runs(monkeypatch, lambda i: 0.0,
                       lambda i: "shared core" if i == 1 else "quiet")
    compile_jobs.measure(_args(runs=1), None)
    assert [j for _, j in calls] == [1, 2, 2]
    out = capsys.readouterr().out
    assert out.count("vCPUs shared core  disturbed") == 1 and "| 0, 1 |" in out


def test_others_below_the_threshold_are_not_a_disturbance(monkeypatch):
    # 0.03 s + 0.05 cores of a 1 s (jobs=2) run: 0.08 s
    calls = _fake_runs(monkeypatch, lambda i: 0.07)
    compile_jobs.measure(_args(runs=1), None)
    assert len(calls) == 2


def test_a_cell_after_roots_is_refused_not_run_as_a_checkout(monkeypatch, capsys):
    # argparse's --roots takes the words after it: "--roots A audio:1" would
    # run the default set with a checkout named "audio:1"
    def run_child(*a, **k):
        raise AssertionError(f"compiled {a}: the cell was taken for a checkout")
    monkeypatch.setattr(compile_jobs, "run_child", run_child)
    with pytest.raises(SystemExit) as e:
        compile_jobs.main(["--roots", compile_jobs.ROOT, "audio:1", "--runs", "1"])
    assert e.value.code == 2
    assert "'audio:1' is not a checkout directory" in capsys.readouterr().err


def test_cpu_stat_counts_this_process():
    busy0, steal0 = compile_jobs.cpu_stat()
    if busy0 == 0.0:
        pytest.skip("no /proc/stat")
    c0 = time.process_time()
    while time.process_time() - c0 < 0.3:
        pass
    busy1, steal1 = compile_jobs.cpu_stat()
    assert busy1 - busy0 >= 0.2  # clock ticks: +-0.02 s a CPU
    assert steal1 >= steal0 >= 0.0


def test_breakdown_prints_the_front_part_by_part(capsys):
    # each part's first call up to the first task; later calls (the target
    # check again in the plan stage) and what came after the first task left out
    marks = [("target check >", 0.036), ("target check <", 0.088), ("fork >", 0.088),
             ("fork <", 0.093), ("emit >", 0.129), ("emit <", 0.134), ("passes >", 0.134),
             ("passes <", 0.213), ("target check >", 0.220), ("target check <", 0.221),
             ("instances >", 0.223), ("plan >", 0.300), ("plan <", 0.310)]
    r = {"model": "audio:1", "jobs": 2, "compile": 1.4, "cpu": 1.4, "cpu_workers": 1.1,
         "objects": 9, "front": {"build model": 0.9}, "front cpu": 0.243,
         "front parts": marks, "parent": {"first task": [(0.0, 0.25)]}, "stages": {},
         "tasks": []}
    compile_jobs.show_breakdown(r)
    line = [x for x in capsys.readouterr().out.splitlines() if "front, cpu ms" in x]
    assert line == ["  front, cpu ms from compile()'s start: target check 36-88, fork 88-93, "
                    "emit 129-134, passes 134-213, instances 223-, first task 243"]


def test_breakdown_timeline_puts_each_process_s_work_in_time_order(capsys):
    r = {"compile": 1.0, "kernels": {"aaaaaa": ["Conv2D", 900], "bbbbbb": ["LayerNormLastDim", 300]},
         "parent": {"first task": [(0.0, 0.2)], "fold constants": [(0.25, 0.26)],
                    "wait for workers": [(0.9, 0.95), (0.95, 0.9502)]},
         "timeline": [("compile", "bbbbbb", 0.3, 0.9), ("store+load", "aaaaaa", 0.95, 0.96)],
         "tasks": [(4242, 0.21, 0.95, "aaaaaa")]}
    compile_jobs.show_timeline(r)
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [line.split()[0] for line in lines] == ["c", "c", "w1", "c", "c", "c", "c", "c"]
    assert "0.000- 0.200 (0.200)  front" in lines[0]
    assert "0.200- 0.250 (0.050)  the other instances' texts" in lines[1]
    assert "task aaaaaa Conv2D (cost 900)" in lines[2]
    assert "fold constants" in lines[3] and "compile bbbbbb LayerNormLastDim" in lines[4]
    assert "0.900- 0.950 (0.050)  waits for the workers" in lines[5]  # a 0.2 ms wait left out
    assert "store+load aaaaaa" in lines[6] and "returned at 1.000" in lines[7]


def test_default_set_has_the_conv_nets_and_the_encoders():
    # issue 21 names "the conv nets and encoders in benchmarks/": models.py's
    # cnn models, its encoders (bert, vit) and benchmarks/encoder.py's encoder
    from benchmarks import models
    names = {spec.split(":")[0] for spec in compile_jobs.DEFAULT}
    assert {n for n, m in models.MODELS.items() if m.kind == "cnn"} <= names
    assert {"bert", "vit", "encoder"} <= names
    assert all(spec.split(":")[1] in ("1", "8") for spec in compile_jobs.DEFAULT)


def test_encoder_builds_static_at_the_batch_asked():
    # benchmarks/encoder.py's model has a symbolic batch: compile_jobs fixes it,
    # so compile() gives a plain module and starts its workers (MIN_NODES)
    from compiler.codegen.jobs import MIN_NODES
    from compiler.frontends.onnx import import_model
    proto, shapes = compile_jobs.build("encoder", 8)
    graph = import_model(proto, input_shapes=shapes)
    assert not graph.is_symbolic
    assert graph.signature()["inputs"] == {"x": "f32[8,128,384]"}
    assert len(graph.nodes) >= MIN_NODES
