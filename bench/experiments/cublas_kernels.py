"""Which kernel cuBLAS runs for each Qwen shape (torch.matmul, bf16): its name says its tile, its
cluster and whether it splits K, which is what the Qwen link's table is set against at M = 128 and
1024 (bench/NOTES.md, twelfth and thirteenth sessions). Each shape's kernels and their device times
from torch.profiler, 20 launches after a warm-up.

    python bench/experiments/cublas_kernels.py   (writes $OUT/cublas_kernels-<where>-<stamp>.json)
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import log, write_result  # noqa: E402

# M, K, N (N counts gate and up rows for the gate/up shapes), as in examples/qwen_mlp/shapes.py
SHAPES = {"gate_up_128": (128, 5120, 51200), "gate_up_1024": (1024, 5120, 51200),
          "gate_up_4096": (4096, 5120, 51200), "gate_up_8192": (8192, 5120, 51200), "down_4096": (4096, 25600, 5120)}
LAUNCHES = 20


def kernels_of(m: int, k: int, n: int) -> list[dict]:
    import torch
    from torch.profiler import ProfilerActivity, profile
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w = (torch.randn(n, k, device="cuda") / math.sqrt(k)).to(torch.bfloat16)
    for _ in range(5):
        torch.matmul(x, w.t())
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(LAUNCHES):
            torch.matmul(x, w.t())
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        device_us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if e.count and device_us:
            rows.append({"kernel": e.key, "launches": e.count, "mean_us": device_us / e.count,
                         "tflops": 2 * m * n * k / (device_us / e.count * 1e-6) / 1e12})
    return sorted(rows, key=lambda r: -r["mean_us"] * r["launches"])


def main() -> None:
    out = {}
    for name, (m, k, n) in SHAPES.items():
        out[name] = {"M": m, "K": k, "N": n, "kernels": kernels_of(m, k, n)}
        for r in out[name]["kernels"]:
            log(f"{name}: {r['kernel'][:140]}  x{r['launches']}  {r['mean_us']:.1f} us  {r['tflops']:.0f} TFLOP/s")
    path = write_result("cublas_kernels", {"launches": LAUNCHES, "shapes": out}, Path(os.environ.get("OUT", ".")))
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
