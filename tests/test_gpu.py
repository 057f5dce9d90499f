"""GPU tests (marker `gpu`): run the linked kernels on an sm_90 device, each in a child process
with a watchdog, against numpy references. Skipped where no such GPU is present."""

import shutil

import pytest

import pipelink
from pipelink.gpucheck import run_checks

from conftest import COLLIDE, gpu_ok

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")]


def test_demo_linked_and_monolithic_match_the_reference(demo_dir):
    for mode in ("pipelink", "monolithic"):
        pipelink.link(demo_dir / "link.toml", mode=mode).save(demo_dir / mode)
    results = run_checks("tile_fold", demo_dir, ["pipelink", "monolithic"])
    for mode, r in results.items():
        assert r["status"] == "ok", (mode, r)
        assert r["unwritten"] == 0 and r["rel_l2_error"] < 1e-2


def test_collision_symbol_link_is_wrong_pipelink_is_right(tmp_path):
    (tmp_path / "packages").mkdir()
    for op in ("sum", "max"):
        pipelink.pack(COLLIDE / f"block_{op}.cu", COLLIDE / f"block_{op}.toml", tmp_path / "packages" / f"block_{op}.plc")
    shutil.copyfile(COLLIDE / "link.toml", tmp_path / "link.toml")
    for mode in ("pipelink", "symbol"):
        pipelink.link(tmp_path / "link.toml", mode=mode).save(tmp_path / mode)
    results = run_checks("collide", tmp_path, ["pipelink", "symbol"], timeout=30)
    assert results["pipelink"]["status"] == "ok", results
    # Shared barrier 1 and overlapping scratch: wrong sums/maxima (or a hang), never silently right.
    assert results["symbol"]["status"] in ("FAILED", "hang"), results


def test_smem_to_smem_layout_conversion_runs(tmp_path):
    from conftest import ROOT
    comps = ROOT / "tests" / "components"
    for name in ("tile_load", "tile_emit"):
        pipelink.pack(comps / f"{name}.cu", comps / f"{name}.toml", tmp_path / "packages" / f"{name}.plc")
    shutil.copyfile(comps / "link.toml", tmp_path / "link.toml")
    pipelink.link(tmp_path / "link.toml").save(tmp_path / "pipelink")
    results = run_checks("relayout", tmp_path, ["pipelink"])
    assert results["pipelink"]["status"] == "ok", results
