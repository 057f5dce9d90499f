"""The watched child of `pipelink verify`: run a command in its own process group under a
timeout, and turn its progress file into rungs (a rung that started and never ended hung or
crashed). Shared by the link loop (runner.py) and the kernel-file loop (pykernel.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from ..backend.nvjitlink import WORKING_FOLDER_LOCK
from ..fsutil import write_atomic
from .results import Rung


def run_watched(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int | None, str]:
    """Run ``cmd`` in its own process group; kill the group after ``timeout`` s. Returns
    (exit code, or None on timeout; the tail of its output, stdout then stderr)."""
    with WORKING_FOLDER_LOCK:  # not while a link in another thread has switched to its empty folder (it inherits it)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    return code, (out[-2000:] + err[-4000:]).strip()


def read_progress(path: Path, planned: list[str], returncode: int | None, stderr: str, timeout: float,
                  kernel: str) -> list[Rung]:
    """Rungs from the child's progress file; the rung that started but never ended hung (timeout)
    or crashed (the child died); rungs never started are skipped, saying why."""
    done: dict[str, Rung] = {}
    started: list[str] = []
    if path.exists():
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["event"] == "ready":  # the child's interpreter is up (its stamp is for timelines)
                continue
            if rec["event"] == "start":
                started.append(rec["rung"])
            else:
                done[rec["rung"]] = Rung(rec["rung"], rec["status"], rec["detail"], rec["figures"], rec["seconds"])
    rungs, stopper = [], None
    for name in planned:
        if name in done:
            rungs.append(done[name])
        elif name in started and stopper is None:
            stopper = name
            if returncode is None:
                rungs.append(Rung(name, "hang", f"kernel {kernel} did not finish within {timeout:g} s in rung "
                                  f"'{name}'; the child was killed", {"kernel": kernel, "rung": name,
                                                                     "timeout_s": timeout}, timeout))
            else:
                rungs.append(Rung(name, "crash", f"child exited with {returncode}: {stderr.strip()[-800:]}",
                                  {"kernel": kernel, "rung": name, "exit": returncode}))
        else:
            why = f"not run: '{stopper}' ended the GPU child" if stopper else (
                f"not run: the GPU child exited with {returncode} before it: {stderr.strip()[-300:]}")
            rungs.append(Rung(name, "skipped", why))
    return rungs


def child_env() -> dict:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])  # the folder holding the pipelink package
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    return env


def run_child(job: dict, folder: Path, timeout: float, kernel: str) -> list[Rung]:
    """The GPU rungs of ``job`` (its "rungs"), run by `python -m pipelink.verify.child` in a watched
    process: the job written to ``folder``/job.json, a fresh progress file, and a budget of the
    rungs' timeout plus the child's start (torch import, context) and the roofline's peak probes."""
    progress = Path(job["progress"])
    progress.unlink(missing_ok=True)
    job_path = write_atomic(folder / "job.json", json.dumps(job, indent=2))
    budget = timeout + 20 + (30 if "roofline" in job["rungs"] else 0)
    code, err = run_watched([sys.executable, "-m", "pipelink.verify.child", str(job_path)], budget, child_env())
    return read_progress(progress, job["rungs"], code, err, budget, kernel)
