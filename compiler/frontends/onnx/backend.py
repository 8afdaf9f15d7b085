"""An ``onnx.backend.base.Backend`` for fuelc, and the ONNX node-test runner.

``FuelcBackend.prepare(model)`` imports the model (``import_model``) and
returns a ``FuelcRep`` whose ``run(inputs)`` evaluates it on the numpy
reference interpreter (``mode="interpret"``, the default) or on a module
compiled for this CPU (``mode="compile"``). ONNX booleans are u8 (0/1) in a
fuelc graph; the rep converts bool inputs to u8 and u8 outputs that the
model declares BOOL back to bool, so results compare with the ONNX reference.

The official node tests (``onnx.backend.test.case.node.collect_testcases``,
the cases the onnx package's own ``BackendTest`` runner is generated from)
are run by ``run_case``: each one passes, is refused at import
(``OnnxImportError``, an expected failure with its reason) or fails (wrong
numbers, or any other exception). ``python -m compiler.frontends.onnx.backend
--report [PATH]`` runs them all and writes the table (``docs/onnx-node-tests.md``).
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import re
import sys
import time
from typing import Optional, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from . import OnnxImportError, import_model

__all__ = ["FuelcBackend", "FuelcRep", "CaseResult", "node_cases", "run_case", "main"]


class FuelcRep(BackendRep):
    """A prepared model: ``run(inputs)`` takes the graph inputs in order (a
    list) or by name (a dict) and returns the outputs in the model's order."""

    def __init__(self, model: onnx.ModelProto, mode: str = "interpret", bind=None):
        if mode not in ("interpret", "compile"):
            raise ValueError(f"FuelcRep: mode must be 'interpret' or 'compile', got {mode!r}")
        if bind:
            model = bind_inputs(model, bind)
        self.graph = import_model(model)
        inits = {i.name for i in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.output_names = [o.name for o in model.graph.output]
        self._bool_out = {o.name for o in model.graph.output
                          if o.type.tensor_type.elem_type == onnx.TensorProto.BOOL}
        from ._types import NARROW
        self._narrow_in = {i.name: i.type.tensor_type.elem_type for i in model.graph.input
                           if i.type.tensor_type.elem_type in NARROW}
        self._narrow_out = {o.name: o.type.tensor_type.elem_type for o in model.graph.output
                            if o.type.tensor_type.elem_type in NARROW}
        self.mode = mode
        self._module = None
        if mode == "compile":
            from ... import compile as fuelc_compile
            self._module = fuelc_compile(self.graph)

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
            if len(inputs) != len(self.input_names):
                raise ValueError(f"the model takes {len(self.input_names)} input(s) "
                                 f"{self.input_names}, got {len(inputs)}")
            feeds = dict(zip(self.input_names, inputs))
        feeds = {k: np.asarray(v).astype(np.uint8) if np.asarray(v).dtype == np.bool_
                 else np.asarray(v) for k, v in feeds.items()}
        from ._types import to_carrier  # narrow types cross as their carrier (docs/onnx.md)
        feeds.update({k: to_carrier(feeds[k], et) for k, et in self._narrow_in.items()
                      if k in feeds})
        if self._module is None:
            from ... import interpret
            got = interpret(self.graph, feeds)
        else:
            got = self._module(**feeds)
            if not isinstance(got, dict):
                got = {self.output_names[0]: got}
        from ._types import from_carrier
        return tuple(np.asarray(got[n]).astype(np.bool_) if n in self._bool_out
                     else from_carrier(got[n], self._narrow_out[n]) if n in self._narrow_out
                     else np.asarray(got[n]) for n in self.output_names)


class FuelcBackend(Backend):
    """fuelc as an ONNX backend (CPU only)."""

    @classmethod
    def prepare(cls, model, device: str = "CPU", mode: str = "interpret", bind=None,
                **kwargs):
        """``bind={input name: array}`` makes those graph inputs initializers
        (for inputs fuelc needs at import: axes, pads, shapes, ...)."""
        if not cls.supports_device(device):
            raise ValueError(f"fuelc's ONNX backend runs on CPU, not {device!r}")
        super().prepare(model, device, **kwargs)  # runs onnx.checker
        return FuelcRep(model, mode, bind)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().startswith("CPU")


def _graph_inputs_feeding(graph, names: set) -> set:
    """``names`` and every value they are computed from (a refusal may name an
    intermediate, such as the trip count an expanded Range computes from its
    bounds: the scalar graph inputs behind it are bound, never a data tensor)."""
    producer = {o: n for n in graph.node for o in n.output}
    out, todo = set(), list(names)
    while todo:
        v = todo.pop()
        if v in out:
            continue
        out.add(v)
        if v in producer:
            todo.extend(i for i in producer[v].input if i)
    return out


def bind_inputs(model: onnx.ModelProto, values) -> onnx.ModelProto:
    """A copy of ``model`` whose inputs named in ``values`` are initializers
    holding those values."""
    from onnx import numpy_helper
    unknown = set(values) - {i.name for i in model.graph.input}
    if unknown:
        raise ValueError(f"bind names {sorted(unknown)}, which are not inputs of the model")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [i for i in m.graph.input if i.name not in values]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    m.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), k)
                               for k, v in values.items())
    return m


