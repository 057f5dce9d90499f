"""The verifiable loop on kernel files (issue 17): every examples/loop kernel file whose DSL is
installed, through `pipelink verify KERNEL.py` in one run, cold (empty DSL caches) and warm; its
time, the torch baseline's, and the share of the memory floor each reaches; the wrong version
failing correctness and the hanging one reported as a hang, with the verify after it passing.

    python bench/loop_table.py [--out DIR]

Writes results/loop_table-gpu-<stamp>.json with `kernels` (each: `file`, `dsl`, `status`,
`cold_wall_s`, `warm_wall_s`, `median_ms`, `torch_median_ms`, `pct_of_copy_bandwidth`, `rungs`, and
`profile`: Nsight Compute's headline figures for the kernel's launch, from a run of its own;
`warm_timeline`: the warm verify's seconds before the child, in each rung and after them) and
`negative` (the wrong and the hanging file, and the verify that followed the hang).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
import time
from pathlib import Path

from harness import ROOT, log, quiet_console, write_result

import pipelink

LOOP = ROOT / "examples" / "loop"
# file -> the module its DSL is imported as (None: torch only)
KERNELS = {"rmsnorm_triton.py": "triton", "rmsnorm_cute.py": "cutlass.cute", "rmsnorm_tilelang.py": "tilelang"}
NEGATIVE = ("rmsnorm_wrong.py", "rmsnorm_hang.py")


def _installed(module: str | None) -> bool:
    if module is None:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _run(path: Path, out: Path, **kwargs) -> tuple[object, float]:
    t0 = time.perf_counter()
    result = pipelink.verify(path, out_dir=out, console=quiet_console(), **kwargs)
    return result, time.perf_counter() - t0


def _timeline(out: Path, started: float, wall_s: float) -> dict:
    """Where a verify's wall time went, from the child's stamped progress file: until the child's
    interpreter was up (the parent's pre-checks, the process start), each rung, and after the last
    rung (the child's exit, the parent's report). `started` is time.time() before the verify."""
    progress = out / "progress.jsonl"
    events = [json.loads(line) for line in progress.read_text().splitlines()] if progress.exists() else []
    if not any(e["event"] == "ready" for e in events):
        return {"before_child_s": None, "rungs_s": {}, "after_rungs_s": None}  # the child never started
    ready = next(e["t"] for e in events if e["event"] == "ready")
    rungs = {e["rung"]: round(e["seconds"], 3) for e in events if e["event"] == "done"}
    last = max(e["t"] for e in events)
    return {"before_child_s": round(ready - started, 3), "rungs_s": rungs,
            "after_rungs_s": round(started + wall_s - last, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pipelink-loop-"))
    # Cold means the DSLs' own caches are empty too.
    os.environ["TRITON_CACHE_DIR"] = str(work / "triton-cache")
    rows = []
    for name, module in KERNELS.items():
        path = LOOP / name
        if not path.exists() or not _installed(module):
            rows.append({"file": name, "dsl": module, "status": "not installed" if path.exists() else "no file"})
            log(f"{name}: skipped ({rows[-1]['status']})")
            continue
        cold, cold_s = _run(path, work / name / "cold")
        started = time.time()
        warm, warm_s = _run(path, work / name / "warm")
        bench, roof = warm.rung("bench"), warm.rung("roofline")
        row = {"file": name, "dsl": module, "status": warm.status, "cold_status": cold.status,
               "cold_wall_s": cold_s, "warm_wall_s": warm_s,
               "rungs": {r.name: [r.status, r.detail[:300]] for r in warm.rungs},
               "warm_timeline": _timeline(work / name / "warm", started, warm_s)}
        if bench is not None and bench.status == "ok":
            row["median_ms"] = bench.figures["median_ms"]
            base = bench.figures.get("baseline:torch_rms_norm")
            if base:
                row["torch_median_ms"] = base["median_ms"]
        if roof is not None and roof.status == "ok":
            row["pct_of_copy_bandwidth"] = roof.figures["pct_of_copy_bandwidth"]
            row["floor_ms"] = roof.figures["floor_ms"]
        if cold.rung("dumps") is not None:
            row["dumps"] = cold.rung("dumps").figures.get("kernels")
        # One Nsight Compute profile of the kernel's launch, in a run of its own (warm_wall_s stays the loop's).
        profiled, _ = _run(path, work / name / "profile", bench=False, profile=True)
        prof = profiled.rung("profile")
        row["profile"] = {"status": prof.status, "detail": prof.detail[:300],
                          **{k: v for k, v in prof.figures.items() if k != "report"}} if prof else None
        rows.append(row)
        log(f"{name}: {warm.status}, cold {cold_s:.1f} s, warm {warm_s:.1f} s, "
            f"{row.get('median_ms', float('nan')):.4f} ms, torch {row.get('torch_median_ms', float('nan')):.4f} ms, "
            f"{row.get('pct_of_copy_bandwidth', float('nan')):.1f} % of copy bandwidth")
        tl = row["warm_timeline"]
        log(f"  warm: {tl['before_child_s']} s before the child's rungs, "
            + ", ".join(f"{k} {v:.1f}" for k, v in tl["rungs_s"].items()) + f", {tl['after_rungs_s']} s after")
    negative = {}
    for name in NEGATIVE:
        result, seconds = _run(LOOP / name, work / name, bench=False)
        correctness = result.rung("correctness")
        # the wrong file's output: each element off by more than the precision's bound, counted
        outputs = correctness.figures.get("outputs", {}) if correctness else {}
        negative[name] = {"status": result.status, "wall_s": seconds,
                          "rungs": {r.name: [r.status, r.detail[:300]] for r in result.rungs},
                          "outputs": {o: {k: m[k] for k in ("elements", "mismatched", "worst_index", "worst_out",
                                                            "worst_ref", "rel_l2")} for o, m in outputs.items()}}
        log(f"{name}: {result.status} in {seconds:.1f} s: "
            + ", ".join(f"{r.name} {r.status}" for r in result.rungs if r.status != "ok")
            + "".join(f"; {o}: {m['mismatched']} of {m['elements']} elements wrong" for o, m in outputs.items()))
    after, seconds = _run(LOOP / "rmsnorm_triton.py", work / "after_hang", bench=False)
    negative["verify_after_hang"] = {"status": after.status, "wall_s": seconds}
    log(f"the verify after the hang: {after.status} in {seconds:.1f} s")
    path = write_result("loop_table", {"kernels": rows, "negative": negative}, args.out)
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
