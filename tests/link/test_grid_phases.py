"""A kernel whose tile count is decided across blocks (issue 13's toy two-phase kernel,
docs/design/moe.md): a whole-block phase before the tile loops counts the even elements of X in
every block, the blocks meet at a grid barrier (pl_grid_sync on a workspace counter), each then
turns the global count into a tile count, and the tile loops run that many tiles. That is the
shape of the MoE layer's routing -> expert tiles, at toy size. CPU tests link it and check the
refusals; the `gpu` test runs it against torch."""

from __future__ import annotations

import pytest

import pipelink
from pipelink.contract import load_contract
from pipelink.errors import ContractError, SpecError
from pipelink.link.pipeline import plan_link

from conftest import edit, gpu_ok, inline_link

CONTRACT = """
[component]
name = "evens"
version = "1.0.0"

[facts.requires]
N = { range = [128, 1048576], multiple_of = 128, default = 65536 }

[roles.work]
warps = 4

[[entry]]
symbol = "evens_count"
role = "work"
phase = "count"
scope = "block"
when = "start"

[[entry]]
symbol = "evens_tile"
role = "work"
phase = "tile"

[[workspace]]
name = "hits"
bytes = 4

[[workspace]]
name = "arrived"
bytes = 4
grid_sync = true

[[workspace]]
name = "ntiles"
bytes = 4
count_max = "N / 128"  # one tile per 128 even elements, rounded up

[[operand]]
name = "x"
dtype = "int32"
shape = ["N"]
access = "read"

[[operand]]
name = "y"
dtype = "int32"
shape = ["N / 128"]
access = "write"

[schedule]
order = "any"
"""

SOURCE = """extern "C" __device__ void evens_count(pl_ctx ctx, pl_bind_evens b) {
  int mine = 0;
  for (int i = blockIdx.x * blockDim.x + ctx.thread; i < b.N; i += gridDim.x * blockDim.x)
    mine += (b.x[i] & 1) == 0;
  if (mine) atomicAdd(reinterpret_cast<int*>(b.hits), mine);
  __syncthreads();
  if (ctx.thread == 0) {
    pl_grid_sync(b.arrived, 1);  // every block's count is in
    const int hits = pl_ld_acquire_int(b.hits);
    *reinterpret_cast<volatile int*>(b.ntiles) = (hits + 127) / 128;  // every block writes the same value
  }
  __syncthreads();
}
extern "C" __device__ void evens_tile(pl_ctx ctx, pl_bind_evens b) {
  if (ctx.thread == 0) b.y[ctx.tile] = pl_ld_acquire_int(b.hits);
}
"""

SPEC = """
[link]
name = "evens"

[facts]
N = 65536

[[instance]]
name = "e"
package = "evens.plc"

[schedule]
tiles = ["N / 128"]
tiles_from = "e.ntiles"
"""


@pytest.fixture
def evens(tmp_path):
    return inline_link(tmp_path, "evens", CONTRACT, SOURCE, SPEC)


@pytest.mark.slow
def test_the_two_phase_kernel_links(evens):
    kernel = pipelink.link(evens)
    plan = kernel.plan
    assert plan.grid == 132 and plan.num_tiles == 512  # the bound sizes the grid: one block per SM
    assert [p["name"] for p in kernel.manifest["params"] if "workspace" not in p] == ["e.x", "e.y"]
    assert sorted(p["name"] for p in kernel.manifest["params"] if "workspace" in p) == \
        ["e.arrived", "e.hits", "e.ntiles"]
    assert plan.postlink.conformance == () and not plan.postlink.findings  # __syncthreads: whole-block phase


def test_a_grid_barrier_needs_every_block_resident(evens):
    edit(evens, "[schedule]\ntiles", "[launch]\ngrid = 264\n\n[schedule]\ntiles")
    with pytest.raises(SpecError) as info:
        plan_link(evens)
    assert "e.arrived (grid_sync)" in info.value.message and "over the 132 SMs" in info.value.message


def test_a_grid_barrier_counter_must_start_at_zero(tmp_path):
    (tmp_path / "c.toml").write_text(CONTRACT.replace("grid_sync = true", "grid_sync = true\nzero = false"))
    with pytest.raises(ContractError) as info:
        load_contract(tmp_path / "c.toml")
    assert info.value.field == "workspace[1].zero"
    assert "zero_once = true" in info.value.hint and "pl_grid_barrier" in info.value.hint


def test_a_grid_barrier_counter_cleared_once_is_declared_so(tmp_path):
    """pl_grid_barrier's counter is back at its start after every use: the runtime clears it before the
    first launch only, and the manifest says so."""
    once = CONTRACT.replace("grid_sync = true", "grid_sync = true\nzero = false\nzero_once = true")
    (tmp_path / "c.toml").write_text(once)
    arrived = next(w for w in load_contract(tmp_path / "c.toml").workspace if w.name == "arrived")
    assert (arrived.zero, arrived.zero_once, arrived.grid_sync) == (False, True, True)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_the_tile_count_decided_across_blocks(evens):
    import torch
    from pipelink.runtime import Runtime
    kernel = pipelink.link(evens)
    runtime = Runtime(kernel.cubin, kernel.manifest)
    for seed in range(3):  # each launch starts from zeroed counters
        x = torch.randint(0, 1 << 20, (65536,), generator=torch.Generator().manual_seed(seed)).to(torch.int32).cuda()
        x[: 1000 * seed] = 1  # fewer evens each time: a different tile count
        y = torch.full((512,), -1, dtype=torch.int32, device="cuda")
        runtime.launch_arrays([x, y])
        torch.cuda.synchronize()
        hits = int((x % 2 == 0).sum())
        tiles = (hits + 127) // 128
        assert y[:tiles].tolist() == [hits] * tiles and y[tiles:].tolist() == [-1] * (512 - tiles)


@pytest.mark.slow
def test_the_manifest_says_what_makes_blocks_wait_on_each_other(evens):
    # the runtime checks at load that every block (every cluster) is resident at once where blocks wait on each
    # other: the manifest names why, and the cluster
    manifest = pipelink.link(evens).manifest
    assert manifest["coordinated_by"] == ["schedule.tiles_from = 'e.ntiles'", "e.arrived (grid_sync)"]
    assert manifest["cluster"] == 1
    edit(evens, "[schedule]\ntiles", "[launch]\ncluster = 2\n\n[schedule]\ntiles")
    assert pipelink.link(evens).manifest["cluster"] == 2


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("cluster", [1, 2])
def test_the_runtime_refuses_a_grid_that_cannot_be_resident_at_once(evens, cluster):
    # A grid barrier hangs if a block is not resident. The link refuses more blocks than SMs; at load the runtime
    # asks the driver how many blocks (or clusters: a cluster's blocks share a GPC) fit at once. The linked grid
    # loads; the same kernel described with 64 times the grid (64 blocks an SM, twice the 32 an SM can hold) is
    # refused before any launch, with the numbers.
    from pipelink.errors import DeviceError
    from pipelink.runtime import Runtime
    if cluster > 1:
        edit(evens, "[schedule]\ntiles", f"[launch]\ncluster = {cluster}\n\n[schedule]\ntiles")
    kernel = pipelink.link(evens)
    Runtime(kernel.cubin, kernel.manifest)
    tampered = {**kernel.manifest, "grid": [64 * kernel.manifest["grid"][0], 1, 1]}
    with pytest.raises(DeviceError) as info:
        Runtime(kernel.cubin, tampered)
    assert "must be resident at once" in info.value.message and "over by" in info.value.message
    assert ("clusters of 2" in info.value.message) == (cluster == 2)
