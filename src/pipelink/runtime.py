"""Loading and launching a linked cubin with the CUDA driver API (cuda.bindings.driver).

The manifest gives the entry, grid, block, dynamic shared memory and the parameter layout (one
pointer per operand, packed into the kernel's single __grid_constant__ parameter struct).
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass

import numpy as np

from .errors import DeviceError


def _check(result, what: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    from cuda.bindings import driver
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        raise DeviceError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    return rest[0] if len(rest) == 1 else rest


def gpu_available() -> tuple[bool, str]:
    """(True, device name) when a CUDA device of compute capability 9.x is usable here."""
    try:
        from cuda.bindings import driver
        if driver.cuInit(0)[0] != driver.CUresult.CUDA_SUCCESS:
            return False, "no CUDA driver"
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or count == 0:
            return False, "no CUDA device"
        err, dev = driver.cuDeviceGet(0)
        attr = driver.CUdevice_attribute
        major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)[1]
        name = driver.cuDeviceGetName(64, dev)[1].split(b"\0")[0].decode()
        if major != 9:
            return False, f"{name} is not sm_90 (Hopper)"
        return True, name
    except Exception as exc:  # no driver library, no bindings
        return False, f"CUDA unavailable ({type(exc).__name__}: {exc})"


@dataclass
class DeviceBuffer:
    ptr: int
    nbytes: int


class Runtime:
    """One loaded linked kernel on device 0 (primary context)."""

    def __init__(self, cubin: bytes, manifest: dict):
        from cuda.bindings import driver
        self.driver = driver
        self.manifest = manifest
        _check(driver.cuInit(0), "cuInit")
        dev = _check(driver.cuDeviceGet(0), "cuDeviceGet")
        self.context = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        self.module = _check(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
        self.function = _check(driver.cuModuleGetFunction(self.module, manifest["entry"].encode()),
                               f"cuModuleGetFunction({manifest['entry']})")
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(driver.cuFuncSetAttribute(self.function, attr, manifest["dynamic_smem"]),
               f"setting {manifest['dynamic_smem']} bytes of dynamic shared memory")

    # -- memory ------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> DeviceBuffer:
        return DeviceBuffer(int(_check(self.driver.cuMemAlloc(max(nbytes, 1)), f"cuMemAlloc({nbytes})")), nbytes)

    def to_device(self, array: np.ndarray) -> DeviceBuffer:
        array = np.ascontiguousarray(array)
        buf = self.alloc(array.nbytes)
        _check(self.driver.cuMemcpyHtoD(buf.ptr, array.ctypes.data, array.nbytes), "cuMemcpyHtoD")
        return buf

    def to_host(self, buf: DeviceBuffer, dtype, shape) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        _check(self.driver.cuMemcpyDtoH(out.ctypes.data, buf.ptr, out.nbytes), "cuMemcpyDtoH")
        return out

    def free(self, buf: DeviceBuffer) -> None:
        _check(self.driver.cuMemFree(buf.ptr), "cuMemFree")

    # -- launch ------------------------------------------------------------------------------
    def launch(self, pointers: list[int], stream: int = 0) -> None:
        m = self.manifest
        if len(pointers) != len(m["params"]):
            names = ", ".join(p["name"] for p in m["params"])
            raise DeviceError(f"kernel {m['entry']} takes {len(m['params'])} operands ({names}), got {len(pointers)}")
        blob = ctypes.create_string_buffer(struct.pack(f"<{len(pointers)}Q", *pointers), max(m["param_bytes"], 8))
        args = (ctypes.c_void_p * 1)(ctypes.addressof(blob))
        _check(self.driver.cuLaunchKernel(self.function, *m["grid"], *m["block"], m["dynamic_smem"], stream,
                                          ctypes.addressof(args), 0), f"cuLaunchKernel({m['entry']})")

    def synchronize(self) -> None:
        _check(self.driver.cuCtxSynchronize(), "kernel execution (cuCtxSynchronize)")

    def time_ms(self, pointers: list[int], repeats: int = 20) -> list[float]:
        """Per-launch times from CUDA events (after one warm-up launch)."""
        d = self.driver
        self.launch(pointers)
        self.synchronize()
        times = []
        start, stop = _check(d.cuEventCreate(0), "cuEventCreate"), _check(d.cuEventCreate(0), "cuEventCreate")
        for _ in range(repeats):
            _check(d.cuEventRecord(start, 0), "cuEventRecord")
            self.launch(pointers)
            _check(d.cuEventRecord(stop, 0), "cuEventRecord")
            _check(d.cuEventSynchronize(stop), "kernel execution")
            times.append(_check(d.cuEventElapsedTime(start, stop), "cuEventElapsedTime"))
        return times


# --- numpy helpers for bf16 (numpy has no bfloat16) ------------------------------------------

def bf16_to_float32(raw: np.ndarray) -> np.ndarray:
    return (raw.astype(np.uint32) << 16).view(np.float32)


BF16_NAN = 0x7FC0
