"""The MoE layer (issue 13, docs/design/moe.md): five components (router, closed permute, grouped
CuTe mainloop, SwiGLU/identity epilogue, combine) linked into one persistent kernel that hands its
intermediate tensors over global ports. CPU tests: the packages, the link at every shape of the
issue, what the components share through their contracts, and the closed package; `gpu` tests:
the verifiable loop against the fp32 reference, and routing where a quarter of the experts get no
token."""

from __future__ import annotations

import importlib.util
import zipfile

import pytest

import pipelink
from pipelink.errors import FactConflict
from pipelink.link.pipeline import plan_link

from conftest import ROOT, gpu_ok

_spec = importlib.util.spec_from_file_location("moe_shapes", ROOT / "examples" / "moe" / "shapes.py")
shapes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shapes)


@pytest.fixture(scope="module")
def moe_packages(tmp_path_factory):
    return shapes.pack(tmp_path_factory.mktemp("moe"))


def test_the_permute_ships_closed(moe_packages):
    with zipfile.ZipFile(moe_packages / "moe_permute.plc") as z:
        assert not any(n.startswith("source/") for n in z.namelist())
    with zipfile.ZipFile(moe_packages / "moe_router.plc") as z:
        assert any(n.startswith("source/") for n in z.namelist())


@pytest.mark.parametrize("model", sorted(shapes.MODELS))
@pytest.mark.parametrize("tokens", shapes.TOKENS)
def test_every_shape_links(moe_packages, tmp_path, model, tokens):
    plan = plan_link(shapes.write_spec(tmp_path, moe_packages, model, tokens))
    hidden, inter, experts, k = shapes.MODELS[model]
    assert plan.grid == 132 and plan.num_tiles == shapes.tile_bound(hidden, inter, experts, k, tokens)
    # The permute's guarantees size the other components' workspaces and ports.
    rows = plan.instance("permute").facts["rows_max"]
    assert rows % 128 == 0 and rows >= tokens * k + experts * 127
    for name in ("gemm", "epilogue", "combine"):
        assert plan.instance(name).facts["rows_max"] == rows
        assert plan.instance(name).fact_sources["rows_max"].kind == "guarantee"
    assert {t.kind for t in plan.transfers} == {"global", "reg_to_reg"}


def test_the_tile_order_is_the_permutes_own_fact(moe_packages, tmp_path):
    """`band` (the table's order) is required by the permute alone: the spec sets it, nobody else sees it."""
    plan = plan_link(shapes.write_spec(tmp_path, moe_packages, "mixtral", 16384, facts={"band": 8}))
    assert plan.instance("permute").facts["band"] == 8 and plan.instance("permute").bind["band"] == 8
    assert all("band" not in i.facts for i in plan.instances if i.name != "permute")


def test_what_the_components_share(moe_packages, tmp_path):
    kernel = pipelink.link(shapes.write_spec(tmp_path, moe_packages, "qwen3_30b_a3b", 4096))
    plan = kernel.plan
    # The whole-block phases reuse one smem region (the router's logits, then the permute's
    # offsets), fenced by __syncthreads, not by a barrier of their own.
    router, permute = (next(s for s in plan.smem if s.name == n) for n in ("router.logits", "permute.offsets"))
    assert router.offset == permute.offset
    assert not any("reuse" in str(b.purpose) for b in plan.barriers)
    # One named barrier per component that asked, IDs from the link; the mbarriers count the gather.
    assert sorted(b.threads for b in plan.barriers) == [128, 256]
    full = next(m for m in plan.mbarriers if m.name == "gemm.full")
    assert full.arrivals == 129 and full.count == 3
    # Budgets: the loop's setmaxnreg, then back to the entry budget for the combine in every warp.
    text = plan.glue.text
    assert text.count("pl_setmaxnreg_") == 4 and "pl_setmaxnreg_inc<168>();  // back" in text
    assert text.index("moe_permute_group(") < text.index("pl_tile_count = pl_ld_acquire_int(p.permute_table)")
    assert f"if (pl_tile_count > {plan.num_tiles}) __trap();" in text
    assert text.index("moe_combine_sum(") > text.index("moe_epilogue_tile(")
    # Only the layer's operands are the caller's; the rest is the link's workspace.
    params = [p["name"] for p in kernel.manifest["params"] if "workspace" not in p]
    assert params == ["router.x", "router.wr", "gemm.w1", "gemm.w2", "combine.y"]
    assert plan.postlink.conformance == () and not plan.postlink.findings


