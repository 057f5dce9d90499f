"""`[schedule] tiles_from`: the tile count decided in the kernel (issue 13's linker step 1,
docs/design/moe.md). A phase before the tile loops writes the count into a workspace; the tile
loops of every role run that many tiles (at most the schedule's `tiles`, which sizes the grid).
CPU tests read the glue, the audit and the refusals; the `gpu` test runs it."""

from __future__ import annotations

from dataclasses import replace

import pytest

import pipelink
from hypothesis import HealthCheck, given, settings, strategies as st

from pipelink.errors import ContractError, ScheduleMismatch, SpecError
from pipelink.link import audit
from pipelink.link.glue_ir import TileCount, TileLoop, lit
from pipelink.link.pipeline import plan_link

from conftest import edit, edit_glue, gpu_ok, inline_link

CONTRACT = """
[component]
name = "halfway"
version = "1.0.0"

[facts.requires]
T = { range = [2, 4096], multiple_of = 2, default = 64 }

[roles.work]
warps = 1

[[entry]]
symbol = "halfway_count"
role = "work"
phase = "count"
scope = "block"
when = "start"

[[entry]]
symbol = "halfway_tile"
role = "work"
phase = "tile"

[[workspace]]
name = "count"
bytes = 4
count_max = "T / 2"

[[operand]]
name = "y"
dtype = "int32"
shape = ["T"]
access = "write"

[schedule]
order = "any"
"""

# Every block writes the same count (half the tiles) before its own tile loop reads it: no block
# depends on another's write, so no grid barrier is needed in this toy.
SOURCE = """extern "C" __device__ void halfway_count(pl_ctx ctx, pl_bind_halfway b) {
  if (ctx.thread == 0) *reinterpret_cast<volatile int*>(b.count) = b.T / 2;
}
extern "C" __device__ void halfway_tile(pl_ctx ctx, pl_bind_halfway b) {
  if (ctx.thread == 0) b.y[ctx.tile] = ctx.tile;
}
"""

SPEC = """
[link]
name = "halfway"

[facts]
T = 64

[[instance]]
name = "h"
package = "halfway.plc"

[schedule]
tiles = ["T"]
tiles_from = "h.count"
"""


@pytest.fixture
def halfway(tmp_path):
    return inline_link(tmp_path, "halfway", CONTRACT, SOURCE, SPEC)


@pytest.mark.slow
def test_the_tile_loops_run_the_count_written_before_them(halfway):
    kernel = pipelink.link(halfway)
    text, plan = kernel.plan.glue.text, kernel.plan
    assert "const int pl_tile_count = pl_ld_acquire_int(p.h_count);" in text
    assert "if (pl_tile_count > 64) __trap();" in text and "const int pl_num_tiles = min(pl_tile_count, 64);" in text
    assert text.index("halfway_count(ctx,") < text.index("pl_num_tiles = ") < text.index("halfway_tile(ctx,")
    assert "pl_tile < pl_num_tiles;" in text and "ctx.last = pl_tile + 64 >= pl_num_tiles;" in text
    assert plan.grid == 64 and plan.to_json()["schedule"]["tiles_from"] == "h.count"
    assert any(c.name == "dynamic tiles" for c in plan.all_checks())
    assert audit.check_glue(plan).ok
    # A glue that reads the count from elsewhere, or bounds it wrongly, is caught by the audit.
    for kind, change in ((TileCount, lambda s: replace(s, bound=65)), (TileLoop, lambda s: replace(s, bound=lit(64))),
                         (TileCount, lambda s: replace(s, trap=65)), (TileCount, lambda s: replace(s, trap=None)),
                         (TileCount, lambda s: replace(s, name="h_other"))):
        broken = edit_glue(plan, kind, change)
        assert {v.invariant for v in audit.check_glue(broken).violations} & {"glue.tile_count", "glue.tile_loop"}


@pytest.mark.parametrize("edit,words", [
    ('tiles_from = "h.count"', ['tiles_from = "h.y"', "no [[workspace]] 'y'", "its workspaces: count"]),
    ('when = "start"\n', ["", "no whole-block phase runs before the tile loops"]),
    ("bytes = 4", ["bytes = 2", "holds 2 bytes"]),
    ("[schedule]\ntiles", ['[launch]\ngrid = 200\n\n[schedule]\ntiles', "must be resident at once", "over the 132 SMs"]),
], ids=["not-a-workspace", "no-writer", "too-small", "not-resident"])
def test_a_tile_count_nothing_can_write_is_refused(halfway, edit, words):
    old, (new, *said) = edit, words
    for path in (halfway, halfway.parent / "halfway.toml"):
        text = path.read_text()
        if old in text:
            path.write_text(text.replace(old, new, 1))
            if path.suffix == ".toml" and path.name != "link.toml":
                pipelink.pack(halfway.parent / "halfway.cu", path, halfway.parent / "halfway.plc", check=False)
            break
    else:
        raise AssertionError(old)
    with pytest.raises(SpecError) as info:
        plan_link(halfway)
    for w in said:
        assert w in str(info.value)


