"""Bad values of the inputs added in the 2026-12-01 sessions ([[workspace]], [[entry]] when,
[[operand]] align, [schedule] tiles_from), refused as every bad input is (issue 10's promise):
exit status 2, a typed error naming the file and the field, no traceback, nothing written."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import RAW

WORKSPACE = '\n[[workspace]]\nname = "{name}"\nbytes = {bytes}\n{more}\n'


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pipelink.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def refused(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    text = "".join(proc.stderr.split())
    for w in words:
        assert "".join(w.split()) in text, (w, proc.stderr)


def _contract(edit_text):
    text = (RAW / "tile_store.toml").read_text()
    return text + edit_text if edit_text.startswith("\n[") else text.replace(*edit_text.split("|", 1), 1)


CONTRACT_CASES = {
    "workspace-bytes-0": (WORKSPACE.format(name="w", bytes=0, more=""), "workspace[0].bytes"),
    "workspace-bytes-2**40": (WORKSPACE.format(name="w", bytes=2 ** 40, more=""), "workspace[0].bytes"),
    "workspace-bytes-string": (WORKSPACE.format(name="w", bytes='"lots"', more=""), "workspace[0].bytes"),
    "workspace-name-code": (WORKSPACE.format(name="w;x", bytes=4, more=""), "workspace[0].name"),
    "workspace-name-clash": (WORKSPACE.format(name="staging", bytes=4, more=""), "workspace[0].name"),
    "workspace-grid-sync-not-zeroed": (WORKSPACE.format(name="w", bytes=4, more="grid_sync = true\nzero = false"),
                                       "workspace[0].zero"),
    "workspace-zero-not-bool": (WORKSPACE.format(name="w", bytes=4, more='zero = "yes"'), "workspace[0].zero"),
    "workspace-zero-and-zero-once": (WORKSPACE.format(name="w", bytes=4, more="zero_once = true"),
                                     "workspace[0].zero_once"),
    "workspace-zero-once-not-bool": (WORKSPACE.format(name="w", bytes=4, more='zero = false\nzero_once = 1'),
                                     "workspace[0].zero_once"),
    "facts-limit-no-bound": ('\n[[facts.limit]]\nexpr = "tile_cols - tile_rows"\n', "facts.limit[0]"),
    "facts-limit-min-over-max": ('\n[[facts.limit]]\nexpr = "tile_cols"\nmin = 5\nmax = 1\n', "facts.limit[0].max"),
    "facts-limit-unknown-fact": ('\n[[facts.limit]]\nexpr = "rows - 1"\nmin = 0\n', "facts.limit[0].expr"),
    "facts-limit-min-not-int": ('\n[[facts.limit]]\nexpr = "tile_cols"\nmin = "one"\n', "facts.limit[0].min"),
    "facts-limit-code-in-expr": ('\n[[facts.limit]]\nexpr = "__import__(1)"\nmin = 0\n', "facts.limit[0].expr"),
    "facts-limit-defaults-outside": ('\n[[facts.limit]]\nexpr = "tile_cols - tile_rows"\nmin = 0\n',
                                     "facts.limit[0]"),
    "entry-when-unknown": ('phase = "store"\n|phase = "store"\nwhen = "later"\n', "entry[0].when"),
    "entry-when-on-a-role-entry": ('phase = "store"\n|phase = "store"\nwhen = "start"\n', "entry[0].when"),
    "operand-align-3": ('access = "write"\n|access = "write"\nalign = 3\n', "operand[0].align"),
    "operand-align-512": ('access = "write"\n|access = "write"\nalign = 512\n', "operand[0].align"),
}


@pytest.mark.parametrize("case", sorted(CONTRACT_CASES))
def test_pack_refuses_the_new_contract_fields(tmp_path, case):
    edit_text, field = CONTRACT_CASES[case]
    contract, out = tmp_path / "bad.toml", tmp_path / "out" / "bad.plc"
    contract.write_text(_contract(edit_text))
    refused(cli("pack", RAW / "tile_store.cu", "--contract", contract, "-o", out), str(contract), field)
    assert not out.exists() and not out.parent.exists()


SPEC = """[link]
name = "t"

[facts]
M = 1024

[[instance]]
name = "s"
package = "{package}"

[schedule]
tiles = [8]
tiles_from = {tiles_from}
"""


@pytest.mark.parametrize("tiles_from,words", [
    ('"nodot"', ["schedule.tiles_from", "is not 'instance.workspace'"]),
    ('"other.count"', ["schedule.tiles_from", "of a declared instance"]),
    ('"s.bad name"', ["schedule.tiles_from", "the workspace in"]),
    ('"s.staging"', ["schedule.tiles_from", "has no [[workspace]] 'staging'"]),
    ("7", ["schedule.tiles_from"]),
], ids=["no-dot", "unknown-instance", "not-an-identifier", "not-a-workspace", "not-a-string"])
def test_link_refuses_a_bad_tiles_from(tmp_path, demo_packages, tiles_from, words):
    spec, out = tmp_path / "link.toml", tmp_path / "out"
    spec.write_text(SPEC.format(package=demo_packages / "tile_store.plc", tiles_from=tiles_from))
    refused(cli("link", spec, "-o", out), str(spec), *words)
    assert not out.exists()
