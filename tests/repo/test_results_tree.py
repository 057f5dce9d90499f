"""bench/results holds the data the docs stand on, and no more (issue 53, item 4). For every file of it
that git tracks:

- size: at most 300 KB each, 3 MB all together; a result JSON over 100 KB is committed gzipped
  (`X.json.gz`, `gzip -9n X.json`; bench/readme_results.py and bench/plots.py read both);
- cited: its file name, or its name less a trailing `.gz` (`X.json` cites `X.json.gz`, `X.log` cites
  `X.log.gz`), appears in README.md, bench/NOTES.md, a Markdown file of docs/, or a Python or shell file
  of bench/, tests/, src/ or examples/ (code that names a file as its evidence keeps it). A file cited
  with a commit, `<sha>:bench/results/<path>`, has left the tree: that citation does not count for a
  tracked file, and the commit must hold the path (checked for README.md, bench/NOTES.md and docs/,
  where the clone has that commit).

What counts is what git tracks (`git ls-files`), so the outputs of a local run that are not added do not
fail it; where git is missing or this is not a checkout, every file in the folder counts. Everything else a
run writes is git-ignored by default (.gitignore says the rule); bench/NOTES.md's first section says which
commit holds what left the tree.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = "bench/results"
FILE_LIMIT = 300_000
TREE_LIMIT = 3_000_000
PLAIN_JSON_LIMIT = 100_000
CITING = ("README.md", "bench/NOTES.md", "docs/**/*.md", "bench/**/*.py", "bench/**/*.sh", "tests/**/*.py",
          "src/**/*.py", "examples/**/*.py")
IN_HISTORY = re.compile(r"\b([0-9a-f]{7,40}):(bench/results/\w[^`\s'\")]*)")


def _git(*args: str, stdin: str | None = None) -> str | None:
    """git's output in ROOT, or None where git is missing or ROOT is not a checkout."""
    try:
        proc = subprocess.run(["git", "-C", str(ROOT), *args], input=stdin, capture_output=True, text=True,
                              timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def tracked() -> dict[str, int]:
    """Each file under bench/results (its path from ROOT) and its size in bytes."""
    listed = _git("ls-files", "-z", "--", RESULTS)
    if listed is None:
        paths = [p.relative_to(ROOT).as_posix() for p in (ROOT / RESULTS).rglob("*") if p.is_file()]
    else:
        paths = [p for p in listed.split("\0") if p]
    return {p: (ROOT / p).stat().st_size for p in paths if (ROOT / p).is_file()}


def citing_text(patterns: tuple[str, ...] = CITING) -> str:
    """Everything that may cite a result file, one string."""
    files = {p for pattern in patterns for p in ROOT.glob(pattern) if p.is_file() and ".venv" not in p.parts}
    return "\n".join(p.read_text(errors="replace") for p in sorted(files))


def problems(files: dict[str, int], text: str) -> list[str]:
    """What is wrong with ``files`` (path -> bytes) when ``text`` is what cites them."""
    found = []
    for path, size in sorted(files.items()):
        if size > FILE_LIMIT:
            found.append(f"{path}: {size / 1e3:.0f} KB, over {FILE_LIMIT // 1000} KB")
        if path.endswith(".json") and size > PLAIN_JSON_LIMIT:
            found.append(f"{path}: a {size / 1e3:.0f} KB JSON, commit it gzipped (gzip -9n; cite it as .json.gz)")
    total = sum(files.values())
    if total > TREE_LIMIT:
        found.append(f"{RESULTS}: {total / 1e6:.2f} MB in all, over {TREE_LIMIT / 1e6:.0f} MB")
    here = IN_HISTORY.sub("", text)  # a citation with a commit is not one of the tree
    for path in sorted(files):
        name = path.rsplit("/", 1)[-1]
        if name not in here and name.removesuffix(".gz") not in here:
            found.append(f"{path}: nothing cites it (README.md, bench/NOTES.md, docs/, the code): git rm it, "
                         "and cite it as <commit>:" + path + " where the notes need it")
    return found


def test_every_file_is_small_and_cited_and_the_tree_is_under_3_mb():
    files = tracked()
    assert files, f"no files under {RESULTS}"
    found = problems(files, citing_text())
    assert not found, "\n".join(found)


def test_a_file_cited_with_a_commit_is_in_that_commit():
    cited = sorted(set(IN_HISTORY.findall(citing_text(("README.md", "bench/NOTES.md", "docs/**/*.md")))))
    commits = sorted({sha for sha, _ in cited})
    present = _git("cat-file", "--batch-check", stdin="".join(f"{sha}^{{commit}}\n" for sha in commits))
    if present is None:
        return  # no git here: nothing to look in
    known = {sha for sha, line in zip(commits, present.splitlines()) if not line.endswith("missing")}
    wanted = [f"{sha}:{path.rstrip('.,;:')}" for sha, path in cited if sha in known]  # a shallow clone lacks some
    answer = _git("cat-file", "--batch-check", stdin="".join(f"{w}\n" for w in wanted)) or ""
    missing = [w for w, line in zip(wanted, answer.splitlines()) if line.endswith("missing")]
    assert not missing, "cited with a commit that does not hold it:\n" + "\n".join(missing)


def test_the_checks_catch_a_big_file_a_big_plain_json_an_uncited_file_and_a_full_tree():
    cited = "`bench/results/a-gpu-1.json.gz`, `x.json`, `logs/t.log`, `b8ef828:bench/results/old.log.gz`"
    assert problems({"bench/results/a-gpu-1.json.gz": 1000, "bench/results/x.json": 90_000,
                     "bench/results/logs/t.log.gz": 300}, cited) == []
    found = problems({"bench/results/a-gpu-1.json.gz": 400_000, "bench/results/x.json": 120_000,
                      "bench/results/old.log.gz": 10, "bench/results/y.png": 10}, cited)
    assert [f.split(":")[0] for f in found] == ["bench/results/a-gpu-1.json.gz", "bench/results/x.json",
                                                "bench/results/old.log.gz", "bench/results/y.png"]
    full = {f"bench/results/r{i}.json": 99_000 for i in range(31)}
    assert problems(full, " ".join(full)) == ["bench/results: 3.07 MB in all, over 3 MB"]
