"""The warm verify child (verify/watch.py: WarmChild, warm_child) on the CPU: one process serves job after job,
each job still watched with its own timeout; a job that hangs is killed and one that kills its process is
reported, and the next job gets a fresh child; a changed environment starts a new one; a second thread's job
never waits behind the first. The jobs here fail to load their kernel (no GPU, no torch, or no such file), which
is enough for the child to run them to their end."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from pipelink.verify import watch
from pipelink.verify.watch import WarmChild, read_progress, run_child, warm_child


def _job(folder, name: str, rungs=("run", "correctness"), progress=None) -> tuple:
    """A linked-kernel job whose files do not exist: each rung fails with the loader's error, the child goes on."""
    work = folder / name
    work.mkdir()
    job = {"kernel": {"cubin": str(work / "missing.cubin"), "manifest": str(work / "missing.json")},
           "facts": {}, "rungs": list(rungs), "out_dir": str(work), "progress": str(progress or work / "progress.jsonl")}
    path = work / "job.json"
    path.write_text(json.dumps(job))
    return path, job


def _pid(job: dict) -> int:
    lines = [json.loads(line) for line in open(job["progress"])]
    return next(r["pid"] for r in lines if r["event"] == "ready")


@pytest.fixture
def child():
    warm = WarmChild()
    yield warm
    warm.close()


def test_one_child_serves_job_after_job(tmp_path, child):
    pids = []
    for name in ("a", "b", "c"):
        path, job = _job(tmp_path, name)
        code, text = child.run(path, tmp_path / name / "progress.jsonl", budget=60)
        assert code == 0, text
        rungs = read_progress(tmp_path / name / "progress.jsonl", job["rungs"], code, text, 60, "k")
        assert [r.status for r in rungs] == ["FAILED", "FAILED"] and all("Error" in r.detail for r in rungs)
        pids.append(_pid(job))
    assert child.started == 1 and len(set(pids)) == 1 and pids[0] != os.getpid()
    records = [json.loads(line) for line in open(tmp_path / "c" / "progress.jsonl")]
    assert records[-1]["event"] == "exit" and records[-1]["code"] == 0  # the job's end, read by the parent


def test_a_job_that_hangs_is_killed_at_its_budget_and_the_next_gets_a_new_child(tmp_path, child):
    path, job = _job(tmp_path, "first")
    assert child.run(path, tmp_path / "first" / "progress.jsonl", budget=60)[0] == 0
    stuck = tmp_path / "stuck.json"
    os.mkfifo(stuck)  # the child blocks reading it: a job that never ends
    t0 = time.monotonic()
    code, _ = child.run(stuck, tmp_path / "stuck.progress", budget=2)
    assert code is None and 2 <= time.monotonic() - t0 < 10
    path, job = _job(tmp_path, "after")
    code, text = child.run(path, tmp_path / "after" / "progress.jsonl", budget=60)
    assert code == 0, text
    assert child.started == 2


def test_a_child_that_dies_is_reported_with_its_output_and_replaced(tmp_path, child):
    path, job = _job(tmp_path, "dies", progress=tmp_path / "no such folder" / "progress.jsonl")
    code, text = child.run(path, tmp_path / "no such folder" / "progress.jsonl", budget=60)
    assert code == 1 and "FileNotFoundError" in text and "no such folder" in text
    rungs = read_progress(tmp_path / "no such folder" / "progress.jsonl", job["rungs"], code, text, 60, "k")
    assert [r.status for r in rungs] == ["skipped", "skipped"] and "exited with 1" in rungs[0].detail
    path, job = _job(tmp_path, "next")
    assert child.run(path, tmp_path / "next" / "progress.jsonl", budget=60)[0] == 0
    assert child.started == 2


def test_a_changed_environment_or_folder_starts_a_new_child(tmp_path, child, monkeypatch):
    pids = []
    for i, change in enumerate([None, ("env", "PIPELINK_WATCH_TEST", "1"), ("cwd", tmp_path), None]):
        if change and change[0] == "env":
            monkeypatch.setenv(change[1], change[2])
        elif change:
            monkeypatch.chdir(change[1])
        path, job = _job(tmp_path, f"j{i}")
        assert child.run(path, tmp_path / f"j{i}" / "progress.jsonl", budget=60)[0] == 0
        pids.append(_pid(job))
    assert child.started == 3 and pids[0] != pids[1] != pids[2] == pids[3]


def test_a_second_threads_job_does_not_wait_for_the_child(tmp_path, child):
    stuck = tmp_path / "stuck.json"
    os.mkfifo(stuck)
    holder = threading.Thread(target=child.run, args=(stuck, tmp_path / "stuck.progress", 4))
    holder.start()
    time.sleep(0.5)
    path, _ = _job(tmp_path, "other")
    assert child.run(path, tmp_path / "other" / "progress.jsonl", budget=60) is None  # run_child starts its own
    holder.join()


def test_run_child_sends_shared_jobs_to_the_warm_child_only(tmp_path):
    outer = watch._WARM  # a GPU test's, where one ran before in this process (conftest)
    with warm_child() as warm:
        with warm_child() as inner:
            assert inner is warm  # nested blocks share the outer child
        before = warm.started
        pids = []
        for name, shared in (("a", True), ("b", True), ("c", False)):
            _, job = _job(tmp_path, name)
            rungs = run_child(job, tmp_path / name, timeout=60, kernel="k", shared=shared)
            assert [r.status for r in rungs] == ["FAILED", "FAILED"]
            pids.append(_pid(job))
        assert warm.started - before <= 1 and pids[0] == pids[1] != pids[2]
    assert outer is not None or warm._proc is None  # the outermost block ended it
