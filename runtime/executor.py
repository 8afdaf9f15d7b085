"""The executor: runs a planned graph on the binding table.

A ``Plan`` is named inputs, named outputs, constants and an ordered list of
steps over string value ids:

* ``KernelStep``     a binding-table kernel: key, dtypes (inputs then
  outputs; a multi-output step has ONE bundled output and lists only its
  primary dtype, Option C), backend, OpParams, input ids, output ids with
  their ``ValueSpec``s. A multi-output step's slot ``i`` is value ``outputs[i]``,
  a zero-copy view into the bundle.
* ``ViewStep``       a Layout transform (transpose, permute, broadcast_as,
  narrow, unsqueeze, squeeze, flip) sharing the input's storage.
* ``ReshapeStep``    zero-copy when the input is contiguous with offset 0,
  else materialized.
* ``ContiguizeStep`` materialize row-major with offset 0.
* ``ConstStep``      bind ``plan.constants[name]``.

``Plan.to_dict()`` is JSON-able (constants stay numpy arrays in
``plan.constants``); ``Plan.from_dict(d, constants)`` rebuilds it.

``Executor(plan, table=None)`` validates the plan and resolves every kernel
step with ``lookup_with_caps`` at construction, raising ``PlanError`` or
``NoBackendForOp`` (naming the step) before anything runs. ``run(**inputs)``
checks the inputs, contiguizes kernel inputs (``needs_contiguize``; not for a
``KernelCaps.view_input`` kernel, which reads any view), checks index operands
(``runtime.indexing``: IndexOutOfRangeError before the kernel runs), pre-allocates the
outputs, runs the steps and returns ``{name: np.ndarray}`` (copies).

Arrays cross ``run`` in ``DType.numpy``: a bf16 input must be an
``ml_dtypes.bfloat16`` array and bf16 outputs are returned as one (likewise
the ml_dtypes fp8/fp6/fp4 types). Raw ``uint16`` for a bf16 input is refused
with a PlanError, as JAX and ONNX Runtime refuse it: wrap bit patterns with
``bits.view(ml_dtypes.bfloat16)`` (zero-copy). Inside, storages and
``plan.constants`` hold the bit patterns (``DType.storage_numpy``).
"""
from __future__ import annotations

import dataclasses
import math
import sys
import threading
from typing import Mapping, Sequence, Union

import numpy as np

from .binding import BindingEntry, KernelBindingTable, global_table
from .dtype import DType, from_storage, to_storage
from .errors import FuelError, KernelError, LayoutError, OpParamsError, PlanError, UnknownDTypeError
from .indexing import INDEX_OPERANDS, check_indices
from .keys import BackendId, BindingKey
from .layout import Layout
from .opkind import OpKind
from .params import MatmulM, NonZeroIndices, OpParams, check_params_for
from .storage import Storage

PLAN_VERSION = 1
#: How many times an executor builds its direct path again for a thread count
#: other than the one of its last build (``Executor._rebuild_direct``).
DIRECT_REBUILDS = 8
VIEW_OPS = ("transpose", "permute", "broadcast_as", "narrow", "unsqueeze", "squeeze", "flip")


@dataclasses.dataclass(frozen=True)
class ValueSpec:
    """Static type of a value: shape and dtype."""

    shape: tuple[int, ...]
    dtype: DType

    def __post_init__(self):
        try:
            object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        except (TypeError, ValueError):
            raise PlanError(f"ValueSpec shape must be a sequence of ints, got {self.shape!r}") from None
        if any(d < 0 for d in self.shape):
            raise PlanError(f"ValueSpec shape must be non-negative, got {self.shape}")
        object.__setattr__(self, "dtype", DType.parse(self.dtype))

    def to_dict(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype.value}

    @classmethod
    def from_dict(cls, d) -> "ValueSpec":
        if not isinstance(d, dict) or set(d) != {"shape", "dtype"}:
            raise PlanError(f"malformed ValueSpec {d!r}; expected {{'shape', 'dtype'}}")
        return cls(tuple(d["shape"]), d["dtype"])

    def __str__(self) -> str:
        return f"{self.dtype.value}[{','.join(map(str, self.shape))}]"


