"""What every benchmark JSON records: command, date, machine, GPU, git revision."""

from __future__ import annotations

import datetime
import json
import platform
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def git_revision() -> str:
    """HEAD (with -dirty for uncommitted changes); $PIPELINK_GIT_REVISION where the tree has no .git
    (the device machine gets a copy of the working tree without it)."""
    import os
    if os.environ.get("PIPELINK_GIT_REVISION"):
        return os.environ["PIPELINK_GIT_REVISION"]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).parent).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=Path(__file__).parent).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from pipelink.runtime import gpu_available
    ok, gpu = gpu_available()
    import os
    return {"host": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "gpu": gpu if ok else None}


def write_result(name: str, payload: dict, out_dir: Path | None = None, stamp: str | None = None) -> Path:
    from pipelink.fsutil import write_atomic
    record = {"benchmark": name, "command": " ".join([Path(sys.executable).name, *sys.argv]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "git_revision": git_revision(), "machine": machine(), **payload}
    stamp = stamp or datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    where = "gpu" if record["machine"]["gpu"] else "cpu"
    path = (out_dir or RESULTS) / f"{name}-{where}-{stamp}.json"
    write_atomic(path, json.dumps(record, indent=2))
    return path


class GpuSampler:
    """SM clock, power and temperature sampled by `nvidia-smi -lms` while a block of work runs:
    the H200 lowers its clock under sustained tensor-core load (power limit), and the figures say
    which regime a timing was taken in. Empty where nvidia-smi is missing.

        with GpuSampler() as s: ...;  s.summary() -> {"sm_mhz": {...}, "power_w": {...}, ...}
    """

    def __init__(self, period_ms: int = 100):
        self.period_ms, self.proc, self.rows = period_ms, None, []

    def __enter__(self) -> "GpuSampler":
        import shutil
        smi = shutil.which("nvidia-smi")
        if smi:
            self.proc = subprocess.Popen([smi, "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                                          "--format=csv,noheader,nounits", f"-lms={self.period_ms}"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        for line in out.splitlines():
            try:
                self.rows.append([float(x) for x in line.split(",")])
            except ValueError:
                continue

    def summary(self) -> dict:
        if not self.rows:
            return {}
        import numpy as np
        cols = np.asarray(self.rows)
        return {"samples": len(self.rows), "period_ms": self.period_ms,
                **{name: {"min": float(cols[:, i].min()), "median": float(np.median(cols[:, i])),
                          "max": float(cols[:, i].max())}
                   for i, name in enumerate(("sm_mhz", "power_w", "temp_c"))}}
