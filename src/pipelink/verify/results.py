"""The verify result types: each named step of the loop (a rung) is ok / FAILED / skipped / hang /
crash, with its figures; all are collected into one JSON result and a terminal table."""

from __future__ import annotations

import datetime
import subprocess
import sys
from dataclasses import asdict, dataclass, field

from .._version import __version__
from ..verify_terms import RUNGS

STATUSES = ("ok", "FAILED", "skipped", "hang", "crash")
RESULT_FORMAT = 1


@dataclass
class Rung:
    name: str
    status: str
    detail: str = ""
    figures: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status in ("FAILED", "hang", "crash")


@dataclass
class VerifyResult:
    kernel: str
    spec: str
    mode: str
    out_dir: str
    device: str | None
    rungs: list[Rung] = field(default_factory=list)
    date: str = field(default_factory=lambda: datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    command: str = field(default_factory=lambda: " ".join(sys.argv))
    git_revision: str | None = None   # of the folder holding the spec, when it is a git checkout

    @property
    def status(self) -> str:
        """'fail' if a rung failed; 'not run' if none failed but the kernel never ran (no GPU, or
        the GPU child died before its first rung): compiled and checked only, which is no pass;
        'unchecked' if it ran but no reference checked its output (the correctness rung skipped):
        no pass either."""
        if any(r.failed for r in self.rungs):
            return "fail"
        run = self.rung("run")
        if run is None or run.status != "ok":
            return "not run"
        correctness = self.rung("correctness")
        return "pass" if correctness is not None and correctness.status == "ok" else "unchecked"

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def rung(self, name: str) -> Rung | None:
        return next((r for r in self.rungs if r.name == name), None)

    def to_json(self) -> dict:
        return {"format": RESULT_FORMAT, "kernel": self.kernel, "spec": self.spec, "mode": self.mode,
                "out_dir": self.out_dir, "device": self.device, "date": self.date, "command": self.command,
                "pipelink_version": __version__, "git_revision": self.git_revision,
                "status": self.status, "rungs": [asdict(r) for r in self.rungs]}


def git_revision(folder) -> str | None:
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def result_schema() -> dict:
    """JSON Schema of verify.json (tests validate results against it)."""
    rung = {"type": "object", "required": ["name", "status", "detail", "figures", "seconds"],
            "properties": {"name": {"anyOf": [{"enum": list(RUNGS)},  # a user's rung: an identifier
                                              {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}]},
                           "status": {"enum": list(STATUSES)},
                           "detail": {"type": "string"}, "figures": {"type": "object"},
                           "seconds": {"type": "number"}}, "additionalProperties": False}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "pipelink verify result",
            "type": "object", "additionalProperties": False,
            "required": ["format", "kernel", "spec", "mode", "out_dir", "device", "date", "command",
                         "pipelink_version", "git_revision", "status", "rungs"],
            "properties": {"format": {"const": RESULT_FORMAT}, "kernel": {"type": "string"},
                           "command": {"type": "string"}, "pipelink_version": {"type": "string"},
                           "git_revision": {"type": ["string", "null"]},
                           "spec": {"type": "string"}, "mode": {"type": "string"}, "out_dir": {"type": "string"},
                           "device": {"type": ["string", "null"]}, "date": {"type": "string"},
                           "status": {"enum": ["pass", "fail", "not run", "unchecked"]},
                           "rungs": {"type": "array", "items": rung}}}


def _short(figures: dict) -> str:
    parts = []
    for k, v in figures.items():
        if isinstance(v, (dict, list)):
            continue
        parts.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")
    return ", ".join(parts)


def print_table(result: VerifyResult, console=None) -> None:
    from rich.console import Console
    from rich.markup import escape  # names, details and paths shown as written, never read as markup
    from rich.table import Table
    con = console or Console()
    colors = {"ok": "green", "FAILED": "red", "hang": "red", "crash": "red", "skipped": "dim"}
    t = Table(title=escape(f"pipelink verify: {result.kernel} ({result.mode} mode) on {result.device or 'no GPU'}"),
              title_justify="left")
    for col in ("rung", "status", "s", "figures / detail"):
        t.add_column(col, justify="right" if col == "s" else "left")
    for r in result.rungs:
        text = "; ".join(x for x in (_short(r.figures), r.detail) if x)
        t.add_row(escape(r.name), f"[{colors[r.status]}]{r.status}[/]", f"{r.seconds:.2f}", escape(text))
    con.print(t)
    skipped = [r.name for r in result.rungs if r.status == "skipped"]
    note = escape(f" ({len(skipped)} rung(s) skipped: {', '.join(skipped)})") if skipped else ""
    if result.status == "not run":
        why = "no GPU" if result.device is None else "the GPU child did not start"
        verdict = f"[yellow]NOT RUN ({why})[/]: compiled and checked only, the kernel was not run"
    elif result.status == "unchecked":
        verdict = ("[yellow]UNCHECKED[/]: the kernel ran, but no reference checked its output (set [verify] "
                   "reference = 'file.py:function')")
    else:
        verdict = "[green]PASS[/]" if result.passed else "[red]FAIL[/]"
    con.print(f"{verdict}{note} — {escape(str(result.out_dir))}/verify.json")
