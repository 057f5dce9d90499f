"""`pipelink inspect X.cubin` with the link's X.plan.json beside it (issue 52 item 5): the SASS grouped by the
component instance each instruction was inlined from (the line table's inlined-at chain ending at a glue call line,
and the plan's glue_sites), every instruction once; a plan of another link is not used (it says so); --raw and a
cubin alone give cuobjdump's disassembly."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

from pipelink.backend.inspect import dump_sass_file, inspect_cubin


def run(*args):
    return subprocess.run([sys.executable, "-m", "pipelink.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200"})


def test_the_cubins_sass_is_grouped_by_instance(demo_dir):
    out = demo_dir / "out"
    assert run("link", demo_dir / "link.toml", "-o", out, "-q").returncode == 0
    cubin = out / "tile_fold.cubin"
    doc = json.loads(run("inspect", cubin, "--json").stdout)["result"]
    grouped = doc["by_instance"]
    names = {g["instance"]: g["component"] for g in grouped["instances"]}
    assert names == {"glue": "glue", "load": "ring_producer", "reduce": "ring_reduce", "store": "tile_store"}
    info, _ = inspect_cubin(cubin.read_bytes(), "pl_tile_fold")
    indices = sorted(r["index"] for g in grouped["instances"] for r in g["instructions"])
    assert indices == list(range(len(info.instructions))) == list(range(grouped["instructions"]))
    by_index = {r["index"]: r["sass"] for g in grouped["instances"] for r in g["instructions"]}
    assert [by_index[i] for i in indices] == info.instructions
    # the epilogue's pinned named barriers (BAR.SYNC 0x1 ..) are its own code, not the glue's
    store = next(g for g in grouped["instances"] if g["instance"] == "store")
    assert any(re.match(r"BAR\.SYNC(\.DEFER_BLOCKING)? 0x1\b", r["sass"]) for r in store["instructions"])
    text = run("inspect", cubin).stdout
    assert "---- store (tile_store):" in text and f"{grouped['instructions']} SASS instructions by instance" in text


def test_a_plan_of_another_link_is_not_used_and_raw_is_cuobjdumps(demo_dir, tmp_path):
    out = demo_dir / "out"
    assert run("link", demo_dir / "link.toml", "-o", out, "-q").returncode == 0
    assert run("link", demo_dir / "link.toml", "--fact", "stages=8", "-o", tmp_path / "other", "-q").returncode == 0
    shutil.copyfile(tmp_path / "other" / "tile_fold.plan.json", out / "tile_fold.plan.json")
    proc = run("inspect", out / "tile_fold.cubin")
    assert proc.returncode == 0 and "not grouped by instance: the plan beside it is another link's" in proc.stdout
    sass = dump_sass_file(out / "tile_fold.cubin")
    assert run("inspect", out / "tile_fold.cubin", "--raw").stdout.rstrip("\n") == sass.rstrip("\n")
    (out / "tile_fold.plan.json").unlink()
    assert run("inspect", out / "tile_fold.cubin").stdout.rstrip("\n") == sass.rstrip("\n")
