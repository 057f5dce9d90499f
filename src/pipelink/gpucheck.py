"""Run a linked kernel on the GPU against a numpy reference, in a child process with a watchdog.

A hung kernel becomes a "hang" result and a crash a "crash" result; the parent never freezes.
Each check draws fresh random inputs several times and poisons the outputs with NaN before each
launch, so unwritten elements fail. (The full rung harness is `pipelink verify`, issue 3.)

    python -m pipelink.gpucheck CHECK OUT_DIR MODE   # prints one JSON line
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

TIMEOUT_S = 60
SEEDS = 3


def run_checks(check: str, out_dir: Path, modes, timeout: float = TIMEOUT_S) -> dict:
    """Parent side: one child per mode, so that one kernel's hang or crash cannot hide another's
    result; each child's JSON line, or a hang/crash verdict."""
    results = {}
    for mode in modes:
        cmd = [sys.executable, "-m", "pipelink.gpucheck", check, str(out_dir), mode]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            results[mode] = {"status": "hang", "detail": f"{check} ({mode}) gave no result within {timeout} s"}
            continue
        try:
            results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])[mode]
        except (json.JSONDecodeError, IndexError, KeyError):
            detail = (proc.stderr or proc.stdout or f"exit {proc.returncode}")[-2000:]
            results[mode] = {"status": "crash", "detail": detail}
    return results


def _load(out_dir: Path, mode: str):
    from .runtime import Runtime
    manifest_path = next((out_dir / mode).glob("*.manifest.json"))
    manifest = json.loads(manifest_path.read_text())
    cubin = manifest_path.with_name(manifest_path.name.replace(".manifest.json", ".cubin")).read_bytes()
    return Runtime(cubin, manifest), manifest


def _rel_l2(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(np.nan_to_num(y, nan=0.0) - ref) / max(np.linalg.norm(ref), 1e-30))


def check_tile_fold(out_dir: Path, mode: str, rng) -> dict:
    """Y[m, j] = bf16(sum_c X[m, c * n + j]) (the demo)."""
    from .runtime import BF16_NAN, bf16_to_float32
    rt, manifest = _load(out_dir, mode)
    (m, k), (_, n) = manifest["params"][0]["shape"], manifest["params"][1]["shape"]
    worst, unwritten, times = 0.0, 0, []
    for seed in range(SEEDS):
        x = rng.standard_normal((m, k), dtype=np.float32)
        dx, dy = rt.to_device(x), rt.to_device(np.full((m, n), BF16_NAN, dtype=np.uint16))
        rt.launch([dx.ptr, dy.ptr])
        rt.synchronize()
        y = bf16_to_float32(rt.to_host(dy, np.uint16, (m, n)))
        ref = x.astype(np.float64).reshape(m, k // n, n).sum(axis=1)
        unwritten += int(np.isnan(y).sum())
        worst = max(worst, _rel_l2(y, ref))
        if seed == 0:
            times = rt.time_ms([dx.ptr, dy.ptr], repeats=20)
        rt.free(dx)
        rt.free(dy)
    # bf16 output: rounding alone gives ~2e-3 relative error; 1e-2 leaves room, not slack for bugs.
    ok = unwritten == 0 and worst < 1e-2
    median = float(np.median(times))
    return {"status": "ok" if ok else "FAILED", "rel_l2_error": worst, "unwritten": unwritten,
            "median_ms": round(median, 4), "GB_per_s": round((m * k * 4 + m * n * 2) / median / 1e6, 1),
            "times_ms": [round(t, 4) for t in times]}


def check_collide(out_dir: Path, mode: str, rng) -> dict:
    """out_sum[t] = sum(x[128 t : 128 t + 128]), out_max[t] = max(...) (examples/collide)."""
    rt, manifest = _load(out_dir, mode)
    (n,) = manifest["params"][0]["shape"]
    tiles = n // 128
    worst, unwritten = 0.0, 0
    for _ in range(SEEDS):
        x = rng.standard_normal(n, dtype=np.float32)
        dx = rt.to_device(x)
        outs = [rt.to_device(np.full(tiles, np.nan, dtype=np.float32)) for _ in range(2)]
        # params: sum.x, sum.out, max.x, max.out
        rt.launch([dx.ptr, outs[0].ptr, dx.ptr, outs[1].ptr])
        rt.synchronize()
        got = [rt.to_host(o, np.float32, (tiles,)) for o in outs]
        blocks = x.astype(np.float64).reshape(tiles, 128)
        for y, ref in zip(got, (blocks.sum(axis=1), blocks.max(axis=1))):
            unwritten += int(np.isnan(y).sum())
            worst = max(worst, _rel_l2(y, ref))
        for buf in (dx, *outs):
            rt.free(buf)
    ok = unwritten == 0 and worst < 1e-5  # fp32 tree sums of 128 values
    return {"status": "ok" if ok else "FAILED", "rel_l2_error": worst, "unwritten": unwritten}


def check_relayout(out_dir: Path, mode: str, rng) -> dict:
    """y = 2 x through an smem -> smem hand-over between two layouts (tests/components)."""
    rt, manifest = _load(out_dir, mode)
    (n,) = manifest["params"][0]["shape"]
    worst, unwritten = 0.0, 0
    for _ in range(SEEDS):
        x = rng.standard_normal(n, dtype=np.float32)
        dx, dy = rt.to_device(x), rt.to_device(np.full(n, np.nan, dtype=np.float32))
        rt.launch([dx.ptr, dy.ptr])
        rt.synchronize()
        y = rt.to_host(dy, np.float32, (n,))
        unwritten += int(np.isnan(y).sum())
        worst = max(worst, _rel_l2(y, 2.0 * x.astype(np.float64)))
        rt.free(dx)
        rt.free(dy)
    return {"status": "ok" if unwritten == 0 and worst == 0.0 else "FAILED", "rel_l2_error": worst,
            "unwritten": unwritten}


CHECKS = {"tile_fold": check_tile_fold, "collide": check_collide, "relayout": check_relayout}


def _child(check: str, out_dir: Path, mode: str) -> dict:
    try:
        return {mode: CHECKS[check](out_dir, mode, np.random.default_rng(2026))}
    except Exception as exc:  # a CUDA error (illegal address, launch failure): a crash, with its name
        return {mode: {"status": "crash", "detail": f"{type(exc).__name__}: {exc}"}}


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1], Path(sys.argv[2]), sys.argv[3])))
