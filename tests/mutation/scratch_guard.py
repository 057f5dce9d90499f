"""pytest plugin loaded by tests/mutation/run.py (``-p scratch_guard``): the run must test the mutated
scratch copy of pipelink, never the editable install. Refuses to run otherwise."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _check() -> str:
    want = Path(os.environ["PIPELINK_MUTATION_SRC"]).resolve()
    import pipelink
    got = Path(pipelink.__file__).resolve()
    if not got.is_relative_to(want):
        raise pytest.UsageError(f"mutation run: pipelink was imported from {got}, not from the scratch copy {want}")
    return str(got)


def pytest_configure(config):
    if os.environ.get("PIPELINK_MUTATION_SRC"):
        _check()


def pytest_report_header(config):
    if os.environ.get("PIPELINK_MUTATION_SRC"):
        return f"mutation run: pipelink from {_check()}"
    return None
