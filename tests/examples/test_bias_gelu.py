"""Issue 20: the guide's example epilogue (examples/bias_gelu: GELU(X W^T + bias) on the bundled
CuTe mainloop) links conformance-clean with the SASS of its monolithic control, and on the GPU
(marker `gpu`) verifies against the fp32 reference."""

from __future__ import annotations

import importlib.util
import re
import shutil

import pytest

import pipelink
from pipelink.backend.inspect import inspect_cubin, normalized_sass

from pipelink.errors import PortMismatch

from conftest import ROOT, edit, gpu_ok

# examples/bias_gelu/shapes.py: the example's packer and spec writer (bench/epilogue_gelu.py uses it too).
_spec = importlib.util.spec_from_file_location("bias_gelu_shapes", ROOT / "examples" / "bias_gelu" / "shapes.py")
shapes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shapes)


@pytest.fixture(scope="module")
def gelu_packages(tmp_path_factory):
    return shapes.pack(tmp_path_factory.mktemp("gelu"))


def test_the_example_links_clean_and_matches_its_monolithic_control(gelu_packages, tmp_path):
    spec = shapes.write_spec(tmp_path / "spec", gelu_packages, shapes.SHAPES["m1024_k8192_n28672"])
    for name, configs in shapes.CANDIDATES.items():  # the bench's table links before GPU time is spent on it
        for config in configs:
            plan = pipelink.link(shapes.write_spec(tmp_path / name / "_".join(map(str, config)), gelu_packages,
                                                   shapes.SHAPES[name], config)).plan
            assert plan.facts["tile_n"] == config[0] and plan.facts["store_split"] == config[4]
            assert plan.smem_bytes <= plan.device["smem_optin_bytes"]
    kernel = pipelink.link(spec)
    plan = kernel.plan
    assert plan.postlink.conformance == () and not plan.postlink.findings
    # The spec leaves tile_n (both components default to 256) and store_split (the epilogue's alone) open, and the
    # mainloop's tile_m, whose package holds 128-row variants only (so its domain decides), its share_a (which
    # operand a cluster shares: none here, the default), and its B layout (b_halves, gate_group: read as stored, the
    # only variant packed).
    assert {(c.name, c.value, c.how) for c in plan.resolved.choices} == {("tile_n", 256, "default"),
                                                                         ("store_split", 2, "default"),
                                                                         ("tile_m", 128, "domain"),
                                                                         ("share_a", 0, "default"),
                                                                         ("b_halves", 0, "domain"),
                                                                         ("gate_group", 8, "domain")}
    assert [p["name"] for p in kernel.manifest["params"]] == ["mainloop.a", "mainloop.b", "epilogue.bias", "epilogue.y"]
    assert kernel.manifest["params"][2]["align"] == 4  # the contract's operand alignment, checked at launch
    assert plan.backend.resources.local == 0
    mono = pipelink.link(spec, mode="monolithic")
    sass = [normalized_sass(inspect_cubin(k.cubin, k.plan.entry)[0].instructions) for k in (kernel, mono)]
    assert sass[0] == sass[1]
    # GELU's tanh is one MUFU op per value, in the epilogue's code.
    assert any(re.search(r"MUFU\.TANH", i) for i in sass[0])


def test_an_epilogue_for_128_row_tiles_is_refused_with_64_row_ones(gelu_packages, tmp_path):
    """The guide's epilogue was written for the mainloop's 128-row tiles and keeps their fragment expressions. With
    `tile_m = 64` the mainloop's tile is 64 rows and its warpgroups hold column halves: the link refuses at the port,
    naming both shapes, instead of storing a mixed-up tile."""
    packages = tmp_path / "packages"
    shutil.copytree(gelu_packages, packages)
    pipelink.pack(shapes.MAINLOOP.with_suffix(".cu"), shapes.MAINLOOP.with_suffix(".toml"), packages / "gemm_mainloop.plc",
                  variants=[{"tile_m": 64, "tile_n": 256}])
    spec = shapes.write_spec(tmp_path / "spec", packages, shapes.SHAPES["m1024_k8192_n28672"], (256, 4, 0, 1, 2))
    edit(spec, "tile_n = 256", "tile_m = 64\ntile_n = 256")
    with pytest.raises(PortMismatch) as info:
        pipelink.link(spec)
    assert "shape [64, 256] (gemm_mainloop) differs from [128, 256] (bias_gelu_store)" in info.value.message


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_the_example_matches_the_reference(gelu_packages, tmp_path):
    from rich.console import Console
    spec = shapes.write_spec(tmp_path / "spec", gelu_packages, (512, 1024, 2048), (None, 4, 2, 1, None))
    result = pipelink.verify(spec, out_dir=tmp_path / "run", bench=False, seeds=2, timeout=60,
                             console=Console(file=open("/dev/null", "w")))
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]
    c = result.rung("correctness").figures
    assert c["epilogue.y.unwritten"] == 0 and c["epilogue.y.rel_l2"] < 5e-3
