"""A small tunable link for the tuner's tests: one component copying an [M, 64] bf16 tensor through shared
memory a box of tile_m rows at a time (TMA load, TMA store), M bound (any M at launch), tile_m a compile-time
fact packed as two variants, stages a run-time fact that only sizes the buffer (so that a large value fails to
fit the block's shared memory: a configuration that does not link)."""

from __future__ import annotations

from pathlib import Path

import pipelink

CONTRACT = """
[component]
name = "rows"
version = "1"

[facts.requires]
M = { range = [1, 1048576], bound = true }
tile_m = { set = [64, 128], default = 128, compile = true }
stages = { range = [1, 16], default = 1 }

[roles.copy]
warps = 1

[[entry]]
symbol = "rows_run"
role = "copy"
phase = "run"

[[smem]]
name = "buf"
bytes = "stages * tile_m * 128"
align = 128

[[mbarrier]]
name = "full"
count = 1
arrivals = 1
tx_bytes = "tile_m * 128"

[[operand]]
name = "x"
dtype = "bf16"
shape = ["M", "64"]
access = "read"
tma = { box = ["tile_m", "64"], swizzle = 0, partial = [0] }

[[operand]]
name = "y"
dtype = "bf16"
shape = ["M", "64"]
access = "write"
tma = { box = ["tile_m", "64"], swizzle = 0, partial = [0] }
"""

SOURCE = """
constexpr int kTileM = pl_facts::tile_m;

extern "C" __device__ void rows_run(pl_ctx ctx, pl_bind_rows b) {
  if (ctx.thread != 0) return;
  const uint32_t buf = pl_smem_addr(ctx.smem + b.buf);
  const uint32_t bar = pl_mbar(ctx, b.full, 0);
  pl_mbar_arrive_expect_tx(bar, kTileM * 128);
  pl_tma_load_2d(buf, b.x, 0, ctx.tile * kTileM, bar);
  pl_mbar_wait(bar, ctx.iter & 1);
  pl_fence_proxy_async();
  pl_tma_store_2d(b.y, buf, 0, ctx.tile * kTileM);
  pl_bulk_commit();
  pl_bulk_wait_read();
}
"""

SPEC = """
[link]
name = "rowcopy"

[facts]
M = 1024
tile_m = 128
stages = 1

[[instance]]
name = "r"
package = "rows.plc"

[schedule]
tiles = ["ceil_div(M, tile_m)"]

[verify]
reference = "ref.py:copy"
precision = "bf16"
seeds = 1
"""

REFERENCE = """
def copy(inputs, facts):
    return {"r.y": inputs["r.x"].clone()}
"""


def make(folder: Path) -> Path:
    """The package, the spec and its reference in ``folder``; returns the spec's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rows.cu").write_text(SOURCE)
    (folder / "rows.toml").write_text(CONTRACT)
    pipelink.pack(folder / "rows.cu", folder / "rows.toml", folder / "rows.plc",
                  variants=[{"tile_m": 64}, {"tile_m": 128}])
    (folder / "ref.py").write_text(REFERENCE)
    spec = folder / "rowcopy.toml"
    spec.write_text(SPEC)
    return spec
