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
