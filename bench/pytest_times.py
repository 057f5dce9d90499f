"""A pytest plugin for device runs (`-p pytest_times` with bench/ on PYTHONPATH): appends one JSON line per
test phase to $PYTEST_TIMES as each finishes, so a run cut off by its time limit still says what ran and how
long each test took (pytest's --durations prints only at the end)."""

from __future__ import annotations

import json
import os


def pytest_runtest_logreport(report):
    path = os.environ.get("PYTEST_TIMES")
    # under xdist the controller gets each worker's report again (report.node): the worker has written it
    if not path or hasattr(report, "node") or (report.when != "call" and report.outcome == "passed" and report.duration < 1.0):
        return
    with open(path, "a") as f:
        f.write(json.dumps({"test": report.nodeid, "when": report.when, "outcome": report.outcome,
                            "s": round(report.duration, 2), "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}) + "\n")
