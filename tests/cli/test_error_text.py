"""What the console shows is what pipelink said (issue 48 item 4): text from contracts, specs, findings
and hints reaches the terminal as written. rich reads `[[smem]]` or `[contract: smem.buf]` as markup
and drops it unless escaped; the JSON output always had it intact. (The global-port dtype hint of
item 4 is tested with the other bad global hand-overs, tests/inputs/test_global_ports_bad_input.py.)
Real nvcc, nvJitLink and nvdisasm; no GPU."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from rich.console import Console

from pipelink.verify.results import Rung, VerifyResult, print_table

from contracts import violation_link


@pytest.mark.slow
def test_symbol_link_report_keeps_bracketed_names(tmp_path):
    """A symbol-mode link lists the component's conformance errors as warnings in its report: their
    `[[smem]]` hint and `[contract: smem.buf]` field must survive the console."""
    spec = violation_link(tmp_path, "smem_past_buffer", {}, False)
    proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "link", str(spec), "--mode", "symbol",
                           "-o", str(tmp_path / "out")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    warning = next(line for line in proc.stdout.splitlines() if "ending 4 bytes past its buffer" in line)
    assert "[contract: smem.buf]" in warning, warning
    assert "[[smem]]" in proc.stdout, proc.stdout
    assert "under [] " not in proc.stdout and "[]" not in proc.stdout


def test_verify_table_keeps_bracketed_names():
    """A rung's detail (an error's text, a user rung's name) in the verify table, as written."""
    con = Console(file=io.StringIO(), width=300, color_system=None)
    result = VerifyResult("k[bold]", "link.toml", "pipelink", "/tmp/[out]", None,
                          [Rung("compile", "FAILED", "declare a [[smem]] with its bytes"),
                           Rung("[mine]", "skipped")])
    print_table(result, console=con)
    text = con.file.getvalue()
    for words in ("declare a [[smem]] with its bytes", "k[bold]", "[mine]", "/tmp/[out]/verify.json"):
        assert words in text, (words, text)