def _repack(halfway, old: str, new: str) -> None:
    contract = halfway.parent / "halfway.toml"
    edit(contract, old, new)
    pipelink.pack(halfway.parent / "halfway.cu", contract, halfway.parent / "halfway.plc")


@pytest.mark.slow
def test_a_count_the_contract_does_not_bound_is_refused(halfway):
    """Without count_max nothing shows that the schedule's bound runs every tile the component lists."""
    _repack(halfway, 'count_max = "T / 2"\n', "")
    with pytest.raises(ContractError) as info:
        plan_link(halfway)
    assert info.value.field == "workspace[0].count_max" and info.value.component == "halfway"
    assert "h.count" in info.value.message and "count_max" in info.value.hint


@pytest.mark.slow
def test_a_schedule_below_the_guaranteed_count_is_refused_naming_both(halfway):
    """The component is updated to list more tiles than the spec's number: refused, never cut."""
    _repack(halfway, 'count_max = "T / 2"', 'count_max = "T"')
    edit(halfway, 'tiles = ["T"]', "tiles = [48]")
    with pytest.raises(ScheduleMismatch) as info:
        plan_link(halfway)
    e = info.value
    assert e.field == "schedule.tiles" and e.file == str(halfway)
    assert "tiles = 48 = 48" in e.message and "count_max = T = 64" in e.message and "16 tile(s) would never run" in e.message
    assert 'tiles = ["T"]' in e.hint
    # The symbol control checks nothing: it links, cuts the count at 48 without a trap, and says so.
    plan = plan_link(halfway, mode="symbol")
    assert any("unchecked by symbol linking" in w and "16 tile(s) would never run" in w for w in plan.all_warnings())
    text = pipelink.link(halfway, mode="symbol").plan.glue.text
    assert "min(pl_tile_count, 48)" in text and "__trap" not in text


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(t=st.integers(1, 2048).map(lambda n: 2 * n), cut=st.integers(1, 4096))
def test_the_link_runs_every_tile_the_component_can_list(halfway, t, cut):
    """Over token counts and schedule bounds: linked exactly when the bound covers count_max = T / 2, and
    then the loops' bound (and the trap's) is the schedule's."""
    spec = halfway.parent / f"link_{t}_{cut}.toml"
    spec.write_text(halfway.read_text().replace("T = 64", f"T = {t}").replace('tiles = ["T"]', f"tiles = [{cut}]"))
    if cut < t // 2:
        with pytest.raises(ScheduleMismatch):
            plan_link(spec)
    else:
        plan = plan_link(spec)
        assert plan.num_tiles == cut and plan.facts["T"] == t


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_half_the_tiles_run(halfway):
    import torch
    from pipelink.runtime import Runtime
    kernel = pipelink.link(halfway)
    runtime = Runtime(kernel.cubin, kernel.manifest)
    for _ in range(2):
        y = torch.full((64,), -1, dtype=torch.int32, device="cuda")
        runtime.launch_arrays([y])
        torch.cuda.synchronize()
        assert y.tolist() == list(range(32)) + [-1] * 32


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_a_count_over_its_guarantee_stops_the_kernel(halfway, tmp_path):
    """The writer breaks its contract (it writes T / 2 but declares count_max = T / 4): the glue's check
    traps, and the loop reports a crash in its watched child, never a run that skipped tiles."""
    from rich.console import Console
    _repack(halfway, 'count_max = "T / 2"', 'count_max = "T / 4"')
    edit(halfway, 'tiles = ["T"]', 'tiles = ["T / 4"]')
    quiet = Console(file=open("/dev/null", "w"), width=140)
    result = pipelink.verify(halfway, out_dir=tmp_path / "run", bench=False, timeout=30, console=quiet)
    run = result.rung("run")
    assert run.status == "crash", (run.status, run.detail)


@pytest.mark.slow
def test_symbol_mode_computes_a_guarantee_that_names_one_declared_below_it(halfway):
    """Issue 48 item 6: symbol linking evaluated guarantees in declaration order, so one naming a guarantee
    declared below it was left out and the allocator ended in a KeyError; pipelink mode linked the same."""
    _repack(halfway, "[roles.work]", '[facts.guarantees]\nfirst = "second + 1"\nsecond = "T / 2"\n\n[roles.work]')
    for mode in ("pipelink", "symbol"):
        facts = plan_link(halfway, mode=mode).instance("h").facts
        assert (facts["first"], facts["second"]) == (33, 32), mode
