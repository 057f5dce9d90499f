"""Roofline: a kernel's FLOPs and bytes against peaks measured on this device (cached per device).

Peaks: copy bandwidth (a 1 GiB device-to-device copy, bytes read + written), streaming read
bandwidth (`x.sum()` over 1 GiB of fp32: what a kernel that mostly reads can reach) and the bf16
matrix rate (an 8192^3 torch.matmul on random data), each the median of 20 runs timed as kernels
are (verify/timing.py: warmed up, the GPU kept busy while the host enqueues, so the clock is the
loaded one and no launch gap is timed; idle between synchronized launches the H200 drops its clock
and read 3.92 TB/s where the same read measures 4.38-4.45 under load, bench/NOTES.md issue 12).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..backend.cache import default_root
from ..fsutil import write_atomic
from .timing import time_launches

PEAKS_VERSION = 3  # 2: read bandwidth added; 3: timed like the kernels (time_launches)


def _median_ms(fn) -> float:
    return statistics.median(time_launches(lambda i: fn(), reps=20, warmup=3))


def _copy_ms(n_bytes: int) -> float:
    import torch
    src = torch.empty(n_bytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    return _median_ms(lambda: dst.copy_(src))


def _read_ms(n_bytes: int) -> float:
    import torch
    x = torch.ones(n_bytes // 4, dtype=torch.float32, device="cuda")
    return _median_ms(lambda: x.sum())


def _matmul_ms(n: int) -> float:
    import torch
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return _median_ms(lambda: a @ b)


def measure_peaks() -> dict:
    n_bytes, n = 1 << 30, 8192
    copy_ms, read_ms, mm_ms = _copy_ms(n_bytes), _read_ms(n_bytes), _matmul_ms(n)
    return {"copy_bytes_per_s": 2 * n_bytes / (copy_ms * 1e-3), "read_bytes_per_s": n_bytes / (read_ms * 1e-3),
            "bf16_flops_per_s": 2 * n**3 / (mm_ms * 1e-3), "copy_ms": copy_ms, "read_ms": read_ms, "matmul_ms": mm_ms,
            "how": "median of 20 (verify/timing.time_launches): 1 GiB copy (read+write), x.sum() over 1 GiB fp32 "
                   "(read), 8192^3 bf16 matmul"}


def device_peaks(refresh: bool = False) -> dict:
    """Measured peaks of GPU 0, cached per device name and driver under the pipelink cache."""
    import torch
    props = torch.cuda.get_device_properties(0)
    key = f"{props.name}-{torch.version.cuda}-v{PEAKS_VERSION}".replace(" ", "_").replace("/", "_")
    path = default_root() / "peaks" / f"{key}.json"
    if path.exists() and not refresh:
        data = json.loads(path.read_text())
        data["cached"] = True
        return data
    data = {"device": props.name, **measure_peaks()}
    write_atomic(path, json.dumps(data, indent=2))
    data["cached"] = False
    return data


def roofline(flops: float, bytes_moved: float, median_ms: float, peaks: dict, read_bytes: float) -> dict:
    """``bytes_moved`` counts every operand (the copy-bandwidth floor); ``read_bytes`` the inputs only,
    against the streaming-read bandwidth (the floor of a kernel that mostly reads)."""
    seconds = median_ms * 1e-3
    t_compute = flops / peaks["bf16_flops_per_s"]
    t_memory = bytes_moved / peaks["copy_bytes_per_s"]
    floor = max(t_compute, t_memory)
    return {
        "flops": flops, "bytes": bytes_moved, "intensity_flop_per_byte": flops / bytes_moved if bytes_moved else None,
        "achieved_flops_per_s": flops / seconds, "achieved_bytes_per_s": bytes_moved / seconds,
        "pct_of_bf16_peak": 100 * flops / seconds / peaks["bf16_flops_per_s"],
        "pct_of_copy_bandwidth": 100 * bytes_moved / seconds / peaks["copy_bytes_per_s"],
        "bound": "memory" if t_memory >= t_compute else "compute", "floor_ms": floor * 1e3,
        "pct_of_roofline": 100 * floor / seconds,
        "read_bytes": read_bytes, "pct_of_read_bandwidth": 100 * read_bytes / seconds / peaks["read_bytes_per_s"],
    }


def plot(r: dict, peaks: dict, path: Path, label: str) -> Path:
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    bw, peak = peaks["copy_bytes_per_s"], peaks["bf16_flops_per_s"]
    xs = np.logspace(-2, 4, 200)
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.loglog(xs, np.minimum(peak, xs * bw) / 1e12, color="black", label="roofline (measured peaks)")
    intensity = r["intensity_flop_per_byte"] or 1e-2
    ax.loglog([intensity], [r["achieved_flops_per_s"] / 1e12], "o", color="tab:red",
              label=f"{label}: {r['pct_of_roofline']:.0f}% of roofline")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{label}: {r['bound']}-bound; copy {bw / 1e12:.2f} TB/s, bf16 {peak / 1e12:.0f} TFLOP/s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return write_atomic(path, buf.getvalue())
