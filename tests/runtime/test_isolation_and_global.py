"""runtime imports without the compiler/MLIR/llvmlite; the process-wide table
is copy-on-write and safe under concurrent readers and writers."""
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import runtime
from runtime import BindingTableError, DType, KernelBindingTable, OpKind, global_table, update_global_table

ROOT = Path(__file__).resolve().parents[2]


def test_runtime_imports_and_runs_with_compiler_mlir_and_llvmlite_blocked():
    script = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in ('compiler', 'torch_mlir', 'mlir', 'llvmlite'):
                    raise ImportError(f'blocked import of {name}')
                return None
        sys.meta_path.insert(0, Block())
        try:
            import torch_mlir
        except ImportError:
            pass
        else:
            raise SystemExit('blocker failed')
        import numpy as np
        import runtime
        from runtime import Executor, Plan, ValueSpec, KernelStep, OpKind, NO_PARAMS
        t = runtime.global_table()
        plan = Plan({'a': ValueSpec((3,), 'f32'), 'b': ValueSpec((3,), 'f32')}, {'y': 'y'},
                    [KernelStep(OpKind.AddElementwise, ['f32'] * 3, 'cpu', NO_PARAMS, ['a', 'b'], ['y'],
                                [ValueSpec((3,), 'f32')])])
        y = Executor(plan).run(a=np.ones(3, np.float32), b=np.arange(3, dtype=np.float32))['y']
        assert y.tolist() == [1.0, 2.0, 3.0], y
        bad = [m for m in sys.modules if m.split('.')[0] in ('compiler', 'torch_mlir', 'mlir', 'llvmlite')]
        assert not bad, bad
        # ml_dtypes (most of a second to import) loads only for its types
        assert 'ml_dtypes' not in sys.modules
        assert str(runtime.DType.parse('bfloat16').numpy) == 'bfloat16'
        assert 'ml_dtypes' in sys.modules
        print('OK', len(t))
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OK ")


def test_default_global_table_holds_the_numpy_kernels_and_is_frozen():
    t = global_table()
    assert t.frozen and len(t) > 300
    e = t.lookup_alternatives(OpKind.MatMul, [DType.F32] * 3, "cpu")[0]
    assert e.kernel_source == "numpy" and e.caps.strided_input
    assert e.precision.bit_stable_on_same_hardware
    with pytest.raises(BindingTableError, match="frozen"):
        t.register(OpKind.MatMul, [DType.F32] * 3, "cpu", lambda *a: None)
    t.finalize()
    assert all(not p.makes_no_static_claim() for *_, p in t.iter_precision())


def _k_a(i, o, l, p):
    return None


def test_update_global_table_publishes_a_new_snapshot_and_failures_publish_nothing():
    before = global_table()
    try:
        after = update_global_table(lambda t: t.register(OpKind.MatMul, [DType.F32] * 3, "cuda", _k_a))
        assert after is global_table() and after is not before
        assert after.backend_supports(OpKind.MatMul, [DType.F32] * 3, "cuda")
        assert not before.backend_supports(OpKind.MatMul, [DType.F32] * 3, "cuda")  # old readers unaffected

        def dup(t):
            t.register(OpKind.MatMul, [DType.F64] * 3, "cuda", _k_a)
            t.register(OpKind.MatMul, [DType.F64] * 3, "cuda", _k_a)
        with pytest.raises(BindingTableError, match="duplicate"):
            update_global_table(dup)
        assert global_table() is after
    finally:
        runtime.reset_global_table()


def test_concurrent_readers_and_writers_never_observe_a_torn_table():
    runtime.reset_global_table()
    n_writers, per_writer = 4, 25
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(w):
        try:
            for i in range(per_writer):
                fid = 0x8000 + w * 1000 + i
                update_global_table(lambda t, fid=fid: t.register(
                    runtime.BindingKey.runtime_fused(fid), [DType.F32, DType.F32], "cpu",
                    (lambda *a: None)))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def reader():
        try:
            seen = 0
            while not stop.is_set():
                t = global_table()
                n = len(t)
                assert t.frozen and n >= seen  # snapshots only grow, and never change under us
                assert t.lookup(OpKind.AddElementwise, [DType.F32] * 3, "cpu") is not None
                assert len(t) == n
                seen = n
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    base = len(global_table())
    readers = [threading.Thread(target=reader) for _ in range(4)]
    writers = [threading.Thread(target=writer, args=(w,)) for w in range(n_writers)]
    for th in readers + writers:
        th.start()
    for th in writers:
        th.join()
    stop.set()
    for th in readers:
        th.join()
    try:
        assert errors == []
        assert len(global_table()) == base + n_writers * per_writer  # no lost update
    finally:
        runtime.reset_global_table()