# ---------------------------------------------------------------------------
# the node tests
# ---------------------------------------------------------------------------
@dataclasses.dataclass
class CaseResult:
    name: str
    op: str
    status: str  # "passed", "refused" (OnnxImportError at import) or "failed"
    reason: str = ""


_cases = None


def node_cases():
    """The official ONNX node test cases (name -> TestCase), collected once."""
    global _cases
    if _cases is None:
        import warnings
        from onnx.backend.test.case import node
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            _cases = {c.name: c for c in node.collect_testcases(None)}
    return _cases


def case_op(case) -> str:
    """The op a node test is about: its node's op type (for a test whose model
    has several nodes, e.g. a function's expansion, the op of the test's
    one-node twin)."""
    ops = [n.op_type for n in case.model.graph.node]
    if len(ops) == 1:
        return ops[0]
    base = re.sub(r"_expanded.*$", "", case.name)
    twin = node_cases().get(base)
    if twin is not None and len(twin.model.graph.node) == 1:
        return twin.model.graph.node[0].op_type
    return ops[0] if ops else "?"


def _compare(got, want, rtol, atol) -> Optional[str]:
    want = np.asarray(want)
    if got.shape != want.shape:
        return f"shape {list(got.shape)} != expected {list(want.shape)}"
    if want.dtype == object or want.dtype.kind in "SU":
        return "string tensors are not supported"
    try:
        if str(want.dtype) == "bfloat16":  # ONNX's own runner: "Two bfloat16 ULPs"
            rtol = max(rtol, 2 ** -6)     # (onnx.backend.test.runner.assert_similar_outputs)
        if want.dtype.kind in "fc" or str(want.dtype) in ("bfloat16",) or \
                want.dtype.name.startswith("float"):
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(got, want)
    except AssertionError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return " ".join(lines[:4])[:300]
    return None


def _ifft_f64(inputs):
    """test_dft_inverse*'s result from the float64 FFT: x [1, n, m, 2] (real,
    imag), inverse DFT over axis 1."""
    x = np.asarray(inputs[0], np.float64)
    y = np.fft.ifft(x[..., 0] + 1j * x[..., 1], axis=1)
    return [np.stack((y.real, y.imag), axis=-1)]


#: Tests whose expected outputs carry the generator's own rounding, which
#: fuelc does not reproduce and ONNX's runner declares no tolerance for. When
#: the comparison with the expected outputs fails, such a test is reported
#: *refused* with this reason, and only if its result matches ``exact`` (the
#: float64 recomputation, where one is given) at the case's tolerances; a
#: mismatch there is a failure.
EXPECTED_ROUNDING = {
    "test_dft_inverse": (
        "expected outputs are numpy's float32 (complex64) pocketfft result, 1.9e-07 where the "
        "exact value is 0 (above the case's atol 1e-07); fuelc's DFT computes in f64 and "
        "matches np.fft.ifft in complex128 at the case's tolerances", _ifft_f64),
    "test_dft_inverse_opset19": (
        "expected outputs are numpy's float32 (complex64) pocketfft result, 1.9e-07 where the "
        "exact value is 0 (above the case's atol 1e-07); fuelc's DFT computes in f64 and "
        "matches np.fft.ifft in complex128 at the case's tolerances", _ifft_f64),
    "test_attention_4d_causal_fp16_expanded": (
        "the expanded graph's Softmax on f16 rounds each step to f16 in the reference (x - max, "
        "exp, the sum, the division); fuelc fuses it into SoftmaxLastDim, computed in f32 and "
        "rounded once (the correctly rounded softmax in all 192 elements): 1 f16 ulp apart in "
        "14 softmax elements, 2 ulp in 2 of 192 outputs after the second MatMul", None),
}


