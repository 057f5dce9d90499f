"""README.md's results section is what bench/readme_results.py makes of the newest JSON in
bench/results (no figure typed by hand), and every result file README.md and bench/NOTES.md cite
is there, with the per-launch times its JSON names."""

import json
import re
import subprocess
import sys

from conftest import ROOT

RESULTS = ROOT / "bench" / "results"
# A result file by name: <what>-<where>-<stamp>[-<more>].json|png|log.gz (stamps: 20261201T171057).
CITED = re.compile(r"[A-Za-z0-9_]+-[A-Za-z0-9_-]*?\d{8}T\d{4,6}[A-Za-z0-9_-]*\.(?:json|png|log\.gz)")


def test_readme_results_are_generated_from_the_newest_json():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "readme_results.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_cited_result_exists():
    for doc in ("README.md", "bench/NOTES.md"):
        cited = set(CITED.findall((ROOT / doc).read_text()))
        assert cited, doc
        for name in cited:
            assert (RESULTS / name).exists() or (RESULTS / "logs" / name).exists(), f"{doc} cites {name}"
    for path in RESULTS.glob("*.json"):
        times = json.loads(path.read_text()).get("times_file")
        assert times is None or (RESULTS / times).exists(), f"{path.name} names {times}"
