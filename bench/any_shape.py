"""Issue 49: the Qwen3-32B gate/up + SwiGLU operator (pipelink.op, M varying) over M = 1 .. 8192, against
cuBLAS + torch.compile'd SiLU*mul, in one process. Untuned: every bucket takes the spec's configuration
(--tile-n, --stages, 128-row tiles; --small-tile-m 64 gives M <= 64 a second operator with 64-row tiles).

Per M: the operator's output against the fp32 reference (verify's criteria: finite, within bf16 tolerance),
then both callables interleaved launch by launch (bench/harness.time_interleaved, L2 flushed). Also: the
first call of a new bucket (its link, warm package and build caches in this process), and the host cost of a
call against Runtime.launch_arrays and a bare cuLaunchKernel of the same cubin with a prebuilt argument blob
(median over rounds of 100 calls at M = 128, each round's wall time divided by 100: 100 kernels of ~0.2 ms queue
well ahead of the GPU, so the host never waits for it).

    PYTHONPATH=src:bench python3 bench/any_shape.py [--out DIR] [--ms 1,2,...] [--reps 30]
"""

from __future__ import annotations

import argparse
import ctypes
import math
import statistics
import time
from pathlib import Path

import pipelink
from pipelink.verify import timing

from harness import RESULTS, check, example, log, time_interleaved, warm_up, write_result

shapes = example("qwen_mlp/shapes.py")
reference = example("qwen_mlp/reference.py")
MS = (1, 2, 4, 8, 16, 32, 64, 100, 128, 200, 256, 512, 1000, 1024, 2048, 4096, 8192)
K, N = 5120, 51200


def packages(folder: Path, tile_ms: tuple[int, ...], tile_n: int) -> Path:
    """The two components with only the variants this run links."""
    out = folder / "packages"
    for source, contract, _ in shapes.COMPONENTS:
        variants = [{"tile_m": m, "tile_n": tile_n} | ({"gated": 1} if "swiglu" in source.name else {})
                    for m in tile_ms]
        pipelink.pack(source, contract, out / f"{source.stem}.plc", variants=variants)
    return out


def host_us(fn, rounds: int = 100, calls: int = 100) -> list[float]:
    """Per-call host time of ``fn`` (us): rounds of ``calls`` calls, each round's wall time over ``calls``."""
    import torch
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return out


def bare_launcher(runtime, arrays):
    """cuLaunchKernel of the runtime's cubin with the argument blob built once (what a hand-written host does)."""
    import torch
    params = runtime.params
    pointers = [a.data_ptr() for a in arrays]
    blob = ctypes.create_string_buffer(max(runtime.abi.size, 8))
    for param, ptr in zip(runtime.abi.params, runtime._with_workspaces(pointers, 0)):
        value = runtime.tensor_map(param, ptr) if param.tma is not None else ptr.to_bytes(8, "little")
        ctypes.memmove(ctypes.addressof(blob) + param.offset, value, len(value))
    args = (ctypes.c_void_p * 1)(ctypes.addressof(blob))
    m, d = runtime.manifest, runtime.driver
    assert len(params) == len(arrays)

    def launch():
        return d.cuLaunchKernel(runtime.function, *m["grid"], *m["block"], m["dynamic_smem"],
                                torch.cuda.current_stream().cuda_stream, ctypes.addressof(args), 0)[0]
    launch.blob = blob  # kept alive with the launcher: the driver reads it at each launch
    status = launch()
    torch.cuda.synchronize()
    assert int(status) == 0, f"the bare launch failed: {status}"
    return launch


