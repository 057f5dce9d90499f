"""Issue 54: a Blackwell fusion, linked on the CPU. A TMA + tcgen05.mma mainloop whose accumulator stays in tensor
memory (components/blackwell/umma_mainloop) and an epilogue reading it there (tmem_bias_gelu), linked for the B200
(examples/blackwell_gemm): the tensor memory allocated by the link, the SASS identical to the monolithic control's,
conformance clean on sm_100a code. On a B200 (marker `blackwell`, skipped elsewhere) it verifies against fp32."""

from __future__ import annotations

import re
import shutil

import pytest

import pipelink
from pipelink.backend.inspect import inspect_cubin, normalized_sass
from pipelink.runtime import gpu_available

from conftest import ROOT, edit

EXAMPLE = ROOT / "examples" / "blackwell_gemm"


def _spec(tmp_path, tile_n: int):
    folder = tmp_path / "examples" / "blackwell_gemm"
    folder.mkdir(parents=True)
    shutil.copytree(ROOT / "components" / "blackwell", tmp_path / "components" / "blackwell")
    for f in ("link.toml", "reference.py"):
        shutil.copyfile(EXAMPLE / f, folder / f)
    return edit(folder / "link.toml", "tile_n = 256", f"tile_n = {tile_n}")


@pytest.mark.parametrize("tile_n", [128, 256])
def test_the_blackwell_fusion_links_clean_and_matches_its_monolithic_control(tmp_path, tile_n):
    spec = _spec(tmp_path, tile_n)
    kernel = pipelink.link(spec)
    plan = kernel.plan
    assert plan.device["arch"] == "sm_100a" and plan.postlink.conformance == () and not plan.postlink.findings
    # two accumulator slots of tile_n columns, one allocation (256 columns at tile_n 128: the SM's other 256 free for
    # a second block; all 512 at 256)
    t = plan.allocation.tmem
    assert (t.columns, [(b.name, b.column, b.columns) for b in t.buffers]) == (
        2 * tile_n, [("mainloop.accum", 0, 2 * tile_n)])
    assert "pl_tmem + 0u}" in plan.glue.text and plan.backend.resources.local == 0
    mono = pipelink.link(spec, mode="monolithic")
    sass = [normalized_sass(inspect_cubin(k.cubin, k.plan.entry)[0].instructions) for k in (kernel, mono)]
    assert sass[0] == sass[1]
    text = "\n".join(sass[0])
    # 4 MMAs of K = 16 per 64-wide k-tile, commits onto the ring's and the accumulator's mbarriers, TMEM loads of 32
    # columns, TMA loads, the glue's one allocation; GELU's tanh one MUFU op a value
    assert len(re.findall(r"\bUTCHMMA\b", text)) >= 4 and "UTCBAR" in text and "LDTM.x32" in text
    assert "UTMALDG.2D" in text and "UTCATOMSWS.FIND_AND_SET" in text and "MUFU.TANH" in text


@pytest.mark.blackwell
@pytest.mark.skipif(not gpu_available("sm_100a")[0], reason="needs a B200 (sm_100a)")
def test_the_blackwell_fusion_verifies_on_a_b200(tmp_path):
    result = pipelink.verify(_spec(tmp_path, 256), out_dir=tmp_path / "verify", bench=False)
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]
