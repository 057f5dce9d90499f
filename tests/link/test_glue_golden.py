"""The glue's text is pinned: what glue_ir.render prints for a set of links that reach every statement
kind (tile grids in both orders with bands and a whole-block phase, clusters, the three split schedules,
hand-overs in one role, the demo in each mode, traced and sanitized) has the SHA-256 recorded in
tests/golden/glue.json. The audit reads the statements, not the text; this is what holds the printer to
the text the toolchain has compiled and the GPU runs have checked. A change to the generated code is a
deliberate act: rerun with PIPELINK_UPDATE_GOLDEN=1 and say why in the commit."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from conftest import ROOT
from glue_cases import grid_plan, handover_plan, ksum_packages, ksum_plan, store_plan
from pipelink.link import glue
from pipelink.link.pipeline import plan_link

GOLDEN = ROOT / "tests" / "golden" / "glue.json"


def _cases(tmp: Path, demo_dir: Path) -> dict:
    """name -> a function making the plan (each in its own folder)."""
    def at(name: str) -> Path:
        folder = tmp / name
        folder.mkdir(parents=True)
        return folder

    def demo(mode: str, **options):
        def make():
            plan = plan_link(demo_dir / "link.toml", mode=mode, **options)
            plan.glue = glue.generate(glue.GlueInputs.of(plan))
            return plan
        return make

    ksum = ksum_packages(at("ksum"))
    return {
        "grid-column-major-end-phase": lambda: grid_plan(at("g1")),
        "grid-row-major-bands": lambda: grid_plan(at("g2"), order="row_major", group=2, end_phase=False),
        "grid-column-major-bands": lambda: grid_plan(at("g3"), order="column_major", group=3),
        "split-tiles": lambda: ksum_plan(ksum, "tiles", 128 * 20, 7, 8),
        "split-stream-k": lambda: ksum_plan(ksum, "stream_k", 128 * 20, 7, 8),
        "split-hybrid": lambda: ksum_plan(ksum, "hybrid", 128 * 20, 5, 6),
        "hand-over-alias": lambda: handover_plan(at("h1"), transpose=False),
        "hand-over-copy-reuse": lambda: handover_plan(at("h2"), transpose=True, scratch=True),
        "registers-to-smem": lambda: store_plan(at("s1")),
        "demo-pipelink": demo("pipelink"),
        "demo-monolithic": demo("monolithic"),
        "demo-symbol": demo("symbol"),
        "demo-traced": demo("pipelink", trace=True),
        "demo-sanitized": demo("pipelink", sanitize=True),
    }


def test_the_glue_text_is_the_text_recorded(tmp_path, demo_dir):
    got = {name: hashlib.sha256(make().glue.text.encode()).hexdigest()
           for name, make in _cases(tmp_path, demo_dir).items()}
    if os.environ.get("PIPELINK_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
        pytest.skip(f"recorded {len(got)} glue hashes in {GOLDEN.relative_to(ROOT)}")
    want = json.loads(GOLDEN.read_text())
    changed = sorted(n for n in got if got[n] != want.get(n))
    assert not changed and set(got) == set(want), (
        f"the glue text changed for {changed} (missing from the record: {sorted(set(got) - set(want))}); if that "
        "is meant, rerun with PIPELINK_UPDATE_GOLDEN=1")