@dataclasses.dataclass(frozen=True)
class KernelStep:
    key: BindingKey
    dtypes: tuple[DType, ...]
    backend: BackendId
    params: OpParams
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    output_specs: tuple[ValueSpec, ...]
    name: str = ""

    def __post_init__(self):
        object.__setattr__(self, "key", BindingKey.of(self.key))
        object.__setattr__(self, "dtypes", tuple(DType.parse(d) for d in self.dtypes))
        object.__setattr__(self, "backend", BackendId.parse(self.backend))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "output_specs", tuple(self.output_specs))
        if not isinstance(self.params, OpParams):
            raise PlanError(f"kernel step {self.name or self.key}: params must be an OpParams, got {self.params!r}")
        if len(self.outputs) != len(self.output_specs) or not self.outputs:
            raise PlanError(f"kernel step {self.name or self.key}: needs one ValueSpec per output "
                            f"(got {len(self.outputs)} outputs, {len(self.output_specs)} specs)")

    @property
    def is_bundle(self) -> bool:
        return len(self.outputs) > 1

    def to_dict(self) -> dict:
        return {"kind": "kernel", "name": self.name, "key": self.key.to_json(),
                "dtypes": [d.value for d in self.dtypes], "backend": self.backend.value,
                "params": self.params.to_dict(), "inputs": list(self.inputs),
                "outputs": [{"id": o, **s.to_dict()} for o, s in zip(self.outputs, self.output_specs)]}


@dataclasses.dataclass(frozen=True)
class ViewStep:
    op: str
    args: Mapping
    input: str
    output: str
    name: str = ""

    def __post_init__(self):
        if self.op not in VIEW_OPS:
            raise PlanError(f"view step {self.name or self.output}: unknown view op {self.op!r}; "
                            f"expected one of {', '.join(VIEW_OPS)}")
        object.__setattr__(self, "args", dict(self.args))

    def apply(self, layout: Layout) -> Layout:
        try:
            return getattr(layout, self.op)(**self.args)
        except TypeError as e:
            raise PlanError(f"view step {self.name or self.output}: bad arguments {self.args} for {self.op}: {e}") from None

    def to_dict(self) -> dict:
        args = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.args.items()}
        return {"kind": "view", "name": self.name, "op": self.op, "args": args,
                "input": self.input, "output": self.output}


@dataclasses.dataclass(frozen=True)
class ReshapeStep:
    input: str
    output: str
    shape: tuple[int, ...]
    name: str = ""

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    def to_dict(self) -> dict:
        return {"kind": "reshape", "name": self.name, "input": self.input, "output": self.output,
                "shape": list(self.shape)}


@dataclasses.dataclass(frozen=True)
class ContiguizeStep:
    input: str
    output: str
    name: str = ""

    def to_dict(self) -> dict:
        return {"kind": "contiguize", "name": self.name, "input": self.input, "output": self.output}


@dataclasses.dataclass(frozen=True)
class ConstStep:
    const: str
    output: str
    name: str = ""

    def to_dict(self) -> dict:
        return {"kind": "const", "name": self.name, "const": self.const, "output": self.output}


Step = Union[KernelStep, ViewStep, ReshapeStep, ContiguizeStep, ConstStep]


def _step_from_dict(d: dict) -> Step:
    if not isinstance(d, dict) or "kind" not in d:
        raise PlanError(f"malformed step {d!r}: needs a 'kind'")
    kind, name = d["kind"], d.get("name", "")
    try:
        if kind == "kernel":
            return KernelStep(BindingKey.from_json(d["key"]), tuple(d["dtypes"]), d["backend"],
                              OpParams.from_dict(d["params"]), tuple(d["inputs"]),
                              tuple(o["id"] for o in d["outputs"]),
                              tuple(ValueSpec(tuple(o["shape"]), o["dtype"]) for o in d["outputs"]), name)
        if kind == "view":
            args = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d["args"].items()}
            return ViewStep(d["op"], args, d["input"], d["output"], name)
        if kind == "reshape":
            return ReshapeStep(d["input"], d["output"], tuple(d["shape"]), name)
        if kind == "contiguize":
            return ContiguizeStep(d["input"], d["output"], name)
        if kind == "const":
            return ConstStep(d["const"], d["output"], name)
    except KeyError as e:
        raise PlanError(f"{kind} step {name!r}: missing field {e}") from None
    raise PlanError(f"unknown step kind {kind!r}; expected kernel, view, reshape, contiguize or const")


