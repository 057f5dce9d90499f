"""Summarize one or more `bash bench/gpu_session.sh gpu_suite` runs (their fetched $OUT folders) into one JSON
for bench/results: per run the wall time pytest printed, the outcomes, the worker seconds by file, the slowest
tests and the failures with their first line; the runs in the order given, each labelled.

    python bench/gpu_suite_summary.py --out bench/results/gpu_suite-h100-DATE.json \\
        --run "LABEL=FOLDER" [--run ...] --gpu "NVIDIA H100 ..." --revision REV --note TEXT"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import re
import sys
from pathlib import Path


def summarize(folder: Path) -> dict:
    rows = [json.loads(line) for line in (folder / "gpu_times.jsonl").read_text().splitlines() if line.strip()]
    log = (folder / "pytest_gpu_suite.log").read_text(errors="replace")
    seconds = collections.Counter()
    for r in rows:
        seconds[r["test"].split("::")[0]] += r["s"]
    calls = collections.Counter(r["outcome"] for r in rows if r["when"] == "call")
    final = re.findall(r"^=*\s*(\d+ (?:failed|passed).*?) in ([\d.]+)s", log, re.M)
    wall = re.findall(r"^gpu_suite: (\d+) s", log, re.M)
    failures = [{"test": t, "why": why.strip()[:300]} for t, why in
                re.findall(r"^FAILED (\S+)(?: - (.*))?$", log, re.M)]
    return {
        "pytest_summary": final[-1][0] if final else None,
        "pytest_seconds": float(final[-1][1]) if final else None,
        "wall_seconds": int(wall[-1]) if wall else None,
        "finished": bool(final),
        "call_outcomes": dict(calls),
        "worker_seconds_total": round(sum(seconds.values()), 1),
        "worker_seconds_by_file": {f: round(s, 1) for f, s in seconds.most_common()},
        "slowest": [{"test": r["test"], "phase": r["when"], "s": r["s"]} for r in
                    sorted(rows, key=lambda r: -r["s"])[:10]],
        "failed": failures,
        "skipped": re.findall(r"^SKIPPED \[\d+\] (.*)$", log, re.M),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--run", action="append", required=True, help="LABEL=FOLDER (a fetched $OUT)")
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--revision", required=True)
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    runs = {}
    for item in args.run:
        label, _, folder = item.partition("=")
        runs[label] = summarize(Path(folder))
    record = {"command": "bash bench/gpu_session.sh gpu_suite; python " + " ".join(sys.argv),
              "date": datetime.date.today().isoformat(), "gpu": args.gpu, "git_revision": args.revision,
              "note": args.note, "runs": runs}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
