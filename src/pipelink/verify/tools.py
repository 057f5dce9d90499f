"""Nsight Compute and compute-sanitizer on a verify child: the `profile` rung and the sanitizer
rungs, for a link spec's kernel (runner.py) and a kernel file's launches (pykernel.py) alike. Each
takes a function that makes the child's job for a work folder, runs the tool on
`python -m pipelink.verify.child job.json` under the watchdog, and reads the tool's output back."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from ..fsutil import write_atomic
from .results import Rung
from .watch import child_env, run_watched


def profile_job(make_job, work: Path, select: list[str], ok_gpu: bool, device: str, timeout: float) -> Rung:
    """Nsight Compute (--clock-control none: clocks as found) on a child that runs ``make_job(work)``
    (its run rung), profiling the kernels ``select`` picks (ncu's filter options)."""
    import shutil
    t0 = time.perf_counter()
    if not ok_gpu:
        return Rung("profile", "skipped", f"not run: {device}")
    ncu = shutil.which("ncu") or next((p for p in ("/usr/local/cuda/bin/ncu",) if Path(p).exists()), None)
    if ncu is None:
        return Rung("profile", "skipped", "not run: ncu (Nsight Compute) not found")
    work.mkdir(parents=True, exist_ok=True)
    job_path = write_atomic(work / "job.json", json.dumps(make_job(work)))
    report = work / "ncu"
    # The detailed set: speed of light, compute and memory workload, warp states (stall reasons).
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", *select, "--set", "detailed", "-f",
           "-o", str(report), sys.executable, "-m", "pipelink.verify.child", str(job_path)]
    code, err = run_watched(cmd, timeout + 120, child_env())
    write_atomic(work / "ncu.log", err)
    rep = report.parent / (report.name + ".ncu-rep")
    if code is None:
        return Rung("profile", "hang", f"ncu did not finish within {timeout + 120:g} s", {}, time.perf_counter() - t0)
    if code != 0 or not rep.exists():
        return Rung("profile", "FAILED", f"ncu exited {code} without a report ({work / 'ncu.log'}): "
                    f"{err[-600:]}", {"log": str(work / "ncu.log")}, time.perf_counter() - t0)
    proc = subprocess.run([ncu, "--import", str(rep), "--page", "details", "--csv"], capture_output=True, text=True)
    return Rung("profile", "ok", "", {"report": str(rep), **ncu_summary(proc.stdout)}, time.perf_counter() - t0)


def sanitize_job(tool: str, make_job, work: Path, ok_gpu: bool, device: str, timeout: float) -> Rung:
    """compute-sanitizer --tool <tool> on a child that runs ``make_job(work)`` (its run rung)."""
    import shutil
    t0 = time.perf_counter()
    if not ok_gpu:
        return Rung(tool, "skipped", f"not run: {device}")
    exe = shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if Path(p).exists()), None)
    if exe is None:
        return Rung(tool, "skipped", "not run: compute-sanitizer not found")
    work.mkdir(parents=True, exist_ok=True)
    job_path = write_atomic(work / "job.json", json.dumps(make_job(work)))
    cmd = [exe, "--tool", tool, "--print-limit", "20", sys.executable, "-m", "pipelink.verify.child", str(job_path)]
    code, text = run_watched(cmd, timeout * 5 + 120, child_env())  # instrumented kernels run far slower
    write_atomic(work / f"{tool}.log", text)
    if code is None:
        return Rung(tool, "hang", f"{tool} did not finish within {timeout * 5 + 120:g} s", {}, time.perf_counter() - t0)
    errors = sanitizer_errors(text)
    if errors is None:
        return Rung(tool, "FAILED", f"no summary in compute-sanitizer's output (exit {code}): {text[-400:]}",
                    {"log": str(work / f"{tool}.log")}, time.perf_counter() - t0)
    first = next((line.strip() for line in text.splitlines() if line.startswith("========= ") and "ERROR" not in line
                  and line.strip("= ").strip()), "")
    return Rung(tool, "ok" if errors == 0 else "FAILED", "" if errors == 0 else f"{errors} error(s); first: {first}",
                {"errors": errors, "log": str(work / f"{tool}.log")}, time.perf_counter() - t0)


def sanitizer_errors(text: str) -> int | None:
    """Error count from compute-sanitizer's closing line: memcheck and synccheck print
    "ERROR SUMMARY: N errors", racecheck "RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)"."""
    m = re.search(r"ERROR SUMMARY: (\d+) error", text) or re.search(r"RACECHECK SUMMARY: .*?\((\d+) error", text)
    return int(m.group(1)) if m else None


NCU_METRICS = ("Duration", "DRAM Throughput", "Memory Throughput", "Compute (SM) Throughput", "Achieved Occupancy",
               "Registers Per Thread", "Elapsed Cycles",
               # from the detailed set: how busy the SMs' issue and pipes are, where warps wait, L2 reuse
               "SM Busy", "Issue Slots Busy", "Executed Ipc Active", "Warp Cycles Per Issued Instruction",
               "L2 Hit Rate", "L1/TEX Hit Rate", "Mem Busy", "Max Bandwidth", "SM Frequency", "DRAM Frequency")


def ncu_summary(csv_text: str) -> dict:
    """A few headline metrics from `ncu --import R --page details --csv`."""
    import csv
    import io
    summary = {}
    for row in csv.DictReader(io.StringIO(csv_text)):
        name = row.get("Metric Name")
        if name in NCU_METRICS:
            summary[f"{name} ({row.get('Metric Unit', '')})"] = row.get("Metric Value", "")
    return summary
