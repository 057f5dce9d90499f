"""Whole-block phases ([[entry]] scope = "block"): library code that synchronizes the whole block
(CUB's BlockReduce, __syncthreads) in a warp-specialized link. The glue calls such an entry once per
block, after every role's tile loop, in every warp; conformance allows barrier 0 there and only
there. examples/block_reduce: a bulk-copy producer and cub_sum (components/cub). Real nvcc,
nvJitLink and nvdisasm; the `gpu` tests run the linked kernel against the reference."""

from __future__ import annotations

import shutil

import pytest
from rich.console import Console

import pipelink
from pipelink.backend.inspect import inspect_cubin
from pipelink.demo import packaged_spec
from pipelink.errors import ContractError, FactConflict, RegisterBudgetError, VariantMissing
from pipelink.findings import ConformanceError
from pipelink.link.conform import attribute

from pipelink.spec import load_spec

from conftest import ROOT, edit, gpu_ok

EXAMPLE = ROOT / "examples" / "block_reduce"
CUB_SUM = ROOT / "components" / "cub" / "cub_sum"
PRODUCER = ROOT / "components" / "raw" / "bulk_producer"
BLOCK_THREADS = [{"block_threads": 128}, {"block_threads": 160}]  # alone (the probe), and with the producer
ALIGNED = [{"block_threads": 128}, {"block_threads": 256}]  # a warpgroup-aligned sum role pads the block to 256
QUIET = Console(file=open("/dev/null", "w"), width=140)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    out = tmp_path_factory.mktemp("block_reduce_packages")
    pipelink.pack(f"{PRODUCER}.cu", f"{PRODUCER}.toml", out / "bulk_producer.plc")
    pipelink.pack(f"{CUB_SUM}.cu", f"{CUB_SUM}.toml", out / "cub_sum.plc", variants=BLOCK_THREADS)
    return out


@pytest.fixture
def example(tmp_path, packages):
    """A fresh copy of examples/block_reduce with its packages (tests may edit both)."""
    shutil.copytree(packages, tmp_path / "packages")
    shutil.copyfile(EXAMPLE / "reference.py", tmp_path / "reference.py")
    (tmp_path / "link.toml").write_text(packaged_spec((EXAMPLE / "link.toml").read_text()))
    return tmp_path / "link.toml"


def repack_cub_sum(spec, old: str, new: str, variants=BLOCK_THREADS, check: bool = True):
    contract = spec.parent / "cub_sum.toml"
    shutil.copyfile(f"{CUB_SUM}.toml", contract)
    edit(contract, old, new)
    pipelink.pack(f"{CUB_SUM}.cu", contract, spec.parent / "packages" / "cub_sum.plc", variants=variants,
                  check=check)


@pytest.mark.slow
def test_example_links_clean_with_the_phase_after_the_tile_loops(example):
    for mode in ("pipelink", "monolithic"):
        kernel = pipelink.link(example, mode=mode)
        plan = kernel.plan
        assert plan.block == 160 and [(r.name, r.warps) for r in plan.roles] == [("producer", 1), ("sum", 4)]
        assert plan.postlink.conformance == () and plan.postlink.findings == ()
        assert all(c.ok for c in plan.all_checks()), [(c.name, c.detail) for c in plan.all_checks() if not c.ok]
        # The finish entry is called once, after both roles' tile loops and a block-wide barrier, with
        # every thread's index; the tile phase inside the sum role's loop.
        loops, phases = plan.glue.text.split("__syncthreads();  // every role is done with its tiles")
        assert loops.count("for (int pl_tile") == 2 and "cub_sum_tile(ctx, " in loops
        assert "pl_tile" not in phases and phases.count("cub_sum_finish(ctx, ") == 1
        assert "ctx.thread = pl_t;" in phases and "const int pl_t = threadIdx.x;" in phases
        # BlockReduce's barrier 0 is in the sum instance's code, and conformance let it through there.
        info, _ = inspect_cubin(kernel.cubin, plan.entry)
        syncs = {owner for insn, owner in zip(info.instructions, attribute(plan, info))
                 if insn.startswith("BAR.SYNC") and insn.split()[1] == "0x0"}
        assert "sum" in syncs
        # WarpReduce's TempStorage is declared and never touched (shuffles): a warning, not a failure.
        scratch = next(s for s in plan.smem if s.name == "sum.warp_scratch")
        assert f"smem buffer sum.warp_scratch at offset {scratch.offset} is never addressed by an immediate in " \
               f"[{scratch.offset}, {scratch.offset + 4}): unused, or its offset is not folded" in plan.postlink.warnings


