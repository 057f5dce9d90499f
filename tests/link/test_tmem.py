"""Tensor memory as a linked resource (issue 54): the link allocates every instance's [[tmem]] columns in one
tcgen05.alloc per block, hands each buffer (and each tmem in-port) its address, frees it at the end, and refuses what
the SM cannot hold or what the two sides of a tmem port disagree on; conformance refuses a component's own
allocation that its contract does not declare. Linked for sm_100a on the CPU: no Blackwell GPU is here.

The test link (tests/components/tmem): tmem_fill writes a 128 x cols tile into a two-slot [[tmem]] buffer, tmem_drain
reads it in place through its tmem in-port and writes 2 x it."""

from __future__ import annotations

import re
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipelink
from pipelink.backend.inspect import inspect_cubin, normalized_sass
from pipelink.contract import load_contract
from pipelink.errors import ContractError, PortMismatch, SpecError, TmemOverflow
from pipelink.findings import ConformanceError
from pipelink.link.tmem import alloc_columns

from conftest import ROOT, edit, inline_link

TMEM = ROOT / "tests" / "components" / "tmem"


def tmem_link(folder, fill_edits=(), drain_edits=(), drain_source=None, spec_edits=()):
    """The test link in ``folder``, its two components packed from (edited) copies; returns the spec."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in TMEM.iterdir():
        shutil.copyfile(f, folder / f.name)
    for name, edits in (("tmem_fill", fill_edits), ("tmem_drain", drain_edits)):
        for old, new in edits:
            edit(folder / f"{name}.toml", old, new)
    if drain_source:
        (folder / "tmem_drain.cu").write_text(drain_source)
    for old, new in spec_edits:
        edit(folder / "link.toml", old, new)
    for name in ("tmem_fill", "tmem_drain"):
        pipelink.pack(folder / f"{name}.cu", folder / f"{name}.toml", folder / f"{name}.plc", check=False)
    return folder / "link.toml"


@pytest.fixture(scope="module")
def linked(tmp_path_factory):
    spec = tmem_link(tmp_path_factory.mktemp("tmem"))
    return spec, pipelink.link(spec)


def test_one_allocation_for_the_block_each_buffer_its_address_the_reader_the_producers(linked):
    spec, kernel = linked
    plan = kernel.plan
    t = plan.allocation.tmem
    assert (t.columns, t.own, t.relinquish) == (64, (), True)  # 2 slots x 32 columns, a power of two already
    assert [(b.name, b.column, b.columns) for b in t.buffers] == [("fill.tile", 0, 64)]
    slot = next(s for s in plan.smem if s.name == "glue.tmem_slot")
    glue = plan.glue.text
    assert f"pl_tmem_alloc(pl_smem_addr(pl_smem + {slot.offset}), 64);" in glue
    assert "pl_tmem_relinquish();" in glue and "pl_tmem_dealloc(pl_tmem, 64);" in glue
    # the filler's buffer and the drain's in-port: the block's address plus column 0
    assert glue.count("p.fill_x, pl_tmem + 0u}") == 1 and glue.count("p.drain_y, pl_tmem + 0u}") == 1
    # freed after every role's loop, behind a sync every warp reaches
    assert glue.index("pl_tmem_dealloc(pl_tmem") > glue.rindex("tmem_drain_tile(")
    assert [t.kind for t in plan.transfers] == ["tmem"]
    # the two sides' mbarriers are one array each (merged across the hand-over, as smem rings are)
    assert sorted((m.count, m.arrivals) for m in plan.mbarriers) == [(2, 4), (2, 4)]
    assert all(len(m.users) == 2 for m in plan.mbarriers)


def test_the_sm100a_cubin_matches_its_monolithic_control_and_obeys_the_contracts(linked):
    spec, kernel = linked
    mono = pipelink.link(spec, mode="monolithic")
    a = inspect_cubin(kernel.cubin, kernel.plan.entry)[0]
    b = inspect_cubin(mono.cubin, mono.plan.entry)[0]
    assert normalized_sass(a.instructions) == normalized_sass(b.instructions)
    ops = " ".join(a.instructions)
    # the glue's allocation, its permit given up, the components' tcgen05.st / ld (STTM / LDTM)
    assert "UTCATOMSWS.FIND_AND_SET" in ops and "UVIRTCOUNT.DEALLOC.SMPOOL" in ops
    assert "STTM" in ops and "LDTM" in ops
    assert kernel.plan.postlink.conformance == ()


def test_a_device_without_tensor_memory_is_refused(tmp_path):
    spec = tmem_link(tmp_path, spec_edits=[('device = "b200"', 'device = "rtx5090"')],
                     fill_edits=[('archs = ["sm_100a"]', 'archs = ["sm_100a", "sm_120a"]')],
                     drain_edits=[('archs = ["sm_100a"]', 'archs = ["sm_100a", "sm_120a"]')])
    with pytest.raises(TmemOverflow) as err:
        pipelink.link(spec)
    assert "rtx5090 (sm_120a) has no tensor memory" in err.value.message and "fill.tile 64 columns" in err.value.message


def test_parts_over_the_sms_512_columns_are_refused_naming_each(tmp_path):
    """The filler's 2 x 128 columns and 300 the drain allocates itself (rounded to 512, as tcgen05.alloc takes
    them): 768 of 512."""
    spec = tmem_link(tmp_path, spec_edits=[("cols = 32", "cols = 128")],
                     drain_edits=[('warpgroup_aligned = true\n', 'warpgroup_aligned = true\n\n[reserve]\n'
                                                                  'tmem_columns = 300\n')])
    with pytest.raises(TmemOverflow) as err:
        pipelink.link(spec)
    e = err.value
    assert "the block needs 768 columns, over the 512 of an SM by 256" in e.message
    assert "the glue's allocation 256 (holding fill.tile 256 columns at 0)" in e.message
    assert "drain allocates 512 itself" in e.message and e.component == "tmem_drain, tmem_fill"


def test_a_tmem_port_layout_mismatch_is_refused(tmp_path):
    spec = tmem_link(tmp_path, drain_edits=[('fragment = { row = "lane", col = "col" }',
                                             'fragment = { row = "lane", col = "cols - 1 - col" }')])
    with pytest.raises(PortMismatch) as err:
        pipelink.link(spec)
    assert ("tensor-memory layouts differ: lane 0 col 0 holds (row=0, col=0) in tmem_fill" in err.value.message
            and "but (row=0, col=31) in tmem_drain" in err.value.message), err.value.message
    assert err.value.field == "connect[0]"


def test_a_tmem_port_of_another_dtype_or_a_reader_out_of_warpgroups_is_refused(tmp_path):
    with pytest.raises(PortMismatch, match="hands over fp32 in tensor memory and tmem_drain reads int32"):
        pipelink.link(tmem_link(tmp_path / "a", drain_edits=[('dtype = "fp32"\nshape = { row', 'dtype = "int32"\nshape = { row')]))
    with pytest.raises(PortMismatch, match="none of its roles is warpgroup-aligned"):
        pipelink.link(tmem_link(tmp_path / "b", drain_edits=[("warpgroup_aligned = true", "warpgroup_aligned = false")]))


UNDECLARED = (TMEM / "tmem_drain.cu").read_text().replace(
    "  const int slot = ctx.iter % 2;",
    "  __shared__ unsigned own;  // an allocation of its own, which the contract does not declare\n"
    "  if (ctx.iter == 0 && ctx.thread < 32) {\n"
    '    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 32;" :: '
    '"r"((unsigned)__cvta_generic_to_shared(&own)) : "memory");\n'
    '    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, 32;" :: "r"(own) : "memory");\n'
    "  }\n"
    "  const int slot = ctx.iter % 2;", 1)


def test_a_components_own_allocation_is_refused_unless_declared(tmp_path):
    with pytest.raises(ConformanceError) as err:
        pipelink.link(tmem_link(tmp_path / "a", drain_source=UNDECLARED))
    assert err.value.field == "reserve.tmem_columns" and "allocates or frees tensor memory itself" in err.value.message
    # declared: counted beside the glue's 64 (32 rounds to 32), and the glue keeps the block's permit
    kernel = pipelink.link(tmem_link(tmp_path / "b", drain_source=UNDECLARED,
                                     drain_edits=[('warpgroup_aligned = true\n', 'warpgroup_aligned = true\n\n'
                                                                                  '[reserve]\ntmem_columns = 32\n')]))
    assert kernel.plan.allocation.tmem.own == (("drain", 32),) and "pl_tmem_relinquish();" not in kernel.plan.glue.text
    assert not [f for f in kernel.plan.postlink.conformance if f.severity == "error"]


@pytest.mark.parametrize("old, new, field, words", [
    ('buffer = "tile"', 'buffer = "nope"', "port[0].buffer", "must name one of its [[tmem]] buffers"),
    ('dtype = "fp32"\nshape = { row', 'dtype = "bf16"\nshape = { row', "port[0].dtype", "32-bit element"),
    ('protocol = "mbarrier_ring"', 'protocol = "barrier"', "port[0].protocol", "mbarrier_ring"),
    ('fragment = { row = "lane", col = "col" }', 'fragment = { row = "t", col = "col" }', "port[0].fragment.row",
     "unknown name(s) t"),
    ('columns = "2 * cols"', 'columns = 513', "tmem[0].columns", "512"),
    ('align = 32', 'align = 3', "tmem[0].align", "3"),
    ('name = "tile"', 'name = "cols"', "tmem[0].name", "used twice"),
    ('align = 32\n', 'align = 32\nlive = ["nowhere"]\n', "tmem[0].live", "unknown phase"),
    ('mbarriers = ["full", "empty"]', 'mbarriers = ["full", "nope"]', "port[0].mbarriers", "unknown mbarrier"),
    ('protocol = "mbarrier_ring"', 'protocol = "mbarrier_ring"\noffset = "row"', "port[0].offset", "for smem or register"),
    ('warpgroup_aligned = true\n', 'warpgroup_aligned = true\n\n[reserve]\ntmem_columns = 600\n',
     "reserve.tmem_columns", "512"),
])
def test_a_tmem_contract_is_checked_on_load(tmp_path, old, new, field, words):
    shutil.copyfile(TMEM / "tmem_fill.toml", tmp_path / "c.toml")
    edit(tmp_path / "c.toml", old, new)
    with pytest.raises(ContractError) as err:
        load_contract(tmp_path / "c.toml")
    assert err.value.field == field and words in str(err.value), str(err.value)


def test_symbol_linking_refuses_tensor_memory(tmp_path):
    spec = tmem_link(tmp_path)
    with pytest.raises(SpecError, match="glue allocates it"):
        pipelink.link(spec, mode="symbol")


def test_an_in_port_buffer_is_refused_on_load(tmp_path):
    shutil.copyfile(TMEM / "tmem_drain.toml", tmp_path / "c.toml")
    edit(tmp_path / "c.toml", 'space = "tmem"\n', 'space = "tmem"\nbuffer = "x"\n')
    with pytest.raises(ContractError, match=re.escape("names a buffer, but the producer's [[tmem]] buffer")):
        load_contract(tmp_path / "c.toml")


def test_the_reader_is_bound_to_the_producers_column_and_the_allocation_rounds_up(tmp_path):
    """A second buffer of the filler's, aligned to 128 columns, is placed first: the handed-over tile then starts at
    column 32, which the drain's in-port must be bound to; 96 columns in use take an allocation of 128."""
    spec = tmem_link(tmp_path, fill_edits=[("[[mbarrier]]\nname = \"full\"", "[[tmem]]\nname = \"scratch\"\ncolumns = 32\n"
                                            "align = 128\n\n[[mbarrier]]\nname = \"full\"")])
    plan = pipelink.link(spec).plan
    t = plan.allocation.tmem
    assert [(b.name, b.column, b.columns) for b in t.buffers] == [("fill.scratch", 0, 32), ("fill.tile", 32, 64)]
    assert t.columns == 128 and "pl_tmem_alloc(pl_smem_addr(pl_smem + 0), 128);" in plan.glue.text
    assert "p.fill_x, pl_tmem + 32u, pl_tmem + 0u}" in plan.glue.text and "p.drain_y, pl_tmem + 32u}" in plan.glue.text


