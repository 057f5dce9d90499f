#!/usr/bin/env python3
"""Run the seeded-bug suite: apply each mutant of tests/mutation/mutants.py to a scratch copy of
src/, run the tests that should catch it against that copy, and say whether they did.

    python tests/mutation/run.py                    # every mutant, then a table and a JSON result
    python tests/mutation/run.py alloc-concurrent-ignores-roles review-smem-align
    python tests/mutation/run.py --stage facts --stage check
    python tests/mutation/run.py --list

A mutant is *killed* when its tests fail (pytest exit 1; an import or collection error caused by the
mutant, exit 2, counts too), *survived* when they pass, *error* otherwise (timeout, no test file
present yet, the ``old`` text not found exactly once, pytest usage error). Before the mutants, the
union of their tests runs once on an unmutated scratch copy (the baseline): a test that fails
without a bug would kill every mutant for nothing, so a failing baseline stops the run.

Property tests (hypothesis) run with a fixed seed and a fresh example database, so a run is
repeatable. Each run imports pipelink from the scratch copy (PYTHONPATH first); the plugin scratch_guard.py
refuses to run the tests if the editable install won. Results go to
bench/results/mutation-cpu-<UTC stamp>.json. Exit status 0 only if every selected mutant was killed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
from mutants import MUTANTS, Mutant  # noqa: E402

HYPOTHESIS_SEED = 20261201
_FAILED = re.compile(r"^(?:FAILED|ERROR) (.+?)(?: - (.*))?$", re.M)
_E_LINE = re.compile(r"^E\s+(\S.*)$", re.M)


def make_scratch(prefix: str) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=f"pl-mut-{prefix}-"))
    shutil.copytree(ROOT / "src" / "pipelink", tmp / "src" / "pipelink",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return tmp


def apply(m: Mutant, src: Path) -> str | None:
    """Apply the mutant to the copy under ``src``; returns a reason if it cannot be applied."""
    path = src / "pipelink" / m.file
    if not path.is_file():
        return f"{m.file} does not exist"
    text = path.read_text()
    n = text.count(m.old)
    if n != 1:
        return f"`old` occurs {n} times in {m.file} (must be exactly once): the mutant is stale"
    path.write_text(text.replace(m.old, m.new, 1))
    return None


def env_for(scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    src = scratch / "src"
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(HERE), *filter(None, [env.get("PYTHONPATH")])])
    env["PIPELINK_MUTATION_SRC"] = str(src)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PIPELINK_CACHE_DIR", None)  # the tests' conftest gives each session its own cache
    env.pop("PIPELINK_TEST_CACHE_DIR", None)  # a mutant's build must not come from an unmutated run's
    env["HYPOTHESIS_STORAGE_DIRECTORY"] = str(scratch / "hypothesis")  # no examples carried between runs
    return env


def present(tests: tuple[str, ...] | list[str]) -> tuple[list[str], list[str]]:
    have, missing = [], []
    for t in tests:
        (have if (ROOT / t.split("::")[0]).is_file() else missing).append(t)
    return have, missing


def run_pytest(scratch: Path, tests: list[str], timeout: float) -> dict:
    env = env_for(scratch)
    # which pipelink the run imports is checked inside it: scratch_guard stops pytest (exit 4, an error here)
    # unless it is the scratch copy's
    where = str(scratch / "src" / "pipelink")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "scratch_guard",
           "--basetemp", str(scratch / "pytest"), "-o", "addopts=", "-rfE"]
    if importlib.util.find_spec("hypothesis") is not None:  # property tests: the same examples every run
        cmd.append(f"--hypothesis-seed={HYPOTHESIS_SEED}")
    cmd += tests
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc = None
    return {"rc": rc, "seconds": round(time.monotonic() - start, 1), "output": out or "", "pipelink": where}


def _run_in_order(scratch: Path, tests: list[str], timeout: float) -> dict:
    """The mutant's tests one argument at a time, in its order, until one fails: pytest given a test and
    its file together runs the file in file order, so a fast killer named first would wait for the whole
    file. The seconds are the sum; the timeout is the mutant's in all."""
    spent, r = 0.0, {}
    for test in tests:
        r = run_pytest(scratch, [test], max(1.0, timeout - spent))
        spent += r["seconds"]
        if r["rc"] != 0:  # failed (a kill), or a usage error or timeout (an error): either way, stop
            break
    return {**r, "seconds": round(spent, 1)}


