"""The fused kernel and the unfused baseline at one and the same clock: Nsight Compute profiles
one launch of each (pipelink-linked, cuBLAS + torch.compile'd SiLU*mul, cuBLAS alone) with its
default clock control (SM clock locked to base) and caches flushed before each kernel.

Timings under sustained load (bench/qwen_mlp.py) run at whatever clock the power limit leaves;
here every kernel gets the same clock, so the ratios compare cycles, and the tensor-pipe
utilization says how much faster the kernel could get at that clock. JSON under --out; the
Nsight Compute report beside it (git-ignored).

    PYTHONPATH=src python3 bench/experiments/qwen_ncu.py [--shape qwen_gate_up_4096] [--config 256,4,column_major,16,1]
        [--variant NAME=FOLDER@fact=value ...]   (as in qwen_ab.py; default: pipelink=components)
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the harness and qwen_mlp
from harness import RESULTS, ROOT, check, example, write_result  # noqa: E402
from qwen_mlp import parse_config  # noqa: E402

# ncu's time units, in ms.
TO_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}

# Columns kept from ncu's raw page of the detailed set (metric names differ across ncu versions,
# so they are picked by pattern: durations, clocks, throughputs, tensor pipes, DRAM bytes).
KEEP = ("gpu__time_duration.sum", "cycles_elapsed.avg.per_second", "throughput.avg.pct_of_peak_sustained_elapsed",
        "tensor", "gmma", "dram__bytes")


def child(shape_name: str, config: tuple, variants: list[str]) -> None:
    """Runs under ncu: warms every callable up outside the profiled range, then launches each once."""
    import torch
    import qwen_ab
    import qwen_mlp
    ref = example("qwen_mlp/reference.py")
    shape = qwen_mlp.SHAPES[shape_name]
    work = Path(tempfile.mkdtemp(prefix="pl-qwen-ncu-"))
    case = qwen_mlp.Case(shape, ref)
    fns, outputs = [], []
    for name, (packages, facts) in qwen_ab.variant_packages(variants, work).items():
        spec = qwen_mlp.shapes.write_spec(work / name, packages, shape, config, facts)
        launch, y, _ = qwen_mlp.linked_launch(spec, "pipelink", case, case.cols)
        fns.append(launch)
        outputs.append(y)
    fns += [lambda: ref.cublas_then_compiled_swiglu(case.inputs, case.facts),
            lambda: ref.cublas_alone(case.inputs, case.facts)]
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    for name, y in zip(variants, outputs):
        result = check(y, case.ref)
        print(json.dumps({"check": {"variant": name, **result}}), flush=True)
        if not result["passed"]:
            sys.exit(1)
    torch.cuda.profiler.start()
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen_gate_up_4096")
    ap.add_argument("--config", default="256,4,column_major,16,1", help="tile_n,stages,order,group,cluster")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--variant", action="append", help="NAME=FOLDER@fact=value (qwen_ab.py)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    variants = args.variant or [f"pipelink={ROOT / 'components'}"]
    if args.child:
        return child(args.shape, parse_config(args.config), variants)

    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    work = Path(tempfile.mkdtemp(prefix="pl-qwen-ncu-"))
    report = work / "report"
    cmd = [ncu, "--profile-from-start", "off", "--set", "detailed", "-f", "-o",
           str(report), sys.executable, __file__, "--child", "--shape", args.shape, "--config", args.config]
    cmd += [f"--variant={v}" for v in variants]
    print("$ " + " ".join(cmd), flush=True)
    started = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=os.environ)
    print(proc.stdout[-3000:], proc.stderr[-3000:], flush=True)
    rep = report.with_suffix(".ncu-rep")
    result = {"shape": args.shape, "config": list(parse_config(args.config)), "variants": variants, "clock_control": "ncu default (base)",
              "ncu_seconds": time.time() - started, "exit": proc.returncode, "kernels": []}
    checks = [json.loads(line)["check"] for line in proc.stdout.splitlines() if line.startswith('{"check"')]
    result["checks"] = checks
    if rep.exists():
        raw = subprocess.run([ncu, "--import", str(rep), "--csv", "--page", "raw"], capture_output=True, text=True)
        rows = list(csv.reader(io.StringIO(raw.stdout)))
        header, units, data = rows[0], rows[1], rows[2:]
        keep = [c for c in header if any(pattern in c for pattern in KEEP)]
        for row in data:
            rec = dict(zip(header, row))
            result["kernels"].append({"name": rec.get("Kernel Name", "")[:120],
                                      **{c: rec.get(c) for c in keep},
                                      "units": {c: units[header.index(c)] for c in keep}})
        # Launch order: the linked kernels (pl_*, one per variant), the baseline's kernels, cuBLAS alone.
        ours = len(variants)
        assert all(k["name"].startswith("pl_") for k in result["kernels"][:ours]), result["kernels"][:ours]
        groups = {**{v.split("=")[0]: [k] for v, k in zip(variants, result["kernels"])},
                  "cublas+compiled_swiglu": result["kernels"][ours:-1], "cublas": result["kernels"][-1:]}
        duration = "gpu__time_duration.sum"
        ms = {name: sum(float(k[duration].replace(",", "")) * TO_MS[k["units"][duration]] for k in ks)
              for name, ks in groups.items()}
        result["ms_at_base_clock"] = ms
        names = [v.split("=")[0] for v in variants]
        result["speedup_vs_cublas_compiled_swiglu"] = {n: ms["cublas+compiled_swiglu"] / ms[n] for n in names}
        result["speedup_vs_cublas_alone"] = {n: ms["cublas"] / ms[n] for n in names}
        if args.out:
            shutil.copyfile(rep, args.out / f"qwen_ncu-{args.shape}.ncu-rep")
    path = write_result("qwen_ncu", result, args.out)
    print(json.dumps({k: result.get(k) for k in ("ms_at_base_clock", "speedup_vs_cublas_compiled_swiglu",
                                                  "speedup_vs_cublas_alone")}, indent=1))
    for k in result["kernels"]:
        print(k["name"][:40], {c: k.get(c) for c in ("gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
                                                      "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed")})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