@given(st.integers(min_value=1, max_value=512))
def test_an_allocation_is_what_tcgen05_alloc_takes(columns):
    """A power of two from 32 (PTX ISA, tcgen05.alloc), the least such that holds the columns."""
    n = alloc_columns(columns)
    assert n >= max(32, columns) and n & (n - 1) == 0 and (n == 32 or n // 2 < columns)


PHASES = """
[component]
name = "tphases"
version = "1"
archs = ["sm_100a"]

[facts.requires]
N = { range = [1, 1024] }

[roles.r]
warps = 4
warpgroup_aligned = true

[[entry]]
symbol = "tphases_a"
role = "r"
phase = "a"

[[entry]]
symbol = "tphases_b"
role = "r"
phase = "b"

[[tmem]]
name = "first"
columns = 64
live = ["a"]

[[tmem]]
name = "second"
columns = 64
live = ["b"]

[[tmem]]
name = "always"
columns = 32
"""


def phases_link(folder, contract: str):
    """PHASES (or an edit of it) with empty entries, packed and linked for the B200 over 8 tiles."""
    source = ('extern "C" __device__ void tphases_a(pl_ctx ctx, pl_bind_tphases b) {}\n'
              'extern "C" __device__ void tphases_b(pl_ctx ctx, pl_bind_tphases b) {}\n')
    spec = inline_link(folder, "tphases", contract, source, '[link]\nname = "phases"\ndevice = "b200"\n\n[facts]\n'
                       'N = 8\n\n[[instance]]\nname = "p"\npackage = "tphases.plc"\n\n[schedule]\ntiles = ["N"]\n')
    return pipelink.link(spec)


def test_buffers_of_one_role_in_disjoint_phases_share_columns(tmp_path):
    """Two 64-column buffers, each live in one phase of one role, take the same columns; one live throughout does
    not share: 96 columns in use, an allocation of 128."""
    t = phases_link(tmp_path, PHASES).plan.allocation.tmem
    at = {b.name: (b.column, b.columns) for b in t.buffers}
    assert at["p.first"][0] == at["p.second"][0] and at["p.always"][0] not in (at["p.first"][0],)
    assert t.columns == 128 and max(c + n for c, n in at.values()) == 96


def test_the_allocation_is_as_large_as_the_strictest_alignment(tmp_path):
    """tcgen05.alloc aligns a range to its own size: a 32-column buffer aligned to 256 takes an allocation of 256, so
    that its column is a multiple of 256 in the SM's tensor memory too."""
    text = PHASES.replace('name = "always"\ncolumns = 32\n', 'name = "always"\ncolumns = 32\nalign = 256\n')
    assert phases_link(tmp_path, text).plan.allocation.tmem.columns == 256


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=-4, max_value=1030))
def test_a_buffers_columns_are_accepted_exactly_within_1_to_512(columns):
    """The boundary of [[tmem]] columns, on load: 1..512 accepted, anything else a ContractError naming the field."""
    import tempfile
    from pathlib import Path
    text = (TMEM / "tmem_fill.toml").read_text().replace('columns = "2 * cols"', f"columns = {columns}")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "c.toml"
        path.write_text(text)
        if 1 <= columns <= 512:
            assert load_contract(path).tmem[0].columns.eval({}) == columns
        else:
            with pytest.raises(ContractError) as err:
                load_contract(path)
            assert err.value.field == "tmem[0].columns"


def test_the_cli_refuses_a_bad_tmem_contract_with_exit_2_and_writes_nothing(tmp_path):
    import subprocess
    import sys
    shutil.copyfile(TMEM / "tmem_fill.cu", tmp_path / "tmem_fill.cu")
    shutil.copyfile(TMEM / "tmem_fill.toml", tmp_path / "tmem_fill.toml")
    edit(tmp_path / "tmem_fill.toml", 'columns = "2 * cols"', "columns = 0")
    proc = subprocess.run([sys.executable, "-m", "pipelink", "pack", str(tmp_path / "tmem_fill.cu"), "-o",
                           str(tmp_path / "out.plc")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "tmem_fill.toml" in proc.stderr and "tmem[0].columns" in proc.stderr
    assert not (tmp_path / "out.plc").exists()