def run_mutant(m: Mutant, timeout: float, keep: bool) -> dict:
    rec = {"id": m.id, "stage": m.stage, "file": m.file, "kill": m.kill, "why": m.why, "tests": list(m.tests)}
    tests, missing = present(m.tests)
    rec.update(tests_run=tests, tests_missing=missing)
    if not tests:
        return {**rec, "status": "error", "note": "none of its test files exist yet", "seconds": 0.0}
    scratch = make_scratch(m.id)
    try:
        reason = apply(m, scratch / "src")
        if reason:
            return {**rec, "status": "error", "note": reason, "seconds": 0.0}
        r = _run_in_order(scratch, tests, timeout)
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
    rc, out = r["rc"], r.pop("output")
    if r.get("status") == "error":
        return {**rec, **r}
    failed = _FAILED.findall(out)  # [(node id, summary)]
    raised = _E_LINE.search(out)   # the first line pytest marks "E": what the failing test saw
    if rc in (1, 2):
        status, note = "killed", ("collection/import error" if rc == 2 else "")
    elif rc == 0:
        status, note = "survived", ""
    elif rc is None:
        status, note = "error", f"timeout after {timeout:.0f} s"
    else:
        status, note = "error", f"pytest exit {rc}"
    rec.update(status=status, rc=rc, seconds=r["seconds"], killed_by=failed[0][0] if failed else None,
               reason=(raised.group(1) if raised else failed[0][1] if failed else "")[:300] or None, note=note,
               pipelink=r["pipelink"])
    if status != "killed":
        rec["output_tail"] = "\n".join(out.splitlines()[-25:])
    return rec


# A smoke baseline: fast files whose tests kill many mutants (a scratch copy that cannot run them would
# count every mutant killed for nothing).
SMOKE = ("tests/inputs/test_expr.py", "tests/link/test_glue_model.py", "tests/link/test_stage_behaviour.py")


def baseline(mutants: list[Mutant], timeout: float, only: tuple[str, ...] | None = None) -> dict:
    tests = list(only) if only else sorted({t for m in mutants for t in present(m.tests)[0]})
    if not tests:
        return {"status": "skipped", "tests": []}
    # Whole files listed anywhere make their node ids redundant.
    files = {t for t in tests if "::" not in t}
    tests = [t for t in tests if "::" not in t or t.split("::")[0] not in files]
    scratch = make_scratch("baseline")
    try:
        r = run_pytest(scratch, tests, timeout * 4)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ok = r.get("rc") == 0
    return {"status": "passed" if ok else "FAILED", "tests": tests, "seconds": r.get("seconds"), "rc": r.get("rc"),
            **({} if ok else {"output_tail": "\n".join(r.get("output", "").splitlines()[-40:])})}


def git_revision() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "tests"], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except OSError:
        return "unknown"


