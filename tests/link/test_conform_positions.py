"""Every conformance rule broken in every position it can be (issue 56): the generated violations of
tests/conform_cases.py, each found with its contract field, its offset and its instruction, and each
legal twin quiet. Real nvcc, nvJitLink and nvdisasm; no GPU needed.

One seeded violation a rule (tests/violations) let position bugs through: a check of slot 0 only, an
access judged by where it starts, LDSM counted as 4 bytes. Here each rule meets every slot, every
buffer, every access width the SASS has, every copy-engine form (TMA boxes, bulk copies), immediate and
run-time indices."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conform_cases import all_cases, counts, groups, link, misjudged


def test_the_generated_set_covers_every_rule_and_position():
    """The set itself: every rule of link/conform.py with violations and legal twins, every slot of the
    array, the three buffers, every access kind at both index kinds. Names are unique (the report names
    a case by them)."""
    n = counts()
    assert set(n) == {"smem", "smem-runtime", "mbarrier", "expect_tx", "mbarriers_in", "named_barrier", "setmaxnreg",
                      "copy"}
    assert all(bad > 0 and good > 0 for bad, good in n.values()), n
    cases = all_cases()
    assert len({c.name for c in cases}) == len(cases)
    smem = [c for c in cases if c.rule == "smem"]
    assert {c.anchor for c in smem} == {"first", "mid", "last"}
    assert {c.position.split(" ")[0] for c in smem} >= {"ld.u8", "st.u16", "ld.b32", "st.v2", "ld.v4", "ldsm.x1",
                                                          "ldsm.x2", "ldsm.x4", "stsm.x4", "cp.async.16"}
    assert {c.rel // 8 for c in cases if c.rule == "expect_tx" and "run-time" not in c.position} == {0, 1, 2, 3}
    copies = [c for c in cases if c.rule == "copy"]
    assert {c.op.split(".")[0].strip() for c in copies} == {"UTMALDG", "UTMASTG", "UTMAREDG", "UBLKCP", "UBLKRED"}
    assert {c.anchor for c in copies if not c.legal} >= {"first", "mid", "last", "ring"}
    assert any("run-time" in c.position and not c.legal for c in copies)
    assert sum(len(g) for _, g in groups()) == len(cases)


@pytest.mark.parametrize("group", range(len(groups())), ids=[f"{c}-{g[0].rule}" for c, g in groups()])
def test_every_generated_violation_is_found_and_every_legal_twin_is_quiet(tmp_path, group):
    component, cases = groups()[group]
    kernel = link(tmp_path, component, cases)
    wrong = misjudged(kernel, component, cases)
    assert not wrong, f"{len(wrong)} of {len(cases)} cases misjudged:\n  " + "\n  ".join(wrong)




@pytest.mark.slow
@settings(max_examples=4, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.data())
def test_any_few_cases_together_are_judged_alike(tmp_path_factory, data):
    """The cases in other company and order (the compiler schedules, merges registers and hoists
    differently): a handful drawn from one group, linked alone, judged as in the whole set. Not setmaxnreg:
    ptxas refuses most sequences of its values (a .dec above an earlier .inc), and the group links whole."""
    group = data.draw(st.sampled_from([g for _, g in groups() if g[0].rule != "setmaxnreg"]), label="group")
    cases = data.draw(st.lists(st.sampled_from(group), min_size=1, max_size=8, unique_by=lambda c: c.name),
                      label="cases")
    component = cases[0].component
    kernel = link(tmp_path_factory.mktemp("drawn"), component, cases)
    wrong = misjudged(kernel, component, cases)
    assert not wrong, "\n  ".join(wrong)
