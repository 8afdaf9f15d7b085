"""``compiler.mlir`` imports a dialect's bindings on first use, and builds
linalg's named ops without the ``dialects.linalg`` package (whose import
builds the opdsl named ops from YAML): the ops must print exactly as the
package's builders make them, or kernel texts (the cache keys) would change."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import compiler.mlir as mlir
from compiler.mlir import arith, func, ir, tensor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _build(linalg, make):
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.create()
        f32 = ir.F32Type.get()
        t = lambda *shape, elt=f32: ir.RankedTensorType.get(list(shape), elt)  # noqa: E731
        with ir.InsertionPoint(module.body):
            @func.FuncOp.from_py_func(t(2, 3, 4, 4), t(5, 3, 2, 2), t(4, 6), t(6, 4))
            def f(x, w, a, b):
                return make(linalg, t, x, w, a, b)
        return str(module)


CASES = {
    "fill": lambda L, t, x, w, a, b: L.fill(arith.ConstantOp(ir.F32Type.get(), 1.5).result,
                                            outs=[tensor.empty([4, 6], ir.F32Type.get())]),
    "copy": lambda L, t, x, w, a, b: L.copy(a, outs=[tensor.empty([4, 6], ir.F32Type.get())]),
    "matmul": lambda L, t, x, w, a, b: L.matmul(a, b, outs=[tensor.empty([4, 4], ir.F32Type.get())]),
    "batch_matmul": lambda L, t, x, w, a, b: L.batch_matmul(
        tensor.empty([2, 4, 6], ir.F32Type.get()), tensor.empty([2, 6, 4], ir.F32Type.get()),
        outs=[tensor.empty([2, 4, 4], ir.F32Type.get())]),
    "conv": lambda L, t, x, w, a, b: L.conv_2d_nchw_fchw(
        x, w, outs=[tensor.empty([2, 5, 3, 2], ir.F32Type.get())], strides=[1, 2],
        dilations=[1, 1]),
    "conv_dilated": lambda L, t, x, w, a, b: L.conv_2d_nchw_fchw(
        x, w, outs=[tensor.empty([2, 5, 1, 1], ir.F32Type.get())], strides=[2, 2],
        dilations=[2, 2]),
    "transpose": lambda L, t, x, w, a, b: L.transpose(
        a, outs=[tensor.empty([6, 4], ir.F32Type.get())], permutation=[1, 0]).result,
    "broadcast": lambda L, t, x, w, a, b: L.broadcast(
        a, outs=[tensor.empty([3, 4, 6], ir.F32Type.get())], dimensions=[0]).result,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_named_ops_print_as_the_packages_builders_make_them(name):
    package = pytest.importorskip(f"{mlir._root.__name__}.dialects.linalg")
    ours = _build(mlir.linalg, CASES[name])
    assert ours == _build(package, CASES[name])
    assert "linalg." in ours


def test_other_linalg_names_come_from_the_package():
    package = pytest.importorskip(f"{mlir._root.__name__}.dialects.linalg")
    assert mlir.linalg.elementwise is package.elementwise
    with pytest.raises(AttributeError):
        mlir.linalg.no_such_op  # noqa: B018
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        mlir.nope  # noqa: B018


def test_a_compile_imports_neither_the_linalg_nor_the_llvm_package_nor_unused_dialects(tmp_path):
    """A fresh process compiling (and running) a small graph. Its elementwise
    chain fuses into a ``fuel.runtime_fused`` op ending in ``gpu.yield``,
    which the passes read: the gpu package stays out all the same. Its direct
    convolution's rewrites move ``#llvm.loop_annotation`` attributes and walk
    ``affine.apply`` ops, and its transform scripts run through the native
    interpreter: no llvm, affine or transform package either
    (``compiler.mlir.GENERIC_DIALECTS``)."""
    code = textwrap.dedent("""
        import sys, numpy as np
        from compiler.graph import Graph
        from compiler.registry.builders import conv2d
        from compiler import compile
        g = Graph()
        x = g.input("x", (4, 8), "f32")
        g.output((x @ g.constant(np.ones((8, 3), np.float32))) + 1.0, "y")
        g.output((x.exp() * 2.0).tanh(), "z")
        c = g.input("c", (1, 6, 10, 12), "f32")
        g.output(conv2d(c, g.constant(np.ones((11, 6, 3, 3), np.float32)), padding=(1, 1)), "v")
        m = compile(g, jobs=1)
        assert "gpu.yield" in m.ir["optimized"], m.ir["optimized"]
        assert "Conv2D[f32,f32,f32] (mlir-cpu-fused)" in m.kernel_summary(), m.kernel_summary()
        out = m(x=np.ones((4, 8), np.float32), c=np.ones((1, 6, 10, 12), np.float32))
        assert (out["y"] == 9).all(), out
        assert np.allclose(out["z"], np.tanh(2 * np.e), rtol=1e-6), out
        assert out["v"][0, :, 1:-1, 1:-1].min() == 54 and out["v"].min() == 24, out["v"]
        print(sorted(k.rsplit(".", 1)[1] for k in sys.modules
                     if k.startswith(("torch_mlir.dialects.", "mlir.dialects."))
                     and k.count(".") == 2 and not k.rsplit(".", 1)[1].startswith("_")))
    """)
    env = dict(os.environ, PYTHONPATH=ROOT, FUELC_CACHE_DIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr
    loaded = eval(res.stdout.strip().splitlines()[-1])
    # llvm: translation goes through the native module (mlir.translate_module_to_llvmir)
    # irdl: the fuel dialect loads through the native module (mlir.load_irdl_dialects)
    for package in ("linalg", "gpu", "llvm", "affine", "transform", "irdl"):
        assert package not in loaded, loaded
    assert "func" in loaded, loaded


def test_gpu_ops_get_their_classes_once_the_gpu_package_is_imported():
    """Before ``compiler.mlir.gpu`` a gpu op is a generic ``OpView``; the
    package, once imported, gives it its class."""
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    with ctx, ir.Location.unknown():
        m = ir.Module.parse('func.func @f(%a: f32) {\n'
                            '  "test.region"() ({ gpu.yield %a : f32 }) : () -> ()\n'
                            '  return\n}')
        region_op = m.body.operations[0].regions[0].blocks[0].operations[0]
        assert region_op.operation.name == "test.region"
        yield_op = lambda: region_op.operation.regions[0].blocks[0].operations[0]  # noqa: E731
        assert yield_op().operation.name == "gpu.yield"
        if f"{mlir._root.__name__}.dialects.gpu" not in sys.modules:  # not yet in this process
            assert type(yield_op()) is ir.OpView
        yield_class = mlir.gpu.YieldOp
        assert type(yield_op()) is yield_class


def test_a_worker_imports_no_bindings_module_in_its_tasks(tmp_path):
    """A compile worker imports what its tasks need before its first task
    (``jobs._preload``, while the calling process runs the passes): a task
    (``jobs.emit_object``) then imports no module of the bindings. In
    particular lowering reads the owners of parsed linalg ops, which made
    the bindings import the ``dialects.linalg`` package (0.07 s) at a worker's
    first kernel; and the builtin and tensor dialects' modules."""
    import pickle
    from compiler.targets import parse_target
    text = textwrap.dedent("""
        func.func @kernel(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>) -> tensor<4x3xf32>
            attributes {llvm.emit_c_interface} {
          %z = arith.constant 0.0 : f32
          %e = tensor.empty() : tensor<4x3xf32>
          %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x3xf32>) -> tensor<4x3xf32>
          %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x3xf32>)
                             outs(%f : tensor<4x3xf32>) -> tensor<4x3xf32>
          return %m : tensor<4x3xf32>
        }""")
    target = parse_target("cpu")
    task = pickle.dumps((text, target, target.codegen.choose_strategy(text, ["kernel"], target)))
    code = textwrap.dedent(f"""
        import pickle, sys
        from compiler.codegen import jobs
        task = pickle.loads({task!r})
        jobs._preload()
        before = set(sys.modules)
        assert jobs.emit_object(*task)[:4] == b"\\x7fELF"
        print(sorted(m for m in set(sys.modules) - before if m.startswith(("torch_mlir", "mlir"))))
    """)
    env = dict(os.environ, PYTHONPATH=ROOT, FUELC_CACHE_DIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]", res.stdout