def table(results: list[dict]) -> str:
    rows = [("mutant", "stage", "status", "s", "killed by / note")]
    for r in results:
        rows.append((r["id"], r["stage"], r["status"], f"{r.get('seconds', 0):.1f}",
                     r.get("killed_by") or r.get("note") or ""))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4] for row in rows]
    lines.insert(1, "-" * min(160, max(len(x) for x in lines)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ids", nargs="*", help="mutant ids (default: all)")
    ap.add_argument("--stage", action="append", default=[], help="only mutants of this stage (repeatable)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per mutant (default 300)")
    ap.add_argument("--jobs", "-j", type=int, default=1, help="mutants run at once (default 1)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated baseline run")
    ap.add_argument("--smoke-baseline", action="store_true",
                    help="run the baseline on a few fast test files only: the scratch copy imports and passes (for a "
                         "run right after the whole suite passed on the same source, as in CI)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copies")
    ap.add_argument("--out", type=Path, help="JSON result (default bench/results/mutation-cpu-<stamp>.json)")
    ap.add_argument("--no-json", action="store_true", help="write no JSON result")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = ap.parse_args(argv)

    known = {m.id: m for m in MUTANTS}
    unknown = [i for i in args.ids if i not in known]
    if unknown:
        ap.error(f"unknown mutant(s): {', '.join(unknown)}")
    chosen = [known[i] for i in args.ids] if args.ids else list(MUTANTS)
    if args.stage:
        chosen = [m for m in chosen if m.stage in args.stage]
    if args.list:
        for m in chosen:
            print(f"{m.id:40} {m.stage:9} {m.kill:9} {m.file:20} {m.why}")
        return 0
    if not chosen:
        ap.error("no mutant selected")

    started = datetime.now(timezone.utc)
    t0 = time.monotonic()
    base = {"status": "skipped"}
    if not args.no_baseline:
        print("baseline: the mutants' tests on an unmutated copy ...", flush=True)
        base = baseline(chosen, args.timeout, SMOKE if args.smoke_baseline else None)
        print(f"baseline: {base['status']} ({base.get('seconds', 0)} s)", flush=True)
        if base["status"] == "FAILED":
            print(base.get("output_tail", ""), file=sys.stderr)
            print("the baseline fails: fix the suite before measuring kills", file=sys.stderr)
            return 2

    def one(m: Mutant) -> dict:
        r = run_mutant(m, args.timeout, args.keep)
        print(f"  {r['status']:8} {r.get('seconds', 0):6.1f} s  {m.id}  {r.get('killed_by') or r.get('note') or ''}",
              flush=True)
        return r

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, chosen))
    total_s = round(time.monotonic() - t0, 1)

    killed = [r for r in results if r["status"] == "killed"]
    survived = [r for r in results if r["status"] == "survived"]
    errors = [r for r in results if r["status"] == "error"]
    stages = {}
    for r in results:
        s = stages.setdefault(r["stage"], {"mutants": 0, "killed": 0})
        s["mutants"] += 1
        s["killed"] += r["status"] == "killed"
    summary = {"mutants": len(results), "killed": len(killed), "survived": len(survived), "errors": len(errors),
               "kill_rate": round(len(killed) / len(results), 4), "by_stage": stages,
               "survivors": [r["id"] for r in survived], "error_ids": [r["id"] for r in errors]}
    print()
    print(table(results))
    print(f"\nkilled {len(killed)}/{len(results)} ({100 * summary['kill_rate']:.1f} %), survived {len(survived)}, "
          f"errors {len(errors)}; {total_s} s in all")
    for r in survived + errors:
        print(f"\n--- {r['status']}: {r['id']} ({r['stage']}, {r['file']}): {r['why']}")
        if r.get("tests_missing"):
            print(f"    test files not present yet: {', '.join(r['tests_missing'])}")
        if r.get("note"):
            print(f"    {r['note']}")

    if not args.no_json:
        out = args.out or ROOT / "bench" / "results" / f"mutation-cpu-{started.strftime('%Y%m%dT%H%M%S')}.json"
        doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]) if argv is None else f"run.py {' '.join(argv)}",
               "date": started.isoformat(timespec="seconds"), "git_revision": git_revision(),
               "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
               "timeout_s": args.timeout, "jobs": args.jobs, "total_seconds": total_s, "baseline": base,
               "summary": summary, "results": results}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"\nwrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0 if len(killed) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
