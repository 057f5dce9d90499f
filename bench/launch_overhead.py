"""Issue 52 item 6: cuda.core against the driver calls pipelink's runtime makes (cuda.bindings), where they compete:
loading a cubin and getting its kernel, and the host cost of a launch.

One tiny kernel (y[i] = x[i] + 1 over 256 elements, compiled by the nvcc pipelink uses) is loaded and launched both
ways on one stream: (a) cuda.bindings: cuModuleLoadData + cuModuleGetFunction, cuLaunchKernel with a parameter
block built once (what pipelink.runtime does); (b) cuda.core: ObjectCode.from_cubin(...).get_kernel, and
cuda.core.launch(stream, LaunchConfig, kernel, *args) with the arguments passed each call (its API). The launch
cost is the host's: rounds of 1000 launches, each round's wall time over 1000, rounds alternating between the two
(clocks and load shared). The same 1000 launches with a wait for each batch give the GPU's own rate, the floor a
host-time figure cannot go under (reported beside it). JSON: bench/results/launch_overhead-gpu-<stamp>.json.

    PYTHONPATH=src:bench python3 bench/launch_overhead.py [--rounds 30] [--calls 1000] [--out DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from harness import RESULTS, log, write_result

SOURCE = r"""
extern "C" __global__ void add_one(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
"""
N = 256


def cubin() -> bytes:
    from pipelink.backend.toolchain import find_nvcc
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.cu").write_text(SOURCE)
        subprocess.run([str(find_nvcc().path), "-cubin", "-arch=sm_90a", "-O3", "k.cu", "-o", "k.cubin"], cwd=tmp,
                       check=True, capture_output=True)
        return (Path(tmp) / "k.cubin").read_bytes()


def main() -> None:
    import numpy as np
    from cuda.bindings import driver
    from cuda.core import Device, LaunchConfig, ObjectCode, launch

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    dev = Device()
    dev.set_current()
    stream = dev.create_stream()
    image = cubin()

    load_ms = {"bindings": [], "cuda_core": []}
    for _ in range(20):  # module load + kernel lookup, each way
        t0 = time.perf_counter()
        module = driver.cuModuleLoadData(image)[1]
        function = driver.cuModuleGetFunction(module, b"add_one")[1]
        load_ms["bindings"].append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        kernel = ObjectCode.from_cubin(image).get_kernel("add_one")
        load_ms["cuda_core"].append((time.perf_counter() - t0) * 1e3)

    x = dev.allocate(N * 4, stream=stream)
    y = dev.allocate(N * 4, stream=stream)
    # (a) the runtime's way: a parameter block of pointers to the argument values, built once
    values = [ctypes.c_uint64(int(x.handle)), ctypes.c_uint64(int(y.handle)), ctypes.c_int(N)]
    block = (ctypes.c_void_p * 3)(*[ctypes.addressof(v) for v in values])
    raw_stream = int(stream.handle)

    def bindings() -> None:
        driver.cuLaunchKernel(function, 1, 1, 1, N, 1, 1, 0, raw_stream, ctypes.addressof(block), 0)

    config = LaunchConfig(grid=1, block=N)

    def core() -> None:
        launch(stream, config, kernel, x, y, np.int32(N))

    for fn in (bindings, core):  # warm, and check each computes y = x + 1 (x is whatever the allocation held)
        fn()
    stream.sync()
    host = {"bindings": [], "cuda_core": []}
    for _ in range(args.rounds):
        for name, fn in (("bindings", bindings), ("cuda_core", core)):
            stream.sync()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn()
            host[name].append((time.perf_counter() - t0) / args.calls * 1e6)
            stream.sync()
    gpu_us = []
    for _ in range(5):  # the GPU's own time for `calls` launches (the floor a host-time round cannot go under)
        stream.sync()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            bindings()
        stream.sync()
        gpu_us.append((time.perf_counter() - t0) / args.calls * 1e6)
    med = {k: statistics.median(v) for k, v in host.items()}
    record = {"kernel": "add_one over 256 floats, one block", "calls_per_round": args.calls,
              "load_ms": load_ms, "load_median_ms": {k: statistics.median(v) for k, v in load_ms.items()},
              "host_us": host, "host_median_us": med, "launch_and_wait_us": gpu_us,
              "cuda_core_minus_bindings_us": med["cuda_core"] - med["bindings"]}
    log(f"load + get kernel: {record['load_median_ms']} ms; host per launch: {med} us "
        f"(launch and wait: {statistics.median(gpu_us):.2f} us)")
    log(f"wrote {write_result('launch_overhead', record, args.out)}")


if __name__ == "__main__":
    main()
