"""mlir-cpu kernels against numpy, one run: median-of-N wall times, GFLOP/s
(matmul) or GB/s (elementwise, reductions), and the ratio fuelc / numpy time.

    python benchmarks/kernels.py [--reps N] [--threads T] [--sizes 256,512,...]

numpy's BLAS is limited to ``--threads`` (default 1, the kernels are single
threaded) through ``OPENBLAS_NUM_THREADS``, set before numpy is imported.
Kernels are called through the binding table exactly as the runtime calls
them (storages + layouts → memref descriptors); compilation is excluded (each
kernel is warmed first, and its compile time is printed). Timings on shared
machines carry ±15% noise; compare ratios from one run.
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def _args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7, help="timed calls per case (median)")
    ap.add_argument("--threads", type=int, default=1, help="numpy BLAS threads")
    ap.add_argument("--sizes", default="256,512,1024,2048", help="square matmul sizes")
    ap.add_argument("--shape", default="4096,1024", help="elementwise/reduction shape")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import numpy as np

    from compiler.codegen import kernels as K
    from compiler.targets import parse_target
    from runtime import params as P
    from runtime.binding import KernelBindingTable
    from runtime.dtype import DType
    from runtime.keys import BackendId
    from runtime.layout import Layout
    from runtime.opkind import OpKind
    from runtime.storage import Storage

    table = KernelBindingTable()
    K.register_primitive_kernels(table, parse_target("cpu"), dtypes=(DType.F32, DType.F64))
    table.finalize()
    rng = np.random.default_rng(0)

    def storage(a):
        a = np.ascontiguousarray(a)
        return Storage(a.view(np.uint8).reshape(-1), DType.parse(str(a.dtype)))

    def median(fn, reps):
        fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return sorted(ts)[len(ts) // 2]

    def kernel_call(kind, dtypes, arrays, out_shape, params):
        """(warm compile seconds, a zero-arg callable running the kernel)."""
        k = table.lookup(kind, dtypes, BackendId.CPU)
        ins = [storage(a) for a in arrays]
        out = Storage.zeros(dtypes[-1], max(1, int(np.prod(out_shape))))
        lays = [Layout.contiguous(a.shape) for a in arrays] + [Layout.contiguous(out_shape)]
        t0 = time.perf_counter()
        K.warm(kind, dtypes, lays, params, len(arrays), target="cpu")
        compile_s = time.perf_counter() - t0
        return compile_s, lambda: k(ins, [out], lays, params)

    rows = []

    def case(name, kind, dtypes, arrays, out_shape, params, ref, work, unit):
        compile_s, fn = kernel_call(kind, dtypes, arrays, out_shape, params)
        reps = args.reps
        # Interleave so drifting machine load hits both sides alike.
        t_f, t_n = [], []
        for _ in range(2):
            t_f.append(median(fn, (reps + 1) // 2))
            t_n.append(median(ref, (reps + 1) // 2))
        tf, tn = min(t_f), min(t_n)
        rows.append((name, compile_s, tf, tn, work / tf / 1e9, work / tn / 1e9, unit))
        r = rows[-1]
        print(f"{r[0]:<28} compile {r[1]*1e3:7.0f} ms  fuelc {r[2]*1e3:9.3f} ms "
              f"{r[4]:7.1f} {unit}  numpy {r[3]*1e3:9.3f} ms {r[5]:7.1f} {unit}  "
              f"time fuelc/numpy {r[2]/r[3]:5.2f}", flush=True)

    print(f"# median of {args.reps} (best of 2 interleaved medians); numpy BLAS threads="
          f"{args.threads}; kernels single-threaded")
    for dt in (DType.F32,):
        for n in (int(s) for s in args.sizes.split(",")):
            a = rng.standard_normal((n, n)).astype(dt.numpy)
            b = rng.standard_normal((n, n)).astype(dt.numpy)
            o = np.empty((n, n), dt.numpy)
            case(f"matmul {n}^3 {dt}", OpKind.MatMul, (dt, dt, dt), [a, b], (n, n),
                 P.Matmul((), (), n, n, n),
                 lambda a=a, b=b, o=o: np.matmul(a, b, out=o), 2.0 * n ** 3, "GFLOP/s")
    n = 1024
    a = rng.standard_normal((n, n))
    b = rng.standard_normal((n, n))
    o = np.empty((n, n))
    case(f"matmul {n}^3 f64", OpKind.MatMul, (DType.F64,) * 3, [a, b], (n, n),
         P.Matmul((), (), n, n, n), lambda: np.matmul(a, b, out=o), 2.0 * n ** 3,
         "GFLOP/s")

    shape = tuple(int(s) for s in args.shape.split(","))
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.standard_normal(shape).astype(np.float32)
    z = np.empty(shape, np.float32)
    r = np.empty(shape[:-1], np.float32)
    r0 = np.empty(shape[1:], np.float32)
    nbytes = x.nbytes
    F = DType.F32
    case(f"add {list(shape)} f32", OpKind.AddElementwise, (F, F, F), [x, y], shape,
         P.NO_PARAMS, lambda: np.add(x, y, out=z), 3 * nbytes, "GB/s")
    case(f"exp {list(shape)} f32", OpKind.ExpElementwise, (F, F), [x], shape,
         P.NO_PARAMS, lambda: np.exp(x, out=z), 2 * nbytes, "GB/s")
    case(f"sum(-1) {list(shape)} f32", OpKind.SumReduce, (F, F), [x], shape[:-1],
         P.Reduce(dims=(len(shape) - 1,)), lambda: np.sum(x, axis=-1, out=r), nbytes, "GB/s")
    case(f"max(-1) {list(shape)} f32", OpKind.MaxReduce, (F, F), [x], shape[:-1],
         P.Reduce(dims=(len(shape) - 1,)), lambda: np.max(x, axis=-1, out=r), nbytes, "GB/s")
    case(f"sum(0) {list(shape)} f32", OpKind.SumReduce, (F, F), [x], shape[1:],
         P.Reduce(dims=(0,)), lambda: np.sum(x, axis=0, out=r0), nbytes, "GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
