"""Issue 4: the CuTe mainloop and the raw SwiGLU epilogue, linked through a register port, with
TMA tensor maps encoded by the runtime and optional 2-block clusters. Real nvcc, nvJitLink and
cuobjdump; GPU tests (marker `gpu`) run the linked kernel against the fp32 reference."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pipelink
from pipelink.errors import DeviceError
from pipelink.link.pipeline import plan_link
from pipelink.tune.cache import bucket_label
from pipelink.refs import Ref
from pipelink.backend.inspect import inspect_cubin, normalized_sass
from pipelink.backend.toolchain import cutlass_include, find_nvcc
from pipelink.contract import load_contract
from pipelink.errors import FactConflict, FactDomainError, PortMismatch, ScheduleMismatch, SpecError

from conftest import ROOT, edit, gpu_ok
from glue_cases import planning_packages

# examples/qwen_mlp/shapes.py: the model shapes, the packed variants, the spec writer.
_spec = importlib.util.spec_from_file_location("qwen_shapes", ROOT / "examples" / "qwen_mlp" / "shapes.py")
shapes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shapes)
sys.path.insert(0, str(ROOT / "bench"))
import configs  # noqa: E402  (bench/configs.py: the paper's rows; bench/ is not a package)

MAINLOOP = ROOT / "components" / "cutlass" / "gemm_mainloop"
EPILOGUE = ROOT / "components" / "raw" / "swiglu_store"


@pytest.fixture(scope="module")
def qwen_packages(tmp_path_factory) -> Path:
    return shapes.pack(tmp_path_factory.mktemp("qwen"))


def qwen_spec(folder: Path, packages: Path, *, M=4096, K=5120, N=51200, tile_n=256, stages=4, gated=1, group=0,
              cluster=1, facts=None, split="tiles", tile_m=128) -> Path:
    """The example spec with other facts."""
    return shapes.write_spec(folder, packages, (M, K, N, gated),
                             (tile_n, stages, "column_major", group, cluster, split, tile_m), facts)


@pytest.fixture(scope="module")
def qwen_contracts(tmp_path_factory) -> Path:
    """The two components' contracts and variants without their code (glue_cases.planning_packages): for the
    refusals planning makes before any code is generated (no CUTLASS compile: seconds, not minutes)."""
    return planning_packages(tmp_path_factory.mktemp("qwen_contracts"), shapes.COMPONENTS)


@pytest.fixture(scope="module")
def cute_partition(tmp_path_factory) -> Path:
    """tests/components/cute_acc_fragment.cu built once for every packed tile shape (one nvcc run)."""
    folder = tmp_path_factory.mktemp("cute")
    (folder / "shapes.h").write_text("#define SHAPES " + " ".join(f"X({m}, {n})" for m, n in shapes.TILES) + "\n")
    built = subprocess.run([str(find_nvcc().path), "-std=c++17", "-x", "cu", "-arch=sm_90a", "--expt-relaxed-constexpr",
                            "-include", str(folder / "shapes.h"), f"-I{cutlass_include()}",
                            str(ROOT / "tests/components/cute_acc_fragment.cu"), "-o", str(folder / "frag")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    return folder / "frag"


@pytest.mark.parametrize("tile_m,tile_n", shapes.TILES)
def test_acc_fragment_in_the_contract_is_cutes_partition(tile_m, tile_n, cute_partition):
    """The contract's fragment expressions against CuTe's own partition_C, compiled and run on the host."""
    printed = subprocess.run([str(cute_partition), str(tile_m), str(tile_n)], capture_output=True, text=True, check=True)
    rows = [list(map(int, line.split())) for line in printed.stdout.splitlines()]
    cute = np.array([r[1:] for r in rows]).reshape(256, -1, 2)  # [thread, value, (row, col)]
    port = next(p for p in load_contract(f"{MAINLOOP}.toml").port if p.name == "acc")
    t, v = np.meshgrid(np.arange(256), np.arange(cute.shape[1]), indexing="ij")
    env = {"tile_m": tile_m, "tile_n": tile_n, "t": t, "v": v}
    assert port.values.eval({"tile_m": tile_m, "tile_n": tile_n, "consumer_threads": 256}) == cute.shape[1]
    assert np.array_equal(port.fragment["row"].eval_array(env), cute[..., 0])
    assert np.array_equal(port.fragment["col"].eval_array(env), cute[..., 1])


def test_link_mainloop_and_epilogue(qwen_packages, tmp_path):
    spec = qwen_spec(tmp_path, qwen_packages)
    kernel = pipelink.link(spec)
    plan = kernel.plan
    assert [t.kind for t in plan.transfers] == ["reg_to_reg"]  # the accumulator never leaves registers
    info, _ = inspect_cubin(kernel.cubin, plan.entry)
    ops = info.opcode_histogram
    assert ops.get("HGMMA.64x256x16.F32.BF16") == 4 and ops.get("UTMALDG.2D") == 2 and ops.get("UTMASTG.2D") == 2
    assert info.local == 0 and info.spill_insns == 0
    # Tensor maps: 128 bytes at 64-byte aligned offsets of the parameter struct, box and swizzle from the contracts.
    params = {p["name"]: p for p in kernel.manifest["params"]}
    assert params["mainloop.a"]["tma"] == {"box": [128, 64], "swizzle": 128}
    assert params["mainloop.b"]["tma"] == {"box": [256, 64], "swizzle": 128}
    assert params["epilogue.y"]["shape"] == [4096, 25600] and params["epilogue.y"]["tma"]["box"] == [128, 64]
    assert all(p["offset"] % 64 == 0 and p["bytes"] == 128 for p in params.values())
    assert kernel.manifest["param_bytes"] == 384
    glue = plan.glue.text
    assert "pl_tensor_map mainloop_a;" in glue and "&p.mainloop_a" in glue
    # The epilogue's named barrier was allocated (not hard-coded): ID 1 here, as an immediate.
    assert [(b.name, b.id) for b in plan.barriers] == [("epilogue.staged", 1)]
    # 4 stages of 48 KiB + a 32 KiB staging tile + 64 bytes of mbarriers.
    assert plan.smem_bytes == 4 * 48 * 1024 + 32 * 1024 + 64


@pytest.mark.parametrize("tile_n", shapes.TILE_WIDTHS)
def test_the_identity_epilogue_stages_at_most_128_columns(qwen_packages, tmp_path, tile_n):
    """Without SwiGLU a tile wider than 128 columns is stored in equal parts through one staging tile of a part
    (256 as 2 x 128, 208 as 2 x 104, 144 as 2 x 72, 200 as 5 x 40: halves of 100 columns are not whole 16-byte chunks),
    so the mainloop keeps its 4 stages as with SwiGLU; parts of 64-column multiples go out as 64-column boxes, the
    others (72, 104 and 40 columns) as one unswizzled box each."""
    kernel = pipelink.link(qwen_spec(tmp_path, qwen_packages, gated=0, tile_n=tile_n, stages=4))
    parts = {128: 1, 144: 2, 200: 5, 208: 2, 256: 2}[tile_n]
    part = tile_n // parts
    box = 64 if part % 64 == 0 else part
    ring = 4 * (128 + tile_n) * 128
    assert kernel.plan.smem_bytes == ring + 128 * part * 2 + 64
    assert next(s.bytes for s in kernel.plan.smem if Ref.parse("epilogue.staging") in s.users) == 128 * part * 2
    params = {p["name"]: p for p in kernel.manifest["params"]}
    assert params["epilogue.y"]["tma"] == {"box": [128, box], "swizzle": 128 if box == 64 else 0}
    ops = inspect_cubin(kernel.cubin, kernel.plan.entry)[0].opcode_histogram
    assert ops.get("UTMASTG.2D") == parts * (part // box)  # 4 at 256, 2 at 128, 2 at 208 and at 144, 5 at 200
    assert kernel.plan.smem_bytes <= kernel.plan.device["smem_optin_bytes"]


@pytest.mark.parametrize("tile_n, stages", [(144, 6), (208, 4)])
def test_a_partial_last_tile_column_links_where_the_contracts_allow_it(qwen_packages, tmp_path, tile_n, stages):
    """Issue 15, M = 128: tiles 144 and 208 wide do not divide the 51200 product columns. The schedule counts the
    last, partial tile column (ceil_div); the mainloop's B box may run past N because its contract says its code
    expects that (`partial = [0]`: TMA fills those rows with zeros), and SwiGLU's stores of that tile are clipped
    by TMA. Both fit the smem with their rings (6 stages of 144, 4 of 208, as the bench table has them)."""
    kernel = pipelink.link(qwen_spec(tmp_path, qwen_packages, M=128, tile_n=tile_n, stages=stages))
    assert kernel.plan.tiles == [1, -(-51200 // tile_n)]  # 356 and 247 tiles on 132 SMs: 2.7 and 1.9 waves
    info = inspect_cubin(kernel.cubin, kernel.plan.entry)[0]
    assert info.opcode_histogram.get(f"HGMMA.64x{tile_n}x16.F32.BF16") == 4 and info.local == 0
    assert kernel.plan.postlink.conformance == ()
    assert kernel.plan.smem_bytes <= kernel.plan.device["smem_optin_bytes"]
    # Without the contract's word that a partial box is expected, the same link is refused, naming the operand.
    contract = shutil.copyfile(f"{MAINLOOP}.toml", tmp_path / "gemm_mainloop.toml")
    edit(contract, ", partial = [0] }  # sharing B", " }  # sharing B")
    pipelink.pack(f"{MAINLOOP}.cu", contract, tmp_path / "whole.plc", variants=[{"tile_n": tile_n}])
    spec = qwen_spec(tmp_path / "whole", qwen_packages, M=128, tile_n=tile_n, stages=stages)
    edit(spec, f"{qwen_packages}/gemm_mainloop.plc", str(tmp_path / "whole.plc"))
    with pytest.raises(SpecError) as info:
        plan_link(spec)
    assert info.value.field == "operand[1].tma.box"
    assert f"box {tile_n} does not divide dimension 0 (51200)" in info.value.message


@pytest.mark.parametrize("gated,tile_n,stages", [(1, 256, 5), (0, 256, 5), (1, 128, 8), (0, 128, 8)])
def test_64_row_tiles_split_the_columns_between_the_warpgroups(qwen_packages, tmp_path, gated, tile_n, stages):
    """Issue 15, item 2: at M = 64 a 128-row tile would be half padding (rows past M read as zeros, stores clipped).
    In a 64-row tile the two consumer warpgroups take the two halves of its columns, each with a wgmma
    64 x tile_n / 2; the epilogue writes each warpgroup's half from its own registers, with no local memory, and its
    staging and TMA boxes are 64 rows."""
    kernel = pipelink.link(qwen_spec(tmp_path, qwen_packages, M=64, gated=gated, tile_n=tile_n, stages=stages,
                                     tile_m=64))
    plan = kernel.plan
    assert plan.tiles == [1, 51200 // tile_n] and plan.postlink.conformance == () and not plan.postlink.findings
    info = inspect_cubin(kernel.cubin, plan.entry)[0]
    assert info.opcode_histogram.get(f"HGMMA.64x{tile_n // 2}x16.F32.BF16") == 4  # 4 k-steps of 16 a stage
    assert info.local == 0 and info.spill_insns == 0
    out_cols = tile_n // (1 + gated)
    parts = -(-out_cols // 128)
    assert info.opcode_histogram.get("UTMASTG.2D") == out_cols // 64  # 64-column boxes, 64 rows each
    params = {p["name"]: p for p in kernel.manifest["params"]}
    assert params["mainloop.a"]["tma"]["box"] == [64, 64] and params["epilogue.y"]["tma"]["box"] == [64, 64]
    assert plan.smem_bytes == stages * (64 + tile_n) * 128 + 64 * (out_cols // parts) * 2 + 16 * stages
    # 144 columns in halves of 72 would split a gate/up pair between the warpgroups: the epilogue's contract limits
    # SwiGLU in 64-row tiles to 128 and 256, and pack refuses such a variant by that limit before nvcc runs.
    with pytest.raises(FactDomainError) as err:
        pipelink.pack(f"{EPILOGUE}.cu", f"{EPILOGUE}.toml", tmp_path / "bad.plc",
                      variants=[{"tile_m": 64, "tile_n": 144, "gated": 1}])
    assert err.value.field == "facts.limit[0]" and "above its greatest allowed value 0 by 2" in err.value.message
    assert "gated=1, tile_m=64, tile_n=144" in err.value.message


def test_monolithic_control_has_the_same_sass(qwen_packages, tmp_path):
    spec = qwen_spec(tmp_path, qwen_packages, M=1024, group=8)
    linked = pipelink.link(spec)
    mono = pipelink.link(spec, mode="monolithic")
    a = inspect_cubin(linked.cubin, linked.plan.entry)[0]
    b = inspect_cubin(mono.cubin, mono.plan.entry)[0]
    assert normalized_sass(a.instructions) == normalized_sass(b.instructions)


@pytest.mark.parametrize("K", [2048, 5120])
def test_the_glue_gives_the_mainloop_each_tile_whole(qwen_packages, tmp_path, K):
    # The mainloop loops over ctx.k_begin .. ctx.k_end at ring position ctx.stage_base ([schedule] k_tiles
    # in its contract); under today's schedule every call gets the whole tile, K / 64 k-tiles, after the
    # pl_iter tiles before it. A wrong count would leave k-tiles out of every product (or hang the ring).
    from pipelink.link import glue
    plan = plan_link(qwen_spec(tmp_path, qwen_packages, M=1024, K=K))
    text = glue.generate(glue.GlueInputs.of(plan)).text
    k_tiles = K // 64
    ranges = re.findall(r"ctx\.k_begin = (\S+); ctx\.k_end = (\S+); ctx\.stage_base = (.+);", text)
    assert ranges == [("0", str(k_tiles), f"pl_iter * {k_tiles}")] * 2  # load and mma; not the epilogue
    # before the calls of the mainloop only: every other call sees the three at 0
    calls = re.findall(r"ctx\.k_begin = 0; ctx\.k_end = \d+;.*\n(?:.*\n)*?\s+(\w+)\(ctx,", text)
    assert sorted(calls) == ["gemm_mainloop_load", "gemm_mainloop_mma"]

@pytest.mark.parametrize("split, M", [("stream_k", 128), ("hybrid", 1024)])
def test_a_split_schedule_cuts_the_mainloops_k_range(qwen_packages, tmp_path, split, M):
    # Issue 15: the same two components under a split schedule (docs/design/stream_k.md). Both roles run
    # the block's units from the one table (the producer's ring positions follow the consumer's); the
    # partials are summed in the consumer role before the epilogue, which runs on complete tiles only.
    kernel = pipelink.link(qwen_spec(tmp_path, qwen_packages, M=M, split=split))
    text, plan = kernel.plan.glue.text, kernel.plan
    assert text.count("ctx.k_begin = pl_k_begin; ctx.k_end = pl_k_end; ctx.stage_base = pl_stage;") == 2  # load, mma
    assert text.count("swiglu_store_tile(ctx") == 2 and "if (pl_complete) {" in text
    slot = 128 * 256  # the 128 x 256 fp32 accumulator of 256 consumer threads
    ws = {p["name"]: p["shape"][0] for p in kernel.manifest["params"] if "workspace" in p}
    assert ws["glue.partials"] == plan.grid * 2 * slot * 4
    assert plan.backend.resources.local == 0  # the fix-up keeps the accumulator in registers


@pytest.mark.parametrize("M, over", [(2 ** 16, 1), (2 ** 16 - 128, None)])
def test_a_split_whose_k_tiles_overflow_a_c_int_is_refused(qwen_packages, tmp_path, M, over):
    # The glue counts the streamed k-tiles (tiles x k-tiles) in a C int: 512 x 256 tiles of 16384 k-tiles
    # each is 2^31, one over; a row of tiles fewer (M - 128) is under and is refused by nothing here.
    spec = qwen_spec(tmp_path, qwen_packages, M=M, K=2 ** 20, N=2 ** 16, gated=0, stages=3, split="stream_k")
    if over is None:
        from pipelink.link.alloc import MAX_SPLIT_K_TILES
        assert (M // 128) * (2 ** 16 // 256) * (2 ** 20 // 64) <= MAX_SPLIT_K_TILES
        plan_link(spec)
        return
    with pytest.raises(SpecError) as info:
        plan_link(spec)
    assert info.value.field == "schedule.split"
    assert f"over the {2 ** 31 - 1} a C int counts by {over}" in info.value.message and "tiles" in info.value.hint


def test_cluster_of_two_multicasts_b(qwen_packages, tmp_path):
    kernel = pipelink.link(qwen_spec(tmp_path, qwen_packages, group=16, cluster=2))
    ops = inspect_cubin(kernel.cubin, kernel.plan.entry)[0].opcode_histogram
    assert ops.get("UTMALDG.2D.MULTICAST") == 1 and ops.get("UTMALDG.2D") == 1  # B shared, A own
    assert ops.get("UCGABAR_ARV") == 2  # cluster barriers at start and end
    assert "__cluster_dims__(2, 1, 1)" in kernel.plan.glue.text
    assert kernel.manifest["params"][1]["tma"]["box"] == [128, 64]  # each block loads half of B
    empty = next(m for m in kernel.plan.mbarriers if m.name == "mainloop.empty")
    assert empty.arrivals == 16  # the consumer warps of both blocks


def test_a_cluster_whose_blocks_would_not_share_the_multicast_tile_is_refused(qwen_contracts, tmp_path):
    # Sharing B (share_a = 0) the pair multicasts one B tile (cluster_shares_by picks "tile_col"); under row_major the
    # glue gives a cluster's blocks consecutive columns of one row, two B tiles: each would multiply by half of the
    # other's. Sharing A (share_a = 1) under column_major, each would multiply the other's rows of A.
    with pytest.raises(ScheduleMismatch) as info:
        plan_link(shapes.write_spec(tmp_path / "b", qwen_contracts, (1024, 5120, 51200, 1), (256, 4, "row_major", 0, 2),
                                    facts={"share_a": 0}))
    err = info.value
    assert err.component == "gemm_mainloop" and err.field == "schedule.order"
    assert "same tile_col (its fact share_a = 0)" in err.message
    assert "row_major order gives them the same tile_row" in err.message
    assert 'order = "column_major"' in err.hint and "or the value of share_a that shares the tile_row" in err.hint
    with pytest.raises(ScheduleMismatch) as info:
        plan_link(shapes.write_spec(tmp_path / "a", qwen_contracts, (1024, 5120, 51200, 1),
                                    (256, 4, "column_major", 0, 2), facts={"share_a": 1}))
    assert "same tile_row (its fact share_a = 1)" in info.value.message and 'order = "row_major"' in info.value.hint


@pytest.mark.parametrize("cluster,tile_n", [(2, 144), (4, 144), (4, 128)])
def test_a_cluster_along_the_row_shares_the_a_tile(qwen_packages, tmp_path, cluster, tile_n):
    """Issue 15, M = 128: under row_major a cluster's blocks hold consecutive tiles of one row, and the mainloop
    (share_a = 1, set by the spec writer) multicasts A: each block loads 128 / cluster rows of it into every block's
    ring and its own B tile whole. Clusters of 4 run on 120 blocks, the 30 the H200 places at once."""
    spec = shapes.write_spec(tmp_path, qwen_packages, (128, 5120, 51200, 1), (tile_n, 6, "row_major", 0, cluster))
    kernel = pipelink.link(spec)
    plan = kernel.plan
    assert plan.facts["share_a"] == 1 and plan.grid == (120 if cluster == 4 else 132)
    params = {p["name"]: p for p in kernel.manifest["params"]}
    assert params["mainloop.a"]["tma"]["box"] == [128 // cluster, 64]
    assert params["mainloop.b"]["tma"]["box"] == [tile_n, 64]
    info = inspect_cubin(kernel.cubin, plan.entry)[0]
    assert info.opcode_histogram.get("UTMALDG.2D.MULTICAST") == 1 and info.opcode_histogram.get("UTMALDG.2D") == 1
    assert info.local == 0 and plan.postlink.conformance == ()
    # The mbarrier that frees a stage counts every consumer warp of the cluster: any block's slice lands in all.
    empty = next(m for m in plan.mbarriers if m.name == "mainloop.empty")
    assert empty.arrivals == 8 * cluster


def test_blocks_sharing_b_come_in_pairs(qwen_packages, tmp_path):
    # Clusters of 4 sharing B (share_a = 0): the contract's limit refuses them, naming it.
    with pytest.raises(FactDomainError) as info:
        plan_link(shapes.write_spec(tmp_path / "b", qwen_packages, (1024, 5120, 51200, 1),
                                    (256, 4, "column_major", 0, 4), facts={"share_a": 0}))
    assert "(1 - share_a) * (cluster_ctas // 4)" in info.value.message and "by 1" in info.value.message
    # Left open, share_a = 1 is the only value the limit allows; sharing A then needs row_major, and the column_major
    # order is refused, naming the fact and its value.
    with pytest.raises(ScheduleMismatch) as info:
        plan_link(shapes.write_spec(tmp_path / "open", qwen_packages, (1024, 5120, 51200, 1),
                                    (256, 4, "column_major", 0, 4)))
    assert "same tile_row (its fact share_a = 1)" in info.value.message and 'order = "row_major"' in info.value.hint


def test_cluster_fact_conflict_names_both_sides(qwen_packages, tmp_path):
    spec = qwen_spec(tmp_path, qwen_packages, cluster=2)
    edit(spec, "gated = 1\n", "gated = 1\ncluster_ctas = 1\n")
    with pytest.raises(FactConflict) as info:
        pipelink.link(spec)
    assert "cluster_ctas" in info.value.message and "[launch]" in info.value.message and "[facts]" in info.value.message


def test_cluster_needs_an_even_fast_dimension(qwen_contracts, tmp_path):
    with pytest.raises(SpecError) as info:
        plan_link(qwen_spec(tmp_path, qwen_contracts, M=128 * 3, cluster=2))
    assert info.value.field == "launch.cluster" and "fast tile dimension (3 tiles)" in info.value.message


def test_fragment_mismatch_names_thread_and_value(qwen_packages, tmp_path):
    contract = shutil.copyfile(f"{EPILOGUE}.toml", tmp_path / "swiglu_store.toml")
    edit(contract, '8 * (v // 4) + 2 * (t % 4) + v % 2"', '8 * (v // 4) + (t % 4) + 4 * (v % 2)"')
    pipelink.pack(f"{EPILOGUE}.cu", contract, qwen_packages / "swiglu_store_bad.plc")
    spec = qwen_spec(tmp_path / "spec", qwen_packages)
    edit(spec, "swiglu_store.plc", "swiglu_store_bad.plc")
    with pytest.raises(PortMismatch) as info:
        plan_link(spec)
    msg = info.value.message
    assert "thread 0 value 1 holds (row=0, col=1) in gemm_mainloop" in msg and "(row=0, col=4) in swiglu_store" in msg


def test_tma_box_over_the_swizzle_span_is_refused_at_link(qwen_packages, tmp_path):
    contract = shutil.copyfile(f"{MAINLOOP}.toml", tmp_path / "gemm_mainloop.toml")
    edit(contract, '64], swizzle = 128, partial = [0] }  # sharing A', '64], swizzle = 64, partial = [0] }  # sharing A')
    pipelink.pack(f"{MAINLOOP}.cu", contract, qwen_packages / "gemm_mainloop_bad.plc", check=False)
    spec = qwen_spec(tmp_path / "spec", qwen_packages)
    edit(spec, "gemm_mainloop.plc", "gemm_mainloop_bad.plc")
    with pytest.raises(SpecError) as info:
        plan_link(spec)
    assert info.value.field == "operand[0].tma.box"
    assert "inner box is 128 bytes, over the 64-byte swizzle span by 64" in info.value.message


def test_the_200_wide_tile_is_for_the_identity_epilogue_only(qwen_packages, tmp_path):
    # SiLU(gate) * up pairs 8-column blocks; 200 columns are 25 of them. Packing that variant is refused by the
    # epilogue's limit, naming it, before nvcc runs (its static_assert would fail there), and so is the link.
    with pytest.raises(FactDomainError) as info:
        pipelink.pack(f"{EPILOGUE}.cu", f"{EPILOGUE}.toml", tmp_path / "e.plc", variants=[{"tile_n": 200, "gated": 1}])
    assert "gated * ((tile_n // 8) % 2)" in info.value.message and info.value.component == "swiglu_store"
    assert not (tmp_path / "e.plc").exists()
    with pytest.raises(FactDomainError) as info:
        plan_link(qwen_spec(tmp_path / "gated", qwen_packages, tile_n=200, stages=5, M=128))
    assert "gated * ((tile_n // 8) % 2)" in info.value.message
    config = (200, 5, "column_major", 0, 1)
    assert not shapes.epilogue_takes(1, config) and shapes.epilogue_takes(0, config)


@pytest.mark.parametrize("M,tile_m,tiles", [(4096 + 64, 128, 33), (4096 + 32, 64, 65), (1, 64, 1), (1, 128, 1),
                                           (100, 128, 1), (1000, 128, 8), (1000, 64, 16), (4096, 128, 32)])
def test_a_partial_last_tile_row_links(qwen_contracts, tmp_path, M, tile_m, tiles):
    """Issue 49: any M links. The last tile row may be partial, as the last tile column already could: A's TMA box
    reads the rows past M as zeros and y's box stores only the rows inside it, so both contracts name dimension 0
    of those operands partial, and the grid is ceil_div(M, tile_m) tile rows."""
    plan = plan_link(qwen_spec(tmp_path, qwen_contracts, M=M, K=1024, N=4096, tile_m=tile_m,
                               stages=5 if tile_m == 64 else 4))
    assert plan.tiles == [tiles, 4096 // 256]
    assert plan.instance("mainloop").facts["m_tiles"] == tiles


def test_the_operator_binds_m_from_a_and_buckets_it_in_boxes(qwen_contracts, tmp_path):
    """pipelink.op's plan for the Qwen link: M enters through the mainloop's A (dimension 0, in boxes of tile_m
    rows) and the epilogue's y (its output). An epilogue whose contract does not declare M bound (its code might
    read the linked M) makes the operator refuse M, naming it."""
    from pipelink.shape_op import bound_dims
    spec = qwen_spec(tmp_path / "ok", qwen_contracts, M=128, K=1024, N=4096)
    assert [(b.param, b.dim, b.fact, b.granule) for b in bound_dims(spec, ("M",))] == \
        [("mainloop.a", 0, "M", 128), ("epilogue.y", 0, "M", 128)]
    unbound = tmp_path / "unbound"
    components = [(src, unbound / Path(toml).name, variants) for src, toml, variants in shapes.COMPONENTS]
    unbound.mkdir()
    for (_, toml, _), (_, copy, _) in zip(shapes.COMPONENTS, components):
        text = Path(toml).read_text()
        copy.write_text(text.replace("bound = true, ", "") if "swiglu" in copy.name else text)
    packages = planning_packages(tmp_path / "unbound_packages", components)
    with pytest.raises(SpecError) as info:
        bound_dims(qwen_spec(tmp_path / "no", packages, M=128, K=1024, N=4096), ("M",))
    assert info.value.field == "vary" and "epilogue (swiglu_store" in info.value.message
    assert "without declaring it bound" in info.value.message


# --- on the GPU ------------------------------------------------------------------------------

def verified(spec: Path, tmp_path: Path, timeout: int) -> None:
    """``spec`` through the verify loop (a child process with ``timeout``): it passes, every output element is
    written, and the output is within bf16 rounding of the fp32 reference."""
    from rich.console import Console
    result = pipelink.verify(spec, out_dir=tmp_path / "run", bench=False, seeds=2, timeout=timeout,
                             console=Console(file=open("/dev/null", "w")))
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]
    c = result.rung("correctness").figures
    assert c["epilogue.y.unwritten"] == 0 and c["epilogue.y.rel_l2"] < 5e-3


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("gated,cluster,tile_n,stages,tile_m", [
    (1, 1, 256, 4, 128), (0, 1, 256, 4, 128), (1, 2, 256, 4, 128), (0, 2, 256, 4, 128), (1, 1, 144, 6, 128),
    (0, 1, 144, 6, 128), (1, 1, 208, 4, 128), (0, 1, 208, 4, 128),
    (1, 1, 256, 5, 64), (0, 1, 256, 5, 64), (1, 2, 256, 5, 64), (1, 1, 128, 8, 64), (0, 1, 128, 8, 64),
    (0, 1, 200, 5, 128)])
def test_linked_kernel_matches_the_reference(qwen_packages, tmp_path, gated, cluster, tile_n, stages, tile_m):
    # The identity epilogue stores each 256-column tile in two parts of 128 columns (4 stages beside them). Tiles 144
    # and 208 wide leave the last tile column partial (4096 = 28 x 144 + 64 = 19 x 208 + 144 = 20 x 200 + 96; of the
    # 200-wide one's 5 parts of 40 columns, 2 are whole, 1 clipped and 2 wholly past N): its B rows past N
    # arrive as zeros and its stores are clipped; an element written twice or never shows in the check. In 64-row
    # tiles (M = 576: 9 tile rows in bands of 3, or 8 for a pair) each warpgroup holds and stores half of the tile's
    # columns; in a pair (cluster 2) the two blocks hold tile rows 2 r and 2 r + 1 of one column and share its B tile.
    m = 576 if tile_m == 64 and cluster == 1 else 512
    spec = qwen_spec(tmp_path, qwen_packages, M=m, K=1024, N=4096, gated=gated, group=3 if m == 576 else 2,
                     cluster=cluster, tile_n=tile_n, stages=stages, tile_m=tile_m)
    verified(spec, tmp_path, timeout=60)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("M,tile_m,tile_n,stages,gated,cluster", [
    (1, 64, 256, 5, 1, 1), (1, 128, 256, 4, 1, 1), (100, 128, 256, 4, 1, 1), (100, 64, 128, 8, 1, 1),
    (1000, 128, 256, 4, 0, 1), (1000, 64, 256, 5, 1, 1), (200, 128, 256, 4, 1, 2), (100, 128, 144, 6, 1, 1)])
def test_a_partial_last_tile_row_matches_the_reference(qwen_packages, tmp_path, M, tile_m, tile_n, stages, gated,
                                                       cluster):
    # Issue 49: M rows that no tile height divides, down to one row. The rows of A past M arrive as zeros (the
    # transaction bytes of a clipped box still count the whole box), y's rows past M are not stored: an element
    # written past M shows as an unwritten or wrong one in the check (the output is poisoned first).
    spec = qwen_spec(tmp_path, qwen_packages, M=M, K=1024, N=4096, gated=gated, cluster=cluster, tile_n=tile_n,
                     stages=stages, tile_m=tile_m)
    verified(spec, tmp_path, timeout=60)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("gated,cluster,tile_n", [(1, 2, 144), (0, 2, 144), (1, 4, 144), (0, 4, 128)])
def test_a_cluster_sharing_the_a_tile_matches_the_reference(qwen_packages, tmp_path, gated, cluster, tile_n):
    from pipelink.runtime import Runtime
    # Two tile rows of 32 or 36 tiles (N = 4608), row_major: each cluster's blocks hold consecutive tiles of one row
    # and multicast slices of its A tile into each other's rings (share_a = 1). A slice landing at the wrong offset,
    # or a stage refilled before a peer has read it, shows as a mismatch or a hang (the verify child's timeout).
    spec = shapes.write_spec(tmp_path, qwen_packages, (256, 1024, 4608, gated), (tile_n, 6, "row_major", 0, cluster))
    verified(spec, tmp_path, timeout=60)
    # The spec writer's grid (120 blocks for clusters of 4) is what the GPU places at once: every cluster resident.
    kernel = pipelink.link(spec)
    assert Runtime(kernel.cubin, kernel.manifest).resident_clusters() >= kernel.plan.grid // cluster


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("split, M, tile_m", [("stream_k", 128, 128), ("stream_k", 1024, 128), ("hybrid", 1024, 128),
                                              ("hybrid", 4096, 128), ("hybrid", 8192, 128), ("stream_k", 64, 64)])
def test_a_split_schedule_matches_the_reference(qwen_packages, tmp_path, split, M, tile_m):
    spec = qwen_spec(tmp_path, qwen_packages, M=M, group=16 if M >= 4096 else 0, split=split, tile_m=tile_m,
                     stages=4 if tile_m == 128 else 5)
    verified(spec, tmp_path, timeout=120)


def test_every_paper_row_links(qwen_packages, tmp_path):
    """The paper's Qwen rows (bench/configs.py), linked here before GPU time is spent on them: every one fits the
    smem, register and cluster rules of its shape (and the identity GEMM beside each gate/up)."""
    for name, shape in shapes.SHAPES.items():
        for cand in configs.QWEN_PAPER_ROWS[name]:
            m, k, n, gated = shape
            # each table the bench times: the shape's own (where its epilogue takes the width) and, beside each gate/up
            # shape, the GEMM alone with the identity epilogue
            for table in [(m, k, n, gated)] * shapes.epilogue_takes(gated, cand) + [(m, k, n, 0)] * gated:
                folder = tmp_path / name / f"{shapes.candidate_dir(cand)}_{table[3]}"
                plan = plan_link(shapes.write_spec(folder, qwen_packages, table, cand))
                assert plan.smem_bytes <= plan.device["smem_optin_bytes"], (name, cand, table)


@pytest.mark.slow
def test_the_examples_tune_searches_link_where_the_packages_and_smem_allow(qwen_packages, tmp_path):
    """Issue 49 item 4: link.toml's [tune] searches (what replaced the hand-written table), linked on the CPU at one
    shape of each search: a configuration the packages or the shared memory cannot take is a link failure naming
    why, and every search keeps configurations that link (the ones the earlier table chose among them)."""
    from pipelink.tune import tune
    spec = shapes.write_spec(tmp_path / "spec", qwen_packages, (4096, 5120, 51200, 1), (256, 4, "column_major", 0, 1))
    r = tune(spec, ["M=128", "M=1024", "M=4096"], jobs=2, link_only=True, progress=False)
    linked = {bucket_label(b.bucket): {o.config.label for o in b.outcomes if o.status == "linked"} for b in r.buckets}
    assert "tile_m=128,tile_n=256,stages=4,schedule.split=tiles" in linked["M=128"]
    assert "tile_m=128,tile_n=128,stages=6,schedule.split=stream_k" in linked["M=128"]
    assert "tile_m=64,tile_n=256,stages=5,schedule.split=tiles" in linked["M=128"]
    assert linked["M=1024"] == {f"tile_n=256,stages=4,schedule.split={s},launch.cluster={c}"
                                for s, c in (("tiles", 1), ("tiles", 2), ("hybrid", 1))}
    refused = next(o for b in r.buckets for o in b.outcomes if "hybrid,launch.cluster=2" in o.config.label)
    assert "split = 'hybrid' cannot be used with [launch] cluster > 1" in refused.reason
    assert "tile_n=256,stages=4,schedule.group=16,schedule.split=tiles,launch.cluster=2" in linked["M=4096"]
    for b in r.buckets:
        for o in b.outcomes:
            assert o.status in ("linked", "link failed") and (o.status == "linked" or o.reason), o.to_json()


def test_spec_facts_reach_the_link(qwen_packages, tmp_path):
    """The spec writer's extra facts replace the configuration's (bench/experiments/qwen_ab.py's
    `@fact=value`), and a fact left out takes the contract's default (the mainloop's ring: 4 stages)."""
    assert plan_link(qwen_spec(tmp_path / "s2", qwen_packages, group=16, facts={"stages": 2})).smem_bytes \
        == 2 * 48 * 1024 + 32 * 1024 + 32
    assert plan_link(qwen_spec(tmp_path / "default", qwen_packages, group=16, facts={"stages": None})).smem_bytes \
        == 4 * 48 * 1024 + 32 * 1024 + 64


@pytest.mark.parametrize("gated,cluster", [(1, 1), (0, 1), (1, 2)])
def test_no_conformance_findings_and_every_instruction_attributed(qwen_packages, tmp_path, gated, cluster):
    """The negative set of issue 5 includes these components: zero findings, and the SASS of the
    linked kernel is attributed to the instance that issued it (WGMMA and TMA loads to the mainloop,
    the TMA stores and SiLU's tanh to the epilogue)."""
    from pipelink.link.conform import attribute
    kernel = pipelink.link(qwen_spec(tmp_path, qwen_packages, gated=gated, stages=4 if gated else 3, group=16,
                                     cluster=cluster))
    assert kernel.plan.postlink.conformance == ()
    info, _ = inspect_cubin(kernel.cubin, kernel.plan.entry)
    owners = dict.fromkeys(["mainloop", "epilogue"], set())
    for insn, owner in zip(info.instructions, attribute(kernel.plan, info)):
        if owner in owners:
            owners[owner] = owners[owner] | {insn.split()[0] if not insn.startswith("@") else insn.split()[1]}
    assert any(o.startswith("HGMMA") for o in owners["mainloop"]) and any(o.startswith("UTMALDG") for o in owners["mainloop"])
    assert any(o.startswith("UTMASTG") for o in owners["epilogue"])
    assert not any(o.startswith(("HGMMA", "UTMALDG")) for o in owners["epilogue"])
    if gated:
        assert any(o.startswith("MUFU.TANH") for o in owners["epilogue"])


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_one_operator_serves_every_m(qwen_packages, tmp_path):
    """Issue 49 item 1: pipelink.op over M = 1 .. 1000 (K = 1024, N = 4096), against the fp32 reference at each M:
    one kernel a bucket of whole tile rows (M = 1 .. 128 share the 1-tile one), linked on first use, none on a
    repeat; the output is allocated at the call's M, and the tensor maps are encoded at it (the stores past M are
    clipped by TMA, as the poisoned partial-M verifies above show). Under a CUDA graph (sizes prepared first) and under torch.compile(dynamic=True) the outputs are
    the eager ones."""
    import torch
    spec = qwen_spec(tmp_path, qwen_packages, M=128, K=1024, N=4096)
    reference = _load_reference(spec)
    op = pipelink.op(spec, vary=("M",), name="qwen_gate_up_test_any")
    torch.manual_seed(0)
    w = (torch.randn(4096, 1024, device="cuda") / 32).to(torch.bfloat16)
    for m in (1, 7, 100, 128, 129, 200, 1000):
        x = torch.randn(m, 1024, device="cuda").to(torch.bfloat16)
        y = op(x, w)
        want = reference({"mainloop.a": x, "mainloop.b": w}, {"gated": 1})["epilogue.y"].float()
        assert y.shape == (m, 2048) and torch.isfinite(y).all()
        assert (torch.linalg.vector_norm(y.float() - want) / torch.linalg.vector_norm(want)).item() < 5e-3, m
    assert sorted(op.kernels) == [(128,), (256,), (1024,)]  # buckets of 1, 2 and 8 tile rows
    op(torch.randn(50, 1024, device="cuda").to(torch.bfloat16), w)
    assert len(op.kernels) == 3  # no link for a size whose bucket is linked
    # a CUDA graph: prepared sizes, captured, replayed on new inputs
    x = torch.randn(300, 1024, device="cuda").to(torch.bfloat16)
    op.prepare(M=[300])
    op(x, w)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_graph = op(x, w)
    x.copy_(torch.randn_like(x, dtype=torch.float32).to(torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y_graph, op(x, w))
    # torch.compile with dynamic shapes: one compile serves several M
    compiled = torch.compile(lambda a, b: op(a, b) * 2, dynamic=True)
    for m in (64, 96, 130):
        x = torch.randn(m, 1024, device="cuda").to(torch.bfloat16)
        assert torch.equal(compiled(x, w), op(x, w) * 2)
    # a repeated call (the plan of its shapes, the parameter block of its addresses kept) gives the same output as the
    # first on new inputs; make_fx (a dispatch mode) sees the registered operator; inputs the quick checks refuse
    # are named in full
    from torch.fx.experimental.proxy_tensor import make_fx
    for m in (5, 5, 700):
        x = torch.randn(m, 1024, device="cuda").to(torch.bfloat16)
        want = reference({"mainloop.a": x, "mainloop.b": w}, {"gated": 1})["epilogue.y"].float()
        for _ in range(2):
            y = op(x, w)
            assert (torch.linalg.vector_norm(y.float() - want) / torch.linalg.vector_norm(want)).item() < 5e-3, m
    assert "pipelink." + op.name in str(make_fx(lambda a, b: op(a, b))(x, w).graph)
    with pytest.raises(DeviceError, match="operand 'mainloop.a' has dtype torch.float32"):
        op(x.float(), w)
    with pytest.raises(DeviceError, match="operand 'mainloop.a' is not contiguous"):
        op(torch.randn(1024, 700, device="cuda").to(torch.bfloat16).t(), w)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_the_operator_launches_eager_calls_directly_and_writes_into_out(qwen_packages, tmp_path):
    """Issue 49's host cost: an eager call launches without the torch dispatcher (the profiler sees no
    pipelink:: event for it, and sees one for torch.ops.pipelink.<name>), and ``out=`` is written in place of a
    new tensor, with the same bytes as a fresh call's; under torch.compile the result is copied into ``out``. An
    ``out`` of another shape or dtype, or one that shares bytes with an input, is a DeviceError naming it."""
    import torch
    spec = qwen_spec(tmp_path, qwen_packages, M=128, K=1024, N=4096)
    op = pipelink.op(spec, vary=("M",), name="qwen_gate_up_test_out")
    torch.manual_seed(0)
    w = (torch.randn(4096, 1024, device="cuda") / 32).to(torch.bfloat16)
    x = torch.randn(100, 1024, device="cuda").to(torch.bfloat16)
    fresh = op(x, w)
    event = "pipelink::" + op.name
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        op(x, w)
    assert not any(e.name == event for e in prof.events())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        op.op(x, w)
    assert any(e.name == event for e in prof.events())
    y = torch.full_like(fresh, float("nan"))
    for _ in range(2):  # the second call on the same addresses takes the kept parameter block
        assert op(x, w, out=y) is y and torch.equal(y, fresh)
        y.fill_(float("nan"))
    compiled = torch.compile(lambda a, b, o: op(a, b, out=o), dynamic=True)
    assert torch.equal(compiled(x, w, y), fresh) and torch.equal(y, fresh)
    with pytest.raises(DeviceError, match="epilogue.y"):
        op(x, w, out=torch.empty(100, 2047, dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(DeviceError, match="epilogue.y.*dtype"):
        op(x, w, out=torch.empty(100, 2048, dtype=torch.float32, device="cuda"))
    with pytest.raises(DeviceError, match="out= gives 2 tensor"):
        op(x, w, out=(y, y))
    shared = torch.zeros(100 * 2048, dtype=torch.bfloat16, device="cuda")
    a = shared[: 100 * 1024].view(100, 1024)
    a.copy_(x)
    with pytest.raises(DeviceError, match="out= operand 'epilogue.y' overlaps operand 'mainloop.a'"):
        op(a, w, out=shared.view(100, 2048))


def _load_reference(spec: Path):
    module_spec = importlib.util.spec_from_file_location("qwen_reference_for_op", spec.parent / "reference.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.swiglu
