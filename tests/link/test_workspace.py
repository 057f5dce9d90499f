"""[[workspace]]: global scratch the link owns (issue 13's first linker step, docs/design/moe.md).
A component counts its tiles in a zeroed workspace counter: no caller passes the workspace, the
bindings struct holds its address, the manifest lists it for the runtime, and the runtime clears
it before every launch (GPU test: two launches count the same)."""

from __future__ import annotations

import pytest

import pipelink
from pipelink.contract import load_contract
from pipelink.errors import ContractError
from pipelink.abi import KernelABI

from conftest import gpu_ok, inline_link

CONTRACT = """
[component]
name = "tilecount"
version = "1.0.0"

[facts.requires]
T = { range = [1, 4096], default = 64, doc = "tiles" }

[roles.work]
warps = 1

[[entry]]
symbol = "tilecount_tile"
role = "work"
phase = "count"

[[workspace]]
name = "counter"
bytes = 4

[[operand]]
name = "seen"
dtype = "int32"
shape = ["T"]
access = "write"

[schedule]
order = "any"
"""

# Each tile adds one to the counter and records how many tiles had counted before it: with the
# counter zeroed before each launch the recorded values are a permutation of 0 .. T-1.
SOURCE = """extern "C" __device__ void tilecount_tile(pl_ctx ctx, pl_bind_tilecount b) {
  if (ctx.thread == 0) b.seen[ctx.tile] = atomicAdd(reinterpret_cast<int*>(b.counter), 1);
}
"""

SPEC = """
[link]
name = "tilecount"

[facts]
T = 64

[[instance]]
name = "c"
package = "tilecount.plc"

[schedule]
tiles = ["T"]
"""


@pytest.fixture
def tilecount(tmp_path):
    return inline_link(tmp_path, "tilecount", CONTRACT, SOURCE, SPEC, check=True)


@pytest.mark.slow
def test_a_workspace_is_the_links_not_the_callers(tilecount):
    kernel = pipelink.link(tilecount)
    (ws,) = [p for p in kernel.manifest["params"] if "workspace" in p]
    assert ws["name"] == "c.counter" and ws["workspace"] == {"zero": True} and ws["shape"] == [4]
    abi = KernelABI.from_manifest(kernel.manifest)
    assert [p.name for p in abi.operands] == ["c.seen"]  # what a caller passes
    assert abi.arguments({"c.seen": "Y"}) == ["Y"]
    assert "unsigned char* c_counter;" in kernel.plan.glue.text  # a member of the parameter struct
    assert "pl_bind_tilecount{64, p.c_seen, p.c_counter}" in kernel.plan.glue.text
    assert kernel.plan.postlink.conformance == () and not kernel.plan.postlink.findings
    mono = pipelink.link(tilecount, mode="monolithic")
    assert mono.manifest["params"] == kernel.manifest["params"]


def test_workspace_names_share_the_bindings_namespace(tmp_path):
    (tmp_path / "c.toml").write_text(CONTRACT.replace('name = "counter"', 'name = "seen"'))
    with pytest.raises(ContractError) as info:
        load_contract(tmp_path / "c.toml")
    assert info.value.field == "workspace[0].name" and "used twice" in info.value.message


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_the_runtime_clears_the_workspace_before_every_launch(tilecount):
    import torch
    from pipelink.runtime import Runtime
    kernel = pipelink.link(tilecount)
    runtime = Runtime(kernel.cubin, kernel.manifest)
    for _ in range(3):  # without the clearing the second launch would record 64 .. 127
        seen = torch.full((64,), -1, dtype=torch.int32, device="cuda")
        runtime.launch_arrays([seen])
        torch.cuda.synchronize()
        assert sorted(seen.tolist()) == list(range(64))
