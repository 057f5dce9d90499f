"""The paper's table (issue 16), its CPU half: every configuration of bench/configs.py links both
ways (pipelink, and the monolithic control compiled from the same sources as one unit) to the same
SASS after blanking symbol addresses. The GPU half (verify and timing) is bench/paper_table.py."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import configs  # noqa: E402  (bench/ is not a package)
import sass_compare  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return {family: configs.build([family], tmp_path_factory.mktemp(family), progress=lambda _: None)
            for family in configs.FAMILIES}


def test_at_least_51_configurations_with_distinct_names(built):
    names = [name for family in built.values() for name, _ in family]
    assert len(names) >= 51 and len(set(names)) == len(names)
    assert {name.split("/")[0] for name in names} == set(configs.FAMILIES)


@pytest.mark.parametrize("family", configs.FAMILIES)
def test_linked_and_monolithic_sass_are_identical(built, family):
    rows = [sass_compare.compare(name, spec) for name, spec in built[family]]
    different = {r["name"]: (r.get("opcode_diff"), r.get("first_difference")) for r in rows if not r["sass_identical"]}
    assert rows and not different
