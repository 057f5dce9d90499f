"""`[schedule] tiles_from`: the tile count decided in the kernel (issue 13's linker step 1,
docs/design/moe.md). A phase before the tile loops writes the count into a workspace; the tile
loops of every role run that many tiles (at most the schedule's `tiles`, which sizes the grid).
CPU tests read the glue, the audit and the refusals; the `gpu` test runs it."""

from __future__ import annotations

from dataclasses import replace

import pytest

import pipelink
from pipelink.errors import SpecError
from pipelink.link import audit
from pipelink.link.pipeline import plan_link

from conftest import gpu_ok, inline_link

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


def test_the_tile_loops_run_the_count_written_before_them(halfway):
    kernel = pipelink.link(halfway)
    text, plan = kernel.plan.glue.text, kernel.plan
    assert "const int pl_num_tiles = min(pl_ld_acquire_int(p.h_count), 64);" in text
    assert text.index("halfway_count(ctx,") < text.index("pl_num_tiles = ") < text.index("halfway_tile(ctx,")
    assert "pl_tile < pl_num_tiles;" in text and "ctx.last = pl_tile + 64 >= pl_num_tiles;" in text
    assert plan.grid == 64 and plan.to_json()["schedule"]["tiles_from"] == "h.count"
    assert any(c.name == "dynamic tiles" for c in plan.all_checks())
    assert audit.check_glue(plan).ok
    # A glue that reads the count from elsewhere, or bounds it wrongly, is caught by the audit.
    for old, new in (("p.h_count), 64)", "p.h_count), 65)"), ("pl_tile < pl_num_tiles;", "pl_tile < 64;")):
        broken = replace(plan.glue, text=text.replace(old, new, 1))
        plan.glue, saved = broken, plan.glue
        assert {v.invariant for v in audit.check_glue(plan).violations} & {"glue.tile_count", "glue.tile_loop"}
        plan.glue = saved


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
