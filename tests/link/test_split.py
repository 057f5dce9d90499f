"""Split schedules (issue 15, docs/design/stream_k.md): [schedule] split = "stream_k" | "hybrid" cuts a
tile's k-tiles between blocks; the glue runs each block's units from a table of stream_k.block_row,
stores the partial sums of a cut tile, counts its k-tiles, and in the block that completes it sums
every contributor's partials in block order before the epilogue runs. Linked here with a toy additive
mainloop (tests/components/ksum) whose tile value is the sum of its k-tiles, with the real toolchain;
on a GPU, the sums are checked exactly (integer-valued inputs)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest

import pipelink
from conftest import edit_glue, gpu_ok
from pipelink.backend.inspect import inspect_cubin
from pipelink.contract import load_contract
from pipelink.errors import ContractError, SpecError
from pipelink import stream_k
from pipelink.link import glue_ir as ir
from pipelink.link.audit import check_glue

from conftest import ROOT

KSUM = ROOT / "tests" / "components" / "ksum"
ACC_SINK = ROOT / "tests" / "components"


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    out = tmp_path_factory.mktemp("ksum_packages")
    pipelink.pack(KSUM / "ksum.cu", KSUM / "ksum.toml", out / "ksum.plc")
    pipelink.pack(ACC_SINK / "acc_sink.cu", ACC_SINK / "acc_sink.toml", out / "acc_sink.plc")
    return out


def _spec(tmp_path, packages, split="stream_k", m=2560, kt=7, grid=8, extra=""):
    folder = tmp_path / f"{split}_{m}_{kt}_{grid}"
    shutil.copytree(packages, folder / "packages", dirs_exist_ok=True)
    text = (KSUM / "link.toml").read_text()
    text = text.replace("M = 2560", f"M = {m}").replace("KT = 7", f"KT = {kt}")
    text = text.replace('split = "stream_k"', f'split = "{split}"').replace("grid = 8", f"grid = {grid}")
    (folder / "link.toml").write_text(text + extra)
    return folder / "link.toml"


def _rows(glue: str) -> list[tuple[int, ...]]:
    table = re.search(r"pl_split_rows\[\d+\]\[7\] = \{\n(.*?)\n\};", glue, re.S).group(1)
    return [tuple(int(x) for x in re.findall(r"-?\d+", line)) for line in table.splitlines()]


@pytest.mark.parametrize("split, m, kt, grid", [
    ("stream_k", 2560, 7, 8),     # 20 tiles of 7 k-tiles over 8 blocks: every block cuts two tiles
    ("stream_k", 1280, 3, 24),    # more blocks than tiles: 30 k-tiles over 24 blocks
    ("hybrid", 2560, 5, 6),       # 20 tiles over 6 blocks: 18 whole (three waves), the 2 left cut 3 ways
    ("hybrid", 128 * 700, 16, 132),  # the last wave of a large problem
])
@pytest.mark.slow
def test_a_split_link_runs_the_schedules_units(tmp_path, packages, split, m, kt, grid):
    kernel = pipelink.link(_spec(tmp_path, packages, split, m, kt, grid))
    plan, glue = kernel.plan, kernel.plan.glue.text
    tiles = m // 128
    assert plan.grid == grid and plan.num_tiles == tiles
    # the table is block_row's, block by block; the audit (run at every link) read it back as units
    assert _rows(glue) == [stream_k.block_row(split, tiles, kt, grid, b) for b in range(grid)]
    dp = stream_k.whole_tiles(split, tiles, grid)
    assert f"pl_tile < {dp}; pl_tile += {grid}" in glue
    assert check_glue(plan).ok
    (units,) = [c for c in plan.all_checks() if c.name == "split_units"]
    assert f"{dp} of {tiles} tiles whole" in units.detail and f"{stream_k.cut_tiles(split, tiles, kt, grid)} cut" in units.detail
    # the link-owned workspaces: two slots of 128 x 64 fp32 per block, one count per cut tile, which the
    # kernel sets back to 0 (so the runtime clears it before the first launch only, not before each)
    ws = {p["name"]: (p["shape"][0], p["workspace"]["zero"], p["workspace"].get("zero_once", False))
          for p in kernel.manifest["params"] if "workspace" in p}
    assert ws == {"glue.partials": (grid * 2 * 128 * 64 * 4, False, False),
                  "glue.tile_counts": (max(1, tiles - dp) * 4, False, True)}
    split_check = next(c for c in plan.all_checks() if c.name == "split")
    assert "mainloop.mma cut along k" in split_check.detail
    info, _ = inspect_cubin(kernel.cubin, plan.entry)
    assert info.local == 0 and info.spill_insns == 0  # the partials stay in registers
    assert any(b[0] == "RED" for b in info.barriers)  # the count's outcome, broadcast on the role's barrier


@pytest.mark.slow
def test_a_traced_split_link_has_a_row_for_every_unit(tmp_path, packages):
    # 2 tiles of 3 k-tiles over 3 blocks: block 1 runs the end of tile 0 and the start of tile 1, two
    # units where a tile schedule would give each block one row (ceil(2 / 3)): the trace must hold both
    kernel = pipelink.link(_spec(tmp_path, packages, m=256, kt=3, grid=3), trace=True)
    (trace,) = [p for p in kernel.manifest["params"] if p["name"] == "glue.trace"]
    assert [len(stream_k.block_units("stream_k", 2, 3, 3, b)) for b in range(3)] == [1, 2, 1]
    assert trace["shape"][:2] == [3, 2]


@pytest.mark.slow
def test_a_traced_split_link_stores_each_step_in_its_own_slot(tmp_path, packages):
    # A role's steps are emitted twice under a split (the whole tiles' loop, then the units' loop):
    # both must store to that step's slot. Counting on from the first loop mislabels every span
    # after it and stores the last ones past the row.
    kernel = pipelink.link(_spec(tmp_path, packages, split="hybrid", m=2560, kt=5, grid=6), trace=True)
    slots = kernel.manifest["trace"]["slots"]
    stored = [int(s) for s in re.findall(r"pl_trace_store\(p\.pl_trace, \w+, (\d+), pl_ts\)", kernel.plan.glue.text)]
    steps = [i for i, s in enumerate(slots) if s["role"] != "(whole block)"]
    assert steps and sorted(stored) == sorted([i for i in range(len(slots)) if i not in steps] + steps * 2)


@pytest.mark.slow
def test_split_tiles_is_the_glue_of_today(tmp_path, packages):
    whole = pipelink.link(_spec(tmp_path, packages, "tiles"))
    spec = _spec(tmp_path / "none", packages, "tiles")
    spec.write_text(spec.read_text().replace('split = "tiles"\n', ""))
    default = pipelink.link(spec)
    assert whole.plan.glue.text == default.plan.glue.text and whole.cubin == default.cubin
    assert "pl_split" not in whole.plan.glue.text
    assert not any("glue." in p["name"] for p in whole.manifest["params"])


def test_the_audit_reads_the_table_and_the_contributor_formula_back(tmp_path, packages):
    plan = pipelink.link(_spec(tmp_path, packages)).plan
    # the slot test off by one (a block whose range starts at the tile's first k-tile reads its tail slot):
    # seen where a block's range starts a split tile, as with more blocks than k-tiles in a tile
    short_ranges = pipelink.link(_spec(tmp_path, packages, m=1280, kt=3, grid=24)).plan
    result = check_glue(edit_glue(short_ranges, ir.SlotRead, lambda s: dataclasses.replace(
        s, slot=dataclasses.replace(s.slot, test=dataclasses.replace(s.slot.test, op=">")))))
    assert not result.ok and "glue.split_contributors" in {v.invariant for v in result.violations}
    # one row of the table a k-tile short: that tile is never completed
    def short(table):
        rows = list(table.rows)
        rows[1] = rows[1][:2] + (rows[1][2] - 1,) + rows[1][3:]
        return dataclasses.replace(table, rows=tuple(rows))

    result = check_glue(edit_glue(plan, ir.SplitTable, short))
    assert not result.ok and "glue.split_rows" in {v.invariant for v in result.violations}
    # the count left at K / 64 by the block that completes the tile: the runtime clears it before the first
    # launch only, so every later launch would find its tiles complete at the first contributor
    result = check_glue(edit_glue(plan, ir.SplitCount, lambda s: dataclasses.replace(s, reset=False)))
    assert not result.ok and "glue.split_count_reset" in {v.invariant for v in result.violations}


def test_a_split_too_large_for_its_table_is_refused(tmp_path, packages):
    with pytest.raises(SpecError) as info:
        pipelink.link(_spec(tmp_path, packages, grid=2049))
    assert info.value.field == "launch.grid" and "holds at most 2048, over by 1" in info.value.message


def test_a_split_outside_the_three_is_refused_on_load(tmp_path, packages):
    spec = _spec(tmp_path, packages)
    spec.write_text(spec.read_text().replace('split = "stream_k"', 'split = "split_k"'))
    with pytest.raises(SpecError) as info:
        pipelink.link(spec)
    assert info.value.field == "schedule.split" and "split_k" in info.value.message
    assert all(word in str(info.value) for word in ("tiles", "stream_k", "hybrid"))  # what it may be


@pytest.mark.parametrize("extra, error, field, words", [
    ("\n[launch]\ncluster = 2\n", SpecError, "schedule.split", "cluster"),
    ("", SpecError, "schedule.split", "persistent = false"),
])
def test_a_split_is_refused_where_it_cannot_work(tmp_path, packages, extra, error, field, words):
    spec = _spec(tmp_path, packages)
    text = spec.read_text()
    if "cluster" in extra:
        text = text.replace("[launch]\ngrid = 8\n", "[launch]\ngrid = 8\ncluster = 2\n")
    else:
        text = text.replace('split = "stream_k"', 'split = "stream_k"\npersistent = false')
    spec.write_text(text)
    with pytest.raises(error) as info:
        pipelink.link(spec)
    assert info.value.field == field and words in info.value.message


@pytest.mark.parametrize("edit, error, field, words", [
    (('reduce = "sum"\n', ""), ContractError, "port[0].reduce", "not a register port whose parts add up"),
    (('[schedule]\nk_tiles = "KT"\n', ""), SpecError, "schedule.split", "no instance declares [schedule] k_tiles"),
])
@pytest.mark.slow
def test_a_split_needs_a_mainloop_that_says_its_parts_add_up(tmp_path, packages, edit, error, field, words):
    folder = tmp_path / "edited"
    folder.mkdir()
    (folder / "ksum.toml").write_text((KSUM / "ksum.toml").read_text().replace(*edit))
    spec = _spec(tmp_path, packages)
    pipelink.pack(KSUM / "ksum.cu", folder / "ksum.toml", spec.parent / "packages" / "ksum.plc")
    with pytest.raises(error) as info:
        pipelink.link(spec)
    assert info.value.field == field and words in info.value.message


@pytest.mark.parametrize("edit, words", [
    (('direction = "out"', 'direction = "in"'), "(in, registers, fp32)"),
    (('dtype = "fp32"\nshape = { row', 'dtype = "bf16"\nshape = { row'), "(out, registers, bf16)"),
])
def test_only_an_fp32_register_out_port_may_say_its_parts_add_up(tmp_path, edit, words):
    (tmp_path / "ksum.toml").write_text((KSUM / "ksum.toml").read_text().replace(*edit))
    with pytest.raises(ContractError) as info:
        load_contract(tmp_path / "ksum.toml")
    assert info.value.field == "port[0].reduce" and words in info.value.message


def test_an_epilogue_in_another_role_is_refused(tmp_path, packages):
    spec = _spec(tmp_path, packages)
    spec.write_text(spec.read_text().replace('package = "packages/acc_sink.plc"',
                                             'package = "packages/acc_sink.plc"\nroles = { consumer = "store" }'))
    with pytest.raises(ContractError) as info:
        pipelink.link(spec)
    assert info.value.field == "entry[0].role" and "sink.sink runs on each tile but not after mainloop.mma" in \
        info.value.message


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("split, m, kt, grid", [
    ("stream_k", 2560, 7, 8), ("stream_k", 1280, 3, 24), ("hybrid", 2560, 5, 6), ("hybrid", 128 * 700, 16, 132),
    ("stream_k", 128 * 200, 80, 132),  # the Qwen M = 128 shape's tile and k-tile counts
])
def test_split_sums_are_exact_on_the_gpu(tmp_path, packages, split, m, kt, grid):
    import torch
    from pipelink.runtime import Runtime
    kernel = pipelink.link(_spec(tmp_path, packages, split, m, kt, grid))
    runtime = Runtime(kernel.cubin, kernel.manifest)
    tiles = m // 128
    for seed in range(3):  # the counts are cleared before the first launch; the kernel sets them back to 0 after
        gen = torch.Generator().manual_seed(seed)
        x = torch.randint(-8, 9, (tiles, kt, 8192), generator=gen).float()
        out = torch.full((m * 64,), float("nan"))
        xd, outd = x.reshape(-1).cuda(), out.cuda()
        runtime.launch_arrays([xd, outd])
        torch.cuda.synchronize()
        want = x.double().sum(1).float().reshape(-1)  # small integers: exact in fp32 in any order
        assert torch.equal(outd.cpu(), want), f"seed {seed}: {int((outd.cpu() != want).sum())} values differ"
    json.dumps(kernel.manifest)
