"""A caller operand the kernel updates in place (`access = "readwrite"`, as a KV cache is appended
to), in a kernel of start phases only (docs/design/llama_decode.md, items 1 and 2). CPU: the link
of a lone whole-block phase with no tile component, both modes. GPU: verify compares the operand
against the reference's updated copy (not "input modified"), and catches a wrong row."""

from __future__ import annotations

import shutil

import pytest
from rich.console import Console

import pipelink

from conftest import ROOT, edit, gpu_ok

RW = ROOT / "tests" / "components" / "rw"
QUIET = Console(file=open("/dev/null", "w"), width=140)


@pytest.fixture
def spec(tmp_path):
    for f in ("link.toml", "reference.py"):
        shutil.copyfile(RW / f, tmp_path / f)
    pipelink.pack(RW / "cache_append.cu", RW / "cache_append.toml", tmp_path / "packages" / "cache_append.plc")
    return tmp_path / "link.toml"


@pytest.mark.slow
def test_a_kernel_of_one_start_phase_links_in_both_modes(spec):
    for mode in ("pipelink", "monolithic"):
        kernel = pipelink.link(spec, mode=mode)
        assert [(p["name"], p["access"]) for p in kernel.manifest["params"]] == [
            ("append.x", "read"), ("append.cache", "readwrite")]
        assert kernel.plan.postlink.conformance == () and not kernel.plan.postlink.findings
        text = kernel.plan.glue.text
        assert text.index("cache_append_row(") < text.index("the whole-block phases are done")


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_verify_compares_a_readwrite_operand_with_the_reference(spec, tmp_path):
    result = pipelink.verify(spec, out_dir=tmp_path / "ok", bench=False, console=QUIET)
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]
    assert result.rung("correctness").figures["append.cache.rel_l2"] == 0
    edit(spec.parent / "reference.py", 'cache[facts["L"]]', 'cache[facts["L"] + 1]')  # the wrong row
    wrong = pipelink.verify(spec, out_dir=tmp_path / "wrong", bench=False, console=QUIET)
    c = wrong.rung("correctness")
    assert c.status == "FAILED" and "modified" not in c.detail and c.figures["append.cache.rel_l2"] > 0.01