@pytest.mark.slow
def test_the_same_code_in_a_tile_phase_is_refused(example):
    """cub_sum_finish as an ordinary phase of the sum role (scope dropped): BlockReduce's __syncthreads
    in one role of a two-role block is the barrier-0 finding, at the component's line in CUB."""
    repack_cub_sum(example, 'scope = "block"\n', "")  # alone (one role) the probe accepts it
    with pytest.raises(ConformanceError) as info:
        pipelink.link(example)
    assert info.value.component == "cub_sum" and info.value.field == "named_barrier"
    found = pipelink.link(example, strict=False).plan.postlink.conformance
    assert found and all(f.instance == "sum" and f.severity == "error" and "barrier 0 (__syncthreads)" in
                         f.message for f in found), found
    assert all(f.location.startswith("cub_sum.cu:") and "(in block_reduce" in f.location for f in found)
    assert 'an entry of scope = "block"' in found[0].hint


@pytest.mark.slow
def test_padding_warps_stay_for_the_whole_block_phase(example):
    """A warpgroup-aligned sum role pads the producer to 4 warps: the padding warps skip the tile loop
    but do not return, so that every thread of the 256-thread block reaches the phase."""
    repack_cub_sum(example, "[roles.sum]\nwarps = 4\n", "[roles.sum]\nwarps = 4\nwarpgroup_aligned = true\n",
                   variants=ALIGNED)
    kernel = pipelink.link(example)
    assert kernel.plan.block == 256 and kernel.plan.role("producer").warps == 4
    glue = kernel.plan.glue.text
    assert "if (pl_t < 32) {" in glue and "return;  // padding" not in glue
    assert kernel.plan.postlink.conformance == () and kernel.plan.postlink.findings == ()


def test_block_threads_is_decided_by_the_link(example):
    """The spec does not set block_threads: the link offers the block its roles add up to (160) and
    takes the package's variant built for it, in every mode that checks."""
    assert "block_threads" not in load_spec(example).facts
    for mode in ("pipelink", "monolithic"):
        plan = pipelink.link(example, mode=mode).plan
        inst = plan.instance("sum")
        assert inst.facts["block_threads"] == plan.block == 160
        assert inst.package.variants[inst.variant].facts == {"block_threads": 160}
        assert inst.fact_sources["block_threads"].kind == "launch"
        assert "producer 32 + sum 128" in str(inst.fact_sources["block_threads"])


def test_block_threads_set_against_the_block_is_a_conflict(example):
    edit(example, "stages = 4\n", "stages = 4\nblock_threads = 128\n")
    with pytest.raises(FactConflict) as info:
        pipelink.link(example)
    assert info.value.component == "cub_sum" and info.value.field == "facts.requires.block_threads"
    assert "the block's threads (producer 32 + sum 128) 160" in info.value.message
    assert "[facts] 128" in info.value.message


@pytest.mark.slow
def test_block_threads_without_its_variant_names_the_variant(example):
    """A package without a variant for the block's size is refused, naming the variant to pack."""
    repack_cub_sum(example, "summary", "summary", variants=[{"block_threads": 128}])
    with pytest.raises(VariantMissing) as info:
        pipelink.link(example)
    assert info.value.component == "cub_sum" and "block_threads=160" in info.value.message
    assert "--variant block_threads=160" in info.value.hint


