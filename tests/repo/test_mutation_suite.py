"""The seeded-bug suite stays valid: every mutant of tests/mutation/mutants.py still applies to the
current source (its `old` text occurs exactly once, and the bug still compiles), and the suite keeps at
least 25 bugs over at least 6 stages. Running the mutants is `python tests/mutation/run.py`
(bench/NOTES.md, "Seeded-bug suite"); this only checks the list, in milliseconds."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "pipelink"


def _mutants():
    spec = importlib.util.spec_from_file_location("pipelink_mutants", ROOT / "tests" / "mutation" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.MUTANTS


MUTANTS = _mutants()


def test_enough_mutants_over_enough_stages():
    assert len(MUTANTS) >= 25
    assert len({m.stage for m in MUTANTS}) >= 6
    assert len({m.id for m in MUTANTS}) == len(MUTANTS), "mutant ids are unique"
    review = [m for m in MUTANTS if m.id.startswith("review-")]
    assert len(review) == 7, "the seven bugs the review seeded stay in the suite"


@pytest.mark.parametrize("m", MUTANTS, ids=lambda m: m.id)
def test_mutant_applies_to_the_current_source(m):
    path = SRC / m.file
    assert path.is_file(), f"{m.id}: {m.file} is gone; move the mutant to where the code went"
    n = path.read_text().count(m.old)
    assert n == 1, f"{m.id}: `old` occurs {n} times in {m.file}; update the mutant to the current code"
    assert m.new != m.old and m.why and m.tests
    assert m.kill in ("plan", "backend", "behaviour")
    mutated = path.read_text().replace(m.old, m.new, 1)
    compile(mutated, str(path), "exec")  # a seeded bug, not a syntax error
    files = [t.split("::")[0] for t in m.tests]
    assert all(re.fullmatch(r"tests/(\w+/)*test_\w+\.py", f) for f in files), files
    # a test file moved or renamed would leave the mutant with nothing to run (run.py: "error"), not killed
    assert all((ROOT / f).is_file() for f in files), [f for f in files if not (ROOT / f).is_file()]


def test_a_run_that_would_test_another_pipelink_is_an_error_not_a_kill(tmp_path):
    """run.py checks which pipelink a mutant's tests import inside the run (scratch_guard): a scratch copy
    that Python does not import from (here: none at all, so the editable install would be tested) stops
    pytest with a usage error, which the runner counts as an error, never as a kill."""
    sys.path.insert(0, str(ROOT / "tests" / "mutation"))
    try:
        import run as mutation_run
    finally:
        sys.path.remove(str(ROOT / "tests" / "mutation"))
    (tmp_path / "src").mkdir()
    r = mutation_run.run_pytest(tmp_path, ["tests/repo/test_mutation_suite.py::test_enough_mutants_over_enough_stages"],
                                120)
    assert r["rc"] == 4 and "not from the scratch copy" in r["output"], r["output"][-2000:]
