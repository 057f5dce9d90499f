"""Every shell command the documentation shows is run (issue 52 item 3), so that the docs cannot rot.

The commands are the lines of each ```bash block in README.md, docs/*.md and examples/*/README.md. A block runs
from the checkout's root; a `cd DIR` line moves the lines after it (within the block). Each line ends one of three
ways: plain (run here, on the CPU, and must exit 0), `# gpu` or `# gpu: why` (run only by the GPU test below, and
must exit 0 there), or `# not run: why` (never run here, with the reason: the README's install line is what .ci/run
does, the suite's own command would run the suite twice). The README's first block is .ci/run's own (it runs the
two lines on a clean clone, and reads them bare: no mark there). The commands run in a copy of the checkout's tracked
files (what a fresh clone has), one copy for all blocks of a file, in order: a later block may use what an earlier
one wrote, as a reader following the page would."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, gpu_ok

BLOCK = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
MARK = re.compile(r"\s+#\s*(gpu|not run)\b:?\s*(.*)$")


@dataclass(frozen=True)
class Command:
    file: str       # the page, relative to the checkout
    line: int       # its line on the page
    cwd: str        # relative to the checkout
    text: str       # the command, without its mark
    mark: str       # "", "gpu" or "not run"
    why: str


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*/README.md"))]


def commands(page: Path) -> list[Command]:
    text = page.read_text()
    out = []
    for k, block in enumerate(BLOCK.finditer(text)):
        if page.name == "README.md" and page.parent == ROOT and k == 0:
            continue  # the install line and the suite's: what .ci/run runs on a clean clone (its lines are bare)
        cwd = "."
        first = text.count("\n", 0, block.start(1)) + 1
        for n, raw in enumerate(block.group(1).splitlines()):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            m = MARK.search(line)
            mark, why = (m.group(1), m.group(2)) if m else ("", "")
            command = line[:m.start()] if m else re.sub(r"\s+#.*$", "", line)
            if command.startswith("cd ") and not mark:
                cwd = os.path.normpath(os.path.join(cwd, command[3:].strip()))
                continue
            out.append(Command(page.relative_to(ROOT).as_posix(), first + n, cwd, command, mark, why))
    return out


ALL = [c for p in pages() for c in commands(p)]


def test_the_pages_show_commands_and_each_unrun_one_says_why():
    assert len(ALL) >= 10
    for c in ALL:
        assert c.mark != "not run" or c.why, f"{c.file}:{c.line}: '# not run' needs its reason"
        assert "..." not in c.text or c.mark == "not run", f"{c.file}:{c.line}: a command with '...' cannot run"


def checkout_copy(folder: Path) -> Path:
    """The tracked files of the checkout (a fresh clone's), copied into ``folder``; without git (the GPU machine's
    copy of the tree), the tree less what git ignores there (virtual environments, caches, build outputs)."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        for rel in filter(None, files.decode().split("\0")):
            src = ROOT / rel
            if src.is_file():
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, folder / rel)
        return folder
    shutil.copytree(ROOT, folder, ignore=shutil.ignore_patterns(".venv", ".whl", "__pycache__", "*.egg-info", ".git",
                                                                 "build", ".pytest_cache", "out"))
    return folder


def run_page(page: str, marks: set[str], tmp_path: Path) -> None:
    todo = [c for c in ALL if c.file == page and c.mark in marks]
    if not todo:
        pytest.skip(f"{page}: no command to run here")
    tree = checkout_copy(tmp_path / "checkout")
    bin_dir = Path(sys.executable).parent  # pipelink and python, as the README's install put them
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tree / "src"), os.environ.get("PYTHONPATH")]))}
    # the copy's own code first, as a clone installed editable runs it; what the caller's path held after it
    for c in todo:
        proc = subprocess.run(["bash", "-c", c.text], cwd=tree / c.cwd, env=env, capture_output=True, text=True,
                              timeout=900)
        assert proc.returncode == 0, f"{c.file}:{c.line}: `{c.text}` (in {c.cwd}) exited {proc.returncode}:\n" \
                                     f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout")
@pytest.mark.parametrize("page", sorted({c.file for c in ALL}))
def test_the_pages_cpu_commands_run_in_a_fresh_checkout(page, tmp_path):
    run_page(page, {""}, tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an NVIDIA GPU (sm_90a)")
@pytest.mark.parametrize("page", sorted({c.file for c in ALL if c.mark == "gpu"}))
def test_the_pages_commands_run_on_the_gpu(page, tmp_path):
    run_page(page, {"", "gpu"}, tmp_path)