@pytest.mark.slow
def test_symbol_mode_launches_a_block_threads_mismatch(example):
    """The symbol control checks nothing: it takes the variant the spec's values pick (the default 128
    here, as a team picks its object file), links it into the 160-thread block, and only warns."""
    plan = pipelink.link(example, mode="symbol").plan
    inst = plan.instance("sum")
    assert plan.block == 160 and inst.facts["block_threads"] == 128
    assert any("unchecked by symbol linking" in w and "block_threads = 128" in w and "160 threads" in w
               for w in plan.all_warnings()), plan.all_warnings()


@pytest.mark.slow
def test_whole_block_phase_refuses_setmaxnreg_and_register_ports(example):
    # A role budget the glue would have to undo after the loop: the block (aligned: 256 threads) enters with
    # 255 registers, which setmaxnreg (multiples of 8) cannot return to.
    repack_cub_sum(example, "[roles.sum]\nwarps = 4\n", "[roles.sum]\nwarps = 4\nregisters = 232\n"
                   "warpgroup_aligned = true\n", variants=ALIGNED, check=False)
    with pytest.raises(RegisterBudgetError) as info:
        pipelink.link(example)
    assert info.value.field == "roles" and "entry budget of 255 registers" in info.value.message
    # The component's own setmaxnreg the glue cannot undo at all.
    repack_cub_sum(example, "[roles.sum]\nwarps = 4\n", "[roles.sum]\nwarps = 4\ninternal_setmaxnreg = [232]\n"
                   "warpgroup_aligned = true\n", variants=ALIGNED, check=False)
    with pytest.raises(RegisterBudgetError) as info:
        pipelink.link(example)
    assert info.value.field == "entry[1].scope" and "sum (cub_sum) role 'sum'" in info.value.message
    repack_cub_sum(example, 'scope = "block"\n', 'scope = "block"\nports = ["total"]\n'
                   '\n[[port]]\nname = "total"\ndirection = "out"\nspace = "registers"\ndtype = "fp32"\n'
                   'shape = { i = "1" }\nvalues = 1\nfragment = { i = "0" }\nprotocol = "registers"\n', check=False)
    with pytest.raises(ContractError) as info:
        pipelink.link(example)
    assert info.value.field == "entry[1].ports" and "whole-block phase 'finish'" in info.value.message


@pytest.mark.slow
def test_sanitize_checks_canaries_after_the_whole_block_phase(example):
    kernel = pipelink.link(example, sanitize=True)
    assert [s.label for s in kernel.plan.glue.sanitize_sites] == ["load.load", "sum.accumulate", "sum.finish"]
    glue = kernel.plan.glue.text
    after = glue[glue.index("cub_sum_finish(ctx, "):]
    assert "const int pl_tile = -1;" in glue and "pl_sanitize_fail(p.pl_report, 1, 2, " in after
    assert kernel.plan.postlink.conformance == ()


# --- on the GPU --------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["pipelink", "monolithic"])
@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_whole_block_example_matches_the_reference(example, tmp_path, mode):
    result = pipelink.verify(example, mode=mode, out_dir=tmp_path / mode, bench=mode == "pipelink", console=QUIET)
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]
    c = result.rung("correctness").figures
    assert c["sum.out.unwritten"] == 0 and c["sum.out.rel_l2"] < 1e-5 and c["seeds"] == 3


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_whole_block_phase_with_padding_warps_and_sanitize(example, tmp_path):
    """The padded layout (padding warps skip the tile loop, then join the phase) runs and is right;
    sanitize mode checks the canaries after the whole-block phase too."""
    repack_cub_sum(example, "[roles.sum]\nwarps = 4\n", "[roles.sum]\nwarps = 4\nwarpgroup_aligned = true\n",
                   variants=ALIGNED)
    padded = pipelink.verify(example, out_dir=tmp_path / "padded", bench=False, timeout=30, console=QUIET)
    assert padded.passed, [(r.name, r.status, r.detail) for r in padded.rungs]
    sanitized = pipelink.verify(example, out_dir=tmp_path / "sanitize", sanitize=True, timeout=30, console=QUIET)
    assert sanitized.passed, [(r.name, r.status, r.detail) for r in sanitized.rungs]
