"""examples/llama_mlp (issue 50): a Llama-3.2-1B MLP on the weights as the model keeps them. The gate/up kernel
reads B as the model's [gate; up] halves and gathers each tile's rows interleaved every gate_group rows (the
mainloop's b_halves), and the SwiGLU epilogue pairs gate and up by the same fact; the down kernel splits its 16
tiles by stream-K. CPU: what links (the gather's TMA pieces in the SASS) and what the contracts refuse; GPU: both
kernels against the fp32 reference at decode sizes, and the any-M operators the transformers integration calls."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

import pipelink
from pipelink.backend.inspect import inspect_cubin
from pipelink.errors import FactDomainError

from conftest import ROOT, gpu_ok

EXAMPLE = ROOT / "examples" / "llama_mlp"


def spec_with(tmp_path: Path, name: str, **facts) -> Path:
    """A copy of the example's spec ``name`` (gate_up or down) with ``facts`` in place of its own."""
    folder = tmp_path / "llama_mlp"
    folder.mkdir(exist_ok=True)
    shutil.copyfile(EXAMPLE / "reference.py", folder / "reference.py")
    text = (EXAMPLE / f"{name}.toml").read_text().replace('"../../components/', f'"{ROOT}/components/')
    for fact, value in facts.items():
        text, n = re.subn(rf"(?m)^{fact} = \d+", f"{fact} = {value}", text)
        assert n == 1, fact
    (folder / f"{name}.toml").write_text(text)
    return folder / f"{name}.toml"


@pytest.mark.parametrize("tile_n, gate_group", [(128, 32), (256, 64), (256, 32)])
def test_the_gate_up_kernel_gathers_each_tile_from_the_two_halves(tmp_path, tile_n, gate_group):
    """Each stage loads A once and B in tile_n / gate_group pieces of gate_group rows (a box of that many rows):
    gate rows, then the matching up rows, from the two halves of one [16384, 2048] tensor."""
    kernel = pipelink.link(spec_with(tmp_path, "gate_up", tile_n=tile_n, gate_group=gate_group,
                                     stages=8 if tile_n == 128 else 5))
    plan = kernel.plan
    assert plan.tiles == [1, 16384 // tile_n] and plan.postlink.conformance == () and not plan.postlink.findings
    info = inspect_cubin(kernel.cubin, plan.entry)[0]
    assert info.opcode_histogram.get("UTMALDG.2D") == 1 + tile_n // gate_group
    assert info.local == 0 and info.spill_insns == 0
    params = {p["name"]: p for p in kernel.manifest["params"]}
    assert params["mainloop.b"]["shape"] == [16384, 2048] and params["mainloop.b"]["tma"]["box"] == [gate_group, 64]
    assert params["epilogue.y"]["shape"] == [64, 8192]


def test_the_down_kernel_cuts_its_16_tiles_by_stream_k(tmp_path):
    kernel = pipelink.link(EXAMPLE / "down.toml")
    assert kernel.plan.tiles == [1, 16] and kernel.plan.grid > 16  # every SM streams a share of the weight
    params = {p["name"]: p for p in kernel.manifest["params"]}
    assert params["mainloop.b"]["shape"] == [2048, 8192] and params["mainloop.b"]["tma"]["box"] == [128, 64]


@pytest.mark.parametrize("facts, component, words", [
    # a warpgroup's 64 columns cannot hold 64 gate and 64 up columns
    ({"gate_group": 64}, "swiglu_store", "facts.limit[2]"),
    # 128-column tiles of a B whose halves are not whole pairs of 32-row pieces: a gate piece would read up rows
    ({"N": 16352}, "gemm_mainloop", "facts.limit[1]"),
], ids=["group-wider-than-a-warpgroup", "halves-not-whole-pieces"])
def test_a_gather_the_tiles_cannot_hold_is_refused(tmp_path, facts, component, words):
    with pytest.raises(FactDomainError) as err:
        pipelink.link(spec_with(tmp_path, "gate_up", **facts))
    assert err.value.field == words and component in str(err.value), str(err.value)


def test_the_gather_is_not_offered_to_a_cluster_that_splits_b(tmp_path):
    spec = spec_with(tmp_path, "gate_up", M=128)  # two tile rows: a pair of blocks per tile column
    spec.write_text(spec.read_text().replace("[facts]\n", "[facts]\ncluster_ctas = 2\nshare_a = 0\n").replace(
        "persistent = true", "persistent = true\n\n[launch]\ncluster = 2"))
    with pytest.raises(FactDomainError) as err:
        pipelink.link(spec)
    assert err.value.field == "facts.limit[2]" and "gemm_mainloop" in str(err.value), str(err.value)


def _verified(spec: Path, tmp_path: Path) -> dict:
    from rich.console import Console
    result = pipelink.verify(spec, out_dir=tmp_path / "run", bench=False, seeds=2, timeout=120,
                             console=Console(file=open("/dev/null", "w")))
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]
    figures = result.rung("correctness").figures
    assert figures["epilogue.y.unwritten"] == 0 and figures["epilogue.y.rel_l2"] < 5e-3, figures
    return figures


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("name, M, tile_n, gate_group", [
    ("gate_up", 64, 128, 32), ("gate_up", 1, 128, 32), ("gate_up", 64, 256, 64), ("gate_up", 37, 256, 32),
    ("down", 64, 128, None), ("down", 5, 256, None)])
def test_each_kernel_matches_the_reference(tmp_path, name, M, tile_n, gate_group):
    """A gate piece read from the up half (or the wrong rows of either), a SwiGLU paired across pieces, or a stream-K
    sum missing a block's part each show as a mismatch against the fp32 reference (the output is poisoned first)."""
    facts = {"M": M, "tile_n": tile_n, "stages": 8 if tile_n == 128 else 5} | (
        {"gate_group": gate_group} if gate_group else {})
    _verified(spec_with(tmp_path, name, **facts), tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_the_mlp_operators_serve_every_decode_batch():
    """The integration's two operators (pipelink.op over M) at M = 1, 7 and 64, on weights laid out as the model
    keeps them, against transformers' LlamaMLP computed in fp32."""
    import torch
    import torch.nn.functional as F
    gate_up = pipelink.op(EXAMPLE / "gate_up.toml", vary=("M",), tuned=False)
    down = pipelink.op(EXAMPLE / "down.toml", vary=("M",), tuned=False)
    torch.manual_seed(0)
    wgu = (torch.randn(16384, 2048, device="cuda") * 0.022).to(torch.bfloat16)
    wd = (torch.randn(2048, 8192, device="cuda") * 0.011).to(torch.bfloat16)
    for m in (1, 7, 64):
        x = torch.randn(m, 2048, device="cuda").to(torch.bfloat16)
        gate, up = (x.float() @ wgu.float().t()).chunk(2, dim=-1)
        act = gate_up(x, wgu)
        want_act = F.silu(gate) * up
        assert (torch.linalg.vector_norm(act.float() - want_act) / torch.linalg.vector_norm(want_act)) < 5e-3, m
        y = down(act, wd)
        want = act.float() @ wd.float().t()
        assert y.shape == (m, 2048)
        assert (torch.linalg.vector_norm(y.float() - want) / torch.linalg.vector_norm(want)) < 5e-3, m
