"""The watched child of `pipelink verify`: run a command in its own process group under a
timeout, and turn its progress file into rungs (a rung that started and never ended hung or
crashed). Shared by the link loop (runner.py) and the kernel-file loop (pykernel.py).

Inside ``with warm_child():`` the link loop's jobs go to one child that serves job after job
(WarmChild): a loop of verifies (a test suite, a tuning sweep) pays the interpreter, torch's import
and the CUDA context once, not once a verify. Each job is still watched with its own timeout; a
hang kills that child and a device fault ends it, and the next job gets a fresh one."""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..backend.nvjitlink import WORKING_FOLDER_LOCK
from ..fsutil import write_atomic
from .results import Rung


_LISTENER: contextvars.ContextVar = contextvars.ContextVar("pipelink_rung_listener", default=None)


@contextlib.contextmanager
def rung_listener(listen):
    """Within it, ``listen(record)`` hears each "start" and "done" record a verify child writes, while the child
    runs (the command line's progress bar): {"event": "start", "rung": name} and {"event": "done", "rung": name,
    "status": ..., "seconds": ...}."""
    token = _LISTENER.set(listen)
    try:
        yield
    finally:
        _LISTENER.reset(token)


class _ProgressTail:
    """The new whole lines of a child's progress file, handed to a listener (read at most every 0.1 s)."""

    def __init__(self, path: Path, listen) -> None:
        self.path, self.listen, self.at, self.last = path, listen, 0, 0.0

    def __call__(self, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last < 0.1:
            return
        self.last = now
        try:
            with open(self.path, "rb") as f:
                f.seek(self.at)
                data = f.read(1 << 20)
        except FileNotFoundError:
            return
        whole = data[:data.rfind(b"\n") + 1]
        self.at += len(whole)
        for line in whole.decode(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") in ("start", "done"):
                self.listen(record)


def run_watched(cmd: list[str], timeout: float, env: dict | None = None, poll=None) -> tuple[int | None, str]:
    """Run ``cmd`` in its own process group; kill the group after ``timeout`` s. Returns
    (exit code, or None on timeout; the tail of its output, stdout then stderr). ``poll()``, where given, is
    called about every 0.2 s while it runs."""
    with WORKING_FOLDER_LOCK:  # not while a link in another thread has switched to its empty folder (it inherits it)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env=env)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:  # a retried communicate loses no output (subprocess's documentation)
                out, err = proc.communicate(timeout=timeout if poll is None else
                                            max(0.0, min(0.2, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if poll is None or time.monotonic() >= deadline:
                    raise
                poll()
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
            if rec["event"] in ("ready", "exit"):  # the child is up / done (their stamps are for timelines)
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


def run_child(job: dict, folder: Path, timeout: float, kernel: str, shared: bool = False) -> list[Rung]:
    """The GPU rungs of ``job`` (its "rungs"), run by `python -m pipelink.verify.child` in a watched
    process: the job written to ``folder``/job.json, a fresh progress file, and a budget of the
    rungs' timeout plus the child's start (torch import, context) and the roofline's peak probes.
    A ``shared`` job (a linked kernel's: no user module imported but the reference) goes to the warm
    child where ``warm_child()`` keeps one and no other job holds it."""
    progress = Path(job["progress"])
    progress.unlink(missing_ok=True)
    job_path = write_atomic(folder / "job.json", json.dumps(job, indent=2))
    budget = timeout + 20 + (30 if "roofline" in job["rungs"] else 0)
    listen = _LISTENER.get()
    poll = _ProgressTail(progress, listen) if listen is not None else None
    served = _WARM.run(job_path.resolve(), progress, budget, poll) if shared and _WARM is not None else None
    code, err = served or run_watched([sys.executable, "-m", "pipelink.verify.child", str(job_path)], budget,
                                      child_env(), poll)
    if poll is not None:
        poll(final=True)
    return read_progress(progress, job["rungs"], code, err, budget, kernel)


class WarmChild:
    """One `python -m pipelink.verify.child --serve` kept between jobs. Started on the first job, and again after
    one that hung (killed), crashed (the child ends itself) or found the environment or working folder changed
    since the child started (it would run with the old ones). One job at a time: a second thread's job runs in
    a child of its own."""

    def __init__(self):
        self._proc: subprocess.Popen | None = None
        self._started_with: tuple | None = None  # (environment, working folder) the child inherited
        self._busy = threading.Lock()
        self.started = 0  # children started so far (a test reads it)

    def run(self, job_path: Path, progress: Path, budget: float, poll=None) -> tuple[int | None, str] | None:
        """(exit code, None on timeout; the tail of the job's output), or None where another job holds the child."""
        if not self._busy.acquire(blocking=False):
            return None
        try:
            log = job_path.with_name("child.log")
            log.unlink(missing_ok=True)
            try:
                self._send({"job": str(job_path), "log": str(log)}, log)
            except OSError:  # it died between the check and the write (a broken pipe): a child of the job's own
                self.close(kill=True)
                return None
            code = self._wait(progress, budget, poll)
            text = log.read_text(errors="replace") if log.exists() else ""
            return code, text[-6000:].strip()
        finally:
            self._busy.release()

    def _send(self, request: dict, log: Path) -> None:
        env, cwd = child_env(), os.getcwd()
        # pytest names the running test in the environment: a change the child need not start again for
        seen = ({k: v for k, v in env.items() if k != "PYTEST_CURRENT_TEST"}, cwd)
        if self._proc is not None and (self._proc.poll() is not None or self._started_with != seen):
            self.close()
        if self._proc is None:  # what it prints before it reads the job (an import that fails) goes to the job's log
            with WORKING_FOLDER_LOCK, open(log, "ab") as early:  # as run_watched: not in a link's temporary folder
                self._proc = subprocess.Popen([sys.executable, "-m", "pipelink.verify.child", "--serve"],
                                              stdin=subprocess.PIPE, stdout=early, stderr=early, text=True,
                                              start_new_session=True, env=env)
            self._started_with = seen
            self.started += 1
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()

    def _wait(self, progress: Path, budget: float, poll=None) -> int | None:
        """The job's exit code from its progress file's last record; the child's where it died first; None (and
        the child killed) where the budget ran out."""
        deadline = time.monotonic() + budget
        while True:
            code = _exit_code(progress)
            if code is not None:
                if code:  # the child ends itself after a fault
                    self.close()
                return code
            died = self._proc.poll()
            if died is not None:
                self._proc = None
                code = _exit_code(progress)
                return died if code is None else code
            if time.monotonic() > deadline:
                self.close(kill=True)
                return None
            if poll is not None:
                poll()
            time.sleep(0.02)

    def close(self, kill: bool = False) -> None:
        """End the child: stdin closed (it finishes its loop), then its process group killed if it lingers; with
        ``kill`` (a job that ran out of time) killed at once."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout=0 if kill else 2)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _exit_code(progress: Path) -> int | None:
    """The code of the job's "exit" record, the last line the child writes (None before it)."""
    try:
        text = progress.read_text()
    except FileNotFoundError:
        return None
    last = text.rstrip("\n").rpartition("\n")[2]
    if '"exit"' not in last or not text.endswith("\n"):
        return None
    record = json.loads(last)
    return record["code"] if record.get("event") == "exit" else None


_WARM: WarmChild | None = None


@contextlib.contextmanager
def warm_child():
    """Inside the block, every link verify's GPU rungs run in one child that serves job after job (see
    WarmChild); nested blocks share the outer one's. The child ends with the outermost block."""
    global _WARM
    outer = _WARM
    if outer is None:
        _WARM = WarmChild()
    try:
        yield _WARM
    finally:
        if outer is None:
            _WARM.close()
            _WARM = None