def run_case(case, mode: str = "interpret") -> CaseResult:
    """Run one node test: import, run every data set, compare with its
    expected outputs at the case's tolerances."""
    op = case_op(case)
    note = ""
    for inputs, outputs in case.data_sets:
        inputs, outputs = _arrays(inputs), _arrays(outputs)
        names = [i.name for i in case.model.graph.input
                 if i.name not in {x.name for x in case.model.graph.initializer}]
        try:
            rep = FuelcBackend.prepare(case.model, mode=mode)
        except OnnxImportError as e:
            # inputs fuelc must know at import (axes, pads, shapes, ...): bind
            # the test's integer inputs, and any input the refusal names (Range's
            # float bounds, OneHot's float depth), as initializers, as a static
            # compiler must
            named = set(re.findall(r"input '([^']+)' is computed at run time", _short(e)))
            for group in re.findall(r"input\(s\) \[([^\]]*)\] are computed at run time",
                                    _short(e)):
                named.update(re.findall(r"'([^']+)'", group))
            feeding = _graph_inputs_feeding(case.model.graph, named)
            ints = {n: v for n, v in zip(names, inputs) if v.dtype.kind in "iu" or n in named
                    or (n in feeding and v.size == 1)}
            if not ints or "computed at run time" not in _short(e):
                return CaseResult(case.name, op, "refused", _short(e))
            try:
                rep = FuelcBackend.prepare(case.model, mode=mode, bind=ints)
            except OnnxImportError as e2:
                return CaseResult(case.name, op, "refused", _short(e2))
            except Exception as e2:
                return CaseResult(case.name, op, "failed", f"{type(e2).__name__}: {_short(e2)}")
            inputs = [v for n, v in zip(names, inputs) if n not in ints]
            note = f" (inputs {sorted(ints)} bound at import)"
        except Exception as e:  # an importer or builder bug, or a compile failure
            return CaseResult(case.name, op, "failed", f"{type(e).__name__}: {_short(e)}")
        try:
            with np.errstate(all="ignore"):
                got = rep.run(list(inputs))
        except Exception as e:
            return CaseResult(case.name, op, "failed", f"run: {type(e).__name__}: {_short(e)}")
        for name, g, w in zip(rep.output_names, got, outputs):
            bad = _compare(g, w, case.rtol, case.atol)
            if bad is not None and case.name in EXPECTED_ROUNDING:
                why, exact = EXPECTED_ROUNDING[case.name]
                worse = exact and _compare(g, exact(inputs)[rep.output_names.index(name)]
                                           .astype(w.dtype), case.rtol, case.atol)
                if not worse:
                    return CaseResult(case.name, op, "refused",
                                      f"not comparable: {why} (output {name!r}: {bad})")
                bad = f"{bad}; against the float64 recomputation: {worse}"
            if bad is not None:
                return CaseResult(case.name, op, "failed", f"output {name!r}: {bad}{note}")
    return CaseResult(case.name, op, "passed", note.strip())


def _arrays(values) -> list:
    """Test data as arrays (sequences and optionals, which fuelc has no
    type for, become object arrays)."""
    from onnx import numpy_helper
    out = []
    for v in values:
        if isinstance(v, onnx.TensorProto):
            out.append(numpy_helper.to_array(v))
        elif isinstance(v, (np.ndarray, np.generic, int, float, bool)):
            out.append(np.asarray(v))
        else:
            box = np.empty((), dtype=object)
            box[()] = v
            out.append(box)
    return out


def _short(e) -> str:
    """An error's message on one line: for an import error, its issues."""
    issues = getattr(e, "issues", None)
    if issues:
        return "; ".join(sorted({i.what for i in issues}))[:300]
    return " ".join(str(e).split())[:300]


def run_all(names: Optional[Sequence[str]] = None, mode: str = "interpret") -> list[CaseResult]:
    cases = node_cases()
    out = []
    for name in names or sorted(cases):
        out.append(run_case(cases[name], mode))
    return out


