"""Linking the demo and the collision example with the real nvJitLink, and reading the cubins."""

import json
import re

import pytest

import pipelink
from pipelink.backend.cache import Cache
from pipelink.backend.inspect import dump_sass, inspect_cubin, normalized_sass
from pipelink.errors import PinnedCollision

from conftest import ROOT, classic_demo, edit


@pytest.mark.slow
def test_demo_links_and_every_decision_is_an_immediate(demo_dir):
    kernel = pipelink.link(demo_dir / "link.toml", cache=Cache(enabled=False))
    plan = kernel.plan
    assert [r.name for r in plan.roles] == ["producer", "consumer"]
    assert plan.block == 384 and plan.grid == 132 and plan.num_tiles == 32768 // 32
    sass = dump_sass(kernel.cubin)
    insns = re.findall(r"/\*[0-9a-f]{4}\*/\s+(.*?)\s*;", sass)
    # Named barriers: every allocated ID (with its thread count) is a BAR operand immediate.
    allocated = [b for b in plan.barriers if b.threads is not None]
    assert {b.id for b in allocated} == {1, 8}  # 1 pinned by tile_store, 8 = first free after its reserved 1..7
    for b in allocated:
        assert any(re.match(rf"BAR\.SYNC\S*\s+{hex(b.id)},\s*{hex(b.threads)}$", i) for i in insns), b
    # Shared memory: each buffer placed at a non-zero offset is addressed with an immediate in its range.
    immediates = {int(x, 16) for i in insns for x in re.findall(r"0x[0-9a-f]+", i)}
    placed = [s for s in plan.smem if s.offset]
    assert placed, "the demo has buffers at non-zero offsets"
    for s in placed:
        assert any(s.offset <= x < s.offset + s.bytes for x in immediates), s
    # mbarriers: their slots are SYNCS operands at the allocated offsets.
    for m in plan.mbarriers:
        assert any(i.startswith("SYNCS") and hex(m.offset) in i for i in insns), m
    assert not plan.postlink.findings, plan.postlink.findings
    assert plan.backend.resources.calls == 0 and plan.backend.resources.local == 0
    assert any(i.startswith("UTMALDG.2D") for i in insns), "the producer's copies are 2-D TMA tensor copies"


@pytest.mark.slow
def test_linking_twice_gives_identical_cubins(demo_dir):
    a = pipelink.link(demo_dir / "link.toml", cache=Cache(enabled=False))
    b = pipelink.link(demo_dir / "link.toml", cache=Cache(enabled=False))
    assert a.cubin == b.cubin


@pytest.mark.slow
def test_monolithic_control_has_the_same_sass(demo_dir):
    linked = pipelink.link(demo_dir / "link.toml", cache=Cache(enabled=False))
    mono = pipelink.link(demo_dir / "link.toml", mode="monolithic", cache=Cache(enabled=False))
    a = inspect_cubin(linked.cubin, linked.plan.entry)[0]
    b = inspect_cubin(mono.cubin, mono.plan.entry)[0]
    assert normalized_sass(a.instructions) == normalized_sass(b.instructions)


@pytest.mark.slow
def test_cache_hit_and_corrupted_entry_rebuilt(demo_dir, tmp_path):
    cache = Cache(root=tmp_path / "cache")
    cold = pipelink.link(demo_dir / "link.toml", cache=cache)
    assert cold.plan.backend.link == "linked"
    warm = pipelink.link(demo_dir / "link.toml", cache=cache)
    assert warm.plan.backend.glue_compile == "cache hit" and warm.plan.backend.link == "cache hit"
    assert warm.cubin == cold.cubin
    # Corrupt every cached payload: the next link notices, rebuilds, and gets the same bytes.
    for payload in (tmp_path / "cache").rglob("*"):
        if payload.is_file() and payload.suffix != ".sha256":
            payload.write_bytes(payload.read_bytes()[:-7] + b"garbage")
    cache.events.clear()
    again = pipelink.link(demo_dir / "link.toml", cache=cache)
    assert any(e.startswith("corrupt") for e in cache.events)
    assert again.plan.backend.link == "linked" and again.cubin == cold.cubin


