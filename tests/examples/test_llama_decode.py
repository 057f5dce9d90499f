"""The Llama-3.2-1B decode block (issue 14, docs/design/llama_decode.md): three components, each a
whole-block phase ordered by its own grid barrier, linked into one kernel. CPU: every batch and
context links in both modes with no finding, the phases share one smem region, the caches are
readwrite operands handed across by global ports. GPU: verify against the float64 reference
(the caches' new rows included)."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
from rich.console import Console

import pipelink
from pipelink.backend.inspect import inspect_cubin
from pipelink.errors import DeviceError
from pipelink.link.conform import attribute
from pipelink.link.pipeline import plan_link
from pipelink.runtime import check_same_workspaces, workspace_layout

from conftest import ROOT, gpu_ok

_spec = importlib.util.spec_from_file_location("llama_shapes", ROOT / "examples" / "llama_decode" / "shapes.py")
shapes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shapes)
QUIET = Console(file=open("/dev/null", "w"), width=140)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    return shapes.pack(tmp_path_factory.mktemp("llama"))


@pytest.mark.parametrize("attention", sorted(shapes.ATTENTION))
@pytest.mark.parametrize("batch,context", [(1, 16), (64, 4096)])
def test_the_block_links_in_both_modes(packages, tmp_path, batch, context, attention):
    spec = shapes.write_spec(tmp_path, packages, batch, context, attention)
    layouts = []
    for mode in ("pipelink", "monolithic"):
        kernel = pipelink.link(spec, mode=mode)
        layouts.append(kernel.manifest)
        plan = kernel.plan
        assert plan.grid == 132 and plan.block == 256
        assert plan.postlink.conformance == () and not plan.postlink.findings
        params = {p["name"]: p["access"] for p in kernel.manifest["params"] if "workspace" not in p}
        assert params == {"qkv.x": "read", "qkv.wqkv": "read", "qkv.inv_freq": "read", "qkv.k_cache": "readwrite",
                          "qkv.v_cache": "readwrite", "oproj.wo": "read", "oproj.y": "write"}
        text = plan.glue.text
        assert text.index("llama_qkv_rope(") < text.index(f"llama_attn_{attention}(") < text.index("llama_oproj_residual(")
        offsets = {s.name: s.offset for s in plan.smem}
        assert offsets["qkv.ring"] == offsets["oproj.ring"] == 0  # phases apart in time share smem
    # the benches launch the monolithic control on the linked kernel's workspaces (its grid-barrier
    # counters at the same addresses): both modes declare the same ones; another layout is refused.
    # The counters leave themselves at 0 (grid barriers, the projections' group counts), so no launch
    # waits on a memset: the runtime clears them before its first launch only.
    linked, monolithic = layouts
    assert workspace_layout(linked) == workspace_layout(monolithic)
    cleared = {name: when for name, _, when in workspace_layout(linked)}
    assert "each launch" not in cleared.values()
    assert {name for name, when in cleared.items() if when == "first launch"} == {
        "qkv.counts", "attn.arrived", "oproj.counts", "oproj.arrived"}
    check_same_workspaces(monolithic, linked)
    changed = {**monolithic, "params": [dict(p) for p in monolithic["params"]]}
    ws = next(p for p in changed["params"] if p.get("workspace") is not None)
    ws["shape"] = [int(ws["shape"][0]) + 256]
    with pytest.raises(DeviceError, match=f"{ws['name']}"):
        check_same_workspaces(changed, linked)


def test_the_projections_spread_is_a_fact_of_the_spec(packages, tmp_path):
    # gemv_split chooses how both projections spread over the blocks (blocks per 64-row group); the
    # contracts allow 1, 2, 4 and 8, and the example links with 1 unless told otherwise.
    assert "gemv_split = 1" in shapes.write_spec(tmp_path / "default", packages, 1, 16, "short").read_text()
    spec = shapes.write_spec(tmp_path / "stream_k", packages, 1, 16, "short", {"gemv_split": 8})
    assert "gemv_split = 8" in spec.read_text() and "gemv_split = 1" not in spec.read_text()
    assert not pipelink.link(spec).plan.postlink.findings
    with pytest.raises(pipelink.errors.FactDomainError, match="gemv_split"):
        pipelink.link(shapes.write_spec(tmp_path / "three", packages, 1, 16, "short", {"gemv_split": 3}))
    # each projection may take its own spread: an [[instance]] fact pins it for that instance alone
    own = shapes.write_spec(tmp_path / "own", packages, 1, 16, "short", {"oproj.gemv_split": 4})
    plan = pipelink.link(own).plan
    spread = {i.name: i.facts["gemv_split"] for i in plan.instances if "gemv_split" in i.facts}
    assert spread == {"qkv": 1, "oproj": 4}
    assert "facts = { gemv_split = 4 }" in own.read_text()
    # the example's own spread: 32-row parts, 16 for the o-projection, whole groups (no split); a spread asked
    # for replaces the parts (gemv_split = 2 alone is whole groups over two blocks, which the limit requires)
    plan = pipelink.link(shapes.write_spec(tmp_path / "parts", packages, 1, 16, "short")).plan
    rows = {i.name: (i.facts["gemv_rows"], i.facts["gemv_split"]) for i in plan.instances if "gemv_rows" in i.facts}
    assert rows == {"qkv": (32, 1), "oproj": (16, 1)}
    assert "gemv_rows" not in shapes.write_spec(tmp_path / "two", packages, 1, 16, "short", {"gemv_split": 2}).read_text()


@pytest.mark.parametrize("attention", sorted(shapes.ATTENTION))
def test_a_cache_without_room_for_the_new_row_is_refused(packages, tmp_path, attention):
    # The step stores the new token's K and V at row L of Lmax and reads rows 0 .. L: each component's
    # [[facts.limit]] (Lmax - L >= 1) refuses L = Lmax, which would write one row into the next
    # (sequence, head) slice of the cache; L = Lmax - 1 links.
    spec = shapes.write_spec(tmp_path, packages, 1, 64, attention)
    text = spec.read_text()
    spec.write_text(text.replace(f"Lmax = {shapes.cache_rows(64)}", "Lmax = 64"))
    with pytest.raises(pipelink.errors.FactDomainError) as info:
        plan_link(spec)
    e = info.value
    assert e.field == "facts.limit[0]" and e.component in ("llama_qkv_rope", shapes.ATTENTION[attention])
    assert "L = 64" in e.message and "Lmax = 64" in e.message and "Lmax - L = 0" in e.message
    assert "below its least allowed value 1 by 1" in e.message and "L < Lmax" in e.hint
    spec.write_text(text.replace(f"Lmax = {shapes.cache_rows(64)}", "Lmax = 128").replace("L = 64", "L = 127"))
    assert plan_link(spec).facts["L"] == 127


@pytest.mark.parametrize("batch", [1, 64])
def test_the_slices_are_a_fact_and_eight_fit_the_register_file(packages, tmp_path, batch):
    # gemv_slices picks the projections' warp layout at link time (LTO drops the other core): 8 slices hold
    # twice the accumulators, and at B = 64 must still fit 255 registers without spilling. Whole groups, as the
    # GPU test links them: at B = 1 nvcc puts the attention's divergent __syncwarp path past EXIT, with a register
    # program order sees redefined (the conformance check follows the BRA.DIV there, or it reports an overrun).
    kernels = {n: pipelink.link(shapes.write_spec(tmp_path / str(n), packages, batch, 16, "short",
                                                  {"gemv_split": 1, "gemv_slices": n}))
               for n in (4, 8)}
    for n, kernel in kernels.items():
        r = kernel.plan.backend.resources
        assert kernel.plan.facts["gemv_slices"] == n and r.registers <= 255 and r.local == 0 and r.stack == 0
        assert not kernel.plan.postlink.findings
    assert kernels[4].cubin != kernels[8].cubin
    with pytest.raises(pipelink.errors.FactDomainError, match="gemv_slices"):
        pipelink.link(shapes.write_spec(tmp_path / "two", packages, batch, 16, "short", {"gemv_slices": 2}))


@pytest.mark.parametrize("batch", [1, 64])
def test_the_rows_of_a_unit_are_a_fact_and_each_part_copies_its_two_bands(packages, tmp_path, batch):
    # gemv_rows cuts each 64-row group into parts of 32 or 16 rows (two bands each, so RoPE's pairs (i, i + 32)
    # stay in one block): the TMA box is a band, the ring's full barrier expects both bands, the counts are the units',
    # and the ring (gemv_stages) holds as many more stages as its stages are smaller.
    for rows in (64, 32, 16):
        kernel = pipelink.link(shapes.write_spec(tmp_path / str(rows), packages, batch, 16, "short",
                                                 {"gemv_rows": rows, "gemv_stages": 256 // rows}))
        plan = kernel.plan
        r = plan.backend.resources
        assert plan.facts["gemv_rows"] == rows and r.registers <= 255 and r.local == 0 and r.stack == 0
        assert not plan.postlink.findings
        for inst, groups in (("qkv", 48), ("oproj", 32)):
            full = next(m for m in plan.mbarriers if m.name == f"{inst}.full")
            empty = next(m for m in plan.mbarriers if m.name == f"{inst}.empty")
            assert full.tx_bytes == rows * 256 * 2
            # the ring's 128 KB hold a stage a chunk of the unit: 4, 8 or 16 stages, an mbarrier pair each
            ring = next(s for s in plan.smem if s.name == f"{inst}.ring")
            assert full.count == empty.count == 256 // rows and ring.bytes == full.count * rows * 256 * 2
            counts = next(p for p in kernel.abi.params if p.ref.instance == inst and p.ref.name == "counts")
            assert counts.shape == (groups * (64 // rows) * 4,)
            weight = next(p for p in kernel.abi.params if p.ref.instance == inst and p.tma is not None)
            assert weight.tma["box"] == [rows // 2, 256]
    # a group both cut into parts and split over blocks is refused, with the limit's field named
    with pytest.raises(pipelink.errors.FactDomainError, match="facts.limit"):
        pipelink.link(shapes.write_spec(tmp_path / "both", packages, batch, 16, "short", {"gemv_rows": 32, "gemv_split": 2}))
    # 8 column slices are for whole groups only (a contract limit: the entries' code, weighed by LTO's inliner before
    # the facts fold, stays clear of its limit)
    with pytest.raises(pipelink.errors.FactDomainError, match="gemv_slices - 4"):
        pipelink.link(shapes.write_spec(tmp_path / "sl8", packages, batch, 16, "short", {"gemv_rows": 32, "gemv_slices": 8}))
    # more stages than the ring's 128 KB hold are refused (8 stages of whole groups' 32 KB chunks)
    with pytest.raises(pipelink.errors.FactDomainError, match="gemv_stages \\* gemv_rows"):
        pipelink.link(shapes.write_spec(tmp_path / "deep", packages, batch, 16, "short", {"gemv_rows": 64, "gemv_stages": 8}))


def test_staging_the_activation_is_a_fact_up_to_eight_rows(packages, tmp_path):
    # gemv_act_smem: the activation in smem (B rows of 4 KB + 64 B) before the projection's first chunk (the example
    # no longer chooses it: slower as measured, shapes.py). The same smem region holds it in both phases; past 8 rows
    # it is refused.
    staged = {"gemv_act_smem": 1}
    kernel = pipelink.link(shapes.write_spec(tmp_path / "b8", packages, 8, 16, "short", staged))
    plan = kernel.plan
    assert plan.instance("qkv").facts["gemv_act_smem"] == 1 and plan.instance("oproj").facts["gemv_act_smem"] == 1
    act = {s.name: s for s in plan.smem if s.name.endswith(".act")}
    assert act["qkv.act"].bytes == act["oproj.act"].bytes == 8 * (2048 * 2 + 64) + 16
    assert act["qkv.act"].offset == act["oproj.act"].offset  # phases apart in time share smem
    r = plan.backend.resources
    assert r.local == 0 and r.stack == 0 and not plan.postlink.findings
    big = pipelink.link(shapes.write_spec(tmp_path / "b64", packages, 64, 16, "short"))
    assert big.plan.instance("qkv").facts["gemv_act_smem"] == 0
    assert big.plan.instance("qkv").facts["gemv_core"] == big.plan.instance("oproj").facts["gemv_core"] == 1
    with pytest.raises(pipelink.errors.FactDomainError, match="gemv_act_smem \\* B"):
        pipelink.link(shapes.write_spec(tmp_path / "over", packages, 16, 16, "short", {"qkv.gemv_act_smem": 1}))
    # Both projections staged. Before each component's compile named its headers by paths of its own
    # (nvcc.component_view, src_<name>), ptxas gave qkv's instructions o-proj's inlining chain (the two inline
    # llama_gemv.cuh's run_sliced at one line) and the conformance check refused this link: qkv's mbarriers judged
    # against o-proj's contract. Every mbarrier wait on qkv's slots is attributed to qkv.
    both = pipelink.link(shapes.write_spec(tmp_path / "both", packages, 1, 16, "short", staged))
    info, _ = inspect_cubin(both.cubin, both.plan.entry)
    qkv = [(m.offset, m.offset + 8 * m.count) for m in both.plan.mbarriers if m.name.startswith("qkv.")]
    waits = [(int(re.search(r"\+(0x[0-9a-f]+)\]", insn).group(1), 16), owner)
             for insn, owner in zip(info.instructions, attribute(both.plan, info)) if "TRYWAIT" in insn]
    assert {owner for at, owner in waits if any(lo <= at < hi for lo, hi in qkv)} == {"qkv"}


# The wgmma core in both projections, on the example's parts (named here: asking for a spread drops shapes.CHOICES's)
WGMMA = {"gemv_core": 1, "gemv_stages": 4, "oproj.gemv_stages": 4, "gemv_act_smem": 0, "gemv_rows": 32,
         "oproj.gemv_rows": 16}


@pytest.mark.parametrize("batch", [8, 64])
def test_the_core_is_a_fact_and_the_wgmma_core_reads_swizzled_slabs(packages, tmp_path, batch):
    # gemv_core = 1: each ring stage holds the unit's weights as 128-byte-swizzled slabs (TMA boxes of a band by 64
    # columns, the tensor map's swizzle from the fact) and the chunk's 64 activation rows beside them (cp.async, one
    # arrival each of the 256 threads on `full`), and wgmma reads both from smem: m64n32k16 for qkv's 32-row parts,
    # m64n16k16 for o-proj's 16-row ones, eight a chunk each (two warpgroups, two slabs each).
    kernel = pipelink.link(shapes.write_spec(tmp_path / "wg", packages, batch, 16, "short", WGMMA))
    plan = kernel.plan
    r = plan.backend.resources
    assert r.local == 0 and r.stack == 0 and not plan.postlink.findings and plan.smem_bytes <= 227 * 1024
    info, _ = inspect_cubin(kernel.cubin, plan.entry)
    shapes_used = sorted(re.findall(r"HGMMA\.(64x\d+x16)", "\n".join(info.instructions)))
    assert shapes_used == ["64x16x16"] * 8 + ["64x32x16"] * 8
    assert not any(insn.startswith("HMMA") for insn in info.instructions)  # attn_short has no mma
    for inst, rows in (("qkv", 32), ("oproj", 16)):
        full = next(m for m in plan.mbarriers if m.name == f"{inst}.full")
        assert full.count == 4 and full.arrivals == 257 and full.tx_bytes == rows * 256 * 2
        ring = next(s for s in plan.smem if s.name == f"{inst}.ring")
        assert ring.offset % 1024 == 0 and ring.bytes == 4 * (64 + rows) * 512
        weight = next(p for p in kernel.abi.params if p.ref.instance == inst and p.tma is not None)
        assert weight.tma == {"box": [rows // 2, 64], "swizzle": 128}
    # what the wgmma core does not take, refused with the contract's limit named
    for facts, limit in (({**WGMMA, "gemv_act_smem": 1}, "gemv_core \\* gemv_act_smem"),  # (at B <= 8: the staging's own limit)
                         ({**WGMMA, "gemv_rows": 64}, "gemv_core \\* gemv_rows"),
                         ({**WGMMA, "gemv_stages": 8}, "gemv_core \\* gemv_stages")):
        with pytest.raises(pipelink.errors.FactDomainError, match=limit):
            pipelink.link(shapes.write_spec(tmp_path / "no", packages, min(batch, 8), 16, "short", facts))


@pytest.mark.parametrize("batch", [8, 64])
def test_clusters_of_two_share_the_wgmma_cores_activation(packages, tmp_path, batch):
    # [launch] cluster = 2 (the projections' fact cluster_ctas): each block copies half of every activation chunk and
    # hands it to its peer by a bulk copy between the two blocks' smem (UBLKCP), so a cluster reads the activation from
    # L2 once. `full` counts thread 0's two arrivals and the weights' bytes plus the peer's half; `empty` both blocks'
    # warps; `half` this block's copies. The mma.sync core is refused in clusters.
    kernel = pipelink.link(shapes.write_spec(tmp_path / "pair", packages, batch, 16, "short", {**WGMMA, "cluster_ctas": 2}))
    plan = kernel.plan
    r = plan.backend.resources
    assert plan.spec.launch.cluster == 2 and plan.grid == 132
    assert r.local == 0 and r.stack == 0 and not plan.postlink.findings and plan.smem_bytes <= 227 * 1024
    info, _ = inspect_cubin(kernel.cubin, plan.entry)
    ops = [insn.split(" ")[0] for insn in info.instructions]
    assert sum(op.startswith("UBLKCP") for op in ops) >= 2 and sum(op.startswith("HGMMA") for op in ops) == 16
    for inst, rows in (("qkv", 32), ("oproj", 16)):
        m = {x.name.split(".")[1]: x for x in plan.mbarriers if x.name.startswith(inst + ".")}
        assert (m["full"].arrivals, m["full"].tx_bytes) == (2, rows * 512 + 64 * 128 * 2)
        assert m["empty"].arrivals == 16 and m["half"].arrivals == 256 and m["half"].count == 4
    # the monolithic control builds the same kernel from the same sources (the table's linked / monolithic pair)
    control = pipelink.link(shapes.write_spec(tmp_path / "pair", packages, batch, 16, "short", {**WGMMA, "cluster_ctas": 2}),
                            mode="monolithic")
    assert control.plan.backend.resources.registers == r.registers and not control.plan.postlink.findings
    with pytest.raises(pipelink.errors.FactDomainError, match="cluster_ctas - 1"):
        pipelink.link(shapes.write_spec(tmp_path / "sync", packages, 64, 16, "short", {"cluster_ctas": 2, "gemv_core": 0}))


def test_clusters_of_two_take_pairs_of_units_chunk_for_chunk():
    # llama_gemv.cuh's block_first with share = 2, in integers as the device computes it: the clusters (blocks 2c, 2c + 1)
    # take pairs of units, rank 0 the first half of its cluster's units and rank 1 the rest, so every unit is in one
    # block, both blocks of a cluster run as many iterations, and their k-th iterations read the same chunk's columns.
    grid, per_group = 132, 2048 // 256
    for units in (96, 128, 192, 64, 2):
        def first(blk):
            p0, p1 = (blk // 2) * (units // 2) // (grid // 2), (blk // 2 + 1) * (units // 2) // (grid // 2)
            return (2 * p0 + blk % 2 * (p1 - p0)) * per_group
        ranges = [range(first(b), first(b + 1)) for b in range(grid)]
        assert sorted(it for r in ranges for it in r) == list(range(units * per_group))
        for c in range(grid // 2):
            a, b = ranges[2 * c], ranges[2 * c + 1]
            assert len(a) == len(b) and all(x % per_group == y % per_group for x, y in zip(a, b))


@pytest.mark.parametrize("attention", sorted(shapes.ATTENTION))
def test_a_block_of_other_than_eight_warps_is_refused(packages, tmp_path, attention):
    # Every phase runs in every warp of the block and is written for 8 of them (the projections' slices and ring
    # arrivals, the attentions' per-warp buffers): each contract declares block_threads = 256. An attention put in
    # a kernel role of its own makes a block of 16 warps, which linked before and would have run the projections
    # in 16 warps written for 8; now the link offers block_threads = 512, which their domains refuse.
    spec = shapes.write_spec(tmp_path, packages, 1, 16, attention)
    text = spec.read_text()
    attn = text.index('name = "attn"')
    role = text.index('roles = { work = "producer" }', attn)
    spec.write_text(text[:role] + 'roles = { work = "attention" }' + text[role + len('roles = { work = "producer" }'):])
    with pytest.raises(pipelink.errors.FactDomainError) as info:
        plan_link(spec)
    e = info.value
    assert e.field == "facts.requires.block_threads" and "block_threads=512" in e.message
    assert "the block's threads (producer 256 + attention 256)" in e.message and "[256]" in e.message


def test_swapping_the_attention_is_one_line_of_the_spec(packages, tmp_path):
    short, long = (shapes.write_spec(tmp_path / a, packages, 8, 512, a).read_text().splitlines() for a in ("short", "long"))
    changed = [(a, b) for a, b in zip(short, long) if a != b]
    assert len(short) == len(long) and len(changed) == 1 and "attn_long.plc" in changed[0][1]


def test_the_long_attention_streams_kv_through_its_ring(packages, tmp_path):
    plan = pipelink.link(shapes.write_spec(tmp_path, packages, 1, 4096, "long")).plan
    full, empty = (next(m for m in plan.mbarriers if m.name == f"attn.{n}") for n in ("full", "empty"))
    assert (full.count, full.arrivals, empty.arrivals) == (8, 1, 8)
    ring = next(s for s in plan.smem if s.name == "attn.ring")
    assert ring.bytes == 8 * 16384 and ring.offset % 128 == 0


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("attention", sorted(shapes.ATTENTION))
@pytest.mark.parametrize("batch,context", [(1, 16), (8, 512), (64, 16), (1, 4096), (64, 1000)])
def test_the_block_matches_the_reference(packages, tmp_path, batch, context, attention):
    spec = shapes.write_spec(tmp_path, packages, batch, context, attention)
    _verify_block(spec, tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("split", [2, 4, 8])
@pytest.mark.parametrize("batch,context", [(1, 16), (64, 16), (8, 512)])
def test_split_projections_match_the_reference(packages, tmp_path, batch, context, split):
    # The example links parts of groups (shapes.CHOICES); the cross-block fix-up of groups split over 2 or
    # 4 blocks, or over stream-K's single iterations (8), is checked here.
    spec = shapes.write_spec(tmp_path, packages, batch, context, "short", {"gemv_split": split})
    _verify_block(spec, tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("batch,context,split", [(1, 16, 1), (64, 16, 1), (64, 16, 2), (8, 512, 8), (64, 4096, 1)])
def test_eight_column_slices_match_the_reference(packages, tmp_path, batch, context, split):
    # gemv_slices = 8: each warp all 64 weight rows of 32 columns, the eight slices' sums met in four.
    attention = "long_wt" if context > 512 else "short"
    spec = shapes.write_spec(tmp_path, packages, batch, context, attention, {"gemv_split": split, "gemv_slices": 8})
    _verify_block(spec, tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("batch,context,staged", [(1, 16, "oproj"), (8, 512, "oproj"), (8, 16, "qkv"), (1, 4096, "qkv"),
                                                   (8, 16, "both")])
def test_the_staged_activation_matches_the_reference(packages, tmp_path, batch, context, staged):
    # gemv_act_smem = 1: the projection's activation staged whole in smem first (each alone and both; the example
    # does not choose it; o-proj's is read through L2, the attention wrote it in the same launch).
    attention = "long_wt" if context > 512 else "short"
    facts = {f"{inst}.gemv_act_smem": int(staged in (inst, "both")) for inst in ("qkv", "oproj")}
    spec = shapes.write_spec(tmp_path, packages, batch, context, attention, facts)
    _verify_block(spec, tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("batch,context,qkv_rows,oproj_rows,cluster", [
    (64, 16, 32, 16, 1), (33, 16, 32, 16, 1), (8, 512, 32, 16, 1), (1, 16, 32, 16, 1), (64, 16, 16, 32, 1),
    (64, 4096, 32, 16, 1), (64, 16, 32, 16, 2), (33, 512, 32, 32, 2), (64, 4096, 32, 16, 2)])
def test_the_wgmma_core_matches_the_reference(packages, tmp_path, batch, context, qkv_rows, oproj_rows, cluster):
    # gemv_core = 1 in both projections (the activation as wgmma's A, rows past the batch zero-filled: 33 is not a
    # multiple of 16; o-proj's is written by the attention in the same launch and copied through L2); with clusters of
    # two, each block copies half of every activation chunk and gets the other half from its peer.
    attention = "long_wt" if context > 512 else "short"
    facts = {**WGMMA, "qkv.gemv_rows": qkv_rows, "oproj.gemv_rows": oproj_rows, "cluster_ctas": cluster}
    spec = shapes.write_spec(tmp_path, packages, batch, context, attention, facts)
    _verify_block(spec, tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("batch,context,rows", [(1, 16, 32), (64, 16, 32), (64, 16, 16), (8, 512, 16), (64, 4096, 32)])
def test_parts_of_groups_match_the_reference(packages, tmp_path, batch, context, rows):
    # gemv_rows = 32 or 16: each block a part of a group (two bands), its epilogue on its own columns only (4 column
    # slices: 8 are for whole groups).
    attention = "long_wt" if context > 512 else "short"
    spec = shapes.write_spec(tmp_path, packages, batch, context, attention, {"gemv_rows": rows, "gemv_slices": 4})
    _verify_block(spec, tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_the_control_launched_on_the_linked_kernels_workspaces_computes_the_same_block(packages, tmp_path):
    # The benches time the monolithic control on the linked kernel's workspaces (one grid-barrier
    # counter, one set of partial sums), launched in turn many times. The counters are cleared before
    # a runtime's first launch only (zero_once): each launch must leave them as it found them. So each
    # launch gets inputs of its own (a launch that passed a barrier early would read the previous one's
    # q or attention output), and is compared with the same inputs' block from a runtime of its own.
    import torch
    from pipelink.verify.child import Kernel
    spec = shapes.write_spec(tmp_path, packages, 1, 16, "short")
    job = {"inputs": pipelink.load_spec(spec).verify.inputs}
    files = {}
    for mode in ("pipelink", "monolithic"):
        linked = pipelink.link(spec, mode=mode)
        files[mode] = {"cubin": tmp_path / f"{mode}.cubin", "manifest": tmp_path / f"{mode}.json"}
        files[mode]["cubin"].write_bytes(linked.cubin)
        files[mode]["manifest"].write_text(json.dumps(linked.manifest))

    def block(kernel, seed):
        outputs = kernel.outputs()
        kernel.launch({**kernel.inputs(seed=seed), **outputs})
        torch.cuda.synchronize()
        return outputs["oproj.y"].float()

    seeds = (0, 1, 2)
    truth = {seed: block(Kernel(files["pipelink"], job), seed) for seed in seeds}  # each a first launch
    kernels = {mode: Kernel(files[mode], job) for mode in files}
    kernels["monolithic"].runtime.share_workspaces(kernels["pipelink"].runtime)
    for seed in (*seeds, *seeds):
        for mode in ("pipelink", "monolithic"):
            y = block(kernels[mode], seed)
            assert torch.isfinite(y).all()
            assert (torch.linalg.vector_norm(y - truth[seed]) / torch.linalg.vector_norm(truth[seed])).item() < 1e-3, \
                (mode, seed)
    assert kernels["monolithic"].runtime.workspace_addresses == kernels["pipelink"].runtime.workspace_addresses
    apart = torch.linalg.vector_norm(truth[1] - truth[0]) / torch.linalg.vector_norm(truth[0])
    assert apart.item() > 0.1  # the seeds' blocks differ: a launch on stale data would be seen


def _verify_block(spec, tmp_path):
    result = pipelink.verify(spec, out_dir=tmp_path / "run", bench=False, seeds=2, timeout=60, console=QUIET)
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]
    c = result.rung("correctness").figures
    assert c["oproj.y.unwritten"] == 0 and c["oproj.y.rel_l2"] < 1e-2


def test_a_traced_build_times_each_whole_block_phase(packages, tmp_path):
    """The block is three whole-block phases and no tile step: tracing gives each phase a span of
    its own (iteration 0 of each block), stored by thread 0 around the call."""
    kernel = pipelink.link(shapes.write_spec(tmp_path, packages, 1, 16, "long"), trace=True)
    slots = kernel.plan.glue.trace_slots
    assert [(s.label, s.role) for s in slots] == [
        ("qkv.qkv", "(whole block)"), ("attn.attention", "(whole block)"), ("oproj.oproj", "(whole block)")]
    text = kernel.plan.glue.text
    assert "#define PL_TRACE_SLOTS 3" in text
    for slot in range(3):
        assert f"pl_trace_store(p.pl_trace, 0, {slot}, pl_ts)" in text
    trace = next(p for p in kernel.manifest["params"] if p["name"] == "glue.trace")
    assert trace["shape"][:3] == [132, 1, 3]


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_the_trace_rung_splits_the_block_into_its_phases(packages, tmp_path):
    spec = shapes.write_spec(tmp_path, packages, 64, 512, "long")
    result = pipelink.verify(spec, out_dir=tmp_path / "run", seeds=1, trace=True, timeout=60, console=QUIET)
    trace = result.rung("trace")  # ok or not by its coverage of the launch's time: a finding, not this test's
    assert "roles" in trace.figures, (trace.status, trace.detail)
    split = trace.figures["roles"]["(whole block)"]["split_ms"]
    assert set(split) == {"qkv.qkv", "attn.attention", "oproj.oproj"} and all(v > 0 for v in split.values())
    assert sum(split.values()) <= trace.figures["trace_span_ms"] * 1.001
    assert (tmp_path / "run" / "timeline.png").exists()
    events = json.loads((tmp_path / "run" / "timeline.trace.json").read_text())["traceEvents"]  # for Perfetto
    assert {e["name"] for e in events if e["ph"] == "X"} == {"qkv.qkv", "attn.attention", "oproj.oproj"}


def _bench():
    """bench/llama_decode.py as a module (it imports bench/harness.py)."""
    import sys
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("llama_decode_bench", ROOT / "bench" / "llama_decode.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_crossover_is_where_long_over_short_falls_through_one():
    bench = _bench()
    # long / short: 2.0 at 16, 0.5 at 256: log-linear, the ratio is 1 halfway in log(context), at 64.
    assert bench.crossing([16, 256, 4096], [2.0, 0.5, 0.3]) == pytest.approx(64)
    assert bench.crossing([16, 64], [0.9, 0.8]) is None        # long faster everywhere: no crossing
    assert bench.crossing([16, 64, 256], [1.5, None, 0.75]) == pytest.approx(2 ** (4 + 4 * (0.405465 / 0.693147)), rel=1e-4)



def test_a_cut_table_is_continued_only_at_its_own_revision(tmp_path, monkeypatch):
    # bench/llama_decode.py and bench/qwen_mlp.py --resume: a whole table takes longer than one device call,
    # so a second call adds the rows the first did not reach; a table of another revision would mix two
    # codes in one JSON, and another bench's table would mix two tables.
    _bench()  # puts bench/ on the path
    import harness
    monkeypatch.setenv("PIPELINK_GIT_REVISION", "a" * 40)
    row = {"batch": 1, "context": 16, "attention": "short", "times": {"pipelink": {"times_ms": [0.02, 0.03]}}}
    path = harness.write_result("llama_decode", {"read_bw_GBps": 4400.0, "configs": [row]}, tmp_path)
    kept = harness.resumed(path, "llama_decode")
    assert kept["configs"][0]["times"]["pipelink"]["times_ms"] == [0.02, 0.03]  # the series back in place
    assert "git_revision" not in kept and "times_file" not in kept  # write_result sets them again
    with pytest.raises(SystemExit, match="a llama_decode result, not qwen_mlp's"):
        harness.resumed(path, "qwen_mlp")
    monkeypatch.setenv("PIPELINK_GIT_REVISION", "b" * 40)
    with pytest.raises(SystemExit, match="a{40}.*b{40}"):
        harness.resumed(path, "llama_decode")

@pytest.mark.parametrize("attention", sorted(shapes.ATTENTION))
def test_the_block_cut_short_links_with_the_blocks_own_operands(packages, tmp_path, attention):
    # bench/llama_decode.py times the attention phase alone as (qkv + attention) - (qkv alone): both
    # cuts must link and take only operands the whole block has (the bench hands them the same tensors).
    spec = shapes.write_spec(tmp_path, packages, 64, 4096, attention)

    def operands(kernel):  # what a caller passes (Runtime.params): every parameter but the workspaces
        return {p["name"] for p in kernel.manifest["params"] if p.get("workspace") is None}

    whole = operands(pipelink.link(spec))
    for keep in (("qkv",), ("qkv", "attn")):
        cut = pipelink.link(shapes.prefix_spec(spec, keep))
        names = operands(cut)
        assert names <= whole and all(n.startswith("qkv.") for n in names), names
        text = cut.plan.glue.text
        assert "llama_qkv_rope(" in text and "llama_oproj_residual(" not in text
        assert (f"llama_attn_{attention}(" in text) == ("attn" in keep)


@pytest.mark.parametrize("split", [1, 2, 4, 8])
@pytest.mark.parametrize("groups", [48, 32])  # qkv's heads, o-proj's 64-column groups
def test_every_spread_covers_each_chunk_once_and_a_block_meets_at_most_two_groups(groups, split):
    # llama_gemv.cuh's block_first, in integers as the device computes it (block blk's iterations are
    # [first(blk), first(blk + 1))), at the H200's 132 blocks: every 256-column chunk of every group in
    # exactly one block, and no block meeting more than two groups (the partials workspace has two
    # slots a block). The GPU verifies of each split check the sums themselves.
    grid, per_group = 132, 2048 // 256

    def first(blk):
        return (blk * groups * split) // grid * (per_group // split)

    ranges = [range(first(b), first(b + 1)) for b in range(grid)]
    assert sorted(it for r in ranges for it in r) == list(range(groups * per_group))
    assert max(len({it // per_group for it in r}) for r in ranges) <= 2
    blocks_per_group = [sum(1 for r in ranges if any(it // per_group == g for it in r)) for g in range(groups)]
    assert max(blocks_per_group) <= (split if split < per_group else per_group)


def test_the_position_given_at_launch_links_to_the_same_code_in_both_modes(packages, tmp_path):
    # A model's decode loop: one kernel for every step, its position L read from device memory (launch_facts).
    spec = shapes.write_spec(tmp_path, packages, 8, 4095, "long_wt", launch=True, rows=4096)
    kernels = {mode: pipelink.link(spec, mode=mode) for mode in ("pipelink", "monolithic")}
    for kernel in kernels.values():
        fact = kernel.abi.params[0]
        assert (fact.name, fact.fact) == ("glue.fact_L", {"name": "L", "low": 0, "high": 4095})
        assert kernel.plan.postlink.conformance == () and not kernel.plan.postlink.findings
    from pipelink.backend.inspect import normalized_sass
    sass = [normalized_sass(inspect_cubin(k.cubin, k.plan.entry)[0].instructions) for k in kernels.values()]
    assert sass[0] == sass[1]


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("attention", sorted(shapes.ATTENTION))
@pytest.mark.parametrize("batch", [1, 64])
def test_the_position_given_at_launch_matches_the_reference_at_every_drawn_step(packages, tmp_path, batch, attention):
    # seed 0 at the linked position (Lmax - 1), seeds 1.. at positions drawn from 0 .. Lmax - 1: the reference
    # is told each one (verify's Kernel.launch_values).
    spec = shapes.write_spec(tmp_path, packages, batch, 1023, attention, launch=True, rows=1024, residual=True)
    result = pipelink.verify(spec, out_dir=tmp_path / "run", bench=False, seeds=4, timeout=60, console=QUIET)
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_a_position_past_the_cache_stops_the_kernel(packages, tmp_path):
    # L = Lmax would write the new row past the caches: the glue traps before any component runs. In a child
    # process (a trap ends the CUDA context).
    import subprocess
    import sys
    spec = shapes.write_spec(tmp_path, packages, 1, 63, "short", launch=True, rows=64)
    kernel = pipelink.link(spec)
    kernel.save(tmp_path / "k")
    script = f"""
import json, torch
from pathlib import Path
from pipelink.verify.child import Kernel
folder = Path({str(tmp_path / 'k')!r})
kernel = Kernel({{"cubin": folder / "llama_decode.cubin", "manifest": folder / "llama_decode.manifest.json"}},
                {{"inputs": {{}}}})
for value in (63, 64):
    ins = kernel.inputs(0)
    ins["glue.fact_L"].fill_(value)
    try:
        kernel.launch({{**ins, **kernel.outputs()}})
        torch.cuda.synchronize()
        print("ran", value, flush=True)
    except Exception as exc:
        print("stopped", value, type(exc).__name__, flush=True)
        break
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "ran 63" in done.stdout and "stopped 64" in done.stdout, done.stdout + done.stderr
