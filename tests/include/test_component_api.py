"""docs/component_api.md is generated from the comments in pipelink/component.h
(`python docs/generate_component_api.py`): it is up to date, and every pl_ function the header
declares is documented there."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

import pipelink
from conftest import ROOT, inline_link

HEADER = ROOT / "src" / "pipelink" / "include" / "pipelink" / "component.h"
DOC = ROOT / "docs" / "component_api.md"
GENERATOR = ROOT / "docs" / "generate_component_api.py"


def generator():
    spec = importlib.util.spec_from_file_location("generate_component_api", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def test_generated_file_is_up_to_date():
    proc = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_pl_function_is_documented():
    # Read the header with a pattern of its own, not the generator's parser.
    declared = set(re.findall(r'^(?:PL_DEVICE|extern "C" __device__)\s[^(]*?\b(pl_\w+)\s*\(', HEADER.read_text(),
                              flags=re.M))
    assert {"pl_mbar_wait", "pl_bulk_g2s", "pl_bar_sync", "pl_setmaxnreg_inc", "pl_sanitize_stuck"} <= declared
    doc = DOC.read_text()
    for name in declared:
        section = re.search(rf"^### `{name}`\n\n```c\+\+\n.*?\b{name}\(.*?\n```\n\n(.+?)(?=\n### |\n## |\Z)", doc,
                            flags=re.M | re.S)
        assert section and len(section.group(1).split()) >= 5, f"{name} has no documentation in {DOC.name}"


def test_an_undocumented_declaration_is_refused():
    text = HEADER.read_text()
    comment = "// This thread's lane in its warp (0..31).\n"
    assert comment in text
    gen = generator()
    with pytest.raises(gen.Undocumented, match="'pl_lane' has no comment"):
        gen.parse(text.replace(comment, ""))


BARRIER_CONTRACT = """
[component]
name = "wgbar"
version = "1.0.0"

[facts.requires]
M = { range = [256, 1073741824], default = 256 }

[roles.work]
warps = 8

[[entry]]
symbol = "wgbar_tile"
role = "work"
phase = "work"

[[smem]]
name = "scratch"
bytes = 1024
align = 16

[[named_barrier]]
name = "wg0"
threads = 128

[[named_barrier]]
name = "wg1"
threads = 128

[[operand]]
name = "y"
dtype = "fp32"
shape = ["M"]
access = "write"

[schedule]
order = "any"
"""

BARRIER_SPEC = """
[link]
name = "wgbar"

[facts]
M = 256

[[instance]]
name = "w"
package = "wgbar.plc"

[schedule]
tiles = [1]
order = "row_major"
"""


def _barrier_component(tmp_path, sync: str):
    """A two-warpgroup component whose warpgroups each sync on their own named barrier with ``sync``."""
    source = ('extern "C" __device__ void wgbar_tile(pl_ctx ctx, pl_bind_wgbar b) {\n'
              "  float* s = reinterpret_cast<float*>(ctx.smem + b.scratch);\n"
              "  const int wg = ctx.thread / 128;\n"
              "  s[ctx.thread] = ctx.tile;\n"
              f"  {sync}\n"
              "  b.y[ctx.thread] = s[ctx.thread ^ 1];\n"
              "}\n")
    return inline_link(tmp_path, "wgbar", BARRIER_CONTRACT, source, BARRIER_SPEC)


@pytest.mark.slow
def test_the_run_time_barrier_choice_the_header_shows_links(tmp_path):
    # The named-barrier example's advice, taken from the header itself: a branch per barrier keeps each
    # ID an immediate (the link passes), the conditional expression leaves it in a register (its post-link
    # check fails).
    text = HEADER.read_text()
    branch = "if (wg == 0) pl_bar_sync(b.wg0, 128); else pl_bar_sync(b.wg1, 128);"
    select = "pl_bar_sync(wg ? b.wg1 : b.wg0, 128)"
    assert f"//     {branch}" in text and f"`{select}`" in text
    kernel = pipelink.link(_barrier_component(tmp_path / "branch", branch))
    barriers = {k: v for k, v in kernel.plan.postlink.folded.items() if k.startswith("barrier ")}
    assert len(barriers) == 2 and all(barriers.values()), barriers
    kernel = pipelink.link(_barrier_component(tmp_path / "select", select + ";"))
    failed = [c for c in kernel.plan.all_checks() if not c.ok]  # `pipelink link` raises PostLinkError on these
    assert [c.name for c in failed] == ["post-link"] and "does not appear as an immediate" in failed[0].detail
    # The fix the link suggests is the branch the header shows, not the bindings it already uses.
    said = " ".join([*kernel.plan.all_warnings(), *failed[0].detail.split("; ")])
    assert "branch" in said and "one call per barrier" in said, said