class Constants(dict):
    """``Plan.constants``: a dict that counts its changes in ``version``, so
    the direct path (``runtime.direct``) knows its constants are the ones it
    was built with by one comparison, not one identity check per constant
    on every call (52 of them on a batch-1 CNN: 1.3-3.5 us a call)."""

    __slots__ = ("version",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.version = 0

    def __setitem__(self, key, value):
        self.version += 1
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self.version += 1
        super().__delitem__(key)

    def __ior__(self, other):
        self.version += 1
        return super().__ior__(other)

    def update(self, *args, **kwargs):
        self.version += 1
        super().update(*args, **kwargs)

    def pop(self, *args):
        self.version += 1
        return super().pop(*args)

    def popitem(self):
        self.version += 1
        return super().popitem()

    def clear(self):
        self.version += 1
        super().clear()

    def setdefault(self, key, default=None):
        self.version += 1
        return super().setdefault(key, default)

    def __reduce__(self):
        return Constants, (dict(self),)


@dataclasses.dataclass
class Plan:
    """Named inputs (value id = name), named outputs (name -> value id),
    constants (name -> numpy array; ``const`` steps bind them; a plain dict
    is kept as a ``Constants`` copy of it) and steps."""

    inputs: dict[str, ValueSpec]
    outputs: dict[str, str]
    steps: list
    constants: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def __setattr__(self, name, value):
        if name == "constants" and type(value) is dict:
            value = Constants(value)
        super().__setattr__(name, value)

    def to_dict(self) -> dict:
        """JSON-able description; constants are listed by name/shape/dtype
        only (their arrays stay in ``self.constants``)."""
        consts = []
        for name, arr in self.constants.items():
            arr = np.asarray(arr)
            consts.append({"name": name, "shape": list(arr.shape), "numpy_dtype": arr.dtype.str})
        return {"version": PLAN_VERSION,
                "inputs": [{"name": n, **s.to_dict()} for n, s in self.inputs.items()],
                "outputs": [{"name": n, "value": v} for n, v in self.outputs.items()],
                "constants": consts,
                "steps": [s.to_dict() for s in self.steps]}

    @classmethod
    def from_dict(cls, d: dict, constants: Mapping[str, np.ndarray] | None = None) -> "Plan":
        """Inverse of ``to_dict``; ``constants`` supplies the arrays."""
        if not isinstance(d, dict) or d.get("version") != PLAN_VERSION:
            raise PlanError(f"unsupported plan: version {d.get('version') if isinstance(d, dict) else None!r}, "
                            f"this runtime reads version {PLAN_VERSION}")
        constants = dict(constants or {})
        for c in d.get("constants", []):
            if c["name"] not in constants:
                raise PlanError(f"plan constant {c['name']!r} ({c['numpy_dtype']}{c['shape']}) was not supplied; "
                                f"supplied: {sorted(constants)}")
        try:
            inputs = {i["name"]: ValueSpec(tuple(i["shape"]), i["dtype"]) for i in d["inputs"]}
            outputs = {o["name"]: o["value"] for o in d["outputs"]}
        except (KeyError, TypeError) as e:
            raise PlanError(f"malformed plan inputs/outputs: {e}") from None
        return cls(inputs, outputs, [_step_from_dict(s) for s in d["steps"]], constants)


def _storage_matches(storage: Storage, layout: Layout) -> bool:
    return storage.len_bytes == layout.numel * storage.dtype.itemsize


def needs_contiguize(storage: Storage, layout: Layout, strided_input: bool,
                     view_input: bool = False) -> bool:
    """Pass as-is iff offset 0, storage bytes == numel*itemsize,
    and (layout contiguous or the kernel is strided_input-capable). A
    view_input-capable kernel (``KernelCaps.view_input``) gets every view as
    it is: broadcast (stride 0), offset, negative strides."""
    if view_input:
        return False
    if layout.start_offset != 0 or not _storage_matches(storage, layout):
        return True
    return not (layout.is_contiguous() or strided_input)


class Executor:
    """Validates and resolves a Plan against a binding table, then runs it.

    ``direct=False``: every run takes the general path, never building the
    direct one (``runtime/direct.py``: its native copy rows are compiled by
    LLVM when it is built), for a plan run once, such as constant folding's
    (``compiler.plan.fold_constant_steps``); the results are the same."""

    def __init__(self, plan: Plan, table: KernelBindingTable | None = None, *,
                 direct: bool = True):
        self.plan = plan
        self.table = table if table is not None else global_table()
        self.specs: dict[str, ValueSpec] = {}
        self.entries: dict[int, BindingEntry] = {}
        #: A runner of the whole plan on a device (``runtime.cuda.resident``),
        #: set by the codegen of a device target; None: kernel by kernel.
        self.resident = None
        self._validate()
        self._prepare_run()
        if not direct:
            self._direct_state = "general"

    # -- construction-time checks -----------------------------------------------------------
    def _define(self, vid: str, spec: ValueSpec, where: str):
        if not isinstance(vid, str) or not vid:
            raise PlanError(f"{where}: value ids must be non-empty strings, got {vid!r}")
        if vid in self.specs:
            raise PlanError(f"{where}: value {vid!r} is defined twice")
        self.specs[vid] = spec

    def _use(self, vid: str, where: str) -> ValueSpec:
        if vid not in self.specs:
            raise PlanError(f"{where}: uses value {vid!r} before it is defined; defined so far: "
                            f"{sorted(self.specs)}")
        return self.specs[vid]

    def _validate(self):
        plan = self.plan
        for name, spec in plan.inputs.items():
            self._define(name, spec, f"plan input {name!r}")
        for i, step in enumerate(plan.steps):
            where = f"step {i} ({type(step).__name__}{' ' + repr(step.name) if step.name else ''})"
            if isinstance(step, KernelStep):
                self._validate_kernel(i, step, where)
            elif isinstance(step, ViewStep):
                src = self._use(step.input, where)
                try:
                    lay = step.apply(Layout.contiguous(src.shape))
                except LayoutError as e:
                    raise PlanError(f"{where}: {e}") from None
                self._define(step.output, ValueSpec(lay.shape, src.dtype), where)
            elif isinstance(step, ReshapeStep):
                src = self._use(step.input, where)
                if math.prod(src.shape) != math.prod(step.shape):
                    raise PlanError(f"{where}: cannot reshape {src} ({math.prod(src.shape)} elements) "
                                    f"to {list(step.shape)}")
                self._define(step.output, ValueSpec(step.shape, src.dtype), where)
            elif isinstance(step, ContiguizeStep):
                self._define(step.output, self._use(step.input, where), where)
            elif isinstance(step, ConstStep):
                if step.const not in plan.constants:
                    raise PlanError(f"{where}: constant {step.const!r} not in plan.constants "
                                    f"({sorted(plan.constants)})")
                arr = np.asarray(plan.constants[step.const])
                dt = DType.BF16 if arr.dtype == np.uint16 else DType.from_numpy(arr.dtype)
                self._define(step.output, ValueSpec(arr.shape, dt), where)
            else:
                raise PlanError(f"{where}: unknown step type {type(step).__name__}")
        for name, vid in plan.outputs.items():
            self._use(vid, f"plan output {name!r}")

    def _validate_kernel(self, i: int, step: KernelStep, where: str):
        in_specs = [self._use(v, where) for v in step.inputs]
        n_out_dtypes = 1 if step.is_bundle else len(step.outputs)
        actual = [s.dtype for s in in_specs] + [s.dtype for s in step.output_specs[:n_out_dtypes]]
        concat_short = (step.key == BindingKey.static(OpKind.Concat) and len(step.dtypes) == 2
                        and all(s.dtype == step.dtypes[0] for s in in_specs)
                        and step.output_specs[0].dtype == step.dtypes[1])
        if tuple(actual) != step.dtypes and not concat_short:
            raise PlanError(f"{where}: key dtypes [{', '.join(d.value for d in step.dtypes)}] do not match "
                            f"the operands [{', '.join(d.value for d in actual)}] (inputs "
                            f"{list(step.inputs)} then outputs)")
        try:
            check_params_for(step.key, step.params)
        except OpParamsError as e:
            raise PlanError(f"{where}: {e}") from None
        self.entries[i] = self.table.lookup_entry(step.key, step.dtypes, step.backend, context=where)
        for vid, spec in zip(step.outputs, step.output_specs):
            self._define(vid, spec, where)

    # -- running ------------------------------------------------------------------------------
    # Everything a step decides from the plan alone (output layouts and sizes,
    # which inputs come straight from an executor allocation, the bound
    # kernel) is decided once here; ``run`` only moves storages.
    def _prepare_run(self):
        plan = self.plan
        self._input_names = frozenset(plan.inputs)
        fresh: set[str] = set()  # values in a storage the executor allocated row-major, exact size
        runners = []
        for i, step in enumerate(plan.steps):
            if isinstance(step, KernelStep):
                runners.append(_KernelRunner(i, step, self.entries[i], fresh).run)
                if not step.is_bundle:
                    fresh.update(step.outputs)
            elif isinstance(step, ViewStep):
                runners.append(_ViewRunner(step).run)
            elif isinstance(step, ReshapeStep):
                runners.append(_ReshapeRunner(step).run)
            elif isinstance(step, ContiguizeStep):
                runners.append(_ContiguizeRunner(step).run)
                fresh.add(step.output)
            elif isinstance(step, ConstStep):
                runners.append(_ConstRunner(step, plan, self.specs[step.output].dtype).run)
        self._runners = tuple(runners)
        # the direct path (runtime.direct), built on the first run; used while
        # ``_runners`` are these (a caller may wrap them, e.g. to time steps)
        self._plain_runners = self._runners
        self._direct = None
        self._direct_state = "unbuilt"  # -> "built" | "general"
        self._direct_lock = threading.Lock()
        self._direct_rebuilds = 0       # for other thread counts (``_rebuild_direct``)
        # Outputs returned without a copy: storages this run allocated
        # (row-major, exact size; no input, constant or other output shares
        # them), each named once.
        named = list(plan.outputs.values())
        self._owned_outputs = frozenset(v for v in named if v in fresh and named.count(v) == 1)

    def _build_direct(self):
        """Build the direct path once (None: this plan always takes the
        general one)."""
        with self._direct_lock:
            if self._direct_state == "unbuilt":
                self._direct = self._new_direct()
                self._direct_state = "built" if self._direct is not None else "general"
            return self._direct

    def _new_direct(self):
        """A direct path for this plan at the thread count of now (None: it
        needs the general path)."""
        from .direct import DirectRun
        return DirectRun.build(self, [r.__self__ if hasattr(r, "__self__") else r
                                      for r in self._plain_runners])

    def _rebuild_direct(self, stale):
        """The direct path built again for the thread count of now, in place
        of ``stale`` (built for another count), at most ``DIRECT_REBUILDS``
        times per executor (then such calls take the general path, as a
        count that moves on every call would otherwise build on every
        call); None when it is not rebuilt. One direct path is kept at a
        time: its buffers are the plan's intermediates."""
        with self._direct_lock:
            if self._direct is not stale:   # another call rebuilt it meanwhile
                return self._direct
            if self._direct_rebuilds >= DIRECT_REBUILDS:
                return None
            self._direct_rebuilds += 1
            fresh = self._new_direct()
            if fresh is None:   # (a plan the direct path takes at one count, not at this one)
                return None
            self._direct = fresh
            return fresh

    @property
    def direct_path(self) -> bool:
        """Whether calls may take the direct path (``runtime.direct``); known
        after the first run."""
        return self._direct is not None

    def _bind_input(self, name: str, value) -> tuple[Storage, Layout]:
        spec = self.plan.inputs[name]
        arr = np.asarray(value)
        try:
            bits = to_storage(arr, spec.dtype, f"input {name!r}")
        except UnknownDTypeError as e:
            bits, hint = None, str(e).partition("; ")[2]
        if bits is None or tuple(arr.shape) != spec.shape:
            want = spec.dtype.numpy or spec.dtype.storage_numpy
            raise PlanError(f"input {name!r}: expected {spec} (numpy {want}), got numpy "
                            f"{arr.dtype}{list(arr.shape)}" + (f"; {hint}" if bits is None and hint else ""))
        return Storage.from_numpy(bits, dtype=spec.dtype)

    def kernel_summary(self) -> list[str]:
        """One ``OpKind[dtypes] (kernel_source)`` line per kernel step (the
        kernel the table bound for it)."""
        lines = []
        for i, s in enumerate(self.plan.steps):
            if isinstance(s, KernelStep):
                op = s.key.op.name if s.key.op is not None else f"fused#{s.key.fused}"
                lines.append(f"{op}[{','.join(d.value for d in s.dtypes)}] "
                             f"({self.entries[i].kernel_source})")
        return lines

    def run(self, **inputs) -> dict[str, np.ndarray]:
        """Run the plan. Raises PlanError on missing/extra/mistyped inputs
        and KernelError (naming the step) when a kernel fails."""
        return self.call(inputs)

    def call(self, inputs: dict) -> dict[str, np.ndarray]:
        """``run`` with the inputs in one dict, which is not modified (a
        module's call passes its keyword arguments on as they are)."""
        direct = self._direct
        if direct is not None and self._runners is self._plain_runners and self.resident is None:
            out = direct.run(inputs)    # (None for inputs it does not take, named or not)
            if out is not None:
                return out
            if not direct.probes_hold():    # the thread count moved since it was built
                direct = self._rebuild_direct(direct)
                out = direct.run(inputs) if direct is not None else None
                if out is not None:
                    return out
        plan = self.plan
        if inputs.keys() != self._input_names:
            missing = sorted(set(plan.inputs) - set(inputs))
            extra = sorted(set(inputs) - set(plan.inputs))
            sig = ", ".join(f"{n}: {s}" for n, s in plan.inputs.items())
            raise PlanError(f"plan inputs are ({sig}); missing {missing}, unexpected {extra}")
        if self.resident is not None:
            return self.resident.run(self, inputs)
        if self._direct_state == "unbuilt" and self._runners is self._plain_runners:
            direct = self._build_direct()
            if direct is not None:
                out = direct.run(inputs)
                if out is not None:
                    return out
        env: dict[str, tuple[Storage, Layout]] = {n: self._bind_input(n, v) for n, v in inputs.items()}
        syms: dict[int, int] = {}
        for run_step in self._runners:
            run_step(env, syms)
        specs, owned = self.specs, self._owned_outputs
        return {name: from_storage(env[vid][0].view(env[vid][1]) if vid in owned
                                   else env[vid][0].to_numpy(env[vid][1]), specs[vid].dtype)
                for name, vid in plan.outputs.items()}


class _KernelRunner:
    """One kernel step with its static decisions made (see ``_prepare_run``)."""

    __slots__ = ("index", "step", "entry", "where", "inputs", "strided", "deferred", "bundle_slots",
                 "out_allocs", "out_layouts", "alloc", "nonzero", "index_checks", "prepare", "bound",
                 "view", "slots")

    def __init__(self, i: int, step: KernelStep, entry: BindingEntry, fresh: set):
        self.index, self.step, self.entry = i, step, entry
        self.where = f"step {i} ({step.name or step.key})"
        # A kernel callable may offer ``prepare_call(layouts, params, n_inputs)
        # -> run(storages)``: a call bound to its layouts, reused while they
        # and the params stay the same (the executor's storages and layouts
        # are well-formed by construction, so KernelRef's checks are skipped).
        self.prepare = getattr(entry.kernel.fn, "prepare_call", None)
        self.bound = None  # (layouts, params, run)
        # an executor-allocated value is contiguous, offset 0 and exactly sized: it passes as-is
        self.inputs = tuple((vid, vid in fresh) for vid in step.inputs)
        self.strided = entry.caps.strided_input
        self.view = entry.caps.view_input
        m = getattr(step.params, "m_compute", None)
        self.deferred = m is not None and m.mode == "deferred"
        partial = m is not None and m.mode != "all"  # only the first rows are computed
        # KernelCaps.full_write: every output element is stored, so skip zero-filling
        self.alloc = np.empty if entry.caps.full_write and not partial else np.zeros
        self.nonzero = isinstance(step.params, NonZeroIndices)
        # index operands (runtime.indexing): (input position, size, what, allowed extra value)
        p = step.params
        self.index_checks = tuple(
            (r.operand, r.size(p), f"{self.where} {step.key.op.name}",
             f"input {r.operand} ({step.inputs[r.operand]!r}: {r.what})", r.allowed(p) if r.allowed else None)
            for r in INDEX_OPERANDS.get(step.key.op, ()) if r.operand < len(step.inputs))
        if step.is_bundle:
            self.bundle_slots = [(s.dtype, s.shape) for s in step.output_specs]
            self.out_allocs = self.out_layouts = None
        else:
            self.bundle_slots = None
            self.out_allocs = tuple((s.dtype, math.prod(s.shape) * s.dtype.itemsize)
                                    for s in step.output_specs)
            self.out_layouts = [Layout.contiguous(s.shape) for s in step.output_specs]
        self.slots = None if step.is_bundle else tuple(
            _BufferSlot(n, self.alloc) if n >= _BufferSlot.MIN_BYTES else None
            for _, n in self.out_allocs)

    def run(self, env, syms: dict[int, int]):
        step, where, strided, view = self.step, self.where, self.strided, self.view
        ins, in_layouts = [], []
        for vid, fresh in self.inputs:
            st, lay = env[vid]
            if not fresh and needs_contiguize(st, lay, strided, view):
                st, lay = st.contiguize(lay)
            ins.append(st)
            in_layouts.append(lay)
        for pos, size, op_where, what, allowed in self.index_checks:  # before a kernel reads past the end
            check_indices(ins[pos].view(in_layouts[pos]), size, op_where, what, allowed)
        params = step.params
        if self.deferred:
            sym = params.m_compute.value
            if sym not in syms:
                raise KernelError(f"{where}: deferred row count symbol {sym} is unbound; bound: {sorted(syms)}")
            params = dataclasses.replace(params, m_compute=MatmulM.rows(min(syms[sym], params.m)))
        if self.bundle_slots is not None:
            out = Storage.bundle(self.bundle_slots)
            outs, out_layouts = [out], [out.bundle_views[0].layout]
        else:
            alloc, wrap = self.alloc, Storage._wrap
            outs = [wrap(alloc(nbytes, dtype=np.uint8) if slot is None else slot.take(), dt)
                    for (dt, nbytes), slot in zip(self.out_allocs, self.slots)]
            out_layouts = self.out_layouts
        try:
            if self.prepare is not None and self.bundle_slots is None:
                self._run_bound(ins, outs, in_layouts + out_layouts, params)
            else:
                self.entry.kernel(ins, outs, in_layouts + out_layouts, params)
        except KernelError as e:
            raise KernelError(f"{where}: {e}") from e
        except FuelError as e:  # pragma: no cover - KernelRef wraps everything else
            raise KernelError(f"{where}: {e}") from e
        if self.bundle_slots is not None:
            for slot, vid in enumerate(step.outputs):
                env[vid] = outs[0].slot(slot)
            if self.nonzero:
                syms[params.count_sym] = int(outs[0].slot_view(1).reshape(-1)[0])
        else:
            for vid, st, lay in zip(step.outputs, outs, out_layouts):
                env[vid] = (st, lay)


    def _run_bound(self, ins, outs, layouts, params):
        """The kernel call through its bound form (see ``__init__``), with
        KernelRef's error wrapping."""
        bound = self.bound
        try:
            if bound is None or bound[1] is not params or bound[0] != layouts:
                bound = self.bound = (layouts, params,
                                      self.prepare(layouts, params, len(ins)))
            bound[2]([*ins, *outs])
        except KernelError:
            raise
        except Exception as e:  # a kernel must never crash its caller
            k = self.entry.kernel
            raise KernelError(f"kernel {k.name} ({k.kernel_source or 'no source'}) failed: "
                              f"{type(e).__name__}: {e}") from e


class _BufferSlot:
    """The output buffer of one kernel step, kept from one run to the next.

    A run reuses the kept buffer when nothing but the slot refers to it any
    more (the previous run's value, and every array the caller got from it,
    has been released), else it allocates a new one and keeps that. Fresh
    memory from the OS costs a page fault per 4 KiB page on its first write
    (for a 16 MiB output, about as long as a memory-bound kernel itself), so
    a module called repeatedly reuses its large buffers instead. Buffers under
    ``MIN_BYTES`` come from malloc's free lists and are not kept. A kept buffer
    is zero-filled again when the step needs zeroed outputs. The executor
    holds at most one buffer per large step output between runs (what a run
    allocates anyway)."""

    MIN_BYTES = 1 << 18

    __slots__ = ("nbytes", "alloc", "buf", "free_refs", "lock")

    def __init__(self, nbytes: int, alloc):
        self.nbytes, self.alloc, self.buf, self.free_refs = nbytes, alloc, None, -1
        self.lock = threading.Lock()

    def _refs(self) -> int:
        return sys.getrefcount(self.buf)

    def take(self) -> np.ndarray:
        """A uint8 buffer of ``nbytes`` that no other value uses (zeroed when
        the step's allocator is ``np.zeros``)."""
        with self.lock:  # two runs of one executor on two threads never share a buffer
            if self.buf is not None and self._refs() == self.free_refs:
                buf = self.buf
                if self.alloc is np.zeros:
                    buf.fill(0)
                return buf
            self.buf = self.alloc(self.nbytes, dtype=np.uint8)
            self.free_refs = self._refs()  # only the slot refers to it now
            return self.buf


class _ViewRunner:
    """A view step; the layout transform is memoised per input layout."""

    MAX_ENTRIES = 64

    __slots__ = ("step", "_memo")

    def __init__(self, step: ViewStep):
        self.step, self._memo = step, {}

    def run(self, env, syms):
        st, lay = env[self.step.input]
        out = self._memo.get(lay)
        if out is None:
            out = self.step.apply(lay)
            if len(self._memo) >= self.MAX_ENTRIES:
                self._memo.clear()
            self._memo[lay] = out
        env[self.step.output] = (st, out)


class _ReshapeRunner:
    __slots__ = ("step", "layout")

    def __init__(self, step: ReshapeStep):
        self.step, self.layout = step, Layout.contiguous(step.shape)

    def run(self, env, syms):
        st, lay = env[self.step.input]
        if lay.is_contiguous() and lay.start_offset == 0:
            env[self.step.output] = (st, self.layout)
            return
        view = lay.reshaped(self.step.shape)  # a strided input still reshapes as a view
        env[self.step.output] = (st, view) if view is not None else \
            (st.contiguize(lay)[0], self.layout)


class _ContiguizeRunner:
    __slots__ = ("step",)

    def __init__(self, step: ContiguizeStep):
        self.step = step

    def run(self, env, syms):
        st, lay = env[self.step.input]
        env[self.step.output] = st.contiguize(lay)


class _ConstRunner:
    """A const step. While ``plan.constants[name]`` is the same array object
    and wraps without a copy, its Storage is reused between runs (it still
    shares the array's memory, so in-place edits are seen as before)."""

    __slots__ = ("step", "plan", "dtype", "_cached")

    def __init__(self, step: ConstStep, plan: Plan, dtype: DType):
        self.step, self.plan, self.dtype, self._cached = step, plan, dtype, None

    def run(self, env, syms):
        src = self.plan.constants[self.step.const]
        cached = self._cached
        if cached is not None and cached[0] is src:
            env[self.step.output] = cached[1]
            return
        arr = np.require(src, requirements="C")  # keeps rank 0
        value = Storage.from_numpy(arr, dtype=self.dtype)
        if arr is src and arr.dtype != np.bool_ and arr.dtype.isnative and arr.size:
            self._cached = (src, value)  # zero-copy: nothing to redo next run
        env[self.step.output] = value


class PlanModule:
    """The calling surface shared by compiled and loaded modules: a ``plan``
    run by ``self.executor``. ``m(x=...)`` returns one array for a one-output
    plan, else a dict by output name; ``run`` always returns the dict."""

    plan: Plan
    executor: Executor

    @property
    def input_names(self) -> list[str]:
        return list(self.plan.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.plan.outputs)

    def run(self, **inputs) -> dict[str, np.ndarray]:
        """Run and return every output in a dict by name (``PlanError`` for
        missing, extra or mistyped inputs)."""
        return self._run(inputs)

    def __call__(self, **inputs):
        out = self._run(inputs)
        if len(out) == 1:
            return next(iter(out.values()))
        return out

    def _run(self, inputs: dict) -> dict[str, np.ndarray]:
        """``run`` with the inputs in one dict: the one frame between a
        call and the executor (each ``**inputs`` handed on builds a dict)."""
        return self.executor.call(inputs)

    def kernel_summary(self) -> list[str]:
        """One ``OpKind[dtypes] (kernel_source)`` line per kernel step."""
        return self.executor.kernel_summary()