def report(results: list[CaseResult], interpreted: Optional[list[CaseResult]] = None) -> str:
    """The markdown report; ``interpreted`` (the same cases on the reference
    interpreter, when ``results`` are compiled runs) adds its figures beside."""
    n = collections.Counter(r.status for r in results)
    by_op = collections.defaultdict(list)
    for r in results:
        by_op[r.op].append(r)
    beside = {r.name: r.status for r in interpreted or ()}
    how = (["imported with `import_model` and compiled for this CPU through `FuelcBackend` (the",
            "reference interpreter's result beside), compared with the case's expected outputs at"]
           if interpreted is not None else
           ["imported with `import_model` and run on the numpy reference interpreter through",
            "`FuelcBackend`, compared with the case's expected outputs at"])
    lines = [
        "# ONNX node tests",
        "",
        f"Generated by `python -m compiler.frontends.onnx.backend --report"
        f"{' --compile' if interpreted is not None else ''}`: every official",
        "ONNX node test case (`onnx.backend.test.case.node.collect_testcases`, onnx "
        f"{onnx.__version__})",
        *how,
        "its own rtol/atol (bfloat16 outputs at rtol >= 2**-6, as ONNX's own runner compares",
        "them). *refused* means the import raised `OnnxImportError` naming what fuelc",
        "does not support (an expected failure, reason below), or, for the few tests in",
        "`backend.EXPECTED_ROUNDING`, that the expected outputs carry the generator's own",
        "rounding (\"not comparable\", reason below); *failed* means a wrong result",
        "or any other error.",
        "",
        f"**{len(results)} tests: {n['passed']} passed, {n['failed']} failed, "
        f"{n['refused']} refused.**",
    ]
    if interpreted is not None:
        m = collections.Counter(beside.values())
        lines += ["", f"Interpreted: {m['passed']} passed, {m['failed']} failed, "
                      f"{m['refused']} refused."]
    extra = " interpreted passed |" if interpreted is not None else ""
    lines += ["", "| op | tests | passed | failed | refused |" + extra,
              "|---|---:|---:|---:|---:|" + ("---:|" if extra else "")]
    for op in sorted(by_op):
        c = collections.Counter(r.status for r in by_op[op])
        more = f" {sum(beside.get(r.name) == 'passed' for r in by_op[op])} |" if extra else ""
        lines.append(f"| {op} | {len(by_op[op])} | {c['passed']} | {c['failed']} | "
                     f"{c['refused']} |{more}")
    for status, title in (("failed", "Failures"), ("refused", "Refused")):
        rows = [r for r in results if r.status == status]
        if not rows:
            continue
        lines += ["", f"## {title}", ""]
        for op in sorted({r.op for r in rows}):
            lines.append(f"### {op}")
            lines.append("")
            for r in sorted((r for r in rows if r.op == op), key=lambda r: r.name):
                reason = r.reason.replace("|", "\\|").replace("\n", " ")
                if r.name in beside and beside[r.name] != r.status:
                    reason += f" (interpreted: {beside[r.name]})"
                lines.append(f"- `{r.name}`: {reason}")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compiler.frontends.onnx.backend",
                                 description="Run the ONNX node tests against fuelc.")
    ap.add_argument("--report", nargs="?", const="docs/onnx-node-tests.md", metavar="PATH",
                    help="write the markdown report (default docs/onnx-node-tests.md)")
    ap.add_argument("-k", metavar="SUBSTRING", action="append",
                    help="only tests whose name contains it (repeat: any of them)")
    ap.add_argument("--compile", action="store_true",
                    help="compile for this CPU instead of interpreting (with --report, the "
                         "interpreter's results are reported beside)")
    args = ap.parse_args(argv)
    names = [n for n in sorted(node_cases()) if not args.k or any(k in n for k in args.k)]
    t0 = time.perf_counter()
    results = run_all(names, "compile" if args.compile else "interpret")
    n = collections.Counter(r.status for r in results)
    for r in results:
        if r.status == "failed":
            print(f"FAILED {r.name}: {r.reason}")
    print(f"{len(results)} node tests in {time.perf_counter() - t0:.0f}s: {n['passed']} passed, "
          f"{n['failed']} failed, {n['refused']} refused")
    if args.report:
        interpreted = run_all(names, "interpret") if args.compile else None
        with open(args.report, "w") as f:
            f.write(report(results, interpreted))
        print(f"wrote {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
