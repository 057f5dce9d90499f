"""Global ports: one component hands a tensor to another through a [[workspace]] it owns (the MoE
layer's routing table, gathered rows and tile table, docs/design/moe.md). The two-phase toy of
test_grid_phases.py split in two components: `counter` counts the even elements of X across blocks
(a whole-block phase before the tile loops, its own grid barrier) and hands the count over a global
out-port; `writer` reads it through its in-port in the tile loops. CPU tests: the bindings field, the
glue's argument, the audit, and each refusal; the `gpu` test runs it against torch."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

import pipelink
from pipelink.contract import load_contract
from pipelink.errors import ContractError, PortMismatch
from pipelink.link import audit
from pipelink.link.glue_ir import EntryCall
from pipelink.link.pipeline import plan_link

from conftest import edit, edit_glue, gpu_ok, inline_link
from contracts import COUNTER, COUNTER_SOURCE, COUNTER_WRITER_SPEC, WRITER, WRITER_SOURCE



def _link_dir(folder):
    inline_link(folder, "counter", COUNTER, COUNTER_SOURCE, COUNTER_WRITER_SPEC)
    return inline_link(folder, "writer", WRITER, WRITER_SOURCE, COUNTER_WRITER_SPEC)


@pytest.fixture
def evens2(tmp_path):
    return _link_dir(tmp_path)


@pytest.mark.slow
def test_the_reader_gets_the_producers_workspace(evens2):
    kernel = pipelink.link(evens2)
    assert [t.kind for t in kernel.plan.transfers] == ["global"]
    from pipelink import bindgen
    assert "  unsigned char* count;  // global in-port" in bindgen.bind_header(kernel.plan.instance("w").contract)
    calls = re.findall(r"writer_tile\(ctx, pl_bind_writer\{([^}]*)\}", kernel.plan.glue.text)
    assert calls and calls[0].split(", ")[-1] == "(unsigned char*)p.c_hits"  # the writer's field holds c's workspace
    # No parameter of its own: the writer reads c's workspace, the caller passes x and y only.
    assert [p["name"] for p in kernel.manifest["params"] if "workspace" not in p] == ["c.x", "w.y"]


@pytest.mark.slow
def test_the_audit_catches_a_reader_bound_to_the_wrong_workspace(evens2):
    plan = pipelink.link(evens2).plan
    assert audit.check_glue(plan).ok
    wrong = edit_glue(plan, EntryCall, lambda c: replace(c, binding=c.binding.replace("p.c_hits}", "p.c_ntiles}")),
                      count=99)
    assert wrong.glue.statements != plan.glue.statements
    assert "glue.bindings" in {v.invariant for v in audit.check_glue(wrong).violations}


@pytest.mark.parametrize("edits, message", [
    ({"counter": "bf16", "writer": "fp32"}, "dtype bf16 (counter) differs from fp32 (writer), and a global tensor is "
                                            "read in place"),  # convertible in smem, not in place
    ({"writer": "fp32"}, "dtype int32 (counter) differs from fp32 (writer), and a global tensor is read in place"),
])
@pytest.mark.slow
def test_a_global_hand_over_must_agree_on_the_dtype(evens2, edits, message):
    for name, dtype in edits.items():
        edit(evens2.parent / f"{name}.toml", 'dtype = "int32"\nshape = { n = 1 }', f'dtype = "{dtype}"\nshape = {{ n = 1 }}')
        pipelink.pack(evens2.parent / f"{name}.cu", evens2.parent / f"{name}.toml", evens2.parent / f"{name}.plc")
    with pytest.raises(PortMismatch) as info:
        plan_link(evens2)
    assert message in info.value.message and info.value.field == "connect[0]"
    # The symbol control checks nothing: a hand-written host passes the pointer whatever the dtypes say.
    plan = plan_link(evens2, mode="symbol")
    assert any(w.startswith("unchecked by symbol linking") and message in w for w in plan.all_warnings())
    assert [t.kind for t in plan.transfers] == ["global"]


@pytest.mark.slow
def test_a_global_hand_over_must_agree_on_the_shape(evens2):
    edit(evens2.parent / "writer.toml", "shape = { n = 1 }", "shape = { n = 2 }")
    pipelink.pack(evens2.parent / "writer.cu", evens2.parent / "writer.toml", evens2.parent / "writer.plc")
    with pytest.raises(PortMismatch) as info:
        plan_link(evens2)
    assert "shape [1] (counter) differs from [2] (writer)" in info.value.message
    # Symbol linking does not check the layout: it links, with the mismatch as a warning.
    assert any("shape [1]" in w for w in plan_link(evens2, mode="symbol").all_warnings())


@pytest.mark.slow
def test_a_workspace_too_small_for_the_port_is_refused(evens2):
    for name in ("counter", "writer"):  # both sides agree on 2 values; the workspace holds 1
        edit(evens2.parent / f"{name}.toml", "shape = { n = 1 }", "shape = { n = 2 }")
        pipelink.pack(evens2.parent / f"{name}.cu", evens2.parent / f"{name}.toml", evens2.parent / f"{name}.plc")
    with pytest.raises(PortMismatch) as info:
        plan_link(evens2)
    assert "holds 4 bytes but port 'count' is 2 int32 = 8 bytes (4 over)" in info.value.message


@pytest.mark.slow
def test_an_operand_handed_over_is_one_caller_array(evens2):
    """A global out-port may name a plain operand: the reader gets the caller's pointer, so two
    components read the same array (the MoE router and the expert GEMM both read the tokens)."""
    folder = evens2.parent
    port = '[[port]]\nname = "xs"\ndirection = "{}"\nspace = "global"\ndtype = "int32"\nshape = {{ n = "N" }}\n{}\n'
    edit(folder / "counter.toml", "[schedule]", port.format("out", 'buffer = "x"') + "[schedule]")
    edit(folder / "writer.toml", "[schedule]", port.format("in", "") + "[schedule]")
    for name in ("counter", "writer"):
        pipelink.pack(folder / f"{name}.cu", folder / f"{name}.toml", folder / f"{name}.plc")
    edit(evens2, "[schedule]", '[[connect]]\nfrom = "c.xs"\nto = "w.xs"\n\n[schedule]')
    plan = pipelink.link(evens2).plan
    calls = re.findall(r"writer_tile\(ctx, pl_bind_writer\{([^}]*)\}", plan.glue.text)
    assert calls[0].split(", ")[-2:] == ["(unsigned char*)p.c_hits", "(unsigned char*)p.c_x"]
    assert audit.check_glue(plan).ok


@pytest.mark.parametrize("contract, old, new, field", [
    (COUNTER, 'buffer = "hits"', 'buffer = "nothing"', "port[0].buffer"),
    (WRITER, 'space = "global"\n', 'space = "global"\nbuffer = "y"\n', "port[0].buffer"),
    (WRITER, 'space = "global"\n', 'space = "global"\nprotocol = "mbarrier_ring"\n', "port[0].protocol"),
    (WRITER, 'space = "global"\n', 'space = "global"\nvalues = 4\n', "port[0].values"),
    (WRITER, 'name = "y"', 'name = "count"', "port[0].name"),  # the in-port's field would collide

])
def test_global_port_contract_errors(tmp_path, contract, old, new, field):
    assert old in contract
    (tmp_path / "c.toml").write_text(contract.replace(old, new))
    with pytest.raises(ContractError) as info:
        load_contract(tmp_path / "c.toml")
    assert info.value.field == field, info.value


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_the_count_crosses_components_through_global_memory(evens2):
    import torch
    from pipelink.runtime import Runtime
    kernel = pipelink.link(evens2)
    runtime = Runtime(kernel.cubin, kernel.manifest)
    for seed in range(2):
        x = torch.randint(0, 1 << 20, (65536,), generator=torch.Generator().manual_seed(seed)).to(torch.int32).cuda()
        x[: 3000 * seed] = 1
        y = torch.full((512,), -1, dtype=torch.int32, device="cuda")
        runtime.launch_arrays([x, y])
        torch.cuda.synchronize()
        hits = int((x % 2 == 0).sum())
        tiles = (hits + 127) // 128
        assert y[:tiles].tolist() == [hits] * tiles and y[tiles:].tolist() == [-1] * (512 - tiles)