def test_w1_as_transformers_keeps_it_is_gathered_per_tile(moe_packages, tmp_path):
    """b_halves (issue 50): each expert's W1 as [gate; up] halves, transformers' gate_up_proj. A gate/up tile loads
    its gate rows and the matching up rows as two boxes of 128 rows (the down tile's W2 box stays 256), and the
    epilogue pairs them 128 columns apart (gate_group, one fact for both components)."""
    from pipelink.backend.inspect import inspect_cubin
    kernel = pipelink.link(shapes.write_spec(tmp_path, moe_packages, "qwen3_30b_a3b", 4096, facts=shapes.HALVES))
    boxes = {p["name"]: p["tma"]["box"] for p in kernel.manifest["params"] if p.get("tma")}
    assert boxes == {"gemm.w1": [128, 64], "gemm.w2": [256, 64]}
    info = inspect_cubin(kernel.cubin, kernel.plan.entry)[0]
    assert info.opcode_histogram.get("UTMALDG.2D") == 3 and info.local == 0
    assert kernel.plan.instance("epilogue").facts["gate_group"] == 128
    assert kernel.plan.postlink.conformance == () and not kernel.plan.postlink.findings
    # halves read in pieces of 8 rows would need 32 boxes a stage: the mainloop's contract refuses it
    with pytest.raises(FactConflict) as err:
        pipelink.link(shapes.write_spec(tmp_path / "eight", moe_packages, "qwen3_30b_a3b", 4096,
                                        facts={"b_halves": 1, "gate_group": 8}))
    assert err.value.component == "moe_mainloop" and err.value.field == "facts.limit[0]", str(err.value)
    assert "b_halves * (tile_n / 2 - gate_group) = 120, above its greatest allowed value 0" in err.value.message


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("tokens", [4096, 300])
def test_w1_gathered_from_halves_matches_the_reference(moe_packages, tmp_path, tokens):
    """A gate piece read from the wrong half (or rows), or SwiGLU paired across the wrong columns, shows against the
    fp32 reference, which splits each expert's W1 into halves (reference.verify_reference reads b_halves)."""
    from rich.console import Console
    spec = shapes.write_spec(tmp_path, moe_packages, "qwen3_30b_a3b", tokens, facts=shapes.HALVES)
    result = pipelink.verify(spec, out_dir=tmp_path / "run", bench=False, seeds=2, timeout=120,
                             console=Console(file=open("/dev/null", "w")))
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]
    c = result.rung("correctness").figures
    assert c["combine.y.unwritten"] == 0 and c["combine.y.rel_l2"] < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("model,band", [(m, 0) for m in sorted(shapes.MODELS)] + [("mixtral", 8), ("qwen3_30b_a3b", 3)])
def test_the_layer_matches_the_reference(moe_packages, tmp_path, model, band):
    """band > 0: the permute lists the tiles in bands of m-tiles (a partial last band at 3)."""
    from rich.console import Console
    spec = shapes.write_spec(tmp_path, moe_packages, model, 4096, facts={"band": band})
    result = pipelink.verify(spec, out_dir=tmp_path / "run", bench=False, seeds=2, timeout=120,
                             console=Console(file=open("/dev/null", "w")))
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]
    c = result.rung("correctness").figures
    assert c["combine.y.unwritten"] == 0 and c["combine.y.rel_l2"] < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_experts_without_tokens(moe_packages, tmp_path):
    """Skewed routing (a quarter of the experts win no token) and real-looking hidden states."""
    import torch
    from pipelink.runtime import Runtime
    spec = shapes.write_spec(tmp_path, moe_packages, "qwen3_30b_a3b", 1024)
    kernel = pipelink.link(spec)
    runtime = Runtime(kernel.cubin, kernel.manifest)
    ref = importlib.util.spec_from_file_location("moe_reference", ROOT / "examples" / "moe" / "reference.py")
    reference = importlib.util.module_from_spec(ref)
    ref.loader.exec_module(reference)
    x, wr, w1, w2 = shapes.inputs("qwen3_30b_a3b", 1024, skew=shapes.SKEW, device="cuda")
    ids, _ = reference.route(x.float() @ wr.float().t(), 8)
    assert ids.max().item() < 96  # the cold quarter got nothing
    y = torch.full_like(x, float("nan"))
    for _ in range(2):  # the second launch starts from cleared counters too
        runtime.launch_arrays([x, wr, w1.reshape(-1, 2048), w2.reshape(-1, 768), y])
        torch.cuda.synchronize()
        want = reference.moe_reference(x, wr, w1, w2, 8)
        assert not y.isnan().any()
        assert ((y.float() - want).norm() / want.norm()).item() < 1e-2