def test_outputs_written(demo_dir):
    kernel = pipelink.link(demo_dir / "link.toml")
    files = kernel.save(demo_dir / "out")
    assert set(files) == {"cubin", "manifest", "plan", "glue", "report", "smem_map"}
    assert "post-link" in files["report"].read_text() and "glue.mbarriers" in files["report"].read_text()
    manifest = json.loads(files["manifest"].read_text())
    assert manifest["entry"] == "pl_tile_fold" and manifest["dynamic_smem"] == kernel.plan.smem_bytes
    assert [p["name"] for p in manifest["params"]] == ["load.x", "store.y"]
    plan = json.loads(files["plan"].read_text())
    assert plan["smem"]["bytes"] == kernel.plan.smem_bytes and "pl_bar_sync(8, 256)" in plan["glue"]
    assert files["smem_map"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert files["cubin"].read_bytes() == kernel.cubin
    assert not list((demo_dir / "out").glob(".*.tmp"))


@pytest.mark.slow
def test_colliding_components(collide_dir):
    # Symbol linking: both keep barrier 1 and scratch at 0; it links without a word of complaint.
    symbol = pipelink.link(collide_dir / "link.toml", mode="symbol")
    assert {b.id for b in symbol.plan.barriers} == {1}
    assert {s.offset for s in symbol.plan.smem} == {0}
    assert any("overlaps" in w for w in symbol.plan.all_warnings())  # recorded, not refused
    sym_bars = {b[1] for b in inspect_cubin(symbol.cubin, symbol.plan.entry)[0].barriers}
    assert sym_bars == {"0x0", "0x1"}
    # pipelink: relocated to distinct IDs and disjoint scratch.
    linked = pipelink.link(collide_dir / "link.toml")
    ids = sorted(b.id for b in linked.plan.barriers)
    assert ids == [1, 2]
    spans = sorted((s.offset, s.offset + s.bytes) for s in linked.plan.smem)
    assert spans[0][1] <= spans[1][0]
    bars = {b[1] for b in inspect_cubin(linked.cubin, linked.plan.entry)[0].barriers}
    assert {"0x1", "0x2"} <= bars
    # Pinned collision: refused, naming both components and packages.
    with pytest.raises(PinnedCollision) as info:
        pipelink.link(collide_dir / "link_pinned.toml")
    msg = str(info.value)
    assert "block_sum" in msg and "block_max" in msg and "ID 1" in msg and "block_sum_pinned.plc" in msg


@pytest.mark.slow
def test_demo_symbol_mode_reports_what_it_did_not_check(demo_dir):
    symbol = pipelink.link(demo_dir / "link.toml", mode="symbol")
    assert any("store.staging" in w and "overlaps" in w for w in symbol.plan.all_warnings())


TEST_COMPONENTS = ROOT / "tests" / "components"


@pytest.mark.slow
def test_smem_to_smem_transfer_converts_layout(relayout_dir):
    kernel = pipelink.link(relayout_dir / "link.toml")
    (t,) = kernel.plan.transfers
    assert t.kind == "smem_to_smem" and t.barrier is not None
    load, emit = (next(s for s in kernel.plan.smem if s.name == n) for n in ("load.buf", "emit.buf"))
    assert load.offset + load.bytes <= emit.offset or emit.offset + emit.bytes <= load.offset, \
        "a copy's source and destination must not share memory"
    glue = kernel.plan.glue.text
    assert "smem -> smem copy" in glue and "33" in glue  # destination layout c * 33 + r
    assert glue.count(f"pl_bar_sync({t.barrier}, 128)") == 2
    assert not kernel.plan.postlink.findings


@pytest.mark.slow
def test_same_package_twice_with_different_bindings(tmp_path, collide_dir):
    spec = collide_dir / "twice.toml"
    spec.write_text((collide_dir / "link.toml").read_text().replace("block_max.plc", "block_sum.plc"))
    kernel = pipelink.link(spec)
    calls = [line.strip() for line in kernel.plan.glue.text.splitlines() if line.strip().startswith("block_sum_tile(")]
    assert len(calls) == 2 and calls[0] != calls[1]  # one symbol, two sets of literal bindings
    bars = {b[1] for b in inspect_cubin(kernel.cubin, kernel.plan.entry)[0].barriers}
    assert {"0x1", "0x2"} <= bars
    assert kernel.plan.backend.resources.calls == 0


def _sink_spec(demo_dir, fragment_row: str):
    contract = demo_dir / "acc_sink.toml"
    contract.write_text((TEST_COMPONENTS / "acc_sink.toml").read_text().replace('"t // 16 + 16 * (v // 4)"', f'"{fragment_row}"'))
    pipelink.pack(TEST_COMPONENTS / "acc_sink.cu", contract, demo_dir / "packages" / "acc_sink.plc")
    spec = classic_demo(demo_dir / "link.toml").read_text()  # acc_sink takes 128-row tiles
    spec = spec.replace('package = "packages/tile_store.plc"\nroles = { store = "consumer" }',
                        'package = "packages/acc_sink.plc"').replace('name = "store"', 'name = "sink"')
    (demo_dir / "link.toml").write_text(spec.replace('to = "store.tile"', 'to = "sink.acc"'))
    return demo_dir / "link.toml"


@pytest.mark.slow
def test_registers_to_registers_same_fragment(demo_dir):
    kernel = pipelink.link(_sink_spec(demo_dir, "t // 16 + 16 * (v // 4)"))
    assert [t.kind for t in kernel.plan.transfers] == ["alias", "reg_to_reg"]
    assert "acc_sink_run(ctx, pl_bind_acc_sink{32768, p.sink_out}, reduce_acc);" in kernel.plan.glue.text
    assert kernel.plan.backend.resources.local == 0  # the array stayed in registers


def test_registers_with_another_fragment_layout_are_refused(demo_dir):
    with pytest.raises(pipelink.errors.PortMismatch, match="register fragments differ"):
        pipelink.link(_sink_spec(demo_dir, "(t // 16) * 32 + v"))


@pytest.mark.slow
def test_cluster_launch_keeps_padding_warps_for_the_cluster_barrier(demo_dir):
    """[launch] cluster = 2 on the demo: cluster dims on the entry, cluster barriers at start and end,
    and the producer's padding warps skip the body instead of returning (a returned warp would never
    reach the cluster barrier)."""
    spec = demo_dir / "link.toml"
    edit(spec, "[schedule]", "[launch]\ncluster = 2\n\n[schedule]")
    kernel = pipelink.link(spec)
    glue = kernel.plan.glue.text
    assert "__cluster_dims__(2, 1, 1)" in glue and glue.count("pl_cluster_sync();") == 2
    assert "return;  // padding warps idle" not in glue and "if (pl_t < 32) {" in glue
    ops = inspect_cubin(kernel.cubin, kernel.plan.entry)[0].opcode_histogram
    assert ops.get("UCGABAR_ARV") == 2 and ops.get("UCGABAR_WAIT") == 2
