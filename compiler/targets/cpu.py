"""The ``cpu`` target kind: x86-64 code through the CPU codegen package.

Spellings:

* ``"cpu"`` — this machine: its LLVM CPU name and every feature it has.
  ``$FUELC_CPU`` (e.g. ``FUELC_CPU=x86-64-v3``) redirects plain ``"cpu"`` to
  that architecture, so a whole test suite can exercise the AVX2 path on a
  machine with AVX-512.
* ``"cpu:host"`` / ``"cpu:native"`` — this machine, ignoring ``$FUELC_CPU``.
* ``"cpu:<arch>"`` — an x86-64 level (``x86-64-v2``, ``x86-64-v3``,
  ``x86-64-v4``) or a named CPU (``haswell``, ``skylake-avx512``,
  ``znver3``, ...; ``runtime.cpu_features.KNOWN_CPUS``). Code for it runs on
  every CPU with the level's (or that CPU's) features, and refuses with
  ``CpuFeatureError`` elsewhere.
"""
from __future__ import annotations

import os

from runtime.cpu_features import KNOWN_CPUS, _host
from runtime.keys import BackendId

from . import Target, TargetError, TargetKind, register_target_kind

TRIPLE = "x86_64-unknown-linux-gnu"
#: The lowest level generated code is tested on (bf16/f16 conversions and
#: FMA without compiler-runtime calls): every accepted arch includes it.
BASELINE = "x86-64-v3"


def _accepted() -> list[str]:
    return ["cpu", "cpu:host"] + [f"cpu:{a}" for a in KNOWN_CPUS if a not in ("x86-64", "x86-64-v2")]


#: Every feature some known CPU has: the host target turns off those it lacks.
_KNOWN_FEATURES = frozenset().union(*KNOWN_CPUS.values())


def _host_target() -> Target:
    """This machine. Its feature string also turns off every known feature
    the host does not report: LLVM's CPU name implies its CPU's features
    (``znver4``: AVX-512), and a host that hides some of them from CPUID (a
    hypervisor that masks AVX-512 on a Zen 4, ``benchmarks/avx2_host.py``)
    must not get code using them."""
    name, features = _host()
    flat = ",".join([f"+{f}" for f in sorted(features)]
                    + [f"-{f}" for f in sorted(_KNOWN_FEATURES - features)])
    return Target("cpu", name, frozenset(features), flat, TRIPLE, host=True)


def _named(arch: str) -> Target:
    features = KNOWN_CPUS.get(arch)
    if features is None or arch in ("x86-64", "x86-64-v2"):
        why = ("is below the supported baseline x86-64-v3 (AVX2, FMA, F16C)"
               if features is not None else "is not a known x86-64 CPU or level")
        raise TargetError(f"target 'cpu:{arch}' {why}; accepted: {', '.join(_accepted())}")
    return Target("cpu", arch, features, "", TRIPLE)


def parse_cpu(arch: str | None) -> Target:
    """The cpu Target for the text after ``cpu:`` (None: plain ``cpu``)."""
    if arch is None:
        forced = os.environ.get("FUELC_CPU", "").strip().lower()
        if forced and forced not in ("host", "native"):
            try:
                return _named(forced)
            except TargetError as e:
                raise TargetError(f"$FUELC_CPU={forced!r}: {e}") from None
        return _host_target()
    if arch in ("host", "native"):
        return _host_target()
    return _named(arch)


register_target_kind(TargetKind("cpu", BackendId.CPU, parse_cpu, _accepted, "compiler.codegen.cpu"))
