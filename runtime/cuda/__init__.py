"""The CUDA runtime backend: device buffers, module loading and kernel
launches through ``cuda-python``'s driver API (``cuda.bindings.driver``, or
the older ``cuda.cuda``).

``import runtime`` never imports this package, and importing it needs no
CUDA: the driver is looked up on first use. Everything that needs a device
raises ``CudaUnavailableError`` (saying what is missing: the cuda-python
package, the driver, or a device) when there is none.

``run_program(program, arrays)`` runs one compiled op (a
``runtime.cuda.program.KernelProgram``) on host numpy arrays: the
parameters are copied in, the launches run in order, the last parameter
(the output) is copied back.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from ..errors import KernelError
from .program import Buffer, KernelProgram, Launch


class CudaUnavailableError(KernelError, RuntimeError):
    """CUDA code cannot run here: cuda-python, the driver or a device is missing."""


class CudaError(KernelError, RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


_lock = threading.Lock()
_state: dict = {}


def _driver():
    try:
        from cuda.bindings import driver  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cuda as driver  # older cuda-python
        except ImportError:
            raise CudaUnavailableError(
                "no CUDA device is available: the cuda-python package is not installed "
                "(pip install 'fuelc[cuda]'); compiled PTX/cubin are still in module.ir") from None
    return driver


def _check(driver, result, call: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, msg = driver.cuGetErrorString(err)
        text = msg.decode() if isinstance(msg, bytes) else str(msg)
        raise CudaError(f"{call} failed: {err} ({text})")
    return rest[0] if len(rest) == 1 else tuple(rest)


def context():
    """(driver module, device, context) of device 0, created once per
    process. Raises CudaUnavailableError without cuda-python, driver or device."""
    with _lock:
        if "ctx" in _state:
            return _state["driver"], _state["device"], _state["ctx"]
        driver = _driver()
        try:
            (err,) = driver.cuInit(0)
        except Exception as e:  # the driver library itself is missing
            raise CudaUnavailableError(f"no CUDA device is available: cuInit failed ({e})") from None
        if err != driver.CUresult.CUDA_SUCCESS:
            raise CudaUnavailableError(f"no CUDA device is available: cuInit returned {err}")
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or count < 1:
            raise CudaUnavailableError("no CUDA device is available: the driver reports no device")
        dev = _check(driver, driver.cuDeviceGet(0), "cuDeviceGet")
        ctx = _check(driver, driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _check(driver, driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        _state.update(driver=driver, device=dev, ctx=ctx)
        return driver, dev, ctx


def available() -> bool:
    """True when cuda-python, the driver and a device are present."""
    try:
        context()
        return True
    except (CudaUnavailableError, CudaError):
        return False


def compute_capability() -> tuple[int, int]:
    """(major, minor) of device 0."""
    driver, dev, _ = context()
    attr = driver.CUdevice_attribute
    major = _check(driver, driver.cuDeviceGetAttribute(
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
    minor = _check(driver, driver.cuDeviceGetAttribute(
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
    return int(major), int(minor)


class DeviceBuffer:
    """``nbytes`` of device memory (freed with ``free`` or when collected)."""

    def __init__(self, nbytes: int):
        self.driver, _, _ = context()
        self.nbytes = int(nbytes)
        self.ptr = _check(self.driver, self.driver.cuMemAlloc(max(self.nbytes, 1)), "cuMemAlloc")

    @classmethod
    def from_host(cls, arr: np.ndarray) -> "DeviceBuffer":
        buf = cls(arr.nbytes)
        buf.copy_from_host(arr)
        return buf

    def copy_from_host(self, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr)
        if arr.nbytes != self.nbytes:
            raise KernelError(f"host array of {arr.nbytes} bytes copied into a device buffer "
                              f"of {self.nbytes}")
        if self.nbytes:
            _check(self.driver, self.driver.cuMemcpyHtoD(self.ptr, arr.ctypes.data, self.nbytes),
                   "cuMemcpyHtoD")

    def copy_to_host(self, out: np.ndarray) -> np.ndarray:
        if not out.flags.c_contiguous or out.nbytes != self.nbytes:
            raise KernelError(f"copy_to_host needs a contiguous array of {self.nbytes} bytes")
        if self.nbytes:
            _check(self.driver, self.driver.cuMemcpyDtoH(out.ctypes.data, self.ptr, self.nbytes),
                   "cuMemcpyDtoH")
        return out

    def free(self) -> None:
        if self.ptr is not None:
            self.driver.cuMemFree(self.ptr)
            self.ptr = None

    def __del__(self):
        try:
            self.free()
        except Exception:  # interpreter shutdown: the driver may be gone
            pass


class LoadedProgram:
    """A ``KernelProgram`` loaded into the device context: the cubin when
    its architecture matches the device, else the PTX (JIT by the driver)."""

    def __init__(self, program: KernelProgram):
        self.program = program
        self.driver, _, _ = context()
        major, minor = compute_capability()
        image = program.cubin if (program.cubin is not None
                                  and program.arch == f"sm_{major}{minor}") else None
        if image is None:
            image = program.ptx.encode() + b"\0"
        self.module = _check(self.driver, self.driver.cuModuleLoadData(image), "cuModuleLoadData")
        self.functions = {
            l.kernel: _check(self.driver, self.driver.cuModuleGetFunction(
                self.module, l.kernel.encode()), f"cuModuleGetFunction({l.kernel})")
            for l in program.launches}

    def launch(self, launch: Launch, params: list, temps: list) -> None:
        values = []
        for kind, v in launch.args:
            if kind == "param":
                values.append(ctypes.c_void_p(int(params[v].ptr)))
            elif kind == "temp":
                values.append(ctypes.c_void_p(int(temps[v].ptr)))
            else:
                values.append(ctypes.c_int64(v))
        pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(x) for x in values])
        _check(self.driver, self.driver.cuLaunchKernel(
            self.functions[launch.kernel], *launch.grid, *launch.block, launch.shared_bytes,
            0, ctypes.addressof(pointers), 0), f"cuLaunchKernel({launch.kernel})")

    def run_device(self, params: list) -> None:
        """Run every launch on device buffers ``params`` (inputs, then output)."""
        if len(params) != len(self.program.params):
            raise KernelError(f"the kernel takes {len(self.program.params)} buffers, "
                              f"got {len(params)}")
        temps = [DeviceBuffer(t.nbytes) for t in self.program.temps]
        try:
            for launch in self.program.launches:
                self.launch(launch, params, temps)
            _check(self.driver, self.driver.cuCtxSynchronize(), "cuCtxSynchronize")
        finally:
            for t in temps:
                t.free()

    def run(self, arrays: list) -> None:
        """Copy ``arrays`` (host; contiguous copies are made) in, run, and
        copy the last parameter back into ``arrays[-1]`` (contiguous)."""
        for a, b in zip(arrays, self.program.params):
            if a.nbytes != b.nbytes:
                raise KernelError(f"host array of {a.nbytes} bytes for a {b.element}"
                                  f"{list(b.shape)} buffer of {b.nbytes}")
        bufs = [DeviceBuffer.from_host(a) for a in arrays[:-1]] + [DeviceBuffer(arrays[-1].nbytes)]
        try:
            self.run_device(bufs)
            bufs[-1].copy_to_host(arrays[-1])
        finally:
            for b in bufs:
                b.free()


__all__ = ["CudaUnavailableError", "CudaError", "context", "available", "compute_capability",
           "DeviceBuffer", "LoadedProgram", "KernelProgram", "Buffer", "Launch"]