def main() -> None:
    import torch
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--ms", default=",".join(map(str, MS)))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--tile-n", type=int, default=256)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--small-tile-m", type=int, default=0, help="64: M <= 64 on 64-row tiles")
    args = ap.parse_args()
    ms = [int(m) for m in args.ms.split(",")]
    work = Path("/tmp/any_shape")
    t0 = time.perf_counter()
    tile_ms = (128, 64) if args.small_tile_m else (128,)
    pk = packages(work, tile_ms, args.tile_n)
    log(f"packed {len(tile_ms)} variant(s) of each component in {time.perf_counter() - t0:.0f} s")
    ops = {}
    for tile_m in tile_ms:
        spec = shapes.write_spec(work / f"spec{tile_m}", pk, (tile_m * 2, K, N, 1),
                                 (args.tile_n, args.stages if tile_m == 128 else args.stages + 1, "column_major", 0, 1,
                                  "tiles", tile_m))
        t0 = time.perf_counter()
        ops[tile_m] = pipelink.op(spec, vary=("M",), name=f"qwen_gate_up_any_{tile_m}")
        log(f"operator on {tile_m}-row tiles made (one link) in {time.perf_counter() - t0:.1f} s")
    torch.manual_seed(0)
    w = (torch.randn(N, K, device="cuda") / math.sqrt(K)).to(torch.bfloat16)
    record = {"K": K, "N": N, "config": {"tile_n": args.tile_n, "stages": args.stages, "order": "column_major",
                                         "tile_m": "64 for M <= 64" if args.small_tile_m else 128},
              "shapes": []}
    for m in ms:
        op = ops[64 if args.small_tile_m and m <= 64 else 128]
        x = torch.randn(m, K, device="cuda").to(torch.bfloat16)
        inputs = {"mainloop.a": x, "mainloop.b": w}
        had = len(op.kernels)
        t0 = time.perf_counter()
        y = op(x, w)
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        verdict = check(y, reference.swiglu(inputs, {"gated": 1})["epilogue.y"])
        row = {"M": m, "bucket": list(op.linked_sizes({"M": m})), "linked_now": len(op.kernels) > had,
               "first_call_s": first_s, "verify_passed": verdict["passed"], "verify": verdict}
        if verdict["passed"]:
            fns = {"pipelink": lambda: op(x, w), "cublas_compiled_swiglu":
                   lambda: reference.cublas_then_compiled_swiglu(inputs, {"gated": 1})}
            for fn in fns.values():
                warm_up(fn, 0.3)
            times = time_interleaved(fns, args.reps)  # name -> timing.summarize: median_ms, p10, p90, times_ms
            med = {k: v["median_ms"] for k, v in times.items()}
            row |= {"timings": times, "median_ms": med["pipelink"], "baseline_median_ms": med["cublas_compiled_swiglu"],
                    "speedup_vs_cublas_compiled_swiglu": timing.speedup(med["cublas_compiled_swiglu"],
                                                                        med["pipelink"])}
        log(f"M = {m}: bucket {row['bucket']}, verify {verdict['passed']}, "
            f"speed-up {row.get('speedup_vs_cublas_compiled_swiglu', float('nan')):.3f}")
        record["shapes"].append(row)
    # the host cost of a call at M = 128 (a kernel of ~0.2 ms: 100 calls queue well ahead of the GPU)
    op = ops[128]
    x = torch.randn(128, K, device="cuda").to(torch.bfloat16)
    y = op(x, w)
    runtime = op.kernels[op.linked_sizes({"M": 128})][1]
    ordered = {"mainloop.a": x, "mainloop.b": w, "epilogue.y": y}
    arrays = [ordered[p.name] for p in runtime.params]
    calls = {"op": lambda: op(x, w), "launch_arrays": lambda: runtime.launch_arrays(arrays),
             "bare_cuLaunchKernel": bare_launcher(runtime, arrays)}
    record["first_call_s"] = {str(r["M"]): r["first_call_s"] for r in record["shapes"] if r["linked_now"]}
    try:
        host = {}
        for name, fn in calls.items():
            host[name] = host_us(fn)
            log(f"host per call, {name}: {statistics.median(host[name]):.1f} us")
        med = {name: statistics.median(v) for name, v in host.items()}
        record |= {"host_us": host, "host_median_us": med,
                   "dispatch_overhead_us": med["op"] - med["bare_cuLaunchKernel"]}
    except Exception as exc:  # keep the shapes' record; say what failed
        record["host_error"] = f"{type(exc).__name__}: {exc}"[:500]
        log(f"host timing failed: {record['host_error']}")
    path = write_result("any_shape", record, args.out)
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
