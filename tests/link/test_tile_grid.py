"""A component's own tile grid ([schedule] tiles, issue 48 item 1): the spec's tile numbers are the
spec writer's; a component that says which grid its per-tile entries cover gets exactly that grid, or
the link is refused naming both (fewer tiles leave its output unwritten, more run past its operands).
The symbol control runs the spec's grid anyway and only warns. examples/demo: the producer covers
M / box_rows row tiles, the store M / tile_rows."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pipelink.errors import ContractError, ScheduleMismatch
from pipelink.link.pipeline import plan_link

from conftest import ROOT, edit, repack


def test_the_demo_runs_the_grid_its_components_cover(demo_dir):
    plan = plan_link(demo_dir / "link.toml")
    grid = next(c for c in plan.all_checks() if c.name == "tile grid")
    assert plan.tiles == [1024] and "load [1024]" in grid.detail and "store [1024]" in grid.detail


@pytest.mark.parametrize("tiles,said", [
    ('"M / 64"', "512 of its tiles would never run (output left unwritten)"),
    ('"2 * M / tile_rows"', "1024 tile(s) past its grid would run past its operands"),
], ids=["fewer", "more"])
def test_a_spec_grid_other_than_the_components_is_refused_naming_both(demo_dir, tiles, said):
    spec = edit(demo_dir / "link.toml", 'tiles = ["M / tile_rows"]', f"tiles = [{tiles}]")
    with pytest.raises(ScheduleMismatch) as info:
        plan_link(spec)
    e = info.value
    assert e.file == str(spec) and e.field == "schedule.tiles" and e.component == "ring_producer"
    assert f"[schedule] tiles = [{tiles.strip(chr(34))}]" in e.message and said in e.message
    assert "tiles = [M / box_rows] = [1024]" in e.message and "ring_producer.plc" in e.message
    assert e.hint == 'name the component\'s grid in the spec: tiles = ["M / box_rows"]'
    # The symbol control links the spec's grid and says what it let through, for both components (each at
    # its packaged facts: the producer's default 128-row box, the store's 32-row tile from the spec).
    plan = plan_link(spec, mode="symbol")
    unchecked = [w for w in plan.all_warnings() if w.startswith("unchecked by symbol linking: the link spec's "
                                                               "[schedule] tiles")]
    assert len(unchecked) == 2 and plan.tiles != [1024], unchecked


def test_a_contract_grid_of_three_dimensions_is_refused_on_load(tmp_path):
    with pytest.raises(ContractError) as info:
        repack(tmp_path, "tile_store", [('tiles = ["M / tile_rows"]', 'tiles = ["M", "1", "1"]')])
    assert info.value.field == "schedule.tiles" and "3 tile-grid dimensions" in info.value.message


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.integers(4, 64), spec_rows=st.integers(1, 80))
def test_the_link_accepts_exactly_the_covered_grid(demo_dir, rows, spec_rows):
    """Over problem sizes and spec grids: linked iff the spec's grid is the components' own."""
    spec = demo_dir / f"link_{rows}_{spec_rows}.toml"
    spec.write_text((demo_dir / "link.toml").read_text().replace("M = 32768", f"M = {32 * rows}")
                    .replace('tiles = ["M / tile_rows"]', f"tiles = [{spec_rows}]"))
    if spec_rows == rows:
        assert plan_link(spec).tiles == [rows]
    else:
        with pytest.raises(ScheduleMismatch):
            plan_link(spec)


def test_every_shipped_per_tile_output_declares_its_grid():
    """The components that write or read per tile by ctx.tile / tile_row / tile_col say which grid."""
    for contract in ("raw/ring_producer", "raw/tile_store", "raw/bulk_producer", "raw/swiglu_store",
                     "cub/cub_sum", "cutlass/gemm_mainloop"):
        assert "\ntiles = [" in (ROOT / "components" / f"{contract}.toml").read_text(), contract
