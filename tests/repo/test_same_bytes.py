"""bench/same_bytes.py (issue 53): the glue and cubin of a link are the same bytes when one revision is
linked twice in two fresh worktrees, and a difference in the glue, the cubin or a link's outcome is
reported (exit status 1, the glue's diff shown)."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "same_bytes.py"
LINK = "example/demo/link.toml"


def same_bytes():
    spec = importlib.util.spec_from_file_location("same_bytes_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)


def record(links: dict, glue_texts: dict) -> dict:
    return {"format": same_bytes().FORMAT, "only": None, "modes": None, "families": {}, "links": links,
            "glue_texts": glue_texts, "revision": "test"}


def made(glue: str, cubin: bytes) -> tuple[dict, dict]:
    g = hashlib.sha256(glue.encode()).hexdigest()
    return {"ok": True, "glue": g, "cubin": hashlib.sha256(cubin).hexdigest(), "plan": "p", "manifest": "m"}, {g: glue}


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None, reason="needs the git checkout")
def test_one_revision_twice_is_the_same_bytes_and_a_changed_glue_is_not(tmp_path):
    """HEAD in two fresh worktrees, each with its own cache: the demo link is the same bytes (determinism,
    and no folder of either side reaches the output); the same record with one glue line changed is not."""
    out = tmp_path / "demo.json"
    proc = run("--base", "HEAD", "--rev", "HEAD", "--only", LINK, "--mode", "pipelink", "--record", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "IDENTICAL" in proc.stdout and "1 made on both sides" in proc.stdout, proc.stdout
    assert "pipelink from " in proc.stderr and "/tree-base/src/pipelink/__init__.py" in proc.stderr  # the worktree's own
    rec = json.loads(out.read_text())
    row = rec["links"][LINK]["pipelink"]
    assert row["ok"] and row["glue"] in rec["glue_texts"]

    changed = copy.deepcopy(rec)
    lines = rec["glue_texts"][row["glue"]].splitlines(keepends=True)
    gone = next(i for i, line in enumerate(lines) if "pl_bar_sync(" in line)  # a barrier the glue waits at
    text = "".join(lines[:gone] + lines[gone + 1:])
    new = hashlib.sha256(text.encode()).hexdigest()
    changed["links"][LINK]["pipelink"]["glue"] = new
    changed["glue_texts"] = {new: text}
    (tmp_path / "changed.json").write_text(json.dumps(changed))
    proc = run("--compare", str(out), "--compare", str(tmp_path / "changed.json"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "DIFFERENT" in proc.stdout
    assert f"\n-{lines[gone].rstrip(chr(10))}\n" in proc.stdout  # the unified diff of the two glues
    same = run("--compare", str(out), "--compare", str(out))
    assert same.returncode == 0 and "IDENTICAL" in same.stdout, same.stdout + same.stderr


def test_every_kind_of_difference_is_reported(capsys):
    """The comparison itself, on records: a glue, a cubin, an outcome, a refusal's message and a link missing
    on one side each make the verdict DIFFERENT (exit status 1); the plan alone does not."""
    sb = same_bytes()
    row, texts = made("glue A\n", b"cubin A")
    refused = {"ok": False, "error_type": "PinnedCollision", "typed": True, "error": "barrier 1 pinned twice"}
    base = record({"a": {"pipelink": row}, "r": {"pipelink": refused}}, texts)
    assert sb.report(base, copy.deepcopy(base), "base", "work") == 0

    other_glue, other_texts = made("glue B\n", b"cubin A")
    other_cubin, _ = made("glue A\n", b"cubin B")
    other_plan = {**row, "plan": "q"}
    cases = {"glue": ({"a": {"pipelink": other_glue}}, other_texts),
             "cubin": ({"a": {"pipelink": other_cubin}}, texts),
             "refused on one side": ({"a": {"pipelink": refused}}, {}),
             "another refusal": ({"r": {"pipelink": {**refused, "error": "barrier 2 pinned twice"}}}, texts),
             "missing": ({"a": {}}, texts)}
    for what, (links, glue_texts) in cases.items():
        work = record({**copy.deepcopy(base["links"]), **links}, glue_texts)
        work["links"] = {n: m for n, m in work["links"].items() if m}
        capsys.readouterr()
        assert sb.report(base, work, "base", "work") == 1, what
        assert "DIFFERENT" in capsys.readouterr().out, what
    work = record({"a": {"pipelink": other_plan}, "r": {"pipelink": refused}}, texts)
    assert sb.report(base, work, "base", "work") == 0  # information only
    out = capsys.readouterr().out
    assert "IDENTICAL" in out and "1 plan JSON" in out
    capsys.readouterr()
    sb.report(base, record({"a": {"pipelink": other_glue}, "r": {"pipelink": refused}}, other_texts), "b", "w")
    assert "-glue A\n+glue B" in capsys.readouterr().out  # the glue's unified diff
