"""The Llama-3.2-1B decode block (issue 14, docs/design/llama_decode.md): three components, each a
whole-block phase ordered by its own grid barrier, linked into one kernel. CPU: every batch and
context links in both modes with no finding, the phases share one smem region, the caches are
readwrite operands handed across by global ports. GPU: verify against the float64 reference
(the caches' new rows included)."""

from __future__ import annotations

import importlib.util

import pytest
from rich.console import Console

import pipelink

from conftest import ROOT, gpu_ok

_spec = importlib.util.spec_from_file_location("llama_shapes", ROOT / "examples" / "llama_decode" / "shapes.py")
shapes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shapes)
QUIET = Console(file=open("/dev/null", "w"), width=140)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    return shapes.pack(tmp_path_factory.mktemp("llama"))


@pytest.mark.parametrize("batch,context", [(1, 16), (64, 4096)])
def test_the_block_links_in_both_modes(packages, tmp_path, batch, context):
    spec = shapes.write_spec(tmp_path, packages, batch, context)
    for mode in ("pipelink", "monolithic"):
        kernel = pipelink.link(spec, mode=mode)
        plan = kernel.plan
        assert plan.grid == 132 and plan.block == 256
        assert plan.postlink.conformance == () and not plan.postlink.findings
        params = {p["name"]: p["access"] for p in kernel.manifest["params"] if "workspace" not in p}
        assert params == {"qkv.x": "read", "qkv.wqkv": "read", "qkv.inv_freq": "read", "qkv.k_cache": "readwrite",
                          "qkv.v_cache": "readwrite", "oproj.wo": "read", "oproj.y": "write"}
        text = plan.glue.text
        assert text.index("llama_qkv_rope(") < text.index("llama_attn_short(") < text.index("llama_oproj_residual(")
        offsets = {s.name: s.offset for s in plan.smem}
        assert offsets["qkv.x_chunk"] == offsets["oproj.o_chunk"] == 0  # phases apart in time share smem


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("batch,context", [(1, 16), (8, 512), (64, 16), (64, 512)])
def test_the_block_matches_the_reference(packages, tmp_path, batch, context):
    spec = shapes.write_spec(tmp_path, packages, batch, context)
    result = pipelink.verify(spec, out_dir=tmp_path / "run", bench=False, seeds=2, timeout=60, console=QUIET)
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]
    c = result.rung("correctness").figures
    assert c["oproj.y.unwritten"] == 0 and c["oproj.y.rel_l2"] < 1e-2
