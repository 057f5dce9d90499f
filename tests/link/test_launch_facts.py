"""Facts given at launch ([link] launch_facts; a contract's `launch`): a decode step's position read from device
memory, so one kernel serves every step of a model's decode loop. What a contract must say before a fact may
be given at launch, the range the link lets through (every value each taker's domain and limits allow), the
parameter and the guarded load in the glue, and the audit's independent walk of that range. The decode block
with its position at launch runs on the GPU in tests/examples/test_llama_decode.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

import pipelink
from pipelink.contract import load_contract
from pipelink.errors import ContractError, SpecError
from pipelink.link import glue_ir as ir
from pipelink.link.audit import AuditError, check_glue, enforce
from pipelink.link.facts import MAX_LAUNCH_SPAN, given_at_launch

from conftest import edit_glue
from contracts import component

# A component that writes one element at a position given at launch: out[pos] = pos + 1.
STAMP = '''
[component]
name = "stamp"
version = "1"

[facts.requires]
N = { range = [1, 1048576], default = 64 }
pos = { range = [0, 65535], launch = true, default = 8 }

[[facts.limit]]
expr = "N - pos"
min = 1
doc = "the element written lies inside out"

[roles.w]
warps = 1

[[entry]]
symbol = "stamp_run"
role = "w"
phase = "stamp"

[[operand]]
name = "out"
dtype = "int32"
shape = ["N"]
access = "write"
'''
STAMP_CU = '''extern "C" __device__ void stamp_run(pl_ctx ctx, pl_bind_stamp b) {
  if (blockIdx.x == 0 && ctx.thread == 0) b.out[b.pos] = b.pos + 1;
}
'''


def stamp_spec(tmp_path, n=100, pos=40, launch='["pos"]', contract=STAMP, extra=""):
    (tmp_path / "stamp.cu").write_text(STAMP_CU)
    (tmp_path / "stamp.toml").write_text(contract)
    spec = tmp_path / "link.toml"
    spec.write_text(f'[link]\nname = "stamped"\nlaunch_facts = {launch}\n\n[facts]\nN = {n}\npos = {pos}\n\n'
                    f'[[instance]]\nname = "s"\nsource = "stamp.cu"\n{extra}\n[schedule]\ntiles = [1]\n')
    return spec


def test_the_position_is_a_parameter_read_once_and_guarded(tmp_path):
    kernel = pipelink.link(stamp_spec(tmp_path))
    first = kernel.abi.params[0]
    assert (first.name, first.dtype, first.shape, first.access) == ("glue.fact_pos", "int64", (1,), "read")
    assert first.fact == {"name": "pos", "low": 0, "high": 40}
    assert kernel.manifest["params"][0]["fact"] == first.fact
    loads = [s for s in kernel.plan.glue.statements if isinstance(s, ir.LaunchFactLoad)]
    assert [(s.name, s.low, s.high) for s in loads] == [("pos", 0, 40)]
    text = kernel.plan.glue.text
    assert "if (value < low || value > high) __trap();" in text
    assert "const int pl_fact_pos = pl_launch_fact(p.glue_fact_pos, 0LL, 40LL);" in text
    assert "pl_bind_stamp{100, pl_fact_pos, p.s_out}" in text  # the binding is the value read, not 40
    assert kernel.plan.to_json()["launch_facts"] == [{"name": "pos", "low": 0, "high": 40, "takers": ["s"]}]


def test_without_launch_facts_the_position_is_folded_as_before(tmp_path):
    kernel = pipelink.link(stamp_spec(tmp_path, launch="[]"))
    assert [p.name for p in kernel.abi.params] == ["s.out"]
    assert "pl_bind_stamp{100, 40, p.s_out}" in kernel.plan.glue.text
    assert "pl_launch_fact" not in kernel.plan.glue.text


def test_the_range_stops_where_a_limit_would_break(tmp_path):
    # pos's domain starts at 0, but a limit of this contract wants pos >= 8: the kernel serves 8 .. 40.
    contract = STAMP + '\n[[facts.limit]]\nexpr = "pos"\nmin = 8\n'
    kernel = pipelink.link(stamp_spec(tmp_path, contract=contract))
    assert kernel.abi.params[0].fact == {"name": "pos", "low": 8, "high": 40}


@pytest.mark.parametrize("launch, pin, words", [
    ('["N"]', "", "s (stamp, "),
    ('["pos", "pos"]', "", "it is listed twice"),
    ('["M"]', "", "no component requires it"),
], ids=["not-declared-launch", "twice", "unknown"])
def test_a_fact_the_contracts_do_not_let_vary_is_refused(tmp_path, launch, pin, words):
    with pytest.raises(SpecError) as info:
        pipelink.link(stamp_spec(tmp_path, launch=launch, extra=pin))
    assert words in info.value.message and info.value.field.startswith("link.launch_facts["), info.value


@pytest.mark.parametrize("body, req, field, words", [
    ("", "", None, None),
    ("", ", compile = true, default = 4", "facts.requires.pos.launch", "is compile-time"),
    ("", ", bound = true", "facts.requires.pos.launch", "is bound"),
    ('[[smem]]\nname = "rows"\nbytes = "pos * 4"\n', "", "smem[0].bytes", "mentions fact 'pos', which is given at"),
    ('[[operand]]\nname = "x"\ndtype = "fp32"\nshape = ["pos"]\naccess = "read"\n', "", "operand[0].shape[0]",
     "mentions fact 'pos'"),
], ids=["control", "compile-time", "bound", "sized-smem", "operand-shape"])
def test_a_launch_fact_reaches_the_code_only_through_its_binding(tmp_path, body, req, field, words):
    path = tmp_path / "c.toml"
    path.write_text(component("c", body, requires=f"pos = {{ range = [0, 4096], launch = true{req} }}"))
    if field is None:
        assert load_contract(path).facts.requires["pos"].launch
        return
    with pytest.raises(ContractError) as info:
        load_contract(path)
    assert info.value.field == field and words in info.value.message, info.value


def test_a_guarantee_of_a_launch_fact_is_refused(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(component("c", requires="pos = { range = [0, 4096], launch = true }", guarantees='next = "pos + 1"'))
    with pytest.raises(ContractError) as info:
        load_contract(path)
    assert info.value.field == "facts.guarantees.next" and "given at launch" in info.value.message


@pytest.mark.parametrize("edit, invariant", [
    (lambda s: ir.LaunchFactLoad(s.name, s.member, s.low, s.high + 1), "glue.launch_facts"),
    (lambda s: None, "glue.launch_facts"),
], ids=["one-past-the-linked-value", "not-read"])
def test_the_audit_sees_a_load_that_lets_through_more_than_the_plan(tmp_path, edit, invariant):
    plan = pipelink.link(stamp_spec(tmp_path)).plan
    with pytest.raises(AuditError) as info:
        enforce(check_glue(edit_glue(plan, ir.LaunchFactLoad, edit)))
    assert invariant in str(info.value)


def test_the_audit_walks_the_range_itself(tmp_path):
    # A facts stage that let the range reach one value too low (the limit N - pos >= 1 broken at the top is the
    # same walk): the audit finds the value no taker allows.
    import dataclasses
    contract = STAMP + '\n[[facts.limit]]\nexpr = "pos"\nmin = 8\n'
    plan = pipelink.link(stamp_spec(tmp_path, contract=contract)).plan
    wide = dataclasses.replace(plan.resolved.launch[0], low=7)
    plan.resolved = dataclasses.replace(plan.resolved, launch=(wide,))
    plan = edit_glue(plan, ir.LaunchFactLoad, lambda s: ir.LaunchFactLoad(s.name, s.member, 7, s.high))
    with pytest.raises(AuditError) as info:
        enforce(check_glue(plan))
    assert "facts.launch_range" in str(info.value) and "pos = 7" in str(info.value)


@settings(max_examples=60, deadline=None)
@given(low=st.integers(0, 300), span=st.integers(0, 300), n=st.integers(1, 700), least=st.integers(-5, 200),
       pick=st.integers(0, 10 ** 6))
def test_the_range_is_exactly_the_values_every_taker_allows(tmp_path_factory, low, span, n, least, pick):
    """For a domain [low, low + span], a limit N - pos >= 1 and another pos >= least, linked at some allowed value:
    the range the link lets through holds every allowed value from there down, and the value below it is refused
    (or the span is MAX_LAUNCH_SPAN)."""
    folder = tmp_path_factory.mktemp("c")
    domain = "pos = { range = [0, 65535], launch = true, default = 8 }"
    assert domain in STAMP
    text = STAMP.replace(domain, f"pos = {{ range = [{low}, {low + span}], launch = true }}")
    text += f'\n[[facts.limit]]\nexpr = "pos"\nmin = {least}\n'
    (folder / "stamp.toml").write_text(text)
    contract = load_contract(folder / "stamp.toml")

    def allowed(v):
        return low <= v <= low + span and n - v >= 1 and v >= least
    values = [v for v in range(low, low + span + 1) if allowed(v)]
    if not values:
        return
    high = values[pick % len(values)]
    inst = SimpleNamespace(name="s", file="stamp.toml", contract=contract, facts={"N": n, "pos": high})
    link = SimpleNamespace(spec=SimpleNamespace(path="link.toml", link=SimpleNamespace(launch_facts=["pos"])))
    (fact,) = given_at_launch(link, [inst])
    assert fact.high == high and fact.low <= high
    assert all(allowed(v) for v in range(fact.low, fact.high + 1))
    assert not allowed(fact.low - 1) or fact.high - fact.low + 1 == MAX_LAUNCH_SPAN
