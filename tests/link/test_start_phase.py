"""Whole-block phases before the tile loops (`[[entry]] scope = "block", when = "start"`), issue 13's
second linker step (docs/design/moe.md): every thread of the block runs them after the glue's
setup and before the roles start, so __syncthreads is legal there and roles may still use
setmaxnreg. CPU tests read the glue and the conformance findings; the `gpu` test runs it."""

from __future__ import annotations

import pytest

import pipelink
from pipelink.link.pipeline import plan_link
from pipelink.contract import load_contract
from pipelink.errors import ContractError, RegisterBudgetError

from conftest import gpu_ok, inline_link

# Two roles of 4 warps each. The start phase fills a table in smem with the whole block (and a
# __syncthreads inside it); both roles' tile entries then read it.
CONTRACT = """
[component]
name = "prefill"
version = "1.0.0"

[facts.requires]
T = {{ range = [1, 4096], default = 8 }}

[roles.a]
warps = 4{registers}

[roles.b]
warps = 4

[[entry]]
symbol = "prefill_start"
role = "a"
phase = "fill"
scope = "block"
when = "{when}"

[[entry]]
symbol = "prefill_a"
role = "a"
phase = "use_a"

[[entry]]
symbol = "prefill_b"
role = "b"
phase = "use_b"

[[smem]]
name = "table"
bytes = 1024

[[operand]]
name = "y"
dtype = "int32"
shape = ["T", 256]
access = "write"

[schedule]
order = "any"
"""

SOURCE = """extern "C" __device__ void prefill_start(pl_ctx ctx, pl_bind_prefill b) {
  int* table = reinterpret_cast<int*>(ctx.smem + b.table);
  table[ctx.thread] = 3 * ctx.thread;  // every thread of the 256-thread block
  __syncthreads();
  if (ctx.thread == 0) table[0] = -7;
}
extern "C" __device__ void prefill_a(pl_ctx ctx, pl_bind_prefill b) {
  const int* table = reinterpret_cast<const int*>(ctx.smem + b.table);
  b.y[ctx.tile * 256 + ctx.thread] = table[ctx.thread] + ctx.tile;
}
extern "C" __device__ void prefill_b(pl_ctx ctx, pl_bind_prefill b) {
  const int* table = reinterpret_cast<const int*>(ctx.smem + b.table);
  b.y[ctx.tile * 256 + 128 + ctx.thread] = table[128 + ctx.thread] + ctx.tile;
}
"""

SPEC = """
[link]
name = "prefill"

[facts]
T = 8

[[instance]]
name = "p"
package = "prefill.plc"

[schedule]
tiles = ["T"]
"""


def _link_spec(tmp_path, when="start", registers=""):
    return inline_link(tmp_path, "prefill", CONTRACT.format(when=when, registers=registers), SOURCE, SPEC)


@pytest.mark.slow
def test_the_start_phase_runs_before_the_roles_in_every_warp(tmp_path):
    kernel = pipelink.link(_link_spec(tmp_path))
    text = kernel.plan.glue.text
    start, first_role = text.index("prefill_start(ctx,"), text.index("if (pl_warp < ")
    assert start < first_role  # before the role dispatch
    assert "__syncthreads();  // the whole-block phases are done: the roles start" in text[start:first_role]
    assert "ctx.iter = 0;" in text[:first_role]
    # __syncthreads in a phase the whole block reaches is legal: no barrier-0 finding.
    assert kernel.plan.postlink.conformance == () and not kernel.plan.postlink.findings
    assert any(c.name == "whole-block phases" and "before the tile loops" in c.detail for c in kernel.plan.all_checks())


@pytest.mark.slow
def test_roles_with_register_budgets_around_whole_block_phases(tmp_path):
    """A phase at the start runs before any setmaxnreg; before a phase at the end the glue returns
    each role to the entry budget (where that is a multiple of 8), so every warp arrives alike."""
    budget = "\nregisters = 200\nwarpgroup_aligned = true"
    kernel = pipelink.link(_link_spec(tmp_path / "start", registers=budget))
    text = kernel.plan.glue.text
    assert text.index("prefill_start(ctx,") < text.index("pl_setmaxnreg_")
    assert "// back to the entry budget" not in text
    with pytest.raises(RegisterBudgetError):  # a small block enters with 255 registers
        pipelink.link(_link_spec(tmp_path / "end", when="end", registers=budget))
    # A component's own setmaxnreg the glue cannot undo: fine before the roles, refused before an end phase.
    internal = "\ninternal_setmaxnreg = [200]\nwarpgroup_aligned = true"
    plan_link(_link_spec(tmp_path / "start_internal", registers=internal))
    with pytest.raises(RegisterBudgetError) as info:
        plan_link(_link_spec(tmp_path / "end_internal", when="end", registers=internal))
    assert info.value.field == "entry[0].scope" and "their own setmaxnreg" in info.value.message


@pytest.mark.slow
@pytest.mark.parametrize("when", ["start", "end"])
def test_a_traced_build_gives_whole_block_phases_spans_of_their_own(tmp_path, when):
    """The trace row lists the spans in the order the glue runs them, and each call stores its own
    slot: a phase at the start first, one at the end last, both in the row's iteration 0."""
    import re
    kernel = pipelink.link(_link_spec(tmp_path, when=when), trace=True)
    slots = [(s.label, s.role) for s in kernel.plan.glue.trace_slots]
    phase, roles = ("p.fill", "(whole block)"), [("p.use_a", "a"), ("p.use_b", "b")]
    assert slots == ([phase] + roles if when == "start" else roles + [phase])
    # Each call site and the slot its span is stored in, in the order of the text.
    text = kernel.plan.glue.text
    calls = re.findall(r"(prefill_\w+)\(ctx,.*?pl_trace_store\(p\.pl_trace, (\w+), (\d+), pl_ts\)", text, re.S)
    symbol = {"p.fill": "prefill_start", "p.use_a": "prefill_a", "p.use_b": "prefill_b"}
    assert [(c[0], int(c[2])) for c in calls] == [(symbol[label], i) for i, (label, _) in enumerate(slots)]
    assert all(iteration == ("0" if name == "prefill_start" else "pl_iter") for name, iteration, _ in calls)


def test_when_is_for_whole_block_phases_only(tmp_path):
    (tmp_path / "c.toml").write_text(CONTRACT.format(when="start", registers="").replace(
        'phase = "use_a"', 'phase = "use_a"\nwhen = "start"'))
    with pytest.raises(ContractError) as info:
        load_contract(tmp_path / "c.toml")
    assert info.value.field == "entry[1].when"


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_the_tile_loops_read_what_the_start_phase_wrote(tmp_path):
    import torch
    from pipelink.runtime import Runtime
    kernel = pipelink.link(_link_spec(tmp_path))
    y = torch.full((8, 256), -1, dtype=torch.int32, device="cuda")
    Runtime(kernel.cubin, kernel.manifest).launch_arrays([y])
    torch.cuda.synchronize()
    want = torch.arange(256, device="cuda", dtype=torch.int32) * 3
    want[0] = -7
    assert torch.equal(y, want[None, :] + torch.arange(8, device="cuda", dtype=torch.int32)[:, None])