def test_passes_and_plan_import_no_llvmlite_binding(tmp_path):
    """What comes before a compile's first kernel task (the target check,
    emit, the passes, the plan: ``compile(warm=False)``) imports no
    ``llvmlite.binding`` (some 25 ms of the serial front,
    docs/compile-at-scale.md): the host's features come from llvmlite's
    library (``cpu_features._host``) and the loader imports llvmlite on first
    use. Calling the module compiles and loads through it. The optimized IR,
    printed after the codegen, is the module as the passes left it."""
    code = textwrap.dedent("""
        import sys, numpy as np
        from compiler import Graph, compile
        from compiler.dialect.emit import graph_to_module
        from compiler.passes import run_pipeline
        g = Graph()
        x = g.input("x", (4, 8), "f32")
        g.output((x @ g.constant(np.ones((8, 3), np.float32))).tanh() + 1.0, "y")
        m = compile(g, "cpu", warm=False)
        assert "llvmlite.binding" not in sys.modules, "imported before the kernels"
        from compiler.codegen.family import runnable_here
        assert runnable_here(m.target)
        assert "llvmlite.binding" not in sys.modules, "imported by the target check"
        emitted = graph_to_module(g)
        run_pipeline(emitted.module, options={"target": "cpu", "constants": emitted.constants})
        assert m.ir["optimized"] == str(emitted.module) == compile(g).ir["optimized"]
        assert list(m.ir) == ["fuel", "optimized"], list(m.ir)
        out = m(x=np.ones((4, 8), np.float32))
        assert np.allclose(out, np.tanh(8.0) + 1.0), out
        print("llvmlite.binding" in sys.modules)
    """)
    env = dict(os.environ, PYTHONPATH=ROOT, FUELC_CACHE_DIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "True", res.stdout


def test_dialects_named_at_a_modules_top_are_imported_at_their_first_use(tmp_path):
    """``from compiler.mlir import vector`` imports vector's bindings when one
    of its names is first read (the lowering modules name the dialects they
    build at their top; those a compile's first kernel does not use stay out
    of its serial front), and gives the bindings' own classes. linalg is
    imported at once: the bindings must find fuelc's module before they meet
    a linalg attribute, or they import the ``dialects.linalg`` package."""
    code = textwrap.dedent("""
        import sys
        from compiler.mlir import _root, ir, linalg, vector
        from compiler.codegen.lowering import core  # noqa: F401 - names both at its top
        pkg = _root.__name__ + ".dialects."
        print(pkg + "vector" in sys.modules, pkg + "_vector_ops_gen" in sys.modules)
        with ir.Context():
            ir.Attribute.parse("#linalg.iterator_type<parallel>")
        read = vector.TransferReadOp
        print(read is sys.modules[pkg + "vector"].TransferReadOp, pkg + "linalg" in sys.modules)
    """)
    env = dict(os.environ, PYTHONPATH=ROOT, FUELC_CACHE_DIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "False", "True", "False"], res.stdout


def test_dialects_whose_ops_are_read_as_typed_views_are_imported_at_once(tmp_path):
    """gpu (and every dialect but vector, scf and memref) is imported by
    ``from compiler.mlir import gpu`` itself: the cuda pipeline reads a
    ``gpu.launch_func``'s grid sizes as a typed view, which a dialect not yet
    imported gives as a generic OpView without them."""
    code = textwrap.dedent("""
        import sys
        from compiler.mlir import _root, ir, gpu
        print(_root.__name__ + ".dialects.gpu" in sys.modules, type(gpu).__name__)
        with ir.Context() as ctx:
            m = ir.Module.parse('gpu.module @k { gpu.func @f() kernel { gpu.return } }')
            print(type(m.body.operations[0]).__name__)
    """)
    env = dict(os.environ, PYTHONPATH=ROOT, FUELC_CACHE_DIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "module", "GPUModuleOp"], res.stdout
